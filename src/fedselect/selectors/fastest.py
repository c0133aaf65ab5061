"""An oracle baseline: the U clients with the lowest latency (FR-eq 3).

With ``latency: expected`` (default) it knows each client's expected latency — local
computation at its device profile's mean frequency plus the upload at its network profile's
mean bandwidth, for E local epochs — and picks the same U fastest clients every round. With
``latency: actual`` it also knows this round's draws (frequencies and bandwidths) and picks the
U fastest of the round. Either way it is a lower bound on the end-to-end latency a selector can
reach with U participants, and the exploitation limit used by docs/flash-rl.md's exploration
bound: it ignores the data entirely, so accuracy on non-IID partitions usually suffers.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedselect.kernels.sampling import top_desc
from fedselect.selectors import register_selector
from fedselect.selectors.base import RoundView, Selection, Selector


class FastestOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    latency: Literal["expected", "actual"] = Field(
        "expected", description="expected (profile means) or this round's actual latency"
    )


@register_selector
class Fastest(Selector):
    """The U clients of lowest latency, ties to the lowest id (module docstring)."""

    name = "fastest"
    summary = "oracle: the U clients of lowest expected latency (the latency lower bound)"
    Options = FastestOptions

    @classmethod
    def flower_app_problems(cls, options: FastestOptions) -> list[str]:
        """``latency: expected`` reads the measured round trips in a Flower app; ``actual`` needs
        this round's draws of each device's CPU and bandwidth, which no Flower message carries."""
        if options.latency == "actual":
            return ["latency: actual reads this round's CPU (MHz) and bandwidth (Mb/s) of every device; use latency: expected"]
        return []

    def select(self, view: RoundView) -> Selection:
        s = self.settings
        if self.options.latency == "expected":
            lat = np.asarray(self.ctx.expected_latency_s(), dtype=np.float64)
        else:
            lat = np.array([self.ctx.client_cost(k, s.local_epochs, view.draws).latency_s for k in range(s.num_clients)])
        pool = view.pool(s.num_clients)
        head, _ = top_desc(pool, -lat[pool], m=view.how_many(s))  # lowest latency first, ties: lowest id
        return Selection(sorted(int(k) for k in head))
