"""The rules a round applies to what came back (docs/reliability.md, docs/fleets.md), each once.

:mod:`fedselect.fl.round` plays the round's phases; these are the rules its ``settle`` (and the
asynchronous server's, :mod:`fedselect.fl.asynchronous`) applies:

* :func:`outcome_of`: one chosen client's :class:`~fedselect.fl.types.ClientOutcome` from its
  job's result: the simulated faults, what the transport reports, the deadline, a straggler's
  partial work, non-finite uploads, each with its failure latency;
* :func:`cancel_late`: over-selection's cancellation of the participants late for the round;
* :func:`commit`: an aggregate is kept only when it is finite everywhere it changed;
* :func:`log_failures`: the round's one line on the clients that failed.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Sequence

from fedselect.fl.faults import corrupt_state, non_finite_entries, survivor_weights
from fedselect.fl.types import ClientOutcome, ServerState
from fedselect.fl.work import TrainResult

log = logging.getLogger("fedselect")

__all__ = ["cancel_late", "commit", "log_failures", "outcome_of"]


def commit(t: int, old: ServerState, new: ServerState | None) -> tuple[ServerState, bool]:
    """The state to keep after round ``t``'s aggregation: ``new`` when it exists and is finite
    everywhere it changed, else ``old``. Returns (state, committed)."""
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


def _failed(k: int, t: int, n_k: int, kind: str, latency_s: float, epochs: int = 0, cost=None) -> ClientOutcome:
    """The outcome of a client that failed: its failure latency and the bytes that moved."""
    if cost is None:
        return ClientOutcome(k, t, None, n_k, math.nan, 0, 0.0, 0.0, 0.0, float(latency_s), 0, 0, failed=kind)
    return ClientOutcome(
        k, t, None, n_k, math.nan, epochs, cost.compute_s, 0.0, cost.download_s, float(latency_s), 0, cost.download_bytes, kind
    )


def outcome_of(run, plan, k: int, res: TrainResult | None) -> ClientOutcome:
    """Client ``k``'s outcome in ``plan`` (a :class:`~fedselect.fl.round.RoundPlan`) from its
    job's result ``res`` (None: it had no job, e.g. a simulated dropout): every failure rule of
    the round (docs/reliability.md) applied once: a simulated fault, what the transport reports
    (a node that never answered: ``dropout``; silent past a wall-clock deadline: ``timeout``; an
    error: ``error``), the deadline, non-finite uploads."""
    t, epochs, cost_model = plan.round, run.settings.local_epochs, run.ctx.cost
    fault, deadline, n_k = plan.faults[k], plan.deadline_s, run.fed.clients[k].num_samples
    m = res.measured if res is not None and run.transport.measured else None  # measured round trip, bytes
    if k in plan.offline_s and fault != "drop":  # its online period ended before it could report
        lat = plan.offline_s[k]
        log.info("round %d: client %d went offline %.4g s into its work (availability); failure latency %.4g s", t, k, lat, lat)
        return _failed(k, t, n_k, "dropout", lat)
    if fault == "drop" or (res is not None and res.failure == "dropout"):
        lat = cost_model.dropout_latency_s(deadline) if m is None else m.round_trip_s
        why = res.error if fault != "drop" else ("injected" if run.faults.injected(t, k) else f"p={run.faults.dropout[k]:.3g}")
        log.info("round %d: client %d dropped out (%s); failure latency %.4g s", t, k, why, lat)
        return _failed(k, t, n_k, "dropout", lat)
    if res is not None and res.failure == "timeout":  # silent at a wall-clock deadline (measured)
        log.info("round %d: client %d missed the deadline of %.4g s (%s); update discarded", t, k, deadline, res.error)
        return _failed(k, t, n_k, "timeout", float(deadline))
    cost = cost_model.client_cost(k, epochs, plan.draws)
    error = "injected client error" if fault == "raise" else ("no result" if res is None else res.error)
    if error is not None:
        lat = cost_model.error_latency_s(cost) if m is None else m.round_trip_s
        log.warning("round %d: client %d failed during local training (%s); failure latency %.4g s", t, k, error, lat)
        return _failed(k, t, n_k, "error", lat, epochs, cost)
    comp, up_s, down_s, lat = cost.compute_s, cost.upload_s, cost.download_s, cost.latency_s
    up_b, down_b = cost.upload_bytes, cost.download_bytes
    steps = plan.partial_steps.get(k)
    if steps is not None:  # a straggler's partial work: the steps done by the deadline, then the upload
        comp = comp * steps / run.clock.full_steps(run, k)
        lat = min(float(deadline), comp + up_s + (down_s if run.settings.count_download else 0.0))
    if m is not None:
        up_b, down_b, comp, down_s, lat = m.upload_bytes, m.download_bytes, m.handler_s, 0.0, m.round_trip_s
        up_s = max(0.0, lat - comp)
    o = ClientOutcome(
        k,
        t,
        res.state,
        n_k,
        res.loss,
        epochs,
        comp,
        up_s,
        down_s,
        lat,
        up_b,
        down_b,
        None,
        res.sum_sq_sample_loss,
        res.num_sample_losses,
        steps,
        cost.latency_s if steps is not None else None,
    )
    if fault in ("nan", "inf"):
        o = replace(o, state=corrupt_state(o.state, fault, run.algorithm.upload_keys()))
    if fault == "timeout" or (deadline is not None and steps is None and o.latency_s > deadline):
        why = "injected timeout" if fault == "timeout" else f"latency {o.latency_s:.4g} s"
        log.info("round %d: client %d missed the deadline of %.4g s (%s); update discarded", t, k, deadline, why)
        planned = o.latency_s if o.latency_s > deadline else None  # an injected hang within the deadline: unknown
        return replace(o, state=None, upload_bytes=0, latency_s=float(deadline), failed="timeout", planned_latency_s=planned)
    bad = non_finite_entries(o.state)
    if bad:
        code = "nan" if "nan" in bad.values() else "inf"
        log.warning("round %d: client %d update rejected, not averaged: non-finite values (%s) in %s", t, k, code, sorted(bad))
        return replace(o, state=None, failed=code)
    return o


def cancel_late(t: int, outcomes: Sequence[ClientOutcome], target: int) -> tuple[ClientOutcome, ...]:
    """Over-selection (Oort's over-commitment; docs/fleets.md): once ``target`` (U) updates have
    arrived, the round ends at that moment ``T``; every participant that had not reported by then
    is cancelled (code ``cancelled``): its download counts, it uploads nothing, and its latency
    is ``T`` (it never lengthens the round); ``planned_latency_s`` keeps the latency it would
    have reported, when it would have delivered (FedScale reports that duration to Oort). Order
    of arrival: latency, then client id. With fewer than ``target`` good updates the round waits
    for everyone and nothing is cancelled."""
    order = sorted(range(len(outcomes)), key=lambda i: (outcomes[i].latency_s, outcomes[i].client_id))
    good, end = 0, None
    for pos, i in enumerate(order):
        good += outcomes[i].ok
        if good == target:
            end, late = outcomes[i].latency_s, set(order[pos + 1 :])
            break
    if end is None or not late:
        return tuple(outcomes)
    out = list(outcomes)
    for i in late:
        o = out[i]
        planned = o.planned_latency_s if o.planned_latency_s is not None else (o.latency_s if o.ok else None)
        out[i] = replace(
            o,
            state=None,
            upload_bytes=0,
            upload_s=0.0,
            compute_s=min(o.compute_s, end),
            latency_s=end,
            failed="cancelled",
            planned_latency_s=planned,
        )
    log.info(
        "round %d: %d updates arrived by %.4g s; cancelled %s (over-selection)",
        t,
        target,
        end,
        sorted(out[i].client_id for i in late),
    )
    return tuple(out)


def log_failures(t: int, outcomes, survivors, failed: bool) -> None:
    bad = [o for o in outcomes if not o.ok and o.failed != "cancelled"]
    if not bad:
        return
    listed = ", ".join(f"{o.client_id}:{o.failed}" for o in bad)
    if failed and not survivors:
        log.warning("round %d failed: no update survived (%s); the global model is unchanged", t, listed)
    elif survivors:
        weights = survivor_weights({o.client_id: o.num_samples for o in survivors})
        log.info(
            "round %d: %d of %d clients failed (%s); aggregated the survivors with weights n_k/sum n %s",
            t,
            len(bad),
            len(outcomes),
            listed,
            {k: round(w, 6) for k, w in weights.items()},
        )
