"""Retention of the durable alert stream: trimmed by age, and never below what every
consumer group has acknowledged (DESIGN.md §6). Lossy streams are capped by MAXLEN at
XADD time instead (``detectors.bus.publisher``)."""

from __future__ import annotations

import time
from typing import Any

import redis

from detectors.bus.keys import Keys


def _next_id(stream_id: str) -> str:
    ms, _, seq = stream_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def safe_min_id(client: redis.Redis, stream: str) -> str | None:
    """The lowest entry id some consumer group still needs (pending, or not yet read);
    None when there are no groups."""
    try:
        groups: list[dict[str, Any]] = client.xinfo_groups(stream)
    except redis.ResponseError:  # no such stream
        return None
    floors: list[str] = []
    for g in groups:
        name = g["name"].decode() if isinstance(g["name"], bytes) else str(g["name"])
        last = g["last-delivered-id"]
        last = last.decode() if isinstance(last, bytes) else str(last)
        if int(g.get("pending", 0)):
            summary: dict[str, Any] = client.xpending(stream, name)
            low = summary["min"]
            floors.append(low.decode() if isinstance(low, bytes) else str(low))
        else:
            floors.append(_next_id(last))
    return min(floors, key=_id_key) if floors else None


def trim_alerts(
    client: redis.Redis, keys: Keys, retention_days: float, now_s: float | None = None
) -> int:
    """Drop alert entries older than the retention that every group has acknowledged;
    returns how many entries were removed."""
    now_ms = int((time.time() if now_s is None else now_s) * 1000)
    floor = f"{max(0, now_ms - int(retention_days * 86_400_000))}-0"
    needed = safe_min_id(client, keys.alerts)
    if needed is not None and _id_key(needed) < _id_key(floor):
        floor = needed
    removed: int = client.xtrim(keys.alerts, minid=floor, approximate=False)
    return removed
