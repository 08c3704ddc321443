"""The ingress adapters' counters on /metrics.

Every adapter keeps its own counters and a ``snapshot()`` dict (WebSocket adapters:
``sip_bridge.adapters.ws_common.AdapterStats``; AudioSocket; WHIP). At scrape time this
collector turns each snapshot into Prometheus families named by the snapshot's keys: a
number becomes ``callshield_adapter_<key>_total{adapter}`` (``live`` is a gauge), a
mapping becomes ``callshield_adapter_<key>_total{adapter,<label>}`` with the label named
after the key (reason, code, kind ...). No adapter knows Prometheus, and a counter an
adapter adds appears without touching this module.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

GAUGES = frozenset({"live"})
LABELS = {  # a mapping key -> the label its keys become
    "refused": "reason",
    "bad": "reason",
    "closes": "code",
    "calls_refused": "reason",
    "calls_ended": "reason",
    "legs_ended": "reason",
    "ended": "reason",
    "events": "type",
    "frames": "kind",
    "error_codes": "code",
    "requests": "outcome",
}
_NAME = re.compile(r"[^a-zA-Z0-9_]")

Snapshots = Callable[[], Iterable[tuple[str, Mapping[str, Any]]]]


class AdapterCollector(Collector):
    """``snapshots()`` yields (adapter name, snapshot) pairs at scrape time."""

    def __init__(self, snapshots: Snapshots) -> None:
        self._snapshots = snapshots

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        for adapter, snap in self._snapshots():
            for key, value in snap.items():
                if key == "adapter" or isinstance(value, bool):
                    continue
                name = "callshield_adapter_" + _NAME.sub("_", key)
                if isinstance(value, int | float):
                    fam = families.get(name)
                    if fam is None:
                        doc = f"ingress adapter {key.replace('_', ' ')}"
                        if key in GAUGES:
                            fam = GaugeMetricFamily(name, doc, labels=["adapter"])
                        else:
                            fam = CounterMetricFamily(name, doc, labels=["adapter"])
                        families[name] = fam
                    fam.add_metric([adapter], float(value))  # type: ignore[attr-defined]
                elif isinstance(value, Mapping):
                    label = LABELS.get(key, "key")
                    fam = families.get(name)
                    if fam is None:
                        doc = f"ingress adapter {key.replace('_', ' ')}, by {label}"
                        fam = CounterMetricFamily(name, doc, labels=["adapter", label])
                        families[name] = fam
                    for sub, count in value.items():
                        fam.add_metric([adapter, str(sub)], float(count))  # type: ignore[attr-defined]
        return list(families.values())
