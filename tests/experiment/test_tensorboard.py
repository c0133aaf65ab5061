"""Live curves in TensorBoard (log.tensorboard): the event files written every round hold exactly
the values of metrics.csv, read back with TensorBoard's own reader; a comparison's runs overlay
by label; a resumed run shows every round once; a missing package is a clear error."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedselect.common.files import read_csv_rows
from fedselect.config.schema import ConfigError
from fedselect.experiment.run import run_experiment
from support.tiny import tiny_experiment

pytest.importorskip("tensorboard", reason="the tensorboard extra (requirements-tensorboard.txt) is not installed")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer  # noqa: E402


def _scalars(tb_dir) -> dict[str, dict[int, float]]:
    ea = EventAccumulator(str(tb_dir))
    ea.Reload()
    out = {}
    for tag in ea.Tags()["scalars"]:
        events = ea.Scalars(tag)
        steps = [e.step for e in events]
        assert len(steps) == len(set(steps)), f"{tag}: a step written twice {steps}"
        out[tag] = {e.step: e.value for e in events}
    return out


def _check_equal_to_metrics(run_dir, tags) -> None:
    rows = read_csv_rows(run_dir / "metrics.csv")
    got = _scalars(run_dir / "tb")
    for col, tag in tags.items():
        want = {}
        for r in rows:
            try:
                v = float(r[col])
            except (TypeError, ValueError):
                continue
            if math.isfinite(v):
                want[int(r["round"])] = float(np.float32(v))  # TensorBoard keeps float32
        assert got.get(tag, {}) == want, tag
    fails = {int(r["round"]): float(len([x for x in r["failed"].split(";") if x])) for r in rows}
    assert got["train/failed_clients"] == fails


def test_event_files_hold_the_metrics_of_every_round(tmp_path):
    cfg = tiny_experiment("oort", rounds=3, faults={"dropout": 0.3}, log={"tensorboard": True})
    run_experiment(cfg, tmp_path / "run")
    tags = {
        "accuracy": "eval/accuracy",
        "f1_macro": "eval/f1_macro",
        "test_loss": "eval/test_loss",
        "train_loss": "train/train_loss",
        "round_latency_s": "latency/round_latency_s",
        "latency_sum_s": "latency/latency_sum_s",
        "e2e_latency_s": "latency/e2e_latency_s",
        "upload_bytes": "bytes/upload_bytes",
        "download_bytes": "bytes/download_bytes",
        "cum_upload_bytes": "bytes/cum_upload_bytes",
        "cum_download_bytes": "bytes/cum_download_bytes",
        "aggregated": "train/aggregated",
        "round_failed": "train/round_failed",
        "epsilon": "selector/epsilon",
        "exploited": "selector/exploited",
        "explored": "selector/explored",
        "preferred_duration_s": "selector/preferred_duration_s",
        "mean_utility": "selector/mean_utility",
    }
    _check_equal_to_metrics(tmp_path / "run", tags)
    got = _scalars(tmp_path / "run" / "tb")
    assert sorted(got["eval/accuracy"]) == [0, 1, 2, 3] and 0 not in got["train/train_loss"]  # round 0 trains nothing
    assert sorted(got["selector/epsilon"]) == [1, 2, 3]


def test_flashrl_curves_and_comparison_runs_overlay_by_label(tmp_path):
    from fedselect.study.compare import parse_compare, run_comparison

    base = {
        "rounds": 2,
        "clients_per_round": 2,
        "data": {"dataset": "mnist-embedded", "num_clients": 4, "partition": {"scheme": "iid"}},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "train": {"local_epochs": 1, "batch_size": 32},
        "log": "tensorboard",  # shorthand of log: {tensorboard: true} (--set log=tensorboard)
    }
    doc = {
        "name": "tb",
        "seeds": [0],
        "base": base,
        "methods": [
            {"label": "FedAvg", "method": "fedavg"},
            {"label": "FLASH-RL", "method": "flashrl", "method_options": {"pca_components": 2, "hidden": 8, "rl_batch_size": 1}},
        ],
    }
    out = run_comparison(parse_compare(doc), tmp_path / "cmp")
    mux = EventMultiplexer().AddRunsFromDirectory(str(out))
    mux.Reload()
    assert sorted(mux.Runs()) == ["runs/FLASH-RL-s0/tb", "runs/FedAvg-s0/tb"]  # `tensorboard --logdir <comparison>`
    _check_equal_to_metrics(
        out / "runs" / "FLASH-RL-s0",
        {
            "accuracy": "eval/accuracy",
            "epsilon": "selector/epsilon",
            "mean_reward": "selector/mean_reward",
            "td_loss": "selector/td_loss",
        },
    )
    flash = _scalars(out / "runs" / "FLASH-RL-s0" / "tb")
    assert not any(t.endswith(("selected_devices", "selected_networks")) for t in flash)  # text is no curve
    assert "selector/epsilon" not in _scalars(out / "runs" / "FedAvg-s0" / "tb")


def test_a_resumed_run_shows_every_round_once(tmp_path):
    # checkpoints every 2 rounds, stopped after round 3: round 3's row (and its events) lie past the
    # checkpoint, so the resume recomputes round 3 and must not show it twice
    cfg = tiny_experiment("fedavg", rounds=4, checkpoint_every=2, log={"tensorboard": True})
    run_experiment(cfg, tmp_path / "ref")
    run_experiment(cfg, tmp_path / "cut", stop_after=3)
    assert sorted(_scalars(tmp_path / "cut" / "tb")["eval/accuracy"]) == [0, 1, 2, 3]
    run_experiment(cfg, tmp_path / "cut", resume=True)
    assert len(list((tmp_path / "cut" / "tb").iterdir())) == 2  # a new event file, purging step 3 of the old
    assert (tmp_path / "ref" / "metrics.csv").read_bytes() == (tmp_path / "cut" / "metrics.csv").read_bytes()
    ref, cut = _scalars(tmp_path / "ref" / "tb"), _scalars(tmp_path / "cut" / "tb")
    assert ref == cut and sorted(cut["eval/accuracy"]) == [0, 1, 2, 3, 4]
    # the tensorboard setting is not part of what a run computes: resuming without it is allowed
    run_experiment(tiny_experiment("fedavg", rounds=5, checkpoint_every=2), tmp_path / "cut", resume=True)


def test_off_by_default_and_a_fresh_start_clears_old_curves(tmp_path):
    run_experiment(tiny_experiment("fedavg", rounds=1), tmp_path / "run")
    assert not (tmp_path / "run" / "tb").exists()
    run_experiment(tiny_experiment("fedavg", rounds=1, log={"tensorboard": True}), tmp_path / "run", overwrite=True)
    assert (tmp_path / "run" / "tb").is_dir()
    run_experiment(tiny_experiment("fedavg", rounds=1), tmp_path / "run", overwrite=True)
    assert not (tmp_path / "run" / "tb").exists()  # curves of an earlier attempt are not this run's


def test_missing_package_names_the_install_command(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ConfigError) as e:
        tiny_experiment("fedavg", log={"tensorboard": True})
    msg = str(e.value)
    assert "log.tensorboard: the TensorBoard writer needs the tensorboard package, which is not installed here" in msg
    assert "pip install 'fedselect[tensorboard]'" in msg and "requirements-tensorboard.txt" in msg
    tiny_experiment("fedavg")  # off: nothing needed
    with pytest.raises(ConfigError, match=r"log: unknown log\(s\) \['wandb'\]"):
        tiny_experiment("fedavg", log="wandb")


def test_log_tensorboard_on_the_command_line(tmp_path):
    """`fedselect run CONFIG --log tensorboard` is `--set log.tensorboard=true`; another value is
    refused naming the allowed one."""
    import yaml
    from typer.testing import CliRunner

    from fedselect.cli import app

    doc = tiny_experiment("fedavg").model_dump(mode="json")
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump({k: doc[k] for k in ("name", "seed", "rounds", "clients_per_round", "data", "model", "train")}))
    res = CliRunner().invoke(app, ["run", str(cfg), "-o", str(tmp_path / "run"), "-q", "--log", "tensorboard"])
    assert res.exit_code == 0, res.output
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["log"]["tensorboard"] is True
    assert list((tmp_path / "run" / "tb").iterdir())
    res = CliRunner().invoke(app, ["run", str(cfg), "-o", str(tmp_path / "other"), "-q", "--log", "wandb"])
    assert res.exit_code != 0 and "--log 'wandb': allowed: 'tensorboard'" in res.output
