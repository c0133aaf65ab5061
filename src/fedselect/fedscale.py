"""Converters from FedScale's fleet files to fedselect's CSVs (docs/fleets.md).

FedScale ships two pickles: the client-behaviour trace (``client_behave_trace``: client id ->
``{"active": [s, ...], "inactive": [s, ...], "finish_time": s, ...}``, the times a device came
online and went offline) and the device capacities (``client_device_capacity``: client id ->
``{"computation": ms per sample, "communication": kb/s}``). They are read with
:func:`fedselect.data.files.safe_pickle_load` allowing **no** global: only plain dicts, lists,
numbers and strings load, so a crafted file cannot run code.

Usage: ``python -m fedselect.fedscale trace IN.pickle OUT.csv [--clients N]`` and
``python -m fedselect.fedscale capacity IN.pickle OUT.csv [--clients N]``; the first N clients
of the file in id order become clients 0..N-1.
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

from fedselect.data.files import DataFileError, safe_pickle_load
from fedselect.fl.metrics import atomic_write


def _load(path: str | Path, what: str) -> dict:
    doc = safe_pickle_load(path, allowed=frozenset(), what=what)
    if not isinstance(doc, dict):
        raise DataFileError(path, f"a FedScale {what} is a dict of client id -> record, got {type(doc).__name__}")
    return doc


def trace_rows(path: str | Path, clients: int | None = None) -> list[tuple[int, float, float]]:
    """``(client, start_s, end_s)`` online intervals from a FedScale behaviour trace: the i-th
    ``active`` time to the i-th ``inactive`` one (``finish_time``, else inf, closes a last open one).

    Raises:
        DataFileError: not a dict of records with ``active`` / ``inactive`` lists (names the client).
    """
    doc = _load(path, "client behaviour trace")
    rows = []
    for new, key in enumerate(sorted(doc, key=lambda x: int(x))[:clients]):
        rec = doc[key]
        if not isinstance(rec, dict) or not isinstance(rec.get("active"), list) or not isinstance(rec.get("inactive"), list):
            raise DataFileError(path, f"client {key!r}: needs lists 'active' and 'inactive'")
        on, off = [float(x) for x in rec["active"]], [float(x) for x in rec["inactive"]]
        last = float(rec.get("finish_time", math.inf))
        for i, s in enumerate(on):
            e = off[i] if i < len(off) else last
            if e > s:
                rows.append((new, s, e))
    return rows


def capacity_rows(path: str | Path, clients: int | None = None) -> list[tuple[int, float, float]]:
    """``(client, compute_speed, bandwidth_kbps)`` from FedScale's device capacities:
    compute_speed = 1000 / computation (ms per sample -> samples per second).

    Raises:
        DataFileError: a record without positive ``computation`` / ``communication`` (names the client).
    """
    doc = _load(path, "device capacity file")
    rows = []
    for new, key in enumerate(sorted(doc, key=lambda x: int(x))[:clients]):
        rec = doc[key]
        try:
            ms, kbps = float(rec["computation"]), float(rec["communication"])
        except (TypeError, KeyError, ValueError):
            raise DataFileError(path, f"client {key!r}: needs numbers 'computation' and 'communication'") from None
        if not (ms > 0 and kbps > 0):
            raise DataFileError(path, f"client {key!r}: computation and communication must be > 0, got {ms}, {kbps}")
        rows.append((new, 1000.0 / ms, kbps))
    return rows


def write_csv(rows, header: tuple[str, ...], out: str | Path) -> None:
    """Write ``rows`` under ``header`` atomically."""

    def body(fh):
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows([(r[0], repr(float(r[1])), repr(float(r[2]))) for r in rows])

    atomic_write(Path(out), body, newline="")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m fedselect.fedscale", description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=("trace", "capacity"))
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--clients", type=int, default=None, help="keep the first N clients (id order)")
    a = ap.parse_args(argv)
    if a.kind == "trace":
        write_csv(trace_rows(a.src, a.clients), ("client", "start_s", "end_s"), a.out)
    else:
        write_csv(capacity_rows(a.src, a.clients), ("client", "compute_speed", "bandwidth_kbps"), a.out)


if __name__ == "__main__":
    main()
