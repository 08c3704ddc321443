"""The caller_id scoring rules, and the detector's emission into fusion (real Fusion,
the built-in policy): one alert per episode, reasons without numbers."""

from __future__ import annotations

from detectors.alert_schema import Alert, Band, Dimension, ScoreUpdate
from detectors.bus.policy import Policy
from detectors.caller_id.rules import (
    CallerIdConfig,
    CallMetadata,
    Velocity,
    judge,
)
from detectors.caller_id.service import CallerIdDetector
from detectors.fusion import Fusion

CFG = CallerIdConfig(concurrent=3, concurrent_high=6, recent=5, recent_high=10)
HASH = "0f" * 16


def _score(meta: CallMetadata, v: Velocity | None = None) -> float:
    out = judge(meta, v or Velocity(), CFG)
    assert out is not None
    return out[0]


def _band(score: float) -> Band | None:
    pol = Policy().resolve()[Dimension.CALLER_ID]
    if score < pol.threshold:
        return None
    return Band.HIGH if score >= pol.high_threshold else Band.ELEVATED


def test_failed_verification_is_high_whatever_the_reason() -> None:
    for reason in ("bad_signature", "tn_mismatch", "stale_iat", "untrusted_chain", "malformed"):
        meta = CallMetadata("A", "failed", reason, True, HASH)
        out = judge(meta, Velocity(), CFG)
        assert out is not None
        assert _band(out[0]) is Band.HIGH
        assert out[1] == (f"STIR/SHAKEN verification failed ({reason})",)


def test_verified_a_and_plain_unattested_calls_do_not_alert() -> None:
    assert _score(CallMetadata("A", "verified", "", True, HASH)) == 0.0
    assert _score(CallMetadata(None, "absent", "", True, HASH)) == 0.0
    assert _band(_score(CallMetadata("C", "verified", "", True, HASH))) is None
    assert _band(_score(CallMetadata("B", "unverified", "unknown_x5u", True, HASH))) is None


def test_a_dropped_attestation_is_elevated_never_high() -> None:
    usual = Velocity(1, 1, attested_before=CFG.attested_min)
    for meta in (
        CallMetadata("C", "verified", "", True, HASH),
        CallMetadata(None, "absent", "", True, HASH),
        CallMetadata("A", "unverified", "unknown_x5u", True, HASH),
    ):
        out = judge(meta, usual, CFG)
        assert out is not None and _band(out[0]) is Band.ELEVATED, meta
        assert "came verified A/B on 3 recent calls" in out[1][0]
    few = Velocity(1, 1, attested_before=CFG.attested_min - 1)
    assert _band(_score(CallMetadata(None, "absent", "", True, HASH), few)) is None


def test_velocity_bands_and_reasons() -> None:
    meta = CallMetadata("A", "verified", "", True, HASH)
    assert _band(_score(meta, Velocity(2, 4))) is None
    assert _band(_score(meta, Velocity(3, 1))) is Band.ELEVATED
    assert _band(_score(meta, Velocity(1, 5))) is Band.ELEVATED
    assert _band(_score(meta, Velocity(6, 1))) is Band.HIGH
    out = judge(meta, Velocity(3, 10), CFG)
    assert out is not None and _band(out[0]) is Band.HIGH
    assert out[1] == (
        "same caller ID on 10 calls in the last 600 s (>= 10)",
        "same caller ID on 3 concurrent calls (>= 3)",
    )


def test_no_caller_id_information_abstains() -> None:
    assert judge(CallMetadata(), Velocity(9, 99), CFG) is None  # an RTP fork, no signalling
    anonymous_but_signed = CallMetadata(None, "failed", "bad_signature", False, "")
    assert judge(anonymous_but_signed, Velocity(), CFG) is not None


class _Bus:
    def __init__(self) -> None:
        self.alerts: list[Alert] = []
        self.scores: list[ScoreUpdate] = []

    def publish_alert(self, alert: Alert) -> None:
        self.alerts.append(alert)

    def publish_score(self, update: ScoreUpdate) -> None:
        self.scores.append(update)


def test_detector_results_go_through_fusion_one_alert_per_episode() -> None:
    bus = _Bus()
    fusion = Fusion(bus, Policy())
    fusion.open_call("c1")
    fusion.mark_early_media("c1", float("inf"))  # signalling evidence is not early media
    det = CallerIdDetector(fusion.on_result, None, CFG)
    failed = CallMetadata("A", "failed", "bad_signature", True, HASH)
    assert det.handle("c1", failed) is not None
    assert det.handle("c1", failed) is None  # the same metadata again: nothing new
    det.handle("c1", CallMetadata(None, "failed", "bad_signature", True, HASH))  # same verdict
    assert len(bus.alerts) == 1 and len(bus.scores) == 1
    alert = bus.alerts[0]
    assert (alert.dimension, alert.band, alert.revision) == (Dimension.CALLER_ID, Band.HIGH, 1)
    assert "STIR/SHAKEN verification failed (bad_signature)" in alert.reasons[0].detail
    fusion.open_call("c2")
    det.handle("c2", CallMetadata("A", "verified", "", True, HASH))
    det.handle("c3", CallMetadata())  # no caller ID: not scored
    assert len(bus.alerts) == 1 and len(bus.scores) == 2
    assert (det.stats.scored, det.stats.abstained) == (3, 1)
