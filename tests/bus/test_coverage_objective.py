"""The coverage objective (DESIGN §8): which ended calls count as covered, one system
event per transition, and the ``system.coverage.degraded`` webhook delivered to a real
HTTP receiver from ended events that went through a real redis-server."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio
from coverage_factory import SA, SV, ended
from cryptography.fernet import Fernet
from pydantic import SecretStr
from receiver import Receiver

from detectors.alert_schema import CallEvent, Dimension, SystemEvent
from detectors.bus.codec import decode
from detectors.bus.coverage_objective import CoverageRule, CoverageTracker, Objective
from detectors.bus.coverage_report import read_ended
from detectors.bus.keys import Keys
from detectors.bus.publisher import AlertPublisher
from detectors.bus.settings import BusSettings
from detectors.bus.webhooks.dispatcher import Dispatcher
from detectors.bus.webhooks.schedule import RetryPolicy
from detectors.bus.webhooks.store import EndpointStore


def test_what_counts_as_covered() -> None:
    rule = CoverageRule(2.0, {SA: 0.5})
    assert rule.covered(ended("c", 2.0).coverage, SV)
    assert not rule.covered(ended("c", 1.5).coverage, SV)  # too little speech
    assert rule.covered(ended("c", 1.5).coverage, SA)  # its own minimum
    assert not rule.covered(ended("c", shed=True).coverage, SV)
    assert not rule.covered(ended("c", media="none").coverage, SV)
    assert rule.covered(ended("c", media="one_way").coverage, SV)  # the external leg spoke
    assert not rule.covered(ended("c").coverage, Dimension.REPLAY)  # not run on the call
    assert not rule.covered(None, SV)


def _transitions(tracker: CoverageTracker, events: list[CallEvent]) -> list[tuple[int, str]]:
    out = []
    for i, e in enumerate(events):
        out += [(i, s.type) for s in tracker.observe(e)]
    return out


def test_one_event_per_transition_with_a_minimum_sample_and_hysteresis() -> None:
    tracker = CoverageTracker(
        [SV], "node-t", CoverageRule(2.0), Objective(0.9, window_calls=10, min_calls=5)
    )
    bad = [ended(f"b{i}", media="none", reason="rtp_timeout") for i in range(8)]
    good = [ended(f"g{i}") for i in range(10)]
    # judged from the 5th call on; then degraded stays degraded
    assert _transitions(tracker, bad) == [(4, "system.coverage.degraded")]
    # back at 0.9 is not enough (recovers at objective + 0.02): 10 of 10 covered
    assert _transitions(tracker, good) == [(9, "system.coverage.recovered")]
    assert _transitions(tracker, [ended("x", shed=True)]) == []  # 9 of 10: 0.9, not below
    [(_, kind)] = _transitions(tracker, [ended("y", 0.5)])  # 8 of 10
    assert kind == "system.coverage.degraded"
    snap = tracker.snapshot()
    assert snap.dimensions[SV].calls == 10 and snap.dimensions[SV].covered == 8
    assert snap.dimensions[SV].degraded
    assert snap.ended == {"rtp_timeout": 8, "bye": 12}
    assert (snap.no_media, snap.one_way, snap.shed) == (8, 0, 1)
    assert tracker.observe(ended("z").model_copy(update={"event": "started"})) == []


@pytest.fixture
def wh_settings(settings: BusSettings) -> BusSettings:
    return settings.model_copy(
        update={
            "webhook_key": SecretStr(Fernet.generate_key().decode()),
            "webhook_allow_private_targets": True,
        }
    )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _deliver_all(settings: BusSettings, key: Fernet) -> Dispatcher:
    url = settings.redis_url.get_secret_value()  # type: ignore[union-attr]
    policy = RetryPolicy(rng=random.Random(3), realtime_timeout_s=2, durable_timeout_s=2)
    d = Dispatcher(redis.asyncio.Redis.from_url(url), settings, key, policy=policy)

    async def go() -> None:
        await d.setup()
        try:
            for _ in range(200):
                await d.intake(block_ms=20)
                await d.deliver_due()
                if await d.queue.next_due() is None and d.stats["delivered"] >= 2:
                    return
        finally:
            await d.aclose()

    asyncio.run(go())
    return d


def test_degraded_and_recovered_webhooks_reach_a_real_receiver(
    wh_settings: BusSettings, client: redis.Redis, receiver: Receiver
) -> None:
    keys = Keys(wh_settings.key_prefix)
    fernet = Fernet(wh_settings.webhook_key.get_secret_value())  # type: ignore[union-attr]
    store = EndpointStore(client, keys, fernet, True)
    _, secret = store.add(receiver.url, ("system.coverage.*",), allow_private=True)
    other = Receiver()
    _, other_secret = store.add(other.url, ("call.alert.*",), allow_private=True)
    receiver.secrets, other.secrets = [secret], [other_secret]
    publisher = AlertPublisher(client, wh_settings)
    publisher.start()
    try:
        # the bridge publishes ended events; the tracker reads them back from the stream
        calls = [ended(f"ok{i}") for i in range(6)] + [
            ended(f"cut{i}", shed=True) for i in range(2)
        ]
        calls += [ended(f"back{i}") for i in range(10)]
        for e in calls:
            publisher.publish_event(e)
        assert publisher.flush(10)
        sec, usec = client.time()
        got, bad = read_ended(client, keys, 60, sec * 1000 + usec // 1000)
        assert bad == 0 and [e.call_id for e in got] == [e.call_id for e in calls]
        tracker = CoverageTracker(
            [SV],
            "node-t",
            CoverageRule.from_settings(wh_settings),
            Objective(0.95, window_calls=10, min_calls=5),
        )
        for e in got:
            for system_event in tracker.observe(e):
                publisher.publish_system(system_event)
        assert publisher.flush(10)
    finally:
        publisher.close()
    assert publisher.stats.system_published == 2
    d = _deliver_all(wh_settings, fernet)
    other.close()
    assert receiver.bad_signatures == 0 and d.stats["bad_entries"] == 0
    payloads = [receiver.first[i] for i in receiver.order]
    assert [p["type"] for p in payloads] == [
        "system.coverage.degraded",
        "system.coverage.recovered",
    ]
    degraded, recovered = (SystemEvent.model_validate(p["data"]) for p in payloads)
    assert degraded.coverage is not None and recovered.coverage is not None
    assert degraded.coverage.dimension is SV and degraded.node_id == "node-t"
    assert (degraded.coverage.covered_calls, degraded.coverage.calls) == (6, 7)
    assert degraded.coverage.covered_ratio < 0.95 <= recovered.coverage.covered_ratio
    assert receiver.order == [degraded.event_id, recovered.event_id]  # webhook-id
    assert other.requests == 0  # an alerts-only endpoint gets no system events
    # the dashboard's banner reads the latest state per node and dimension
    state = client.hgetall(keys.system_state)
    assert list(state) == [b"system.coverage:node-t:synthetic_voice"]
    latest = decode({"kind": "system", "json": state[b"system.coverage:node-t:synthetic_voice"]})
    assert isinstance(latest, SystemEvent) and latest.type == "system.coverage.recovered"
    assert client.xpending(keys.system, "webhooks")["pending"] == 0
