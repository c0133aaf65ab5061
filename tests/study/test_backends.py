"""Sweep/compare backends (fedselect.study.backends): the shared run step, and Ray tasks giving the
same files as the local backend, resuming interrupted runs, reporting failures and cleaning up
after Ctrl-C."""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedselect.experiment.resolve import resolve_doc
from fedselect.experiment.run import run_experiment
from fedselect.study.backends import LocalBackend, RayBackend, RunSpec, make_backend, run_one

ROOT = Path(__file__).resolve().parents[2]


def _small_sweep() -> dict:
    """configs/budgeted-sweep-small.yaml on a smaller grid (R = 10, r2 in {1, 2}, both seeds)
    and 2 rounds, checkpointing every round: 8 runs of the real sweep, seconds each."""
    d = yaml.safe_load((ROOT / "configs" / "budgeted-sweep-small.yaml").read_text())
    d["base"].update(rounds=2, checkpoint_every=1)
    d["grid"].update({"clients_per_round": [10], "method_options.r2": [1, 2]})
    return d


SWEEP = _small_sweep()
#: files of a run that must be byte-identical whichever backend wrote them
SAME_FILES = ("metrics.csv", "model.pt", "config.yaml")


def _table_without_wall(path: Path) -> list[list[str]]:
    """table.csv without its wall-clock columns (wall_s, wall_s_std: not deterministic)."""
    import csv

    rows = list(csv.reader(path.open()))
    keep = [i for i, h in enumerate(rows[0]) if not h.startswith("wall_s")]
    assert len(keep) < len(rows[0])
    return [[r[i] for i in keep] for r in rows]


def _assert_same_runs(a: Path, b: Path) -> int:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for n in names:
        for f in SAME_FILES:
            assert (a / n / f).read_bytes() == (b / n / f).read_bytes(), f"{n}/{f} differs"
        sa, sb = (json.loads((d / n / "summary.json").read_text()) for d in (a, b))
        sa.pop("wall_s"), sb.pop("wall_s")
        assert sa == sb, n
    return len(names)


# ---------------------------------------------------------------------------- no Ray needed
def test_backend_options_are_checked():
    assert make_backend("local").name == "local"
    with pytest.raises(ValueError, match="unknown backend; allowed: local, ray"):
        make_backend("dask")
    with pytest.raises(ValueError, match="--address only apply to --backend ray"):
        make_backend("local", address="10.0.0.1:6379")
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        make_backend("ray", address="10.0.0.1")
    with pytest.raises(ValueError, match="--cpus-per-run must be > 0"):
        make_backend("ray", cpus_per_run=0)
    with pytest.raises(ValueError, match="exceeds the 2 CPUs"):
        make_backend("ray", cpus_per_run=4, num_cpus=2)
    assert make_backend("ray", address="head.example:6379", cpus_per_run=2).cpus_per_run == 2


def test_run_one_continues_what_is_there(tmp_path, tiny_cfg_doc):
    """Finished runs are returned as they are; interrupted ones continue from their checkpoint
    and end byte-identical to an uninterrupted run."""
    cfg = resolve_doc({**tiny_cfg_doc, "rounds": 3})
    whole = tmp_path / "whole"
    run_experiment(cfg, whole)
    part = tmp_path / "part"
    run_experiment(cfg, part, stop_after=1)
    assert not (part / "summary.json").exists()
    summary = run_one(cfg, part)
    assert summary["rounds"] == 3 and "resuming" in (part / "run.log").read_text()
    for f in SAME_FILES:
        assert (part / f).read_bytes() == (whole / f).read_bytes()
    before = (part / "summary.json").read_bytes()
    assert run_one(cfg, part) == json.loads(before)  # finished: nothing runs, nothing is rewritten
    assert (part / "summary.json").read_bytes() == before
    with pytest.raises(FileExistsError, match="already holds a run"):
        run_one(cfg, part, resume=False)


def test_local_backend_shares_a_federation_per_key(tmp_path, tiny_cfg_doc, monkeypatch):
    import fedselect.study.backends as backends

    built = []
    real = backends.build_federation
    monkeypatch.setattr(backends, "build_federation", lambda cfg: built.append(cfg.seed) or real(cfg))
    specs = [
        RunSpec(resolve_doc({**tiny_cfg_doc, "rounds": 1, "method": m, "seed": s}), tmp_path / f"{m}-{s}")
        for s in (0, 1)
        for m in ("fedavg", "full")
    ]
    started = []
    from fedselect.study.backends import RunCallbacks

    done = LocalBackend().run(specs, RunCallbacks(on_start=lambda s, i, n: started.append((i, n))))
    assert built == [0, 1] and started == [(1, 4), (2, 4), (3, 4), (4, 4)] and len(done) == 4
    built.clear()
    assert LocalBackend().run(specs) == {} and built == []  # all finished: no federation is built


# ---------------------------------------------------------------------------- Ray
needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="Ray is the optional extra fedselect[flower] (make test installs it)"
)


def _cli(*args, timeout=240):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fedselect.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray instance (2 CPUs) shared by the tests below: in-process backends use it
    (and leave it running); other processes join it with --address. Yields its address."""
    import warnings

    import ray

    warnings.filterwarnings("ignore", message=".*accelerator visible devices", category=FutureWarning)
    ctx = ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ctx.address_info["gcs_address"]
    finally:
        ray.shutdown()


@pytest.mark.slow
@needs_ray
def test_ray_sweep_gives_the_local_table_and_files(tmp_path, ray_instance):
    """`fedselect sweep --backend ray --address` (joining a running Ray instance) on the
    budgeted-online sweep (configs/budgeted-sweep-small.yaml, smaller grid) writes the same table.csv
    (but for the wall-clock columns) and byte-identical run files as the local backend, keeps
    finished runs and continues an interrupted one from its checkpoint."""
    from fedselect.study.sweep import parse_sweep, run_dir_for
    from fedselect.study.sweep_run import run_sweep

    cfg_file = tmp_path / "sweep.yaml"
    cfg_file.write_text(yaml.safe_dump(SWEEP, sort_keys=False))
    sc = parse_sweep(SWEEP)
    local = tmp_path / "local"
    run_sweep(sc, local)  # in-process, torch threads 1 (conftest)

    on_ray = tmp_path / "ray"
    secretary, online = sc.methods[0], sc.methods[1]
    finished = run_dir_for(on_ray, online.label, {"data.num_clients": 100, "clients_per_round": 10}, 0)
    shutil.copytree(run_dir_for(local, online.label, {"data.num_clients": 100, "clients_per_round": 10}, 0), finished)
    kept = (finished / "summary.json").read_bytes()
    point = {"data.num_clients": 100, "clients_per_round": 10, "method_options.r2": 2}
    interrupted = run_dir_for(on_ray, secretary.label, point, 1)
    run_experiment(sc.experiment(secretary, point, 1), interrupted, stop_after=1)

    res = _cli("sweep", str(cfg_file), "--backend", "ray", "--address", ray_instance, "--out", str(on_ray))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"backend: Ray ({ray_instance})" in res.stdout
    assert _table_without_wall(on_ray / "table.csv") == _table_without_wall(local / "table.csv")
    assert _assert_same_runs(local / "runs", on_ray / "runs") == 8
    assert (finished / "summary.json").read_bytes() == kept  # not run again
    assert "resuming" in (interrupted / "run.log").read_text()


@pytest.mark.slow
@needs_ray
def test_ray_compare_matches_local(tmp_path, tiny_cfg_doc, ray_instance):
    import ray

    from fedselect.study.compare import parse_compare, run_comparison

    doc = {
        "name": "c",
        "base": {**{k: v for k, v in tiny_cfg_doc.items() if k not in ("name", "seed")}, "rounds": 2},
        "methods": [{"method": "fedavg"}, {"method": "full"}],
        "seeds": [0],
    }
    run_comparison(parse_compare(doc), tmp_path / "local")
    done = []
    backend = RayBackend(cpus_per_run=1)
    run_comparison(parse_compare(doc), tmp_path / "ray", backend=backend, on_done=lambda lab, s, summ: done.append(lab))
    assert sorted(done) == ["fedavg", "full"] and ray.is_initialized()  # a running instance is left running
    assert _assert_same_runs(tmp_path / "local" / "runs", tmp_path / "ray" / "runs") == 2
    for f in ("federation-s0.json", "compare.json"):
        assert (tmp_path / "local" / f).read_bytes() == (tmp_path / "ray" / f).read_bytes()
    assert {i["pid"] for i in backend.task_info.values()} and all(i["task_s"] > 0 for i in backend.task_info.values())


@pytest.mark.slow
@needs_ray
def test_ray_failures_are_reported_with_their_runs(tmp_path, tiny_cfg_doc, ray_instance):
    cfg = resolve_doc({**tiny_cfg_doc, "rounds": 1})
    (tmp_path / "blocked").write_text("a file where the run directory should be")
    specs = [RunSpec(cfg, tmp_path / "ok"), RunSpec(cfg, tmp_path / "blocked")]
    with pytest.raises(RuntimeError, match=r"1 of 2 runs failed on Ray \(the others finished\):\n  .*blocked: FileExistsError"):
        RayBackend().run(specs, out_dir=tmp_path)
    assert (tmp_path / "ok" / "summary.json").is_file()
    with pytest.raises(RuntimeError, match="is not visible on Ray node .* filesystem every node mounts"):
        RayBackend().run([RunSpec(cfg, tmp_path / "other")], out_dir=tmp_path, marker="sweep.json")


def _session_processes(sid: int) -> list[tuple[int, str]]:
    """(pid, name) of the live processes in session ``sid`` (Linux /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append((int(d), stat.split("(", 1)[1].rsplit(")", 1)[0]))
    return out


@pytest.mark.slow
@needs_ray
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc to find the Ray processes")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_ray_sweep_leaves_no_processes(tmp_path, sig):
    """Ctrl-C / SIGTERM during a Ray sweep: exit code 130, the 'continue with' hint, and no Ray
    process (GCS, raylet, workers) left behind."""
    slow = {**SWEEP, "seeds": [0], "base": {**SWEEP["base"], "rounds": 1000}}
    cfg_file = tmp_path / "sweep.yaml"
    cfg_file.write_text(yaml.safe_dump(slow, sort_keys=False))
    out = tmp_path / "out"
    log = (tmp_path / "log.txt").open("w")
    p = subprocess.Popen(
        [sys.executable, "-m", "fedselect.cli", "sweep", str(cfg_file), "--backend", "ray", "--ray-cpus", "2", "--out", str(out)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        # a test run started in the background by a non-interactive shell (`cmd &`) inherits
        # SIGINT ignored, and Python then installs no KeyboardInterrupt handler: give the child
        # the default disposition, as a terminal would
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        # until a Ray worker runs one of the sweep's tasks: its process title, or (where the title
        # is not visible, as on some CI machines) a run that has recorded its first round
        def task_running() -> bool:
            if any(name.startswith("ray::_ray_run") for _, name in _session_processes(p.pid)):
                return True
            return any(len(f.read_text().splitlines()) > 1 for f in out.rglob("metrics.csv"))

        deadline = time.monotonic() + 90
        while not task_running():
            assert p.poll() is None, (tmp_path / "log.txt").read_text()
            assert time.monotonic() < deadline, "no Ray task started within 90 s"
            time.sleep(0.1)
        assert {"raylet", "gcs_server"} <= {name for _, name in _session_processes(p.pid)}
        p.send_signal(sig)
        assert p.wait(timeout=60) == 130, (tmp_path / "log.txt").read_text()
        deadline = time.monotonic() + 20
        while _session_processes(p.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _session_processes(p.pid) == []
        text = (tmp_path / "log.txt").read_text()
        assert f"continue with: fedselect sweep {cfg_file} --out {out} --backend ray" in " ".join(text.split())
    finally:
        if p.poll() is None or _session_processes(p.pid):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
