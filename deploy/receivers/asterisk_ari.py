"""CallShield alert webhooks -> Asterisk, through ARI (the Asterisk REST Interface).

``callshield webhooks add https://pbx-hooks.example/callshield --events 'call.alert.*'``
prints the endpoint's ``whsec_`` secret: give it to this program as
``CALLSHIELD_WEBHOOK_SECRET``. Each request is verified with the ``standardwebhooks``
library (HMAC-SHA256 over ``id.timestamp.body``, timestamp within 5 minutes): a bad or
stale signature is answered 401 and nothing is done. A ``webhook-id`` already handled
is answered 200 and not acted on again (the dispatcher delivers at least once).

The call is the alert's ``external_ids["asterisk"]``: the channel id you gave the
bridge when you attached the call (``POST /v1/calls`` with ``external_ids``; for ARI
ExternalMedia, the caller's channel id). On every alert revision:

- ``POST /ari/channels/{id}/variable``: ``CALLSHIELD_RISK`` (the band),
  ``CALLSHIELD_DIMENSION``, ``CALLSHIELD_SCORE``, ``CALLSHIELD_ALERT`` (alert id and
  revision): the dialplan and the agent desktop (``CHANNEL(...)``/AMI) can read them;
- band ``elevated``: whisper a warning to the agent: a snoop channel on the call that
  whispers into it (``POST /ari/channels/{id}/snoop?whisper=out``) plays
  ``ARI_WARNING_MEDIA`` (``sound:beep``);
- band ``high``: the channel leaves the Stasis application for the fraud queue:
  ``POST /ari/channels/{id}/continue`` to ``FRAUD_CONTEXT``/``FRAUD_EXTENSION``
  (``callshield-fraud``/``s``, priority 1).

Actions other than the variables need the channel to be in a Stasis application (it is,
when CallShield gets its audio through ExternalMedia); ``stale`` deliveries (late: a
retry after an outage) only set the variables. ARI answering 404 (the call is gone) is
answered 200 (nothing left to do); ARI unreachable or 5xx is answered 503, so the
dispatcher tries again later, in order; another ARI refusal (409: not in Stasis) is
answered 500. Other event types are acknowledged and ignored.

Environment: ``CALLSHIELD_WEBHOOK_SECRET``, ``ARI_URL`` (``http://127.0.0.1:8088``),
``ARI_USER``, ``ARI_PASSWORD``, ``ARI_APP`` (the Stasis application the snoop channel
joins), ``ARI_WARNING_MEDIA``, ``FRAUD_CONTEXT``, ``FRAUD_EXTENSION``.
Run: ``pip install standardwebhooks; python asterisk_ari.py --port 8089``.
"""

from __future__ import annotations

import argparse
import base64
import collections
import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError

SYSTEM = "asterisk"  # the external-id key naming an Asterisk channel


class AriUnavailableError(Exception):
    """ARI did not answer, or answered 5xx: worth a retry."""


class ChannelGoneError(Exception):
    """ARI answered 404: the channel no longer exists."""


class AriRefusedError(Exception):
    """ARI answered another 4xx (e.g. 409: the channel is not in a Stasis application)."""


@dataclass(frozen=True)
class AriConfig:
    url: str = "http://127.0.0.1:8088"
    user: str = "callshield"
    password: str = ""
    app: str = "callshield"
    warning_media: str = "sound:beep"
    fraud_context: str = "callshield-fraud"
    fraud_extension: str = "s"
    timeout_s: float = 3.0


class Ari:
    """The few ARI calls used here, over HTTP basic auth."""

    def __init__(self, config: AriConfig) -> None:
        self.config = config
        token = base64.b64encode(f"{config.user}:{config.password}".encode()).decode()
        self._auth = f"Basic {token}"

    def post(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        url = f"{self.config.url.rstrip('/')}/ari{path}?{query}"
        request = urllib.request.Request(
            url, data=b"", method="POST", headers={"Authorization": self._auth}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise ChannelGoneError(path) from None
            if exc.code >= 500:
                raise AriUnavailableError(f"ARI {exc.code} on {path}") from None
            raise AriRefusedError(f"ARI {exc.code} on {path}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise AriUnavailableError(f"ARI unreachable: {exc}") from None
        return json.loads(raw) if raw else None

    def channel(self, channel_id: str) -> str:
        return f"/channels/{urllib.parse.quote(channel_id, safe='')}"


class Receiver:
    def __init__(self, secret: str, ari: Ari, remember: int = 10_000) -> None:
        self._webhook = Webhook(secret)
        self.ari = ari
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
        channel = (alert.get("external_ids") or {}).get(SYSTEM)
        if not kind.startswith("call.alert.") or not channel:
            self._remember_id(msg_id)
            return 200, {"ignored": kind if not channel else "no asterisk channel"}
        try:
            done = self.act(channel, alert, bool(envelope.get("stale")))
        except ChannelGoneError:
            done = ["channel gone"]
        except AriUnavailableError as exc:
            return 503, {"error": str(exc)}  # not remembered: the retry acts
        except AriRefusedError as exc:  # retried, then dead-lettered: `callshield webhooks dead`
            return 500, {"error": str(exc)}
        self._remember_id(msg_id)
        return 200, {"channel": channel, "done": done}

    def act(self, channel: str, alert: Mapping[str, Any], stale: bool) -> list[str]:
        path = self.ari.channel(channel)
        band = str(alert.get("band", ""))
        variables = {
            "CALLSHIELD_RISK": band,
            "CALLSHIELD_DIMENSION": str(alert.get("dimension", "")),
            "CALLSHIELD_SCORE": f"{float(alert.get('score', 0.0)):.2f}",
            "CALLSHIELD_ALERT": f"{alert.get('alert_id', '')}.r{alert.get('revision', '')}",
        }
        for name, value in variables.items():
            self.ari.post(f"{path}/variable", variable=name, value=value)
        done = ["variables"]
        if stale:
            return done
        cfg = self.ari.config
        if band == "high":
            self.ari.post(
                f"{path}/continue",
                context=cfg.fraud_context,
                extension=cfg.fraud_extension,
                priority="1",
            )
            done.append(f"continue {cfg.fraud_context}")
        elif band == "elevated":
            snoop = self.ari.post(f"{path}/snoop", spy="none", whisper="out", app=cfg.app)
            self.ari.post(self.ari.channel(str(snoop["id"])) + "/play", media=cfg.warning_media)
            done.append("whisper warning")
        return done

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
    defaults = AriConfig()
    config = AriConfig(
        url=env.get("ARI_URL", defaults.url),
        user=env.get("ARI_USER", defaults.user),
        password=env.get("ARI_PASSWORD", defaults.password),
        app=env.get("ARI_APP", defaults.app),
        warning_media=env.get("ARI_WARNING_MEDIA", defaults.warning_media),
        fraud_context=env.get("FRAUD_CONTEXT", defaults.fraud_context),
        fraud_extension=env.get("FRAUD_EXTENSION", defaults.fraud_extension),
    )
    return Receiver(env["CALLSHIELD_WEBHOOK_SECRET"], Ari(config))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    args = parser.parse_args()
    make_server(from_env(), args.host, args.port).serve_forever()
