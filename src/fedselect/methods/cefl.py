"""Communication accounting of CEFL and its baselines (SPEC 2 item 7), in MB (10^6 bytes).

Sizes are bytes of float32 tensors (:func:`fedselect.fl.state_bytes` of a float32 model).
A broadcast is counted once per receiver.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedselect.system import to_mb

__all__ = ["cefl_communication", "regular_fl_communication", "fedper_communication"]


def _check(full_bytes: int, base_bytes: int, rounds: int) -> None:
    if full_bytes < 0 or base_bytes < 0:
        raise ValueError(f"byte counts must be >= 0, got full={full_bytes}, base={base_bytes}")
    if base_bytes > full_bytes:
        raise ValueError(f"base layers ({base_bytes} B) cannot exceed the whole model ({full_bytes} B)")
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")


def cefl_communication(
    full_bytes: int, base_bytes: int, num_clients: int, cluster_sizes: Sequence[int], rounds: int
) -> dict[str, float]:
    """CEFL's communication in four parts (SPEC 2 item 7; CEFL Section II, "Communication cost").

    * part 1: every client uploads its whole warm-up model once: ``N * full``;
    * part 2: every leader uploads its base layers each round: ``T * K * base``;
    * part 3: the server broadcasts the aggregated base layers to every leader each round:
      ``T * K * base``;
    * part 4: every leader sends its whole model to each member of its cluster once:
      ``sum_k (|C_k| - 1) * full``.

    Args:
        full_bytes: bytes of the whole model (float32).
        base_bytes: bytes of the base layers.
        num_clients: N.
        cluster_sizes: ``|C_k|`` for the K clusters (each >= 1, summing to N).
        rounds: T, federated rounds among leaders that were run.

    Returns:
        ``{"part1_mb", "part2_mb", "part3_mb", "part4_mb", "total_mb"}`` in MB (10^6 bytes).

    Raises:
        ValueError: negative sizes, base larger than full, empty clusters, or sizes not
            summing to ``num_clients``.
    """
    _check(full_bytes, base_bytes, rounds)
    sizes = [int(c) for c in cluster_sizes]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"cluster sizes must be >= 1 and non-empty, got {sizes}")
    if sum(sizes) != num_clients:
        raise ValueError(f"cluster sizes {sizes} sum to {sum(sizes)}, not num_clients={num_clients}")
    k = len(sizes)
    parts = {
        "part1_mb": to_mb(num_clients * full_bytes),
        "part2_mb": to_mb(rounds * k * base_bytes),
        "part3_mb": to_mb(rounds * k * base_bytes),
        "part4_mb": to_mb(sum(c - 1 for c in sizes) * full_bytes),
    }
    parts["total_mb"] = to_mb(
        num_clients * full_bytes + 2 * rounds * k * base_bytes + sum(c - 1 for c in sizes) * full_bytes
    )
    return parts


def regular_fl_communication(full_bytes: int, participants_per_round: Sequence[int] | int, rounds: int | None = None) -> float:
    """Regular FL (full-participation FedAvg): each participant downloads and uploads the whole
    model every round. ``participants_per_round`` is a per-round list of counts, or one count
    used for ``rounds`` rounds. Returns MB."""
    counts = _counts(participants_per_round, rounds)
    _check(full_bytes, 0, len(counts))
    return to_mb(2 * full_bytes * sum(counts))


def fedper_communication(base_bytes: int, participants_per_round: Sequence[int] | int, rounds: int | None = None) -> float:
    """FedPer: each participant uploads and downloads only the base layers every round. MB."""
    counts = _counts(participants_per_round, rounds)
    _check(base_bytes, base_bytes, len(counts))
    return to_mb(2 * base_bytes * sum(counts))


def _counts(per_round: Sequence[int] | int, rounds: int | None) -> list[int]:
    if isinstance(per_round, int):
        if rounds is None or rounds < 0:
            raise ValueError(f"rounds must be given and >= 0 with a single participant count, got {rounds}")
        return [per_round] * rounds
    return [int(c) for c in per_round]
