"""Outputs other tools can read (issue 12, item 4): strict JSON everywhere (no NaN / Infinity
token) and output files created with the user's umask, not the temp file's private 0600."""

from __future__ import annotations

import json
import math
import os
import stat

import numpy as np
import pytest

from fedselect.common.files import atomic_write, current_umask, dumps_json, json_safe, write_json_atomic
from fedselect.experiment.resolve import resolve_doc
from fedselect.experiment.run import run_experiment
from fedselect.study.compare import parse_compare, run_comparison
from fedselect.study.sweep import parse_sweep
from fedselect.study.sweep_run import run_sweep
from support.tiny import with_keys


def _refuse(token: str):
    raise ValueError(f"non-finite JSON constant {token!r}")


def strict_load(path):
    return json.loads(path.read_text(), parse_constant=_refuse)


BASE = {
    "name": "out",
    "seed": 0,
    "rounds": 2,
    "clients_per_round": 2,
    "data": {"dataset": "mnist-embedded", "num_clients": 4, "partition": {"scheme": "iid"}},
    "model": {"name": "mlp", "options": {"hidden": [8]}},
    "train": {"local_epochs": 1, "batch_size": 64, "lr": 0.05},
}
FLASH = {"rl_batch_size": 1, "pca_components": 5, "hidden": 16, "warmup_epochs": 1}


def doc(**kv) -> dict:
    """BASE with dotted keys (``a__b=1`` sets a.b) replaced."""
    return with_keys(BASE, **kv)


def base_of(d: dict) -> dict:
    """``d`` as the base of a comparison or sweep (whose runs take their name and seed from it)."""
    return {k: v for k, v in d.items() if k not in ("name", "seed")}


def test_json_safe_replaces_every_non_finite_float():
    obj = {
        "a": math.nan,
        "b": [np.float32("inf"), 1.5, (np.float64("-inf"), 2)],
        "c": {"d": np.float16("nan")},
        "e": np.array([1.0, np.nan]),
        "f": np.int64(3),
        "g": np.bool_(True),
        "h": None,
        "i": "nan",
    }
    assert json_safe(obj) == {
        "a": None,
        "b": [None, 1.5, [None, 2]],
        "c": {"d": None},
        "e": [1.0, None],
        "f": 3,
        "g": True,
        "h": None,
        "i": "nan",
    }
    text = dumps_json(obj, sort_keys=True)
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text, parse_constant=_refuse)["b"] == [None, 1.5, [None, 2]]


def test_write_json_atomic_is_strict(tmp_path):
    write_json_atomic(tmp_path / "x.json", {"pca_explained_variance": float("nan"), "ok": 0.5})
    assert strict_load(tmp_path / "x.json") == {"ok": 0.5, "pca_explained_variance": None}


@pytest.mark.slow
def test_every_json_output_is_strict(tmp_path):
    """Small real runs of every kind of output (a run of FedAvg, FLASH-RL with 1 and 2
    clients, CEFL; a comparison; a sweep) parse with non-finite constants refused."""
    runs = {
        "fedavg": doc(),
        "flashrl1": doc(method="flashrl", data__num_clients=1, clients_per_round=1, method_options=FLASH),
        "flashrl2": doc(method="flashrl", data__num_clients=2, clients_per_round=1, method_options=FLASH),
        "cefl": doc(method="cefl", rounds=1, method_options={"clusters": 2, "transfer_epochs": 1, "base_layers": 1}),
    }
    for name, d in runs.items():
        run_experiment(resolve_doc(d), tmp_path / name)
    # FLASH-RL with one client: PCA of one row explains everything (1.0), not NaN
    s1 = strict_load(tmp_path / "flashrl1" / "summary.json")
    assert s1["prepare"]["pca_explained_variance"] == 1.0
    s2 = strict_load(tmp_path / "flashrl2" / "summary.json")
    assert s2["prepare"]["pca_explained_variance"] == pytest.approx(1.0)  # 2 rows: the first component explains all
    run_comparison(
        parse_compare(
            {
                "name": "c",
                "seeds": [0],
                "base": base_of(doc(rounds=1)),
                "baseline": "FedAvg",
                "methods": [
                    {"label": "FedAvg", "method": "fedavg"},
                    {"label": "FLASH-RL", "method": "flashrl", "method_options": FLASH},
                ],
            }
        ),
        tmp_path / "cmp",
    )
    run_sweep(
        parse_sweep(
            {
                "name": "s",
                "base": base_of(doc(rounds=1)),
                "seeds": [0],
                "methods": [{"label": "avg", "method": "fedavg"}],
                "grid": {"train.lr": [0.05, 0.1]},
            }
        ),
        tmp_path / "sweep",
    )
    found = sorted(tmp_path.rglob("*.json"))
    names = {p.name for p in found}
    assert {"summary.json", "compare.json", "federation-s0.json", "sweep.json"} <= names
    assert len([p for p in found if p.name == "summary.json"]) == 4 + 2 + 2
    for p in found:
        strict_load(p)  # raises on NaN / Infinity


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_honours_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        atomic_write(tmp_path / "a.txt", lambda fh: fh.write("x"))
        assert mode(tmp_path / "a.txt") == 0o640
        os.umask(0o077)
        atomic_write(tmp_path / "b.txt", lambda fh: fh.write("x"))
        assert mode(tmp_path / "b.txt") == 0o600
    finally:
        os.umask(old)


def test_outputs_of_a_run_and_a_comparison_are_0644_under_umask_022(tmp_path, umask022):
    run_experiment(resolve_doc(doc(rounds=1)), tmp_path / "run")
    for name in ("metrics.csv", "timing.csv", "summary.json", "model.pt", "checkpoint.pt", "config.yaml"):
        assert mode(tmp_path / "run" / name) == 0o644, name
    run_comparison(
        parse_compare(
            {
                "name": "c",
                "seeds": [0],
                "base": base_of(doc(rounds=1)),
                "baseline": "FedAvg",
                "methods": [{"label": "FedAvg", "method": "fedavg"}, {"label": "Full", "method": "full"}],
            }
        ),
        tmp_path / "cmp",
    )
    files = ["table.md", "table.csv", "compare.json", "federation-s0.json"]
    pngs = sorted((tmp_path / "cmp" / "plots").glob("*.png"))
    assert pngs
    for p in [tmp_path / "cmp" / f for f in files] + pngs:
        assert mode(p) == 0o644, p


# ---------------------------------------------------------------------------------- what a person reads
def _lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


def test_tables_fit_a_terminal_and_stay_whole_in_a_file(monkeypatch):
    """`fedselect list`'s fleet table: in a 60-column terminal no line is wider than 60;
    written to a file (not a terminal, rich's 80 columns by default) no cell is wrapped or cut,
    so every key's description appears whole on its row."""
    import io

    from rich.cells import cell_len
    from rich.console import Console

    from fedselect.cli import console as ui
    from fedselect.config.fleet import AvailabilityConfig

    term = Console(file=io.StringIO(), width=60, force_terminal=True, color_system=None)
    monkeypatch.setattr(ui, "console", term)
    ui.show(ui.fleet_table())
    lines = _lines(term.file.getvalue())
    assert len(lines) > 20 and max(cell_len(x) for x in lines) <= 60
    pipe = Console(file=io.StringIO(), force_terminal=False)
    assert pipe.width == 80 and not pipe.is_terminal
    monkeypatch.setattr(ui, "console", pipe)
    ui.show(ui.fleet_table())
    lines = _lines(pipe.file.getvalue())
    assert max(len(x) for x in lines) > 80 and len({len(x) for x in lines[1:]}) == 1  # one width: nothing wrapped
    for name, f in AvailabilityConfig.model_fields.items():
        assert any(f"availability.{name}" in x and f.description in x for x in lines), name
    assert "\x1b[" not in pipe.file.getvalue()


@pytest.mark.slow
def test_piped_output_has_no_colour_codes_and_no_broken_lines(tmp_path):
    """`fedselect run ... | cat`: no ANSI escape codes, the heading on one line, the summary
    table whole, the bar's last status the summary's figures."""
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS")}
    env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, "-m", "fedselect.cli", "run", "-r", "2", "-w", "0", "-o", str(tmp_path / "r")]
    cmd += ["--set", "data.num_clients=4", "--set", "clients_per_round=2", "--set", "model.name=mlp"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "\x1b[" not in text
    lines = _lines(out.stdout)
    assert lines[0].endswith("N=4, U=2, T=2, seed 0")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert f"2/2 done  acc {summary['final_accuracy']:.4f}  e2e {summary['e2e_latency_s']:.1f} s" in lines[1]
    table = [x for x in lines if x[:1] in "┏┃┡│└"]
    assert len(table) == 3 + 9 + 1 and len({len(x) for x in table}) == 1


def test_cefl_bars_show_the_summary_figures(tmp_path):
    """CEFL's rounds score members with their leader's model: its bar shows no accuracy until
    the end, then the summary's (after the transfer); FedAvg's shows the round's accuracy."""
    from fedselect.cli import console as ui

    events = {}
    cefl = doc(method="cefl", rounds=1, method_options={"clusters": 2, "transfer_epochs": 1, "base_layers": 1})
    for name, d in (("cefl", cefl), ("fedavg", doc(rounds=1))):
        run_experiment(resolve_doc(d), tmp_path / name, on_round=lambda ev, n=name: events.setdefault(n, ev))
    ev = events["cefl"]
    assert ev.round_scores and "leader" in ev.round_scores
    assert ui._round_status(ev) == f"round 1  e2e {ev.row['e2e_latency_s']:.1f} s  (acc at the end)"
    summary = strict_load(tmp_path / "cefl" / "summary.json")
    assert ui.done_status(summary) == f"done  acc {summary['final_accuracy']:.4f}  e2e {summary['e2e_latency_s']:.1f} s"
    assert summary["e2e_latency_s"] > ev.row["e2e_latency_s"]  # the transfer comes after the round
    fed = events["fedavg"]
    assert fed.round_scores is None
    assert ui._round_status(fed) == f"round 1  acc {fed.row['accuracy']:.4f}  e2e {fed.row['e2e_latency_s']:.1f} s"


@pytest.mark.slow
def test_a_sweep_tables_the_figures_of_its_methods_and_draws_the_comparison_plots(tmp_path, monkeypatch):
    """A sweep without `columns` of FedAvg and Oort: latency, communication and the other
    figures those runs have, none of budgeted online's (they would be all '-'); per grid point
    the plots a comparison draws; report.html shows them. Given `columns` are kept."""
    import io

    from rich.console import Console

    from fedselect.cli import console as ui
    from fedselect.study.sweep_table import build_sweep_table

    spec = {
        "name": "s",
        "base": base_of(doc(rounds=1)),
        "seeds": [0],
        "methods": [{"label": "FedAvg", "method": "fedavg"}, {"label": "Oort", "method": "oort"}],
        "grid": {"clients_per_round": [2, 3]},
    }
    rep = run_sweep(parse_sweep(spec), tmp_path / "sw")
    heads = rep["heads"]
    assert heads[:3] == ["clients_per_round", "method", "seeds"]
    assert {"final_accuracy", "e2e_latency_s", "communication_mb", "wall_s"} <= set(heads)
    assert "candidates_evaluated" not in heads and "competitive_ratio" not in heads
    assert "rounds_to_target" not in heads  # no metrics.target: no run has it
    for j, h in enumerate(heads):  # no column that no run has
        assert any(row[j] != "-" for row in rep["cells"]), h
    md = (tmp_path / "sw" / "table.md").read_text()
    assert "| clients_per_round | method | seeds | final_accuracy |" in md and "e2e_latency_s" in md
    for point in ("clients_per_round=2", "clients_per_round=3"):
        for name in ("metric_vs_round.png", "latency_vs_round.png", "metric_vs_latency.png", "label_distribution.png"):
            assert (tmp_path / "sw" / "plots" / point / name).is_file(), (point, name)
    assert len(rep["plots"]) >= 8
    html = (tmp_path / "sw" / "report.html").read_text()
    assert "Plots per grid point" in html and html.count("data:image/png;base64") >= 8
    pipe = Console(file=io.StringIO(), force_terminal=False)
    monkeypatch.setattr(ui, "console", pipe)
    ui.print_sweep(rep)
    printed = pipe.file.getvalue()
    assert "e2e_latency_s" in printed
    for row in rep["cells"]:
        assert any(all(c in x for c in row) for x in printed.splitlines()), row  # each row whole on one line
    spec["columns"] = ["final_accuracy", "candidates_evaluated"]
    assert build_sweep_table(tmp_path / "sw", parse_sweep(spec))["heads"][3:] == ["final_accuracy", "candidates_evaluated"]


def test_flower_log_lines_are_plain_and_shown_once():
    """While fedselect drives Flower, a Flower warning reaches the console once, through the
    logging root, without colour codes; Flower's notices about fedselect's own use of it
    (deprecations, an actor's routine end) are dropped. In any process running fedselect's
    apps, Flower's handler colours its lines only on a terminal."""
    pytest.importorskip("flwr")
    import io
    import logging

    from flwr.common.logger import log, warn_deprecated_feature
    from flwr.supercore.logger import ConsoleHandler

    import fedselect.flower.client_app  # noqa: F401  (the ClientApp's module quiets Flower's console)
    from fedselect.flower.logs import flower_console, quiet_flower_logs

    buf = io.StringIO()
    root = logging.getLogger()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.WARNING)
    root.addHandler(handler)
    # Flower's console handler writes to the stream it was created with (under pytest, whatever
    # sys.stderr was when flwr was first imported, perhaps in another test): give it one to read
    consoles = [h for h in logging.getLogger("flwr").handlers if isinstance(h, ConsoleHandler)]
    assert consoles
    flower_out = io.StringIO()
    streams = [h.setStream(flower_out) for h in consoles]
    try:
        with flower_console():
            warn_deprecated_feature("The `run_simulation` function")
            log(logging.WARNING, "Manually terminating ClientAppActor")
            log(logging.WARNING, "node 3 is slow")
        inside = flower_out.getvalue()
        log(logging.WARNING, "after")
        after = flower_out.getvalue()[len(inside) :]
    finally:
        root.removeHandler(handler)
        for h, stream in zip(consoles, streams):
            h.setStream(stream)
    shown = buf.getvalue()
    assert shown.count("node 3 is slow") == 1 and "WARNING flwr: node 3 is slow" in shown
    assert "DEPRECATED" not in shown and "terminating" not in shown and "\x1b[" not in shown
    assert "node 3 is slow" not in inside  # Flower's own handler was off
    assert "after" in after and "\x1b[" not in after  # back, plain: its stream is not a terminal

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    flwr_log = logging.getLogger("flwr")
    term, pipe = ConsoleHandler(stream=Terminal()), ConsoleHandler(stream=io.StringIO())
    for h in (term, pipe):
        flwr_log.addHandler(h)
    try:
        quiet_flower_logs()
        log(logging.WARNING, "coloured?")
    finally:
        for h in (term, pipe):
            flwr_log.removeHandler(h)
    assert term.colored and "\x1b[93mWARNING" in term.stream.getvalue()
    assert not pipe.colored and pipe.stream.getvalue().startswith("WARNING") and "\x1b[" not in pipe.stream.getvalue()
