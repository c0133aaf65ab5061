"""Flower's transport: the jobs of a round (:mod:`fedselect.fl.work`) as messages to the nodes.

:class:`FlowerTransport` implements :class:`fedselect.fl.work.Transport` over a Flower
``Grid``: a job for client ``k`` goes to the node serving ``k`` (:class:`NodeDirectory`), as
the message of :mod:`fedselect.flower.wire`; the node runs it with the simulator's own
:class:`~fedselect.fl.work.LocalTransport` on its federation and answers with the result.
Jobs without a client (scores on the test set) run on the server, as in the simulator. With
the same config and seed a run therefore gives the simulator's ``metrics.csv`` and model,
byte for byte (simulated latency).

What can go wrong, and what it becomes (the round turns it into the simulator's failure
kinds, :mod:`fedselect.fl.round`):

* the client has no connected node, never answers until the reply timeout, or the SuperLink
  says it is unavailable (error codes 3, 4, 5): ``dropout``;
* with measured latency and a round deadline, a node still silent at the deadline: ``timeout``;
* an error reply (the ClientApp raised or crashed), or a reply that does not fit the model
  (:func:`fedselect.flower.wire.decode_result`): ``error``, with the reason.

With ``latency: measured`` every result carries the measured round trip, the node's handler
time and the sizes of the arrays sent (:class:`fedselect.fl.types.Measured`).
"""

from __future__ import annotations

import logging
from typing import Sequence

from flwr.app import Message
from flwr.serverapp import Grid

from fedselect.federation import Federation
from fedselect.fl.aggregate import state_bytes
from fedselect.fl.train import TrainConfig
from fedselect.fl.types import Measured
from fedselect.fl.work import Job, LocalTransport, Result, TrainJob
from fedselect.flower.messaging import Exchange, exchange
from fedselect.flower.nodes import DROPOUT_CODES, Arrivals, FlowerOptions, NodeDirectory
from fedselect.flower.wire import decode_result, encode_job, failed_result, handler_s, round_of

log = logging.getLogger("fedselect.flower")

__all__ = ["FlowerTransport"]


class FlowerTransport:
    """Jobs as messages to the nodes of ``grid`` (module docstring).

    Args:
        grid: the ServerApp's grid.
        fed: the server's federation (its test set, the model's entries, the profiles).
        train_cfg: local-training settings sent with every job.
        options: :class:`fedselect.flower.nodes.FlowerOptions`.
        server: the transport of the server's own jobs (test-set scores; a
            :class:`~fedselect.fl.work.LocalTransport` in this process).
        deadline_s: the round deadline; with measured latency the server waits that long for
            training replies.
        stop: a ``threading.Event`` that interrupts every wait once set (Ctrl-C in the engine).

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
    ):
        self.grid, self.fed, self.train_cfg, self.options, self.server = grid, fed, train_cfg, options, server
        self.stop = stop
        self.measured = options.measured
        self.deadline_s = deadline_s
        self.nodes = NodeDirectory(grid, fed, options, stop)
        self.model = fed.new_model().state_dict()
        self.messages = 0
        self._polled = 0

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
        message per node in each); jobs without a client run on the server."""
        out: list[Result | None] = [None] * len(jobs)
        local = [i for i, j in enumerate(jobs) if j.client_id is None]
        for i, r in zip(local, self.server.run([jobs[i] for i in local]) if local else []):
            out[i] = r
        waves: list[dict[int, int]] = []  # node -> job index, one message per node per wave
        t = max((round_of(j) for j in jobs), default=0)
        if t > self._polled:  # once per round: nodes that joined or left since the last one
            self.nodes.poll()
            self._polled = t
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
            msgs = [encode_job(jobs[i], node, self.train_cfg) for node, i in wave.items()]
            self.messages += len(msgs)
            ex = self._exchange(msgs, any(isinstance(jobs[i], TrainJob) for i in wave.values()))
            for node, i in wave.items():
                out[i] = self.result(jobs[i], ex, node)
        return out  # type: ignore[return-value]

    def _exchange(self, msgs: list[Message], training: bool) -> Exchange:
        wait = self.options.reply_timeout
        if training and self.measured and self.deadline_s is not None:
            wait = min(wait, float(self.deadline_s))
        return exchange(self.grid, msgs, wait, self.options.poll_s, self.stop)

    def result(self, job: Job, ex: Exchange, node: int) -> Result:
        """``job``'s result from node ``node``'s reply in ``ex`` (module docstring: failures)."""
        reply = ex.replies.get(node)
        measured = None
        if self.measured:
            trip = ex.arrival.get(node, ex.seconds)
            size = state_bytes(getattr(job, "start_state", None) or getattr(job, "state", {}))
            extra = state_bytes(getattr(job, "correction", None) or {})  # SCAFFOLD's c - c_k travels with the job
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
