"""Partial-layer federated learning: FedPer (Arivazhagan et al. 2019, the CEFL paper's [15]) and
the machinery CEFL and Individual training share with it (CE-eq 6, 7).

* :func:`base_layer_names` — which state-dict entries are "base layers" (the shared ones): by
  default every layer before the first fully connected (``nn.Linear``) module (for the CNNs:
  the convolutional layers), or the first ``B`` layers, or layers named explicitly.
* :class:`Personalised` — every client keeps its own model state (``ServerState.clients``,
  all starting from the common initialisation). Only the entries in :meth:`Personalised.shared_keys`
  travel: a participant starts from its own state with the server's current shared entries laid
  over it (the download), uploads only the shared entries, the server averages them
  (:func:`fedselect.fl.aggregate.partial_average`, CE-eq 6) and every participant's state takes
  the average for its shared entries (CE-eq 7); personalised entries never leave the client and
  stay bit-identical. ``shared_keys() == []`` means no communication at all (Individual).
* :class:`FedPer` — every selected client (all of them with the ``all`` selector, the paper's
  setting) uploads and downloads only the base layers; each client is scored with its own model
  (shared base + own head) on its own held-out split.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np
from pydantic import Field
from torch import nn

from fedselect.algorithms import register_algorithm
from fedselect.algorithms.base import Algorithm, PerClientOptions, ServerState, clone_state
from fedselect.fl.aggregate import partial_average
from fedselect.fl.types import ClientOutcome, State
from fedselect.kernels.similarity import layer_groups

__all__ = ["model_layers", "base_layer_names", "BaseLayerOptions", "Personalised", "FedPer"]


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
            convolutional / recurrent feature extractor). An ``int`` B -> the
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


# ------------------------------------------------------------------------ personalised clients
class Personalised(Algorithm):
    """Clients keep their own models; only :meth:`shared_keys` are exchanged (module docstring).
    Subclasses give :meth:`shared_keys` and may change :meth:`aggregation_weights`."""

    Options = PerClientOptions

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self._all_keys = list(self.worker.state_dict().keys())

    def shared_keys(self) -> list[str]:
        """State entries exchanged with the server (default: all; ``[]``: none)."""
        return list(self._all_keys)

    def upload_keys(self) -> list[str]:
        return self.shared_keys()

    def download_keys(self) -> list[str]:
        return self.shared_keys()

    def aggregation_weights(self, outcomes: Sequence[ClientOutcome]) -> list[float]:
        """Weights a_k of the participants in the average (default: n_k, as FedAvg, or the
        selection's aggregation weights when it set them: :attr:`ClientOutcome.weight`)."""
        return [o.weight for o in outcomes]

    def initial_state(self) -> ServerState:
        st = super().initial_state()
        return replace(st, clients=tuple(clone_state(st.model) for _ in range(self.fed.num_clients)))

    def start_state(self, state: ServerState, k: int) -> State:
        """Client ``k``'s own state, with the server's shared entries laid over it once the
        server holds an aggregate (the download)."""
        own = state.clients[k]
        keys = self.shared_keys()
        if not state.aggregated or not keys:
            return own
        shared = set(keys)
        return {n: (state.model[n] if n in shared else v) for n, v in own.items()}

    def aggregate(self, t: int, state: ServerState, outcomes: Sequence[ClientOutcome]) -> ServerState | None:
        """CE-eq 6 on the shared entries, then CE-eq 7: each participant keeps its trained
        state with the shared entries replaced by the average."""
        keys = self.shared_keys()
        avg: State = partial_average([o.state for o in outcomes], self.aggregation_weights(outcomes), keys) if keys else {}
        clients = list(state.clients)
        for o in outcomes:
            st = clone_state(o.state)
            for n, v in avg.items():
                st[n] = v.clone()
            clients[o.client_id] = st
        model = {**state.model, **avg} if keys else state.model
        return ServerState(model, tuple(clients), state.aggregated or bool(keys))

    def eval_state(self, state: ServerState, k: int) -> State:
        return state.clients[k]


class BaseLayerOptions(PerClientOptions):
    """``base_layers``: None (layers before the first fully connected one), a count B, or
    layer / entry names (see :func:`base_layer_names`)."""

    base_layers: int | list[str] | None = Field(None, description="base layers: null (conv layers), count B, or names")


@register_algorithm
class FedPer(Personalised):
    """FedPer (CEFL's baseline): participants upload and download only the base layers
    (averaged with weights n_k) and keep their personalised layers (the rest) local.

    Options: ``base_layers`` (see :func:`base_layer_names`; default the layers before the
    first fully connected one).

    Raises:
        ValueError: an empty or unknown base layer set; a client without held-out data.
    """

    name = "fedper"
    summary = "FedPer: base layers averaged, personalised head layers kept by each client"
    Options = BaseLayerOptions

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.base_names = base_layer_names(self.worker, self.options.base_layers)

    def shared_keys(self) -> list[str]:
        return list(self.base_names)
