"""The interface between the round loop (``fedselect.runner``) and a method.

The loop, once per experiment (ARCHITECTURE.md)::

    info = method.prepare()                       # warm-up, clustering, candidate evaluation ...
    before = method.evaluate(0)
    for t in 1..T:
        draws   = federation.fleet.draw(t)
        chosen  = method.select(t, draws)         # distinct client ids
        updates = [method.local_update(t, k, draws) for k in chosen]
        method.aggregate(t, updates)
        after   = method.evaluate(t)
        extra   = method.observe(t, updates, before, after)
    final = method.finish()                       # e.g. CEFL's transfer to members

A subclass overrides only what differs from FedAvg: ``select`` always, and as needed
``start_state`` (what a client starts from), ``upload_keys`` / ``download_keys`` (what is sent),
``aggregate``, ``evaluate``, ``observe``, ``prepare``, ``finish``, and ``state_dict`` /
``load_state_dict`` for any state kept across rounds (checkpoint/resume).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from fedselect.config import ConfigError, ExperimentConfig
from fedselect.federation import Federation
from fedselect.fl.aggregate import State, fedavg, state_bytes
from fedselect.fl.evaluate import evaluate
from fedselect.fl.train import TrainConfig, local_train
from fedselect.seeding import np_rng
from fedselect.system import RoundDraws, compute_time, transmit_time


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass
class ClientUpdate:
    """What one participant returns after local training in round ``round``.

    Attributes:
        state: the client's local model state after training (all entries; the method's
            ``upload_keys`` says which are sent).
        num_samples: n_k, training samples (the FedAvg weight).
        train_loss: mean local cross-entropy.
        compute_s, upload_s, download_s: simulated times in seconds (SPEC 0.3); download_s
            counts in the latency only when ``system.count_download`` is true.
        latency_s: l_t^k = compute_s + upload_s (+ download_s), seconds.
        upload_bytes, download_bytes: bytes sent by / to this client this round.
        failed: None, or why the client failed (its update is then not aggregated): one of
            ``dropout``, ``error``, ``nan``, ``inf``, ``timeout`` (:mod:`fedselect.fl.faults`,
            docs/reliability.md). A failed update has ``state`` None, ``latency_s`` the
            failure's latency (the deadline for dropout/timeout when one is set, the compute
            time for an error, the full latency for a rejected NaN/inf upload) and the bytes
            actually transferred.
    """

    client_id: int
    round: int
    state: State
    num_samples: int
    train_loss: float
    epochs: int
    compute_s: float
    upload_s: float
    download_s: float
    latency_s: float
    upload_bytes: int
    download_bytes: int
    failed: str | None = None


class Method(ABC):
    """Base class: FedAvg aggregation and global-model evaluation; subclasses choose clients.

    Class attributes:
        name: the config name (``method: NAME``).
        Options: pydantic model validating ``method_options`` (unknown keys are errors).
        extra_columns: names of method-specific per-round metrics written to ``metrics.csv``.
    """

    name: ClassVar[str]
    Options: ClassVar[type[BaseModel]] = NoOptions
    extra_columns: ClassVar[list[str]] = []

    def __init__(self, cfg: ExperimentConfig, fed: Federation):
        self.cfg, self.fed = cfg, fed
        try:
            self.options = self.Options.model_validate(cfg.method_options)
        except ValidationError as e:
            lines = [f"invalid method_options for method {self.name!r}:"]
            for err in e.errors():
                loc = ".".join(str(p) for p in err["loc"])
                msg = "unknown key (not allowed here)" if err["type"] == "extra_forbidden" else err["msg"]
                lines.append(f"  method_options.{loc}: {msg}")
            raise ConfigError("\n".join(lines)) from None
        tr = cfg.train
        self.train_cfg = TrainConfig(tr.local_epochs, tr.batch_size, tr.lr, tr.momentum, tr.optimizer, tr.weight_decay)
        self.global_model = fed.new_model()
        self.worker = fed.new_model()  # scratch model every local update runs in
        self.rng: np.random.Generator = np_rng(cfg.seed, f"selector/{self.name}")

    # ---------------------------------------------------------------- hooks
    def prepare(self) -> dict[str, Any]:
        """Work before round 1. May return ``upload_bytes`` / ``download_bytes`` /
        ``latency_s`` spent (recorded in the round-0 row) and other info for the summary."""
        return {}

    @abstractmethod
    def select(self, t: int, draws: RoundDraws) -> list[int]:
        """Distinct client ids taking part in round ``t`` (1-based)."""

    def start_state(self, k: int) -> State:
        """The weights client ``k`` starts local training from (default: the global model)."""
        return self.global_model.state_dict()

    def upload_keys(self) -> list[str] | None:
        """State entries a client uploads (None = all)."""
        return None

    def download_keys(self) -> list[str] | None:
        """State entries the server broadcasts to a participant (None = all)."""
        return None

    def local_epochs(self, t: int, k: int) -> int:
        return self.train_cfg.epochs

    def local_update(self, t: int, k: int, draws: RoundDraws) -> ClientUpdate:
        """Client ``k`` trains from :meth:`start_state` in the scratch model; returns its update
        with simulated compute/transfer times from this round's draws (FR-eq 3-5)."""
        client = self.fed.clients[k]
        self.worker.load_state_dict(self.start_state(k))
        epochs = self.local_epochs(t, k)
        loss = local_train(self.worker, client.train, self.train_cfg, self.fed.train_generator(t, k), epochs=epochs)
        state = {n: v.detach().clone() for n, v in self.worker.state_dict().items()}
        return self.make_update(t, k, state, loss, epochs, draws)

    def make_update(self, t: int, k: int, state: State, loss: float, epochs: int, draws: RoundDraws) -> ClientUpdate:
        """Wrap a trained state with its simulated costs (shared by every method)."""
        client, fleet, sysc = self.fed.clients[k], self.fed.fleet, self.cfg.system
        up = state_bytes(state, self.upload_keys())
        down = state_bytes(state, self.download_keys())
        comp = compute_time(epochs, self.fed.client_bits(k), sysc.cycles_per_bit, fleet.cores[k], draws.freq_mhz[k])
        up_s = transmit_time(up * 8, draws.bandwidth_mbps[k])
        down_s = transmit_time(down * 8, draws.bandwidth_mbps[k])
        latency = comp + up_s + (down_s if sysc.count_download else 0.0)
        return ClientUpdate(k, t, state, client.num_samples, loss, epochs, comp, up_s, down_s, latency, up, down)

    def aggregate(self, t: int, updates: list[ClientUpdate]) -> None:
        """FedAvg of the updates (SPEC 0.5) into the global model."""
        if not updates:
            return
        new = fedavg([u.state for u in updates], [u.num_samples for u in updates], keys=self.upload_keys())
        self.global_model.load_state_dict(new, strict=self.upload_keys() is None)

    def evaluate(self, t: int) -> dict[str, float]:
        """Metrics after round ``t`` (0 = initial model): the global model on the test set."""
        return evaluate(self.global_model, self.fed.test_set)

    def observe(self, t: int, updates: list[ClientUpdate], before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
        """Learn from round ``t`` (rewards, reputations ...); return extra metrics for the row.

        ``updates`` holds every selected client in selection order, failed ones included
        (``u.failed`` set, ``u.state`` None): a selector should charge a failed client the
        failure's latency ``u.latency_s`` and give it no utility. ``aggregate`` only ever sees
        the survivors; when none survived it is not called and the global model is unchanged.
        ``local_update`` may raise :class:`fedselect.fl.faults.ClientFailure` to report a
        client-side failure (any other exception stops the run), and should keep no state of
        its own: commit per-client state in ``aggregate``/``observe`` from surviving updates.
        """
        return {}

    def finish(self) -> dict[str, Any] | None:
        """Work after the last round; may return final metrics (same keys as ``evaluate``)
        that replace the last round's in the summary, plus any extra summary fields."""
        return None

    # ---------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the run exactly (global model, selector RNG ...)."""
        return {"global": self.global_model.state_dict(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_model.load_state_dict(state["global"])
        self.rng.bit_generator.state = state["rng"]


def clone_state(state: State) -> State:
    """A detached deep copy of a state dict."""
    return {k: v.detach().clone() for k, v in state.items()}


def flat_parameters(state: State, keys: list[str] | None = None) -> torch.Tensor:
    """Concatenate floating entries (optionally only ``keys``) into one float32 vector."""
    names = keys if keys is not None else [k for k, v in state.items() if v.is_floating_point()]
    return torch.cat([state[n].reshape(-1).float() for n in names])



