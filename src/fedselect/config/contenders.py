"""The contenders of a comparison or a sweep: their labels, the file names the labels become,
how an entry changes the base experiment, and where a problem of a contender's experiment was
given.

A comparison or a sweep builds each run's experiment in layers, lowest first: ``base``, the
method entry (``methods.<i>``), the grid point (``grid``, sweeps) and ``set`` (the command
line's ``--set``, in every run). A problem found in the experiment is named by the layer that
gave its key (``base.trian``, ``methods.1.method``, ``grid.clients_per_round``,
``set.train.lr``), once however many runs share it (:func:`contender_problems`).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fedselect.config.overrides import apply_overrides
from fedselect.config.presets import PRESETS
from fedselect.config.schema import UNKNOWN_KEY, ConfigError, problem_line, schema_problems
from fedselect.config.sections import ComponentConfig

#: characters a method label may hold besides letters and digits (of any script: Ø, β, é)
LABEL_PUNCTUATION = " _.+-()"


def check_label(label: str) -> None:
    """Refuse a method label that tables, plots and run directory names cannot carry.

    Allowed: letters and digits of any script (``Ø``, ``β``, combining accents), space and
    ``_ . + - ( )``. Refused: any other character (named, with its code point: ``/`` would
    make a sub-directory of ``runs/``, ``:`` ``|`` ``*`` break tables and file names), an empty
    label, and a label starting with ``_``, which matplotlib leaves out of every plot legend.

    Raises:
        ValueError: naming the label and every refused character.
    """
    if not label.strip():
        raise ValueError(f"label {label!r}: empty; give the method a name (letters, digits, space and _ . + - ( ))")
    bad = []
    for ch in label:
        cat = unicodedata.category(ch)
        ok = ch in LABEL_PUNCTUATION or cat[0] in "LM" or cat == "Nd"  # letters, accents, decimal digits
        if not ok and ch not in bad:
            bad.append(ch)
    if bad:
        names = ", ".join(f"{ch!r} (U+{ord(ch):04X} {unicodedata.name(ch, '') or 'a control character'})" for ch in bad)
        raise ValueError(
            f"label {label!r}: character{'s' if len(bad) > 1 else ''} {names} not allowed; a label holds letters and "
            f"digits (any script, e.g. Ø or β), space and _ . + - ( ) only"
        )
    if label.startswith("_"):
        raise ValueError(
            f"label {label!r} starts with '_': matplotlib leaves such labels out of every plot legend, so this method "
            f"would vanish from the plots; start it with a letter or digit (e.g. {label.lstrip('_') or 'method'!r})"
        )


def file_name(label: str) -> str:
    """The name ``label`` takes in run directories and plot files: spaces become ``_``."""
    return label.replace(" ", "_")


def clashes(named: list[tuple[str, str]]) -> list[tuple[str, str, str, str]]:
    """Every two distinct items of ``(who, file name)`` whose names would be one file:
    ``(first, second, its name, theirs)``. Names clash when equal, or equal but for case or
    Unicode normalisation (``FedAvg`` / ``fedavg``, ``é`` composed / decomposed), which the
    default file systems of macOS and Windows store as one name."""
    seen: dict[str, tuple[str, str]] = {}
    out = []
    for who, name in named:
        key = unicodedata.normalize("NFC", name).casefold()
        first = seen.setdefault(key, (who, name))
        if first[0] != who:
            out.append((first[0], who, first[1], name))
    return out


def clash_message(first: str, second: str, a: str, b: str, where: str, what: str = "names") -> str:
    """``first`` and ``second`` would share one file or directory name (theirs: ``a``, ``b``)
    ``where`` (e.g. ``in the run directories runs/<name>-s<seed>``); ``what`` they should
    differ in (``names``, ``values``)."""
    if a == b:
        return f"{first} and {second} both become {a!r} {where}; give them {what} that differ in more than spaces and _"
    return (
        f"{first} and {second} become {a!r} and {b!r} {where}, one name on macOS and Windows (their file systems "
        f"ignore case); give them {what} that differ in more than case"
    )


class MethodSpec(BaseModel):
    """One contender of a comparison or sweep: a ``label`` for tables and plots, and what runs:
    a ``method`` preset and/or an explicit ``selector`` / ``algorithm`` ({name, options}; a
    section without a name gives options to the preset's part), with ``method_options`` as in
    an experiment."""

    model_config = ConfigDict(extra="forbid")
    label: str | None = None
    method: str | None = None
    selector: ComponentConfig | None = None
    algorithm: ComponentConfig | None = None
    method_options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _label(self) -> "MethodSpec":
        if self.method is None and self.selector is None and self.algorithm is None:
            raise ValueError("give a method, or a selector and/or an algorithm")
        if self.label is None:
            parts = [c.name.rsplit(":", 1)[-1] for c in (self.selector, self.algorithm) if c is not None and c.name]
            self.label = "+".join(([self.method] if self.method else []) + parts)
            if not self.label:
                raise ValueError("give a `label`: neither a method nor a component name says what this entry runs")
        check_label(self.label)
        return self

    def changes(self) -> dict[str, Any]:
        """This contender as dotted overrides of the base experiment (:func:`switch_components`
        applies them): a ``method`` replaces the base's, a ``selector`` / ``algorithm`` names that
        part and refines its options, ``method_options`` are merged over the base's."""
        out: dict[str, Any] = {} if self.method is None else {"method": self.method}
        for part, spec in (("selector", self.selector), ("algorithm", self.algorithm)):
            if spec is not None:
                out.update({f"{part}.name": spec.name} if spec.name else {})
                out.update({f"{part}.options.{k}": v for k, v in spec.options.items()})
        out.update({f"method_options.{k}": v for k, v in self.method_options.items()})
        return out

    def apply(self, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` (the base experiment mapping) with this contender in it: a ``method``
        replaces the base's, and a part it or a ``selector`` / ``algorithm`` here names
        differently from the base replaces the base's section (:func:`switch_components`);
        options are merged over the base's."""
        changes = self.changes()
        return apply_overrides(switch_components(doc, changes), changes)

    def given(self) -> dict[str, str]:
        """The experiment keys this entry gives, each with its path in the entry (a
        :class:`Layer`'s ``keys``)."""
        return {k: k for k in self.changes()}


def named_parts(overrides: dict[str, Any]) -> dict[str, str | None]:
    """The component each part (``selector``, ``algorithm``) is named by ``overrides``, for the
    parts they name: by ``part.name`` (or ``part`` given whole with a name), else by the
    ``method`` preset they set (None for a preset that does not exist)."""
    out: dict[str, str | None] = {}
    preset = PRESETS.get(overrides["method"]) if overrides.get("method") is not None else None
    for part in ("selector", "algorithm"):
        whole = overrides.get(part)
        if f"{part}.name" in overrides:
            out[part] = overrides[f"{part}.name"]
        elif isinstance(whole, dict) and whole.get("name") is not None:
            out[part] = whole["name"]
        elif overrides.get("method") is not None:
            out[part] = getattr(preset, part) if preset is not None else None
    return out


def switch_components(doc: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without the ``selector`` / ``algorithm`` sections that ``overrides`` switch to
    another component (:func:`named_parts`): those options belong to the component left. A
    section naming the component the overrides name is kept, and they refine it; a section
    without a name stays (it gives options to whichever component the part ends up with).
    ``doc``'s ``method`` goes too when the overrides replace both of its parts."""
    out = dict(doc)
    named = named_parts(overrides)
    for part, name in named.items():
        have = out.get(part)
        if isinstance(have, dict) and have.get("name") is not None and have["name"] != name:
            out.pop(part)
    preset = PRESETS.get(out["method"]) if isinstance(out.get("method"), str) and "method" not in overrides else None
    if preset is not None and all(named.get(part) not in (None, getattr(preset, part)) for part in ("selector", "algorithm")):
        out.pop("method")  # both of its parts replaced: it would name nothing
    return out


@dataclass(frozen=True)
class Layer:
    """A part of a contender's experiment: ``prefix`` (``base``, ``methods.1``, ``grid``,
    ``set``) and the dotted experiment keys it gives, each with its own path there
    (``train.lr`` -> ``overrides.train.lr`` in a method entry)."""

    prefix: str
    keys: dict[str, str]

    @classmethod
    def of(cls, prefix: str, doc: dict[str, Any] | None, inner: str = "") -> "Layer":
        """The layer of a mapping (every key of it, sections descended) or of dotted keys."""
        return cls(prefix, {k: inner + k for k in flat_keys(doc or {})})


def flat_keys(doc: dict[str, Any], prefix: str = "") -> list[str]:
    """Every dotted key of a mapping down to its values (lists are values)."""
    out = []
    for k, v in doc.items():
        key = f"{prefix}{k}"
        out += flat_keys(v, key + ".") if isinstance(v, dict) and v else [key]
    return out


def where(key: str, layers: list[Layer]) -> str | None:
    """The path of ``key`` in the highest of ``layers`` (first = highest) that gives it, a
    section above it or a key below it; None when none does (a default)."""
    for layer in layers:
        for k, shown in layer.keys.items():
            if key == k or key.startswith(k + "."):
                return f"{layer.prefix}.{shown}{key[len(k) :]}"
            if k.startswith(key + ".") and shown.endswith(k):
                return f"{layer.prefix}.{shown[: len(shown) - len(k)]}{key}"
    return None


def contender_problems(runs: list[tuple[str, list[Layer], list[tuple[str, str]]]]) -> list[tuple[str, str]]:
    """The problems of several contenders' experiments as one list.

    Args:
        runs: per experiment, ``(who, layers, problems)``: a name for it (``methods.1
            ('FLASH-RL')``), its layers (first = highest) and its ``(key, message)`` problems.

    Returns:
        ``(path, message)`` pairs, each once: a key some layer gave named by that layer
        (``base.trian``); a problem no layer gave (about a default, or naming several keys)
        as it is when every experiment has it, else once per experiment that has it, named by
        ``who``.
    """
    out: dict[tuple[str, str], None] = {}
    unplaced: dict[tuple[str, str], list[str]] = {}
    for who, layers, problems in runs:
        for key, msg in problems:
            place = where(key, layers) if key else None
            if place is not None:
                out[(place, msg)] = None
            else:
                unplaced.setdefault((key, msg), []).append(who)
    for (key, msg), whos in unplaced.items():
        if len(whos) == len(runs):
            out[(key, msg)] = None
        else:
            out.update({(who, problem_line(key, msg)): None for who in whos})
    if any(path.startswith("set.") and msg.startswith(UNKNOWN_KEY) for path, msg in out):
        out[("set", SET_ONE_METHOD)] = None
    return list(out)


#: said under an unknown ``set`` (--set) key: it reaches every method, which may not all take it
SET_ONE_METHOD = (
    "--set (and `set:`) applies to every method; to change one method only, edit its entry under `methods:` "
    "(e.g. its method_options)"
)


#: keys the base of a comparison or sweep may not hold, and why (each run's are its own)
BASE_REFUSED = {
    "name": "not used: each run is named <name>/<label>; name the comparison or sweep with its top-level `name:`",
    "seed": "not used: every run takes its seed from `seeds:` (or --seeds); list the seeds there",
}
#: keys ``set`` (--set) may not change in a comparison or sweep, and why
SET_REFUSED = {
    **BASE_REFUSED,
    "method": "the methods say what runs; change an entry of `methods:` instead",
    "selector": "the methods say what runs; change an entry of `methods:` instead (options may be set: selector.options.KEY)",
    "algorithm": "the methods say what runs; change an entry of `methods:` instead (options may be set: algorithm.options.KEY)",
}


def set_problems(sets: Any, refused: dict[str, str]) -> list[tuple[str, str]]:
    """``set``'s keys that a comparison or sweep does not take (``refused``: key -> why), and a
    ``set`` that is not a mapping of dotted keys."""
    if not isinstance(sets, dict):
        return [("set", f"expected a mapping of dotted keys to values, got {type(sets).__name__}")]
    out = []
    for key in sets:
        head = next((k for k in refused if key == k or key.startswith(k + ".") and not key.startswith(f"{k}.options")), None)
        if head is not None:
            out.append((f"set.{key}", refused[head]))
    return out


def label_problems(entries: list[tuple[int, MethodSpec]], where: str) -> list[tuple[str, str]]:
    """Two entries with one label, or with labels that become one file name (``where``: the
    run directories they would share, with ``LABEL`` for the name)."""
    out = []
    for a, b, na, nb in clashes([(f"methods.{i}", file_name(m.label)) for i, m in entries]):
        la, lb = (next(m.label for i, m in entries if f"methods.{i}" == x) for x in (a, b))
        if la == lb:
            out.append((f"{b}.label", f"duplicate label {lb!r} (the label of {a} too); give each method a distinct `label`"))
        else:
            out.append((f"{b}.label", clash_message(f"{lb!r}", f"the label {la!r} of {a}", na, nb, where.replace("LABEL", nb))))
    return out


def entries_of(doc: dict[str, Any], entry: type[MethodSpec]) -> list[tuple[int, MethodSpec]]:
    """``(i, entry)`` for each entry of ``doc["methods"]`` that validates alone (the others'
    problems are the schema's to report)."""
    out = []
    for i, m in enumerate(doc.get("methods") or [] if isinstance(doc.get("methods"), list) else []):
        try:
            out.append((i, entry.model_validate(m)))
        except ValidationError:
            continue
    return out


def validate_contenders(
    model: type[BaseModel],
    entry: type[MethodSpec],
    doc: Any,
    source: str,
    what: str,
    refused: dict[str, str],
    where: str,
    **fallback: Any,
) -> tuple[Any, list[tuple[int, MethodSpec]], list[tuple[str, str]], int]:
    """A comparison or sweep mapping validated as ``model``, with the problems of its own keys:
    schema, labels that clash (``where``: their run directories, see :func:`label_problems`), a
    ``base`` holding :data:`BASE_REFUSED` keys, ``set`` keys in ``refused``.

    Returns:
        ``(config, entries, problems, seed)``: ``config`` without the refused keys of its base;
        when the schema refuses ``doc``, a stand-in built from what is valid (the entries that
        validate alone, ``name``, ``base``, ``set``; ``fallback`` for other fields), so that the
        runs' experiments are still checked, with ``seed`` (the first of ``seeds``, else 0).

    Raises:
        ConfigError: ``doc`` is not a mapping.
    """
    if not isinstance(doc, dict):
        raise ConfigError(f"invalid {what} {source}: the top level must be a mapping, got {type(doc).__name__}")
    problems: list[tuple[str, str]] = []
    try:
        cfg = model.model_validate(doc)
        entries = list(enumerate(cfg.methods))
    except ValidationError as e:
        problems += schema_problems(e)
        entries = entries_of(doc, entry)
        valid = {
            f: doc[k]
            for k, f, kind in (("name", "name", str), ("base", "base", dict), ("set", "set_", dict))
            if isinstance(doc.get(k), kind)
        }
        cfg = model.model_construct(methods=[m for _, m in entries], **valid, **fallback)
    problems += label_problems(entries, where)
    problems += [(f"base.{k}", why) for k, why in BASE_REFUSED.items() if k in cfg.base]
    problems += set_problems(doc.get("set", {}), refused)
    seeds = doc.get("seeds")
    seed = seeds[0] if isinstance(seeds, list) and seeds and isinstance(seeds[0], int) else 0
    cfg = cfg.model_copy(update={"base": {k: v for k, v in cfg.base.items() if k not in BASE_REFUSED}})
    return cfg, entries, problems, seed


def problems_of(check: Any) -> list[tuple[str, str]]:
    """The ``(key, message)`` problems ``check()`` raises as a :class:`ConfigError` ([] when none)."""
    try:
        check()
    except ConfigError as e:
        return e.problems or [("", str(e))]
    return []


def join_set(doc: Any, overrides: dict[str, Any] | None, source: str, what: str) -> Any:
    """A comparison or sweep mapping with ``overrides`` (the command line's ``--set``) added to
    its ``set``.

    Raises:
        ConfigError: a key both in the config's ``set`` and in ``overrides``.
    """
    if not overrides or not isinstance(doc, dict):
        return doc
    given = doc.get("set") if isinstance(doc.get("set"), dict) else {}
    both = sorted(set(given) & set(overrides))
    if both:
        raise ConfigError(f"invalid {what} {source}: {both} given twice (in the config's `set:` and on the command line)")
    return {**doc, "set": {**given, **overrides}}
