"""The cost model: every simulated latency (seconds) and byte count of a run comes from here.

FLASH-RL's equations through the federation's latency model (``system.latency_model``,
:data:`fedselect.world.system.LATENCY_MODELS`): a client's compute time (FR-eq 4; ``paper``:
``E |D_k| g / (c_k f_{t,k})``, ``f`` in MHz, ``|D_k|`` in bits), the transfer of ``b`` bytes
(FR-eq 5; ``paper``: ``8 b / b_{t,k}``, ``b_{t,k}`` in Mb/s), its latency compute + upload (+ the
broadcast with ``system.count_download``) (FR-eq 3), and a synchronous round as long as its
probing plus its slowest participant. What a failure costs (docs/reliability.md) is here too, so
that the simulator and Flower charge the same figures.
"""

from __future__ import annotations

import numpy as np

from fedselect.fl.types import ClientCost, RunSettings
from fedselect.world.system import RoundDraws, latency_bounds

__all__ = ["CostModel"]


class CostModel:
    """The cost model of one run on one federation.

    Args:
        fed: the federation (client sizes in bits, the fleet's profiles, the latency model).
        settings: run settings (E, g, ``count_download``).
        payload_bytes: (upload, download) bytes of one participant per round (the algorithm's).
    """

    def __init__(self, fed, settings: RunSettings, payload_bytes: tuple[int, int]):
        self._fed, self.settings, self.fleet = fed, settings, fed.fleet
        self.latency = fed.latency_model
        self.upload_bytes, self.download_bytes = (int(b) for b in payload_bytes)
        self._bits: np.ndarray | None = None

    @classmethod
    def of_federation(cls, fed, local_epochs: int, payload_bytes: tuple[int, int]) -> CostModel:
        """The cost model of ``fed`` outside a run (reports: ``federation-s<seed>.json``): E =
        ``local_epochs``, g = ``system.cycles_per_bit``, the broadcast counted as
        ``system.count_download`` says; ``payload_bytes`` (upload, download) per client."""
        sys_cfg = fed.system
        settings = RunSettings(
            fed.seed,
            rounds=0,  # outside a run: no round, no selection
            num_clients=fed.num_clients,
            clients_per_round=0,
            local_epochs=int(local_epochs),
            count_download=sys_cfg.count_download,
            cycles_per_bit=sys_cfg.cycles_per_bit,
        )
        return cls(fed, settings, payload_bytes)

    def client_bits(self) -> np.ndarray:
        """``(N,)`` float64 |D_k| in bits of every client in the latency model (computed once: the
        data are fixed)."""
        if self._bits is None:
            self._bits = np.array([self._fed.client_bits(k) for k in range(self._fed.num_clients)], dtype=np.float64)
        return self._bits

    def client_cost(self, k: int, epochs: float, draws: RoundDraws) -> ClientCost:
        """Client ``k``'s cost for ``epochs`` local epochs with the round payload: compute
        (FR-eq 4), transfers (FR-eq 5), latency (FR-eq 3)."""
        s, lm = self.settings, self.latency
        comp = lm.compute_s(epochs, self._fed.client_bits(k), s.cycles_per_bit, self.fleet.cores[k], draws.freq_mhz[k])
        up_s = lm.transmit_s(self.upload_bytes, draws.bandwidth_mbps[k])
        down_s = lm.transmit_s(self.download_bytes, draws.bandwidth_mbps[k])
        latency = comp + up_s + (down_s if s.count_download else 0.0)
        return ClientCost(comp, up_s, down_s, latency, self.upload_bytes, self.download_bytes)

    def transmit_s(self, num_bytes: int, k: int, draws: RoundDraws) -> float:
        """Seconds for client ``k`` to move ``num_bytes`` bytes this round (FR-eq 5)."""
        return self.latency.transmit_s(int(num_bytes), draws.bandwidth_mbps[k])

    def receive_and_train_s(self, k: int, epochs: float, num_bytes: int, draws: RoundDraws) -> float:
        """Seconds for client ``k`` to receive ``num_bytes`` and then train ``epochs`` epochs
        (CEFL's transfer to a member; FR-eq 4 + 5)."""
        s, lm = self.settings, self.latency
        comp = lm.compute_s(epochs, self._fed.client_bits(k), s.cycles_per_bit, self.fleet.cores[k], draws.freq_mhz[k])
        return comp + lm.transmit_s(int(num_bytes), draws.bandwidth_mbps[k])

    def error_latency_s(self, cost: ClientCost) -> float:
        """A client whose training failed took its compute (and the broadcast when it counts)."""
        return cost.compute_s + (cost.download_s if self.settings.count_download else 0.0)

    @staticmethod
    def dropout_latency_s(deadline_s: float | None) -> float:
        """A client that never answered holds the round up to the deadline (0 without one)."""
        return float(deadline_s) if deadline_s is not None else 0.0

    @staticmethod
    def round_latency_s(probe_s: float, latencies) -> float:
        """A synchronous round: the probing, then the slowest participant."""
        return probe_s + max(latencies, default=0.0)

    def expected_compute_s(self, epochs: float | None = None) -> np.ndarray:
        """``(N,)`` seconds: each client's compute (FR-eq 4) for ``epochs`` (default E) local
        epochs at its profiles' mean frequency."""
        s, fl = self.settings, self.fleet
        e = s.local_epochs if epochs is None else epochs
        return self.latency.compute_s(e, self.client_bits(), s.cycles_per_bit, fl.cores, fl.mean_mhz)

    def expected_transmit_s(self, num_bytes: int) -> np.ndarray:
        """``(N,)`` seconds: each client moving ``num_bytes`` bytes at its profiles' mean
        bandwidth (FR-eq 5)."""
        return self.latency.transmit_s(int(num_bytes), self.fleet.mean_mbps)

    def expected_latency_s(self, epochs: float | None = None) -> np.ndarray:
        """``(N,)`` seconds: each client's latency (FR-eq 3) at its profiles' mean frequency and
        bandwidth, for ``epochs`` (default E) local epochs and the round payload."""
        down = self.download_bytes if self.settings.count_download else 0
        return self.expected_compute_s(epochs) + self.expected_transmit_s(self.upload_bytes + down)

    def latency_bounds(self) -> tuple[float, float]:
        """(L_min, L_max) in seconds for FR-eq 10's min-max normalisation (:func:`fedselect.world.system.latency_bounds`
        in the latency model)."""
        s, lm = self.settings, self.latency
        bits = self.client_bits().tolist()
        down = lm.payload_bits(self.download_bytes) if s.count_download else 0
        epochs, g = lm.charged_epochs(s.local_epochs), lm.g(s.cycles_per_bit)
        return latency_bounds(self.fleet, bits, epochs, g, lm.payload_bits(self.upload_bytes), down)
