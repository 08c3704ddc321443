"""Webhook receiver: CallShield alerts -> Amazon Connect contact attributes with Voice
ID's result names and 0-100 risks (``detectors/bus/voice_id.py`` says which).

``callshield webhooks add https://receiver.example/ --events 'call.alert.*'`` prints the
endpoint's ``whsec_`` secret; give it to this receiver as ``CALLSHIELD_WEBHOOK_SECRET``.
Each delivery is checked (Standard Webhooks: HMAC-SHA256 over ``id.timestamp.body``,
timestamp within 5 minutes), then for an alert on a Connect call (``external_ids``
``connect`` = ContactId, ``connect_initial``, ``connect_instance``) the contact's
current attributes are read (``GetContactAttributes``), the alert merged in (risks only
rise; decision and reasons follow) and written (``UpdateContactAttributes``). The
dispatcher delivers one call's alerts in order, one at a time, so this
read-merge-write does not race with itself. Other events are acknowledged and ignored.

Runs as a Lambda behind a function URL (:func:`lambda_handler`) or as a small HTTP
server (``python webhook_receiver.py --port 8088``). boto3 is imported only when no
client is given (Lambda has it); package ``detectors/bus/voice_id.py`` beside this
file as ``voice_id.py`` (it needs only the standard library). Environment:
``CALLSHIELD_WEBHOOK_SECRET``, ``CONNECT_INSTANCE_ID`` (when calls do not carry it),
``CALLSHIELD_RISK_THRESHOLD`` (50), ``CALLSHIELD_ACCEPTANCE_THRESHOLD`` (90).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

try:
    from detectors.bus.voice_id import merge_alert
except ImportError:  # packaged beside this file
    from voice_id import merge_alert  # type: ignore[import-not-found,no-redef]

TOLERANCE_S = 300


def verify(secret: str, headers: Mapping[str, str], body: bytes, now: float | None = None) -> bool:
    """Standard Webhooks signature check (any of the space-separated ``v1,`` values)."""
    msg_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    signatures = headers.get("webhook-signature", "")
    if not (msg_id and stamp.isdigit() and signatures):
        return False
    if abs((now if now is not None else time.time()) - int(stamp)) > TOLERANCE_S:
        return False
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    expected = base64.b64encode(mac).decode()
    for item in signatures.split():
        version, _, value = item.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return True
    return False


class Receiver:
    def __init__(
        self,
        secret: str,
        connect: Any = None,
        *,
        instance_id: str = "",
        risk_threshold: int = 50,
        acceptance_threshold: int = 90,
    ) -> None:
        self.secret = secret
        self._connect = connect
        self.instance_id = instance_id
        self.options = {
            "risk_threshold": risk_threshold,
            "acceptance_threshold": acceptance_threshold,
        }

    @property
    def connect(self) -> Any:
        if self._connect is None:
            import boto3  # in Lambda's runtime; not a dependency of CallShield

            self._connect = boto3.client("connect")
        return self._connect

    def handle(self, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        headers = {k.lower(): v for k, v in headers.items()}
        if not verify(self.secret, headers, body):
            return 401, {"error": "bad or stale signature"}
        try:
            envelope = json.loads(body)
            kind = str(envelope["type"])
            alert = envelope["data"]
        except (ValueError, KeyError, TypeError):
            return 400, {"error": "not a CallShield webhook"}
        if not kind.startswith("call.alert."):
            return 200, {"ignored": kind}
        ids = alert.get("external_ids") or {}
        contact = ids.get("connect")
        instance = ids.get("connect_instance") or self.instance_id
        if not contact or not instance:
            return 200, {"ignored": "not an Amazon Connect call"}
        initial = ids.get("connect_initial") or contact
        current = self.connect.get_contact_attributes(InstanceId=instance, InitialContactId=initial)
        attributes = merge_alert(current.get("Attributes") or {}, alert, **self.options)
        self.connect.update_contact_attributes(
            InstanceId=instance, InitialContactId=initial, Attributes=attributes
        )
        return 200, {"contact_id": contact, "attributes": attributes}


def _from_env(connect: Any = None) -> Receiver:
    return Receiver(
        os.environ["CALLSHIELD_WEBHOOK_SECRET"],
        connect,
        instance_id=os.environ.get("CONNECT_INSTANCE_ID", ""),
        risk_threshold=int(os.environ.get("CALLSHIELD_RISK_THRESHOLD", "50")),
        acceptance_threshold=int(os.environ.get("CALLSHIELD_ACCEPTANCE_THRESHOLD", "90")),
    )


_RECEIVER: Receiver | None = None


def lambda_handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """A Lambda function URL (payload format 2.0) in front of :class:`Receiver`."""
    global _RECEIVER
    if _RECEIVER is None:
        _RECEIVER = _from_env()
    body = event.get("body") or ""
    raw = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode()
    status, answer = _RECEIVER.handle(event.get("headers") or {}, raw)
    return {"statusCode": status, "body": json.dumps(answer)}


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

        def log_message(self, format: str, *args: Any) -> None:  # no request logs
            pass

    return ThreadingHTTPServer((host, port), Handler)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8088)
    args = parser.parse_args()
    make_server(_from_env(), args.host, args.port).serve_forever()
