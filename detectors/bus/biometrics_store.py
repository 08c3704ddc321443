"""Watchlists, enrolments and call updates in Redis (``detectors.bus.keys``).

``BiometricsStore`` (asyncio) is what writes: the dashboard and ``callshield
watchlist``. Every watchlist change is one MULTI with the entry and an INCR of the
tenant's version counter, so a bridge's cache sees each change exactly when the version
moves. The module-level ``read_*`` functions are the bridge's side (synchronous, on its
refresher and update threads, never on the scoring path). A record that does not parse
is skipped and counted by the caller, never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import redis
import redis.asyncio

from detectors.alert_schema import CallEvent
from detectors.bus.biometrics import CallUpdate, Enrolment, WatchlistEntry
from detectors.bus.keys import Keys

log = logging.getLogger(__name__)

UPDATES_MAXLEN = 10_000


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def parse_entries(raw: dict[Any, Any]) -> tuple[list[WatchlistEntry], int]:
    """HGETALL of a watchlist -> (entries, how many did not parse)."""
    out, bad = [], 0
    for field, body in raw.items():
        try:
            out.append(WatchlistEntry.model_validate_json(body))
        except ValueError:
            bad += 1
            log.warning("watchlist entry %s does not parse: skipped", _s(field))
    out.sort(key=lambda e: (e.created_at, e.entry_id))
    return out, bad


class BiometricsStore:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys) -> None:
        self._r, self._k = client, keys

    # ---- watchlist ----------------------------------------------------------------
    async def add_entry(self, entry: WatchlistEntry) -> None:
        async with self._r.pipeline(transaction=True) as p:
            p.hset(self._k.watchlist(entry.tenant), entry.entry_id, entry.model_dump_json())
            p.incr(self._k.watchlist_version(entry.tenant))
            await p.execute()

    async def entries(self, tenant: str) -> tuple[list[WatchlistEntry], int]:
        raw: Any = await self._r.hgetall(self._k.watchlist(tenant))
        return parse_entries(raw)

    async def entry(self, tenant: str, entry_id: str) -> WatchlistEntry | None:
        body: Any = await self._r.hget(self._k.watchlist(tenant), entry_id)
        if body is None:
            return None
        try:
            return WatchlistEntry.model_validate_json(body)
        except ValueError:
            return None

    async def remove_entries(self, tenant: str, entry_ids: list[str]) -> int:
        if not entry_ids:
            return 0
        async with self._r.pipeline(transaction=True) as p:
            p.hdel(self._k.watchlist(tenant), *entry_ids)
            p.incr(self._k.watchlist_version(tenant))
            removed, _ = await p.execute()
        return int(removed)

    async def approve_entry(
        self, tenant: str, entry_id: str, approver: str, at: datetime
    ) -> WatchlistEntry:
        """Make a pending entry active (the second analyst of the two-person rule), with
        a version bump so bridges load it. ``LookupError``: no such entry; ``ValueError``:
        not pending, or the approver is the analyst who added it."""
        key = self._k.watchlist(tenant)
        async with self._r.pipeline(transaction=True) as p:
            while True:
                try:
                    await p.watch(key)
                    body: Any = await p.hget(key, entry_id)
                    if body is None:
                        raise LookupError(entry_id)
                    entry = WatchlistEntry.model_validate_json(body)
                    if entry.active:
                        raise ValueError("the entry is not pending approval")
                    if entry.added_by == approver:
                        raise ValueError("the analyst who added an entry cannot approve it")
                    approved = entry.model_copy(
                        update={"status": "active", "approved_by": approver, "approved_at": at}
                    )
                    WatchlistEntry.model_validate(approved.model_dump())  # the model's checks
                    p.multi()  # type: ignore[no-untyped-call]
                    p.hset(key, entry_id, approved.model_dump_json())
                    p.incr(self._k.watchlist_version(tenant))
                    await p.execute()
                    return approved
                except redis.WatchError:
                    continue  # changed meanwhile: read it again

    async def purge_expired(self, tenant: str, now: datetime) -> list[str]:
        """Delete the tenant's expired entries (data minimisation); their ids."""
        entries, _ = await self.entries(tenant)
        gone = [e.entry_id for e in entries if e.expired(now)]
        await self.remove_entries(tenant, gone)
        return gone

    async def version(self, tenant: str) -> int:
        v: Any = await self._r.get(self._k.watchlist_version(tenant))
        return int(v or 0)

    # ---- enrolments ---------------------------------------------------------------
    async def put_enrolment(self, enrolment: Enrolment) -> None:
        key = self._k.enrolment(enrolment.tenant, enrolment.subject)
        await self._r.set(key, enrolment.model_dump_json())

    async def enrolment(self, tenant: str, subject: str) -> Enrolment | None:
        body: Any = await self._r.get(self._k.enrolment(tenant, subject))
        if body is None:
            return None
        try:
            return Enrolment.model_validate_json(body)
        except ValueError:
            return None

    async def remove_enrolment(self, tenant: str, subject: str) -> bool:
        return bool(await self._r.delete(self._k.enrolment(tenant, subject)))

    # ---- mid-call updates ---------------------------------------------------------
    async def live_call(self, call_id: str) -> CallEvent | None:
        """The call's last event while it is live here (None: unknown or ended)."""
        body: Any = await self._r.hget(self._k.call(call_id), "json")
        if body is None:
            return None
        try:
            event = CallEvent.model_validate_json(body)
        except ValueError:
            return None
        return None if event.event == "ended" else event

    async def call_by_external_id(self, system: str, value: str) -> str | None:
        found: Any = await self._r.get(self._k.external_id(system, value))
        return _s(found) if found is not None else None

    async def submit_update(self, update: CallUpdate) -> str:
        entry_id: Any = await self._r.xadd(
            self._k.call_updates,
            {"json": update.model_dump_json()},
            maxlen=UPDATES_MAXLEN,
            approximate=True,
        )
        return _s(entry_id)


# ---- the bridge's reads (synchronous) -----------------------------------------------


def read_version(client: redis.Redis, keys: Keys, tenant: str) -> int:
    v: Any = client.get(keys.watchlist_version(tenant))
    return int(v or 0)


def read_entries(
    client: redis.Redis, keys: Keys, tenant: str
) -> tuple[int, list[WatchlistEntry], int]:
    """(version, entries, unparsable count), read in one MULTI so they agree."""
    with client.pipeline(transaction=True) as p:
        p.get(keys.watchlist_version(tenant))
        p.hgetall(keys.watchlist(tenant))
        version, raw = p.execute()
    entries, bad = parse_entries(raw)
    return int(version or 0), entries, bad


def read_enrolment(client: redis.Redis, keys: Keys, tenant: str, subject: str) -> Enrolment | None:
    body: Any = client.get(keys.enrolment(tenant, subject))
    if body is None:
        return None
    return Enrolment.model_validate_json(body)  # ValueError: the caller counts it


def read_updates(
    client: redis.Redis,
    keys: Keys,
    after: str,
    block_ms: int,
    on_bad: Callable[[str, Exception], None],
) -> tuple[str, list[CallUpdate]]:
    """Updates after stream id ``after`` ("$": only new ones), waiting up to
    ``block_ms``; returns the last id read and the updates that parsed."""
    got: Any = client.xread({keys.call_updates: after}, count=100, block=block_ms)
    last, out = after, []
    for _stream, entries in got or ():
        for entry_id, fields in entries:
            last = _s(entry_id)
            body = fields.get(b"json", fields.get("json"))
            try:
                out.append(CallUpdate.model_validate_json(body or b""))
            except ValueError as exc:
                on_bad(last, exc)
    return last, out
