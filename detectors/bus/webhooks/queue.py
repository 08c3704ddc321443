"""Delivery state in Redis: one hash per (endpoint, event), one FIFO per (endpoint,
call) for per-call ordering, a due set of queue heads, a dead-letter set, an attempt
log. Every transition is one Lua script, so a crash between steps leaves nothing
half-done, and enqueueing the same event twice is a no-op (the intake may see an alert
again after XAUTOCLAIM).

A queue head is claimed by moving its due time forward by a lease: if the dispatcher
dies mid-send, the lease expires and the head is tried again (at least once; receivers
dedupe on ``webhook-id``). An attempt's outcome applies only while its event is still the
head, so a second attempt that ends after the first changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio

from detectors.bus.keys import Keys

# Only the intake's holder queues, or anyone while nobody holds it: a reader whose lease
# ran out mid-batch (paused) must not queue an old entry behind the newer ones that the
# next holder queued. KEYS: delivery, queue, due, intake. ARGV: endpoint, event_id,
# call_key, alert, now, member, consumer. Returns 1 queued, 0 already queued, -1 another
# dispatcher holds the intake.
_ENQUEUE = """
local holder = redis.call('GET', KEYS[4])
if holder and holder ~= ARGV[7] then return -1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'endpoint', ARGV[1], 'event_id', ARGV[2], 'call_key', ARGV[3],
  'alert', ARGV[4], 'attempts', 0, 'status', 'pending', 'created', ARGV[5])
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], 'NX', ARGV[5], ARGV[6])
return 1
"""

# Take or renew the intake. KEYS: intake. ARGV: consumer, lease ms. 1 held, 0 not.
_LEAD = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# KEYS: due. ARGV: now, lease_until, limit
_CLAIM = """
local m = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, x in ipairs(m) do redis.call('ZADD', KEYS[1], 'XX', ARGV[2], x) end
return m
"""

# Pop the head (delivered or dead) and schedule the next one; only while the head is
# still this event: a second attempt of the same head (its lease ran out mid-send) that
# ends after the first must not pop the event behind it, undelivered.
# KEYS: queue, due, delivery, dead. ARGV: member, now, status, delivery key, event_id,
# extra fields...
_ADVANCE = """
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[5] then return 0 end
redis.call('LPOP', KEYS[1])
redis.call('HSET', KEYS[3], 'status', ARGV[3], 'finished', ARGV[2])
for i = 6, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
if ARGV[3] == 'dead' then redis.call('ZADD', KEYS[4], ARGV[2], ARGV[4]) end
if redis.call('LLEN', KEYS[1]) > 0 then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return 1
"""

# A failed attempt: note it and move the head's due time; only while the head is still
# this event (a late second attempt must not delay the next one).
# KEYS: queue, due, delivery. ARGV: member, at, event_id, attempts, error
_RETRY = """
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[3], 'attempts', ARGV[4], 'last_error', ARGV[5])
redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[1])
return 1
"""

# KEYS: delivery, queue, due, dead. ARGV: event_id, now, member, delivery key
_REPLAY = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'status') == 'pending' then return -1 end
redis.call('HSET', KEYS[1], 'status', 'pending', 'attempts', 0, 'created', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'replays', 1)
redis.call('ZREM', KEYS[4], ARGV[4])
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], 'NX', ARGV[2], ARGV[3])
return 1
"""


def member(endpoint_id: str, call_key: str) -> str:
    return f"{endpoint_id}|{call_key}"


def split_member(m: str) -> tuple[str, str]:
    endpoint_id, _, call_key = m.partition("|")
    return endpoint_id, call_key


@dataclass(frozen=True, slots=True)
class Delivery:
    key: str
    endpoint_id: str
    event_id: str
    call_key: str
    alert_json: str
    attempts: int
    created: float


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


class NotIntakeHolderError(Exception):
    """Another dispatcher holds the intake now: this one's batch is not queued."""


class DeliveryQueue:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys) -> None:
        self._c = client
        self._k = keys
        self._enqueue = client.register_script(_ENQUEUE)
        self._lead = client.register_script(_LEAD)
        self._claim = client.register_script(_CLAIM)
        self._advance = client.register_script(_ADVANCE)
        self._retry = client.register_script(_RETRY)
        self._replay = client.register_script(_REPLAY)

    async def lead(self, consumer: str, lease_ms: int) -> bool:
        """Take or renew the intake for ``consumer``; False while another holds it."""
        return bool(await self._lead(keys=[self._k.wh_intake], args=[consumer, lease_ms]))

    async def enqueue(
        self,
        endpoint_id: str,
        event_id: str,
        call_key: str,
        alert_json: str,
        now: float,
        consumer: str,
    ) -> bool:
        """Queue one delivery (False: already queued). Raises ``NotIntakeHolderError`` while
        another consumer holds the intake."""
        k = self._k
        m = member(endpoint_id, call_key)
        created = await self._enqueue(
            keys=[
                k.wh_delivery(endpoint_id, event_id),
                k.wh_queue(endpoint_id, call_key),
                k.wh_due,
                k.wh_intake,
            ],
            args=[endpoint_id, event_id, call_key, alert_json, now, m, consumer],
        )
        if int(created) < 0:
            raise NotIntakeHolderError(consumer)
        return bool(created)

    async def claim(self, now: float, lease_s: float, limit: int) -> list[str]:
        got = await self._claim(keys=[self._k.wh_due], args=[now, now + lease_s, limit])
        return [_s(x) for x in got]

    async def head(self, m: str) -> Delivery | None:
        endpoint_id, call_key = split_member(m)
        event = await self._c.lindex(self._k.wh_queue(endpoint_id, call_key), 0)
        if event is None:
            await self._c.zrem(self._k.wh_due, m)
            return None
        key = self._k.wh_delivery(endpoint_id, _s(event))
        h = {_s(a): _s(b) for a, b in (await self._c.hgetall(key)).items()}
        return Delivery(
            key=key,
            endpoint_id=endpoint_id,
            event_id=_s(event),
            call_key=call_key,
            alert_json=h["alert"],
            attempts=int(h["attempts"]),
            created=float(h["created"]),
        )

    async def finish(self, d: Delivery, now: float, status: str, **fields: str) -> bool:
        """``status`` delivered or dead: pop the head, schedule the next event. False
        (nothing changed) when ``d`` is no longer the head: another attempt finished it."""
        k = self._k
        extra = [x for kv in fields.items() for x in kv]
        done = await self._advance(
            keys=[k.wh_queue(d.endpoint_id, d.call_key), k.wh_due, d.key, k.wh_dead],
            args=[member(d.endpoint_id, d.call_key), now, status, d.key, d.event_id, *extra],
        )
        return bool(done)

    async def retry_at(self, d: Delivery, at: float, attempts: int, error: str) -> bool:
        """Try ``d`` again at ``at``; False when it is no longer the head."""
        k = self._k
        done = await self._retry(
            keys=[k.wh_queue(d.endpoint_id, d.call_key), k.wh_due, d.key],
            args=[member(d.endpoint_id, d.call_key), at, d.event_id, attempts, error[:300]],
        )
        return bool(done)

    async def park(self, d: Delivery) -> None:
        """The endpoint is disabled: keep the queue, stop scheduling it."""
        m = member(d.endpoint_id, d.call_key)
        pipe = self._c.pipeline(transaction=True)
        pipe.sadd(self._k.wh_parked, m)
        pipe.zrem(self._k.wh_due, m)
        await pipe.execute()

    async def replay(self, endpoint_id: str, event_id: str, call_key: str, now: float) -> int:
        """Deliver a finished (delivered or dead) event again: 1 queued, 0 unknown,
        -1 still pending."""
        k = self._k
        key = k.wh_delivery(endpoint_id, event_id)
        result = await self._replay(
            keys=[key, k.wh_queue(endpoint_id, call_key), k.wh_due, k.wh_dead],
            args=[event_id, now, member(endpoint_id, call_key), key],
        )
        return int(result)

    async def log(self, fields: dict[str, str | int | float]) -> None:
        await self._c.xadd(self._k.wh_log, fields, maxlen=100_000, approximate=True)  # type: ignore[arg-type]

    async def next_due(self) -> float | None:
        first = await self._c.zrange(self._k.wh_due, 0, 0, withscores=True)
        return float(first[0][1]) if first else None
