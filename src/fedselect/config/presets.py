"""The papers' named methods as presets: each is a selector + an algorithm (+ fixed options).

``method: flashrl`` in a config means ``selector: {name: flashrl}`` and ``algorithm: {name:
fedavg}``; an explicit ``selector`` or ``algorithm`` replaces the preset's part. Every config
written before selectors and algorithms were separate keeps working unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Preset:
    """A named method: ``selector`` + ``algorithm`` with default options for each."""

    name: str
    selector: str
    algorithm: str
    selector_options: dict[str, Any] = field(default_factory=dict)
    algorithm_options: dict[str, Any] = field(default_factory=dict)
    description: str = ""


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset("fedavg", "random", "fedavg", description="FedAvg: U of N uniformly at random, whole-model averaging"),
        Preset("full", "all", "fedavg", description="full participation: every client every round"),
        Preset(
            "regular_fl",
            "all",
            "fedavg",
            algorithm_options={"evaluation": "per_client"},
            description="CEFL's Regular FL: full participation, each client scored on its own held-out split",
        ),
        Preset("flashrl", "flashrl", "fedavg", description="FLASH-RL: DDQN selection, reputation-based utility reward"),
        Preset("favor", "favor", "fedavg", description="FAVOR: DDQN selection, accuracy-based reward"),
        Preset("cefl", "cefl_leaders", "cefl", description="CEFL: cluster leaders, base-layer FL, transfer to members"),
        Preset("fedper", "all", "fedper", description="FedPer: every client, base layers shared, heads personal"),
        Preset("individual", "all", "individual", description="Individual: every client trains its own model, no communication"),
        Preset("budgeted_online", "secretary", "fedavg", description="budgeted online selection: secretary rule, then FedAvg"),
        Preset("online_random", "online_random", "fedavg", description="online random acceptance, then FedAvg"),
        Preset("offline_best", "offline_best", "fedavg", description="offline best R candidates, then FedAvg"),
        Preset("oort", "oort", "fedavg", description="Oort: statistical x system utility with exploration, then FedAvg"),
        Preset("power_of_choice", "power_of_choice", "fedavg", description="Power-of-Choice: d candidates, the U highest losses"),
        Preset("fastest", "fastest", "fedavg", description="oracle: the U clients with the lowest expected latency"),
        Preset(
            "clustered_sampling",
            "clustered_sampling",
            "fedavg",
            description="clustered sampling: one client per cluster-built distribution, unbiased 1/m weights",
        ),
        Preset("divfl", "divfl", "fedavg", description="DivFL: greedy facility location on the clients' updates"),
        Preset("afl", "afl", "fedavg", description="AFL: softmax of loss-based valuations, lowest cut, a share uniform"),
        Preset("fedprox", "random", "fedprox", description="FedProx: random U of N, proximal term in the local loss"),
        Preset("fedadam", "random", "fedadam", description="FedAdam: random U of N, Adam step on the server"),
        Preset("fedyogi", "random", "fedyogi", description="FedYogi: random U of N, Yogi step on the server"),
        Preset("fedadagrad", "random", "fedadagrad", description="FedAdagrad: random U of N, Adagrad step on the server"),
        Preset("scaffold", "random", "scaffold", description="SCAFFOLD: random U of N, control variates against client drift"),
    ]
}
