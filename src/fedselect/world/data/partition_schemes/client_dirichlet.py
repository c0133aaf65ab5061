"""The ``client_dirichlet`` partition scheme: every client's size first, then its Dirichlet class mix.

The partition for large N (10,000 clients and more; docs/fleets.md), where the per-class
Dirichlet draw of ``dirichlet`` leaves clients empty.
"""

from __future__ import annotations

import numpy as np

from fedselect.world.data.partition_schemes.base import Partitioner, register_partitioner

__all__ = ["ClientDirichletPartitioner"]


@register_partitioner
class ClientDirichletPartitioner(Partitioner):
    """Client-side Dirichlet label mix with every client's size fixed first: the partition for large N.

    FedLab's ``dirichlet`` partition with ``balance`` / ``unbalance_sgm`` (the "quantity + label
    skew" of Li et al. 2022, NIID-Bench).

    Every client first gets its size: ``samples_per_client`` (default ``n // N``), or with
    ``size_sigma > 0`` a lognormal draw around it (``s exp(sigma z)``, rescaled to the same
    total, at least ``min_size``). Then its class mix ``q_k ~ Dir(alpha 1_C)`` and its per-class
    counts ``~ Multinomial(s_k, q_k)``. Without replacement (default) clients are served in a
    random order and a class that runs out is dropped from the mix of the clients still to be
    served (their deficit re-drawn over the classes left), so partitions are disjoint and
    every client has exactly its size; this succeeds whenever ``sum_k s_k <= n``, unlike
    :class:`~fedselect.world.data.partition_schemes.label.DirichletPartitioner` whose per-class draw leaves clients empty once N is large
    (10,000 clients of MNIST). With ``replacement: true`` every client draws from the whole
    training set independently (clients overlap; within a client a sample appears at most
    once while a class has enough samples): the way to N larger than the training set
    (100,000 clients of MNIST's 60,000 images).

    Args:
        alpha: concentration of the per-client class mix (> 0; small = each client holds
            few classes).
        samples_per_client: s, samples per client (>= 1); default ``n // N`` (required when
            N > n, with ``replacement: true``).
        size_sigma: lognormal spread of the sizes (>= 0; 0 = every client exactly s).
        min_size: the least samples a client gets (>= 1).
        replacement: draw every client independently from the whole set (clients overlap).

    Raises:
        ValueError: a parameter out of range; without replacement, ``N x min_size > n`` or
        the sizes summing past n (the message names the fix).
    """

    name = "client_dirichlet"

    def __init__(
        self,
        alpha: float = 0.5,
        samples_per_client: int | None = None,
        size_sigma: float = 0.0,
        min_size: int = 1,
        replacement: bool = False,
    ):
        if not alpha > 0:
            raise ValueError(f"client_dirichlet alpha must be > 0, got {alpha}")
        if samples_per_client is not None and int(samples_per_client) < 1:
            raise ValueError(f"client_dirichlet samples_per_client must be >= 1 or null, got {samples_per_client}")
        if not size_sigma >= 0:
            raise ValueError(f"client_dirichlet size_sigma must be >= 0, got {size_sigma}")
        if int(min_size) < 1:
            raise ValueError(f"client_dirichlet min_size must be >= 1, got {min_size}")
        if not isinstance(replacement, bool):
            raise ValueError(f"client_dirichlet replacement must be true or false, got {replacement!r}")
        self.alpha, self.size_sigma, self.min_size = float(alpha), float(size_sigma), int(min_size)
        self.samples_per_client = None if samples_per_client is None else int(samples_per_client)
        self.replacement = replacement

    def _sizes(self, n: int, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        if self.samples_per_client is None and num_clients > n:
            raise ValueError(
                f"client_dirichlet: {num_clients} clients > {n} samples; set data.partition.samples_per_client "
                f"and replacement: true (clients then overlap), or use fewer clients"
            )
        s = self.samples_per_client if self.samples_per_client is not None else n // num_clients
        s = max(s, self.min_size)
        if self.size_sigma == 0:
            sizes = np.full(num_clients, s, dtype=np.int64)
        else:
            raw = s * np.exp(self.size_sigma * rng.standard_normal(num_clients))
            sizes = np.maximum(np.floor(raw * (s * num_clients) / raw.sum()).astype(np.int64), self.min_size)
        if not self.replacement and sizes.sum() > n:
            raise ValueError(
                f"client_dirichlet: {num_clients} clients x {s} samples (min_size {self.min_size}) need "
                f"{int(sizes.sum())} > {n} samples without replacement; lower data.partition.samples_per_client / "
                f"min_size, use fewer clients, or set replacement: true (clients then overlap)"
            )
        return sizes

    def split(self, labels, num_clients, rng, groups=None):
        labels = np.asarray(labels)
        n = len(labels)
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        if n < 1:
            raise ValueError("client_dirichlet: empty training set")
        sizes = self._sizes(n, num_clients, rng)
        classes = np.unique(labels)
        by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
        q = rng.dirichlet(np.full(len(classes), self.alpha), size=num_clients)
        if self.replacement:
            counts = rng.multinomial(sizes, q)  # (N, C)
            owner, rows = [], []
            for c, idx in enumerate(by_class):  # a random window of the class's random order
                m = counts[:, c]
                tot = int(m.sum())
                if tot == 0:
                    continue
                start = rng.integers(0, len(idx), size=num_clients)
                k = np.repeat(np.arange(num_clients), m)
                pos = np.arange(tot) - np.repeat(np.cumsum(m) - m, m)
                owner.append(k)
                rows.append(idx[(np.repeat(start, m) + pos) % len(idx)])
        else:
            left = np.array([len(i) for i in by_class], dtype=np.int64)
            counts = np.zeros((num_clients, len(classes)), dtype=np.int64)
            for k in rng.permutation(num_clients):
                need, p = int(sizes[k]), q[k].copy()
                while need > 0:  # each pass fills the client or empties a class: at most C passes
                    p = p * (left > 0)
                    p = p / p.sum() if p.sum() > 0 else (left > 0) / (left > 0).sum()
                    got = np.minimum(rng.multinomial(need, p), left)
                    counts[k] += got
                    left -= got
                    need -= int(got.sum())
            owner, rows = [], []
            for c, idx in enumerate(by_class):  # class c's samples in order, cut by the counts
                m = counts[:, c]
                owner.append(np.repeat(np.arange(num_clients), m))
                rows.append(idx[: int(m.sum())])
        owner_all = np.concatenate(owner) if owner else np.zeros(0, np.int64)
        rows_all = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        order = np.lexsort((rows_all, owner_all))
        per = np.bincount(owner_all, minlength=num_clients)
        return [p.astype(np.int64) for p in np.split(rows_all[order], np.cumsum(per)[:-1])]
