"""deploy/receivers/: the Asterisk ARI and FreeSWITCH ESL example receivers, served over
HTTP, fed webhooks signed by the dispatcher's own signing code (``signature_header``,
the ``standardwebhooks`` library) with the dispatcher's own envelope.

Neither PBX is installable here (Debian 12 packages neither Asterisk nor FreeSWITCH:
``apt-cache policy asterisk`` has no candidate), so each receiver talks to a stand-in
written below that speaks the documented protocol and records what it was asked: an ARI
HTTP server (basic auth, ``/ari/channels/{id}/variable|continue|snoop|play``, 404 for an
unknown channel) and a ``mod_event_socket`` TCP server (``auth/request``, ``auth``,
``command/reply``, ``api`` -> ``api/response`` with ``Content-Length``, ``-ERR No such
channel!``)."""

from __future__ import annotations

import socketserver
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from deploy.receivers import asterisk_ari, freeswitch_esl
from detectors.alert_schema import Alert, Band, Dimension, Reason, alert_id_for, event_id
from detectors.bus.webhooks.payload import envelope_json
from detectors.bus.webhooks.secrets import new_secret
from detectors.bus.webhooks.sender import signature_header

CHANNEL = "1733000000.42"
UUID = "7f4de4bc-0f5a-4a2c-9d3e-2b8e6c1f0a11"


def _alert(band: Band, revision: int, external_ids: dict[str, str]) -> Alert:
    now = datetime.now(UTC)
    dim = Dimension.SYNTHETIC_VOICE
    return Alert(
        alert_id=alert_id_for("call-pbx", dim, 0),
        revision=revision,
        call_id="call-pbx",
        node_id="node-1",
        dimension=dim,
        band=band,
        score=0.93 if band == Band.HIGH else 0.75,
        threshold=0.7,
        episode=0,
        reasons=(Reason(dimension=dim, start_s=1.0, end_s=5.0, score=0.9),),
        created_at=now,
        updated_at=now,
        policy_version="p1",
        provider="CPUExecutionProvider",
        external_ids=external_ids,
    )


def _post(url: str, secret: str, alert: Alert, stale: bool = False) -> httpx.Response:
    """What the dispatcher's sender sends: the envelope, Standard Webhooks headers."""
    body = envelope_json(alert, stale)
    msg_id = event_id(alert)
    now = datetime.now(UTC)
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature_header([secret], msg_id, now, body),
        "content-type": "application/json",
    }
    return httpx.post(url, content=body.encode(), headers=headers, timeout=10)


# --- an ARI stand-in ---------------------------------------------------------------------
@dataclass
class FakeAri:
    channels: set[str]
    user: str = "callshield"
    password: str = "ari-secret"
    status: int | None = None  # forced answer (e.g. 503: Asterisk overloaded)
    calls: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    unauthorized: int = 0

    def __post_init__(self) -> None:
        ari = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                code, body = ari.answer(self.path, self.headers.get("Authorization", ""))
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(self, raw_path: str, auth: str) -> tuple[int, bytes]:
        import base64

        expected = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        if auth != f"Basic {expected}":
            self.unauthorized += 1
            return 401, b'{"message": "Authentication required"}'
        if self.status is not None:
            return self.status, b'{"message": "forced"}'
        parsed = urllib.parse.urlsplit(raw_path)
        params = dict(urllib.parse.parse_qsl(parsed.query))
        parts = [urllib.parse.unquote(p) for p in parsed.path.split("/")]
        # ['', 'ari', 'channels', <id>, <operation>]
        if parts[:3] != ["", "ari", "channels"] or len(parts) != 5:
            return 404, b'{"message": "Resource not found"}'
        channel, op = parts[3], parts[4]
        if channel not in self.channels:
            return 404, b'{"message": "Channel not found"}'
        self.calls.append((f"{op} {channel}", params))
        if op == "snoop":
            snoop_id = f"snoop-{len(self.calls)}"
            self.channels.add(snoop_id)
            return 200, f'{{"id": "{snoop_id}", "name": "Snoop/{channel}"}}'.encode()
        if op == "play":
            return 201, b'{"id": "playback-1", "state": "queued"}'
        if op in ("variable", "continue"):
            return 204, b""
        return 404, b'{"message": "Resource not found"}'

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def ari() -> Iterator[tuple[FakeAri, str, str]]:
    fake = FakeAri(channels={CHANNEL})
    secret = new_secret()
    config = asterisk_ari.AriConfig(url=fake.url, user=fake.user, password=fake.password)
    receiver = asterisk_ari.Receiver(secret, asterisk_ari.Ari(config))
    server = asterisk_ari.make_server(receiver, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield fake, f"http://127.0.0.1:{server.server_address[1]}/callshield", secret
    server.shutdown()
    server.server_close()
    fake.close()


def _variables(calls: list[tuple[str, dict[str, str]]], target: str) -> dict[str, str]:
    return {p["variable"]: p["value"] for op, p in calls if op == f"variable {target}"}


def test_ari_receiver_sets_variables_whispers_then_sends_to_the_fraud_queue(
    ari: tuple[FakeAri, str, str],
) -> None:
    fake, url, secret = ari
    elevated = _alert(Band.ELEVATED, 1, {"asterisk": CHANNEL})
    r = _post(url, secret, elevated)
    assert r.status_code == 200, r.text
    assert _variables(fake.calls, CHANNEL) == {
        "CALLSHIELD_RISK": "elevated",
        "CALLSHIELD_DIMENSION": "synthetic_voice",
        "CALLSHIELD_SCORE": "0.75",
        "CALLSHIELD_ALERT": event_id(elevated),
    }
    ops = [op for op, _ in fake.calls if not op.startswith("variable")]
    assert ops == [f"snoop {CHANNEL}", "play snoop-5"]
    snoop = dict(fake.calls)[f"snoop {CHANNEL}"]
    assert snoop["whisper"] == "out" and snoop["spy"] == "none" and snoop["app"] == "callshield"
    assert dict(fake.calls)["play snoop-5"] == {"media": "sound:beep"}

    fake.calls.clear()
    high = _alert(Band.HIGH, 2, {"asterisk": CHANNEL})
    assert _post(url, secret, high).status_code == 200
    assert _variables(fake.calls, CHANNEL)["CALLSHIELD_RISK"] == "high"
    assert fake.calls[-1] == (
        f"continue {CHANNEL}",
        {"context": "callshield-fraud", "extension": "s", "priority": "1"},
    )
    assert fake.unauthorized == 0

    # the dispatcher's retry of a handled delivery: acknowledged, not acted on again
    fake.calls.clear()
    again = _post(url, secret, high)
    assert again.status_code == 200 and again.json() == {"duplicate": event_id(high)}
    assert fake.calls == []


def test_ari_receiver_refuses_a_bad_signature_and_does_nothing(
    ari: tuple[FakeAri, str, str],
) -> None:
    fake, url, _ = ari
    alert = _alert(Band.HIGH, 1, {"asterisk": CHANNEL})
    assert _post(url, new_secret(), alert).status_code == 401  # another endpoint's secret
    body = envelope_json(alert, False)
    forged = httpx.post(
        url,
        content=body.replace('"high"', '"low"').encode(),  # altered after signing
        headers={
            "webhook-id": event_id(alert),
            "webhook-timestamp": str(int(datetime.now(UTC).timestamp())),
            "webhook-signature": signature_header(
                [ari[2]], event_id(alert), datetime.now(UTC), body
            ),
        },
    )
    assert forged.status_code == 401
    old = datetime.fromtimestamp(datetime.now(UTC).timestamp() - 3600, UTC)
    stale_stamp = httpx.post(
        url,
        content=body.encode(),
        headers={
            "webhook-id": event_id(alert),
            "webhook-timestamp": str(int(old.timestamp())),
            "webhook-signature": signature_header([ari[2]], event_id(alert), old, body),
        },
    )
    assert stale_stamp.status_code == 401  # outside the timestamp tolerance
    assert fake.calls == []
    # a refused delivery is not remembered: the genuine one still acts
    assert _post(url, ari[2], alert).status_code == 200 and fake.calls


def test_ari_receiver_outcomes_the_dispatcher_acts_on(ari: tuple[FakeAri, str, str]) -> None:
    fake, url, secret = ari
    gone = _post(url, secret, _alert(Band.HIGH, 1, {"asterisk": "1733000000.99"}))
    assert gone.status_code == 200 and gone.json()["done"] == ["channel gone"]
    other = _post(url, secret, _alert(Band.HIGH, 2, {"freeswitch": UUID}))
    assert other.status_code == 200 and "ignored" in other.json()
    assert fake.calls == []
    late = _post(url, secret, _alert(Band.HIGH, 3, {"asterisk": CHANNEL}), stale=True)
    assert late.status_code == 200 and late.json()["done"] == ["variables"]
    assert all(op.startswith("variable") for op, _ in fake.calls)  # no transfer when late
    fake.status = 503
    busy = _post(url, secret, _alert(Band.HIGH, 4, {"asterisk": CHANNEL}))
    assert busy.status_code == 503  # the dispatcher retries ...
    fake.status = None
    retried = _post(url, secret, _alert(Band.HIGH, 4, {"asterisk": CHANNEL}))
    assert retried.status_code == 200  # ... and the retry acts (not taken as a duplicate)
    assert fake.calls[-1][0] == f"continue {CHANNEL}"


# --- a mod_event_socket stand-in ---------------------------------------------------------
@dataclass
class FakeEsl:
    channels: set[str]
    password: str = "esl-secret"
    commands: list[str] = field(default_factory=list)
    auth_failures: int = 0

    def __post_init__(self) -> None:
        esl = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.wfile.write(b"Content-Type: auth/request\n\n")
                authed = False
                while True:
                    lines = []
                    while True:
                        line = self.rfile.readline()
                        if not line:
                            return
                        if line in (b"\n", b"\r\n"):
                            break
                        lines.append(line.decode().strip())
                    if not lines:
                        continue
                    command = lines[0]
                    if command.startswith("auth "):
                        authed = command[5:] == esl.password
                        esl.auth_failures += not authed
                        text = "+OK accepted" if authed else "-ERR invalid"
                        self.wfile.write(
                            f"Content-Type: command/reply\nReply-Text: {text}\n\n".encode()
                        )
                        if not authed:
                            self.wfile.write(b"Content-Type: text/disconnect-notice\n\n")
                            return
                    elif command == "exit":
                        self.wfile.write(b"Content-Type: command/reply\nReply-Text: +OK bye\n\n")
                        return
                    elif command.startswith("api ") and authed:
                        body = esl.api(command[4:]).encode()
                        self.wfile.write(
                            b"Content-Type: api/response\nContent-Length: "
                            + str(len(body)).encode()
                            + b"\n\n"
                            + body
                        )
                    else:
                        self.wfile.write(
                            b"Content-Type: command/reply\nReply-Text: -ERR command not found\n\n"
                        )

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        port: int = self._server.server_address[1]
        return port

    def api(self, command: str) -> str:
        verb, *args = command.split()
        if verb not in ("uuid_setvar", "uuid_transfer", "uuid_broadcast"):
            return "-ERR " + verb + " Command not found!\n"
        if not args or args[0] not in self.channels:
            return "-ERR No such channel!\n"
        self.commands.append(command)
        return "+OK\n" if verb != "uuid_broadcast" else "+OK Message sent\n"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def esl() -> Iterator[tuple[FakeEsl, str, str, freeswitch_esl.Receiver]]:
    fake = FakeEsl(channels={UUID})
    secret = new_secret()
    config = freeswitch_esl.EslConfig(port=fake.port, password=fake.password)
    receiver = freeswitch_esl.Receiver(secret, config)
    server = freeswitch_esl.make_server(receiver, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield fake, f"http://127.0.0.1:{server.server_address[1]}/callshield", secret, receiver
    server.shutdown()
    server.server_close()
    fake.close()


def test_esl_receiver_sets_variables_warns_then_transfers(
    esl: tuple[FakeEsl, str, str, Any],
) -> None:
    fake, url, secret, _ = esl
    elevated = _alert(Band.ELEVATED, 1, {"freeswitch": UUID})
    r = _post(url, secret, elevated)
    assert r.status_code == 200, r.text
    assert fake.commands == [
        f"uuid_setvar {UUID} CALLSHIELD_RISK elevated",
        f"uuid_setvar {UUID} CALLSHIELD_DIMENSION synthetic_voice",
        f"uuid_setvar {UUID} CALLSHIELD_SCORE 0.75",
        f"uuid_setvar {UUID} CALLSHIELD_ALERT {event_id(elevated)}",
        f"uuid_broadcast {UUID} ivr/ivr-call_being_transferred.wav bleg",
    ]
    fake.commands.clear()
    high = _alert(Band.HIGH, 2, {"freeswitch": UUID})
    assert _post(url, secret, high).status_code == 200
    assert fake.commands[0] == f"uuid_setvar {UUID} CALLSHIELD_RISK high"
    assert fake.commands[-1] == f"uuid_transfer {UUID} fraud_queue XML default"
    fake.commands.clear()
    assert _post(url, secret, high).json() == {"duplicate": event_id(high)}
    assert fake.commands == []
    assert fake.auth_failures == 0


def test_esl_receiver_refuses_a_bad_signature_and_does_nothing(
    esl: tuple[FakeEsl, str, str, Any],
) -> None:
    fake, url, _, _ = esl
    assert _post(url, new_secret(), _alert(Band.HIGH, 1, {"freeswitch": UUID})).status_code == 401
    unsigned = httpx.post(url, content=b'{"type": "call.alert.raised"}', headers={})
    assert unsigned.status_code == 401
    assert fake.commands == []


def test_esl_receiver_outcomes_the_dispatcher_acts_on(
    esl: tuple[FakeEsl, str, str, freeswitch_esl.Receiver],
) -> None:
    fake, url, secret, receiver = esl
    gone = _post(url, secret, _alert(Band.HIGH, 1, {"freeswitch": "0000-gone"}))
    assert gone.status_code == 200 and gone.json()["done"] == ["channel gone"]
    hostile = _post(url, secret, _alert(Band.HIGH, 2, {"freeswitch": f"{UUID} hupall"}))
    assert hostile.status_code == 200 and "ignored" in hostile.json()  # never reaches ESL
    assert fake.commands == []
    receiver.config = freeswitch_esl.EslConfig(port=fake.port, password="wrong")
    refused = _post(url, secret, _alert(Band.HIGH, 3, {"freeswitch": UUID}))
    assert refused.status_code == 503 and fake.auth_failures == 1
    receiver.config = freeswitch_esl.EslConfig(port=fake.port, password=fake.password)
    retried = _post(url, secret, _alert(Band.HIGH, 3, {"freeswitch": UUID}))
    assert retried.status_code == 200
    assert fake.commands[-1] == f"uuid_transfer {UUID} fraud_queue XML default"
    fake.close()  # FreeSWITCH down
    down = _post(url, secret, _alert(Band.HIGH, 4, {"freeswitch": UUID}))
    assert down.status_code == 503
