"""Converters from FedScale's fleet files to fedselect's CSVs, read the way FedScale reads them
(docs/fleets.md; FedScale: SymbioticLab/FedScale).

FedScale ships two pickles, read here with :func:`fedselect.world.data.safe_pickle.safe_pickle_load`
allowing **no** global (only plain dicts, lists, numbers and strings load, so a crafted file
cannot run code):

* the client-behaviour trace (``client_behave_trace``): client id -> ``{"active": [s, ...],
  "inactive": [s, ...], "finish_time": s, ...}``. FedScale's ``ClientMetadata.is_active``
  (``fedscale/cloud/internal/client_metadata.py``) takes a client to be online at ``cur_time``
  when ``cur_time % finish_time`` lies in one of ``[active[i], inactive[i]]``: the record
  repeats every ``finish_time``. ``ClientManager.register_client``
  (``fedscale/cloud/client_manager.py``) gives client id ``c`` (1, 2, ... in registration
  order) the record at position ``c % R`` of the file's keys, in file order, so more clients
  than records reuse records.
* the device capacities (``client_device_capacity``): client id -> ``{"computation": ms per
  sample, "communication": kbit/s}``. ``Aggregator.client_register_handler``
  (``fedscale/cloud/aggregation/aggregator.py``) gives client ``c`` the entry whose key is
  ``c % P``, or ``{"computation": 1.0, "communication": 1.0}`` when there is none;
  ``ClientMetadata.get_completion_time`` makes a round ``augmentation_factor (3) x batch_size x
  local_steps x computation / 1000`` s of computation plus ``(upload + download) /
  communication`` s of communication, the model's size in kbit of 1024 bits
  (``model_update_size = bytes / 1024 x 8``).

fedselect's client ``k`` is FedScale's client ``k + 1``. The trace becomes a CSV
``client,start_s,end_s,period_s`` (``period_s`` = ``finish_time``;
:func:`fedselect.fl.availability.read_trace`); the capacities a CSV
``client,compute_speed,bandwidth_kbps`` (``system.capacity: {model: file}``) with
``compute_speed = 1000 / (augmentation x computation)`` samples per second and
``bandwidth_kbps = 1.024 x communication``, so that fedselect's compute time ``E n_k /
compute_speed`` and transfer time ``8 bytes / (1000 bandwidth_kbps)`` are FedScale's. What is
still different is printed by the converter (:attr:`Conversion.notes`) and listed in
docs/fleets.md.

Usage: ``python -m fedselect.world.fedscale trace IN.pickle OUT.csv [--clients N]`` and
``python -m fedselect.world.fedscale capacity IN.pickle OUT.csv [--clients N] [--augmentation A]``;
N defaults to the number of records in the file.
"""

from __future__ import annotations

import argparse
import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from fedselect.common.files import atomic_write
from fedselect.world.data.file_errors import DataFileError
from fedselect.world.data.safe_pickle import safe_pickle_load

#: ``ClientMetadata.get_completion_time``'s default ``augmentation_factor``: the backward pass
#: costs about twice the forward pass whose latency ``computation`` is
AUGMENTATION = 3.0
#: FedScale's model size is in kbit of 1024 bits, fedselect's bandwidth in kb/s of 1000 bits
KBIT = 1024 / 1000
#: the profile ``Aggregator.client_register_handler`` gives a client whose key is missing
FEDSCALE_DEFAULT_PROFILE = {"computation": 1.0, "communication": 1.0}

TRACE_HEADER = ("client", "start_s", "end_s", "period_s")
CAPACITY_HEADER = ("client", "compute_speed", "bandwidth_kbps")


@dataclass
class Conversion:
    """The rows of a converted file and what the conversion did, in words (printed by the
    command): how records map onto clients and every place where the result differs from what
    FedScale itself would compute."""

    rows: list[tuple]
    notes: list[str] = field(default_factory=list)


def _load(path: str | Path, what: str) -> dict:
    doc = safe_pickle_load(path, allowed=frozenset(), what=what)
    if not isinstance(doc, dict):
        raise DataFileError(path, f"a FedScale {what} is a dict of client id -> record, got {type(doc).__name__}")
    if not doc:
        raise DataFileError(path, f"the FedScale {what} holds no record")
    return doc


def _number(path, key, rec: dict, name: str) -> float | None:
    v = rec.get(name)
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        raise DataFileError(path, f"client {key!r}: {name} must be a number, got {v!r}") from None


def trace_rows(path: str | Path, clients: int | None = None) -> Conversion:
    """``(client, start_s, end_s, period_s)`` online intervals from a FedScale behaviour trace
    (module docstring): client ``k`` takes the record at position ``(k + 1) mod R`` in file
    order, its i-th period is ``[active[i], inactive[i]]`` cut at ``finish_time``, and
    ``period_s`` = ``finish_time`` (inf without one: the trace then ends after the last period).

    Raises:
        DataFileError: not a dict of records with lists ``active`` / ``inactive`` of numbers, a
            ``finish_time`` that is not a number > 0 (names the client), or an empty file.
    """
    doc = _load(path, "client behaviour trace")
    keys = list(doc)
    r = len(keys)
    n = r if clients is None else int(clients)
    rows: list[tuple] = []
    zero = clipped = unmatched = 0
    no_finish = set()
    for k in range(n):
        key = keys[(k + 1) % r]
        rec = doc[key]
        if not isinstance(rec, dict) or not isinstance(rec.get("active"), list) or not isinstance(rec.get("inactive"), list):
            raise DataFileError(path, f"client {key!r}: needs lists 'active' and 'inactive'")
        try:
            on, off = [float(x) for x in rec["active"]], [float(x) for x in rec["inactive"]]
        except (TypeError, ValueError):
            raise DataFileError(path, f"client {key!r}: 'active' and 'inactive' must hold numbers (seconds)") from None
        finish = _number(path, key, rec, "finish_time")
        if finish is not None and not (math.isfinite(finish) and finish > 0):
            raise DataFileError(path, f"client {key!r}: finish_time must be a number > 0, got {finish}")
        if finish is None:
            no_finish.add(key)
        period = math.inf if finish is None else finish
        for i, s in enumerate(on):
            if i < len(off):
                e = off[i]
            else:
                e, unmatched = period, unmatched + 1
            if s >= period:
                clipped += 1
                continue
            if e > period:
                e, clipped = period, clipped + 1
            if e <= s:
                zero += 1
                continue
            rows.append((k, s, e, period))
    notes = [
        f"{r} record(s) -> {n} client(s): client k takes the record at position (k + 1) mod {r} in file order, as "
        "FedScale's ClientManager.register_client does for its client id k + 1"
        + (f" ({n - r} more clients than records: records are reused)" if n > r else ""),
        "each client's periods repeat every finish_time s (column period_s), as ClientMetadata.is_active reads "
        "cur_time % finish_time",
        "different from FedScale: ClientMetadata.is_active keeps a cursor (behavior_index) that moves at most one period "
        "per call and never goes back at the wrap, so its answer depends on when it was asked before; here a client is "
        "online at time x iff x mod finish_time lies in one of its periods, whoever asks when",
    ]
    if zero:
        notes.append(
            f"different from FedScale: {zero} period(s) of zero length (active == inactive) left out; FedScale's periods are "
            "closed, [active, inactive], so it counts such a client online at that one instant; here periods are "
            "[start, end)"
        )
    if clipped:
        notes.append(f"{clipped} period(s) cut at finish_time (FedScale never reaches past it: cur_time % finish_time)")
    if unmatched:
        notes.append(
            f"different from FedScale: {unmatched} 'active' time(s) without an 'inactive' one closed at finish_time "
            "(FedScale's is_active fails with an IndexError on them)"
        )
    if no_finish:
        notes.append(
            f"different from FedScale: {len(no_finish)} record(s) without finish_time do not repeat: their trace ends after "
            "their last period (FedScale's is_active needs finish_time)"
        )
    return Conversion(rows, notes)


def capacity_rows(path: str | Path, clients: int | None = None, augmentation: float = AUGMENTATION) -> Conversion:
    """``(client, compute_speed, bandwidth_kbps)`` from FedScale's device capacities (module
    docstring): client ``k`` takes the entry with key ``(k + 1) mod P`` (FedScale's default
    profile when there is none), ``compute_speed = 1000 / (augmentation x computation)``
    samples per second and ``bandwidth_kbps = 1.024 x communication``.

    Raises:
        DataFileError: a key that is not an integer, a record without positive numbers
            ``computation`` / ``communication`` (names the client), or an empty file.
        ValueError: ``augmentation`` <= 0.
    """
    if not (math.isfinite(augmentation) and augmentation > 0):
        raise ValueError(f"--augmentation must be a number > 0, got {augmentation}")
    doc = _load(path, "device capacity file")
    by_key = {}
    for key, rec in doc.items():
        try:
            by_key[int(key)] = (key, rec)
        except (TypeError, ValueError):
            raise DataFileError(path, f"client {key!r}: FedScale looks capacities up by integer client id") from None
    p = len(by_key)
    n = p if clients is None else int(clients)
    rows, defaulted = [], []
    for k in range(n):
        key, rec = by_key.get((k + 1) % p, (None, None))
        if rec is None:
            rec = FEDSCALE_DEFAULT_PROFILE
            defaulted.append(k)
        try:
            ms, kbps = float(rec["computation"]), float(rec["communication"])
        except (TypeError, KeyError, ValueError):
            raise DataFileError(path, f"client {key!r}: needs numbers 'computation' and 'communication'") from None
        if not (ms > 0 and kbps > 0 and math.isfinite(ms) and math.isfinite(kbps)):
            raise DataFileError(path, f"client {key!r}: computation and communication must be > 0, got {ms}, {kbps}")
        rows.append((k, 1000.0 / (augmentation * ms), kbps * KBIT))
    notes = [
        f"{p} record(s) -> {n} client(s): client k takes the entry with key (k + 1) mod {p}, as FedScale's "
        "Aggregator.client_register_handler does for its client id k + 1",
        f"compute_speed = 1000 / ({augmentation:g} x computation) samples/s: ClientMetadata.get_completion_time charges "
        f"augmentation_factor {augmentation:g} x the samples trained x computation ms",
        "bandwidth_kbps = 1.024 x communication: FedScale's model size is in kbit of 1024 bits (model_update_size), "
        "fedselect's bandwidth in kb/s of 1000 bits",
        "FedScale charges the download in every round ((upload + download) / communication): set "
        "system.count_download: true to do the same",
        "different from FedScale: it charges batch_size x local_steps samples (a full batch every step, local_steps the "
        "same for every client); fedselect trains E epochs and charges the samples trained, E n_k, which is less by the "
        "last partial batch of each epoch",
        "different from FedScale: its upload and download size is the pickled model (sys.getsizeof(pickle.dumps(model))); "
        "fedselect's is the bytes of the entries the algorithm sends",
    ]
    if any(not isinstance(key, int) for key in doc):
        notes.append(
            "different from FedScale: the file's keys are not integers; FedScale looks entries up by the integer c % P "
            "and would give every client its default profile; here each key is read as the integer it spells"
        )
    if defaulted:
        shown = ", ".join(str(k) for k in defaulted[:10]) + (" ..." if len(defaulted) > 10 else "")
        notes.append(
            f"{len(defaulted)} client(s) have no entry with key (k + 1) mod {p} and get FedScale's default profile "
            f"{FEDSCALE_DEFAULT_PROFILE} (clients {shown}), as FedScale gives them"
        )
    return Conversion(rows, notes)


def write_csv(rows, header: tuple[str, ...], out: str | Path) -> None:
    """Write ``rows`` (a client id, then numbers) under ``header`` atomically."""

    def body(fh):
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows([(r[0], *(repr(float(x)) for x in r[1:])) for r in rows])

    atomic_write(Path(out), body, newline="")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m fedselect.world.fedscale", description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=("trace", "capacity"))
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--clients", type=int, default=None, help="clients 0..N-1 to write (default: the file's records)")
    ap.add_argument(
        "--augmentation",
        type=float,
        default=AUGMENTATION,
        help=f"capacity: FedScale's augmentation_factor (default {AUGMENTATION:g}, get_completion_time's)",
    )
    a = ap.parse_args(argv)
    if a.clients is not None and a.clients < 1:
        ap.error(f"--clients must be >= 1, got {a.clients}")
    if a.kind == "trace":
        conv, header = trace_rows(a.src, a.clients), TRACE_HEADER
    else:
        conv, header = capacity_rows(a.src, a.clients, a.augmentation), CAPACITY_HEADER
    write_csv(conv.rows, header, a.out)
    print(f"{a.out}: {len(conv.rows)} row(s) from {a.src}")
    for note in conv.notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
