"""Which data files a run read: path, size and SHA-256 of the bytes read.

Every reader of a user data file (:mod:`fedselect.world.data.checked_csv`,
:mod:`fedselect.world.data.safe_pickle`, the IDX and profile readers) reports the file it read
to :func:`note_read`; inside :func:`recording_reads` each read file is recorded with its size
and SHA-256, so that a run can save what its data came from and a resume can refuse data that
changed (:mod:`fedselect.experiment.inputs`). Outside it, nothing is recorded.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from pathlib import Path
from typing import Any, Iterator

__all__ = ["note_read", "recording_reads"]


#: the files read inside the innermost :func:`recording_reads` (None: not recording)
_READS: contextvars.ContextVar[dict[str, dict[str, Any]] | None] = contextvars.ContextVar("fedselect_reads", default=None)


@contextlib.contextmanager
def recording_reads() -> Iterator[dict[str, dict[str, Any]]]:
    """Record every data file read in the block: yields ``{absolute path: {"path", "size",
    "sha256"}}``, filled as files are read (:func:`note_read`). Nested blocks each get their own
    record, and the outer one sees the inner reads too."""
    outer = _READS.get()
    mine: dict[str, dict[str, Any]] = {}
    token = _READS.set(mine)
    try:
        yield mine
    finally:
        _READS.reset(token)
        if outer is not None:
            outer.update(mine)


def note_read(path: str | Path, data: bytes | None = None) -> None:
    """Report that a loader read ``path`` (``data``: the bytes read, when the reader has them;
    otherwise the file is hashed as it is on disk now). A no-op outside :func:`recording_reads`."""
    reads = _READS.get()
    if reads is None:
        return
    p = Path(path).expanduser().resolve()
    if data is None:
        h, size = hashlib.sha256(), 0
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
                size += len(chunk)
        digest = h.hexdigest()
    else:
        digest, size = hashlib.sha256(data).hexdigest(), len(data)
    reads[str(p)] = {"path": str(p), "size": size, "sha256": digest}
