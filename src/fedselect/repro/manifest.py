"""The reproduction manifest (``configs/reproduce.yaml``): its entries and claims, and the
verdict rules that judge one of our figures against the paper's (:func:`verdict`; the rules
are in the package docstring, :mod:`fedselect.repro.reproduce`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

PAPERS = ("flashrl", "cefl", "budgeted")
#: a paper's change this small (points or percent) is "no change" ...
NEGLIGIBLE = 1.0
#: ... and ours agrees when its interval lies within +-TIGHT (points or percent)
TIGHT = 2.0
#: an absolute fraction's interval wider than +-WIDE says too little to call it reproduced
WIDE = 0.05
#: figures given as fractions (accuracy, F1): a tolerance in the same unit applies to them
FRACTION_PREFIXES = ("final_accuracy", "best_accuracy", "final_f1", "last_k_")


class Claim(BaseModel):
    """One figure of a paper: ``method`` (a label of the comparison), ``figure`` (a table key,
    ``<key>_vs`` for the change against the baseline, or against ``vs``, another label of the
    comparison) and the paper's ``value``: a number in the table's units, ``"> 0"`` / ``"< 0"``
    for a claim of direction only (e.g. "secretary above online random"), a bound ``"<= -98"``
    / ``">= 5"`` / ``"< x"`` / ``"> x"`` (our whole interval must lie beyond it: e.g. CEFL's
    communication at most 2% of Regular FL's), or another text, printed as is and not judged."""

    model_config = ConfigDict(extra="forbid")
    method: str
    figure: str
    value: float | str
    vs: str | None = Field(None, description="a `_vs` figure against this label instead of the comparison's baseline")
    tolerance_pct: float | None = Field(
        None,
        gt=0,
        description="an absolute figure that is not a fraction (seconds, MB, rounds): ours counts as reproduced when its "
        "mean lies within this many percent of the paper's value",
    )
    note: str | None = None


class Entry(BaseModel):
    """One reproduced table or experiment (module docstring)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", description="directory name under --out")
    kind: Literal["compare", "sweep", "alpha"] = Field(
        "compare",
        description="compare: a comparison judged claim by claim; sweep: a `fedselect sweep` grid, summarised; "
        "alpha: the budgeted-online alpha* table (BO-eq 6-7), computed",
    )
    quick_grid: dict[str, list[Any]] | None = Field(None, description="sweep entries: the grid --quick runs instead")
    paper: Literal["flashrl", "cefl", "budgeted"]
    title: str
    config: str = Field(description="comparison (or sweep) config, relative to the manifest's directory's parent or absolute")
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4], min_length=1)
    quick: dict[str, Any] = Field(
        default_factory=dict,
        description="dotted-key overrides of the base for --quick; `rounds` sets every method's, its own included",
    )
    quick_seeds: list[int] = Field(default_factory=lambda: [0, 1], min_length=1)
    quick_methods: list[str] | None = Field(None, description="labels kept in --quick (default all)")
    quick_method_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="label -> method_options merged over that method's in --quick (e.g. a shorter transfer)"
    )
    claims: list[Claim] | None = Field(None, description="default: the comparison's paper: section")
    substitute: bool = Field(False, description="substitute data: absolute figures are a reference only")
    tolerance: float = Field(0.01, ge=0, description="accuracy fractions within this of ours count as reproduced")
    finding: str | None = Field(None, description="what we found, printed under the entry's table")
    table: bool = Field(
        False,
        description="also show the comparison's whole table (every method's figures, mean +- sd, and the paired "
        "differences against the baseline with 95% intervals), e.g. for methods the paper has no figure for",
    )


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = "The papers' results, reproduced"
    entries: list[Entry] = Field(min_length=1)


def load_manifest(path: str | Path) -> tuple[Manifest, Path]:
    """The manifest at ``path`` and the directory its config paths are relative to (the
    repository root: the manifest's directory's parent for ``configs/reproduce.yaml``).

    Raises:
        FileNotFoundError: no such file. ConfigError: an invalid manifest (names the key).
    """
    from fedselect.config.load import read_yaml_file
    from fedselect.config.schema import validate_model

    p = Path(path)
    doc = read_yaml_file(p, "reproduction manifest") or {}
    m = validate_model(Manifest, doc, str(p), "reproduction manifest")
    ids = [e.id for e in m.entries]
    if len(set(ids)) != len(ids):
        from fedselect.config.schema import ConfigError

        raise ConfigError(
            f"invalid reproduction manifest {p}:\n  entries: duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}"
        )
    return m, p.resolve().parent.parent


@dataclass
class Judged:
    """One claim with our figure: ``mean``, ``low``/``high`` (95% interval or None), ``n``
    seeds, the ``verdict`` and its ``why``."""

    claim: Claim
    mean: float | None
    low: float | None
    high: float | None
    n: int
    verdict: str
    why: str


@dataclass
class EntryResult:
    entry: Entry
    directory: Path
    seeds: list[int]
    wall_s: float
    runs_wall_s: float
    judged: list[Judged] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    command: str = ""
    ran: bool = True
    incomplete: list[str] = field(default_factory=list)
    grid: dict[str, Any] | None = None  # sweep entries: :func:`sweep_grid_summary`
    alpha: dict[str, Any] | None = None  # alpha entries: the saved alpha.json
    machines: list[str] = field(default_factory=list)  # where the runs were made (RECORD), oldest first
    markdown: str | None = None  # the comparison's own table.md (entries with ``table: true``)
    test_decisions: list[str] = field(default_factory=list)  # labels whose decisions read the test set


@dataclass(frozen=True)
class Job:
    """How an entry is to be run: config paths are relative to ``root``; the entry goes to
    ``out/<id>``; ``quick`` applies its small variant; ``on_progress`` hears what starts;
    ``workers`` sets ``train.workers`` (None: the config's); ``run=False`` runs nothing and reads
    back what is there."""

    root: Path
    out: Path
    quick: bool = False
    on_progress: Callable[[str], None] | None = None
    workers: int | None = None
    run: bool = True

    def config_path(self, entry: Entry) -> Path:
        """The entry's config: absolute as given, else under ``root``."""
        p = Path(entry.config)
        return p if p.is_absolute() else self.root / p

    def say(self, message: str) -> None:
        if self.on_progress:
            self.on_progress(message)


def _is_fraction(key: str) -> bool:
    return key.startswith(FRACTION_PREFIXES)


_BOUND = re.compile(r"^\s*(<=|>=|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


def parse_bound(value: float | str) -> tuple[str, float] | None:
    """``("<=", -98.0)`` for the claim ``"<= -98"`` (also ``<``, ``>``, ``>=``; ``"> 0"`` is the
    direction claim); None for a number or any other text."""
    if not isinstance(value, str):
        return None
    m = _BOUND.match(value)
    return (m.group(1), float(m.group(2))) if m else None


#: the verdicts in the order their counts are given (:func:`count_verdicts`)
VERDICTS = ("reproduced", "direction only", "inconclusive", "not reproduced", "reference only", "not judged")


def count_verdicts(verdicts: list[str]) -> str:
    """``"9 reproduced, 1 direction only, 2 inconclusive, 2 not reproduced"``: how many of each
    verdict, in :data:`VERDICTS` order, those absent left out ("" for none)."""
    return ", ".join(f"{verdicts.count(v)} {v}" for v in VERDICTS if v in verdicts)


def verdict(
    value: float | str,
    mean: float | None,
    low: float | None,
    high: float | None,
    relative: bool,
    substitute: bool,
    tolerance: float,
    fraction: bool = True,
    tolerance_pct: float | None = None,
) -> tuple[str, str]:
    """``(verdict, why)`` for one figure (module docstring): ``value`` the paper's, ``mean``
    and ``[low, high]`` ours (None: no interval), ``relative`` for a change against the
    baseline, ``substitute`` for another data set than the paper's, ``fraction`` for an absolute
    figure given as a fraction (accuracy, F1: ``tolerance`` applies), else one in its own unit
    (seconds, MB, rounds: ``tolerance_pct`` applies, in percent of the paper's value)."""
    bound = parse_bound(value)
    if isinstance(value, str) and bound is None:
        return "not judged", "the paper states it as text, not one experiment's number"
    if mean is None:
        return "not judged", "we have no value (the target was never reached, or the method did not run)"
    if low is None or high is None:
        return "not judged", "fewer than 2 seeds (no interval)"
    if bound is not None and bound[1] == 0 and bound[0] in ("<", ">"):  # a claim of direction only
        direction = f"{bound[0]} 0"
        if (direction == "> 0" and low > 0) or (direction == "< 0" and high < 0):
            return "reproduced", f"the paper's direction ({direction}) with our interval excluding 0"
        if low <= 0 <= high:
            return "not reproduced", "our interval holds 0: no difference we can tell from seed-to-seed noise"
        return "not reproduced", "the opposite direction, with an interval excluding 0"
    if bound is not None:  # a bound: our whole interval beyond it
        op, c = bound
        text = f"{op} {c:g}"
        inside = {"<": high < c, "<=": high <= c, ">": low > c, ">=": low >= c}[op]
        outside = {"<": low >= c, "<=": low > c, ">": high <= c, ">=": high < c}[op]
        if inside:
            return "reproduced", f"our whole 95% interval is {text}"
        if outside:
            return "not reproduced", f"our whole 95% interval is on the other side of {c:g}"
        return "inconclusive", f"our interval holds {c:g}: more seeds needed to tell whether it is {text}"
    if substitute and not relative:
        return "reference only", "substitute data: the paper's absolute figure is another data set's"
    if not relative and not fraction:  # seconds, MB, rounds: a share of the paper's value, or our interval
        gap = 100.0 * (mean - value) / abs(value) if value != 0 else math.inf
        if tolerance_pct is not None and abs(gap) <= tolerance_pct:
            return "reproduced", f"our mean is {gap:+.1f}% from the paper's value (within {tolerance_pct:g}%)"
        if low <= value <= high:
            return "reproduced", "the paper's value lies inside our 95% interval"
        return "not reproduced", f"ours {mean:.4g} [{low:.4g}, {high:.4g}], {gap:+.1f}% from the paper's {value:g}"
    if relative and abs(value) <= NEGLIGIBLE and low <= 0 <= high and high - low <= 2 * TIGHT:
        # the paper's change is negligible and so is ours, whether or not its exact value is inside
        return "reproduced", "no change beyond the seed-to-seed noise, as in the paper"
    if relative and low <= value <= high:
        if not low <= 0 <= high:
            return "reproduced", "the paper's value lies inside our 95% interval, which excludes 0"
        return "inconclusive", "our interval holds both the paper's change and no change: more seeds needed"
    if not relative and abs(mean - value) <= tolerance:
        return "reproduced", f"within {tolerance:g} of our mean"
    if not relative and low <= value <= high:
        if high - low <= 2 * WIDE:
            return "reproduced", "the paper's value lies inside our 95% interval"
        return "inconclusive", f"our interval is wider than +-{WIDE:g}: more seeds needed"
    if relative:
        if value != 0 and (low > 0 or high < 0) and math.copysign(1, mean) == math.copysign(1, value):
            return "direction only", "the same direction with an interval excluding 0, but not the paper's size"
        if low <= 0 <= high:
            return "not reproduced", "our interval holds 0: no change we can tell from seed-to-seed noise"
        return "not reproduced", "the opposite direction"
    return "not reproduced", f"ours {mean:.4g} [{low:.4g}, {high:.4g}] against the paper's {value:g}"
