"""``benchmarks/bench_flower.py --full``'s bookkeeping without running an engine: the order of
the runs (every second repeat reversed, so a drift of the machine's speed falls on both sides),
the ratios its summary gives, and the check of ``--engines``. ``measure`` is replaced by a fake
that returns fixed seconds per round and writes each run's ``metrics.csv``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("bench_flower")
    finally:
        sys.path.remove(str(BENCH))


def _fake(order: list[str], seconds: dict[str, list[float]], pss: dict[str, float]):
    def measure(engine: str, settings: dict, out: Path) -> dict:
        order.append(engine)
        out.mkdir(parents=True)
        (out / "metrics.csv").write_text("round,accuracy\n1,0.5\n")
        s = seconds[engine][sum(1 for e in order if e == engine) - 1]
        return {
            "mean_round_s": s,
            "startup_s": 1.0,
            "peak_pss_mb": pss[engine],
            "peak_rss_mb": 2 * pss[engine],
            "sampler_cpu_s": 0.1,
        }

    return measure


def test_repeats_alternate_the_order_and_ratios_are_worked_by_hand(bench, monkeypatch):
    order: list[str] = []
    # simulator 3.0, 4.0, 2.0 s a round; the Flower engine 3.3, 4.0, 2.6 s: own ratios 1.1, 1.0, 1.3
    seconds = {"simulator": [3.0, 4.0, 2.0], "flower-engine": [3.3, 4.0, 2.6]}
    monkeypatch.setattr(bench, "measure", _fake(order, seconds, {"simulator": 1000.0, "flower-engine": 1300.0}))
    res = bench.main_full(3, ["flower_engine"])
    assert order == ["simulator", "flower-engine", "flower-engine", "simulator", "simulator", "flower-engine"]
    row = res["summary"]["flower_engine"]
    assert row["mean_round_s"] == pytest.approx(3.3)  # median of 3.3, 4.0, 2.6
    assert res["summary"]["simulator"]["mean_round_s"] == pytest.approx(3.0)
    assert row["round_ratio"] == pytest.approx(1.1)  # 3.3 / 3.0
    assert row["paired_round_ratio"] == pytest.approx(1.1)  # median of 1.1, 1.0, 1.3
    assert row["pss_ratio"] == pytest.approx(1.3) and row["rss_ratio"] == pytest.approx(1.3)
    assert res["identical_metrics"] is True and set(res["runs"]) == {"simulator", "flower_engine"}


def test_paired_ratio_differs_from_the_ratio_of_medians(bench, monkeypatch):
    # each repeat's own ratios 2.0 / 1.0 = 2.0 and 5.0 / 5.0 = 1.0 (median 1.5); the medians' ratio 3.5 / 3.0
    seconds = {"simulator": [1.0, 5.0], "flower-engine": [2.0, 5.0]}
    monkeypatch.setattr(bench, "measure", _fake([], seconds, {"simulator": 1.0, "flower-engine": 1.0}))
    row = bench.main_full(2, ["simulator", "flower_engine"])["summary"]["flower_engine"]
    assert row["round_ratio"] == pytest.approx(3.5 / 3.0)
    assert row["paired_round_ratio"] == pytest.approx(1.5)


def test_unknown_engine_is_named(bench):
    with pytest.raises(ValueError, match=r"unknown engine\(s\) \['flwr'\]; choose from"):
        bench.main_full(1, ["flwr"])
