"""The real webhook dispatcher driven to quiescence on a virtual clock (the durable
lane's days pass in a moment): how the dashboard tests get real deliveries, attempts in
the log and dead letters."""

from __future__ import annotations

import asyncio
import random

import redis.asyncio
from cryptography.fernet import Fernet

from detectors.bus.settings import BusSettings
from detectors.bus.webhooks.dispatcher import Dispatcher
from detectors.bus.webhooks.schedule import RetryPolicy, VirtualClock
from detectors.bus.webhooks.secrets import load_key


def deliver_all(bus: BusSettings, clock: VirtualClock, max_steps: int = 2000) -> dict[str, int]:
    """Intake and deliver until nothing is queued; the dispatcher's stats."""
    settings = bus.model_copy(update={"webhook_claim_idle_ms": 1})
    url = settings.redis_url.get_secret_value()  # type: ignore[union-attr]
    key: Fernet = load_key(settings)
    policy = RetryPolicy(rng=random.Random(7), realtime_timeout_s=2, durable_timeout_s=2)

    async def go() -> dict[str, int]:
        d = Dispatcher(redis.asyncio.Redis.from_url(url), settings, key, clock, policy, "t1")
        try:
            await d.setup()
            for _ in range(max_steps):
                await d.intake()
                await d.deliver_due()
                nxt = await d.queue.next_due()
                if nxt is None:
                    return d.stats
                if nxt > clock.now():
                    clock.advance(nxt - clock.now())
            raise AssertionError("deliveries did not finish")
        finally:
            await d.aclose()

    return asyncio.run(go())
