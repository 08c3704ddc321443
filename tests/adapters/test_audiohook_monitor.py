"""Genesys Cloud AudioHook Monitor against a real bridge: a websockets client plays
Genesys with the message sequence of the AudioHook protocol (v2): a signed upgrade,
open with media offers -> opened, interleaved stereo PCMU of real speech in real time,
ping -> pong, a secure pause (paused ... resumed: the call is held, the gap is a pause,
not loss), audio the client discarded (a gap at its known position), close -> closed.
The decoded audio reaching the frame sink matches the source bit for bit at its
positions, across the pause and the discard. AudioHook frames carry no counter of their
own (position is the running sample count), so there is no reordering to test; a
mono L16 session checks the little-endian samples. Meanwhile other sessions misbehave
(bad JSON, a seq out of order, audio before open, unknown types, a foreign
organization, odd frame sizes, floods, oversized frames, no usable media): each gets a
``disconnect`` and its own close code, counted; the live calls never notice.
The signature: the AudioHook documentation's example verifies; missing, wrong, stale
or replayed signatures and wrong API keys get 403, missing headers 400, draining 503."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from native.codec import ulaw_decode, ulaw_encode
from sip_bridge.adapters.audiohook import samples_of
from sip_bridge.adapters.audiohook_signature import (
    NonceCache,
    SignatureError,
    parse_dictionary,
    serialize_inner_list,
    verify,
)
from tests.adapters.tenant_checks import TENANTS, rejected, tenant_of
from tests.adapters.ws_vendor import (
    adapter_stats,
    bit_exact,
    close_of,
    leg_stats,
    legs_by_label,
    live_call,
    overlapping,
    pace,
    refused_status,
)
from tests.sip.bridge_runner import RunningBridge, load_speech, wait_for

API_KEY = "SGVsbG8sIEkgYW0gdGhlIEFQSSBrZXkh"
SECRET = base64.b64encode(b"a client secret of 32 bytes ok!!").decode()
ORG = "d7934305-0972-4844-938e-9060eef73d05"
PATH = "/v1/audiohook"
F = 160  # samples per 20 ms frame
COMPONENTS = (
    "@request-target",
    "@authority",
    "audiohook-organization-id",
    "audiohook-session-id",
    "audiohook-correlation-id",
    "x-api-key",
)


def _signed_headers(
    host: str,
    *,
    session: str | None = None,
    api_key: str = API_KEY,
    secret: str = SECRET,
    created: int | None = None,
    nonce: str | None = None,
    org: str = ORG,
) -> dict[str, str]:
    """The upgrade headers Genesys sends, signed as the AudioHook spec describes
    (written out here, independently of the bridge's verifier)."""
    headers = {
        "Audiohook-Organization-Id": org,
        "Audiohook-Session-Id": session or str(uuid.uuid4()),
        "Audiohook-Correlation-Id": str(uuid.uuid4()),
        "X-API-KEY": api_key,
    }
    created = int(time.time()) if created is None else created
    nonce = nonce or base64.b64encode(secrets.token_bytes(18)).decode()
    inner = "(" + " ".join(f'"{c}"' for c in COMPONENTS) + ")"
    inner += f';keyid="{api_key}";nonce="{nonce}";alg="hmac-sha256"'
    inner += f";created={created};expires={created + 30}"
    values = {"@request-target": PATH, "@authority": host}
    values.update({k.lower(): v for k, v in headers.items()})
    base = "\n".join(f'"{c}": {values[c]}' for c in COMPONENTS)
    base += f'\n"@signature-params": {inner}'
    mac = hmac.new(base64.b64decode(secret), base.encode(), hashlib.sha256).digest()
    headers["Signature-Input"] = f"sig1={inner}"
    headers["Signature"] = f"sig1=:{base64.b64encode(mac).decode()}:"
    return headers


def _duration(samples: int) -> str:
    return f"PT{samples / 8000:.4f}S"


class FakeGenesys:
    """One AudioHook session as Genesys Cloud runs it."""

    def __init__(self, ws: ClientConnection, session_id: str) -> None:
        self.ws = ws
        self.id = session_id
        self.seq = 0
        self.serverseq = 0
        self.position = 0  # samples

    async def send(self, kind: str, parameters: dict[str, Any], **extra: Any) -> None:
        self.seq += 1
        message = {
            "version": "2",
            "id": self.id,
            "type": kind,
            "seq": self.seq,
            "serverseq": self.serverseq,
            "position": _duration(self.position),
            "parameters": parameters,
            **extra,
        }
        await self.ws.send(json.dumps(message))

    async def receive(self) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(await asyncio.wait_for(self.ws.recv(), 5))
        self.serverseq = message["seq"]
        return message

    async def open(self, media: list[dict[str, Any]], org: str = ORG, **more: Any) -> None:
        await self.send(
            "open",
            {
                "organizationId": org,
                "conversationId": "090eaa2f-72fa-480a-83e0-8667ff89c0ec",
                "participant": {
                    "id": "883efee8-3d6c-4537-b500-6d7ca4b92fa0",
                    "ani": "+13175550123",
                    "aniName": "John Doe",
                    "dnis": "+18002461243",
                },
                "media": media,
                "language": "en-US",
                **more,
            },
        )

    async def audio(self, frame: bytes, samples: int) -> None:
        await self.ws.send(frame)
        self.position += samples


STEREO = {"type": "audio", "format": "PCMU", "channels": ["external", "internal"], "rate": 8000}
MONO_EXT = {"type": "audio", "format": "PCMU", "channels": ["external"], "rate": 8000}


async def _connect(base: str, host: str, **kw: Any) -> tuple[ClientConnection, FakeGenesys]:
    headers = _signed_headers(host, **kw)
    ws = await websockets.connect(base + PATH, additional_headers=headers, max_size=None)
    return ws, FakeGenesys(ws, headers["Audiohook-Session-Id"])


def _interleave(ext: bytes, internal: bytes) -> bytes:
    out = bytearray(2 * len(ext))
    out[0::2], out[1::2] = ext, internal
    return bytes(out)


def test_documentation_signature_example_verifies() -> None:
    """The example of the AudioHook protocol documentation (key and secret from it)."""
    headers = {
        "host": "audiohook.example.com",
        "audiohook-organization-id": "d7934305-0972-4844-938e-9060eef73d05",
        "audiohook-session-id": "30b0e395-84d3-4570-ac13-9a62d8f514c0",
        "audiohook-correlation-id": "e160e428-53e2-487c-977d-96989bf5c99d",
        "x-api-key": "SGVsbG8sIEkgYW0gdGhlIEFQSSBrZXkh",
        "signature": "sig1=:NZBwyBHRRyRoeLqy1IzOa9VYBuI8TgMFt2GRDkDuJh4=:",
        "signature-input": 'sig1=("@request-target" "@authority" "audiohook-organization-id" '
        '"audiohook-session-id" "audiohook-correlation-id" "x-api-key");'
        'keyid="SGVsbG8sIEkgYW0gdGhlIEFQSSBrZXkh";nonce="VGhpc0lzQVVuaXF1ZU5vbmNl";'
        'alg="hmac-sha256";created=1641013200;expires=3282026430',
    }
    secret = base64.b64decode("TXlTdXBlclNlY3JldEtleVRlbGxOby0xITJAMyM0JDU=")
    target = "/api/v1/voicebiometrics/ws"
    ok = verify(headers, target, secret, now=1641013205)
    assert ok.nonce == "VGhpc0lzQVVuaXF1ZU5vbmNl"
    cases = [
        ({}, "/api/v1/voicebiometrics/wss", "signature mismatch"),
        ({"host": "evil.example.com"}, target, "signature mismatch"),
        ({"x-api-key": "another"}, target, "keyid is not the X-API-KEY"),
        ({"signature": ""}, target, "unsigned"),
        ({"signature-input": 'sig1=("x-api-key");keyid="k"'}, target, "keyid"),
        ({"signature": "sig1=:not base64!:"}, target, "unparsable"),
    ]
    for change, tgt, why in cases:
        with pytest.raises(SignatureError, match=why):
            verify({**headers, **change}, tgt, secret, now=1641013205)
    with pytest.raises(SignatureError, match="too old"):
        verify(headers, target, secret, now=1641013200 + 60)
    with pytest.raises(SignatureError, match="future"):
        verify(headers, target, secret, now=1641013100)
    with pytest.raises(SignatureError, match="signature mismatch"):
        verify(headers, target, secret[:-1] + b"?", now=1641013205)
    inner = parse_dictionary(headers["signature-input"])["sig1"]
    assert serialize_inner_list(inner) == headers["signature-input"][len("sig1=") :]  # type: ignore[arg-type]
    cache = NonceCache()
    assert cache.fresh("n1", until=10.0, now=0.0) and not cache.fresh("n1", until=10.0, now=5.0)
    assert cache.fresh("n1", until=30.0, now=11.0)  # the first one expired
    assert [samples_of(d) for d in ("PT0S", "PT1.5S", "PT0.02S", "PT12.000125S")] == [
        0,
        12000,
        160,
        96001,
    ]


def test_monitor_session_bit_exact_across_pause_and_discard(shared_dir: Path) -> None:
    ext_pcm = load_speech(shared_dir, 2.4)
    int_pcm = load_speech(shared_dir, 2.4, skip=40)
    mono_pcm = load_speech(shared_dir, 1.2, skip=20)
    bridge = RunningBridge(
        audiohook_api_key=API_KEY, audiohook_client_secret=SECRET, ws_start_timeout_s=1.0
    )
    bridge.start()
    try:
        host, port = bridge.bridge.api.address  # type: ignore[union-attr]
        asyncio.run(
            asyncio.wait_for(
                _scenario(
                    bridge, f"ws://{host}:{port}", f"{host}:{port}", ext_pcm, int_pcm, mono_pcm
                ),
                30,
            )
        )
    finally:
        bridge.stop()


async def _scenario(
    bridge: RunningBridge,
    base: str,
    host: str,
    ext_pcm: npt.NDArray[np.int16],
    int_pcm: npt.NDArray[np.int16],
    mono_pcm: npt.NDArray[np.int16],
) -> None:
    ext, internal = ulaw_encode(ext_pcm), ulaw_encode(int_pcm)
    ws, gc = await _connect(base, host)
    await gc.open([MONO_EXT, STEREO])
    opened = await gc.receive()
    assert opened == {
        "version": "2",
        "type": "opened",
        "seq": 1,
        "clientseq": 1,
        "id": gc.id,
        "parameters": {"media": [STEREO], "startPaused": False},
    }
    call = live_call(bridge, "audiohook_session", gc.id)
    assert call is not None
    assert (call.kind, call.ani, call.dnis, call.correlation_id) == (
        "audiohook",
        "+13175550123",
        "+18002461243",
        "090eaa2f-72fa-480a-83e0-8667ff89c0ec",
    )
    assert call.external_ids["genesys_conversation"] == "090eaa2f-72fa-480a-83e0-8667ff89c0ec"
    assert call.external_ids["genesys"] == call.external_ids["genesys_conversation"]
    assert call.external_ids["genesys_organization"] == ORG
    roles = {leg.label: (leg.role.value, leg.role_source, leg.codec) for leg in call.legs.values()}
    assert roles == {
        "external": ("external", "vendor_track", "PCMU"),
        "internal": ("internal", "vendor_track", "PCMU"),
    }
    legs = legs_by_label(call)

    misbehaving = asyncio.gather(*(bad(base, host) for bad in _MISBEHAVING))
    mono = asyncio.create_task(_mono_l16(bridge, base, host, mono_pcm))
    t0 = time.monotonic()
    for k in range(120):
        await pace(t0, k)
        if k == 20:
            await gc.send("ping", {})
            pong = await gc.receive()
            assert (pong["type"], pong["clientseq"], pong["parameters"]) == ("pong", gc.seq, {})
        if k == 40:  # secure pause for 20 frames: nothing sent, the position moves on
            await gc.send("paused", {})
        if 40 <= k < 60:
            gc.position += F
            continue
        if k == 60:
            await gc.send("resumed", {"start": _duration(40 * F), "discarded": _duration(20 * F)})
        if 90 <= k < 100:  # audio the client could not send in time: dropped by it
            if k == 90:
                await gc.send(
                    "discarded", {"start": _duration(90 * F), "discarded": _duration(10 * F)}
                )
            gc.position += F
            continue
        await gc.audio(_interleave(ext[k * F : (k + 1) * F], internal[k * F : (k + 1) * F]), F)
    await asyncio.sleep(0.5)  # the jitter buffer's delay
    external = leg_stats(bridge, legs["external"])
    assert external["paused_samples"] > 0
    assert external["packets_lost"] == 20  # the discarded 200 ms only: the pause is no loss
    results = await misbehaving
    await mono

    await gc.send("close", {"reason": "end"})
    closed = await gc.receive()
    assert (closed["type"], closed["clientseq"], closed["parameters"]) == ("closed", gc.seq, {})
    assert await close_of(ws) == (1000, "session closed")
    assert wait_for(lambda: live_call(bridge, "audiohook_session", gc.id) is None)

    for label, pcm in (("external", ext), ("internal", internal)):
        cap = bridge.sink.captured(legs[label])
        good, wrong, origin = bit_exact(cap, ulaw_decode(pcm))
        assert wrong == 0, label
        # 90 frames sent; the pause flushes what the jitter buffer held (its delay)
        assert good >= 90 - 20, (label, good)
        assert overlapping(cap, origin, 40 * F, 60 * F) == []  # nothing in the pause
        assert overlapping(cap, origin, 90 * F, 100 * F) == []  # nor in the discard
        assert overlapping(cap, origin, 100 * F, 120 * F)  # audio after both, in place
    events = [(e.event, e.reason) for e in bridge.publisher.of(call.call_id)]
    assert events == [
        ("started", ""),
        ("held", "audiohook_paused"),
        ("resumed", "audiohook_resumed"),
        ("ended", "close:end"),
    ]

    for name, (disconnect, code, reason) in zip(_MISBEHAVING_NAMES, results, strict=True):
        assert (disconnect, code) == _EXPECTED[name][:2], (name, disconnect, code, reason)
        assert _EXPECTED[name][2] in reason, (name, reason)
    stats = adapter_stats(bridge, "audiohook")
    assert stats["bad"] == {
        "bad_json": 1,
        "bad_seq": 1,
        "audio_before_open": 1,
        "unknown_message": 1,
        "unauthorized": 1,
        "bad_frame_size": 1,
        "flood_media": 1,
        "oversized_frame": 1,
        "unsupported_media": 1,
        "start_timeout": 1,
    }
    assert stats["calls_started"] == 7
    assert stats["calls_ended"] == {"close:end": 2, "protocol_error": 4, "disconnected": 1}
    assert stats["events"]["paused"] == 1 and stats["events"]["discarded"] == 1


async def _mono_l16(
    bridge: RunningBridge, base: str, host: str, pcm: npt.NDArray[np.int16]
) -> None:
    """A second live call: one channel, L16 little-endian, 60 ms frames."""
    l16 = {"type": "audio", "format": "L16", "channels": ["internal"], "rate": 8000}
    ws, gc = await _connect(base, host)
    await gc.open([l16])
    assert (await gc.receive())["parameters"]["media"] == [l16]
    call = live_call(bridge, "audiohook_session", gc.id)
    assert call is not None
    (leg_id,) = call.legs
    data = pcm.astype("<i2").tobytes()
    t0 = time.monotonic()
    for k in range(pcm.size // (3 * F)):
        await pace(t0, 3 * k)
        await gc.audio(data[k * 6 * F : (k + 1) * 6 * F], 3 * F)
    await asyncio.sleep(0.5)
    await gc.send("close", {"reason": "end"})
    assert (await gc.receive())["type"] == "closed"
    await close_of(ws)
    good, wrong, _ = bit_exact(bridge.sink.captured(leg_id), pcm)
    assert wrong == 0 and good >= pcm.size // F - 15


async def _answer(ws: ClientConnection) -> tuple[str, int, str]:
    """(disconnect reason or "", close code, close reason) of a session we broke."""
    disconnect = ""
    try:
        while True:
            message = await asyncio.wait_for(ws.recv(), 5)
            if isinstance(message, str) and json.loads(message)["type"] == "disconnect":
                disconnect = json.loads(message)["parameters"]["reason"]
    except websockets.ConnectionClosed as exc:
        assert exc.rcvd is not None
        return disconnect, exc.rcvd.code, exc.rcvd.reason


async def _bad_json(base: str, host: str) -> tuple[str, int, str]:
    ws, _ = await _connect(base, host)
    await ws.send('{"version": "2", "type": "open"')
    return await _answer(ws)


async def _bad_seq(base: str, host: str) -> tuple[str, int, str]:
    ws, gc = await _connect(base, host)
    await gc.open([STEREO])
    await gc.receive()
    gc.seq += 1  # skips one
    await gc.send("ping", {})
    return await _answer(ws)


async def _audio_before_open(base: str, host: str) -> tuple[str, int, str]:
    ws, gc = await _connect(base, host)
    await gc.audio(bytes(2 * F), F)
    return await _answer(ws)


async def _unknown_type(base: str, host: str) -> tuple[str, int, str]:
    ws, gc = await _connect(base, host)
    await gc.open([STEREO])
    await gc.receive()
    await gc.send("transcribe", {})
    return await _answer(ws)


async def _foreign_org(base: str, host: str) -> tuple[str, int, str]:
    ws, gc = await _connect(base, host)
    await gc.open([STEREO], org=str(uuid.uuid4()))
    return await _answer(ws)


async def _odd_frame(base: str, host: str) -> tuple[str, int, str]:
    ws, gc = await _connect(base, host)
    await gc.open([STEREO])
    await gc.receive()
    await gc.audio(bytes(2 * F + 1), F)
    return await _answer(ws)


async def _flood(base: str, host: str) -> tuple[str, int, str]:
    ws, gc = await _connect(base, host)
    await gc.open([MONO_EXT])
    await gc.receive()
    try:
        for _ in range(400):  # 40 s of audio as fast as the socket takes it
            await gc.audio(bytes(5 * F), 5 * F)
    except websockets.ConnectionClosed:
        pass
    return await _answer(ws)


async def _oversized(base: str, host: str) -> tuple[str, int, str]:
    ws, gc = await _connect(base, host)
    await gc.open([MONO_EXT])
    await gc.receive()
    await gc.audio(bytes((1 << 20) + 2), 1 << 20)
    return await _answer(ws)


async def _no_usable_media(base: str, host: str) -> tuple[str, int, str]:
    ws, gc = await _connect(base, host)
    await gc.open([{**STEREO, "rate": 16000}, {**STEREO, "format": "OPUS"}])
    return await _answer(ws)


async def _silent(base: str, host: str) -> tuple[str, int, str]:
    ws, _ = await _connect(base, host)
    return await _answer(ws)


_MISBEHAVING = (
    _bad_json,
    _bad_seq,
    _audio_before_open,
    _unknown_type,
    _foreign_org,
    _odd_frame,
    _flood,
    _oversized,
    _no_usable_media,
    _silent,
)
_MISBEHAVING_NAMES = [f.__name__ for f in _MISBEHAVING]
_EXPECTED = {
    "_bad_json": ("error", 1007, "invalid JSON"),
    "_bad_seq": ("error", 1002, "seq not monotonically increasing"),
    "_audio_before_open": ("error", 1002, "audio before opened"),
    "_unknown_type": ("error", 1002, "'transcribe' unknown"),
    "_foreign_org": ("unauthorized", 1008, "organizationId mismatch"),
    "_odd_frame": ("error", 1007, "audio not whole samples"),
    "_flood": ("error", 1008, "flood: audio faster than real time"),
    "_oversized": ("", 1009, ""),  # cut by the server's 1 MiB bound
    "_no_usable_media": ("error", 1003, "no media we take"),
    "_silent": ("", 1002, "no call started in time"),
}


def _where(bridge: RunningBridge) -> tuple[str, str]:
    host, port = bridge.bridge.api.address  # type: ignore[union-attr]
    return f"ws://{host}:{port}{PATH}", f"{host}:{port}"


def test_open_names_the_tenant_and_junk_falls_back() -> None:
    """``tenant`` in the open's inputVariables (per call), else in its customConfig (per
    integration); a refused value is counted and the next one, or the DNIS mapping
    (this participant dialled +1800...: globex), applies; the session is opened anyway."""
    bridge = RunningBridge(audiohook_api_key=API_KEY, audiohook_client_secret=SECRET, **TENANTS)
    bridge.start()
    try:
        url, authority = _where(bridge)

        async def session(**more: Any) -> tuple[ClientConnection, str]:
            ws, gc = await _connect(url.removesuffix(PATH), authority)
            await gc.open([STEREO], **more)
            assert (await gc.receive())["type"] == "opened"
            call = live_call(bridge, "audiohook_session", gc.id)
            assert call is not None
            return ws, call.call_id

        async def scenario() -> None:
            config = {"customConfig": {"tenant": "globex"}}
            a = await session(inputVariables={"tenant": "ACME"}, **config)
            b = await session(inputVariables={"tenant": "acme corp"}, **config)
            c = await session(customConfig={"tenant": 42})
            assert tenant_of(bridge, a[1]) == ("acme", "audiohook_open", "acme")
            assert tenant_of(bridge, b[1]) == ("globex", "audiohook_open", "globex")
            assert tenant_of(bridge, c[1]) == ("globex", "dnis_prefix", "globex")
            assert rejected(bridge) == {("audiohook_open", "malformed"): 2}
            for ws, _ in (a, b, c):
                await ws.close()

        asyncio.run(asyncio.wait_for(scenario(), 30))
        assert wait_for(lambda: not bridge.calls())
    finally:
        bridge.stop()


def test_upgrade_authentication() -> None:
    bridge = RunningBridge(audiohook_api_key=API_KEY, audiohook_client_secret=SECRET)
    key_only = RunningBridge(audiohook_api_key=API_KEY)
    off = RunningBridge()
    for b in (bridge, key_only, off):
        b.start()
    try:

        async def scenario() -> None:
            url, authority = _where(bridge)
            good = _signed_headers(authority)
            unsigned = {k: v for k, v in good.items() if not k.startswith("Signature")}
            ws = await websockets.connect(url, additional_headers=good)
            await ws.close()
            assert await refused_status(url, good) == 403  # the same nonce again
            now = int(time.time())
            for headers in (
                unsigned,
                {**_signed_headers(authority), "X-API-KEY": "another"},
                _signed_headers(authority, api_key="another"),
                _signed_headers(authority, secret=base64.b64encode(b"wrong").decode()),
                _signed_headers(authority, created=now - 120),
                {**_signed_headers(authority), "Audiohook-Session-Id": str(uuid.uuid4())},
                _signed_headers("other.example:443"),
            ):
                assert await refused_status(url, headers) == 403, headers
            no_session = {k: v for k, v in good.items() if k != "Audiohook-Session-Id"}
            assert await refused_status(url, no_session) == 400
            bridge.on_loop(lambda: setattr(bridge.bridge.controller, "draining", True))
            assert await refused_status(url, _signed_headers(authority)) == 503

            url, authority = _where(key_only)  # no client secret: the API key suffices
            ws = await websockets.connect(url, additional_headers=unsigned)
            await ws.close()
            url, authority = _where(off)
            assert await refused_status(url, _signed_headers(authority)) == 403

        asyncio.run(asyncio.wait_for(scenario(), 30))
        assert adapter_stats(bridge, "audiohook")["refused"] == {
            "replayed": 1,
            "unsigned": 1,
            "bad_api_key": 2,
            "bad_signature": 4,
            "missing_headers": 1,
            "draining": 1,
        }
        assert adapter_stats(off, "audiohook")["refused"] == {"disabled": 1}
    finally:
        for b in (bridge, key_only, off):
            b.stop()
