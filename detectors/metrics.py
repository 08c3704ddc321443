"""Prometheus metrics of the detector runtime, on a registry the bridge mounts on its HTTP
port (``render`` for a handler of its own, ``asgi_app`` for an ASGI mount).

Names follow Prometheus conventions (``callshield_`` prefix, ``_total`` counters,
``_seconds`` histograms). Labels are bounded: detector names, provider, outcome and
reason enums; never a call id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
_TICK_BUCKETS = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)


class DetectorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.windows = Counter(
            "callshield_detector_windows_total",
            "Windows per detector by outcome (scored, an abstention reason, unavailable)",
            ["detector", "outcome"],
            registry=r,
        )
        self.batch_seconds = Histogram(
            "callshield_detector_batch_seconds",
            "Inference time of one batch",
            ["detector", "provider"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.window_seconds = Histogram(
            "callshield_detector_window_seconds",
            "Inference time per window (batch time / batch size)",
            ["detector", "provider"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "callshield_detector_queue_wait_seconds",
            "Window complete -> its batch starts",
            ["detector"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "callshield_detector_queue_depth", "Windows waiting", ["detector"], registry=r
        )
        self.batch_size = Histogram(
            "callshield_detector_batch_size",
            "Windows per batch",
            ["detector"],
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=r,
        )
        self.unavailable = Counter(
            "callshield_detector_unavailable_total",
            "Windows that yielded unavailable (error, deadline, stale audio, stalled detector)",
            ["detector", "reason"],
            registry=r,
        )
        self.calls_active = Gauge("callshield_calls_active", "Calls being analysed", registry=r)
        self.capacity_remaining = Gauge(
            "callshield_capacity_remaining_calls", "Calls this node can still take", registry=r
        )
        self.capacity = Gauge(
            "callshield_capacity_calls",
            "Admission's estimate of the calls this node can analyse (ceiling included)",
            registry=r,
        )
        self.capacity_seeded = Gauge(
            "callshield_capacity_seeded_calls",
            "The estimate from the pre-warm timings (pool full), before any call",
            registry=r,
        )
        self.calls_refused = Counter(
            "callshield_calls_refused_total",
            "Calls not analysed for capacity, by policy (refuse, shed)",
            ["policy"],
            registry=r,
        )
        self.tick_lag = Histogram(
            "callshield_tick_lag_seconds",
            "Playout-clock tick lateness",
            buckets=_TICK_BUCKETS,
            registry=r,
        )
        self.ready = Gauge("callshield_detectors_ready", "1 once every model is warm", registry=r)
        self.alerts = Counter(
            "callshield_alerts_total",
            "Alert revisions handed to the publisher",
            ["dimension", "band"],
            registry=r,
        )

    def add_jitter_stats(self, source: Callable[[], Mapping[str, int]]) -> None:
        """Expose jitter-buffer counters summed over legs (``source`` returns the sums
        of ``cs_jb_stats``, e.g. from the ingest) as ``callshield_jb_<name>_total``."""
        self.registry.register(_SumCollector(source))


class _SumCollector(Collector):
    def __init__(self, source: Callable[[], Mapping[str, int]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Any]:
        for name, value in sorted(self._source().items()):
            yield CounterMetricFamily(
                f"callshield_jb_{name}", f"jitter buffer {name}, summed over legs", value=value
            )

    def describe(self) -> Iterator[Any]:
        return iter(())


def render(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The text exposition and its content type, for an HTTP handler."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


def asgi_app(registry: CollectorRegistry) -> Any:
    """An ASGI app serving the registry (the bridge mounts it at /metrics)."""
    from prometheus_client import make_asgi_app

    return make_asgi_app(registry=registry)
