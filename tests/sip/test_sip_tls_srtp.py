"""Encrypted ingress against a real bridge on 127.0.0.1 (issue 11): baresip (its srtp
module, SDES AES_CM_128_HMAC_SHA1_80) places an SRTP call; a SIP-over-TLS caller with a
client certificate from a CA the test makes (mutual TLS required, an allowlist of
certificate names) places an AEAD_AES_128_GCM call whose real speech libsrtp protects,
decoded bit-exactly at its RTP timestamps while a tampered and a replayed packet are
counted and dropped; untrusted peers (a CA-signed certificate not on the list, no or a
foreign certificate, plain UDP from an unlisted address) get 403 or no handshake, and
never a call."""

from __future__ import annotations

import base64
import os
import re
import secrets
import shutil
import socket
import ssl
import struct
import subprocess
import time
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pylibsrtp
import pytest
from bridge_runner import (
    RunningBridge,
    free_udp_port,
    load_speech,
    running_bridge,
    wait_for,
)
from tls_uac import SipOverStream, TestCa, tls_connect

from detectors.bus.redis_server import free_udp_tcp_port
from native.codec import ulaw_decode, ulaw_encode

FRAME = 160


def _offer(rtp_port: int, *crypto: str) -> str:
    lines = "".join(f"a=crypto:{c}\n" for c in crypto)
    return (
        "v=0\no=sbc 1 1 IN IP4 127.0.0.1\ns=-\nc=IN IP4 127.0.0.1\nt=0 0\n"
        f"m=audio {rtp_port} RTP/SAVP 0\na=rtpmap:0 PCMU/8000\n{lines}a=sendrecv\n"
    )


def _dialog_headers(call_id: str, cseq: str, to: str, contact_port: int) -> list[str]:
    return [
        f"To: {to}",
        "From: <sips:sbc@sbc.trusted.test>;tag=f00d",
        f"Call-ID: {call_id}",
        f"CSeq: {cseq}",
        f"Contact: <sips:sbc@127.0.0.1:{contact_port}>",
    ]


def _tls_bridge(tmp_path: Path, ca: TestCa) -> RunningBridge:
    server = ca.issue("bridge.test", ip="127.0.0.1")
    return RunningBridge(
        sip_tls_listen="127.0.0.1:0",
        sip_tls_cert=str(server.cert),
        sip_tls_key=str(server.key),
        sip_tls_ca=str(ca.path),
        sip_trusted_peers="sbc.trusted.test",
    )


def test_mutual_tls_srtp_call_is_bit_exact_and_drops_attacks(
    shared_dir: Path, tmp_path: Path
) -> None:
    ca = TestCa(tmp_path)
    sbc = ca.issue("sbc.trusted.test", dns=("sbc.trusted.test",))
    speech = load_speech(shared_dir, 2.0)
    ulaw = ulaw_encode(speech)
    n, ts0, ssrc = len(ulaw) // FRAME, 123_456, 0x5EC0DE
    key = os.urandom(28)
    sender = pylibsrtp.Session(
        policy=pylibsrtp.Policy(
            key=key,
            ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND,
            srtp_profile=pylibsrtp.Policy.SRTP_PROFILE_AEAD_AES_128_GCM,
        )
    )
    protected = [
        sender.protect(
            struct.pack("!BBHII", 0x80, 0, 65490 + k & 0xFFFF, ts0 + k * FRAME, ssrc)
            + ulaw[k * FRAME : (k + 1) * FRAME]
        )
        for k in range(n)
    ]
    rtp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rtp.bind(("127.0.0.1", 0))
    offer = _offer(
        rtp.getsockname()[1],
        f"1 AES_CM_128_HMAC_SHA1_80 inline:{base64.b64encode(os.urandom(30)).decode()}",
        f"2 AEAD_AES_128_GCM inline:{base64.b64encode(key).decode()}|2^31",
    )
    bridge = _tls_bridge(tmp_path, ca)
    bridge.start()
    try:
        port = bridge.bridge.server.tls_port
        with tls_connect(port, ca.path, sbc) as sock:
            uac = SipOverStream(sock)
            call_id, uri = secrets.token_hex(8), f"sips:service@127.0.0.1:{port}"
            mine = sock.getsockname()[1]
            to = f"<{uri}>"
            uac.send("INVITE", uri, _dialog_headers(call_id, "1 INVITE", to, mine), offer)
            status, headers, answer = uac.final()
            answer = answer.replace("\r\n", "\n")
            assert status == 200, (status, headers)
            assert headers["contact"] == f"<sips:callshield@127.0.0.1:{port}>"
            assert re.search(r"^a=crypto:2 AEAD_AES_128_GCM inline:\S+$", answer, re.M)
            match = re.search(r"^m=audio (\d+) RTP/SAVP 0", answer, re.M)
            assert match is not None
            media = ("127.0.0.1", int(match[1]))
            to = headers["to"]
            uac.send("ACK", uri, _dialog_headers(call_id, "1 ACK", to, mine))
            t0 = time.monotonic()
            for k in range(n):
                time.sleep(max(0.0, t0 + k * 0.02 - time.monotonic()))
                if k == 30:  # a tampered copy arrives before the real packet
                    bad = bytearray(protected[k])
                    bad[40] ^= 0x20
                    rtp.sendto(bytes(bad), media)
                rtp.sendto(protected[k], media)
                if k == 50:
                    rtp.sendto(protected[40], media)  # replayed
            (call,) = bridge.calls().values()
            (leg,) = call.legs.values()
            assert wait_for(
                lambda: bridge.bridge.media.stats(leg.leg_id)["counters"]["datagrams"] == n + 2
            )
            c = bridge.bridge.media.stats(leg.leg_id)["counters"]
            assert (c["srtp_suite"], c["srtp_ok"]) == (3, n)
            assert (c["srtp_auth_failed"], c["srtp_replayed"]) == (1, 1)
            uac.send("BYE", uri, _dialog_headers(call_id, "2 BYE", to, mine))
            assert uac.final()[0] == 200
        assert wait_for(lambda: bridge.calls() == {})
    finally:
        bridge.stop()
        rtp.close()
    decoded = ulaw_decode(ulaw)
    good = bad_frames = 0
    for ts, pcm in bridge.sink.captured(leg.leg_id).by_rtp_ts.items():
        off = (ts - ts0) & 0xFFFFFFFF
        ok = np.array_equal(decoded[off : off + pcm.size], pcm)
        good, bad_frames = good + ok, bad_frames + (not ok)
    assert bad_frames == 0 and good >= n - 10  # probation drops the first packet
    assert bridge.events() == [("started", ""), ("ended", "bye")]


def test_untrusted_peers_get_403_or_no_handshake(tmp_path: Path) -> None:
    ca = TestCa(tmp_path)
    rogue = ca.issue("rogue.test", dns=("rogue.test",))
    foreign = TestCa(tmp_path, "Another CA").issue("sbc.trusted.test", dns=("sbc.trusted.test",))
    offer = _offer(
        40000, f"1 AES_CM_128_HMAC_SHA1_80 inline:{base64.b64encode(bytes(30)).decode()}"
    )
    with _running(_tls_bridge(tmp_path, ca)) as bridge:
        port = bridge.bridge.server.tls_port
        uri = f"sips:service@127.0.0.1:{port}"
        with tls_connect(port, ca.path, rogue) as sock:  # signed by the CA, not listed
            uac = SipOverStream(sock)
            headers = _dialog_headers("rogue-1", "1 INVITE", f"<{uri}>", 5061)
            uac.send("INVITE", uri, headers, offer)
            status, reply, _ = uac.final()
            assert status == 403 and "untrusted peer" in reply["warning"]
        for client in (None, foreign):  # mutual TLS: no certificate, or the wrong CA's
            headers = _dialog_headers("x", "1 INVITE", f"<{uri}>", 1)
            with (
                pytest.raises((ssl.SSLError, ConnectionError)),
                tls_connect(port, ca.path, client) as sock,
            ):
                uac = SipOverStream(sock)
                uac.send("INVITE", uri, headers, offer)
                uac.final()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # 127.0.0.1 is not listed
        udp.bind(("127.0.0.1", 0))
        udp.settimeout(5)
        request = (
            f"INVITE sip:service@127.0.0.1:{bridge.sip_port} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{udp.getsockname()[1]};branch=z9hG4bKudp1;rport\r\n"
            "To: <sip:service@127.0.0.1>\r\nFrom: <sip:x@127.0.0.1>;tag=1\r\n"
            "Call-ID: udp-1\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        )
        udp.sendto(request.encode(), ("127.0.0.1", bridge.sip_port))
        assert udp.recv(65536).startswith(b"SIP/2.0 403 Forbidden\r\n")
        udp.close()
        stats = bridge.bridge.uas.stats
        assert wait_for(lambda: stats["tls_handshake_failed"] == 2)
        assert (stats["untrusted"], stats["sent.403"], stats["tls_connections"]) == (2, 2, 1)
        assert bridge.calls() == {} and bridge.publisher.events == []
        assert stats["received"] == 0  # nothing untrusted reached the UAS


@contextmanager
def _running(bridge: RunningBridge) -> Iterator[RunningBridge]:
    bridge.start()
    try:
        yield bridge
    finally:
        bridge.stop()


def test_baresip_srtp_call(shared_dir: Path, tmp_path: Path) -> None:
    baresip = shutil.which("baresip")
    assert baresip, "baresip (Debian baresip-core) is required: .ci/install.sh installs it"
    assert Path("/usr/lib/baresip/modules/srtp.so").exists()
    speech = load_speech(shared_dir, 2.0)
    wav = tmp_path / "speech.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(speech.astype("<i2").tobytes())
    rtp = free_udp_port()
    (tmp_path / "config").write_text(
        f"sip_listen\t127.0.0.1:{free_udp_tcp_port()}\n"
        "net_interface\t127.0.0.1\n"
        "audio_player\tnil,nil\n"
        "audio_alert\tnil,nil\n"
        f"audio_source\taufile,{wav}\n"
        f"rtp_ports\t{rtp}-{rtp + 10}\n"
        "module_path\t/usr/lib/baresip/modules\n"
        "module\tg711.so\n"
        "module\taufile.so\n"
        "module\tsrtp.so\n"
        "module_app\taccount.so\n"
        "module_app\tmenu.so\n"
    )
    (tmp_path / "accounts").write_text(
        "<sip:tester@127.0.0.1;transport=udp>;regint=0;audio_codecs=PCMU;mediaenc=srtp-mand\n"
    )
    with running_bridge() as bridge:
        dial = f"/dial sip:service@127.0.0.1:{bridge.sip_port}"
        result = subprocess.run(
            [baresip, "-4", "-f", str(tmp_path), "-e", dial, "-t", "5"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "Call established" in result.stdout, result.stdout[-2000:]
        assert "srtp" in result.stdout
        assert wait_for(lambda: bridge.calls() == {})
        (leg,) = bridge.publisher.events[0][1].legs.values()
        received = np.concatenate(list(bridge.sink.captured(leg.leg_id).by_rtp_ts.values()))
        g = bridge.bridge.ingest.counters()
    assert (g["srtp_auth_failed"], g["srtp_replayed"], g["srtp_malformed"]) == (0, 0, 0)
    assert received.size >= 0.8 * speech.size
    # decrypted right: the audio is the file's (garbage if the keystream were wrong)
    s, r = speech.astype(float), received.astype(float)
    n = 1 << int(np.ceil(np.log2(s.size + r.size)))
    xc = np.fft.irfft(np.fft.rfft(s, n) * np.conj(np.fft.rfft(r, n)), n)
    lag = int(np.argmax(xc))
    lag = lag - n if lag > n // 2 else lag
    a, b = (s[lag:], r) if lag >= 0 else (s, r[-lag:])
    m = min(a.size, b.size)
    assert float(np.corrcoef(a[:m], b[:m])[0, 1]) >= 0.9
