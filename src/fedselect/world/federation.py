"""A federation: the clients' data and held-out splits, the server's validation set, the test
set, and the fleet.

Built once per experiment from the config and seed; every method compared on it sees the same
validation set, partition, held-out splits, device/network profiles and per-round draws. The
validation set (``data.validation``) is carved from the training set before partitioning
(:func:`validation_split`), so no client trains on it and it shares no row with the test set:
decisions that read model quality score on it, the test set is only reported (docs/core.md,
"Which set a decision reads").
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedselect.common.seeding import np_rng, torch_rng
from fedselect.config.schema import ExperimentConfig
from fedselect.config.sections import DataConfig, ModelConfig, SystemConfig
from fedselect.world.data.catalog import load_dataset, make_partitioner
from fedselect.world.data.datasets import ArrayDataset
from fedselect.world.data.file_errors import dropped_rows_total
from fedselect.world.data.partition import local_holdout
from fedselect.world.data.provenance import recording_reads
from fedselect.world.models import build_model
from fedselect.world.profiles import PROFILE_PRESETS
from fedselect.world.system import LATENCY_MODELS, DeviceProfile, Fleet, LatencyModel, NetworkProfile, data_bits, load_profiles


class Client:
    """One client: its training data, its held-out split (per-client evaluation) and the
    indices of both into the federation's training set.

    A federation's clients are *views*: ``train`` and ``holdout`` are built from the training
    set and the indices when asked for (a copy of a few samples, dropped after use), so memory
    does not grow with the number of clients (100,000 clients of a shared training set hold
    only their indices). A client built with its own data sets (``Client(id, train, holdout,
    train_indices, holdout_indices)``) keeps them.

    Attributes:
        id: the client id, 0..N-1.
        train_indices, holdout_indices: int64 ``(n_k,)`` / ``(h_k,)`` rows of the training set.
    """

    __slots__ = ("id", "train_indices", "holdout_indices", "_train", "_holdout", "_source")

    def __init__(
        self,
        id: int,
        train: ArrayDataset | None,
        holdout: ArrayDataset | None,
        train_indices: np.ndarray,
        holdout_indices: np.ndarray,
        source: ArrayDataset | None = None,
    ):
        if (train is None or holdout is None) and source is None:
            raise ValueError(f"client {id}: give its train and holdout data sets, or the source they are rows of")
        self.id, self.train_indices, self.holdout_indices = int(id), train_indices, holdout_indices
        self._train, self._holdout, self._source = train, holdout, source

    @classmethod
    def view(cls, id: int, source: ArrayDataset, train_indices: np.ndarray, holdout_indices: np.ndarray) -> "Client":
        """Client ``id`` as rows of ``source`` (its data sets are built on demand)."""
        return cls(id, None, None, train_indices, holdout_indices, source)

    @property
    def train(self) -> ArrayDataset:
        """The client's training samples (``source[train_indices]``, a fresh copy for a view)."""
        if self._train is not None:
            return self._train
        return self._source.subset(self.train_indices, f"{self._source.name}/client{self.id}")

    @property
    def holdout(self) -> ArrayDataset:
        """The client's held-out samples (``source[holdout_indices]`` for a view)."""
        if self._holdout is not None:
            return self._holdout
        return self._source.subset(self.holdout_indices, f"{self._source.name}/client{self.id}/holdout")

    @property
    def labels(self) -> np.ndarray:
        """int64 ``(n_k,)`` training labels (without copying the inputs)."""
        if self._train is not None:
            return self._train.y
        return self._source.y[np.asarray(self.train_indices, dtype=np.int64)]

    @property
    def num_samples(self) -> int:
        """n_k, the training samples (the FedAvg weight)."""
        return len(self._train) if self._train is not None else len(self.train_indices)


class Federation:
    """Clients, validation set, test set and fleet of one experiment (see module docstring).

    Attributes:
        data, model, system: the config sections it was built from (its identity).
        seed: the experiment seed.
        train_set, test_set: the whole training set as loaded (the clients' rows and the
            validation rows) and the server's test set.
        validation_indices: int64 ``(v,)`` sorted rows of ``train_set`` carved out as the
            server's validation set (empty with ``data.validation: 0``); no client holds them.
        validation_set: those rows as a data set (``train_set[validation_indices]``).
        clients: the N clients, ids 0..N-1.
        fleet: the clients' device/network profiles and per-round draws.
    """

    def __init__(
        self,
        data: DataConfig,
        model: ModelConfig,
        system: SystemConfig,
        seed: int,
        train_set: ArrayDataset,
        test_set: ArrayDataset,
        clients: list[Client],
        fleet: Fleet,
        validation_indices: np.ndarray | None = None,
    ):
        self.data, self.model, self.system, self.seed = data, model, system, int(seed)
        self.train_set, self.test_set, self.clients, self.fleet = train_set, test_set, clients, fleet
        self.validation_indices = np.zeros(0, dtype=np.int64) if validation_indices is None else validation_indices
        self.validation_set = train_set.subset(self.validation_indices, f"{train_set.name}/validation")
        #: the data and profile files the federation was built from: ``[{"path", "size",
        #: "sha256"}]`` ([] for embedded or generated data; see :mod:`fedselect.experiment.inputs`)
        self.source_files: list[dict] = []
        #: sorted ids of the partition's fat clients (``fat_thin``: the partitioner's
        #: ``fat_clients``, the same first draw as its split); None for other schemes
        self.fat_clients: np.ndarray | None = None
        self.input_shape = train_set.input_shape
        self.num_classes = train_set.num_classes
        self.features = train_set.num_features

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def new_model(self, init_name: str = "model-init") -> nn.Module:
        """A fresh model; the same ``init_name`` gives the same initial weights (seeded)."""
        m = self.model
        return build_model(m.name, self.input_shape, self.num_classes, generator=torch_rng(self.seed, init_name), **m.options)

    @property
    def latency_model(self) -> LatencyModel:
        """The latency model of ``system.latency_model`` (FR-eq 3-5 as ours or the authors' code)."""
        return LATENCY_MODELS[self.system.latency_model]

    def client_bits(self, k: int) -> float:
        """|D_k| of FR-eq 4 in bits: samples x features x 32 (latency model ``paper``) or
        samples x 51,200 (``flashrl-code``)."""
        return self.latency_model.data_bits(self.clients[k].num_samples, self.features)

    def train_generator(self, t: int, k: int, tag: str = "train") -> torch.Generator:
        """Mini-batch order of client ``k`` in round ``t``: independent of the method and of
        which other clients train, so runs compare and resume exactly."""
        return torch_rng(self.seed, f"{tag}/{t}/{k}")

    @property
    def data_dropped_rows(self) -> int:
        """Rows of the user's data files dropped at load by the loader option
        ``drop_invalid: true`` (0 when nothing was dropped); reported in ``summary.json``."""
        return dropped_rows_total(self.train_set, self.test_set)[0]

    @property
    def data_dropped_by_file(self) -> dict[str, int]:
        """``{file: rows dropped}`` behind :attr:`data_dropped_rows`."""
        return dropped_rows_total(self.train_set, self.test_set)[1]

    def label_counts(self) -> np.ndarray:
        """``(N, num_classes)`` training-label counts per client."""
        return np.stack([np.bincount(c.labels, minlength=self.num_classes) for c in self.clients])


def _profile_tables(s: SystemConfig) -> tuple[list[DeviceProfile], list[NetworkProfile], dict | None, dict | None]:
    """The device and network tables and their mixes: the ``system.profiles`` preset, each table
    replaced by ``profiles_file`` / ``devices`` / ``networks`` (a replaced table drops the preset's
    mix), each mix by ``device_mix`` / ``network_mix``."""
    preset = PROFILE_PRESETS[s.profiles]
    devices, networks = list(preset.devices), list(preset.networks)
    if s.profiles_file:
        d, n = load_profiles(s.profiles_file)
        devices, networks = d or devices, n or networks
    try:
        if s.devices:
            devices = [DeviceProfile(r.name, r.mean_mhz, r.std_mhz, r.cores) for r in s.devices]
        if s.networks:
            networks = [NetworkProfile(r.name, r.mean_mbps, r.std_mbps) for r in s.networks]
    except TypeError as e:
        raise ValueError(f"system.devices / system.networks: incomplete profile row ({e})") from None
    device_mix = preset.device_mix if devices == list(preset.devices) else None
    network_mix = preset.network_mix if networks == list(preset.networks) else None
    return devices, networks, s.device_mix or device_mix, s.network_mix or network_mix


def capacity_fleet(system: SystemConfig, n: int, seed: int, bits_per_sample: float) -> Fleet:
    """Per-client fixed capacities (``system.capacity``; docs/fleets.md) in the FR-eq 3-5 latency
    model: client k is a one-core device of frequency f_k (MHz) and a network of b_k (Mb/s), with
    per-round std ``jitter x`` its value. ``lognormal``: f_k = compute_mhz exp(sigma z), b_k alike;
    ``pareto``: f_k = compute_mhz (1 + Pareto(shape)) (compute_mhz is the minimum), b_k alike;
    ``file``: a CSV ``client,compute_speed,bandwidth_kbps`` (compute_speed in training samples per
    second: f_k = compute_speed x bits per sample x g / 1e6, so FR-eq 4 gives E n_k / compute_speed
    seconds; b_k = bandwidth_kbps / 1000). Generator ``np_rng(seed, "capacity")``.

    Raises:
        DataFileError: a bad capacity file (names the line and column), a client id outside 0..N-1
            or a client of the federation missing from it.
    """
    c = system.capacity
    if c.model == "file":
        from fedselect.world.data.checked_csv import Col, read_csv_checked
        from fedselect.world.data.file_errors import DataFileError

        t = read_csv_checked(
            c.file,
            (Col("client", "int", lo=0), Col("compute_speed", "float", lo=1e-12), Col("bandwidth_kbps", "float", lo=1e-12)),
            what="capacity CSV (client, compute_speed, bandwidth_kbps)",
        )
        ids = t.frame["client"].to_numpy(dtype=np.int64)
        t.reject(ids >= n, "client", f"client id outside 0..{n - 1} (data.num_clients = {n})")
        missing = sorted(set(range(n)) - set(ids.tolist()))
        if missing:
            raise DataFileError(c.file, f"no row for clients {missing[:10]}{' ...' if len(missing) > 10 else ''} of the {n}")
        speed = dict(zip(ids.tolist(), t.frame["compute_speed"].tolist()))
        kbps = dict(zip(ids.tolist(), t.frame["bandwidth_kbps"].tolist()))
        mhz = np.array([speed[k] * bits_per_sample * system.cycles_per_bit / 1e6 for k in range(n)])
        mbps = np.array([kbps[k] / 1000.0 for k in range(n)])
    else:
        rng = np_rng(seed, "capacity")
        if c.model == "lognormal":
            mhz = c.compute_mhz * np.exp(c.compute_sigma * rng.standard_normal(n))
            mbps = c.bandwidth_mbps * np.exp(c.bandwidth_sigma * rng.standard_normal(n))
        else:
            mhz = c.compute_mhz * (1.0 + rng.pareto(c.compute_shape, n))
            mbps = c.bandwidth_mbps * (1.0 + rng.pareto(c.bandwidth_shape, n))
    j = c.jitter if c.model != "file" else 0.0
    devices = [DeviceProfile(c.model, float(f), float(j * f), 1) for f in mhz]
    networks = [NetworkProfile(c.model, float(b), float(j * b)) for b in mbps]
    return Fleet(devices, networks, seed)


def validation_split(labels: np.ndarray, size: int | float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The server's validation rows, carved from a training set before partitioning, stratified
    by label (``data.validation``).

    ``size``: a fraction in [0, 1) of the ``n`` rows (``m = round(size x n)``) or a count ``m``
    (an int). The ``m`` rows are shared among the classes in proportion to their counts
    ``n_c``: class c gets ``floor(m n_c / n)``, and the rows left over go one each to the classes
    of largest remainder ``(m n_c) mod n`` (ties to the lower label), so the shares add up to
    ``m`` exactly; within a class the rows are the first of a permutation drawn from ``rng``
    (one permutation per class, in label order). Example: labels 0 x 6, 1 x 3, 2 x 1 (n = 10)
    and ``m = 5``: quotas 3, 1.5, 0.5, floors 3, 1, 0; the one row left goes to label 1 (the
    remainders 5 and 5 of labels 1 and 2 tie): 3, 2 and 0 rows.

    Returns:
        (rest, validation): int64 sorted row indices; ``rest`` is what the partition splits.

    Raises:
        ValueError: ``m`` not below ``n`` (no training row would remain; names data.validation).
    """
    y = np.asarray(labels)
    n = len(y)
    m = int(round(size * n)) if isinstance(size, float) else int(size)
    if m >= n:
        raise ValueError(
            f"data.validation: {size} asks for {m} validation rows of a training set of {n}; no row would remain for the "
            f"clients (give a fraction in [0, 1) or a count below {n})"
        )
    if m <= 0:
        return np.arange(n, dtype=np.int64), np.zeros(0, dtype=np.int64)
    classes, counts = np.unique(y, return_counts=True)
    share = m * counts.astype(np.int64)
    take = share // n
    order = np.lexsort((classes, -(share % n)))  # largest remainder first, ties to the lower label
    take[order[: m - int(take.sum())]] += 1
    picked = [np.flatnonzero(y == c)[rng.permutation(int(k))][:t] for c, k, t in zip(classes, counts, take)]
    validation = np.sort(np.concatenate(picked)).astype(np.int64)
    rest = np.setdiff1d(np.arange(n, dtype=np.int64), validation, assume_unique=True)
    return rest, validation


def build_federation(cfg: ExperimentConfig) -> Federation:
    """The federation of ``cfg``: built from its ``data``, ``model`` and ``system`` sections and
    its seed only (:func:`make_federation`)."""
    return make_federation(cfg.data, cfg.model, cfg.system, cfg.seed)


def make_federation(d: DataConfig, model: ModelConfig, system: SystemConfig, seed: int) -> Federation:
    """Load the data, carve the server's validation set (:func:`validation_split`, generator
    ``np_rng(seed, "validation")``), partition the rest, split each client's hold-out, assign
    profiles. With ``data.validation: 0`` the partition sees the whole training set, exactly as
    before the validation set existed.

    Raises:
        ValueError: an impossible partition (message gives the numbers), a validation set that
            leaves no training row.
        DatasetNotFoundError: data missing.
    """
    with recording_reads() as reads:  # every data file the loader reads, with size and SHA-256
        train_set, test_set = load_dataset(d.dataset, seed=seed, **d.options)
        devices, networks, device_mix, network_mix = _profile_tables(system)
    rest, validation = validation_split(train_set.y, d.validation, np_rng(seed, "validation"))
    labels, groups = train_set.y, train_set.groups
    if len(validation):  # the partition splits the rows left; its indices are mapped back to the training set's
        labels, groups = labels[rest], None if groups is None else groups[rest]
    partitioner = make_partitioner(d.partition.scheme, **d.partition.params())
    parts = partitioner.split(labels, d.num_clients, np_rng(seed, "partition"), groups=groups)
    if len(parts) != d.num_clients:
        raise ValueError(f"partition {d.partition.scheme!r} returned {len(parts)} clients, expected {d.num_clients}")
    hold_rng = np_rng(seed, "holdout")
    clients = []
    for k, idx in enumerate(parts):
        tr, ho = local_holdout(rest[np.asarray(idx, dtype=np.int64)] if len(validation) else idx, d.holdout_fraction, hold_rng)
        clients.append(Client.view(k, train_set, tr, ho))
    fleet = Fleet.create(d.num_clients, seed, devices, networks, device_mix, network_mix)
    fed = Federation(d, model, system, seed, train_set, test_set, clients, fleet, validation)
    if system.capacity.model != "profiles":
        fed.fleet = capacity_fleet(system, d.num_clients, seed, data_bits(1, fed.features))
    fed.source_files = sorted(reads.values(), key=lambda f: f["path"])
    if callable(getattr(partitioner, "fat_clients", None)):  # who is fat: the split's first draw, made again
        fed.fat_clients = partitioner.fat_clients(d.num_clients, np_rng(seed, "partition"))
    return fed


def federation_key(cfg: ExperimentConfig) -> str:
    """What a federation depends on (data, model, system, seed) as a JSON string: two configs
    with the same key build identical federations, so runs (and Flower nodes) can share one."""
    import json

    d = cfg.model_dump(mode="json")
    return json.dumps({k: d[k] for k in ("data", "model", "system", "seed")}, sort_keys=True)
