"""The one wire protocol between the ServerApp and the ClientApps (flwr 1.42 Message API).

Every work item of a round (:mod:`fedselect.fl.work`) is one message; its reply is the typed
result. No record or key name is spelled anywhere else: the server encodes jobs and decodes
replies here, the node decodes jobs and encodes results here.

=================  ====================  ===========================================  =====================
job                ``message_type``      content                                      reply content
=================  ====================  ===========================================  =====================
``TrainJob``       ``train``             ``arrays`` (start state), ``config`` (job,   ``arrays`` (state),
                                         training settings, the objective's class     ``metrics``
                                         and plain fields), ``objective.<field>``
                                         (each tensor field of its objective)
``EvalJob``        ``evaluate``          ``arrays`` (state), ``config``               ``metrics``
``FineTuneJob``    ``train``             ``arrays`` (leader's model), ``config``      ``arrays``, ``metrics``
query              ``query``             ``config`` (empty)                           ``profile``
=================  ====================  ===========================================  =====================

A job's local objective (:mod:`fedselect.fl.local.objective`) travels as typed data: its class as
``"module:qualname"`` in config ``objective``, each plain field as config ``objective.<field>``,
each tensor field as record ``objective.<field>``; the node imports the class (it must be a
:class:`~fedselect.fl.local.objective.LocalObjective` importable there) and builds the objective from
them, never knowing which algorithm sent it.

The whole model state travels both ways, so a node keeps nothing between messages (the server
holds every client's model, as in the simulator: runs resume exactly and a restarted node loses
nothing). The simulated latency and bytes are the server's cost model's
(:mod:`fedselect.fl.cost`); with measured latency the bytes are the sizes of what was sent.

Every reply is validated before use (:func:`decode_result`): a reply from another client, one
whose arrays lack an entry of the model, add one, or have another dtype or shape, one over the
size bound, or metrics that are missing or not numbers, becomes that client's failure with the
reason (kind ``error``); the server never crashes on a reply.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Mapping

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from fedselect.fl.aggregate import state_bytes
from fedselect.fl.local.objective import LocalObjective, objective_class, objective_fields, objective_path
from fedselect.fl.local.train import TrainConfig
from fedselect.fl.types import Measured
from fedselect.fl.work import EvalJob, EvalResult, FineTuneJob, FineTuneResult, Job, Result, TrainJob, TrainResult

__all__ = [
    "federation_hash",
    "encode_job",
    "decode_job",
    "encode_result",
    "decode_result",
    "failed_result",
    "query_message",
    "profile_of",
    "profile_reply",
    "profile_problem",
    "profile_client",
    "round_of",
    "handler_s",
    "MAX_REPLY_FACTOR",
]

#: a reply may hold at most this many times the model's bytes (a size bound against junk)
MAX_REPLY_FACTOR = 1.5

_ARRAYS, _CONFIG, _METRICS, _PROFILE = "arrays", "config", "metrics", "profile"
_OBJECTIVE = "objective"  # config: its class; "objective.<field>": a plain field (config) or a tensor field (record)
_JOB, _CLIENT, _ROUND = "job", "client-id", "server-round"
_TRAIN_KEYS = ("epochs", "batch-size", "lr", "momentum", "optimizer", "weight-decay")


def federation_hash(fed) -> str:
    """sha256 of what a federation was built from: its data, model and system sections and seed,
    without ``system.round_deadline_s`` (a setting of the server's rounds that nothing on a
    node depends on). Equal on the server and every node of the same experiment."""
    system = {k: v for k, v in fed.system.model_dump(mode="json").items() if k not in ("round_deadline_s", "adaptive_deadline")}
    ident = {"data": fed.data.model_dump(mode="json"), "model": fed.model.model_dump(mode="json"), "system": system}
    ident["seed"] = fed.seed
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


# ============================================================================ server -> node
def _train_config(cfg: TrainConfig) -> dict[str, Any]:
    return dict(zip(_TRAIN_KEYS, (cfg.epochs, cfg.batch_size, cfg.lr, cfg.momentum, cfg.optimizer, cfg.weight_decay)))


def round_of(job: Job) -> int:
    """The round a job belongs to, from its stream ``<tag>/<t>/<k>`` (0 outside the rounds)."""
    stream = getattr(job, "stream", "")
    parts = stream.split("/")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else 0


def encode_job(job: Job, node: int, train_cfg: TrainConfig) -> Message:
    """The message carrying ``job`` to node ``node`` (module docstring)."""
    conf: dict[str, Any] = {_CLIENT: int(job.client_id), _ROUND: round_of(job), **_train_config(train_cfg)}
    if isinstance(job, TrainJob):
        conf.update({_JOB: "train", "local-epochs": int(job.epochs), "seed": int(job.seed), "stream": job.stream})
        conf.update({"sample-losses": bool(job.sample_losses)})
        if job.trainable is not None:
            conf["trainable"] = sorted(job.trainable)
        if job.max_steps is not None:
            conf["max-steps"] = int(job.max_steps)
        arrays, kind = job.start_state, MessageType.TRAIN
    elif isinstance(job, EvalJob):
        conf.update({_JOB: "evaluate", "split": job.split, "loss-only": bool(job.loss_only)})
        if job.samples is not None:
            conf["samples"] = [int(i) for i in job.samples]
            conf["has-samples"] = True
        arrays, kind = job.state, MessageType.EVALUATE
    elif isinstance(job, FineTuneJob):
        conf.update({_JOB: "fine-tune", "max-epochs": int(job.max_epochs), "patience": int(job.patience)})
        conf.update({"validation-fraction": float(job.validation_fraction), "seed": int(job.seed)})
        conf.update({"stream": job.stream, "validation-stream": job.validation_stream})
        arrays, kind = job.start_state, MessageType.TRAIN
    else:
        raise TypeError(f"no message for {type(job).__name__}")
    records = {}
    if isinstance(job, TrainJob) and job.objective is not None:
        plain, tensors = objective_fields(job.objective)
        conf[_OBJECTIVE] = objective_path(type(job.objective))
        conf.update({f"{_OBJECTIVE}.{f}": v for f, v in plain.items()})
        records = {f"{_OBJECTIVE}.{f}": ArrayRecord({n: v.detach() for n, v in st.items()}) for f, st in tensors.items()}
    content = RecordDict(
        {_ARRAYS: ArrayRecord({n: v.detach() for n, v in arrays.items()}), _CONFIG: ConfigRecord(conf), **records}
    )
    return Message(content, dst_node_id=int(node), message_type=kind)


def _objective(conf: Mapping[str, Any], c: RecordDict) -> LocalObjective | None:
    """The objective a train message carries (module docstring), or None."""
    if _OBJECTIVE not in conf:
        return None
    cls = objective_class(_need(conf, _OBJECTIVE, str))
    prefix = f"{_OBJECTIVE}."
    values: dict[str, Any] = {k[len(prefix) :]: v for k, v in conf.items() if k.startswith(prefix)}
    values.update({k[len(prefix) :]: r.to_torch_state_dict() for k, r in c.items() if k.startswith(prefix)})
    try:
        return cls(**values)
    except TypeError as e:
        raise ValueError(f"message objective {conf[_OBJECTIVE]!r}: its fields {sorted(values)} do not build it ({e})") from None


def query_message(node: int) -> Message:
    """The message asking node ``node`` who it is (its :func:`profile_of` reply)."""
    return Message(RecordDict({_CONFIG: ConfigRecord({})}), dst_node_id=int(node), message_type=MessageType.QUERY)


def _need(conf: Mapping[str, Any], key: str, kinds: type | tuple[type, ...]) -> Any:
    if key not in conf:
        raise ValueError(f"message config lacks {key!r}")
    v = conf[key]
    if isinstance(v, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise ValueError(f"message config {key!r} must be {kinds}, got {v!r}")
    if not isinstance(v, kinds):
        raise ValueError(f"message config {key!r} must be {kinds}, got {v!r}")
    return v


def decode_job(msg: Message) -> tuple[Job, TrainConfig]:
    """The job a node was sent and the training settings to run it with.

    Raises:
        ValueError: a record or setting missing or of the wrong type (named).
    """
    c = msg.content
    if _CONFIG not in c or _ARRAYS not in c:
        raise ValueError(f"{msg.metadata.message_type} message: needs records 'config' and 'arrays', got {sorted(c)}")
    conf = dict(c[_CONFIG])
    state = c[_ARRAYS].to_torch_state_dict()
    vals = [_need(conf, k, t) for k, t in zip(_TRAIN_KEYS, (int, int, (int, float), (int, float), str, (int, float)))]
    train_cfg = TrainConfig(*vals)
    k, kind = int(_need(conf, _CLIENT, int)), _need(conf, _JOB, str)
    if kind == "train":
        trainable = conf.get("trainable")
        job: Job = TrainJob(
            k,
            state,
            int(_need(conf, "local-epochs", int)),
            int(_need(conf, "seed", int)),
            str(_need(conf, "stream", str)),
            bool(conf.get("sample-losses", False)),
            None if trainable is None else frozenset(trainable),
            max_steps=int(_need(conf, "max-steps", int)) if "max-steps" in conf else None,
            objective=_objective(conf, c),
        )
    elif kind == "evaluate":
        samples = tuple(conf.get("samples") or ()) if conf.get("has-samples") else None
        job = EvalJob(k, state, str(_need(conf, "split", str)), samples, bool(conf.get("loss-only", False)))
    elif kind == "fine-tune":
        job = FineTuneJob(
            k,
            state,
            int(_need(conf, "max-epochs", int)),
            int(_need(conf, "patience", int)),
            float(_need(conf, "validation-fraction", (int, float))),
            int(_need(conf, "seed", int)),
            str(_need(conf, "stream", str)),
            str(_need(conf, "validation-stream", str)),
        )
    else:
        raise ValueError(f"message config 'job' must be 'train', 'evaluate' or 'fine-tune', got {kind!r}")
    return job, train_cfg


# ============================================================================ node -> server
def encode_result(result: Result, handler_s: float) -> RecordDict:
    """The reply content of a node's ``result``; ``handler_s``: the node's time on the job."""
    m: dict[str, Any] = {_CLIENT: int(result.client_id), "handler-s": float(handler_s)}
    rec = RecordDict()
    if result.error is not None:
        raise RuntimeError(result.error)  # Flower sends it back as an error reply
    if isinstance(result, TrainResult):
        m.update({"train-loss": float(result.loss), "sum-sq-sample-loss": float(result.sum_sq_sample_loss)})
        m["num-sample-losses"] = int(result.num_sample_losses)
        rec[_ARRAYS] = ArrayRecord(result.state)
    elif isinstance(result, EvalResult):
        m.update({"accuracy": result.accuracy, "f1-macro": result.f1_macro, "loss": result.loss})
        m["num-examples"] = int(result.num_examples)
    else:
        m.update({"epochs": int(result.epochs), "best-epoch": int(result.best_epoch), "val-loss": float(result.val_loss)})
        m["curve"] = [float(x) for x in result.curve]
        rec[_ARRAYS] = ArrayRecord(result.state)
    rec[_METRICS] = MetricRecord(m)
    return rec


def failed_result(job: Job, why: str, failure: str | None = None, measured: Measured | None = None) -> Result:
    """The result of ``job`` that did not come back (``failure``: ``dropout`` / ``timeout``)."""
    if isinstance(job, TrainJob):
        return TrainResult(job.client_id, None, math.nan, error=why, failure=failure, measured=measured)
    if isinstance(job, EvalJob):
        return EvalResult(job.client_id, math.nan, math.nan, math.nan, 0, why)
    return FineTuneResult(job.client_id, None, error=why)


def _check_state(got: Mapping[str, torch.Tensor], model: Mapping[str, torch.Tensor]) -> str | None:
    extra, missing = sorted(set(got) - set(model)), sorted(set(model) - set(got))
    if extra or missing:
        return f"its arrays do not match the model (extra {extra}, missing {missing})"
    for n, v in model.items():
        if got[n].dtype != v.dtype or tuple(got[n].shape) != tuple(v.shape):
            return f"entry {n!r} is {got[n].dtype}{tuple(got[n].shape)}, the model's is {v.dtype}{tuple(v.shape)}"
    return None


def _reply_state(c: RecordDict, model: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor] | None, str | None]:
    arrays = c.get(_ARRAYS)
    if not isinstance(arrays, ArrayRecord):
        return None, "the reply holds no 'arrays' record"
    bound = MAX_REPLY_FACTOR * state_bytes(model) + 1024
    try:
        size = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in arrays.values())
    except (TypeError, ValueError) as e:
        return None, f"the reply's arrays have no readable dtype or shape ({type(e).__name__}: {e})"
    if size > bound:
        return None, f"the reply's arrays hold {size} bytes, over the bound {int(bound)} for this model"
    try:
        got = arrays.to_torch_state_dict()
    except Exception as e:  # undecodable arrays
        return None, f"the reply's arrays cannot be read ({type(e).__name__}: {e})"
    bad = _check_state(got, model)
    return (None, bad) if bad else (got, None)


def decode_result(job: Job, reply: Message, model: Mapping[str, torch.Tensor], measured: Measured | None) -> Result:
    """``job``'s result from ``reply``, validated against the model's entries (module
    docstring); a reply that does not fit gives a failed result with the reason. Error
    replies are the caller's (they carry Flower's error codes)."""
    c = reply.content
    m = c.get(_METRICS)
    if not isinstance(m, MetricRecord):
        return failed_result(job, f"the reply holds no 'metrics' record (records: {sorted(c)})", measured=measured)
    try:
        if m.get(_CLIENT) != job.client_id:
            return failed_result(job, f"the reply comes from client {m.get(_CLIENT)!r}, not {job.client_id}", measured=measured)
        if isinstance(job, EvalJob):
            return EvalResult(job.client_id, float(m["accuracy"]), float(m["f1-macro"]), float(m["loss"]), int(m["num-examples"]))
        state, why = _reply_state(c, model)
        if why is not None:
            return failed_result(job, why, measured=measured)
        if isinstance(job, TrainJob):
            loss, sq, num = float(m["train-loss"]), float(m["sum-sq-sample-loss"]), int(m["num-sample-losses"])
            return TrainResult(job.client_id, state, loss, sq, num, measured=measured)
        curve = tuple(float(x) for x in m["curve"])
        return FineTuneResult(job.client_id, state, int(m["epochs"]), int(m["best-epoch"]), float(m["val-loss"]), curve)
    except (KeyError, TypeError, ValueError) as e:
        return failed_result(job, f"the reply's metrics are malformed ({type(e).__name__}: {e})", measured=measured)


def handler_s(reply: Message) -> float:
    """The node's time on the job (s), 0 when the reply does not say."""
    m = reply.content.get(_METRICS) if reply.has_content() else None
    try:
        return float(m["handler-s"]) if isinstance(m, MetricRecord) else 0.0
    except (KeyError, TypeError, ValueError):
        return 0.0


# ============================================================================ who is who
def profile_reply(fed, k: int) -> RecordDict:
    """A node's answer to a query: the stable client id and its federation's identity."""
    c = fed.clients[k]
    desc = fed.fleet.describe(k)
    rec = {
        _CLIENT: int(k),
        "num-partitions": fed.num_clients,
        "num-examples": c.num_samples,
        "holdout-examples": len(c.holdout_indices),
        "device": desc["device"],
        "network": desc["network"],
        "federation": federation_hash(fed),
    }
    return RecordDict({_PROFILE: ConfigRecord(rec)})


def profile_of(reply: Message) -> dict[str, Any]:
    """The profile a query reply carries ({} when it carries none)."""
    return dict(reply.content[_PROFILE]) if reply.has_content() and _PROFILE in reply.content else {}


def profile_problem(p: dict[str, Any], fed, node: int) -> str | None:
    """Why node ``node``'s profile does not fit the server's federation (None: it fits)."""
    n = fed.num_clients
    k = p.get("client-id")
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < n:
        return (
            f"node {node} serves client-id {k!r}, but the server's federation has clients 0..{n - 1} "
            f"(data.num_clients = {n}); give each SuperNode partition-id=K num-partitions={n}"
        )
    if p.get("federation") != federation_hash(fed):
        diffs = []
        if p.get("num-partitions") != n:
            diffs.append(f"num-partitions {p.get('num-partitions')} vs data.num_clients {n}")
        if p.get("num-examples") != fed.clients[k].num_samples:
            diffs.append(f"client {k} has {p.get('num-examples')} training samples there, {fed.clients[k].num_samples} here")
        desc = fed.fleet.describe(k)
        if (p.get("device"), p.get("network")) != (desc["device"], desc["network"]):
            diffs.append(f"profiles {p.get('device')}/{p.get('network')} there, {desc['device']}/{desc['network']} here")
        return (
            f"node {node} (client {k}) built its federation from other settings than the server "
            f"({'; '.join(diffs) or 'data/model/system/seed differ'}); give the SuperNodes and the ServerApp the same "
            f"experiment (run config / fedselect-config: data, model, system, seed)"
        )
    return None


def profile_client(p: dict[str, Any]) -> int:
    """The client id of a profile that passed :func:`profile_problem`."""
    return int(p[_CLIENT])
