"""A real redis-server per test (Debian's package; AOF on, in the test's tmp dir), with
kill -9 and restart helpers, and the bus settings pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from detectors.bus.redis_server import RedisServer, find_redis_server, free_port
from detectors.bus.settings import BusSettings


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    try:
        find_redis_server()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    server = RedisServer(data_dir=tmp_path / "redis", port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def settings(tmp_path: Path, redis_server: RedisServer) -> BusSettings:
    return BusSettings(
        redis_url=redis_server.url,
        state_dir=tmp_path / "state",
        key_prefix="cs-test:",
        retry_interval_s=0.05,
    )


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_server.url, socket_timeout=5)
    yield c
    c.close()
