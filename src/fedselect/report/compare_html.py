"""A comparison's ``report.html`` (:func:`write_compare_html`), from the dict of
:func:`fedselect.report.build.build_report`. The page has, in order: the table (mean ± std over
seeds, the last-k mean, the "vs baseline" lines), the paired differences with their 95%
intervals, the paper's figures beside ours (when the config has ``paper:``), every plot of
``plots/``, the resolved config of each method (values that differ from the baseline
highlighted), the federation of each seed (partition sizes, label distribution, device/network
mix) and the wall times. Made of the parts of :mod:`fedselect.report.html`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fedselect.common.files import atomic_write
from fedselect.report.html import config_html, esc, page, plots_html, read_configs, table_html


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def federation_html(feds: list[dict[str, Any]]) -> str:
    """Per seed: the data set and partition, partition sizes, labels per client and the
    device/network mix; per client (collapsed): samples, profiles, expected latency, labels."""
    if not feds:
        return '<p class="note">No federation-s&lt;seed&gt;.json in this directory (a single run, or written by an older version).</p>'
    out = []
    part = feds[0].get("partition", {})
    out.append(
        f"<p>Data set <code>{esc(feds[0].get('dataset'))}</code>, {esc(feds[0].get('num_clients'))} clients, "
        f"{esc(feds[0].get('num_classes'))} classes; partition <code>{esc(part.get('scheme'))}</code> "
        + esc(", ".join(f"{k} = {v}" for k, v in part.items() if k != "scheme"))
        + ". Every method of a seed ran on that seed's federation.</p>"
    )
    out += _partition_sizes_html(feds)
    out += _profile_mix_html(feds)
    out += _clients_html(feds)
    return "\n".join(out)


def _partition_sizes_html(feds: list[dict[str, Any]]) -> list[str]:
    """The partition sizes per seed: clients, samples, samples and labels per client, expected
    latency per round (min / median / max)."""
    import numpy as np

    rows = []
    for f in feds:
        n = np.asarray(f.get("num_samples", []), dtype=float)
        lc = np.asarray(f.get("label_counts", []), dtype=float)
        labels_per = (lc > 0).sum(axis=1) if lc.size else np.zeros(0)
        lat = np.asarray(f.get("expected_latency_s", []), dtype=float)
        rows.append(
            [
                f.get("seed", "?"),
                len(n),
                int(n.sum()) if n.size else "-",
                f"{int(n.min())} / {np.median(n):.0f} / {int(n.max())}" if n.size else "-",
                f"{labels_per.min()} / {np.median(labels_per):.0f} / {labels_per.max()}" if labels_per.size else "-",
                f"{lat.min():.2f} / {np.median(lat):.2f} / {lat.max():.2f}" if lat.size else "-",
            ]
        )
    return [
        "<h3>Partition sizes</h3>",
        table_html(
            [
                "seed",
                "clients",
                "training samples",
                "samples per client (min / median / max)",
                "labels per client (min / median / max)",
                "expected latency per round, s (min / median / max)",
            ],
            rows,
        ),
        "<p class=\"note\">Expected latency: compute + upload of the whole model at the client's profiles' mean frequency and bandwidth. "
        "The label distribution of the first seed is plotted in <code>label_distribution.png</code>.</p>",
    ]


def _profile_mix_html(feds: list[dict[str, Any]]) -> list[str]:
    """Per profile kind (device, network): the clients of each class per seed, fastest first,
    with the class's median speed."""
    import numpy as np

    from fedselect.report.plots import class_order, class_speed

    out = []
    for kind in ("device", "network"):
        classes = class_order(feds, kind)
        if not classes:
            continue
        split = all(("expected_compute_s" if kind == "device" else "expected_upload_s") in f for f in feds)
        scale, head = (
            ((1e3, "compute per training sample, ms (median)") if kind == "device" else (1.0, "model upload, s (median)"))
            if split
            else (1.0, "expected latency, s (median)")
        )
        rows = []
        for c in classes:
            speeds = [x for f in feds for name, x in zip(f.get(kind, []), class_speed(f, kind)) if name == c]
            rows.append(
                [c]
                + [sum(1 for name in f.get(kind, []) if name == c) for f in feds]
                + [f"{scale * np.median(speeds):.4g}" if speeds else "-"]
            )
        out += [
            f"<h3>{kind.capitalize()} mix (clients per class, fastest first)</h3>",
            table_html([f"{kind} class"] + [f"seed {f.get('seed', '?')}" for f in feds] + [head], rows),
        ]
    return out


def _clients_html(feds: list[dict[str, Any]]) -> list[str]:
    """Per seed, collapsed: every client's samples, profiles, expected latency and label counts."""
    out = []
    for f in feds:
        names = f.get("class_names") or [str(i) for i in range(int(f.get("num_classes", 0)))]
        lc = f.get("label_counts", [])
        rows = []
        for k in range(int(f.get("num_clients", 0))):
            rows.append(
                [
                    k,
                    f["num_samples"][k] if k < len(f.get("num_samples", [])) else "-",
                    f.get("device", ["-"] * (k + 1))[k] if k < len(f.get("device", [])) else "-",
                    f.get("network", [])[k] if k < len(f.get("network", [])) else "-",
                    _fmt(
                        f.get("expected_latency_s", [None] * (k + 1))[k] if k < len(f.get("expected_latency_s", [])) else None, 2
                    ),
                ]
                + (list(lc[k]) if k < len(lc) else [])
            )
        heads = ["client", "samples", "device", "network", "expected latency (s)"] + [f"label {x}" for x in names]
        out += [
            f"<details><summary>Every client, seed {esc(f.get('seed', '?'))}</summary>",
            table_html(heads, rows),
            "</details>",
        ]
    return out


def wall_html(results: list[Any], labels: list[str]) -> str:
    """Wall-clock seconds per run (machine- and load-dependent) and in total."""
    seeds = sorted({r.seed for r in results})
    rows = []
    total = 0.0
    for lab in labels:
        by = {r.seed: r for r in results if r.label == lab}
        vals = [by[s].summary.get("wall_s") if s in by else None for s in seeds]
        tot = sum(v for v in vals if isinstance(v, (int, float)))
        total += tot
        rounds = [by[s].summary.get("rounds") for s in seeds if s in by]
        incomplete = [f"s{s}" for s in seeds if s in by and not by[s].complete]
        rows.append([lab] + [_fmt(v) for v in vals] + [_fmt(tot), "/".join(str(x) for x in rounds), ", ".join(incomplete) or "-"])
    heads = ["method"] + [f"seed {s} (s)" for s in seeds] + ["total (s)", "rounds run", "incomplete"]
    return (
        table_html(heads, rows) + f'<p class="note">Total {total:.1f} s of wall-clock time over {len(results)} runs. '
        "Wall times depend on the machine, its load and the torch thread count: compare them only within one comparison.</p>"
    )


def results_html(rep: dict[str, Any]) -> str:
    """The table of :func:`fedselect.report.aggregate.aggregate_table` and the 'vs baseline' lines."""
    from fedselect.report.tables import (
        censored_note,
        relative_phrases,
        round_scores_notes,
        rounds_note,
        selection_eval_note,
        table_cell,
    )

    cols = rep["columns"]
    heads = ["method", "seeds"] + [h for _, h, _, _ in cols]
    rows = [[e["label"], e["seeds"]] + [table_cell(e, k, d) for k, _, d, _ in cols] for e in rep["table"]]
    out = [table_html(heads, rows, num_from=1, cls="results")]
    seeds = max((e["seeds"] for e in rep["table"]), default=0)
    lastk = next((h for k, h, _, _ in cols if k.startswith("last_k_")), None)
    note = f"Mean over {seeds} seed(s)" + (" ± sample standard deviation." if seeds > 1 else ".")
    if lastk:
        note += (
            f" <code>{esc(lastk)}</code>: the metric's mean over each run's last {esc(rep.get('window') or 'k')} evaluated rounds "
            "(metrics.summary_window; all of them when a run has fewer), steadier than the final round."
        )
    out.append(f'<p class="note">{note} Latency is simulated seconds; comm in MB (10<sup>6</sup> bytes).</p>')
    if rep.get("caveat"):
        out.append(f'<p class="warn">{esc(rep["caveat"])}</p>')
    for line in [rounds_note(rep["table"]), censored_note(rep["table"]), *round_scores_notes(rep["table"], cols)]:
        if line:
            out.append(f'<p class="note">{esc(line)}</p>')
    if rep.get("missing_note"):
        out.append(f'<p class="warn">{esc(rep["missing_note"])}</p>')
    if selection_eval_note(rep["table"]):
        out.append(f'<p class="warn">{esc(selection_eval_note(rep["table"]))}</p>')
    base = rep.get("baseline")
    if base and len(rep["table"]) > 1:
        items = [
            f"<li><b>{esc(e['label'])}</b>: {esc(', '.join(relative_phrases(e, base, rep.get('window'))) or 'no comparable figures')}</li>"
            for e in rep["table"]
            if e["label"] != base
        ]
        out.append(f'<p>Relative to {esc(base)} (change of the seed means):</p><ul class="rel">{"".join(items)}</ul>')
    incomplete = [x for e in rep["table"] for x in e["incomplete"]]
    if incomplete:
        out.append(f'<p class="warn">Incomplete runs (their existing rounds are used): {esc(", ".join(incomplete))}</p>')
    return "\n".join(out)


def paired_html(rep: dict[str, Any]) -> str:
    """The paired differences with intervals; significant cells highlighted."""
    from fedselect.report.tables import paired_cell, paired_intro

    paired, quantities, base = rep.get("paired") or [], rep.get("quantities") or [], rep.get("baseline")
    if not paired:
        return '<p class="note">No baseline to pair with (a single method or run).</p>'
    nseeds = max((len(p["seeds"]) for p in paired), default=0)
    heads = ["method"] + [f"{h} ({u})" for _, h, u in quantities]
    rows, cls = [], []
    for p in paired:
        rows.append([p["label"]] + [paired_cell(p["cells"][k], nseeds) for k, _, _ in quantities])
        cls.append([""] + ["sig" if p["cells"][k]["interval"].significant else "" for k, _, _ in quantities])
    intro = esc(paired_intro(base, nseeds)).replace("`*`", "<code>*</code>")
    per_seed = []
    for p in paired:
        for k, h, u in quantities:
            d = p["cells"][k]["diffs"]
            if d:
                per_seed.append([p["label"], f"{h} ({u})"] + [", ".join(f"s{s}: {v:+.2f}" for s, v in d.items())])
    return (
        f'<p class="note">{intro} Highlighted: the interval excludes 0.</p>'
        + table_html(heads, rows, classes=cls, cls="paired")
        + "<details><summary>Per-seed differences</summary>"
        + table_html(["method", "quantity", "differences"], per_seed, num_from=3)
        + "</details>"
    )


def paper_html(rep: dict[str, Any]) -> str:
    paper = rep.get("paper") or {}
    ours = {e["label"]: e for e in rep["table"]}
    rows = []
    for lab, figs in paper.items():
        for key, val in figs.items():
            o = ours.get(lab, {}).get(key)
            rows.append([lab, key, "-" if o is None else f"{o:.4g}", val])
    src = rep.get("paper_source")
    return (
        (f'<p class="note">Source: {esc(src)}.</p>' if src else "")
        + table_html(["method", "figure", "ours", "paper"], rows, num_from=2)
        + '<p class="note"><code>&lt;key&gt;_vs</code>: change against the baseline (points for accuracy/F1, percent otherwise); '
        "accuracies as fractions. See docs/comparisons.md, 'Ours vs the paper'.</p>"
    )


def write_compare_html(directory: Path, rep: dict[str, Any]) -> Path:
    """Write ``directory/report.html`` for a comparison or run directory from the dict of
    :func:`fedselect.report.build.build_report`; returns its path."""
    directory = Path(directory)
    results, labels = rep["results"], rep["labels"]
    seeds = sorted({r.seed for r in results})
    sections = [("results", "Results", results_html(rep))]
    if rep.get("baseline") and len(labels) > 1:
        sections.append(("paired", f"Paired differences vs {rep['baseline']}", paired_html(rep)))
    if rep.get("paper"):
        sections.append(("paper", "Ours vs the paper", paper_html(rep)))
    plots, n = plots_html(directory / "plots")
    sections.append(("plots", f"Plots ({n})", plots))
    first = {}
    for r in sorted(results, key=lambda r: r.seed):
        first.setdefault(r.label, r.dir)
    sections.append(
        (
            "config",
            "Configuration of each method",
            config_html(read_configs({lab: first[lab] for lab in labels if lab in first}), rep.get("baseline")),
        )
    )
    sections.append(("federation", "Federation", federation_html(rep.get("federations") or [])))
    sections.append(("wall", "Wall times", wall_html(results, labels)))
    meta = (
        f'<p class="meta">{esc(len(labels))} method(s): {esc(", ".join(labels))}; seeds {esc(seeds)}'
        + (f"; baseline {esc(rep['baseline'])}" if rep.get("baseline") else "")
        + f". Directory <code>{esc(directory.resolve().name)}</code>; rebuilt from the saved metrics by "
        f"<code>fedselect report {esc(directory.resolve().name)}</code> (tables also in table.md, table.csv, paired.csv).</p>"
    )
    doc = page(rep["title"], sections, meta)
    path = directory / "report.html"
    atomic_write(path, lambda fh: fh.write(doc))
    return path
