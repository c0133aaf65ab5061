"""A node keeps the memory its jobs free (fedselect.flower.settings.keep_freed_memory): with
glibc's thresholds fixed low, as a Ray actor's behave, every freed 2 MB buffer goes back to the
OS and is faulted in again when the next one is written; with the node's settings it is reused.
The worked example counts the minor page faults of the same loop both ways."""

import importlib.util
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower]"),
    pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's"),
]

LOOP = textwrap.dedent("""
    import ctypes, resource, sys
    import numpy as np
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD fixed at its default: no adapting
    libc.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD likewise
    if sys.argv[1] == "node":
        from fedselect.flower.settings import keep_freed_memory
        assert keep_freed_memory() and keep_freed_memory()  # set once, True every time
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        a = np.empty(1 << 19, dtype=np.float32)  # 2 MB (below numpy's huge pages), written then freed
        a.fill(1.0)
        del a
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", LOOP, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def test_the_node_reuses_what_its_jobs_free():
    plain, node = _faults("plain"), _faults("node")
    # 50 buffers of 512 pages each mapped anew: at least 50 x 512 faults; kept: the first one only
    assert plain >= 50 * 512
    assert node < 3 * 512
