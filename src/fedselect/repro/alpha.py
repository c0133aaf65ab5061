"""A ``kind: alpha`` entry: the budgeted-online paper's Table II, the optimal stopping index
alpha* (BO-eq 7) and the probability it maximises (BO-eq 6) for ``N`` candidates, ``r1`` and
each ``r2``, set against the paper's alpha* and checked three ways:

* alpha* by the closed form (:func:`fedselect.kernels.secretary.alpha_star`);
* the integer alpha that maximises BO-eq 6 by search over ``1 .. N - 1`` (the closed form is the
  maximiser of the large-``N`` limit, so the two may differ by one);
* BO-eq 6 at alpha* against a Monte-Carlo estimate over ``trials`` random arrival orders (the
  share of orders whose number of *records*, candidates better than every earlier one, at
  positions ``alpha* + 1 .. N`` lies in ``[r1, r2]``), with its 95% Wilson interval.

Also alpha* at every ``N`` of the Table VI grid (``grid_n``), the observation phase the
secretary rule uses there. The computed table is saved as ``<out>/<id>/alpha.json`` and the
document is written from that file, as the other entries are from their saved runs.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedselect.repro.manifest import Claim, Entry, EntryResult, Job, Judged
from fedselect.repro.record import _machines, finding_text, session, where

#: the computed table, in the entry's directory
TABLE = "alpha.json"
#: Monte-Carlo orders simulated per chunk (memory: chunk x N int32 values, a few at a time)
CHUNK = 1000


class AlphaConfig(BaseModel):
    """The config of a ``kind: alpha`` entry (e.g. ``configs/repro/budgeted-table2-alpha.yaml``)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    n: int = Field(ge=2, le=100_000, description="candidates N of the table")
    r1: int = Field(1, ge=1, description="the record window's lower end (the paper: 1)")
    r2: list[int] = Field(min_length=1, description="the record window's upper ends, one row each")
    grid_n: list[int] = Field(default_factory=list, description="alpha* at these N too (the Table VI grid's)")
    trials: int = Field(20_000, ge=100, le=1_000_000, description="random arrival orders of the Monte-Carlo check")
    seed: int = Field(0, ge=0)
    paper: dict[int, int] = Field(default_factory=dict, description="r2 -> the paper's alpha*")
    paper_source: str | None = None


def load_alpha_config(path: Path, overrides: dict[str, Any] | None = None) -> AlphaConfig:
    """The alpha config at ``path`` with top-level ``overrides`` (e.g. ``{"trials": 500}``).

    Raises:
        FileNotFoundError: no such file. ConfigError: an invalid config (names the key).
    """
    from fedselect.config.load import read_yaml_file
    from fedselect.config.schema import ConfigError, validate_model

    doc = read_yaml_file(path, "alpha table config") or {}
    cfg = validate_model(AlphaConfig, {**doc, **(overrides or {})}, str(path), "alpha table config")
    bad = [r2 for r2 in cfg.r2 if r2 < cfg.r1]
    if bad:
        raise ConfigError(f"invalid alpha table config {path}:\n  r2: {bad} below r1 = {cfg.r1} (need r1 <= r2)")
    return cfg


def records_in_window(
    n: int, alphas: list[int], windows: list[tuple[int, int]], trials: int, rng: np.random.Generator
) -> list[int]:
    """For each ``(alpha, (r1, r2))`` pair, in how many of ``trials`` uniformly random arrival
    orders of ``n`` distinct candidates the number of records at 1-based positions
    ``alpha + 1 .. n`` lies in ``[r1, r2]`` (the event whose probability BO-eq 6 gives for large
    ``n``). Orders are drawn ``CHUNK`` at a time from ``rng``.

    Raises:
        ValueError: an alpha outside ``[0, n - 1]`` or lengths that differ.
    """
    if len(alphas) != len(windows):
        raise ValueError(f"{len(alphas)} alphas for {len(windows)} windows")
    if any(not 0 <= a < n for a in alphas):
        raise ValueError(f"every alpha must lie in [0, {n - 1}], got {alphas}")
    hits = [0] * len(alphas)
    done = 0
    while done < trials:
        m = min(CHUNK, trials - done)
        order = rng.permuted(np.tile(np.arange(n, dtype=np.int32), (m, 1)), axis=1)
        record = np.ones(order.shape, dtype=bool)
        record[:, 1:] = order[:, 1:] > np.maximum.accumulate(order, axis=1)[:, :-1]
        after = np.cumsum(record[:, ::-1], axis=1)[:, ::-1]  # [:, i]: records at 0-based positions >= i
        for k, (a, (lo, hi)) in enumerate(zip(alphas, windows)):
            count = after[:, a]
            hits[k] += int(np.count_nonzero((count >= lo) & (count <= hi)))
        done += m
    return hits


def wilson(hits: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95% Wilson score interval of a binomial share ``hits / n``."""
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def compute_alpha_table(cfg: AlphaConfig) -> dict[str, Any]:
    """Every figure of the entry's document (module docstring), as a JSON-able dict."""
    from fedselect.common.seeding import np_rng
    from fedselect.kernels.secretary import alpha_star, success_probability

    n, r1 = cfg.n, cfg.r1
    alphas = np.arange(1, n)
    rows = []
    stars = [alpha_star(n, r1, r2) for r2 in cfg.r2]
    hits = records_in_window(
        n, [max(a, 0) for a in stars], [(r1, r2) for r2 in cfg.r2], cfg.trials, np_rng(cfg.seed, "alpha-table")
    )
    for r2, a, h in zip(cfg.r2, stars, hits):
        p = success_probability(alphas, n, r1, r2)
        best = int(alphas[int(np.argmax(p))])
        low, high = wilson(h, cfg.trials)
        rows.append(
            {
                "r2": r2,
                "alpha_star": a,
                "share": a / n,
                "probability": float(success_probability(a, n, r1, r2)),
                "argmax_alpha": best,
                "argmax_probability": float(p.max()),
                "monte_carlo": h / cfg.trials,
                "monte_carlo_low": low,
                "monte_carlo_high": high,
                "paper_alpha_star": cfg.paper.get(r2),
            }
        )
    grid = {str(g): [alpha_star(g, r1, r2) for r2 in cfg.r2] for g in cfg.grid_n}
    return {"name": cfg.name, "n": n, "r1": r1, "trials": cfg.trials, "seed": cfg.seed, "rows": rows, "grid": grid}


def run_alpha_entry(entry: Entry, job: Job) -> EntryResult:
    """Compute (or keep, or read back) the entry's table in ``out/<id>/alpha.json``. A table
    already there is kept when it was computed from the same config; ``run=False`` reads what is
    there (``ran=False`` when nothing is). ``quick`` applies the entry's ``quick`` overrides
    (e.g. fewer Monte-Carlo orders); ``job.workers`` is unused (one process suffices).

    Raises:
        FileNotFoundError: the entry's config is missing. ConfigError: it is invalid.
    """
    from fedselect.common.files import write_json_atomic

    out, quick, run = job.out, job.quick, job.run
    cfg = load_alpha_config(job.config_path(entry), dict(entry.quick) if quick else None)
    d = out / entry.id
    cmd = f"fedselect reproduce {entry.paper}" + (" --quick" if quick else "") + f" --out {out}"
    saved = None
    try:
        saved = json.loads((d / TABLE).read_text())
    except (OSError, ValueError):
        saved = None
    wanted = cfg.model_dump(mode="json")
    t0 = time.perf_counter()
    if saved is not None and saved.get("config") != wanted and not run:
        saved = None  # computed from another config: not this entry's table
    if run and (saved is None or saved.get("config") != wanted):
        job.say(f"{entry.id}: computing alpha* and {cfg.trials} random orders")
        with session(d):
            table = compute_alpha_table(cfg)
            saved = {"config": wanted, "wall_s": round(time.perf_counter() - t0, 3), **table}
            write_json_atomic(d / TABLE, saved)
    if saved is None:
        return EntryResult(entry, d, [cfg.seed], 0.0, 0.0, command=cmd, ran=False)
    wall = float(saved.get("wall_s") or 0.0)
    res = EntryResult(entry, d, [saved["seed"]], wall, wall, judge_alpha(saved), command=cmd)
    res.alpha = saved
    res.machines = _machines(d)
    return res


def judge_alpha(table: dict[str, Any]) -> list[Judged]:
    """One :class:`Judged` per row of a saved table: our alpha* against the paper's (equal:
    reproduced; the paper gives none: not judged). alpha* is exact, so there is no interval."""
    out = []
    for x in table.get("rows", []):
        paper, ours = x.get("paper_alpha_star"), x["alpha_star"]
        claim = Claim(method=f"r2 = {x['r2']}", figure="alpha_star", value=paper if paper is not None else "-")
        if paper is None:
            v, why = "not judged", "the paper gives no value"
        elif paper == ours:
            v, why = "reproduced", "the same alpha*"
        else:
            v, why = "not reproduced", f"ours {ours}, the paper's {paper}"
        out.append(Judged(claim, float(ours), None, None, 1, v, why))
    return out


def render_alpha(r: EntryResult, quick: bool) -> list[str]:
    """The entry's part of the document: Table II beside ours, and alpha* on the grid's N."""
    t = r.alpha or {}
    rows = t.get("rows", [])
    n, r1 = t.get("n"), t.get("r1")
    lines = [
        f"N = {n}, r1 = {r1}. alpha*: BO-eq 7 in closed form. P(alpha*): BO-eq 6 at alpha*. Argmax: the integer "
        f"alpha maximising BO-eq 6 by search over 1..N-1. Monte Carlo: the share of {t.get('trials')} random arrival "
        f"orders (seed {t.get('seed')}) whose number of records after position alpha* lies in [r1, r2], with its "
        "95% Wilson interval.",
        "",
        "| r2 | paper alpha* | ours alpha* | alpha*/N | P(alpha*) | argmax alpha (P) | Monte Carlo [95%] | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    counts: dict[str, int] = {}
    for x, j in zip(rows, r.judged):
        paper = x.get("paper_alpha_star")
        inside = x["monte_carlo_low"] <= x["probability"] <= x["monte_carlo_high"]
        counts[j.verdict] = counts.get(j.verdict, 0) + 1
        v = f"**{j.verdict}**: {j.why}; BO-eq 6 {'inside' if inside else 'outside'} the Monte-Carlo interval"
        lines.append(
            f"| {x['r2']} | {'-' if paper is None else paper} | {x['alpha_star']} | {x['share']:.4f} | "
            f"{x['probability']:.4f} | {x['argmax_alpha']} ({x['argmax_probability']:.4f}) | "
            f"{x['monte_carlo']:.4f} [{x['monte_carlo_low']:.4f}, {x['monte_carlo_high']:.4f}] | {v} |"
        )
    lines += ["", "Verdict: " + (", ".join(f"{c} {v}" for v, c in counts.items()) or "no figures to judge") + ".", ""]
    grid = t.get("grid") or {}
    if grid:
        heads = " | ".join(f"r2 = {x['r2']}" for x in rows)
        lines += [
            "alpha* at the N of the Table VI grid (the candidates the secretary rule observes and rejects before it may accept):",
            "",
            f"| N | {heads} |",
            "|---|" + "---|" * len(rows),
        ]
        for g, vals in grid.items():
            lines.append(f"| {g} | " + " | ".join(str(v) for v in vals) + " |")
        lines.append("")
    if r.entry.finding:
        lines += [finding_text(r.entry, quick), ""]
    lines += [
        f"Config `{r.entry.config}`; {where(r)}. Directory `{r.directory}` (alpha.json).",
        "",
        "```",
        r.command,
        "```",
        "",
    ]
    return lines
