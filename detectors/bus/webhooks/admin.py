"""Webhook endpoints and their delivery health for the dashboard (async, Redis only):
list, add, enable/disable, rotate, delete; per endpoint the queues waiting, parked and
dead-lettered and the newest attempt; the dead letters; replay.

The records and checks are the CLI's (``detectors.bus.webhooks.store``): the same SSRF
check and event-type filter at creation, the same parked-queue resume on enable, the
dispatcher's own replay script (``DeliveryQueue.replay``). Nothing here returns a
secret but the one a creation or rotation makes (once), nor a delivery's payload (the
alert it carries holds the caller's ids).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

import redis.asyncio
from cryptography.fernet import Fernet

from detectors.bus.keys import Keys
from detectors.bus.webhooks.queue import DeliveryQueue, split_member
from detectors.bus.webhooks.store import Endpoint, new_endpoint, rotated


class NoKeyError(RuntimeError):
    """Creating or rotating needs the secret-encryption key, which is not configured."""


@dataclass(frozen=True, slots=True)
class LastAttempt:
    at: float
    attempt: int
    lane: str
    status: int  # HTTP status; 0: no answer (timeout, refused, blocked)
    error: str
    elapsed_ms: float


@dataclass
class EndpointHealth:
    queued: int = 0  # per-call queues with a head waiting to be sent
    parked: int = 0  # queues held while the endpoint is disabled
    dead: int = 0  # dead-lettered deliveries (replayable)
    recent_ok: int = 0  # attempts in the newest ``log_scan`` log entries ...
    recent_failed: int = 0  # ... that succeeded / failed
    last_attempt: LastAttempt | None = None

    def public(self) -> dict[str, Any]:
        return asdict(self)


def public(endpoint: Endpoint) -> dict[str, Any]:
    """An endpoint without its (encrypted) secrets."""
    return endpoint.model_dump(mode="json", exclude={"secrets"})


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


class WebhookAdmin:
    def __init__(
        self,
        client: redis.asyncio.Redis,
        keys: Keys,
        key: Fernet | None,
        allow_private_targets: bool,
        log_scan: int = 5000,
        dead_scan: int = 10_000,
    ) -> None:
        self._r, self._k, self._key = client, keys, key
        self._allow_private_targets = allow_private_targets
        self._log_scan, self._dead_scan = log_scan, dead_scan
        self._queue = DeliveryQueue(client, keys)
        self._dead_prefix = f"{keys.prefix}wh:d:"

    @property
    def can_create(self) -> bool:
        return self._key is not None

    @property
    def allow_private_targets(self) -> bool:
        return self._allow_private_targets

    # --- endpoints --------------------------------------------------------------------
    async def endpoints(self) -> list[Endpoint]:
        raw = await self._r.hgetall(self._k.wh_endpoints)
        return sorted((Endpoint.model_validate_json(v) for v in raw.values()), key=lambda e: e.id)

    async def get(self, endpoint_id: str) -> Endpoint | None:
        raw = await self._r.hget(self._k.wh_endpoints, endpoint_id)
        return Endpoint.model_validate_json(raw) if raw else None

    async def _save(self, endpoint: Endpoint) -> None:
        await self._r.hset(self._k.wh_endpoints, endpoint.id, endpoint.model_dump_json())

    def _fernet(self) -> Fernet:
        if self._key is None:
            raise NoKeyError(
                "no webhook secret key on this dashboard: set CALLSHIELD_WEBHOOK_KEY_FILE "
                "(the dispatcher's key) to create endpoints or rotate secrets here"
            )
        return self._key

    async def add(
        self,
        url: str,
        event_types: tuple[str, ...] = (),
        allow_private: bool = False,
        tenants: tuple[str, ...] = (),
    ) -> tuple[Endpoint, str]:
        """A new endpoint and its secret (shown once). ``ValueError`` (``BlockedTarget``
        included) for a URL or filter the CLI would refuse too."""
        key = self._fernet()
        # the SSRF check resolves the host: off the event loop
        endpoint, secret = await asyncio.to_thread(
            new_endpoint,
            key,
            url,
            event_types,
            allow_private,
            self._allow_private_targets,
            tenants,
        )
        await self._save(endpoint)
        return endpoint, secret

    async def rotate(self, endpoint_id: str, overlap_s: float) -> str | None:
        found = await self.get(endpoint_id)
        if found is None:
            return None
        endpoint, secret = rotated(self._fernet(), found, overlap_s)
        await self._save(endpoint)
        return secret

    async def set_enabled(self, endpoint_id: str, enabled: bool, reason: str) -> Endpoint | None:
        found = await self.get(endpoint_id)
        if found is None:
            return None
        endpoint = found.model_copy(
            update={"enabled": enabled, "disabled_reason": "" if enabled else reason}
        )
        await self._save(endpoint)
        if enabled:  # resume the queues parked while it was disabled (as the CLI does)
            parked = [_s(m) for m in await self._r.smembers(self._k.wh_parked)]
            mine = [m for m in parked if split_member(m)[0] == endpoint_id]
            if mine:
                now = time.time()
                await self._r.zadd(self._k.wh_due, dict.fromkeys(mine, now))
                await self._r.srem(self._k.wh_parked, *mine)
        return endpoint

    async def delete(self, endpoint_id: str) -> bool:
        """Its queued deliveries die with ``endpoint deleted`` at their next try."""
        return bool(await self._r.hdel(self._k.wh_endpoints, endpoint_id))

    # --- delivery health --------------------------------------------------------------
    def _dead_endpoint(self, member: str) -> str:
        return member[len(self._dead_prefix) :].partition(":")[0]

    async def health(self) -> dict[str, EndpointHealth]:
        """Per endpoint id; endpoints with nothing anywhere are absent."""
        pipe = self._r.pipeline(transaction=False)
        pipe.zrevrange(self._k.wh_due, 0, self._dead_scan - 1)
        pipe.smembers(self._k.wh_parked)
        pipe.zrevrange(self._k.wh_dead, 0, self._dead_scan - 1)
        pipe.xrevrange(self._k.wh_log, count=self._log_scan)
        due, parked, dead, log = await pipe.execute()
        out: dict[str, EndpointHealth] = {}

        def of(endpoint_id: str) -> EndpointHealth:
            return out.setdefault(endpoint_id, EndpointHealth())

        for m in due:
            of(split_member(_s(m))[0]).queued += 1
        for m in parked:
            of(split_member(_s(m))[0]).parked += 1
        for m in dead:
            of(self._dead_endpoint(_s(m))).dead += 1
        for _, raw in log:  # newest first
            f = {_s(a): _s(b) for a, b in raw.items()}
            h = of(f.get("endpoint", "?"))
            status = int(f.get("status", "0") or 0)
            if 200 <= status < 300:
                h.recent_ok += 1
            else:
                h.recent_failed += 1
            if h.last_attempt is None:
                h.last_attempt = LastAttempt(
                    at=float(f.get("at", "0") or 0),
                    attempt=int(f.get("attempt", "0") or 0),
                    lane=f.get("lane", ""),
                    status=status,
                    error=f.get("error", ""),
                    elapsed_ms=float(f.get("elapsed_ms", "0") or 0),
                )
        return out

    async def dead_letters(
        self, endpoint_id: str | None = None, limit: int = 200
    ) -> list[dict[str, Any]]:
        """Newest first: endpoint, event id, call key, attempts, last error, when it died,
        replays so far. Never the payload."""
        members: Any = await self._r.zrevrange(self._k.wh_dead, 0, self._dead_scan - 1, True)
        picked = [
            (_s(m), float(at))
            for m, at in members
            if endpoint_id is None or self._dead_endpoint(_s(m)) == endpoint_id
        ][:limit]
        pipe = self._r.pipeline(transaction=False)
        for m, _ in picked:
            pipe.hgetall(m)
        out = []
        for (_, died), raw in zip(picked, await pipe.execute(), strict=True):
            f = {_s(a): _s(b) for a, b in raw.items()}
            if not f:
                continue  # the delivery's hash is gone: nothing left to replay
            out.append(
                {
                    "endpoint": f.get("endpoint", ""),
                    "event_id": f.get("event_id", ""),
                    "call_key": f.get("call_key", ""),
                    "attempts": int(f.get("attempts", "0") or 0),
                    "last_error": f.get("last_error", f.get("reason", "")),
                    "died_at": died,
                    "replays": int(f.get("replays", "0") or 0),
                }
            )
        return out

    async def replay(self, endpoint_id: str, event_id: str) -> int:
        """Queue a finished delivery again: 1 queued, 0 no such delivery, -1 still pending."""
        call_key = await self._r.hget(self._k.wh_delivery(endpoint_id, event_id), "call_key")
        if call_key is None:
            return 0
        return await self._queue.replay(endpoint_id, event_id, _s(call_key), time.time())
