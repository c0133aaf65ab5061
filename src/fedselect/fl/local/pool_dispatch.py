"""The parent side of the worker processes of :class:`fedselect.fl.local.pool.ClientTrainer`: start
them, hand them tasks, restart the ones that die, stop them.

* **A dying worker never hangs the run.** The parent waits on the workers' pipes and process
  sentinels together; a worker that dies (killed by a signal, out of memory, a crash in native
  code) is reported as :class:`Failed` for the task it was running, and a fresh worker takes
  its place for the following tasks. ``job_timeout_s`` (off by default) also bounds a task's
  wall time: a worker past it is killed and its task reported.
* **Start method** ``forkserver`` (default; ``spawn`` also works): never ``fork``, which is
  unsafe once PyTorch has started threads. The fork server preloads torch and the pool, so
  starting (or restarting) a worker takes a fraction of a second after the first.
"""

from __future__ import annotations

import signal
import time
import weakref
from collections import deque
from dataclasses import dataclass, replace
from multiprocessing.connection import wait as mp_wait
from typing import Any

import torch

from fedselect.fl.local.pool_messages import EvalDone, EvalTask, Failed, Ready, Stop, TrainDone, TrainTask, WorkerInit
from fedselect.fl.local.pool_worker import worker_main
from fedselect.fl.types import State

Outcome = TrainDone | EvalDone | Failed

#: whether a pool with the ``forkserver`` start method started in this process (the fork server
#: then runs until the process ends, and later pools start in a fraction of a second)
_FORKSERVER_STARTED = False


def forkserver_started() -> bool:
    """Whether a ``forkserver`` pool started in this process before (its fork server is running)."""
    return _FORKSERVER_STARTED


@dataclass
class _Worker:
    proc: Any
    conn: Any
    pid: int | None = None
    seq: int = -1  # number of the message it is working on (answers carry it back)
    ready: bool = False
    loaded: Any = None  # key of the evaluation state in the model, or None


@dataclass
class Task:
    """A task to run: its message (``seq`` is set when it is sent), the state to copy into
    the worker's input buffer first (None: none), and its cost (longest first)."""

    msg: TrainTask | EvalTask
    state: State | None
    state_key: Any = None  # evaluation: identifies the state, to skip reloading it
    cost: int = 0
    attempts: int = 0


class WorkerPool:
    """One worker process per :class:`WorkerInit`, started and ready on return.

    Raises:
        RuntimeError: a worker failed to start (what to try is in the message).
    """

    def __init__(self, inits: list[WorkerInit], start_method: str, start_timeout_s: float, job_timeout_s: float | None):
        import torch.multiprocessing as tmp

        self.inits = inits
        self.start_timeout_s = start_timeout_s
        self.job_timeout_s = job_timeout_s
        self._seq = 0
        self._ctx = tmp.get_context(start_method)
        if start_method == "forkserver":
            # torch._dynamo is imported lazily by the first optimiser (2 s): preload it once
            self._ctx.set_forkserver_preload(["torch", "torch._dynamo", "fedselect.fl.local.pool"])
        self.workers: list[_Worker] = []
        try:
            for i in range(len(inits)):
                self.workers.append(self._spawn(i))
            self._await_ready(start_timeout_s)
        except BaseException:
            _shutdown(self.workers)
            raise
        if start_method == "forkserver":
            global _FORKSERVER_STARTED
            _FORKSERVER_STARTED = True
        self._finalizer = weakref.finalize(self, _shutdown, self.workers)

    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def close(self) -> None:
        self._finalizer.detach()
        _shutdown(self.workers)

    def _spawn(self, i: int) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=worker_main, args=(child, self.inits[i]), daemon=True, name=f"fedselect-worker-{i}")
        proc.start()
        child.close()
        return _Worker(proc, parent, proc.pid)

    def _await_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = set(range(len(self.workers)))
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"ClientTrainer: {len(waiting)} worker(s) did not start within {timeout:.0f} s")
            ready = mp_wait([self.workers[i].conn for i in waiting] + [self.workers[i].proc.sentinel for i in waiting], left)
            for i in list(waiting):
                w = self.workers[i]
                if w.conn in ready or w.conn.poll():
                    try:
                        msg = w.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                    if not isinstance(msg, Ready):
                        w.proc.join(1)
                        raise RuntimeError(
                            f"ClientTrainer: worker {i} failed to start (exit code {w.proc.exitcode}); a script "
                            "that starts workers needs the `if __name__ == '__main__':` guard (multiprocessing "
                            "re-imports the main module); run with workers=0 to see errors in this process"
                        )
                    w.ready = True
                    waiting.discard(i)
                elif w.proc.sentinel in ready or not w.proc.is_alive():
                    w.proc.join(1)
                    raise RuntimeError(
                        f"ClientTrainer: worker {i} died while starting (exit code {w.proc.exitcode}); "
                        "run with workers=0 to see the error in this process"
                    )

    def _restart(self, i: int) -> None:
        w = self.workers[i]
        _kill(w)
        self.workers[i] = self._spawn(i)

    def _send(self, i: int, t: Task) -> bool:
        """Hand task ``t`` to worker ``i``; False when the worker turned out dead."""
        w = self.workers[i]
        evaluating = isinstance(t.msg, EvalTask)
        load = True
        if t.state is not None:
            if evaluating and w.loaded == t.state_key:
                load = False
            else:
                buf = self.inits[i].in_buf
                with torch.no_grad():
                    for k, v in t.state.items():
                        buf[k].copy_(v)
                w.loaded = t.state_key if evaluating else None
        self._seq += 1
        w.seq = self._seq
        msg = replace(t.msg, seq=w.seq, load=load) if evaluating else replace(t.msg, seq=w.seq)
        try:
            w.conn.send(msg)
        except (BrokenPipeError, EOFError, OSError):
            return False
        return True

    def _deadline(self, i: int, since: float) -> float | None:
        """When the task given to worker ``i`` at ``since`` is overdue: ``start_timeout_s``
        while the worker is still starting, then ``job_timeout_s`` from when it was ready."""
        if not self.workers[i].ready:
            return since + self.start_timeout_s
        return None if self.job_timeout_s is None else since + self.job_timeout_s

    def run(self, tasks: list[Task]) -> list[Outcome]:
        """Run ``tasks`` on the workers, dynamically; outcomes in task order (a
        :class:`TrainDone` with its ``state`` copied out)."""
        for i, w in enumerate(self.workers):  # replace workers that died while idle
            if not w.proc.is_alive():
                self._restart(i)
        running: dict[int, tuple[int, float]] = {}
        try:
            return self._dispatch(tasks, running)
        except BaseException:
            # interrupted (KeyboardInterrupt, a bug): never leave a worker busy with a job whose
            # answer a later call could mistake for its own
            for i in list(running):
                self._restart(i)
            raise

    def _dispatch(self, tasks: list[Task], running: dict[int, tuple[int, float]]) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(tasks)
        # longest first (epochs x samples), so that a large client does not start last and
        # leave the other workers idle; the outcomes stay in task order
        queue = deque(sorted(range(len(tasks)), key=lambda i: -tasks[i].cost))
        while queue or running:
            for i in range(len(self.workers)):
                if i in running or not queue:
                    continue
                ti = queue.popleft()
                t = tasks[ti]
                if not self._send(i, t):
                    self._restart(i)
                    if not self._send(i, t):
                        out[ti] = Failed(-1, f"worker {i} could not be started")
                        continue
                running[i] = (ti, time.monotonic())
            if not running:
                continue
            deadlines = [d for i, (_, t0) in running.items() if (d := self._deadline(i, t0)) is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready = set(
                mp_wait([self.workers[i].conn for i in running] + [self.workers[i].proc.sentinel for i in running], timeout)
            )
            for i in list(running):
                ti, t0 = running[i]
                w = self.workers[i]
                failure = None
                if w.conn in ready or w.conn.poll():
                    try:
                        msg = w.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                    if isinstance(msg, Ready):  # a restarted worker announcing itself:
                        w.ready = True  # the job's clock starts now
                        running[i] = (ti, time.monotonic())
                        continue
                    if msg is not None and msg.seq != w.seq:  # an answer to an abandoned call: drop it
                        continue
                    if msg is None:
                        w.proc.join(5)
                        failure = _death(w)
                    else:
                        del running[i]
                        out[ti] = self._collect(i, msg)
                        continue
                elif w.proc.sentinel in ready or not w.proc.is_alive():
                    w.proc.join(5)
                    failure = _death(w)
                else:
                    d = self._deadline(i, t0)
                    if d is not None and time.monotonic() >= d:
                        failure = (
                            f"job ran past job_timeout_s={self.job_timeout_s:g} s; worker process {w.pid} was killed"
                            if w.ready
                            else f"worker process {w.pid} did not start within start_timeout_s={self.start_timeout_s:g} s"
                        )
                if failure is None:
                    continue
                del running[i]
                self._restart(i)
                t = tasks[ti]
                t.attempts += 1
                if isinstance(t.msg, EvalTask) and t.attempts < 2:
                    queue.appendleft(ti)  # evaluation has no failure semantics: retry once
                else:
                    out[ti] = Failed(w.seq, failure)
        return out  # type: ignore[return-value]

    def _collect(self, i: int, msg: Outcome) -> Outcome:
        if isinstance(msg, TrainDone):
            buf = self.inits[i].out_buf
            state = {k: v.clone() for k, v in buf.items()}
            return replace(
                msg,
                loss=float(msg.loss),
                sum_sq_sample_loss=float(msg.sum_sq_sample_loss),
                num_sample_losses=int(msg.num_sample_losses),
                state=state,
            )
        if isinstance(msg, EvalDone):
            return replace(msg, loss=float(msg.loss))
        self.workers[i].loaded = None
        return replace(msg, reason=str(msg.reason))


def _death(w: _Worker) -> str:
    code = w.proc.exitcode
    how = f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    return f"worker process {w.pid} died ({how}) while running this job"


def _kill(w: _Worker) -> None:
    try:
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(5)
    except (OSError, ValueError, AssertionError):
        pass
    try:
        w.conn.close()
    except OSError:
        pass


def _shutdown(workers: list[_Worker]) -> None:
    for w in workers:
        try:
            w.conn.send(Stop())
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 5
    for w in workers:
        try:
            w.proc.join(max(0.0, deadline - time.monotonic()))
        except (AssertionError, ValueError):
            pass
        _kill(w)
