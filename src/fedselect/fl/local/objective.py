"""Local objectives: how an algorithm changes what a client minimises in local training.

FedAvg's client minimises its mean cross-entropy ``F_k(w)``. FedProx (Li et al. 2020, eq. 2),
SCAFFOLD (Karimireddy et al. 2020, Algorithm 1 line 10) and FedDyn (Acar et al. 2021, Algorithm 1)
add a term to it::

    h_k(w) = F_k(w) + R(w; w_0, s)

with ``w_0`` the weights local training starts from and ``s`` what the algorithm sends with the
job (a proximal weight, a control variate, a client's last gradient). An algorithm declares the
term as one :class:`LocalObjective` object, which its
:meth:`~fedselect.algorithms.base.Algorithm.local_objective` puts on the client's
:class:`~fedselect.fl.local.clients.TrainJob`; the trainer (:func:`fedselect.fl.local.train.train_steps`),
the worker pool, the stacked path (:mod:`fedselect.fl.local.batched`) and the Flower wire
(:mod:`fedselect.flower.wire`) carry it without knowing which algorithm made it.

**What an objective is.** A frozen dataclass, subclass of :class:`LocalObjective`, whose fields
are plain values (``bool``, ``int``, ``float``, ``str``) or tensor maps (``State``: parameter
name -> tensor, e.g. SCAFFOLD's ``c - c_k``). So it pickles to worker processes, and crosses the
Flower wire as typed records (its class as ``"module:qualname"``, its plain fields as config
entries, each tensor field as one ``ArrayRecord``: :func:`objective_fields`,
:func:`objective_class`); its class must be importable by that path wherever the job runs (not
defined in a function or a notebook). An objective holds no state across rounds: what a client
carries from round to round (SCAFFOLD's ``c_k``, FedDyn's gradient) is kept by the algorithm in
:attr:`fedselect.fl.types.ServerState.aux`, which checkpoints save, and a job's objective is made
from it; a resumed run therefore continues exactly.

**How it is applied.** Two forms of the same term:

* :meth:`LocalObjective.term` -- ``R`` as a scalar of pure torch operations on the trained
  parameters (``params``) and their start values (``start``). The stacked path adds it to each
  client's loss inside ``torch.func.vmap(grad(...))``, so it is used there only where the class
  declares ``stackable = True`` (otherwise the jobs train one after another).
* :meth:`LocalObjective.begin` -- the sequential path: called once before the first step with
  the trained parameters (holding the start weights); returns the function called after every
  backward pass, which adds ``dR/dw`` to each ``p.grad`` in place, before the optimiser step
  (so before momentum and weight decay). Default: the gradient of :meth:`term` by autograd.
  FedProx and SCAFFOLD override it with their closed forms (``mu (w - w_0)``, ``c - c_k``).

Adding one (docs/architecture.md, "Adding a local objective"; the worked example is
``examples/local-objective``, a FedDyn outside the package): a dataclass with :meth:`term`,
``stackable = True`` if the term is vmap-able, and an algorithm whose ``local_objective(state,
k)`` returns it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Callable, ClassVar, Collection, Mapping, Sequence

import torch

__all__ = [
    "LocalObjective",
    "objective_fields",
    "objective_path",
    "objective_class",
    "objective_bytes",
    "stack_key",
]

#: the plain field types an objective may have (a tensor field is a ``State``)
PLAIN = (bool, int, float, str)


@dataclass(frozen=True)
class LocalObjective:
    """Base class of a change to a client's local objective (module docstring).

    Class attributes:
        stackable: :meth:`term` is made of torch operations that ``torch.func.vmap`` can map
            over clients (no data-dependent Python control flow, no in-place changes), so the
            stacked path may train these jobs (:mod:`fedselect.fl.local.batched`). False (default):
            jobs with this objective always train one after another.
    """

    stackable: ClassVar[bool] = False

    def term(self, params: Mapping[str, torch.Tensor], start: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``R(w; w_0, s)``: the scalar added to the client's mean cross-entropy of a mini-batch.

        Args:
            params: the trained parameters ``w`` by name (a subset of the model's parameters
                when the job names ``trainable`` ones), each of the parameter's shape.
            start: their values when local training started (``w_0``), same names and shapes.

        Returns:
            A 0-dimensional tensor (its gradient is what changes training; its value is not
            reported: the training loss stays the cross-entropy).

        Raises:
            NotImplementedError: the subclass defines neither this nor :meth:`begin`.
        """
        raise NotImplementedError(f"{type(self).__name__} defines no term(params, start) (nor its own begin())")

    def begin(self, params: Sequence[tuple[str, torch.Tensor]]) -> Callable[[], None]:
        """Start applying the term to one client's local training (the sequential path).

        Args:
            params: ``(name, parameter)`` of the trained parameters, holding the start weights.

        Returns:
            A function called after every backward pass (before the optimiser step) that adds
            ``dR/dw`` to each parameter's ``.grad`` in place (a parameter whose ``.grad`` is
            None got no gradient this step and is left alone). Default: ``dR/dw`` of
            :meth:`term` by ``torch.autograd.grad``.

        Raises:
            ValueError: the objective does not fit these parameters.
        """
        names = [n for n, _ in params]
        tensors = [p for _, p in params]
        start = {n: p.detach().clone() for n, p in params}

        def add() -> None:
            with torch.enable_grad():
                r = self.term(dict(zip(names, tensors)), start)
                if not r.requires_grad:  # a term that does not depend on the weights adds nothing
                    return
                grads = torch.autograd.grad(r, tensors, allow_unused=True)
            with torch.no_grad():
                for p, g in zip(tensors, grads):
                    if p.grad is not None and g is not None:
                        p.grad.add_(g)

        return add

    def check(self, param_names: Collection[str]) -> None:
        """Refuse an objective that does not fit a model with these parameters, before any
        job runs. Default: every tensor field holds one entry per parameter, no other.

        Raises:
            ValueError: naming the field, the missing and the unexpected entries.
        """
        names = set(param_names)
        for f, st in objective_fields(self)[1].items():
            if set(st) != names:
                raise ValueError(
                    f"{type(self).__name__}.{f} needs one entry per parameter "
                    f"(missing {sorted(names - set(st))}, unexpected {sorted(set(st) - names)})"
                )


def objective_fields(obj: LocalObjective) -> tuple[dict[str, Any], dict[str, dict[str, torch.Tensor]]]:
    """``(plain, tensors)``: the objective's plain fields and its tensor fields, by field name.

    Raises:
        TypeError: ``obj`` is not a dataclass instance of :class:`LocalObjective`, or a field
            is neither plain (bool, int, float, str) nor a map of names to tensors (named).
    """
    if not isinstance(obj, LocalObjective) or not is_dataclass(obj):
        raise TypeError(f"a local objective is a dataclass subclassing LocalObjective, got {type(obj).__name__}")
    plain: dict[str, Any] = {}
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, PLAIN):
            plain[f.name] = v
        elif isinstance(v, Mapping) and all(isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in v.items()):
            tensors[f.name] = dict(v)
        else:
            raise TypeError(
                f"{type(obj).__name__}.{f.name} is a {type(v).__name__}; a local objective's fields are bool, int, "
                "float, str or a map of parameter names to tensors"
            )
    return plain, tensors


def objective_path(cls: type) -> str:
    """``"module:qualname"`` of an objective's class (what the Flower wire sends)."""
    return f"{cls.__module__}:{cls.__qualname__}"


def objective_class(path: str) -> type[LocalObjective]:
    """The objective class at ``"module:qualname"`` (:func:`objective_path`), imported.

    Raises:
        ValueError: a malformed path, a module that cannot be imported, no such attribute, or
            not a subclass of :class:`LocalObjective` (each named).
    """
    module_name, _, qualname = str(path).partition(":")
    if not module_name or not qualname or "<" in qualname:
        raise ValueError(f"a local objective's class is named 'module:qualname' (importable), got {path!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"local objective {path!r}: cannot import module {module_name!r} ({type(e).__name__}: {e})") from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"local objective {path!r}: {obj.__name__!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, LocalObjective)):
        raise ValueError(f"local objective {path!r} is {obj!r}, not a subclass of fedselect.fl.local.objective.LocalObjective")
    return obj


def objective_bytes(obj: LocalObjective | None) -> int:
    """Bytes of the objective's tensors (what travels with a job beyond its start state)."""
    if obj is None:
        return 0
    return int(sum(t.numel() * t.element_size() for st in objective_fields(obj)[1].values() for t in st.values()))


def stack_key(obj: LocalObjective | None) -> tuple:
    """Jobs whose objectives have equal keys can train in one stack: the class and the plain
    fields (the tensor fields are stacked client by client)."""
    if obj is None:
        return ()
    plain = objective_fields(obj)[0]
    return (type(obj), tuple(sorted((k, type(v).__name__, v) for k, v in plain.items())))
