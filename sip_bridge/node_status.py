"""Composes this bridge's status summary (``detectors.bus.node_status``), written with
every heartbeat: state (starting / ready / draining), live calls against the admission
capacity, each model's version, provider and per-window latency p50/p99, and the
jitter-buffer counters summed over legs."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from detectors.bus.node_status import ModelStatus, NodeState, NodeStatus, histogram_quantile
from detectors.contract import Detector
from detectors.metrics import DetectorMetrics
from detectors.runtime import DetectorRuntime
from sip_bridge.analysis import Analysis

Buckets = dict[tuple[str, str], list[tuple[float, float]]]  # (detector, provider) -> le


class StatusSource(Protocol):
    """What the summary is read from (the bridge's :class:`sip_bridge.wiring.Wiring`)."""

    detectors: list[Detector]
    detector_metrics: DetectorMetrics
    runtime: DetectorRuntime
    analysis: Analysis | None
    draining: Callable[[], bool]
    latency: LatencyWindow


def latencies(metrics: DetectorMetrics) -> Buckets:
    """(detector, provider) -> the per-window histogram's cumulative buckets."""
    out: Buckets = defaultdict(list)
    for family in metrics.window_seconds.collect():
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                key = (sample.labels["detector"], sample.labels["provider"])
                out[key].append((float(sample.labels["le"]), sample.value))
    for buckets in out.values():
        buckets.sort()
    return out


class LatencyWindow:
    """The histograms' difference from a snapshot about ``window_s`` old: each call keeps
    the current snapshot and drops those a newer one at least ``window_s`` old replaces
    (with a heartbeat of a few seconds, a dozen or so are kept)."""

    def __init__(self, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.window_s, self._clock = window_s, clock
        self._snaps: deque[tuple[float, Buckets]] = deque()

    def recent(self, now_buckets: Buckets) -> tuple[Buckets, float]:
        """(the difference per key, the seconds it covers)."""
        now = self._clock()
        self._snaps.append((now, now_buckets))
        while len(self._snaps) > 2 and now - self._snaps[1][0] >= self.window_s:
            self._snaps.popleft()
        since, base = self._snaps[0]
        out: Buckets = {}
        for key, buckets in now_buckets.items():
            old = dict(base.get(key, []))
            out[key] = [(le, count - old.get(le, 0.0)) for le, count in buckets]
        return out, now - since


def models(
    detectors: list[Detector], metrics: DetectorMetrics, window: LatencyWindow
) -> tuple[list[ModelStatus], float]:
    total = latencies(metrics)
    recent, covered = window.recent(total)
    out = []
    for d in detectors:
        spec, provider = d.spec, d.provider
        buckets = recent.get((spec.name, provider), [])
        since_start = total.get((spec.name, provider), [])
        p50, p99 = histogram_quantile(0.5, buckets), histogram_quantile(0.99, buckets)
        out.append(
            ModelStatus(
                name=spec.name,
                dimension=spec.dimension.value,
                version=spec.version,
                provider=provider,
                windows=int(since_start[-1][1]) if since_start else 0,
                recent_windows=int(buckets[-1][1]) if buckets else 0,
                p50_ms=None if p50 is None else round(p50 * 1000, 2),
                p99_ms=None if p99 is None else round(p99 * 1000, 2),
            )
        )
    return out, covered


def node_status(source: StatusSource, node_id: str, boot: str) -> NodeStatus:
    state: NodeState = "ready" if source.runtime.ready else "starting"
    if source.draining():
        state = "draining"
    analysis = source.analysis
    admission = source.runtime.admission
    timed, covered = models(source.detectors, source.detector_metrics, source.latency)
    return NodeStatus(
        node_id=node_id,
        boot=boot,
        state=state,
        at=datetime.now(UTC),
        live_calls=analysis.live_calls if analysis is not None else 0,
        analysed_calls=admission.active(),
        capacity=admission.capacity(),
        models=timed,
        jitter=dict(analysis.jitter_sums()) if analysis is not None else {},
        latency_window_s=round(covered, 1),
    )
