"""``fedselect reproduce``: the papers' headline figures, run over seeds, judged, written up.

A manifest (default ``configs/reproduce.yaml``) lists *entries*: one comparison config each
(the configs of ``configs/paper/`` and friends), the seeds (at least 5 for the full variant),
the dotted-key overrides of its small ``--quick`` variant, and the paper's figures to set
ours against (default: the comparison's own ``paper:`` section). For every entry the command
runs the comparison into ``OUT/<id>`` (a finished one is kept; an interrupted one resumes),
rebuilds its report from the saved run directories (:func:`fedselect.report.build.build_report`)
and judges each figure:

* ``<key>_vs`` (the change against the comparison's baseline, or against the claim's ``vs``
  label: accuracy in points, latency, rounds and communication in percent): ours is the mean of
  the per-seed paired differences with its 95% Student-t interval (the comparison's
  ``paired.csv`` for the baseline);
* any other key (e.g. ``final_accuracy`` as a fraction): the mean over seeds with its 95%
  Student-t interval.

Verdicts (:func:`verdict`): **reproduced** (a change: the paper's value lies inside our
interval and the interval excludes 0, or the paper's change is negligible, under 1 point / 1%,
and our interval holds 0 and is no wider than +-2, whether or not it holds the paper's exact value; an absolute accuracy: within ``tolerance`` of our mean, or inside an interval
no wider than +-0.05; an absolute figure in seconds, MB or rounds: our mean within the claim's
``tolerance_pct`` percent of the paper's value, or the paper's value inside our interval; a direction claim ``"> 0"``: our interval lies above 0; a bound ``"<= -98"``:
our whole interval lies at or below -98), **direction
only** (a change of the paper's sign whose interval excludes 0, but not the paper's size),
**inconclusive** (the interval holds both the paper's value and no change, or is too wide),
**not reproduced** (the interval holds 0 where the paper reports a change, or the sign is the
opposite, or an absolute value outside it), **reference only** (substitute data: the paper's
absolute values are another data set's), **not judged** (fewer than 2 seeds, no value, or a
text claim).

A ``kind: sweep`` entry (the budgeted-online paper's Table VI grid) runs ``fedselect sweep``
(:func:`fedselect.study.sweep_run.run_sweep`) into ``OUT/<id>`` instead (``quick_grid``: the tiny grid of
``--quick``) and is summarised, not judged: per method the mean over the grid's cells and the
best cell (final accuracy, share of fat clients selected, candidates evaluated, competitive
ratio), the final-accuracy difference of every method to the sweep's baseline per cell (mean,
best, worst, cells above 0), the time, the command, and the paper's plots: accuracy vs N, R
and r2 (each averaged over the other axes) and the share of fat clients selected per method
(:func:`sweep_grid_summary`, :func:`sweep_plots`).

A ``kind: alpha`` entry (the budgeted-online paper's Table II) computes the optimal stopping
index alpha* and the probability it maximises, checks them by search and by Monte Carlo, and
sets alpha* against the paper's (:mod:`fedselect.repro.alpha`).

A claim with ``vs: LABEL`` is judged on the per-seed paired differences against that method
instead of the baseline, and ``"> X"`` / ``"<= X"`` ... states a bound (``"> -2"`` with
``vs: offline best``: within 2 points of it; an interval holding X is inconclusive).

The result is ``OUT/reproduction.md`` (and, with ``doc=``, a copy such as
``docs/reproduction.md``): per entry the paper's figure, ours with its interval, the verdict,
the config and the command that made it, the seeds, the machine and the time it took, and
the entry's plots (copied next to the document).

Modules: :mod:`~fedselect.repro.manifest` (entries, claims, verdicts),
:mod:`~fedselect.repro.record` (the machine each entry ran on),
:mod:`~fedselect.repro.comparison`, :mod:`~fedselect.repro.grid` and
:mod:`~fedselect.repro.alpha` (the three kinds of entry) and
:mod:`~fedselect.repro.document` (the document).
"""

from fedselect.repro.alpha import AlphaConfig, compute_alpha_table, load_alpha_config, records_in_window, run_alpha_entry
from fedselect.repro.comparison import judge_entry, run_compare_entry, with_method_options
from fedselect.repro.document import render, reproduce, run_entry
from fedselect.repro.grid import _sweep_config, run_sweep_entry, sweep_grid_summary, sweep_plots
from fedselect.repro.manifest import (
    PAPERS,
    Claim,
    Entry,
    EntryResult,
    Job,
    Judged,
    Manifest,
    load_manifest,
    parse_bound,
    verdict,
)
from fedselect.repro.record import RECORD, _machine, read_sessions, record_session

__all__ = [
    "PAPERS",
    "RECORD",
    "AlphaConfig",
    "Claim",
    "Entry",
    "EntryResult",
    "Job",
    "Judged",
    "Manifest",
    "compute_alpha_table",
    "judge_entry",
    "load_alpha_config",
    "load_manifest",
    "parse_bound",
    "read_sessions",
    "record_session",
    "records_in_window",
    "render",
    "reproduce",
    "run_alpha_entry",
    "run_compare_entry",
    "run_entry",
    "run_sweep_entry",
    "sweep_grid_summary",
    "sweep_plots",
    "verdict",
    "with_method_options",
    "_machine",
    "_sweep_config",
]
