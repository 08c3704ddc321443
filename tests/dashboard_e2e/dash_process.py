"""A real ``callshield dashboard`` process (uvicorn, plain http on 127.0.0.1) on a real
redis-server, its users made with ``callshield dashboard create-user``, and the real bus
publisher writing calls and alerts the way the bridge does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import redis

from detectors.alert_schema import Alert, Band, CallEvent, Dimension, Reason, alert_id_for
from detectors.bus.keys import Keys
from detectors.bus.numbers import NumberVault
from detectors.bus.publisher import AlertPublisher
from detectors.bus.redis_server import RedisServer, free_port
from detectors.bus.settings import BusSettings

PASSWORD = "correct horse battery staple"
PREFIX = "e2e:"
NUMBERS_KEY = "3c" * 32
WEBHOOK_KEY = "ZTJlLW9ubHktd2ViaG9vay1rZXktMzItYnl0ZXMhISE="  # Fernet: 32 bytes, base64
SESSION_KEY = "s" * 48
ANI, DNIS = "+442071234567", "+14155550123"
ROLES = ("viewer", "analyst", "admin")


@dataclass
class RunningDashboard:
    base: str
    redis: redis.Redis
    bus: BusSettings
    log_path: Path
    publisher: AlertPublisher

    @property
    def keys(self) -> Keys:
        return Keys(PREFIX)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start_call(self, call_id: str) -> None:
        numbers = NumberVault(bytes.fromhex(NUMBERS_KEY)).seal(call_id, ANI, DNIS)
        event = CallEvent(
            call_id=call_id,
            event="started",
            at=datetime.now(UTC),
            external_ids={"twilio_from": ANI, "asterisk_linkedid": f"{call_id}.1"},
            numbers=numbers,
        )
        self.publisher.publish_event(event)
        assert self.publisher.flush(10)

    def raise_alert(
        self, call_id: str, dimension: Dimension = Dimension.SYNTHETIC_VOICE, revision: int = 1
    ) -> Alert:
        now = datetime.now(UTC)
        alert = Alert(
            alert_id=alert_id_for(call_id, dimension, 0),
            revision=revision,
            call_id=call_id,
            external_ids={"twilio_from": ANI},
            node_id="e2e",
            dimension=dimension,
            band=Band.HIGH,
            score=0.93,
            threshold=0.7,
            episode=0,
            reasons=(
                Reason(dimension=dimension, start_s=2.0, end_s=6.0, score=0.93, detail=f"{ANI}"),
            ),
            created_at=now,
            updated_at=now,
            policy_version="e2e-1",
            model_versions={"aasist": "1.0"},
            provider="CPUExecutionProvider",
        )
        self.publisher.publish_alert(alert)
        assert self.publisher.flush(10)
        return alert


def _env(server: RedisServer, state: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CALLSHIELD_REDIS_URL": server.url,
        "CALLSHIELD_STATE_DIR": str(state),
        "CALLSHIELD_KEY_PREFIX": PREFIX,
        "CALLSHIELD_NUMBERS_KEY": f"literal:{NUMBERS_KEY}",
        "CALLSHIELD_WEBHOOK_KEY": f"literal:{WEBHOOK_KEY}",
        "CALLSHIELD_WEBHOOK_ALLOW_PRIVATE_TARGETS": "true",
        "CALLSHIELD_DASHBOARD_SESSION_KEY": f"literal:{SESSION_KEY}",
        "CALLSHIELD_DASHBOARD_COOKIE_SECURE": "false",  # plain http on 127.0.0.1
        "CALLSHIELD_DASHBOARD_LIVE_CONNECTS": "1000",  # every page load is a connect
    }


def _cli(env: dict[str, str], *args: str, stdin: str = "") -> None:
    subprocess.run(
        [sys.executable, "-m", "sip_bridge.cli", "dashboard", *args],
        env=env,
        input=stdin,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )


@contextmanager
def running_dashboard(
    tmp: Path, extra_env: dict[str, str] | None = None, port: int | None = None
) -> Iterator[RunningDashboard]:
    """``extra_env``: more ``CALLSHIELD_*`` settings; ``port``: listen there (a test
    that must name the dashboard's URL before it starts, e.g. as an OIDC redirect)."""
    server = RedisServer(data_dir=tmp / "redis", port=free_port())
    server.start()
    proc: subprocess.Popen[bytes] | None = None
    publisher: AlertPublisher | None = None
    try:
        env = {**_env(server, tmp / "state"), **(extra_env or {})}
        for role in ROLES:
            _cli(env, "create-user", role, "--role", role, "--password-stdin", stdin=PASSWORD)
        port = port or free_port()
        log_path = tmp / "dashboard.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "sip_bridge.cli",
                    "dashboard",
                    "--listen",
                    f"127.0.0.1:{port}",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the dashboard did not start in 30 s"
            time.sleep(0.1)
        bus = BusSettings(
            redis_url=server.url,
            state_dir=tmp / "publisher",
            key_prefix=PREFIX,
            numbers_key=f"literal:{NUMBERS_KEY}",
            webhook_key=f"literal:{WEBHOOK_KEY}",
            webhook_allow_private_targets=True,
            retry_interval_s=0.05,
        )
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        publisher = AlertPublisher(redis.Redis.from_url(server.url, socket_timeout=5), bus)
        publisher.start()
        yield RunningDashboard(base, client, bus, log_path, publisher)
        client.close()
    finally:
        if publisher is not None:
            publisher.close()
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        server.stop()
