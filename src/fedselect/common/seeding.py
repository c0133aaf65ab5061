"""One experiment seed, one independent generator per component.

Generators are derived from ``(seed, component name)`` through ``numpy.random.SeedSequence``
with a stable hash of the name, so adding a component never shifts another one's stream and
no global RNG (``random``, ``np.random.*``, ``torch.manual_seed``) is ever touched.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def _name_key(name: str) -> list[int]:
    digest = hashlib.sha256(name.encode()).digest()
    return [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


def seed_sequence(seed: int, name: str) -> np.random.SeedSequence:
    """The SeedSequence of component ``name`` under experiment ``seed``."""
    return np.random.SeedSequence([int(seed) & 0xFFFFFFFF, *_name_key(name)])


def np_rng(seed: int, name: str) -> np.random.Generator:
    """A fresh numpy Generator for component ``name`` (e.g. "partition", "fleet", "selector")."""
    return np.random.default_rng(seed_sequence(seed, name))


def torch_rng(seed: int, name: str) -> torch.Generator:
    """A fresh CPU torch.Generator for component ``name`` (e.g. "model-init", "shuffle/3")."""
    g = torch.Generator()
    g.manual_seed(int(seed_sequence(seed, name).generate_state(1, np.uint64)[0] & ((1 << 63) - 1)))
    return g
