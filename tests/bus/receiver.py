"""A real webhook receiver on 127.0.0.1: verifies every request with the
``standardwebhooks`` library, dedupes on webhook-id, and can fail on purpose."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError


@dataclass
class Receiver:
    secrets: list[str] = field(default_factory=list)  # any one verifying is enough
    fail_rate: float = 0.0
    seed: int = 0
    status: int | None = None  # forced status (e.g. 410, 302, 503 while "down")
    delay_s: float = 0.0  # time each request takes (outside the lock: concurrent)
    requests: int = 0
    bad_signatures: int = 0
    incomplete: int = 0  # bodies cut short (the sender died mid-request): never verified
    first: dict[str, dict[str, Any]] = field(default_factory=dict)  # webhook-id -> payload
    order: list[str] = field(default_factory=list)  # ids in order of first success
    duplicates: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = self.rfile.read(length)
                if len(body) < length:  # the sender died mid-request: nothing to answer
                    with receiver._lock:
                        receiver.incomplete += 1
                    self.close_connection = True
                    return
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                code = receiver.handle(body, dict(self.headers.items()))
                self.send_response(code)
                if code == 302:
                    self.send_header("location", "http://169.254.169.254/")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks/callshield"

    def handle(self, body: bytes, headers: dict[str, str]) -> int:
        with self._lock:
            self.requests += 1
            if self.status is not None:
                return self.status
            if self._rng.random() < self.fail_rate:
                return 500
            payload = None
            for secret in self.secrets:
                try:
                    payload = Webhook(secret).verify(body, headers)
                    break
                except WebhookVerificationError:
                    continue
            if payload is None:
                self.bad_signatures += 1
                return 400
            msg_id = {k.lower(): v for k, v in headers.items()}["webhook-id"]
            if msg_id in self.first:
                self.duplicates += 1
            else:
                self.first[msg_id] = payload
                self.order.append(msg_id)
            return 204

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def ids_by_call(receiver: Receiver) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for msg_id in receiver.order:
        data = receiver.first[msg_id]["data"]
        out.setdefault(data["correlation_id"] or data["call_id"], []).append(msg_id)
    return out


def dumps(obj: object) -> str:
    return json.dumps(obj, sort_keys=True)
