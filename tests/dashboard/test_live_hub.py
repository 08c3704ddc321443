"""The live feed's fan-out (dashboard.live): one encoding per message, a bounded queue
per client, and a client that falls behind ends (the route closes it with 1013)."""

from __future__ import annotations

import asyncio

import redis.asyncio

from dashboard.live import LiveHub
from detectors.bus.keys import Keys


def _hub(size: int) -> LiveHub:
    return LiveHub(redis.asyncio.Redis(), Keys(prefix="t:"), size)


def test_each_message_is_encoded_once_for_every_client() -> None:
    async def go() -> None:
        hub = _hub(10)
        a, b = hub.connect(), hub.connect()
        hub.publish({"type": "triage", "alert_id": "a1", "status": "acknowledged"})
        got_a, got_b = a.queue.get_nowait(), b.queue.get_nowait()
        assert got_a is got_b  # the same text object: no per-client JSON
        assert got_a == '{"type":"triage","alert_id":"a1","status":"acknowledged"}'
        assert hub.fanned_out == 1

    asyncio.run(go())


def test_a_client_that_falls_behind_is_ended_and_the_others_keep_theirs() -> None:
    async def go() -> None:
        hub = _hub(3)
        slow, fast = hub.connect(), hub.connect()
        for i in range(3):
            hub.publish({"n": i})
            assert fast.queue.get_nowait() == f'{{"n":{i}}}'
        assert not slow.overflowed
        hub.publish({"n": 3})
        hub.publish({"n": 4})
        assert slow.overflowed
        got = [slow.queue.get_nowait() for _ in range(slow.queue.qsize())]
        assert got == ['{"n":0}', '{"n":1}', '{"n":2}', None]  # then the end marker, once
        assert not fast.overflowed
        assert [fast.queue.get_nowait() for _ in range(2)] == ['{"n":3}', '{"n":4}']
        hub.disconnect(slow)
        hub.publish({"n": 5})
        assert slow.queue.empty() and len(hub.clients) == 1

    asyncio.run(go())
