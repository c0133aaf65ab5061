"""mode: async (FedBuff, docs/async.md): sync equivalence in the degenerate case, staleness
weights, determinism, availability, config errors."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from fedselect.config import ConfigError
from fedselect.experiment import run_experiment
from fedselect.fl.aggregate import buffered_update
from fedselect.fl.asynchronous import staleness_weight
from fedselect.resolve import parse_experiment


def _doc(**over):
    d = {
        "name": "async-test",
        "rounds": 3,
        "clients_per_round": 3,
        "data": {"num_clients": 8, "partition": {"scheme": "iid"}},
        "train": {"local_epochs": 1, "batch_size": 50},
    }
    d.update(over)
    return d


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _equal_fleet(tmp_path):
    f = tmp_path / "capacity.csv"
    f.write_text("client,compute_speed,bandwidth_kbps\n" + "".join(f"{k},500,20000\n" for k in range(8)))
    return {"capacity": {"model": "file", "file": str(f)}}


def test_buffer_equal_to_concurrency_on_an_equal_fleet_is_fedavg(tmp_path):
    """K = C = U, identical speeds and sizes, constant staleness: every aggregation is a sync round."""
    system = _equal_fleet(tmp_path)
    sync = parse_experiment(_doc(system=system))
    asy = parse_experiment(
        _doc(system=system, mode="async", async_={"concurrency": 3, "buffer_size": 3, "staleness": {"function": "constant"}})
    )
    from fedselect.federation import build_federation, federation_key

    assert federation_key(sync) == federation_key(asy)
    fed = build_federation(sync)  # one federation for both, as in a comparison
    run_experiment(sync, tmp_path / "sync", workers=0, federation=fed)
    run_experiment(asy, tmp_path / "async", workers=0, federation=fed)
    a, b = _rows(tmp_path / "sync"), _rows(tmp_path / "async")
    assert len(a) == len(b) == 4
    for ra, rb in zip(a, b):
        assert set(ra["selected"].split(";")) == set(rb["selected"].split(";"))
        assert ra["accuracy"] == rb["accuracy"]
        assert float(ra["e2e_latency_s"]) == pytest.approx(float(rb["e2e_latency_s"]), rel=1e-12)
        # the work that ended in the interval = the round's participants
        assert float(ra["latency_sum_s"]) == pytest.approx(float(rb["latency_sum_s"]), rel=1e-12)
    assert [r["staleness_max"] for r in b[1:]] == ["0", "0", "0"]
    ma = torch.load(tmp_path / "sync" / "model.pt")
    mb = torch.load(tmp_path / "async" / "model.pt")
    for name in ma:
        torch.testing.assert_close(ma[name], mb[name], rtol=0, atol=1e-6)


def test_staleness_weights_by_hand():
    assert staleness_weight("constant", 7) == 1.0
    assert staleness_weight("polynomial", 0, a=0.5) == 1.0
    assert staleness_weight("polynomial", 3, a=0.5) == pytest.approx(0.5)  # (1 + 3)^-0.5
    assert staleness_weight("polynomial", 1, a=2.0) == pytest.approx(0.25)
    assert staleness_weight("hinge", 4, a=10.0, b=4.0) == 1.0
    assert staleness_weight("hinge", 6, a=10.0, b=4.0) == pytest.approx(1 / 21)  # 1 / (10 (6 - 4) + 1)
    with pytest.raises(ValueError):
        staleness_weight("bogus", 1)


def test_buffered_update_by_hand():
    old = {"w": torch.tensor([1.0, 1.0])}
    x1, y1 = {"w": torch.tensor([0.0, 0.0])}, {"w": torch.tensor([2.0, 0.0])}  # delta (2, 0)
    y2 = {"w": torch.tensor([1.0, 3.0])}  # from old: delta (0, 2)
    new = buffered_update(old, [y1, y2], [x1, old], [1.0, 3.0], server_lr=0.5)
    # old + 0.5 * (1 * (2, 0) + 3 * (0, 2)) / 4 = (1.25, 1.75)
    torch.testing.assert_close(new["w"], torch.tensor([1.25, 1.75]))


def test_same_seed_same_metrics_and_staleness(tmp_path):
    cfg = parse_experiment(_doc(rounds=4, mode="async", async_={"concurrency": 4, "buffer_size": 2}))
    run_experiment(cfg, tmp_path / "a", workers=0)
    run_experiment(cfg, tmp_path / "b", workers=0)
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()
    rows = _rows(tmp_path / "a")
    assert [int(r["version"]) for r in rows[1:]] == [1, 2, 3, 4]
    assert all(len(r["selected"].split(";")) == 2 for r in rows[1:])
    clocks = [float(r["e2e_latency_s"]) for r in rows]
    assert clocks == sorted(clocks)
    for r in rows[1:]:
        assert float(r["round_latency_s"]) == pytest.approx(float(r["e2e_latency_s"]) - float(r["clock_s"]))
    assert any(float(r["staleness_max"]) > 0 for r in rows[1:])


def test_offline_client_is_never_started(tmp_path):
    trace = tmp_path / "trace.csv"
    # clients 0..5 always online; 6 and 7 never
    trace.write_text("client,start_s,end_s\n" + "".join(f"{k},0,inf\n" for k in range(6)))
    cfg = parse_experiment(
        _doc(
            rounds=4,
            mode="async",
            async_={"concurrency": 3, "buffer_size": 2},
            availability={"model": "trace", "trace_file": str(trace)},
        )
    )
    seen = []
    run_experiment(cfg, tmp_path / "r", workers=0, on_simulation=lambda sim: _spy(sim, seen))
    assert seen and all(k < 6 for sel in seen for k in sel)
    rows = _rows(tmp_path / "r")
    assert all(k not in ("6", "7") for r in rows for k in r["selected"].split(";"))


def _spy(sim, seen):
    select = sim.selector.select

    def spy(view):
        sel = select(view)
        seen.append(list(sel.clients))
        assert view.available is not None and not ({6, 7} & set(view.available.tolist()))
        return sel

    sim.selector.select = spy


def test_dropout_fails_at_once_and_the_run_goes_on(tmp_path):
    cfg = parse_experiment(_doc(rounds=3, mode="async", async_={"concurrency": 3, "buffer_size": 2}, faults={"dropout": 0.3}))
    run_experiment(cfg, tmp_path / "r", workers=0)
    rows = _rows(tmp_path / "r")
    assert len(rows) == 4
    assert all(math.isfinite(float(r["e2e_latency_s"])) for r in rows)


@pytest.mark.parametrize(
    "over, words",
    [
        ({"async": {"concurrency": 3}}, "async: applies only to mode: async"),
        ({"mode": "async", "async": {"concurrency": 0}}, "async.concurrency"),
        ({"mode": "async", "async": {"concurrency": 99}}, "async.concurrency (99) must be <= data.num_clients"),
        ({"mode": "async", "async": {"buffer_size": 0}}, "async.buffer_size"),
        ({"mode": "async", "async": {"staleness": {"function": "step"}}}, "async.staleness.function"),
        ({"mode": "async", "async": {"staleness": {"function": "constant", "a": 2.0}}}, "a applies only to function"),
        ({"mode": "async", "async": {"staleness": {"function": "polynomial", "b": 1.0}}}, "b applies only to function"),
        ({"mode": "async", "overselect": 1.5}, "overselect"),
        ({"mode": "async", "checkpoint_every": 2}, "checkpoint_every"),
        ({"mode": "async", "selector": {"name": "all"}}, "selector 'all' trains a fixed set"),
        ({"mode": "async", "method": "fedadam"}, "algorithm 'fedadam' aggregates its own way"),
    ],
)
def test_config_errors_name_the_key(over, words):
    with pytest.raises(ConfigError) as e:
        parse_experiment(_doc(**over))
    assert words in str(e.value)


def test_async_defaults_and_no_checkpoints():
    cfg = parse_experiment(_doc(mode="async"))
    assert cfg.async_.concurrency == 3 and cfg.async_.buffer_size == 1 and cfg.checkpoint_every == 0
    assert cfg.model_dump(mode="json")["async"]["concurrency"] == 3


def test_resume_is_refused(tmp_path):
    cfg = parse_experiment(_doc(rounds=2, mode="async"))
    run_experiment(cfg, tmp_path / "r", workers=0)
    with pytest.raises(ValueError, match="cannot be resumed"):
        run_experiment(cfg, tmp_path / "r", workers=0, resume=True)


def test_list_shows_the_async_keys():
    from fedselect.console import fleet_table

    t = fleet_table()
    rows = dict(zip(t.columns[0]._cells, t.columns[1]._cells))
    applies = dict(zip(t.columns[0]._cells, t.columns[2]._cells))
    assert rows["mode"] == "'sync'" and rows["async.server_lr"] == "1.0"
    for k in ("concurrency", "buffer_size", "staleness.function", "staleness.a", "staleness.b"):
        assert f"async.{k}" in rows
    assert applies["async.staleness.b"] == "hinge"


def test_comparison_config_resolves():
    from pathlib import Path

    from fedselect.compare import load_compare

    cc = load_compare(Path(__file__).resolve().parents[1] / "configs" / "async-fleet.yaml", {})
    modes = [cc.experiment(m, 0).mode for m in cc.methods]
    assert modes == ["sync", "async", "async", "async"]
    assert cc.experiment(cc.methods[2], 0).async_.buffer_size == 10


def _count_selectors():
    from fedselect.selectors import SELECTORS

    # selectors that set the aggregate's weights (clustered sampling) are refused in async mode
    return [
        n
        for n in sorted(SELECTORS.builtin_names())
        if SELECTORS.get(n).uses_count and not SELECTORS.get(n).sets_aggregation_weights
    ]


@pytest.mark.parametrize("name", _count_selectors())
def test_every_counting_selector_runs_async(tmp_path, name):
    from registry_cases import part

    doc = _doc(rounds=2, mode="async", async_={"concurrency": 3, "buffer_size": 2}, selector=part(name))
    doc["data"] = {"num_clients": 6, "partition": {"scheme": "iid"}}
    run_experiment(parse_experiment(doc), tmp_path / "r", workers=0)
    rows = _rows(tmp_path / "r")
    assert [r["version"] for r in rows[1:]] == ["1", "2"]
    assert all(len(r["selected"].split(";")) == 2 for r in rows[1:])


def test_a_version_where_every_update_fails_ends_and_the_run_goes_on(tmp_path):
    """Every update of version 2 is NaN under Markov availability: the server does not wait for
    ever for a client that could succeed; it aggregates what it holds and goes on."""
    doc = _doc(
        rounds=4,
        mode="async",
        async_={"concurrency": 3, "buffer_size": 2},
        availability={"model": "markov", "mean_on_s": 2.0, "mean_off_s": 2.0},
        faults={"inject": [{"kind": "nan", "rounds": 2, "clients": "all"}]},
    )
    run_experiment(parse_experiment(doc), tmp_path / "r", workers=0)
    rows = _rows(tmp_path / "r")
    assert [r["version"] for r in rows[1:]] == ["1", "2", "3", "4"]
    assert ":nan" in rows[2]["failed"]
