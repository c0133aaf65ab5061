"""Hand-made run and comparison directories for the report tests: metrics.csv rows written by
hand, so that every figure of a table or report can be checked against numbers worked out in
the test."""

import json

from fedselect.experiment.metrics import CORE_COLUMNS


def fake_run(d, rows, rounds, complete=True, columns=CORE_COLUMNS):
    """A hand-made run: metrics.csv rows (round, accuracy, e2e latency, cumulative MB) in
    ``columns`` (default today's); latency_sum_s is 10 x the round (a run of rounds 0..2: 30 s)."""
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"rounds: {rounds}\nmetrics: {{target: 0.8, metric: accuracy}}\n")
    lines = [",".join(columns)]
    for r, acc, lat, mb in rows:
        vals = {
            "round": r,
            "selected": "0;1",
            "accuracy": acc,
            "f1_macro": acc,
            "test_loss": 1,
            "train_loss": 1,
            "round_latency_s": 0,
            "latency_sum_s": 10 * r,
            "e2e_latency_s": lat,
            "upload_bytes": 0,
            "download_bytes": 0,
            "cum_upload_bytes": int(mb * 1e6),
            "cum_download_bytes": 0,
            "failed": "",
            "clock_s": lat,
            "available": 2,
            "waited_s": 0.0,
        }
        lines.append(",".join(str(vals[c]) for c in columns))
    (d / "metrics.csv").write_text("\n".join(lines) + "\n")
    (d / "timing.csv").write_text("round,wall_s,cum_wall_s\n1,1.0,10.0\n")
    if complete:
        (d / "summary.json").write_text("{}")


def fabricated_comparison(tmp_path, interrupted=False):
    c = tmp_path / "cmp"
    runs = []
    # baseline A: final acc 0.80 / 0.90 (mean 0.85), latency 100 / 300 (mean 200), 10 MB
    fake_run(c / "runs/A-s0", [(0, 0.1, 0, 0), (1, 0.5, 50, 5), (2, 0.80, 100, 10)], 2)
    fake_run(c / "runs/A-s1", [(0, 0.1, 0, 0), (1, 0.7, 150, 5), (2, 0.90, 300, 10)], 2)
    # B: final acc 0.86 / 0.88 (mean 0.87), latency 150 / 150 (mean 150 = -25%), 5 MB (-50%)
    fake_run(c / "runs/B-s0", [(0, 0.1, 0, 0), (1, 0.82, 75, 2.5), (2, 0.86, 150, 5)], 2)
    if interrupted:
        fake_run(c / "runs/B-s1", [(0, 0.1, 0, 0), (1, 0.81, 70, 2.5)], 2, complete=False)
    else:
        fake_run(c / "runs/B-s1", [(0, 0.1, 0, 0), (1, 0.7, 75, 2.5), (2, 0.88, 150, 5)], 2)
    for lab in "AB":
        for s in (0, 1):
            runs.append({"label": lab, "method": lab.lower(), "seed": s, "dir": f"runs/{lab}-s{s}"})
    (c / "compare.json").write_text(
        json.dumps({"name": "fab", "baseline": "A", "methods": [{"label": "A"}, {"label": "B"}], "runs": runs})
    )
    return c
