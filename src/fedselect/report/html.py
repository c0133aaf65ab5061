"""``report.html``: one self-contained page per comparison or sweep, readable offline; this
module holds the parts both pages are made of (the pages themselves:
:mod:`fedselect.report.compare_html`, :mod:`fedselect.report.sweep_html`).

Plain HTML and CSS (no script, no external file): plots are embedded as base64 ``data:`` URIs
(:func:`plots_html`), every text taken from the runs is escaped with :func:`html.escape`
(:func:`esc`), tables by :func:`table_html`, the document by :func:`page`, and the resolved
config of each method side by side (:func:`config_html`). The pages are written beside
``table.md`` by :func:`fedselect.report.build.build_report` (``fedselect compare`` and
``fedselect report``) and by :func:`fedselect.study.sweep_table.build_sweep_table` (``fedselect
sweep``), from the saved files alone, so ``fedselect report DIR`` regenerates them without
running anything.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any, Iterable

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
