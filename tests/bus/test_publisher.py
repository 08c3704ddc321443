"""The publisher against a real redis-server: dedupe, order, call state, the outbox while
Redis is away, overflow dropping score updates and never alerts."""

from __future__ import annotations

from pathlib import Path

import redis
from alert_factory import make_alert, make_event, make_score

from detectors.alert_schema import event_id
from detectors.bus.codec import decode, decode_alert
from detectors.bus.keys import Keys
from detectors.bus.outbox import Entry, Outbox
from detectors.bus.publisher import AlertPublisher
from detectors.bus.redis_server import RedisServer
from detectors.bus.settings import BusSettings


def _alerts(client: redis.Redis, keys: Keys) -> list[str]:
    return [event_id(decode_alert(f)) for _, f in client.xrange(keys.alerts)]


def test_publishes_alerts_scores_and_call_state(settings: BusSettings, client: redis.Redis) -> None:
    keys = Keys(settings.key_prefix)
    pub = AlertPublisher(redis.Redis.from_url(settings.redis_url.get_secret_value()), settings)  # type: ignore[union-attr]
    pub.start()
    pub.publish_event(make_event(1))
    for i in range(3):
        pub.publish_score(make_score(1, i))
    pub.publish_alert(make_alert(1))
    pub.publish_alert(make_alert(1, revision=2))
    pub.publish_event(make_event(2))
    pub.publish_event(make_event(2, "ended"))
    assert pub.flush(10)
    pub.close()
    assert _alerts(client, keys) == [event_id(make_alert(1)), event_id(make_alert(1, revision=2))]
    assert client.xlen(keys.scores) == 3
    assert [decode(f).kind for _, f in client.xrange(keys.events)] == ["call_event"] * 3
    assert client.hget(keys.call("call-1"), "state") == b"started"
    assert client.zrange(keys.live_calls, 0, -1) == [b"call-1"]
    assert client.ttl(keys.call("call-2")) > 0
    seen = client.hgetall(keys.alert_seen(make_alert(1).alert_id))
    assert seen[b"latest_rev"] == b"2"


def test_a_retry_never_adds_a_second_entry(settings: BusSettings, client: redis.Redis) -> None:
    keys = Keys(settings.key_prefix)
    acked: list[tuple[str, int, str]] = []
    url = settings.redis_url.get_secret_value()  # type: ignore[union-attr]
    for _ in range(3):  # three publishers (restarts, two nodes) send the same revisions
        pub = AlertPublisher(
            redis.Redis.from_url(url), settings, on_alert_acked=lambda *a: acked.append(a)
        )
        pub.start()
        pub.publish_alert(make_alert(7))
        pub.publish_alert(make_alert(7, revision=2))
        assert pub.flush(10)
        pub.close()
    assert len(_alerts(client, keys)) == 2
    assert len(acked) >= 6  # a restart also resends what it never saw confirmed
    assert len({a[2] for a in acked}) == 2  # every retry answered with the same entry


def test_alerts_wait_in_the_outbox_while_redis_is_down(
    settings: BusSettings, client: redis.Redis, redis_server: RedisServer
) -> None:
    keys = Keys(settings.key_prefix)
    url = settings.redis_url.get_secret_value()  # type: ignore[union-attr]
    pub = AlertPublisher(redis.Redis.from_url(url, socket_timeout=1), settings)
    pub.start()
    pub.publish_alert(make_alert(1))
    assert pub.flush(10)
    redis_server.kill9()
    for call in range(2, 12):
        pub.publish_alert(make_alert(call))
        pub.publish_score(make_score(call, 0))
    assert not pub.flush(0.3)
    assert pub.pending >= 10
    pub.close(timeout_s=0.1)  # the process stops with alerts still waiting

    redis_server.start()
    pub2 = AlertPublisher(redis.Redis.from_url(url), settings)  # same outbox file
    pub2.start()
    assert pub2.flush(10)
    pub2.close()
    assert _alerts(client, keys) == [event_id(make_alert(c)) for c in range(1, 12)]
    assert client.xlen(keys.scores) == 10


def test_overflow_drops_scores_first_and_never_alerts(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "o.sqlite3", max_entries=10)
    scores = [Entry("score", f"s{i}") for i in range(8)]
    assert outbox.append(scores).dropped == 0
    result = outbox.append([Entry("alert", f"a{i}", f"al{i}", 1) for i in range(5)])
    assert (result.dropped, result.overflow) == (3, False)
    more = [Entry("alert", f"a{i}", f"al{i}", 1) for i in range(5, 11)]
    result = outbox.append([*more, Entry("score", "late")])
    assert result.overflow and result.dropped == 6  # every old score and the new one
    kinds = [e.payload for e in outbox.head(100)]
    assert kinds == [f"a{i}" for i in range(11)]
    assert len(outbox) == 11 and outbox.alerts == 11
    outbox.close()
    reopened = Outbox(tmp_path / "o.sqlite3", max_entries=10)
    assert [e.payload for e in reopened.head(100)] == kinds  # persisted
    reopened.close()


def test_publisher_raises_outbox_overflow(settings: BusSettings, tmp_path: Path) -> None:
    small = settings.model_copy(update={"outbox_max_entries": 10})
    dead = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    pub = AlertPublisher(dead, small, outbox=Outbox(tmp_path / "small.sqlite3", 10))
    pub.start()
    for i in range(20):
        pub.publish_score(make_score(1, i))
    for c in range(12):
        pub.publish_alert(make_alert(c))
    assert not pub.flush(0.5)
    assert pub.stats.outbox_overflow
    assert pub.pending == 12  # every alert kept, every score dropped
    assert pub.stats.scores_dropped == 20
    pub.close(timeout_s=0.1)
