"""The checked CSV reader: every cell of a user's CSV file checked at load.

Every loader of a user CSV file (MNIST CSV, MobiAct, IoT flows and features, profile tables,
availability traces) goes through :func:`read_csv_checked`, so that a defect in the file is found
at load time and reported as a :class:`~fedselect.world.data.file_errors.DataFileError` with the
**file**, the **line** (1-based; a header line is line 1) and the **column**, instead of reaching
training as a NaN or a shifted row:

* a missing cell, a cell that is not a number where a number is expected, a non-finite number
  (``nan``, ``inf``), a number outside its allowed range or not an integer where one is
  expected, an unknown label (not in the known class list);
* a malformed row: more fields than the header (or the first row), or too few to hold a
  required column;
* anything else that goes wrong while reading (not UTF-8, unterminated quote): the error names
  the file.

A loader's ``drop_invalid: true`` option drops the defective rows instead; each file's dropped
rows are logged (a warning with the first defects) and counted
(:meth:`CsvTable.report_dropped`; see :mod:`fedselect.world.data.file_errors`). Blank lines are
not rows: they are skipped and never counted.

Reading is fast for clean files (pandas' C parser, vectorised checks); only a file with a
cell that does not parse falls back to a slower line-by-line pass that locates every defect.
Every file read is reported to :func:`~fedselect.world.data.provenance.note_read`.
"""

from __future__ import annotations

import csv
import io
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from fedselect.world.data.file_errors import DataFileError, naming_file
from fedselect.world.data.provenance import note_read

if TYPE_CHECKING:  # imported where used: pandas is slow to import
    import pandas as pd

log = logging.getLogger("fedselect.data")

__all__ = ["Col", "CsvTable", "read_csv_checked"]

#: defects listed in the drop warning of one file
_SHOWN = 5


@dataclass(frozen=True)
class Col:
    """One column a CSV reader expects.

    Attributes:
        name: our name for it (the returned frame's column; used in messages).
        kind: ``float`` (finite number), ``int`` (finite integral number), ``str`` (text) or
            ``time`` (the whole column either numbers of seconds or date-times, converted to
            seconds since 1970-01-01 UTC).
        lo, hi: inclusive bounds for numbers (``None`` = unbounded).
        choices: allowed values of a ``str`` column (labels of a known class list).
        required: every row must hold a value (an empty cell is a defect); else empty cells
            give ``NaN`` (numbers) or ``""`` (text).
        present: the column must exist in the file (by-name layouts); an absent optional
            column is returned filled with empty values.
        at: position in the row (0-based; negative counts from the end) for files read by
            position; ``None`` = find it by ``name`` in the header.
        header_names: other header spellings accepted for a by-name column.
        is_label: the class label (a value outside its range or choices is an "unknown label").
    """

    name: str
    kind: str = "float"
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    required: bool = True
    present: bool = True
    at: int | None = None
    header_names: tuple[str, ...] = ()
    is_label: bool = False

    @property
    def numeric(self) -> bool:
        return self.kind in ("float", "int")


@dataclass
class CsvTable:
    """A checked CSV file: ``frame`` (one column per :class:`Col`, typed), ``lines`` (the
    1-based line of every row), the ``header`` cells (or None) and the rows dropped under
    ``drop_invalid`` as ``(line, message)``. :meth:`reject` applies a loader's own row checks
    the same way (raise, or drop and count)."""

    path: Path
    frame: pd.DataFrame
    lines: np.ndarray
    header: list[str] | None
    drop_invalid: bool
    dropped: list[tuple[int, str]] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)

    def describe(self, name: str) -> str:
        """``column <k> (<name>)``, 1-based position in the file."""
        pos = self.positions.get(name)
        return f"column {pos + 1} ({name})" if pos is not None else f"column ({name})"

    def reject(self, bad: np.ndarray, column: str | Sequence[str | None] | None, reasons: Sequence[str] | str) -> None:
        """Rows where ``bad`` is True are defects (``column``: our column name, or one per row;
        ``reasons``: one string, or one per row): raise a :class:`DataFileError` for the first,
        or drop them all with ``drop_invalid``."""
        bad = np.asarray(bad, dtype=bool)
        if not bad.any():
            return
        idx = np.flatnonzero(bad)
        why = (lambda i: reasons) if isinstance(reasons, str) else (lambda i: reasons[i])

        def where(i: int) -> str | None:
            col = column if column is None or isinstance(column, str) else column[i]
            return self.describe(col) if col else None

        if not self.drop_invalid:
            i = int(idx[0])
            raise DataFileError(self.path, why(i), int(self.lines[i]), where(i))
        for i in idx:
            w = where(int(i))
            self.dropped.append((int(self.lines[i]), f"{w + ': ' if w else ''}{why(int(i))}"))
        keep = ~bad
        self.frame = self.frame[keep].reset_index(drop=True)
        self.lines = self.lines[keep]

    @property
    def dropped_count(self) -> int:
        return len(self.dropped)

    def report_dropped(self) -> dict[str, int]:
        """Log the dropped rows (warning) and return ``{file: count}`` (empty when none)."""
        if not self.dropped:
            return {}
        self.dropped.sort()
        shown = "; ".join(f"line {ln}: {msg}" for ln, msg in self.dropped[:_SHOWN])
        more = f"; ... and {len(self.dropped) - _SHOWN} more" if len(self.dropped) > _SHOWN else ""
        log.warning("%s: dropped %d invalid row(s) (drop_invalid: true): %s%s", self.path, len(self.dropped), shown, more)
        return {str(self.path): len(self.dropped)}


def _decode(path: Path, data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataFileError(path, f"not UTF-8 text (byte 0x{data[e.start]:02x}); save the file as UTF-8 CSV", line) from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return "_" not in text


def _records(path: Path, text: str) -> Iterator[tuple[int, list[str]]]:
    """``(line, fields)`` of every non-blank record (``line`` = its first physical line)."""
    lines = io.StringIO(text, newline="")
    reader = csv.reader(lines, strict=True)
    start = 1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise DataFileError(path, f"malformed CSV ({e})", start) from None
        end = reader.line_num
        if fields and any(f.strip() for f in fields):
            yield start, fields
        start = end + 1


def _first_record(path: Path, text: str) -> tuple[int, list[str]] | None:
    for rec in _records(path, text):
        return rec
    return None


def read_csv_checked(
    path: str | Path,
    columns: Sequence[Col],
    header: bool | str = True,
    drop_invalid: bool = False,
    what: str = "CSV file",
    exact_columns: int | None = None,
    min_columns: int | None = None,
) -> CsvTable:
    """Read and check a CSV file against ``columns`` (see the module docstring).

    Args:
        path: the file.
        columns: the expected columns; by name (``at`` None; needs a header) or by position.
        header: ``True`` (the first non-blank line is a header), ``False`` (no header) or
            ``"auto"`` (a header iff the first line holds a cell that is not a number).
        drop_invalid: drop defective rows (recorded in :attr:`CsvTable.dropped`) instead of
            raising.
        what: what the file should be, for messages (e.g. ``"MNIST CSV (label + 784 pixels)"``).
        exact_columns: if set, every row (and the header) must have exactly this many fields.
        min_columns: if set, the header (or first row) must have at least this many fields.

    Returns:
        :class:`CsvTable`; call :meth:`CsvTable.report_dropped` once the loader's own checks
        are done.

    Raises:
        DataFileError: a defect (file, line, column, reason), an empty file, missing columns,
            or (with ``drop_invalid``) no row left.
    """
    import pandas as pd

    p = Path(path)
    with naming_file(p, what):
        data = p.read_bytes()
    note_read(p, data)
    text = _decode(p, data)
    first = _first_record(p, text)
    if first is None:
        raise DataFileError(p, f"empty file (no rows); expected a {what}")
    first_line, first_fields = first
    has_header = (not all(_is_number(c.strip()) for c in first_fields)) if header == "auto" else bool(header)
    ncols = len(first_fields)
    if exact_columns is not None and ncols != exact_columns:
        raise DataFileError(p, f"{ncols} fields, expected {exact_columns} ({what})", first_line)
    if min_columns is not None and ncols < min_columns:
        raise DataFileError(p, f"{ncols} fields, expected at least {min_columns} ({what})", first_line)
    names = [c.strip() for c in first_fields] if has_header else None
    positions = _column_positions(p, columns, names, ncols, first_line, what)
    table = CsvTable(p, pd.DataFrame(), np.zeros(0, np.int64), names, drop_invalid, positions=positions)
    frame = None
    if b'"' not in data:  # fast path: no quoted fields, so rows map to non-blank lines one to one
        frame, lines = _fast_frame(p, data, columns, positions, has_header, first_line, text, ncols)
    if frame is None:
        frame, lines, bad, cols, reasons = _slow_frame(p, text, columns, positions, has_header, ncols)
        table.frame, table.lines = frame, lines
        _check_values(table, columns, (bad, cols, reasons))
    else:
        table.frame, table.lines = frame, lines
        _check_values(table, columns)
    if len(table.frame) == 0:
        extra = f" after dropping {table.dropped_count} invalid row(s)" if table.dropped else ""
        raise DataFileError(p, f"no data rows{extra}; expected a {what}")
    return table


def _column_positions(
    p: Path, columns: Sequence[Col], names: list[str] | None, ncols: int, first_line: int, what: str
) -> dict[str, int]:
    """Each column's 0-based position in the rows: its ``at`` (by position), or where the
    header ``names`` hold its name or one of its ``header_names``; an absent optional
    column has none.

    Raises:
        DataFileError: a position beyond the ``ncols`` fields, or required columns missing
            from the header (all of them named).
        ValueError: a column looked up by name in a file read without a header (a loader's bug).
    """
    positions: dict[str, int] = {}
    missing = []
    for c in columns:
        if c.at is not None:
            pos = c.at if c.at >= 0 else ncols + c.at
            if not 0 <= pos < ncols:
                raise DataFileError(p, f"{ncols} fields; a {what} needs at least {abs(c.at) + (c.at >= 0)}", first_line)
            positions[c.name] = pos
        else:
            if names is None:
                raise ValueError(f"column {c.name!r} is looked up by name but the file is read without a header")
            found = [i for i, n in enumerate(names) if n in (c.name, *c.header_names)]
            if found:
                positions[c.name] = found[0]
            elif c.present:
                missing.append(c.name)
    if missing:
        raise DataFileError(p, f"the header lacks columns {missing}; it has {names} ({what})", first_line)
    return positions


def _fast_frame(p, data, columns, positions, has_header, first_line, text, ncols):
    """pandas' C parser, or None when a cell does not parse (the slow pass then locates it)."""
    import pandas as pd

    raw_lines = text.split("\n")
    nonblank = np.fromiter((bool(s.strip()) for s in raw_lines), dtype=bool, count=len(raw_lines))
    del raw_lines  # 70,000 strings for the MNIST CSV: not alive while pandas parses
    lines = np.flatnonzero(nonblank) + 1
    if has_header:
        lines = lines[lines > first_line]
    str_cols = {positions[c.name]: str for c in columns if c.name in positions and c.kind in ("str", "time")}
    try:
        df = pd.read_csv(
            io.BytesIO(data),
            header=None,
            skiprows=first_line if has_header else 0,
            index_col=False,
            keep_default_na=False,
            na_values=[""],
            dtype=str_cols or None,
            skip_blank_lines=True,
            engine="c",
            encoding="utf-8-sig",
            low_memory=False,
        )
    except (pd.errors.ParserError, ValueError, pd.errors.EmptyDataError):
        return None, None
    if len(df) != len(lines) or df.shape[1] != ncols:
        return None, None
    out = {}
    for c in columns:
        if c.name not in positions:
            out[c.name] = pd.Series(
                np.full(len(df), np.nan) if c.numeric else [""] * len(df), dtype=float if c.numeric else object
            )
            continue
        pos = positions[c.name]
        if pos >= df.shape[1]:
            return None, None
        s = df.iloc[:, pos]
        if c.numeric and (not pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s)):
            return None, None
        out[c.name] = s.reset_index(drop=True) if c.numeric else s.astype(object).where(s.notna(), "").reset_index(drop=True)
    return pd.DataFrame(out), lines


def _slow_frame(p, text, columns, positions, has_header, ncols):
    """Line by line: every cell as text, then typed. Returns the frame, its lines and each
    row's first parse defect (``bad`` mask, column per row, reason per row), which the caller
    merges with the value checks."""
    import pandas as pd

    rows: list[list[str]] = []
    lines: list[int] = []
    structural: dict[int, str] = {}
    needed = max((positions[c.name] for c in columns if c.name in positions and c.required), default=-1) + 1
    it = _records(p, text)
    if has_header:
        next(it)
    for line, fields in it:
        n = len(fields)
        if n > ncols:
            structural[len(rows)] = f"{n} fields, expected {ncols}"
        elif n < needed:
            structural[len(rows)] = f"{n} fields, expected {ncols}"
        rows.append([fields[positions[c.name]].strip() if c.name in positions and positions[c.name] < n else "" for c in columns])
        lines.append(line)
    n, m = len(rows), len(columns)
    cells = np.empty((n, m), dtype=object)
    if n:
        cells[:] = rows
    bad = np.zeros(n, bool)
    cols: list[str | None] = [None] * n
    reasons = [""] * n
    for i, r in structural.items():
        bad[i], reasons[i] = True, f"malformed row: {r}"
    out: dict[str, Any] = {c.name: cells[:, j] for j, c in enumerate(columns)}
    num_idx = [j for j, c in enumerate(columns) if c.numeric]
    if num_idx and n:  # all numeric cells at once (MNIST: 784 columns)
        flat = pd.Series(cells[:, num_idx].ravel(), dtype=object).astype(str)
        num = pd.to_numeric(flat.where(flat != "", None), errors="coerce").to_numpy(dtype=float)
        written_nan = flat.str.lower().isin(["nan", "-nan", "+nan"]).to_numpy(bool)
        unparsed = ((flat != "").to_numpy(bool) & np.isnan(num) & ~written_nan) | flat.str.contains("_", regex=False).to_numpy(
            bool
        )
        shape = (n, len(num_idx))
        num, written_nan, unparsed = num.reshape(shape), written_nan.reshape(shape), unparsed.reshape(shape)
        for i in np.flatnonzero((unparsed | written_nan).any(axis=1) & ~bad):
            k = int(np.argmax(unparsed[i] | written_nan[i]))
            text = cells[i, num_idx[k]]
            bad[i], cols[i] = True, columns[num_idx[k]].name
            reasons[i] = f"not a finite number: {text!r}" if written_nan[i, k] else f"not a number: {text!r}"
        for k, j in enumerate(num_idx):
            out[columns[j].name] = num[:, k]
    elif num_idx:
        for j in num_idx:
            out[columns[j].name] = np.zeros(0, float)
    frame = pd.DataFrame(out, columns=[c.name for c in columns])
    for c in columns:
        if not c.numeric:
            frame[c.name] = frame[c.name].astype(object).astype(str)
    return frame, np.asarray(lines, dtype=np.int64), bad, cols, reasons


def _to_seconds(s: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """A ``time`` column as float seconds, and a mask of cells that are neither (empty cells
    are NaN, not flagged here)."""
    import pandas as pd

    if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
        return s.astype(float), np.zeros(len(s), bool)
    text = s.astype(str).str.strip()
    empty = (text == "").to_numpy(bool)
    num = pd.to_numeric(text.where(~empty, None), errors="coerce")
    if not (num.isna() & ~empty).any():
        return num.astype(float), np.zeros(len(s), bool)
    t = pd.to_datetime(text.where(~empty, None), utc=True, errors="coerce", format="mixed")
    secs = (t - pd.Timestamp(0, tz="UTC")).dt.total_seconds().astype(float)
    return secs, (secs.isna().to_numpy(bool) & ~empty)


def _check_values(table: CsvTable, columns: Sequence[Col], pre: tuple[np.ndarray, list, list] | None = None) -> None:
    """Missing, non-finite, non-integral, out-of-range and unknown values. Every row's first
    defect (in column order) is found, then all defective rows are rejected at once (raise
    for the first line, or drop), merged with the parse defects ``pre`` of the slow pass."""
    n = len(table.frame)
    bad, cols, reasons = pre if pre is not None else (np.zeros(n, bool), [None] * n, [""] * n)

    def flag(mask: np.ndarray, col: str, why) -> None:
        for i in np.flatnonzero(np.asarray(mask, bool) & ~bad):
            bad[i], cols[i], reasons[i] = True, col, why if isinstance(why, str) else why(int(i))

    for c in columns:
        if c.name not in table.positions:
            continue
        s = table.frame[c.name]
        if c.kind == "time":
            raw = s.astype(str)
            secs, unparsed = _to_seconds(s)
            table.frame[c.name] = secs
            flag(unparsed, c.name, lambda i, raw=raw: f"not a number of seconds or a date-time: {raw.iloc[i]!r}")
            s = secs
        if c.numeric or c.kind == "time":
            v = s.to_numpy(dtype=float)
            if c.required:
                flag(np.isnan(v), c.name, "missing value")
            flag(np.isinf(v), c.name, lambda i, v=v: f"not a finite number: {_num(v[i])}")
            if c.kind == "int":
                flag(np.isfinite(v) & (v != np.round(v)), c.name, lambda i, v=v: f"not an integer: {_num(v[i])}")
            lo = -math.inf if c.lo is None else c.lo
            hi = math.inf if c.hi is None else c.hi
            rng = f"[{_num(c.lo, '-inf')}, {_num(c.hi, 'inf')}]"
            word = "unknown label" if c.is_label else "value"
            flag(
                np.isfinite(v) & ((v < lo) | (v > hi)),
                c.name,
                lambda i, v=v, word=word, rng=rng: f"{word} {_num(v[i])} outside {rng}",
            )
        else:
            txt = s.astype(str)
            empty = (txt.str.strip() == "").to_numpy(bool)
            if c.required:
                flag(empty, c.name, "missing value")
            if c.choices is not None:
                word = "unknown label" if c.is_label else "unknown value"
                flag(
                    ~txt.isin(c.choices).to_numpy(bool) & ~empty,
                    c.name,
                    lambda i, word=word, txt=txt, c=c: f"{word} {txt.iloc[i]!r}; allowed: {list(c.choices)}",
                )
    table.reject(bad, cols, reasons)


def _num(x: Any, default: str = "") -> str:
    if x is None:
        return default
    x = float(x)
    return str(int(x)) if x.is_integer() else repr(x)
