"""Early media (issue 10): windows of a call that is not answered yet are scored and
published but never alert; once answered, windows starting before the answer's offset
still never count, and windows after it alert as usual."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from detectors.alert_schema import Alert, Dimension, LegRole, ScoreUpdate
from detectors.contract import WindowKey, WindowQuality, WindowResult
from detectors.fusion import Fusion


class _Publisher:
    def __init__(self) -> None:
        self.alerts: list[Alert] = []
        self.scores: list[ScoreUpdate] = []

    def publish_alert(self, alert: Alert) -> None:
        self.alerts.append(alert)

    def publish_score(self, update: ScoreUpdate) -> None:
        self.scores.append(update)


def _window(start: float, score: float) -> WindowResult:
    return WindowResult(
        key=WindowKey("c1", "caller", LegRole.EXTERNAL, start, start + 4.0),
        detector="aasist",
        model_version="0.1.0",
        dimension=Dimension.SYNTHETIC_VOICE,
        provider="cpu",
        score=score,
        threshold=0.5,
        abstained=None,
        quality=WindowQuality(concealed_ratio=0.0, net_speech_s=3.0),
    )


def _fusion() -> tuple[Fusion, _Publisher]:
    pub = _Publisher()
    f = Fusion(pub, node_id="n1", now=lambda: datetime(2026, 11, 30, tzinfo=UTC))
    f.open_call("c1")
    return f, pub


def test_unanswered_call_is_scored_but_never_alerts() -> None:
    f, pub = _fusion()
    f.mark_early_media("c1", math.inf)
    for i in range(10):
        f.on_result(_window(float(i), 0.99))
    assert len(pub.scores) == 10 and pub.alerts == []


def test_after_the_answer_only_windows_starting_after_it_count() -> None:
    f, pub = _fusion()
    f.mark_early_media("c1", math.inf)
    for i in range(4):  # 0..3 s: synthetic announcement while ringing
        f.on_result(_window(float(i), 0.99))
    f.mark_early_media("c1", 5.0)  # answered 5 s into the legs' media
    f.on_result(_window(4.0, 0.99))  # straddles the answer: still early media
    f.on_result(_window(4.9, 0.99))
    assert pub.alerts == [] and len(pub.scores) == 6
    f.on_result(_window(5.0, 0.99))  # after the answer: counts, with the next one
    f.on_result(_window(6.0, 0.99))
    assert len(pub.alerts) == 1
    assert min(r.start_s for r in pub.alerts[0].reasons) >= 5.0


def test_without_a_mark_the_same_windows_alert() -> None:
    f, pub = _fusion()
    for i in range(4):
        f.on_result(_window(float(i), 0.99))
    assert len(pub.alerts) == 1
