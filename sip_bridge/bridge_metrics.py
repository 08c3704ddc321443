"""The media process's own counters on /metrics: the native ingest (datagrams, parse
errors by reason, source-lock and SRTP drops) and the SIP UAS (messages received,
responses sent by status, retransmissions, untrusted peers, TLS handshake failures,
session-timer expiries ...). Read at scrape time: the ingest's copy-out does not
allocate in C, and the UAS's Counter is read on the scrape thread (a torn read of a
single int is impossible in CPython)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class IngestCollector(Collector):
    """``counters()`` is ``native.ingest.Ingest.counters``."""

    def __init__(self, counters: Callable[[], dict[str, Any]]) -> None:
        self._counters = counters

    def collect(self) -> Iterable[Metric]:
        out: list[Metric] = []
        for key, value in self._counters().items():
            name = f"callshield_ingest_{key}"
            if isinstance(value, dict):
                fam = CounterMetricFamily(
                    name, f"native ingest {key}, by reason", labels=["reason"]
                )
                for reason, n in value.items():
                    fam.add_metric([str(reason)], float(n))
            else:
                fam = CounterMetricFamily(name, f"native ingest {key.replace('_', ' ')}")
                fam.add_metric([], float(value))
            out.append(fam)
        return out


class SipCollector(Collector):
    """``stats`` is the UAS's Counter: ``sent.<status>`` become
    ``callshield_sip_responses_sent_total{status}``, the rest
    ``callshield_sip_events_total{event}``."""

    def __init__(self, stats: Counter[str]) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        sent = CounterMetricFamily(
            "callshield_sip_responses_sent", "SIP responses sent, by status", labels=["status"]
        )
        events = CounterMetricFamily(
            "callshield_sip_events",
            "SIP UAS events: received, parse_errors, dropped, retransmissions, untrusted, "
            "tls_handshake_failed, session_timer_expired, ...",
            labels=["event"],
        )
        for key, n in sorted(dict(self._stats).items()):
            if key.startswith("sent."):
                sent.add_metric([key[5:]], float(n))
            else:
                events.add_metric([key], float(n))
        return [sent, events]


class TenantCollector(Collector):
    """``snapshot()`` is ``sip_bridge.tenant.TenantResolver.snapshot``: calls by the step
    that decided their tenant, ``callshield_tenant_resolved_total{source}``, and refused
    explicit values, ``callshield_tenant_rejected_total{origin,reason}``."""

    def __init__(self, snapshot: Callable[[], dict[tuple[str, ...], int]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        resolved = CounterMetricFamily(
            "callshield_tenant_resolved",
            "calls by what decided their tenant: sip_header, siprec_metadata, api, "
            "twilio_parameter, audiohook_open, audio_fork_metadata, whip_request, "
            "connect_request, dnis_prefix, sip_source, default",
            labels=["source"],
        )
        rejected = CounterMetricFamily(
            "callshield_tenant_rejected",
            "explicit tenant values refused (the call fell back), by origin and reason",
            labels=["origin", "reason"],
        )
        for key, n in sorted(self._snapshot().items()):
            if key[0] == "resolved":
                resolved.add_metric([key[1]], float(n))
            elif key[0] == "rejected":
                rejected.add_metric([key[1], key[2]], float(n))
        return [resolved, rejected]
