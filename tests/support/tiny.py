"""The tiny experiment of the tests, defined once: a few clients of the embedded real MNIST
(``mnist-embedded``) with Dirichlet(0.5) label skew (at least 10 samples a client), an MLP,
one local epoch of SGD (batch 32, learning rate 0.05) and a few rounds: a whole run in seconds.

* :func:`tiny_doc`: its config document, with the sizes a test needs (N clients, U per round,
  T rounds, the MLP's hidden units) and any other top-level key replaced;
* :func:`tiny_experiment`: that document parsed (8 clients, 3 per round, 4 rounds, 16 units);
* :func:`method_doc`: a registered method on it, with :data:`METHOD_OPTIONS`;
* :func:`tiny_node_settings`: the same experiment as a Flower node's settings (dotted keys);
* :func:`with_keys`: a copy of a document with dotted keys replaced.
"""

from __future__ import annotations

import copy

#: options that make each method run (and exercise its state) on the tiny config
METHOD_OPTIONS = {
    "flashrl": {"warmup_epochs": 1, "rl_batch_size": 2, "memory_capacity": 50, "hidden": 16, "pca_components": 3},
    "favor": {"warmup_epochs": 1, "rl_batch_size": 2, "memory_capacity": 50, "hidden": 16, "pca_components": 3, "target": 0.5},
    "cefl": {"clusters": 2, "base_layers": 1, "warmup_epochs": 1},
    "fedper": {"base_layers": 1},
    "budgeted_online": {"rerun_every": 2},
    "online_random": {"rerun_every": 2},
}


def tiny_doc(
    *,
    name: str | None = "tiny",
    seed: int | None = 3,
    rounds: int | None = 2,
    clients_per_round: int | None = 2,
    num_clients: int = 8,
    hidden: int = 32,
    **over,
) -> dict:
    """The tiny experiment's config document (a new dict every call): ``num_clients`` clients of
    ``mnist-embedded`` (Dirichlet alpha 0.5, min_size 10), ``clients_per_round`` of them for
    ``rounds`` rounds, an MLP with one hidden layer of ``hidden`` units, one local epoch, batch
    32, lr 0.05. ``name``, ``seed``, ``rounds`` or ``clients_per_round`` given as ``None`` are left
    out (e.g. the ``base`` of a comparison, whose runs take the comparison's name and seeds);
    ``over`` adds or replaces top-level keys (``method``, ``faults``, ``train``...)."""
    doc: dict = {}
    for key, value in (("name", name), ("seed", seed), ("rounds", rounds), ("clients_per_round", clients_per_round)):
        if value is not None:
            doc[key] = value
    doc["data"] = {
        "dataset": "mnist-embedded",
        "num_clients": num_clients,
        "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10},
    }
    doc["model"] = {"name": "mlp", "options": {"hidden": [hidden]}}
    doc["train"] = {"local_epochs": 1, "batch_size": 32, "lr": 0.05}
    doc.update(copy.deepcopy(over))
    return doc


def tiny_experiment(method: str | None = "fedavg", seed: int = 4, **over):
    """A parsed tiny experiment: 8 clients (Dirichlet 0.5), 3 per round, 4 rounds, an MLP with 16
    hidden units, a checkpoint every round; ``over`` replaces top-level keys."""
    from fedselect.experiment.resolve import parse_experiment

    doc = tiny_doc(seed=seed, method=method, rounds=4, clients_per_round=3, checkpoint_every=1, hidden=16)
    doc.update(over)
    return parse_experiment(doc)


def method_doc(method: str = "fedavg", **over) -> dict:
    """The tiny experiment of the kill-and-resume tests: ``method`` with its
    :data:`METHOD_OPTIONS` on 6 clients, 2 per round, 5 rounds, seed 5, a checkpoint every round,
    an MLP with 16 hidden units; ``over`` replaces top-level keys."""
    doc = tiny_doc(seed=5, method=method, rounds=5, checkpoint_every=1, num_clients=6, hidden=16)
    doc["method_options"] = copy.deepcopy(METHOD_OPTIONS.get(method, {}))
    doc.update(over)
    return doc


def tiny_node_settings(seed: int = 3, hidden: int = 32, train: bool = False) -> dict:
    """The tiny experiment as a Flower node's settings (flat dotted keys, as in a Flower run
    config; the number of clients comes from the engine): seed, data and model, and with
    ``train`` the local training (one epoch, batch 32, lr 0.05)."""
    settings = {
        "seed": seed,
        "data.dataset": "mnist-embedded",
        "data.partition.scheme": "dirichlet",
        "data.partition.alpha": 0.5,
        "data.partition.min_size": 10,
        "model.name": "mlp",
        "model.options.hidden": f"[{hidden}]",
    }
    if train:
        settings.update({"train.local_epochs": 1, "train.batch_size": 32, "train.lr": 0.05})
    return settings


def with_keys(base: dict, **kv) -> dict:
    """A deep copy of ``base`` with dotted keys replaced (``a__b=1`` sets ``base["a"]["b"]``)."""
    d = copy.deepcopy(base)
    for key, value in kv.items():
        node, parts = d, key.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return d
