"""The bridge's side of the caller_id detector: compose the neutral call-metadata
record from what the signalling said (``Call.identity``: STIR/SHAKEN outcome and
attestation, read from the INVITE, or for SIPREC from the recording metadata's caller
participant, never the SBC's own From; ``Call.ani``) and the keyed ANI hash, and build
the detector on the bus's Redis, and its counters on ``/metrics``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import redis
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from detectors.bus.keys import Keys
from detectors.caller_id.rules import CallerIdConfig, CallMetadata
from detectors.caller_id.service import CallerIdDetector
from detectors.caller_id.velocity import AniVelocity
from detectors.runtime import DetectorRuntime
from sip_bridge.calls import Call
from sip_bridge.sip.identity import CallerIdentity


def caller_metadata(call: Call, ani_hash: str) -> CallMetadata:
    """The record for one call; without identity inputs or a number (an RTP fork, an
    adapter that knows no caller) it carries nothing and the detector abstains."""
    return metadata_of(call.identity, call.ani, ani_hash)


def metadata_of(ident: CallerIdentity | None, ani: str, ani_hash: str) -> CallMetadata:
    claims = bool(ani) or bool(ident is not None and ident.caller_number)
    if ident is None:
        return CallMetadata(claims_number=claims, ani_hash=ani_hash if claims else "")
    attestation = ident.attestation if ident.attestation in ("A", "B", "C") else None
    return CallMetadata(
        attestation=attestation,  # type: ignore[arg-type]
        verification=ident.verification,  # type: ignore[arg-type]
        reason=ident.verification_reason[:32],
        claims_number=claims,
        ani_hash=ani_hash if claims else "",
    )


def build_caller_id(
    runtime: DetectorRuntime, client: redis.Redis, keys: Keys, config: CallerIdConfig | None = None
) -> CallerIdDetector:
    """The detector, emitting into the runtime's fusion, velocity in the bus's Redis."""
    cfg = config or CallerIdConfig()
    return CallerIdDetector(runtime.signal, AniVelocity(client, keys, cfg), cfg)


class CallerIdCollector(Collector):
    """``callshield_caller_id_total{what}``: updates, scored, abstained (no caller-ID
    information), emitted (verdict changes handed to fusion), redis_errors (judged
    without velocity), dropped (queue full)."""

    def __init__(self, detector: CallerIdDetector) -> None:
        self._d = detector

    def collect(self) -> Iterator[Any]:
        family = CounterMetricFamily(
            "callshield_caller_id",
            "caller_id detector: call-metadata updates and what became of them",
            labels=["what"],
        )
        for name, value in dataclasses.asdict(self._d.stats).items():
            family.add_metric([name], float(value))
        yield family
