"""Calibration: the policy replay (``policy_sim``) raises exactly the alerts fusion raises
on the same windows (random sequences and rules), the alert score is the threshold at
which a call's first alert appears, and ``callshield calibrate`` against a real
redis-server (scores, alerts and labels written as the bridge and the dashboard write
them) picks the lowest threshold meeting the target, reports the miss rate, leaves
unreviewed calls out and writes a policy the dashboard accepts."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from detectors.alert_schema import Alert, Dimension, LegRole, ScoreUpdate, WindowQuality
from detectors.bus.codec import encode
from detectors.bus.keys import Keys
from detectors.bus.policy import DimensionPolicy, PolicyBody
from detectors.bus.policy_sim import Window, alert_score, alerts_on
from detectors.bus.redis_server import RedisServer
from detectors.contract import WindowKey, WindowResult
from detectors.contract import WindowQuality as Quality
from detectors.fusion import Fusion, Policy
from sip_bridge.cli import main

SV = Dimension.SYNTHETIC_VOICE
KEYS = Keys("cs-cal:")


class _Count:
    def __init__(self) -> None:
        self.ids: set[str] = set()

    def publish_alert(self, alert: Alert) -> None:
        self.ids.add(alert.alert_id)

    def publish_score(self, update: ScoreUpdate) -> None:
        pass


def _random_rule(rng: random.Random) -> DimensionPolicy:
    m = rng.randint(1, 5)
    threshold = rng.choice([0.3, 0.5, 0.7, 0.9])
    return DimensionPolicy(
        threshold=threshold,
        n=rng.randint(1, m),
        m=m,
        release=rng.choice([None, threshold, max(0.0, threshold - 0.3)]),
        min_net_speech_s=rng.choice([0.0, 1.0]),
        max_alerts_per_call=rng.randint(0, 4),
    )


def test_replay_matches_fusion_on_random_sequences() -> None:
    rng = random.Random(10)
    for case in range(300):
        rule = _random_rule(rng)
        windows = [
            Window(2.0 * i, rng.choice([rng.random(), rng.uniform(0.6, 1.0)]), rng.uniform(0, 3))
            for i in range(rng.randint(0, 40))
        ]
        pub = _Count()
        fusion = Fusion(pub, Policy(dimensions={SV: rule}), node_id="n")
        fusion.open_call("c")
        for w in windows:
            fusion.on_result(
                WindowResult(
                    key=WindowKey("c", "leg", LegRole.EXTERNAL, w.start_s, w.start_s + 4.0),
                    detector="d",
                    model_version="1",
                    dimension=SV,
                    provider="cpu",
                    score=w.score,
                    threshold=0.5,
                    abstained=None,
                    quality=Quality(net_speech_s=w.net_speech_s),
                )
            )
        assert alerts_on(windows, rule) == len(pub.ids), (case, rule, windows)
        top = alert_score(windows, rule)
        if rule.alerting and rule.max_alerts_per_call:
            for t in (0.0, 0.25, 0.5, 0.75, 1.0):
                lowered = rule.model_copy(update={"threshold": t, "release": None})
                assert (alerts_on(windows, lowered) > 0) == (t <= top), (case, t, top)


def _score(call: str, i: int, score: float) -> dict[str, str]:
    update = ScoreUpdate(
        call_id=call,
        leg_id=f"{call}.0",
        dimension=SV,
        window_start_s=2.0 * i,
        window_end_s=2.0 * i + 4.0,
        score=score,
        quality=WindowQuality(net_speech_s=3.0),
    )
    return encode(update)


def _alert(call: str) -> Alert:
    at = datetime(2026, 11, 30, tzinfo=UTC)
    return Alert(
        alert_id=f"al_{call}",
        revision=1,
        call_id=call,
        node_id="n",
        dimension=SV,
        band="high",
        score=0.9,
        threshold=0.5,
        episode=0,
        reasons=(),
        created_at=at,
        updated_at=at,
        policy_version="1-000000000000",
        provider="cpu",
    )


def _seed(client: redis.Redis) -> None:
    """200 genuine calls (10 with a burst 0.60-0.69, 3 of them labelled false
    positives), 20 fraud calls labelled true positives (2 of them weak: peak 0.55), and
    5 calls that alerted but were never labelled."""
    rng = random.Random(3)
    pipe = client.pipeline(transaction=False)
    labels = {}

    def call(name: str, scores: list[float]) -> None:
        for i, s in enumerate(scores):
            pipe.xadd(KEYS.scores, _score(name, i, s))  # type: ignore[arg-type]

    for k in range(200):
        scores = [rng.uniform(0.0, 0.4) for _ in range(12)]
        if k < 10:
            scores[4:7] = [round(0.60 + k / 100, 2)] * 3  # alert scores 0.60 ... 0.69
        call(f"g{k}", scores)
        if k >= 7 and k < 10:  # the three strongest genuine bursts alerted, labelled FP
            pipe.xadd(KEYS.alerts, encode(_alert(f"g{k}")))  # type: ignore[arg-type]
            labels[f"al_g{k}"] = {"call_id": f"g{k}", "dimension": "synthetic_voice"}
            labels[f"al_g{k}"]["label"] = "false_positive"
    for k in range(20):
        peak = 0.55 if k < 2 else rng.uniform(0.75, 0.95)
        call(f"f{k}", [rng.uniform(0.0, 0.3)] * 4 + [peak] * 5)
        pipe.xadd(KEYS.alerts, encode(_alert(f"f{k}")))  # type: ignore[arg-type]
        labels[f"al_f{k}"] = {"call_id": f"f{k}", "dimension": "synthetic_voice"}
        labels[f"al_f{k}"]["label"] = "true_positive"
    for k in range(5):
        call(f"u{k}", [0.99] * 6)
        pipe.xadd(KEYS.alerts, encode(_alert(f"u{k}")))  # type: ignore[arg-type]
    for alert_id, rec in labels.items():
        pipe.hset(KEYS.analyst_labels, alert_id, json.dumps(rec))
    pipe.execute()


def test_calibrate_command_meets_the_target_with_the_lowest_threshold(
    redis_server: RedisServer,
    client: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _seed(client)
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    monkeypatch.setenv("CALLSHIELD_KEY_PREFIX", KEYS.prefix)
    out = tmp_path / "policy.json"
    args = ["calibrate", "--target-false-alerts-per-1000", "10", "--dimension"]
    assert main([*args, "synthetic_voice", "--json", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["data"]["genuine_calls"] == 200 and report["data"]["fraud_calls"] == 20
    assert report["data"]["unreviewed_calls_left_out"] == 5
    (sv,) = report["dimensions"]
    # 10 per 1,000 of 200 calls: 2 alerts allowed; the bursts are 0.60 ... 0.69, so the
    # threshold sits just above the third strongest (0.67): 0.68 and 0.69 still alert
    assert sv["threshold"] == pytest.approx(0.671)
    assert sv["false_alerts_per_1000_genuine"] == pytest.approx(10.0)
    assert sv["current_false_alerts_per_1000_genuine"] == pytest.approx(50.0)  # 0.5: all 10
    assert sv["miss_rate"] == pytest.approx(0.1) and sv["current_miss_rate"] == 0.0
    policy = PolicyBody.model_validate_json(out.read_text())
    assert policy.for_dimension(SV).threshold == pytest.approx(0.671)
    assert policy.for_dimension(SV).n == 2  # the N-of-M rule it was calibrated under
    assert report["overall"]["calibrated"]["miss_rate"] == pytest.approx(0.1)

    assert main([*args[:-1], "--since", "30d"]) == 0  # the table for people
    text = capsys.readouterr().out
    assert "synthetic_voice" in text and "0.500 -> 0.671" in text and "10.0 %" in text
    assert main([*args[:-1], "--since", "forever"]) == 2
