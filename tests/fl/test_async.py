"""mode: async (FedBuff, docs/async.md): sync equivalence in the degenerate case, staleness
weights, determinism, availability, config errors."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import run_experiment
from fedselect.fl.aggregate import buffered_update
from fedselect.fl.asynchronous import AsyncSettings, staleness_weight


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
    from fedselect.world.federation import build_federation, federation_key

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


def _w(*v):
    return {"w": torch.tensor(v, dtype=torch.float64)}


def _settings(rule, weighting="uniform", server_lr=1.0):
    return AsyncSettings(4, 3, server_lr, "polynomial", 0.5, 4.0, rule, weighting, 0.9)


def test_staleness_rules_on_a_buffer_of_one_by_hand():
    """One update of staleness 3, S = (1 + 3)^-0.5 = 0.5: x = (1, 1), the client downloaded
    (0, 0) and returned y = (2, 4), Delta = (2, 4). FedBuff (Alg. 1, eta_g = 1): x + S Delta /
    1 = (2, 3). FedAsync (alpha 0.9): x + 0.9 S (y - x) = (1, 1) + 0.45 (1, 3) = (1.45, 2.35).
    Normalised by the buffer's own sum of S (the rule before, FedScale's), the weight S / S = 1
    cancels: x + Delta = (3, 5), whatever the staleness."""
    old, start, y = _w(1.0, 1.0), _w(0.0, 0.0), _w(2.0, 4.0)
    got = {r: _settings(r).step(old, [y], [start], [10], [3])["w"].tolist() for r in ("fedbuff", "fedasync", "normalised")}
    assert got["fedbuff"] == pytest.approx([2.0, 3.0])
    assert got["fedasync"] == pytest.approx([1.45, 2.35])
    assert got["normalised"] == pytest.approx([3.0, 5.0])
    fresh = {r: _settings(r).step(old, [y], [old], [10], [0])["w"].tolist() for r in ("fedbuff", "normalised")}
    assert fresh["fedbuff"] == fresh["normalised"] == [2.0, 4.0]  # staleness 0: the client's model itself


def test_staleness_rules_on_a_buffer_of_three_by_hand():
    """Staleness 0, 1, 3 (S = 1, 2^-0.5, 0.5), deltas (1, 0), (0, 2), (-2, 2), sizes 10, 30, 60,
    eta_g = 0.5, x = (1, 1). FedBuff uniform: x + 0.5 (1/3) [(1, 0) + 2^-0.5 (0, 2) + 0.5 (-2, 2)]
    = (1, 1 + (2^0.5 + 1) / 6); with data-size weights c = (0.1, 0.3, 0.6): x + 0.5 [0.1 (1, 0) +
    0.3 2^-0.5 (0, 2) + 0.3 (-2, 2)] = (0.75, 1 + 0.5 (0.6 2^-0.5 + 0.6)); normalised with
    weights n_i S_i = (10, 30 2^-0.5, 30): x + 0.5 (10 (1, 0) + 30 2^-0.5 (0, 2) + 30 (-2, 2)) / (40 + 30 2^-0.5)."""
    r2 = 2**-0.5
    old = _w(1.0, 1.0)
    ys = [_w(2.0, 1.0), _w(0.0, 2.0), _w(-1.0, 4.0)]
    starts = [old, _w(0.0, 0.0), _w(1.0, 2.0)]
    args = (old, ys, starts, [10, 30, 60], [0, 1, 3])
    uniform = _settings("fedbuff", server_lr=0.5).step(*args)["w"].tolist()
    assert uniform == pytest.approx([1.0, 1.0 + (2**0.5 + 1) / 6])
    samples = _settings("fedbuff", "samples", 0.5).step(*args)["w"].tolist()
    assert samples == pytest.approx([0.75, 1.0 + 0.5 * (0.6 * r2 + 0.6)])
    total = 40 + 30 * r2
    norm = _settings("normalised", "samples", 0.5).step(*args)["w"].tolist()
    assert norm == pytest.approx([1.0 + 0.5 * (10 - 60) / total, 1.0 + 0.5 * (60 * r2 + 60) / total])


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
        ({"mode": "async", "async": {"rule": "fedasync", "buffer_size": 3}}, "rule 'fedasync' mixes each update"),
        ({"mode": "async", "async": {"rule": "fedasync", "server_lr": 0.5}}, "server_lr applies only to rule"),
        ({"mode": "async", "async": {"mixing": 0.5}}, "mixing applies only to rule ['fedasync']"),
        ({"mode": "async", "async": {"rule": "fedavg"}}, "async.rule"),
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
    assert (cfg.async_.rule, cfg.async_.weighting) == ("fedbuff", "uniform")  # FedBuff Alg. 1: the buffer's mean
    fa = parse_experiment(_doc(mode="async", async_={"concurrency": 6, "rule": "fedasync"}))
    assert fa.async_.buffer_size == 1  # not concurrency // 2: FedAsync mixes every update as it arrives
    assert cfg.model_dump(mode="json")["async"]["concurrency"] == 3


def test_resume_is_refused(tmp_path):
    cfg = parse_experiment(_doc(rounds=2, mode="async"))
    run_experiment(cfg, tmp_path / "r", workers=0)
    with pytest.raises(ValueError, match="cannot be resumed"):
        run_experiment(cfg, tmp_path / "r", workers=0, resume=True)


def test_list_shows_the_async_keys():
    from fedselect.cli.console import fleet_table

    t = fleet_table()
    rows = dict(zip(t.columns[0]._cells, t.columns[1]._cells))
    applies = dict(zip(t.columns[0]._cells, t.columns[2]._cells))
    assert rows["mode"] == "'sync'" and rows["async.server_lr"] == "1.0"
    for k in ("concurrency", "buffer_size", "staleness.function", "staleness.a", "staleness.b"):
        assert f"async.{k}" in rows
    assert applies["async.staleness.b"] == "hinge"


def test_comparison_config_resolves():
    from pathlib import Path

    from fedselect.study.compare import load_compare

    cc = load_compare(Path(__file__).resolve().parents[2] / "configs" / "async-fleet.yaml", {})
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


@pytest.mark.slow
@pytest.mark.parametrize("name", _count_selectors())
def test_every_counting_selector_runs_async(tmp_path, name):
    from support.registry_cases import part

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


def test_an_idle_server_waits_for_the_fleet_and_a_gone_fleet_stops_the_run(tmp_path):
    """Every client online in [0, 0.2 s) and again from 3 s: the version in which the fleet
    empties waits, idle, until 3 s (the clock's rule, exact: no search); its row's waited_s is
    that idle time and the end-to-end latency counts it with the rest of the interval. Without
    the second period nobody ever comes back: the run stops naming the server version."""
    from fedselect.fl.availability import FleetGone

    trace = tmp_path / "t.csv"
    trace.write_text("client,start_s,end_s\n" + "".join(f"{k},0,0.2\n{k},3.0,inf\n" for k in range(8)))
    doc = _doc(
        rounds=6,
        mode="async",
        async_={"concurrency": 3, "buffer_size": 2},
        availability={"model": "trace", "trace_file": str(trace)},
    )
    run_experiment(parse_experiment(doc), tmp_path / "r", workers=0)
    rows = _rows(tmp_path / "r")[1:]
    idle = [r for r in rows if float(r["waited_s"]) > 0]
    assert len(idle) == 1 and float(idle[0]["e2e_latency_s"]) > 3.0
    for r in rows:
        whole = float(r["e2e_latency_s"]) - float(r["clock_s"])
        assert float(r["waited_s"]) + float(r["round_latency_s"]) == pytest.approx(whole, abs=1e-9)
    assert "waiting until 3 s" in (tmp_path / "r" / "run.log").read_text()
    trace.write_text("client,start_s,end_s\n" + "".join(f"{k},0,0.2\n" for k in range(8)))
    with pytest.raises(FleetGone, match=r"server version \d+: no client of .* comes online again"):
        run_experiment(parse_experiment(doc), tmp_path / "gone", workers=0)
