"""Asynchronous buffered aggregation (``mode: async``): FedBuff (Nguyen et al., "Federated
Learning with Buffered Asynchronous Aggregation", AISTATS 2022, Algorithm 1) on the fleet clock
(docs/async.md, docs/fleets.md).

``concurrency`` clients train at once. At time 0 (after the selector's preparation) the
selector fills every slot; whenever a client finishes, its update goes into the buffer and its
slot frees; the selector then picks who starts next, among the available idle clients, from the
current server model. Every ``buffer_size`` (K) arrivals the server aggregates the m buffered
updates by the configured rule (:meth:`AsyncSettings.step`, :func:`fedselect.fl.aggregate.buffered_update`),
``Delta_i = y_i - x_{start_i}``, ``s_i`` the server versions since client i downloaded, ``S``
the staleness function (:func:`staleness_weight`)::

    fedbuff     new = old + eta_g * sum_i c_i S(s_i) Delta_i      c_i = 1/m, or n_i / sum n     (FedBuff Alg. 1)
    fedasync    new = old + alpha S(s) (y - old)                  (K = 1)                        (FedAsync Alg. 1)
    normalised  new = old + eta_g * sum_i c_i S(s_i) Delta_i / sum_i c_i S(s_i)                 (FedScale's)

One aggregation is one server version and one ``metrics.csv`` row; ``rounds`` counts them.

Everything about one client's work is the round's (:mod:`fedselect.fl.round`), reused as is: a
job started at server version v is planned exactly like a participant of synchronous round
``t = v + 1`` (its draws ``draw(t)``, its simulated faults, its training job with stream
``train/<t>/<k>``, the availability check of :class:`fedselect.fl.clock.FleetClock`), its
latency and failure come from the round's outcome rules (:mod:`fedselect.fl.round_rules`) and
the cost model, a non-finite aggregate is not committed, and the evaluation cadence and the
selector's learning are the round's :func:`~fedselect.fl.round.learn`.

Events: finishes ordered by simulated time, ties by client id. Clients finishing at the same
moment are handled together: their updates enter the buffer in that order (the server
aggregating whenever it holds K), then the freed slots are refilled with one selection for
that many clients. So with K = concurrency = U, equally fast clients of equal sizes, no
availability limits and a constant staleness weight, every aggregation is exactly a
synchronous FedAvg round (``tests/fl/test_async.py``).

A job is handed to the run's transport when its client starts (:meth:`Transport.submit
<fedselect.fl.work.Transport.submit>`) and its result is collected when its report is due on
the clock (:meth:`~fedselect.fl.work.Transport.collect`). The simulator's transport defers the
training: the jobs in flight are trained when the first of them must report, all pending ones
together (side by side in the worker pool). Flower's sends each job to its node at once and the
node answers when it has finished (:mod:`fedselect.flower.transport`); the events are still
taken in the order of the simulated clock, so both engines give the same run.
"""

from __future__ import annotations

import heapq
import logging
import math
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedselect.fl.aggregate import buffered_update
from fedselect.fl.round import RoundPlan, RoundResult, _plan, learn, prepare
from fedselect.fl.round_rules import commit, log_failures, outcome_of
from fedselect.fl.types import ClientOutcome, Evaluation, Selection, SelectionCost, ServerState, State
from fedselect.fl.work import TrainResult

log = logging.getLogger("fedselect")

__all__ = [
    "STALENESS_FUNCTIONS",
    "ASYNC_COLUMNS",
    "AsyncSettings",
    "AsyncResult",
    "staleness_weight",
    "run_buffered",
]

STALENESS_FUNCTIONS = ("constant", "polynomial", "hinge")
#: columns an async run adds to metrics.csv after the core and reliability ones
ASYNC_COLUMNS = ["version", "staleness_mean", "staleness_max"]


def staleness_weight(function: str, s: int, a: float = 0.5, b: float = 4.0) -> float:
    """The weight of an update of staleness ``s`` (server versions since its client downloaded):
    ``constant`` 1; ``polynomial`` (1 + s)^-a (FedBuff uses a = 0.5); ``hinge`` 1 if s <= b
    else 1 / (a (s - b) + 1) (Xie et al., FedAsync, 2019).

    Raises:
        ValueError: an unknown function or a negative staleness.
    """
    if s < 0:
        raise ValueError(f"staleness must be >= 0, got {s}")
    if function == "constant":
        return 1.0
    if function == "polynomial":
        return float((1.0 + s) ** (-float(a)))
    if function == "hinge":
        return 1.0 if s <= b else 1.0 / (float(a) * (s - float(b)) + 1.0)
    raise ValueError(f"unknown staleness function {function!r}; allowed: {list(STALENESS_FUNCTIONS)}")


@dataclass(frozen=True)
class AsyncSettings:
    """The ``async`` section of a run: concurrency C, buffer size K, server step eta_g, the
    staleness function and its a, b, the aggregation ``rule`` with its ``weighting`` (fedbuff,
    normalised) or ``mixing`` alpha (fedasync)."""

    concurrency: int
    buffer_size: int
    server_lr: float = 1.0
    function: str = "polynomial"
    a: float = 0.5
    b: float = 4.0
    rule: str = "fedbuff"
    weighting: str = "uniform"
    mixing: float = 0.9

    @classmethod
    def from_config(cls, cfg) -> "AsyncSettings":
        st = cfg.staleness
        return cls(
            int(cfg.concurrency),
            int(cfg.buffer_size),
            float(cfg.server_lr),
            st.function,
            float(st.a),
            float(st.b),
            cfg.rule,
            cfg.weighting,
            float(cfg.mixing),
        )

    def weight(self, s: int) -> float:
        return staleness_weight(self.function, s, self.a, self.b)

    def step(self, old: State, updates, starts, sizes, staleness, keys=None) -> State:
        """The new entries of the server model from the m buffered updates (module docstring):
        ``updates`` the clients' models, ``starts`` the models they downloaded, ``sizes`` their
        training samples n_i, ``staleness`` s_i (server versions). E.g. one update of staleness 3
        with S = (1 + s)^-0.5: ``fedbuff`` moves the model by 0.5 of its delta, ``fedasync`` (alpha
        0.9) by 0.45 of ``y - old``, ``normalised`` by all of it.

        Raises:
            ValueError: see :func:`fedselect.fl.aggregate.buffered_update`.
        """
        scale = [self.weight(s) for s in staleness]
        if self.rule == "fedasync":  # FedAsync: x = (1 - alpha S(s)) x + alpha S(s) y, one update at a time
            return buffered_update(
                old, updates, [old] * len(updates), [1.0] * len(updates), [self.mixing * x for x in scale], 1.0, keys
            )
        base = [float(n) for n in sizes] if self.weighting == "samples" else [1.0] * len(updates)
        if self.rule == "normalised":  # the weights c_i S(s_i) divided by their own sum
            return buffered_update(old, updates, starts, [c * x for c, x in zip(base, scale)], None, self.server_lr, keys)
        return buffered_update(old, updates, starts, base, scale, self.server_lr, keys)


@dataclass(frozen=True)
class InFlight:
    """One client's work: started at ``start_s`` from server version ``version`` (model
    ``start_state``), planned as a participant of round ``version + 1`` (``plan``), reporting at
    ``finish_s``. ``job`` is its training job (None: it fails without training, e.g. a simulated
    dropout; ``final`` is then its outcome)."""

    client_id: int
    version: int
    start_s: float
    finish_s: float
    seq: int
    plan: RoundPlan
    start_state: State
    job: Any = None
    final: ClientOutcome | None = None
    ticket: int | None = None


@dataclass(frozen=True)
class Arrival:
    """An update in the buffer: its outcome and the server version its client started from."""

    outcome: ClientOutcome
    version: int
    start_state: State


@dataclass(frozen=True)
class AsyncResult(RoundResult):
    """A server version's row: a :class:`~fedselect.fl.round.RoundResult` whose latency is the
    simulated time since the previous aggregation (``interval_s``) instead of a round's
    slowest participant. ``selection.clients`` are the clients aggregated in this version,
    ``selection.cost`` the probing cost of every selection made in the interval, ``outcomes``
    every piece of work that ended in it (failures included). ``waited_s`` is the part of the
    interval the server spent idle, waiting for a client to come online, and ``latency_s`` the
    rest, so that, as for a round, the end-to-end latency grows by ``waited_s + latency_s``."""

    interval_s: float = 0.0

    @property
    def latency_s(self) -> float:
        return self.interval_s - self.waited_s


@contextmanager
def _quiet():
    """Silence the round's log lines while an outcome is only planned (they are logged once, when
    the work really ends)."""
    lg = logging.getLogger("fedselect")
    was, lg.disabled = lg.disabled, True
    try:
        yield
    finally:
        lg.disabled = was


@dataclass
class _Loop:
    """The event loop of one async run (module docstring)."""

    run: Any
    cfg: AsyncSettings
    state: ServerState
    before: Evaluation
    now: float
    version: int = 0
    seq: int = 0
    heap: list = field(default_factory=list)
    flying: dict = field(default_factory=dict)  # client id -> InFlight
    buffer: list = field(default_factory=list)  # Arrival
    ended: list = field(default_factory=list)  # ClientOutcome of work that ended this version, failures included
    costs: list = field(default_factory=list)  # SelectionCost of this version's selections
    failed_now: set = field(default_factory=set)  # clients whose work failed in this version: not restarted in it
    starts: dict = field(default_factory=dict)  # client id -> starts in this version (mini-batch streams)
    version_start: float = 0.0
    available: int = 0
    waited: float = 0.0  # simulated time this version's server spent idle, waiting for a client to come online

    # ------------------------------------------------------------------ selection
    def _idle(self, t: int, at: float) -> tuple[np.ndarray, np.ndarray | None]:
        """(idle and startable mask, the online mask or None) at time ``at`` for round ``t``."""
        n = self.run.settings.num_clients
        online = self.run.clock.online(t, at)
        idle = np.ones(n, dtype=bool) if online is None else online.copy()
        for k in list(self.flying) + list(self.failed_now):
            idle[k] = False
        return idle, online

    def fill(self) -> str:
        """Start clients in the free slots; returns ``started``, ``full``, ``none_idle`` (nobody
        available and idle) or ``declined`` (the selector chose nobody)."""
        free = self.cfg.concurrency - len(self.flying)
        if free <= 0:
            return "full"
        run, t = self.run, self.version + 1
        idle, online = self._idle(t, self.now)
        if not idle.any():
            return "none_idle"
        draws = run.ctx.draw(t)
        mask = None if idle.all() else idle  # None: every client, as a synchronous round sees it
        view = replace(run.view(t, draws, self.state, mask), count=free)
        sel = run.selector.select(view)
        busy = [k for k in sel.clients if k in self.flying]
        if busy or len(sel.clients) > free:
            raise RuntimeError(
                f"selector {run.selector.name!r} selected {list(sel.clients)} at server version {self.version} with "
                f"{free} free slot(s)"
                + (f"; clients {busy} are still training" if busy else "")
                + "; a selector may pick only RoundView.available, at most RoundView.count"
            )
        run.check_selection(t, sel, mask)
        self.costs.append(sel.cost)
        if not sel.clients:
            return "declined"
        plan = _plan(run, t, draws, sel, self.state, self.now, online)
        jobs = {}
        for j in plan.jobs:
            n = self.starts.get(j.client_id, 0)
            jobs[j.client_id] = j if n == 0 else replace(j, stream=f"{j.stream}/{n}")
        plan = replace(plan, jobs=tuple(jobs[k] for k in plan.selection.clients if k in jobs))
        begin = self.now + float(sel.cost.latency_s)
        started = [k for k in sel.clients if k in jobs]
        tickets = dict(zip(started, run.transport.submit([jobs[k] for k in started])))
        for k in sel.clients:
            self.starts[k] = self.starts.get(k, 0) + 1
            job = jobs.get(k)
            if job is None:  # fails without training (simulated dropout, error, offline): known now
                final = outcome_of(run, plan, k, None)
                lat = final.latency_s
            else:
                final = None
                with _quiet():  # the latency the round's rules give this work (the real result comes later)
                    lat = outcome_of(run, plan, k, TrainResult(k, job.start_state, 0.0)).latency_s
            rec = InFlight(
                k, self.version, self.now, begin + float(lat), self.seq, plan, self.state.model, job, final, tickets.get(k)
            )
            self.flying[k] = rec
            heapq.heappush(self.heap, (rec.finish_s, k, self.seq))
            self.seq += 1
        return "started"

    def wait(self) -> bool:
        """Nothing in flight and nobody available: move the clock to the next moment an idle
        client comes online (the clock's rule, :meth:`fedselect.fl.clock.FleetClock.next_online`).
        False when every client already failed in this version, or when availability has no
        clock to wait on (``always``, ``bernoulli``).

        Raises:
            FleetGone: no idle client ever comes online again.
        """
        clock, n = self.run.clock, self.run.settings.num_clients
        if not clock.availability.clocked:
            return False
        busy = self.failed_now | set(self.flying)
        if len(busy) >= n:
            return False  # every client already failed in this version: nobody to wait for
        ids = [k for k in range(n) if k not in busy]
        at = clock.next_online(self.version + 1, self.now, ids, f"server version {self.version + 1}")
        log.info("server version %d: no client available at %.9g s; waiting until %.9g s", self.version, self.now, at)
        self.waited += at - self.now
        self.now = at
        return True

    # ------------------------------------------------------------------ events
    def step(self, recorder) -> bool:
        """Handle every finish at the next event time; True when the run is over (T versions, or
        the recorder asked to stop)."""
        at = self.heap[0][0]
        batch = []
        while self.heap and self.heap[0][0] == at:
            batch.append(heapq.heappop(self.heap))
        self.now = at
        recs = [self.flying.pop(k) for _, k, _ in batch]
        due = [r for r in recs if r.job is not None]
        results = dict(zip((r.client_id for r in due), self.run.transport.collect([r.ticket for r in due])))
        for rec in recs:
            k = rec.client_id
            o = rec.final if rec.job is None else outcome_of(self.run, rec.plan, k, results[k])
            if o.ok:
                self.buffer.append(Arrival(o, rec.version, rec.start_state))
            else:
                self.ended.append(o)
                self.failed_now.add(k)
            if len(self.buffer) >= self.cfg.buffer_size and self.aggregate(recorder):
                return True
        return False

    def aggregate(self, recorder) -> bool:
        """Server version ``version + 1`` from the buffer (possibly empty: nothing could arrive),
        its row recorded. True when the run is over."""
        run, v = self.run, self.version
        t = v + 1
        buf = list(self.buffer)
        outcomes = [a.outcome for a in buf] + self.ended
        stale = [v - a.version for a in buf]
        new = None
        if buf:
            avg = self.cfg.step(
                self.state.model,
                [a.outcome.state for a in buf],
                [a.start_state for a in buf],
                [a.outcome.num_samples for a in buf],
                stale,
                run.algorithm.upload_keys(),
            )
            new = replace(self.state, model={**self.state.model, **avg})
        state, committed = commit(t, self.state, new)
        failed = bool(outcomes) and (not buf or not committed)
        log_failures(t, outcomes, [a.outcome for a in buf], failed)
        evaluated, after, columns = learn(run, t, state, outcomes, self.before)
        cost = SelectionCost(
            sum(c.latency_s for c in self.costs),
            sum(c.upload_bytes for c in self.costs),
            sum(c.download_bytes for c in self.costs),
            sum(c.candidates for c in self.costs),
        )
        columns.update(
            version=t,
            staleness_mean=float(np.mean(stale)) if stale else math.nan,
            staleness_max=max(stale) if stale else math.nan,
        )
        ids = tuple(a.outcome.client_id for a in buf)
        result = AsyncResult(
            t,
            Selection(ids, cost),
            tuple(outcomes),
            len(buf) if committed else 0,
            failed,
            evaluated,
            after,
            columns,
            self.version_start,
            self.available,
            ids if committed else (),
            waited_s=self.waited,
            interval_s=self.now - self.version_start,
        )
        self.state, self.before, self.version = state, after, t
        run.clock.clock_s = self.now
        self.buffer, self.ended, self.costs, self.starts = [], [], [], {}
        self.failed_now = set()
        self.waited = 0.0
        self.version_start = self.now
        online = run.clock.online(t + 1, self.now)
        self.available = run.settings.num_clients if online is None else int(online.sum())
        stop = recorder.round(result, state)
        return bool(stop) or t >= run.settings.rounds


def run_buffered(run, recorder, state: ServerState | None = None, before: Evaluation | None = None, start: int = 0):
    """``mode: async``: prepare, then play server versions 1..T (module docstring), then finish.

    Returns what the algorithm's ``finish`` did, or None when the recorder stopped the run early.

    Raises:
        ValueError: ``start`` > 0 (an async run cannot be resumed: its jobs in flight are not
        checkpointed).
    """
    if start != 0:
        raise ValueError("mode: async cannot resume from a checkpoint (its in-flight jobs and buffer are not saved)")
    prepared, state, before = prepare(run)
    recorder.prepared(prepared, before)
    cfg: AsyncSettings = run.async_settings
    loop = _Loop(run, cfg, state, before, run.clock.clock_s)
    loop.version_start = loop.now
    online = run.clock.online(1, loop.now)
    loop.available = run.settings.num_clients if online is None else int(online.sum())
    status = loop.fill()
    while True:
        if loop.heap:
            if loop.step(recorder):
                break
            status = loop.fill()
            continue
        # nothing in flight: wait for a client to come online, else aggregate what there is
        if status == "none_idle" and loop.wait():
            status = loop.fill()
            continue
        if loop.aggregate(recorder):
            break
        status = loop.fill()
    if loop.version < run.settings.rounds:  # the recorder stopped the run
        return None
    if loop.flying:
        log.info("server version %d: %d client(s) still training at the end are not counted", loop.version, len(loop.flying))
    return run.algorithm.finish(loop.state, recorder.totals(), loop.before)
