"""R3/R4: the webhook dispatcher against a real redis-server and a real HTTP receiver on
127.0.0.1, with a virtual clock for the durable lane (days pass in a moment)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio
from alert_factory import make_alert
from cryptography.fernet import Fernet
from pydantic import SecretStr
from receiver import Receiver, ids_by_call

from detectors.alert_schema import Alert, event_id
from detectors.bus.codec import encode
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings
from detectors.bus.webhooks.dispatcher import Dispatcher
from detectors.bus.webhooks.queue import NotIntakeHolderError
from detectors.bus.webhooks.schedule import RetryPolicy, VirtualClock
from detectors.bus.webhooks.store import EndpointStore


@pytest.fixture
def wh_settings(settings: BusSettings) -> BusSettings:
    return settings.model_copy(
        update={
            "webhook_key": SecretStr(Fernet.generate_key().decode()),
            "webhook_allow_private_targets": True,
            "webhook_claim_idle_ms": 1,
        }
    )


@pytest.fixture
def store(wh_settings: BusSettings, client: redis.Redis) -> EndpointStore:
    key = Fernet(wh_settings.webhook_key.get_secret_value())  # type: ignore[union-attr]
    return EndpointStore(client, Keys(wh_settings.key_prefix), key, True)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _publish(client: redis.Redis, settings: BusSettings, alerts: list[Alert]) -> list[str]:
    keys = Keys(settings.key_prefix)
    for a in alerts:
        client.xadd(keys.alerts, encode(a))  # type: ignore[arg-type]
    return [event_id(a) for a in alerts]


def _alerts(calls: int, revisions: int) -> list[Alert]:
    # interleaved calls, each escalating revision by revision
    return [make_alert(c, revision=r) for r in range(1, revisions + 1) for c in range(calls)]


def _dispatcher(settings: BusSettings, clock: VirtualClock, consumer: str = "d1") -> Dispatcher:
    url = settings.redis_url.get_secret_value()  # type: ignore[union-attr]
    key = Fernet(settings.webhook_key.get_secret_value())  # type: ignore[union-attr]
    policy = RetryPolicy(rng=random.Random(7), realtime_timeout_s=2, durable_timeout_s=2)
    return Dispatcher(
        redis.asyncio.Redis.from_url(url), settings, key, clock, policy, consumer=consumer
    )


def _run(settings: BusSettings, clock: VirtualClock, consumer: str = "d1") -> Dispatcher:
    """Drive a fresh dispatcher until nothing is queued (its own event loop)."""
    d = _dispatcher(settings, clock, consumer)

    async def go() -> None:
        try:
            await _drive(d, clock)
        finally:
            await d.aclose()

    asyncio.run(go())
    return d


async def _drive(d: Dispatcher, clock: VirtualClock, max_steps: int = 5000) -> int:
    """Intake and deliver until nothing is queued, jumping the clock to each next due
    time; returns the steps taken (bounded: the test cannot hang)."""
    await d.setup()
    for step in range(max_steps):
        await d.intake()
        await d.deliver_due()
        nxt = await d.queue.next_due()
        if nxt is None:
            return step
        if nxt > clock.now():
            clock.advance(nxt - clock.now())
    raise AssertionError("deliveries did not finish")


def _one_receiver(settings: BusSettings, store: EndpointStore, receiver: Receiver) -> BusSettings:
    """One endpoint, and the intake's lease an hour long: only what the test does moves
    the intake from one dispatcher to another."""
    _, secret = store.add(receiver.url, allow_private=True)
    receiver.secrets = [secret]
    return settings.model_copy(update={"webhook_claim_idle_ms": 3_600_000})


def _in_order_once(
    receiver: Receiver, published: list[str], client: redis.Redis, settings: BusSettings
) -> None:
    """Every revision delivered once, each call's 1 before its 2, nothing left pending."""
    assert set(receiver.first) == set(published) and receiver.duplicates == 0
    for call, ids in ids_by_call(receiver).items():
        assert [i.rsplit(".r", 1)[1] for i in ids] == ["1", "2"], call
    assert client.xpending(Keys(settings.key_prefix).alerts, "webhooks")["pending"] == 0


def test_flaky_receiver_gets_everything_once_in_order(
    wh_settings: BusSettings, client: redis.Redis, store: EndpointStore, receiver: Receiver
) -> None:
    _, secret = store.add(receiver.url, allow_private=True)
    receiver.secrets, receiver.fail_rate = [secret], 0.5
    published = _publish(client, wh_settings, _alerts(calls=10, revisions=4))
    clock = VirtualClock()
    d = _run(wh_settings, clock)
    assert set(receiver.first) == set(published)
    assert receiver.bad_signatures == 0
    assert d.stats["attempts"] > len(published)  # failures were retried
    assert d.stats["dead"] == 0
    for call, ids in ids_by_call(receiver).items():
        assert ids == [i for i in published if i in ids], call  # publish order per call
        assert [int(i.rsplit(".r", 1)[1]) for i in ids] == sorted(
            int(i.rsplit(".r", 1)[1]) for i in ids
        )
    keys = Keys(wh_settings.key_prefix)
    assert client.xpending(keys.alerts, "webhooks")["pending"] == 0
    assert client.xlen(keys.wh_log) == d.stats["attempts"]


def test_receiver_down_for_a_day_then_everything_arrives_marked_stale(
    wh_settings: BusSettings, client: redis.Redis, store: EndpointStore, receiver: Receiver
) -> None:
    _, secret = store.add(receiver.url, event_types=("call.alert.*",), allow_private=True)
    receiver.secrets, receiver.status = [secret], 503
    published = _publish(client, wh_settings, _alerts(calls=5, revisions=2))
    clock = VirtualClock()
    d = _dispatcher(wh_settings, clock)
    t0 = clock.now()

    async def scenario() -> None:
        await d.setup()
        while clock.now() - t0 < 26 * 3600:  # down for 26 virtual hours
            await d.intake()
            await d.deliver_due()
            nxt = await d.queue.next_due()
            assert nxt is not None
            clock.advance(max(nxt - clock.now(), 0.0) + 0.001)
        receiver.status = None
        await _drive(d, clock)
        await d.aclose()

    asyncio.run(scenario())
    assert set(receiver.first) == set(published)
    assert receiver.duplicates == 0 and receiver.bad_signatures == 0
    assert all(p["stale"] for p in receiver.first.values())
    assert d.stats["dead"] == 0
    assert clock.now() - t0 < 4 * 86400  # within the durable lane's horizon


def test_exhausted_delivery_is_dead_lettered_and_replayed(
    wh_settings: BusSettings, client: redis.Redis, store: EndpointStore, receiver: Receiver
) -> None:
    ep, secret = store.add(receiver.url, allow_private=True)
    receiver.secrets, receiver.status = [secret], 500
    alert = make_alert(1)
    _publish(client, wh_settings, [alert])
    clock = VirtualClock()
    d = _run(wh_settings, clock)
    keys = Keys(wh_settings.key_prefix)
    dead_key = keys.wh_delivery(ep.id, event_id(alert))
    assert client.zrange(keys.wh_dead, 0, -1) == [dead_key.encode()]
    assert d.stats["attempts"] == RetryPolicy().max_attempts
    receiver.status = None

    async def replay() -> int:
        d2 = _dispatcher(wh_settings, clock)
        r = await d2.queue.replay(ep.id, event_id(alert), alert.call_id, clock.now())
        assert await d2.queue.replay(ep.id, event_id(alert), alert.call_id, clock.now()) == -1
        await _drive(d2, clock)
        await d2.aclose()
        return r

    assert asyncio.run(replay()) == 1
    assert list(receiver.first) == [event_id(alert)]
    assert client.zcard(keys.wh_dead) == 0
    assert client.hget(dead_key, "replays") == b"1"


def test_410_disables_the_endpoint_and_parks_its_queue(
    wh_settings: BusSettings, client: redis.Redis, store: EndpointStore, receiver: Receiver
) -> None:
    ep, secret = store.add(receiver.url, allow_private=True)
    receiver.secrets, receiver.status = [secret], 410
    published = _publish(client, wh_settings, _alerts(calls=2, revisions=2))
    clock = VirtualClock()
    _run(wh_settings, clock)
    disabled = store.get(ep.id)
    assert disabled is not None and not disabled.enabled
    assert disabled.disabled_reason == "410 Gone"
    assert receiver.first == {}
    receiver.status = None
    store.set_enabled(ep.id, True)
    _run(wh_settings, clock)
    assert set(receiver.first) == set(published)


def test_dispatcher_crash_mid_batch_is_reclaimed_and_delivered_once(
    wh_settings: BusSettings, client: redis.Redis, store: EndpointStore, receiver: Receiver
) -> None:
    _, secret = store.add(receiver.url, allow_private=True)
    receiver.secrets = [secret]
    published = _publish(client, wh_settings, _alerts(calls=6, revisions=3))
    clock = VirtualClock()
    keys = Keys(wh_settings.key_prefix)

    async def crash() -> None:
        first = _dispatcher(wh_settings, clock, consumer="crashed")
        await first.setup()
        batch = await first.read_new(count=10)
        # the crash: half the batch queued for delivery, nothing acknowledged
        await first.process(batch[:5], ack=False)
        await first.aclose()

    asyncio.run(crash())
    assert client.xpending(keys.alerts, "webhooks")["pending"] == 10
    d = _run(wh_settings, clock, consumer="survivor")
    assert d.stats["reclaimed"] == 10
    assert set(receiver.first) == set(published)
    assert receiver.duplicates == 0
    assert client.xpending(keys.alerts, "webhooks")["pending"] == 0


def test_rotation_signs_with_both_secrets_during_the_overlap(
    wh_settings: BusSettings, client: redis.Redis, store: EndpointStore, receiver: Receiver
) -> None:
    ep, old = store.add(receiver.url, allow_private=True)
    new = store.rotate(ep.id)
    receiver.secrets = [old]  # a receiver not yet switched still verifies
    _publish(client, wh_settings, [make_alert(1)])
    clock = VirtualClock()
    _run(wh_settings, clock)
    assert len(receiver.first) == 1
    receiver.secrets, receiver.first, receiver.order = [new], {}, []
    _publish(client, wh_settings, [make_alert(2)])
    _run(wh_settings, clock)
    assert len(receiver.first) == 1 and receiver.bad_signatures == 0


def test_restarted_dispatcher_queues_its_own_unacked_entries_before_new_ones(
    wh_settings: BusSettings, client: redis.Redis, store: EndpointStore, receiver: Receiver
) -> None:
    settings = _one_receiver(wh_settings, store, receiver)
    first = _publish(client, settings, [make_alert(c, revision=1) for c in range(4)])
    clock = VirtualClock()

    async def killed() -> None:  # read, then died before queueing or acknowledging
        d = _dispatcher(settings, clock, consumer="d1")
        await d.setup()
        assert len(await d.read_new(count=10)) == 4
        await d.aclose()

    asyncio.run(killed())
    later = _publish(client, settings, [make_alert(c, revision=2) for c in range(4)])

    async def restarted() -> None:  # the same consumer name, as a restarted process
        d = _dispatcher(settings, clock, consumer="d1")
        await d.setup()
        assert await d.recover() == 4
        await _drive(d, clock)
        await d.aclose()

    asyncio.run(restarted())
    _in_order_once(receiver, first + later, client, settings)


def test_intake_that_failed_mid_batch_queues_those_entries_before_newer_ones(
    wh_settings: BusSettings,
    client: redis.Redis,
    store: EndpointStore,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Redis went away after XREADGROUP handed the batch over and before it was queued:
    # the same process goes on reading, and the next revisions of those calls must not
    # overtake the stranded ones (they stay pending: no other dispatcher takes them)
    settings = _one_receiver(wh_settings, store, receiver)
    clock = VirtualClock()

    async def scenario() -> tuple[list[str], list[str]]:
        d = _dispatcher(settings, clock)
        await d.setup()
        assert await d.intake() == 0  # the periodic reclaim's first turn: nothing yet
        first = _publish(client, settings, [make_alert(c, revision=1) for c in range(4)])
        real = d.queue.enqueue

        async def gone(*args: object, **kwargs: object) -> bool:
            raise redis.ConnectionError("Connection closed by server.")

        monkeypatch.setattr(d.queue, "enqueue", gone)
        with pytest.raises(redis.ConnectionError):
            await d.intake()
        monkeypatch.setattr(d.queue, "enqueue", real)
        later = _publish(client, settings, [make_alert(c, revision=2) for c in range(4)])
        await _drive(d, clock)
        await d.aclose()
        return first, later

    first, later = asyncio.run(scenario())
    _in_order_once(receiver, first + later, client, settings)


def test_a_late_second_attempt_of_a_head_neither_pops_nor_delays_the_next_event(
    wh_settings: BusSettings, client: redis.Redis
) -> None:
    # Two attempts of one head: the claim's lease ran out while the first was still
    # sending, so the head was claimed again. The first delivers and the queue moves on;
    # the second then ends too. It must not take the next event with it (lost, marked
    # delivered) nor push that event's due time back.
    clock = VirtualClock()
    keys = Keys(wh_settings.key_prefix)

    async def scenario() -> None:
        d = _dispatcher(wh_settings, clock)
        q = d.queue
        now = clock.now()
        for rev in (1, 2):
            assert await q.enqueue("ep", f"call-7.r{rev}", "call-7", "{}", now, "d1")
        first = await q.head("ep|call-7")
        second = await q.head("ep|call-7")
        assert first is not None and first == second
        assert await q.finish(first, now + 1, "delivered")
        assert not await q.finish(second, now + 2, "delivered")  # the late one
        assert not await q.retry_at(second, now + 999, 2, "503")
        nxt = await q.head("ep|call-7")
        assert nxt is not None and nxt.event_id == "call-7.r2" and nxt.attempts == 0
        assert await q.next_due() == now + 1  # due when the first attempt finished
        assert await q.retry_at(nxt, now + 5, 1, "503")  # its own failure does move it
        assert await q.next_due() == now + 5
        await d.aclose()

    asyncio.run(scenario())
    assert client.hget(keys.wh_delivery("ep", "call-7.r2"), "status") == b"pending"


def test_a_head_whose_lease_ran_out_mid_attempt_is_not_tried_twice_at_once(
    wh_settings: BusSettings, client: redis.Redis, store: EndpointStore, receiver: Receiver
) -> None:
    settings = wh_settings.model_copy(update={"webhook_claim_lease_s": 0.01})
    _, secret = store.add(receiver.url, allow_private=True)
    receiver.secrets, receiver.delay_s = [secret], 0.5  # each attempt outlives the lease
    published = _publish(client, settings, [make_alert(1)])
    clock = VirtualClock()

    async def scenario() -> int:
        d = _dispatcher(settings, clock)
        await d.setup()
        await d.intake()
        inflight: set[asyncio.Task[None]] = set()
        await d._start_due(inflight)
        assert len(inflight) == 1
        clock.advance(1.0)  # the lease is long gone, the attempt is not
        await d._start_due(inflight)
        started = len(inflight)
        await asyncio.gather(*inflight)
        await d.aclose()
        return started

    assert asyncio.run(scenario()) == 1
    assert list(receiver.first) == published and receiver.requests == 1


def test_two_dispatchers_keep_per_call_order_and_a_paused_reader_queues_nothing(
    wh_settings: BusSettings, client: redis.Redis, store: EndpointStore, receiver: Receiver
) -> None:
    # Scaled out: two dispatchers in one group. Were both reading, one could hold a
    # call's first revision while the other queues and delivers its second. One reads
    # at a time; here the reader pauses holding a batch, its lease runs out, the other
    # takes over the intake with that batch first, and the paused one, resuming, is
    # refused its now stale batch.
    settings = _one_receiver(wh_settings, store, receiver)
    clock = VirtualClock()
    keys = Keys(settings.key_prefix)

    async def scenario() -> tuple[list[str], list[str]]:
        a = _dispatcher(settings, clock, consumer="a")
        b = _dispatcher(settings, clock, consumer="b")
        await a.setup()
        assert await a.intake() == 0  # a holds the intake
        first = _publish(client, settings, [make_alert(c, revision=1) for c in range(4)])
        batch = await a.read_new()  # read, then paused before queueing
        assert len(batch) == 4
        assert await b.intake() == 0 and await b.queue.next_due() is None  # b waits
        client.delete(keys.wh_intake)  # a's lease runs out
        later = _publish(client, settings, [make_alert(c, revision=2) for c in range(4)])
        assert await b.intake() == 8  # a's batch, then what is new
        assert b.stats["reclaimed"] == 4
        with pytest.raises(NotIntakeHolderError):
            await a.process(batch)  # a resumes: refused, acknowledges nothing
        assert await a.intake() == 0  # and reads nothing while b holds the intake
        await _drive(b, clock)
        await a.aclose()
        await b.aclose()
        return first, later

    first, later = asyncio.run(scenario())
    _in_order_once(receiver, first + later, client, settings)
