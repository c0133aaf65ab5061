"""Partitions of a training set over clients (label-based non-IID schemes).

Each partitioner is a small class: parameters in ``__init__``, one method
``split(labels, num_clients, rng, groups=None) -> list[np.ndarray]`` returning one int64 index
array per client. Partitions are disjoint unless a scheme says otherwise (fat/thin clients
sample with replacement). Impossible requests raise ``ValueError`` with the numbers *before*
any sampling; randomised schemes retry a bounded number of times.

IID and shards use flwr-datasets' partitioners (with a seed derived from ``rng``); the
Dirichlet scheme is FedLab's "hetero Dirichlet" that FLASH-RL uses (Section IV-A), written here
because flwr-datasets' DirichletPartitioner gives up after 10 attempts.
"""

from __future__ import annotations

import time
import warnings
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from fedselect.registry import PARTITIONERS


class Partitioner(ABC):
    """Splits sample indices among ``num_clients`` clients."""

    name: ClassVar[str]

    @abstractmethod
    def split(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, groups: np.ndarray | None = None
    ) -> list[np.ndarray]:
        """Return ``num_clients`` int64 index arrays into ``labels`` (shape ``(n,)``).

        Raises:
            ValueError: the request is impossible for these labels (message gives the numbers).
        """


def register_partitioner(cls: type[Partitioner]) -> type[Partitioner]:
    """Class decorator registering a :class:`Partitioner` subclass under its ``name``
    (``data: {partition: {scheme: NAME, ...its parameters}}``; the partition-scheme kind of
    :mod:`fedselect.registry`). Its ``__init__`` keyword parameters are the scheme's parameters,
    checked against the config before anything loads.

    Raises:
        ValueError: no ``name``, a name with ``:``, or another class already under that name.
    """
    return PARTITIONERS.register(cls)


def make_partitioner(scheme: str, **params: Any) -> Partitioner:
    """Instantiate scheme ``scheme`` (a registered name, an entry point of the group
    ``fedselect.partitioners`` or ``"package.module:ClassName"``) with ``params``.

    Raises:
        ValueError: unknown scheme (lists the known ones) or bad parameters.
    """
    cls = PARTITIONERS.get(scheme)
    try:
        return cls(**params)
    except TypeError as e:
        raise ValueError(f"partition scheme {scheme!r}: {e}") from None


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
    :class:`DirichletPartitioner` whose per-class draw leaves clients empty once N is large
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


def local_holdout(
    indices: np.ndarray, fraction: float, rng: np.random.Generator, min_train: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Split one client's indices into (train, held-out) for per-client evaluation.

    ``round(fraction * n)`` samples are held out, but never so many that fewer than
    ``min_train`` remain for training. ``fraction`` in [0, 1).

    Raises:
        ValueError: fraction outside [0, 1).
    """
    if not 0 <= fraction < 1:
        raise ValueError(f"holdout fraction must be in [0, 1), got {fraction}")
    idx = rng.permutation(np.asarray(indices, dtype=np.int64))
    n_hold = min(int(round(fraction * len(idx))), max(len(idx) - min_train, 0))
    return np.sort(idx[n_hold:]), np.sort(idx[:n_hold])


#: the budgeted-online authors' class skew (Federated-IoT-Classification, ``fl.py``): a thin
#: client draws from 3 of the 19 device classes, a fat one from 15 of 19 (as shares, so that
#: they apply to any number of classes: 2 and 8 of MNIST's 10)
FAT_THIN_PRESETS: dict[str, dict[str, float]] = {"authors": {"thin_classes": 3 / 19, "fat_classes": 15 / 19}}


def _class_option(key: str, v: Any) -> int | float | None:
    """``thin_classes`` / ``fat_classes``: None, an int count >= 1 or a float share in (0, 1]."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(
            f"fat_thin {key} must be a number of classes (an int >= 1), a share of the classes (a float in (0, 1]) "
            f"or null (all classes), got {v!r}"
        )
    if isinstance(v, (int, np.integer)):
        if v < 1:
            raise ValueError(f"fat_thin {key} as a number of classes must be >= 1, got {v}")
        return int(v)
    if not 0 < v <= 1:
        raise ValueError(f"fat_thin {key} as a share of the classes must be a float in (0, 1], got {v}")
    return float(v)


def _class_count(key: str, v: int | float, num_classes: int) -> int:
    """How many of ``num_classes`` classes ``v`` (a count or a share) means.

    Raises:
        ValueError: a count above ``num_classes``.
    """
    if isinstance(v, float):  # a share: rounded half up, at least one class
        return max(1, min(num_classes, int(np.floor(v * num_classes + 0.5))))
    if v > num_classes:
        raise ValueError(f"fat_thin {key} = {v}, but the training set has only {num_classes} classes; allowed 1..{num_classes}")
    return v


@register_partitioner
class FatThinPartitioner(Partitioner):
    """Fat and thin clients of the budgeted-online paper (its Phase 5, Table V).

    ``round(fat_fraction * N)`` clients, chosen at random, are *fat*: each holds about
    ``fat_share`` of the training set; the others are *thin* with about ``thin_share`` each.
    Every client's set is drawn independently from the whole training set, so clients overlap
    (sampling with replacement across clients; within one client the samples are distinct).
    "About": each size is ``round(share * n * u)`` with ``u ~ U(1 - size_jitter, 1 + size_jitter)``,
    at least 1 and at most n (the paper makes the sizes differ).

    Class skew (the authors' code, Federated-IoT-Classification ``fl.py``: thin clients from 3 of
    the 19 device classes, fat ones from 15 of 19; ``preset: authors``): with ``thin_classes``
    (``fat_classes``) every thin (fat) client first draws its own subset of the classes present in
    the training set, uniformly without replacement, then its samples from those classes only.
    A count is that many classes; a share ``s`` is ``max(1, floor(s * C + 0.5))`` of the C classes
    (so ``1`` is one class, ``1.0`` all of them). A client whose classes hold fewer samples than
    its size takes all of them (it is smaller than asked, never padded from other classes).
    With both None (the default) every client draws from all classes, exactly as before the
    option existed (the same draws from ``rng``, so the same indices).

    Args:
        fat_fraction: share of fat clients, in [0, 1] (paper 0.2).
        fat_share: fraction of the training set per fat client, in (0, 1] (paper 0.1).
        thin_share: fraction per thin client, in (0, 1] (paper 0.01).
        size_jitter: relative spread of the sizes, in [0, 1) (default 0.2).
        thin_classes: classes per thin client: an int >= 1 (at most the number of classes),
            a float share in (0, 1], or None = all (default).
        fat_classes: the same for fat clients.
        preset: ``"authors"`` sets ``thin_classes`` 3/19 and ``fat_classes`` 15/19 (shares; the
            other options keep their values, whose defaults are already the paper's).

    Raises:
        ValueError: a parameter outside its range or of the wrong type, an unknown preset, a
        preset together with ``thin_classes`` / ``fat_classes``; in :meth:`split`, a class count
        above the number of classes in the training set.
    """

    name = "fat_thin"

    def __init__(
        self,
        fat_fraction: float = 0.2,
        fat_share: float = 0.1,
        thin_share: float = 0.01,
        size_jitter: float = 0.2,
        thin_classes: int | float | None = None,
        fat_classes: int | float | None = None,
        preset: str | None = None,
    ):
        if not 0 <= fat_fraction <= 1:
            raise ValueError(f"fat_thin fat_fraction must be in [0, 1], got {fat_fraction}")
        for key, v in (("fat_share", fat_share), ("thin_share", thin_share)):
            if not 0 < v <= 1:
                raise ValueError(f"fat_thin {key} must be in (0, 1], got {v}")
        if not 0 <= size_jitter < 1:
            raise ValueError(f"fat_thin size_jitter must be in [0, 1), got {size_jitter}")
        if preset is not None:
            if preset not in FAT_THIN_PRESETS:
                raise ValueError(f"fat_thin preset must be one of {sorted(FAT_THIN_PRESETS)} or null, got {preset!r}")
            if thin_classes is not None or fat_classes is not None:
                raise ValueError(
                    f"fat_thin preset {preset!r} sets thin_classes and fat_classes: give either the preset or those two"
                )
            thin_classes, fat_classes = FAT_THIN_PRESETS[preset]["thin_classes"], FAT_THIN_PRESETS[preset]["fat_classes"]
        self.fat_fraction, self.fat_share = float(fat_fraction), float(fat_share)
        self.thin_share, self.size_jitter = float(thin_share), float(size_jitter)
        self.thin_classes = _class_option("thin_classes", thin_classes)
        self.fat_classes = _class_option("fat_classes", fat_classes)
        self.preset = preset

    def fat_clients(self, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        """Sorted ids of the fat clients (the first draw :meth:`split` makes from ``rng``)."""
        n_fat = int(round(self.fat_fraction * num_clients))
        return np.sort(rng.choice(num_clients, size=n_fat, replace=False)).astype(np.int64)

    def split(self, labels, num_clients, rng, groups=None):
        y = np.asarray(labels)
        n = len(y)
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        if n < 1:
            raise ValueError("fat_thin: empty training set")
        classes = np.unique(y) if self.thin_classes is not None or self.fat_classes is not None else None
        counts = {}
        if classes is not None:  # checked before any draw
            for key, v in (("thin_classes", self.thin_classes), ("fat_classes", self.fat_classes)):
                if v is not None:
                    counts[key == "fat_classes"] = _class_count(key, v, len(classes))
        fat = np.zeros(num_clients, dtype=bool)
        fat[self.fat_clients(num_clients, rng)] = True
        share = np.where(fat, self.fat_share, self.thin_share)
        u = rng.uniform(1 - self.size_jitter, 1 + self.size_jitter, size=num_clients)
        sizes = np.clip(np.round(share * n * u).astype(np.int64), 1, n)
        out = []
        for k, s in enumerate(sizes):
            c = counts.get(bool(fat[k]))
            if c is None:  # all classes: the draw made before the class options existed
                out.append(np.sort(rng.choice(n, size=int(s), replace=False)).astype(np.int64))
                continue
            pool = np.flatnonzero(np.isin(y, rng.choice(classes, size=c, replace=False)))
            take = min(int(s), len(pool))  # fewer samples in its classes than its size: all of them
            out.append(np.sort(pool[rng.choice(len(pool), size=take, replace=False)]).astype(np.int64))
        return out


# --------------------------------------------------------------------------- volunteer divisions (sensor data: one client per subject)


def _subjects(groups: np.ndarray | None, scheme: str) -> np.ndarray:
    if groups is None:
        raise ValueError(f"partition scheme {scheme!r} needs per-sample subject ids (dataset 'groups'); this dataset has none")
    return np.unique(np.asarray(groups))


@register_partitioner
class VolunteerPartitioner(Partitioner):
    """Volunteer-based division (FLASH-RL IV-A): client ``i`` holds all samples of the
    ``i``-th subject (subjects in increasing id order).

    Raises:
        ValueError: no ``groups``; ``num_clients`` different from the number of subjects.
    """

    name = "volunteer"

    def split(self, labels, num_clients, rng, groups=None):
        subs = _subjects(groups, self.name)
        if num_clients != len(subs):
            raise ValueError(
                f"volunteer division: num_clients ({num_clients}) must equal the number of subjects in the "
                f"training set ({len(subs)})"
            )
        g = np.asarray(groups)
        return [np.flatnonzero(g == s).astype(np.int64) for s in subs]


@register_partitioner
class VolunteerLabelSkewPartitioner(Partitioner):
    """Label skew k on volunteers (FLASH-RL IV-A, "label skew 8 / 4"): one client per subject
    (as :class:`VolunteerPartitioner`), keeping only ``labels_per_client`` of the classes that
    subject has (a seeded draw; a subject with fewer classes keeps all). Samples of the other
    classes are left unused.

    With the binary fall task the labels cannot express activity skew: use the loader option
    ``activities_per_subject`` with the ``volunteer`` division instead.

    Raises:
        ValueError: ``labels_per_client < 1``; no ``groups``; ``num_clients`` different from the
        number of subjects.
    """

    name = "volunteer_label_skew"

    def __init__(self, labels_per_client: int = 8):
        if int(labels_per_client) < 1:
            raise ValueError(f"labels_per_client must be >= 1, got {labels_per_client}")
        self.k = int(labels_per_client)

    def split(self, labels, num_clients, rng, groups=None):
        parts = VolunteerPartitioner().split(labels, num_clients, rng, groups)
        y = np.asarray(labels)
        out = []
        for idx in parts:
            present = np.unique(y[idx])
            keep = rng.choice(present, size=min(self.k, len(present)), replace=False)
            out.append(idx[np.isin(y[idx], keep)])
        return out
