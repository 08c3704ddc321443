"""Counting what a PBX or platform *states* about a call (its call state, its legs'
roles): values taken by origin, values ignored by origin and reason, as two Prometheus
counters; the short printable prefix a refused value is logged with; and whether a
statement merely repeats the call's last one on that topic (``restated``: an RFC 4028
session refresh re-sends its SDP and headers every few minutes, a SIPREC SRC its
metadata, and such a repeat is not counted again, refusals included, so the counters
measure what was said, not call duration). One place, so every per-call statement the
bridge reads is counted and logged the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

Snapshot = Callable[[], dict[tuple[str, ...], int]]


class StatedCollector(Collector):
    """``<name>_total{origin,<label>}`` from the snapshot's ``("said", origin, value)``
    keys and ``<name>_rejected_total{origin,reason}`` from its
    ``("rejected", origin, reason)`` keys."""

    def __init__(
        self, name: str, label: str, said_help: str, rejected_help: str, snapshot: Snapshot
    ) -> None:
        self._name, self._label = name, label
        self._said_help, self._rejected_help = said_help, rejected_help
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        said = CounterMetricFamily(self._name, self._said_help, labels=["origin", self._label])
        rejected = CounterMetricFamily(
            f"{self._name}_rejected", self._rejected_help, labels=["origin", "reason"]
        )
        for key, n in sorted(self._snapshot().items()):
            if key[0] == "said":
                said.add_metric([key[1], key[2]], float(n))
            elif key[0] == "rejected":
                rejected.add_metric([key[1], key[2]], float(n))
        return [said, rejected]


def restated(last: dict[str, object], topic: str, statement: object) -> bool:
    """Whether ``statement`` is exactly the call's last one on ``topic`` (``last``: the
    call's, by topic), recording it either way; a repeat is not counted again."""
    again = topic in last and last[topic] == statement
    last[topic] = statement
    return again


def shown(values: Iterable[str], sep: str, limit: int) -> str:
    """A refused value for the log: a short, printable prefix, never the whole input."""
    text = sep.join(values)
    safe = "".join(c if c.isprintable() else "?" for c in text[:limit])
    return repr(safe) + ("..." if len(text) > limit else "")
