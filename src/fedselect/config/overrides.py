"""Dotted overrides (``--set train.lr=0.1``, a comparison's per-method keys): set keys deep in a
config mapping before it is validated, refusing a key that cannot be set or is given twice."""

from __future__ import annotations

from typing import Any

from fedselect.config.schema import ConfigError


def apply_overrides(doc: dict[str, Any] | None, overrides: dict[str, Any], source: str = "overrides") -> dict[str, Any]:
    """Set dotted keys (``"train.lr": 0.1``) in a copy of ``doc`` (``source`` names them in errors).

    Shallower keys are set first, so a section given whole (``"selector": {"name": "oort"}``)
    and keys inside it (``"selector.options.exploration_factor": 0.5``) combine whatever their
    order; a section missing or null on the way is created.

    Raises:
        ConfigError: naming every key that cannot be set: a key inside a value that is not a
            section (``rounds.x``), or a key given twice (a section given whole already sets it).
    """
    import copy

    out = copy.deepcopy(doc) if doc else {}
    problems = []
    for key in sorted(overrides, key=lambda k: k.count(".")):
        parts = key.split(".")
        if not all(parts):
            problems.append((key, "not a dotted key (an empty part between dots)"))
            continue
        twice = next(
            (".".join(parts[:i]) for i in range(1, len(parts)) if _holds(overrides.get(".".join(parts[:i])), parts[i:])), None
        )
        if twice is not None:
            problems.append((key, f"given twice: {twice} = {overrides[twice]!r} sets it too; give it once"))
            continue
        node = out
        for i, part in enumerate(parts[:-1]):
            if node.get(part) is None:
                node[part] = {}
            elif not isinstance(node[part], dict):
                problems.append((key, f"{'.'.join(parts[: i + 1])} is {node[part]!r}, a value, not a section with keys"))
                break
            node = node[part]
        else:
            node[parts[-1]] = copy.deepcopy(overrides[key])
    if problems:
        raise ConfigError.listing(source, problems)
    return out


def _holds(section: Any, parts: list[str]) -> bool:
    """Whether the mapping ``section`` (a value given whole) has a value at ``parts``."""
    for part in parts:
        if not isinstance(section, dict) or part not in section:
            return False
        section = section[part]
    return True
