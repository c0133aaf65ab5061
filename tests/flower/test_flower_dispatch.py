"""How a round's messages go out: all at once, or (``in_flight``) a window of them at a time, the
costliest first, as the simulator's pool hands out its jobs (fedselect.flower.messaging.exchange,
fedselect.flower.transport.FlowerTransport, fedselect.flower.nodes.FlowerOptions). The order
changes when the nodes work, never what they compute: the runs are byte-identical."""

import importlib.util
import os
from dataclasses import replace

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower] (make test installs it)"
)

from fedselect.config.schema import ConfigError  # noqa: E402
from fedselect.fl.work import EvalJob, FineTuneJob, TrainJob, job_cost  # noqa: E402
from support.tiny import tiny_doc, tiny_node_settings  # noqa: E402

NODE = tiny_node_settings(seed=3, hidden=32, train=True)

if importlib.util.find_spec("flwr") is not None:
    from support.flower_grid import LocalGrid

    class BatchGrid(LocalGrid):
        """LocalGrid that records every push (the node ids of each ``push_messages`` call) and
        hands back at most ``per_pull`` replies per pull (None: all that are ready)."""

        def __init__(self, *args, per_pull=None, **kw):
            super().__init__(*args, **kw)
            self.batches: list[list[int]] = []  # node ids of each push
            self.kinds: list[str] = []  # the message type of each push's first message
            self.per_pull = per_pull

        def push_messages(self, messages):
            msgs = list(messages)
            self.batches.append([m.metadata.dst_node_id for m in msgs])
            self.kinds.append(msgs[0].metadata.message_type if msgs else "")
            return super().push_messages(msgs)

        def pull_messages(self, message_ids):
            ready = [m for m in list(message_ids) if m in self._replies]
            if self.per_pull is not None:
                ready = ready[: self.per_pull]
            return [self._replies.pop(m) for m in ready]


def test_job_costs_are_sample_passes():
    """The costs of a training job, a fine-tuning and evaluations, worked by hand."""
    train = TrainJob(0, {}, 5, 0, "s")
    assert train.cost(600) == job_cost(train, 600) == 3000  # 5 epochs x 600 samples
    assert job_cost(FineTuneJob(0, {}, 3, 1, 0.1, 0, "s", "v"), 200) == 600  # at most 3 epochs x 200
    assert job_cost(EvalJob(0, {}, "train", samples=(4, 5, 6)), 200) == 3  # the rows it scores
    assert job_cost(EvalJob(0, {}, "holdout"), 200) == 200


def _queries(grid, nodes):
    from flwr.app import Message, RecordDict

    return [Message(RecordDict(), dst_node_id=n, message_type="query") for n in nodes]


def test_a_window_pushes_in_the_given_order_and_never_more_than_in_flight():
    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.messaging import exchange

    grid = BatchGrid(make_client_app(NODE), 5, {}, per_pull=1)
    grid.get_node_ids()
    order = [1003, 1001, 1004, 1000, 1002]
    ex = exchange(grid, _queries(grid, order), timeout=30, poll_s=0.001, in_flight=2)
    assert grid.batches == [[1003, 1001], [1004], [1000], [1002]]  # 2 at first, then one per reply, in order
    assert sorted(ex.replies) == sorted(order) and ex.silent == []
    assert all(0 <= ex.arrival[n] <= ex.seconds for n in order)

    grid.batches.clear()
    ex = exchange(grid, _queries(grid, order), timeout=30, poll_s=0.001)  # no window: all at once
    assert grid.batches == [order] and sorted(ex.replies) == sorted(order)


def test_at_the_timeout_the_unpushed_messages_are_silent_too():
    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.messaging import exchange

    # client 1's node never answers: with one message in flight the ones behind it are never pushed
    grid = BatchGrid(make_client_app(NODE), 4, {}, behaviour=lambda kind, k, t: "silent" if k == 1 else None)
    grid.get_node_ids()
    ex = exchange(grid, _queries(grid, [1000, 1001, 1002, 1003]), timeout=0.3, poll_s=0.01, in_flight=1)
    assert grid.batches == [[1000], [1001]]
    assert sorted(ex.replies) == [1000] and ex.silent == [1001, 1002, 1003]
    with pytest.raises(ValueError, match="in_flight must be an integer >= 1"):
        exchange(grid, _queries(grid, [1000]), timeout=1, in_flight=0)


def test_flower_options_and_the_run_config_key_are_checked():
    from fedselect.flower.engine import FlowerEngine, simulation_actors
    from fedselect.flower.nodes import FlowerOptions
    from fedselect.flower.server_app import strategy_settings

    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="in_flight"):
            FlowerOptions(in_flight=bad)
    with pytest.raises(ValueError, match="in_flight_min_job_s"):
        FlowerOptions(in_flight_min_job_s=0)
    assert FlowerOptions().in_flight is None  # a deployment's nodes work side by side: all at once
    assert simulation_actors() == (os.cpu_count() or 1)
    assert FlowerEngine().options.in_flight == simulation_actors() + 1
    assert strategy_settings({"in-flight": 3})["in_flight"] == 3
    for bad in (0, 2.5, "3"):
        with pytest.raises(ConfigError, match="in-flight"):
            strategy_settings({"in-flight": bad})


def _run(tmp_path, name, **options):
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.strategy import FedselectStrategy

    doc = tiny_doc(name="dispatch", seed=3, rounds=3, clients_per_round=4, num_clients=6)
    grid = BatchGrid(make_client_app(NODE), 6, {})
    s = FedselectStrategy(parse_experiment(doc), tmp_path / name, poll_s=0.001)
    s.options = replace(s.options, **options)  # what FlowerEngine / the run config would set
    s.start(grid)
    return s, grid


def test_long_training_jobs_go_out_costliest_first_with_the_same_results(tmp_path):
    """Round 1 has no estimate of the nodes' job times yet: its 4 jobs go out at once. From round
    2 on (every job expected longer than the tiny least time asked) they go out 2 at a time, in
    descending epochs x samples; metrics.csv and model.pt equal those of the run without a
    window, byte for byte; with a least job time no job reaches, every round goes out at once."""
    s, grid = _run(tmp_path, "window", in_flight=2, in_flight_min_job_s=1e-9)
    _, plain = _run(tmp_path, "plain")
    _, slow = _run(tmp_path, "too-short", in_flight=2, in_flight_min_job_s=1e9)
    for name in ("metrics.csv", "model.pt"):
        assert (tmp_path / "window" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()
        assert (tmp_path / "too-short" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()

    samples = {1000 + k: len(c.train_indices) for k, c in enumerate(s.fed.clients)}
    assert len(set(samples.values())) > 1  # the order means something
    pushes = [b for b, kind in zip(grid.batches, grid.kinds) if kind == "train"]
    assert sum(map(len, pushes)) == 3 * 4
    assert len(pushes[0]) == 4 and max(len(b) for b in pushes[1:]) <= 2  # round 1 at once, then 2 at most
    later = [n for b in pushes[1:] for n in b]
    for r in range(2):  # rounds 2 and 3: descending epochs x samples (the same epochs for all)
        costs = [samples[n] for n in later[4 * r : 4 * r + 4]]
        assert costs == sorted(costs, reverse=True), (r + 2, costs)
    for g in (plain, slow):  # no window, or jobs expected shorter than the least time: all at once
        assert [len(b) for b, kind in zip(g.batches, g.kinds) if kind == "train"] == [4, 4, 4]
