"""A component's options: read from its pydantic ``Options`` model or, for data-set loaders, model
factories and partition schemes without one, from its signature; checked, with every default
written out (:func:`fedselect.experiment.resolve.resolve` calls these for every component of a
config; ``fedselect list`` shows the defaults they find). Problems are appended to a list as
``(dotted key, what is wrong)`` pairs, so that a config's problems are all reported at once.
"""

from __future__ import annotations

import dis
import inspect
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from fedselect.config.schema import UNKNOWN_KEY

#: a problem of a config: (dotted key, what is wrong); key "" when the message names its keys
Problem = tuple[str, str]


# ------------------------------------------------------------------------ signature options
def option_names(fn: Any, skip: tuple[str, ...] = ()) -> tuple[list[str], bool]:
    """Keyword options ``fn`` accepts, and whether it forwards extra keywords (a ``**kwargs``
    that the body uses; one it never reads, like ``**_``, swallows typos silently, so keys
    outside the named ones are then errors)."""
    if not inspect.isfunction(fn):  # e.g. object.__init__ of a class without its own: takes nothing
        return [], False
    params = inspect.signature(fn).parameters.values()
    named = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip]
    var = [p.name for p in params if p.kind == p.VAR_KEYWORD]
    forwards = bool(var) and any(i.argval == var[0] and i.opname.startswith("LOAD") for i in dis.get_instructions(fn))
    return named, forwards


def signature_defaults(fn: Any, skip: tuple[str, ...]) -> dict[str, Any]:
    """The keyword parameters of ``fn`` that have a default (a tuple given as a list, as YAML
    writes it), but those in ``skip``."""
    if not inspect.isfunction(fn):
        return {}
    out = {}
    for p in inspect.signature(fn).parameters.values():
        if p.name in skip or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or p.default is p.empty:
            continue
        v = p.default
        out[p.name] = list(v) if isinstance(v, tuple) else v
    return out


def _int_only(hint: Any) -> bool | None:
    """True for ``int``, None-able for ``int | None``; None when the hint is not an integer."""
    if hint is int:
        return True
    args = set(typing.get_args(hint))
    if args and args <= {int, type(None)} and int in args:
        return True
    return None


def check_signature(label: str, what: str, fn: Any, options: dict[str, Any], skip: tuple[str, ...]) -> list[Problem]:
    """The problems of ``options`` given at ``label`` to ``fn`` (``what`` names it): a key in
    ``skip`` (the runner passes it), an unknown key (unless ``fn`` forwards extra keywords), a
    value that is not an integer where the annotation asks for one."""
    named, forwards = option_names(fn, skip)
    reserved = sorted(set(options) & set(skip))
    if reserved:
        return [(label, f"{reserved} cannot be set here (the runner passes them)")]
    unknown = sorted(set(options) - set(named))
    if unknown and not forwards:
        return [(label, f"unknown option(s) {unknown} for {what}; allowed: {sorted(named)}")]
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable annotations: the loader checks its own values
        hints = {}
    errors = []
    for key, value in options.items():
        if _int_only(hints.get(key)) and value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            errors.append((f"{label}.{key}", f"Input should be a valid integer, got {value!r}"))
    return errors


# ------------------------------------------------------------------------ component options
def validate_options(label: str, model: type[BaseModel], options: dict[str, Any], errors: list[Problem]) -> BaseModel | None:
    """``options`` validated (strictly) by a component's ``Options`` ``model``; None after
    appending one problem per bad key (under ``label``) to ``errors``."""
    try:
        return model.model_validate(options, strict=True)
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"])
            msg = (
                f"{UNKNOWN_KEY}; allowed: {sorted(model.model_fields)}"
                if err["type"] == "extra_forbidden"
                else err["msg"].removeprefix("Value error, ")
            )
            errors.append((f"{label}.{loc}" if loc else label, msg))
        return None


#: what the runner passes a data-set loader and a model factory itself (never config options)
DATASET_ARGS = ("seed",)
MODEL_ARGS = ("input_shape", "num_classes")
#: the default of an option that has none (:func:`option_defaults`)
REQUIRED = "required"
#: placeholder values of those arguments, to check that a call with the options can bind
_PLACEHOLDERS = {"seed": 0, "input_shape": (1, 28, 28), "num_classes": 10}


def options_model(obj: Any) -> type[BaseModel] | None:
    """The pydantic model of a model factory's or data-set loader's options: its ``Options``
    attribute (set by ``register_model(name, options)``), or None (its keyword parameters)."""
    opts = getattr(obj, "Options", None)
    return opts if isinstance(opts, type) and issubclass(opts, BaseModel) else None


def callable_signature(obj: Any, passed: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
    """The function whose keyword parameters are ``obj``'s options (a class: its ``__init__``)
    and the parameters to skip (``passed``, plus ``self`` for a class)."""
    if isinstance(obj, type):
        return obj.__init__, ("self", *passed)
    return obj, passed


def option_defaults(obj: Any, passed: tuple[str, ...]) -> tuple[dict[str, Any], bool]:
    """The options of a model factory or data-set loader (``passed``: what the runner passes it,
    :data:`MODEL_ARGS` / :data:`DATASET_ARGS`) with their defaults (``REQUIRED`` for none), and
    whether it takes more keywords than those (a ``**kwargs`` it reads)."""
    model = options_model(obj)
    if model is not None:
        return {
            k: REQUIRED if f.is_required() else f.get_default(call_default_factory=True) for k, f in model.model_fields.items()
        }, False
    fn, skip = callable_signature(obj, passed)
    named, forwards = option_names(fn, skip)
    defaults = signature_defaults(fn, skip)
    return {k: defaults.get(k, REQUIRED) for k in named}, forwards


def callable_options(
    key: str, name: str, obj: Any, options: dict[str, Any], passed: tuple[str, ...], errors: list[Problem]
) -> dict[str, Any] | None:
    """The options of the data-set loader or model factory ``obj``, called ``name`` at ``key``
    (``data.dataset``, ``model.name``), checked (its ``Options`` model, else its signature) with
    every default written out; None after appending the problems to ``errors``. The call the
    runner will make must bind to the signature: ``passed`` by keyword for a loader, by
    position for a model factory, then the options."""
    label = key.rsplit(".", 1)[0] + ".options"
    what = f"{'dataset' if key == 'data.dataset' else 'model'} {name!r}"
    model = options_model(obj)
    if model is not None:
        checked = validate_options(label, model, options, errors)
        out = None if checked is None else checked.model_dump(mode="json")
    else:
        fn, skip = callable_signature(obj, passed)
        bad = check_signature(label, what, fn, options, skip)
        errors += bad
        out = None if bad else {**signature_defaults(fn, skip), **options}
    if out is None:
        return None
    by_keyword = passed == DATASET_ARGS
    args = [_PLACEHOLDERS[a] for a in passed]
    try:
        sig = inspect.signature(obj)
    except ValueError:  # no signature to read (a builtin): the call itself will tell
        return out
    try:
        if by_keyword:
            sig.bind(**dict(zip(passed, args)), **out)
        else:
            sig.bind(*args, **out)
    except TypeError as e:
        call = ", ".join(f"{a}=..." if by_keyword else a for a in passed)
        errors.append((key, f"cannot be called as ({call}, **options) with options {out}: {e}"))
        return None
    return out
