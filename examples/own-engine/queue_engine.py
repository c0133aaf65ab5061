"""An engine of one's own: every job of a run travels through a queue to a worker thread.

The worker thread stands for wherever the clients of another engine run (a process, a cluster,
a fleet of devices): the server's round (fedselect's own, the same for every engine) hands the
engine's transport its jobs, the transport puts them on the worker's queue, and the worker
runs them on the clients' data and puts the results on a reply queue. The round, the run
directory, checkpoints and resume stay fedselect's, so a run on this engine writes the same
``metrics.csv`` and ``model.pt`` as on the simulator.

Name it by module path, with this directory importable (``PYTHONPATH=examples/own-engine``)::

    engine: "queue_engine:QueueEngine"          # in a config
    fedselect run config.yaml --engine queue_engine:QueueEngine

The engine starts its worker once per session: the runs of a comparison that share a federation
share one worker (docs/architecture.md, "Adding an engine").
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Sequence, TypeVar

import torch

from fedselect.engines import Engine, Session
from fedselect.experiment.resolve import Resolved
from fedselect.fl.local.pool import ClientTrainer
from fedselect.fl.work import Job, LocalTransport, Result, Submissions
from fedselect.world.federation import Federation

T = TypeVar("T")


class QueueWorker(threading.Thread):
    """The clients' side: takes ``(runner, jobs, reply)`` requests off :attr:`inbox`, runs the
    jobs with ``runner.run`` and puts ``(results, None)`` or ``(None, error)`` on ``reply``; one
    torch thread, like the simulator's worker processes. ``None`` on the inbox stops it."""

    def __init__(self):
        super().__init__(name="queue-engine-worker", daemon=True)
        self.inbox: queue.Queue = queue.Queue()

    def run(self) -> None:
        torch.set_num_threads(1)
        while (request := self.inbox.get()) is not None:
            runner, jobs, reply = request
            try:
                reply.put((runner.run(jobs), None))
            except BaseException as e:  # the server side re-raises it
                reply.put((None, e))

    def stop(self) -> None:
        self.inbox.put(None)
        self.join()


class QueueTransport:
    """A run's transport (:class:`fedselect.fl.work.Transport`): ``run(jobs)`` sends the jobs
    through the worker's queue and waits for their results (in job order); ``submit`` /
    ``collect`` (``mode: async``) batch over it (:class:`fedselect.fl.work.Submissions`).

    Attributes:
        jobs: how many jobs it has carried (``summary.json``'s ``queue`` section).
    """

    measured = False  # latencies come from fedselect's cost model, as on the simulator
    workers = 0  # one client at a time

    def __init__(self, worker: QueueWorker, clients: LocalTransport):
        self.worker, self.clients, self.jobs = worker, clients, 0
        self._submitted = Submissions(self.run)

    def run(self, jobs: Sequence[Job]) -> list[Result]:
        reply: queue.Queue = queue.Queue(maxsize=1)
        self.worker.inbox.put((self.clients, list(jobs), reply))
        results, error = reply.get()
        if error is not None:
            raise error
        self.jobs += len(jobs)
        return results

    def submit(self, jobs: Sequence[Job]) -> list[int]:
        return self._submitted.submit(jobs)

    def collect(self, tickets: Sequence[int]) -> list[Result]:
        return self._submitted.collect(tickets)

    def arrival_order(self, seeded: list[int]) -> Sequence[int]:
        return seeded  # budgeted-online candidates arrive in the seeded order

    def summary(self) -> dict:
        return {"queue": {"jobs": self.jobs}}

    def close(self) -> None:
        self.clients.close()


class QueueSession:
    """A started worker (:class:`fedselect.engines.Session`): each run gets a transport to it."""

    def __init__(self, worker: QueueWorker):
        self.worker = worker

    def connect(self, plan: Resolved, fed: Federation, workers: int | None = None) -> QueueTransport:
        """The run's transport: the worker runs its jobs on ``fed``'s clients with the run's
        local-training settings, on ``train.device``."""
        trainer = ClientTrainer.from_federation(fed, plan.train_cfg, workers=0, device=plan.config.train.device)
        return QueueTransport(self.worker, LocalTransport(fed, trainer, plan.train_cfg))


class QueueEngine(Engine):
    """Every job through an in-process queue to one worker thread (module docstring)."""

    name = "queue"
    summary = "every job through an in-process queue to one worker thread (examples/own-engine)"
    #: worker threads started so far (a session starts one)
    started = 0

    def session(self, plan: Resolved, body: Callable[[Session], T]) -> T:
        worker = QueueWorker()
        worker.start()
        QueueEngine.started += 1
        try:
            return body(QueueSession(worker))
        finally:
            worker.stop()
