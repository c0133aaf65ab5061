"""Parallel client training (fedselect.fl.local.pool), the stacked torch.func path (fl.local.batched),
sample-loss statistics of local_train, and the evaluation chunking.

Real data: the embedded MNIST. Every pool test is bounded in time (SIGALRM watchdog, and the
trainer's own start/job timeouts), so a hung worker fails the test instead of hanging it.
"""

from __future__ import annotations

import math
import os
import signal
import time

import numpy as np
import pytest
import torch
from torch import nn

from fedselect.common.seeding import torch_rng
from fedselect.fl.evaluate import evaluate
from fedselect.fl.local.batched import supports_batched, train_batched
from fedselect.fl.local.placement import torch_threads, usable_cores
from fedselect.fl.local.pool import ClientData, ClientTrainer, ModelSpec, TrainJob
from fedselect.fl.local.train import TrainConfig, local_train
from fedselect.world.data.catalog import load_dataset
from fedselect.world.models import build_model

SPEC = ModelSpec("mnist_cnn", (1, 28, 28), 10)
CFG = TrainConfig(epochs=1, batch_size=32, lr=0.05, momentum=0.9)
SIZES = [70, 45, 96, 33]  # different sizes: last batches of 6, 13, 0 and 1 samples


@pytest.fixture(scope="module")
def mnist():
    return load_dataset("mnist-embedded")


@pytest.fixture(scope="module")
def data(mnist):
    train, _ = mnist
    rng = np.random.default_rng(5)
    perm = rng.permutation(len(train))
    starts = np.cumsum([0] + SIZES)
    return ClientData.from_arrays(train.x, train.y, [perm[starts[i] : starts[i + 1]] for i in range(len(SIZES))], 10)


@pytest.fixture(scope="module")
def init_state():
    return build_model(SPEC.name, SPEC.input_shape, 10, generator=torch_rng(1, "model-init")).state_dict()


@pytest.fixture(scope="module")
def test_set(mnist):
    train, _ = mnist  # 2,500 rows: chunks of 1000, 1000 and 500
    return train.subset(np.arange(1500, 4000), "mnist-embedded/eval2500")


@pytest.fixture(scope="module")
def pool2(data, test_set):
    with ClientTrainer(SPEC, data, CFG, workers=2, eval_sets={"test": test_set}, start_timeout_s=120, job_timeout_s=60) as tr:
        yield tr


@pytest.fixture
def watchdog():
    """Fail (not hang) a test that runs past 120 s."""

    def boom(signum, frame):
        raise TimeoutError("test ran past its 120 s watchdog")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def jobs_for(state, epochs=(1, 2, 1, 3), sample_losses=True):
    return [TrainJob(k, state, epochs[k], seed=7, stream=f"train/3/{k}", sample_losses=sample_losses) for k in range(len(SIZES))]


def sequential(data, state, jobs, channels_last=True, cfg=CFG):
    """The reference: local_train on each client's own ArrayDataset, one torch thread."""
    model = build_model(SPEC.name, SPEC.input_shape, 10, generator=torch_rng(0, "other"))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    out = []
    with torch_threads(1):
        for j in jobs:
            model.load_state_dict(state)
            stats = {}
            loss = local_train(
                model,
                data.client_dataset(j.client_id),
                cfg,
                torch_rng(j.seed, j.stream),
                epochs=j.epochs,
                trainable=None if j.trainable is None else set(j.trainable),
                stats=stats,
            )
            out.append(({k: v.detach().clone() for k, v in model.state_dict().items()}, loss, stats))
    return out


def assert_same(results, ref):
    for r, (state, loss, stats) in zip(results, ref):
        assert r.error is None
        assert r.loss == loss
        assert r.sum_sq_sample_loss == stats["sum_sq_sample_loss"]
        assert r.num_sample_losses == stats["num_sample_losses"]
        assert state.keys() == r.state.keys()
        for k in state:
            assert torch.equal(state[k], r.state[k]), k
            assert r.state[k].is_contiguous()


# ------------------------------------------------------------------ determinism
def test_pool_matches_sequential_for_0_1_2_workers(data, init_state, pool2, watchdog):
    jobs = jobs_for(init_state)
    ref = sequential(data, init_state, jobs)
    assert_same(pool2.train(jobs), ref)
    with ClientTrainer(SPEC, data, CFG, workers=1, start_timeout_s=120) as one:
        assert_same(one.train(jobs), ref)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the calling process's thread count must not matter
    try:
        with ClientTrainer(SPEC, data, CFG, workers=0) as here:
            assert_same(here.train(jobs), ref)
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    # sample counts: epochs x n_k
    assert [r[2]["num_sample_losses"] for r in ref] == [e * n for e, n in zip((1, 2, 1, 3), SIZES)]


def test_standard_layout_is_bit_identical_to_local_train(data, init_state, watchdog):
    jobs = jobs_for(init_state)[:2]
    ref = sequential(data, init_state, jobs, channels_last=False)
    with ClientTrainer(SPEC, data, CFG, workers=0, channels_last=False) as here:
        assert_same(here.train(jobs), ref)


def test_from_datasets_and_from_arrays_agree(data, init_state):
    ds = [data.client_dataset(k) for k in range(len(SIZES))]
    other = ClientData.from_datasets(ds)
    assert other.num_clients == len(SIZES) and [other.num_samples(k) for k in range(len(SIZES))] == SIZES
    jobs = jobs_for(init_state)[:2]
    with ClientTrainer(SPEC, ds, CFG, workers=0) as a, ClientTrainer(SPEC, data, CFG, workers=0) as b:
        for ra, rb in zip(a.train(jobs), b.train(jobs)):
            assert ra.loss == rb.loss and all(torch.equal(ra.state[k], rb.state[k]) for k in ra.state)


def test_zero_epochs_return_the_start_state(data, init_state, pool2):
    r = pool2.train([TrainJob(2, init_state, 0, 1, "x")])[0]
    assert r.error is None and math.isnan(r.loss) and r.num_sample_losses == 0
    assert all(torch.equal(r.state[k], init_state[k]) for k in init_state)


def test_frozen_parameters_stay_put(data, init_state, pool2):
    keep = frozenset({"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"})
    r = pool2.train([TrainJob(0, init_state, 1, 1, "y", trainable=keep)])[0]
    assert r.error is None
    for k in init_state:
        assert torch.equal(r.state[k], init_state[k]) == (k not in keep), k


# ------------------------------------------------------------------ sample losses
def test_sample_loss_statistics_hand_computed(data):
    """Plain PyTorch loop, written out: same batches, same SGD, per-sample losses squared."""
    spec = ModelSpec("mlp", (1, 28, 28), 10, {"hidden": [16]})
    cfg = TrainConfig(epochs=2, batch_size=32, lr=0.1, momentum=0.5)
    model = spec.build()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ds = data.client_dataset(1)  # 45 samples: batches of 32 and 13
    g = torch_rng(4, "s")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    x, y = torch.from_numpy(ds.x), torch.from_numpy(ds.y)
    sq, losses = 0.0, []
    for _ in range(2):
        perm = torch.randperm(45, generator=g)
        for i in range(0, 45, 32):
            b = perm[i : i + 32]
            opt.zero_grad()
            out = model(x[b])
            per = nn.functional.cross_entropy(out, y[b], reduction="none")
            sq += float((per.detach() ** 2).sum())
            loss = per.mean()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    other = spec.build()
    other.load_state_dict(state)
    stats = {}
    loss = local_train(other, ds, cfg, torch_rng(4, "s"), stats=stats)
    assert stats["num_sample_losses"] == 90
    assert stats["sum_sq_sample_loss"] == pytest.approx(sq, rel=1e-6)
    assert loss == pytest.approx(sum(losses) / len(losses), rel=1e-6)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(other.state_dict()[k], v, rtol=1e-5, atol=1e-6)
    # asking for the statistics does not change the weights by a single bit
    plain = spec.build()
    plain.load_state_dict(state)
    assert local_train(plain, ds, cfg, torch_rng(4, "s")) == loss
    assert all(torch.equal(plain.state_dict()[k], other.state_dict()[k]) for k in state)


# ------------------------------------------------------------------ failures
def test_killed_worker_reports_error_and_pool_recovers(data, init_state, pool2, watchdog):
    jobs = jobs_for(init_state)
    ref = sequential(data, init_state, jobs)
    crashing = list(jobs)
    crashing[1] = TrainJob(1, init_state, 2, seed=7, stream="train/3/1", crash_after_batches=2)
    pids = pool2.worker_pids()
    res = pool2.train(crashing)
    assert res[1].error is not None and "SIGKILL" in res[1].error and res[1].state is None and math.isnan(res[1].loss)
    assert_same([res[0], res[2], res[3]], [ref[0], ref[2], ref[3]])
    assert len(set(pool2.worker_pids()) - set(pids)) == 1  # exactly one worker was replaced
    # an idle worker killed from outside is replaced before the next call
    os.kill(pool2.worker_pids()[0], signal.SIGKILL)
    time.sleep(0.2)
    assert_same(pool2.train(jobs), ref)


def test_job_timeout_kills_and_reports(data, init_state, watchdog):
    with ClientTrainer(SPEC, data, CFG, workers=1, job_timeout_s=3.0, start_timeout_s=120) as tr:
        t0 = time.monotonic()
        ok = TrainJob(1, init_state, 1, 7, "train/3/1", sample_losses=True)
        res = tr.train([TrainJob(0, init_state, 100000, 1, "forever"), ok])
        assert time.monotonic() - t0 < 60
        assert "job_timeout_s" in res[0].error and res[1].error is None
        assert_same([res[1]], sequential(data, init_state, [ok]))


def test_in_process_crash_drill_is_reported(data, init_state):
    with ClientTrainer(SPEC, data, CFG, workers=0) as tr:
        r = tr.train([TrainJob(0, init_state, 1, 1, "z", crash_after_batches=1)])[0]
    assert r.error is not None and "fault drill" in r.error and r.state is None


def test_bad_arguments(data, init_state):
    with pytest.raises(ValueError, match="workers"):
        ClientTrainer(SPEC, data, CFG, workers=-1)
    with pytest.raises(ValueError, match="device"):
        ClientTrainer(SPEC, data, CFG, workers=0, device="tpu")
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="eval_threads must be an integer >= 1"):
            ClientTrainer(SPEC, data, CFG, workers=0, eval_threads=bad)
    with ClientTrainer(SPEC, data, CFG, workers=0) as tr:
        with pytest.raises(ValueError, match="client_id 9"):
            tr.train([TrainJob(9, init_state, 1, 1, "a")])
        with pytest.raises(ValueError, match="missing"):
            tr.train([TrainJob(0, {"fc2.bias": init_state["fc2.bias"]}, 1, 1, "a")])
        with pytest.raises(ValueError, match=r"fc2.bias \(9,\)"):
            tr.evaluate(dict(init_state, **{"fc2.bias": torch.zeros(9)}))
        with pytest.raises(KeyError, match="registered"):
            tr.evaluate(init_state, "nope")
        with pytest.raises(ValueError, match="fc9.weight"):
            tr.train([TrainJob(0, init_state, 1, 1, "a", trainable=frozenset({"fc9.weight"}))])
    with pytest.raises(ValueError, match="batched=True"):
        ClientTrainer(SPEC, data, CFG, workers=2, batched=True)
    with pytest.raises(RuntimeError, match="closed"):
        tr.train([])
    assert usable_cores() >= 1


# ------------------------------------------------------------------ evaluation
def test_parallel_evaluation_is_chunked_like_evaluate(init_state, test_set, pool2, data, watchdog):
    model = build_model(SPEC.name, SPEC.input_shape, 10)
    model.load_state_dict(init_state)
    cl = build_model(SPEC.name, SPEC.input_shape, 10).to(memory_format=torch.channels_last)
    cl.load_state_dict(init_state)
    want = evaluate(cl, test_set, forward_batch=250)
    assert pool2.evaluate(init_state) == want
    with ClientTrainer(SPEC, data, CFG, workers=0, eval_sets={"test": test_set}) as here:
        assert here.evaluate(init_state) == want
    # the chunks on threads of this process (the Flower server's evaluation), each as in a worker
    with ClientTrainer(SPEC, data, CFG, workers=0, eval_sets={"test": test_set}, eval_threads=3) as here:
        assert here.evaluate(init_state) == want
        trained = here.train(jobs_for(init_state)[:2])
        assert here.evaluate_many([r.state for r in trained]) == pool2.evaluate_many([r.state for r in trained])
    # standard layout, one forward per 1000-row chunk: exactly today's evaluate()
    with ClientTrainer(
        SPEC, data, CFG, workers=0, eval_sets={"test": test_set}, channels_last=False, eval_forward_batch=1000
    ) as here:
        assert here.evaluate(init_state) == evaluate(model, test_set)
    # several models at once, in order
    trained = pool2.train(jobs_for(init_state)[:2])
    many = pool2.evaluate_many([r.state for r in trained])
    for r, m in zip(trained, many):
        cl.load_state_dict(r.state)
        assert m == evaluate(cl, test_set, forward_batch=250)
    assert many[0] != many[1]


@pytest.mark.parametrize("name,shape", [("mnist_cnn", (1, 28, 28)), ("fd_cnn", (3, 20, 20)), ("gru", (20, 6))])
def test_forward_is_batch_size_invariant(name, shape):
    """What lets evaluation run smaller forward batches than its loss chunks, and the calling
    process's thread count not matter."""
    x = torch.rand((300, *shape), generator=torch_rng(0, "x"))
    model = build_model(name, shape, 8, generator=torch_rng(0, "m")).eval()
    with torch.inference_mode():
        whole = model(x)
        # chunks of 250 / 64 / 50 rows (tails of 50 and 44): what evaluation's chunking produces. Not
        # below that: on AVX-512 CPUs MKL / oneDNN take other kernels for a handful of rows (7 or 1
        # differ from the whole batch by ~5e-8), and both evaluation paths cut the same tail anyway
        for b in (250, 64, 50):
            assert torch.equal(torch.cat([model(x[i : i + b]) for i in range(0, 300, b)]), whole)
        with torch_threads(2):  # nor on the thread count
            assert torch.equal(model(x), whole)


# ------------------------------------------------------------------ the stacked (GPU) path, on CPU
@pytest.mark.parametrize(
    "spec,optimizer,momentum,wd",
    [
        (SPEC, "sgd", 0.9, 0.0),
        (SPEC, "sgd", 0.0, 1e-3),
        # Adam on the CNN is ill-conditioned for this comparison: where a gradient is ~0 in one
        # path, float noise of ~1e-9 in the other becomes a step of ~0.1 * lr (m / (sqrt(v) + eps)),
        # so the Adam arithmetic is checked on the MLP, whose batched kernels add like the sequential ones
        (ModelSpec("mlp", (1, 28, 28), 10, {"hidden": [32]}), "adam", 0.0, 1e-4),
    ],
)
def test_batched_path_close_to_sequential(data, spec, optimizer, momentum, wd):
    """Stacked vmap(grad) training equals the sequential path up to float reordering
    (batched convolution kernels, masked mean): allclose, not bit-identical."""
    cfg = TrainConfig(
        epochs=1, batch_size=32, lr=0.01 if optimizer == "adam" else 0.05, momentum=momentum, optimizer=optimizer, weight_decay=wd
    )
    init = build_model(spec.name, spec.input_shape, 10, generator=torch_rng(1, "model-init"), **spec.options).state_dict()
    jobs = jobs_for(init)
    model = spec.build()
    ref = []
    with torch_threads(1):
        for j in jobs:
            model.load_state_dict(init)
            stats = {}
            loss = local_train(
                model, data.client_dataset(j.client_id), cfg, torch_rng(j.seed, j.stream), epochs=j.epochs, stats=stats
            )
            ref.append(({k: v.clone() for k, v in model.state_dict().items()}, loss, stats))
        res = train_batched(spec.build(), data, jobs, cfg)
    assert supports_batched(model) and not supports_batched(build_model("gru", (20, 6), 2))
    for r, (state, loss, stats) in zip(res, ref):
        assert r.error is None
        assert r.loss == pytest.approx(loss, rel=1e-4)
        assert r.num_sample_losses == stats["num_sample_losses"]
        assert r.sum_sq_sample_loss == pytest.approx(stats["sum_sq_sample_loss"], rel=1e-4)
        # Adam: where a gradient is ~0, float reordering of ~1e-9 moves a weight by up to ~lr * 1e-2
        # (seen: 1 of 25,088 weights off by 9.3e-5 on an AVX-512 CPU), so its absolute tolerance is 2e-4
        atol = 2e-4 if optimizer == "adam" else 2e-5
        for k in state:
            torch.testing.assert_close(r.state[k], state[k], rtol=1e-4, atol=atol)
        moved = max(float((state[k] - init[k]).abs().max()) for k in state)
        assert moved > 5e-3  # the comparison is not between (nearly) untrained models


def test_batched_frozen_and_trainer_option(data, init_state):
    keep = frozenset({"fc2.weight", "fc2.bias"})
    jobs = [TrainJob(0, init_state, 1, 7, "train/3/0", trainable=keep), TrainJob(2, init_state, 1, 7, "train/3/2")]
    with ClientTrainer(SPEC, data, CFG, workers=0, batched=True, channels_last=False) as tr:
        res = tr.train(jobs)
    ref = sequential(data, init_state, jobs, channels_last=False)
    for r, (state, _loss, _) in zip(res, ref):
        for k in state:
            torch.testing.assert_close(r.state[k], state[k], rtol=1e-4, atol=2e-5)
    assert all(torch.equal(res[0].state[k], init_state[k]) for k in init_state if k not in keep)


def test_from_federation_matches_the_clients_own_data(tiny_cfg_doc):
    """The trainer over a real federation: client k's rows are its train_indices, the test set
    is registered as "test"; results equal local_train on the client's own ArrayDataset."""
    from fedselect.config.schema import parse_config
    from fedselect.world.federation import build_federation

    doc = dict(tiny_cfg_doc, model={"name": "mnist_cnn"}, data=dict(tiny_cfg_doc["data"], holdout_fraction=0.2))
    cfg = parse_config(doc, "tiny")
    fed = build_federation(cfg)
    tc = TrainConfig(1, 32, 0.05, 0.9)
    state = fed.new_model().state_dict()
    ks = [0, 5]
    with ClientTrainer.from_federation(fed, tc, workers=0) as tr:
        assert tr.data.num_clients == fed.num_clients
        assert [tr.data.num_samples(k) for k in range(fed.num_clients)] == [c.num_samples for c in fed.clients]
        res = tr.train([TrainJob(k, state, 1, cfg.seed, f"train/1/{k}") for k in ks])
        got = tr.evaluate(state)
    model = fed.new_model().to(memory_format=torch.channels_last)
    with torch_threads(1):
        for k, r in zip(ks, res):
            model.load_state_dict(state)
            loss = local_train(model, fed.clients[k].train, tc, fed.train_generator(1, k))
            assert r.loss == loss and all(torch.equal(v, r.state[n]) for n, v in model.state_dict().items())
    model.load_state_dict(state)
    assert got == evaluate(model, fed.test_set, forward_batch=250)


# ------------------------------------------------------------------ the real loop with the pool as its trainer
def _run_with_trainer(tmp_path, doc, name, make_trainer):
    """run_experiment with the local transport over ``make_trainer(r, fed)``: an engine session
    (anything with ``connect``) is how the loop takes a transport."""
    import fedselect.experiment.run as experiment
    from fedselect.experiment.resolve import resolve_doc
    from fedselect.fl.work import LocalTransport

    class WithTrainer:
        def connect(self, r, fed, workers=None):
            return LocalTransport(fed, make_trainer(r, fed), r.train_cfg)

    out = tmp_path / name
    summary = experiment.run_experiment(resolve_doc(doc, name), out, session=WithTrainer())
    return summary, (out / "metrics.csv").read_bytes()


@pytest.mark.slow
def test_run_metrics_byte_identical_for_0_1_2_workers(tmp_path, tiny_cfg_doc, watchdog, monkeypatch):
    """The real loop (`run_experiment`) with 0, 1 and 2 worker processes, with this process at
    2 torch threads, and with the number of workers left to the pool rule: byte-identical
    metrics.csv and model.pt."""
    import fedselect.experiment.run as experiment
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.fl.local import pool_rule

    doc = dict(
        tiny_cfg_doc,
        rounds=3,
        model={"name": "mnist_cnn"},
        method="flashrl",
        method_options={"rl_batch_size": 2, "pca_components": 4, "hidden": 16},
    )
    got, models, decided = {}, {}, []
    monkeypatch.delenv("FEDSELECT_WORKERS", raising=False)
    auto = pool_rule.auto_workers
    monkeypatch.setattr("fedselect.experiment.simulation.auto_workers", lambda *a: decided.append(auto(*a)) or decided[-1])
    for w in (0, 1, 2, None):
        before = torch.get_num_threads()
        torch.set_num_threads(2 if w == 2 else 1)  # the loop's own work runs on one thread whatever this says
        try:
            experiment.run_experiment(parse_experiment(doc), tmp_path / f"w{w}", workers=w)
        finally:
            torch.set_num_threads(before)
        got[w] = (tmp_path / f"w{w}" / "metrics.csv").read_bytes()
        models[w] = (tmp_path / f"w{w}" / "model.pt").read_bytes()
    assert got[0] == got[1] == got[2] == got[None]
    assert got[0].count(b"\n") == 5  # header + rounds 0..3
    assert models[0] == models[1] == models[2] == models[None]  # values and strides: the same file
    assert len(decided) == 1  # the rule decided for the run that did not say, and only for it


def test_worker_killed_mid_round_is_an_error_and_the_run_completes(tmp_path, tiny_cfg_doc, watchdog):
    """The first client of round 2 has its worker SIGKILLed after one mini-batch: that client
    fails with kind ``error``, the round aggregates the survivor, the run finishes."""
    from dataclasses import replace

    from fedselect.common.files import read_csv_rows

    class KillOnce:
        def __init__(self, inner):
            self.inner, self.killed = inner, None

        def __getattr__(self, name):  # evaluate, close, workers ...: the pool's
            return getattr(self.inner, name)

        def train(self, jobs):
            jobs = list(jobs)
            if jobs and jobs[0].stream.startswith("train/2/"):
                jobs[0] = replace(jobs[0], crash_after_batches=1)
                self.killed = jobs[0].client_id
            return self.inner.train(jobs)

        def close(self):
            self.inner.close()

    made = []

    def make(r, fed):
        made.append(KillOnce(ClientTrainer.from_federation(fed, r.train_cfg, workers=2)))
        return made[-1]

    doc = dict(tiny_cfg_doc, rounds=3, model={"name": "mnist_cnn"})
    summary, _ = _run_with_trainer(tmp_path, doc, "kill", make)
    rows = read_csv_rows(tmp_path / "kill" / "metrics.csv")
    k = made[0].killed
    assert k is not None
    assert rows[2]["failed"] == f"{k}:error" and rows[2]["aggregated"] == "1"
    assert rows[1]["failed"] == rows[3]["failed"] == ""
    assert summary["complete"] and summary["client_failures"] == {"error": 1}
    assert "SIGKILL" in (tmp_path / "kill" / "run.log").read_text()


# ------------------------------------------------------------------ a main module the workers cannot import
def test_main_importable(monkeypatch, tmp_path):
    import sys
    import types

    from fedselect.fl.local.placement import main_importable

    script = tmp_path / "script.py"
    script.write_text("")
    from fedselect.world.models import MODELS

    def nb_model(input_shape, num_classes):  # a model registered in a notebook / python -c
        raise NotImplementedError

    nb_model.__module__, nb_model.__qualname__ = "__main__", "nb_model"  # as if defined in a notebook cell
    monkeypatch.setitem(MODELS._classes, "nb-model", nb_model)
    cases = [
        (None, None, "mlp", True),  # notebook / python -c with a built-in model: the workers start and know it
        (None, None, "nb-model", False),  # ... with a model registered there: they would not know it
        (None, "<stdin>", "mlp", False),  # python -: the workers cannot start
        (None, str(script), "nb-model", True),
        ("mypkg.tool", None, "nb-model", True),
    ]

    def local_model(input_shape, num_classes):  # registered inside a function: no path reaches it
        raise NotImplementedError

    monkeypatch.setitem(MODELS._classes, "local-model", local_model)
    cases.append(("mypkg.tool", None, "local-model", False))
    for spec_name, file, model, want in cases:
        main = types.ModuleType("__main__")
        main.__spec__ = None if spec_name is None else types.SimpleNamespace(name=spec_name)
        if file is not None:
            main.__file__ = file
        monkeypatch.setitem(sys.modules, "__main__", main)
        assert main_importable(model) is want, (spec_name, file, model)


def test_workers_train_in_process_where_the_main_module_is_not_importable(data, monkeypatch, caplog):
    import logging

    import fedselect.fl.local.pool as pool

    monkeypatch.setattr(pool, "worker_obstacle", lambda name=None: "a test's reason")
    with caplog.at_level(logging.WARNING, logger="fedselect"):
        with ClientTrainer(SPEC, data, CFG, workers=2) as tr:
            assert tr.workers == 0 and tr.worker_pids() == []
    assert f"worker processes cannot start or cannot build model {SPEC.name!r} here (a test's reason)" in caplog.text


STDIN_SCRIPT = """
import sys

import fedselect


@fedselect.register_selector
class FirstClients(fedselect.Selector):
    name = "first_clients_stdin"

    def select(self, view):
        return fedselect.Selection(list(range(self.settings.clients_per_round)))


fedselect.run(
    {
        "name": "stdin",
        "seed": 1,
        "rounds": 2,
        "clients_per_round": 2,
        "selector": {"name": "first_clients_stdin"},
        "data": {"dataset": "mnist-embedded", "num_clients": 6, "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10}},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05, "workers": 2},
    },
    sys.argv[1],
)
"""


def test_selector_registered_in_a_script_on_stdin_runs_with_the_default_pool(tmp_path):
    """``python -`` (as a notebook): the workers could not re-import the main module, so the run
    trains in its own process, says so once, and completes."""
    import subprocess
    import sys
    from pathlib import Path

    import fedselect

    env = {k: v for k, v in os.environ.items() if k != "FEDSELECT_WORKERS"}
    env["PYTHONPATH"] = str(Path(fedselect.__file__).resolve().parents[1])
    r = subprocess.run(
        [sys.executable, "-", str(tmp_path / "run")],
        input=STDIN_SCRIPT,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count("worker processes cannot start or cannot build model") == 1, r.stderr
    assert (tmp_path / "run" / "metrics.csv").read_text().count("\n") == 4  # header + rounds 0, 1, 2


@pytest.mark.slow
def test_a_script_without_the_main_guard_trains_in_process_with_one_notice(tmp_path):
    """The same script as a file, calling fedselect from top-level code (no ``if __name__ ==
    "__main__":``): every worker would re-import it and start a run of its own (once 189 lines of
    tracebacks), so the run trains in its own process, says why in one line, and completes."""
    import subprocess
    import sys
    from pathlib import Path

    import fedselect

    script = tmp_path / "unguarded.py"
    script.write_text(STDIN_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "FEDSELECT_WORKERS"}
    env["PYTHONPATH"] = str(Path(fedselect.__file__).resolve().parents[1])
    r = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    notice = f"({script} calls fedselect outside `if __name__ == '__main__':`, which every worker would run again)"
    assert r.stderr.count(notice) == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert (tmp_path / "run" / "metrics.csv").read_text().count("\n") == 4


@pytest.mark.parametrize(
    "source,blocked",
    [
        ("r = obstacle()\n", True),
        ("if __name__ == '__main__':\n    r = obstacle()\n", False),
        ("if '__main__' == __name__:\n    x = 1\n    r = obstacle()\n", False),
        ("def main():\n    return obstacle()\n\n\nr = main()\n", True),
        ("def main():\n    return obstacle()\n\n\nif __name__ == '__main__':\n    r = main()\n", False),
        (
            "if __name__ != '__main__':\n    pass\nelse:\n    r = obstacle()\n",
            True,
        ),  # not the guard's form: in process, to be safe
        ("try:\n    r = obstacle()\nfinally:\n    pass\n", True),
    ],
)
def test_worker_obstacle_reads_where_the_main_script_calls_from(source, blocked, tmp_path, monkeypatch):
    """Workers re-import a script file: a call from its top-level code outside the ``__main__``
    guard would run again in each of them; a call from under the guard would not."""
    import sys
    import types

    from fedselect.fl.local import placement

    path = tmp_path / "script.py"
    path.write_text(source)
    main = types.ModuleType("__main__")
    main.__file__, main.__spec__ = str(path), None
    main.obstacle = lambda: placement.worker_obstacle("mlp")
    monkeypatch.setitem(sys.modules, "__main__", main)
    exec(compile(source, str(path), "exec"), vars(main))
    assert (main.r is not None) is blocked, main.r
    if blocked:
        assert main.r == f"{path} calls fedselect outside `if __name__ == '__main__':`, which every worker would run again"
