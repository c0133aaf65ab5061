"""Flower's transport: the jobs of a round (:mod:`fedselect.fl.work`) as messages to the nodes.

:class:`FlowerTransport` implements :class:`fedselect.fl.work.Transport` over a Flower
``Grid``: a job for client ``k`` goes to the node serving ``k`` (:class:`NodeDirectory`), as
the message of :mod:`fedselect.flower.wire`; the node runs it with the simulator's own
:class:`~fedselect.fl.work.LocalTransport` on its federation and answers with the result.
Jobs without a client (scores on the server's validation and test sets) run on the server, as in
the simulator. With the same config and seed a run therefore gives the simulator's
``metrics.csv`` and model, byte for byte (simulated latency).

What can go wrong, and what it becomes (the round turns it into the simulator's failure
kinds, :mod:`fedselect.fl.round`):

* the client has no connected node, never answers until the reply timeout, or the SuperLink
  says it is unavailable (error codes 3, 4, 5): ``dropout``;
* with measured latency and a round deadline, a node still silent at the deadline: ``timeout``;
* an error reply (the ClientApp raised or crashed), or a reply that does not fit the model
  (:func:`fedselect.flower.wire.decode_result`): ``error``, with the reason.

With ``latency: measured`` every result carries the measured round trip, the node's handler
time and the sizes of the arrays sent (:class:`fedselect.fl.types.Measured`).

``mode: async`` (docs/async.md) uses :meth:`FlowerTransport.submit` and
:meth:`~FlowerTransport.collect` instead of :meth:`~FlowerTransport.run`: a job is pushed to
its node the moment its client starts, each node answers when it has trained, and the replies
are pulled as they come (one message in flight per node: a node's next job waits for its
reply). The server takes the results in the order of the simulated clock, so an async run gives
the simulator's ``metrics.csv`` byte for byte; ``latency: measured`` is not available in async
mode (its clock would be the wall clock: refused by :mod:`fedselect.flower.grid_run`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Sequence

from flwr.app import Message
from flwr.serverapp import Grid

from fedselect.fl.aggregate import state_bytes
from fedselect.fl.local.objective import objective_bytes
from fedselect.fl.local.train import TrainConfig
from fedselect.fl.types import Measured
from fedselect.fl.work import Job, LocalTransport, Result, TrainJob, job_cost
from fedselect.flower.messaging import Exchange, exchange
from fedselect.flower.nodes import DROPOUT_CODES, Arrivals, FlowerOptions, NodeDirectory
from fedselect.flower.wire import decode_result, encode_job, failed_result, handler_s, round_of
from fedselect.world.federation import Federation

log = logging.getLogger("fedselect.flower")

__all__ = ["FlowerTransport"]


@dataclass(frozen=True)
class _Sent:
    """A submitted job's message in flight: its ticket, the job, its node, when it was pushed
    (``time.perf_counter()``)."""

    ticket: int
    job: Job
    node: int
    pushed: float


class FlowerTransport:
    """Jobs as messages to the nodes of ``grid`` (module docstring).

    Args:
        grid: the ServerApp's grid.
        fed: the server's federation (its validation and test sets, the model's entries, the profiles).
        train_cfg: local-training settings sent with every job.
        options: :class:`fedselect.flower.nodes.FlowerOptions`.
        server: the transport of the server's own jobs (validation- and test-set scores; a
            :class:`~fedselect.fl.work.LocalTransport` in this process).
        deadline_s: the round deadline; with measured latency the server waits that long for
            training replies.
        stop: a ``threading.Event`` that interrupts every wait once set (Ctrl-C in the engine).
        nodes: the directory of nodes to talk to (default: a new one checking the nodes'
            profiles against ``fed``; a real fleet's server passes the one it learnt the fleet with).

    Attributes:
        nodes: the :class:`NodeDirectory`. messages: messages sent so far.
    """

    workers = 1

    def __init__(
        self,
        grid: Grid,
        fed: Federation,
        train_cfg: TrainConfig,
        options: FlowerOptions,
        server: LocalTransport,
        deadline_s: float | None = None,
        stop=None,
        nodes: NodeDirectory | None = None,
    ):
        self.grid, self.fed, self.train_cfg, self.options, self.server = grid, fed, train_cfg, options, server
        self.stop = stop
        self.measured = options.measured
        self.deadline_s = deadline_s
        self.nodes = nodes if nodes is not None else NodeDirectory(grid, fed, options, stop)
        self.model = fed.new_model().state_dict()
        self.messages = 0
        self._polled = 0
        self._next = 0  # the next ticket
        self._queued: list[tuple[int, Job, int]] = []  # (ticket, job, node) waiting for their node
        self._sent: dict[str, _Sent] = {}  # message id -> what it carries
        self._done: dict[int, Result] = {}  # ticket -> result not collected yet
        self._node_s, self._units = 0.0, 0  # the nodes' seconds on training jobs, and those jobs' cost units

    def connect(self, wait_for_all: bool = True) -> list[int]:
        """Learn the nodes: wait up to ``connect_timeout`` for all N (or only poll once).
        Returns the clients still without a node (logged).

        Raises:
            ConfigError / RuntimeError: a node of another federation, or one whose query failed.
        """
        n = self.fed.num_clients
        if not wait_for_all:
            self.nodes.poll(strict=True)
            return sorted(set(range(n)) - set(self.nodes.node_of))
        missing = self.nodes.wait(range(n), self.options.connect_timeout, strict=True)
        if missing:
            log.warning("clients %s have no node after %.0f s: they fail whenever chosen", missing, self.options.connect_timeout)
        return missing

    # ---------------------------------------------------------------- Transport
    def run(self, jobs: Sequence[Job]) -> list[Result]:
        """The results in job order. A node gets its jobs one exchange after another (one
        message per node in each); jobs without a client run on the server. With
        ``options.in_flight`` a wave of long training jobs goes out the costliest first, that
        many at a time (:class:`~fedselect.flower.nodes.FlowerOptions`); results do not depend on it."""
        out: list[Result | None] = [None] * len(jobs)
        local = [i for i, j in enumerate(jobs) if j.client_id is None]
        for i, r in zip(local, self.run_server([jobs[i] for i in local]) if local else []):
            out[i] = r
        waves: list[dict[int, int]] = []  # node -> job index, one message per node per wave
        self._poll_once_per_round(jobs)
        for i, j in enumerate(jobs):
            if j.client_id is None:
                continue
            node = self.nodes.node(j.client_id)
            if node is None:
                out[i] = self.unreachable(j)
                continue
            wave = next((w for w in waves if node not in w), None)
            if wave is None:
                waves.append(wave := {})
            wave[node] = i
        for wave in waves:
            items = list(wave.items())
            in_flight = self._window([jobs[i] for _, i in items])
            if in_flight is not None:  # the costliest first, as the simulator's pool hands them out
                items.sort(key=lambda item: -self._cost(jobs[item[1]]))
            msgs = [encode_job(jobs[i], node, self.train_cfg) for node, i in items]
            self.messages += len(msgs)
            ex = self._exchange(msgs, any(isinstance(jobs[i], TrainJob) for _, i in items), in_flight)
            for node, i in items:
                out[i] = self.result(jobs[i], ex, node)
            self._learn_job_time([(jobs[i], ex.replies.get(node)) for node, i in items])
        return out  # type: ignore[return-value]

    def _cost(self, job: Job) -> int:
        return job_cost(job, len(self.fed.clients[job.client_id].train_indices))

    def _window(self, wave: Sequence[Job]) -> int | None:
        """``options.in_flight`` for a wave of training jobs longer than it whose median expected
        time (the nodes' seconds per unit of :func:`~fedselect.fl.work.job_cost` so far) is at
        least ``options.in_flight_min_job_s``; else None: all at once."""
        n = self.options.in_flight
        if n is None or len(wave) <= n or not self._units or not all(isinstance(j, TrainJob) for j in wave):
            return None
        expected = sorted(self._cost(j) * self._node_s / self._units for j in wave)
        return n if expected[len(expected) // 2] >= self.options.in_flight_min_job_s else None

    def _learn_job_time(self, answered: list[tuple[Job, Message | None]]) -> None:
        """Add the nodes' own times of answered training jobs (``handler-s``) to the estimate."""
        for job, reply in answered:
            if isinstance(job, TrainJob) and reply is not None and not reply.has_error():
                seconds = handler_s(reply)
                if seconds > 0:
                    self._node_s += seconds
                    self._units += self._cost(job)

    def run_server(self, jobs: Sequence[Job]) -> list[Result]:
        """The results of the jobs without a client (scores on the server's validation and
        test sets): run on the server (``server``)."""
        return self.server.run(jobs)

    def _poll_once_per_round(self, jobs: Sequence[Job]) -> None:
        """Once per round: learn the nodes that joined or left since the last one."""
        t = max((round_of(j) for j in jobs), default=0)
        if t > self._polled:
            self.nodes.poll()
            self._polled = t

    # ---------------------------------------------------------------- async: submit / collect
    def submit(self, jobs: Sequence[Job]) -> list[int]:
        """Push each job to its node now (module docstring); returns their tickets. A job
        without a client runs on the server at once; one whose client has no node is a
        ``dropout`` at once; a job for a node that is still busy is pushed once it answers."""
        self._poll_once_per_round(jobs)
        tickets = []
        for j in jobs:
            ticket, self._next = self._next, self._next + 1
            tickets.append(ticket)
            node = None if j.client_id is None else self.nodes.node(j.client_id)
            if j.client_id is None:
                self._done[ticket] = self.run_server([j])[0]
            elif node is None:
                self._done[ticket] = self.unreachable(j)
            else:
                self._queued.append((ticket, j, node))
        self._push()
        return tickets

    def _push(self) -> None:
        """Push the queued jobs whose node has no message in flight (in ticket order)."""
        busy = {s.node for s in self._sent.values()}
        ready = []
        for item in list(self._queued):
            if item[2] not in busy:
                busy.add(item[2])
                ready.append(item)
                self._queued.remove(item)
        if not ready:
            return
        msgs = [encode_job(j, node, self.train_cfg) for _, j, node in ready]
        self.messages += len(msgs)
        now = time.perf_counter()
        stored = {mid for mid in self.grid.push_messages(msgs) if mid}  # see messaging.exchange
        for msg, (ticket, j, node) in zip(msgs, ready):
            mid = msg.metadata.message_id
            if mid in stored:
                self._sent[mid] = _Sent(ticket, j, node, now)
            else:
                self._done[ticket] = failed_result(j, "its message could not be pushed to its node", "dropout")

    def collect(self, tickets: Sequence[int]) -> list[Result]:
        """The results of submitted jobs in ticket order: replies are pulled every poll interval
        until each has come, or ``reply_timeout`` seconds after its push (then a ``dropout``).

        Raises:
            KeyError: a ticket never submitted or already collected.
            KeyboardInterrupt: the run's ``stop`` event was set.
        """
        waiting = {s.ticket for s in self._sent.values()} | {q[0] for q in self._queued}
        unknown = [t for t in tickets if t not in self._done and t not in waiting]
        if unknown:
            raise KeyError(f"tickets {unknown} were never submitted or were already collected")
        while any(t not in self._done for t in tickets):
            self.nodes.check_stop()
            got = self.grid.pull_messages(list(self._sent)) if self._sent else []
            now = time.perf_counter()
            for reply in got:
                s = self._sent.pop(reply.metadata.reply_to_message_id, None)
                if s is not None:
                    trip = now - s.pushed
                    self._done[s.ticket] = self.result(s.job, Exchange({s.node: reply}, [], trip, {s.node: trip}), s.node)
            for mid, s in list(self._sent.items()):
                if now - s.pushed >= self.options.reply_timeout:
                    del self._sent[mid]
                    self._done[s.ticket] = self.result(s.job, Exchange(seconds=now - s.pushed), s.node)
            self._push()
            if not got and any(t not in self._done for t in tickets):
                time.sleep(self.nodes.poll_s)
        return [self._done.pop(t) for t in tickets]

    def _exchange(self, msgs: list[Message], training: bool, in_flight: int | None = None) -> Exchange:
        wait = self.options.reply_timeout
        if training and self.measured and self.deadline_s is not None:
            wait = min(wait, float(self.deadline_s))
        return exchange(self.grid, msgs, wait, self.nodes.poll_s, self.stop, in_flight)

    def result(self, job: Job, ex: Exchange, node: int) -> Result:
        """``job``'s result from node ``node``'s reply in ``ex`` (module docstring: failures)."""
        reply = ex.replies.get(node)
        measured = None
        if self.measured:
            trip = ex.arrival.get(node, ex.seconds)
            size = state_bytes(getattr(job, "start_state", None) or getattr(job, "state", {}))
            extra = objective_bytes(getattr(job, "objective", None))  # e.g. SCAFFOLD's c - c_k travels with the job
            measured = Measured(float(trip), handler_s(reply) if reply is not None else 0.0, size, size + extra)
        if reply is None:
            if self.measured and self.deadline_s is not None and isinstance(job, TrainJob):
                return failed_result(job, "no reply at the deadline", "timeout", measured)
            return failed_result(job, f"no reply within {self.options.reply_timeout:.0f} s", "dropout", measured)
        if reply.has_error():
            why = f"error code {reply.error.code}: {reply.error.reason}"
            kind = "dropout" if reply.error.code in DROPOUT_CODES else None
            if kind is None:
                log.warning("client %d: its node answered with an error (%s)", job.client_id, why)
            return failed_result(job, why, kind, measured)
        res = decode_result(job, reply, self.model, measured)
        if res.error is not None:
            log.warning("client %d: its reply was refused (%s)", job.client_id, res.error)
        return res

    @staticmethod
    def unreachable(job: Job) -> Result:
        """The result of a job whose client has no connected node: a ``dropout``."""
        return failed_result(job, "its node is not connected", "dropout")

    def summary(self) -> dict:
        """The ``flower`` section of ``summary.json``: engine, latency mode, arrival order,
        node of every client, clients without a node, messages sent."""
        n = self.fed.num_clients
        return {
            "flower": {
                "engine": "flower",
                "latency": self.options.latency,
                "arrival": self.options.arrival_mode,
                "nodes": {str(k): int(v) for k, v in sorted(self.nodes.node_of.items())},
                "clients_without_node": sorted(set(range(n)) - set(self.nodes.node_of)),
                "messages": self.messages,
            }
        }

    def arrival_order(self, seeded: list[int]) -> Sequence[int]:
        """``seeded`` (the simulator's order), or with ``arrival: nodes`` the order in which
        the candidates' nodes answered the query (lazy: candidate i once i have connected)."""
        if self.options.arrival_mode == "seeded" or not seeded:
            return seeded
        return Arrivals(self.nodes, self.options, seeded)

    def close(self) -> None:
        self.server.close()
