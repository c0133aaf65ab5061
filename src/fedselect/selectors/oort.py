"""Oort: guided participant selection by statistical x system utility (Lai, Zhu, Madhyastha,
Chowdhury, OSDI 2021; the training selector of FedScale). Kernels in :mod:`fedselect.kernels.oort`.

Each round t (Oort Algorithm 1), with U slots:

1. the preferred round duration T is the ``round_threshold``-th percentile of the clients' known
   durations (the last measured latency of an explored client, the expected latency
   ``ctx.expected_latency_s()`` of an unexplored one);
2. **exploitation** (``(1 - eps) * U`` slots, floored, at most the explored clients): every
   explored client k scores ``Util(k) = [norm(U_k) + sqrt(0.1 ln t / L_k)] * (T / t_k)^alpha``
   (the penalty only when ``t_k > T``), with ``U_k = |B_k| sqrt(mean squared per-sample loss)``
   of its last training clipped at the ``clip_bound`` quantile and min-max normalised, ``L_k`` the
   last round it took part in and ``t_k`` its last duration (s). The candidates are the clients
   scoring at least ``cut_off`` x the score of the last exploited slot; the slots are drawn among
   them with probability proportional to the score (without replacement);
3. **exploration** (the other slots, at most the unexplored clients): the unexplored clients are
   ranked by ``|B_k| x (T / d_k)^alpha`` (fast clients with much data first), ``d_k`` the expected
   latency ``ctx.expected_latency_s()`` (or, after an error, the time it reported); the
   slots are drawn among the best ``sample_window`` x (slots) of them proportionally to it;
4. slots still empty (nothing left to explore or exploit) are filled uniformly at random among
   the online clients, those on the blacklist last.

Every step picks only among ``view.available`` (the clients online this round). **Blacklist**
(the artifact's ``get_blacklist``; Oort Sec. 7.2.3, outliers): with ``blacklist_rounds`` = R >= 0,
a client involved more than R times (results and stragglers) is left out of exploitation (and of the
utility normalisation), at most ``floor(blacklist_max_len x N)`` clients, the most-trained first;
``-1`` (the default, as in the artifact) turns it off.

``eps`` starts at ``exploration_factor`` (round 1) and is multiplied by ``exploration_decay``
after every round, down to ``exploration_min``; once every client has been explored all U slots
are exploited (FedScale does the same). After each round the participants' utilities, durations
and last rounds are updated from their outcomes (the loop fills ``sample_loss_sq_sum`` /
``sample_loss_count`` because :attr:`Oort.wants_sample_losses`). A client counts as **explored**
once it has reported a training result or was a straggler (below): a client that was selected
but failed otherwise (dropout, error, non-finite update) stays unexplored, so exploration goes on
until the clients have actually trained (``explored_clients`` in the summary counts them).

Clients that did not finish in time follow FedScale's aggregator
(``fedscale/cloud/aggregation/aggregator.py``, ``round_completion_handler``; the same in the
authors' artifact, ``training/param_server.py``: "assign avg reward to explored, but not ran
workers"): a **straggler** (``cancelled`` by over-selection, or a ``timeout`` at the deadline)
gets the mean statistical utility of the round's successful participants (0 without any), its
duration becomes the latency of its whole work (``ClientOutcome.planned_latency_s``: what the
simulator's clock gives it, as FedScale's virtual client clock does; where that is unknown, a
real transport's timeout or an injected hang, the cut itself or the previous duration if
larger: never less than the cut), and it counts as explored and involved (``count``, the last
round L_k). A straggler's partial work (``straggler: partial``) is a result, but its duration is
likewise its whole work's latency, not the time it uploaded at the deadline. A **dropout** gets
no feedback (FedScale leaves out a client that is not online by the end of its work): utility,
duration and last round are kept. An **error** or a non-finite update gets utility 0 and the
latency it reported (the time it really spent).

Every ``pacer_step`` rounds the pacer compares the exploitation utility summed over the last
window with the window before (:func:`fedselect.kernels.oort.pacer_update`): nearly flat (within
10 %) relaxes T (``round_threshold += pacer_delta``), a 5x change tightens it. The per-round
exploitation utility is the mean statistical utility of that round's exploited clients that
succeeded or were stragglers (at the utility they were given; FedScale's ``calculateSumUtil``
reads its ``successfulClients``, which holds both), 0 without any.
``pacer_delta = 0`` keeps T's percentile fixed (the artifact's "Oort w/o Pacer").
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedselect.fl.types import ClientOutcome
from fedselect.kernels.oort import (
    blacklist,
    exploitation_scores,
    exploration_scores,
    pacer_update,
    preferred_duration,
    statistical_utility,
)
from fedselect.kernels.sampling import kth_largest, top_desc, weighted_sample
from fedselect.selectors import register_selector
from fedselect.selectors.base import Feedback, RoundView, Selection, Selector


class OortOptions(BaseModel):
    """Oort's options, named as in the authors' artifact (SymbioticLab/Oort, ``oort/``
    ``create_training_selector(args)``; the same names in FedScale, where Oort now lives) except
    ``cut_off`` (the artifact's ``cut_off_util``). Durations are seconds of simulated latency;
    docs/selectors.md#oort compares every default with the artifact's."""

    model_config = ConfigDict(extra="forbid")

    round_penalty: float = Field(
        2.0, ge=0, description="alpha, exponent of the speed penalty (T/t_k)^alpha (Oort Eq. (2)); 0 = Oort w/o system utility"
    )
    round_threshold: float = Field(
        30.0,
        ge=0,
        le=100,
        description="initial percentile (%) of the known durations (s) that sets the preferred round duration T (s); 100 = no T",
    )
    pacer_step: int = Field(20, ge=1, description="W, rounds between two pacer decisions (and the window compared)")
    pacer_delta: float = Field(
        5.0, ge=0, le=100, description="percentile points the pacer adds to / removes from round_threshold; 0 = no pacer"
    )
    exploration_factor: float = Field(0.9, ge=0, le=1, description="eps of round 1: the share of slots left to exploration")
    exploration_decay: float = Field(0.98, gt=0, le=1, description="eps is multiplied by this after every round")
    exploration_min: float = Field(0.2, ge=0, le=1, description="eps never decays below this")
    cut_off: float = Field(
        0.95,
        gt=0,
        le=1,
        description="the artifact's cut_off_util: exploitation candidates score >= cut_off x the score of the last exploited slot",
    )
    clip_bound: float = Field(
        0.95, gt=0, le=1, description="statistical utilities are clipped at this quantile before min-max normalisation"
    )
    sample_window: float = Field(
        5.0, ge=1, description="exploration draws among the best sample_window x (exploration slots) unexplored clients"
    )
    blacklist_rounds: int = Field(
        -1,
        ge=-1,
        description="a client involved (trained or straggled) more than this many times is not exploited any more; -1 = off",
    )
    blacklist_max_len: float = Field(
        0.3, ge=0, le=1, description="the blacklist holds at most this share of all clients (the most-trained ones)"
    )

    @model_validator(mode="before")
    @classmethod
    def _artifact_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "cut_off_util" in data:
            raise ValueError(
                "cut_off_util: the artifact's name of the option cut_off here (candidates score >= cut_off x the "
                "score of the last exploited slot; 0.95: the 95 % named in the artifact's code comment); FedScale's cut_off_util 0.05 is a "
                "different rule (docs/selectors.md#oort)"
            )
        return data

    @model_validator(mode="after")
    def _eps_order(self) -> "OortOptions":
        if self.exploration_min > self.exploration_factor:
            raise ValueError(
                f"exploration_min ({self.exploration_min}) must not exceed exploration_factor ({self.exploration_factor})"
            )
        return self


@register_selector
class Oort(Selector):
    """Oort (module docstring). Options: :class:`OortOptions`.

    Extra per-round columns: ``epsilon`` (eps used this round; 0 once every client is explored),
    ``exploited`` / ``explored`` (slots filled by exploitation / by exploration; the rest were
    filled at random), ``preferred_duration_s`` (T, s; inf when the threshold reached 100 %),
    ``round_threshold`` (its percentile), ``blacklisted`` (clients on the blacklist when the round
    was selected), ``mean_utility`` (mean statistical utility U_k of this
    round's successful participants; nan without any).
    """

    name = "oort"
    summary = "Oort: statistical utility (data size x loss) x speed penalty, staleness bonus, explore / exploit"
    Options = OortOptions
    wants_sample_losses = True
    extra_columns = (
        "epsilon",
        "exploited",
        "explored",
        "preferred_duration_s",
        "round_threshold",
        "blacklisted",
        "mean_utility",
    )

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        n = self.settings.num_clients
        self.num_samples = np.asarray(ctx.num_samples, dtype=np.int64)
        self.expected = np.asarray(ctx.expected_latency_s(), dtype=np.float64)
        self.utility = np.zeros(n, dtype=np.float64)
        self.duration = self.expected.copy()
        self.last_round = np.zeros(n, dtype=np.int64)
        self.explored = np.zeros(n, dtype=bool)
        self.count = np.zeros(n, dtype=np.int64)
        self.epsilon = float(self.options.exploration_factor)
        self.threshold = float(self.options.round_threshold)
        self.exploit_history: list[float] = []
        self.exploited: list[int] = []
        self.pending: dict[str, Any] = {}

    def select(self, view: RoundView) -> Selection:
        opts, t = self.options, view.round
        n, u = self.settings.num_clients, view.how_many(self.settings)
        pool = view.pool(n)
        online = np.zeros(n, dtype=bool)
        online[pool] = True
        barred = np.zeros(n, dtype=bool)
        barred[blacklist(self.count, opts.blacklist_rounds, opts.blacklist_max_len)] = True
        preferred = preferred_duration(self.duration, self.threshold)
        known = np.flatnonzero(self.explored & online & ~barred)
        unknown = np.flatnonzero(~self.explored & online)
        eps = self.epsilon if unknown.size else 0.0
        n_exploit = min(int(np.floor(u * (1.0 - eps) + 1e-9)), known.size)  # floor, robust to 0.8 * 5 = 3.999...
        if view.count is not None and view.count < self.settings.clients_per_round and u > 0:
            # mode: async refills one or a few free slots: the floor would explore only, so the exploited
            # share is rounded at random, keeping its mean u (1 - eps) (never happens in rounds: count >= U)
            n_exploit = min(int(np.floor(u * (1.0 - eps) + self.rng.random())), known.size)

        exploited: list[int] = []
        if n_exploit > 0:
            scores = exploitation_scores(
                self.utility[known],
                self.last_round[known],
                self.duration[known],
                t,
                preferred,
                opts.round_penalty,
                opts.clip_bound,
            )
            cut = opts.cut_off * kth_largest(scores, n_exploit)  # the score at rank n_exploit, times cut_off
            candidates, cand_scores = top_desc(known, scores, at_least=cut)
            exploited = weighted_sample(self.rng, candidates, cand_scores, n_exploit)

        n_explore = min(unknown.size, u - len(exploited))
        explored: list[int] = []
        if n_explore > 0:
            # self.duration of an unexplored client is its expected latency (or the latency of an
            # error it reported)
            prio = exploration_scores(self.num_samples[unknown], self.duration[unknown], preferred, opts.round_penalty)
            width = max(n_explore, min(int(opts.sample_window * n_explore), unknown.size))
            window, window_prio = top_desc(unknown, prio, m=width)
            explored = weighted_sample(self.rng, window, window_prio, n_explore)

        chosen = exploited + explored
        taken = np.array(chosen, dtype=np.int64)
        for allowed in (~barred, barred):  # random fill: online clients off the blacklist first
            missing = u - len(chosen)
            if missing <= 0:
                break
            rest = np.setdiff1d(pool[allowed[pool]], taken)
            take = min(missing, rest.size)
            if take:
                chosen += [int(k) for k in self.rng.choice(rest, size=take, replace=False)]
                taken = np.array(chosen, dtype=np.int64)
        self.exploited = exploited
        self.pending = {
            "epsilon": eps,
            "exploited": len(exploited),
            "explored": len(explored),
            "preferred_duration_s": preferred,
            "round_threshold": self.threshold,
            "blacklisted": int(barred.sum()),
        }
        return Selection(tuple(chosen))

    def observe(self, t: int, outcomes: Sequence[ClientOutcome], feedback: Feedback) -> dict[str, Any]:
        utilities, stragglers = [], []
        for o in outcomes:
            k = o.client_id
            if o.failed in ("cancelled", "timeout"):  # did not finish in time: after the others (module docstring)
                stragglers.append(o)
                continue
            if o.failed == "dropout":  # FedScale gives a client lost in the round no feedback
                continue
            if o.failed is not None:  # error / nan / inf: no usable update, the time it really took
                self.utility[k] = 0.0
                if self.explored[k]:
                    self.last_round[k] = t  # it took part (staleness); an unexplored client stays unexplored
                if o.latency_s > 0:
                    self.duration[k] = float(o.latency_s)
                continue
            self.explored[k] = True  # explored = has reported a training result
            self.count[k] += 1  # the artifact's "count" (times involved), read by the blacklist
            self.last_round[k] = t
            self.utility[k] = statistical_utility(o.sample_loss_sq_sum, o.sample_loss_count, o.num_samples)
            self.duration[k] = self._duration(o)
            utilities.append(self.utility[k])
        average = float(np.mean(utilities)) if utilities else 0.0
        for o in stragglers:  # FedScale's round_completion_handler: the round's mean utility, the whole work's duration
            k = o.client_id
            self.explored[k] = True
            self.count[k] += 1
            self.last_round[k] = t
            self.utility[k] = average
            self.duration[k] = self._duration(o)
        involved = {o.client_id for o in outcomes if o.failed in (None, "cancelled", "timeout")}
        exploit = [self.utility[k] for k in self.exploited if k in involved]
        self.exploit_history.append(float(np.mean(exploit)) if exploit else 0.0)
        opts = self.options
        self.threshold, _ = pacer_update(self.exploit_history, self.threshold, opts.pacer_step, opts.pacer_delta, t)
        self.epsilon = max(self.epsilon * opts.exploration_decay, opts.exploration_min)
        return {**self.pending, "mean_utility": float(np.mean(utilities)) if utilities else float("nan")}

    def _duration(self, o: ClientOutcome) -> float:
        """Client ``o``'s round duration t_k (s): its latency; for one cut before its work was
        done, the latency of the whole work (``planned_latency_s``), else at least the cut."""
        if o.planned_latency_s is not None:
            return float(o.planned_latency_s)
        if o.failed is None and o.local_steps is None:
            return float(o.latency_s)
        return max(float(self.duration[o.client_id]), float(o.latency_s))

    def finish(self) -> dict[str, Any]:
        return {
            "explored_clients": int(self.explored.sum()),
            "blacklisted_clients": int(blacklist(self.count, self.options.blacklist_rounds, self.options.blacklist_max_len).size),
            "final_round_threshold": self.threshold,
            "final_epsilon": self.epsilon,
        }

    def state_dict(self) -> dict[str, Any]:
        st = super().state_dict()
        st.update(
            utility=self.utility.copy(),
            duration=self.duration.copy(),
            last_round=self.last_round.copy(),
            explored=self.explored.copy(),
            count=self.count.copy(),
            epsilon=self.epsilon,
            threshold=self.threshold,
            exploit_history=list(self.exploit_history),
            exploited=list(self.exploited),
            pending=dict(self.pending),
        )
        return st

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.utility = np.array(state["utility"], dtype=np.float64, copy=True)
        self.duration = np.array(state["duration"], dtype=np.float64, copy=True)
        self.last_round = np.array(state["last_round"], dtype=np.int64, copy=True)
        self.explored = np.array(state["explored"], dtype=bool, copy=True)
        # checkpoints from before the blacklist have no counts (their runs had no blacklist)
        self.count = np.array(state.get("count", np.zeros(self.explored.size)), dtype=np.int64, copy=True)
        self.epsilon = float(state["epsilon"])
        self.threshold = float(state["threshold"])
        self.exploit_history = [float(x) for x in state["exploit_history"]]
        self.exploited = [int(k) for k in state["exploited"]]
        self.pending = dict(state["pending"])
