"""The GPU path (issue 39): stacked vs sequential training on CUDA, a whole run on CUDA against
the same run on CPU, every selector and algorithm that trains working on CUDA, and failures of
the device told apart from failures of clients.

Tests marked ``gpu`` need a CUDA device and are skipped without one (CI has none): run them with
``pytest -m gpu`` on a GPU machine (benchmarks/gpu_device_check.sh runs them with the GPU
benchmark). The other tests here check on CPU what can be checked there: ``--device cuda``
without CUDA is a clear error, and a CUDA failure (simulated) becomes a ``DeviceError`` naming
the device and what to do.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from fedselect.common.seeding import torch_rng
from fedselect.fl.local.device_errors import DeviceError, device_failure, is_device_failure, on_device
from fedselect.fl.local.pool import ClientData, ClientTrainer, ModelSpec, TrainJob
from fedselect.fl.local.train import TrainConfig
from fedselect.world.data.catalog import load_dataset
from fedselect.world.models import build_model

ROOT = Path(__file__).resolve().parents[2]
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device: pytest -m gpu on a GPU machine")

SPEC = ModelSpec("mnist_cnn", (1, 28, 28), 10)
SIZES = [70, 45, 96, 33]  # last batches of 6, 13, 0 and 1 samples (as tests/fl/test_pool.py)
#: the tolerances of the CPU tests of the stacked path (tests/fl/test_pool.py, SGD)
RTOL, ATOL = 1e-4, 2e-5


@pytest.fixture(scope="module")
def data():
    train, _ = load_dataset("mnist-embedded")
    perm = np.random.default_rng(5).permutation(len(train))
    starts = np.cumsum([0] + SIZES)
    return ClientData.from_arrays(train.x, train.y, [perm[starts[i] : starts[i + 1]] for i in range(len(SIZES))], 10)


@pytest.fixture(scope="module")
def init_state():
    return build_model(SPEC.name, SPEC.input_shape, 10, generator=torch_rng(1, "model-init")).state_dict()


def jobs_for(state, epochs=(1, 2, 1, 3)):
    return [TrainJob(k, state, epochs[k], seed=7, stream=f"train/3/{k}", sample_losses=True) for k in range(len(SIZES))]


# ================================================================== on CPU: device errors
def test_cuda_without_cuda_is_a_clear_error_naming_the_device(tmp_path, tiny_cfg_doc):
    if CUDA:
        pytest.skip("CUDA is available here")
    from fedselect.cli import app

    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(tiny_cfg_doc))
    res = CliRunner().invoke(app, ["run", str(cfg), "--device", "cuda", "-o", str(tmp_path / "r"), "-q"])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "device 'cuda': no CUDA device is available here" in text
    assert f"PyTorch {torch.__version__}" in text
    assert "--device cpu" in text and "nvidia-smi" in text
    assert not (tmp_path / "r" / "metrics.csv").exists()


def test_device_failure_names_the_device_and_what_to_do():
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB")
    err = device_failure(oom, "cuda:0", "training 50 clients stacked")
    assert isinstance(err, DeviceError) and isinstance(err, RuntimeError)  # the command line prints RuntimeErrors
    msg = str(err)
    assert msg.startswith("training 50 clients stacked on cuda:0")
    assert "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" in msg
    assert "--device cpu" in msg and "clients_per_round" in msg and "batch_size" in msg
    crash = RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be reported later")
    msg = str(device_failure(crash, torch.device("cuda", 1), "evaluating 1 model(s) on 'test'"))
    assert msg.startswith("evaluating 1 model(s) on 'test' on cuda:1")
    assert "an illegal memory access was encountered" in msg and "kernel errors might" not in msg  # its first line
    assert "CUDA_LAUNCH_BLOCKING=1" in msg and "nvidia-smi" in msg and "--device cpu" in msg
    assert is_device_failure(RuntimeError("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"))
    assert is_device_failure(RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( ... )`"))
    # a bug that only names the device is no failure of it
    assert not is_device_failure(RuntimeError("Expected all tensors to be on the same device, but found cuda:0 and cpu!"))
    # not the device's: a bug, a shape error, a client's failure, or anything on the CPU
    assert device_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"), "cuda:0", "x") is None
    assert device_failure(ValueError("CUDA-looking text in a ValueError"), "cuda:0", "x") is None
    assert device_failure(oom, "cpu", "x") is None
    assert not is_device_failure(err)  # told once


def test_on_device_chains_the_original_and_lets_other_errors_pass():
    oom = torch.OutOfMemoryError("CUDA out of memory.")
    with pytest.raises(DeviceError, match=r"^training 2 clients stacked on cuda:0") as e:
        with on_device("cuda:0", "training 2 clients stacked"):
            raise oom
    assert e.value.__cause__ is oom
    with pytest.raises(KeyError):
        with on_device("cuda:0", "x"):
            raise KeyError("not the device's")
    with pytest.raises(torch.OutOfMemoryError):  # on the CPU errors keep their meaning
        with on_device("cpu", "x"):
            raise oom


@pytest.mark.parametrize("batched", [True, False])
def test_trainer_on_a_gpu_raises_a_device_error_for_a_cuda_failure(data, init_state, monkeypatch, batched):
    """A trainer working on a GPU (simulated: its device set to cuda:0 after building it on CPU)
    whose training hits a CUDA failure stops with a DeviceError naming the device, the stacked
    or sequential path and what to do, instead of reporting every client failed."""
    import fedselect.fl.local.batched as stacked

    cfg = TrainConfig(epochs=1, batch_size=32, lr=0.05, momentum=0.9)

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.50 GiB")

    monkeypatch.setattr(stacked, "train_batched", oom)
    jobs = jobs_for(init_state)[:2]
    with ClientTrainer(SPEC, data, cfg, workers=0, batched=batched, channels_last=False) as tr:
        monkeypatch.setattr(tr, "_train_here", oom)
        with pytest.raises(torch.OutOfMemoryError):  # on the CPU: unchanged
            tr.train(jobs)
        tr.device = torch.device("cuda:0")
        how = "stacked" if batched else "one after another"
        with pytest.raises(DeviceError, match=rf"^training 2 clients {how} on cuda:0 .*--device cpu"):
            tr.train(jobs)


def test_stacked_path_lets_a_gpu_out_of_memory_through(data, init_state, monkeypatch):
    """Host memory exhausted by a stack fails its clients (as MemoryError in a worker does); a
    GPU's out-of-memory is no client's failure and propagates (ClientTrainer makes it a DeviceError)."""
    import fedselect.fl.local.batched as stacked

    cfg = TrainConfig(epochs=1, batch_size=32, lr=0.05, momentum=0.9)
    jobs = jobs_for(init_state)[:2]

    def host(*args, **kwargs):
        raise MemoryError("host memory")

    monkeypatch.setattr(stacked, "_train_stack", host)
    res = stacked.train_batched(SPEC.build(), data, jobs, cfg)
    assert [r.error for r in res] == ["MemoryError: host memory"] * 2 and all(r.state is None for r in res)

    def gpu_oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory.")

    monkeypatch.setattr(stacked, "_train_stack", gpu_oom)
    with pytest.raises(torch.OutOfMemoryError):
        stacked.train_batched(SPEC.build(), data, jobs, cfg)


# ================================================================== on a GPU
@pytest.fixture
def full_fp32():
    """Float32 arithmetic on the GPU: PyTorch runs convolutions in TF32 by default
    (``torch.backends.cudnn.allow_tf32``), about 1e-3 relative, which the CPU tolerances of the
    stacked path (1e-4) would not cover; the whole-run tests keep the defaults users get."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize(
    "spec,optimizer,momentum,wd",
    [(SPEC, "sgd", 0.9, 0.0), (SPEC, "sgd", 0.0, 1e-3), (ModelSpec("mlp", (1, 28, 28), 10, {"hidden": [32]}), "adam", 0.0, 1e-4)],
)
@pytest.mark.gpu
@needs_cuda
@pytest.mark.usefixtures("full_fp32")
def test_stacked_equals_sequential_on_cuda(data, spec, optimizer, momentum, wd):
    """One round of 4 clients (1-3 epochs, ragged last batches) on CUDA: stacked (vmap(grad))
    and sequential agree with each other and with the CPU's sequential path within the CPU
    tests' tolerances (weights rtol 1e-4, atol 2e-5; Adam atol 2e-4), losses and Oort's
    sample-loss statistics rel 1e-4."""
    cfg = TrainConfig(
        epochs=1, batch_size=32, lr=0.01 if optimizer == "adam" else 0.05, momentum=momentum, optimizer=optimizer, weight_decay=wd
    )
    init = build_model(spec.name, spec.input_shape, 10, generator=torch_rng(1, "model-init"), **spec.options).state_dict()
    jobs = jobs_for(init)
    with ClientTrainer(spec, data, cfg, workers=0, channels_last=False) as cpu:  # local_train's arithmetic, bit for bit
        ref = cpu.train(jobs)
    runs = {}
    for batched in (True, False):
        with ClientTrainer(spec, data, cfg, workers=0, device="cuda", batched=batched, channels_last=False) as tr:
            assert tr.device.type == "cuda" and tr.batched is batched
            runs[batched] = tr.train(jobs)
    atol = 2e-4 if optimizer == "adam" else ATOL
    for stacked, seq, cpu in zip(runs[True], runs[False], ref):
        for r in (stacked, seq):
            assert r.error is None
            assert r.loss == pytest.approx(cpu.loss, rel=1e-4)
            assert r.num_sample_losses == cpu.num_sample_losses
            assert r.sum_sq_sample_loss == pytest.approx(cpu.sum_sq_sample_loss, rel=1e-4)
            for k in cpu.state:
                assert r.state[k].device.type == "cpu"
                torch.testing.assert_close(r.state[k], cpu.state[k], rtol=RTOL, atol=atol)
        for k in cpu.state:
            torch.testing.assert_close(stacked.state[k], seq.state[k], rtol=RTOL, atol=atol)
        assert max(float((cpu.state[k] - init[k]).abs().max()) for k in init) > 5e-3  # the models did train


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _finite(v: str) -> bool:
    try:
        return math.isfinite(float(v))
    except ValueError:
        return False


@pytest.mark.gpu
@needs_cuda
def test_whole_run_on_cuda_matches_the_cpu_run(tmp_path):
    """``fedselect run --device cuda`` of the paper's FedAvg (configs/mnist-fedavg.yaml: full
    MNIST, N 100, U 10, E 5, B 50, the CNN) for 5 rounds: the same accuracy as ``--device cpu``
    within 0.5 points, every round; the GPU run trains stacked (PyTorch's default TF32 included)."""
    from fedselect.cli import app
    from fedselect.world.data.datasets import DatasetNotFoundError

    try:
        load_dataset("mnist")
    except (DatasetNotFoundError, FileNotFoundError) as e:
        pytest.skip(f"full MNIST is not installed here ({e})")
    acc = {}
    for device in ("cuda", "cpu"):
        out = tmp_path / device
        args = ["run", str(ROOT / "configs" / "mnist-fedavg.yaml"), "--rounds", "5", "--device", device, "-o", str(out), "-q"]
        res = CliRunner().invoke(app, [*args, "--set", "checkpoint_every=0"])
        assert res.exit_code == 0, res.output
        saved = yaml.safe_load((out / "config.yaml").read_text())
        assert saved["train"]["device"] == device
        acc[device] = [float(r["accuracy"]) for r in _metrics(out)]
    assert len(acc["cuda"]) == len(acc["cpu"]) == 6  # round 0 and rounds 1-5
    assert acc["cuda"][0] == pytest.approx(acc["cpu"][0], abs=1e-4)  # the same initial model
    assert acc["cpu"][-1] > 0.5  # the comparison is between trained models
    for t, (g, c) in enumerate(zip(acc["cuda"], acc["cpu"])):
        assert abs(g - c) <= 0.005, f"round {t}: accuracy {g:.4f} on CUDA, {c:.4f} on CPU"


#: every method whose selector or algorithm trains beyond the round's clients, or changes their
#: local objective: Oort (per-sample losses), FLASH-RL and FAVOR (the warm-up of all clients and
#: the PCA), CEFL (the warm-up, the clusters, the transfer epochs), DivFL (warm-up gradients),
#: Power-of-Choice (loss probes), budgeted online selection (candidate training), FedProx and
#: SCAFFOLD (their gradient terms: the sequential path), FedAvg as the reference
TRAINING_METHODS = (
    "fedavg",
    "oort",
    "flashrl",
    "favor",
    "cefl",
    "divfl",
    "power_of_choice",
    "budgeted_online",
    "fedprox",
    "scaffold",
)


def _golden_doc(method: str) -> dict:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from golden import configs
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return configs(method)["mlp"]  # N 6, U 2, 5 rounds, an MLP, options that exercise each method's state


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("method", TRAINING_METHODS)
def test_every_training_method_works_on_cuda(tmp_path, method):
    """The tiny golden config of each method (tools/golden.py) on CUDA and on CPU: the CUDA run
    completes, every value that is finite on CPU is finite on CUDA (accuracies, losses, the
    selector's own columns: rewards, TD losses, utilities), the summary's preparation figures
    (FLASH-RL's and FAVOR's PCA) agree, and where round 1 chose the same clients its accuracy
    agrees within 2 points."""
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.experiment.run import run_experiment

    runs = {}
    for device in ("cuda", "cpu"):
        doc = _golden_doc(method)
        doc["train"] = dict(doc["train"], device=device)
        summary = run_experiment(parse_experiment(doc), tmp_path / device, workers=0)
        runs[device] = (_metrics(tmp_path / device), summary)
    (gpu_rows, gpu_sum), (cpu_rows, cpu_sum) = runs["cuda"], runs["cpu"]
    assert len(gpu_rows) == len(cpu_rows)
    for g, c in zip(gpu_rows, cpu_rows):
        lost = [k for k in c if _finite(c[k]) and not _finite(g[k])]
        assert not lost, f"round {c['round']}: finite on CPU, not on CUDA: {lost}"
    if gpu_rows[1]["selected"] == cpu_rows[1]["selected"]:
        assert float(gpu_rows[1]["accuracy"]) == pytest.approx(float(cpu_rows[1]["accuracy"]), abs=0.02)
    for key in ("pca_components", "pca_explained_variance"):
        if key in cpu_sum.get("prepare", {}):
            assert gpu_sum["prepare"][key] == pytest.approx(cpu_sum["prepare"][key], rel=1e-2, abs=1e-3)


@pytest.mark.gpu
@needs_cuda
def test_a_real_cuda_out_of_memory_is_a_device_error():
    dev = torch.device("cuda", torch.cuda.current_device())
    with pytest.raises(DeviceError, match=rf"on cuda:{dev.index} \(.+\) failed \(OutOfMemoryError"):
        with on_device(dev, "allocating 4 PiB"):
            torch.empty(2**50, dtype=torch.float32, device=dev)
    torch.cuda.empty_cache()
