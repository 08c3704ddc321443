"""CallShield alert webhooks -> FreeSWITCH, through the event socket (ESL, inbound).

``callshield webhooks add https://pbx-hooks.example/callshield --events 'call.alert.*'``
prints the endpoint's ``whsec_`` secret: give it to this program as
``CALLSHIELD_WEBHOOK_SECRET``. Each request is verified with the ``standardwebhooks``
library (HMAC-SHA256 over ``id.timestamp.body``, timestamp within 5 minutes): a bad or
stale signature is answered 401 and nothing is done. A ``webhook-id`` already handled
is answered 200 and not acted on again (the dispatcher delivers at least once).

The call is the alert's ``external_ids["freeswitch"]``: the channel UUID
(``mod_audio_fork`` attaches set it; ``docs/integrations.md``). Per alert revision this
program connects to ``mod_event_socket`` (``ESL_HOST``:``ESL_PORT``, 8021), answers the
``auth/request`` with ``auth ESL_PASSWORD`` and sends ``api`` commands:

- ``uuid_setvar <uuid> CALLSHIELD_RISK <band>`` (and ``CALLSHIELD_DIMENSION``,
  ``CALLSHIELD_SCORE``, ``CALLSHIELD_ALERT``): the dialplan and the agent desktop read
  them;
- band ``elevated``: ``uuid_broadcast <uuid> WARNING_PROMPT bleg``: the warning is
  played to the other leg (the agent, when the UUID is the caller's);
- band ``high``: ``uuid_transfer <uuid> FRAUD_EXTENSION XML FRAUD_CONTEXT``: the call
  goes to the fraud queue (``fraud_queue`` in ``default``).

``stale`` deliveries only set the variables. ``-ERR No such channel`` (the call is gone)
is answered 200; the socket unreachable, auth refused or another ``-ERR`` is answered
503 / 500 so the dispatcher tries again later, in order. Other event types are
acknowledged and ignored.

Environment: ``CALLSHIELD_WEBHOOK_SECRET``, ``ESL_HOST`` (127.0.0.1), ``ESL_PORT``
(8021), ``ESL_PASSWORD`` (FreeSWITCH's default is ``ClueCon``: change it),
``WARNING_PROMPT`` (``ivr/ivr-call_being_transferred.wav``), ``FRAUD_CONTEXT``,
``FRAUD_EXTENSION``. Run: ``pip install standardwebhooks; python freeswitch_esl.py``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError

SYSTEM = "freeswitch"  # the external-id key naming a FreeSWITCH channel UUID
_UUID = re.compile(r"^[0-9A-Za-z-]{1,64}$")  # nothing that could split an api command
_VALUE = re.compile(r"^[0-9A-Za-z._:-]{0,200}$")


class EslUnavailableError(Exception):
    """No socket, no auth, or the connection dropped: worth a retry."""


class EslRefusedError(Exception):
    """An api command answered -ERR (other than a missing channel)."""


class ChannelGoneError(Exception):
    """-ERR No such channel: the call is over."""


@dataclass(frozen=True)
class EslConfig:
    host: str = "127.0.0.1"
    port: int = 8021
    password: str = "ClueCon"
    warning_prompt: str = "ivr/ivr-call_being_transferred.wav"
    fraud_context: str = "default"
    fraud_extension: str = "fraud_queue"
    timeout_s: float = 3.0


class EslConnection:
    """One inbound event-socket session: auth, then ``api`` commands, then ``exit``."""

    def __init__(self, config: EslConfig) -> None:
        try:
            self._sock = socket.create_connection(
                (config.host, config.port), timeout=config.timeout_s
            )
        except OSError as exc:
            raise EslUnavailableError(f"event socket unreachable: {exc}") from None
        self._buf = b""
        try:
            headers, _ = self._read()
            if headers.get("Content-Type") != "auth/request":
                raise EslUnavailableError(f"unexpected greeting {headers}")
            self._send(f"auth {config.password}")
            headers, _ = self._read()
            if not headers.get("Reply-Text", "").startswith("+OK"):
                raise EslUnavailableError(f"auth refused: {headers.get('Reply-Text', '')}")
        except BaseException:
            self._sock.close()
            raise

    def api(self, command: str) -> str:
        self._send(f"api {command}")
        headers, body = self._read()
        if headers.get("Content-Type") != "api/response":
            raise EslUnavailableError(f"unexpected reply {headers}")
        text = body.decode(errors="replace").strip()
        if text.startswith("-ERR"):
            if "no such channel" in text.lower():
                raise ChannelGoneError(command)
            raise EslRefusedError(f"{command.split()[0]}: {text}")
        return text

    def close(self) -> None:
        with contextlib.suppress(EslUnavailableError):
            self._send("exit")
        self._sock.close()

    def _send(self, line: str) -> None:
        try:
            self._sock.sendall(line.encode() + b"\n\n")
        except OSError as exc:
            raise EslUnavailableError(str(exc)) from None

    def _read(self) -> tuple[dict[str, str], bytes]:
        """One message: ``Name: value`` lines up to a blank line, then
        ``Content-Length`` bytes of body."""
        while b"\n\n" not in self._buf:
            self._buf += self._recv()
        head, self._buf = self._buf.split(b"\n\n", 1)
        headers = {}
        for line in head.decode(errors="replace").splitlines():
            name, _, value = line.partition(":")
            headers[name.strip()] = value.strip()
        length = int(headers.get("Content-Length", "0") or 0)
        while len(self._buf) < length:
            self._buf += self._recv()
        body, self._buf = self._buf[:length], self._buf[length:]
        return headers, body

    def _recv(self) -> bytes:
        try:
            data = self._sock.recv(65536)
        except OSError as exc:
            raise EslUnavailableError(str(exc)) from None
        if not data:
            raise EslUnavailableError("event socket closed the connection")
        return data


class Receiver:
    def __init__(self, secret: str, config: EslConfig, remember: int = 10_000) -> None:
        self._webhook = Webhook(secret)
        self.config = config
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._remember = remember
        self._lock = threading.Lock()

    def handle(self, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        headers = {k.lower(): v for k, v in headers.items()}
        try:
            envelope = self._webhook.verify(body, headers)
        except WebhookVerificationError:
            return 401, {"error": "bad or stale signature"}
        msg_id = headers["webhook-id"]
        with self._lock:
            if msg_id in self._seen:
                return 200, {"duplicate": msg_id}
        kind = str(envelope.get("type", ""))
        alert = envelope.get("data") or {}
        uuid = str((alert.get("external_ids") or {}).get(SYSTEM, ""))
        if not kind.startswith("call.alert.") or not _UUID.match(uuid):
            self._remember_id(msg_id)
            return 200, {"ignored": kind if uuid else "no freeswitch uuid"}
        try:
            done = self.act(uuid, alert, bool(envelope.get("stale")))
        except ChannelGoneError:
            done = ["channel gone"]
        except EslUnavailableError as exc:
            return 503, {"error": str(exc)}  # not remembered: the retry acts
        except EslRefusedError as exc:
            return 500, {"error": str(exc)}
        self._remember_id(msg_id)
        return 200, {"uuid": uuid, "done": done}

    def act(self, uuid: str, alert: Mapping[str, Any], stale: bool) -> list[str]:
        band = str(alert.get("band", ""))
        variables = {
            "CALLSHIELD_RISK": band,
            "CALLSHIELD_DIMENSION": str(alert.get("dimension", "")),
            "CALLSHIELD_SCORE": f"{float(alert.get('score', 0.0)):.2f}",
            "CALLSHIELD_ALERT": f"{alert.get('alert_id', '')}.r{alert.get('revision', '')}",
        }
        cfg = self.config
        esl = EslConnection(cfg)
        try:
            for name, value in variables.items():
                if _VALUE.match(value):  # never a space or newline into the command
                    esl.api(f"uuid_setvar {uuid} {name} {value}")
            done = ["variables"]
            if stale:
                return done
            if band == "high":
                esl.api(f"uuid_transfer {uuid} {cfg.fraud_extension} XML {cfg.fraud_context}")
                done.append(f"transfer {cfg.fraud_extension}@{cfg.fraud_context}")
            elif band == "elevated":
                esl.api(f"uuid_broadcast {uuid} {cfg.warning_prompt} bleg")
                done.append("warning to the other leg")
            return done
        finally:
            esl.close()

    def _remember_id(self, msg_id: str) -> None:
        with self._lock:
            self._seen[msg_id] = None
            while len(self._seen) > self._remember:
                self._seen.popitem(last=False)


def make_server(receiver: Receiver, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length > 1 << 20:
                self.send_error(413)
                return
            status, answer = receiver.handle(dict(self.headers.items()), self.rfile.read(length))
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return ThreadingHTTPServer((host, port), Handler)


def from_env() -> Receiver:
    env = os.environ
    defaults = EslConfig()
    config = EslConfig(
        host=env.get("ESL_HOST", defaults.host),
        port=int(env.get("ESL_PORT", str(defaults.port))),
        password=env.get("ESL_PASSWORD", defaults.password),
        warning_prompt=env.get("WARNING_PROMPT", defaults.warning_prompt),
        fraud_context=env.get("FRAUD_CONTEXT", defaults.fraud_context),
        fraud_extension=env.get("FRAUD_EXTENSION", defaults.fraud_extension),
    )
    return Receiver(env["CALLSHIELD_WEBHOOK_SECRET"], config)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args()
    make_server(from_env(), args.host, args.port).serve_forever()
