"""glibc's heap (fedselect.common.memory): freed memory handed back after a data set is loaded,
and a node's setting to keep it. Run in fresh processes, whose heaps nothing else has touched."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fedselect.common.memory import _glibc

SRC = str(Path(__file__).resolve().parents[2] / "src")

pytestmark = pytest.mark.skipif(_glibc() is None, reason="needs glibc")

#: 200 MB of 2 KB blocks (from the heap: below glibc's mmap threshold) freed under one block
#: still alive on top, so that the heap cannot shrink from its top by itself
CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from fedselect.common.memory import release_freed_memory
    def rss_mb():
        return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) / 1024
    blocks = [bytearray(2048) for _ in range(100_000)]
    top = bytearray(2048)
    full = rss_mb()
    del blocks
    freed = rss_mb()
    released = release_freed_memory()
    after = rss_mb()
    release_freed_memory()
    print(full, freed, after, released, rss_mb())
""")


def test_release_freed_memory_hands_the_freed_heap_back():
    out = subprocess.run([sys.executable, "-c", CHILD, SRC], capture_output=True, text=True, check=True, timeout=120)
    full, freed, after, released, again = out.stdout.split()
    full, freed, after, again = float(full), float(freed), float(after), float(again)
    assert freed > full - 50  # freed but kept: at most 50 of the ~200 MB went back by itself
    assert after < freed - 150 and released == "True"  # handed back: at least 150 of them
    assert abs(again - after) < 10  # a second call finds next to nothing left


def test_keep_freed_memory_is_reexported_for_nodes():
    from fedselect.common.memory import keep_freed_memory
    from fedselect.flower import settings

    assert settings.keep_freed_memory is keep_freed_memory
