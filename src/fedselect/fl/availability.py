"""Client availability on the simulated clock: who may be selected when a round starts, and
until when a participant stays online (docs/fleets.md).

Time is the run's simulated clock in seconds: round t starts at the sum of the latencies of
everything before it (the preparation and rounds 1..t-1, i.e. the previous row's
``e2e_latency_s``). Every model answers two questions:

``online(t, clock_s)``
    ``(N,)`` bool: the clients online when round ``t`` starts at ``clock_s``.
``online_until(t, clock_s, clients)``
    for each of ``clients`` (online at ``clock_s``) the moment (s) its online period ends; a
    participant still working then fails as ``dropout`` at that moment.
``next_online(t, clock_s, clients)``
    the earliest moment (s) at or after ``clock_s`` at which one of ``clients`` is online, or
    None when none of them ever is again: a server that finds nobody it could select waits
    until then (:meth:`fedselect.fl.clock.FleetClock.wait_for`), or stops with
    :class:`FleetGone`. Only the models whose answer depends on the time (``clocked``:
    markov, diurnal, trace) are waited on; ``always`` and ``bernoulli`` (drawn per round) have
    no clock to wait on.

Models (``availability.model``): ``always`` (everyone, forever: today's behaviour), ``bernoulli``
(each client online in a round with ``p_online``, for the whole round), ``markov`` (two-state
on/off process per client, exponential periods of means ``mean_on_s`` / ``mean_off_s``,
optionally scaled per client by a lognormal factor of sigma ``spread``), ``diurnal`` (a time
zone per client; in each local hour the client is online with a probability that follows a
cosine from ``p_trough`` to ``p_peak`` at ``peak_hour``; a day lasts ``day_s``) and ``trace``
(online intervals read from a CSV ``client,start_s,end_s[,period_s]``; with ``period_s`` a
client's intervals repeat every ``period_s`` seconds, as FedScale's behaviour trace repeats
every ``finish_time``: ``fedselect/world/fedscale.py``).

Determinism: what each client does at simulated time ``x`` depends only on (seed, client, x),
never on the order or the times at which the run asks: the markov periods come in blocks of
:data:`BLOCK` per client from ``np_rng(seed, "availability/markov/<b>")``, the diurnal slots
from ``np_rng(seed, "availability/diurnal/<slot>")``, bernoulli from
``np_rng(seed, "availability/<t>")``. Every method compared on one federation therefore faces
the same fleet at the same simulated time (and a resumed run the same as an uninterrupted one).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from fedselect.common.seeding import np_rng

__all__ = [
    "Availability",
    "AlwaysOnline",
    "Bernoulli",
    "Markov",
    "Diurnal",
    "Trace",
    "FleetGone",
    "make_availability",
    "read_trace",
]

#: markov periods drawn per client per block
BLOCK = 64
#: diurnal: at most this many hour slots are scanned for the end of an online period (a week)
_MAX_SLOTS = 24 * 7
#: diurnal: at most this many hour slots are scanned for the next client to come online (a year)
_MAX_WAIT_SLOTS = 24 * 366


class FleetGone(RuntimeError):
    """No client the server could select is online, and none of them ever comes online again
    (a trace that has ended, a fleet that is never online): the run cannot go on. The message
    names the round, the simulated time and the reason (docs/fleets.md)."""


class Availability:
    """Base class: every client always online (model ``always``)."""

    model = "always"
    #: False only for ``always``: the run then never restricts selection or fails a client
    restricts = False
    #: who is online depends on the simulated time (markov, diurnal, trace), so a server that
    #: finds nobody to select can wait for the next client to come online; False for ``always``
    #: and ``bernoulli`` (drawn per round: there is no later moment of the round to wait for)
    clocked = False

    def __init__(self, num_clients: int):
        self.n = int(num_clients)

    def online(self, t: int, clock_s: float) -> np.ndarray:
        """``(N,)`` bool: clients online at ``clock_s`` (the start of round ``t``)."""
        return np.ones(self.n, dtype=bool)

    def online_until(self, t: int, clock_s: float, clients: Sequence[int]) -> np.ndarray:
        """``(len(clients),)`` seconds: when each client's current online period ends (inf: not
        in this run)."""
        return np.full(len(clients), math.inf)

    def next_online(self, t: int, clock_s: float, clients: Sequence[int]) -> float | None:
        """The earliest moment (s) at or after ``clock_s`` at which one of ``clients`` is online
        (``clock_s`` itself when one is), or None when none of them is ever online again."""
        return self._now_or_never(t, clock_s, clients)

    def never_reason(self, clock_s: float, clients: Sequence[int]) -> str:
        """Why none of ``clients`` comes online after ``clock_s`` (for :class:`FleetGone`)."""
        return "none of them is online"

    def _now_or_never(self, t: int, clock_s: float, clients: Sequence[int]) -> float | None:
        ids = np.asarray(clients, dtype=np.int64)
        return float(clock_s) if len(ids) and self.online(t, clock_s)[ids].any() else None


AlwaysOnline = Availability


class Bernoulli(Availability):
    """Online in round ``t`` with probability ``p_online``, independently per client and round;
    an online client stays for the whole round."""

    model, restricts = "bernoulli", True

    def __init__(self, num_clients: int, seed: int, p_online: float):
        super().__init__(num_clients)
        self.seed, self.p = int(seed), float(p_online)

    def online(self, t: int, clock_s: float) -> np.ndarray:
        return np_rng(self.seed, f"availability/{int(t)}").random(self.n) < self.p


class Markov(Availability):
    """Two-state (on/off) continuous-time Markov process per client.

    Client k starts online with probability ``on_k / (on_k + off_k)`` (the stationary share),
    then alternates periods drawn Exp(mean ``on_k``) and Exp(mean ``off_k``); with ``spread`` > 0
    the means are ``mean * exp(spread * z_k)``, one standard normal ``z_k`` per client.
    """

    model, restricts, clocked = "markov", True, True

    def __init__(self, num_clients: int, seed: int, mean_on_s: float, mean_off_s: float, spread: float = 0.0):
        super().__init__(num_clients)
        self.seed = int(seed)
        z = np_rng(seed, "availability/markov/spread").standard_normal(self.n) if spread > 0 else np.zeros(self.n)
        factor = np.exp(float(spread) * z)
        self.on_s, self.off_s = float(mean_on_s) * factor, float(mean_off_s) * factor
        u0 = np_rng(seed, "availability/markov/start").random(self.n)
        self.start_on = u0 < self.on_s / (self.on_s + self.off_s)
        self.switch = np.zeros((self.n, 0))  # (N, periods drawn): cumulative switching times, s
        self._extend()

    def _extend(self) -> None:
        b = self.switch.shape[1] // BLOCK
        u = np_rng(self.seed, f"availability/markov/{b}").random((self.n, BLOCK))
        k = np.arange(self.switch.shape[1], self.switch.shape[1] + BLOCK)
        # period j of a client is an on period when (j even) == start_on
        on_period = (k[None, :] % 2 == 0) == self.start_on[:, None]
        mean = np.where(on_period, self.on_s[:, None], self.off_s[:, None])
        length = -mean * np.log1p(-u)  # Exp(mean), u in [0, 1)
        last = self.switch[:, -1:] if self.switch.shape[1] else np.zeros((self.n, 1))
        self.switch = np.concatenate([self.switch, last + np.cumsum(length, axis=1)], axis=1)

    def _cover(self, clock_s: float) -> None:
        while self.switch[:, -1].min() <= clock_s:  # each block adds 64 periods of positive length
            self._extend()

    def online(self, t: int, clock_s: float) -> np.ndarray:
        self._cover(clock_s)
        passed = (self.switch <= clock_s).sum(axis=1)  # periods finished by clock_s
        return (passed % 2 == 0) == self.start_on

    def online_until(self, t: int, clock_s: float, clients: Sequence[int]) -> np.ndarray:
        self._cover(clock_s)
        rows = self.switch[np.asarray(clients, dtype=np.int64)]
        idx = (rows <= clock_s).sum(axis=1)
        return rows[np.arange(len(rows)), idx]

    def next_online(self, t: int, clock_s: float, clients: Sequence[int]) -> float | None:
        """Now if one of ``clients`` is online, else the end of the earliest of their current
        offline periods (every period is finite: a markov client always comes back)."""
        ids = np.asarray(clients, dtype=np.int64)
        if not len(ids):
            return None
        self._cover(clock_s)
        rows = self.switch[ids]
        idx = (rows <= clock_s).sum(axis=1)
        if ((idx % 2 == 0) == self.start_on[ids]).any():
            return float(clock_s)
        return float(rows[np.arange(len(rows)), idx].min())  # the next switch of an offline client turns it on


class Diurnal(Availability):
    """A time zone per client (a whole hour, uniform over the 24); in local hour ``h`` a client is
    online for the whole hour slot with probability
    ``p_trough + (p_peak - p_trough) * (1 + cos(2 pi (h - peak_hour) / 24)) / 2``."""

    model, restricts, clocked = "diurnal", True, True

    def __init__(self, num_clients: int, seed: int, day_s: float, p_peak: float, p_trough: float, peak_hour: float):
        super().__init__(num_clients)
        self.seed, self.slot_s = int(seed), float(day_s) / 24.0
        self.zone = np_rng(seed, "availability/diurnal/zone").integers(0, 24, self.n)
        hours = np.arange(24)
        self.p_hour = p_trough + (p_peak - p_trough) * (1 + np.cos(2 * np.pi * (hours - peak_hour) / 24)) / 2

    def _slot_online(self, slot: int) -> np.ndarray:
        local = (slot + self.zone) % 24
        return np_rng(self.seed, f"availability/diurnal/{int(slot)}").random(self.n) < self.p_hour[local]

    def online(self, t: int, clock_s: float) -> np.ndarray:
        return self._slot_online(int(clock_s // self.slot_s))

    def online_until(self, t: int, clock_s: float, clients: Sequence[int]) -> np.ndarray:
        ids = np.asarray(clients, dtype=np.int64)
        first = int(clock_s // self.slot_s)
        end = np.full(len(ids), math.inf)
        open_ = np.ones(len(ids), dtype=bool)
        for slot in range(first + 1, first + 1 + _MAX_SLOTS):
            off = open_ & ~self._slot_online(slot)[ids]
            end[off] = slot * self.slot_s
            open_ &= ~off
            if not open_.any():
                break
        return end  # still online a week later: inf (the run ends long before)

    def next_online(self, t: int, clock_s: float, clients: Sequence[int]) -> float | None:
        """Now if one of ``clients`` is online, else the start of the first later hour slot in
        which one of them is (None when the online probability is 0 at every hour, or when
        none came online within a year of simulated days)."""
        ids = np.asarray(clients, dtype=np.int64)
        if not len(ids):
            return None
        first = int(clock_s // self.slot_s)
        if self._slot_online(first)[ids].any():
            return float(clock_s)
        if self.p_hour.max() <= 0:
            return None
        for slot in range(first + 1, first + 1 + _MAX_WAIT_SLOTS):
            if self._slot_online(slot)[ids].any():
                return slot * self.slot_s  # FleetClock.wait_for moves it up to the slot's first instant
        return None

    def never_reason(self, clock_s: float, clients: Sequence[int]) -> str:
        if self.p_hour.max() <= 0:
            return "diurnal availability with p_peak = p_trough = 0: no client is ever online"
        return f"none of them came online within {_MAX_WAIT_SLOTS // 24} simulated days of {self.slot_s * 24:.6g} s"


class Trace(Availability):
    """Online intervals from a trace (:func:`read_trace`); a client without rows is never online.

    A client with a period (``periods[k]``, the CSV's ``period_s``) repeats its intervals every
    period: at time x it is online iff ``x mod period`` falls in one of them, as FedScale's
    ``ClientMetadata.is_active`` reads a behaviour record (``cur_time % finish_time``,
    ``fedscale/cloud/internal/client_metadata.py``). Without a period its last interval is its
    last time online: the trace ends there.
    """

    model, restricts, clocked = "trace", True, True

    def __init__(self, num_clients: int, intervals: dict[int, np.ndarray], periods: dict[int, float] | None = None):
        super().__init__(num_clients)
        self.intervals = {k: v for k, v in intervals.items() if k < self.n and len(v)}
        self.periods = {k: float(p) for k, p in (periods or {}).items() if k in self.intervals}

    def _cycle(self, k: int, x: float) -> tuple[float, float, float]:
        """(start of the cycle holding x, x within it, the period; inf without one)."""
        p = self.periods.get(k, math.inf)
        if math.isinf(p):
            return 0.0, x, p
        c = math.floor(x / p)
        norm = x - c * p
        if norm < 0:  # x / p rounded up to a whole number
            c, norm = c - 1, norm + p
        elif norm >= p:
            c, norm = c + 1, norm - p
        return c * p, norm, p

    def _find(self, k: int, clock_s: float) -> float | None:
        """When client ``k``'s online period holding ``clock_s`` ends (s), or None: offline."""
        iv = self.intervals.get(int(k))
        if iv is None:
            return None
        base, norm, p = self._cycle(k, clock_s)
        i = int(np.searchsorted(iv[:, 0], norm, side="right")) - 1
        if i < 0 or not (iv[i, 0] <= norm < iv[i, 1]):
            return None
        if iv[i, 1] < p or iv[0, 0] > 0:
            return float(base + iv[i, 1])
        # the period runs to the cycle's end and the next cycle starts online: it goes on
        if len(iv) == 1:
            return math.inf  # online over the whole cycle, for ever
        return float(base + p + iv[0, 1])

    def online(self, t: int, clock_s: float) -> np.ndarray:
        out = np.zeros(self.n, dtype=bool)
        for k in self.intervals:
            out[k] = self._find(k, clock_s) is not None
        return out

    def online_until(self, t: int, clock_s: float, clients: Sequence[int]) -> np.ndarray:
        ends = [self._find(k, clock_s) for k in clients]
        return np.array([clock_s if e is None else e for e in ends], dtype=np.float64)

    def _next_start(self, k: int, clock_s: float) -> float | None:
        iv = self.intervals.get(int(k))
        if iv is None:
            return None
        if self._find(k, clock_s) is not None:
            return float(clock_s)
        base, norm, p = self._cycle(k, clock_s)
        j = int(np.searchsorted(iv[:, 0], norm, side="right"))
        if j < len(iv):
            return float(base + iv[j, 0])
        return None if math.isinf(p) else float(base + p + iv[0, 0])

    def next_online(self, t: int, clock_s: float, clients: Sequence[int]) -> float | None:
        """Now if one of ``clients`` is online, else the earliest start of a later interval of
        theirs (the next cycle's first one for a client with a period); None once every one of
        them has passed its last interval."""
        starts = [s for s in (self._next_start(k, clock_s) for k in clients) if s is not None]
        return min(starts) if starts else None

    def never_reason(self, clock_s: float, clients: Sequence[int]) -> str:
        rows = [self.intervals[k] for k in clients if k in self.intervals]
        if not rows:
            return "the availability trace has no online interval for any of them"
        last = max(float(iv[-1, 1]) for iv in rows)
        return f"the availability trace has ended for them: their last online interval ends at {last:.6g} s"


def read_trace(path: str | Path, num_clients: int | None = None) -> tuple[dict[int, np.ndarray], dict[int, float]]:
    """Read an availability trace: a CSV with header ``client,start_s,end_s`` and optionally
    ``period_s``, one row per online interval (seconds of simulated time; ``end_s`` may be
    ``inf``). Overlapping or touching intervals of a client are merged. With ``period_s`` (the
    same on every row of a client) the client's intervals, which must then lie within
    ``[0, period_s]``, repeat every ``period_s`` seconds (FedScale's ``finish_time``).

    Returns:
        (intervals, periods): client id -> ``(m, 2)`` float array of sorted, disjoint
        ``[start_s, end_s)`` intervals; client id -> period (s) for the clients that have one.

    Raises:
        FileNotFoundError: no such file.
        fedselect.world.data.file_errors.DataFileError: a missing column, a non-number, a negative client id
            or start, ``end_s <= start_s``, a client id >= ``num_clients``, a period <= 0, a
            client with two periods, or an interval outside its period; the message names the
            file, the line and the column.
    """
    from fedselect.world.data.checked_csv import Col, read_csv_checked
    from fedselect.world.data.file_errors import DataFileError

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"availability trace not found: {p} (availability.trace_file)")
    cols = (
        Col("client", "int", lo=0),
        Col("start_s", "float", lo=0),
        Col("end_s", "str"),
        Col("period_s", "str", required=False, present=False),
    )
    t = read_csv_checked(p, cols, header=True, what="availability trace CSV (client, start_s, end_s[, period_s])")
    f = t.frame

    def numbers(col: str, empty: float) -> np.ndarray:
        out = []
        for i, text in enumerate(f[col].astype(str)):
            try:
                v = empty if text.strip() == "" else float(text)
            except ValueError:
                raise DataFileError(p, f"{col} is not a number: {text!r}", int(t.lines[i]), t.describe(col)) from None
            if math.isnan(v):
                raise DataFileError(p, f"{col} is NaN", int(t.lines[i]), t.describe(col))
            out.append(v)
        return np.asarray(out, dtype=np.float64)

    client = f["client"].to_numpy(dtype=np.int64)
    start = f["start_s"].to_numpy(dtype=np.float64)
    end = numbers("end_s", math.nan)
    period = numbers("period_s", math.inf)
    t.reject(end <= start, "end_s", "end_s must be later than start_s")
    if num_clients is not None:
        t.reject(client >= num_clients, "client", f"client id outside 0..{num_clients - 1} (data.num_clients = {num_clients})")
    t.reject(period <= 0, "period_s", "period_s must be > 0 (empty: no period)")
    periodic = np.isfinite(period)
    t.reject(periodic & (end > period), "end_s", "an interval must end within its client's period_s")
    for k in np.unique(client[periodic]):
        mine = period[client == k]
        t.reject((client == k) & (period != mine[0]), "period_s", f"client {int(k)} has rows with different period_s")
    out: dict[int, np.ndarray] = {}
    for k in np.unique(client):
        iv = np.stack([start[client == k], end[client == k]], axis=1)
        iv = iv[np.argsort(iv[:, 0], kind="stable")]
        merged = [list(iv[0])]
        for s, e in iv[1:]:
            if s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        out[int(k)] = np.asarray(merged, dtype=np.float64)
    periods = {int(k): float(period[client == k][0]) for k in np.unique(client[periodic])}
    return out, periods


def make_availability(cfg, num_clients: int, seed: int) -> Availability:
    """The availability model of an ``availability`` config section (:class:`fedselect.config.schema.AvailabilityConfig`).

    Raises:
        FileNotFoundError / DataFileError: the trace file is missing or invalid.
    """
    m = cfg.model
    if m == "always":
        return Availability(num_clients)
    if m == "bernoulli":
        return Bernoulli(num_clients, seed, cfg.p_online)
    if m == "markov":
        return Markov(num_clients, seed, cfg.mean_on_s, cfg.mean_off_s, cfg.spread)
    if m == "diurnal":
        return Diurnal(num_clients, seed, cfg.day_s, cfg.p_peak, cfg.p_trough, cfg.peak_hour)
    return Trace(num_clients, *read_trace(cfg.trace_file, num_clients))
