"""fedselect on Flower (flwr 1.42, Message API): the engine ``flower``, where the simulator's
round drives a Flower federation, every selector with every algorithm it composes with.

* :mod:`fedselect.flower.engine` — ``engine: flower``, the engine plug-in
  (:class:`~fedselect.flower.engine.FlowerEngine`: Flower's simulation engine, one SuperNode per
  client; a run's transport on a grid);
* :mod:`fedselect.flower.grid_run` — whole experiments on a grid given from outside;
* :mod:`fedselect.flower.strategy` — :class:`~fedselect.flower.strategy.FedselectStrategy`, a
  Flower strategy whose four seams call the round's phases (:mod:`fedselect.fl.round`);
* :mod:`fedselect.flower.transport`, :mod:`fedselect.flower.wire`,
  :mod:`fedselect.flower.nodes`, :mod:`fedselect.flower.messaging` — the round's jobs as
  messages: the transport, the one wire protocol, who is who on the grid, silent nodes named;
* :mod:`fedselect.flower.server_app`, :mod:`fedselect.flower.client_app`,
  :mod:`fedselect.flower.settings` — the ServerApp and the ClientApp and the settings they read;
* :mod:`fedselect.flower.owndata`, :mod:`fedselect.flower.fleet` — a real fleet: nodes that own
  their data (the node side) and a server that knows them only from their reports;
* :mod:`fedselect.flower.deployment` — a SuperLink and SuperNodes on 127.0.0.1 (tests, demos);
* :mod:`fedselect.flower.logs` — Flower's console lines in the processes fedselect runs;
* :mod:`fedselect.flower.selection`, :mod:`fedselect.flower.app_fleet` —
  :class:`~fedselect.flower.selection.SelectionStrategy`: fedselect's selectors choosing the
  nodes of any Flower app, around one of Flower's own strategies (FedAvg, FedProx, FedAdam, ...),
  from what Flower's standard messages carry and what the server measures.

Flower is the optional extra ``fedselect[flower]`` (requirements-flower.txt); the rest of
fedselect imports none of it: the engine registry (:data:`fedselect.registry.ENGINES`) declares
``flower`` by module path and imports it only for a run that asks for it. See docs/flower.md and
examples/flower and examples/flower-any-app.
"""

__all__ = ["SelectionStrategy"]

#: what this package exports, by the module that defines it: imported when first asked for (it
#: imports Flower), so that importing a submodule never runs it (no import cycle through here)
EXPORTS = {"SelectionStrategy": "fedselect.flower.selection"}


def __getattr__(name: str):
    """``fedselect.flower.SelectionStrategy`` (:data:`EXPORTS`), imported on first use."""
    if name in EXPORTS:
        import importlib

        return getattr(importlib.import_module(EXPORTS[name]), name)
    raise AttributeError(f"module 'fedselect.flower' has no attribute {name!r}")
