"""FLASH-RL: double deep Q-learning client selection with a reputation-based utility
(Bouaziz et al.; SPEC 1; seed ``flash-rl.txt``).

Per round t (hooks of :class:`fedselect.methods.base.Method`):

* ``prepare`` (once): every client trains ``warmup_epochs`` (1) local epoch(s) from the initial
  global model; a PCA (scikit-learn, ``svd_solver="full"``) is fitted once on those N flattened
  weight vectors with ``n_components = min(N, pca_components)`` (SPEC 1.2).
* ``select``: state s_t (FR-eq 11, 12) -> the DDQN agent chooses U distinct clients,
  epsilon-greedy per slot (:mod:`fedselect.methods.ddqn`).
* ``aggregate``: FedAvg (unchanged).
* ``observe``: divergence of every participant from the aggregated global model (FR-eq 7),
  utility with the global metric before/after (FR-eq 8), min-max normalised latency,
  reputations (FR-eq 10, or FR-eq 6 / 9), rewards r_t = Psi_t of the U selected (FR-eq 14);
  the participants' PCA rows are refreshed, s_{t+1} is built from round t+1's draws, the
  transition is stored and the agent learns one step (FR-eq 15, 16); target sync every P rounds.

State features (a documented departure, SPEC 1.2): per client k,
``s_t^k = (PCA(w_k) / sigma_1, z(n_k), z(c_k), z(f_{t,k}), z(b_{t,k}))`` where ``sigma_1`` is
the standard deviation of the first principal component on the warm-up models (one fixed scalar,
so relative PCA geometry is kept and the values are O(1)), and ``z(x) = (x - m) / s`` uses fixed
*fleet statistics*: for n and c the mean and standard deviation over the N clients, for f and b
the mean and standard deviation over the N clients of their profile means (MHz, Mb/s). Raw MHz
and core counts (up to 4400 and 384) would saturate the 512-unit ReLU layer.

The warm-up costs one extra "round" in which all N clients download the initial model, train
one epoch and upload their weights; its bytes and latency (the straggler among N) are reported in
the round-0 row and, with ``count_warmup: true`` (default), counted in the end-to-end latency.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from fedselect.fl.aggregate import state_bytes
from fedselect.fl.evaluate import evaluate
from fedselect.fl.train import local_train
from fedselect.methods import register_method
from fedselect.methods.base import ClientUpdate, Method, flat_parameters
from fedselect.methods.ddqn import DDQNAgent, DDQNConfig
from fedselect.methods.rewards import (normalise_latency, normalised_divergence, update_reputations,
                                       utility)
from fedselect.seeding import np_rng, torch_rng
from fedselect.system import RoundDraws, latency_bounds

log = logging.getLogger("fedselect.flashrl")


class DDQNOptions(BaseModel):
    """Agent and state options shared by FLASH-RL and FAVOR (defaults: FR Table IV, SPEC 1.3)."""

    model_config = ConfigDict(extra="forbid")
    pca_components: int = Field(100, ge=1, description="PCA components per model (capped by N)")
    warmup_epochs: int = Field(1, ge=1, description="local epochs of the warm-up of all clients")
    count_warmup: bool = Field(True, description="count the warm-up's straggler latency in the end-to-end latency")
    hidden: int = Field(512, ge=1)
    rl_lr: float = Field(0.01, gt=0, description="Adam learning rate of the Q network")
    gamma: float = Field(0.9, ge=0, le=1)
    memory_capacity: int = Field(1000, ge=1)
    rl_batch_size: int = Field(50, ge=1, description="minibatch size; learning starts once the memory holds this many")
    target_sync: int = Field(10, ge=1, description="P, rounds between target-network copies")
    rl_learn_steps: int = Field(1, ge=1, description="Adam steps per round (paper: 1; a tuning knob)")
    eps_init: float = Field(0.9, ge=0, le=1)
    eps_end: float = Field(0.2, ge=0, le=1, description="0.35 for MNIST in the paper")
    eps_decay_rounds: int | None = Field(None, ge=1, description="rounds of linear decay; null = all rounds")
    checkpoint_pca: bool = Field(True, description="store the PCA in checkpoints; false = refit it on resume by re-running the deterministic warm-up")

    def agent_config(self) -> DDQNConfig:
        return DDQNConfig(hidden=self.hidden, lr=self.rl_lr, gamma=self.gamma, memory_capacity=self.memory_capacity,
                          batch_size=self.rl_batch_size, target_sync=self.target_sync, eps_init=self.eps_init,
                          eps_end=self.eps_end, eps_decay_rounds=self.eps_decay_rounds,
                          learn_steps=self.rl_learn_steps)


class FlashRLOptions(DDQNOptions):
    """FLASH-RL options (SPEC 1.1): reward kind and FR-eq 10 weights."""

    reward: Literal["utility_latency", "utility", "reputation_accuracy"] = Field(
        "utility_latency", description="FR-eq 10 (default), FR-eq 9 or FR-eq 6")
    lam: float = Field(0.6, ge=0, le=1, description="lambda of FR-eq 6/9/10")
    alpha1: float = Field(1.0, ge=0, description="weight of the utility in FR-eq 10")
    alpha2: float = Field(1.0, ge=0, description="weight of the normalised latency in FR-eq 10")
    psi_init: float | None = Field(None, description="Psi_0; null = 1/N")
    performance_metric: Literal["accuracy", "f1_macro"] | None = Field(
        None, description="P of FR-eq 8; null = metrics.metric (accuracy for images, f1_macro for fall detection)")


class DDQNSelector(Method):
    """Shared machinery of FLASH-RL and FAVOR: warm-up, PCA, agent, checkpointing.

    Subclasses implement :meth:`state_vector` and :meth:`round_rewards`.
    """

    Options = DDQNOptions
    extra_columns = ["epsilon", "mean_reward", "td_loss", "selected_devices", "selected_networks"]

    def __init__(self, cfg, fed):
        super().__init__(cfg, fed)
        if cfg.eval_every != 1:
            raise ValueError(f"method {self.name!r} needs the global metric every round (rewards, FR-eq 8 / FAVOR); "
                             f"set eval_every: 1 (got {cfg.eval_every})")
        n = fed.num_clients
        self.n_components = min(n, self.options.pca_components)
        fleet = fed.fleet
        sizes = np.array([c.num_samples for c in fed.clients], dtype=float)

        def stats(x):
            x = np.asarray(x, dtype=float)
            s = float(x.std())
            return float(x.mean()), (s if s > 0 else 1.0)

        # fixed fleet statistics for standardising n_k, c_k, f_{t,k}, b_{t,k} (module docstring)
        self.feature_stats = {"n": stats(sizes), "c": stats(fleet.cores), "f": stats(fleet.mean_mhz), "b": stats(fleet.mean_mbps)}
        self.static_features = np.stack([(sizes - self.feature_stats["n"][0]) / self.feature_stats["n"][1],
                                         (fleet.cores - self.feature_stats["c"][0]) / self.feature_stats["c"][1]], axis=1)
        self.pca_mean: torch.Tensor | None = None        # (P,)
        self.pca_components: torch.Tensor | None = None  # (m, P)
        self.pca_scale = 1.0
        self.pca_explained: list[float] = []
        self.pca_explained_total = 0.0
        self.client_rows = np.zeros((n, self.n_components), np.float32)
        self.agent = DDQNAgent(self.state_dim(), n, self.options.agent_config(), cfg.rounds,
                               rng=np_rng(cfg.seed, f"agent/{self.name}"), torch_generator=torch_rng(cfg.seed, f"agent-init/{self.name}"))
        self.current_state: np.ndarray | None = None

    # ---------------------------------------------------------------- to implement
    def state_dim(self) -> int:
        raise NotImplementedError

    def state_vector(self, t: int, draws: RoundDraws) -> np.ndarray:
        """s_t as float32 ``(state_dim,)`` from the current PCA rows and round t's draws."""
        raise NotImplementedError

    def round_rewards(self, t: int, updates: list[ClientUpdate], before: dict, after: dict) -> np.ndarray:
        """Rewards ``(U,)`` of the selected clients, in selection order."""
        raise NotImplementedError

    # ---------------------------------------------------------------- PCA
    def project(self, state) -> np.ndarray:
        """PCA coordinates of one model state, divided by sigma_1: float32 ``(m,)``."""
        w = flat_parameters(state)
        return ((self.pca_components @ (w - self.pca_mean)) / self.pca_scale).numpy().astype(np.float32)

    def _warmup(self) -> tuple[list[ClientUpdate], np.ndarray]:
        """All N clients train ``warmup_epochs`` from the initial global model (round 0)."""
        init = {k: v.detach().clone() for k, v in self.global_model.state_dict().items()}
        draws = self.fed.fleet.draw(0)
        updates, rows = [], []
        for k in range(self.fed.num_clients):
            self.worker.load_state_dict(init)
            loss = local_train(self.worker, self.fed.clients[k].train, self.train_cfg,
                               self.fed.train_generator(0, k, tag="warmup"), epochs=self.options.warmup_epochs)
            state = {n: v.detach().clone() for n, v in self.worker.state_dict().items()}
            rows.append(flat_parameters(state).numpy())
            u = self.make_update(0, k, state, loss, self.options.warmup_epochs, draws)
            u.state = None  # keep only the costs
            updates.append(u)
        return updates, np.stack(rows)

    def _fit_pca(self, weights: np.ndarray) -> None:
        from sklearn.decomposition import PCA

        m = min(self.n_components, weights.shape[0])
        with np.errstate(invalid="ignore", divide="ignore"):  # one row: scikit-learn divides by n - 1 = 0
            pca = PCA(n_components=m, svd_solver="full").fit(weights)
        comps = np.zeros((self.n_components, weights.shape[1]), np.float32)
        comps[:m] = pca.components_
        self.pca_mean = torch.from_numpy(np.asarray(pca.mean_, np.float32))
        self.pca_components = torch.from_numpy(comps)
        self.pca_scale = float(np.sqrt(pca.explained_variance_[0])) if pca.explained_variance_[0] > 0 else 1.0
        # zero total variance (one client, or identical warm-up models): scikit-learn's ratio
        # is 0/0 = NaN. The mean alone then reproduces every row exactly: each component
        # explains 0 and the fit as a whole explains everything (pca_explained_total = 1.0)
        ratios = np.asarray(pca.explained_variance_ratio_, dtype=np.float64)
        self.pca_explained = [float(v) if np.isfinite(v) else 0.0 for v in ratios]
        self.pca_explained_total = float(sum(self.pca_explained)) if np.all(np.isfinite(ratios)) else 1.0
        self.client_rows = (((torch.from_numpy(weights) - self.pca_mean) @ self.pca_components.T) / self.pca_scale).numpy().astype(np.float32)

    def prepare(self) -> dict[str, Any]:
        """Warm-up of all N clients and the PCA fit (SPEC 1.2). Returns the warm-up's bytes,
        latency (s) and the PCA's explained-variance ratio."""
        updates, weights = self._warmup()
        self._fit_pca(weights)
        lat = max(u.latency_s for u in updates)
        info = {"upload_bytes": sum(u.upload_bytes for u in updates), "download_bytes": sum(u.download_bytes for u in updates),
                "latency_s": lat if self.options.count_warmup else 0.0, "warmup_latency_s": lat,
                "pca_components": self.n_components, "pca_explained_variance": self.pca_explained_total}
        log.info("%s warm-up: %d clients, straggler %.2f s, PCA %d components explain %.3f of the variance",
                 self.name, self.fed.num_clients, lat, self.n_components, info["pca_explained_variance"])
        return info

    # ---------------------------------------------------------------- hooks
    def device_features(self, draws: RoundDraws) -> np.ndarray:
        """``(N, 4)`` standardised (n_k, c_k, f_{t,k}, b_{t,k}) (module docstring)."""
        fs = self.feature_stats
        f = (np.asarray(draws.freq_mhz, float) - fs["f"][0]) / fs["f"][1]
        b = (np.asarray(draws.bandwidth_mbps, float) - fs["b"][0]) / fs["b"][1]
        return np.concatenate([self.static_features, f[:, None], b[:, None]], axis=1)

    def select(self, t: int, draws: RoundDraws) -> list[int]:
        if self.pca_components is None:
            raise RuntimeError(f"{self.name}: select() before prepare()")
        self.current_state = self.state_vector(t, draws)
        return self.agent.select(self.current_state, self.cfg.clients_per_round, t)

    def refresh_rows(self, updates: list[ClientUpdate]) -> None:
        """Replace the PCA rows of the participants by those of their new local weights (SPEC 1.2)."""
        for u in updates:
            if u.failed is None and u.state is not None:
                self.client_rows[u.client_id] = self.project(u.state)

    def observe(self, t, updates, before, after):
        rewards = np.asarray(self.round_rewards(t, updates, before, after), dtype=np.float64)
        self.refresh_rows(updates)
        done = t == self.cfg.rounds
        next_state = self.state_vector(t + 1, self.fed.fleet.draw(t + 1))
        self.agent.remember(self.current_state, [u.client_id for u in updates], rewards, next_state, done)
        loss = self.agent.learn(t)
        self.agent.end_round(t)
        fleet = self.fed.fleet
        return {
            "epsilon": self.agent.epsilon(t) if not (t == 1 and self.agent.config.uniform_first_round) else 1.0,
            "mean_reward": float(rewards.mean()),
            "td_loss": float("nan") if loss is None else loss,
            "selected_devices": [fleet.devices[u.client_id].name for u in updates],
            "selected_networks": [fleet.networks[u.client_id].name for u in updates],
        }

    # ---------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        st = super().state_dict()
        st.update({
            "agent": self.agent.state_dict(),
            "client_rows": self.client_rows.copy(),
            "pca": None if not self.options.checkpoint_pca else {
                "mean": self.pca_mean.clone(), "components": self.pca_components.clone(),
                "scale": self.pca_scale, "explained": list(self.pca_explained)},
        })
        return st

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("pca") is None:
            # refit the PCA from the deterministic warm-up of the initial model
            init = self.fed.new_model().state_dict()
            self.global_model.load_state_dict(init)
            _, weights = self._warmup()
            self._fit_pca(weights)
        else:
            p = state["pca"]
            self.pca_mean, self.pca_components = p["mean"].clone(), p["components"].clone()
            self.pca_scale, self.pca_explained = float(p["scale"]), list(p["explained"])
        super().load_state_dict(state)
        self.agent.load_state_dict(state["agent"])
        self.client_rows = np.array(state["client_rows"], dtype=np.float32, copy=True)


@register_method
class FlashRL(DDQNSelector):
    """FLASH-RL (SPEC 1): DDQN selection rewarded by the reputation-based utility FR-eq 10.

    ``method_options`` (:class:`FlashRLOptions`): Table IV defaults; ``reward`` picks FR-eq 10
    (``utility_latency``), FR-eq 9 (``utility``) or FR-eq 6 (``reputation_accuracy``; evaluates every
    participant's local model on the test set, slow).

    Extra per-round columns: ``epsilon``, ``mean_reward`` (mean of r_t), ``td_loss`` (nan before
    the first learning step), ``selected_devices`` / ``selected_networks`` (profile names of the
    selected clients, in selection order).
    """

    name = "flashrl"
    Options = FlashRLOptions

    def __init__(self, cfg, fed):
        super().__init__(cfg, fed)
        n = fed.num_clients
        self.psi = np.full(n, 1.0 / n if self.options.psi_init is None else self.options.psi_init, dtype=np.float64)
        self.metric = self.options.performance_metric or cfg.metrics.metric
        sysc = cfg.system
        model_bytes = state_bytes(self.global_model.state_dict(), self.upload_keys())
        down_bytes = state_bytes(self.global_model.state_dict(), self.download_keys()) if sysc.count_download else 0
        self.l_min, self.l_max = latency_bounds(fed.fleet, [fed.client_bits(k) for k in range(n)], cfg.train.local_epochs,
                                                sysc.cycles_per_bit, 8 * model_bytes, 8 * down_bytes)

    def state_dim(self) -> int:
        return self.fed.num_clients * (self.n_components + 4)

    def state_vector(self, t, draws):
        """s_t = (s_t^1, ..., s_t^N), s_t^k = (PCA row, z(n_k), z(c_k), z(f), z(b)) (FR-eq 11, 12)."""
        return np.concatenate([self.client_rows, self.device_features(draws).astype(np.float32)], axis=1).reshape(-1)

    def round_rewards(self, t, updates, before, after):
        """Reputations Psi_t of the selected clients (FR-eq 10 / 9 / 6, FR-eq 14).

        A failed participant gets utility 0 (and accuracy 0 for FR-eq 6) and its reported latency.
        """
        ids = [u.client_id for u in updates]
        improved = float(after[self.metric]) > float(before[self.metric])
        global_flat = flat_parameters(self.global_model.state_dict()).numpy()
        lnorm = normalise_latency(np.array([u.latency_s for u in updates]), self.l_min, self.l_max)
        opts = self.options
        if opts.reward == "reputation_accuracy":
            accs = []
            for u in updates:
                if u.failed is not None:
                    accs.append(0.0)
                    continue
                self.worker.load_state_dict(u.state)
                accs.append(evaluate(self.worker, self.fed.test_set)[self.metric])
            self.psi = update_reputations(self.psi, ids, "reputation_accuracy", local_accuracy=accs,
                                          prev_global_accuracy=float(before[self.metric]), lam=opts.lam)
        else:
            zeta = [0.0 if u.failed is not None else
                    utility(normalised_divergence(flat_parameters(u.state).numpy(), global_flat), improved) for u in updates]
            self.psi = update_reputations(self.psi, ids, opts.reward, zeta=zeta, lnorm=lnorm,
                                          lam=opts.lam, alpha1=opts.alpha1, alpha2=opts.alpha2)
        return self.psi[ids]

    def state_dict(self):
        st = super().state_dict()
        st["psi"] = self.psi.copy()
        return st

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.psi = np.array(state["psi"], dtype=np.float64, copy=True)
