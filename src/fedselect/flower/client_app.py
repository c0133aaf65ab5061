"""A Flower ClientApp for fedselect's models and partitions (flwr 1.42 Message API).

Every node is one client of a fedselect federation: it builds the same federation as our
simulator (:func:`fedselect.world.federation.build_federation`, deterministic for a seed, cached per
process) and serves client ``k = partition-id`` of it. It answers the jobs of
:mod:`fedselect.flower.wire` (training, evaluation, CEFL's fine-tuning) by running them with the
simulator's own :class:`fedselect.fl.work.LocalTransport` on its data, so a node's result is
bit-identical to the simulator's for the same job, and a ``query`` with its profile. It keeps
nothing between messages: the server sends the whole state a job starts from.

In Flower's simulation engine the nodes read the server's federation from Ray's object store
instead of building it (:mod:`fedselect.flower.shared`: one copy of the data for all actors), and
a process answering its first ``query`` makes one throw-away training step, so that torch's
one-time costs fall into the start-up and not into round 1 (as in the simulator's worker
processes).

Node settings
-------------
Read from the node config (``flower-supernode --node-config``) over the run config
(``[tool.flwr.app.config]`` of the app's pyproject, ``flwr run --run-config``); the simulation
engine sets only ``partition-id`` and ``num-partitions`` in the node config, so there the
experiment comes from the run config:

* ``partition-id`` (required): the client id ``k`` in ``0..N-1``.
* ``num-partitions``: ``N`` (sets ``data.num_clients``; an explicit different
  ``data.num_clients`` is an error).
* ``fedselect-config``: path of an experiment YAML (as for ``fedselect run``) on the node; a
  relative path is looked up in the working directory, then in the Flower app's directory
  (YAML files inside the app travel with it to every node).
* any dotted experiment key, as in our YAML and ``--set``: ``seed``, ``data.dataset``,
  ``data.partition.scheme``, ``data.partition.alpha``, ``model.name``,
  ``model.options.hidden = "[64]"`` (a string starting with ``[`` or ``{`` is read as YAML:
  Flower configs hold no lists), ``train.local_epochs``, ``train.lr``, ``system.*`` ...
  They override the YAML file's values. Keys of other sections are ignored.
* ``torch-threads``: torch CPU threads of the ClientApp process (results are bit-identical
  only for the same thread count).

A node whose node config holds ``data-path`` serves **its own data** instead (a real fleet:
:mod:`fedselect.flower.owndata` lists its keys; ``partition-id`` is then its client id, and the
experiment only gives the model): the server never has that data.

Bad settings or messages raise an error that names the key and what is allowed; Flower sends
it back to the server as an error reply (the server records that client's ``error``).
"""

from __future__ import annotations

import logging
import time
import warnings
import weakref
from typing import Any

try:
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "fedselect.flower needs Flower: install the optional extra with `pip install fedselect[flower]` "
        "(or `pip install -r requirements-flower.txt`)"
    ) from e
from fedselect.config.schema import ExperimentConfig
from fedselect.fl.local.clients import TrainJob
from fedselect.fl.local.train import TrainConfig
from fedselect.fl.work import LocalTransport
from fedselect.flower.logs import quiet_flower_logs
from fedselect.flower.owndata import NodeData, node_data, owns_data, run_own_job
from fedselect.flower.owndata import profile as own_profile
from fedselect.flower.settings import (  # noqa: F401 - the node settings, re-exported
    CONFIG_FILE_KEY,
    config_file,
    federation_for,
    keep_freed_memory,
    node_experiment,
    set_threads,
    settings_document,
)
from fedselect.flower.shared import SharedFederations
from fedselect.flower.wire import decode_job, encode_result, federation_hash, profile_reply
from fedselect.world.federation import Federation

__all__ = [
    "app",
    "make_client_app",
    "node_experiment",
    "settings_document",
    "federation_for",
    "federation_hash",
    "set_threads",
    "run_job",
    "warm_up",
    "CONFIG_FILE_KEY",
]

log = logging.getLogger("fedselect.flower")

quiet_flower_logs()  # in every node process and Ray actor: plain Flower lines off a terminal, no notices

# ----------------------------------------------------------------------------- jobs
#: federation -> training settings -> the transport running this node's jobs
_TRANSPORTS: "weakref.WeakKeyDictionary[Federation, dict]" = weakref.WeakKeyDictionary()


def _transport(fed: Federation, train_cfg: TrainConfig) -> LocalTransport:
    """The simulator's transport over this node's federation, training in this process with
    the simulator's engine (:class:`fedselect.fl.local.pool.ClientTrainer`, no worker processes)."""
    from fedselect.fl.local.pool import ClientTrainer

    per_fed = _TRANSPORTS.setdefault(fed, {})
    key = repr(train_cfg)
    if key not in per_fed:
        with warnings.catch_warnings():  # a shared federation's arrays are read-only: nothing here writes to them
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            trainer = ClientTrainer.from_federation(fed, train_cfg, workers=0, device="cpu")
        per_fed[key] = LocalTransport(fed, trainer, train_cfg)
    return per_fed[key]


#: models (name, options, input shape) this process has made its warm-up step with
_WARM: set[str] = set()


def warm_up(fed: Federation, k: int, cfg: ExperimentConfig) -> None:
    """One throw-away training step (one mini-batch of client ``k``, from fresh weights) with
    ``fed``'s model, once per process and model: torch's one-time costs (kernel set-up, lazy
    imports) then fall into the node's start-up, not into its first job, as in the simulator's
    worker processes. Nothing of it is kept: every job loads its own start state."""
    ident = repr((fed.model.model_dump(mode="json"), tuple(fed.input_shape)))
    if ident in _WARM:
        return
    _WARM.add(ident)
    t = cfg.train
    train_cfg = TrainConfig(1, t.batch_size, t.lr, t.momentum, t.optimizer, t.weight_decay)
    job = TrainJob(k, fed.new_model().state_dict(), 1, 0, "warm-up", max_steps=1)
    try:
        _transport(fed, train_cfg).run([job])
    except Exception as e:  # only time is at stake: the node's jobs report their own errors
        log.debug("warm-up step of client %d failed: %s", k, e)


def run_job(fed: Federation, k: int, msg: Message) -> Message:
    """The reply of node ``k`` of ``fed`` to a job message (:mod:`fedselect.flower.wire`).

    Raises:
        ValueError: a malformed message, or one for another client than ``k``.
        RuntimeError: the job failed on this node (Flower sends the error back).
    """
    t0 = time.perf_counter()
    job, train_cfg = decode_job(msg)
    if job.client_id != k:
        raise ValueError(f"a job for client {job.client_id} reached the node serving client {k}")
    result = _transport(fed, train_cfg).run([job])[0]
    return Message(encode_result(result, time.perf_counter() - t0), reply_to=msg)


# ----------------------------------------------------------------------------- the app
def make_client_app(settings: dict[str, Any] | None = None) -> ClientApp:
    """A ClientApp answering ``query``, ``train`` and ``evaluate`` messages (module docstring).

    Args:
        settings: node settings below the run and node configs (lowest precedence), e.g.
            ``{"data.dataset": "mnist-embedded", "model.name": "mlp", "seed": 0}`` for
            :func:`flwr.simulation.run_simulation`, which passes no run config.
    """
    base = dict(settings or {})
    client = ClientApp()
    shared = SharedFederations()  # carries the server's federation to the simulation's actors

    def experiment(context: Context) -> tuple[int, ExperimentConfig, Federation]:
        run_config = {**base, **dict(context.run_config)}
        set_threads({**run_config, **dict(context.node_config)})
        keep_freed_memory()  # a Ray actor's malloc would return every mini-batch's memory to the OS
        k, cfg = node_experiment(run_config, context.node_config)
        return k, cfg, federation_for(cfg, shared)

    def node(context: Context) -> tuple[Federation, int]:
        k, _, fed = experiment(context)
        return fed, k

    def own(context: Context) -> NodeData | None:
        """The node's own data when its node config holds ``data-path`` (a real fleet:
        :mod:`fedselect.flower.owndata`), else None (it serves a partition of the federation)."""
        node_config = dict(context.node_config)
        if not owns_data(node_config):
            return None
        run_config = {**base, **dict(context.run_config)}
        set_threads({**run_config, **node_config})
        k, cfg = node_experiment(run_config, node_config)
        return node_data(k, cfg, node_config)

    @client.query()
    def query(msg: Message, context: Context) -> Message:
        mine = own(context)
        if mine is not None:
            return Message(own_profile(mine), reply_to=msg)
        k, cfg, fed = experiment(context)
        warm_up(fed, k, cfg)
        return Message(profile_reply(fed, k), reply_to=msg)

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        mine = own(context)
        return run_own_job(mine, msg) if mine is not None else run_job(*node(context), msg)

    @client.evaluate()
    def evaluate_(msg: Message, context: Context) -> Message:
        mine = own(context)
        return run_own_job(mine, msg) if mine is not None else run_job(*node(context), msg)

    return client


#: the ClientApp of a Flower app's pyproject: ``clientapp = "fedselect.flower.client_app:app"``
app = make_client_app()
