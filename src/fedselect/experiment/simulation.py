"""One run's components on one federation: the resolved selector and algorithm, the fault
model, the selector's context with its cost model, and the transport that carries the clients'
jobs (:mod:`fedselect.fl.work`).

:class:`Simulation` is what the round (:mod:`fedselect.fl.round`) plays with, whatever the
engine: the simulator gives it the :class:`~fedselect.fl.work.LocalTransport` over the worker
pool, Flower a transport whose jobs are messages to the nodes. It knows which metric columns a
run writes and how to snapshot / restore every piece of state for checkpoints.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from dataclasses import replace
from typing import Any, Sequence

import numpy as np
import torch

from fedselect.algorithms.base import Algorithm, AlgorithmContext, ServerState
from fedselect.config.schema import ConfigError
from fedselect.experiment.metrics import CORE_COLUMNS
from fedselect.experiment.resolve import Resolved
from fedselect.fl.asynchronous import ASYNC_COLUMNS, AsyncSettings
from fedselect.fl.availability import make_availability
from fedselect.fl.clock import FleetClock
from fedselect.fl.fairness import PARTICIPATION_COLUMNS
from fedselect.fl.faults import FaultModel, Injection
from fedselect.fl.local.placement import resolve_device, usable_cores
from fedselect.fl.local.pool import ClientTrainer
from fedselect.fl.local.pool_rule import auto_workers
from fedselect.fl.services import FederationContext
from fedselect.fl.types import Evaluation
from fedselect.fl.work import LocalTransport
from fedselect.selectors.base import RoundView, Selection, Selector
from fedselect.world.federation import Federation
from fedselect.world.system import RoundDraws

log = logging.getLogger("fedselect")

#: columns the loop adds after the core ones: how many updates were averaged, and 1 when
#: clients were selected but none survived (the global model is then unchanged)
RELIABILITY_COLUMNS = ["aggregated", "aggregated_ids", "round_failed"]
#: columns of selectors that probe candidates before choosing (``Selector.probes``)
PROBE_COLUMNS = ["probe_latency_s", "probe_upload_bytes", "probe_download_bytes", "candidates_probed"]
#: the figures on the server's validation set that a selector's decisions read (a selector that
#: ``wants_evaluation``, with ``selection_eval: validation``), beside the reported test figures
VALIDATION_COLUMNS = ["val_accuracy", "val_f1_macro", "val_loss"]


def make_fault_model(r: Resolved, fed: Federation) -> FaultModel:
    """The fault model of ``faults`` and ``system.round_deadline_s`` on ``fed``'s fleet.

    Raises:
        ValueError: a ``dropout_by_device`` / ``dropout_by_network`` name no client has (lists
        the profile names of this fleet).
    """
    cfg = r.config
    f = cfg.faults
    injections = [
        Injection(
            inj.kind,
            None if inj.round_set() is None else frozenset(inj.round_set()),
            None if inj.client_set() is None else frozenset(inj.client_set()),
        )
        for inj in f.inject
    ]
    fleet = fed.fleet
    return FaultModel.build(
        cfg.seed,
        [d.name for d in fleet.devices],
        [n.name for n in fleet.networks],
        f.dropout,
        f.dropout_by_device,
        f.dropout_by_network,
        injections,
        cfg.system.round_deadline_s,
    )


def make_trainer(fed: Federation, train_cfg, workers: int | None, device: str = "auto", config=None) -> ClientTrainer:
    """The client trainer of a run (:class:`fedselect.fl.local.pool.ClientTrainer`): ``workers``
    processes (0: in this process; None: the ``FEDSELECT_WORKERS`` environment variable, else
    the usable cores where the run's work repays a pool's start-up and 0 where it does not:
    :func:`fedselect.fl.local.pool_rule.auto_workers` on ``config``, the run's
    :class:`fedselect.config.schema.ExperimentConfig`; without it, the usable cores), on ``device``
    (``auto``: a GPU when one is available).

    Raises:
        ValueError: ``FEDSELECT_WORKERS`` is not an integer >= 0; a bad device.
    """
    if workers is None:
        env = os.environ.get("FEDSELECT_WORKERS")
        if env is None or env.strip() == "":
            workers = usable_cores()
            if config is not None and resolve_device(device).type == "cpu":
                workers = auto_workers(fed, config, workers)
        else:
            try:
                workers = int(env)
            except ValueError:
                workers = -1
            if workers < 0:
                raise ValueError(f"FEDSELECT_WORKERS must be an integer >= 0 (0 = in this process), got {env!r}")
    return ClientTrainer.from_federation(fed, train_cfg, workers=workers, device=device)


def check_model(r: Resolved, fed: Federation) -> None:
    """Build the model once for this data's input shape (options were checked by the resolve
    step; some models accept only some shapes).

    Raises:
        ConfigError: names the model, its options, the data's input shape and what went wrong.
    """
    m = r.config.model
    try:
        fed.new_model()
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"model.options: model {m.name!r} cannot be built with options {m.options} for inputs of shape "
            f"{tuple(fed.input_shape)} and {fed.num_classes} classes ({type(e).__name__}: {e})"
        ) from None


class Simulation:
    """The components of one run on one federation (module docstring).

    Args:
        resolved, fed: the resolved experiment and its federation.
        trainer: the training engine of the local transport (default: a worker pool of
            ``workers`` processes, :func:`make_trainer`).
        workers: None = ``train.workers`` (where that is null too, :func:`make_trainer` decides).
        transport: carries the jobs (default: :class:`fedselect.fl.work.LocalTransport` over
            ``trainer``).
        session: an engine's session (:class:`fedselect.engines.Session`) giving the transport,
            connected once the model is checked: how the experiment layer runs on any engine.

    Attributes:
        resolved, fed, settings: what it was built from.
        algorithm, selector: the two plug-ins.
        ctx: the selector's context (:class:`fedselect.fl.services.FederationContext`).
        faults: the fault model. transport: carries the clients' jobs.
        columns: the ``metrics.csv`` header of this run.
    """

    def __init__(
        self, resolved: Resolved, fed: Federation, trainer=None, workers: int | None = None, transport=None, session=None
    ):
        self.resolved, self.fed, self.settings = resolved, fed, resolved.settings
        check_model(resolved, fed)
        tr = resolved.config.train
        if session is not None:
            transport = session.connect(resolved, fed, workers)
        elif transport is None:
            w = tr.workers if workers is None else workers
            trainer = trainer or make_trainer(fed, resolved.train_cfg, w, tr.device, config=resolved.config)
            transport = LocalTransport(fed, trainer, resolved.train_cfg)
        self.transport = transport
        try:
            self.algorithm: Algorithm = resolved.algorithm(
                AlgorithmContext(fed, resolved.train_cfg, resolved.settings, transport), resolved.algorithm_options
            )
            self.upload_keys = self.algorithm.upload_keys()
            self.ctx = FederationContext(
                fed,
                self.settings,
                resolved.train_cfg,
                self.upload_keys,
                self.algorithm.download_keys(),
                self.algorithm.payload_bytes(),
                transport,
            )
            self.selector: Selector = resolved.selector(self.ctx, resolved.selector_options)
            self.faults = make_fault_model(resolved, fed)
            cfg = resolved.config
            self.clock = FleetClock(
                make_availability(cfg.availability, fed.num_clients, cfg.seed),
                self.settings,
                resolved.train_cfg.batch_size,
                resolved.train_cfg.momentum if resolved.train_cfg.optimizer == "sgd" else 0.0,
                cfg.overselect,
                cfg.straggler,
                cfg.system.adaptive_deadline,
            )
        except BaseException:
            self.transport.close()
            raise
        #: ``mode: async``: its settings (:mod:`fedselect.fl.asynchronous`); None for rounds
        self.async_settings = AsyncSettings.from_config(cfg.async_) if cfg.mode == "async" else None
        #: the round scores the model on the server's validation set for the selector's decisions
        self.validates = self.selector.wants_evaluation and self.settings.selection_eval == "validation"
        base = CORE_COLUMNS + [c for c in RELIABILITY_COLUMNS if c not in CORE_COLUMNS]
        if self.async_settings is not None:
            base += ASYNC_COLUMNS
        base += list(PARTICIPATION_COLUMNS)  # every run: how evenly the clients took part so far
        if self.validates:
            base += VALIDATION_COLUMNS
        extra = (PROBE_COLUMNS if self.selector.probes else []) + list(self.selector.extra_columns) + self.algorithm.columns()
        self.columns = base + [c for i, c in enumerate(extra) if c not in base and c not in extra[:i]]

    @property
    def rounds(self) -> int:
        return self.settings.rounds

    def transport_summary(self) -> dict[str, Any]:
        """What the transport tells about itself for ``summary.json`` ({} for the simulator's)."""
        return self.transport.summary()

    # ---------------------------------------------------------------- what the round asks
    def evaluate(self, t: int, state: ServerState) -> Evaluation:
        """The figures after round ``t`` (0: before round 1): the algorithm's reported ones (the
        test set, or the clients' held-out splits) and, when the selector's decisions read model
        quality on the validation set (:attr:`validates`), the same model(s) on the server's
        validation set as ``Evaluation.validation`` (:meth:`Algorithm.validate`)."""
        ev = self.algorithm.evaluate(t, state)
        return replace(ev, validation=self.algorithm.validate(t, state)) if self.validates else ev

    def decision_figures(self, ev: Evaluation) -> Evaluation | None:
        """What the selector's decisions may read of the evaluation ``ev``: its validation
        figures (``selection_eval: validation``), ``ev`` itself (``selection_eval: test``, the
        papers' protocol), or None for a selector that does not declare ``wants_evaluation``."""
        if not self.selector.wants_evaluation:
            return None
        return ev.validation if self.validates else ev

    def view(self, t: int, draws: RoundDraws, state: ServerState, online: np.ndarray | None = None) -> RoundView:
        """What the selector sees at the start of round ``t``: the clients online (``online``,
        ``(N,)`` bool, None = all), how many to pick (``ceil(overselect x U)``), the global model
        only when it asks for it, and a probe only when it probes. A client the round's fault
        draws make unreachable, or that is offline, cannot answer a probe: its loss is NaN and
        nothing is sent to it."""
        probe = None
        available = None if online is None else np.flatnonzero(online)
        if self.selector.probes:
            unreachable = self.faults.unreachable(t)
            if online is not None:
                unreachable = unreachable | set(np.flatnonzero(~online).tolist())

            def probe(ids: Sequence[int], samples: Sequence[Sequence[int]] | None = None) -> list[float]:
                ids = [int(k) for k in ids]
                ask = [i for i, k in enumerate(ids) if k not in unreachable]
                got = self.ctx.client_losses(
                    [self.algorithm.start_state(state, ids[i]) for i in ask],
                    [ids[i] for i in ask],
                    None if samples is None else [samples[i] for i in ask],
                )
                out = [math.nan] * len(ids)
                for i, loss in zip(ask, got):
                    out[i] = loss
                return out

        glob = state.model if self.selector.wants_global_state else None
        return RoundView(t, draws, glob, probe, available, self.clock.select_count())

    def check_selection(self, t: int, sel: Selection, online: np.ndarray | None = None) -> None:
        """Raises RuntimeError on repeated or unknown ids, or an offline client (a selector bug)."""
        n = self.settings.num_clients
        if len(set(sel.clients)) != len(sel.clients) or any(not 0 <= k < n for k in sel.clients):
            raise RuntimeError(
                f"selector {self.selector.name!r} selected invalid clients {list(sel.clients)} in round {t} "
                f"(ids must be distinct, in 0..{n - 1})"
            )
        off = [int(k) for k in sel.clients if online is not None and not online[k]]
        if off:
            raise RuntimeError(
                f"selector {self.selector.name!r} selected offline clients {off} in round {t}; a selector may pick only "
                f"RoundView.available"
            )

    # ---------------------------------------------------------------- checkpoints
    def snapshot(self, state: ServerState) -> dict[str, Any]:
        """Everything needed to continue exactly: server state, selector and algorithm state,
        and every generator reachable from the selector and the algorithm."""
        return {
            "server": state.to_dict(),
            "selector": self.selector.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "generators": generator_states(self._components()),
            "clock": self.clock.state_dict(),
        }

    def restore(self, snap: dict[str, Any]) -> ServerState:
        """Put the selector and the algorithm back in a :meth:`snapshot`; returns the server state."""
        self.algorithm.load_state_dict(snap["algorithm"])
        self.selector.load_state_dict(snap["selector"])
        restore_generator_states(self._components(), snap.get("generators", {}))
        if "clock" in snap:
            self.clock.load_state_dict(snap["clock"])
        return ServerState.from_dict(snap["server"])

    def _components(self) -> dict[str, Any]:
        return {"selector": self.selector, "algorithm": self.algorithm}

    def close(self) -> None:
        self.transport.close()


# ------------------------------------------------------------------------ RNG coverage
_SKIP_ATTRS = {"fed", "ctx", "cfg", "options", "train_cfg", "settings"}


def find_generators(obj: Any, prefix: str = "", depth: int = 5, _seen: set[int] | None = None) -> dict[str, Any]:
    """Every ``numpy.random.Generator`` and ``torch.Generator`` reachable from ``obj``'s
    attributes (through plain objects, dicts, lists and tuples; not through the federation,
    the context, the config, tensors, arrays or torch modules), by path such as
    ``selector.agent.rng``."""
    seen = set() if _seen is None else _seen
    out: dict[str, Any] = {}
    if id(obj) in seen or depth < 0:
        return out
    seen.add(id(obj))
    if isinstance(obj, (np.random.Generator, torch.Generator)):
        return {prefix or ".": obj}
    if (
        isinstance(obj, (torch.Tensor, np.ndarray, torch.nn.Module, Federation, FederationContext, str, bytes, int, float))
        or obj is None
    ):
        return out
    if isinstance(obj, dict):
        items = [(str(k) if isinstance(k, (str, int)) else f"#{i}", v) for i, (k, v) in enumerate(obj.items())]
    elif isinstance(obj, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(obj)]
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        items = [(k, v) for k, v in vars(obj).items() if k not in _SKIP_ATTRS]
    else:
        return out
    for k, v in items:
        out.update(find_generators(v, f"{prefix}.{k}" if prefix else k, depth - 1, seen))
    return out


def generator_states(obj: Any) -> dict[str, Any]:
    """Snapshot of every generator reachable from ``obj`` (see :func:`find_generators`)."""
    out = {}
    for path, g in find_generators(obj).items():
        out[path] = (
            ("numpy", copy.deepcopy(g.bit_generator.state))
            if isinstance(g, np.random.Generator)
            else ("torch", g.get_state().clone())
        )
    return out


def restore_generator_states(obj: Any, states: dict[str, Any]) -> None:
    """Put the generators reachable from ``obj`` back in the states of :func:`generator_states`."""
    current = find_generators(obj)
    for path, (kind, st) in states.items():
        g = current.get(path)
        if g is None:
            log.warning("checkpoint holds the state of generator %s, which the run no longer has", path)
        elif kind == "numpy":
            g.bit_generator.state = copy.deepcopy(st)
        else:
            g.set_state(st.clone())
