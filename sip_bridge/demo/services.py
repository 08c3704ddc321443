"""The demo's services, each the product's own command as a child process, on embedded
defaults in one temporary directory: redis-server (random port, AOF off), ``callshield
bridge``, ``callshield dashboard`` (an admin login made for the run), ``callshield
webhooks run`` with a local receiver registered through ``callshield webhooks add``.

Children run in their own process groups, so a terminal's Ctrl-C reaches the demo only
and the demo stops them in order (bridge first: its calls end by BYE and drain).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from detectors.bus.redis_server import RedisServer, free_port, free_udp_tcp_port

ADMIN = "demo-admin"


@dataclass
class EphemeralRedis(RedisServer):
    """The embedded server with persistence off: the demo's data dies with its run."""

    def config_text(self) -> str:
        text = super().config_text()
        return text.replace("appendonly yes", "appendonly no")


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float, force: threading.Event | None = None) -> None:
        """SIGTERM to its group; SIGKILL after ``timeout`` or once ``force`` is set."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.proc.poll() is None and time.monotonic() < deadline:
                if force is not None and force.wait(0.05):
                    break
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@dataclass
class Services:
    models_dir: Path
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="callshield-demo-")))
    redis: EphemeralRedis | None = None
    children: list[Child] = field(default_factory=list)
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    dashboard_url: str = ""
    bridge_sip_port: int = 0
    bridge_http: str = ""
    receiver: WebhookReceiver | None = None
    stopping: threading.Event = field(default_factory=threading.Event)  # Ctrl-C seen
    forcing: threading.Event = field(default_factory=threading.Event)  # Ctrl-C twice

    @property
    def redis_url(self) -> str:
        assert self.redis is not None
        return self.redis.url

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CALLSHIELD_")}
        env.pop("REDIS_URL", None)
        key = self.root / "webhook.key"
        if not key.exists():
            from cryptography.fernet import Fernet

            key.write_bytes(Fernet.generate_key())
            key.chmod(0o600)
        if self.redis is not None:
            env["REDIS_URL"] = self.redis.url
        env.update(
            CALLSHIELD_STATE_DIR=str(self.root / "state"),
            CALLSHIELD_MODELS_DIR=str(self.models_dir),
            CALLSHIELD_WEBHOOK_KEY_FILE=str(key),
            CALLSHIELD_WEBHOOK_ALLOW_PRIVATE_TARGETS="true",
            CALLSHIELD_DASHBOARD_COOKIE_SECURE="false",  # plain http on 127.0.0.1
            CALLSHIELD_DASHBOARD_WATCHLIST_TWO_PERSON="false",  # one demo analyst
            PYTHONUNBUFFERED="1",
        )
        return env

    def start_redis(self) -> None:
        self.redis = EphemeralRedis(data_dir=self.root / "redis", port=free_port(), detach=True)
        self.redis.start()

    def spawn(self, name: str, *args: str) -> Child:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sip_bridge.cli", *args],
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        child = Child(name, proc, log)
        self.children.append(child)
        return child

    def cli(self, *args: str, stdin: str = "") -> str:
        """One product command to completion; its stdout (raises with its output, or
        when the demo is being stopped: the command is then terminated)."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sip_bridge.cli", *args],
                env=self.env(),
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            assert proc.stdin is not None
            proc.stdin.write(stdin.encode())
            proc.stdin.close()
            child = Child(args[0], proc, self.root)
            while proc.poll() is None:
                if self.stopping.wait(0.1):
                    child.stop(timeout=5)
                    raise RuntimeError(f"callshield {args[0]} interrupted")
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        if proc.returncode != 0:
            tail = (stderr or stdout).decode(errors="replace")[-800:]
            raise RuntimeError(f"callshield {' '.join(args[:2])} failed: {tail}")
        return stdout.decode()

    def start_bridge(self) -> Child:
        """Spawned; :meth:`bridge_ready` waits (and respawns when a port was taken)."""
        self.bridge_sip_port = free_udp_tcp_port()
        http = free_port()
        self.bridge_http = f"http://127.0.0.1:{http}"
        base = 31000 + secrets.randbelow(300) * 100
        return self.spawn(
            "bridge",
            "bridge",
            "--sip-listen",
            f"127.0.0.1:{self.bridge_sip_port}",
            "--rtp-ports",
            f"{base}-{base + 99}",
            "--http-listen",
            f"127.0.0.1:{http}",
            "--api-listen",
            f"127.0.0.1:{free_port()}",
            "--drain-timeout",
            "3",
        )

    def bridge_ready(self, bridge: Child, timeout: float) -> None:
        for _ in range(3):
            try:
                self.wait_http(self.bridge_http + "/ready", bridge, timeout)
                return
            except RuntimeError as exc:
                if "Address already in use" not in str(exc):
                    raise
            self.children.remove(bridge)
            bridge = self.start_bridge()  # a port taken meanwhile: new ports
        self.wait_http(self.bridge_http + "/ready", bridge, timeout)

    def start_dashboard(self) -> Child:
        port = free_port()
        self.dashboard_url = f"http://127.0.0.1:{port}"
        return self.spawn("dashboard", "dashboard", "--listen", f"127.0.0.1:{port}")

    def create_admin(self) -> None:
        self.cli(
            "dashboard",
            "create-user",
            ADMIN,
            "--role",
            "admin",
            "--password-stdin",
            stdin=self.password + "\n",
        )

    def analyst_key(self) -> str:
        return self.cli(
            "dashboard", "create-api-key", "demo-watchlist", "--role", "analyst"
        ).strip()

    def start_webhooks(self, on_delivery: Callable[[str, bool], None]) -> None:
        self.receiver = WebhookReceiver(on_delivery)
        out = self.cli("webhooks", "add", self.receiver.url, "--allow-private")
        self.receiver.secret = out.split("secret (shown once):", 1)[1].strip()
        self.spawn("webhooks", "webhooks", "run")

    def wait_http(self, url: str, child: Child, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if child.proc.poll() is not None:
                tail = child.log.read_text(errors="replace")[-1500:]
                raise RuntimeError(f"{child.name} exited ({child.proc.returncode}):\n{tail}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{child.name} not ready at {url} after {timeout:.0f} s")

    def stop(self) -> None:
        for child in self.children:  # bridge first: it drains (BYE) its calls
            child.stop(timeout=15, force=self.forcing)
        if self.receiver is not None:
            self.receiver.close()
        if self.redis is not None:
            self.redis.kill9() if self.forcing.is_set() else self.redis.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class WebhookReceiver:
    """A local HTTP endpoint the dispatcher delivers to; checks each signature."""

    def __init__(self, on_delivery: Callable[[str, bool], None]) -> None:
        self.secret = ""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.delivered(body, dict(self.headers.items()))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.on_delivery = on_delivery
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/callshield"

    def delivered(self, body: bytes, headers: dict[str, str]) -> None:
        from standardwebhooks import Webhook

        lower = {k.lower(): v for k, v in headers.items()}
        try:
            Webhook(self.secret).verify(body, lower)
            valid = True
        except Exception:  # any verification failure: shown, not fatal
            valid = False
        self.on_delivery(lower.get("webhook-id", "?"), valid)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
