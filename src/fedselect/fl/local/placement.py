"""Where local training can run: the CPU cores this process may use, whether worker processes
can start here and build the model, which torch device a name means, and how many torch threads
the calling process trains with.

:class:`fedselect.fl.local.pool.ClientTrainer` asks these before it starts its workers:
:func:`usable_cores` and :func:`worker_count` (how many workers, at most one per usable core),
:func:`worker_obstacle` (why workers could not re-import the main module or build the model:
then it trains in the calling process) and :func:`resolve_device` (``"cpu"``, ``"cuda"``,
``"cuda:N"``, ``"auto"``); training in the calling process runs under :func:`torch_threads`
(one intra-op thread, as in a worker).
"""

from __future__ import annotations

import ast
import logging
import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

from fedselect.world.models import MODELS

log = logging.getLogger("fedselect")

__all__ = ["usable_cores", "worker_count", "main_importable", "worker_obstacle", "resolve_device", "torch_threads"]


def usable_cores() -> int:
    """CPU cores this process may run on (``len(os.sched_getaffinity(0))``; ``os.cpu_count()``
    where affinity is not available)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def worker_count(workers: int | None) -> int:
    """The worker processes to start: ``workers`` (None: :func:`usable_cores`), at most one per
    usable core (more only add start-up time and memory: a warning says so).

    Raises:
        ValueError: ``workers`` is not an integer >= 0.
    """
    if workers is None:
        workers = usable_cores()
    if int(workers) != workers or workers < 0:
        raise ValueError(f"workers must be an integer >= 0 (0 = in the calling process), got {workers!r}")
    cores = usable_cores()
    if workers > cores:  # more processes than cores only add start-up time and memory
        log.warning(
            "%d workers asked for but this process may use %d cores: starting %d (results do not depend on it)",
            workers,
            cores,
            cores,
        )
        workers = cores
    return workers


def main_importable(model_name: str | None = None) -> bool:
    """Whether worker processes can start and build the model here (:func:`worker_obstacle`
    finds nothing in the way)."""
    return worker_obstacle(model_name) is None


def worker_obstacle(model_name: str | None = None) -> str | None:
    """Why worker processes cannot train here, or None. ``forkserver`` and ``spawn`` children
    re-import this process's main module when it is a file, and build the model by the name
    :meth:`fedselect.registry.Registry.path_of` gives them.

    In the way: a script on stdin (``python -``: ``__file__`` is ``'<stdin>'``, no real file:
    the children cannot start); a script (or ``python -m`` module) calling fedselect from
    top-level code outside ``if __name__ == "__main__":``, which every child would run again on
    re-importing it (each starting a run of its own); a model ``model_name`` registered from
    inside a function (no module path reaches it); in a notebook, IPython or ``python -c`` (a
    main module without ``__file__``, which children do not re-import), a model defined there.
    Nothing in the way for a guarded script file, ``python -m module``, and built-in or
    importable models anywhere.
    """
    main = sys.modules.get("__main__")
    if main is None:
        return "no main module"
    path = getattr(main, "__file__", None)
    if path and _unguarded_call(main, path):
        return f"{path} calls fedselect outside `if __name__ == '__main__':`, which every worker would run again"
    try:
        factory = MODELS.get(model_name) if model_name is not None else None
    except ValueError:  # unknown here too: building it reports that
        factory = None
    where = f"{getattr(factory, '__module__', '')}.{getattr(factory, '__qualname__', '')}"
    if "<locals>" in where and MODELS.path_of(model_name) == model_name:
        return f"model {model_name!r} is registered from inside a function ({where}), which worker processes cannot import"
    if getattr(getattr(main, "__spec__", None), "name", None):  # python -m: imported by name
        return None
    if not path:  # notebook, IPython, python -c: children start; a model defined here is unknown there
        if getattr(factory, "__module__", "") == "__main__":
            return f"model {model_name!r} is defined in this notebook or `python -c`, which worker processes do not import"
        return None
    from multiprocessing import process

    if not os.path.isabs(path) and process.ORIGINAL_DIR is not None:  # as multiprocessing resolves it
        path = os.path.join(process.ORIGINAL_DIR, path)
    return None if os.path.isfile(path) else f"the main module {path!r} is no file (a script on stdin)"


def _unguarded_call(main, path: str) -> bool:
    """Whether this call comes from top-level code of ``main`` (read from ``path``) that is not
    under ``if __name__ == "__main__":`` (False where the source cannot be read)."""
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None:
        return False
    line = frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return False

    def is_guard(node: ast.AST) -> bool:
        t = getattr(node, "test", None)
        if not (isinstance(node, ast.If) and isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq)):
            return False
        sides = {ast.dump(t.left), ast.dump(t.comparators[0])}
        return sides == {ast.dump(ast.Name("__name__", ast.Load())), ast.dump(ast.Constant("__main__"))}

    return not any(
        is_guard(n) and n.body[0].lineno <= line <= (n.body[-1].end_lineno or n.body[-1].lineno) for n in ast.walk(tree)
    )


def resolve_device(device: str | torch.device) -> torch.device:
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (cuda when available, else cpu).

    Raises:
        ValueError: an unknown name, cuda asked for where none is available, or ``cuda:N`` past
            the last GPU; the message names the device, this PyTorch build and what to do.
    """
    name = str(device)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {device!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise ValueError(
            f"device {device!r}: no CUDA device is available here (PyTorch {torch.__version__}, {build}; "
            "torch.cuda.is_available() is False). What to do: train on the CPU with --device cpu (or train.device: cpu), "
            "or auto, which takes a GPU only where there is one; to train on a GPU, run where `nvidia-smi` lists one, "
            "with a CUDA build of PyTorch"
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ValueError(
            f"device {device!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}; "
            "choose one of them, or cuda (the current one)"
        )
    return dev


_thread_lock = threading.Lock()


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads, restoring the previous count."""
    with _thread_lock:
        before = torch.get_num_threads()
        if before != n:
            torch.set_num_threads(n)
        try:
            yield
        finally:
            if before != n:
                torch.set_num_threads(before)
