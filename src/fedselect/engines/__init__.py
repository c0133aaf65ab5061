"""Engines: where the rounds of a run execute, as plug-ins of one registry.

Every engine plays the same round (:mod:`fedselect.fl.round`); what differs is how a client's
jobs travel, the **transport** (:class:`fedselect.fl.work.Transport`). An engine provides:

* ``connect(plan, fed, workers)``: the transport carrying the jobs of one run (the caller
  closes it);
* where it must start something once for several runs (Flower's simulation engine: Ray and one
  SuperNode per client), ``session(plan, body)``: start, call ``body(session)`` (``session``
  has ``connect``) for the runs of that federation, stop. Without one, the engine is its own
  session.

An engine never runs an experiment itself and never imports the experiment layer:
:func:`fedselect.experiment.run.play` asks the run's engine (``config.engine``, looked up by the
resolve step in :data:`fedselect.registry.ENGINES`) for a session, and the session for the
run's transport; the run directory, resume, checkpoints and run files are the experiment
layer's, the same for every engine, so the same config and seed give the same ``metrics.csv``
and ``model.pt`` on each.

Engines are named like the other components: the built-ins ``simulator`` (:class:`fedselect.engines.simulator.SimulatorEngine`)
and ``flower`` (:class:`fedselect.flower.engine.FlowerEngine`, the optional extra), a user's
``"package.module:ClassName"``, a class decorated with ``@ENGINES.register``, or an entry point of
the group ``fedselect.engines`` (docs/architecture.md, "Adding an engine").
"""

from __future__ import annotations

from typing import Callable, ClassVar, Protocol, TypeVar

from fedselect.experiment.resolve import Resolved
from fedselect.fl.work import Transport
from fedselect.registry import ENGINES
from fedselect.world.federation import Federation

__all__ = ["ENGINES", "Engine", "Session"]

T = TypeVar("T")


class Session(Protocol):
    """An engine started for the runs of one federation: it gives each run its transport."""

    def connect(self, plan: Resolved, fed: Federation, workers: int | None = None) -> Transport:
        """The transport carrying the jobs of one run of ``plan`` on ``fed`` (closed by the caller).

        Args:
            plan: the resolved experiment. fed: its federation (built by the caller).
            workers: the run's worker processes (``--workers``; None: ``train.workers``), for an
                engine that trains in a pool; others ignore it.
        """
        ...


class Engine:
    """Base class of an engine (module docstring): a class attribute ``name`` (how configs name
    it, ``engine: NAME``), a one-line ``summary`` (what ``fedselect list`` shows), and
    :meth:`connect`, or :meth:`session` for an engine that starts once for several runs.
    The experiment layer makes it with ``Engine()``: options of its own need defaults.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def session(self, plan: Resolved, body: Callable[[Session], T]) -> T:
        """Start the engine for runs of ``plan``'s federation, return ``body(session)``, stop it
        (also when ``body`` raises). The runs share ``plan``'s data, model, system and seed.
        Default: nothing to start, the engine is its own session.

        Raises:
            what ``body`` raises; KeyboardInterrupt when the engine was interrupted.
        """
        return body(self)

    def connect(self, plan: Resolved, fed: Federation, workers: int | None = None) -> Transport:
        """The transport of one run (:meth:`Session.connect`).

        Raises:
            NotImplementedError: an engine that connects only inside its :meth:`session`.
        """
        raise NotImplementedError(f"engine {self.name!r} gives its transports inside its session (Engine.session)")
