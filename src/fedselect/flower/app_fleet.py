"""The fleet of any Flower app as fedselect's selectors see it: what the standard messages of
Flower's Message API carry, and what the server measures about them.

A selector of :mod:`fedselect.selectors` asks its :class:`~fedselect.selectors.base.SelectorContext`
for the clients' data sizes and expected latencies, and learns from
:class:`~fedselect.fl.types.ClientOutcome` values after each round. In an app whose ClientApp is
written the way Flower's own examples write one (``@app.train()`` returning an ``ArrayRecord``
and a ``MetricRecord`` with ``num-examples`` and a train loss; ``@app.evaluate()`` returning a
``MetricRecord`` with ``num-examples`` and a loss), :class:`AppFleet` answers from:

* **who is connected** (``grid.get_node_ids()``): the clients are the nodes connected when the
  first round begins, client ``k`` the ``k``-th smallest node id; a round's availability is the
  subset still connected;
* **data sizes**: the ``num-examples`` a node reported: first its evaluation set's (the
  profiling exchange before round 1), then its training set's once it has trained;
* **latency**: the round trip of each message, measured by the server (wall seconds from the
  push to the pull of its reply, up to one poll interval late); the expected latency of a node
  is its last training round trip, or its profiling round trip before it has trained;
* **bytes**: the sizes of the records sent and received (``count_bytes()`` of Flower's records);
* **who answered**: a node that sends no reply by the timeout, or whose reply is an error that
  says it is gone (codes 3, 4, 5), is a ``dropout``; another error reply is an ``error``.

What no Flower message carries (device profiles, training a fixed number of epochs on demand,
scores on a server validation set) is refused before the run by
:class:`fedselect.flower.selection.SelectionStrategy` from the selectors' declarations
(:attr:`fedselect.selectors.base.Selector.flower_app_needs`); a selector that asks for it anyway
gets a :class:`NotInFlowerApp` error naming the declaration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
from flwr.app import ArrayRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedselect.fl.types import ClientCost, ClientOutcome, Evaluation, RunSettings, State, WarmClient
from fedselect.flower.messaging import Exchange, exchange
from fedselect.flower.nodes import DROPOUT_CODES
from fedselect.world.system import RoundDraws

__all__ = [
    "AppFleet",
    "MeasuredGrid",
    "NodeGrid",
    "NotInFlowerApp",
    "TRAIN_LOSS_KEYS",
    "EVAL_LOSS_KEYS",
    "record_bytes",
    "metric",
]

#: MetricRecord keys read as a node's mean train loss, first found wins (Flower's examples: ``train_loss``)
TRAIN_LOSS_KEYS = ("train_loss", "train-loss", "loss")
#: MetricRecord keys read as a node's evaluation loss, first found wins (Flower's examples: ``eval_loss``)
EVAL_LOSS_KEYS = ("eval_loss", "eval-loss", "loss", "val_loss")


class NotInFlowerApp(RuntimeError):
    """A selector asked its context for something no standard Flower message carries."""


def record_bytes(content: RecordDict | None) -> int:
    """Bytes of a message's records (arrays, metrics, configs: Flower's ``count_bytes()``); 0 for None."""
    if content is None:
        return 0
    return int(sum(rec.count_bytes() for rec in content.values()))


def metric(content: RecordDict, keys: Sequence[str]) -> float:
    """The first of ``keys`` found in the message's MetricRecords, as float; nan when none is."""
    for rec in content.metric_records.values():
        for key in keys:
            if key in rec and not isinstance(rec[key], list):
                return float(rec[key])
    return math.nan


class NodeGrid:
    """A view of ``grid`` that shows only ``nodes``: a wrapped strategy's ``configure_train`` /
    ``configure_evaluate`` sample among them (every other call goes to ``grid``)."""

    def __init__(self, grid: Grid, nodes: Iterable[int]):
        self._grid, self._nodes = grid, [int(n) for n in nodes]

    def get_node_ids(self) -> list[int]:
        return list(self._nodes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)


class MeasuredGrid:
    """``grid`` whose ``send_and_receive`` measures each node's round trip
    (:func:`fedselect.flower.messaging.exchange`: push, poll every ``poll_s``, pull) and keeps
    the last exchange in :attr:`last`; every other call goes to ``grid``.

    Args:
        grid: the ServerApp's grid. poll_s: seconds between two pulls (> 0).
        stop: a ``threading.Event`` ending every wait with KeyboardInterrupt once set.
    """

    def __init__(self, grid: Grid, poll_s: float = 0.1, stop=None):
        self._grid, self.poll_s, self.stop = grid, float(poll_s), stop
        self.last: Exchange | None = None

    @property
    def grid(self) -> Grid:
        """The grid measured."""
        return self._grid

    def exchange(self, messages: Iterable[Message], timeout: float | None) -> Exchange:
        """Send ``messages`` (one per node) and wait up to ``timeout`` s (None: 3600) for the replies."""
        return exchange(self._grid, messages, 3600.0 if timeout is None else float(timeout), self.poll_s, self.stop)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        """Flower's ``Grid.send_and_receive``, measured: the replies that came by ``timeout``."""
        self.last = self.exchange(list(messages), timeout)
        return list(self.last.replies.values())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)


@dataclass
class AppFleet:
    """The :class:`~fedselect.selectors.base.SelectorContext` of a Flower app (module docstring).

    Args:
        settings: seed, T, N, U, E of the run (E: the local epochs the ClientApp runs, only
            used to scale latencies for ``client_cost(k, epochs)``).
        nodes: node ids, client order (client ``k`` is ``nodes[k]``).
        initial: the initial global arrays.

    Attributes:
        num_samples: ``(N,)`` int64, each node's last reported ``num-examples`` (1 until it reports).
        trip_s: ``(N,)`` each node's last training round trip (s; nan until it has trained).
        profile_s: ``(N,)`` each node's profiling round trip (s; nan when not profiled).
        sent_bytes, received_bytes: ``(N,)`` bytes of the last training message to / reply from it.
    """

    settings: RunSettings
    nodes: list[int]
    initial: ArrayRecord
    num_samples: np.ndarray = field(init=False)
    trip_s: np.ndarray = field(init=False)
    profile_s: np.ndarray = field(init=False)
    sent_bytes: np.ndarray = field(init=False)
    received_bytes: np.ndarray = field(init=False)
    upload_keys: list[str] | None = None

    def __post_init__(self) -> None:
        n = len(self.nodes)
        self.num_samples = np.ones(n, dtype=np.int64)
        self.trip_s = np.full(n, np.nan)
        self.profile_s = np.full(n, np.nan)
        self.sent_bytes = np.zeros(n, dtype=np.int64)
        self.received_bytes = np.zeros(n, dtype=np.int64)
        self.client_of = {int(node): k for k, node in enumerate(self.nodes)}
        self.parameter_names = list(self.initial.keys())
        self._cache: dict[str, dict] = {}

    # ---------------------------------------------------------------- what was measured
    def profiled(self, k: int, trip_s: float, num_examples: float) -> None:
        """Client ``k`` answered the profiling exchange in ``trip_s`` s with ``num_examples``."""
        self.profile_s[k] = float(trip_s)
        if math.isfinite(num_examples) and num_examples > 0:
            self.num_samples[k] = int(num_examples)

    def trained(self, o: ClientOutcome) -> None:
        """Learn from a training outcome: its round trip (a delivered update's, or a failure's
        that took time: an error reply), its ``num-examples`` and bytes."""
        k = o.client_id
        if o.ok:
            self.num_samples[k] = int(o.num_samples)
            self.sent_bytes[k], self.received_bytes[k] = o.download_bytes, o.upload_bytes
        if o.ok or (o.failed == "error" and o.latency_s > 0):
            self.trip_s[k] = float(o.latency_s)

    # ---------------------------------------------------------------- SelectorContext
    @property
    def fleet(self):
        raise NotInFlowerApp(
            "ctx.fleet: the nodes of a Flower app report no device / network profiles (CPU MHz, Mb/s); a selector that "
            "reads them must say so in Selector.flower_app_needs"
        )

    def draw(self, t: int) -> RoundDraws:
        """Round ``t``'s draws: unknown in a Flower app (nan CPU MHz and Mb/s for every node)."""
        n = len(self.nodes)
        return RoundDraws(int(t), np.full(n, np.nan), np.full(n, np.nan))

    def expected_latency_s(self, epochs: float | None = None) -> np.ndarray:
        """``(N,)`` each node's expected latency (s): its last training round trip, else its
        profiling round trip, else the median of the known ones (1.0 s when none is known);
        scaled by ``epochs / E`` when ``epochs`` is given."""
        lat = np.where(np.isfinite(self.trip_s), self.trip_s, self.profile_s)
        known = lat[np.isfinite(lat)]
        lat = np.where(np.isfinite(lat), lat, float(np.median(known)) if known.size else 1.0)
        if epochs is not None:
            lat = lat * float(epochs) / max(1, self.settings.local_epochs)
        return lat

    def client_cost(self, k: int, epochs: float, draws: RoundDraws | None = None) -> ClientCost:
        """Client ``k``'s cost for ``epochs`` local epochs, from what was measured: its expected
        latency scaled by ``epochs / E`` as compute (a round trip is not split into computation and
        transfer: ``upload_s`` and ``download_s`` are 0), and the bytes of its last training exchange."""
        lat = float(self.expected_latency_s(epochs)[k])
        return ClientCost(lat, 0.0, 0.0, lat, int(self.received_bytes[k]), int(self.sent_bytes[k]))

    def transmit_s(self, num_bytes: int, k: int, draws: RoundDraws | None = None) -> float:
        """0.0: a round trip is not split into computation and transfer (:meth:`client_cost`)."""
        return 0.0

    def latency_bounds(self) -> tuple[float, float]:
        """(min, max) of :meth:`expected_latency_s`."""
        lat = self.expected_latency_s()
        return float(lat.min()), float(lat.max())

    def initial_state(self) -> State:
        """The initial global arrays as a torch state dict."""
        return self.initial.to_torch_state_dict()

    def shared_cache(self, namespace: str) -> dict:
        return self._cache.setdefault(namespace, {})

    def arrival_order(self, seeded: list[int]) -> Sequence[int]:
        return seeded

    def _refuse(self, what: str) -> NotInFlowerApp:
        return NotInFlowerApp(
            f"ctx.{what}: a Flower app's ClientApp trains and evaluates as it is written to, the server has no data; "
            "a selector that needs this must say so in Selector.flower_app_needs"
        )

    def warmup(self, epochs: int, tag: str, clients: Sequence[int] | None = None) -> Iterable[WarmClient]:
        raise self._refuse("warmup")

    def train(self, k: int, start: State, epochs: int, tag: str, t: int = 0) -> tuple[State, float]:
        raise self._refuse("train")

    def evaluate(self, state: State) -> Evaluation:
        raise self._refuse("evaluate")

    def evaluate_candidate(self, k: int, epochs: int) -> tuple[float, float, float]:
        raise self._refuse("evaluate_candidate")


def train_outcome(
    k: int,
    t: int,
    reply: Message | None,
    trip_s: float,
    sent_bytes: int,
    *,
    weighted_by_key: str,
    epochs: int,
    with_state: bool,
    with_sample_losses: bool,
    known_samples: int = 0,
) -> ClientOutcome:
    """Client ``k``'s outcome of round ``t`` from its training reply (module docstring).

    Args:
        reply: its reply, or None when none came. trip_s: the measured round trip (s; for a
            missing reply, the time the server waited). sent_bytes: bytes of the message it got.
        weighted_by_key: the MetricRecord key of its data size (the wrapped strategy's, ``num-examples``).
        with_state: decode the reply's ArrayRecord (selectors that read the updates).
        with_sample_losses: fill Oort's squared-loss sums from the mean train loss (module docstring
            of :mod:`fedselect.flower.selection`).
        known_samples: the data size known for it (a failed outcome's ``num_samples``).
    """
    n_prev = int(known_samples)
    if reply is None or (reply.has_error() and reply.error.code in DROPOUT_CODES):
        return ClientOutcome(k, t, None, n_prev, math.nan, 0, 0.0, 0.0, 0.0, float(trip_s), 0, int(sent_bytes), failed="dropout")
    if reply.has_error():
        return ClientOutcome(k, t, None, n_prev, math.nan, 0, float(trip_s), 0.0, 0.0, float(trip_s), 0, int(sent_bytes), "error")
    content = reply.content
    n = metric(content, (weighted_by_key,))
    loss = metric(content, TRAIN_LOSS_KEYS)
    if not (math.isfinite(n) and n >= 0) or not content.array_records:
        return ClientOutcome(k, t, None, n_prev, math.nan, 0, float(trip_s), 0.0, 0.0, float(trip_s), 0, int(sent_bytes), "error")
    state = None
    if with_state:
        state = next(iter(content.array_records.values())).to_torch_state_dict()
    sq, count = 0.0, 0
    if with_sample_losses and math.isfinite(loss) and loss >= 0:
        sq, count = loss * loss * n, int(n)
    return ClientOutcome(
        k,
        t,
        state,
        int(n),
        loss,
        int(epochs),
        float(trip_s),
        0.0,
        0.0,
        float(trip_s),
        record_bytes(content),
        int(sent_bytes),
        None,
        sq,
        count,
    )


def replies_by_client(fleet: AppFleet, ex: Exchange) -> dict[int, tuple[Message, float]]:
    """Client id -> (its reply, its measured round trip in s) for the replies of ``ex``."""
    out = {}
    for node, reply in ex.replies.items():
        k = fleet.client_of.get(int(node))
        if k is not None:
            out[k] = (reply, float(ex.arrival.get(node, ex.seconds)))
    return out
