"""Nodes that own their data: a SuperNode serving a data set of its own, never a partition of
a set the server has (docs/flower.md, "A real fleet").

A node is in this mode when its node config (``flower-supernode --node-config``) holds
``data-path``. It then loads its data with ``data-loader`` — a registered data set name that
takes a ``path`` option (``iot-features``, ``iot-flows`` ...) or ``package.module:loader``, by
default :func:`load_npz` — called as ``loader(seed=seed, path=data-path, **data-options)``: the
loader's ``(train, test)`` are the node's training data and its held-out split. Nothing of the
data leaves the node except what its :func:`profile` says and the results of the jobs it is sent
(trained models, training losses, evaluation figures), exactly the fields listed in
docs/flower.md.

Node config keys (beside ``partition-id``, the node's stable client id 0..N-1):

* ``data-path`` (required): the node's data file (or directory, as its loader takes it).
* ``data-loader``: a data set name or ``package.module:loader`` (default
  ``fedselect.flower.owndata:load_npz``).
* ``data-options``: the loader's other options as a YAML/JSON mapping, e.g.
  ``'{test_fraction: 0.25}'``.
* ``device`` / ``compute-speed``: the node's device class (a name of the server's
  ``system.profiles`` tables) or its training speed in samples per second; with neither, the
  node measures its speed (:func:`measure_speed`).
* ``network`` / ``bandwidth-mbps``: its network class (a name of the server's tables) or its
  bandwidth in Mb/s; one of them is required.
* ``share-label-histogram``: also report the training-label counts (default false: the label
  distribution of a device is private).

The job messages are the same as in the faithful simulation (:mod:`fedselect.flower.wire`); the
node runs them with the simulator's :class:`~fedselect.fl.work.LocalTransport` on a one-client
federation of its own data.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict

from fedselect.common.seeding import np_rng
from fedselect.config.schema import ConfigError, ExperimentConfig
from fedselect.fl.local.clients import TrainJob
from fedselect.fl.local.train import TrainConfig
from fedselect.fl.work import LocalTransport
from fedselect.flower.wire import decode_job, encode_result
from fedselect.world.data.catalog import load_dataset
from fedselect.world.data.datasets import ArrayDataset, DatasetNotFoundError
from fedselect.world.federation import Client, Federation
from fedselect.world.system import DEFAULT_DEVICES, DEFAULT_NETWORKS, Fleet

log = logging.getLogger("fedselect.flower")

__all__ = [
    "OWN_DATA_KEYS",
    "DEFAULT_LOADER",
    "PROFILE_FIELDS",
    "NodeData",
    "owns_data",
    "node_data",
    "load_npz",
    "measure_speed",
    "profile",
    "run_own_job",
    "model_digest",
    "config_mapping",
]

#: node config keys of a node that owns its data (module docstring)
OWN_DATA_KEYS = (
    "data-path",
    "data-loader",
    "data-options",
    "device",
    "compute-speed",
    "network",
    "bandwidth-mbps",
    "share-label-histogram",
)
#: the loader of ``data-loader`` when none is given
DEFAULT_LOADER = "fedselect.flower.owndata:load_npz"
#: every field of a node's profile (the ``query`` reply) and what it holds; the only thing a
#: node tells about itself (docs/flower.md lists them with the job replies)
PROFILE_FIELDS = {
    "client-id": "the node's client id (its partition-id)",
    "own-data": "true: the node serves data of its own",
    "num-examples": "its training samples n_k (the FedAvg weight)",
    "holdout-examples": "its held-out samples (evaluation)",
    "input-shape": "the shape of one input, e.g. [1, 28, 28]",
    "num-classes": "the number of classes of the task",
    "model": "SHA-256 of the model section it builds (must equal the server's)",
    "device": "its device class, when configured",
    "network": "its network class, when configured",
    "compute-speed": "training samples per second, configured or measured",
    "bandwidth-mbps": "its bandwidth in Mb/s, when configured",
    "speed-source": "configured | measured (how compute-speed was obtained)",
    "label-counts": "training-label counts per class, only with share-label-histogram = true",
}


def owns_data(settings: dict[str, Any]) -> bool:
    """Whether node settings (node config over run config) put the node in this mode."""
    return bool(settings.get("data-path"))


def load_npz(seed: int = 0, path: str | None = None, test_fraction: float = 0.2, **_: Any) -> tuple[ArrayDataset, ArrayDataset]:
    """A node's data from one ``.npz`` file: ``x`` (float inputs, ``(n, *input_shape)``), ``y``
    (int labels ``(n,)``), ``num_classes`` (a scalar; every node of a task must give the same),
    and optionally ``x_test``, ``y_test`` (the held-out split). Without them, ``test_fraction``
    of the rows (rounded, at least one row left for training) are held out, drawn with
    ``np_rng(seed, "node-holdout")``.

    Returns:
        ``(train, test)``: two :class:`ArrayDataset` named after the file.

    Raises:
        DatasetNotFoundError: no ``path``, or no file there.
        ValueError: a missing or malformed entry (named), labels outside ``[0, num_classes)``,
            ``test_fraction`` outside [0, 1).
    """
    if not path or not Path(path).expanduser().is_file():
        raise DatasetNotFoundError(f"node data: {'no data-path given' if not path else f'{path}: no such file'}")
    if not 0 <= float(test_fraction) < 1:
        raise ValueError(f"node data {path}: test_fraction must lie in [0, 1), got {test_fraction!r}")
    p = Path(path).expanduser()
    with np.load(p, allow_pickle=False) as z:
        missing = [k for k in ("x", "y", "num_classes") if k not in z.files]
        if missing:
            raise ValueError(
                f"node data {p}: the .npz file lacks {missing} (it holds {sorted(z.files)}); needs x, y, num_classes"
            )
        arrays = {k: np.asarray(z[k]) for k in z.files}
    if arrays["num_classes"].shape != () or not np.issubdtype(arrays["num_classes"].dtype, np.integer):
        raise ValueError(f"node data {p}: num_classes must be an integer scalar, got {arrays['num_classes']!r}")
    c = int(arrays["num_classes"])
    name = p.stem

    def make(x: np.ndarray, y: np.ndarray, what: str) -> ArrayDataset:
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise ValueError(f"node data {p}: {what} labels must be a 1-d integer array, got {y.dtype}{y.shape}")
        return ArrayDataset(x.astype(np.float32), y.astype(np.int64), c, name=f"{name}{what}", info={"source": str(p)})

    train = make(arrays["x"], arrays["y"], "")
    if "x_test" in arrays or "y_test" in arrays:
        if "x_test" not in arrays or "y_test" not in arrays:
            raise ValueError(f"node data {p}: give both x_test and y_test, or neither")
        return train, make(arrays["x_test"], arrays["y_test"], "/holdout")
    n = len(train)
    h = min(int(round(float(test_fraction) * n)), max(0, n - 1))
    order = np_rng(seed, "node-holdout").permutation(n)
    return train.subset(np.sort(order[h:]), name), train.subset(np.sort(order[:h]), f"{name}/holdout")


def model_digest(cfg: ExperimentConfig, input_shape, num_classes: int) -> str:
    """SHA-256 of the model a node or the server builds: the ``model`` section, the input shape
    and the number of classes (equal on the server and every node of one task)."""
    ident = {"model": cfg.model.model_dump(mode="json"), "input": [int(s) for s in input_shape], "classes": int(num_classes)}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def config_mapping(v: Any, key: str) -> dict[str, Any]:
    """A Flower config value holding a YAML/JSON mapping (Flower configs hold no mappings) as a
    dict ({} for nothing). Raises ConfigError naming ``key`` when it is not a mapping."""
    if v is None or v == "":
        return {}
    if isinstance(v, dict):
        return dict(v)
    import yaml

    try:
        out = yaml.safe_load(str(v))
    except yaml.YAMLError as e:
        raise ConfigError(f"node config: {key!r} must be a YAML mapping, e.g. '{{test_fraction: 0.25}}' ({e})") from None
    if not isinstance(out, dict):
        raise ConfigError(f"node config: {key!r} must be a YAML mapping, e.g. '{{test_fraction: 0.25}}', got {v!r}")
    return out


def _positive(settings: dict[str, Any], key: str) -> float | None:
    v = settings.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
        raise ConfigError(f"node config: {key!r} must be a number > 0, got {v!r}")
    return float(v)


def _name(settings: dict[str, Any], key: str) -> str | None:
    v = settings.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v:
        raise ConfigError(f"node config: {key!r} must be the name of a {key} class of the server's tables, got {v!r}")
    return v


@dataclass
class NodeData:
    """What a node that owns its data serves.

    Attributes:
        k: its client id. cfg: the experiment it reads (model; training settings travel with jobs).
        fed: a one-client federation of its own data (client 0 = this node).
        path, loader: where the data came from.
        device, network: configured classes or None. compute_speed (samples/s), bandwidth_mbps:
            configured or measured values, or None. speed_source: ``configured`` | ``measured``.
        share_labels: whether the profile carries the label counts.
    """

    k: int
    cfg: ExperimentConfig
    fed: Federation
    path: str
    loader: str
    device: str | None
    network: str | None
    compute_speed: float | None
    bandwidth_mbps: float | None
    speed_source: str
    share_labels: bool


#: (settings identity) -> NodeData, per process (a node's data is loaded once; a process that
#: serves several nodes keeps the last 8)
_NODES: OrderedDict[str, NodeData] = OrderedDict()


def node_data(k: int, cfg: ExperimentConfig, settings: dict[str, Any]) -> NodeData:
    """The data and profile settings of node ``k`` (module docstring), loaded once per process.

    Raises:
        ConfigError: a bad key (named): both ``device`` and ``compute-speed``, neither
            ``network`` nor ``bandwidth-mbps``, a non-positive speed, ``data-options`` that
            is not a mapping. What the loader raises (DatasetNotFoundError, ValueError).
    """
    ident = repr((k, sorted((key, str(v)) for key, v in settings.items()), cfg.model_dump_json()))
    if ident in _NODES:
        _NODES.move_to_end(ident)
        return _NODES[ident]
    device, network = _name(settings, "device"), _name(settings, "network")
    speed, mbps = _positive(settings, "compute-speed"), _positive(settings, "bandwidth-mbps")
    if device is not None and speed is not None:
        raise ConfigError("node config: give 'device' (a class) or 'compute-speed' (samples/s), not both")
    if network is not None and mbps is not None:
        raise ConfigError("node config: give 'network' (a class) or 'bandwidth-mbps', not both")
    if network is None and mbps is None:
        raise ConfigError(
            "node config: a node that owns its data says how it is connected: network=NAME (a network class of the "
            'server\'s system.profiles tables, e.g. "wifi-3") or bandwidth-mbps=X'
        )
    share = settings.get("share-label-histogram", False)
    if not isinstance(share, bool):
        raise ConfigError(f"node config: 'share-label-histogram' must be true or false, got {share!r}")
    loader = str(settings.get("data-loader") or DEFAULT_LOADER)
    path = str(Path(str(settings["data-path"])).expanduser())
    options = config_mapping(settings.get("data-options"), "data-options")
    train, test = load_dataset(loader, seed=cfg.seed, path=path, **options)
    client = Client(0, train, test, np.arange(len(train), dtype=np.int64), np.arange(len(test), dtype=np.int64))
    fleet = Fleet(DEFAULT_DEVICES[:1], DEFAULT_NETWORKS[:1], cfg.seed)  # not read on a node: the server models the fleet
    fed = Federation(cfg.data, cfg.model, cfg.system, cfg.seed, train, test, [client], fleet)
    node = NodeData(k, cfg, fed, path, loader, device, network, speed, mbps, "configured", share)
    _NODES[ident] = node
    while len(_NODES) > 8:
        _NODES.popitem(last=False)
    log.debug("node %d: %d training and %d held-out samples from %s (%s)", k, len(train), len(test), path, loader)
    return node


# ----------------------------------------------------------------------------- jobs
#: a node's federation -> training settings -> the transport running its jobs
_TRANSPORTS: "weakref.WeakKeyDictionary[Federation, dict[str, LocalTransport]]" = weakref.WeakKeyDictionary()


def _transport(node: NodeData, train_cfg: TrainConfig) -> LocalTransport:
    """The simulator's transport over the node's one-client federation, training in this process."""
    from fedselect.fl.local.pool import ClientTrainer

    per_fed = _TRANSPORTS.setdefault(node.fed, {})
    key = repr(train_cfg)
    if key not in per_fed:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            trainer = ClientTrainer.from_federation(node.fed, train_cfg, workers=0, device="cpu")
        per_fed[key] = LocalTransport(node.fed, trainer, train_cfg)
    return per_fed[key]


def measure_speed(node: NodeData, steps: int = 5) -> float:
    """The node's training speed in samples per second: one throw-away step (torch's one-time
    costs), then ``steps`` mini-batches of its own data from fresh weights, timed (wall
    clock, this process; nothing is kept)."""
    t = node.cfg.train
    train_cfg = TrainConfig(1, t.batch_size, t.lr, t.momentum, t.optimizer, t.weight_decay)
    transport = _transport(node, train_cfg)
    start = node.fed.new_model().state_dict()
    transport.run([TrainJob(0, start, 1, 0, "warm-up", max_steps=1)])
    n = node.fed.clients[0].num_samples
    batches = min(steps, max(1, math.ceil(n / t.batch_size)))
    t0 = time.perf_counter()
    res = transport.run([TrainJob(0, start, 1, 0, "speed", max_steps=batches)])[0]
    dt = max(time.perf_counter() - t0, 1e-6)
    if res.error is not None:
        raise RuntimeError(f"node {node.k}: measuring its training speed failed: {res.error}")
    return min(n, batches * t.batch_size) / dt


def profile(node: NodeData) -> RecordDict:
    """The node's answer to a ``query`` (:data:`PROFILE_FIELDS`; nothing else leaves it here).
    A node without a configured device class or speed measures its speed first."""
    fed = node.fed
    if node.device is None and node.compute_speed is None:
        node.compute_speed, node.speed_source = measure_speed(node), "measured"
    rec: dict[str, Any] = {
        "client-id": int(node.k),
        "own-data": True,
        "num-examples": int(fed.clients[0].num_samples),
        "holdout-examples": int(len(fed.clients[0].holdout_indices)),
        "input-shape": [int(s) for s in fed.input_shape],
        "num-classes": int(fed.num_classes),
        "model": model_digest(node.cfg, fed.input_shape, fed.num_classes),
        "speed-source": node.speed_source if node.device is None else "configured",
    }
    for key, v in (("device", node.device), ("network", node.network)):
        if v is not None:
            rec[key] = v
    for key, v in (("compute-speed", node.compute_speed), ("bandwidth-mbps", node.bandwidth_mbps)):
        if v is not None and (key != "compute-speed" or node.device is None):
            rec[key] = float(v)
    if node.share_labels:
        rec["label-counts"] = [int(c) for c in np.bincount(fed.clients[0].labels, minlength=fed.num_classes)]
    return RecordDict({"profile": ConfigRecord(rec)})


def run_own_job(node: NodeData, msg: Message) -> Message:
    """The reply of a node that owns its data to a job message: the job runs on the node's own
    data (its client 0 locally, client ``node.k`` on the wire).

    Raises:
        ValueError: a malformed message, or one for another client than ``node.k``.
        RuntimeError: the job failed on this node (Flower sends the error back).
    """
    t0 = time.perf_counter()
    job, train_cfg = decode_job(msg)
    if job.client_id != node.k:
        raise ValueError(f"a job for client {job.client_id} reached the node serving client {node.k}")
    result = _transport(node, train_cfg).run([replace(job, client_id=0)])[0]
    return Message(encode_result(replace(result, client_id=node.k), time.perf_counter() - t0), reply_to=msg)
