"""The fleet's clock in a run: simulated time, who is online, the round's deadline, and which
participants cannot finish (docs/fleets.md).

One :class:`FleetClock` per run (``Simulation.clock``), read by the round
(:mod:`fedselect.fl.round`) on every engine:

* ``clock_s``: when the next round starts (s of simulated time): the preparation's latency plus
  every earlier round's (the previous row's ``e2e_latency_s``);
* :meth:`online`: the clients online at a round's start (None: everybody, ``availability:
  always``); the selector sees only those;
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

import math
from collections import deque
from typing import Any

import numpy as np

from fedselect.fl.availability import Availability
from fedselect.fl.types import ClientOutcome
from fedselect.kernels.censored import km_quantile_completed

__all__ = ["FleetClock", "latency_observation"]


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
