"""No decision reads the test set: the server's validation set (``data.validation``), carved
from the training set before partitioning, is what selector rewards, candidate scores and the
selector's context score on (``selection_eval: validation``); the test set is only reported.
``selection_eval: test`` keeps the papers' protocol, and the tables then say so."""

from __future__ import annotations

import numpy as np
import pytest

from fedselect.common.files import read_json
from fedselect.common.seeding import np_rng
from fedselect.config.schema import ConfigError
from fedselect.experiment.metrics import read_metrics
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.resume import config_differences, with_current_defaults
from fedselect.experiment.run import run_experiment
from fedselect.fl.types import Evaluation, Feedback
from fedselect.report.tables import selection_eval_note
from fedselect.world.data.datasets import register_dataset
from fedselect.world.data.images import load_mnist_embedded
from fedselect.world.federation import build_federation, validation_split


@register_dataset("mnist-two-test-files")
def _two_test_files(seed=0, test="a", **_):
    """The embedded MNIST training set with one of two disjoint test files: its 500 test images
    of the digits 0-4 (``test: a``) or of 5-9 (``test: b``). Same training data, same
    partition; only the test file differs."""
    train, full = load_mnist_embedded(seed)
    half = np.flatnonzero(full.y < 5 if test == "a" else full.y >= 5)
    return train, full.subset(half, f"mnist-two-test-files/{test}")


def _doc(method, test="a", selection_eval="validation", **over):
    doc = {
        "name": "two-test-files",
        "seed": 2,
        "method": method,
        "rounds": 3,
        "clients_per_round": 3,
        "selection_eval": selection_eval,
        "checkpoint_every": 0,
        "data": {
            "dataset": "mnist-two-test-files",
            "options": {"test": test},
            "num_clients": 8,
            "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10},
            "holdout_fraction": 0.0,
        },
        "model": {"name": "mlp", "options": {"hidden": [16]}},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05, "workers": 0},
    }
    doc.update(over)
    return doc


# ---------------------------------------------------------------------------- the split
def test_the_split_shares_rows_among_the_classes_by_largest_remainder():
    """Labels 0 x 6, 1 x 3, 2 x 1 (n = 10), m = 5: quotas 3, 1.5, 0.5 -> floors 3, 1, 0; the
    one row left goes to the larger remainder, a tie of labels 1 and 2 -> label 1: 3, 2, 0."""
    y = np.array([0] * 6 + [1] * 3 + [2])
    rest, val = validation_split(y, 5, np.random.default_rng(0))
    assert np.bincount(y[val], minlength=3).tolist() == [3, 2, 0]
    assert len(rest) == 5 and not set(rest) & set(val) and sorted([*rest, *val]) == list(range(10))
    assert val.tolist() == sorted(val.tolist()) and rest.tolist() == sorted(rest.tolist())
    # a fraction: round(0.25 x 10) = 2 rows; quotas 1.2, 0.6, 0.2 -> floors 1, 0, 0, the row left to label 1
    _, val = validation_split(y, 0.25, np.random.default_rng(0))
    assert np.bincount(y[val], minlength=3).tolist() == [1, 1, 0]
    # nothing carved: every row stays, in order
    rest, val = validation_split(y, 0, np.random.default_rng(0))
    assert rest.tolist() == list(range(10)) and val.size == 0


def test_the_split_refuses_to_leave_no_training_row_and_is_seeded():
    y = np.arange(10) % 2
    with pytest.raises(ValueError, match=r"data.validation: 10 asks for 10 validation rows of a training set of 10"):
        validation_split(y, 10, np.random.default_rng(0))
    a = validation_split(y, 4, np.random.default_rng(7))[1]
    assert a.tolist() == validation_split(y, 4, np.random.default_rng(7))[1].tolist()
    assert np.bincount(y[a]).tolist() == [2, 2]


def test_the_federation_carves_a_stratified_validation_set_no_client_holds():
    """The embedded MNIST has 400 training images a class: data.validation 0.1 takes 40 of each,
    drawn by the seed's own generator; no client trains on them or holds them out."""
    cfg = parse_experiment(_doc("fedavg", **{"data": {**_doc("fedavg")["data"], "holdout_fraction": 0.2}}))
    fed = build_federation(cfg)
    assert np.bincount(fed.train_set.y[fed.validation_indices], minlength=10).tolist() == [40] * 10
    assert len(fed.validation_set) == 400 and np.array_equal(fed.validation_set.y, fed.train_set.y[fed.validation_indices])
    clients = np.concatenate([np.r_[c.train_indices, c.holdout_indices] for c in fed.clients])
    assert len(clients) == 3600 and not np.isin(fed.validation_indices, clients).any()
    expect = validation_split(fed.train_set.y, 0.1, np_rng(cfg.seed, "validation"))[1]
    assert fed.validation_indices.tolist() == expect.tolist()


def test_no_validation_set_partitions_the_whole_training_set_as_before():
    """data.validation: 0 gives the partition the whole training set with the same generator
    as before the validation set existed, so saved runs made that way stay valid."""
    from fedselect.world.data.catalog import make_partitioner

    doc = _doc("fedavg", selection_eval="test")
    doc["data"]["validation"] = 0
    cfg = parse_experiment(doc)
    fed = build_federation(cfg)
    parts = make_partitioner("dirichlet", alpha=0.5, min_size=10).split(fed.train_set.y, 8, np_rng(cfg.seed, "partition"))
    assert [c.train_indices.tolist() for c in fed.clients] == [sorted(p.tolist()) for p in parts]
    assert fed.validation_indices.size == 0 and len(fed.validation_set) == 0


# ---------------------------------------------------------------------------- the two test files
@pytest.mark.slow
@pytest.mark.parametrize(
    "method,options,rounds",
    [
        ("favor", {"target": 0.5, "rl_batch_size": 1, "hidden": 16, "pca_components": 3, "eps_init": 0.0, "eps_end": 0.0}, 4),
        ("budgeted_online", {}, 1),
    ],
    ids=["favor", "secretary"],
)
def test_two_test_files_give_the_same_selections(method, options, rounds, tmp_path):
    """The issue's check: the same training data and partition, two test files (digits 0-4 /
    5-9). Deciding on the validation set, FAVOR's rewards and choices (greedy, learning from
    round 1) and the secretary's candidate scores and accepted clients are the same for both
    files, while the reported accuracies differ; deciding on the test set (the papers'
    protocol) the rewards, the scores and the choices change with the file (FAVOR's fourth
    round: 5;7;3 with file a, 7;5;0 with b; the secretary accepts 4, 2, 5 with a, 1, 2, 5 with b)."""

    def run(test, selection_eval):
        d = tmp_path / f"{test}-{selection_eval}"
        run_experiment(parse_experiment(_doc(method, test, selection_eval, method_options=options, rounds=rounds)), d)
        rows = read_metrics(d / "metrics.csv")
        summary = read_json(d / "summary.json")
        scores = summary.get("candidate_accuracy") or [r["mean_reward"] for r in rows[1:]]
        chosen = summary.get("accepted_clients") or [r["selected"] for r in rows[1:]]
        return chosen, scores, [r["accuracy"] for r in rows], summary

    sel_a, scores_a, acc_a, sum_a = run("a", "validation")
    sel_b, scores_b, acc_b, _ = run("b", "validation")
    assert sel_a == sel_b and scores_a == scores_b
    assert acc_a != acc_b  # the two files do score the models differently
    assert sum_a["selection_eval"] == "validation"
    test_a, test_b = run("a", "test"), run("b", "test")
    assert test_a[1] != test_b[1] and test_a[0] != test_b[0]  # on the test files the choices follow the file
    assert test_a[3]["selection_eval"] == "test"


def test_favor_rewards_read_the_validation_figures(tmp_path):
    """FAVOR's reward r_t = 64^(P_t - target) - 1 with P_t the validation accuracy (val_accuracy),
    not the reported test accuracy; the round-0 row has the validation figures too."""
    opts = {"target": 0.5, "rl_batch_size": 2, "hidden": 16, "pca_components": 3}
    run_experiment(parse_experiment(_doc("favor", method_options=opts, rounds=2)), tmp_path)
    rows = read_metrics(tmp_path / "metrics.csv")
    assert 0 < float(rows[0]["val_accuracy"]) < 1 and float(rows[0]["val_loss"]) > 0
    for r in rows[1:]:
        assert float(r["mean_reward"]) == pytest.approx(64 ** (float(r["val_accuracy"]) - 0.5) - 1)
    # 400 validation images: an accuracy is a multiple of 1/400
    assert float(rows[-1]["val_accuracy"]) * 400 == pytest.approx(round(float(rows[-1]["val_accuracy"]) * 400))


def test_a_selector_that_reads_nothing_gets_no_validation_columns(tmp_path):
    run_experiment(parse_experiment(_doc("fedavg", rounds=1)), tmp_path)
    assert "val_accuracy" not in read_metrics(tmp_path / "metrics.csv")[0]
    assert read_json(tmp_path / "summary.json")["selection_eval"] is None


def test_per_client_validation_is_the_mean_of_the_clients_models_on_the_validation_set():
    """FedPer's figures for decisions: every client's own model scored on the server's
    validation set, the means over clients."""
    from fedselect.experiment.run import make_simulation
    from fedselect.fl.work import EvalJob

    doc = _doc("flashrl", algorithm={"name": "fedper", "options": {"base_layers": 1}}, rounds=1)
    doc["data"]["holdout_fraction"] = 0.2
    cfg = parse_experiment(doc)
    sim = make_simulation(cfg, workers=0)
    try:
        state = sim.algorithm.initial_state()
        ev = sim.evaluate(0, state)
        each = sim.transport.run([EvalJob(None, sim.algorithm.eval_state(state, k), "validation") for k in range(8)])
        assert ev.validation.accuracy == pytest.approx(np.mean([r.accuracy for r in each]))
        assert ev.validation.loss == pytest.approx(np.mean([r.loss for r in each]))
        assert sim.decision_figures(ev) is ev.validation
    finally:
        sim.close()


# ---------------------------------------------------------------------------- declarations and errors
def test_feedback_figures_need_the_declaration():
    fb = Feedback(None, None, True, {})
    with pytest.raises(AttributeError, match="wants_evaluation = True"):
        fb.after.value("accuracy")
    e = Evaluation(0.5, 0.4, 1.0, None, Evaluation(0.6, 0.5, 0.9))
    assert Evaluation.from_dict(e.as_dict()) == e  # checkpoints keep the validation figures


def test_deciding_on_a_validation_set_that_is_not_there_is_refused():
    doc = _doc("flashrl")
    doc["data"]["validation"] = 0
    with pytest.raises(ConfigError, match=r"selector 'flashrl' decides on model quality.*data.validation is 0"):
        parse_experiment(doc)
    parse_experiment({**doc, "selection_eval": "test"})  # the papers' protocol needs none
    parse_experiment({**doc, "method": "fedavg"})  # nothing reads it
    with pytest.raises(ConfigError, match=r"data.validation: a fraction of the training rows must be in \[0, 1\)"):
        parse_experiment(_doc("fedavg", data={**doc["data"], "validation": 1.5}))
    with pytest.raises(ConfigError, match=r"selection_eval"):
        parse_experiment(_doc("fedavg", selection_eval="holdout"))


def test_a_run_saved_before_the_validation_set_is_read_as_it_was_made():
    """A saved config without the keys was made without a validation set, its decisions on the
    test set: it matches a config stating that, and a FedAvg run (whose results selection_eval
    cannot change) also one that keeps the default selection_eval."""
    for method, now in (("fedavg", {}), ("flashrl", {"selection_eval": "test"})):
        doc = _doc(method, **now)
        doc["data"]["validation"] = 0
        cfg = parse_experiment(doc)
        saved = cfg.model_dump(mode="json")
        del saved["selection_eval"], saved["data"]["validation"]
        old = with_current_defaults(saved)
        assert old["data"]["validation"] == 0 and old["selection_eval"] == "test"
        ignore = () if method == "flashrl" else ("selection_eval",)
        assert config_differences(saved, cfg.model_dump(mode="json"), ignore) == []
    today = parse_experiment(_doc("fedavg")).model_dump(mode="json")
    assert "data.validation (0 in the saved run, 0.1 now)" in config_differences(saved, today)


def test_a_comparison_saved_now_is_not_read_as_one_saved_before_the_validation_set():
    """compare.json / sweep.json bases state both keys when written, so reading one back keeps
    today's defaults; a base that lacks them (saved before) reads as no validation set, test."""
    from fedselect.experiment.resume import with_pre_validation_values, with_validation_keys

    saved_now = with_validation_keys({"rounds": 3, "data": {"num_clients": 8}})
    assert saved_now == {"rounds": 3, "data": {"num_clients": 8, "validation": 0.1}, "selection_eval": "validation"}
    assert with_pre_validation_values(saved_now) == saved_now
    old = with_pre_validation_values({"rounds": 3})
    assert old == {"rounds": 3, "data": {"validation": 0}, "selection_eval": "test"}
    stated = {"data": {"validation": 250}, "selection_eval": "test"}
    assert with_validation_keys(stated) == stated == with_pre_validation_values(stated)


def test_the_tables_carry_a_caution_line_where_decisions_read_the_test_set():
    table = [{"label": "FedAvg", "test_decisions": False}, {"label": "FLASH-RL", "test_decisions": True}]
    note = selection_eval_note(table)
    assert note.startswith("Caution: the decisions of FLASH-RL read the test set (selection_eval: test")
    assert selection_eval_note(table[:1]) is None


def test_a_model_scored_for_a_selector_reads_the_decision_set():
    """``ctx.evaluate`` (any selector through its context) scores on the validation set, or on
    the test set under selection_eval: test."""
    from fedselect.experiment.run import make_simulation

    for selection_eval, rows in (("validation", 400), ("test", 500)):
        sim = make_simulation(parse_experiment(_doc("fedavg", selection_eval=selection_eval)), workers=0)
        try:
            state = sim.ctx.initial_state()
            acc = sim.ctx.evaluate(state).accuracy
            assert acc * rows == pytest.approx(round(acc * rows))
            split = sim.fed.validation_set if selection_eval == "validation" else sim.fed.test_set
            from fedselect.fl.evaluate import evaluate

            model = sim.fed.new_model()
            model.load_state_dict(state)
            assert acc == pytest.approx(evaluate(model, split)["accuracy"])
        finally:
            sim.close()
