"""Secure pause on every transport that has one (issue 11, DESIGN §2): a real bridge, a
real call of real speech, DTMF before, during and after the pause. While a leg is
paused its audio and DTMF are discarded before any detector or event tracker sees them
and the gap counts as a pause, not as loss:

- SIPREC: a re-INVITE whose streams are ``a=inactive``, then ``a=sendonly`` again (RTP
  with RFC 4733 telephone-events; the SRC keeps sending during the pause, as a
  misbehaving or slow one would);
- RTP attached by the control API: ``PATCH /v1/calls/{id}`` ``{"legs": {..: {"paused"}}}``;
- Asterisk AudioSocket: ``PATCH /v1/audiosocket/calls/{id}`` ``{"paused"}`` (DTMF frames);
- Genesys AudioHook: ``paused`` / ``resumed`` (the protocol has no DTMF; the client
  keeps sending audio during the pause, which the adapter drops).

For each: no NORMAL frame of the paused span reaches the frame sink (the sink sees
PAUSED frames there), the audio before and after is bit-exact, the DTMF tracker counts
exactly the digits sent outside the pause, the jitter buffer counts the paused span as
paused samples with no packet lost, and the call publishes ``held`` then ``resumed``.
Twilio Media Streams, mod_audio_fork/jambonz, WHIP and Amazon Connect have no pause in
their protocols (docs/integrations.md)."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from native.codec import ulaw_decode, ulaw_encode
from sip_bridge.sip.message import SipResponse, parse_message
from sip_bridge.sip.sdp import SessionDescription
from tests.adapters.test_audiohook_monitor import API_KEY, SECRET, STEREO, _connect
from tests.adapters.ws_vendor import adapter_stats, bit_exact, live_call, overlapping, pace
from tests.sip.bridge_runner import RunningBridge, load_speech, wait_for
from tests.sip.sip_test_data import SIPREC_CONTENT_TYPE, siprec_body

F = 160  # samples per 20 ms frame at 8 kHz
FRAMES = 150
PAUSE, RESUME = 50, 100  # frames [50, 100) are sent while the call is paused
DIGITS = {15: 1, 60: 2, 80: 3, 115: 4}  # frame -> RFC 4733 event; 60 and 80 are paused
OUTSIDE = sum(1 for k in DIGITS if not PAUSE <= k < RESUME)
EVENT_PACKETS = 5  # growing-duration packets, then the end packet three times
DTMF_PT = 101
TOKEN = "pause-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
Actions = dict[int, Callable[[], None]]


def _bridge() -> RunningBridge:
    bridge = RunningBridge(
        control_api_token=TOKEN,
        audiosocket_listen="127.0.0.1:0",
        audiosocket_allow="127.0.0.1/32",
        audiohook_api_key=API_KEY,
        audiohook_client_secret=SECRET,
    )
    bridge.start()
    return bridge


def _api(bridge: RunningBridge) -> httpx.Client:
    assert bridge.bridge.api is not None
    host, port = bridge.bridge.api.address
    return httpx.Client(base_url=f"http://{host}:{port}", headers=AUTH, timeout=5)


class RtpSender:
    """One µ-law leg with RFC 4733 events in the same sequence space, real-time paced."""

    def __init__(self, dest: tuple[str, int], pcm: npt.NDArray[np.int16]) -> None:
        self.dest = dest
        self.ulaw = ulaw_encode(pcm)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.ssrc, self.seq, self.ts0 = 0x5EC0AE, 4000, 90_000

    def _send(self, pt: int, ts: int, payload: bytes, marker: bool = False) -> None:
        head = struct.pack(
            "!BBHII", 0x80, pt | (0x80 if marker else 0), self.seq, ts & 0xFFFFFFFF, self.ssrc
        )
        self.sock.sendto(head + payload, self.dest)
        self.seq = (self.seq + 1) & 0xFFFF

    def frame(self, k: int) -> None:
        self._send(0, self.ts0 + k * F, self.ulaw[k * F : (k + 1) * F])
        for start, event in DIGITS.items():  # an event rides beside the audio
            i = k - start
            ts = self.ts0 + start * F
            if 0 <= i < EVENT_PACKETS:
                self._send(DTMF_PT, ts, struct.pack("!BBH", event, 10, (i + 1) * F), i == 0)
            elif i == EVENT_PACKETS:
                for _ in range(3):
                    end = struct.pack("!BBH", event, 0x80 | 10, EVENT_PACKETS * F)
                    self._send(DTMF_PT, ts, end)


def _stream(send: Callable[[int], None], actions: Actions) -> None:
    """Frame k every 20 ms; ``actions[k]`` (pause, resume) runs before frame k."""
    t0 = time.monotonic()
    for k in range(FRAMES):
        delay = t0 + k * F / 8000 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if k in actions:
            actions[k]()
        send(k)


def _drained(bridge: RunningBridge, leg_id: str, origin: int) -> None:
    """Wait until the last frames sent reached the sink (the stats are then final)."""
    assert wait_for(
        lambda: bool(
            overlapping(bridge.sink.captured(leg_id), origin, (FRAMES - 3) * F, FRAMES * F)
        )
    )


def _assert_paused_span(
    bridge: RunningBridge,
    leg_id: str,
    decoded: npt.NDArray[np.int16],
    origin: int | None = None,
) -> dict[str, Any]:
    """(a) and (c) of issue 11 for one leg; returns its jitter-buffer stats."""
    cap = bridge.sink.captured(leg_id)
    good, bad, found = bit_exact(cap, decoded)
    if origin is not None:
        assert found == origin
    assert bad == 0 and good >= 80, (good, bad)
    assert overlapping(cap, found, PAUSE * F, RESUME * F) == []  # nothing of the pause
    assert len(overlapping(cap, found, 0, PAUSE * F)) >= 40  # before: analysed
    assert len(overlapping(cap, found, RESUME * F, FRAMES * F)) >= 40  # after: analysed
    assert cap.flags.count("paused") >= 40, bridge.sink.counts(leg_id)
    jb: dict[str, Any] = bridge.on_loop(lambda: bridge.bridge.media.stats(leg_id))
    assert jb["packets_lost"] == 0
    assert jb["paused_samples"] >= 40 * F  # the gap is a pause ...
    # ... not loss: were the pause concealed, that would be its whole 8000 samples (a
    # loaded machine's late packets conceal a few frames, which is not the pause)
    assert jb["concealed_samples"] < (RESUME - PAUSE) * F // 4
    return jb


def _events(bridge: RunningBridge, call_id: str) -> list[tuple[str, str]]:
    return [(e.event, e.reason) for e in bridge.publisher.of(call_id)]


# ---- SIPREC: re-INVITE a=inactive ----------------------------------------------------


class SiprecClient:
    """A SIPREC SRC over UDP: INVITE (two labelled streams + metadata), re-INVITEs, BYE."""

    def __init__(self, bridge_port: int, media_port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(5)
        self.target = ("127.0.0.1", bridge_port)
        self.media_port = media_port
        self.call_id = f"pause-{uuid.uuid4().hex[:12]}"
        self.cseq = 0
        self.to = f"<sip:srs@127.0.0.1:{bridge_port}>"

    def _request(self, method: str, content_type: str, body: str) -> SipResponse:
        self.cseq += 1
        me = self.sock.getsockname()[1]
        data = body.replace("\r\n", "\n").replace("\n", "\r\n").encode()
        head = (
            f"{method} sip:srs@127.0.0.1:{self.target[1]} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{me};branch=z9hG4bK{self.call_id}{self.cseq}\r\n"
            f"From: <sip:src@127.0.0.1>;tag=src1\r\nTo: {self.to}\r\n"
            f"Call-ID: {self.call_id}\r\nCSeq: {self.cseq} {method}\r\n"
            f"Contact: <sip:src@127.0.0.1:{me}>;+sip.src\r\nMax-Forwards: 70\r\n"
            + ("Require: siprec\r\n" if self.cseq == 1 else "")
            + (f"Content-Type: {content_type}\r\n" if data else "")
            + f"Content-Length: {len(data)}\r\n\r\n"
        )
        self.sock.sendto(head.encode() + data, self.target)
        while True:
            msg = parse_message(self.sock.recv(65535))
            assert isinstance(msg, SipResponse)
            if msg.status >= 200:
                assert msg.status == 200, (method, msg.status)
                if method == "INVITE":
                    self.to = msg.headers.get("To") or self.to
                    self._ack()
                return msg

    def _ack(self) -> None:
        me = self.sock.getsockname()[1]
        ack = (
            f"ACK sip:srs@127.0.0.1:{self.target[1]} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{me};branch=z9hG4bK{self.call_id}ack{self.cseq}\r\n"
            f"From: <sip:src@127.0.0.1>;tag=src1\r\nTo: {self.to}\r\n"
            f"Call-ID: {self.call_id}\r\nCSeq: {self.cseq} ACK\r\nMax-Forwards: 70\r\n"
            "Content-Length: 0\r\n\r\n"
        )
        self.sock.sendto(ack.encode(), self.target)

    def invite(self) -> int:
        """The recording session; returns the bridge's RTP port for stream label 1."""
        body = siprec_body(audio_port=self.media_port, host="127.0.0.1")
        answer = self._request("INVITE", SIPREC_CONTENT_TYPE, body)
        return SessionDescription.parse(answer.body).media[0].port

    def direction(self, direction: str) -> None:
        """A re-INVITE with both streams ``direction`` (``inactive`` = pause)."""
        sdp = "".join(
            f"m=audio {self.media_port + 2 * i} RTP/AVP 0 101\na=rtpmap:0 PCMU/8000\n"
            f"a=rtpmap:101 telephone-event/8000\na=label:{i + 1}\na={direction}\n"
            for i in range(2)
        )
        head = "v=0\no=SRC 1 2 IN IP4 127.0.0.1\ns=-\nc=IN IP4 127.0.0.1\nt=0 0\n"
        self._request("INVITE", "application/sdp", head + sdp)

    def bye(self) -> None:
        self._request("BYE", "", "")


def test_siprec_reinvite_inactive_drops_audio_and_dtmf(shared_dir: Path) -> None:
    pcm = load_speech(shared_dir, FRAMES * F / 8000)
    bridge = _bridge()
    try:
        src = SiprecClient(bridge.sip_port, 41000)
        port = src.invite()
        (call,) = bridge.calls().values()
        leg_id = next(leg.leg_id for leg in call.legs.values() if leg.label == "1")
        sender = RtpSender(("127.0.0.1", port), pcm)
        _stream(
            sender.frame,
            {PAUSE: lambda: src.direction("inactive"), RESUME: lambda: src.direction("sendonly")},
        )
        _drained(bridge, leg_id, sender.ts0)
        jb = _assert_paused_span(bridge, leg_id, ulaw_decode(sender.ulaw), sender.ts0)
        assert jb["dtmf_events"] == OUTSIDE  # (b): the digits of the pause never counted
        assert jb["packets_dtmf"] == OUTSIDE * (EVENT_PACKETS + 3)  # none of the pause's
        assert jb["packets_paused"] >= 50  # audio and telephone-events of the pause
        src.bye()
        assert wait_for(lambda: bridge.calls() == {})
        assert _events(bridge, call.call_id) == [
            ("started", ""),
            ("held", ""),
            ("resumed", ""),
            ("ended", "bye"),
        ]
    finally:
        bridge.stop()


def test_api_pause_of_a_siprec_call_drops_audio_and_dtmf(shared_dir: Path) -> None:
    """PUT /v1/calls/{id}/pause reaches calls of any transport: here a SIPREC call whose
    SRC never pauses itself (e.g. the IVR knows a card number is coming, the SBC not)."""
    pcm = load_speech(shared_dir, FRAMES * F / 8000, skip=10)
    bridge = _bridge()
    try:
        src = SiprecClient(bridge.sip_port, 41100)
        port = src.invite()
        (call,) = bridge.calls().values()
        leg_id = next(leg.leg_id for leg in call.legs.values() if leg.label == "1")
        sender = RtpSender(("127.0.0.1", port), pcm)
        url = f"/v1/calls/{call.call_id}/pause"
        with _api(bridge) as api:
            assert api.put("/v1/calls/call_nope/pause", json={"paused": True}).status_code == 404
            bad = api.put(url, json={"paused": True, "reason": "has spaces"})
            assert bad.status_code == 422
            no_token = httpx.put(f"{api.base_url}{url}", json={"paused": True}, timeout=5)
            assert no_token.status_code == 401

            def pause(paused: bool) -> None:
                r = api.put(url, json={"paused": paused, "reason": "pci"})
                assert r.status_code == 200 and r.json()["paused"] is paused, r.text

            _stream(sender.frame, {PAUSE: lambda: pause(True), RESUME: lambda: pause(False)})
        _drained(bridge, leg_id, sender.ts0)
        jb = _assert_paused_span(bridge, leg_id, ulaw_decode(sender.ulaw), sender.ts0)
        assert jb["dtmf_events"] == OUTSIDE
        assert jb["packets_paused"] >= 50
        src.bye()
        assert wait_for(lambda: bridge.calls() == {})
        assert _events(bridge, call.call_id) == [
            ("started", ""),
            ("held", "api:pci"),
            ("resumed", "api:pci"),
            ("ended", "bye"),
        ]
    finally:
        bridge.stop()


# ---- RTP attached by the control API: PATCH paused -----------------------------------


def test_control_api_patch_paused_drops_audio_and_dtmf(shared_dir: Path) -> None:
    pcm = load_speech(shared_dir, FRAMES * F / 8000, skip=20)
    bridge = _bridge()
    try:
        api = _api(bridge)
        leg = {"label": "caller", "role": "external", "telephone_event_payload_type": DTMF_PT}
        r = api.post("/v1/calls", json={"ani": "+15550123", "legs": [leg]})
        assert r.status_code == 201, r.text
        view = r.json()
        leg_id, port = view["legs"][0]["leg_id"], view["legs"][0]["rtp"]["port"]
        url = f"/v1/calls/{view['call_id']}"

        def patch(paused: bool) -> None:
            r = api.patch(url, json={"legs": {"caller": {"paused": paused}}})
            assert r.status_code == 200 and r.json()["legs"][0]["paused"] is paused, r.text

        sender = RtpSender(("127.0.0.1", port), pcm)
        _stream(sender.frame, {PAUSE: lambda: patch(True), RESUME: lambda: patch(False)})
        _drained(bridge, leg_id, sender.ts0)
        jb = _assert_paused_span(bridge, leg_id, ulaw_decode(sender.ulaw), sender.ts0)
        assert jb["dtmf_events"] == OUTSIDE
        assert jb["packets_dtmf"] == OUTSIDE * (EVENT_PACKETS + 3)
        assert jb["packets_paused"] >= 50
        assert api.delete(url).status_code == 204
        assert wait_for(lambda: bridge.calls() == {})
        assert _events(bridge, view["call_id"]) == [
            ("started", ""),
            ("held", ""),
            ("resumed", ""),
            ("ended", "api"),
        ]
    finally:
        bridge.stop()


# ---- Asterisk AudioSocket: PATCH /v1/audiosocket/calls/{id} --------------------------


def _as_frame(kind: int, payload: bytes = b"") -> bytes:
    return struct.pack("!BH", kind, len(payload)) + payload


def test_audiosocket_patch_paused_drops_audio_and_dtmf(shared_dir: Path) -> None:
    pcm = load_speech(shared_dir, FRAMES * F / 8000, skip=40)
    bridge = _bridge()
    try:
        api = _api(bridge)
        r = api.post("/v1/audiosocket/calls", json={"legs": [{"role": "external"}]})
        assert r.status_code == 201, r.text
        view = r.json()
        leg_id, leg_uuid = view["legs"][0]["leg_id"], uuid.UUID(view["legs"][0]["uuid"])
        url = f"/v1/audiosocket/calls/{view['call_id']}"

        def patch(paused: bool) -> None:
            r = api.patch(url, json={"paused": paused})
            assert r.status_code == 200 and all(x["paused"] is paused for x in r.json()["legs"])

        assert bridge.bridge.audiosocket is not None
        conn = socket.create_connection(bridge.bridge.audiosocket.address, timeout=5)
        conn.sendall(_as_frame(0x01, leg_uuid.bytes))

        def send(k: int) -> None:
            conn.sendall(_as_frame(0x10, pcm[k * F : (k + 1) * F].astype("<i2").tobytes()))
            if k in DIGITS:  # what Asterisk sends for a digit: one ASCII character
                conn.sendall(_as_frame(0x03, str(DIGITS[k]).encode()))

        _stream(send, {PAUSE: lambda: patch(True), RESUME: lambda: patch(False)})
        _, _, origin = bit_exact(bridge.sink.captured(leg_id), pcm)
        _drained(bridge, leg_id, origin)
        jb = _assert_paused_span(bridge, leg_id, pcm)
        assert jb["dtmf_events"] == OUTSIDE
        assert jb["packets_paused"] >= 50
        conn.sendall(_as_frame(0x00))  # hangup
        conn.close()
        assert wait_for(lambda: view["call_id"] not in bridge.calls())
        events = _events(bridge, view["call_id"])
        assert events[:3] == [("started", ""), ("held", "api"), ("resumed", "api")]
        assert [e for e, _ in events[3:]] == ["ended"]
    finally:
        bridge.stop()


# ---- Genesys AudioHook: paused / resumed ---------------------------------------------


def test_audiohook_paused_resumed_drops_audio(shared_dir: Path) -> None:
    ext_pcm = load_speech(shared_dir, FRAMES * F / 8000, skip=10)
    int_pcm = load_speech(shared_dir, FRAMES * F / 8000, skip=50)
    bridge = _bridge()
    try:
        host, port = bridge.bridge.api.address  # type: ignore[union-attr]
        asyncio.run(asyncio.wait_for(_audiohook(bridge, f"{host}:{port}", ext_pcm, int_pcm), 20))
    finally:
        bridge.stop()


async def _audiohook(
    bridge: RunningBridge, host: str, ext_pcm: npt.NDArray[np.int16], int_pcm: npt.NDArray[np.int16]
) -> None:
    ext, internal = ulaw_encode(ext_pcm), ulaw_encode(int_pcm)
    ws, gc = await _connect(f"ws://{host}", host)
    await gc.open([STEREO])
    assert (await gc.receive())["type"] == "opened"
    call = live_call(bridge, "audiohook_session", gc.id)
    assert call is not None
    legs = {leg.label: leg.leg_id for leg in call.legs.values()}
    t0 = time.monotonic()
    for k in range(FRAMES):
        await pace(t0, k)
        if k == PAUSE:
            await gc.send("paused", {})
        if k == RESUME:
            await gc.send("resumed", {})
        stereo = bytearray(2 * F)
        stereo[0::2], stereo[1::2] = ext[k * F : (k + 1) * F], internal[k * F : (k + 1) * F]
        await gc.audio(bytes(stereo), F)  # also during the pause, as a buggy client would
    for label, source in (("external", ext), ("internal", internal)):
        leg_id = legs[label]
        decoded = ulaw_decode(source)
        _, _, origin = await asyncio.to_thread(bit_exact, bridge.sink.captured(leg_id), decoded)
        await asyncio.to_thread(_drained, bridge, leg_id, origin)
        jb = _assert_paused_span(bridge, leg_id, decoded)
        assert jb["dtmf_events"] == 0  # AudioHook carries no DTMF
    stats = await asyncio.to_thread(adapter_stats, bridge, "audiohook")
    assert stats["bad"] == {"audio_while_paused": RESUME - PAUSE}  # dropped before C
    await gc.send("close", {"reason": "end"})
    assert (await gc.receive())["type"] == "closed"
    await ws.close()
    assert await asyncio.to_thread(wait_for, lambda: call.call_id not in bridge.calls())
    assert _events(bridge, call.call_id) == [
        ("started", ""),
        ("held", "audiohook_paused"),
        ("resumed", "audiohook_resumed"),
        ("ended", "close:end"),
    ]
