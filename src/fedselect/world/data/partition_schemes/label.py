"""Label-based non-IID partition schemes: ``iid``, ``dirichlet``, ``shards``, ``label_skew``.

IID and shards use flwr-datasets' partitioners (with a seed derived from ``rng``); the
Dirichlet scheme is FedLab's "hetero Dirichlet" that FLASH-RL uses (Section IV-A), written here
because flwr-datasets' DirichletPartitioner gives up after 10 attempts.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from fedselect.world.data.partition_schemes.base import Partitioner, register_partitioner

__all__ = ["DirichletPartitioner", "IidPartitioner", "LabelSkewPartitioner", "ShardPartitioner"]


def _check_clients(num_clients: int, n: int) -> None:
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if num_clients > n:
        raise ValueError(
            f"cannot give {num_clients} clients at least one sample each from {n} samples; with more clients than "
            f"samples use scheme client_dirichlet with samples_per_client and replacement: true"
        )


def _seed_from(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**31 - 1))


def _flwr_split(partitioner, labels: np.ndarray, num_clients: int) -> list[np.ndarray]:
    """Run a flwr-datasets partitioner over a label column and return index arrays."""
    import datasets  # flwr-datasets' dependency (Hugging Face datasets)

    ds = datasets.Dataset.from_dict({"label": labels.astype(np.int64), "idx": np.arange(len(labels))})
    partitioner.dataset = ds
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return [np.sort(np.asarray(partitioner.load_partition(i)["idx"], dtype=np.int64)) for i in range(num_clients)]


@register_partitioner
class IidPartitioner(Partitioner):
    """Uniformly shuffled, (almost) equal-size parts (flwr-datasets ``IidPartitioner`` on a
    shuffled order)."""

    name = "iid"

    def split(self, labels, num_clients, rng, groups=None):
        from flwr_datasets.partitioner import IidPartitioner as FlwrIid

        labels = np.asarray(labels)
        _check_clients(num_clients, len(labels))
        perm = rng.permutation(len(labels))
        parts = _flwr_split(FlwrIid(num_partitions=num_clients), labels[perm], num_clients)
        return [np.sort(perm[p]) for p in parts]


@register_partitioner
class DirichletPartitioner(Partitioner):
    """FedLab's hetero Dirichlet partition (FLASH-RL Section IV-A), as used by FLASH-RL.

    For each class, client proportions p ~ Dir(alpha * 1_N); clients already holding at least
    n / N samples get proportion 0 for the remaining classes (self-balancing); the class is
    split by the renormalised proportions. The whole partition is redrawn until every client
    has at least ``min_size`` samples, at most ``max_attempts`` times and ``max_seconds``.

    Args:
        alpha: concentration (> 0); small = skewed.
        min_size: minimum samples per client (paper: 10).
        max_attempts, max_seconds: bounds on the redraws.

    Raises:
        ValueError: alpha <= 0; ``num_clients * min_size > n``; no valid draw within the bounds
        (the message gives the smallest client size reached and a suggestion).
    """

    name = "dirichlet"

    def __init__(self, alpha: float = 0.5, min_size: int = 10, max_attempts: int = 10_000, max_seconds: float = 30.0):
        if not alpha > 0:
            raise ValueError(f"dirichlet alpha must be > 0, got {alpha}")
        if min_size < 0:
            raise ValueError(f"dirichlet min_size must be >= 0, got {min_size}")
        self.alpha, self.min_size = float(alpha), int(min_size)
        self.max_attempts, self.max_seconds = int(max_attempts), float(max_seconds)

    def split(self, labels, num_clients, rng, groups=None):
        labels = np.asarray(labels)
        n = len(labels)
        _check_clients(num_clients, n)
        if num_clients * self.min_size > n:
            raise ValueError(
                f"dirichlet: {num_clients} clients x min_size {self.min_size} = {num_clients * self.min_size} > {n} samples; "
                f"lower data.partition.min_size, use fewer clients, or use scheme client_dirichlet (sizes fixed first; "
                f"replacement: true when clients outnumber the samples)"
            )
        classes = np.unique(labels)
        by_class = [np.flatnonzero(labels == c) for c in classes]
        cap = n / num_clients
        start, best = time.monotonic(), 0
        for attempt in range(1, self.max_attempts + 1):  # noqa: B007 (the count is reported after the loop)
            parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
            sizes = np.zeros(num_clients, dtype=np.int64)
            for idx in by_class:
                idx = rng.permutation(idx)
                p = rng.dirichlet(np.full(num_clients, self.alpha))
                p = p * (sizes < cap)
                if p.sum() <= 0:
                    p = np.full(num_clients, 1.0 / num_clients)
                p = p / p.sum()
                cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
                for k, chunk in enumerate(np.split(idx, cuts)):
                    parts[k].append(chunk)
                    sizes[k] += len(chunk)
            best = max(best, int(sizes.min()))
            if sizes.min() >= self.min_size:
                return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
            if time.monotonic() - start > self.max_seconds:
                break
        raise ValueError(
            f"dirichlet(alpha={self.alpha}): no partition of {n} samples over {num_clients} clients "
            f"with every client >= {self.min_size} samples after {attempt} attempts "
            f"({time.monotonic() - start:.1f} s); the best draw's smallest client had {best}. "
            f"Raise alpha, lower min_size or use fewer clients; at large N (each client's share n/N of a few "
            f"samples) this scheme leaves clients empty: use scheme client_dirichlet (docs/fleets.md, 'Many clients')."
        )


@register_partitioner
class ShardPartitioner(Partitioner):
    """Sort by label, cut into equal shards, give each client ``shards_per_client`` shards
    (McMahan et al.; flwr-datasets ``ShardPartitioner``). With 2 shards per client each
    client holds at most 2 labels when shards do not straddle label boundaries.

    Args:
        shards_per_client: shards each client receives (>= 1).
        shard_size: samples per shard; default ``n // (num_clients * shards_per_client)``.

    Raises:
        ValueError: more shards requested than exist (``num_clients * shards_per_client *
        shard_size > n``), or a shard size < 1.
    """

    name = "shards"

    def __init__(self, shards_per_client: int = 2, shard_size: int | None = None):
        if shards_per_client < 1:
            raise ValueError(f"shards_per_client must be >= 1, got {shards_per_client}")
        if shard_size is not None and shard_size < 1:
            raise ValueError(f"shard_size must be >= 1, got {shard_size}")
        self.shards_per_client, self.shard_size = int(shards_per_client), shard_size

    def split(self, labels, num_clients, rng, groups=None):
        from flwr_datasets.partitioner import ShardPartitioner as FlwrShard

        labels = np.asarray(labels)
        n = len(labels)
        _check_clients(num_clients, n)
        wanted = num_clients * self.shards_per_client
        size = self.shard_size if self.shard_size is not None else n // wanted
        if size < 1 or wanted * size > n:
            raise ValueError(
                f"shards: {num_clients} clients x {self.shards_per_client} shards x {max(size, 1)} samples = "
                f"{wanted * max(size, 1)} > {n} samples ({n // max(size, 1)} shards exist)"
            )
        # a seeded shuffle inside each label keeps shard contents random but label-sorted
        perm = rng.permutation(n)
        order = perm[np.argsort(labels[perm], kind="stable")]
        flwr = FlwrShard(
            num_partitions=num_clients,
            partition_by="label",
            num_shards_per_partition=self.shards_per_client,
            shard_size=size,
            keep_incomplete_shard=False,
            shuffle=True,
            seed=_seed_from(rng),
        )
        parts = _flwr_split(flwr, labels[order], num_clients)
        return [np.sort(order[p]) for p in parts]


@register_partitioner
class LabelSkewPartitioner(Partitioner):
    """Each client holds exactly ``labels_per_client`` distinct labels, with varying sizes
    (FedLab's "#label" scheme; FLASH-RL's "2 labels per client, varying sizes").

    Client i's first label is ``i mod C``, the others drawn at random without repetition; each
    class is then split among the clients holding it with random proportions drawn from
    Dir(1) (so sizes vary). Classes nobody drew are left unused.

    Raises:
        ValueError: ``labels_per_client`` outside [1, C]; a class too small for the clients
        sharing it (after a bounded number of redraws).
    """

    name = "label_skew"

    def __init__(self, labels_per_client: int = 2, max_attempts: int = 1000):
        if labels_per_client < 1:
            raise ValueError(f"labels_per_client must be >= 1, got {labels_per_client}")
        self.k, self.max_attempts = int(labels_per_client), int(max_attempts)

    def split(self, labels, num_clients, rng, groups=None):
        labels = np.asarray(labels)
        _check_clients(num_clients, len(labels))
        classes = np.unique(labels)
        if self.k > len(classes):
            raise ValueError(f"label_skew: labels_per_client {self.k} > {len(classes)} classes present")
        by_class = {c: np.flatnonzero(labels == c) for c in classes}
        for _ in range(self.max_attempts):
            owned = []
            for i in range(num_clients):
                first = classes[i % len(classes)]
                rest = rng.choice(classes[classes != first], size=self.k - 1, replace=False) if self.k > 1 else []
                owned.append([first, *rest])
            holders = {c: [i for i in range(num_clients) if c in owned[i]] for c in classes}
            if any(len(h) > len(by_class[c]) for c, h in holders.items()):
                continue
            parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
            for c, h in holders.items():
                if not h:
                    continue
                idx = rng.permutation(by_class[c])
                # every holder gets at least one sample, the rest by Dir(1) proportions
                extra = len(idx) - len(h)
                p = rng.dirichlet(np.ones(len(h)))
                counts = 1 + np.floor(p * extra).astype(np.int64)
                counts[np.argmax(p)] += len(idx) - counts.sum()
                for k, chunk in zip(h, np.split(idx, np.cumsum(counts)[:-1])):
                    parts[k].append(chunk)
            return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
        raise ValueError(
            f"label_skew: some class has fewer samples than the clients sharing it "
            f"({num_clients} clients x {self.k} labels over {len(classes)} classes, smallest class "
            f"{min(len(v) for v in by_class.values())} samples)"
        )
