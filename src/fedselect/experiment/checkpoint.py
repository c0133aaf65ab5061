"""Atomic checkpoints (temp file + fsync + rename) with a fallback to the previous one.

Files in a run directory:

* ``checkpoint.pt`` - the latest checkpoint;
* ``checkpoint.prev.pt`` - the one before (kept so that a damaged latest file loses only
  ``checkpoint_every`` rounds);
* ``.checkpoint.new`` - exists only for an instant between the two renames of a save; a
  crash exactly there leaves it complete, and :func:`load_checkpoint` considers it too.

:func:`load_checkpoint` reads every candidate and returns the readable one with the highest
round; a truncated or corrupted file that another file stands in for is named once, in a
warning; when none is usable the one error names every file and its problem and says that the
run can only be started again (``--overwrite``).

**Loading never runs code.** Files are read with ``torch.load(weights_only=True)``, whose
unpickler admits only tensors, numbers, strings, bytes and containers. The payload is stored
as such plain data: :func:`encode_payload` turns NumPy arrays into tagged tensors (dtype and
shape kept) and NumPy scalars into tagged Python numbers, and :func:`decode_payload` turns them
back, so callers save and get back the same objects. A file that asks for anything else (a
function to call, any other class) is refused with a :class:`CheckpointError` naming the file
and the refused global; so is a checkpoint of format 2 or older (it held NumPy pickles). Damage
to the file usually shows up the same way (a byte flipped in the pickle stream reads as an
unknown opcode or as a global that does not exist); such files are reported as corrupted.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedselect.common.files import atomic_write
from fedselect.world.data.safe_pickle import global_exists

log = logging.getLogger("fedselect.checkpoint")

LATEST, PREVIOUS, NEW = "checkpoint.pt", "checkpoint.prev.pt", ".checkpoint.new"
#: bumped when the payload layout changes incompatibly (3: plain data, read with weights_only=True)
FORMAT_VERSION = 3

_ND, _NP_SCALAR, _FROZENSET = "__fedselect_ndarray__", "__fedselect_npscalar__", "__fedselect_frozenset__"
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.Size, torch.dtype)


def encode_payload(obj: Any, where: str = "payload") -> Any:
    """``obj`` as plain data that ``torch.load(weights_only=True)`` reads (see the module
    docstring): tensors, ``None``, bool, int, float, complex, str, bytes, and dicts, lists,
    tuples and sets of them. NumPy arrays become ``{_ND: tensor, "dtype": str}`` (or a nested
    list for dtypes a tensor cannot hold, e.g. strings), NumPy scalars ``{_NP_SCALAR: dtype,
    "value": python number}``, frozensets tagged lists; dict keys that are NumPy scalars become
    Python scalars.

    Raises:
        TypeError: a value of another type (names where it is in the payload), e.g. an
            arbitrary object that only a pickle could store.
    """
    if isinstance(obj, np.generic):  # before the plain types: np.float64 is a float subclass
        return {_NP_SCALAR: obj.dtype.str, "value": obj.item()}
    if isinstance(obj, torch.Tensor) or type(obj) in _PLAIN:
        return obj
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "biufc":
            native = obj.astype(obj.dtype.newbyteorder("="), copy=True) if not obj.dtype.isnative else np.array(obj, copy=True)
            try:
                return {_ND: torch.from_numpy(np.ascontiguousarray(native)), "dtype": obj.dtype.str}
            except TypeError:
                pass
        return {_ND: "list", "dtype": obj.dtype.str, "shape": list(obj.shape), "data": encode_payload(obj.tolist(), where)}
    if isinstance(obj, _PLAIN):  # subclasses of the plain types (e.g. an IntEnum) as their base value
        return next(t for t in _PLAIN if isinstance(obj, t))(obj) if not isinstance(obj, (torch.Size, torch.dtype)) else obj
    if isinstance(obj, dict):
        out = {(k.item() if isinstance(k, np.generic) else k): encode_payload(v, f"{where}[{k!r}]") for k, v in obj.items()}
        return OrderedDict(out) if isinstance(obj, OrderedDict) else out
    if isinstance(obj, list):
        return [encode_payload(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, tuple):
        return tuple(encode_payload(v, f"{where}[{i}]") for i, v in enumerate(obj))
    if isinstance(obj, frozenset):
        return {_FROZENSET: [encode_payload(v, where) for v in obj]}
    if isinstance(obj, set):
        return {encode_payload(v, where) for v in obj}
    raise TypeError(
        f"checkpoint {where}: a {type(obj).__module__}.{type(obj).__qualname__} cannot be stored as plain data "
        "(tensors, NumPy arrays/scalars, numbers, strings, bytes, dicts, lists, tuples, sets); "
        "convert it in the method's state_dict()"
    )


def decode_payload(obj: Any) -> Any:
    """The inverse of :func:`encode_payload`: NumPy arrays and scalars back from their tags."""
    if isinstance(obj, dict):
        if _ND in obj:
            dtype = np.dtype(obj["dtype"])
            if isinstance(obj[_ND], torch.Tensor):
                return obj[_ND].numpy().astype(dtype, copy=False)
            return np.array(decode_payload(obj["data"]), dtype=dtype).reshape(obj["shape"])
        if _NP_SCALAR in obj:
            return np.dtype(obj[_NP_SCALAR]).type(obj["value"])
        if _FROZENSET in obj:
            return frozenset(decode_payload(v) for v in obj[_FROZENSET])
        out = {k: decode_payload(v) for k, v in obj.items()}
        return OrderedDict(out) if isinstance(obj, OrderedDict) else out
    if isinstance(obj, list):
        return [decode_payload(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(decode_payload(v) for v in obj)
    if isinstance(obj, set):
        return {decode_payload(v) for v in obj}
    return obj


class CheckpointError(RuntimeError):
    """No usable checkpoint in a run directory (the message names each file and its problem)."""


class NoCheckpointError(CheckpointError):
    """The run directory holds no checkpoint file at all (the run stopped before its first one)."""


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:  # e.g. platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(run_dir: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (a dict with at least ``round``) atomically as ``checkpoint.pt``; the
    former latest becomes ``checkpoint.prev.pt``. At every instant at least one complete
    checkpoint file exists once the first save has finished.

    The payload may hold tensors, NumPy arrays and scalars, numbers, strings, bytes and
    containers of them (:func:`encode_payload`).

    Raises:
        ValueError: ``payload`` is not a dict with an integer ``round``.
        TypeError: a value that cannot be stored as plain data (names where it is).
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("round"), int):
        raise ValueError("a checkpoint payload must be a dict with an integer 'round'")
    d = Path(run_dir)
    latest = d / LATEST
    payload = encode_payload({**payload, "format_version": FORMAT_VERSION})
    atomic_write(d / NEW, lambda fh: torch.save(payload, fh), mode="wb")
    if latest.exists():
        os.replace(latest, d / PREVIOUS)
    os.replace(d / NEW, latest)
    _fsync_dir(d)
    return latest


def read_checkpoint_file(path: str | Path) -> dict[str, Any]:
    """Load and check one checkpoint file, without running any code it may hold
    (``torch.load(weights_only=True)``; module docstring).

    Raises:
        CheckpointError: missing, truncated or corrupted, refused (it asks for a global that
        plain data never needs: written by fedselect before format 3, or not a checkpoint of
        ours), or not a fedselect checkpoint (the message says which, with the underlying
        error in one line).
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"{p}: missing")
    if p.stat().st_size == 0:
        raise CheckpointError(f"{p}: empty file (0 bytes; truncated)")
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 88": a damaged header
            warnings.simplefilter("ignore")
            payload = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(_refusal(p, str(e))) from None
    except Exception as e:  # truncated zip, bad pickle, ...
        raise CheckpointError(f"{p}: corrupted or truncated ({_first_sentence(e)})") from None
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("round"), int)
        or not ("snapshot" in payload or "method" in payload)
    ):
        raise CheckpointError(f"{p}: not a fedselect checkpoint (expected a dict with 'round' and 'snapshot')")
    version = payload.get("format_version", 1)
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{p}: written by a newer fedselect (checkpoint format {version}; this one reads <= {FORMAT_VERSION})"
        )
    return decode_payload(payload)


def _first_sentence(e: BaseException) -> str:
    """``TypeName: the first sentence of its message`` (torch's zip errors run on for lines)."""
    text = " ".join(str(e).split())
    cut = re.search(r"(?<=[.!?])\s", text)
    return f"{type(e).__name__}: {text[: cut.start()] if cut else text}" if text else type(e).__name__


def _refusal(p: Path, message: str) -> str:
    """What ``torch.load(weights_only=True)``'s refusal of ``p`` means. A global that exists
    (``posix.system``, NumPy's array reconstruction) was asked for by the file as written: it is
    refused and named. An unknown opcode, or a global that does not exist (a flipped byte turns
    ``torch._utils`` into ``tor9h._utils``), is damage: the file is corrupted."""
    m = re.search(r"GLOBAL ([\w.]+)", message)
    if m is None or not global_exists(*m.group(1).rpartition(".")[::2]):
        found = re.search(r"(Unsupported operand \S+|GLOBAL [\w.]+)", message)
        return f"{p}: corrupted (its pickle stream is damaged{': ' + found.group(1) if found else ''})"
    what = m.group(1)
    old = (
        " (checkpoints written by fedselect before format 3 held NumPy pickles: start such a run again with --overwrite)"
        if what.startswith("numpy")
        else ""
    )
    return (
        f"{p}: refused to load: it asks for {what}, which a fedselect checkpoint never holds "
        f"(only tensors, numbers, strings and containers); nothing in the file was run{old}"
    )


def checkpoint_files(run_dir: str | Path) -> list[Path]:
    """The checkpoint files present in ``run_dir`` (latest, in-flight, previous)."""
    d = Path(run_dir)
    return [d / n for n in (LATEST, NEW, PREVIOUS) if (d / n).exists()]


def load_checkpoint(run_dir: str | Path) -> dict[str, Any]:
    """The readable checkpoint of ``run_dir`` with the highest round.

    An unreadable file that an older one stands in for is named once, in a warning
    (``fedselect.checkpoint``) that also says which file and round the run continues from.

    Raises:
        NoCheckpointError: no checkpoint file exists.
        CheckpointError: files exist but none is usable: one message names each file and its
            problem and says to start the run again with ``--overwrite``.
    """
    d = Path(run_dir)
    present = checkpoint_files(d)
    if not present:
        raise NoCheckpointError(f"no checkpoint in {d} (looked for {LATEST} and {PREVIOUS})")
    errors, good = [], []
    for p in present:
        try:
            good.append((p, read_checkpoint_file(p)))
        except CheckpointError as e:
            errors.append(str(e))
    if not good:
        raise CheckpointError(
            f"no usable checkpoint in {d}: " + "; ".join(errors) + ". Nothing can be resumed: start the run again with "
            f"`fedselect run {d / 'config.yaml'} --out {d} --overwrite` (its results so far are lost)"
        )
    path, payload = max(good, key=lambda pp: pp[1]["round"])
    if errors or path.name != LATEST:
        log.warning("%sresuming from %s (round %d)", "".join(f"checkpoint {e}; " for e in errors), path.name, payload["round"])
    return payload


def remove_stale_temp_files(run_dir: str | Path, names: tuple[str, ...] = (LATEST, NEW)) -> list[Path]:
    """Delete the temp files a killed writer of ``names`` left behind (``.<name>.*.tmp``, see
    ``common.files.atomic_write``); returns them. Other files are never touched."""
    d = Path(run_dir)
    stale = sorted(p for n in names for p in d.glob(f".{n}.*.tmp"))
    for p in stale:
        p.unlink(missing_ok=True)
    return stale
