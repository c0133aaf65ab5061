"""Client faults of a run (on every engine): random dropout, injected failures, non-finite updates.

Knows no method: the round loop (``fedselect.fl.round``) asks a :class:`FaultModel` what happens
to each selected client and uses :func:`non_finite_entries` to reject poisoned updates. See
``docs/reliability.md`` for the semantics, summarised here.

Failure kinds (:data:`fedselect.fl.types.FAILURE_KINDS`: the code written to
``ClientOutcome.failed`` and to the ``failed`` column of ``metrics.csv`` as ``client:kind``):

``dropout``
    the client is unreachable this round (random dropout or an injected ``drop``). It receives
    nothing and sends nothing (0 bytes both ways); the server notices at the round deadline
    if one is set (failure latency = deadline, seconds), otherwise at once (latency 0 s).
``error``
    local training raised (an injected ``raise``, or a :class:`ClientFailure` raised by a
    method's ``local_update``). The client received the model and computed; it uploads nothing:
    failure latency = compute time (+ download time when ``system.count_download``).
``nan`` / ``inf``
    the uploaded update holds NaN / infinite values (injected, or a diverged client). It was
    sent (full latency and bytes count) and is rejected by the server, never averaged.
``timeout``
    the client's latency exceeds ``system.round_deadline_s`` (a straggler, or an injected
    ``timeout``). Its update is discarded, nothing it uploads is received (upload bytes 0) and
    the failure latency is the deadline: the round lasts the deadline.
``cancelled``
    over-selection (``overselect`` > 1): U updates had arrived before this client reported, so
    its work was cancelled at that moment (its latency); it downloaded the model and uploads
    nothing. Not a failure of the client: it is left out of the ``failed`` column.

Randomness: one generator per round, ``np_rng(seed, "faults/<t>")``, drawing one uniform per
client of the federation (selected or not). Which clients drop out in round t therefore
depends only on (seed, t): every method compared on one federation faces the same outages, and
a resumed run the same ones as an uninterrupted run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
import torch

from fedselect.common.seeding import np_rng

#: what ``faults.inject[].kind`` may say, and the failure code each produces (one of
#: :data:`fedselect.fl.types.FAILURE_KINDS`)
INJECT_KINDS = {"drop": "dropout", "raise": "error", "nan": "nan", "inf": "inf", "timeout": "timeout"}


class ClientFailure(Exception):
    """Raised inside a client's local update to report a client-side failure: the round goes on
    without that client (code ``error``). Any other exception is a bug and stops the run."""


@dataclass(frozen=True)
class Injection:
    """One injected failure: ``kind`` (a key of :data:`INJECT_KINDS`) for clients ``clients``
    (ids, or None = every selected client) in rounds ``rounds`` (1-based, or None = every round)."""

    kind: str
    rounds: frozenset[int] | None
    clients: frozenset[int] | None

    def applies(self, t: int, k: int) -> bool:
        return (self.rounds is None or t in self.rounds) and (self.clients is None or k in self.clients)


@dataclass
class FaultModel:
    """Per-client dropout probabilities and injected failures of one federation.

    Attributes:
        seed: the experiment seed (the generator of round t is ``np_rng(seed, "faults/<t>")``).
        dropout: ``(N,)`` per-round probability that each client is unreachable, in [0, 1].
        injections: explicit failures; the first matching one wins.
        deadline_s: round deadline in seconds of simulated latency, or None.
    """

    seed: int
    dropout: np.ndarray
    injections: list[Injection] = field(default_factory=list)
    deadline_s: float | None = None

    @classmethod
    def build(
        cls,
        seed: int,
        device_names: Sequence[str],
        network_names: Sequence[str],
        dropout: float = 0.0,
        dropout_by_device: Mapping[str, float] | None = None,
        dropout_by_network: Mapping[str, float] | None = None,
        injections: Iterable[Injection] = (),
        deadline_s: float | None = None,
    ) -> "FaultModel":
        """Combine the dropout sources independently: a client with device profile d and network
        profile n is reachable with probability (1 - dropout)(1 - p_d)(1 - p_n).

        Args:
            device_names, network_names: ``(N,)`` profile name of each client.
            dropout: probability for every client.
            dropout_by_device / dropout_by_network: probability per profile name.

        Raises:
            ValueError: a probability outside [0, 1], or a profile name no client has (lists
            the names in use), or a deadline <= 0.
        """
        n = len(device_names)
        if len(network_names) != n:
            raise ValueError(f"{n} device names but {len(network_names)} network names")
        _check_prob("faults.dropout", dropout)
        keep = np.full(n, 1.0 - float(dropout))
        for label, table, names in (
            ("faults.dropout_by_device", dropout_by_device, device_names),
            ("faults.dropout_by_network", dropout_by_network, network_names),
        ):
            table = dict(table or {})
            known = sorted(set(names))
            unknown = sorted(set(table) - set(names))
            if unknown:
                raise ValueError(f"{label}: unknown profile name(s) {unknown}; profiles in this fleet: {known}")
            for name, p in table.items():
                _check_prob(f"{label}.{name}", p)
            keep *= np.array([1.0 - float(table.get(nm, 0.0)) for nm in names])
        if deadline_s is not None and not (math.isfinite(deadline_s) and deadline_s > 0):
            raise ValueError(f"system.round_deadline_s must be a finite number of seconds > 0, got {deadline_s!r}")
        return cls(int(seed), 1.0 - keep, list(injections), None if deadline_s is None else float(deadline_s))

    @property
    def active(self) -> bool:
        """True when anything can fail (dropout > 0, injections or a deadline)."""
        return bool(self.dropout.any()) or bool(self.injections) or self.deadline_s is not None

    def dropped(self, t: int) -> np.ndarray:
        """``(N,)`` bool: clients unreachable in round ``t`` (depends only on seed and t)."""
        if not self.dropout.any():
            return np.zeros(len(self.dropout), dtype=bool)
        u = np_rng(self.seed, f"faults/{int(t)}").random(len(self.dropout))
        return u < self.dropout

    def injected(self, t: int, k: int) -> str | None:
        """The injected kind (``drop``, ``raise``, ``nan``, ``inf``, ``timeout``) for client
        ``k`` in round ``t``, or None."""
        for inj in self.injections:
            if inj.applies(t, k):
                return inj.kind
        return None

    def unreachable(self, t: int) -> set[int]:
        """Clients that cannot answer anything in round ``t``: drawn out by ``dropout`` or
        with an injected ``drop`` (the same draws as :meth:`round_faults`)."""
        dropped = self.dropped(t)
        return {k for k in range(len(self.dropout)) if self.round_fault(t, k, dropped) == "drop"}

    def round_fault(self, t: int, k: int, dropped: np.ndarray | None = None) -> str | None:
        """Client ``k``'s simulated fault in round ``t``: an injected kind, else ``drop`` when
        the dropout draw took it, else None."""
        kind = self.injected(t, k)
        if kind is None and (self.dropped(t) if dropped is None else dropped)[k]:
            return "drop"
        return kind

    def round_faults(self, t: int, clients) -> dict[int, str | None]:
        """:meth:`round_fault` of each of ``clients`` (one draw for the round)."""
        dropped = self.dropped(t)
        return {int(k): self.round_fault(t, int(k), dropped) for k in clients}


def _check_prob(label: str, p) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0.0 <= float(p) <= 1.0):
        raise ValueError(f"{label} must be a probability in [0, 1], got {p!r}")


def non_finite_entries(state: Mapping[str, torch.Tensor], keys: Iterable[str] | None = None) -> dict[str, str]:
    """Entries of ``state`` (only ``keys`` if given) holding NaN or inf: name -> ``"nan"`` or
    ``"inf"`` (NaN wins when both occur). Integer entries are always finite."""
    out: dict[str, str] = {}
    for name in state.keys() if keys is None else keys:
        t = state[name]
        if not (t.is_floating_point() or t.is_complex()):
            continue
        if torch.isnan(t).any().item():
            out[name] = "nan"
        elif torch.isinf(t).any().item():
            out[name] = "inf"
    return out


def corrupt_state(state: Mapping[str, torch.Tensor], kind: str, keys: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
    """A copy of ``state`` whose floating entries (only ``keys`` if given) are filled with NaN
    (``kind="nan"``) or +inf (``kind="inf"``): a poisoned upload for fault injection.

    Raises:
        ValueError: ``kind`` not ``"nan"`` / ``"inf"``.
    """
    if kind not in ("nan", "inf"):
        raise ValueError(f"corrupt_state: kind must be 'nan' or 'inf', got {kind!r}")
    value = math.nan if kind == "nan" else math.inf
    names = set(state.keys() if keys is None else keys)
    return {n: (torch.full_like(v, value) if n in names and v.is_floating_point() else v.clone()) for n, v in state.items()}


def survivor_weights(num_samples: Mapping[int, int]) -> dict[int, float]:
    """FedAvg weights n_k / sum n of the surviving clients (McMahan et al. 2017): client id -> weight.

    Example: ``{3: 40, 7: 60}`` -> ``{3: 0.4, 7: 0.6}``. Empty input -> ``{}``.
    """
    total = sum(int(n) for n in num_samples.values())
    if total <= 0:
        return {int(k): 0.0 for k in num_samples}
    return {int(k): int(n) / total for k, n in num_samples.items()}
