"""Bridge nodes for the system page: every registered bridge process (``nodes``), its
heartbeat (``node:<id>``) and its status summary (``nodestatus:<id>``, written by the
bridge with each heartbeat, ``detectors.bus.node_status``). A node whose heartbeat is
gone is shown ``lost`` (its calls are about to be reaped); a summary from another boot
than the heartbeat's is stale and not shown. Unreadable summaries are skipped, counted
in the log."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import redis.asyncio

from dashboard.schemas import NodeHealth
from detectors.bus.keys import Keys
from detectors.bus.node_status import NodeStatus

log = logging.getLogger(__name__)
MAX_NODES = 256  # a bounded page: more registered processes than this is a fault


async def read_nodes(client: redis.asyncio.Redis, keys: Keys, now: datetime) -> list[NodeHealth]:
    registered: Any = await client.hgetall(keys.nodes)
    ids = sorted({_text(n) for n in registered.values()})[:MAX_NODES]
    if not ids:
        return []
    pipe = client.pipeline(transaction=False)
    for node in ids:
        pipe.get(keys.node(node))
        pipe.get(keys.node_status(node))
    found: list[Any] = await pipe.execute()
    out = []
    for i, node in enumerate(ids):
        beat, raw = found[2 * i], found[2 * i + 1]
        status = _parse(node, raw)
        if status is not None and (beat is None or _text(beat) != status.boot):
            status = None  # another process's, or the heartbeat is gone
        state = "lost" if beat is None else status.state if status is not None else "unknown"
        age = (now - status.at).total_seconds() if status is not None else None
        out.append(NodeHealth(node_id=node, state=state, last_seen_s=age, status=status))
    return out


def _parse(node: str, raw: bytes | str | None) -> NodeStatus | None:
    if raw is None:
        return None
    try:
        return NodeStatus.model_validate_json(raw)
    except ValueError as exc:
        log.warning("node %s: unreadable status summary (%s)", node, type(exc).__name__)
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
