"""The embedded default: no REDIS_URL -> one shared redis-server under the state dir,
started once for every process, restarted by the supervisor after a crash, data kept."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from detectors.bus.connect import resolve_url, sync_client
from detectors.bus.embedded import EmbeddedRedis, Supervisor
from detectors.bus.redis_server import find_redis_server
from detectors.bus.settings import BusSettings


@pytest.fixture
def embedded_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BusSettings]:
    try:
        find_redis_server()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("CALLSHIELD_REDIS_URL", raising=False)
    settings = BusSettings(state_dir=tmp_path / "st")
    yield settings
    EmbeddedRedis(settings).shutdown()


def _pid(settings: BusSettings) -> int:
    return int((settings.embedded_dir / "redis.pid").read_text())


def test_one_shared_server_with_aof_on_a_private_socket(embedded_settings: BusSettings) -> None:
    assert embedded_settings.embedded
    url = resolve_url(embedded_settings)
    assert url.startswith("unix://")
    pid = _pid(embedded_settings)
    assert resolve_url(embedded_settings) == url  # a second process finds it running
    assert _pid(embedded_settings) == pid
    assert (embedded_settings.embedded_dir.stat().st_mode & 0o777) == 0o700
    client = sync_client(embedded_settings)
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    client.close()


def test_supervisor_restarts_a_killed_server_and_data_survives(
    embedded_settings: BusSettings,
) -> None:
    embedded = EmbeddedRedis(embedded_settings)
    client = redis.Redis.from_url(embedded.ensure())
    client.set("k", "v")
    old = _pid(embedded_settings)
    sup = Supervisor(embedded, interval_s=0.05)
    sup.start()
    try:
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while sup.restarts == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        sup.stop()
    assert sup.restarts >= 1
    assert _pid(embedded_settings) != old
    assert client.get("k") == b"v"  # from the AOF
    client.close()


def test_redis_url_wins_over_embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "rediss://alerts:s3cret@redis.example:6380/2")
    settings = BusSettings(state_dir=tmp_path / "st")
    assert not settings.embedded
    assert resolve_url(settings) == "rediss://alerts:s3cret@redis.example:6380/2"
    assert "s3cret" not in repr(settings)
    assert not (tmp_path / "st").exists()  # nothing started
