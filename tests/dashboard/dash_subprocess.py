"""``callshield dashboard`` as a real subprocess on 127.0.0.1 against the tests' real
redis-server: started, waited for (``/health``), and stopped by a signal."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import redis.asyncio

from dashboard.auth import ApiKeyStore, Role
from dashboard.keys import DashKeys
from dashboard.tenancy import Tenants
from detectors.bus.keys import Keys
from detectors.bus.redis_server import free_port

PREFIX = "cs-proc:"
KEYS = Keys(PREFIX)


def create_key(redis_url: str, name: str, role: Role, tenants: Tenants = None) -> tuple[str, str]:
    """(key id, key) written straight to Redis, as ``callshield dashboard create-api-key``."""

    async def create() -> tuple[str, str]:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            return await ApiKeyStore(client, DashKeys(KEYS), time.time).create(name, role, tenants)
        finally:
            await client.aclose()

    return asyncio.run(create())


class DashProcess:
    """One dashboard process; ``env`` adds ``CALLSHIELD_DASHBOARD_*`` settings."""

    def __init__(self, redis_url: str, state_dir: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state_dir.parent / f"dashboard-{self.port}.log"
        values = {
            **os.environ,
            "CALLSHIELD_REDIS_URL": redis_url,
            "CALLSHIELD_KEY_PREFIX": PREFIX,
            "CALLSHIELD_STATE_DIR": str(state_dir),
            "CALLSHIELD_DASHBOARD_SESSION_KEY": "k" * 48,
            "CALLSHIELD_DASHBOARD_COOKIE_SECURE": "false",
        }
        values.update({f"CALLSHIELD_DASHBOARD_{k.upper()}": v for k, v in env.items()})
        argv = [sys.executable, "-m", "sip_bridge.cli", "dashboard", "--listen"]
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [*argv, f"127.0.0.1:{self.port}"],
                env=values,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self._wait_ready()

    def _wait_ready(self, timeout_s: float = 60.0) -> None:
        until = time.monotonic() + timeout_s
        while time.monotonic() < until:
            assert self.proc.poll() is None, f"the dashboard exited: {self.log.read_text()}"
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"the dashboard never became ready: {self.log.read_text()}")

    def get(self, path: str, key: str) -> Any:
        return self.call("GET", path, {"Authorization": f"Bearer {key}"})

    def call(self, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
        """The JSON answer of one request (an error status raises ``HTTPError``)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={**headers, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            return json.loads(resp.read())

    def login(self, username: str, password: str) -> str:
        """A session cookie (``cs_session=…``: cookies are not Secure here)."""
        request = urllib.request.Request(
            f"{self.url}/api/v1/auth/login",
            data=json.dumps({"username": username, "password": password}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            cookie = resp.headers["Set-Cookie"].split(";", 1)[0]
        assert cookie.startswith("cs_session="), cookie
        return str(cookie)

    def stop(self, sig: signal.Signals = signal.SIGTERM, bound_s: float = 20.0) -> int | None:
        """Sends ``sig``; the exit status, or None if the process still ran after
        ``bound_s`` (a hang: it is then killed)."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=bound_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def stalled_client(port: int, key: str) -> socket.socket:
    """A live-feed client that completes the handshake and then never reads: what a
    frozen browser tab or a hung consumer is to the server."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    nonce = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /api/v1/live HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {nonce}\r\nSec-WebSocket-Version: 13\r\n"
            f"Authorization: Bearer {key}\r\n\r\n"
        ).encode()
    )
    head = sock.recv(1024)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock
