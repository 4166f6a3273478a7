"""What a scenario produces: one figure per server, their ratio, and the issue's target.

Ratios are always headwater / nats-server. Whether a ratio is good depends on the metric
(throughput: higher is better; latency and memory: lower is better), so each target says
which bound it sets.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Target:
    """A bound from the issue, on the ratio (``ratio_min``, ``ratio_max``) or headwater's figure."""

    kind: str  # "ratio_min" | "ratio_max" | "headwater_max" | "headwater_min"
    value: float
    text: str

    def met(self, headwater: float | None, ratio: float | None) -> bool | None:
        if self.kind == "headwater_max":
            return None if headwater is None else headwater < self.value
        if self.kind == "headwater_min":
            return None if headwater is None else headwater >= self.value
        if ratio is None:
            return None
        if self.kind == "ratio_min":
            return ratio >= self.value
        return ratio <= self.value


@dataclass
class Measure:
    """One row of the report."""

    id: str  # stable key, e.g. "core_pubsub.gobench"
    scenario: str  # human label, e.g. "core pub/sub 16 B"
    load: str  # "gobench", "nats-py", "raw TCP"
    metric: str  # "msgs/s", "p50 µs", "RSS MB"
    headwater: float | None
    nats: float | None
    target: Target | None = None
    note: str = ""
    runs: dict[str, list[float]] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.headwater is None or not self.nats:
            return None
        ratio = self.headwater / self.nats
        return ratio if math.isfinite(ratio) else None

    @property
    def target_met(self) -> bool | None:
        return None if self.target is None else self.target.met(self.headwater, self.ratio)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = self.ratio
        data["target"] = None if self.target is None else self.target.text
        data["target_met"] = self.target_met
        return data


@dataclass(frozen=True)
class Throughput:
    """One load run: messages that went through and how long they took."""

    msgs: int
    seconds: float
    ok: bool  # every message was counted where the load expected it

    @property
    def msgs_per_s(self) -> float:
        return self.msgs / self.seconds if self.seconds > 0 else 0.0


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (no interpolation, like most benches)."""
    if not sorted_values:
        raise ValueError("no samples")
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]
