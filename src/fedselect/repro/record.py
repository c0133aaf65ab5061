"""Where an entry's runs were made: the machine and time recorded in ``<out>/<id>/reproduce.json``
each time ``fedselect reproduce`` runs (or continues) the entry, read back when the document is
written, however long after and wherever that is."""

from __future__ import annotations

import json
import os
import platform
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from fedselect.repro.manifest import EntryResult


def _machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:  # the CPU's model name where Linux tells it
        names = [x.split(":", 1)[1].strip() for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu}), torch {torch.__version__}, {torch.get_num_threads()} threads"


#: the file in an entry's directory that says on which machines its runs were made
RECORD = "reproduce.json"


def record_session(directory: Path, machine: str, started: float, wall_s: float | None) -> int:
    """Append one session (the machine, its start as a UTC ISO time, its wall seconds, None while
    it runs) to ``directory/RECORD`` (written atomically), so that the document rebuilt later,
    elsewhere, still names the hardware the runs were made on. Returns the session's index."""
    from datetime import datetime, timezone

    sessions = read_sessions(directory)
    sessions.append(
        {
            "machine": machine,
            "started": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
            "wall_s": None if wall_s is None else round(wall_s, 3),
        }
    )
    _write(directory, sessions)
    return len(sessions) - 1


def _write(directory: Path, sessions: list[dict[str, Any]]) -> None:
    from fedselect.common.files import write_json_atomic

    write_json_atomic(directory / RECORD, {"sessions": sessions})


@contextmanager
def session(directory: Path, worked: Callable[[], bool] | None = None) -> Iterator[None]:
    """Record a session of work on the entry in ``directory`` around the block: opened (machine,
    start, wall None) before the work starts, so a run killed half-way still names its machine,
    and given its wall seconds when the block ends, normally or by an exception. ``worked``:
    asked at a normal end; False drops the session (nothing was there to do)."""
    directory.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    index = record_session(directory, _machine(), time.time(), None)
    ok = False
    try:
        yield
        ok = True
    finally:
        sessions = read_sessions(directory)
        if index < len(sessions):
            if ok and worked is not None and not worked():
                del sessions[index]
            else:
                sessions[index]["wall_s"] = round(time.perf_counter() - t0, 3)
            _write(directory, sessions)


def read_sessions(directory: Path) -> list[dict[str, Any]]:
    """The sessions recorded in ``directory/RECORD`` (empty when there is none or it is unreadable)."""
    try:
        doc = json.loads((directory / RECORD).read_text())
    except (OSError, ValueError):
        return []
    sessions = doc.get("sessions") if isinstance(doc, dict) else None
    return [x for x in sessions or [] if isinstance(x, dict) and isinstance(x.get("machine"), str)]


def recorded_wall(directory: Path) -> float:
    """Seconds the recorded sessions of ``directory`` took in all (0 without a record)."""
    return float(sum(float(x.get("wall_s") or 0.0) for x in read_sessions(directory)))


def _machines(directory: Path) -> list[str]:
    return list(dict.fromkeys(x["machine"] for x in read_sessions(directory)))


def _runs_wall(directory: Path) -> float:
    """The runs' own wall seconds in all (their ``summary.json`` ``wall_s``)."""
    total = 0.0
    for s in (directory / "runs").glob("*/summary.json"):
        try:
            total += float(json.loads(s.read_text()).get("wall_s") or 0.0)
        except (OSError, ValueError):
            continue
    return total


def decisions_caution(r: EntryResult) -> list[str]:
    """The document's caution lines for an entry whose methods' decisions read the test set
    (``selection_eval: test``, the papers' protocol; [] when none did)."""
    if not r.test_decisions:
        return []
    return [
        f"Caution, decisions read the test set: {', '.join(r.test_decisions)} (selection_eval: test, as the paper did; "
        "their rewards or candidate scores came from the test set whose figures are reported here).",
        "",
    ]


def finding_text(entry: Any, quick: bool) -> str:
    """The entry's ``finding`` ("" without one). Under ``--quick`` it is said to be the full
    run's: the quick variant's numbers above it differ."""
    text = (entry.finding or "").strip()
    if quick and text:
        text = "The full run's finding (its own settings and seeds, not this quick variant's): " + text
    return text


def where(r: EntryResult) -> str:
    """Where and how long, for an entry's result ``r``:
    ``"12.3 min on Linux x86_64, 2 CPUs (...) (runs' own wall time 12.1 min)"`` from the machines
    its directory records. Sessions stopped before their end (killed, so no time recorded) are
    said as such: the minutes are then those of the sessions that recorded theirs."""
    on = "on " + "; then on ".join(r.machines) if r.machines else "on a machine not recorded (runs made before reproduce.json)"
    sessions = read_sessions(r.directory)
    untimed = sum(1 for x in sessions if x.get("wall_s") is None)
    if not untimed:
        took = _duration(r.wall_s)
    elif untimed < len(sessions):  # a session killed before its end (the process stopped) has no time
        took = (
            f"{_duration(r.wall_s)} in the {len(sessions) - untimed} of {len(sessions)} sessions that recorded their time "
            f"(the other {untimed} stopped before they could)"
        )
    else:
        took = f"time not recorded ({untimed} session{'s' if untimed != 1 else ''} stopped before recording it)"
    return f"{took} {on} (runs' own wall time {_duration(r.runs_wall_s)})"


def _duration(seconds: float) -> str:
    """``"12.3 min"``, or ``"4 s"`` under a minute."""
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} min"
