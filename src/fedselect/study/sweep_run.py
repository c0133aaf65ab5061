"""Running a sweep (:func:`run_sweep`): every (method, grid point, seed) once into
``<out>/runs/``, runs sharing a federation key grouped on one federation, on a backend of
:mod:`fedselect.study.backends`; then its table (:func:`fedselect.study.sweep_table.build_sweep_table`).
The sweep's config and run directories: :mod:`fedselect.study.sweep`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from fedselect.common.files import write_json_atomic
from fedselect.experiment.resume import check_saved_runs, with_validation_keys
from fedselect.study.sweep import SweepConfig, SweepMethod, federation_file, federation_key_of, restrict, run_dir_for
from fedselect.study.sweep_table import build_sweep_table


def run_sweep(
    sc: SweepConfig,
    out_dir: str | Path,
    on_run: Callable[[int, int, str], None] | None = None,
    backend: Any = None,
    plots: bool = True,
) -> dict[str, Any]:
    """Run every (method, restricted grid point, seed) once and write the table (and, with
    ``plots``, each grid point's plots).

    Finished runs (``summary.json``) are kept, interrupted ones continue from their last
    checkpoint (:func:`fedselect.study.backends.run_one`). ``backend``: a
    :class:`fedselect.study.backends.LocalBackend` (default; runs sharing a federation key share
    one federation) or :class:`fedselect.study.backends.RayBackend` (one Ray task per run).
    ``on_run(i, total, description)`` is called before each run starts (local) or when it is
    submitted (Ray). Returns the table (see :func:`build_sweep_table`)."""
    from fedselect.study.backends import LocalBackend, RunCallbacks, RunSpec

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs: dict[tuple, tuple[SweepMethod, dict[str, Any], int]] = {}
    for seed in sc.seeds:
        for p in sc.points():
            for m in sc.methods:
                rp = restrict(p, m)
                jobs.setdefault((m.label, json.dumps(rp, sort_keys=True), seed), (m, rp, seed))
    groups: dict[str, list] = {}
    for _key, (m, rp, seed) in jobs.items():
        r = sc.resolved(m, rp, seed)
        groups.setdefault(federation_key_of(r.config), []).append((m, rp, seed, r))
    finished = [
        (run_dir_for(out, m.label, rp, seed), r.config)
        for members in groups.values()
        for m, rp, seed, r in members
        if (run_dir_for(out, m.label, rp, seed) / "summary.json").exists()
    ]
    check_saved_runs(
        finished,
        f"sweep directory {out}",
        "Restore the sweep config, or run the sweep into another --out (or delete those runs to run them again)",
    )
    spec = sc.model_dump(mode="json")
    write_json_atomic(out / "sweep.json", {**spec, "base": with_validation_keys(spec["base"]), "runs": len(jobs)})
    specs = [
        RunSpec(r, run_dir_for(out, m.label, rp, seed), f"{m.label} {rp or ''} seed {seed}", group)
        for group, members in groups.items()
        for m, rp, seed, r in members
    ]
    epochs = {group: members[0][3].config.train.local_epochs for group, members in groups.items()}

    def write_info(group: str, fed: Any) -> None:  # what the plots read of a federation
        from fedselect.report.federations import federation_info

        write_json_atomic(federation_file(out, group), federation_info(fed, epochs[group]))

    cb = RunCallbacks(on_start=(lambda s, i, n: on_run(i, n, s.description)) if on_run else None, on_federation=write_info)
    (backend or LocalBackend()).run(specs, cb, resume=True, out_dir=out, marker="sweep.json")
    return build_sweep_table(out, sc, plots=plots)
