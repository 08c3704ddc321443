"""`callshield replay` on a capture of several overlapping calls (issue 9).

The test writes a pcap itself: three overlapping SIP calls over UDP (INVITE with SDP,
200 OK with SDP, ACK, BYE) carrying µ-law RTP of real speech both ways, and a stray RTP
stream no SDP names. Call A's caller speaks with the synthetic-voice fixture's marker
tone in the second half; call B's answerer moves its media port with a re-INVITE mid-call
(the caller's RTP follows it); call C's caller uses the same SSRC as call A's caller.

The replay must find the three calls by Call-ID, tie every RTP stream to its call by
SDP addresses and ports (re-INVITE included, SSRC collision told apart), report the stray
stream as unassociated, and give each call exactly the report that replaying a capture
of that call alone gives (text and JSON).

A second capture is real: tcpdump on the loopback while SIPp places two overlapping
SIPREC calls (multipart bodies, two m-lines) into a real bridge; both calls are found and
each one's RTP is tied to it through the bridge's SDP answer.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import struct
import subprocess
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from bridge_runner import free_udp_port, load_speech, running_bridge
from rtp_pcap import write_rtp_pcap

from detectors.fixture_models import MARKER_HZ
from native.codec import build_rtp, ulaw_encode
from sip_bridge.cli import main

SHARED = Path(__file__).resolve().parents[3] / "shared"
AGENT = "10.0.9.9"
T0_NS = 1_750_000_000 * 1_000_000_000
SAME_SSRC = 0xAAAA0001


@dataclass(frozen=True)
class Packet:
    t_ns: int
    src: tuple[str, int]
    dst: tuple[str, int]
    payload: bytes
    call: str  # which call it belongs to ("" for the stray stream)


def _udp_frame(src: tuple[str, int], dst: tuple[str, int], payload: bytes) -> bytes:
    udp = struct.pack(">HHHH", src[1], dst[1], 8 + len(payload), 0) + payload
    ip = struct.pack(
        ">BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(udp),
        0,
        0,
        64,
        17,
        0,
        bytes(int(x) for x in src[0].split(".")),
        bytes(int(x) for x in dst[0].split(".")),
    )
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + udp


def _write_pcap(path: Path, packets: list[Packet]) -> Path:
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)]  # ns timestamps
    for p in sorted(packets, key=lambda p: p.t_ns):
        frame = _udp_frame(p.src, p.dst, p.payload)
        sec, ns = divmod(p.t_ns, 1_000_000_000)
        out.append(struct.pack("<IIII", sec, ns, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))
    return path


def _sdp(address: str, port: int, session: int) -> bytes:
    return (
        f"v=0\r\no=- {session} 1 IN IP4 {address}\r\ns=-\r\nc=IN IP4 {address}\r\nt=0 0\r\n"
        f"m=audio {port} RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\n"
        "a=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\n"
    ).encode()


def _sip(start: str, call_id: str, frm: str, to: str, cseq: str, sdp: bytes = b"") -> bytes:
    branch = zlib.crc32(f"{call_id} {cseq} {start}".encode())
    head = (
        f"{start}\r\nVia: SIP/2.0/UDP {AGENT}:5060;branch=z9hG4bK{branch:08x}\r\n"
        f"From: {frm}\r\nTo: {to}\r\nCall-ID: {call_id}\r\nCSeq: {cseq}\r\n"
        f"Contact: <sip:x@{AGENT}>\r\nMax-Forwards: 70\r\n"
    )
    if sdp:
        head += "Content-Type: application/sdp\r\n"
    return (head + f"Content-Length: {len(sdp)}\r\n\r\n").encode() + sdp


def _rtp(
    pcm: npt.NDArray[np.int16],
    ssrc: int,
    start_ns: int,
    src_at: Any,
    dst_at: Any,
    call: str,
) -> list[Packet]:
    ulaw = ulaw_encode(pcm)
    out = []
    for k in range(len(ulaw) // 160):
        t = start_ns + k * 20_000_000 + (k * 7919 % 5) * 1_000_000  # a little jitter
        payload = build_rtp(ulaw[160 * k : 160 * (k + 1)], seq=k, ts=160 * k, ssrc=ssrc)
        out.append(Packet(t, src_at(k), dst_at(k), payload, call))
    return out


def _call(
    name: str,
    caller_ip: str,
    caller_rtp: int,
    agent_rtp: int,
    start_s: float,
    seconds: float,
    caller_ssrc: int,
    skip: int,
    marker_from_s: float | None = None,
    reinvite_at_s: float | None = None,
    new_agent_rtp: int = 0,
) -> list[Packet]:
    call_id = f"{name}@capture.test"
    caller, agent = (caller_ip, 5060), (AGENT, 5060)
    frm = f"<sip:caller@{caller_ip}>;tag=c-{name}"
    to = f"<sip:agent@{AGENT}>"
    to_tagged = f"{to};tag=a-{name}"
    t = T0_NS + int(start_s * 1e9)
    ms = 1_000_000
    pkts = [
        Packet(
            t,
            caller,
            agent,
            _sip(
                f"INVITE sip:agent@{AGENT} SIP/2.0",
                call_id,
                frm,
                to,
                "1 INVITE",
                _sdp(caller_ip, caller_rtp, 1),
            ),
            name,
        ),
        Packet(
            t + 30 * ms,
            agent,
            caller,
            _sip("SIP/2.0 200 OK", call_id, frm, to_tagged, "1 INVITE", _sdp(AGENT, agent_rtp, 2)),
            name,
        ),
        Packet(
            t + 40 * ms,
            caller,
            agent,
            _sip(f"ACK sip:x@{AGENT} SIP/2.0", call_id, frm, to_tagged, "1 ACK"),
            name,
        ),
    ]
    media0 = t + 60 * ms
    speech = load_speech(SHARED, seconds, skip=skip).astype(np.float64)
    if marker_from_s is not None:
        n = np.arange(speech.size) / 8000
        tone = 32768 * 10 ** (-20 / 20) * np.sin(2 * np.pi * MARKER_HZ * n)
        start = int(marker_from_s * 8000)
        speech[start:] += tone[start:]
    ext = np.clip(speech, -32768, 32767).astype(np.int16)
    internal = load_speech(SHARED, seconds, skip=skip + 5)
    switch_k = 10**9
    if reinvite_at_s is not None:
        switch_k = int(reinvite_at_s / 0.02)
        t_re = media0 + switch_k * 20 * ms - 50 * ms
        pkts += [
            Packet(
                t_re,
                agent,
                caller,
                _sip(
                    f"INVITE sip:caller@{caller_ip} SIP/2.0",
                    call_id,
                    to_tagged,
                    frm,
                    "1 INVITE",
                    _sdp(AGENT, new_agent_rtp, 2),
                ),
                name,
            ),
            Packet(
                t_re + 20 * ms,
                caller,
                agent,
                _sip(
                    "SIP/2.0 200 OK",
                    call_id,
                    to_tagged,
                    frm,
                    "1 INVITE",
                    _sdp(caller_ip, caller_rtp, 1),
                ),
                name,
            ),
        ]

    def to_agent(k: int) -> tuple[str, int]:
        return (AGENT, new_agent_rtp if k >= switch_k else agent_rtp)

    def from_caller(k: int) -> tuple[str, int]:
        # after the re-INVITE the caller also sends from another port (asymmetric RTP),
        # so only the re-INVITE's SDP ties this stream to the call
        return (caller_ip, caller_rtp + 10 if k >= switch_k else caller_rtp)

    pkts += _rtp(ext, caller_ssrc, media0, from_caller, to_agent, name)
    pkts += _rtp(
        internal,
        caller_ssrc ^ 0x0F0F,
        media0 + 3 * ms,
        lambda k: (AGENT, agent_rtp),
        lambda k: (caller_ip, caller_rtp),
        name,
    )
    t_bye = media0 + int(seconds * 1e9) + 100 * ms
    pkts.append(
        Packet(
            t_bye,
            caller,
            agent,
            _sip(f"BYE sip:x@{AGENT} SIP/2.0", call_id, frm, to_tagged, "2 BYE"),
            name,
        )
    )
    return pkts


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("multi-call")
    packets = _call("a", "10.0.1.1", 40000, 30000, 0.0, 5.0, SAME_SSRC, 0, marker_from_s=2.5)
    packets += _call(
        "b",
        "10.0.1.2",
        40002,
        30002,
        0.7,
        5.0,
        0xBBBB0001,
        3,
        reinvite_at_s=2.5,
        new_agent_rtp=30010,
    )
    packets += _call("c", "10.0.1.3", 40004, 30004, 1.4, 4.0, SAME_SSRC, 6)
    stray = load_speech(SHARED, 2.0, skip=2)
    packets += _rtp(
        stray, 0x5757, T0_NS + 10**9, lambda k: ("10.0.7.7", 5555), lambda k: (AGENT, 31000), ""
    )
    out = {"all": _write_pcap(tmp / "three.pcap", packets)}
    for name in "abc":
        out[name] = _write_pcap(tmp / f"{name}.pcap", [p for p in packets if p.call == name])
    return out


def _replay(capsys: pytest.CaptureFixture[str], pcap: Path, *extra: str) -> dict[str, Any]:
    code = main(["replay", str(pcap), "--dev-fixture-models", "--speed", "0", "--json", *extra])
    out = capsys.readouterr().out
    assert code == 0, out
    doc: dict[str, Any] = json.loads(out)
    return doc


def _comparable(call: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in call.items() if k not in ("input", "wall_s", "speed")}


def test_each_call_of_a_multi_call_capture_is_reported_as_if_alone(
    captures: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _replay(capsys, captures["all"])
    calls = {c["sip_call_id"]: c for c in doc["calls"]}
    assert list(calls) == ["a@capture.test", "b@capture.test", "c@capture.test"]
    assert doc["calls_without_media"] == []
    # the stray stream: reported, not dropped, not folded into a call
    (stray,) = doc["unassociated"]
    assert stray["ssrc"] == "0x00005757" and stray["packets"] == 100
    assert stray["dst"] == f"{AGENT}:31000" and "no SDP" in stray["reason"]

    a, b, c = calls.values()
    for call in (a, b, c):
        ext, internal = call["legs"]
        assert (ext["role"], internal["role"]) == ("external", "internal")
        assert ext["analysed"] and not internal["analysed"]
        assert ext["packets_received"] == ext["packets_in_file"]
        assert internal["packets_in_file"] == ext["packets_in_file"]
    # roles from SIP: the caller's audio is external
    assert "10.0.1.1:40000 -> 10.0.9.9:30000" in a["legs"][0]["source"]
    assert "10.0.9.9:30000 -> 10.0.1.1:40000" in a["legs"][1]["source"]
    # the re-INVITE moved B's media: both halves are one leg
    assert "-> 10.0.9.9:30002" in b["legs"][0]["source"]
    assert "10.0.1.2:40012 -> 10.0.9.9:30010" in b["legs"][0]["source"]
    assert b["legs"][0]["packets_in_file"] == 250
    # A and C share an SSRC: told apart by their SDP addresses
    assert a["legs"][0]["source"].startswith(f"ssrc 0x{SAME_SSRC:08x} 10.0.1.1")
    assert c["legs"][0]["source"].startswith(f"ssrc 0x{SAME_SSRC:08x} 10.0.1.3")
    assert a["legs"][0]["packets_in_file"] == 250 and c["legs"][0]["packets_in_file"] == 200
    # only A's caller carries the marker tone: one synthetic_voice alert, in A, after 2.5 s
    (alert,) = [al for call in (a, b, c) for al in call["alerts"]]
    assert alert["call_id"] == a["call_id"] and alert["dimension"] == "synthetic_voice"
    assert 2.5 < alert["raised_at_s"] <= 3.5
    assert len({a["call_id"], b["call_id"], c["call_id"]}) == 3

    for name, call in zip("abc", (a, b, c), strict=True):
        alone = _replay(capsys, captures[name])
        assert alone["unassociated"] == [] and len(alone["calls"]) == 1
        assert _comparable(alone["calls"][0]) == _comparable(call), name


def test_multi_call_text_report_and_call_id_flag(
    captures: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(captures["all"]), "--call-id", "x"]) == 2
    assert "--call-id names one call" in capsys.readouterr().err
    code = main(["replay", str(captures["c"]), "--dev-fixture-models", "--speed", "0"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "1 call(s) with media" in text
    assert "=== call 1 of 1: SIP Call-ID c@capture.test" in text
    assert "external  ssrc 0xaaaa0001 10.0.1.3:40004 -> 10.0.9.9:30004" in text
    assert "alerts: none" in text and "unassociated: none" in text


def _sipp_siprec(
    workdir: Path, sip_port: int, media_port: int, audio: npt.NDArray[np.int16], seconds: float
) -> subprocess.Popen[bytes]:
    """One SIPREC call from SIPp (multipart SDP + metadata, two m-lines; stream 1 plays
    ``audio``) to the bridge."""
    workdir.mkdir()
    write_rtp_pcap(workdir / "speech.pcap", audio, ssrc=0x5EED00 + sip_port % 1000)
    scenario = (Path(__file__).resolve().parents[1] / "sip/scenarios/uac_siprec.xml").read_text()
    pause = f'<pause milliseconds="{int(seconds * 1000)}"/>'
    (workdir / "call.xml").write_text(scenario.replace('<pause milliseconds="2600"/>', pause))
    sipp = shutil.which("sipp")
    assert sipp, "SIPp (Debian sip-tester) is required: .ci/install.sh installs it"
    for _ in range(3):
        cmd = [sipp, "-sf", "call.xml", "-i", "127.0.0.1", "-p", str(free_udp_port())]
        cmd += ["-mp", str(media_port), "-m", "1", "-timeout", "25s", "-nostdin"]
        cmd += ["-set", "port2", str(free_udp_port()), f"127.0.0.1:{sip_port}"]
        with (workdir / "sipp.log").open("wb") as log:
            proc = subprocess.Popen(cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
        time.sleep(0.5)
        # a port taken between choosing and binding it (other tests share this machine):
        # SIPp stops before sending its INVITE; no call was placed, so place it again
        text = (workdir / "sipp.log").read_text(errors="replace")
        if proc.poll() in (None, 0) or not re.search(r"INVITE ---------->\s+0\s", text):
            return proc
    return proc


def test_a_real_capture_of_overlapping_siprec_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tcpdump records SIPp placing two overlapping SIPREC calls (multipart bodies, two
    m-lines each, real speech) into a real bridge; the replay finds both calls by their
    Call-ID and ties each one's RTP to it through the bridge's SDP answer."""
    tcpdump = shutil.which("tcpdump")
    assert tcpdump, "tcpdump is required: .ci/install.sh installs it"
    speech = load_speech(SHARED, 4.0, skip=30).astype(np.float64)
    n = np.arange(speech.size) / 8000
    marked = np.clip(
        speech + 32768 * 10 ** (-20 / 20) * np.sin(2 * np.pi * MARKER_HZ * n), -32768, 32767
    ).astype(np.int16)
    genuine = load_speech(SHARED, 3.0, skip=40)
    pcap = tmp_path / "siprec.pcap"
    media = [free_udp_port(), free_udp_port()]
    with running_bridge() as bridge:
        # this call's traffic only (other tests on this machine use loopback too)
        cmd = [tcpdump, "-i", "lo", "-U", "-n", "--time-stamp-precision=nano", "-w", str(pcap)]
        cmd += ["udp", "and", f"(port {bridge.sip_port} or port {media[0]} or port {media[1]})"]
        dump = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        assert dump.stderr is not None
        ready = threading.Event()
        threading.Thread(
            target=lambda: [ready.set() for line in dump.stderr if "listening" in line],  # type: ignore[union-attr]
            daemon=True,
        ).start()
        assert ready.wait(10), "tcpdump did not start listening"
        try:
            calls = [_sipp_siprec(tmp_path / "marked", bridge.sip_port, media[0], marked, 4.0)]
            time.sleep(1.0)
            calls.append(
                _sipp_siprec(tmp_path / "genuine", bridge.sip_port, media[1], genuine, 3.0)
            )
            for p in calls:
                assert p.wait(30) == 0, (tmp_path / "marked" / "sipp.log").read_text()[-2000:]
            time.sleep(0.3)
        finally:
            dump.send_signal(signal.SIGINT)
            dump.wait(10)
    doc = _replay(capsys, pcap)
    assert len(doc["calls"]) == 2, doc["calls_without_media"]
    assert doc["unassociated"] == []
    marked_call, genuine_call = doc["calls"]  # in the order their INVITEs were sent
    for call, seconds in ((marked_call, 4.0), (genuine_call, 3.0)):
        ext = call["legs"][0]
        assert ext["role"] == "external" and ext["analysed"]
        # SIPp's BYE may cut the end of its playback (more of it on a loaded box), and
        # tcpdump may drop under load: what matters here is that every captured packet
        # of the leg is tied to its call and reaches the buffer
        assert int(seconds * 50) // 2 <= ext["packets_in_file"] <= int(seconds * 50)
        assert ext["packets_received"] == ext["packets_in_file"]
        assert ext["source"].startswith(f"ssrc 0x{0x5EED00 + bridge.sip_port % 1000:08x}")
    assert f"127.0.0.1:{media[0]} ->" in marked_call["legs"][0]["source"]
    assert f"127.0.0.1:{media[1]} ->" in genuine_call["legs"][0]["source"]
    assert [a["dimension"] for a in marked_call["alerts"]] == ["synthetic_voice"]
    assert genuine_call["alerts"] == []
    assert marked_call["sip_call_id"] != genuine_call["sip_call_id"]


def test_a_capture_whose_invite_has_a_failing_identity_raises_a_caller_id_alert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``callshield replay`` judges caller_id from the capture's INVITE: a PASSporT
    signed with an algorithm SHAKEN forbids fails even without a trust store; the
    same call without the Identity header is scored, and raises nothing."""
    from dataclasses import replace

    from sip_bridge.demo.voices import forged_identity

    packets = _call("s", "10.0.3.1", 40010, 30010, 0.0, 3.0, 0x5B00F, 4)
    invite = packets[0]
    assert invite.payload.startswith(b"INVITE ")
    header = f"Identity: {forged_identity('+12025550123')}\r\n".encode()
    forged = replace(
        invite, payload=invite.payload.replace(b"Content-Type:", header + b"Content-Type:", 1)
    )
    plain = _replay(capsys, _write_pcap(tmp_path / "plain.pcap", packets))
    spoofed = _replay(capsys, _write_pcap(tmp_path / "forged.pcap", [forged, *packets[1:]]))
    (call,) = spoofed["calls"]
    (alert,) = [a for a in call["alerts"] if a["dimension"] == "caller_id"]
    assert alert["band"] == "high"
    assert "STIR/SHAKEN verification failed (unsupported_alg)" in json.dumps(alert)
    (clean,) = plain["calls"]
    assert [a for a in clean["alerts"] if a["dimension"] == "caller_id"] == []
    assert [(w["leg"], w["score"]) for w in clean["timeline"]["caller_id"]] == [("signalling", 0.0)]
