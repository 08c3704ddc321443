"""The single-window bar (issue 5): one window scoring ``single_window`` of the way from
the threshold to 1.0 opens the episode alone; a window between the threshold and the
bar still needs the N-of-M rule's second one; the bar is a share of the headroom, so it
follows the model's calibrated threshold; synthetic_voice gets a built-in bar only when
no scope names it; and the replay (``policy_sim``) opens the same episodes as fusion."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from detectors.alert_schema import Alert, Dimension, LegRole, ScoreUpdate
from detectors.bus.policy import BUILTIN_SINGLE_WINDOW, DimensionPolicy, Policy
from detectors.bus.policy_sim import Window, alert_score, alerts_on
from detectors.contract import WindowKey, WindowQuality, WindowResult
from detectors.fusion import Fusion

SV = Dimension.SYNTHETIC_VOICE


class _Pub:
    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    def publish_alert(self, alert: Alert) -> None:
        self.alerts.append(alert)

    def publish_score(self, update: ScoreUpdate) -> None:
        pass


def _result(
    t: float, score: float, dim: Dimension = SV, threshold: float = 0.8, speech: float = 2.5
) -> WindowResult:
    return WindowResult(
        key=WindowKey("c1", "caller", LegRole.EXTERNAL, t, t + 3.0),
        detector="m",
        model_version="1",
        dimension=dim,
        provider="cpu",
        score=score,
        threshold=threshold,
        abstained=None,
        quality=WindowQuality(net_speech_s=speech),
    )


def _fusion(policy: Policy | None = None) -> tuple[Fusion, _Pub]:
    pub = _Pub()
    f = Fusion(pub, policy, node_id="n1", now=lambda: datetime(2026, 11, 30, tzinfo=UTC))
    f.open_call("c1")
    return f, pub


def _feed(f: Fusion, scores: list[float], dim: Dimension = SV, threshold: float = 0.8) -> None:
    for i, s in enumerate(scores):
        f.on_result(_result(1.5 * i, s, dim, threshold))


def test_the_bar_is_a_share_of_the_headroom_above_the_threshold() -> None:
    rule = DimensionPolicy(threshold=0.8, single_window=0.75)
    assert rule.single_window_threshold == pytest.approx(0.95)
    assert not rule.opens([(0.94, 3.0)]) and rule.opens([(0.95, 3.0)])
    assert rule.opens([(0.81, 0.5), (0.82, 0.5), (0.1, 3.0)])  # N of M still opens
    assert not rule.opens([(0.81, 3.0), (0.1, 3.0), (0.1, 3.0)])
    # one window alone needs a window's worth of speech (2 s by default)
    assert not rule.opens([(0.99, 1.9)]) and rule.opens([(0.99, 2.0)])
    assert DimensionPolicy(threshold=0.8).single_window_threshold is None
    assert not DimensionPolicy(threshold=0.8).opens([(0.99, 3.0)])
    assert rule.used()["single_window"] == pytest.approx(0.95)
    assert rule.used()["single_window_min_net_speech_s"] == 2.0
    assert "single_window" not in DimensionPolicy().used()
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValidationError):
            DimensionPolicy(single_window=bad)


def test_one_window_at_the_bar_alerts_alone_one_between_waits_for_a_second() -> None:
    named = Policy(dimensions={SV: DimensionPolicy(threshold=0.8, single_window=0.75)})
    f, pub = _fusion(named)
    _feed(f, [0.3, 0.94, 0.2, 0.3])  # over the threshold, under the bar: N of M not met
    f.on_result(_result(5.0, 0.99, speech=1.5))  # over the bar, but mostly silence
    assert pub.alerts == []
    f.on_result(_result(5.5, 0.1))
    f.on_result(_result(5.8, 0.1))
    f.on_result(_result(6.0, 0.96))
    assert len(pub.alerts) == 1
    alert = pub.alerts[0]
    assert alert.revision == 1 and alert.score == pytest.approx(0.96)
    assert alert.thresholds["single_window"] == pytest.approx(0.95)
    assert [r.start_s for r in alert.reasons] == [6.0]  # the window that opened it
    f.on_result(_result(7.5, 0.97))  # the same episode: no new alert
    assert [a.alert_id for a in pub.alerts] == [alert.alert_id]


def test_unnamed_synthetic_voice_gets_the_builtin_bar_at_its_models_threshold() -> None:
    share = BUILTIN_SINGLE_WINDOW[SV]
    bar = 0.8 + share * 0.2
    f, pub = _fusion()  # the shipped policy names no synthetic_voice rule
    _feed(f, [0.1, bar - 0.01, 0.1, 0.1])
    assert pub.alerts == []
    f.on_result(_result(9.0, bar + 0.005))
    assert len(pub.alerts) == 1 and pub.alerts[0].threshold == 0.8
    assert pub.alerts[0].thresholds["single_window"] == pytest.approx(bar)
    # a policy that names the dimension decides alone: no bar unless it sets one
    f, pub = _fusion(Policy(dimensions={SV: DimensionPolicy(threshold=0.8)}))
    _feed(f, [0.1, 0.999, 0.1])
    assert pub.alerts == []
    # a dimension without a built-in bar (replay) keeps N of M at its model threshold
    f, pub = _fusion()
    _feed(f, [0.1, 0.999, 0.1], Dimension.REPLAY)
    assert pub.alerts == []
    # the policy's default may set a bar for every dimension that falls to it
    f, pub = _fusion(Policy(default=DimensionPolicy(single_window=0.5)))
    _feed(f, [0.1, 0.91], Dimension.REPLAY)
    assert len(pub.alerts) == 1


def test_effective_rule_matches_what_fusion_runs() -> None:
    pol = Policy().effective(SV, None, 0.8)
    assert pol.threshold == 0.8 and pol.single_window == BUILTIN_SINGLE_WINDOW[SV]
    assert Policy().effective(Dimension.REPLAY, None, 0.8).single_window is None


def test_replay_opens_the_episodes_fusion_opens_and_alert_score_is_exact() -> None:
    rng = random.Random(5)
    for case in range(300):
        m = rng.randint(1, 4)
        rule = DimensionPolicy(
            threshold=rng.choice([0.5, 0.7, 0.8]),
            n=rng.randint(1, m),
            m=m,
            max_alerts_per_call=rng.randint(1, 3),
            single_window=rng.choice([None, 0.3, 0.5, 0.75]),
        )
        windows = [
            Window(1.5 * i, rng.choice([rng.random(), rng.uniform(0.7, 1.0)]), rng.uniform(1, 3))
            for i in range(rng.randint(0, 30))
        ]
        f, pub = _fusion(Policy(dimensions={SV: rule}))
        for w in windows:
            f.on_result(_result(w.start_s, w.score, threshold=0.5, speech=w.net_speech_s))
        assert alerts_on(windows, rule) == len({a.alert_id for a in pub.alerts}), case
        top = alert_score(windows, rule)
        for t in (0.0, 0.3, 0.6, 0.85, 0.95):
            lowered = rule.model_copy(update={"threshold": t, "release": None})
            assert (alerts_on(windows, lowered) > 0) == (t <= top), (case, t, top)


def test_session_eval_replays_the_bar_with_each_windows_speech() -> None:
    from detectors.eval.engine import CallOutcome
    from detectors.eval.session_eval import count_alerts

    rule = DimensionPolicy(threshold=0.8, single_window=0.5)  # bar 0.9
    quiet = CallOutcome(scores=[(3.0, 0.95), (0.0, 0.1)], speech=[1.0, 3.0])
    spoken = CallOutcome(scores=[(3.0, 0.95), (0.0, 0.1)], speech=[2.5, 3.0])
    unknown = CallOutcome(scores=[(3.0, 0.95), (0.0, 0.1)])  # no speech recorded: never alone
    assert [count_alerts(o, rule) for o in (quiet, spoken, unknown)] == [0, 1, 0]
