"""``latency_sum_s`` (the FLASH-RL authors' Timesum): the sum of the participants' latencies in a
round, failures at their failure latency; row 0 the preparation's clients; runs saved before the
column existed still report and resume (with the columns they started with)."""

from __future__ import annotations

import csv
import math

import pytest

from fedselect.experiment.checkpoint import load_checkpoint, save_checkpoint
from fedselect.experiment.metrics import CORE_COLUMNS, summarize
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import make_simulation, run_experiment
from fedselect.fl.round import RoundResult
from fedselect.fl.types import ClientOutcome, Evaluation, PhaseCost, Selection, SelectionCost
from fedselect.report.build import build_report
from fedselect.world.federation import build_federation


def _doc(**over):
    d = {
        "name": "latency-sum",
        "seed": 2,
        "rounds": 4,
        "clients_per_round": 3,
        "checkpoint_every": 1,
        "data": {"num_clients": 8, "partition": {"scheme": "iid"}},
        "model": {"name": "mlp", "options": {"hidden": [16]}},
        "train": {"local_epochs": 1, "batch_size": 50},
    }
    d.update(over)
    return d


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _out(k, latency, failed=None):
    return ClientOutcome(k, 1, None, 10, math.nan, 1, 0.0, 0.0, 0.0, latency, 0, 0, failed)


def test_column_sits_right_after_round_latency():
    assert CORE_COLUMNS[CORE_COLUMNS.index("round_latency_s") + 1] == "latency_sum_s"


def test_round_sum_by_hand_failures_at_their_failure_latency():
    outcomes = (_out(0, 1.5), _out(1, 4.0, "timeout"), _out(2, 0.25), _out(3, 0.0, "dropout"), _out(4, 2.0, "cancelled"))
    ev = Evaluation(0.5, 0.5, 1.0)
    r = RoundResult(1, Selection((0, 1, 2, 3, 4), SelectionCost(0.75, 0, 0, 5)), outcomes, 2, False, True, ev, {})
    assert r.latency_s == 0.75 + 4.0  # probing + the slowest (the timeout at the deadline)
    assert r.latency_sum_s == 1.5 + 4.0 + 0.25 + 0.0 + 2.0  # every participant, probing left out
    empty = RoundResult(2, Selection(()), (), 0, False, False, ev, {})
    assert empty.latency_s == empty.latency_sum_s == 0.0


def test_preparation_sum_reported_or_not():
    assert PhaseCost().clients_latency_sum_s == 0.0  # no preparation
    assert PhaseCost(3.0, 1, 1, 7.5).clients_latency_sum_s == 7.5
    assert math.isnan(PhaseCost(3.0, 1, 1).clients_latency_sum_s)  # charged latency, sum not said
    assert (PhaseCost(1.0, 0, 0, 2.0) + PhaseCost()).latency_sum_s == 2.0
    assert (PhaseCost() + PhaseCost()).latency_sum_s is None


@pytest.fixture(scope="module")
def fed():
    return build_federation(parse_experiment(_doc()))


def test_rows_are_the_sum_of_the_cost_model_latencies(tmp_path, fed):
    cfg = parse_experiment(_doc())
    run_experiment(cfg, tmp_path, federation=fed, workers=0)
    ctx = make_simulation(cfg, fed).ctx
    rows = _rows(tmp_path)
    assert float(rows[0]["latency_sum_s"]) == 0.0  # FedAvg prepares nothing
    total = 0.0
    for r in rows[1:]:
        lats = [ctx.client_cost(int(k), 1, fed.fleet.draw(int(r["round"]))).latency_s for k in r["selected"].split(";")]
        assert float(r["latency_sum_s"]) == pytest.approx(sum(lats), rel=1e-12)
        assert float(r["round_latency_s"]) == pytest.approx(max(lats), rel=1e-12)
        total += float(r["latency_sum_s"])
    assert summarize(rows)["latency_sum_s"] == pytest.approx(total, rel=1e-12)


def test_a_timeout_counts_at_the_deadline(tmp_path, fed):
    free = parse_experiment(_doc(rounds=1))
    ctx = make_simulation(free, fed).ctx
    run_experiment(free, tmp_path / "free", federation=fed, workers=0)
    chosen = [int(k) for k in _rows(tmp_path / "free")[1]["selected"].split(";")]
    lat = sorted(ctx.client_cost(k, 1, fed.fleet.draw(1)).latency_s for k in chosen)
    deadline = (lat[1] + lat[2]) / 2
    run_experiment(parse_experiment(_doc(rounds=1, system={"round_deadline_s": deadline})), tmp_path / "dl", federation=fed)
    r = _rows(tmp_path / "dl")[1]
    assert r["failed"].endswith(":timeout") and float(r["round_latency_s"]) == deadline
    assert float(r["latency_sum_s"]) == pytest.approx(lat[0] + lat[1] + deadline, rel=1e-12)


def _to_old_format(run_dir):
    """Make ``run_dir`` look written before latency_sum_s: metrics.csv and the checkpoint's rows
    and header without the column."""
    rows = _rows(run_dir)
    old = [c for c in rows[0] if c != "latency_sum_s"]
    with open(run_dir / "metrics.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(old)
        for r in rows:
            w.writerow([r[c] for c in old])
    ck = load_checkpoint(run_dir)
    ck["columns"] = [c for c in ck["columns"] if c != "latency_sum_s"]
    ck["metrics_rows"] = [{k: v for k, v in r.items() if k != "latency_sum_s"} for r in ck["metrics_rows"]]
    for f in ("checkpoint.pt", "checkpoint.prev.pt"):
        (run_dir / f).unlink(missing_ok=True)
    save_checkpoint(run_dir, ck)
    return old


def test_a_run_saved_before_the_column_resumes_and_reports(tmp_path, fed):
    cfg = parse_experiment(_doc())
    run_experiment(cfg, tmp_path / "ref", federation=fed, workers=0)
    run_experiment(cfg, tmp_path / "old", federation=fed, workers=0, stop_after=2)
    old = _to_old_format(tmp_path / "old")
    assert "latency_sum_s" not in old and len(old) == len(_rows(tmp_path / "ref")[0]) - 1
    run_experiment(cfg, tmp_path / "old", federation=fed, workers=0, resume=True)
    got = _rows(tmp_path / "old")
    assert list(got[0]) == old  # it keeps the columns it started with
    assert got == [{c: r[c] for c in old} for r in _rows(tmp_path / "ref")]  # and the same values
    rep = build_report(tmp_path / "old", plots=False)
    assert rep["table"][0]["final_accuracy"] == pytest.approx(float(got[-1]["accuracy"]))
    assert rep["table"][0].get("latency_sum_s") is None


def test_flashrl_row_0_is_the_warm_up_of_every_client(tmp_path):
    base = {
        "method": "flashrl",
        "rounds": 1,
        "data": {"num_clients": 6, "partition": {"scheme": "iid"}},
        "method_options": {"rl_batch_size": 2, "pca_components": 3, "hidden": 8},
    }
    cfg = parse_experiment(_doc(**base))
    f = build_federation(cfg)
    run_experiment(cfg, tmp_path / "a", federation=f, workers=0)
    ctx = make_simulation(cfg, f).ctx
    costs = [ctx.client_cost(k, 1, f.fleet.draw(0)).latency_s for k in range(6)]
    r0 = _rows(tmp_path / "a")[0]
    assert float(r0["round_latency_s"]) == pytest.approx(max(costs), rel=1e-12)
    assert float(r0["latency_sum_s"]) == pytest.approx(sum(costs), rel=1e-12)
    base["method_options"] = {**base["method_options"], "count_warmup": False}
    run_experiment(parse_experiment(_doc(**base)), tmp_path / "b", federation=f, workers=0)
    r0 = _rows(tmp_path / "b")[0]
    assert float(r0["round_latency_s"]) == float(r0["latency_sum_s"]) == 0.0  # not charged: neither


@pytest.mark.parametrize(
    "method,options",
    [("budgeted_online", {}), ("cefl", {"clusters": 2, "base_layers": 1, "warmup_epochs": 1})],
)
def test_row_0_of_the_other_preparations(tmp_path, method, options):
    """Budgeted online evaluates its candidates one after another: row 0's sum is its latency.
    CEFL's warm-up of all N clients: the sum of their latencies, above the straggler's."""
    cfg = parse_experiment(
        _doc(method=method, rounds=1, data={"num_clients": 6, "partition": {"scheme": "iid"}}, method_options=options)
    )
    run_experiment(cfg, tmp_path, workers=0)
    r0 = _rows(tmp_path)[0]
    lat, total = float(r0["round_latency_s"]), float(r0["latency_sum_s"])
    if method == "budgeted_online":
        assert total == lat > 0
        return
    from fedselect.fl.aggregate import state_bytes

    f = build_federation(cfg)
    ctx = make_simulation(cfg, f).ctx
    d0, full = f.fleet.draw(0), state_bytes(ctx.initial_state())
    each = [ctx.client_cost(k, 1, d0).compute_s + ctx.transmit_s(full, k, d0) for k in range(6)]  # CEFL part 1
    assert lat == pytest.approx(max(each), rel=1e-12) and total == pytest.approx(sum(each), rel=1e-12)
