"""A Redis killed mid-write can leave its AOF ending inside a transaction (MULTI, XADD,
HSET, ... with no EXEC). Redis 7.0's own ``aof-load-truncated`` cuts after the last whole
command, inside that MULTI, and appends its next writes behind it; on the next start the
dangling XADD is executed after all, so an entry comes back whose dedupe record was lost
(the duplicate alert tests/bus/test_redis_kill.py caught in CI). The embedded server cuts
a torn AOF at its last whole transaction before loading it (``detectors.bus.aof_repair``).
Real redis-server and redis-check-aof, the AOF torn the way the CI run tore it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import redis

from detectors.bus import aof_repair
from detectors.bus.redis_server import RedisServer, find_redis_server, free_port

STREAM, SEEN = "s", "seen"


def _write(client: redis.Redis, name: str) -> None:
    """One alert-shaped transaction: the entry and its dedupe record, atomically."""
    pipe = client.pipeline(transaction=True)
    pipe.xadd(STREAM, {"ev": name})
    pipe.hset(SEEN, name, "1")
    pipe.execute()


def _entries(client: redis.Redis) -> list[bytes]:
    return [f[b"ev"] for _, f in client.xrange(STREAM)]


def _tear_last_transaction(incr: Path) -> None:
    """Cut the file inside its last MULTI, after the XADD and the HSET (before EXEC)."""
    data = incr.read_bytes()
    multi = data.rindex(b"*1\r\n$5\r\nMULTI\r\n")
    hset = data.index(b"HSET", multi)
    end_of_hset = data.index(b"*", hset)  # the next command (EXEC) starts here
    incr.write_bytes(data[: end_of_hset + 2])  # and is cut short


def test_a_torn_transaction_is_dropped_whole_and_never_comes_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    find_redis_server()
    server = RedisServer(data_dir=tmp_path / "redis", port=free_port())
    server.start()
    client = redis.Redis.from_url(server.url)
    try:
        _write(client, "a")
        _write(client, "b")
        server.stop()  # clean: everything on disk
        (incr,) = (tmp_path / "redis" / "appendonlydir").glob("*.incr.aof")
        _tear_last_transaction(incr)
        with caplog.at_level(logging.WARNING, "detectors.bus.aof_repair"):
            server.start()
        assert any("torn" in r.getMessage() for r in caplog.records), caplog.text
        assert _entries(client) == [b"a"]  # b was never whole on disk: dropped whole
        assert client.hget(SEEN, "b") is None
        _write(client, "b")  # the publisher sends it again
        server.kill9()
        server.start()
        # before the repair: [a, b, b] (the torn XADD ran inside the next transaction)
        assert _entries(client) == [b"a", b"b"]
        assert "can not be nested" not in (tmp_path / "redis" / "redis.log").read_text()
    finally:
        client.close()
        server.stop()


def test_a_whole_aof_is_left_alone(tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path / "redis", port=free_port())
    assert aof_repair.repair(server.data_dir, find_redis_server()) is None  # no AOF yet
    server.start()
    client = redis.Redis.from_url(server.url)
    try:
        _write(client, "a")
        server.stop()
        assert aof_repair.repair(server.data_dir, find_redis_server()) == 0
        server.start()
        assert _entries(client) == [b"a"]
    finally:
        client.close()
        server.stop()
