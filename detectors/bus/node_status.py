"""A bridge node's status summary, written beside its heartbeat (``nodestatus:<node>``,
same TTL) so the dashboard's system page reads every node from Redis: state, live calls
against capacity, each model's version, provider and latency, and the jitter-buffer
counters summed over legs. Compact (a few hundred bytes per model); the bridge composes
it (``sip_bridge.node_status``), :class:`detectors.bus.liveness.NodeLiveness` writes it.

Latency quantiles are estimated from the runtime's per-window inference histograms
(``callshield_detector_window_seconds``) as Prometheus' ``histogram_quantile`` does:
linear inside the bucket, so they are as coarse as the buckets. They cover about the
last minute (the histograms' difference from a snapshot that old), so a slowdown shows
at once instead of being diluted by hours of history; an idle model has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

NodeState = Literal["starting", "ready", "draining"]


class ModelStatus(BaseModel):
    name: str = Field(max_length=128)
    dimension: str = Field(max_length=64)
    version: str = Field(max_length=128)
    provider: str = Field(max_length=64)  # "cpu", "cuda", "numpy", ...
    windows: int = 0  # windows timed since the process started
    recent_windows: int = 0  # of those, in the latency window (the quantiles' sample)
    p50_ms: float | None = None  # per-window inference time over the latency window
    p99_ms: float | None = None


class NodeStatus(BaseModel):
    node_id: str = Field(max_length=128)
    boot: str = Field(max_length=128)
    state: NodeState
    at: datetime  # when the bridge composed it (the heartbeat time)
    live_calls: int = 0  # calls live on the bridge
    analysed_calls: int = 0  # of those, admitted for analysis
    capacity: int = 0  # calls this node can analyse now (admission's estimate)
    models: list[ModelStatus] = Field(default_factory=list, max_length=64)
    jitter: dict[str, int] = Field(default_factory=dict)  # cs_jb_stats summed over legs
    latency_window_s: float = 0.0  # what the models' quantiles cover (about a minute)


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of a cumulative histogram: ``buckets`` are (upper bound,
    cumulative count) ascending, the last one ``+Inf``. None without observations; a
    quantile in the ``+Inf`` bucket is the highest finite bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower
