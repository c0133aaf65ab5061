"""Who is who on a Flower grid: node ids <-> fedselect client ids, the transport's options, and
the order in which budgeted-online candidates connect.

A node says which client it serves in its reply to a ``query`` (:func:`fedselect.flower.wire.profile_reply`);
Flower's random node ids never reach a selector. Every profile is checked against the server's
federation (:func:`fedselect.flower.wire.federation_hash`), so a node built from other data,
model, system settings or seed is named and left out.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from flwr.serverapp import Grid
from flwr.superlink.grid import InMemoryGrid

from fedselect.config.schema import ConfigError
from fedselect.flower.messaging import check_in_flight, exchange
from fedselect.flower.wire import profile_client, profile_of, profile_problem, query_message
from fedselect.world.federation import Federation

log = logging.getLogger("fedselect.flower")

__all__ = ["FlowerOptions", "NodeDirectory", "Arrivals", "LATENCY_MODES", "ARRIVAL_MODES", "DROPOUT_CODES"]

#: ``latency`` option: the cost model's latency, or the measured round trip
LATENCY_MODES = ("simulated", "measured")
#: ``arrival`` option: budgeted-online candidates in the simulator's seeded order, or as the nodes connect
ARRIVAL_MODES = ("seeded", "nodes")
#: error codes of replies that mean "nobody answered" (message / reply unavailable, node
#: unavailable: flwr.common.constant.ErrorCode); every other error code is an ``error``
DROPOUT_CODES = (3, 4, 5)


@dataclass(frozen=True)
class FlowerOptions:
    """How the strategy talks to the nodes.

    Attributes:
        latency: ``simulated`` or ``measured`` (module docstring).
        reply_timeout: seconds to wait for the replies of one exchange (a round's train
            messages, a probe, an evaluation, a query); a node still silent then failed.
        connect_timeout: seconds to wait at the start for the N nodes to connect (clients
            whose node has not connected by then are failures whenever chosen; budgeted-online
            candidates that never connect are scored NaN).
        arrival: ``seeded`` or ``nodes`` (module docstring); None = ``seeded`` with simulated
            latency (reproducible), ``nodes`` with measured latency.
        poll_s: seconds between two polls of the SuperLink for replies and new nodes; None =
            0.01 s on Flower's simulation engine (its in-memory grid: a poll is a call in this
            process) and 0.1 s on a deployment's grid (a poll is a request to the SuperLink):
            :meth:`poll_interval`.
        in_flight: at most this many of a round's job messages waiting for their reply at once,
            the costliest first (:func:`fedselect.fl.work.job_cost`), each reply letting the next
            one go; None = all at once. For a grid whose nodes share a few workers: Flower's
            simulation engine queues the messages it finds in node order, not in the order they
            were pushed, so without a window its actors may take the longest job last (the
            simulator's pool hands out the longest first). :class:`fedselect.flower.engine.FlowerEngine`
            sets it to its actors + 1. Used only where a round's median job is expected to last
            at least ``in_flight_min_job_s`` (from the nodes' own times of earlier training jobs,
            the ``handler-s`` of their replies, per unit of cost): the engine takes newly pushed
            messages every 0.1 s, so a window of shorter jobs would leave its actors waiting.
        in_flight_min_job_s: that least expected time of the median job (s), > 0.
    """

    latency: str = "simulated"
    reply_timeout: float = 600.0
    connect_timeout: float = 300.0
    arrival: str | None = None
    poll_s: float | None = None
    in_flight: int | None = None
    in_flight_min_job_s: float = 0.25

    def __post_init__(self) -> None:
        if self.latency not in LATENCY_MODES:
            raise ValueError(f"latency must be one of {list(LATENCY_MODES)}, got {self.latency!r}")
        if self.arrival is not None and self.arrival not in ARRIVAL_MODES:
            raise ValueError(f"arrival must be one of {list(ARRIVAL_MODES)} (or None), got {self.arrival!r}")
        check_in_flight(self.in_flight)
        for name in ("reply_timeout", "connect_timeout", "poll_s", "in_flight_min_job_s"):
            v = getattr(self, name)
            if v is None and name == "poll_s":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a number of seconds > 0, got {v!r}")

    @property
    def measured(self) -> bool:
        return self.latency == "measured"

    @property
    def arrival_mode(self) -> str:
        return self.arrival or ("nodes" if self.measured else "seeded")

    def poll_interval(self, grid: Grid) -> float:
        """Seconds between two polls of ``grid``: ``poll_s``, or its default for the grid (above)."""
        if self.poll_s is not None:
            return float(self.poll_s)
        return 0.01 if isinstance(grid, InMemoryGrid) else 0.1


class NodeDirectory:
    """Who is who: Flower node id <-> fedselect client id, learnt from ``query`` replies.

    Nodes are queried when first seen (:meth:`poll`); a node that vanishes from the SuperLink's
    list loses its client; a client whose node is replaced (a SuperNode restarted) is mapped to
    the new node. Every profile is checked (``check``): by default against the server's federation.

    Attributes:
        arrivals: client ids in the order their nodes first answered the query.
        profiles: client id -> its last ``profile`` record (dict).
    """

    def __init__(
        self,
        grid: Grid,
        fed: Federation | None,
        options: FlowerOptions,
        stop=None,
        check: Callable[[dict[str, Any], int], str | None] | None = None,
    ):
        self.grid, self.fed, self.options, self.stop = grid, fed, options, stop
        self.poll_s = options.poll_interval(grid)
        #: ``(profile, node id) -> why it is refused, or None``: by default the profile must
        #: fit the server's federation (:func:`~fedselect.flower.wire.profile_problem`); a real
        #: fleet's server checks the nodes' own reports instead (:mod:`fedselect.flower.fleet`)
        self.check = check or (lambda p, node: profile_problem(p, self.fed, node))
        self.node_of: dict[int, int] = {}
        self.client_of: dict[int, int] = {}
        self.profiles: dict[int, dict[str, Any]] = {}
        self.arrivals: list[int] = []
        self._asked: set[int] = set()
        self._rejected: set[int] = set()
        self.query_s = 0.0

    def check_stop(self) -> None:
        """Raises KeyboardInterrupt once the run's ``stop`` event is set."""
        if self.stop is not None and self.stop.is_set():
            raise KeyboardInterrupt("the Flower run was interrupted")

    def node(self, k: int) -> int | None:
        """The node serving client ``k`` now, or None."""
        return self.node_of.get(int(k))

    def poll(self, strict: bool = False) -> list[int]:
        """Query the nodes not seen yet, drop the vanished ones. Returns the clients mapped now.

        Args:
            strict: a node that does not fit the federation, or whose query fails, is an error
                (at the start); otherwise it is logged and left out.

        Raises:
            ConfigError: with ``strict``, a node of another federation. RuntimeError: with
                ``strict``, a node whose ClientApp failed to answer the query.
        """
        ids = {int(i) for i in self.grid.get_node_ids()}
        for node in [nd for nd in self.client_of if nd not in ids]:
            k = self.client_of.pop(node)
            if self.node_of.get(k) == node:
                del self.node_of[k]
                log.warning("client %d: its node %d left the federation", k, node)
        new = sorted(i for i in ids if i not in self._asked and i not in self._rejected)
        if not new:
            return []
        self._asked |= set(new)
        msgs = [query_message(i) for i in new]
        ex = exchange(self.grid, msgs, self.options.reply_timeout, self.poll_s, self.stop)
        self.query_s += ex.seconds
        mapped = []
        for node in sorted(ex.replies, key=lambda nd: ex.arrival[nd]):
            reply = ex.replies[node]
            if reply.has_error():
                why = f"node {node} could not answer the query (error code {reply.error.code}): {reply.error.reason}"
                if strict and reply.error.code not in DROPOUT_CODES:
                    raise RuntimeError(why)
                log.warning("%s; asking again later", why)
                self._asked.discard(node)
                continue
            profile = profile_of(reply)
            problem = self.check(profile, node)
            if problem is not None:
                if strict:
                    raise ConfigError(problem)
                log.error("%s: left out", problem)
                self._rejected.add(node)
                continue
            k = profile_client(profile)
            old = self.node_of.get(k)
            if old is not None and old != node:
                log.warning("client %d: node %d replaces node %d", k, node, old)
                self.client_of.pop(old, None)
            self.node_of[k], self.client_of[node] = node, k
            self.profiles[k] = profile
            if k not in self.arrivals:
                self.arrivals.append(k)
            mapped.append(k)
        for node in ex.silent:  # not ready yet: ask again at the next poll
            self._asked.discard(node)
        return mapped

    def wait(self, clients: Iterable[int], timeout: float, strict: bool = True) -> list[int]:
        """Poll until every client of ``clients`` has a node, or ``timeout`` seconds passed.
        Returns the clients still without a node."""
        want = {int(k) for k in clients}
        deadline = time.monotonic() + timeout
        while True:
            self.poll(strict)
            missing = sorted(k for k in want if k not in self.node_of)
            if not missing or time.monotonic() >= deadline:
                return missing
            self.check_stop()
            time.sleep(min(self.poll_s * 5, max(0.0, deadline - time.monotonic())))


class Arrivals(Sequence):
    """Budgeted-online candidates in the order their nodes connected (lazy: item i waits until
    i + 1 of the candidates have connected; candidates still missing at the connect timeout
    come last, in the seeded order, and are scored NaN)."""

    def __init__(self, nodes: NodeDirectory, options: FlowerOptions, seeded: list[int]):
        self.nodes, self.options, self.pool = nodes, options, list(seeded)
        self.order: list[int] = []
        self._deadline: float | None = None

    def __len__(self) -> int:
        return len(self.pool)

    def _fill(self, i: int) -> None:
        nodes, pool = self.nodes, set(self.pool)
        if self._deadline is None:
            self._deadline = time.monotonic() + self.options.connect_timeout
        while len(self.order) <= i:
            self.order += [k for k in nodes.arrivals if k in pool and k not in self.order]
            if len(self.order) > i:
                return
            if time.monotonic() >= self._deadline:
                rest = [k for k in self.pool if k not in self.order]
                log.warning(
                    "budgeted online: candidates %s did not connect within %.0f s; they come last and score NaN",
                    rest,
                    self.options.connect_timeout,
                )
                self.order += rest
                return
            if not nodes.poll():
                nodes.check_stop()
                time.sleep(nodes.poll_s)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            idx = range(*i.indices(len(self)))
            if len(idx):
                self._fill(max(idx))
            return [self.order[j] for j in idx]
        j = i + len(self) if i < 0 else i
        if not 0 <= j < len(self):
            raise IndexError(i)
        self._fill(j)
        return self.order[j]
