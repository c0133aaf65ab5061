"""The selector context (:class:`fedselect.selectors.base.SelectorContext`) over one federation.

:class:`FederationContext` gives a selector the fleet and its per-round draws, the cost model
(:class:`fedselect.fl.cost.CostModel`), the seeded initial model, caches shared by the runs on
one federation, and the client services — the shared warm-up, training a client, scoring on
the set decisions read (the server's validation set, or the test set under ``selection_eval:
test``), budgeted-online candidate scores, the loss probes of Power-of-Choice — as jobs
(:mod:`fedselect.fl.work`) handed to the run's transport. The same context serves every engine:
the simulator's transport runs the jobs in the worker pool, Flower's sends them to the nodes.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterator, Sequence

import numpy as np

from fedselect.fl.cost import CostModel
from fedselect.fl.local.train import TrainConfig
from fedselect.fl.types import ClientCost, Evaluation, RunSettings, State, WarmClient, clone_state
from fedselect.fl.work import EvalJob, TrainJob, Transport
from fedselect.world.federation import Federation
from fedselect.world.system import RoundDraws

# federation -> namespace -> dict: memoised values shared by every run on one federation
_SHARED: "weakref.WeakKeyDictionary[Federation, dict[str, dict]]" = weakref.WeakKeyDictionary()


class FederationContext:
    """The selector context of a run (module docstring).

    Args:
        fed: the federation (clients' data, test set, fleet).
        settings: run settings.
        train_cfg: local-training settings.
        upload_keys, download_keys: what a participant uploads / receives (None = all).
        payload_bytes: (upload, download) bytes of one participant per round.
        transport: carries the client services' jobs (:class:`fedselect.fl.work.Transport`).
    """

    def __init__(
        self,
        fed: Federation,
        settings: RunSettings,
        train_cfg: TrainConfig,
        upload_keys: list[str] | None,
        download_keys: list[str] | None,
        payload_bytes: tuple[int, int],
        transport: Transport,
    ):
        self._fed = fed
        self.transport = transport
        self.settings = settings
        self.train_cfg = train_cfg
        self.num_samples = np.array([c.num_samples for c in fed.clients], dtype=np.int64)
        self.fleet = fed.fleet
        self.upload_keys = upload_keys
        self.download_keys = download_keys
        self.cost = CostModel(fed, settings, payload_bytes)
        self.upload_bytes, self.download_bytes = self.cost.upload_bytes, self.cost.download_bytes
        self.parameter_names = [n for n, _ in fed.new_model().named_parameters()]

    # ---------------------------------------------------------------- the system model
    def draw(self, t: int) -> RoundDraws:
        """Round ``t``'s CPU frequencies (MHz) and bandwidths (Mb/s), depending only on (seed, t)."""
        return self.fleet.draw(t)

    def client_cost(self, k: int, epochs: float, draws: RoundDraws) -> ClientCost:
        """Client ``k``'s cost for ``epochs`` local epochs (:meth:`CostModel.client_cost`)."""
        return self.cost.client_cost(k, epochs, draws)

    def transmit_s(self, num_bytes: int, k: int, draws: RoundDraws) -> float:
        """Seconds for client ``k`` to move ``num_bytes`` bytes this round (FR-eq 5)."""
        return self.cost.transmit_s(num_bytes, k, draws)

    def expected_latency_s(self, epochs: float | None = None) -> np.ndarray:
        """``(N,)`` seconds at the profiles' means (:meth:`CostModel.expected_latency_s`)."""
        return self.cost.expected_latency_s(epochs)

    def latency_bounds(self) -> tuple[float, float]:
        """(L_min, L_max) in seconds for FR-eq 10 (:meth:`CostModel.latency_bounds`)."""
        return self.cost.latency_bounds()

    # ---------------------------------------------------------------- services
    def initial_state(self) -> State:
        """A copy of the seeded initial model (the same for every component of the run)."""
        return clone_state(self._fed.new_model().state_dict())

    def evaluate(self, state: State) -> Evaluation:
        """``state`` on the set decisions read (accuracy, macro-F1, loss): the server's
        validation set, or the test set with ``selection_eval: test``.

        Raises:
            RuntimeError: the set could not score it (no validation set: data.validation is 0)."""
        r = self.transport.run([EvalJob(None, state, self.settings.selection_eval)])[0]
        if r.error is not None:
            raise RuntimeError(f"scoring a model for the selector on the {self.settings.selection_eval} set failed: {r.error}")
        return r.evaluation()

    def warmup(self, epochs: int, tag: str, clients: Sequence[int] | None = None) -> Iterator[WarmClient]:
        """Every client (or those of ``clients``, in that order) trains ``epochs`` epochs from the
        initial model in round 0, in client order, with the mini-batch streams ``<tag>/0/<k>``;
        yields :class:`~fedselect.fl.types.WarmClient` (id, state, mean loss). One warm-up serves
        FLASH-RL / FAVOR (PCA of the models) and CEFL (similarity of the models). Clients train
        side by side a few at a time (memory stays bounded at large N). A client's result
        depends only on the seed, ``tag`` and its id, not on which others train with it.

        Raises:
            RuntimeError: a client's training failed."""
        init = self.initial_state()
        order = list(range(len(self.num_samples))) if clients is None else [int(k) for k in clients]
        n = len(order)
        step = max(8, 4 * max(1, self.transport.workers))
        for a in range(0, n, step):
            ids = order[a : min(a + step, n)]
            for k, (state, loss) in zip(ids, self._train_many(ids, init, epochs, tag, 0)):
                yield WarmClient(k, state, loss)

    def train(self, k: int, start: State, epochs: int, tag: str, t: int = 0) -> tuple[State, float]:
        """Client ``k`` trains ``epochs`` epochs from ``start`` (mini-batch stream
        ``<tag>/<t>/<k>``); returns its new state and mean loss.

        Raises:
            RuntimeError: the client's training failed."""
        return self._train_many([k], start, epochs, tag, t)[0]

    def _train_many(self, ids: list[int], start: State, epochs: int, tag: str, t: int) -> list[tuple[State, float]]:
        jobs = [TrainJob(k, start, int(epochs), self._fed.seed, f"{tag}/{t}/{k}") for k in ids]
        results = self.transport.run(jobs)
        bad = [r for r in results if r.error is not None]
        if bad:
            raise RuntimeError(f"training client {bad[0].client_id} for the selector ({tag}, round {t}) failed: {bad[0].error}")
        return [(r.state, r.loss) for r in results]

    def evaluate_candidate(self, k: int, epochs: int) -> tuple[float, float, float]:
        """Budgeted-online candidate evaluation (BO Algorithm 1): the initial model trained
        ``epochs`` epochs on client ``k``'s data (stream ``candidate/0/<k>``), then scored on the
        set decisions read (:meth:`evaluate`). Returns (accuracy, loss, mean training loss);
        memoised per federation, set, epochs and training settings (shared by every run on the
        federation). A candidate that cannot be trained scores NaN (never accepted by the rules).

        Raises:
            RuntimeError: no validation set to score on (data.validation is 0)."""
        cache = self.shared_cache(f"candidates/{self.settings.selection_eval}/{int(epochs)}/{self.train_cfg!r}")
        if k not in cache:
            r = self.transport.run([TrainJob(k, self.initial_state(), int(epochs), self._fed.seed, f"candidate/0/{k}")])[0]
            if r.error is not None:
                return (float("nan"),) * 3
            m = self.evaluate(r.state)
            cache[k] = (float(m.accuracy), float(m.loss), float(r.loss))
        return cache[k]

    def client_losses(
        self, states: Sequence[State], ids: Sequence[int], samples: Sequence[Sequence[int]] | None = None
    ) -> list[float]:
        """Mean cross-entropy of ``states[i]`` on client ``ids[i]``'s training data (only the
        samples ``samples[i]`` of it when ``samples`` is given; nan for an empty set or a
        client that could not answer).

        Raises:
            ValueError: ``samples`` not one index array per id, or an index outside the client's data.
        """
        if samples is not None and len(samples) != len(ids):
            raise ValueError(f"client_losses: {len(samples)} sample index arrays for {len(ids)} clients")
        jobs = []
        for i, (st, k) in enumerate(zip(states, ids)):
            idx = None
            if samples is not None:
                idx = tuple(int(j) for j in np.asarray(samples[i], dtype=np.int64).ravel())
                n = int(self.num_samples[k])
                if idx and (min(idx) < 0 or max(idx) >= n):
                    raise ValueError(f"client_losses: sample index out of range for client {k} ({n} samples)")
            jobs.append(EvalJob(int(k), st, "train", idx, loss_only=True))
        return [float(r.loss) for r in self.transport.run(jobs)]

    def arrival_order(self, seeded: list[int]) -> Sequence[int]:
        """The order in which budgeted-online candidates arrive (BO Algorithm 1): the seeded
        order in the simulator; over Flower optionally the order the nodes connect."""
        return self.transport.arrival_order(seeded)

    def shared_cache(self, namespace: str) -> dict[Any, Any]:
        """A dict shared by every run on this federation (e.g. memoised candidate scores)."""
        return _SHARED.setdefault(self._fed, {}).setdefault(namespace, {})
