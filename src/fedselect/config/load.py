"""Config files: YAML read with duplicate keys refused, an experiment file read, overridden and
validated (:func:`load_config`), the kind of a config file told (experiment, comparison or
sweep), and a resolved config written back out as YAML (:func:`dump_config`).

The schema these files are checked against is :mod:`fedselect.config.schema`; resolving the
names in them is :func:`fedselect.experiment.resolve.resolve_doc`'s job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fedselect.config.overrides import apply_overrides
from fedselect.config.schema import ConfigError, ExperimentConfig, parse_config


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last
    one silently, so ``rounds: 10`` then ``rounds: 100`` would run 100 rounds without a word)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} is given twice (line {first.start_mark.line + 1} and line "
                    f"{key_node.start_mark.line + 1}); keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def safe_load_unique(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicate keys.

    Raises:
        yaml.YAMLError: invalid YAML or a key given twice in one mapping (line numbers named).
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def read_yaml_file(path: str | Path, what: str = "config") -> Any:
    """The parsed YAML of a file (None when empty).

    Raises:
        FileNotFoundError: no such file. ConfigError: a directory, invalid YAML or not UTF-8 text.
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what} {p} is a directory; give a YAML file (to continue a run directory use --resume)")
    if not p.is_file():
        raise FileNotFoundError(f"{what} file not found: {p}")
    try:
        return safe_load_unique(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"invalid YAML in {p}: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {p} is not a UTF-8 text file ({e.reason} at byte {e.start}); give a YAML file") from None


def read_experiment(path: str | Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The mapping of an experiment YAML with ``overrides`` (dotted keys) applied, before any
    validation (:func:`load_config` validates it; :func:`fedselect.experiment.resolve.resolve_doc` also
    resolves it, every problem in one pass).

    Raises:
        FileNotFoundError: no such file. ConfigError: bad YAML, an empty file, not a mapping, a
            comparison or sweep config, or overrides that cannot be set.
    """
    p = Path(path)
    doc = read_yaml_file(p)
    if doc is None:
        raise ConfigError(
            f"config file {p} is empty (no settings); write at least one key (e.g. `name: my-run`), "
            f"or omit CONFIG to run the embedded default"
        )
    if not isinstance(doc, dict):
        raise ConfigError(f"invalid config {p}: the top level must be a mapping of keys to values, got {type(doc).__name__}")
    if overrides:
        doc = apply_overrides(doc, overrides)
    kind = config_kind(doc)
    if kind != "experiment":
        raise ConfigError(f"{p} is a {kind} config, not a single experiment: run it with `fedselect {kind} {p}`")
    return doc


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> ExperimentConfig:
    """Read and validate a YAML config; ``overrides`` (dotted keys) are applied first.

    Raises:
        FileNotFoundError: no such file. ConfigError: bad YAML or invalid values.
    """
    return parse_config(read_experiment(path, overrides), str(path))


def config_kind(doc: Any) -> str:
    """``"compare"`` (base + methods), ``"sweep"`` (grid) or ``"experiment"``: lets each command
    point a user who passed the wrong kind of file to the right command."""
    if isinstance(doc, dict):
        if "grid" in doc or "grid_keys" in doc or "columns" in doc:  # columns: a sweep's table, even without a grid
            return "sweep"
        if "methods" in doc and "base" in doc:
            return "compare"
    return "experiment"


def dump_config(cfg: ExperimentConfig) -> str:
    """The fully resolved config as YAML (every default written out)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
