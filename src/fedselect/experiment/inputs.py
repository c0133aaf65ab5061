"""What a run's results were computed from: the input files and the federation built from them.

When a run starts, ``inputs.json`` in its run directory records

* ``files``: every data and profile file the data set's loader read (absolute path, size in
  bytes, SHA-256 of the bytes read; reported by the data-file readers to :mod:`fedselect.world.data.provenance`);
* ``federation_sha256``: a digest of the federation built from them (:func:`federation_digest`:
  every client's training and held-out indices and sizes, the training and test labels, the
  input shape and the clients' device and network profiles);
* for data sets that read no file of yours (``mnist-embedded``, ``imu-watch`` and the synthetic
  ones: the data comes from an installed package or a seeded generator) ``files`` is empty and
  ``note`` says so; the federation digest still catches a package whose data changed.

Whatever reuses a run's results checks them, before anything is written:

* ``fedselect run --resume DIR`` (:func:`check_resume`): the federation it has just rebuilt
  must read the same files with the same content and give the same digest, otherwise the
  resume is refused naming every file that changed (its size and digest before and now), or was
  added or no longer read, and whether the federation differs;
* ``fedselect compare --resume DIR`` and a sweep continued into its ``--out`` (through
  :func:`fedselect.experiment.resume.check_saved_runs`, :func:`saved_inputs_changed`): every kept run's
  files must still hold what they held (size and SHA-256 of the file on disk; no federation is
  built for a finished run).

``fedselect report`` does not check inputs: it only reads the saved metrics, which stay what they
were (and the data may not be on the machine that makes the report).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from fedselect.common.files import read_json, write_json_atomic
from fedselect.world.federation import Federation

__all__ = [
    "INPUTS_FILE",
    "check_resume",
    "describe_inputs",
    "federation_digest",
    "input_changes",
    "read_inputs",
    "saved_inputs_changed",
    "write_inputs",
]

#: the record in each run directory
INPUTS_FILE = "inputs.json"
FORMAT = 1


def federation_digest(fed: Federation) -> str:
    """SHA-256 over what the federation's clients train and are evaluated on: per client its
    training and held-out indices into the training set and their sizes, the server's validation
    rows (when there are any), the training set's and the test set's labels and sizes, the input shape, the number of classes, and every client's
    device and network profile names. Two builds that give the same clients the same samples
    give the same digest; appending rows to a data file, a re-drawn partition or another test
    set change it."""
    h = hashlib.sha256()

    def add(tag: str, arr: Any) -> None:
        a = np.ascontiguousarray(np.asarray(arr))
        h.update(f"{tag}:{a.dtype.str}:{a.shape}:".encode())
        h.update(a.tobytes())

    add("input_shape", np.asarray(fed.input_shape, dtype=np.int64))
    add("num_classes", np.asarray([fed.num_classes], dtype=np.int64))
    add("train_y", fed.train_set.y.astype(np.int64))
    add("test_y", fed.test_set.y.astype(np.int64))
    if len(fed.validation_indices):  # (none: the digest of a federation made before the validation set existed)
        add("validation", np.asarray(fed.validation_indices, dtype=np.int64))
    for c in fed.clients:
        add(f"client{c.id}/train", np.asarray(c.train_indices, dtype=np.int64))
        add(f"client{c.id}/holdout", np.asarray(c.holdout_indices, dtype=np.int64))
    h.update(json.dumps([[d.name for d in fed.fleet.devices], [n.name for n in fed.fleet.networks]]).encode())
    return h.hexdigest()


def describe_inputs(fed: Federation) -> dict[str, Any]:
    """The content of ``inputs.json`` for a run on ``fed`` (module docstring)."""
    files = [dict(f) for f in getattr(fed, "source_files", [])]
    out: dict[str, Any] = {
        "format": FORMAT,
        "dataset": fed.data.dataset,
        "files": files,
        "federation_sha256": federation_digest(fed),
        "num_clients": fed.num_clients,
        "client_samples": [int(c.num_samples) for c in fed.clients],
        "train_size": len(fed.train_set),
        "validation_size": len(fed.validation_indices),
        "test_size": len(fed.test_set),
    }
    if not files:
        source = fed.train_set.info.get("source") if isinstance(fed.train_set.info, dict) else None
        out["note"] = (
            f"data set {fed.data.dataset!r} read no data file (embedded in an installed package or generated"
            + (f": {source}" if source else "")
            + "); only the federation digest can be checked"
        )
    return out


def write_inputs(run_dir: str | Path, fed: Federation) -> None:
    """Write ``inputs.json`` into ``run_dir`` (atomic)."""
    write_json_atomic(Path(run_dir) / INPUTS_FILE, describe_inputs(fed))


def read_inputs(run_dir: str | Path) -> dict[str, Any] | None:
    """The saved ``inputs.json`` of ``run_dir`` (None when the run has none: made by an older
    fedselect, or not started)."""
    p = Path(run_dir) / INPUTS_FILE
    if not p.is_file():
        return None
    doc = read_json(p)
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise ValueError(f"{p}: not an inputs record fedselect wrote (expected a JSON object with 'files'); restore it")
    return doc


def _short(digest: str) -> str:
    return digest[:12] + "…"


def _file_change(before: dict[str, Any], now: dict[str, Any] | None) -> str | None:
    if now is None:
        return f"{before['path']} is gone (it held {before['size']} bytes)"
    if now["size"] != before["size"] or now["sha256"] != before["sha256"]:
        return (
            f"{before['path']} changed ({before['size']} -> {now['size']} bytes, sha256 "
            f"{_short(before['sha256'])} -> {_short(now['sha256'])})"
        )
    return None


def input_changes(saved: dict[str, Any], fed: Federation) -> list[str]:
    """How the inputs of a rebuilt federation differ from a saved record: changed, added and
    no longer read files, and a different federation digest ([] when they match)."""
    old = {f["path"]: f for f in saved.get("files", [])}
    new = {f["path"]: f for f in getattr(fed, "source_files", [])}
    out = []
    for path, f in old.items():
        if path in new:
            ch = _file_change(f, new[path])
            if ch:
                out.append(ch)
        else:
            ch = _file_change(f, _on_disk(path))
            out.append(f"{path} is no longer read" + (f" ({ch.split(' ', 1)[1]})" if ch else ""))
    out += [f"{path} is read now but was not when the run started" for path in new if path not in old]
    digest = saved.get("federation_sha256")
    if digest and digest != federation_digest(fed):
        n_old, n_new = saved.get("client_samples"), [int(c.num_samples) for c in fed.clients]
        sizes = f" (training samples per client {n_old} then, {n_new} now)" if n_old and n_old != n_new else ""
        out.append(
            "the federation built from them differs: the clients' training data or the test set are not the ones "
            f"the run was trained on{sizes}"
        )
    return out


def check_resume(run_dir: str | Path, fed: Federation) -> None:
    """Refuse to continue the run in ``run_dir`` on inputs other than those it started on.

    A run without ``inputs.json`` (made before fedselect recorded its inputs) cannot be
    checked; that is logged and the resume goes on.

    Raises:
        ValueError: naming every file that changed (size and digest before and now), was added
            or is no longer read, and whether the federation differs.
    """
    import logging

    saved = read_inputs(run_dir)
    if saved is None:
        logging.getLogger("fedselect").warning(
            "%s has no %s (started by an older fedselect): its input data cannot be checked on resume", run_dir, INPUTS_FILE
        )
        return
    changes = input_changes(saved, fed)
    if changes:
        raise ValueError(
            f"cannot resume {run_dir}: its input data changed since the run started: " + "; ".join(changes) + ". The rounds "
            "already done were trained on the old data, the rest would be trained on the new: restore the file(s), or start "
            "a new run (--overwrite or another --out). Nothing was changed"
        )


#: (path, size, mtime_ns) -> record: every kept run of a comparison names the same files
_DISK_CACHE: dict[tuple[str, int, int], dict[str, Any]] = {}


def _on_disk(path: str) -> dict[str, Any] | None:
    """Size and SHA-256 of the file at ``path`` now (None when it is gone)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _DISK_CACHE:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        if len(_DISK_CACHE) > 256:
            _DISK_CACHE.clear()
        _DISK_CACHE[key] = {"path": path, "size": st.st_size, "sha256": h.hexdigest()}
    return _DISK_CACHE[key]


def saved_inputs_changed(run_dir: str | Path) -> list[str]:
    """For a run kept as it is (no federation rebuilt): every file in its ``inputs.json`` that is
    gone or holds other bytes now ([] when all match or the run has no record)."""
    saved = read_inputs(run_dir)
    if saved is None:
        return []
    return [ch for f in saved["files"] if (ch := _file_change(f, _on_disk(f["path"])))]
