"""fedselect's selectors in any Flower app (fedselect.flower.selection.SelectionStrategy), with a
ClientApp written the way Flower's quickstart writes one (examples/flower-any-app): refusals
before the run, the bookkeeping of a round (measured round trips, bytes, dropouts at the
timeout, errors, who is connected) and Oort / Power-of-Choice learning from measured speed, on
an in-process grid whose nodes answer after a set delay (tests/support/flower_grid.py). The same app in
Flower's simulation engine: tests/test_flower_any_app.py."""

import csv
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower] (make test installs it)"
)
HERE = Path(__file__).parent
APP = HERE.parents[1] / "examples" / "flower-any-app"
sys.path.insert(0, str(APP))

if importlib.util.find_spec("flwr") is not None:
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedAvg, FedProx

    from fedselect.flower import SelectionStrategy
    from fedselect.flower.app_fleet import record_bytes
    from support.flower_grid import LocalGrid


class DelayedGrid(LocalGrid):
    """LocalGrid whose node ``i`` answers ``delay[i]`` seconds after a message is pushed: its
    reply is computed at once, by the real ClientApp in this process, and held until then. The
    grid's clock (:meth:`perf_counter`, :meth:`monotonic`: what the server's exchanges read, see
    ``measured``) leaves out the time the ClientApp computed here, so that a node's measured round
    trip is the delay it was given, whatever the load of the machine running the test."""

    def __init__(self, *args, delay=None, **kw):
        super().__init__(*args, **kw)
        self.delay = dict(delay or {})
        self.ready: dict[str, float] = {}
        self.sent: list = []
        self.computed_s = 0.0

    def perf_counter(self) -> float:
        return time.perf_counter() - self.computed_s

    def monotonic(self) -> float:
        return time.monotonic() - self.computed_s

    @staticmethod
    def sleep(s: float) -> None:
        time.sleep(s)

    def push_messages(self, messages):
        msgs = list(messages)
        t0 = time.perf_counter()
        ids = list(super().push_messages(msgs))
        self.computed_s += time.perf_counter() - t0
        now = self.perf_counter()
        for m in msgs:
            self.sent.append(m)
            self.ready[m.metadata.message_id] = now + self.delay.get(self.client[m.metadata.dst_node_id], 0.0)
        return ids

    def pull_messages(self, message_ids):
        now = self.perf_counter()
        return [self._replies.pop(m) for m in list(message_ids) if m in self._replies and self.ready.get(m, 0.0) <= now]


@pytest.fixture
def measured(monkeypatch):
    """``measured(grid)``: the server's exchanges (fedselect.flower.messaging) read ``grid``'s clock."""

    def use(grid):
        from fedselect.flower import messaging

        monkeypatch.setattr(messaging, "time", grid)
        return grid

    return use


def app_grid(n: int, delay=None, behaviour=None) -> "DelayedGrid":
    from anyapp.client_app import app

    # the slowness comes from the grid's delays here: the ClientApp itself never sleeps
    return DelayedGrid(app, n, {"slow-seconds": 0.0, "local-epochs": 1}, delay=delay, behaviour=behaviour)


def initial():
    from anyapp.task import initial_arrays

    return ArrayRecord(initial_arrays())


def read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------------- refused before the run
@pytest.mark.parametrize(
    "selector, options, why",
    [
        ("flashrl", {}, "warm-up in which every client trains a fixed number of local epochs"),
        ("favor", {}, "CPU (MHz) and bandwidth (Mb/s) profile"),
        ("cefl_leaders", {}, "leaders"),
        ("clustered_sampling", {}, "own aggregation weights"),
        ("fedcs", {}, "CPU (MHz) and bandwidth (Mb/s) profile"),
        ("secretary", {}, "server's validation set"),
        ("power_of_choice", {"variant": "cpow-d"}, "cpow-d"),
        ("fastest", {"latency": "actual"}, "latency: actual"),
    ],
)
def test_a_selector_that_needs_more_than_flower_messages_is_refused_with_its_reason(selector, options, why):
    with pytest.raises(ValueError) as e:
        SelectionStrategy(FedAvg(), selector, options)
    msg = str(e.value)
    assert f"selector {selector!r} cannot choose the nodes of a Flower app" in msg
    assert why in msg


def test_refusals_read_declarations_of_any_selector_and_bad_input_is_named():
    from fedselect.selectors.base import Selection, Selector

    class Judge(Selector):  # a user's selector: declares what it reads, nothing about Flower
        name = "judge"
        wants_evaluation = True

        def select(self, view):
            return Selection(())

    with pytest.raises(ValueError, match="server's validation set every round \\(wants_evaluation\\)"):
        SelectionStrategy(FedAvg(), Judge)
    with pytest.raises(ValueError, match="selector 'oort': bad options"):
        SelectionStrategy(FedAvg(), "oort", {"no_such_option": 1})
    with pytest.raises(ValueError, match="unknown selector .nope.; allowed"):
        SelectionStrategy(FedAvg(), "nope")

    class OwnSampling:  # not one of Flower's FedAvg family
        pass

    with pytest.raises(ValueError, match="fraction_train"):
        SelectionStrategy(OwnSampling(), "random")
    for sel in ("random", "all", "oort", "power_of_choice", "afl", "fastest"):
        SelectionStrategy(FedProx(), sel)  # accepted


# ---------------------------------------------------------------------------- the bookkeeping of a round
def test_round_trips_bytes_dropouts_errors_and_availability_are_measured(tmp_path, measured):
    """Round 1: the random selector picks 4 of 5 nodes; node 1 answers after 0.3 s, node 2 never
    (a dropout at the 0.5 s timeout), node 3 with a ClientApp error; round 2: node 4 has left."""

    def behaviour(kind, k, t):
        if kind == "train" and t == 1:
            return {2: "silent", 3: "error"}.get(k)
        return None

    grid = measured(app_grid(5, delay={1: 0.3}, behaviour=behaviour))
    strategy = SelectionStrategy(
        FedAvg(fraction_train=0.8, fraction_evaluate=0.0, min_available_nodes=5),
        "random",
        seed=1,
        run_dir=tmp_path,
        poll_s=0.01,
    )
    arrays = initial()
    original = strategy.configure_train

    def configure_train(t, *a):
        if t == 2:
            grid.leave(4)
        return original(t, *a)

    strategy.configure_train = configure_train
    strategy.start(grid, arrays, num_rounds=2, timeout=0.5, train_config=ConfigRecord({"lr": 0.1}))
    fleet = strategy.fleet
    assert fleet.nodes == [1000, 1001, 1002, 1003, 1004]
    rows = {int(r["round"]): r for r in read(tmp_path / "metrics.csv")}
    clients = read(tmp_path / "clients.csv")
    r1 = [c for c in clients if c["round"] == "1"]
    by = {int(c["client"]): c for c in r1}
    chosen = [int(k) for k in rows[1]["selected"].split(";")]
    assert len(chosen) == 4 and rows[1]["available"] == "5"
    assert rows[1]["nodes"] == ";".join(str(1000 + k) for k in chosen)
    train_msgs = {m.metadata.dst_node_id: m for m in grid.sent if m.metadata.message_type == "train"}
    for k in chosen:
        c = by[k]
        lat = float(c["latency_s"])
        if k == 2:  # silent: a dropout when the 0.5 s timeout passed
            assert c["failed"] == "dropout" and 0.5 <= lat < 0.7
        elif k == 3:
            assert c["failed"] == "error" and lat < 0.3
        elif k == 1:  # 0.3 s late, measured to within a few polls
            assert c["failed"] == "" and 0.3 <= lat < 0.5
        else:
            assert c["failed"] == "" and lat < 0.2
        if c["failed"] == "":
            n_train = int(0.8 * (40 + 15 * (k % 5)))
            assert int(c["num_examples"]) == n_train == fleet.num_samples[k]
            assert int(c["upload_bytes"]) > 0
        assert int(c["download_bytes"]) == record_bytes(train_msgs[1000 + k].content)
    assert int(rows[1]["failed"]) == sum(k in (2, 3) for k in chosen)
    assert float(rows[1]["round_latency_s"]) == pytest.approx(max(float(by[k]["latency_s"]) for k in chosen))
    assert int(rows[1]["upload_bytes"]) == sum(int(by[k]["upload_bytes"]) for k in chosen)
    # round 2: node 4 left, so it is not available and not chosen
    assert rows[2]["available"] == "4"
    assert 4 not in [int(k) for k in rows[2]["selected"].split(";")]
    assert float(rows[2]["e2e_latency_s"]) == pytest.approx(float(rows[1]["round_latency_s"]) + float(rows[2]["round_latency_s"]))
    # fedselect's own reader (what `fedselect report` reads) takes the run
    from fedselect.experiment.metrics import read_metrics

    assert [r["round"] for r in read_metrics(tmp_path / "metrics.csv")] == ["1", "2"]
    assert float(rows[2]["clock_s"]) == pytest.approx(float(rows[1]["e2e_latency_s"]))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["selector"] == "random" and summary["strategy"] == "FedAvg" and summary["rounds"] == 2
    assert sum(summary["times_selected"]) == 8
    # the profiling exchange measured every node, node 1 0.3 s late; data sizes known before round 1
    prof = summary["measured"]["profile_round_trip_s"]
    assert prof[1] >= 0.3 and all(p < 0.3 for i, p in enumerate(prof) if i != 1)


# ---------------------------------------------------------------------------- learning from measured speed
@pytest.mark.parametrize("slow", [(0, 1), (6, 7)])
def test_oort_picks_the_nodes_measured_slow_less(tmp_path, slow, measured):
    """8 nodes, 2 per round, 10 rounds: the two nodes that answer 0.3 s late (the others 0.02 s)
    are tried at most once each (Oort explores every client once) and never exploited, whichever
    nodes they are; the fast ones share the other slots."""
    delay = {i: (0.3 if i in slow else 0.02) for i in range(8)}
    strategy = SelectionStrategy(
        FedAvg(fraction_train=0.25, fraction_evaluate=0.0), "oort", seed=3, run_dir=tmp_path, poll_s=0.005
    )
    from anyapp.server_app import global_evaluate

    strategy.start(
        measured(app_grid(8, delay)),
        initial(),
        num_rounds=10,
        timeout=5.0,
        train_config=ConfigRecord({"lr": 0.1}),
        evaluate_fn=global_evaluate,
    )
    counts = json.loads((tmp_path / "summary.json").read_text())["times_selected"]
    assert sum(counts) == 20
    fast = [counts[i] for i in range(8) if i not in slow]
    assert all(counts[i] <= 1 for i in slow), counts
    assert all(c >= 1 for c in fast) and sum(fast) >= 18, counts
    assert max(counts[i] for i in slow) < max(fast)
    # what Oort learnt: the measured durations (s) of the slow nodes are the 0.3 s they took
    for i in slow:
        if counts[i]:
            assert 0.3 <= strategy.selector.duration[i] < 0.5
    rows = read(tmp_path / "metrics.csv")
    assert [int(r["round"]) for r in rows] == list(range(1, 11)) and "epsilon" in rows[0]
    assert all(0 <= float(r["accuracy"]) <= 1 for r in rows)  # the server-side evaluate_fn's figures
    # the train losses of the Flower-style replies
    assert all(float(r["train_loss"]) > 0 for r in rows)


def test_power_of_choice_probes_with_evaluate_messages_and_never_picks_a_candidate_too_slow_to_answer(tmp_path, measured):
    """8 nodes, 2 per round of d = 4 candidates; nodes 0 and 1 answer 0.4 s late, the probe waits
    0.15 s: they give no loss in time and are never chosen, though drawn as candidates."""
    delay = {i: (0.4 if i < 2 else 0.01) for i in range(8)}
    grid = measured(app_grid(8, delay))
    strategy = SelectionStrategy(
        FedAvg(fraction_train=0.25, fraction_evaluate=0.0),
        "power_of_choice",
        {"d": 4},
        seed=5,
        run_dir=tmp_path,
        probe_timeout=0.15,
        poll_s=0.005,
    )
    strategy.start(grid, initial(), num_rounds=6, timeout=5.0, train_config=ConfigRecord({"lr": 0.1}))
    rows = read(tmp_path / "metrics.csv")
    probed_slow = 0
    for r in rows:
        cands = [int(k) for k in r["candidate_ids"].split(";")]
        chosen = [int(k) for k in r["selected"].split(";")]
        assert len(cands) == 4 and set(chosen) <= set(cands) and len(chosen) == 2
        assert not set(chosen) & {0, 1}, r
        slow_cands = len(set(cands) & {0, 1})
        probed_slow += slow_cands
        # the measured probe: the candidates that answered, the wait (the timeout when one was slow)
        assert int(r["candidates_probed"]) == 4 - slow_cands
        lat = float(r["probe_latency_s"])
        assert (0.15 <= lat < 0.3) if slow_cands else lat < 0.15
        assert int(r["probe_download_bytes"]) == 4 * record_bytes(
            next(m for m in grid.sent if m.metadata.message_type == "evaluate").content
        )
        assert math.isfinite(float(r["mean_candidate_loss"]))
    assert probed_slow > 0  # the slow nodes were drawn as candidates: their speed kept them out


def test_the_wrapped_strategy_writes_the_messages_and_aggregates(measured):
    """The selection is the selector's, everything else the wrapped strategy's: FedProx's
    proximal-mu travels in the chosen nodes' train messages; with the same choices (random,
    same seed) and the same local training, FedAdam's server optimiser gives another model than
    FedAvg's average."""
    import numpy as np
    from flwr.serverapp.strategy import FedAdam

    def run(inner):
        grid = measured(app_grid(6))
        s = SelectionStrategy(inner, "random", seed=2, poll_s=0.005)
        result = s.start(grid, initial(), num_rounds=2, timeout=5.0, train_config=ConfigRecord({"lr": 0.1}))
        return s, grid, result.arrays.to_numpy_ndarrays()

    prox, grid, _ = run(FedProx(fraction_train=0.5, fraction_evaluate=0.0, proximal_mu=0.25))
    trains = [m for m in grid.sent if m.metadata.message_type == "train"]
    assert len(trains) == 6 and all(m.content["config"]["proximal-mu"] == 0.25 for m in trains)
    for t in (1, 2):  # 3 messages a round, in the order they were pushed
        sent = sorted(m.metadata.dst_node_id - 1000 for m in trains[3 * (t - 1) : 3 * t])
        assert sent == sorted(prox.rows[t - 1]["selected"])
    avg_s, _, avg = run(FedAvg(fraction_train=0.5, fraction_evaluate=0.0))
    adam_s, _, adam = run(FedAdam(fraction_train=0.5, fraction_evaluate=0.0, eta=0.05))
    assert [r["selected"] for r in avg_s.rows] == [r["selected"] for r in adam_s.rows] == [r["selected"] for r in prox.rows]
    assert all(np.isfinite(a).all() for a in adam)
    assert not all(np.allclose(a, b) for a, b in zip(avg, adam))
