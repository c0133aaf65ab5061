"""The fleet's clock in a run: simulated time, who is online, the round's deadline, and which
participants cannot finish (docs/fleets.md).

One :class:`FleetClock` per run (``Simulation.clock``), read by the round
(:mod:`fedselect.fl.round`) on every engine:

* ``clock_s``: when the next round starts (s of simulated time): the preparation's latency plus
  every earlier round's (the previous row's ``e2e_latency_s``);
* :meth:`online`: the clients online at a round's start (None: everybody, ``availability:
  always``); the selector sees only those;
* :meth:`wait_for`: simulated time never stands still for want of clients: a round that finds
  none of the clients it could select online waits until the next moment one comes online
  (the row's ``waited_s``), and a fleet that never comes back stops the run
  (:class:`~fedselect.fl.availability.FleetGone`);
* :meth:`deadline_s`: the round's deadline: ``system.round_deadline_s``, or with
  ``system.adaptive_deadline`` the given percentile of the participants' latencies in the last
  ``window`` rounds, those cut off counted as censored (:meth:`latency_observation`);
* :meth:`plan_work`: from the cost model, which participants go offline before they can report
  (they fail as ``dropout`` at that moment) and, with ``straggler: partial``, how many local
  steps each straggler finishes by the deadline;
* :meth:`select_count`: ``ceil(overselect x U)``, how many clients a selector is asked for.

Its state (the clock and the deadline history) is part of every checkpoint, so a resumed run
continues exactly.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import Any

import numpy as np

from fedselect.fl.availability import Availability, FleetGone
from fedselect.fl.types import ClientOutcome
from fedselect.kernels.censored import km_quantile_completed

__all__ = ["FleetClock", "FleetGone", "latency_observation"]

log = logging.getLogger("fedselect")

#: how many times a moment the availability model named is moved up by one ulp until the model
#: agrees that a client is online then (the float rounding of ``x mod period``, slot starts)
_NUDGES = 64


def _listed(ids) -> str:
    """``ids`` sorted, as a list in a message (the first 10 and how many more)."""
    ids = sorted(int(k) for k in ids)
    return str(ids) if len(ids) <= 10 else f"{str(ids[:10])[:-1]}, ... ({len(ids)} clients)]"


def latency_observation(o: ClientOutcome) -> tuple[float, bool] | None:
    """What participant ``o`` says about the latency distribution the adaptive deadline
    estimates: ``(seconds, censored)``, or None when it says nothing (docs/fleets.md).

    * a report (an update that arrived, a non-finite one included: the work was done): its
      latency, uncensored;
    * cut off: a ``timeout`` at the deadline, a ``cancelled`` one at the round's end
      (over-selection), a straggler's partial work (``straggler: partial``) at the time it
      uploaded: censored there (its whole work takes longer);
    * a ``dropout`` or an ``error``: None. A dropout never delivers whatever its speed (a
      simulated one is charged the deadline, which is no bound on its latency) and an error
      ended the work early: neither is a latency.
    """
    if o.failed in ("dropout", "error"):
        return None
    cut = o.failed in ("timeout", "cancelled") or o.local_steps is not None
    return float(o.latency_s), cut


class FleetClock:
    """Simulated time and the fleet's conditions of one run (module docstring).

    Args:
        availability: the availability model (:mod:`fedselect.fl.availability`).
        settings: the run settings (N, U, E).
        batch_size: B, for the number of local steps of a client.
        momentum: the local optimiser's momentum (FedNova's normalisation).
        overselect: ``overselect`` (>= 1).
        straggler: ``drop`` or ``partial``.
        adaptive: ``system.adaptive_deadline`` ({percentile, window}) or None.
    """

    def __init__(
        self,
        availability: Availability,
        settings,
        batch_size: int,
        momentum: float = 0.0,
        overselect: float = 1.0,
        straggler: str = "drop",
        adaptive=None,
    ):
        self.availability, self.settings = availability, settings
        self.batch_size, self.momentum = int(batch_size), float(momentum)
        self.overselect, self.straggler, self.adaptive = float(overselect), straggler, adaptive
        self.clock_s = 0.0
        #: per round of the window: the participants' (latency s, censored) (:func:`latency_observation`)
        self.history: deque[list[tuple[float, bool]]] = deque(maxlen=adaptive.window if adaptive is not None else 1)

    # ---------------------------------------------------------------- time
    def start(self, prep_latency_s: float) -> None:
        """Round 1 starts when the preparation (warm-up, probing of candidates) is over."""
        self.clock_s = float(prep_latency_s)
        self.history.clear()

    def advance(self, round_latency_s: float, outcomes) -> None:
        """A round of ``round_latency_s`` ended; ``outcomes``: its participants' outcomes (the
        adaptive deadline's history keeps their :func:`latency_observation`)."""
        self.clock_s += float(round_latency_s)
        if self.adaptive is not None:
            self.history.append([obs for obs in map(latency_observation, outcomes) if obs is not None])

    def wait_for(self, t: int, clients=None) -> float:
        """Round ``t`` is about to start at ``clock_s``: when none of ``clients`` (None: any
        client) is online, move the clock to the next moment one is, and return the wait (s;
        0.0 when one is online now, and always with a model that has no clock: ``always``,
        ``bernoulli``). The wait is logged in run.log.

        Raises:
            FleetGone: none of them is online and none ever comes online again; the message
                names the round, the time and the reason (e.g. the trace has ended).
        """
        a = self.availability
        if not a.clocked:
            return 0.0
        ids = np.arange(self.settings.num_clients) if clients is None else np.asarray(clients, dtype=np.int64)
        start = self.next_online(t, self.clock_s, ids, f"round {t}")
        waited = start - self.clock_s
        if waited > 0:
            first = int(ids[np.flatnonzero(a.online(t, start)[ids])[0]])
            log.info(
                "round %d: no client%s online at %.9g s; the server waits %.6g s, until %.9g s, when client %d comes "
                "online (availability %s)",
                t,
                "" if clients is None else f" of {_listed(ids)}",
                self.clock_s,
                waited,
                start,
                first,
                a.model,
            )
            self.clock_s = start
        return waited

    def next_online(self, t: int, from_s: float, clients, where: str) -> float:
        """The earliest moment at or after ``from_s`` at which one of ``clients`` is online, as
        the availability model's own :meth:`~fedselect.fl.availability.Availability.online`
        sees it (``where`` names the round or server version in an error).

        Raises:
            FleetGone: none of them ever comes online again.
        """
        a, ids = self.availability, np.asarray(clients, dtype=np.int64)
        at = a.next_online(t, from_s, ids)
        if at is None:
            who = "client" if len(ids) == self.settings.num_clients else f"client of {_listed(ids)}"
            msg = (
                f"{where}: no {who} is online at {from_s:.9g} s of simulated time and none comes online again "
                f"({a.never_reason(from_s, ids)}); the run stops here, the rows and checkpoint written so far are kept"
            )
            log.error(msg)
            raise FleetGone(msg)
        at = max(float(at), float(from_s))
        for _ in range(_NUDGES):
            if a.online(t, at)[ids].any():
                return at
            at = float(np.nextafter(at, math.inf))
        raise RuntimeError(
            f"{where}: availability {a.model!r} named {at:.17g} s as a client's next time online, but nobody is online then"
        )

    def standstill(self, t: int, clock_s: float, available: int, selector: str, fixed, failures) -> None:
        """Round ``t`` took no simulated time and no client reported, so the next round starts
        at the same instant ``clock_s``. :meth:`wait_for` leaves only the causes no clock can
        change, each logged as a warning: per-round draws (``bernoulli`` availability, fault
        dropouts without a round deadline) or the method's own choice of nobody (``failures``:
        the participants' failure codes, [] when nobody was chosen; ``fixed``: the selector's
        fixed set this round, or None).

        Raises:
            RuntimeError: any other cause (a broken invariant of the clock: a bug).
        """
        a = self.availability
        if not failures:
            if a.clocked and available == 0:
                raise RuntimeError(
                    f"round {t} started at {clock_s:.9g} s with nobody online though availability {a.model!r} can be waited on"
                )
            why = f"selector {selector!r} chose nobody of the {available} client(s) online"
            if fixed is not None and not len(fixed):
                why = f"selector {selector!r} has no client in this round"
            elif not a.clocked and a.restricts:
                why += f" in this round's {a.model} draw, which has no clock to wait on"
        elif all(f == "dropout" for f in failures):
            why = (
                "every participant was unreachable in this round's fault draw and there is no round deadline "
                "(system.round_deadline_s) to wait for"
            )
        else:
            raise RuntimeError(f"round {t} took no simulated time and no client reported: {failures}")
        log.warning("round %d took no simulated time: %s; the next round starts at the same instant, %.9g s", t, why, clock_s)

    # ---------------------------------------------------------------- selection
    def online(self, t: int, clock_s: float) -> np.ndarray | None:
        """``(N,)`` bool of the clients online at ``clock_s``, or None when every client always is."""
        return self.availability.online(t, clock_s) if self.availability.restricts else None

    def select_count(self) -> int:
        """How many clients a selector is asked for: ``ceil(overselect x U)``, at most N."""
        u = self.settings.clients_per_round
        return min(self.settings.num_clients, max(u, math.ceil(self.overselect * u - 1e-9)))

    # ---------------------------------------------------------------- the round's work
    def deadline_s(self, fixed: float | None) -> float | None:
        """The round's deadline (s). With ``system.adaptive_deadline`` {percentile p, window W}:
        the p-th percentile of the Kaplan-Meier estimate of the latency distribution from the
        participants of the last W rounds, reports as events and those cut off as censored at
        their cut (:func:`latency_observation`; :func:`fedselect.kernels.censored.km_quantile`),
        so a deadline never learns only from the clients that made it. Where more than 1 - p of
        the window was cut off, the percentile lies past the data and comes from Brown, Hollander
        and Korwar's exponential tail (:func:`~fedselect.kernels.censored.km_quantile_completed`);
        when nobody in the window reported (or p = 100 past the data), it is twice the largest
        cut. Without any observation yet: ``fixed`` (``system.round_deadline_s`` or None)."""
        if self.adaptive is not None:
            seen = [obs for row in self.history for obs in row]
            if seen:
                values, cut = [x for x, _ in seen], [c for _, c in seen]
                got = km_quantile_completed(values, cut, self.adaptive.percentile / 100.0)
                return float(got) if got is not None else 2.0 * max(values)
        return fixed

    def full_steps(self, run, k: int) -> int:
        """Client ``k``'s local steps for E epochs: ``E * ceil(n_k / B)``."""
        n = run.fed.clients[k].num_samples
        return int(self.settings.local_epochs) * math.ceil(n / self.batch_size)

    def plan_work(self, run, t: int, draws, selection, faults, deadline: float | None, clock_s: float):
        """(offline, partial) for the round's participants: ``offline`` maps a client to the
        seconds into its work at which its online period ends before it can report; ``partial``
        maps a straggler (``straggler: partial``) to the local steps it completes by the deadline
        (between 1 and its full steps minus one). Measured transports (a real deployment) know
        latencies only afterwards: there, nothing is planned."""
        offline: dict[int, float] = {}
        partial: dict[int, int] = {}
        clients = [int(k) for k in selection.clients]
        if not clients or run.transport.measured:
            return offline, partial
        want_partial = self.straggler == "partial" and deadline is not None
        if not (want_partial or self.availability.restricts):
            return offline, partial
        epochs, cost_model, count_down = self.settings.local_epochs, run.ctx.cost, self.settings.count_download
        ends = self.availability.online_until(t, clock_s, clients) if self.availability.restricts else None
        begin_s = clock_s + float(selection.cost.latency_s)
        for i, k in enumerate(clients):
            if faults[k] == "drop":
                continue
            cost = cost_model.client_cost(k, epochs, draws)
            report = cost.latency_s
            if want_partial and faults[k] is None and cost.latency_s > deadline:
                comm = cost.upload_s + (cost.download_s if count_down else 0.0)
                full = self.full_steps(run, k)
                steps = math.floor(full * (deadline - comm) / cost.compute_s) if cost.compute_s > 0 else 0
                if 1 <= steps < full:
                    partial[k] = steps
            if faults[k] == "raise":
                report = cost_model.error_latency_s(cost)
            if deadline is not None:
                report = min(report, float(deadline))
            if ends is not None and ends[i] - begin_s < report:
                offline[k] = max(0.0, float(ends[i] - begin_s))
                partial.pop(k, None)
        return offline, partial

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {"clock_s": self.clock_s, "history": [[[x, c] for x, c in r] for r in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clock_s = float(state.get("clock_s", 0.0))
        self.history.clear()
        for row in state.get("history", []):  # checkpoints before censoring held bare latencies (reports)
            self.history.append(
                [(float(x), False) if not isinstance(x, (list, tuple)) else (float(x[0]), bool(x[1])) for x in row]
            )
