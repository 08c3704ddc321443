"""Two ``callshield dashboard`` processes on one real redis-server: a live-feed socket
open on one follows its principal when the change is made through the other, or by
``callshield dashboard set-tenants``. A re-scoped key's or user's socket is closed
with 1013 (it reconnects, and the new socket carries only the new tenant's events);
a revoked key's socket is closed with 1008. The 20 s bound only detects a socket that
is never told (before the fix it kept the old tenant set until it reconnected)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from dash_factory import make_alert
from dash_subprocess import KEYS, PREFIX, DashProcess, create_key
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from dashboard.auth import Role, UserStore
from dashboard.keys import DashKeys
from detectors.bus.codec import encode
from detectors.bus.redis_server import RedisServer

NEVER_S = 20.0  # a hang detector, not a timing assertion
PASSWORD = "correct horse battery staple"


@pytest.fixture
def pair(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> Iterator[tuple[DashProcess, DashProcess]]:
    procs: list[DashProcess] = []
    try:
        for name in ("one", "two"):
            procs.append(DashProcess(redis_server.url, tmp_path / name, live_recheck_s="0.2"))
        yield procs[0], procs[1]
    finally:
        for p in procs:
            p.close()


def _feed(dash: DashProcess, headers: dict[str, str]) -> ClientConnection:
    return connect(f"ws://127.0.0.1:{dash.port}/api/v1/live", additional_headers=headers)


def _alert(r: redis.Redis, call_id: str, tenant: str) -> None:
    r.xadd(KEYS.alerts, encode(make_alert(call_id, tenant=tenant)))  # type: ignore[arg-type]


def _next_alert(ws: ClientConnection) -> dict[str, Any]:
    while True:
        message = json.loads(ws.recv(timeout=NEVER_S))
        if message["type"] == "alert":
            return dict(message["alert"])


def _closed_with(ws: ClientConnection) -> tuple[int | None, list[str]]:
    """The close code the server ends ``ws`` with, and the alerts' tenants it sent first."""
    tenants = []
    try:
        while True:
            message = json.loads(ws.recv(timeout=NEVER_S))
            if message["type"] == "alert":
                tenants.append(message["alert"]["tenant"])
    except ConnectionClosed as closed:
        return (closed.rcvd.code if closed.rcvd else None), tenants
    except TimeoutError:
        return None, tenants


def test_a_key_rescoped_or_revoked_on_another_process(
    pair: tuple[DashProcess, DashProcess], r: redis.Redis, redis_server: RedisServer
) -> None:
    one, two = pair
    admin = {"Authorization": f"Bearer {create_key(redis_server.url, 'root', Role.ADMIN)[1]}"}
    key_id, key = create_key(redis_server.url, "acme-feed", Role.VIEWER, frozenset({"acme"}))
    bearer = {"Authorization": f"Bearer {key}"}
    with _feed(two, bearer) as ws:
        _alert(r, "call-globex-1", "globex")
        _alert(r, "call-acme-1", "acme")
        assert _next_alert(ws)["call_id"] == "call-acme-1"  # scoped: globex's skipped
        body = {"tenants": ["globex"]}
        one.call("PUT", f"/api/v1/api-keys/{key_id}/tenants", admin, body)
        code, _ = _closed_with(ws)
        assert code == 1013  # re-scoped: reconnect
    with _feed(two, bearer) as ws:  # the new socket: globex's only
        _alert(r, "call-acme-2", "acme")
        _alert(r, "call-globex-2", "globex")
        assert _next_alert(ws)["call_id"] == "call-globex-2"
        one.call("DELETE", f"/api/v1/api-keys/{key_id}", admin)
        _alert(r, "call-acme-3", "acme")
        code, tenants = _closed_with(ws)
        assert code == 1008 and "acme" not in tenants  # revoked: gone for good


def test_a_user_rescoped_by_the_cli(
    pair: tuple[DashProcess, DashProcess],
    r: redis.Redis,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    one, two = pair

    async def create() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        users = UserStore(client, DashKeys(KEYS), lambda: 0.0)
        await users.create("ann", PASSWORD, Role.ANALYST, frozenset({"acme"}))
        await client.aclose()

    asyncio.run(create())
    current = "acme"
    for dash in (one, two):
        cookie = dash.login("ann", PASSWORD)
        headers = {"Cookie": cookie, "Origin": dash.url}
        new = "globex" if current == "acme" else "acme"
        with _feed(dash, headers) as ws:
            _alert(r, f"call-{current}-{dash.port}", current)
            assert _next_alert(ws)["tenant"] == current
            env = {
                **os.environ,
                "CALLSHIELD_REDIS_URL": redis_server.url,
                "CALLSHIELD_KEY_PREFIX": PREFIX,
                "CALLSHIELD_STATE_DIR": str(tmp_path / "cli"),
            }
            argv = ["dashboard", "set-tenants", "--user", "ann", "--tenant", new]
            subprocess.run([sys.executable, "-m", "sip_bridge.cli", *argv], env=env, check=True)
            code, _ = _closed_with(ws)
            assert code == 1013
        with _feed(dash, headers) as ws:  # the same session, re-scoped
            _alert(r, f"call-old-{dash.port}", current)
            _alert(r, f"call-new-{dash.port}", new)
            assert _next_alert(ws)["call_id"] == f"call-new-{dash.port}"
        current = new
