"""FedPer (Arivazhagan et al. 2019, the CEFL paper's [15]): every client, base layers shared.

Also the base / personalised split that CEFL reuses (CE-eq 6, 7; SPEC 0.5):

* :func:`base_layer_names` — which state-dict entries are "base layers": by default every
  layer before the first fully connected (``nn.Linear``) module (for the CNNs: the
  convolutional layers), or the first ``B`` layers, or layers named explicitly.
* :func:`apply_base` — CE-eq 7: overwrite a client's base entries with the aggregate; its
  personalised entries are left bit-identical.

The averaging itself (CE-eq 6) is :func:`fedselect.fl.partial_average`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from fedselect.methods import register_method
from fedselect.methods.personalised import PersonalisedMethod
from fedselect.methods.similarity import layer_groups

__all__ = ["model_layers", "base_layer_names", "apply_base", "BaseLayerOptions", "FedPer"]


def model_layers(model: nn.Module) -> dict[str, list[str]]:
    """The model's layers in order: module name -> its state-dict keys (parameters and
    buffers it owns directly). Only modules that own at least one tensor appear; the order is
    the order of ``model.state_dict()`` (registration order, which for the papers' networks
    is the order of the forward pass)."""
    return layer_groups(list(model.state_dict().keys()))


def base_layer_names(model: nn.Module, base: int | Sequence[str] | None = None) -> list[str]:
    """State-dict keys of the base layers (the shared ones; the rest are personalised).

    Args:
        model: the network (used for its module types and order).
        base: ``None`` (default) -> every layer before the first ``nn.Linear`` module (the
            convolutional / recurrent feature extractor; SPEC 2 item 5). An ``int`` B -> the
            first B layers (see :func:`model_layers`). A sequence of names -> those layers
            (module names such as ``"conv1"``) or single entries (``"conv1.weight"``).

    Returns:
        state-dict keys, in model order.

    Raises:
        ValueError: the base set is empty (e.g. the default on a model whose first layer is
            fully connected: give ``base`` as a count then), B outside ``1..L`` (L = number
            of layers), or an unknown name (lists the layers).
    """
    layers = model_layers(model)
    order = list(layers)
    if base is None:
        modules = dict(model.named_modules())
        chosen: list[str] = []
        for layer in order:
            if isinstance(modules.get(layer), nn.Linear):
                break
            chosen.append(layer)
        if not chosen:
            raise ValueError(
                f"empty base layer set: the first layer of {type(model).__name__} is fully connected; "
                f"give base_layers as a count 1..{len(order)} or as names from {order}"
            )
        return [n for layer in chosen for n in layers[layer]]
    if isinstance(base, (int, np.integer)) and not isinstance(base, bool):
        if not 1 <= int(base) <= len(order):
            raise ValueError(
                f"base_layers={base}: must be between 1 and the number of layers {len(order)} ({order}); "
                f"an empty base set is not allowed"
            )
        return [n for layer in order[: int(base)] for n in layers[layer]]
    if isinstance(base, str):
        base = [base]
    names = list(base)
    if not names:
        raise ValueError("empty base layer set: base_layers=[] (give layer names or a count)")
    keys = set(model.state_dict().keys())
    wanted: set[str] = set()
    for name in names:
        if name in layers:
            wanted.update(layers[name])
        elif name in keys:
            wanted.add(name)
        else:
            raise ValueError(f"unknown base layer {name!r}; layers of {type(model).__name__}: {order}")
    return [k for k in model.state_dict().keys() if k in wanted]


@torch.no_grad()
def apply_base(model: nn.Module, base_state: Mapping[str, torch.Tensor]) -> None:
    """Overwrite the model's base entries with ``base_state`` (CE-eq 7); all other entries
    (the personalised layers) are untouched.

    Raises:
        ValueError: ``base_state`` names an entry the model does not have.
    """
    own = model.state_dict()
    unknown = [n for n in base_state if n not in own]
    if unknown:
        raise ValueError(f"base state has entries the model lacks: {unknown}")
    for n, t in base_state.items():
        own[n].copy_(t)


# ------------------------------------------------------------------------ the method
class BaseLayerOptions(BaseModel):
    """``base_layers``: None (layers before the first fully connected one), a count B, or
    layer / entry names (see :func:`base_layer_names`)."""

    model_config = ConfigDict(extra="forbid")
    base_layers: int | list[str] | None = Field(None, description="base layers: null (conv layers), count B, or names")


@register_method
class FedPer(PersonalisedMethod):
    """FedPer (CEFL's baseline; SPEC 2): every client takes part in every round, uploads and
    downloads only the base layers (averaged with weights n_k, SPEC 0.5), and keeps its
    personalised layers (the rest) local. Each client is scored with its own model (shared
    base + own head) on its own held-out split.

    Options: ``base_layers`` (see :func:`base_layer_names`; default the layers before the
    first fully connected one). ``clients_per_round`` is ignored: all N clients take part.

    Raises:
        ValueError: an empty or unknown base layer set; a client without held-out data.
    """

    name = "fedper"
    Options = BaseLayerOptions

    def __init__(self, cfg, fed):
        super().__init__(cfg, fed)
        self.base_names = base_layer_names(self.global_model, self.options.base_layers)

    def shared_keys(self) -> list[str]:
        return list(self.base_names)

    def select(self, t, draws):
        return list(range(self.fed.num_clients))
