"""One experiment's simulated system: a resolved selector and algorithm on a federation, with the
fault model, the client trainer and the selector's context wired together.

:class:`Simulation` is what the round loop (:mod:`fedselect.runner`) plays with. It knows how to
run the selected clients' local updates with faults applied (:meth:`Simulation.train`), which
metric columns a run writes, and how to snapshot / restore every piece of state for checkpoints.
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
from fedselect.config import ConfigError
from fedselect.federation import Federation
from fedselect.fl.clients import TrainJob
from fedselect.fl.faults import FaultModel, Injection, corrupt_state, non_finite_entries
from fedselect.fl.metrics import CORE_COLUMNS
from fedselect.fl.pool import ClientTrainer, usable_cores
from fedselect.fl.services import FederationContext, SimulatedContext
from fedselect.fl.types import ClientOutcome
from fedselect.resolve import Resolved
from fedselect.selectors.base import RoundView, Selection, Selector
from fedselect.system import RoundDraws

log = logging.getLogger("fedselect")

#: columns the loop adds after the core ones: how many updates were averaged, and 1 when
#: clients were selected but none survived (the global model is then unchanged)
RELIABILITY_COLUMNS = ["aggregated", "round_failed"]
#: columns of selectors that probe candidates before choosing (``Selector.probes``)
PROBE_COLUMNS = ["probe_latency_s", "probe_upload_bytes", "probe_download_bytes", "candidates_probed"]


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


def make_trainer(fed: Federation, train_cfg, workers: int | None, device: str = "auto") -> ClientTrainer:
    """The client trainer of a run (:class:`fedselect.fl.pool.ClientTrainer`): ``workers``
    processes (None: the ``FEDSELECT_WORKERS`` environment variable, else the usable cores; 0:
    in this process), on ``device`` (``auto``: a GPU when one is available).

    Raises:
        ValueError: ``FEDSELECT_WORKERS`` is not an integer >= 0; a bad device.
    """
    if workers is None:
        env = os.environ.get("FEDSELECT_WORKERS")
        if env is None or env.strip() == "":
            workers = usable_cores()
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

    Attributes:
        resolved, fed, settings: what it was built from.
        algorithm, selector: the two plug-ins.
        ctx: the selector's context (:class:`fedselect.fl.services.SimulatedContext`).
        faults: the fault model. trainer: runs local updates.
        columns: the ``metrics.csv`` header of this run.
    """

    def __init__(self, resolved: Resolved, fed: Federation, trainer=None, workers: int | None = None):
        self.resolved, self.fed, self.settings = resolved, fed, resolved.settings
        check_model(resolved, fed)
        tr = resolved.config.train
        self.trainer = trainer or make_trainer(fed, resolved.train_cfg, tr.workers if workers is None else workers, tr.device)
        try:
            self.algorithm: Algorithm = resolved.algorithm(
                AlgorithmContext(fed, resolved.train_cfg, resolved.settings, self.trainer.evaluate), resolved.algorithm_options
            )
            self.upload_keys = self.algorithm.upload_keys()
            self.ctx = self.make_context()
            self.selector: Selector = resolved.selector(self.ctx, resolved.selector_options)
            self.faults = make_fault_model(resolved, fed)
        except BaseException:
            self.trainer.close()
            raise
        base = CORE_COLUMNS + [c for c in RELIABILITY_COLUMNS if c not in CORE_COLUMNS]
        extra = (PROBE_COLUMNS if self.selector.probes else []) + list(self.selector.extra_columns) + self.algorithm.columns()
        self.columns = base + [c for i, c in enumerate(extra) if c not in base and c not in extra[:i]]

    def make_context(self) -> FederationContext:
        """The selector's context: the simulator's (the Flower strategy's run returns one whose
        client services are messages to the nodes)."""
        return SimulatedContext(
            self.fed,
            self.settings,
            self.resolved.train_cfg,
            self.upload_keys,
            self.algorithm.download_keys(),
            self.algorithm.payload_bytes(),
            self.trainer,
        )

    @property
    def rounds(self) -> int:
        return self.settings.rounds

    # ---------------------------------------------------------------- a round's pieces
    def view(self, t: int, draws: RoundDraws, state: ServerState) -> RoundView:
        """What the selector sees at the start of round ``t``."""
        probe = None
        if self.selector.probes:

            def probe(ids: Sequence[int], samples: Sequence[Sequence[int]] | None = None) -> list[float]:
                ids = [int(k) for k in ids]
                return self.ctx.client_losses([self.algorithm.start_state(state, k) for k in ids], ids, samples)

        return RoundView(t, draws, state.model if self.selector.wants_global_state else None, probe)

    def check_selection(self, t: int, sel: Selection) -> None:
        """Raises RuntimeError on repeated or unknown ids (a selector bug)."""
        n = self.settings.num_clients
        if len(set(sel.clients)) != len(sel.clients) or any(not 0 <= k < n for k in sel.clients):
            raise RuntimeError(
                f"selector {self.selector.name!r} selected invalid clients {list(sel.clients)} in round {t} "
                f"(ids must be distinct, in 0..{n - 1})"
            )

    def train(self, t: int, clients: Sequence[int], state: ServerState, draws: RoundDraws) -> list[ClientOutcome]:
        """Local updates of the selected ``clients`` in round ``t`` with faults applied, one
        outcome per client in selection order; a failed one has ``failed`` set to a kind of
        :data:`fedselect.fl.types.FAILURE_KINDS`, ``state`` None and the failure's latency
        (docs/reliability.md)."""
        faults, epochs = self.faults, self.settings.local_epochs
        dropped = faults.dropped(t)
        kinds = {}
        for k in clients:
            kind = faults.injected(t, k)
            kinds[k] = "drop" if kind is None and dropped[k] else kind
        jobs = [
            TrainJob(
                k,
                self.algorithm.start_state(state, k),
                epochs,
                self.fed.seed,
                f"train/{t}/{k}",
                self.selector.wants_sample_losses,
            )
            for k in clients
            if kinds[k] not in ("drop", "raise")
        ]
        results = {r.client_id: r for r in self.trainer.train(jobs)}
        deadline = faults.deadline_s
        out = []
        for k in clients:
            kind = kinds[k]
            n_k = self.fed.clients[k].num_samples
            if kind == "drop":
                lat = deadline if deadline is not None else 0.0
                log.info(
                    "round %d: client %d dropped out (%s); failure latency %.4g s",
                    t,
                    k,
                    "injected" if faults.injected(t, k) else f"p={faults.dropout[k]:.3g}",
                    lat,
                )
                out.append(ClientOutcome(k, t, None, n_k, math.nan, 0, 0.0, 0.0, 0.0, lat, 0, 0, failed="dropout"))
                continue
            cost = self.ctx.client_cost(k, epochs, draws)
            res = results.get(k)
            error = "injected client error" if kind == "raise" else (res.error if res is not None else None)
            if error is not None:
                lat = cost.compute_s + (cost.download_s if self.settings.count_download else 0.0)
                log.warning("round %d: client %d failed during local training (%s); failure latency %.4g s", t, k, error, lat)
                out.append(
                    ClientOutcome(
                        k,
                        t,
                        None,
                        n_k,
                        math.nan,
                        epochs,
                        cost.compute_s,
                        0.0,
                        cost.download_s,
                        lat,
                        0,
                        cost.download_bytes,
                        failed="error",
                    )
                )
                continue
            o = ClientOutcome(
                k,
                t,
                res.state,
                n_k,
                res.loss,
                epochs,
                cost.compute_s,
                cost.upload_s,
                cost.download_s,
                cost.latency_s,
                cost.upload_bytes,
                cost.download_bytes,
                None,
                res.sum_sq_sample_loss,
                res.num_sample_losses,
            )
            if kind in ("nan", "inf"):
                o = replace(o, state=corrupt_state(o.state, kind, self.upload_keys))
            if kind == "timeout" or (deadline is not None and o.latency_s > deadline):
                why = "injected timeout" if kind == "timeout" else f"latency {o.latency_s:.4g} s"
                log.info("round %d: client %d missed the deadline of %.4g s (%s); update discarded", t, k, deadline, why)
                o = replace(o, state=None, upload_bytes=0, latency_s=float(deadline), failed="timeout")
            else:
                bad = non_finite_entries(o.state)
                if bad:
                    code = "nan" if "nan" in bad.values() else "inf"
                    log.warning(
                        "round %d: client %d update rejected, not averaged: non-finite values (%s) in %s", t, k, code, sorted(bad)
                    )
                    o = replace(o, state=None, failed=code)
            out.append(o)
        return out

    def commit(self, t: int, old: ServerState, new: ServerState | None) -> tuple[ServerState, bool]:
        """The state to keep after round ``t``'s aggregation: ``new`` when it exists and is
        finite everywhere it changed, else ``old``. Returns (state, committed)."""
        if new is None:
            return old, False
        for where, st in new.changed_entries(old):
            bad = non_finite_entries(st)
            if bad:  # finite inputs can still overflow: keep the previous state
                log.error(
                    "round %d: the aggregate holds non-finite values in %s (%s); the server state is left unchanged",
                    t,
                    where,
                    sorted(bad),
                )
                return old, False
        return new, True

    def for_selector(self, outcomes: Sequence[ClientOutcome]) -> list[ClientOutcome]:
        """Outcomes as the selector may see them (weights only if it asked for them)."""
        if self.selector.wants_weights:
            return list(outcomes)
        return [replace(o, state=None) if o.state is not None else o for o in outcomes]

    # ---------------------------------------------------------------- checkpoints
    def snapshot(self, state: ServerState) -> dict[str, Any]:
        """Everything needed to continue exactly: server state, selector and algorithm state,
        and every generator reachable from the selector and the algorithm."""
        return {
            "server": state.to_dict(),
            "selector": self.selector.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "generators": generator_states(self._components()),
        }

    def restore(self, snap: dict[str, Any]) -> ServerState:
        """Put the selector and the algorithm back in a :meth:`snapshot`; returns the server state."""
        self.algorithm.load_state_dict(snap["algorithm"])
        self.selector.load_state_dict(snap["selector"])
        restore_generator_states(self._components(), snap.get("generators", {}))
        return ServerState.from_dict(snap["server"])

    def _components(self) -> dict[str, Any]:
        return {"selector": self.selector, "algorithm": self.algorithm}

    def close(self) -> None:
        self.trainer.close()


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
