"""FedCS (Nishio and Yonetani, "Client Selection for Federated Learning with Heterogeneous
Resources in Mobile Edge", IEEE ICC 2019): as many clients as fit the round's deadline.

Each round (the paper's protocol, Sec. III):

1. **resource request**: ``ceil(request_fraction x |online|)`` clients drawn uniformly at random
   (the paper's K x C, C = 0.1) report what they would cost: their update (compute) time
   ``t_UD`` and upload time ``t_UL``, here from the fleet model (FR-eq 3, 4): ``times:
   expected`` at their profiles' mean frequency and bandwidth, ``times: actual`` at this round's
   draws (what a client would measure and report);
2. **client selection** (the paper's Algorithm 2, greedy): starting from S = {}, repeatedly take
   the candidate that lengthens the round least and keep it if the round still ends by the
   deadline ``T_round`` (``deadline_s``); every candidate is tried once. With the paper's
   ``schedule: sequential`` the model is distributed to S (the slowest download of S, counted
   only with ``system.count_download``, as in the cost model), the clients update in parallel and
   upload one after another over the shared channel::

       Theta_x   = Theta + t_UL_x + max(0, t_UD_x - Theta)      # end of x's upload after the distribution
       increase  = (T_d(S + x) - T_d(S)) + t_UL_x + max(0, t_UD_x - Theta)
       keep x if T_d(S + x) + Theta_x <= T_round

   With ``schedule: parallel`` every client uploads on its own link (fedselect's cost model: the
   round lasts as long as its slowest participant), so the greedy takes the candidates in order
   of latency while the slowest stays within the deadline;
3. the chosen clients train (in the order they were added) and FedAvg aggregates them.

The number of clients is FedCS's own (as many as fit, at most ``max_clients``), not
``clients_per_round``; the resource request is a few bytes and is not charged. The deadline
defaults to the run's ``system.round_deadline_s`` (which also discards late updates), so FedCS
plans for the deadline the system enforces; without either the config is refused. FedCS picks a
set of its own size, so over-selection leaves it alone and ``mode: async`` (no round deadline)
refuses it.

Worked example (``tests/selectors/test_fedcs.py``): candidates with (t_UD, t_UL) = (1, 1), (2, 1), (4, 2) s
and T_round = 5 s, sequential: client 0 (the round ends at 2 s), client 1 (3 s: its update ends
at 2 s, its upload follows 0's), client 2 would end at 6 s > 5 s and is left out.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedselect.fl.types import ClientOutcome, RunSettings
from fedselect.selectors import register_selector
from fedselect.selectors.base import Feedback, RoundView, Selection, Selector
from fedselect.world.system import RoundDraws


class FedCSOptions(BaseModel):
    """FedCS's options (Nishio and Yonetani 2019, Sec. III-IV)."""

    model_config = ConfigDict(extra="forbid")

    deadline_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="T_round, the round deadline (s of simulated latency); null = system.round_deadline_s",
    )
    request_fraction: float = Field(
        0.1, gt=0, le=1, description="C: share of the online clients asked for their resources each round"
    )
    schedule: Literal["sequential", "parallel"] = Field(
        "sequential", description="uploads one after another (the paper) or each on its own link (the cost model)"
    )
    times: Literal["expected", "actual"] = Field(
        "expected", description="t_UD, t_UL at the profiles' means (expected) or at this round's draws (actual)"
    )
    max_clients: int | None = Field(None, ge=1, description="at most this many clients a round; null = as many as fit")


def greedy_schedule(
    t_ud: Sequence[float],
    t_ul: Sequence[float],
    t_d: Sequence[float],
    deadline: float,
    schedule: str = "sequential",
    limit: int | None = None,
) -> tuple[list[int], float]:
    """FedCS's Algorithm 2 over candidates ``0..R-1`` (module docstring): the positions kept, in
    the order added, and the estimated round time (s) of that set (0 for none).

    Args:
        t_ud, t_ul, t_d: per candidate its update (compute), upload and download time (s).
        deadline: T_round (s). schedule: ``sequential`` or ``parallel``.
        limit: at most this many (None: no limit).
    """
    ud, ul, dl = (np.asarray(x, dtype=np.float64) for x in (t_ud, t_ul, t_d))
    left = list(range(ud.size))
    chosen: list[int] = []
    theta = t_dist = 0.0  # sequential: uploads' end after the distribution; the distribution's time
    elapsed = 0.0  # the set's round time
    while left and (limit is None or len(chosen) < limit):
        if schedule == "sequential":
            inc = [max(t_dist, dl[i]) - t_dist + ul[i] + max(0.0, ud[i] - theta) for i in left]
        else:
            inc = [max(0.0, dl[i] + ud[i] + ul[i] - elapsed) for i in left]
        x = left.pop(int(np.argmin(inc)))  # the smallest increase (ties: the first candidate)
        if schedule == "sequential":
            theta_x, dist_x = theta + ul[x] + max(0.0, ud[x] - theta), max(t_dist, dl[x])
            end = dist_x + theta_x
        else:
            end = max(elapsed, dl[x] + ud[x] + ul[x])
        if end <= deadline:
            chosen.append(x)
            elapsed = end
            if schedule == "sequential":
                theta, t_dist = theta_x, dist_x
    return chosen, elapsed


@register_selector
class FedCS(Selector):
    """FedCS (module docstring). Options: :class:`FedCSOptions`.

    Extra per-round columns: ``candidates_requested`` (clients asked for their resources) and
    ``estimated_round_s`` (FedCS's estimate of the round's time for the chosen set, s).
    """

    name = "fedcs"
    summary = "FedCS: as many clients as fit the round deadline (greedy on compute and upload times)"
    Options = FedCSOptions
    uses_count = False
    flower_app_needs = (
        "each device's CPU (MHz) and bandwidth (Mb/s) profile, to estimate its update and upload time before it is asked",
    )
    extra_columns = ("candidates_requested", "estimated_round_s")

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.deadline = float(self.options.deadline_s if self.options.deadline_s is not None else self.settings.round_deadline_s)
        self.pending: dict[str, Any] = {}

    @classmethod
    def check(cls, options: FedCSOptions, settings: RunSettings) -> list[str]:
        if options.deadline_s is None and settings.round_deadline_s is None:
            return [
                "needs a round deadline T_round: set its option deadline_s (s) or system.round_deadline_s "
                "(FedCS selects as many clients as fit it)"
            ]
        return []

    def select(self, view: RoundView) -> Selection:
        s, o = self.settings, self.options
        pool = view.pool(s.num_clients)
        if pool.size == 0:
            self.pending = {"candidates_requested": 0, "estimated_round_s": 0.0}
            return Selection(())
        r = min(pool.size, max(1, math.ceil(o.request_fraction * pool.size - 1e-9)))
        cands = [int(k) for k in self.rng.choice(pool, size=r, replace=False)]
        fleet = self.ctx.fleet
        draws = view.draws if o.times == "actual" else RoundDraws(view.round, fleet.mean_mhz, fleet.mean_mbps)
        costs = [self.ctx.client_cost(k, s.local_epochs, draws) for k in cands]
        t_d = [c.download_s if s.count_download else 0.0 for c in costs]
        kept, est = greedy_schedule(
            [c.compute_s for c in costs], [c.upload_s for c in costs], t_d, self.deadline, o.schedule, o.max_clients
        )
        self.pending = {"candidates_requested": r, "estimated_round_s": est}
        return Selection(tuple(cands[i] for i in kept))

    def observe(self, t: int, outcomes: Sequence[ClientOutcome], feedback: Feedback) -> dict[str, Any]:
        return dict(self.pending)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "pending": dict(self.pending)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.pending = dict(state["pending"])
