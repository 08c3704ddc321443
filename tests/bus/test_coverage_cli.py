"""``callshield coverage --since``: ended call events written to a real redis-server by
the publisher, read back and summarised per dimension, as JSON and as text."""

from __future__ import annotations

import json

import pytest
import redis
from coverage_factory import SA, SV, ended

from detectors.alert_schema import Abstention
from detectors.bus.codec import encode
from detectors.bus.coverage_report import parse_span, percentile
from detectors.bus.keys import Keys
from detectors.bus.publisher import AlertPublisher
from detectors.bus.settings import BusSettings
from sip_bridge.cli import main


def test_spans_and_percentiles() -> None:
    assert [parse_span(s) for s in ("90s", "30m", "24h", "7d", "1.5h")] == [
        90,
        1800,
        86400,
        604800,
        5400,
    ]
    for bad in ("24", "h", "-1h", "0m", "3w"):
        with pytest.raises(ValueError, match="a span looks like"):
            parse_span(bad)
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0


def test_coverage_since_reads_the_span_from_redis(
    settings: BusSettings,
    client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keys = Keys(settings.key_prefix)
    # two days ago: outside --since 24h (stream ids are the server's clock in ms)
    sec, _ = client.time()
    old = ended("old", media="none")
    client.xadd(keys.events, encode(old), id=f"{(sec - 2 * 86400) * 1000}-0")  # type: ignore[arg-type]
    publisher = AlertPublisher(client, settings)
    publisher.start()
    calls = [
        ended("a", 10.0, ttfp_s=0.02),
        ended("b", 10.0, ttfp_s=0.04),
        ended("c", 1.0, abstained={Abstention.TOO_LITTLE_SPEECH: 3}),  # too little speech
        ended("d", media="one_way", unavailable={"deadline": 2}),
        ended("e", media="none", reason="rtp_timeout"),
        ended("f", shed=True),
    ]
    for e in calls:
        publisher.publish_event(e)
    publisher.publish_event(ended("g").model_copy(update={"event": "updated"}))  # not ended
    client.xadd(keys.events, {"kind": "call_event", "json": "{broken"})
    assert publisher.flush(10)
    publisher.close()
    for name, value in (
        ("REDIS_URL", settings.redis_url.get_secret_value()),  # type: ignore[union-attr]
        ("CALLSHIELD_KEY_PREFIX", settings.key_prefix),
        ("CALLSHIELD_STATE_DIR", str(settings.state_dir)),
        ("CALLSHIELD_COVERAGE_MIN_SPEECH_S", "2.0"),
    ):
        monkeypatch.setenv(name, value)

    assert main(["coverage", "--since", "24h", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["calls"] == 6 and r["analysed"] == 5 and r["bad_entries"] == 1
    assert r["shed"] == {"capacity": 1}
    assert (r["no_media"], r["one_way"]) == (1, 1)
    assert r["ended"] == {"bye": 5, "rtp_timeout": 1}
    assert r["silent_legs"] == {"external": 1, "internal": 2}
    assert set(r["dimensions"]) == {SV.value, SA.value}
    sv = r["dimensions"][SV.value]
    assert sv["covered"] == 3  # a, b, d: not c (1 s), e (no media), f (shed)
    assert sv["ratio"] == pytest.approx(3 / 6)
    assert sv["abstentions"] == {"too_little_speech": 3}
    assert sv["unavailable"] == {"deadline": 2}
    assert sv["analysed_speech_s"] == pytest.approx(31.0)
    # legs with media: a, b, c, f both legs, d its external one: 0.02 0.04 0.04 0.05
    # 0.05 0.05 0.08 0.1 0.1 (nearest rank)
    assert r["ttfp_legs"] == 9
    assert r["ttfp_p50_s"] == pytest.approx(0.05)
    assert r["ttfp_p99_s"] == pytest.approx(0.1)

    assert main(["coverage", "--since", "3d", "--min-speech", "0.5"]) == 0
    text = capsys.readouterr().out
    assert "7 calls, 6 analysed, 1 shed (capacity 1)" in text
    assert "no media: 2   one-way: 1" in text
    line = next(ln for ln in text.splitlines() if ln.startswith(SV.value))
    assert line.split()[1:3] == ["4/7", "0.571"]  # c counts at 0.5 s

    assert main(["coverage", "--since", "yesterday"]) == 2
    assert "a span looks like" in capsys.readouterr().err
