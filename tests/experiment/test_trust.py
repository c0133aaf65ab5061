"""Trustworthy results (issue 12): a changed config is never mixed with old results, a budget
extension never silently differs from a fresh run, every phase's cost is counted, and summaries
agree with themselves."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from fedselect.cli import app
from fedselect.common.files import read_csv_rows
from fedselect.experiment.metrics import PER_ROUND_KEYS
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import run_experiment
from fedselect.study.compare import parse_compare, run_comparison


def invoke(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    return r.exit_code, " ".join(r.output.split())


def snapshot(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def small(**over):
    d = {
        "name": "trust",
        "seed": 0,
        "method": "fedavg",
        "rounds": 1,
        "clients_per_round": 2,
        "data": {"dataset": "mnist-embedded", "num_clients": 4, "partition": {"scheme": "dirichlet"}},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05},
    }
    d.update(over)
    return d


def base(**over):
    """small() as the base of a comparison or sweep (whose runs take their name and seed from it)."""
    return {k: v for k, v in small(**over).items() if k not in ("name", "seed")}


# ---------------------------------------------------------------- 1. a changed config is never mixed with old results
def test_resume_refuses_a_partition_default_changed_in_config_yaml(tmp_path):
    """The example: alpha left to its default, then alpha 0.05 written into config.yaml."""
    run = tmp_path / "run"
    run_experiment(parse_experiment(small()), run)
    doc = yaml.safe_load((run / "config.yaml").read_text())
    assert doc["data"]["partition"] == {
        "scheme": "dirichlet",
        "alpha": 0.5,
        "min_size": 10,
        "max_attempts": 10000,
        "max_seconds": 30.0,
    }
    doc["data"]["partition"]["alpha"] = 0.05
    (run / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    before = snapshot(run)
    code, text = invoke("run", "--resume", run, "--rounds", "2", "-q")
    assert code == 2
    assert "data.partition.alpha (0.5 in the saved run, 0.05 now)" in text and "only `rounds` may change on resume" in text
    assert snapshot(run) == before  # refused before anything was written


def test_resume_sees_a_key_present_on_one_side_only(tmp_path):
    run = tmp_path / "run"
    run_experiment(parse_experiment(small()), run)
    doc = yaml.safe_load((run / "config.yaml").read_text())
    del doc["data"]["options"]["test_size"]  # back to the loader's default: the resolved configs are equal
    doc["model"]["options"]["hidden"] = [8]
    (run / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    assert invoke("run", "--resume", run, "--rounds", "2", "-q")[0] == 0
    doc = yaml.safe_load((run / "config.yaml").read_text())
    doc["selector"]["options"] = {"latency": "actual"}  # an option the run never had
    (run / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    code, text = invoke("run", "--resume", run, "-q")
    assert code == 2 and "selector.options" in text


def test_compare_resume_and_report_refuse_runs_of_another_config(tmp_path):
    doc = {
        "name": "cmp",
        "base": base(rounds=2),
        "methods": [{"label": "A", "method": "fedavg"}, {"label": "B", "method": "fastest"}],
    }
    out = run_comparison(parse_compare(doc), tmp_path / "c")
    # someone edits a finished run's config (or the run was made by another config): compare --resume and report refuse
    cfg = out / "runs" / "B-s0" / "config.yaml"
    d = yaml.safe_load(cfg.read_text())
    d["train"]["lr"] = 0.1
    cfg.write_text(yaml.safe_dump(d, sort_keys=False))
    before = snapshot(out)
    code, text = invoke("compare", "--resume", out, "-q")
    assert code == 2 and "runs/B-s0: train.lr (0.1 in the saved run, 0.05 now)" in text
    code, text = invoke("report", out)
    assert code == 2 and "train.lr (0.1 in the saved run, 0.05 now)" in text and "would mix" in text
    assert snapshot(out) == before


def test_sweep_refuses_finished_runs_of_another_config(tmp_path):
    doc = {"name": "sw", "base": base(), "methods": [{"label": "A", "method": "fedavg"}], "grid": {"train.lr": [0.05]}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert invoke("sweep", path, "-o", tmp_path / "s")[0] == 0
    doc["base"]["train"]["batch_size"] = 16  # a changed base: the finished run no longer matches
    path.write_text(yaml.safe_dump(doc))
    before = snapshot(tmp_path / "s")
    code, text = invoke("sweep", path, "-o", tmp_path / "s")
    assert code == 2 and "train.batch_size (32 in the saved run, 16 now)" in text
    assert snapshot(tmp_path / "s") == before


# ---------------------------------------------------------------- 2. extending a budget-dependent state
def test_extending_flashrl_with_the_default_epsilon_schedule_is_refused(tmp_path):
    run = tmp_path / "run"
    opts = {"warmup_epochs": 1, "rl_batch_size": 2, "hidden": 16, "pca_components": 3}
    run_experiment(parse_experiment(small(method="flashrl", rounds=2, method_options=opts)), run)
    before = snapshot(run)
    code, text = invoke("run", "--resume", run, "--rounds", "4", "-q")
    assert code == 2
    assert "cannot resume" in text and "with rounds=4 (it was planned for 2)" in text
    assert "epsilon decays over all T rounds (eps_decay_rounds unset: 2 here, 4 in a fresh run)" in text
    assert "round 2's transition is in the replay memory as terminal" in text
    assert snapshot(run) == before
    # a run stopped before its last round, with an explicit schedule, extends exactly
    opts["eps_decay_rounds"] = 3
    cfg2, cfg4 = (
        parse_experiment(small(method="flashrl", rounds=2, method_options=opts)),
        parse_experiment(small(method="flashrl", rounds=4, method_options=opts)),
    )
    run_experiment(cfg4, tmp_path / "fresh")
    run_experiment(cfg2, tmp_path / "short", stop_after=1)
    assert invoke("run", "--resume", tmp_path / "short", "--rounds", "4", "-q")[0] == 0
    assert (tmp_path / "fresh" / "metrics.csv").read_bytes() == (tmp_path / "short" / "metrics.csv").read_bytes()
    eps = [float(r["epsilon"]) for r in read_csv_rows(tmp_path / "fresh" / "metrics.csv")[1:]]
    assert eps == pytest.approx([1.0, 0.55, 0.2, 0.2])  # round 1 uniform, then 0.9 -> 0.2 over 3 rounds


def test_extending_after_an_evaluation_forced_by_the_last_round_is_refused(tmp_path):
    run = tmp_path / "run"
    run_experiment(parse_experiment(small(rounds=3, eval_every=2)), run)  # round 3 evaluated only because it is the last
    code, text = invoke("run", "--resume", run, "--rounds", "4", "-q")
    assert code == 2 and "round 3 was evaluated because it was the last" in text


def test_budgeted_online_reruns_refuse_extension(tmp_path):
    run = tmp_path / "run"
    run_experiment(parse_experiment(small(method="online_random", rounds=2, method_options={"rerun_every": 1})), run)
    code, text = invoke("run", "--resume", run, "--rounds", "3", "-q")
    assert code == 2 and "the selection runs and the clients' availability over time were drawn before round 1 for T = 2" in text


# ---------------------------------------------------------------- 5. config-only checks come first
def test_config_checks_come_before_any_data_is_loaded(tmp_path, monkeypatch):
    import fedselect.world.federation as federation

    def refuse(*a, **k):
        raise AssertionError("data loaded before the config was checked")

    monkeypatch.setattr(federation, "load_dataset", refuse)
    code, text = invoke("run", "--set", "method=cefl", "--set", "method_options.clusters=30", "-o", tmp_path / "r", "-q")
    assert code == 2 and "clusters (K = 30) exceeds the number of clients N = 20" in text
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------- 8. every phase's cost is counted
from fedselect.config.presets import PRESETS  # noqa: E402
from support.tiny import method_doc  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(PRESETS))
def test_summary_sums_its_phases(tmp_path, method):
    """prepare + rounds + finish = the summary's end-to-end latency and traffic; best >= final."""
    s = run_experiment(parse_experiment(method_doc(method, rounds=2)), tmp_path / "r")
    rows = read_csv_rows(tmp_path / "r" / "metrics.csv")
    ph = s["phases"]
    assert ph["prepare"]["latency_s"] == pytest.approx(float(rows[0]["round_latency_s"]))
    assert ph["prepare"]["latency_s"] + ph["rounds"]["latency_s"] == pytest.approx(float(rows[-1]["e2e_latency_s"]))
    assert s["e2e_latency_s"] == pytest.approx(ph["prepare"]["latency_s"] + ph["rounds"]["latency_s"] + ph["finish"]["latency_s"])
    up = sum(p["upload_mb"] for p in ph.values())
    down = sum(p["download_mb"] for p in ph.values())
    assert s["upload_mb"] == pytest.approx(up) and s["download_mb"] == pytest.approx(down)
    assert s["communication_mb"] == pytest.approx(up + down)
    assert ph["rounds"]["upload_mb"] == pytest.approx(sum(int(r["upload_bytes"]) for r in rows[1:]) / 1e6)
    if method == "cefl":  # the rounds scored members with their leader's model: nothing is read off them
        assert s["round_scores"] and all(s[k] is None for k in PER_ROUND_KEYS) and s["final_accuracy"] is not None
    else:
        assert s["best_accuracy"] >= s["final_accuracy"] and "round_scores" not in s
    json.loads((tmp_path / "r" / "summary.json").read_text())


@pytest.mark.slow
def test_cefl_transfer_is_charged_and_only_its_final_figures_are_reported(tmp_path):
    """The example: CEFL on imu-watch bitmaps, 8 volunteer clients, K 2, warm-up 2 epochs, 5 rounds,
    transfer up to 30 epochs with patience 3, seed 0."""
    doc = {
        "name": "cefl-imu",
        "seed": 0,
        "method": "cefl",
        "rounds": 5,
        "data": {
            "dataset": "imu-watch",
            "options": {"task": "activity", "representation": "bitmap", "num_test_subjects": 2},
            "num_clients": 8,
            "partition": {"scheme": "volunteer"},
            "holdout_fraction": 0.25,
        },
        "model": {"name": "fd_cnn"},
        "train": {"local_epochs": 2, "batch_size": 32, "lr": 0.001, "optimizer": "adam"},
        "method_options": {"clusters": 2, "warmup_epochs": 2, "transfer_epochs": 30, "patience": 3},
        "checkpoint_every": 0,
    }
    s = run_experiment(parse_experiment(doc), tmp_path / "r")
    rows = read_csv_rows(tmp_path / "r" / "metrics.csv")
    from fedselect.world.federation import build_federation
    from fedselect.world.system import compute_time, transmit_time

    fed = build_federation(parse_experiment(doc))
    draws = fed.fleet.draw(6)
    full_bits = sum(v.numel() for v in fed.new_model().state_dict().values()) * 32  # every entry, float32
    members = {int(k): e for k, e in s["transfer_epochs"].items()}
    expected = max(
        compute_time(e, fed.client_bits(m), 20.0, fed.fleet.cores[m], draws.freq_mhz[m])
        + transmit_time(full_bits, draws.bandwidth_mbps[m])
        for m, e in members.items()
    )
    assert s["phases"]["finish"]["latency_s"] == pytest.approx(expected) and expected > 0
    assert s["transfer_latency_s"] == pytest.approx(expected)
    assert s["e2e_latency_s"] == pytest.approx(float(rows[-1]["e2e_latency_s"]) + expected)
    assert s["phases"]["finish"]["download_mb"] == pytest.approx(s["communication_parts_mb"]["part4_mb"])
    assert s["communication_mb"] == pytest.approx(s["communication_parts_mb"]["total_mb"])
    # members were scored with their leader's model during the rounds: no best / last-k / to-target
    assert s["best_accuracy"] is None and s["last_k_accuracy"] is None and s["rounds_to_target"] is None
    assert s["final_accuracy"] == pytest.approx(float(np.mean(s["client_accuracy"])))
