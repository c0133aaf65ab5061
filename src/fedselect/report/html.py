"""``report.html``: one self-contained page per comparison or sweep, readable offline.

Plain HTML and CSS (no script, no external file): plots are embedded as base64 ``data:`` URIs,
every text taken from the runs is escaped with :func:`html.escape`. Written beside
``table.md`` by :func:`fedselect.report.build.build_report` (``fedselect compare`` and ``fedselect
report``) and by :func:`fedselect.study.sweep.build_sweep_table` (``fedselect sweep``), from the saved
files alone, so ``fedselect report DIR`` regenerates it without running anything.

A comparison page has, in order: the table (mean ± std over seeds, the last-k mean, the "vs
baseline" lines), the paired differences with their 95% intervals, the paper's figures beside
ours (when the config has ``paper:``), every plot of ``plots/``, the resolved config of each
method (values that differ from the baseline highlighted), the federation of each seed
(partition sizes, label distribution, device/network mix) and the wall times.
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path
from typing import Any, Iterable

from fedselect.common.files import atomic_write

#: plots in reading order with a caption (others found in plots/ follow, sorted by name)
PLOT_CAPTIONS = {
    "metric_vs_round.png": "Test metric per round (left: whole run; right: second half). A wide band means the result depends on the seed.",
    "latency_vs_round.png": "End-to-end simulated latency per round: the slope is the cost of a round; a selector that learns to avoid stragglers bends its line down.",
    "metric_vs_latency.png": "Time to accuracy: the metric against the end-to-end latency, one line per run. Higher and further left is better.",
    "selection_device_per_round.png": "Device class of the selected clients per round (stacked; slowest classes on top, red). A selector that learns to avoid slow devices loses the red.",
    "selection_network_per_round.png": "Network class of the selected clients per round (stacked; slowest links on top, red).",
    "selection_vs_latency.png": "How often each client was selected against its expected per-round latency (first seed): stragglers are on the right.",
    "participation_by_speed.png": "Participation by client: times selected (mean over seeds) with the clients ranked by expected latency, fastest first. Uniform selection is flat; a selector that favours fast clients piles up on the left and leaves the right at 0.",
    "label_distribution.png": "Training samples per client, stacked by label (first seed): the non-IID-ness of the partition.",
}

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#1d2330;background:#fff;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:18px 24px 48px}
h1{font-size:1.55em;margin:.2em 0 .1em}h2{font-size:1.2em;margin:1.6em 0 .4em;padding-bottom:.2em;border-bottom:2px solid #dfe3ea}
h3{font-size:1.02em;margin:1.1em 0 .3em}
p.meta{color:#4b5565;margin:.2em 0 .8em}
nav{font-size:.92em;margin:.4em 0 1em}nav a{margin-right:.9em;color:#1f5fbf;text-decoration:none}
table{border-collapse:collapse;margin:.4em 0 .8em;font-size:.88em}
th,td{border:1px solid #d5dae2;padding:3px 8px;vertical-align:top}
th{background:#eef1f6;text-align:left;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.paired td.num{white-space:normal;min-width:7em}
div.scroll{overflow-x:auto;max-width:100%}
tr:nth-child(even) td{background:#fafbfd}
td.sig{background:#dff3e3 !important;font-weight:600}
td.diff{background:#fff1b8 !important;font-weight:600}
.note{color:#4b5565;font-size:.9em;max-width:60em}
ul.rel{margin:.3em 0 .8em;padding-left:1.2em;font-size:.92em}
figure{margin:1em 0 1.6em}figure img{max-width:100%;height:auto;border:1px solid #e3e6eb}
figcaption{font-size:.88em;color:#4b5565;max-width:62em}
details{margin:.4em 0 .8em}summary{cursor:pointer;color:#1f5fbf}
code{background:#f2f4f7;padding:0 3px;border-radius:3px}
.warn{color:#8a4b00}
"""


def esc(x: Any) -> str:
    """``html.escape`` of ``str(x)`` (quotes too)."""
    return html.escape(str(x), quote=True)


def table_html(
    heads: list[str], rows: Iterable[list[Any]], num_from: int = 1, classes: Iterable[list[str]] | None = None, cls: str = ""
) -> str:
    """An HTML table; cells from column ``num_from`` on are right-aligned; ``classes`` gives an
    extra CSS class per cell (e.g. ``sig``, ``diff``)."""
    rows = list(rows)
    classes = list(classes) if classes is not None else [[""] * len(r) for r in rows]
    out = [
        f'<table class="{esc(cls)}">' if cls else "<table>",
        "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in heads) + "</tr></thead><tbody>",
    ]
    for r, cs in zip(rows, classes):
        cells = []
        for j, (v, c) in enumerate(zip(r, cs)):
            k = " ".join(x for x in (("num" if j >= num_from else ""), c) if x)
            cells.append(f'<td class="{k}">{esc(v)}</td>' if k else f"<td>{esc(v)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return '<div class="scroll">' + "\n".join(out) + "</div>"


def img_html(path: Path, alt: str, caption: str | None = None) -> str:
    """A ``<figure>`` with the PNG embedded as a base64 data URI."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    cap = (
        f"<figcaption><code>{esc(path.name)}</code>: {esc(caption)}</figcaption>"
        if caption
        else f"<figcaption><code>{esc(path.name)}</code></figcaption>"
    )
    return f'<figure><img src="data:image/png;base64,{data}" alt="{esc(alt)}">{cap}</figure>'


def plots_html(plot_dir: Path) -> tuple[str, int]:
    """Every PNG of ``plot_dir`` (known plots first, in reading order); returns (html, count)."""
    if not plot_dir.is_dir():
        return '<p class="note">No plots (run <code>fedselect report DIR</code> without --no-plots).</p>', 0
    files = sorted(
        plot_dir.glob("*.png"),
        key=lambda p: (list(PLOT_CAPTIONS).index(p.name) if p.name in PLOT_CAPTIONS else len(PLOT_CAPTIONS), p.name),
    )
    parts = [img_html(p, p.stem.replace("_", " "), PLOT_CAPTIONS.get(p.name, _caption_guess(p.name))) for p in files]
    return "\n".join(parts) or '<p class="note">No plots in plots/.</p>', len(files)


def _caption_guess(name: str) -> str | None:
    if name.startswith("cefl_similarity"):
        return "CEFL: the clients' similarity matrix (CE-eq 4) ordered by cluster; red squares = clusters, * = leaders."
    return None


def page(title: str, sections: list[tuple[str, str, str]], meta: str) -> str:
    """The whole document: ``sections`` = (id, heading, inner html)."""
    nav = "".join(f'<a href="#{esc(i)}">{esc(h)}</a>' for i, h, _ in sections)
    body = "\n".join(f'<section id="{esc(i)}"><h2>{esc(h)}</h2>\n{inner}\n</section>' for i, h, inner in sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n"
        f"<h1>{esc(title)}</h1>\n{meta}\n<nav>{nav}</nav>\n{body}\n</main></body></html>\n"
    )


# -- resolved configs ---------------------------------------------------------------------


def flatten(doc: Any, prefix: str = "") -> dict[str, str]:
    """Nested mappings -> ``{"train.lr": "0.05", ...}``; lists and scalars as compact JSON."""
    out: dict[str, str] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():  # an empty mapping adds no key
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif prefix:
        out[prefix] = json.dumps(doc, sort_keys=True) if isinstance(doc, (list, dict)) else ("null" if doc is None else str(doc))
    return out


#: keys that differ between the methods by construction (not highlighted)
_NOT_DIFF = {"name"}


def config_html(configs: dict[str, dict[str, Any]], baseline: str | None) -> str:
    """The resolved config of each method side by side (one column per method); values that
    differ from the baseline's are highlighted. First the differing keys, then every key."""
    if not configs:
        return '<p class="note">No config.yaml found in the run directories.</p>'
    labels = list(configs)
    base = baseline if baseline in configs else labels[0]
    flat = {lab: flatten(cfg) for lab, cfg in configs.items()}
    keys: list[str] = []
    for lab in [base] + [x for x in labels if x != base]:
        keys += [k for k in flat[lab] if k not in keys]

    def rows_for(ks):
        rows, cls = [], []
        for k in ks:
            vals = [flat[lab].get(k, "(not set)") for lab in labels]
            rows.append([k] + vals)
            cls.append(
                [""]
                + [
                    "diff" if k not in _NOT_DIFF and flat[lab].get(k, "(not set)") != flat[base].get(k, "(not set)") else ""
                    for lab in labels
                ]
            )
        return rows, cls

    differing = [k for k in keys if k not in _NOT_DIFF and any(flat[lab].get(k) != flat[base].get(k) for lab in labels)]
    heads = ["key"] + [f"{lab} (baseline)" if lab == base else lab for lab in labels]
    out = [
        f'<p class="note">Resolved configs from each run\'s <code>config.yaml</code> (first seed; every default written out, '
        f"method options completed by the method's defaults). Highlighted: a value that differs from the baseline {esc(base)}.</p>"
    ]
    if differing:
        r, c = rows_for(differing)
        out += [
            "<h3>Keys that differ from the baseline</h3>",
            table_html(heads, r, num_from=len(heads), classes=c, cls="config-diff"),
        ]
    else:
        out.append('<p class="note">All methods share the same settings apart from their names.</p>')
    r, c = rows_for(keys)
    out += [
        f"<details><summary>Full resolved config ({len(keys)} keys)</summary>",
        table_html(heads, r, num_from=len(heads), classes=c, cls="config-full"),
        "</details>",
    ]
    return "\n".join(out)


def read_configs(run_dirs: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """label -> parsed ``config.yaml`` of that run directory (labels without one left out)."""
    import yaml

    out = {}
    for lab, d in run_dirs.items():
        p = Path(d) / "config.yaml"
        if p.is_file():
            out[lab] = with_option_defaults(yaml.safe_load(p.read_text()) or {})
    return out


def with_option_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` resolved: every default written out, the selector and the algorithm with all
    their options (a run's config.yaml already is; older ones stored options as given).
    Unchanged when it no longer resolves (an old or foreign config: shown as saved)."""
    try:
        from fedselect.experiment.resolve import parse_experiment

        return parse_experiment(cfg, "config.yaml").model_dump(mode="json")
    except Exception:  # an old or foreign config: show it as saved
        return cfg


# -- comparison page ------------------------------------------------------------------------


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def federation_html(feds: list[dict[str, Any]]) -> str:
    """Per seed: the data set and partition, partition sizes, labels per client and the
    device/network mix; per client (collapsed): samples, profiles, expected latency, labels."""
    if not feds:
        return '<p class="note">No federation-s&lt;seed&gt;.json in this directory (a single run, or written by an older version).</p>'
    import numpy as np

    out = []
    part = feds[0].get("partition", {})
    out.append(
        f"<p>Data set <code>{esc(feds[0].get('dataset'))}</code>, {esc(feds[0].get('num_clients'))} clients, "
        f"{esc(feds[0].get('num_classes'))} classes; partition <code>{esc(part.get('scheme'))}</code> "
        + esc(", ".join(f"{k} = {v}" for k, v in part.items() if k != "scheme"))
        + ". Every method of a seed ran on that seed's federation.</p>"
    )
    rows = []
    for f in feds:
        n = np.asarray(f.get("num_samples", []), dtype=float)
        lc = np.asarray(f.get("label_counts", []), dtype=float)
        labels_per = (lc > 0).sum(axis=1) if lc.size else np.zeros(0)
        lat = np.asarray(f.get("expected_latency_s", []), dtype=float)
        rows.append(
            [
                f.get("seed", "?"),
                len(n),
                int(n.sum()) if n.size else "-",
                f"{int(n.min())} / {np.median(n):.0f} / {int(n.max())}" if n.size else "-",
                f"{labels_per.min()} / {np.median(labels_per):.0f} / {labels_per.max()}" if labels_per.size else "-",
                f"{lat.min():.2f} / {np.median(lat):.2f} / {lat.max():.2f}" if lat.size else "-",
            ]
        )
    out += [
        "<h3>Partition sizes</h3>",
        table_html(
            [
                "seed",
                "clients",
                "training samples",
                "samples per client (min / median / max)",
                "labels per client (min / median / max)",
                "expected latency per round, s (min / median / max)",
            ],
            rows,
        ),
    ]
    out.append(
        "<p class=\"note\">Expected latency: compute + upload of the whole model at the client's profiles' mean frequency and bandwidth. "
        "The label distribution of the first seed is plotted in <code>label_distribution.png</code>.</p>"
    )
    from fedselect.report.plots import class_order, class_speed

    for kind in ("device", "network"):
        classes = class_order(feds, kind)
        if not classes:
            continue
        split = all(("expected_compute_s" if kind == "device" else "expected_upload_s") in f for f in feds)
        scale, head = (
            ((1e3, "compute per training sample, ms (median)") if kind == "device" else (1.0, "model upload, s (median)"))
            if split
            else (1.0, "expected latency, s (median)")
        )
        rows = []
        for c in classes:
            speeds = [x for f in feds for name, x in zip(f.get(kind, []), class_speed(f, kind)) if name == c]
            rows.append(
                [c]
                + [sum(1 for name in f.get(kind, []) if name == c) for f in feds]
                + [f"{scale * np.median(speeds):.4g}" if speeds else "-"]
            )
        out += [
            f"<h3>{kind.capitalize()} mix (clients per class, fastest first)</h3>",
            table_html([f"{kind} class"] + [f"seed {f.get('seed', '?')}" for f in feds] + [head], rows),
        ]
    for f in feds:
        names = f.get("class_names") or [str(i) for i in range(int(f.get("num_classes", 0)))]
        lc = f.get("label_counts", [])
        rows = []
        for k in range(int(f.get("num_clients", 0))):
            rows.append(
                [
                    k,
                    f["num_samples"][k] if k < len(f.get("num_samples", [])) else "-",
                    f.get("device", ["-"] * (k + 1))[k] if k < len(f.get("device", [])) else "-",
                    f.get("network", [])[k] if k < len(f.get("network", [])) else "-",
                    _fmt(
                        f.get("expected_latency_s", [None] * (k + 1))[k] if k < len(f.get("expected_latency_s", [])) else None, 2
                    ),
                ]
                + (list(lc[k]) if k < len(lc) else [])
            )
        heads = ["client", "samples", "device", "network", "expected latency (s)"] + [f"label {x}" for x in names]
        out += [
            f"<details><summary>Every client, seed {esc(f.get('seed', '?'))}</summary>",
            table_html(heads, rows),
            "</details>",
        ]
    return "\n".join(out)


def wall_html(results: list[Any], labels: list[str]) -> str:
    """Wall-clock seconds per run (machine- and load-dependent) and in total."""
    seeds = sorted({r.seed for r in results})
    rows = []
    total = 0.0
    for lab in labels:
        by = {r.seed: r for r in results if r.label == lab}
        vals = [by[s].summary.get("wall_s") if s in by else None for s in seeds]
        tot = sum(v for v in vals if isinstance(v, (int, float)))
        total += tot
        rounds = [by[s].summary.get("rounds") for s in seeds if s in by]
        incomplete = [f"s{s}" for s in seeds if s in by and not by[s].complete]
        rows.append([lab] + [_fmt(v) for v in vals] + [_fmt(tot), "/".join(str(x) for x in rounds), ", ".join(incomplete) or "-"])
    heads = ["method"] + [f"seed {s} (s)" for s in seeds] + ["total (s)", "rounds run", "incomplete"]
    return (
        table_html(heads, rows) + f'<p class="note">Total {total:.1f} s of wall-clock time over {len(results)} runs. '
        "Wall times depend on the machine, its load and the torch thread count: compare them only within one comparison.</p>"
    )


def results_html(rep: dict[str, Any]) -> str:
    """The table of :func:`fedselect.report.aggregate.aggregate_table` and the 'vs baseline' lines."""
    from fedselect.report.tables import (
        censored_note,
        relative_phrases,
        round_scores_notes,
        rounds_note,
        selection_eval_note,
        table_cell,
    )

    cols = rep["columns"]
    heads = ["method", "seeds"] + [h for _, h, _, _ in cols]
    rows = [[e["label"], e["seeds"]] + [table_cell(e, k, d) for k, _, d, _ in cols] for e in rep["table"]]
    out = [table_html(heads, rows, num_from=1, cls="results")]
    seeds = max((e["seeds"] for e in rep["table"]), default=0)
    lastk = next((h for k, h, _, _ in cols if k.startswith("last_k_")), None)
    note = f"Mean over {seeds} seed(s)" + (" ± sample standard deviation." if seeds > 1 else ".")
    if lastk:
        note += (
            f" <code>{esc(lastk)}</code>: the metric's mean over each run's last {esc(rep.get('window') or 'k')} evaluated rounds "
            "(metrics.summary_window; all of them when a run has fewer), steadier than the final round."
        )
    out.append(f'<p class="note">{note} Latency is simulated seconds; comm in MB (10<sup>6</sup> bytes).</p>')
    if rep.get("caveat"):
        out.append(f'<p class="warn">{esc(rep["caveat"])}</p>')
    for line in [rounds_note(rep["table"]), censored_note(rep["table"]), *round_scores_notes(rep["table"], cols)]:
        if line:
            out.append(f'<p class="note">{esc(line)}</p>')
    if rep.get("missing_note"):
        out.append(f'<p class="warn">{esc(rep["missing_note"])}</p>')
    if selection_eval_note(rep["table"]):
        out.append(f'<p class="warn">{esc(selection_eval_note(rep["table"]))}</p>')
    base = rep.get("baseline")
    if base and len(rep["table"]) > 1:
        items = [
            f"<li><b>{esc(e['label'])}</b>: {esc(', '.join(relative_phrases(e, base, rep.get('window'))) or 'no comparable figures')}</li>"
            for e in rep["table"]
            if e["label"] != base
        ]
        out.append(f'<p>Relative to {esc(base)} (change of the seed means):</p><ul class="rel">{"".join(items)}</ul>')
    incomplete = [x for e in rep["table"] for x in e["incomplete"]]
    if incomplete:
        out.append(f'<p class="warn">Incomplete runs (their existing rounds are used): {esc(", ".join(incomplete))}</p>')
    return "\n".join(out)


def paired_html(rep: dict[str, Any]) -> str:
    """The paired differences with intervals; significant cells highlighted."""
    from fedselect.report.tables import paired_cell, paired_intro

    paired, quantities, base = rep.get("paired") or [], rep.get("quantities") or [], rep.get("baseline")
    if not paired:
        return '<p class="note">No baseline to pair with (a single method or run).</p>'
    nseeds = max((len(p["seeds"]) for p in paired), default=0)
    heads = ["method"] + [f"{h} ({u})" for _, h, u in quantities]
    rows, cls = [], []
    for p in paired:
        rows.append([p["label"]] + [paired_cell(p["cells"][k], nseeds) for k, _, _ in quantities])
        cls.append([""] + ["sig" if p["cells"][k]["interval"].significant else "" for k, _, _ in quantities])
    intro = esc(paired_intro(base, nseeds)).replace("`*`", "<code>*</code>")
    per_seed = []
    for p in paired:
        for k, h, u in quantities:
            d = p["cells"][k]["diffs"]
            if d:
                per_seed.append([p["label"], f"{h} ({u})"] + [", ".join(f"s{s}: {v:+.2f}" for s, v in d.items())])
    return (
        f'<p class="note">{intro} Highlighted: the interval excludes 0.</p>'
        + table_html(heads, rows, classes=cls, cls="paired")
        + "<details><summary>Per-seed differences</summary>"
        + table_html(["method", "quantity", "differences"], per_seed, num_from=3)
        + "</details>"
    )


def paper_html(rep: dict[str, Any]) -> str:
    paper = rep.get("paper") or {}
    ours = {e["label"]: e for e in rep["table"]}
    rows = []
    for lab, figs in paper.items():
        for key, val in figs.items():
            o = ours.get(lab, {}).get(key)
            rows.append([lab, key, "-" if o is None else f"{o:.4g}", val])
    src = rep.get("paper_source")
    return (
        (f'<p class="note">Source: {esc(src)}.</p>' if src else "")
        + table_html(["method", "figure", "ours", "paper"], rows, num_from=2)
        + '<p class="note"><code>&lt;key&gt;_vs</code>: change against the baseline (points for accuracy/F1, percent otherwise); '
        "accuracies as fractions. See docs/comparisons.md, 'Ours vs the paper'.</p>"
    )


def write_compare_html(directory: Path, rep: dict[str, Any]) -> Path:
    """Write ``directory/report.html`` for a comparison or run directory from the dict of
    :func:`fedselect.report.build.build_report`; returns its path."""
    directory = Path(directory)
    results, labels = rep["results"], rep["labels"]
    seeds = sorted({r.seed for r in results})
    sections = [("results", "Results", results_html(rep))]
    if rep.get("baseline") and len(labels) > 1:
        sections.append(("paired", f"Paired differences vs {rep['baseline']}", paired_html(rep)))
    if rep.get("paper"):
        sections.append(("paper", "Ours vs the paper", paper_html(rep)))
    plots, n = plots_html(directory / "plots")
    sections.append(("plots", f"Plots ({n})", plots))
    first = {}
    for r in sorted(results, key=lambda r: r.seed):
        first.setdefault(r.label, r.dir)
    sections.append(
        (
            "config",
            "Configuration of each method",
            config_html(read_configs({lab: first[lab] for lab in labels if lab in first}), rep.get("baseline")),
        )
    )
    sections.append(("federation", "Federation", federation_html(rep.get("federations") or [])))
    sections.append(("wall", "Wall times", wall_html(results, labels)))
    meta = (
        f'<p class="meta">{esc(len(labels))} method(s): {esc(", ".join(labels))}; seeds {esc(seeds)}'
        + (f"; baseline {esc(rep['baseline'])}" if rep.get("baseline") else "")
        + f". Directory <code>{esc(directory.resolve().name)}</code>; rebuilt from the saved metrics by "
        f"<code>fedselect report {esc(directory.resolve().name)}</code> (tables also in table.md, table.csv, paired.csv).</p>"
    )
    doc = page(rep["title"], sections, meta)
    path = directory / "report.html"
    atomic_write(path, lambda fh: fh.write(doc))
    return path


# -- sweep page ------------------------------------------------------------------------------


#: grid points whose plots a sweep's report.html embeds (beyond that it names the directories)
MAX_EMBEDDED_POINTS = 8


def _sweep_plot_sections(plot_dir: Path) -> list[tuple[str, str, str]]:
    """The plots section of a sweep's page: ``plots/*.png``, then ``plots/<point>/*.png``."""
    if not plot_dir.is_dir():
        return []
    out = []
    if any(plot_dir.glob("*.png")):
        plots, n = plots_html(plot_dir)
        out.append(("plots", f"Plots ({n})", plots))
    points = sorted(d for d in plot_dir.iterdir() if d.is_dir() and any(d.glob("*.png")))
    if points and len(points) <= MAX_EMBEDDED_POINTS:
        parts = [(f"<h3>{esc(d.name)}</h3>", *plots_html(d)) for d in points]
        html_ = "\n".join(head + body for head, body, _ in parts)
        out.append(("points", f"Plots per grid point ({sum(n for _, _, n in parts)})", html_))
    elif points:
        out.append(
            (
                "points",
                "Plots per grid point",
                f'<p class="note">{len(points)} grid points: the plots of each are in <code>plots/&lt;point&gt;/</code> '
                "(not embedded, to keep this page small).</p>",
            )
        )
    return out


def write_sweep_html(
    directory: Path,
    title: str,
    markdown_note: str,
    table: tuple[list[str], list[list[Any]]],
    paired: tuple[str, list[str], list[list[Any]], list[list[str]]] | None,
    paper: tuple[str | None, list[list[Any]]] | None,
    configs: dict[str, dict[str, Any]],
    baseline: str | None,
    wall: tuple[list[str], list[list[Any]]],
) -> Path:
    """Write ``directory/report.html`` for a sweep: its table, the paired differences per grid
    point (when the sweep has a baseline), the paper's figures, the methods' resolved configs
    (at the first grid point) and the wall times. Any PNG in ``directory/plots`` is embedded,
    and those of each grid point's ``plots/<point>/`` when there are at most
    :data:`MAX_EMBEDDED_POINTS` points (else the page says where they are)."""
    directory = Path(directory)
    heads, rows = table
    first_num = heads.index("method") + 1 if "method" in heads else 0
    sections = [
        (
            "results",
            "Results",
            f'<p class="note">{esc(markdown_note)}</p>' + table_html(heads, rows, num_from=first_num, cls="results"),
        )
    ]
    if paired is not None:
        intro, pheads, prows, pcls = paired
        pnum = pheads.index("method") + 1 if "method" in pheads else 0
        sections.append(
            (
                "paired",
                f"Paired differences vs {baseline}",
                f'<p class="note">{esc(intro).replace("`*`", "<code>*</code>")} Highlighted: the interval excludes 0.</p>'
                + table_html(pheads, prows, num_from=pnum, classes=pcls, cls="paired"),
            )
        )
    if paper is not None:
        src, prow = paper
        sections.append(
            (
                "paper",
                "Ours vs the paper",
                (f'<p class="note">Source: {esc(src)}.</p>' if src else "")
                + table_html(["method", "point", "figure", "ours", "paper"], prow, num_from=3),
            )
        )
    sections += _sweep_plot_sections(directory / "plots")
    sections.append(("config", "Configuration of each method", config_html(configs, baseline)))
    sections.append(("wall", "Wall times", table_html(*wall)))
    meta = (
        f'<p class="meta">Sweep directory <code>{esc(directory.resolve().name)}</code>; rebuilt from the runs\' summary.json by '
        f"<code>fedselect report {esc(directory.resolve().name)}</code> (or <code>fedselect sweep CONFIG --out DIR --table-only</code>).</p>"
    )
    doc = page(title, sections, meta)
    path = directory / "report.html"
    atomic_write(path, lambda fh: fh.write(doc))
    return path
