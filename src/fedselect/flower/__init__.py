"""fedselect on Flower (flwr 1.42, Message API): the engine ``flower``, where the simulator's
round drives a Flower federation, every selector with every algorithm it composes with.

* :mod:`fedselect.flower.engine` — ``engine: flower`` / ``--engine flower``: an experiment on
  Flower's simulation engine, one SuperNode per client (the engine kind of
  :mod:`fedselect.registry` names it);
* :mod:`fedselect.flower.grid_run` — a whole experiment on a Flower grid through the simulator's
  round;
* :mod:`fedselect.flower.strategy` — :class:`~fedselect.flower.strategy.FedselectStrategy`, a
  Flower strategy whose four seams call the round's phases (:mod:`fedselect.fl.round`);
* :mod:`fedselect.flower.transport`, :mod:`fedselect.flower.wire`,
  :mod:`fedselect.flower.nodes`, :mod:`fedselect.flower.messaging` — the round's jobs as
  messages: the transport, the one wire protocol, who is who on the grid, silent nodes named;
* :mod:`fedselect.flower.server_app`, :mod:`fedselect.flower.client_app`,
  :mod:`fedselect.flower.settings` — the ServerApp and the ClientApp and the settings they read;
* :mod:`fedselect.flower.deployment` — a SuperLink and SuperNodes on 127.0.0.1 (tests, demos);
* :mod:`fedselect.flower.logs` — Flower's console lines in the processes fedselect runs.

Flower is the optional extra ``fedselect[flower]`` (requirements-flower.txt); the rest of
fedselect imports nothing here except through the engine registry, on first use. See
docs/flower.md and examples/flower.
"""
