"""A Flower ClientApp for fedselect's models and partitions (flwr 1.42 Message API).

Every node is one client of a fedselect federation: it builds the same federation as our
simulator (:func:`fedselect.federation.build_federation`, deterministic for a seed, cached per
process) and serves client ``k = partition-id`` of it. It answers the jobs of
:mod:`fedselect.flower.wire` (training, evaluation, CEFL's fine-tuning) by running them with the
simulator's own :class:`fedselect.fl.work.LocalTransport` on its data, so a node's result is
bit-identical to the simulator's for the same job, and a ``query`` with its profile. It keeps
nothing between messages: the server sends the whole state a job starts from.

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

Bad settings or messages raise an error that names the key and what is allowed; Flower sends
it back to the server as an error reply (the server records that client's ``error``).
"""

from __future__ import annotations

import sys
import time
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any

try:
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "fedselect.flower needs Flower: install the optional extra with `pip install fedselect[flower]` "
        "(or `pip install -r requirements-flower.txt`)"
    ) from e
import torch

from fedselect.config import ConfigError, ExperimentConfig, apply_overrides, config_kind, read_yaml_file
from fedselect.federation import Federation, build_federation, federation_key
from fedselect.fl.train import TrainConfig
from fedselect.fl.work import LocalTransport
from fedselect.flower.wire import decode_job, encode_result, federation_hash, profile_reply
from fedselect.resolve import parse_experiment

__all__ = [
    "app",
    "make_client_app",
    "node_experiment",
    "settings_document",
    "federation_for",
    "federation_hash",
    "set_threads",
    "run_job",
    "CONFIG_FILE_KEY",
]

#: node/run config key holding the path of an experiment YAML
CONFIG_FILE_KEY = "fedselect-config"
_SECTIONS = frozenset(ExperimentConfig.model_fields)

_CONFIGS: OrderedDict[str, tuple[int, ExperimentConfig]] = OrderedDict()
_FEDERATIONS: OrderedDict[str, Federation] = OrderedDict()
_CACHE_SIZE = 2


# ----------------------------------------------------------------------------- settings
def _value(v: Any) -> Any:
    if isinstance(v, str) and v.strip()[:1] in ("[", "{"):
        import yaml

        try:
            return yaml.safe_load(v)
        except yaml.YAMLError as e:
            raise ConfigError(f"node/run config value {v!r} looks like a YAML list/mapping but is not valid YAML ({e})") from None
    return v


def config_file(path: str) -> Path:
    """Where ``fedselect-config = path`` is: an absolute path as is; a relative one in the working
    directory, else in the Flower app's directory (Flower puts it on ``sys.path`` when it loads
    the app; the FAB carries the app's YAML files to the SuperLink and to every SuperNode).
    Returns the path as given when it is nowhere (the reader then names it)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    for entry in sys.path:
        d = Path(entry or ".")
        if (d / "pyproject.toml").is_file() and (d / p).is_file():
            return d / p
    return p


def settings_document(merged: dict[str, Any], what: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The experiment described by flat Flower settings: the YAML of ``fedselect-config`` (or
    nothing) and the dotted experiment keys that override it (other keys are left out).

    Returns:
        ``(doc, overrides, source)``: the YAML's mapping, ``{dotted key: value}`` (strings
        starting with ``[`` or ``{`` read as YAML) and a description for error messages.

    Raises:
        ConfigError / FileNotFoundError: the file is missing, not YAML, or not an experiment.
    """
    doc: dict[str, Any] = {}
    source = what
    path = merged.get(CONFIG_FILE_KEY)
    if path:
        doc = read_yaml_file(config_file(str(path))) or {}
        if not isinstance(doc, dict) or config_kind(doc) != "experiment":
            raise ConfigError(
                f"{CONFIG_FILE_KEY} = {path!r}: expected an experiment YAML (as for `fedselect run`), "
                f"got a {config_kind(doc) if isinstance(doc, dict) else type(doc).__name__} file"
            )
        source = f"{path} with the {what}"
    overrides = {key: _value(v) for key, v in merged.items() if key.split(".")[0] in _SECTIONS}
    return doc, overrides, source


def node_experiment(run_config: dict[str, Any], node_config: dict[str, Any]) -> tuple[int, ExperimentConfig]:
    """The client id and experiment of a node from its run and node configs (module docstring).

    Returns:
        ``(k, cfg)``: the client id (``partition-id``) and the validated experiment.

    Raises:
        ConfigError: no ``partition-id``, a ``partition-id`` outside ``0..N-1``,
            ``num-partitions`` disagreeing with ``data.num_clients``, an unreadable
            ``fedselect-config`` file, or invalid experiment keys (named).
    """
    merged = {**dict(run_config), **dict(node_config)}
    ident = repr(sorted(merged.items()))
    if ident in _CONFIGS:
        _CONFIGS.move_to_end(ident)
        return _CONFIGS[ident]
    if "partition-id" not in merged:
        raise ConfigError(
            "node config: no 'partition-id' (the client id k of this node, 0..N-1); start the SuperNode with "
            "--node-config 'partition-id=K num-partitions=N' (the simulation engine sets both)"
        )
    k = merged["partition-id"]
    if isinstance(k, bool) or not isinstance(k, int):
        raise ConfigError(f"node config: 'partition-id' must be an integer client id, got {k!r}")
    doc, overrides, source = settings_document(merged, "node/run config")
    n = merged.get("num-partitions")
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"node config: 'num-partitions' must be an integer >= 1, got {n!r}")
        doc_data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
        given = overrides.get("data.num_clients", doc_data.get("num_clients"))
        if given is not None and given != n:
            raise ConfigError(
                f"node config: num-partitions = {n} but data.num_clients = {given}; they must agree "
                f"(in the simulation engine num-partitions is the number of SuperNodes)"
            )
        overrides["data.num_clients"] = n
    if not ({"clients_per_round", "participation"} & (set(overrides) | set(doc))):
        # not used by a client; keeps the default valid for small federations
        doc_data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
        n_clients = overrides.get("data.num_clients", doc_data.get("num_clients", 20))
        if isinstance(n_clients, int) and not isinstance(n_clients, bool) and n_clients >= 1:
            overrides["clients_per_round"] = min(ExperimentConfig.model_fields["clients_per_round"].default, n_clients)
    cfg = parse_experiment(apply_overrides(doc, overrides), source)
    if not 0 <= k < cfg.data.num_clients:
        raise ConfigError(
            f"node config: partition-id {k} is not a client id 0..{cfg.data.num_clients - 1} "
            f"(data.num_clients = {cfg.data.num_clients})"
        )
    _CONFIGS[ident] = (k, cfg)
    if len(_CONFIGS) > 8:
        _CONFIGS.popitem(last=False)
    return k, cfg


def federation_for(cfg: ExperimentConfig) -> Federation:
    """The federation of ``cfg``, built once per process (the last two are kept)."""
    key = federation_key(cfg)
    if key in _FEDERATIONS:
        _FEDERATIONS.move_to_end(key)
        return _FEDERATIONS[key]
    fed = build_federation(cfg)
    _FEDERATIONS[key] = fed
    while len(_FEDERATIONS) > _CACHE_SIZE:
        _FEDERATIONS.popitem(last=False)
    return fed


def set_threads(merged: dict[str, Any]) -> None:
    """``torch-threads`` of the settings, if given, for this process (bit-identical results
    need the same thread count as the run compared with).

    Raises:
        ConfigError: not an integer >= 1.
    """
    n = merged.get("torch-threads")
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"node/run config: 'torch-threads' must be an integer >= 1, got {n!r}")
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)


# ----------------------------------------------------------------------------- jobs
#: federation -> training settings -> the transport running this node's jobs
_TRANSPORTS: "weakref.WeakKeyDictionary[Federation, dict]" = weakref.WeakKeyDictionary()


def _transport(fed: Federation, train_cfg: TrainConfig) -> LocalTransport:
    """The simulator's transport over this node's federation, training in this process with
    the simulator's engine (:class:`fedselect.fl.pool.ClientTrainer`, no worker processes)."""
    from fedselect.fl.pool import ClientTrainer

    per_fed = _TRANSPORTS.setdefault(fed, {})
    key = repr(train_cfg)
    if key not in per_fed:
        per_fed[key] = LocalTransport(fed, ClientTrainer.from_federation(fed, train_cfg, workers=0, device="cpu"), train_cfg)
    return per_fed[key]


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

    def node(context: Context) -> tuple[int, Federation]:
        run_config = {**base, **dict(context.run_config)}
        set_threads({**run_config, **dict(context.node_config)})
        k, cfg = node_experiment(run_config, context.node_config)
        return k, federation_for(cfg)

    @client.query()
    def query(msg: Message, context: Context) -> Message:
        k, fed = node(context)
        return Message(profile_reply(fed, k), reply_to=msg)

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        return run_job(*node(context), msg)

    @client.evaluate()
    def evaluate_(msg: Message, context: Context) -> Message:
        return run_job(*node(context), msg)

    return client


#: the ClientApp of a Flower app's pyproject: ``clientapp = "fedselect.flower.client_app:app"``
app = make_client_app()
