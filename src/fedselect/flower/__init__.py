"""fedselect on Flower (flwr 1.42, Message API): fedselect's selectors drive Flower federations.

* :mod:`fedselect.flower.strategy` — :class:`~fedselect.flower.strategy.FedselectStrategy`, a
  Flower strategy wrapping any fedselect selector with FedAvg or FedPer aggregation, and the
  selector context over Flower nodes;
* :mod:`fedselect.flower.server_app` — the ServerApp running it from the run config;
* :mod:`fedselect.flower.client_app` — the ClientApp for fedselect's models and partitions;
* :mod:`fedselect.flower.deployment` — a SuperLink and SuperNodes on 127.0.0.1 (tests, demos);
* :mod:`fedselect.flower.messaging` — sending messages and naming the nodes that stay silent;
* :mod:`fedselect.flower.engine` — ``engine: flower``, the engine plug-in (:class:`~fedselect.flower.engine.FlowerEngine`:
  Flower's simulation engine, one SuperNode per client; a run's transport on a grid);
* :mod:`fedselect.flower.grid_run` — whole experiments on a grid given from outside.

Flower is the optional extra ``fedselect[flower]`` (requirements-flower.txt); the rest of
fedselect imports none of it: the engine registry (:data:`fedselect.registry.ENGINES`) declares
``flower`` by module path and imports it only for a run that asks for it. See docs/flower.md and
examples/flower.
"""
