"""Comparison plots (matplotlib, PNG). Called by :mod:`fedselect.report.build`.

Each figure has labelled axes with units and one colour per method, consistent across figures.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from fedselect.fl.fairness import selection_counts


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 10, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _series(rows: list[dict[str, str]], key: str) -> tuple[np.ndarray, np.ndarray]:
    r = np.array([int(x["round"]) for x in rows])
    v = np.array([float(x[key]) if x[key] not in ("", None) else math.nan for x in rows])
    return r, v


def _mean_band(runs, key, ci: bool = False):
    """Rounds present in every run, the mean over the runs, and a band: min..max, or with
    ``ci`` the 95% Student-t interval of the mean (mean +- t_{0.975, n-1} sd / sqrt(n) over the
    runs with a value at that round; the mean itself where fewer than 2 have one)."""
    if not runs:
        return None
    n = min(len(r.rows) for r in runs)
    if n == 0:
        return None
    rounds = _series(runs[0].rows[:n], key)[0]
    vals = np.stack([_series(r.rows[:n], key)[1] for r in runs])
    ok = ~np.isnan(vals).all(axis=0)
    vals = vals[:, ok]
    mean = np.nanmean(vals, axis=0)
    if not ci:
        return rounds[ok], mean, np.nanmin(vals, axis=0), np.nanmax(vals, axis=0)
    from scipy.stats import t

    count = (~np.isnan(vals)).sum(axis=0)
    sd = np.nanstd(vals, axis=0, ddof=1) if vals.shape[0] > 1 else np.zeros_like(mean)
    q = np.where(count > 1, t.ppf(0.975, np.maximum(count - 1, 1)), 0.0)
    half = np.where(count > 1, q * np.nan_to_num(sd) / np.sqrt(np.maximum(count, 1)), 0.0)
    return rounds[ok], mean, mean - half, mean + half


def legend_names(results, labels: list[str]) -> dict[str, str]:
    """label -> its legend entry: ``CEFL (100 rounds)`` when the methods ran different numbers
    of rounds, and ``; rounds: members scored with the leader's model`` where the rounds did not
    score the clients' own models (the algorithm's ``round_scores``; the star marks the final
    figure after the method's finish)."""
    planned = {lab: sorted({r.rounds_planned for r in results if r.label == lab and r.rounds_planned}) for lab in labels}
    differ = len({tuple(v) for v in planned.values() if v}) > 1
    out = {}
    for lab in labels:
        parts = [f"{'/'.join(map(str, planned[lab]))} rounds"] if differ and planned[lab] else []
        if any(r.round_scores for r in results if r.label == lab):
            parts.append("rounds: not the clients' own models, star: final")
        out[lab] = lab + (f" ({'; '.join(parts)})" if parts else "")
    return out


def _final_after_finish(runs, metric: str):
    """(mean last round, mean final figure) of finished runs whose rounds did not score the
    clients' own models (their final figure comes after the rounds); None otherwise."""
    done = [r for r in runs if r.round_scores and r.complete and isinstance(r.summary.get(f"final_{metric}"), (int, float))]
    if not done:
        return None
    return float(np.mean([r.summary.get("rounds", 0) for r in done])), float(
        np.mean([r.summary[f"final_{metric}"] for r in done])
    )


def round_axis(results) -> tuple[str, str]:
    """(x-axis label, the word for one row) of the per-row plots: ``metrics.csv`` has a row per
    communication round, or per server version in ``mode: async`` (one per aggregation)."""
    modes = {getattr(r, "mode", "sync") for r in results}
    if modes == {"async"}:
        return "server version (one per aggregation)", "version"
    if "async" in modes:
        return "round (sync) / server version (async)", "round / version"
    return "communication round", "round"


def _metric_key(results) -> tuple[str, str]:
    m = results[0].metric if results else "accuracy"
    return m, "macro-F1" if m == "f1_macro" else "test accuracy"


def make_plots(out: Path, results, labels: list[str], feds: list[dict[str, Any]]) -> list[str]:
    """Write every plot that the data supports; return the file names."""
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    colors = {lab: plt.cm.tab10(i % 10) for i, lab in enumerate(labels)}
    by_label = defaultdict(list)
    for r in results:
        by_label[r.label].append(r)
    written = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        written.append(name)

    per_round_plots(plt, save, results, labels, by_label, colors)
    time_to_accuracy_plot(plt, save, results, labels, by_label, colors)
    if feds:
        selection_vs_latency_plot(plt, save, results, labels, by_label, feds[0], colors)
        participation_by_speed(plt, save, results, labels, feds, colors)

        # device / network class of the selected clients per round (mean over seeds)
        for kind in ("device", "network"):
            name = selection_profiles_plot(plt, out, results, labels, feds, kind)
            if name:
                written.append(name)
        label_distribution_plot(plt, save, feds[0])
    cefl_similarity_plot(plt, save, results)
    return written


def per_round_plots(plt, save, results, labels: list[str], by_label, colors) -> None:
    """``metric_vs_round.png`` (the whole run and a zoom on its second half, where methods
    differ) and ``latency_vs_round.png`` (end-to-end latency): per method the mean over its seeds
    with a band, min..max or, with at least 3 seeds of every method, the 95% interval of the mean;
    the final figure after a method's finish as a star (e.g. CEFL's transfer)."""
    metric, metric_name = _metric_key(results)
    nseeds = max((len(v) for v in by_label.values()), default=1)
    # with >= 3 seeds of every method the band is the 95% interval of the mean; else min..max
    ci = min((len(v) for v in by_label.values()), default=1) >= 3
    band_note = f" (mean of {nseeds} seeds, band = {'95% interval' if ci else 'min..max'})" if nseeds > 1 else ""
    names = legend_names(results, labels)
    xlabel, per = round_axis(results)
    for key, ylabel, name in (
        (metric, metric_name, "metric_vs_round.png"),
        ("e2e_latency_s", "end-to-end latency (s)", "latency_vs_round.png"),
    ):
        zoom = key == metric
        fig, axes = plt.subplots(1, 2 if zoom else 1, figsize=(11 if zoom else 7, 4.2), squeeze=False)
        for ax in axes[0]:
            for lab in labels:
                mb = _mean_band(by_label[lab], key, ci)
                if mb is None:
                    continue
                x, m, lo, hi = mb
                if ax is not axes[0][0]:
                    keep = x >= max(1, x.max() // 2)
                    x, m, lo, hi = x[keep], m[keep], lo[keep], hi[keep]
                ax.plot(x, m, label=names[lab], color=colors[lab], lw=1.8)
                if nseeds > 1:
                    ax.fill_between(x, lo, hi, color=colors[lab], alpha=0.15)
                final = _final_after_finish(by_label[lab], metric) if key == metric else None
                if final is not None:  # e.g. CEFL: the transfer's figure, after the last round
                    ax.plot([final[0]], [final[1]], marker="*", ms=11, color=colors[lab], ls="none")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        axes[0][0].set_title(f"{ylabel} per {per}{band_note}")
        axes[0][0].legend()
        if zoom:
            axes[0][1].set_title("second half of the run (zoom)")
        save(fig, name)


def time_to_accuracy_plot(plt, save, results, labels: list[str], by_label, colors) -> None:
    """``metric_vs_latency.png``: the metric against the end-to-end latency (s), one line per run."""
    metric, metric_name = _metric_key(results)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for lab in labels:
        for i, r in enumerate(by_label[lab]):
            _, lat = _series(r.rows, "e2e_latency_s")
            _, v = _series(r.rows, metric)
            ok = ~np.isnan(v)
            ax.plot(lat[ok], v[ok], color=colors[lab], lw=1.5, alpha=0.9 if i == 0 else 0.5, label=lab if i == 0 else None)
    ax.set_xlabel("end-to-end latency (s, simulated)")
    ax.set_ylabel(metric_name)
    ax.set_title(f"time to {metric_name}: higher and further left is better")
    ax.legend()
    save(fig, "metric_vs_latency.png")


def selection_vs_latency_plot(plt, save, results, labels: list[str], by_label, fed: dict[str, Any], colors) -> None:
    """``selection_vs_latency.png``: the times each client was selected in the first seed's run
    against its expected latency per round (s, log scale) in ``fed``, that seed's federation."""
    lat = np.asarray(fed["expected_latency_s"])
    seed0 = min(r.seed for r in results) if results else 0
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for j, lab in enumerate(labels):
        runs = [r for r in by_label[lab] if r.seed == seed0]
        if not runs:
            continue
        counts = selection_counts(runs[0].rows, len(lat))
        jitter = (j - (len(labels) - 1) / 2) * 0.04
        ax.scatter(lat * (1 + jitter), counts, s=22, color=colors[lab], alpha=0.75, label=lab)
    ax.set_xscale("log")
    ax.set_xlabel("client's expected latency per round (s, log scale; mean frequency and bandwidth)")
    ax.set_ylabel("times selected")
    ax.yaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_title(f"selection vs client latency (seed {seed0}): stragglers are on the right")
    ax.legend()
    save(fig, "selection_vs_latency.png")


def label_distribution_plot(plt, save, fed: dict[str, Any]) -> None:
    """``label_distribution.png``: the training samples of each client of ``fed``, stacked by label."""
    counts = np.asarray(fed["label_counts"], dtype=float)
    n, c = counts.shape
    fig, ax = plt.subplots(figsize=(max(7, 0.18 * n + 2), 4.2))
    bottom = np.zeros(n)
    names = fed.get("class_names") or [str(i) for i in range(c)]
    cmap = plt.cm.tab20 if c > 10 else plt.cm.tab10
    for j in range(c):
        ax.bar(np.arange(n), counts[:, j], bottom=bottom, color=cmap(j % cmap.N), width=0.85, label=str(names[j]))
        bottom += counts[:, j]
    ax.set_xlabel("client id")
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_ylabel("training samples")
    part = fed.get("partition", {})
    ax.set_title(
        f"label distribution: {fed.get('dataset')}, {part.get('scheme')} "
        + ", ".join(f"{k}={v}" for k, v in part.items() if k != "scheme")
    )
    ax.legend(title="label", ncol=2 if c > 5 else 1, fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    save(fig, "label_distribution.png")


def cefl_similarity_plot(plt, save, results) -> None:
    """``cefl_similarity_<label>_s<seed>.png`` for the first run whose summary holds CEFL's
    preparation (similarity matrix, clusters, leaders): the similarity S_ij (CE-eq 4) ordered by
    cluster, clusters as red squares, leaders starred."""
    for r in results:
        info = r.extra.get("prepare") or {}
        if not all(k in info for k in ("edge_weights_s", "clusters", "leaders")):
            continue
        S = np.asarray(info["edge_weights_s"], dtype=float)
        clusters = [list(map(int, c)) for c in info["clusters"]]
        leaders = set(int(x) for x in info["leaders"])
        order = [k for c in clusters for k in sorted(c)]
        fig, ax = plt.subplots(figsize=(6.4, 5.4))
        shown = S[np.ix_(order, order)].copy()
        np.fill_diagonal(shown, np.nan)  # S_ii is undefined (CE-eq 4 is over i != j)
        im = ax.imshow(shown, cmap="viridis")
        ax.grid(False)
        fig.colorbar(im, ax=ax, label="similarity S_ij (CE-eq 4)")
        ticks = [f"{k}*" if k in leaders else str(k) for k in order]
        ax.set_xticks(range(len(order)), ticks, rotation=90, fontsize=7)
        ax.set_yticks(range(len(order)), ticks, fontsize=7)
        pos = 0
        for c in clusters:
            ax.add_patch(plt.Rectangle((pos - 0.5, pos - 0.5), len(c), len(c), fill=False, ec="red", lw=2))
            pos += len(c)
        ax.set_xlabel("client id (grouped by cluster; * = leader)")
        ax.set_ylabel("client id")
        ax.set_title(f"CEFL similarity and {len(clusters)} clusters ({r.label}, seed {r.seed})")
        from fedselect.config.contenders import file_name

        save(fig, f"cefl_similarity_{file_name(r.label)}_s{r.seed}.png")
        break


#: at most this many points per line in participation_by_speed.png (larger fleets: groups of clients)
PARTICIPATION_POINTS = 50


def participation_by_speed(plt, save, results, labels: list[str], feds: list[dict[str, Any]], colors) -> None:
    """``participation_by_speed.png``: the times each client was selected (mean over the seeds)
    against its rank by expected latency in its seed's federation (0 = fastest); with more than
    :data:`PARTICIPATION_POINTS` clients, the mean over consecutive groups of ranks (the title
    says how many clients a point stands for). Uniform selection is flat, a selector that
    prefers fast clients piles up on the left; the y axis is logarithmic above 1."""
    by_seed = {int(f["seed"]): np.asarray(f["expected_latency_s"], dtype=float) for f in feds if "seed" in f}
    first = np.asarray(feds[0]["expected_latency_s"], dtype=float)
    n = first.size
    groups = np.array_split(np.arange(n), min(n, PARTICIPATION_POINTS))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    seeds = set()
    for lab in labels:
        curves = []
        for r in (r for r in results if r.label == lab):
            lat = by_seed.get(r.seed, first)
            order = np.lexsort((np.arange(lat.size), lat))  # fastest first, ties: lowest id
            ranked = selection_counts(r.rows, lat.size)[order]
            curves.append([ranked[g].mean() for g in groups])
            seeds.add(r.seed)
        if curves:
            x = [float(g.mean()) for g in groups]
            ax.plot(x, np.mean(curves, axis=0), color=colors[lab], lw=1.5, marker=".", label=lab)
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlabel("client, ranked by expected latency (0 = fastest)")
    ax.set_ylabel("times selected" + (f" (mean of {len(seeds)} seeds)" if len(seeds) > 1 else ""))
    lo, hi = n // len(groups), -(-n // len(groups))
    per = f" (a point: the mean of {lo if lo == hi else f'{lo}-{hi}'} clients)" if len(groups) < n else ""
    ax.set_title("participation by client, fastest first" + per)
    ax.legend(fontsize=8)
    save(fig, "participation_by_speed.png")


def class_speed(fed: dict[str, Any], kind: str) -> list[float]:
    """Per client, a cost that ranks its ``kind`` class (lower = faster): for devices the
    expected compute seconds per training sample (the device alone, FR-eq 4), for networks the
    expected upload seconds of the model (the link alone, FR-eq 5). Federation files without
    these parts (older versions) fall back to the whole expected latency."""
    if kind == "device" and "expected_compute_s" in fed:
        return [c / max(n, 1) for c, n in zip(fed["expected_compute_s"], fed.get("num_samples", []))]
    if kind == "network" and "expected_upload_s" in fed:
        return list(fed["expected_upload_s"])
    return list(fed.get("expected_latency_s", []))


def class_order(feds: list[dict[str, Any]], kind: str) -> list[str]:
    """Profile classes (``kind`` = "device" or "network") of the federations, fastest first:
    ordered by the median :func:`class_speed` of their clients."""
    lat: dict[str, list[float]] = defaultdict(list)
    for fed in feds:
        for name, x in zip(fed.get(kind, []), class_speed(fed, kind)):
            lat[name].append(float(x))
    return sorted(lat, key=lambda c: (float(np.median(lat[c])), c))


def selection_profile_counts(
    rows: list[dict[str, str]], profiles: list[str], classes: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Rounds (>= 1) and a ``(rounds, len(classes))`` array: how many of each round's selected
    clients (``selected`` column, ids separated by ``;``) have each profile class.

    Raises:
        ValueError: a selected id that is not a client of ``profiles``.
    """
    rounds, counts = [], []
    col = {c: j for j, c in enumerate(classes)}
    for row in rows:
        t = int(row["round"])
        if t < 1:
            continue  # the warm-up row (every client) is not a selection
        c = np.zeros(len(classes))
        for k in filter(None, (row.get("selected") or "").split(";")):
            k = int(k)
            if not 0 <= k < len(profiles):
                raise ValueError(f"round {t}: selected client {k} is not one of the federation's {len(profiles)} clients")
            c[col[profiles[k]]] += 1
        rounds.append(t)
        counts.append(c)
    return np.asarray(rounds, dtype=int), np.asarray(counts).reshape(len(rounds), len(classes))


def selection_profiles_plot(plt, out: Path, results, labels: list[str], feds: list[dict[str, Any]], kind: str) -> str | None:
    """Stacked bars per round (per server version in ``mode: async``) of the ``kind``
    ("device"/"network") class of each selected client, one panel per method, mean over the
    seeds that have a federation file; classes ordered fastest (bottom, green) to slowest (top,
    red). Returns the file name, or None when no run can be matched to a federation or the
    fleet has fewer than two classes of that kind (e.g. ``system.capacity``: every client its
    own capacity, all of one class), where the bars would say nothing."""
    by_seed = {f["seed"]: f for f in feds if "seed" in f and kind in f}
    classes = class_order(list(by_seed.values()), kind)
    if len(classes) < 2:
        return None
    panels = []
    for lab in labels:
        per_round: dict[int, list[np.ndarray]] = defaultdict(list)
        runs = [r for r in results if r.label == lab and r.seed in by_seed]
        for r in runs:
            rounds, counts = selection_profile_counts(r.rows, by_seed[r.seed][kind], classes)
            for t, c in zip(rounds, counts):
                per_round[int(t)].append(c)
        if per_round:
            ts = np.array(sorted(per_round))
            panels.append((lab, len(runs), ts, np.stack([np.mean(per_round[t], axis=0) for t in ts])))
    if not panels:
        return None
    cmap = plt.cm.RdYlGn_r
    colors = [cmap(0.1 + 0.8 * j / max(1, len(classes) - 1)) for j in range(len(classes))]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 1.2 + 1.9 * len(panels)), sharex=True, squeeze=False)
    for ax, (lab, n, ts, means) in zip(axes[:, 0], panels):
        bottom = np.zeros(len(ts))
        for j, c in enumerate(classes):
            ax.bar(ts, means[:, j], bottom=bottom, color=colors[j], width=0.9, label=c, linewidth=0)
            bottom += means[:, j]
        ax.set_ylabel("clients" if n <= 1 else "clients (mean)")
        ax.set_title(
            f"{lab}"
            + (
                f" (mean of {n} seeds)"
                if n > 1
                else f" (seed {min(r.seed for r in results if r.label == lab and r.seed in by_seed)})"
            ),
            fontsize=9,
            loc="left",
        )
        ax.yaxis.set_major_locator(plt.MaxNLocator(integer=True))
    axes[-1, 0].set_xlabel(round_axis(results)[0])
    axes[-1, 0].xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(
        handles[::-1],
        names[::-1],
        title=f"{kind} class\n(slowest on top)",
        loc="upper left",
        bbox_to_anchor=(0.77, 0.93),
        fontsize=8,
        title_fontsize=8,
    )
    fig.suptitle(
        f"{kind} class of the selected clients per {round_axis(results)[1]}: a selector that avoids stragglers loses the red",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 0.76, 0.96))
    name = f"selection_{kind}_per_round.png"
    fig.savefig(out / name)
    plt.close(fig)
    return name
