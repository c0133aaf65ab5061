"""The selector context (:class:`fedselect.selectors.base.SelectorContext`) over one federation.

* :class:`FederationContext` — what needs only the federation's description, whatever engine
  trains the clients: the fleet and its per-round draws, the cost model (SPEC 0.3; FR-eq 3, 4,
  5), the seeded initial model, scoring on the server's test set, the candidates' arrival order
  and caches shared by the runs on one federation.
* :class:`SimulatedContext` — the simulator's: adds the services that run on the clients' data
  (the shared warm-up, training a client, budgeted-online candidate evaluation, the loss probes
  of Power-of-Choice), computed in this process.

The Flower strategy's context (:class:`fedselect.flower.strategy.FlowerContext`) is a
:class:`FederationContext` whose client services are messages to the nodes, which is what lets
one selector object drive either engine with the same cost model.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterator, Sequence

import numpy as np

from fedselect.federation import Federation
from fedselect.fl.clients import TrainJob
from fedselect.fl.evaluate import evaluate, predict
from fedselect.fl.train import TrainConfig, local_train
from fedselect.fl.types import ClientCost, Evaluation, RunSettings, State, WarmClient
from fedselect.system import RoundDraws, compute_time, latency_bounds, transmit_time

# federation -> namespace -> dict: memoised values shared by every run on one federation
_SHARED: "weakref.WeakKeyDictionary[Federation, dict[str, dict]]" = weakref.WeakKeyDictionary()


def clone(state: State) -> State:
    return {k: v.detach().clone() for k, v in state.items()}


class FederationContext:
    """The engine-independent part of the selector context (module docstring).

    Args:
        fed: the federation (clients' data, test set, fleet).
        settings: run settings.
        train_cfg: local-training settings.
        upload_keys, download_keys: what a participant uploads / receives (None = all).
        payload_bytes: (upload, download) bytes of one participant per round.
    """

    def __init__(
        self,
        fed: Federation,
        settings: RunSettings,
        train_cfg: TrainConfig,
        upload_keys: list[str] | None,
        download_keys: list[str] | None,
        payload_bytes: tuple[int, int],
        engine=None,
    ):
        self._fed = fed
        self._engine = engine
        self.settings = settings
        self.train_cfg = train_cfg
        self.num_samples = np.array([c.num_samples for c in fed.clients], dtype=np.int64)
        self.fleet = fed.fleet
        self.upload_keys = upload_keys
        self.download_keys = download_keys
        self.upload_bytes, self.download_bytes = (int(b) for b in payload_bytes)
        self._worker = fed.new_model()
        self.parameter_names = [n for n, _ in self._worker.named_parameters()]

    # ---------------------------------------------------------------- the system model
    def draw(self, t: int) -> RoundDraws:
        """Round ``t``'s CPU frequencies (MHz) and bandwidths (Mb/s), depending only on (seed, t)."""
        return self.fleet.draw(t)

    def client_cost(self, k: int, epochs: float, draws: RoundDraws) -> ClientCost:
        """Client ``k``'s simulated cost for ``epochs`` local epochs, uploading and receiving the
        algorithm's payload: compute (FR-eq 3), transfers (FR-eq 4), latency (FR-eq 5)."""
        s = self.settings
        comp = compute_time(epochs, self._fed.client_bits(k), s.cycles_per_bit, self.fleet.cores[k], draws.freq_mhz[k])
        up_s = transmit_time(self.upload_bytes * 8, draws.bandwidth_mbps[k])
        down_s = transmit_time(self.download_bytes * 8, draws.bandwidth_mbps[k])
        latency = comp + up_s + (down_s if s.count_download else 0.0)
        return ClientCost(comp, up_s, down_s, latency, self.upload_bytes, self.download_bytes)

    def transmit_s(self, num_bytes: int, k: int, draws: RoundDraws) -> float:
        """Seconds for client ``k`` to move ``num_bytes`` bytes this round (FR-eq 4)."""
        return transmit_time(int(num_bytes) * 8, draws.bandwidth_mbps[k])

    def expected_latency_s(self, epochs: float | None = None) -> np.ndarray:
        """``(N,)`` seconds: each client's latency (FR-eq 5) at its profiles' mean frequency and
        bandwidth, for ``epochs`` (default E) local epochs and the algorithm's payload."""
        s, fl = self.settings, self.fleet
        e = s.local_epochs if epochs is None else epochs
        bits = np.array([self._fed.client_bits(k) for k in range(len(self.num_samples))], dtype=np.float64)
        comp = compute_time(e, bits, s.cycles_per_bit, fl.cores, fl.mean_mhz)
        tx = self.upload_bytes * 8 + (self.download_bytes * 8 if s.count_download else 0)
        return comp + transmit_time(tx, fl.mean_mbps)

    def latency_bounds(self) -> tuple[float, float]:
        """(L_min, L_max) in seconds for FR-eq 10's min-max normalisation (SPEC 0.3)."""
        s = self.settings
        bits = [self._fed.client_bits(k) for k in range(len(self.num_samples))]
        down = 8 * self.download_bytes if s.count_download else 0
        return latency_bounds(self.fleet, bits, s.local_epochs, s.cycles_per_bit, 8 * self.upload_bytes, down)

    # ---------------------------------------------------------------- services
    def initial_state(self) -> State:
        """A copy of the seeded initial model (the same for every component of the run)."""
        return clone(self._fed.new_model().state_dict())

    def evaluate(self, state: State) -> Evaluation:
        """``state`` on the server's test set (accuracy, macro-F1, loss), with the run's engine
        when it has one (the same figures as the algorithm's evaluation)."""
        if self._engine is not None:
            return Evaluation.from_dict(self._engine.evaluate(state, "test"))
        self._worker.load_state_dict(state)
        return Evaluation.from_dict(evaluate(self._worker, self._fed.test_set))

    def arrival_order(self, seeded: list[int]) -> Sequence[int]:
        """The order in which budgeted-online candidates arrive (BO Algorithm 1): here the seeded
        random order ``seeded`` itself (an engine with real clients may return the order in which
        they connect)."""
        return seeded

    def shared_cache(self, namespace: str) -> dict[Any, Any]:
        """A dict shared by every run on this federation (e.g. memoised candidate scores)."""
        return _SHARED.setdefault(self._fed, {}).setdefault(namespace, {})


class SimulatedContext(FederationContext):
    """Selector context of the simulator: the client services run in this process on the
    federation's data (module docstring). Arguments: those of :class:`FederationContext`."""

    def warmup(self, epochs: int, tag: str) -> Iterator[WarmClient]:
        """Every client trains ``epochs`` epochs from the initial model in round 0, in client
        order, with the mini-batch streams ``<tag>/0/<k>``; yields
        :class:`~fedselect.fl.types.WarmClient` (id, state, mean loss). One warm-up
        serves FLASH-RL / FAVOR (PCA of the models) and CEFL (similarity of the models). The
        clients train side by side in the engine's workers, a few batches at a time (memory
        stays bounded at large N)."""
        init = self.initial_state()
        n = len(self.num_samples)
        step = max(8, 4 * max(1, getattr(self._engine, "workers", 1)))
        for a in range(0, n, step):
            for k, (state, loss) in zip(
                range(a, min(a + step, n)), self._train_many(list(range(a, min(a + step, n))), init, epochs, tag, 0)
            ):
                yield WarmClient(k, state, loss)

    def train(self, k: int, start: State, epochs: int, tag: str, t: int = 0) -> tuple[State, float]:
        """Client ``k`` trains ``epochs`` epochs from ``start`` (mini-batch stream
        ``<tag>/<t>/<k>``); returns its new state and mean loss.

        Raises:
            RuntimeError: the client's training failed (a worker died)."""
        return self._train_many([k], start, epochs, tag, t)[0]

    def _train_many(self, ids: list[int], start: State, epochs: int, tag: str, t: int) -> list[tuple[State, float]]:
        if self._engine is None:
            out = []
            for k in ids:
                self._worker.load_state_dict(start)
                loss = local_train(
                    self._worker,
                    self._fed.clients[k].train,
                    self.train_cfg,
                    self._fed.train_generator(t, k, tag=tag),
                    epochs=epochs,
                )
                out.append((clone(self._worker.state_dict()), loss))
            return out
        jobs = [TrainJob(k, start, int(epochs), self._fed.seed, f"{tag}/{t}/{k}") for k in ids]
        results = self._engine.train(jobs)
        bad = [r for r in results if r.error is not None]
        if bad:
            raise RuntimeError(f"training client {bad[0].client_id} for the selector ({tag}, round {t}) failed: {bad[0].error}")
        return [(r.state, r.loss) for r in results]

    def evaluate_candidate(self, k: int, epochs: int) -> tuple[float, float, float]:
        """Budgeted-online candidate evaluation (SPEC 3): the initial model trained ``epochs``
        epochs on client ``k``'s data (stream ``candidate/0/<k>``), then scored on the server's
        test set. Returns (test accuracy, test loss, mean training loss); memoised per
        federation, epochs and training settings (shared by every run on the federation)."""
        cache = self.shared_cache(f"candidates/{int(epochs)}/{self.train_cfg!r}")
        if k not in cache:
            state, loss = self.train(k, self.initial_state(), epochs, "candidate", 0)
            m = self.evaluate(state)
            cache[k] = (float(m.accuracy), float(m.loss), float(loss))
        return cache[k]

    def client_losses(
        self, states: Sequence[State], ids: Sequence[int], samples: Sequence[Sequence[int]] | None = None
    ) -> list[float]:
        """Mean cross-entropy of ``states[i]`` on client ``ids[i]``'s training data (only the
        samples ``samples[i]`` of it when ``samples`` is given; nan for an empty set).

        Raises:
            ValueError: ``samples`` not one index array per id, or an index outside the client's data.
        """
        if samples is not None and len(samples) != len(ids):
            raise ValueError(f"client_losses: {len(samples)} sample index arrays for {len(ids)} clients")
        out = []
        for i, (st, k) in enumerate(zip(states, ids)):
            data = self._fed.clients[k].train
            if samples is not None:
                idx = np.asarray(samples[i], dtype=np.int64)
                if idx.size and (idx.min() < 0 or idx.max() >= len(data)):
                    raise ValueError(f"client_losses: sample index out of range for client {k} ({len(data)} samples)")
                data = data.subset(idx)
            if len(data) == 0:
                out.append(float("nan"))
                continue
            self._worker.load_state_dict(st)
            out.append(float(predict(self._worker, data)[1]))
        return out
