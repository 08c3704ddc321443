"""Stopping ``callshield dashboard`` (a real process, a real redis-server): SIGTERM or
SIGINT right after it became ready, with no live-feed client, with a reading one, and
with one that stopped reading while the feed had megabytes for it, always ends the
process with status 0. The 20 s bound is a hang detector, not a timing assertion."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from dash_factory import make_alert
from dash_subprocess import KEYS, DashProcess, create_key, stalled_client
from websockets.sync.client import connect

from dashboard.auth import Role
from detectors.bus.codec import encode
from detectors.bus.redis_server import RedisServer

HANG_S = 20.0


@pytest.fixture
def key(r: redis.Redis, redis_server: RedisServer) -> str:
    return create_key(redis_server.url, "watcher", Role.VIEWER)[1]


@pytest.fixture
def started() -> Iterator[list[DashProcess]]:
    procs: list[DashProcess] = []
    yield procs
    for p in procs:
        p.close()


@pytest.mark.parametrize("client", ["none", "reading"])
def test_a_stop_right_after_start_exits_0(
    client: str, key: str, redis_server: RedisServer, tmp_path: Path, started: list[DashProcess]
) -> None:
    for i, sig in enumerate((signal.SIGTERM, signal.SIGTERM, signal.SIGINT)):
        dash = DashProcess(redis_server.url, tmp_path / f"state{i}")
        started.append(dash)
        ws = None
        if client == "reading":
            ws = connect(
                f"ws://127.0.0.1:{dash.port}/api/v1/live",
                additional_headers={"Authorization": f"Bearer {key}"},
            )
        try:
            assert dash.stop(sig, HANG_S) == 0, dash.log.read_text()[-2000:]
        finally:
            if ws is not None:
                ws.close()


def test_a_stop_with_a_stalled_live_feed_client_exits_0(
    key: str, r: redis.Redis, redis_server: RedisServer, tmp_path: Path, started: list[DashProcess]
) -> None:
    # a queue long enough that the stalled client is not dropped as too slow first
    dash = DashProcess(
        redis_server.url, tmp_path / "state", live_queue="100000", shutdown_grace_s="2"
    )
    started.append(dash)
    sock = stalled_client(dash.port, key)
    try:
        fields = encode(make_alert("call-flood"))
        pipe = r.pipeline(transaction=False)
        for _ in range(20_000):  # ~20 MB of feed: more than every socket buffer holds
            pipe.xadd(KEYS.alerts, fields)  # type: ignore[arg-type]
        pipe.execute()
        until = time.monotonic() + 60
        while dash.get("/api/v1/system", key)["live_feed_behind"] != 0:  # all fanned out
            assert time.monotonic() < until, "the live feed never caught up"
            time.sleep(0.1)
        assert dash.stop(signal.SIGTERM, HANG_S) == 0, dash.log.read_text()[-2000:]
    finally:
        sock.close()
