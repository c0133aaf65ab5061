"""The cases of the registry-wide tests, read from the registries (never listed by hand):
every method preset, and every registered selector with FedAvg and with FedPer where the
pair is allowed. Registering a selector or an algorithm puts it in every test that uses
:func:`cases` (the engine contract test, the resume test)."""

from __future__ import annotations

import copy

from fedselect.config.presets import PRESETS
from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment, resolve
from fedselect.selectors import SELECTORS

#: options that make a component run on the tiny federations of the tests (and exercise its
#: state); a component without an entry runs with its defaults
TINY_OPTIONS = {
    "flashrl": {"warmup_epochs": 1, "rl_batch_size": 2, "memory_capacity": 50, "hidden": 16, "pca_components": 3},
    "favor": {"warmup_epochs": 1, "rl_batch_size": 2, "memory_capacity": 50, "hidden": 16, "pca_components": 3, "target": 0.5},
    "cefl_leaders": {"clusters": 2, "warmup_epochs": 1},
    "cefl": {"base_layers": 1, "transfer_epochs": 2},
    "fedper": {"base_layers": 1},
    "secretary": {"rerun_every": 2},
    "online_random": {"rerun_every": 2},
    "offline_best": {"rerun_every": 2},
    "fedcs": {"deadline_s": 0.1, "request_fraction": 1.0},
}

#: the algorithms every selector is paired with
PAIRED_ALGORITHMS = ("fedavg", "fedper")


def part(name: str) -> dict:
    return {"name": name, "options": copy.deepcopy(TINY_OPTIONS.get(name, {}))}


def cases(base: dict) -> dict[str, dict]:
    """Case name -> a config document: ``base`` with each preset (as its selector + algorithm
    with tiny options), then every allowed selector x algorithm pair of :data:`PAIRED_ALGORITHMS`."""
    out: dict[str, dict] = {}
    seen = {(p.selector, p.algorithm) for p in PRESETS.values() if not p.selector_options and not p.algorithm_options}
    for name, p in sorted(PRESETS.items()):
        doc = {**copy.deepcopy(base), "selector": part(p.selector), "algorithm": part(p.algorithm)}
        doc["selector"]["options"] = {**p.selector_options, **doc["selector"]["options"]}
        doc["algorithm"]["options"] = {**p.algorithm_options, **doc["algorithm"]["options"]}
        out[name] = doc
    for sel in sorted(SELECTORS.builtin_names()):
        for alg in PAIRED_ALGORITHMS:
            if (sel, alg) in seen:
                continue
            doc = {**copy.deepcopy(base), "selector": part(sel), "algorithm": part(alg)}
            try:
                resolve(parse_experiment(doc))
            except ConfigError:
                continue  # a pair the resolve step refuses (e.g. CEFL's leaders without CEFL)
            out.setdefault(f"{sel}+{alg}", doc)
    return out
