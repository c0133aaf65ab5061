"""Outputs other tools can read (issue 12, item 4): strict JSON everywhere (no NaN / Infinity
token) and output files created with the user's umask, not the temp file's private 0600."""

from __future__ import annotations

import json
import math
import os
import stat

import numpy as np
import pytest

from conftest import with_keys
from fedselect.compare import parse_compare, run_comparison
from fedselect.experiment import run_experiment
from fedselect.fl.metrics import atomic_write, current_umask, dumps_json, json_safe, write_json_atomic
from fedselect.resolve import parse_experiment as parse_config
from fedselect.sweep import parse_sweep, run_sweep


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
        run_experiment(parse_config(d), tmp_path / name)
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
    run_experiment(parse_config(doc(rounds=1)), tmp_path / "run")
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
