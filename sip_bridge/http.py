"""The bridge's small HTTP port: Prometheus ``/metrics``, ``/ready`` and ``/health``.

A stdlib ``ThreadingHTTPServer`` on its own thread (``--http-listen``): nothing here
runs on the media or signalling threads, and the bridge needs no web framework.

- ``/health`` (liveness): 200 while the playout clock is ticking.
- ``/ready`` (readiness, DESIGN §3/§9): 200 only once every model is pre-warmed and
  alerts have somewhere to go (Redis answers, or the local outbox is writable); 503
  with the failing checks otherwise. Both bodies are JSON.
- ``/metrics``: the text exposition of the bridge's registry.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Probes(Protocol):
    def metrics(self) -> tuple[bytes, str]: ...

    def ready(self) -> tuple[bool, dict[str, Any]]: ...

    def alive(self) -> tuple[bool, dict[str, Any]]: ...


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.partition("?")[0]
        probes = self.server.probes
        try:
            if path == "/metrics":
                body, ctype = probes.metrics()
                self._send(200, body, ctype)
            elif path in ("/ready", "/health"):
                ok, detail = probes.ready() if path == "/ready" else probes.alive()
                payload = json.dumps({"status": "ok" if ok else "unavailable", **detail})
                self._send(200 if ok else 503, payload.encode(), "application/json")
            else:
                self._send(404, b"not found\n", "text/plain")
        except Exception:
            log.exception("HTTP %s failed", path)
            self._send(500, b"internal error\n", "text/plain")

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    probes: Probes


class _Server6(_Server):
    address_family = socket.AF_INET6


class StatusServer:
    def __init__(self, host: str, port: int, probes: Probes) -> None:
        cls = _Server6 if ":" in host else _Server
        self._server = cls((host, port), _Handler)
        self._server.probes = probes
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="http"
        )
        self._thread.daemon = True

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()
        log.info("HTTP /metrics, /ready, /health on %s:%d", *self.address)

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()
