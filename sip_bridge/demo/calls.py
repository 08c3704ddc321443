"""A small SIPREC client for the demo, as a recording SBC forks a call to the bridge:
INVITE over UDP on 127.0.0.1 with a multipart body (SDP with two labelled ``sendonly``
PCMU streams, caller and agent, and RFC 7865 metadata naming who sends which), ACK,
µ-law RTP of the caller's audio paced every 20 ms to the port the bridge answered for
the caller's stream (the agent's stays silent), BYE. One call per :class:`SipCall`, each
on its own thread. (A plain SIP INVITE's leg has no known role, so the voice dimensions
would abstain: the metadata is what tells the bridge which leg is the caller.)
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from dataclasses import dataclass, field

from native.codec import build_rtp, ulaw_encode
from sip_bridge.demo.voices import CallPlan
from sip_bridge.sip.message import SipResponse, parse_message
from sip_bridge.sip.sdp import SessionDescription

FRAME_S = 0.02
HOST = "127.0.0.1"
BOUNDARY = "demoboundary"


def siprec_body(rtp_port: int, ani: str) -> bytes:
    sdp = (
        f"v=0\r\no=SRC 1 1 IN IP4 {HOST}\r\ns=-\r\nc=IN IP4 {HOST}\r\nt=0 0\r\n"
        f"m=audio {rtp_port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=label:1\r\na=sendonly\r\n"
        f"m=audio {rtp_port + 2} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=label:2\r\n"
        "a=sendonly\r\n"
    )
    meta = (
        '<?xml version="1.0" encoding="UTF-8"?>\r\n'
        '<recording xmlns="urn:ietf:params:xml:ns:recording:1">'
        '<datamode>complete</datamode><session session_id="demo"/>'
        f'<participant participant_id="caller"><nameID aor="sip:{ani}@carrier.example"/>'
        "</participant>"
        '<participant participant_id="agent"><nameID aor="sip:agent7@cc.example"/></participant>'
        '<stream stream_id="st-a" session_id="demo"><label>1</label></stream>'
        '<stream stream_id="st-b" session_id="demo"><label>2</label></stream>'
        '<participantstreamassoc participant_id="caller"><send>st-a</send>'
        "</participantstreamassoc>"
        '<participantstreamassoc participant_id="agent"><send>st-b</send>'
        "</participantstreamassoc></recording>\r\n"
    )
    return (
        f"--{BOUNDARY}\r\nContent-Type: application/sdp\r\n\r\n{sdp}\r\n"
        f"--{BOUNDARY}\r\nContent-Type: application/rs-metadata+xml\r\n"
        f"Content-Disposition: recording-session\r\n\r\n{meta}--{BOUNDARY}--\r\n"
    ).encode()


def _caller_port(answer: bytes) -> int:
    """The port the bridge answered for the caller's stream (label 1)."""
    sdp = SessionDescription.parse(answer)
    for m in sdp.media:
        if m.attribute("label") == "1":
            return m.port
    return sdp.media[0].port


@dataclass(slots=True)
class SipCall:
    plan: CallPlan
    bridge_port: int
    call_id: str = field(default_factory=lambda: f"demo-{secrets.token_hex(6)}@127.0.0.1")
    session_id: str = field(default_factory=lambda: secrets.token_hex(16))  # RFC 7989
    state: str = "new"  # new | ringing | answered | ended | failed
    detail: str = ""
    sent_frames: int = 0
    _to: str = ""
    _sip: socket.socket | None = None
    _thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._run, args=(stop,), daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, stop: threading.Event) -> None:
        if stop.wait(self.plan.delay_s):
            self.state = "ended"
            return
        sip = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rtp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sip.bind((HOST, 0))
            rtp.bind((HOST, 0))
            sip.settimeout(0.5)
            self._sip = sip
            port = self._invite(sip, rtp.getsockname()[1], stop)
            if port is None:
                return
            self.state = "answered"
            self._media(rtp, port, stop)
            self._bye(sip)
        except OSError as exc:
            self.state, self.detail = "failed", str(exc)
        finally:
            sip.close()
            rtp.close()

    def _request(self, method: str, cseq: int, sip_port: int, body: bytes = b"") -> bytes:
        plan = self.plan
        lines = [
            f"{method} sip:agent@{HOST}:{self.bridge_port} SIP/2.0",
            f"Via: SIP/2.0/UDP {HOST}:{sip_port};branch=z9hG4bK{secrets.token_hex(8)}",
            "Max-Forwards: 70",
            f"From: <sip:{plan.ani}@{HOST}>;tag=demo{self.call_id[5:11]}",
            f"To: <sip:+18005550199@{HOST}>{self._to}",
            f"Call-ID: {self.call_id}",
            f"Session-ID: {self.session_id}",
            f"CSeq: {cseq} {method}",
            f"Contact: <sip:src@{HOST}:{sip_port}>;+sip.src",
            "User-Agent: callshield-demo",
        ]
        if method == "INVITE":
            lines.append("Require: siprec")
        if method == "INVITE" and plan.identity:
            lines.append(f"Identity: {plan.identity}")
        if body:
            lines.append(f"Content-Type: multipart/mixed;boundary={BOUNDARY}")
        lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    def _invite(self, sip: socket.socket, rtp_port: int, stop: threading.Event) -> int | None:
        me = sip.getsockname()[1]
        invite = self._request("INVITE", 1, me, siprec_body(rtp_port, self.plan.ani))
        deadline = time.monotonic() + 10
        sent_at = 0.0
        while time.monotonic() < deadline and not stop.is_set():
            if time.monotonic() - sent_at > 2 and self.state == "new":
                sip.sendto(invite, (HOST, self.bridge_port))  # retransmit until provisional
                sent_at = time.monotonic()
            try:
                msg = parse_message(sip.recv(65535))
            except TimeoutError:
                continue
            if not isinstance(msg, SipResponse):
                continue
            if msg.status < 200:
                self.state = "ringing"
                continue
            to = msg.headers.get("To") or ""
            self._to = to[to.find(">") + 1 :] if ">" in to else ""
            sip.sendto(self._request("ACK", 1, me), (HOST, self.bridge_port))
            if msg.status >= 300:
                self.state, self.detail = "failed", f"{msg.status} {msg.reason}"
                return None
            return _caller_port(msg.body)
        self.state, self.detail = "failed", "no answer"
        return None

    def _media(self, rtp: socket.socket, port: int, stop: threading.Event) -> None:
        payload = ulaw_encode(self.plan.audio)
        ssrc = secrets.randbits(32)
        start = time.monotonic()
        for i in range(len(payload) // 160):
            due = start + i * FRAME_S
            if stop.wait(max(0.0, due - time.monotonic())):
                break
            frame = payload[i * 160 : (i + 1) * 160]
            rtp.sendto(
                build_rtp(frame, seq=i & 0xFFFF, ts=i * 160, ssrc=ssrc, marker=i == 0), (HOST, port)
            )
            self.sent_frames = i + 1

    def _bye(self, sip: socket.socket) -> None:
        me = sip.getsockname()[1]
        bye = self._request("BYE", 2, me)
        for _ in range(4):
            sip.sendto(bye, (HOST, self.bridge_port))
            try:
                msg = parse_message(sip.recv(65535))
            except TimeoutError:
                continue
            if isinstance(msg, SipResponse) and msg.status >= 200:
                break
        self.state = "ended"
