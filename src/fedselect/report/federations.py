"""A federation as the reports describe it: per-client facts (samples, label counts, device
and network profiles, expected latency) that a comparison or sweep writes beside its runs
(:func:`federation_info`, saved as ``federation-s<seed>.json``) and that the plots and
``report.html`` read back (:func:`load_federations`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fedselect.common.files import read_json


def partition_params(fed: Any) -> dict[str, Any]:
    """The partition scheme with every parameter in effect (the resolved config writes the
    defaults out; the partitioner's bounds on retries, ``max_*``, are left out)."""
    params = {k: v for k, v in fed.data.partition.params().items() if not k.startswith(("max_", "_"))}
    return {"scheme": fed.data.partition.scheme, **params}


def federation_info(fed: Any, local_epochs: int) -> dict[str, Any]:
    """Per-client facts for reports: samples, label counts, profiles and the expected latency
    (s) at the profiles' mean frequency and bandwidth for ``local_epochs`` epochs, uploading the
    whole model (also split into its compute and upload parts) of ``fed`` (a
    :class:`fedselect.world.federation.Federation`) in its latency model, as ``federation-s<seed>.json`` holds it
    (:func:`load_federations` reads it back)."""
    import numpy as np

    from fedselect.fl.cost import CostModel
    from fedselect.world.system import BYTES_PER_FLOAT

    model = fed.new_model()
    model_bytes = sum(v.numel() for v in model.state_dict().values()) * BYTES_PER_FLOAT
    fl = fed.fleet
    cost = CostModel.of_federation(fed, local_epochs, (model_bytes, 0))  # the upload only
    compute, upload = cost.expected_compute_s(), cost.expected_transmit_s(model_bytes)
    expected = cost.expected_latency_s()
    return {
        "num_clients": fed.num_clients,
        "num_classes": fed.num_classes,
        "class_names": fed.train_set.class_names,
        "dataset": fed.data.dataset,
        "partition": partition_params(fed),
        "num_samples": [c.num_samples for c in fed.clients],
        "label_counts": fed.label_counts().tolist(),
        "device": [d.name for d in fl.devices],
        "network": [n.name for n in fl.networks],
        "expected_latency_s": [float(x) for x in expected],
        "expected_compute_s": [float(x) for x in compute],
        "expected_upload_s": [float(x) for x in upload],
        "train_indices_hash": [
            int(np.bitwise_xor.reduce(c.train_indices * 2654435761 % (2**31))) if len(c.train_indices) else 0 for c in fed.clients
        ],
    }


def load_federations(directory: Path) -> list[dict[str, Any]]:
    """The ``federation-s<seed>.json`` files of a comparison, in seed order, each with its
    ``seed`` added."""
    feds = []
    for p in Path(directory).glob("federation-s*.json"):
        m = re.fullmatch(r"federation-s(\d+)\.json", p.name)
        if m:
            feds.append({**read_json(p), "seed": int(m.group(1))})
    return sorted(feds, key=lambda f: f["seed"])
