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

Models (``availability.model``): ``always`` (everyone, forever: today's behaviour), ``bernoulli``
(each client online in a round with ``p_online``, for the whole round), ``markov`` (two-state
on/off process per client, exponential periods of means ``mean_on_s`` / ``mean_off_s``,
optionally scaled per client by a lognormal factor of sigma ``spread``), ``diurnal`` (a time
zone per client; in each local hour the client is online with a probability that follows a
cosine from ``p_trough`` to ``p_peak`` at ``peak_hour``; a day lasts ``day_s``) and ``trace``
(online intervals read from a CSV ``client,start_s,end_s``).

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

from fedselect.seeding import np_rng

__all__ = ["Availability", "AlwaysOnline", "Bernoulli", "Markov", "Diurnal", "Trace", "make_availability", "read_trace"]

#: markov periods drawn per client per block
BLOCK = 64
#: diurnal: at most this many hour slots are scanned for the end of an online period (a week)
_MAX_SLOTS = 24 * 7


class Availability:
    """Base class: every client always online (model ``always``)."""

    model = "always"
    #: False only for ``always``: the run then never restricts selection or fails a client
    restricts = False

    def __init__(self, num_clients: int):
        self.n = int(num_clients)

    def online(self, t: int, clock_s: float) -> np.ndarray:
        """``(N,)`` bool: clients online at ``clock_s`` (the start of round ``t``)."""
        return np.ones(self.n, dtype=bool)

    def online_until(self, t: int, clock_s: float, clients: Sequence[int]) -> np.ndarray:
        """``(len(clients),)`` seconds: when each client's current online period ends (inf: not
        in this run)."""
        return np.full(len(clients), math.inf)


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

    model, restricts = "markov", True

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


class Diurnal(Availability):
    """A time zone per client (a whole hour, uniform over the 24); in local hour ``h`` a client is
    online for the whole hour slot with probability
    ``p_trough + (p_peak - p_trough) * (1 + cos(2 pi (h - peak_hour) / 24)) / 2``."""

    model, restricts = "diurnal", True

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


class Trace(Availability):
    """Online intervals from a trace (:func:`read_trace`); a client without rows is never online."""

    model, restricts = "trace", True

    def __init__(self, num_clients: int, intervals: dict[int, np.ndarray]):
        super().__init__(num_clients)
        self.intervals = {k: v for k, v in intervals.items() if k < self.n}

    def _find(self, k: int, clock_s: float) -> float | None:
        iv = self.intervals.get(int(k))
        if iv is None or not len(iv):
            return None
        i = int(np.searchsorted(iv[:, 0], clock_s, side="right")) - 1
        return float(iv[i, 1]) if i >= 0 and iv[i, 0] <= clock_s < iv[i, 1] else None

    def online(self, t: int, clock_s: float) -> np.ndarray:
        out = np.zeros(self.n, dtype=bool)
        for k in self.intervals:
            out[k] = self._find(k, clock_s) is not None
        return out

    def online_until(self, t: int, clock_s: float, clients: Sequence[int]) -> np.ndarray:
        return np.array([self._find(k, clock_s) or clock_s for k in clients], dtype=np.float64)


def read_trace(path: str | Path, num_clients: int | None = None) -> dict[int, np.ndarray]:
    """Read an availability trace: a CSV with header ``client,start_s,end_s``, one row per online
    interval (seconds of simulated time; ``end_s`` may be ``inf``). Overlapping or touching
    intervals of a client are merged.

    Returns:
        client id -> ``(m, 2)`` float array of sorted, disjoint ``[start_s, end_s)`` intervals.

    Raises:
        FileNotFoundError: no such file.
        fedselect.data.files.DataFileError: a missing column, a non-number, a negative client id
            or start, ``end_s <= start_s``, or a client id >= ``num_clients``; the message names
            the file, the line and the column.
    """
    from fedselect.data.files import Col, DataFileError, read_csv_checked

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"availability trace not found: {p} (availability.trace_file)")
    cols = (Col("client", "int", lo=0), Col("start_s", "float", lo=0), Col("end_s", "str"))
    t = read_csv_checked(p, cols, header=True, what="availability trace CSV (client, start_s, end_s)")
    f = t.frame
    ends = []
    for i, text in enumerate(f["end_s"].astype(str)):
        try:
            v = float(text)
        except ValueError:
            raise DataFileError(p, f"end_s is not a number: {text!r}", int(t.lines[i]), t.describe("end_s")) from None
        if math.isnan(v):
            raise DataFileError(p, "end_s is NaN", int(t.lines[i]), t.describe("end_s"))
        ends.append(v)
    client = f["client"].to_numpy(dtype=np.int64)
    start = f["start_s"].to_numpy(dtype=np.float64)
    end = np.asarray(ends, dtype=np.float64)
    t.reject(end <= start, "end_s", "end_s must be later than start_s")
    if num_clients is not None:
        t.reject(client >= num_clients, "client", f"client id outside 0..{num_clients - 1} (data.num_clients = {num_clients})")
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
    return out


def make_availability(cfg, num_clients: int, seed: int) -> Availability:
    """The availability model of an ``availability`` config section (:class:`fedselect.config.AvailabilityConfig`).

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
    return Trace(num_clients, read_trace(cfg.trace_file, num_clients))
