"""The IMU / MobiAct configs validate; MobiAct ones fail cleanly without the data; the
synthetic MobiAct-format config runs end to end through the core round loop."""

import json
from pathlib import Path

import pytest
import torch

from fedselect.config.load import load_config
from fedselect.config.overrides import apply_overrides
from fedselect.config.schema import parse_config
from fedselect.experiment.run import run_experiment
from fedselect.world.federation import build_federation

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
NAMES = ["imu-fedavg-gru", "imu-fedavg-fdcnn", "mobiact-fedavg-fall", "mobiact-fedavg-cefl8", "mobiact-synthetic-fedavg-fall"]


@pytest.mark.parametrize("name", NAMES)
def test_config_validates(name):
    cfg = load_config(CONFIGS / f"{name}.yaml")
    assert cfg.name == name and cfg.data.partition.scheme == "volunteer"
    assert cfg.model.name == ("fd_cnn" if "fdcnn" in name or "cefl8" in name else "gru")


@pytest.mark.parametrize("name", ["mobiact-fedavg-fall", "mobiact-fedavg-cefl8"])
def test_mobiact_configs_need_the_users_copy(name, tmp_path):
    cfg = load_config(CONFIGS / f"{name}.yaml", {"data.options.path": str(tmp_path / "MobiAct_Dataset_v2.0")})
    with pytest.raises(FileNotFoundError, match="Annotated Data"):
        build_federation(cfg)


def test_synthetic_config_runs_end_to_end(tmp_path):
    import yaml

    torch.set_num_threads(1)
    doc = yaml.safe_load((CONFIGS / "mobiact-synthetic-fedavg-fall.yaml").read_text())
    doc = apply_overrides(doc, {"rounds": 1, "model.options.hidden": 16})
    cfg = parse_config(doc, "test")
    fed = build_federation(cfg)
    assert fed.num_clients == 9 and fed.input_shape == (100, 6) and fed.num_classes == 2
    # every client is one training subject, none of the 3 test subjects
    subjects = [set(c.train.groups.tolist()) for c in fed.clients]
    assert all(len(s) == 1 for s in subjects)
    assert not set().union(*subjects) & set(fed.test_set.groups.tolist())
    summary = run_experiment(cfg, tmp_path / "run", federation=fed)
    assert summary["complete"] and 0.0 <= summary["final_f1_macro"] <= 1.0
    rows = (tmp_path / "run" / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 2  # header, round 0, round 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["dataset"] == "mobiact-synthetic"
