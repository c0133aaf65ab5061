"""Kill-and-resume: a `fedselect run` killed with SIGKILL and continued with `fedselect run
--resume DIR` gives the same metrics.csv (byte for byte) and final model as an uninterrupted run,
for every registered method; checkpoint damage is detected and the previous one used.

The killed runs are forked children running the real CLI command (``fedselect run CONFIG -o
DIR``); the parent sends SIGKILL at a chosen point (the child parks there and signals the parent
through a marker file), so no cleanup code of the child runs. Resumes go through the CLI too.
The reference, killed and resumed runs each see different states of the *global* Python/numpy/
torch generators, so equality also shows that no RNG of the loop is a global one.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from fedselect.algorithms import ALGORITHMS
from fedselect.cli import app
from fedselect.config.presets import PRESETS
from fedselect.experiment import checkpoint as ckmod
from fedselect.experiment.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import make_simulation, run_experiment
from fedselect.experiment.simulation import find_generators
from fedselect.selectors import SELECTORS
from fedselect.world.federation import build_federation
from support.tiny import method_doc

parse_config = parse_experiment


@pytest.fixture(scope="module")
def fed():
    return build_federation(parse_config(method_doc()))


# ---------------------------------------------------------------- helpers
def same(a, b, path="") -> None:
    """Recursive bit-equality of nested checkpoint contents (NaN equals NaN)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, path
        assert torch.equal(a, b) or torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(), b.nan_to_num()), (
            path
        )
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, np.asarray(b), equal_nan=a.dtype.kind == "f"), path
    elif isinstance(a, dict):
        assert list(a.keys()) == list(b.keys()), path
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)) or type(a).__name__ == "deque":
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert (math.isnan(a) and math.isnan(b)) or a == b, f"{path}: {a} != {b}"
    elif hasattr(a, "__dict__") and not isinstance(a, type):
        same(vars(a), vars(b), path)
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def assert_same_run(a: Path, b: Path) -> None:
    assert (a / "metrics.csv").read_bytes() == (b / "metrics.csv").read_bytes()
    ma, mb = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    assert list(ma) == list(mb) and all(torch.equal(ma[k], mb[k]) for k in ma)
    ca, cb = load_checkpoint(a), load_checkpoint(b)
    same(ca["snapshot"], cb["snapshot"], "snapshot")  # server, selector, algorithm and generator states
    sa, sb = (yaml.safe_load((d / "summary.json").read_text()) for d in (a, b))
    drop_wall = lambda s: {k: v for k, v in s.items() if not k.endswith("wall_s")}  # noqa: E731  (wall-clock seconds)
    assert drop_wall(sa) == drop_wall(sb)


def cli(*args: str) -> None:
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output + repr(r.exception)


def killed_cli_run(cfg_path: Path, run_dir: Path, park, timeout: float = 60.0) -> None:
    """Fork a child running ``fedselect run CFG -o DIR``; ``park(marker)`` is called in the
    child to install the point where it stops (touching ``marker``) until the parent SIGKILLs it."""
    marker = run_dir.parent / f".{run_dir.name}.parked"
    marker.unlink(missing_ok=True)
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            torch.set_num_threads(1)
            park(marker)
            app(["run", str(cfg_path), "-o", str(run_dir), "-q"], standalone_mode=False)
            code = 3  # finished without reaching the kill point
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while not marker.exists():
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            pytest.fail(f"child ended (status {status}) before the kill point")
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("child never reached the kill point")
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    marker.unlink()


def _stop(marker: Path) -> None:
    marker.touch()
    time.sleep(120)


def park_after_round(n: int):
    """Kill point: right after round n's checkpoint and progress callback."""

    def park(marker):
        import fedselect.experiment.runfiles as runfiles

        orig = runfiles.save_checkpoint

        def wrapped(run_dir, payload):
            out = orig(run_dir, payload)
            if payload["round"] == n:
                _stop(marker)
            return out

        runfiles.save_checkpoint = wrapped

    return park


def park_before_checkpoint(n: int):
    """Kill point: round n's metrics row is written, its checkpoint is not."""

    def park(marker):
        import fedselect.experiment.runfiles as runfiles

        orig = runfiles.save_checkpoint

        def wrapped(run_dir, payload):
            if payload["round"] == n:
                _stop(marker)
            return orig(run_dir, payload)

        runfiles.save_checkpoint = wrapped

    return park


def park_mid_checkpoint_write(n: int):
    """Kill point: half of round n's checkpoint bytes are in the temp file."""

    def park(marker):
        real_save = torch.save

        def half_save(obj, fh, *a, **k):
            if isinstance(obj, dict) and obj.get("round") == n:
                import io

                buf = io.BytesIO()
                real_save(obj, buf, *a, **k)
                data = buf.getvalue()
                fh.write(data[: len(data) // 2])
                fh.flush()
                os.fsync(fh.fileno())
                _stop(marker)
            return real_save(obj, fh, *a, **k)

        ckmod.torch.save = half_save  # the checkpoint module's torch is the torch module: child-only patch

    return park


def park_between_renames(n: int):
    """Kill point: in round n's save, checkpoint.pt was renamed to checkpoint.prev.pt and the
    new file is still .checkpoint.new (no checkpoint.pt on disk)."""

    def park(marker):
        real_replace = os.replace

        def replace(src, dst):
            real_replace(src, dst)
            if str(dst).endswith(ckmod.PREVIOUS):
                payload_round = torch.load(dst, weights_only=False)["round"]
                if payload_round == n - 1:
                    _stop(marker)

        ckmod.os = type("os_proxy", (), {"replace": staticmethod(replace), "__getattr__": lambda self, a: getattr(os, a)})()

    return park


def write_cfg(tmp_path: Path, doc: dict) -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


# ---------------------------------------------------------------- tests
KILL_POINTS = {
    "after-round-2": park_after_round(2),
    "round-3-row-written-before-its-checkpoint": park_before_checkpoint(3),
    "mid-checkpoint-write": park_mid_checkpoint_write(3),
    "between-checkpoint-renames": park_between_renames(3),
}


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_fedavg_sigkill_then_cli_resume_is_identical(tmp_path, fed, point):
    doc = method_doc("fedavg")
    run_experiment(parse_config(doc), tmp_path / "ref", federation=fed)
    cfg = write_cfg(tmp_path, doc)
    killed_cli_run(cfg, tmp_path / "run", KILL_POINTS[point])
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("round,") and len(rows) >= 4  # header, rounds 0, 1, 2 at least
    assert not (tmp_path / "run" / "summary.json").exists()
    cli("run", "--resume", str(tmp_path / "run"), "-q")
    assert_same_run(tmp_path / "ref", tmp_path / "run")


def test_resume_with_faults_and_sparse_checkpoints_is_identical(tmp_path, fed):
    """checkpoint_every 2, killed after round 4's row but before its checkpoint: rounds 3 and 4
    are dropped and redone from round 2's checkpoint; the fault draws (dropout, NaN injection,
    deadline) are the same after the resume."""
    doc = method_doc(
        "fedavg",
        checkpoint_every=2,
        clients_per_round=3,
        faults={"dropout": 0.3, "inject": [{"kind": "nan", "rounds": [3, 4], "clients": "all"}]},
        system={"round_deadline_s": 0.05},
    )
    run_experiment(parse_config(doc), tmp_path / "ref", federation=fed)
    ref_rows = (tmp_path / "ref" / "metrics.csv").read_text()
    assert ":dropout" in ref_rows and ":nan" in ref_rows and ":timeout" in ref_rows
    killed_cli_run(write_cfg(tmp_path, doc), tmp_path / "run", park_before_checkpoint(4))
    assert (tmp_path / "run" / "metrics.csv").read_text().count("\n") == 1 + 5  # header + rounds 0..4
    assert load_checkpoint(tmp_path / "run")["round"] == 2
    cli("run", "--resume", str(tmp_path / "run"), "-q")
    assert_same_run(tmp_path / "ref", tmp_path / "run")


@contextlib.contextmanager
def global_rngs(seed: int):
    """Put Python's, numpy's and torch's *global* generators in a state given by ``seed`` for
    the duration (restored afterwards). fedselect must not depend on them: each run below sees
    a different global state, so equal results show that every RNG in the loop is its own."""
    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])


def _scramble_then(park):
    def f(marker):
        random.seed(222)
        np.random.seed(222)
        torch.manual_seed(222)
        park(marker)

    return f


def _registry_cases() -> dict[str, dict]:
    """Every preset and every registered selector with FedAvg and FedPer (tests/support/registry_cases.py):
    registering a component puts it here without editing this file."""

    from support.registry_cases import cases

    base = {k: v for k, v in method_doc().items() if k not in ("method", "method_options")}
    return cases(base)


RESUME_CASES = _registry_cases()


def test_resume_cases_cover_every_component():
    """Every built-in selector and algorithm is resumed below."""
    assert set(SELECTORS.builtin_names()) <= {d["selector"]["name"] for d in RESUME_CASES.values()}
    assert set(ALGORITHMS.builtin_names()) <= {d["algorithm"]["name"] for d in RESUME_CASES.values()}
    assert set(PRESETS) <= set(RESUME_CASES)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_every_method_sigkill_after_round_2_of_5_then_resume(tmp_path, fed, case):
    doc = RESUME_CASES[case]
    with global_rngs(111):
        run_experiment(parse_config(doc), tmp_path / "ref", federation=fed)
    killed_cli_run(write_cfg(tmp_path, doc), tmp_path / "run", _scramble_then(park_after_round(2)))
    assert load_checkpoint(tmp_path / "run")["round"] == 2
    with global_rngs(333):
        cli("run", "--resume", str(tmp_path / "run"), "-q")
    assert_same_run(tmp_path / "ref", tmp_path / "run")


def test_resume_extends_the_round_budget(tmp_path, fed):
    """`--resume DIR --rounds 5` after a complete 3-round run == a 5-round run."""
    run_experiment(parse_config(method_doc()), tmp_path / "ref", federation=fed)
    run_experiment(parse_config(method_doc(rounds=3)), tmp_path / "run", federation=fed)
    cli("run", "--resume", str(tmp_path / "run"), "--rounds", "5", "-q")
    # round 3 was the last round of the short run (evaluated then, as in the long run since eval_every=1)
    assert_same_run(tmp_path / "ref", tmp_path / "run")
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["rounds"] == 5


def test_truncated_checkpoint_is_detected_and_previous_used(tmp_path, fed, caplog):
    doc = method_doc()
    run_experiment(parse_config(doc), tmp_path / "ref", federation=fed)
    d = tmp_path / "run"
    run_experiment(parse_config(doc), d, federation=fed, stop_after=3)
    latest = d / "checkpoint.pt"
    data = latest.read_bytes()
    latest.write_bytes(data[: len(data) // 3])  # truncated
    with caplog.at_level(logging.WARNING, logger="fedselect"):
        ck = load_checkpoint(d)
    assert ck["round"] == 2  # checkpoint.prev.pt
    msgs = " ".join(r.getMessage() for r in caplog.records)
    assert "checkpoint.pt: corrupted or truncated" in msgs and "resuming from checkpoint.prev.pt (round 2)" in msgs
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1  # the damaged file is named once
    cli("run", "--resume", str(d), "-q")
    assert_same_run(tmp_path / "ref", d)


def test_every_checkpoint_damaged_gives_a_clear_error_and_changes_nothing(tmp_path, fed):
    d = tmp_path / "run"
    run_experiment(parse_config(method_doc()), d, federation=fed, stop_after=2)
    (d / "checkpoint.pt").write_bytes(b"")
    (d / "checkpoint.prev.pt").write_bytes(b"PK\x03\x04garbage")
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    r = CliRunner().invoke(app, ["run", "--resume", str(d), "-q"])
    assert r.exit_code == 2
    out = " ".join(r.output.split())
    assert f"no usable checkpoint in {d}" in out
    assert "checkpoint.pt: empty file (0 bytes; truncated)" in out
    assert "checkpoint.prev.pt: corrupted or truncated" in out
    assert out.count("checkpoint.prev.pt: corrupted") == 1 and "WARNING" not in out  # once, in the error
    assert "start the run again with" in out and "--overwrite" in out
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


def test_checkpoint_file_that_is_not_ours_is_rejected(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="not a fedselect checkpoint"):
        load_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="integer 'round'"):
        save_checkpoint(tmp_path, {"round": "3"})


def test_newest_readable_checkpoint_wins(tmp_path):
    save_checkpoint(tmp_path, {"round": 1, "method": {}})
    save_checkpoint(tmp_path, {"round": 2, "method": {}})
    assert load_checkpoint(tmp_path)["round"] == 2
    assert torch.load(tmp_path / "checkpoint.prev.pt", weights_only=False)["round"] == 1
    # a crash between the two renames of round 3's save: .checkpoint.new holds round 3
    torch.save({"round": 3, "method": {}}, tmp_path / ".checkpoint.new")
    os.replace(tmp_path / "checkpoint.pt", tmp_path / "checkpoint.prev.pt")
    assert load_checkpoint(tmp_path)["round"] == 3


def test_no_checkpoint_yet_restarts_from_round_0(tmp_path, fed):
    """Killed before the first checkpoint: --resume starts again and gives the same run."""
    doc = method_doc()
    run_experiment(parse_config(doc), tmp_path / "ref", federation=fed)
    d = tmp_path / "run"
    run_experiment(parse_config(doc), d, federation=fed, stop_after=1)
    for n in ("checkpoint.pt", "checkpoint.prev.pt"):
        (d / n).unlink(missing_ok=True)
    cli("run", "--resume", str(d), "-q")
    assert_same_run(tmp_path / "ref", d)


def test_every_generator_of_a_run_is_found(fed):
    """The checkpoint's generic RNG sweep sees the selector RNG and nested agent generators."""
    sim = make_simulation(parse_config(method_doc("flashrl")), fed)
    gens = find_generators({"selector": sim.selector, "algorithm": sim.algorithm})
    assert "selector.rng" in gens and "selector.agent.rng" in gens and "selector.agent.torch_generator" in gens
    assert all(isinstance(g, (np.random.Generator, torch.Generator)) for g in gens.values())


@pytest.mark.slow
def test_real_process_killed_at_an_arbitrary_moment_then_resumed_in_a_fresh_process(tmp_path, fed):
    """`python -m fedselect.cli run` in its own interpreter, SIGKILLed as soon as round 2's row
    is on disk (wherever it then is), and resumed by a second fresh interpreter (two interpreter
    start-ups: ~10-25 s; deselect with -m "not slow")."""
    import subprocess
    import sys

    doc = method_doc("fedavg", clients_per_round=4, train={"local_epochs": 3, "batch_size": 32, "lr": 0.05})
    run_experiment(parse_config(doc), tmp_path / "ref", federation=fed)
    cfg, d = write_cfg(tmp_path, doc), tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads()), "MKL_NUM_THREADS": str(torch.get_num_threads())}
    cmd = [sys.executable, "-m", "fedselect.cli", "run"]
    proc = subprocess.Popen(cmd + [str(cfg), "-o", str(d), "-q"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    metrics, deadline = d / "metrics.csv", time.monotonic() + 120
    while not (metrics.exists() and "\n2," in metrics.read_text()):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "round 2 never finished"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not (d / "summary.json").exists()
    res = subprocess.run(cmd + ["--resume", str(d), "-q"], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert_same_run(tmp_path / "ref", d)


def test_stale_temp_files_of_a_killed_writer_are_removed_and_nothing_else(tmp_path):
    from fedselect.experiment.checkpoint import remove_stale_temp_files

    for n in ("..checkpoint.new.abc123.tmp", ".metrics.csv.x9.tmp", ".mine.tmp", "keep.tmp"):  # names as atomic_write makes them
        (tmp_path / n).write_text("x")
    gone = remove_stale_temp_files(tmp_path, ("metrics.csv", ".checkpoint.new"))
    assert sorted(p.name for p in gone) == ["..checkpoint.new.abc123.tmp", ".metrics.csv.x9.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".mine.tmp", "keep.tmp"]
