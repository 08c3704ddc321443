"""deploy/connect/ against the real bridge and the real webhook signing:

- the contact-flow Lambda (start_monitoring.py) turns a Connect contact flow event into
  ``POST /v1/connect/contacts`` on a running bridge over HTTP, and ``action=stop`` into
  ``DELETE``; failures come back as flow attributes, never as an exception;
- the GetMedia plug-in (kvs_getmedia.py) is loaded by the bridge from
  ``connect_media_source`` and reads a recorded GetMedia body (AWS itself cannot be
  reached here: a stand-in session serves the recording, tests/deploy/connect_stub.py),
  resuming with the continuation token, starting at the contact's producer timestamp;
- the webhook receiver (webhook_receiver.py) served over HTTP checks signatures made by
  the ``standardwebhooks`` library (the dispatcher's own signing function), merges each
  alert into the contact's attributes and writes them back (UpdateContactAttributes on
  a recording stand-in client)."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.connect import start_monitoring
from deploy.connect.kvs_getmedia import continuation_token
from deploy.connect.webhook_receiver import Receiver, make_server
from detectors.alert_schema import Alert, Band, Dimension, SystemEvent, alert_id_for, event_id
from detectors.bus.voice_id import ATTRIBUTES
from detectors.bus.webhooks.payload import envelope_json
from detectors.bus.webhooks.sender import signature_header
from tests.adapters.kvs_fixture import CUSTOMER, KvsBlock, fragments_of, kvs_stream
from tests.deploy import connect_stub
from tests.sip.bridge_runner import RunningBridge, load_speech, wait_for

TOKEN = "connect-lambda-token-0123456789"
ARN = "arn:aws:kinesisvideo:eu-west-2:111111111111:stream/connect-live-9/1571360125131"
FRAGMENT = "91343852333181531502161607852955530730504675150"
INSTANCE = "arn:aws:connect:eu-west-2:111111111111:instance/d5b716a2-10bb-45cb-bf7f-01a9864be591"


def _capture(shared_dir: Path, contact: str, seconds: float = 1.0) -> bytes:
    pcm = load_speech(shared_dir, seconds)
    blocks = [KvsBlock(CUSTOMER, k, pcm[k : k + 160].tobytes()) for k in range(0, pcm.size, 160)]
    return kvs_stream(fragments_of(blocks, 4000), contact_id=contact)


def _event(contact: str, **params: str) -> dict[str, Any]:
    """What Amazon Connect sends a Lambda after Start media streaming."""
    return {
        "Name": "ContactFlowEvent",
        "Details": {
            "ContactData": {
                "ContactId": contact,
                "InitialContactId": contact,
                "Channel": "VOICE",
                "Attributes": {"callshield_tenant": "acme"},
                "InstanceARN": INSTANCE,
                "CustomerEndpoint": {"Address": "+15550123", "Type": "TELEPHONE_NUMBER"},
                "SystemEndpoint": {"Address": "+18005550100", "Type": "TELEPHONE_NUMBER"},
                "MediaStreams": {
                    "Customer": {
                        "Audio": {
                            "StreamARN": ARN,
                            "StartFragmentNumber": FRAGMENT,
                            "StartTimestamp": "1726677688724",
                        }
                    }
                },
            },
            "Parameters": params,
        },
    }


def _url(bridge: RunningBridge) -> str:
    assert bridge.bridge.api is not None
    host, port = bridge.bridge.api.address
    return f"http://{host}:{port}"


def test_contact_flow_lambda_starts_and_stops_monitoring(
    shared_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    contact = "5f3e1c2a-0000-4d4d-9e9e-000000000001"
    (tmp_path / "connect-live-9.mkv").write_bytes(_capture(shared_dir, contact, 4.0))
    bridge = RunningBridge(control_api_token=TOKEN, connect_media_dir=str(tmp_path))
    bridge.start()
    try:
        monkeypatch.setenv("CALLSHIELD_BRIDGE_URL", _url(bridge) + "/")
        monkeypatch.setenv("CALLSHIELD_CONTROL_API_TOKEN", TOKEN)
        answer = start_monitoring.lambda_handler(_event(contact))
        assert answer["callshield_status"] == "monitoring", answer
        call = bridge.calls()[answer["callshield_call_id"]]
        assert (call.kind, call.ani, call.dnis, call.correlation_id) == (
            "connect",
            "+15550123",
            "+18005550100",
            contact,
        )
        assert (call.tenant, call.tenant_source) == ("acme", "connect_request")
        assert call.external_ids == {
            "connect": contact,
            "connect_instance": "d5b716a2-10bb-45cb-bf7f-01a9864be591",
            "connect_initial": contact,
        }
        again = start_monitoring.lambda_handler(_event(contact))
        assert again["callshield_status"] == "error" and "HTTP 409" in again["callshield_error"]
        assert start_monitoring.lambda_handler(_event(contact, action="stop")) == {
            "callshield_status": "stopped"
        }
        assert wait_for(lambda: call.call_id not in bridge.calls())
        ended = [e.reason for e, _ in bridge.publisher.events if e.event == "ended"]
        assert ended == ["api"]
        monkeypatch.setenv("CALLSHIELD_CONTROL_API_TOKEN", "wrong")
        denied = start_monitoring.lambda_handler(_event(contact))
        assert denied["callshield_status"] == "error" and "HTTP 401" in denied["callshield_error"]
    finally:
        bridge.stop()
    gone = start_monitoring.lambda_handler(_event(contact))  # the bridge is down
    assert gone["callshield_status"] == "error" and "URLError" in gone["callshield_error"]


def test_getmedia_plugin_through_the_bridge(shared_dir: Path) -> None:
    contact = "5f3e1c2a-0000-4d4d-9e9e-000000000002"
    whole = _capture(shared_dir, contact, 1.0)
    token = continuation_token(whole)
    assert token == FRAGMENT[:-1] + "1"  # the stream's second fragment
    half = whole.index(b"\x1a\x45\xdf\xa3", 10)  # GetMedia ends a response between fragments
    connect_stub.responses[:] = [whole[:half], whole[half:]]
    connect_stub.selectors.clear()
    bridge = RunningBridge(
        control_api_token=TOKEN, connect_media_source="tests.deploy.connect_stub:source"
    )
    bridge.start()
    try:
        body = {"contact_id": contact, "stream_arn": ARN, "start_timestamp": "1726677688724"}
        auth = {"Authorization": f"Bearer {TOKEN}"}
        url = _url(bridge) + "/v1/connect/contacts"
        with httpx.Client(timeout=5) as client:
            r = client.post(url, json=body, headers=auth)
            assert r.status_code == 201, r.text
            not_kvs = {**body, "contact_id": "c-2", "stream_arn": "local.mkv"}
            assert client.post(url, json=not_kvs, headers=auth).status_code == 400
        call_id = r.json()["call_id"]
        assert wait_for(lambda: call_id not in bridge.calls(), 5)
        ended = [e.reason for e, _ in bridge.publisher.events if e.call_id == call_id]
        assert ended[-1] == "end_of_stream"
        assert connect_stub.endpoints == [(ARN, "GET_MEDIA")]
        assert connect_stub.selectors == [
            {"StartSelectorType": "PRODUCER_TIMESTAMP", "StartTimestamp": 1726677688.724},
            {"StartSelectorType": "CONTINUATION_TOKEN", "ContinuationToken": token[:-1] + "0"},
            {"StartSelectorType": "CONTINUATION_TOKEN", "ContinuationToken": token},
        ]
        call = next(c for e, c in bridge.publisher.events if e.call_id == call_id)
        leg = next(leg.leg_id for leg in call.legs.values() if leg.label == "customer")
        frames = bridge.sink.captured(leg).by_rtp_ts
        assert len(frames) >= 40  # both responses' audio reached the customer leg
    finally:
        bridge.stop()


# ---- the webhook receiver --------------------------------------------------------------


class _Connect:
    """Records what the receiver asks of Amazon Connect (AWS is not reachable here)."""

    def __init__(self) -> None:
        self.attributes: dict[tuple[str, str], dict[str, str]] = {}
        self.updates: list[dict[str, Any]] = []

    def get_contact_attributes(self, InstanceId: str, InitialContactId: str) -> dict[str, Any]:  # noqa: N803
        return {"Attributes": dict(self.attributes.get((InstanceId, InitialContactId), {}))}

    def update_contact_attributes(self, **kw: Any) -> dict[str, Any]:
        self.updates.append(kw)
        key = (kw["InstanceId"], kw["InitialContactId"])
        self.attributes.setdefault(key, {}).update(kw["Attributes"])
        return {}


@pytest.fixture
def receiver() -> Iterator[tuple[str, str, _Connect]]:
    secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    connect = _Connect()
    server = make_server(Receiver(secret, connect), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", secret, connect
    finally:
        server.shutdown()
        server.server_close()


def _alert(dimension: Dimension, band: Band, score: float, threshold: float, **ids: str) -> Alert:
    now = datetime.now(UTC)
    return Alert(
        alert_id=alert_id_for("call_1", dimension, 1),
        revision=1,
        call_id="call_1",
        correlation_id="contact-7",
        external_ids=ids or {"connect": "contact-7", "connect_instance": "inst-1"},
        node_id="node-a",
        dimension=dimension,
        band=band,
        score=score,
        threshold=threshold,
        episode=1,
        reasons=(),
        created_at=now,
        updated_at=now,
        policy_version="default-1",
        provider="test",
    )


def _deliver(url: str, secret: str, message: Alert | SystemEvent, **tamper: Any) -> httpx.Response:
    body = envelope_json(message, False)
    msg_id = event_id(message) if isinstance(message, Alert) else message.event_id
    at = tamper.get("at", datetime.now(UTC))
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature_header([secret], msg_id, at, body),
        "content-type": "application/json",
    }
    return httpx.post(url, content=tamper.get("body", body).encode(), headers=headers, timeout=5)


def test_webhook_receiver_writes_voice_id_attributes(
    receiver: tuple[str, str, _Connect],
) -> None:
    url, secret, connect = receiver
    spoof = _alert(Dimension.SYNTHETIC_VOICE, Band.ELEVATED, 0.7, 0.5)
    r = _deliver(url, secret, spoof)
    assert r.status_code == 200, r.text
    key = ("inst-1", "contact-7")
    assert connect.attributes[key] == {
        "VoiceSpoofingRisk": "70",
        "KnownFraudsterRisk": "0",
        "FraudRiskThreshold": "50",
        "FraudDetectionDecision": "HIGH_RISK",
        "FraudDetectionReasons": "VOICE_SPOOFING",
        "CallShieldBand": "elevated",
        "CallShieldDimensions": "synthetic_voice",
        "CallShieldCallId": "call_1",
    }
    assert _deliver(url, secret, _alert(Dimension.KNOWN_FRAUDSTER, Band.HIGH, 0.95, 0.5)).is_success
    assert _deliver(
        url, secret, _alert(Dimension.VOICE_MISMATCH, Band.ELEVATED, 0.93, 0.9)
    ).is_success
    final = connect.attributes[key]
    assert (final["VoiceSpoofingRisk"], final["KnownFraudsterRisk"]) == ("70", "95")
    assert final["FraudDetectionReasons"] == "KNOWN_FRAUDSTER,VOICE_SPOOFING"
    assert (final["AuthenticationDecision"], final["AuthenticationScore"]) == ("REJECT", "63")
    assert final["CallShieldBand"] == "high"
    assert final["CallShieldDimensions"] == "known_fraudster,synthetic_voice,voice_mismatch"
    assert set(final) <= set(ATTRIBUTES)
    assert len(connect.updates) == 3
    # refused: a forged body, an old timestamp; ignored: other calls, system events
    assert _deliver(url, secret, spoof, body='{"type": "call.alert.raised"}').status_code == 401
    old = datetime.fromtimestamp(time.time() - 3600, UTC)
    assert _deliver(url, secret, spoof, at=old).status_code == 401
    other = _alert(Dimension.REPLAY, Band.HIGH, 0.99, 0.5, twilio="CA123")
    assert _deliver(url, secret, other).json() == {"ignored": "not an Amazon Connect call"}
    assert len(connect.updates) == 3


def test_receiver_accepts_rotated_secrets(receiver: tuple[str, str, _Connect]) -> None:
    url, secret, connect = receiver
    alert = _alert(Dimension.REPLAY, Band.HIGH, 0.9, 0.5)
    body = envelope_json(alert, False)
    at = datetime.now(UTC)
    other = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    headers = {
        "webhook-id": event_id(alert),
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature_header([other, secret], event_id(alert), at, body),
    }
    r = httpx.post(url, content=body.encode(), headers=headers, timeout=5)
    assert r.status_code == 200 and json.loads(r.text)["attributes"]["VoiceSpoofingRisk"] == "90"
    assert len(connect.updates) == 1
