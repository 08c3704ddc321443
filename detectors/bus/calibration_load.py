"""Reads what calibration needs from Redis: the scores and alerts of a span (stream ids
are the server's clock, so the span is counted back from Redis's TIME) and every
analyst label. Synchronous for ``callshield calibrate``, asyncio for the dashboard's
what-if; both page through the streams and stop at ``max_scores`` score entries
(``Dataset.truncated`` says so)."""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio

from detectors.bus.calibration import Collector, Dataset, Unlabelled, parse_labels
from detectors.bus.keys import Keys

PAGE = 5000


def _next(entries: Any) -> str:
    last = entries[-1][0]
    return "(" + (last.decode() if isinstance(last, bytes) else str(last))


def _start(now: Any, since_s: float) -> str:
    sec, usec = now
    return f"{max(0, int(sec) * 1000 + int(usec) // 1000 - int(since_s * 1000))}-0"


def load(
    client: redis.Redis,
    keys: Keys,
    since_s: float,
    unlabelled: Unlabelled = "exclude",
    max_scores: int = 5_000_000,
) -> Dataset:
    start = _start(client.time(), since_s)
    col, truncated = Collector(), False
    for key, cap in ((keys.scores, max_scores), (keys.alerts, None)):
        cursor = start
        while True:
            entries: Any = client.xrange(key, min=cursor, max="+", count=PAGE)
            col.add_entries(entries)
            if len(entries) < PAGE:
                break
            if cap is not None and col.scores_read >= cap:
                truncated = True
                break
            cursor = _next(entries)
    raw: Any = client.hvals(keys.analyst_labels)
    data = col.dataset(parse_labels(raw), unlabelled)
    data.truncated = truncated
    return data


async def load_async(
    client: redis.asyncio.Redis,
    keys: Keys,
    since_s: float,
    unlabelled: Unlabelled = "exclude",
    max_scores: int = 1_000_000,
) -> Dataset:
    start = _start(await client.time(), since_s)
    col, truncated = Collector(), False
    for key, cap in ((keys.scores, max_scores), (keys.alerts, None)):
        cursor = start
        while True:
            entries: Any = await client.xrange(key, min=cursor, max="+", count=PAGE)
            col.add_entries(entries)
            if len(entries) < PAGE:
                break
            if cap is not None and col.scores_read >= cap:
                truncated = True
                break
            cursor = _next(entries)
    raw: Any = await client.hvals(keys.analyst_labels)
    data = col.dataset(parse_labels(raw), unlabelled)
    data.truncated = truncated
    return data
