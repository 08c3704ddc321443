"""Fusion and policy: N-of-M, one alert per episode with revisions, hysteresis, a later
episode as a new alert, the per-call cap, band caps, and score updates for every window."""

from __future__ import annotations

from datetime import UTC, datetime

from detectors.alert_schema import (
    Abstention,
    Alert,
    Band,
    Dimension,
    LegRole,
    ScoreUpdate,
    alert_id_for,
)
from detectors.contract import WindowKey, WindowQuality, WindowResult
from detectors.fusion import DimensionPolicy, Fusion, Policy


class Publisher:
    def __init__(self) -> None:
        self.alerts: list[Alert] = []
        self.scores: list[ScoreUpdate] = []

    def publish_alert(self, alert: Alert) -> None:
        self.alerts.append(alert)

    def publish_score(self, update: ScoreUpdate) -> None:
        self.scores.append(update)


def _result(
    t: float,
    score: float | None,
    dim: Dimension = Dimension.SYNTHETIC_VOICE,
    abstained: Abstention | None = None,
    call: str = "c1",
) -> WindowResult:
    return WindowResult(
        key=WindowKey(call, "caller", LegRole.EXTERNAL, t, t + 4.0),
        detector="aasist",
        model_version="0.1.0",
        dimension=dim,
        provider="cpu",
        score=score,
        threshold=0.5,
        abstained=abstained,
        quality=WindowQuality(concealed_ratio=0.01, net_speech_s=3.0),
    )


def _fusion(policy: Policy | None = None) -> tuple[Fusion, Publisher]:
    pub = Publisher()
    f = Fusion(pub, policy, node_id="n1", now=lambda: datetime(2026, 11, 30, tzinfo=UTC))
    f.open_call("c1")
    return f, pub


def _feed(
    f: Fusion, scores: list[float | None], dim: Dimension = Dimension.SYNTHETIC_VOICE
) -> None:
    for i, s in enumerate(scores):
        f.on_result(
            _result(2.0 * i, s, dim, None if s is not None else Abstention.TOO_LITTLE_SPEECH)
        )


def test_two_of_three_opens_one_alert_then_revisions_not_repeats() -> None:
    f, pub = _fusion()
    _feed(f, [0.1, 0.6, 0.2, 0.55, 0.56, 0.6, 0.95, 0.9])
    assert len(pub.scores) == 8
    ids = {a.alert_id for a in pub.alerts}
    assert ids == {alert_id_for("c1", Dimension.SYNTHETIC_VOICE, 0)}
    # opens on (0.6, 0.55) with peak 0.6; 0.56 and 0.6 add evidence only; 0.95 is a new band
    assert [a.revision for a in pub.alerts] == [1, 2]
    first, last = pub.alerts[0], pub.alerts[-1]
    assert first.band is Band.ELEVATED and last.band is Band.HIGH and last.score == 0.95
    assert {(r.start_s, r.score) for r in first.reasons} == {(2.0, 0.6), (6.0, 0.55)}
    assert "aasist" in first.reasons[0].detail
    assert last.model_versions == {"aasist": "0.1.0"} and last.provider == "cpu"
    assert last.policy_version == Policy().version and last.node_id == "n1"
    assert last.policy_version.startswith("0-")  # the built-in policy: counter 0


def test_hysteresis_closes_the_episode_and_a_later_one_is_a_new_alert() -> None:
    f, pub = _fusion()
    # episode 0, then three windows under the release threshold (0.4), then episode 1:
    # a voice that turns synthetic again later in the call is caught again
    _feed(f, [0.7, 0.7, 0.45, 0.3, 0.3, 0.3, 0.1, 0.8, 0.8])
    episodes = [a.episode for a in pub.alerts]
    assert episodes == [0, 1]
    assert pub.alerts[1].alert_id == alert_id_for("c1", Dimension.SYNTHETIC_VOICE, 1)


def test_abstentions_do_not_count_and_cap_limits_episodes() -> None:
    pol = Policy(default=DimensionPolicy(max_alerts_per_call=1, n=2, m=2))
    f, pub = _fusion(pol)
    _feed(f, [0.9, None, None, 0.9, 0.1, 0.1, 0.9, 0.9])
    assert [a.episode for a in pub.alerts] == [0]
    assert sum(s.abstained is Abstention.TOO_LITTLE_SPEECH for s in pub.scores) == 2


def test_voice_mismatch_reaches_at_most_elevated_and_vad_never_alerts() -> None:
    f, pub = _fusion()
    _feed(f, [0.99, 0.99, 0.99], Dimension.VOICE_MISMATCH)
    _feed(f, [0.99, 0.99, 0.99], Dimension.SPEECH_ACTIVITY)
    assert [a.band for a in pub.alerts] == [Band.ELEVATED]
    assert f.risk("c1").band is Band.ELEVATED


def test_end_of_call_publishes_a_final_revision_and_ignores_late_windows() -> None:
    f, pub = _fusion()
    _feed(f, [0.9, 0.9])
    f.end_call("c1")
    f.on_result(_result(10.0, 0.9))
    assert [(a.revision, a.call_state.value) for a in pub.alerts] == [(1, "live"), (2, "ended")]
    assert len(pub.scores) == 2


def test_correlation_id_keys_the_alert_and_risk_is_reported() -> None:
    pub = Publisher()
    f = Fusion(pub)
    f.open_call("c9", correlation_id="siprec-session-1")
    for i in range(2):
        f.on_result(_result(2.0 * i, 0.85, call="c9"))
    (a,) = pub.alerts
    assert a.alert_id == alert_id_for("siprec-session-1", Dimension.SYNTHETIC_VOICE, 0)
    assert a.correlation_id == "siprec-session-1"
    risk = f.risk("c9")
    assert risk.band is Band.HIGH and risk.score == 0.85 and risk.reasons


def test_an_unnamed_dimension_runs_at_its_models_calibrated_threshold() -> None:
    """The shipped policy names no synthetic_voice rule: the model manifest's threshold
    (chosen on held-out data, here 0.8) applies, not the generic default 0.5; a policy
    that names the dimension wins over the model."""
    from dataclasses import replace

    def feed(f: Fusion, scores: list[float]) -> None:
        for i, s in enumerate(scores):
            f.on_result(replace(_result(2.0 * i, s), threshold=0.8))

    f, pub = _fusion()
    feed(f, [0.7, 0.75, 0.7, 0.72])  # over 0.5 but under the model's 0.8
    assert pub.alerts == []
    feed(f, [0.85, 0.86])
    assert [a.threshold for a in pub.alerts] == [0.8]
    assert pub.alerts[0].band is Band.ELEVATED  # high needs 0.9: halfway to 1
    named = Policy(dimensions={Dimension.SYNTHETIC_VOICE: DimensionPolicy(threshold=0.6)})
    f, pub = _fusion(named)
    feed(f, [0.7, 0.75])
    assert [a.threshold for a in pub.alerts] == [0.6]
