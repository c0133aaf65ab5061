"""One resolve step from a config to the components of a run, before any data is loaded.

:func:`resolve` looks each registry up once — data set, partition scheme, model, the method
preset, the selector, the algorithm and the engine — validates every component's options with the
component's own pydantic model (or, for data sets, models and partition schemes without one,
its signature), checks that the selector and the algorithm fit together and with the
settings, and returns a :class:`Resolved` whose ``config`` has every default written out (what
``config.yaml`` holds). How one component's options are read and checked is
:mod:`fedselect.experiment.options`.
All problems are reported at once, one line each, naming the key and what is allowed.

A run is resolved once: the :class:`Resolved` (not the raw :class:`~fedselect.config.schema.ExperimentConfig`)
is what the experiment layer plans a run from and what travels to the round, to the engine and
to a Ray task; nothing downstream resolves it again. :func:`fedselect.config.schema.parse_config` gives
the raw config (schema only); :func:`resolve_doc` the :class:`Resolved`; :func:`parse_experiment` only its
written-out config (for saving and comparing configs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from fedselect.algorithms.base import Algorithm
from fedselect.config.load import read_experiment
from fedselect.config.presets import PRESETS, Preset
from fedselect.config.schema import NAMES_ONLY, UNKNOWN_KEY, ConfigError, ExperimentConfig, parse_config, schema_problems
from fedselect.experiment.options import (
    DATASET_ARGS,
    MODEL_ARGS,
    Problem,
    callable_options,
    check_signature,
    signature_defaults,
    validate_options,
)
from fedselect.fl.local.train import TrainConfig
from fedselect.fl.types import RunSettings
from fedselect.registry import ALGORITHMS, DATASETS, ENGINES, MODELS, PARTITIONERS, SELECTORS
from fedselect.selectors.base import Selector, reads_quality
from fedselect.world.data.catalog import make_partitioner


@dataclass(frozen=True)
class Resolved:
    """A config resolved into its components.

    Attributes:
        config: the config with every default written out (``selector`` and ``algorithm`` with
            all their options, partition parameters and data / model options with defaults,
            ``method_options`` routed and emptied).
        method: the display name: the preset's name when the selector and algorithm are the
            preset's, else ``"<selector>+<algorithm>"``.
        selector, selector_options, algorithm, algorithm_options: the classes and validated options.
        settings: what the components may read. train_cfg: local-training settings.
        engine: the class of ``config.engine`` (:class:`fedselect.engines.Engine`, from
            :data:`fedselect.registry.ENGINES`): where the rounds run.
    """

    config: ExperimentConfig
    method: str
    selector: type[Selector]
    selector_options: BaseModel
    algorithm: type[Algorithm]
    algorithm_options: BaseModel
    settings: RunSettings
    train_cfg: TrainConfig
    engine: type


def _fields(cls: type) -> set[str]:
    opts = getattr(cls, "Options", None)
    return set(opts.model_fields) if opts is not None else set()


def _lookup(registry, name: str, label: str, errors: list[Problem]):
    try:
        return registry.get(name)
    except ValueError as e:
        errors.append((label, str(e)))
        return None


def resolve(cfg: ExperimentConfig, source: str = "<config>") -> Resolved:
    """Resolve ``cfg`` (module docstring).

    Raises:
        ConfigError: ``invalid config SOURCE:`` then one line per problem (unknown names with the
            allowed ones, bad options, a selector and an algorithm that do not fit together).
    """
    errors: list[Problem] = []
    found = _components(cfg, errors)
    doc = found.pop("doc")
    settings = RunSettings(
        seed=cfg.seed,
        rounds=cfg.rounds,
        num_clients=cfg.data.num_clients,
        clients_per_round=cfg.clients_per_round,
        local_epochs=cfg.train.local_epochs,
        eval_every=cfg.eval_every,
        metric=cfg.metrics.metric,
        target=cfg.metrics.target,
        dataset=cfg.data.dataset,
        count_download=cfg.system.count_download,
        cycles_per_bit=cfg.system.cycles_per_bit,
        optimizer=cfg.train.optimizer,
        selection_eval=cfg.selection_eval,
        round_deadline_s=cfg.system.round_deadline_s,
    )
    sel_cls, sel_name, sel_opts = found["selector"]
    alg_cls, alg_name, alg_opts = found["algorithm"]
    if sel_opts is not None and alg_opts is not None:
        errors += [("", m) for m in _compatibility(sel_cls, sel_name, alg_cls, alg_name, settings)]
        errors += [("", m) for m in _decision_set(sel_cls, sel_name, cfg)]
        if cfg.mode == "async":
            errors += [("", m) for m in _async_compatibility(sel_cls, sel_name, alg_cls, alg_name)]
        errors += [("", f"selector {sel_name!r}: {m}") for m in sel_cls.check(sel_opts, settings)]
        errors += [("", f"algorithm {alg_name!r}: {m}") for m in alg_cls.check(alg_opts, settings)]
    if errors:
        raise ConfigError.listing(source, errors)

    preset = found["preset"]
    if preset is not None:
        doc["method"] = preset.name  # the default preset is written out too
    doc["selector"] = {"name": sel_name, "options": sel_opts.model_dump(mode="json")}
    doc["algorithm"] = {"name": alg_name, "options": alg_opts.model_dump(mode="json")}
    doc["method_options"] = {}
    resolved_cfg = ExperimentConfig.model_validate(doc)
    if preset is not None and sel_name == preset.selector and alg_name == preset.algorithm:
        method = preset.name
    else:
        method = f"{sel_name}+{alg_name}"
    tr = cfg.train
    return Resolved(
        resolved_cfg,
        method,
        sel_cls,
        sel_opts,
        alg_cls,
        alg_opts,
        settings,
        TrainConfig(tr.local_epochs, tr.batch_size, tr.lr, tr.momentum, tr.optimizer, tr.weight_decay),
        found["engine"],
    )


def _components(cfg: ExperimentConfig, errors: list[Problem]) -> dict[str, Any]:
    """Every registry looked up once and every component's options validated, problems added to
    ``errors``: ``doc`` (the config's mapping with the data set, partition and model defaults
    written out), ``preset``, and per ``selector`` / ``algorithm`` (class, name, options), None
    where a problem stands in the way. Reads each key on its own (no check across keys), so it
    also runs on a config whose other keys are in error (:func:`resolve_doc`)."""
    doc = cfg.model_dump(mode="json")
    _data_components(cfg, doc, errors)
    _model_component(cfg, doc, errors)
    preset, (sel_cls, sel_name), (alg_cls, alg_name) = _method_components(cfg, errors)
    sel_opts = alg_opts = None
    if sel_cls is not None and alg_cls is not None:
        sel_opts, alg_opts = _method_options(cfg, preset, sel_cls, sel_name, alg_cls, alg_name, errors)
    return {
        "doc": doc,
        "preset": preset,
        "selector": (sel_cls, sel_name, sel_opts),
        "algorithm": (alg_cls, alg_name, alg_opts),
        "engine": _lookup(ENGINES, cfg.engine, "engine", errors),
    }


def _data_components(cfg: ExperimentConfig, doc: dict[str, Any], errors: list[Problem]) -> None:
    """The data set's loader and the partition scheme looked up, their options checked and, where
    valid, written out with their defaults in ``doc["data"]``; problems added to ``errors``."""
    d = cfg.data
    loader = _lookup(DATASETS, d.dataset, "data.dataset", errors)
    if loader is not None:
        opts = callable_options("data.dataset", d.dataset, loader, d.options, DATASET_ARGS, errors)
        if opts is not None:
            doc["data"]["options"] = opts
    scheme, params = d.partition.scheme, d.partition.params()
    partitioner = _lookup(PARTITIONERS, scheme, "data.partition.scheme", errors)
    if partitioner is not None:
        init = partitioner.__init__
        bad = check_signature("data.partition", f"scheme {scheme!r}", init, params, ("self",))
        if "alpha" in params and not (
            isinstance(params["alpha"], (int, float)) and not isinstance(params["alpha"], bool) and params["alpha"] > 0
        ):
            bad.append(("", f"data.partition.alpha must be a number > 0, got {params['alpha']!r}"))
        if not bad:  # the scheme's own range checks, before any data is loaded
            try:
                make_partitioner(scheme, **params)
            except ValueError as e:
                bad.append(("data.partition", str(e)))
        errors += bad
        if not bad:
            doc["data"]["partition"] = {"scheme": scheme, **signature_defaults(init, ("self",)), **params}


def _model_component(cfg: ExperimentConfig, doc: dict[str, Any], errors: list[Problem]) -> None:
    """The model factory looked up, its options checked and, where valid, written out with their
    defaults in ``doc["model"]``; problems added to ``errors``."""
    m = cfg.model
    factory = _lookup(MODELS, m.name, "model.name", errors)
    if factory is not None:
        opts = callable_options("model.name", m.name, factory, m.options, MODEL_ARGS, errors)
        if opts is not None:
            doc["model"]["options"] = opts


def _method_components(
    cfg: ExperimentConfig, errors: list[Problem]
) -> tuple[Preset | None, tuple[type[Selector] | None, str | None], tuple[type[Algorithm] | None, str | None]]:
    """The method preset (None: no preset applies) and the selector's and the algorithm's
    (class, name), a section without a name being the preset's part; a class is None where its
    name is unknown (the problem added to ``errors``)."""
    named = {part: getattr(cfg, part).name if getattr(cfg, part) is not None else None for part in ("selector", "algorithm")}
    preset: Preset | None = None
    if cfg.method is not None:
        preset = PRESETS.get(cfg.method)
        if preset is None:
            errors.append(("method", f"unknown method {cfg.method!r}; allowed: {sorted(PRESETS)}"))
        elif all(named[part] not in (None, getattr(preset, part)) for part in named):
            errors.append(
                (
                    "method",
                    f"{cfg.method!r} has no effect: selector {named['selector']!r} and algorithm {named['algorithm']!r} "
                    f"replace both of its parts ({preset.selector!r} + {preset.algorithm!r}); remove `method`, or the "
                    f"selector or the algorithm",
                )
            )
    elif named["selector"] is None and named["algorithm"] is None:
        preset = PRESETS["fedavg"]
    parts = preset if preset is not None else PRESETS["fedavg"] if cfg.method is None else None
    sel_name = named["selector"] or (parts.selector if parts else None)
    alg_name = named["algorithm"] or (parts.algorithm if parts else None)
    sel_cls = _lookup(SELECTORS, sel_name, "selector.name", errors) if sel_name else None
    alg_cls = _lookup(ALGORITHMS, alg_name, "algorithm.name", errors) if alg_name else None
    return preset, (sel_cls, sel_name), (alg_cls, alg_name)


def _method_options(
    cfg: ExperimentConfig,
    preset: Preset | None,
    sel_cls: type[Selector],
    sel_name: str,
    alg_cls: type[Algorithm],
    alg_name: str,
    errors: list[Problem],
) -> tuple[BaseModel | None, BaseModel | None]:
    """The selector's and the algorithm's validated options: the preset's own options for its
    parts, ``method_options`` routed to whichever declares each key, then each section's
    ``options``; None for a side with problems (added to ``errors``)."""
    s_raw = dict(preset.selector_options) if preset and sel_name == preset.selector else {}
    a_raw = dict(preset.algorithm_options) if preset and alg_name == preset.algorithm else {}
    s_fields, a_fields = _fields(sel_cls), _fields(alg_cls)
    label = preset.name if preset is not None else f"{sel_name}+{alg_name}"
    for key, value in cfg.method_options.items():
        if key not in s_fields and key not in a_fields:
            errors.append(
                (
                    f"method_options.{key}",
                    f"{UNKNOWN_KEY}; method {label!r} = selector {sel_name!r} "
                    f"(options {sorted(s_fields) or 'none'}) + algorithm {alg_name!r} (options {sorted(a_fields) or 'none'})",
                )
            )
            continue
        if key in s_fields:
            s_raw[key] = value
        if key in a_fields:
            a_raw[key] = value
    for raw, spec, which in ((s_raw, cfg.selector, "selector"), (a_raw, cfg.algorithm, "algorithm")):
        if spec is None:
            continue
        both = sorted(set(spec.options) & set(cfg.method_options))
        if both:
            errors.append(("", f"{which}.options and method_options both set {both}; set each option once"))
        raw.update(spec.options)
    sel_opts = validate_options("selector.options" if cfg.selector else "method_options", sel_cls.Options, s_raw, errors)
    alg_opts = validate_options("algorithm.options" if cfg.algorithm else "method_options", alg_cls.Options, a_raw, errors)
    return sel_opts, alg_opts


def _compatibility(sel: type[Selector], sname: str, alg: type[Algorithm], aname: str, settings: RunSettings) -> list[str]:
    """Refuse the pairs that make no sense, saying why."""
    out = []
    if alg.needs_groups and not sel.provides_groups:
        have = [n for n in SELECTORS.builtin_names() if SELECTORS.get(n).provides_groups]
        out.append(
            f"algorithm {aname!r} trains cluster leaders and transfers their models to the members: it needs a selector "
            f"that clusters the clients and names leaders ({', '.join(repr(n) for n in have)}), not {sname!r}"
        )
    if sel.needs_shared_model and not alg.shares_model:
        out.append(
            f"selector {sname!r} scores clients against the shared global model, which algorithm {aname!r} does not have "
            f"(its clients exchange nothing); use an algorithm that shares a model (fedavg, fedper, cefl)"
        )
    if sel.sets_aggregation_weights and not alg.takes_selection_weights:
        ok = [n for n in ALGORITHMS.builtin_names() if ALGORITHMS.get(n).takes_selection_weights]
        out.append(
            f"selector {sname!r} gives the aggregate its own weights (unbiased for its sampling), which algorithm "
            f"{aname!r} does not use (it weighs the updates its own way); use {', '.join(repr(n) for n in ok)}"
        )
    if sel.needs_every_round_evaluation and settings.eval_every != 1:
        out.append(
            f"selector {sname!r} needs the global metric every round (rewards, FR-eq 8 / FAVOR); "
            f"set eval_every: 1 (got {settings.eval_every})"
        )
    return out


def _decision_set(sel: type[Selector], sname: str, cfg: ExperimentConfig) -> list[str]:
    """A selector whose decisions read model quality (:func:`fedselect.selectors.base.reads_quality`)
    with ``selection_eval: validation`` needs a validation set (``data.validation`` > 0)."""
    if cfg.selection_eval != "validation" or cfg.data.validation != 0 or not reads_quality(sel):
        return []
    return [
        f"selector {sname!r} decides on model quality, which selection_eval: validation reads on the server's validation "
        f"set, but data.validation is 0 (none); give data.validation a fraction (e.g. 0.1) or a count of training rows, "
        f"or set selection_eval: test to let its decisions read the test set (the papers' protocol)"
    ]


def _async_compatibility(sel: type[Selector], sname: str, alg: type[Algorithm], aname: str) -> list[str]:
    """``mode: async`` (docs/async.md): the selector must pick a number of clients (it fills
    free slots one or a few at a time), and the algorithm must average whole models the FedAvg
    way (the buffered rule replaces its aggregation)."""
    out = []
    if not sel.uses_count:
        ok = [n for n in SELECTORS.builtin_names() if SELECTORS.get(n).uses_count]
        out.append(
            f"selector {sname!r} trains a fixed set of clients, which has no meaning with mode: async (the server asks "
            f"for as many clients as there are free slots); use a selector that picks a number of clients "
            f"({', '.join(repr(n) for n in ok)}) or mode: sync"
        )
    if sel.sets_aggregation_weights:
        out.append(
            f"selector {sname!r} gives each round's aggregate its own weights, defined for the m draws of a "
            f"synchronous round, while mode: async weighs the buffered updates by n_k and staleness; use mode: sync"
        )
    if alg.aggregate is not Algorithm.aggregate or not alg.shares_model or alg.needs_groups:
        ok = [
            n
            for n in ALGORITHMS.builtin_names()
            if ALGORITHMS.get(n).aggregate is Algorithm.aggregate and ALGORITHMS.get(n).shares_model
        ]
        out.append(
            f"algorithm {aname!r} aggregates its own way, while mode: async applies FedBuff's buffered rule to model "
            f"deltas; use {', '.join(repr(n) for n in ok)} or mode: sync"
        )
    return out


def resolve_doc(doc: dict[str, Any] | None, source: str = "<dict>") -> Resolved:
    """Schema validation and :func:`resolve` of a config mapping, every problem in one pass.

    When keys are in error (an unknown key, a bad value), the rest of the config is still
    looked up: without those keys (their defaults stand in) and without the checks across keys,
    so an unknown top-level key and an unknown method name are reported together.

    Raises:
        ConfigError: ``invalid config SOURCE:`` then one line per problem.
    """
    if isinstance(doc, dict):
        try:
            cfg = ExperimentConfig.model_validate(doc)
        except ValidationError as e:
            locs = [err["loc"] for err in e.errors()]
            raise ConfigError.listing(source, schema_problems(e) + _names_past(doc, locs)) from None
    else:
        cfg = parse_config(doc, source)  # None is the defaults; anything else is refused there
    return resolve(cfg, source)


def _names_past(doc: dict[str, Any], locs: list[tuple]) -> list[Problem]:
    """The registry and option problems of ``doc`` once the keys at the error locations
    ``locs`` are taken out (:func:`_components` on what remains; what was taken out is not
    reported twice). [] when what remains does not validate in three tries."""
    import copy

    doc, cut = copy.deepcopy(doc), set()
    for _ in range(3):
        cut |= {_cut(doc, loc) for loc in locs}
        try:
            cfg = ExperimentConfig.model_validate(doc, context={NAMES_ONLY: True})
        except ValidationError as e:
            locs = [err["loc"] for err in e.errors()]
            continue
        found: list[Problem] = []
        _components(cfg, found)
        return [(k, m) for k, m in found if not _follows(k, cut)]
    return []


#: problems of these keys are judged against those keys: when one of the latter is in error, a
#: default stands in for it, and the former are not judged (options of another data set, say)
_JUDGED_AGAINST = {
    "data.options": ("data", "data.dataset"),
    "data.partition": ("data", "data.partition", "data.partition.scheme"),
    "model.options": ("model", "model.name"),
    **{
        k: ("method", "selector", "selector.name", "algorithm", "algorithm.name", "method_options")
        for k in ("selector", "algorithm", "method_options", "")
    },
}


def _follows(key: str, cut: set[str]) -> bool:
    """Whether a problem of ``key`` ("" for one naming its keys) comes from a key taken out:
    under it, or judged against it (:data:`_JUDGED_AGAINST`)."""
    if any(c and (key == c or key.startswith(c + ".")) for c in cut):
        return True
    group = next((g for g in _JUDGED_AGAINST if g and (key == g or key.startswith(g + "."))), "" if not key else None)
    return group is not None and bool(cut & set(_JUDGED_AGAINST[group]))


def _cut(doc: dict[str, Any], loc: tuple) -> str:
    """Delete the deepest key of ``doc`` on the error location ``loc`` (the key holding the
    list when the location runs through one); returns the dotted key deleted ("" when none)."""
    node, done = doc, []
    for part in loc:
        if not (isinstance(part, str) and isinstance(node, dict) and part in node):
            break
        parent, node = node, node[part]
        done.append(part)
    if done:
        del parent[done[-1]]
    return ".".join(done)


def parse_experiment(doc: dict[str, Any] | None, source: str = "<dict>") -> ExperimentConfig:
    """Schema validation and :func:`resolve`: the resolved config alone, every default written
    out (what ``config.yaml`` holds; for saving and comparing configs). To run it, keep the
    whole :class:`Resolved` instead (:func:`resolve_doc`), so that nothing resolves it again.

    Raises:
        ConfigError: one line per problem, all of them in one pass.
    """
    return resolve_doc(doc, source).config


def load_experiment(path: str | Path, overrides: dict[str, Any] | None = None) -> ExperimentConfig:
    """Read, validate and resolve an experiment YAML; ``overrides`` (dotted keys) apply first.

    Raises:
        FileNotFoundError: no such file. ConfigError: bad YAML, wrong kind of config, invalid values.
    """
    return resolve_doc(read_experiment(path, overrides), str(path)).config
