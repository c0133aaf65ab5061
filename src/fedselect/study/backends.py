"""Where the runs of a sweep or a comparison execute: this process, or a Ray cluster.

Both backends run the same step, :func:`run_one` (one experiment into its run directory,
continuing what is already there), so the files a run writes do not depend on the backend:
``metrics.csv``, ``model.pt``, ``config.yaml`` and ``summary.json`` (but for its ``wall_s``)
are byte-identical whichever backend ran them and whatever the number of worker processes a run
trains its clients in (``--workers``; a Ray task uses ``cpus_per_run`` workers, or trains in
its own process with one CPU).

* :class:`LocalBackend` (the default): runs one after the other in this process; runs with
  the same federation key (data, model, system, seed) share one federation, built once.
* :class:`RayBackend`: every run is a Ray task (``cpus_per_run`` CPUs, 1 by default) on a
  local Ray instance started for the purpose (``ray.init(num_cpus=...)``) or on a running
  cluster (``address="HOST:PORT"``, as printed by ``ray start --head``). Each task builds
  its own federation (deterministic for a seed, so results are identical; a worker process
  keeps the last one it built for the next task with the same key). Tasks write straight
  into the output directory, so on a multi-machine cluster that directory must be on a
  filesystem every node mounts at the same path (NFS and the like); a task that cannot see
  it fails with a message saying so. Ctrl-C (or SIGTERM) cancels the tasks still running,
  shuts down a Ray instance this process started and re-raises ``KeyboardInterrupt``;
  finished runs are kept and interrupted ones continue from their checkpoints next time.

Ray is an optional dependency (``pip install fedselect[flower]``, requirements-flower.txt).
"""

from __future__ import annotations

import functools
import os
import socket
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from fedselect.common.files import read_json
from fedselect.config.schema import ExperimentConfig
from fedselect.experiment.output_dir import existing_run_files
from fedselect.experiment.resolve import Resolved, resolve
from fedselect.experiment.run import RoundEvent, run_experiment
from fedselect.world.federation import Federation, build_federation, federation_key

__all__ = [
    "RunSpec",
    "RunCallbacks",
    "run_one",
    "is_finished",
    "federation_key",
    "LocalBackend",
    "RayBackend",
    "make_backend",
    "BACKENDS",
]

#: names accepted by ``--backend``
BACKENDS = ("local", "ray")


@dataclass
class RunSpec:
    """One run of a sweep or comparison.

    Attributes:
        plan: the resolved experiment (an :class:`ExperimentConfig` given here is resolved once,
            at construction); it travels to the run, or to its Ray task, as it is.
        run_dir: its run directory (absolute or relative to this process's working directory).
        description: a line for progress output, e.g. ``"secretary {'r2': 1} seed 0"``.
        group: federation key (:func:`federation_key`); runs with the same key share one
            federation in the local backend.
        tag: the caller's handle for this run (e.g. ``(label, seed)``), passed back in callbacks.
    """

    plan: Resolved
    run_dir: Path
    description: str = ""
    group: str = ""
    tag: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.plan, ExperimentConfig):
            self.plan = resolve(self.plan, self.plan.name)
        self.run_dir = Path(self.run_dir)
        if not self.group:
            self.group = federation_key(self.cfg)

    @property
    def cfg(self) -> ExperimentConfig:
        """The resolved config (every default written out)."""
        return self.plan.config


@dataclass
class RunCallbacks:
    """Optional progress hooks.

    Attributes:
        on_start: ``(spec, i, total)`` when run ``i`` (1-based position among all specs) starts
            (local) or is submitted (Ray). Not called for finished runs, which are skipped.
        on_round: ``(spec, RoundEvent)`` after every round (local backend only).
        on_done: ``(spec, summary)`` when a run has finished (both backends).
        on_federation: ``(group, federation)`` once per federation key that has runs to do,
            e.g. to write a description of the federation beside the runs. The local backend
            passes the federation its runs share; the Ray backend builds one in this process
            for the purpose while the tasks run.
    """

    on_start: Callable[[RunSpec, int, int], None] | None = None
    on_round: Callable[[RunSpec, RoundEvent], None] | None = None
    on_done: Callable[[RunSpec, dict[str, Any]], None] | None = None
    on_federation: Callable[[str, Federation], None] | None = None


def is_finished(run_dir: str | Path) -> bool:
    """A run directory holding a ``summary.json`` holds a finished run."""
    return (Path(run_dir) / "summary.json").is_file()


def run_one(
    plan: Resolved | ExperimentConfig,
    run_dir: str | Path,
    federation: Federation | None = None,
    on_round: Callable[[RoundEvent], None] | None = None,
    resume: bool = True,
    workers: int | None = None,
    run: Callable[..., dict[str, Any]] = run_experiment,
) -> dict[str, Any]:
    """Run ``plan`` into ``run_dir``, continuing what is there; the step both backends run.

    With ``resume`` (sweeps; comparisons under ``--resume``): a finished run (``summary.json``)
    is not run again and its summary is returned; a run directory holding an interrupted run
    continues from its last checkpoint (or starts again from round 0 when it stopped before
    its first checkpoint); anything else starts a new run. Without ``resume`` a directory
    that already holds a run is refused (FileExistsError), as for ``fedselect run``.

    Args:
        plan: the resolved experiment (an :class:`ExperimentConfig` is resolved, once).
        run_dir: its run directory.
        federation: a federation built from an experiment with the same federation key
            (None: built here).
        on_round: called after every round.
        workers: worker processes of the run's client trainer (None: ``train.workers``).
        run: what runs it (default :func:`fedselect.experiment.run.run_experiment`; the local
            backend passes it with an engine session, :meth:`fedselect.engines.Engine.session`).

    Returns:
        the run's summary (``summary.json``).

    Raises:
        FileExistsError, ValueError, ConfigError, CheckpointError: see
        :func:`fedselect.experiment.run.run_experiment` (e.g. a checkpoint written with a different
        config: the message names the keys that differ).
    """
    run_dir = Path(run_dir)
    if resume and is_finished(run_dir):
        return read_json(run_dir / "summary.json")
    started = resume and run_dir.is_dir() and bool(existing_run_files(run_dir))
    return run(plan, run_dir, on_round=on_round, resume=started, federation=federation, workers=workers)


# ----------------------------------------------------------------------------- local
@dataclass
class LocalBackend:
    """Runs one after the other in this process, sharing a federation per federation key
    (built once, released when its last run is done); each run trains its clients in
    ``workers`` worker processes (None: the runs' ``train.workers``)."""

    workers: int | None = None
    name: str = field(default="local", init=False)

    def run(
        self,
        specs: Sequence[RunSpec],
        callbacks: RunCallbacks | None = None,
        resume: bool = True,
        out_dir: str | Path | None = None,
        marker: str | None = None,
    ) -> dict[Path, dict[str, Any]]:
        """Run every spec not finished yet (see :func:`run_one`); returns run_dir -> summary
        for the runs done here. ``out_dir`` and ``marker`` are unused here (the Ray backend
        checks that its tasks see them).

        Raises:
            whatever the first failing run raises (the runs after it are not started).
        """
        cb = callbacks or RunCallbacks()
        total = len(specs)
        order: dict[str, list[tuple[int, RunSpec]]] = {}
        for i, s in enumerate(specs, 1):
            order.setdefault(s.group, []).append((i, s))
        done: dict[Path, dict[str, Any]] = {}
        for group, members in order.items():
            todo = [(i, s) for i, s in members if not (resume and is_finished(s.run_dir))]
            if not todo:
                continue
            fed = build_federation(todo[0][1].cfg)
            if cb.on_federation:
                cb.on_federation(group, fed)

            def body(session, todo=todo, fed=fed) -> None:  # a group's runs, in one engine start
                run = functools.partial(run_experiment, session=session) if session is not None else run_experiment
                for i, s in todo:
                    if cb.on_start:
                        cb.on_start(s, i, total)
                    rcb = (lambda ev, s=s: cb.on_round(s, ev)) if cb.on_round else None
                    kw = {"federation": fed, "on_round": rcb, "resume": resume, "workers": self.workers}
                    summary = run_one(s.plan, s.run_dir, run=run, **kw)
                    done[s.run_dir] = summary
                    if cb.on_done:
                        cb.on_done(s, summary)

            first = todo[0][1].plan
            if all(s.plan.engine is first.engine for _, s in todo):  # one engine start for the group
                first.engine().session(first, body)
            else:  # runs on several engines: each run starts its own
                body(None)
            del fed
        return done


# ----------------------------------------------------------------------------- ray
#: the federation a Ray worker process built last: (federation key, federation)
_WORKER_FED: dict[str, Any] = {}


def _ray_run(plan: Resolved, run_dir: str, resume: bool, workers: int, out_dir: str, marker: str | None) -> dict[str, Any]:
    """The body of a Ray task: :func:`run_one` of the resolved experiment ``plan`` (pickled as
    it is, not resolved again) with ``workers`` worker processes (0: in the task's process)."""
    host = socket.gethostname()
    out = Path(out_dir)
    if not out.is_dir() or (marker and not (out / marker).is_file()):
        raise RuntimeError(
            f"the output directory {out_dir} is not visible on Ray node {host}: Ray tasks write their run directories "
            f"there directly, so on a cluster of several machines it must be on a filesystem every node mounts at the "
            f"same path (e.g. NFS)"
        )
    key = federation_key(plan.config)
    if _WORKER_FED.get("key") != key:
        _WORKER_FED.clear()
        _WORKER_FED.update(key=key, fed=build_federation(plan.config))
    t0 = time.perf_counter()
    summary = run_one(plan, run_dir, federation=_WORKER_FED["fed"], resume=resume, workers=workers)
    return {"summary": summary, "host": host, "pid": os.getpid(), "task_s": time.perf_counter() - t0}


def _import_ray():
    try:
        import ray
    except ImportError:
        raise RuntimeError(
            "--backend ray needs Ray: install the optional extra with `pip install fedselect[flower]` "
            "(or `pip install -r requirements-flower.txt`)"
        ) from None
    return ray


@dataclass
class RayBackend:
    """Every run a Ray task (module docstring).

    Attributes:
        address: ``HOST:PORT`` of a running Ray cluster (``ray start --head`` prints it), or
            ``"auto"``; None starts a local Ray instance for the duration of :meth:`run`.
        cpus_per_run: CPUs each task reserves (>= 1; Ray runs as many tasks at once as fit).
        workers: worker processes a task trains its clients in (default: ``cpus_per_run``
            when it is 2 or more, else 0, in the task's own process); results are identical
            for any value.
        num_cpus: CPUs of a local Ray instance (default: all of this machine's); ignored with
            ``address``.
    """

    address: str | None = None
    cpus_per_run: float = 1
    workers: int | None = None
    num_cpus: int | None = None
    name: str = field(default="ray", init=False)
    #: per finished run: host, pid and seconds inside the task (for overhead measurements)
    task_info: dict[Path, dict[str, Any]] = field(default_factory=dict, init=False, repr=False)
    #: seconds spent starting (or connecting to) Ray in the last :meth:`run`
    startup_s: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if not self.cpus_per_run > 0:
            raise ValueError(f"--cpus-per-run must be > 0, got {self.cpus_per_run}")
        if self.workers is not None and self.workers < 0:
            raise ValueError(f"--workers must be >= 0, got {self.workers}")
        if self.num_cpus is not None and self.num_cpus < 1:
            raise ValueError(f"the local Ray instance needs num_cpus >= 1, got {self.num_cpus}")
        if self.num_cpus is not None and self.cpus_per_run > self.num_cpus:
            raise ValueError(f"--cpus-per-run {self.cpus_per_run} exceeds the {self.num_cpus} CPUs of the local Ray instance")
        if self.address is not None and not (self.address == "auto" or _valid_address(self.address)):
            raise ValueError(f"--address {self.address!r}: expected HOST:PORT of a Ray cluster (e.g. 10.0.0.5:6379) or 'auto'")

    def run(
        self,
        specs: Sequence[RunSpec],
        callbacks: RunCallbacks | None = None,
        resume: bool = True,
        out_dir: str | Path | None = None,
        marker: str | None = None,
    ) -> dict[Path, dict[str, Any]]:
        """Submit every spec not finished yet as a Ray task and wait for all of them.

        Args:
            out_dir: the sweep/comparison directory the run directories are in (default: the
                parent of the first run directory); every task checks that it can see it,
                and ``marker`` in it (a file this process wrote, e.g. ``sweep.json``).

        Returns:
            run_dir -> summary for the runs done.

        Raises:
            RuntimeError: runs failed (all other runs are finished first; the message lists
                each failed run directory with its error), or Ray is not installed / cannot
                be reached.
            KeyboardInterrupt: interrupted (Ctrl-C or SIGTERM); running tasks were cancelled.
        """
        cb = callbacks or RunCallbacks()
        total = len(specs)
        todo = [(i, s) for i, s in enumerate(specs, 1) if not (resume and is_finished(s.run_dir))]
        if not todo:
            return {}
        ray = _import_ray()
        out = Path(out_dir) if out_dir is not None else todo[0][1].run_dir.parent
        workers = self.workers if self.workers is not None else (int(self.cpus_per_run) if self.cpus_per_run >= 2 else 0)
        started_here = False
        done: dict[Path, dict[str, Any]] = {}
        errors: list[str] = []
        pending: dict[Any, tuple[int, RunSpec]] = {}
        try:
            t0 = time.perf_counter()
            if not ray.is_initialized():
                started_here = True
                self._init_ray(ray)
            self.startup_s = time.perf_counter() - t0
            # after ray.init, which installs a SIGTERM handler of its own that aborts the process
            with _sigterm_as_interrupt():
                self._submit(ray, todo, pending, cb, total, resume, workers, out, marker)
                self._wait(ray, pending, cb, done, errors)
        except BaseException:
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - best effort while interrupted
                    pass
            raise
        finally:
            if started_here and ray.is_initialized():
                ray.shutdown()
        if errors:
            raise RuntimeError(
                f"{len(errors)} of {len(todo)} runs failed on Ray (the others finished):\n  " + "\n  ".join(errors)
            )
        return done

    def _init_ray(self, ray) -> None:
        """Start a new local Ray instance (``address`` None; never one found through
        ``RAY_ADDRESS`` or ``ray start``) or connect to the cluster at ``address``."""
        with warnings.catch_warnings():  # Ray 2.55's FutureWarning about GPU visibility (no GPUs used here)
            warnings.filterwarnings("ignore", message=".*accelerator visible devices", category=FutureWarning)
            if self.address is None:
                # "local": always a new instance, never one found through RAY_ADDRESS or `ray start`
                ray.init(
                    address="local",
                    num_cpus=self.num_cpus or os.cpu_count(),
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            else:
                ray.init(address=self.address, log_to_driver=False, configure_logging=False)

    def _submit(
        self,
        ray,
        todo: list[tuple[int, RunSpec]],
        pending: dict[Any, tuple[int, RunSpec]],
        cb: RunCallbacks,
        total: int,
        resume: bool,
        workers: int,
        out: Path,
        marker: str | None,
    ) -> None:
        """Submit a Ray task per run of ``todo`` into ``pending`` (task reference -> (index,
        spec)), calling ``on_start`` for each; then ``on_federation`` once per federation group
        (built here: the tasks build their own)."""
        task = ray.remote(_ray_run).options(num_cpus=self.cpus_per_run, max_retries=0)
        for i, s in todo:
            ref = task.remote(s.plan, str(s.run_dir.resolve()), resume, workers, str(out.resolve()), marker)
            pending[ref] = (i, s)
            if cb.on_start:
                cb.on_start(s, i, total)
        if cb.on_federation:
            seen: set[str] = set()
            for _, s in todo:
                if s.group not in seen:
                    seen.add(s.group)
                    cb.on_federation(s.group, build_federation(s.cfg))

    def _wait(
        self,
        ray,
        pending: dict[Any, tuple[int, RunSpec]],
        cb: RunCallbacks,
        done: dict[Path, dict[str, Any]],
        errors: list[str],
    ) -> None:
        """Until ``pending`` is empty (each task removed from it as it ends): a finished run's
        summary into ``done`` (host, pid and seconds into :attr:`task_info`) and ``on_done``
        called; a failed run's error into ``errors``, the other runs going on."""
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                i, s = pending.pop(ref)
                try:
                    res = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - reported with the run it belongs to
                    errors.append(f"{s.run_dir}: {_task_error(e)}")
                    continue
                done[s.run_dir] = res["summary"]
                self.task_info[s.run_dir] = {k: res[k] for k in ("host", "pid", "task_s")}
                if cb.on_done:
                    cb.on_done(s, res["summary"])


def _valid_address(address: str) -> bool:
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def _task_error(e: BaseException) -> str:
    """The original error of a failed Ray task, in one line."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


class _sigterm_as_interrupt:
    """Within the block, SIGTERM raises KeyboardInterrupt in the main thread (so a killed
    sweep cancels its Ray tasks instead of leaving them running); the previous handler is
    put back afterwards (the default one when the previous was not installed from Python,
    e.g. Ray's own)."""

    def __enter__(self):
        import signal
        import threading

        self._installed = False
        if threading.current_thread() is threading.main_thread():

            def handler(signum, frame):
                raise KeyboardInterrupt(f"signal {signum}")

            self._old = signal.signal(signal.SIGTERM, handler)
            self._installed = True
        return self

    def __exit__(self, *exc):
        import signal

        if self._installed:
            signal.signal(signal.SIGTERM, self._old if self._old is not None else signal.SIG_DFL)
        return False


def make_backend(
    name: str = "local",
    address: str | None = None,
    cpus_per_run: float = 1,
    workers: int | None = None,
    num_cpus: int | None = None,
) -> LocalBackend | RayBackend:
    """The backend called ``name`` (``--backend``).

    Raises:
        ValueError: unknown name, or Ray options given to the local backend, or bad Ray options.
    """
    if name == "local":
        extra = [n for n, v in (("--address", address), ("--ray-cpus", num_cpus)) if v is not None]
        if cpus_per_run != 1:
            extra.append("--cpus-per-run")
        if extra:
            raise ValueError(f"{', '.join(extra)} only apply to --backend ray")
        if workers is not None and workers < 0:
            raise ValueError(f"--workers must be >= 0 (0 = in this process), got {workers}")
        return LocalBackend(workers=workers)
    if name == "ray":
        return RayBackend(address=address, cpus_per_run=cpus_per_run, workers=workers, num_cpus=num_cpus)
    raise ValueError(f"--backend {name!r}: unknown backend; allowed: {', '.join(BACKENDS)}")
