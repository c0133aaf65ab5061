"""The settings of Flower apps: the experiment a node or the ServerApp reads from its run and
node configs (the ClientApp's module docstring lists the keys), the federation built once per
process, and torch's thread count. Shared by the ClientApp and the ServerApp, which never
import each other.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from fedselect.common.memory import keep_freed_memory
from fedselect.config.load import config_kind, read_yaml_file
from fedselect.config.overrides import apply_overrides
from fedselect.config.schema import ConfigError, ExperimentConfig
from fedselect.experiment.resolve import parse_experiment
from fedselect.flower.shared import SharedFederations
from fedselect.world.federation import Federation, build_federation, federation_key

__all__ = [
    "CONFIG_FILE_KEY",
    "config_file",
    "settings_document",
    "node_experiment",
    "federation_for",
    "set_threads",
    "keep_freed_memory",
]

#: node/run config key holding the path of an experiment YAML
CONFIG_FILE_KEY = "fedselect-config"
_SECTIONS = frozenset(ExperimentConfig.model_fields)

_CONFIGS: OrderedDict[str, ExperimentConfig] = OrderedDict()
_FEDERATIONS: OrderedDict[str, Federation] = OrderedDict()
_CACHE_SIZE = 2


def _value(v: Any) -> Any:
    if isinstance(v, str) and v.strip()[:1] in ("[", "{"):
        import yaml

        try:
            return yaml.safe_load(v)
        except yaml.YAMLError as e:
            raise ConfigError(f"node/run config value {v!r} looks like a YAML list/mapping but is not valid YAML ({e})") from None
    return v


def config_file(path: str) -> Path:
    """Where ``fedselect-config = path`` is: an absolute path as is; a relative one in the working
    directory, else in the Flower app's directory (Flower puts it on ``sys.path`` when it loads
    the app; the FAB carries the app's YAML files to the SuperLink and to every SuperNode).
    Returns the path as given when it is nowhere (the reader then names it)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    for entry in sys.path:
        d = Path(entry or ".")
        if (d / "pyproject.toml").is_file() and (d / p).is_file():
            return d / p
    return p


def settings_document(merged: dict[str, Any], what: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The experiment described by flat Flower settings: the YAML of ``fedselect-config`` (or
    nothing) and the dotted experiment keys that override it (other keys are left out).

    Returns:
        ``(doc, overrides, source)``: the YAML's mapping, ``{dotted key: value}`` (strings
        starting with ``[`` or ``{`` read as YAML) and a description for error messages.

    Raises:
        ConfigError / FileNotFoundError: the file is missing, not YAML, or not an experiment.
    """
    doc: dict[str, Any] = {}
    source = what
    path = merged.get(CONFIG_FILE_KEY)
    if path:
        doc = read_yaml_file(config_file(str(path))) or {}
        if not isinstance(doc, dict) or config_kind(doc) != "experiment":
            raise ConfigError(
                f"{CONFIG_FILE_KEY} = {path!r}: expected an experiment YAML (as for `fedselect run`), "
                f"got a {config_kind(doc) if isinstance(doc, dict) else type(doc).__name__} file"
            )
        source = f"{path} with the {what}"
    overrides = {key: _value(v) for key, v in merged.items() if key.split(".")[0] in _SECTIONS}
    return doc, overrides, source


def node_experiment(run_config: dict[str, Any], node_config: dict[str, Any]) -> tuple[int, ExperimentConfig]:
    """The client id and experiment of a node from its run and node configs (module docstring).

    Returns:
        ``(k, cfg)``: the client id (``partition-id``) and the validated experiment.

    Raises:
        ConfigError: no ``partition-id``, a ``partition-id`` outside ``0..N-1``,
            ``num-partitions`` disagreeing with ``data.num_clients``, an unreadable
            ``fedselect-config`` file, or invalid experiment keys (named).
    """
    merged = {**dict(run_config), **dict(node_config)}
    if "partition-id" not in merged:
        raise ConfigError(
            "node config: no 'partition-id' (the client id k of this node, 0..N-1); start the SuperNode with "
            "--node-config 'partition-id=K num-partitions=N' (the simulation engine sets both)"
        )
    k = merged["partition-id"]
    if isinstance(k, bool) or not isinstance(k, int):
        raise ConfigError(f"node config: 'partition-id' must be an integer client id, got {k!r}")
    # one experiment for all the nodes of a run (a simulation's actors serve them all): cached without the client id
    ident = repr(sorted((key, v) for key, v in merged.items() if key != "partition-id"))
    if ident in _CONFIGS:
        _CONFIGS.move_to_end(ident)
        return _checked_client(k, _CONFIGS[ident]), _CONFIGS[ident]
    doc, overrides, source = settings_document(merged, "node/run config")
    n = merged.get("num-partitions")
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"node config: 'num-partitions' must be an integer >= 1, got {n!r}")
        doc_data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
        given = overrides.get("data.num_clients", doc_data.get("num_clients"))
        if given is not None and given != n:
            raise ConfigError(
                f"node config: num-partitions = {n} but data.num_clients = {given}; they must agree "
                f"(in the simulation engine num-partitions is the number of SuperNodes)"
            )
        overrides["data.num_clients"] = n
    if not ({"clients_per_round", "participation"} & (set(overrides) | set(doc))):
        # not used by a client; keeps the default valid for small federations
        doc_data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
        n_clients = overrides.get("data.num_clients", doc_data.get("num_clients", 20))
        if isinstance(n_clients, int) and not isinstance(n_clients, bool) and n_clients >= 1:
            overrides["clients_per_round"] = min(ExperimentConfig.model_fields["clients_per_round"].default, n_clients)
    cfg = parse_experiment(apply_overrides(doc, overrides), source)
    _CONFIGS[ident] = cfg
    if len(_CONFIGS) > 8:
        _CONFIGS.popitem(last=False)
    return _checked_client(k, cfg), cfg


def _checked_client(k: int, cfg: ExperimentConfig) -> int:
    if not 0 <= k < cfg.data.num_clients:
        raise ConfigError(
            f"node config: partition-id {k} is not a client id 0..{cfg.data.num_clients - 1} "
            f"(data.num_clients = {cfg.data.num_clients})"
        )
    return k


def federation_for(cfg: ExperimentConfig, shared: SharedFederations | None = None) -> Federation:
    """The federation of ``cfg``, once per process (the last two are kept): read from Ray's
    object store where ``shared`` holds it (Flower's simulation engine: the server's,
    :mod:`fedselect.flower.shared`), else built."""
    key = federation_key(cfg)
    if key in _FEDERATIONS:
        _FEDERATIONS.move_to_end(key)
        return _FEDERATIONS[key]
    fed = shared.federation(key) if shared is not None else None
    if fed is None:
        fed = build_federation(cfg)
    _FEDERATIONS[key] = fed
    while len(_FEDERATIONS) > _CACHE_SIZE:
        _FEDERATIONS.popitem(last=False)
    return fed


def set_threads(merged: dict[str, Any]) -> None:
    """``torch-threads`` of the settings, if given, for this process (bit-identical results
    need the same thread count as the run compared with).

    Raises:
        ConfigError: not an integer >= 1.
    """
    n = merged.get("torch-threads")
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"node/run config: 'torch-threads' must be an integer >= 1, got {n!r}")
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
