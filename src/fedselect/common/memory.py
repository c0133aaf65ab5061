"""The C library's heap, where it is glibc's: what a process keeps of the memory it frees.

Two opposite needs, each measured (docs/flower.md, "Measured"; docs/performance.md):

* :func:`release_freed_memory` after a large one-time allocation (loading a data set): the
  full MNIST CSV (110 MB of text, 70,000 rows of 785 integers) passes through Python strings
  and pandas' parser on its way to 209 MB of float32 arrays, and glibc kept about 490 MB of
  that freed memory mapped in the process for the rest of the run.
* :func:`keep_freed_memory` where the same allocations repeat (a Flower node's training jobs):
  returning each mini-batch's memory to the OS made it fault it in again at the next.

Both are no-ops returning False where the C library is not glibc. Neither changes a result.
"""

from __future__ import annotations

import functools

__all__ = ["keep_freed_memory", "release_freed_memory", "MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES"]

#: glibc's mallopt parameters (malloc.h): M_TRIM_THRESHOLD, M_MMAP_THRESHOLD
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: what :func:`keep_freed_memory` sets: blocks below 32 MB (glibc's largest mmap threshold on
#: 64-bit systems) come from the heap, and up to 128 MB freed at its top stay mapped
MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES = 32 << 20, 128 << 20


@functools.cache
def _glibc():
    """glibc loaded through ctypes, or None (another C library, or no ctypes)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 (both exist in glibc only)
        return libc
    except (OSError, AttributeError, ImportError):
        return None


@functools.cache
def keep_freed_memory() -> bool:
    """Keep the memory a job frees mapped in this process for the next one (glibc's ``mallopt``:
    :data:`MMAP_THRESHOLD_BYTES`, :data:`TRIM_THRESHOLD_BYTES`), once per process. Returns
    whether it is set (False where the C library is not glibc: nothing changes there).

    Why: in a node of Flower's simulation engine (a Ray actor) the memory of every mini-batch
    went back to the OS and was faulted in again at the next one: 60,000 to 90,000 minor page
    faults and 0.08 to 0.2 s of kernel time in a job of 0.75 s (the MNIST CNN, 600 samples,
    E = 5, B = 50), against about one fault per job in a plain process such as the simulator's
    workers, whose malloc adapts its thresholds by itself. Set, the same job in a Ray actor
    faulted 1 to 150 times, and the nodes of ``benchmarks/bench_flower.py --full`` about 400
    times a job (docs/flower.md, "Measured"). Results do not change.
    """
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


def release_freed_memory() -> bool:
    """Hand the heap's free pages back to the OS (glibc's ``malloc_trim(0)``: a few ms). Returns
    ``malloc_trim``'s answer (True when it released some memory), False where the C library is
    not glibc.

    Called after a data set is loaded (:func:`fedselect.world.data.catalog.load_dataset`): the
    full MNIST CSV left the process about 490 MB larger than its arrays until then.
    """
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
