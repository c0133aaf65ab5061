"""Pure kernels of the three papers, apart from anything registered or any FL loop.

* :mod:`~fedselect.kernels.ddqn` — the double deep Q-learning agent (FLASH-RL / FAVOR), with its
  Q networks (:mod:`~fedselect.kernels.q_networks`) and replay memory
  (:mod:`~fedselect.kernels.replay_memory`).
* :mod:`~fedselect.kernels.rewards` — FLASH-RL's divergence, utility and reputations, FAVOR's reward.
* :mod:`~fedselect.kernels.similarity` — CEFL's similarity factors, edge weights, Louvain into K, leaders.
* :mod:`~fedselect.kernels.secretary` — the budgeted-online stopping rules and alpha*.
* :mod:`~fedselect.kernels.oort` — Oort's statistical utility, speed penalty, staleness bonus,
  preferred duration and pacer.
* :mod:`~fedselect.kernels.sampling` — weighted draws without replacement with a given generator.
* :mod:`~fedselect.kernels.clustered` — clustered sampling's distributions (Fraboni et al.
  Algorithms 1, 2) and their unbiased aggregation weights.
* :mod:`~fedselect.kernels.facility` — DivFL's greedy (and stochastic greedy) facility location.
* :mod:`~fedselect.kernels.representatives` — the clients' representative updates and their
  dissimilarity matrix, updated incrementally.

Inputs are arrays, tensors, floats and the generators the caller hands in; nothing here reads a
config, a federation or a global RNG.
"""
