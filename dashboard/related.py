"""Related calls by replayed audio: the replay stage of the bridges records each pair of
calls whose external audio matched as a replay (``replay:related:<call>``, both ways,
by call id or, for a recording of a call, its correlation id: duplicate recordings of
one call share it). Here a call's set is read and its members resolved to call ids
through the events stream; a member the stream no longer holds is shown while its
call state exists."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import redis.asyncio

from detectors.alert_schema import CallEvent
from detectors.bus.keys import Keys

MAX_RELATED = 50  # members shown per call (a recording played into thousands of calls)


async def replayed_with(
    client: redis.asyncio.Redis, keys: Keys, call_id: str, events: list[CallEvent]
) -> list[dict[str, Any]]:
    """Other calls sharing replayed audio with ``call_id`` (newest events first)."""
    owners = {call_id} | {
        e.correlation_id for e in events if e.call_id == call_id and e.correlation_id
    }
    pipe = client.pipeline(transaction=False)
    for owner in sorted(owners):
        pipe.smembers(keys.replay_related(owner))
    found = {_s(m) for got in await pipe.execute() for m in got} - owners
    members = set(sorted(found)[:MAX_RELATED])
    if not members:
        return []
    started: dict[str, datetime | None] = {}
    for e in reversed(events):  # oldest first
        if e.call_id != call_id and (e.call_id in members or e.correlation_id in members):
            started[e.call_id] = e.at if e.event == "started" else started.get(e.call_id)
    named = {m for m in members if m not in started}
    for m in sorted(named):  # forgotten by the stream: a call id whose state is still kept
        if m != call_id and await client.exists(keys.call(m)):
            started[m] = None
    return [
        {"call_id": c, "link": "replay", "started_at": at, "why": "same replayed audio"}
        for c, at in sorted(started.items())
    ]


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
