"""The webhook dispatcher (``callshield webhooks run``): alerts and system events in
through a consumer group, deliveries out per Standard Webhooks (DESIGN.md §6).

Intake: ``XREADGROUP`` on the alert stream and the system-event stream (coverage
degraded/recovered; ordered per node); each becomes one delivery per
matching enabled endpoint (``detectors.bus.webhooks.queue``, idempotent), and only then is the
entry ``XACK``ed. One dispatcher of the group reads at a time: it holds the intake's lease
(``webhook_claim_idle_ms``), renewed at every read, and only the holder may queue, so
two dispatchers never queue a call's revisions out of stream order; the others deliver.
Whoever gains the intake (a dispatcher after another's lease ran out, a restarted one,
one whose last turn failed mid-batch) first takes every entry read and never
acknowledged (``XAUTOCLAIM``) and queues those, oldest first, before reading anything
new; the enqueue is a no-op for what was already queued.

Delivery: queue heads whose time has come are claimed with a lease and tried; a
success pops the head (per-call order), a failure schedules the next try on the
real-time then the durable lane (``detectors.bus.webhooks.schedule``), 410 disables the endpoint
(its queues are parked, nothing is dropped), exhaustion moves the event to the
dead-letter set, from where it can be replayed. Every attempt goes to the log stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from datetime import UTC, datetime
from typing import Any

import redis.asyncio
from cryptography.fernet import Fernet

from detectors.alert_schema import Alert, SystemEvent
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings
from detectors.bus.webhooks.payload import envelope_json, event_type, matches, message_id, parse
from detectors.bus.webhooks.queue import Delivery, DeliveryQueue, NotIntakeHolderError
from detectors.bus.webhooks.schedule import Clock, RetryPolicy, SystemClock
from detectors.bus.webhooks.sender import Sender
from detectors.bus.webhooks.store import Endpoint, wants

log = logging.getLogger(__name__)

Entries = list[tuple[bytes, dict[bytes, bytes]]]


def call_key(message: Alert | SystemEvent) -> str:
    """Ordering scope: the correlation id (one risk history per call) or the call id;
    a node's system events in order among themselves."""
    if isinstance(message, SystemEvent):
        return f"system:{message.node_id}"
    return message.correlation_id or message.call_id


class Dispatcher:
    def __init__(
        self,
        client: redis.asyncio.Redis,
        settings: BusSettings,
        key: Fernet,
        clock: Clock | None = None,
        policy: RetryPolicy | None = None,
        consumer: str | None = None,
    ) -> None:
        self._c = client
        self._s = settings
        self._k = Keys(settings.key_prefix)
        self._clock = clock or SystemClock()
        self._policy = policy or RetryPolicy(
            realtime_timeout_s=settings.webhook_realtime_timeout_s,
            durable_timeout_s=settings.webhook_durable_timeout_s,
        )
        self.consumer = consumer or settings.webhook_consumer or settings.node_id
        self.queue = DeliveryQueue(client, self._k)
        self.sender = Sender(key, settings.webhook_allow_private_targets)
        self._sem = asyncio.Semaphore(settings.webhook_concurrency)
        self._wake = asyncio.Event()
        # until a turn of the intake ends cleanly: a dispatcher that has just gained the
        # intake, or whose last turn failed between reading entries and acknowledging
        # them (Redis went away mid-batch), takes over every unacknowledged entry first
        self._unsettled = True
        self._busy: set[str] = set()  # queue heads with an attempt in flight here
        self.stats: dict[str, int] = {
            "intake": 0,
            "enqueued": 0,
            "reclaimed": 0,
            "recovered": 0,
            "bad_entries": 0,
            "attempts": 0,
            "delivered": 0,
            "dead": 0,
            "disabled": 0,
        }

    # --- intake -----------------------------------------------------------------------
    @property
    def streams(self) -> tuple[str, str]:
        return (self._k.alerts, self._k.system)

    async def setup(self) -> None:
        for stream in self.streams:
            try:
                await self._c.xgroup_create(stream, self._s.webhook_group, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def read_new(
        self, block_ms: int | None = None, count: int = 100, stream: str | None = None
    ) -> Entries:
        """New entries of one stream (default: the alerts)."""
        return (await self.read_streams(block_ms, count, (stream or self._k.alerts,)))[
            stream or self._k.alerts
        ]

    async def read_streams(
        self, block_ms: int | None = None, count: int = 100, streams: tuple[str, ...] = ()
    ) -> dict[str, Entries]:
        """New entries of every stream (default: alerts and system events), one call."""
        names = streams or self.streams
        got: Any = await self._c.xreadgroup(
            self._s.webhook_group,
            self.consumer,
            dict.fromkeys(names, ">"),
            count=count,
            block=block_ms,
        )
        out: dict[str, Entries] = {name: [] for name in names}
        for name, entries in got or []:
            out[name.decode() if isinstance(name, bytes) else name] = list(entries)
        return out

    async def recover(self) -> int:
        """The entries this consumer read (in this life or an earlier one) but never
        acknowledged, queued oldest first, before anything new so per-call order holds."""
        n = 0
        for stream in self.streams:
            start: bytes | str = "0"
            while True:
                got: Any = await self._c.xreadgroup(
                    self._s.webhook_group, self.consumer, {stream: start}, count=100
                )
                entries: Entries = list(got[0][1]) if got else []
                if not entries:
                    break
                start = entries[-1][0]
                gone = [i for i, f in entries if not f]  # trimmed away meanwhile
                if gone:
                    await self._c.xack(stream, self._s.webhook_group, *gone)
                live = [(i, f) for i, f in entries if f]
                await self.process(live, stream=stream)
                n += len(live)
        self.stats["recovered"] += n
        return n

    async def reclaim(self, stream: str) -> int:
        """Make every entry of ``stream`` that other consumers read and never acknowledged
        this one's (``recover`` then queues them); how many there were."""
        n = 0
        start = "0-0"
        while True:
            reply: Any = await self._c.xautoclaim(
                stream, self._s.webhook_group, self.consumer, 0, start_id=start, count=100
            )
            start = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
            n += sum(1 for _, f in reply[1] if f)  # deleted entries come back empty
            if start == "0-0":
                break
        self.stats["reclaimed"] += n
        return n

    async def process(self, entries: Entries, ack: bool = True, stream: str | None = None) -> int:
        """Queue a delivery per matching endpoint for each entry of ``stream`` (default:
        the alerts), then XACK them."""
        if not entries:
            return 0
        endpoints = [e for e in await self.endpoints() if e.enabled]
        now = self._clock.now()
        queued = 0
        for _entry_id, fields in entries:
            try:
                message = decode(fields)
                if not isinstance(message, Alert | SystemEvent):
                    raise ValueError(f"{message.kind!r} is not delivered by webhooks")
            except ValueError as exc:
                self.stats["bad_entries"] += 1
                log.warning("stream entry dropped: %s", exc)
                continue
            body = message.model_dump_json()
            tenant = message.tenant if isinstance(message, Alert) else None
            for ep in endpoints:
                if not wants(ep, tenant):
                    continue
                if matches(event_type(message), ep.event_types) and await self.queue.enqueue(
                    ep.id, message_id(message), call_key(message), body, now, self.consumer
                ):
                    queued += 1
        if ack:
            await self._c.xack(
                stream or self._k.alerts, self._s.webhook_group, *[i for i, _ in entries]
            )
        self.stats["intake"] += len(entries)
        self.stats["enqueued"] += queued
        if queued:
            self._wake.set()
        return queued

    async def take_over(self) -> int:
        """Every entry of the group read and never acknowledged becomes this consumer's
        (idle or not: only the intake's holder reads, and that is this one now), then
        they are queued oldest first."""
        for stream in self.streams:
            await self.reclaim(stream)
        return await self.recover()

    async def intake(self, block_ms: int | None = None) -> int:
        """One turn: renew (or wait for) the intake, take over what is unacknowledged
        when this turn follows no clean one, read and queue what is new."""
        if not await self.queue.lead(self.consumer, self._s.webhook_claim_idle_ms):
            self._unsettled = True  # another reads; when this one gains it: take over
            if block_ms:
                await asyncio.sleep(block_ms / 1000)
            return 0
        n = 0
        if self._unsettled:
            n += await self.take_over()
        self._unsettled = True
        for stream, entries in (await self.read_streams(block_ms)).items():
            n += await self.process(entries, stream=stream)
        self._unsettled = False
        return n

    # --- delivery ---------------------------------------------------------------------
    async def endpoints(self) -> list[Endpoint]:
        raw = await self._c.hgetall(self._k.wh_endpoints)
        return [Endpoint.model_validate_json(v) for v in raw.values()]

    @property
    def _lease_s(self) -> float:
        return self._s.webhook_claim_lease_s or self._policy.durable_timeout_s + 30.0

    async def deliver_due(self, limit: int = 256) -> int:
        """Try every queue head that is due now and wait for the attempts; returns how
        many were tried (the tests' step; ``run`` does not wait, see ``_start_due``)."""
        members = await self.queue.claim(self._clock.now(), self._lease_s, limit)
        await asyncio.gather(*(self._deliver(m) for m in members))
        return len(members)

    async def _start_due(self, inflight: set[asyncio.Task[None]]) -> None:
        """Claim due queue heads and start their attempts without waiting for them, so
        one slow receiver does not hold back the others' next deliveries. A head whose
        lease ran out while its attempt still waits or runs here is not tried twice at
        once: that attempt's outcome reschedules it."""
        room = min(256, 4 * self._s.webhook_concurrency - len(inflight))
        if room <= 0:
            return
        for m in await self.queue.claim(self._clock.now(), self._lease_s, room):
            if m in self._busy:
                continue
            self._busy.add(m)
            task = asyncio.create_task(self._deliver(m))
            inflight.add(task)
            task.add_done_callback(functools.partial(self._attempt_done, m=m, inflight=inflight))

    def _attempt_done(
        self, task: asyncio.Task[None], m: str, inflight: set[asyncio.Task[None]]
    ) -> None:
        inflight.discard(task)
        self._busy.discard(m)
        self._wake.set()
        if not task.cancelled() and task.exception() is not None:
            # Redis went away mid-attempt: the claim's lease brings the head back
            log.warning("webhook attempt failed: %r", task.exception())

    async def _deliver(self, m: str) -> None:
        async with self._sem:
            d = await self.queue.head(m)
            if d is None:
                return
            raw = await self._c.hget(self._k.wh_endpoints, d.endpoint_id)
            if raw is None:
                if await self.queue.finish(d, self._clock.now(), "dead", reason="endpoint deleted"):
                    self.stats["dead"] += 1
                return
            endpoint = Endpoint.model_validate_json(raw)
            if not endpoint.enabled:
                await self.queue.park(d)
                return
            await self._attempt(endpoint, d)

    async def _attempt(self, endpoint: Endpoint, d: Delivery) -> None:
        message = parse(d.alert_json)
        started = self._clock.now()
        expires = message.expires_at if isinstance(message, Alert) else None
        expired = expires is not None and datetime.now(UTC) > expires
        stale = expired or started - d.created > self._s.webhook_stale_after_s
        lane = self._policy.lane(d.attempts)
        result = await self.sender.send(
            endpoint, d.event_id, envelope_json(message, stale), self._policy.timeout(d.attempts)
        )
        attempts = d.attempts + 1
        self.stats["attempts"] += 1
        now = self._clock.now()
        await self.queue.log(
            {
                "endpoint": endpoint.id,
                "event_id": d.event_id,
                "attempt": attempts,
                "lane": lane,
                "status": result.status or 0,
                "error": result.error[:300],
                "stale": int(stale),
                "elapsed_ms": round(result.elapsed_s * 1000, 3),
                "at": now,
            }
        )
        if result.ok:
            if await self.queue.finish(
                d, now, "delivered", attempts=str(attempts), stale=str(int(stale))
            ):
                self.stats["delivered"] += 1
        elif result.status == 410:
            await self._disable(endpoint, "410 Gone")
            await self.queue.retry_at(d, now, attempts, result.error)
            await self.queue.park(d)
        else:
            throttled = result.status in (429, 502, 503, 504)
            delay = self._policy.delay_after(attempts, result.retry_after if throttled else None)
            if delay is None:
                if await self.queue.finish(
                    d, now, "dead", attempts=str(attempts), last_error=result.error[:300]
                ):
                    self.stats["dead"] += 1
                    log.warning("webhook %s to %s dead-lettered", d.event_id, endpoint.id)
            else:
                await self.queue.retry_at(d, now + delay, attempts, result.error)

    async def _disable(self, endpoint: Endpoint, reason: str) -> None:
        updated = endpoint.model_copy(update={"enabled": False, "disabled_reason": reason})
        await self._c.hset(self._k.wh_endpoints, endpoint.id, updated.model_dump_json())
        self.stats["disabled"] += 1
        log.warning("webhook endpoint %s disabled: %s", endpoint.id, reason)

    # --- the process ----------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        await self.setup()
        intake = asyncio.create_task(self._intake_loop(stop))
        inflight: set[asyncio.Task[None]] = set()
        try:
            while not stop.is_set():
                if intake.done():  # not Redis going away (that it retries): a defect
                    intake.result()
                    raise RuntimeError("the webhook intake stopped")
                self._wake.clear()  # before looking: a wake-up during the look is kept
                try:
                    await self._start_due(inflight)
                    next_due = await self.queue.next_due()
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    # Redis restarting: what was claimed comes back when its lease ends
                    log.warning("redis unavailable to the webhook delivery: %s", exc)
                    await asyncio.sleep(0.5)
                    continue
                wait = 0.5 if next_due is None else next_due - self._clock.now()
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), timeout=min(wait, 0.5))
        finally:
            intake.cancel()
            await asyncio.gather(intake, return_exceptions=True)
            if inflight:  # let started attempts finish and record their outcome
                _, late = await asyncio.wait(inflight, timeout=self._policy.durable_timeout_s)
                for task in late:
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
            await self.aclose()

    async def aclose(self) -> None:
        await self.sender.aclose()

    async def _intake_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.intake(block_ms=500)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("redis unavailable to the webhook intake: %s", exc)
                await asyncio.sleep(0.5)
            except NotIntakeHolderError:
                log.warning("another dispatcher took over the intake mid-batch")
