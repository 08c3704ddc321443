"""The live feed: one reader per process fans new alerts and call events out to every
connected WebSocket client (DESIGN §7).

One ``XREAD BLOCK`` loop on the alert and event streams, whatever the number of
clients; each client has a bounded queue, and a client that falls that far behind is
disconnected (it reconnects and reloads) instead of slowing the others. Payloads are
the API's public models: phone numbers masked. Each message is encoded once for all
clients; each client's sender task only writes the shared text (no per-client JSON, no
per-message ``asyncio.wait``), and the server offers no per-message compression, which
would otherwise deflate every message once per client. Triage changes made through this process
are pushed too (``publish``). Each message carries its tenant: a tenant-scoped client
is offered only its tenants' messages (still one encoding per message).

A client's tenant set is the principal's at connect; ``watch`` re-reads every
connected principal each ``every_s`` (the record in Redis, so a change made through any
dashboard process or ``callshield dashboard set-tenants`` is seen by all): a client
whose principal's tenants changed is ended with 1013 (it reconnects, re-scoped) and one
whose principal is gone (a revoked key, a removed user) with 1008; either is offered
nothing more, and what was queued for it is dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio

from dashboard.masking import mask_ids
from dashboard.schemas import AlertPublic
from dashboard.tenancy import Tenants, inside
from detectors.alert_schema import Alert, CallEvent
from detectors.bus.codec import decode
from detectors.bus.keys import Keys

log = logging.getLogger(__name__)

RESCOPED, GONE = 1013, 1008  # close codes: reconnect (re-scoped); the principal is gone
# the principal as it is now: (whether it still exists, its tenant set)
Recheck = Callable[[], Awaitable[tuple[bool, Tenants]]]


class LiveClient:
    """One connection's bounded queue of encoded messages. A client that falls
    ``size`` messages behind is marked overflowed and gets ``None`` (the end marker,
    in a slot kept for it): its sender stops and the route closes it with 1013.
    ``recheck``: how ``LiveHub.watch`` re-reads the principal (None: never, as for an
    OIDC session, whose tenants are its login's claim)."""

    def __init__(
        self, size: int, tenants: Tenants = None, name: str = "", recheck: Recheck | None = None
    ) -> None:
        self._size = size
        self.tenants = tenants  # None: every tenant's messages
        self.name = name  # the principal's name (``drop``)
        self.recheck = recheck
        self.queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=size + 1)  # JSON text
        self.overflowed = False
        self.close_code = RESCOPED
        self.ended = asyncio.Event()  # set with the end marker: a blocked send is cut short

    def end(self, code: int = RESCOPED, drop_queued: bool = False) -> None:
        """Ends the connection (as an overflow does): the client reconnects. With
        ``drop_queued`` (its principal changed) nothing queued is sent any more."""
        if drop_queued:
            while not self.queue.empty():
                self.queue.get_nowait()
        if not self.overflowed:
            self.overflowed = True
            self.close_code = code
            self.queue.put_nowait(None)
            self.ended.set()

    def offer(self, message: str) -> None:
        if self.overflowed:
            return
        if self.queue.qsize() >= self._size:
            self.end()
            return
        self.queue.put_nowait(message)


class LiveHub:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys, queue_size: int) -> None:
        self._r, self._keys, self._size = client, keys, queue_size
        self.clients: set[LiveClient] = set()
        self.last_alert_id: str | None = None
        self.fanned_out = 0
        self.errors = 0
        self.dropped = 0  # stream entries that did not read (e.g. another major version)

    def connect(
        self, tenants: Tenants = None, name: str = "", recheck: Recheck | None = None
    ) -> LiveClient:
        client = LiveClient(self._size, tenants, name, recheck)
        self.clients.add(client)
        return client

    def drop(self, name: str) -> int:
        """Ends ``name``'s connections (its tenants changed): they reconnect and are
        scoped anew. This process's at once (``watch`` finds the others'); how many."""
        mine = [c for c in self.clients if c.name == name]
        for client in mine:
            client.end(drop_queued=True)
        return len(mine)

    async def watch(self, every_s: float) -> None:
        """Re-reads the connected principals every ``every_s`` until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.recheck()
            except (redis.RedisError, OSError) as exc:  # the next round tries again
                self.errors += 1
                log.warning("live feed: principals not re-read (%s)", type(exc).__name__)

    async def recheck(self) -> int:
        """Ends each client whose principal is gone or has another tenant set now (the
        record in Redis, whichever process changed it); how many."""
        ended = 0
        for client in list(self.clients):
            if client.recheck is None or client.overflowed:
                continue
            exists, tenants = await client.recheck()
            if not exists or tenants != client.tenants:
                client.end(RESCOPED if exists else GONE, drop_queued=True)
                ended += 1
        return ended

    def count(self, tenants: Tenants) -> int:
        """Connected clients a principal of ``tenants`` may know of: every one for a
        platform-wide principal, else those scoped inside its tenants (another
        tenant's listeners are none of its business)."""
        return sum(1 for c in self.clients if inside(c.tenants, tenants))

    def disconnect(self, client: LiveClient) -> None:
        self.clients.discard(client)

    def publish(self, message: dict[str, Any], tenant: str | None = None) -> None:
        """Encoded once, whatever the number of clients (``callshield bench dashboard``).
        ``tenant``: the message's tenant; a scoped client gets only its tenants' ones
        (a message of no tenant goes to platform-wide clients only)."""
        text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
        for client in list(self.clients):
            if client.tenants is None or (tenant is not None and tenant in client.tenants):
                client.offer(text)
        self.fanned_out += 1

    @staticmethod
    def message(fields: dict[bytes, bytes]) -> tuple[dict[str, Any], str] | None:
        """The message for clients and its tenant (None: a kind clients do not get);
        ``ValueError`` when the entry does not read."""
        msg = decode(fields)
        if isinstance(msg, Alert):
            alert = AlertPublic.of(msg).model_dump(mode="json")
            return {"type": "alert", "alert": alert}, msg.tenant
        if isinstance(msg, CallEvent):
            call = {
                "call_id": msg.call_id,
                "event": msg.event,
                "at": msg.at.isoformat(),
                "external_ids": mask_ids(msg.external_ids),
                "tenant": msg.tenant,
            }
            return {"type": "call", "call": call}, msg.tenant
        return None

    async def _start_ids(self) -> dict[str, str]:
        ids = {}
        for key in (self._keys.alerts, self._keys.events):
            entries: Any = await self._r.xrevrange(key, count=1)
            ids[key] = entries[0][0].decode() if entries else "0-0"
        self.last_alert_id = ids[self._keys.alerts]
        return ids

    async def run(self, block_ms: int = 1000) -> None:
        """Reads until cancelled; survives Redis going away (retries each second)."""
        ids: dict[str, str] | None = None
        replies: Any
        while True:
            try:
                if ids is None:
                    ids = await self._start_ids()
                replies = await self._r.xread(ids, block=block_ms, count=500)  # type: ignore[arg-type]
            except (redis.RedisError, OSError) as exc:
                self.errors += 1
                log.warning("live feed: redis unavailable (%s); retrying", type(exc).__name__)
                await asyncio.sleep(1.0)
                continue
            for stream, entries in replies:
                key = stream.decode()
                for entry_id, fields in entries:
                    ids[key] = entry_id.decode()
                    try:
                        found = self.message(fields)
                    except ValueError as exc:  # counted and dropped; the others go on
                        self.dropped += 1
                        log.warning("live feed: stream entry dropped: %s", exc)
                        continue
                    if found is not None:
                        self.publish(*found)
                if key == self._keys.alerts:
                    self.last_alert_id = ids[key]
