"""Studies of several runs: comparisons (:mod:`fedselect.study.compare`), sweeps
(:mod:`fedselect.study.sweep`) and the backends that run their runs (:mod:`fedselect.study.backends`)."""
