"""Studies of several runs: comparisons (:mod:`fedselect.study.compare`), sweeps (their config and
run directories :mod:`fedselect.study.sweep`, running them :mod:`fedselect.study.sweep_run`, their
table :mod:`fedselect.study.sweep_table`) and the backends that run their runs (:mod:`fedselect.study.backends`)."""
