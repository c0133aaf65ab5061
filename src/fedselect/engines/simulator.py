"""The simulator engine (``engine: simulator``, the default): the jobs of a run train in this
process and its worker pool (:mod:`fedselect.engines` for what an engine is)."""

from __future__ import annotations

from fedselect.engines import Engine
from fedselect.experiment.resolve import Resolved
from fedselect.experiment.simulation import make_trainer
from fedselect.fl.work import LocalTransport, Transport
from fedselect.registry import ENGINES
from fedselect.world.federation import Federation

__all__ = ["SimulatorEngine"]


@ENGINES.register
class SimulatorEngine(Engine):
    """``engine: simulator``: the jobs run in this process and its worker pool
    (:class:`fedselect.fl.work.LocalTransport` over :class:`fedselect.fl.local.pool.ClientTrainer`,
    ``workers`` processes on ``train.device``)."""

    name = "simulator"
    summary = "this process and its worker pool (train.workers processes, one torch thread each)"

    def connect(self, plan: Resolved, fed: Federation, workers: int | None = None) -> Transport:
        """A :class:`~fedselect.fl.work.LocalTransport` over a worker pool of ``workers`` processes
        (None: ``train.workers``, and where that is null too :func:`fedselect.experiment.simulation.make_trainer`
        decides from the run's work).

        Raises:
            ValueError: ``FEDSELECT_WORKERS`` is not an integer >= 0; a bad device.
        """
        tr = plan.config.train
        trainer = make_trainer(fed, plan.train_cfg, tr.workers if workers is None else workers, tr.device, config=plan.config)
        return LocalTransport(fed, trainer, plan.train_cfg)
