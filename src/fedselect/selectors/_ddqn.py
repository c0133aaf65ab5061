"""Shared machinery of the DDQN selectors FLASH-RL and FAVOR: warm-up, PCA, agent, checkpointing.

* ``prepare`` (once): every client trains ``warmup_epochs`` (1) local epoch(s) from the initial
  global model (the shared warm-up, :meth:`SelectorContext.warmup`); a PCA (scikit-learn,
  ``svd_solver="full"``) is fitted once on those N flattened weight vectors (the uploaded
  entries) with ``n_components = min(N, pca_components)`` (FLASH-RL Section III-C1 reduces the
  weights by PCA; the number of components is fedselect's).
* ``select``: state s_t -> the DDQN agent (:mod:`fedselect.kernels.ddqn`) chooses U distinct
  clients, epsilon-greedy per slot.
* ``observe``: rewards of the U selected (subclass), the participants' PCA rows are refreshed,
  s_{t+1} is built from round t+1's draws, the transition is stored and the agent learns
  (FR-eq 15, 16); target sync every P rounds.

State features (a documented departure): ``sigma_1`` is the standard deviation of the
first principal component on the warm-up models (one fixed scalar, so relative PCA geometry is
kept and the values are O(1)); device features are standardised with fixed *fleet statistics*:
for n and c the mean and standard deviation over the N clients, for f and b the mean and
standard deviation over the N clients of their profile means (MHz, Mb/s). Raw MHz and core
counts (up to 4400 and 384) would saturate the 512-unit ReLU layer. A feature without spread (a
fleet whose clients are all alike: one device class, one network, equal data) has its standard
deviation taken as 1, so it is 0 for every client; likewise ``sigma_1`` is 1 when the warm-up
models do not vary along the first component.

The warm-up costs one extra "round" in which all N clients download the initial model, train
and upload their weights; its bytes and latency (the straggler among N) are charged before
round 1 and, with ``count_warmup: true`` (default), counted in the end-to-end latency.

Large N (docs/flash-rl.md, "At 10,000 clients"):

* ``pca_fit_clients`` (1000) and ``pca_fit_max_mb`` (256): the PCA is fitted on a seeded sample
  (stream ``pca-fit/<selector>``; still ``svd_solver="full"``, exact on the sample) of at most
  ``pca_fit_clients`` clients, and of at most as many as keep the fitted matrix (sample x P
  float32) within ``pca_fit_max_mb`` MiB: ``k = min(N, pca_fit_clients, floor(pca_fit_max_mb
  MiB / 4P))``. The sample's models and the full SVD hold about five copies of that matrix
  (measured: fitting 1,000 models of the MNIST CNN, P = 431,080, took a run at N = 10,000 from
  1.9 to 10.7 GiB), so the bound keeps the fit near 1.3 GiB whatever the model and N; with the
  paper's CNN that is 155 clients. The warm-up is consumed as a stream:
  the sample trains first and only its models are held for the fit (written into one
  preallocated array), then the other clients train and are projected as they arrive, so memory
  is O(sample x P + N x m) instead of O(N x P). With k = N (N x P x 4 bytes within the bound,
  e.g. FLASH-RL's N = 100 with the MNIST CNN: 164 MiB) nothing changes.
* ``q_network``: ``full`` is the paper's ``state_dim -> hidden -> N`` network (state_dim ~ N x
  (m + 4): O(N^2 x hidden) parameters); ``shared`` applies one small MLP to every client's own
  block of the state (:class:`~fedselect.kernels.q_networks.SharedQNetwork`, parameters independent of
  N); ``auto`` (default) is ``full`` while its parameter count is <= ``q_network_max_params``
  (100M: N up to 1,860 for FLASH-RL, 1,932 for FAVOR, at the defaults) and ``shared`` above.
  An explicit ``full`` above the bound is refused from the config, before anything is allocated.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import numpy as np
import torch

from fedselect.common.seeding import np_rng, torch_rng
from fedselect.fl.aggregate import flat_parameters
from fedselect.fl.types import ClientOutcome, PhaseCost, State
from fedselect.kernels.ddqn import DDQNAgent
from fedselect.kernels.q_networks import full_q_parameters
from fedselect.selectors._ddqn_options import DDQNOptions, pca_fit_size
from fedselect.selectors.base import Feedback, Prepared, RoundView, Selection, Selector
from fedselect.world.system import RoundDraws

log = logging.getLogger("fedselect.flashrl")


def _stats(x) -> tuple[float, float]:
    x = np.asarray(x, dtype=float)
    s = float(x.std())
    return float(x.mean()), (s if s > 0 else 1.0)


class DDQNSelector(Selector):
    """FLASH-RL / FAVOR base (module docstring). Subclasses implement :meth:`state_dim`,
    :meth:`state_vector` and :meth:`round_rewards`."""

    Options = DDQNOptions
    extra_columns = ("epsilon", "mean_reward", "td_loss", "selected_devices", "selected_networks")
    wants_weights = True
    needs_shared_model = True
    needs_every_round_evaluation = True
    wants_evaluation = True  # the rewards read the global metric (FR-eq 8, 6; FAVOR's 64^(P - target) - 1)
    flower_app_needs = (
        "a warm-up in which every client trains a fixed number of local epochs from the initial model (the PCA of its "
        "weights is the DDQN's state); a Flower app's ClientApp trains as it is written to",
        "each device's CPU (MHz) and bandwidth (Mb/s) profile, part of the DDQN's state",
        "the global model's accuracy on the server's validation set after every round (its reward)",
    )

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        s = self.settings
        n = s.num_clients
        self.n_components = min(n, self.options.pca_components)
        fleet = ctx.fleet
        sizes = np.asarray(ctx.num_samples, dtype=float)
        # fixed fleet statistics for standardising n_k, c_k, f_{t,k}, b_{t,k} (module docstring)
        self.feature_stats = {
            "n": _stats(sizes),
            "c": _stats(fleet.cores),
            "f": _stats(fleet.mean_mhz),
            "b": _stats(fleet.mean_mbps),
        }
        self.static_features = np.stack(
            [
                (sizes - self.feature_stats["n"][0]) / self.feature_stats["n"][1],
                (fleet.cores - self.feature_stats["c"][0]) / self.feature_stats["c"][1],
            ],
            axis=1,
        )
        self.pca_mean: torch.Tensor | None = None  # (P,)
        self.pca_components: torch.Tensor | None = None  # (m, P)
        self.pca_scale = 1.0
        self.pca_explained: list[float] = []
        self.pca_explained_total = 0.0
        self.client_rows = np.zeros((n, self.n_components), np.float32)
        self._num_weights: int | None = None
        self.q_network = self.resolve_q_network(self.options, n)
        if self.q_network is None:
            raise ValueError(f"selector {self.name!r}: {self.q_network_problem(self.options, n)}")
        context_dim, feature_dim = self.state_layout(n, self.n_components)
        self.agent = DDQNAgent(
            self.state_dim(),
            n,
            self.options.agent_config(self.q_network),
            s.rounds,
            rng=np_rng(s.seed, f"agent/{self.name}"),
            torch_generator=torch_rng(s.seed, f"agent-init/{self.name}"),
            feature_dim=feature_dim,
            context_dim=context_dim,
        )
        self.current_state: np.ndarray | None = None

    def budget_problems(self, old_rounds: int, new_rounds: int, done: int) -> list[str]:
        """Epsilon decays over T when ``eps_decay_rounds`` is unset, and round T's transition is
        stored as terminal (and learned from) once round T has been played."""
        out = []
        if self.options.eps_decay_rounds is None:
            out.append(
                f"epsilon decays over all T rounds (eps_decay_rounds unset: {old_rounds} here, {new_rounds} in a fresh run); "
                f"set eps_decay_rounds explicitly in the config of new runs that you may want to extend"
            )
        if done >= old_rounds:
            out.append(f"round {old_rounds}'s transition is in the replay memory as terminal and the agent has learned from it")
        return out

    # ---------------------------------------------------------------- Q network choice
    @classmethod
    def full_q_parameters(cls, options: DDQNOptions, n: int) -> int:
        """Parameters of the full Q network for N = ``n`` clients."""
        c, d = cls.state_layout(n, min(n, options.pca_components))
        return full_q_parameters(c + n * d, n, options.hidden)

    @classmethod
    def resolve_q_network(cls, options: DDQNOptions, n: int) -> str | None:
        """``"full"`` or ``"shared"`` for N = ``n``; None when ``full`` is asked for above the bound."""
        fits = cls.full_q_parameters(options, n) <= options.q_network_max_params
        if options.q_network == "auto":
            return "full" if fits else "shared"
        if options.q_network == "full" and not fits:
            return None
        return options.q_network

    @classmethod
    def q_network_problem(cls, options: DDQNOptions, n: int) -> str:
        p = cls.full_q_parameters(options, n)
        gb = p * 4 * 5 / 1e9  # main + target + gradient + Adam's two moments, float32
        return (
            f"q_network: full would have {p:,} parameters at {n:,} clients (about {gb:.3g} GB "
            f"with the target network, gradients and Adam), above q_network_max_params = {options.q_network_max_params:,}; "
            f"set method_options.q_network: shared (or auto), or raise q_network_max_params"
        )

    @classmethod
    def check(cls, options, settings):
        if cls.resolve_q_network(options, settings.num_clients) is None:
            return [cls.q_network_problem(options, settings.num_clients)]
        return []

    # ---------------------------------------------------------------- to implement
    @classmethod
    def state_layout(cls, n: int, m: int) -> tuple[int, int]:
        """(context_dim, feature_dim) of the state for N = ``n`` clients and m PCA components:
        the state is a context block followed by N client blocks (the shared Q network reads it so)."""
        raise NotImplementedError

    def state_dim(self) -> int:
        c, d = self.state_layout(self.settings.num_clients, self.n_components)
        return c + self.settings.num_clients * d

    def state_vector(self, t: int, draws: RoundDraws, global_state: State | None) -> np.ndarray:
        """s_t as float32 ``(state_dim,)`` from the current PCA rows, round t's draws and (FAVOR)
        the global model."""
        raise NotImplementedError

    def round_rewards(self, t: int, outcomes: Sequence[ClientOutcome], feedback: Feedback) -> np.ndarray:
        """Rewards ``(U,)`` of the selected clients, in selection order."""
        raise NotImplementedError

    # ---------------------------------------------------------------- PCA
    def flat(self, state: State) -> torch.Tensor:
        """The weight vector of a model: its uploaded floating entries, float32 ``(P,)``."""
        return flat_parameters(state, self.ctx.upload_keys)

    def project(self, state: State) -> np.ndarray:
        """PCA coordinates of one model state, divided by sigma_1: float32 ``(m,)``."""
        w = self.flat(state)
        return ((self.pca_components @ (w - self.pca_mean)) / self.pca_scale).numpy().astype(np.float32)

    def _warmup(self, clients: Sequence[int] | None = None) -> np.ndarray:
        """``(len(clients), P)`` weights after the warm-up (round 0) of ``clients`` (None: all N),
        each model's row written as it arrives (one array, never a list of rows and its stack)."""
        count = self.settings.num_clients if clients is None else len(clients)
        out = np.empty((count, self.num_weights()), np.float32)
        i = 0
        for i, w in enumerate(self.ctx.warmup(self.options.warmup_epochs, "warmup", clients), start=1):
            out[i - 1] = self.flat(w.state).numpy()
        if i != count:
            raise RuntimeError(f"{self.name}: the warm-up returned {i} models for {count} clients")
        return out

    def num_weights(self) -> int:
        """P, the length of a model's weight vector (:meth:`flat` of the initial model)."""
        if self._num_weights is None:
            self._num_weights = int(self.flat(self.ctx.initial_state()).numel())
        return self._num_weights

    def pca_fit_size(self) -> int:
        """k, the clients the PCA is fitted on (:func:`pca_fit_size` of this run's N and P)."""
        return pca_fit_size(self.settings.num_clients, self.num_weights(), self.options)

    def pca_fit_sample(self) -> np.ndarray | None:
        """Sorted ids of the clients the PCA is fitted on, or None for all N (:meth:`pca_fit_size`
        is N). Seeded (stream ``pca-fit/<selector>``), independent of every other stream."""
        n, k = self.settings.num_clients, self.pca_fit_size()
        if k >= n:
            return None
        return np.sort(np_rng(self.settings.seed, f"pca-fit/{self.name}").choice(n, size=k, replace=False))

    def _warmup_and_fit(self) -> None:
        """The warm-up and the PCA fit (module docstring): all N models at once when N <=
        ``pca_fit_clients``; else the sample first (fit), then the others streamed and projected."""
        sample = self.pca_fit_sample()
        if sample is None:
            self._fit_pca(self._warmup())
            return
        rows = np.zeros((self.settings.num_clients, self.n_components), np.float32)
        self._fit_pca(self._warmup(sample.tolist()))
        rows[sample] = self.client_rows
        rest = np.setdiff1d(np.arange(self.settings.num_clients), sample)
        for w in self.ctx.warmup(self.options.warmup_epochs, "warmup", rest.tolist()):
            rows[w.client_id] = self.project(w.state)
        self.client_rows = rows

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
        # with one model (N = 1) or identical models scikit-learn's ratios are 0/0 = NaN: the single
        # component then explains 0 and the fit as a whole explains everything (total 1.0)
        ratios = np.asarray(pca.explained_variance_ratio_, dtype=np.float64)
        self.pca_explained = [float(v) if np.isfinite(v) else 0.0 for v in ratios]
        self.pca_explained_total = float(sum(self.pca_explained)) if np.all(np.isfinite(ratios)) else 1.0
        self.client_rows = (
            (((torch.from_numpy(weights) - self.pca_mean) @ self.pca_components.T) / self.pca_scale).numpy().astype(np.float32)
        )

    def prepare(self) -> Prepared:
        """Warm-up of all N clients and the PCA fit (FLASH-RL Section III-C1). Charges the warm-up's bytes and
        straggler latency (s) (and, as ``latency_sum_s``, the sum of the N clients' warm-up
        latencies; both 0 with ``count_warmup: false``); reports the PCA's explained-variance ratio."""
        self._warmup_and_fit()
        draws = self.ctx.draw(0)
        costs = [self.ctx.client_cost(k, self.options.warmup_epochs, draws) for k in range(self.settings.num_clients)]
        lat = max(c.latency_s for c in costs)
        up, down = sum(c.upload_bytes for c in costs), sum(c.download_bytes for c in costs)
        charged = lat if self.options.count_warmup else 0.0
        charged_sum = math.fsum(c.latency_s for c in costs) if self.options.count_warmup else 0.0
        info = {
            "upload_bytes": up,
            "download_bytes": down,
            "latency_s": charged,
            "warmup_latency_s": lat,
            "pca_components": self.n_components,
            "pca_explained_variance": self.pca_explained_total,
        }
        sample = self.pca_fit_sample()
        if sample is not None:  # only at large N: the summaries of today's runs stay as they are
            info["pca_fit_clients"] = int(sample.size)
        if self.q_network != "full":
            info["q_network"] = self.q_network
        log.info(
            "%s warm-up: %d clients, straggler %.2f s, PCA %d components explain %.3f of the variance",
            self.name,
            self.settings.num_clients,
            lat,
            self.n_components,
            info["pca_explained_variance"],
        )
        return Prepared(PhaseCost(charged, up, down, charged_sum), info)

    # ---------------------------------------------------------------- hooks
    def device_features(self, draws: RoundDraws) -> np.ndarray:
        """``(N, 4)`` standardised (n_k, c_k, f_{t,k}, b_{t,k}) (module docstring)."""
        fs = self.feature_stats
        f = (np.asarray(draws.freq_mhz, float) - fs["f"][0]) / fs["f"][1]
        b = (np.asarray(draws.bandwidth_mbps, float) - fs["b"][0]) / fs["b"][1]
        return np.concatenate([self.static_features, f[:, None], b[:, None]], axis=1)

    def select(self, view: RoundView) -> Selection:
        if self.pca_components is None:
            raise RuntimeError(f"{self.name}: select() before prepare()")
        self.current_state = self.state_vector(view.round, view.draws, view.global_state)
        among = None if view.available is None else view.pool(self.settings.num_clients)
        return Selection(self.agent.select(self.current_state, view.how_many(self.settings), view.round, among))

    def refresh_rows(self, outcomes: Sequence[ClientOutcome]) -> None:
        """Replace the PCA rows of the participants by those of their new local weights."""
        for o in outcomes:
            if o.failed is None and o.state is not None:
                self.client_rows[o.client_id] = self.project(o.state)

    def observe(self, t: int, outcomes: Sequence[ClientOutcome], feedback: Feedback) -> dict[str, Any]:
        rewards = np.asarray(self.round_rewards(t, outcomes, feedback), dtype=np.float64)
        self.refresh_rows(outcomes)
        done = t == self.settings.rounds
        next_state = self.state_vector(t + 1, self.ctx.draw(t + 1), feedback.global_state)
        self.agent.remember(self.current_state, [o.client_id for o in outcomes], rewards, next_state, done)
        loss = self.agent.learn(t)
        self.agent.end_round(t)
        fleet = self.ctx.fleet
        return {
            "epsilon": self.agent.epsilon(t) if not (t == 1 and self.agent.config.uniform_first_round) else 1.0,
            "mean_reward": float(rewards.mean()),
            "td_loss": float("nan") if loss is None else loss,
            "selected_devices": [fleet.devices[o.client_id].name for o in outcomes],
            "selected_networks": [fleet.networks[o.client_id].name for o in outcomes],
        }

    # ---------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        st = super().state_dict()
        st.update(
            {
                "agent": self.agent.state_dict(),
                "client_rows": self.client_rows.copy(),
                "pca": None
                if not self.options.checkpoint_pca
                else {
                    "mean": self.pca_mean.clone(),
                    "components": self.pca_components.clone(),
                    "scale": self.pca_scale,
                    "explained": list(self.pca_explained),
                    "explained_total": self.pca_explained_total,
                },
            }
        )
        return st

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("pca") is None:  # refit the PCA from the deterministic warm-up of the initial model
            self._warmup_and_fit()
        else:
            p = state["pca"]
            self.pca_mean, self.pca_components = p["mean"].clone(), p["components"].clone()
            self.pca_scale, self.pca_explained = float(p["scale"]), list(p["explained"])
            self.pca_explained_total = float(p.get("explained_total", sum(self.pca_explained)))
        super().load_state_dict(state)
        self.agent.load_state_dict(state["agent"])
        self.client_rows = np.array(state["client_rows"], dtype=np.float32, copy=True)
