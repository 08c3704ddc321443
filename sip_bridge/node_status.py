"""Composes this bridge's status summary (``detectors.bus.node_status``), written with
every heartbeat: state (starting / ready / draining), live calls against the admission
capacity, each model's version, provider and per-window latency p50/p99, and the
jitter-buffer counters summed over legs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from detectors.bus.node_status import ModelStatus, NodeState, NodeStatus, histogram_quantile
from detectors.contract import Detector
from detectors.metrics import DetectorMetrics
from detectors.runtime import DetectorRuntime
from sip_bridge.analysis import Analysis


class StatusSource(Protocol):
    """What the summary is read from (the bridge's :class:`sip_bridge.wiring.Wiring`)."""

    detectors: list[Detector]
    detector_metrics: DetectorMetrics
    runtime: DetectorRuntime
    analysis: Analysis | None
    draining: Callable[[], bool]


def latencies(metrics: DetectorMetrics) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(detector, provider) -> the per-window histogram's cumulative buckets."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for family in metrics.window_seconds.collect():
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                key = (sample.labels["detector"], sample.labels["provider"])
                out[key].append((float(sample.labels["le"]), sample.value))
    for buckets in out.values():
        buckets.sort()
    return out


def models(detectors: list[Detector], metrics: DetectorMetrics) -> list[ModelStatus]:
    timed = latencies(metrics)
    out = []
    for d in detectors:
        spec, provider = d.spec, d.provider
        buckets = timed.get((spec.name, provider), [])
        p50, p99 = histogram_quantile(0.5, buckets), histogram_quantile(0.99, buckets)
        out.append(
            ModelStatus(
                name=spec.name,
                dimension=spec.dimension.value,
                version=spec.version,
                provider=provider,
                windows=int(buckets[-1][1]) if buckets else 0,
                p50_ms=None if p50 is None else round(p50 * 1000, 2),
                p99_ms=None if p99 is None else round(p99 * 1000, 2),
            )
        )
    return out


def node_status(source: StatusSource, node_id: str, boot: str) -> NodeStatus:
    state: NodeState = "ready" if source.runtime.ready else "starting"
    if source.draining():
        state = "draining"
    analysis = source.analysis
    admission = source.runtime.admission
    return NodeStatus(
        node_id=node_id,
        boot=boot,
        state=state,
        at=datetime.now(UTC),
        live_calls=analysis.live_calls if analysis is not None else 0,
        analysed_calls=admission.active(),
        capacity=admission.capacity(),
        models=models(source.detectors, source.detector_metrics),
        jitter=dict(analysis.jitter_sums()) if analysis is not None else {},
    )
