"""A Flower ClientApp for fedselect's models and partitions (flwr 1.42 Message API).

Every node is one client of a fedselect federation: it builds the same federation as our
simulator (:func:`fedselect.federation.build_federation`, deterministic for a seed, cached per
process) and serves client ``k = partition-id`` of it. A train message therefore gives the
same weights, loss and simulated latency as ``Method.local_update`` in ``fedselect run``
(same mini-batch stream ``fed.train_generator(t, k)``; bit-identical for the same torch thread
count).

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

Messages (``message_type``; records by name)
--------------------------------------------
``query``  in: ``config`` (optional ``server-round``). out: ``profile`` (ConfigRecord, see
    :func:`client_profile`: the stable client id, samples, device/network profile and, with
    ``server-round``, that round's CPU frequency and bandwidth draws).
``train``  in: ``arrays`` (ArrayRecord: the model entries the server sends, all or a subset),
    ``config`` (ConfigRecord): ``server-round`` (required: t, seeds the mini-batch order),
    ``local-epochs`` (default ``train.local_epochs``), ``upload-keys`` (entries to send back;
    default all), ``train-tag`` (generator stream, default ``"train"``), ``sample-losses``
    (also report ``sum-sq-sample-loss`` and ``num-sample-losses``, Oort's statistical utility), ``keep-state``
    (keep the trained model on the node; entries the server does not send start from it next
    time: personalised layers). Entries not sent start from the kept state, else from the
    federation's common initial model.
    out: ``arrays`` (the ``upload-keys`` entries after training), ``metrics`` (MetricRecord,
    :data:`TRAIN_METRICS`), ``profile``.
``evaluate`` in: ``arrays`` (as for train), ``config``: ``server-round`` (default 0),
    ``train-epochs`` (default 0: evaluate the weights as given; E > 0 trains E epochs first,
    e.g. the budgeted-online candidate evaluation), ``train-tag`` (default ``"candidate"``),
    ``eval-split`` (``train`` (default), ``holdout`` or ``test``: the client's training data,
    its held-out split, or the federation's test set), ``sample-indices`` (only these of the
    client's training samples: Power-of-Choice's probes), ``return-arrays`` (send the trained
    weights back; default false). out: ``metrics`` (:data:`EVALUATE_METRICS`), ``profile``,
    and ``arrays`` when asked.

Simulated latency (SPEC 0.3, FR-eq 3-5; ``fedselect.system``) uses round ``server-round``'s
draws ``fed.fleet.draw(t)``: compute ``E * |D_k| * g / (c_k f_{t,k})``, upload of the returned
entries and download of the received ones at ``b_{t,k}``; the download counts in
``latency-s`` only with ``system.count_download``, as in our simulator. ``wall-s`` is the
measured time of the handler on the node.

Bad settings or messages raise an error that names the key and what is allowed; Flower sends
it back to the server as an error reply.
"""

from __future__ import annotations

import hashlib
import math
import sys
import time
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any

try:
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "fedselect.flower needs Flower: install the optional extra with `pip install fedselect[flower]` "
        "(or `pip install -r requirements-flower.txt`)"
    ) from e
import torch

import fedselect
from fedselect.config import ConfigError, ExperimentConfig, apply_overrides, config_kind, read_yaml_file
from fedselect.federation import Federation, build_federation, federation_key
from fedselect.fl.aggregate import state_bytes
from fedselect.fl.evaluate import evaluate
from fedselect.fl.faults import ClientFailure
from fedselect.fl.train import TrainConfig
from fedselect.resolve import parse_experiment
from fedselect.system import compute_time, transmit_time

__all__ = [
    "app",
    "make_client_app",
    "node_experiment",
    "settings_document",
    "federation_for",
    "federation_hash",
    "client_profile",
    "set_threads",
    "train_reply",
    "evaluate_reply",
    "query_reply",
    "TRAIN_METRICS",
    "EVALUATE_METRICS",
    "STATE_KEY",
    "CONFIG_FILE_KEY",
]

#: node/run config key holding the path of an experiment YAML
CONFIG_FILE_KEY = "fedselect-config"
#: key of the kept model state in the node's Context.state
STATE_KEY = "fedselect.state"
#: MetricRecord keys of a train reply
TRAIN_METRICS = (
    "client-id",
    "server-round",
    "num-examples",
    "train-loss",
    "epochs",
    "compute-s",
    "upload-s",
    "download-s",
    "latency-s",
    "upload-bytes",
    "download-bytes",
    "freq-mhz",
    "bandwidth-mbps",
    "wall-s",
)
#: MetricRecord keys of an evaluate reply
EVALUATE_METRICS = (
    "client-id",
    "server-round",
    "num-examples",
    "loss",
    "accuracy",
    "f1-macro",
    "train-loss",
    "epochs",
    "compute-s",
    "upload-s",
    "download-s",
    "latency-s",
    "upload-bytes",
    "download-bytes",
    "wall-s",
)
_EVAL_SPLITS = ("train", "holdout", "test")
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


def _train_config(cfg: ExperimentConfig) -> TrainConfig:
    tr = cfg.train
    return TrainConfig(tr.local_epochs, tr.batch_size, tr.lr, tr.momentum, tr.optimizer, tr.weight_decay)


# ----------------------------------------------------------------------------- records
def federation_hash(fed: Federation) -> str:
    """sha256 of what the federation was built from: its data, model and system sections and
    seed (the JSON of :func:`fedselect.federation.federation_key`), without
    ``system.round_deadline_s``, a setting of the server's rounds that nothing on a node depends on."""
    import json

    system = {k: v for k, v in fed.system.model_dump(mode="json").items() if k != "round_deadline_s"}
    ident = {
        "data": fed.data.model_dump(mode="json"),
        "model": fed.model.model_dump(mode="json"),
        "system": system,
        "seed": fed.seed,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def client_profile(fed: Federation, k: int, t: int | None = None) -> ConfigRecord:
    """What a node tells the server about itself (the ``profile`` record).

    Keys: ``client-id`` (k, stable: never Flower's node id), ``num-partitions`` (N),
    ``num-examples`` (n_k), ``holdout-examples``, ``data-bits`` (|D_k| in bits, SPEC 0.3),
    ``label-counts`` (training labels per class), ``device``, ``network`` (profile names),
    ``cores``, ``mean-mhz``, ``std-mhz``, ``mean-mbps``, ``std-mbps`` (profile parameters),
    ``federation`` (sha256 of the federation key: equal on every node built from the same
    data/model/system/seed), ``fedselect-version``; with round ``t`` also ``server-round``,
    ``freq-mhz`` and ``bandwidth-mbps`` (that round's draws f_{t,k}, b_{t,k}).
    """
    fl, c = fed.fleet, fed.clients[k]
    import numpy as np

    rec: dict[str, Any] = {
        "client-id": int(k),
        "num-partitions": fed.num_clients,
        "num-examples": c.num_samples,
        "holdout-examples": len(c.holdout),
        "data-bits": float(fed.client_bits(k)),
        "label-counts": [int(x) for x in np.bincount(c.train.y, minlength=fed.num_classes)],
        "device": fl.devices[k].name,
        "network": fl.networks[k].name,
        "cores": int(fl.cores[k]),
        "mean-mhz": float(fl.mean_mhz[k]),
        "std-mhz": float(fl.std_mhz[k]),
        "mean-mbps": float(fl.mean_mbps[k]),
        "std-mbps": float(fl.std_mbps[k]),
        "federation": federation_hash(fed),
        "fedselect-version": fedselect.__version__,
    }
    if t is not None:
        d = fl.draw(t)
        rec.update({"server-round": int(t), "freq-mhz": float(d.freq_mhz[k]), "bandwidth-mbps": float(d.bandwidth_mbps[k])})
    return ConfigRecord(rec)


def _config(content: RecordDict, what: str) -> dict[str, Any]:
    cfg = content.get("config")
    if cfg is None:
        return {}
    if not isinstance(cfg, ConfigRecord):
        raise ValueError(f"{what} message: record 'config' must be a ConfigRecord, got {type(cfg).__name__}")
    return dict(cfg)


def _int(conf: dict[str, Any], key: str, default: int | None, what: str, low: int = 0) -> int:
    v = conf.get(key, default)
    if v is None:
        raise ValueError(f"{what} message: config needs '{key}'")
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{what} message: config '{key}' must be an integer >= {low}, got {v!r}")
    return v


#: (federation, training settings) -> the in-process engine training this node's clients
_ENGINES: "weakref.WeakKeyDictionary[Federation, dict]" = weakref.WeakKeyDictionary()


def _engine(fed: Federation, train_cfg: TrainConfig):
    """The engine the simulator trains with (:class:`fedselect.fl.pool.ClientTrainer`, in this
    process): the same kernels and memory format, so a node's update is bit-identical to the
    simulator's for the same job."""
    from fedselect.fl.pool import ClientTrainer

    per_fed = _ENGINES.setdefault(fed, {})
    key = repr(train_cfg)
    if key not in per_fed:
        per_fed[key] = ClientTrainer.from_federation(fed, train_cfg, workers=0, device="cpu")
    return per_fed[key]


def _train_on_node(
    fed: Federation,
    cfg: ExperimentConfig,
    k: int,
    model: torch.nn.Module,
    t: int,
    tag: str,
    epochs: int,
    sample_losses: bool = False,
) -> tuple[dict[str, torch.Tensor], float, dict]:
    """Client ``k`` trains ``epochs`` epochs from ``model``'s weights (stream ``<tag>/<t>/<k>``)."""
    from fedselect.fl.clients import TrainJob

    start = {n: v.detach().clone() for n, v in model.state_dict().items()}
    res = _engine(fed, _train_config(cfg)).train(
        [TrainJob(k, start, int(epochs), fed.seed, f"{tag}/{t}/{k}", bool(sample_losses))]
    )[0]
    if res.error is not None:
        raise ClientFailure(res.error)
    stats = {"sum_sq_sample_loss": res.sum_sq_sample_loss, "num_sample_losses": res.num_sample_losses} if sample_losses else {}
    model.load_state_dict(res.state)
    return res.state, res.loss, stats


def _start_model(fed: Federation, content: RecordDict, state: RecordDict | None, what: str) -> tuple[torch.nn.Module, list[str]]:
    """A model holding the received entries over the kept state (or the common initial model)."""
    arrays = content.get("arrays")
    if not isinstance(arrays, ArrayRecord):
        raise ValueError(f"{what} message: needs an ArrayRecord 'arrays' with model entries; records present: {sorted(content)}")
    model = fed.new_model()
    start = model.state_dict()
    kept = state.get(STATE_KEY) if state is not None else None
    if isinstance(kept, ArrayRecord):
        start.update(kept.to_torch_state_dict())
    received = arrays.to_torch_state_dict()
    unknown = sorted(set(received) - set(start))
    if unknown:
        raise ValueError(
            f"{what} message: arrays {unknown} are not entries of model {fed.model.name!r}; its entries: {list(start)}"
        )
    for name, value in received.items():
        if tuple(value.shape) != tuple(start[name].shape):
            raise ValueError(
                f"{what} message: array {name!r} has shape {tuple(value.shape)}, the model's is {tuple(start[name].shape)}"
            )
        start[name] = value
    model.load_state_dict(start)
    return model, list(received)


def _costs(
    fed: Federation, k: int, t: int, epochs: int, state: dict[str, torch.Tensor], up_keys: list[str], down_keys: list[str]
) -> dict[str, Any]:
    """Simulated costs of round ``t`` (the formula of ``Method.make_update``; FR-eq 3-5)."""
    sysc, fl = fed.system, fed.fleet
    d = fl.draw(t)
    up = state_bytes(state, up_keys)
    down = state_bytes(state, down_keys)
    comp = compute_time(epochs, fed.client_bits(k), sysc.cycles_per_bit, fl.cores[k], d.freq_mhz[k])
    up_s = transmit_time(up * 8, d.bandwidth_mbps[k])
    down_s = transmit_time(down * 8, d.bandwidth_mbps[k])
    return {
        "compute-s": float(comp),
        "upload-s": float(up_s),
        "download-s": float(down_s),
        "latency-s": float(comp + up_s + (down_s if sysc.count_download else 0.0)),
        "upload-bytes": int(up),
        "download-bytes": int(down),
        "freq-mhz": float(d.freq_mhz[k]),
        "bandwidth-mbps": float(d.bandwidth_mbps[k]),
    }


def query_reply(fed: Federation, k: int, content: RecordDict) -> RecordDict:
    """Content of the reply to a ``query`` message (module docstring)."""
    conf = _config(content, "query")
    t = _int(conf, "server-round", None, "query") if "server-round" in conf else None
    return RecordDict({"profile": client_profile(fed, k, t)})


def train_reply(
    fed: Federation, cfg: ExperimentConfig, k: int, content: RecordDict, state: RecordDict | None = None
) -> RecordDict:
    """Train client ``k`` of ``fed`` (built from ``cfg``, whose ``train`` section sets the local
    training) as asked by a ``train`` message; the reply's content (module docstring).
    ``state`` is the node's ``Context.state`` (for ``keep-state``).

    Raises:
        ValueError: missing/invalid records or config values (named), unknown array names.
    """
    t0 = time.perf_counter()
    conf = _config(content, "train")
    t = _int(conf, "server-round", None, "train")
    epochs = _int(conf, "local-epochs", cfg.train.local_epochs, "train")
    tag = str(conf.get("train-tag", "train"))
    model, down_keys = _start_model(fed, content, state, "train")
    want_losses = bool(conf.get("sample-losses", False))
    trained, loss, stats = _train_on_node(fed, cfg, k, model, t, tag, epochs, want_losses)
    stats = stats if want_losses else None
    up_keys = conf.get("upload-keys")
    if up_keys is None:
        up_keys = list(trained)
    if not isinstance(up_keys, list) or not all(isinstance(x, str) for x in up_keys):
        raise ValueError(f"train message: config 'upload-keys' must be a list of model entry names, got {up_keys!r}")
    unknown = sorted(set(up_keys) - set(trained))
    if unknown:
        raise ValueError(
            f"train message: upload-keys {unknown} are not entries of model {fed.model.name!r}; its entries: {list(trained)}"
        )
    if conf.get("keep-state", False) and state is not None:
        state[STATE_KEY] = ArrayRecord({n: v.clone() for n, v in trained.items()})
    metrics = {
        "client-id": int(k),
        "server-round": t,
        "num-examples": fed.clients[k].num_samples,
        "train-loss": float(loss),
        "epochs": epochs,
        **_costs(fed, k, t, epochs, trained, list(up_keys), down_keys),
    }
    if stats is not None:
        metrics["sum-sq-sample-loss"] = float(stats.get("sum_sq_sample_loss", 0.0))
        metrics["num-sample-losses"] = int(stats.get("num_sample_losses", 0))
    metrics["wall-s"] = time.perf_counter() - t0
    return RecordDict(
        {
            "arrays": ArrayRecord({n: trained[n] for n in up_keys}),
            "metrics": MetricRecord(metrics),
            "profile": client_profile(fed, k),
        }
    )


def evaluate_reply(
    fed: Federation, cfg: ExperimentConfig, k: int, content: RecordDict, state: RecordDict | None = None
) -> RecordDict:
    """Evaluate (optionally after training) as asked by an ``evaluate`` message; the reply's
    content (module docstring).

    Raises:
        ValueError: missing/invalid records or config values (named).
    """
    t0 = time.perf_counter()
    conf = _config(content, "evaluate")
    t = _int(conf, "server-round", 0, "evaluate")
    epochs = _int(conf, "train-epochs", 0, "evaluate")
    tag = str(conf.get("train-tag", "candidate"))
    split = conf.get("eval-split", "train")
    if split not in _EVAL_SPLITS:
        raise ValueError(f"evaluate message: config 'eval-split' must be one of {list(_EVAL_SPLITS)}, got {split!r}")
    model, down_keys = _start_model(fed, content, state, "evaluate")
    client = fed.clients[k]
    loss = _train_on_node(fed, cfg, k, model, t, tag, epochs)[1] if epochs else math.nan
    data = {"train": client.train, "holdout": client.holdout, "test": fed.test_set}[split]
    idx = conf.get("sample-indices")
    if idx is not None:
        if split != "train" or not isinstance(idx, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in idx):
            raise ValueError(
                "evaluate message: 'sample-indices' is a list of integer indices into the client's training data "
                f"(eval-split 'train'), got {idx!r} with eval-split {split!r}"
            )
        if idx and (min(idx) < 0 or max(idx) >= len(data)):
            raise ValueError(
                f"evaluate message: sample-indices outside 0..{len(data) - 1} (client {k} has {len(data)} training samples)"
            )
        import numpy as np

        data = data.subset(np.asarray(idx, dtype=np.int64))
    trained = {n: v.detach().clone() for n, v in model.state_dict().items()}
    if split == "test" and idx is None:  # the server-side test evaluation of the simulator (its engine)
        m = _engine(fed, _train_config(cfg)).evaluate(trained, "test")
    else:  # a client's own data: the simulator's probes and per-client evaluation (this process, standard layout)
        m = evaluate(model, data)
    returned = list(trained) if conf.get("return-arrays", False) else []
    costs = _costs(fed, k, t, epochs, trained, returned, down_keys)
    metrics = {
        "client-id": int(k),
        "server-round": t,
        "num-examples": len(data),
        "loss": float(m["loss"]),
        "accuracy": float(m["accuracy"]),
        "f1-macro": float(m["f1_macro"]),
        "train-loss": float(loss),
        "epochs": epochs,
        **{key: v for key, v in costs.items() if key not in ("freq-mhz", "bandwidth-mbps")},
    }
    metrics["wall-s"] = time.perf_counter() - t0
    rec = RecordDict({"metrics": MetricRecord(metrics), "profile": client_profile(fed, k)})
    if returned:
        rec["arrays"] = ArrayRecord(trained)
    return rec


# ----------------------------------------------------------------------------- the app
def make_client_app(settings: dict[str, Any] | None = None) -> ClientApp:
    """A ClientApp answering ``query``, ``train`` and ``evaluate`` (module docstring).

    Args:
        settings: node settings below the run and node configs (lowest precedence), e.g.
            ``{"data.dataset": "mnist-embedded", "model.name": "mlp", "seed": 0}`` for
            :func:`flwr.simulation.run_simulation`, which passes no run config.
    """
    base = dict(settings or {})
    client = ClientApp()

    def node(context: Context) -> tuple[int, ExperimentConfig, Federation]:
        run_config = {**base, **dict(context.run_config)}
        set_threads({**run_config, **dict(context.node_config)})
        k, cfg = node_experiment(run_config, context.node_config)
        return k, cfg, federation_for(cfg)

    @client.query()
    def query(msg: Message, context: Context) -> Message:
        k, _, fed = node(context)
        return Message(query_reply(fed, k, msg.content), reply_to=msg)

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        k, cfg, fed = node(context)
        return Message(train_reply(fed, cfg, k, msg.content, context.state), reply_to=msg)

    @client.evaluate()
    def evaluate_(msg: Message, context: Context) -> Message:
        k, cfg, fed = node(context)
        return Message(evaluate_reply(fed, cfg, k, msg.content, context.state), reply_to=msg)

    return client


#: the ClientApp of a Flower app's pyproject: ``clientapp = "fedselect.flower.client_app:app"``
app = make_client_app()
