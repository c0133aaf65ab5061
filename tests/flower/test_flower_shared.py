"""What makes Flower's simulation engine cheap: the nodes read the server's federation from Ray's
object store (one copy of the data for all actors, of the current Ray session only) and the
server adopts that copy as its own; one parse of the nodes' experiment for all partition ids;
the poll interval of each grid; the warm-up step once per process."""

from __future__ import annotations

import importlib.util
import pickle

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedselect.config.schema import ConfigError  # noqa: E402
from fedselect.flower import client_app, settings, shared  # noqa: E402
from fedselect.flower.nodes import FlowerOptions  # noqa: E402
from fedselect.flower.settings import federation_for, node_experiment  # noqa: E402
from fedselect.flower.shared import SharedFederations, share_federation  # noqa: E402
from fedselect.world.federation import build_federation, federation_key  # noqa: E402
from support.tiny import tiny_node_settings  # noqa: E402

RUN = tiny_node_settings(seed=3, hidden=16)


def node_cfg(k: int, n: int = 6):
    return node_experiment(RUN, {"partition-id": k, "num-partitions": n})


def test_one_parse_of_the_experiment_serves_every_partition_id():
    k0, cfg0 = node_cfg(0)
    k5, cfg5 = node_cfg(5)
    assert (k0, k5) == (0, 5) and cfg5 is cfg0 and cfg0.data.num_clients == 6
    with pytest.raises(ConfigError, match="partition-id 6 is not a client id 0..5"):
        node_cfg(6)  # the experiment is cached: the client id is still checked
    with pytest.raises(ConfigError, match="'partition-id' must be an integer"):
        node_experiment(RUN, {"partition-id": "2", "num-partitions": 6})


def test_each_grid_gets_its_poll_interval():
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.superlink.federation import NoOpFederationManager
    from flwr.superlink.grid import InMemoryGrid

    simulation = InMemoryGrid(
        state_factory=LinkStateFactory(FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory())
    )
    deployment = object()  # any other grid: a poll is a request to the SuperLink
    assert FlowerOptions().poll_interval(simulation) == 0.01
    assert FlowerOptions().poll_interval(deployment) == 0.1
    assert FlowerOptions(poll_s=0.5).poll_interval(simulation) == 0.5
    with pytest.raises(ValueError, match="poll_s must be a number of seconds > 0"):
        FlowerOptions(poll_s=0)


def test_the_warm_up_step_runs_once_per_process_and_model(monkeypatch):
    import torch

    k, cfg = node_cfg(2)

    class Fed:  # what the warm-up reads of a federation
        model, input_shape = cfg.model, (1, 28, 28)

        def new_model(self):
            return torch.nn.Linear(2, 2)

    fed = Fed()
    calls = []

    class Recording:
        def run(self, jobs):
            calls.append([(j.client_id, j.epochs, j.max_steps) for j in jobs])
            raise RuntimeError("a warm-up that fails costs nothing but time")

    monkeypatch.setattr(client_app, "_WARM", set())
    monkeypatch.setattr(client_app, "_transport", lambda fed, train_cfg: Recording())
    client_app.warm_up(fed, k, cfg)
    client_app.warm_up(fed, 4, cfg)
    assert calls == [[(2, 1, 1)]]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray")
def test_nodes_read_the_servers_federation_from_the_object_store(monkeypatch):
    """What an actor gets with the ClientApp: the federation the server shared in the current
    Ray session (the same arrays, read-only, no copy), and nothing of an ended session."""
    import ray

    k, cfg = node_cfg(1)
    key = federation_key(cfg)
    server_fed = build_federation(cfg)
    monkeypatch.setattr(shared, "_PUT", {})
    assert not share_federation(key, server_fed)  # no Ray here yet: nothing shared, the nodes build
    assert pickle.loads(pickle.dumps(SharedFederations())).refs == {}

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        assert share_federation(key, server_fed) and shared.shared_keys() == [key]
        assert share_federation(key, server_fed)  # once per session and key
        in_actor = pickle.loads(pickle.dumps(SharedFederations()))  # as Ray sends it with the ClientApp
        assert list(in_actor.refs) == [key]

        monkeypatch.setattr(settings, "_FEDERATIONS", settings.OrderedDict())
        fed = federation_for(cfg, in_actor)
        assert not fed.train_set.x.flags.writeable  # mapped from the object store, not built here
        assert np.array_equal(fed.train_set.x, server_fed.train_set.x) and np.array_equal(fed.test_set.y, server_fed.test_set.y)
        assert [c.train_indices.tolist() for c in fed.clients] == [c.train_indices.tolist() for c in server_fed.clients]
        assert federation_for(cfg, in_actor) is fed  # then cached in the process
        other = node_experiment({**RUN, "seed": 4}, {"partition-id": 1, "num-partitions": 6})[1]
        assert in_actor.federation(federation_key(other)) is None  # another experiment: built by the node

        # the node's training on the shared arrays gives the result of a node that built its own
        from fedselect.fl.local.clients import TrainJob
        from fedselect.fl.local.train import TrainConfig

        tc = TrainConfig(1, 20, 0.05, 0.9, "sgd", 0.0)
        job = TrainJob(k, server_fed.new_model().state_dict(), 1, 7, "train/1/1")
        got = client_app._transport(fed, tc).run([job])[0]
        want = client_app._transport(server_fed, tc).run([job])[0]
        assert all(got.state[n].equal(want.state[n]) for n in want.state) and got.loss == want.loss

        # the server adopts the stored copy: its arrays become the nodes' read-only ones, equal bytes
        mine = build_federation(cfg)
        x0, y0, tx0 = mine.train_set.x.copy(), mine.train_set.y.copy(), mine.test_set.x.copy()
        nbytes = x0.nbytes + y0.nbytes + tx0.nbytes + mine.test_set.y.nbytes
        assert shared.adopt_shared_data(key, mine) == nbytes
        assert not mine.train_set.x.flags.writeable and not mine.test_set.x.flags.writeable
        assert mine.train_set.x.tobytes() == x0.tobytes() and mine.train_set.y.tobytes() == y0.tobytes()
        assert mine.test_set.x.tobytes() == tx0.tobytes()
        assert shared.adopt_shared_data(federation_key(other), build_federation(other)) == 0  # not shared: kept
        after = client_app._transport(mine, tc).run([job])[0]
        assert all(after.state[n].equal(want.state[n]) for n in want.state) and after.loss == want.loss

        monkeypatch.setattr(shared, "ray_session", lambda: "another session")
        assert pickle.loads(pickle.dumps(SharedFederations())).refs == {}  # references of an ended session stay here
        assert shared.adopt_shared_data(key, build_federation(cfg)) == 0  # of an ended session: kept
    finally:
        ray.shutdown()
    assert pickle.loads(pickle.dumps(SharedFederations())).refs == {}
