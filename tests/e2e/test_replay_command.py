"""`callshield replay` end to end: recordings through the native jitter buffer, the
detector runtime (the dev fixture models) and fusion, in virtual time.

- A WAV of real speech whose second half carries the synthetic-voice fixture's marker
  tone: the synthetic_voice alert is raised at the right offset, and never before.
- A real capture: tcpdump records µ-law RTP of real speech on the loopback interface,
  the external leg sent through the seeded impairment relay (loss and jitter), the
  internal leg clean. The replay shows the loss as concealment in the leg's media and
  in the windows' quality, analyses the external leg only, and gives the same report at
  --speed 1 (real time) and --speed 20.
- Bad input: a clear error and exit status 2.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import soundfile
from bridge_runner import load_speech

from detectors.fixture_models import MARKER_HZ
from native.codec import build_rtp, ulaw_encode
from sip_bridge.cli import main
from sip_bridge.impair import ImpairmentConfig, ImpairRelay

SHARED = Path(__file__).resolve().parents[3] / "shared"
EXTERNAL_SSRC, INTERNAL_SSRC = 0x0E0E0E01, 0x01010102


def _replay(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(["replay", *args, "--dev-fixture-models", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    doc: dict[str, Any] = json.loads(out)
    return doc


def _marked_speech(seconds: float, tone_from_s: float) -> npt.NDArray[np.int16]:
    speech = load_speech(SHARED, seconds).astype(np.float64)
    t = np.arange(speech.size) / 8000
    tone = 32768 * 10 ** (-20 / 20) * np.sin(2 * np.pi * MARKER_HZ * t)
    start = int(tone_from_s * 8000)
    speech[start:] += tone[start:]
    return np.clip(speech, -32768, 32767).astype(np.int16)


def test_marker_tone_raises_synthetic_voice_alert_at_its_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wav = tmp_path / "call.wav"
    soundfile.write(str(wav), _marked_speech(8.0, 4.0), 8000, subtype="PCM_16")
    doc = _replay(capsys, str(wav), "--speed", "0")
    alerts = [a for a in doc["alerts"] if a["dimension"] == "synthetic_voice"]
    assert len(alerts) == 1, doc["alerts"]
    # windows are 0.5 s every 0.25 s; two of three over the threshold open the episode
    assert 4.0 < alerts[0]["raised_at_s"] <= 5.0
    assert alerts[0]["call_state"] == "ended"  # its final revision when the replay ended
    windows = doc["timeline"]["synthetic_voice"]
    before = [w["score"] for w in windows if w["end_s"] <= 3.9 and w["score"] is not None]
    after = [w["score"] for w in windows if w["start_s"] >= 4.1 and w["score"] is not None]
    assert len(before) >= 10 and max(before) < 0.5
    assert len(after) >= 10 and min(after) > 0.5
    (leg,) = doc["legs"]
    assert leg["role"] == "external" and leg["packets_lost"] == 0
    assert leg["packets_received"] == leg["packets_in_file"] == 400


def _capture_call(tmp_path: Path, seconds: float) -> Path:
    """Two legs of real speech as µ-law RTP over loopback, recorded by tcpdump."""
    tcpdump = shutil.which("tcpdump")
    assert tcpdump, "tcpdump is required: .ci/install.sh installs it"
    sinks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
    for s in sinks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sinks]
    pcap = tmp_path / "call.pcap"
    cmd = [tcpdump, "-i", "lo", "-U", "-n", "--time-stamp-precision=nano", "-w", str(pcap)]
    cmd += ["udp", "and", f"(dst port {ports[0]} or dst port {ports[1]})"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    ready = threading.Event()
    threading.Thread(
        target=lambda: [ready.set() for line in proc.stderr if "listening" in line],  # type: ignore[union-attr]
        daemon=True,
    ).start()
    assert ready.wait(10), "tcpdump did not start listening"
    relay = ImpairRelay(
        ImpairmentConfig(seed=7, loss=0.08, jitter=0.02), forward=("127.0.0.1", ports[0])
    )
    relay.start()
    try:
        ext = ulaw_encode(load_speech(SHARED, seconds))
        internal = ulaw_encode(load_speech(SHARED, seconds, skip=9))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            t0 = time.monotonic()
            for k in range(len(ext) // 160):
                delay = t0 + 0.02 * k - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                for ssrc, pcm, dst in (
                    (EXTERNAL_SSRC, ext, relay.address),
                    (INTERNAL_SSRC, internal, ("127.0.0.1", ports[1])),
                ):
                    payload = pcm[160 * k : 160 * (k + 1)]
                    tx.sendto(build_rtp(payload, seq=k, ts=160 * k, ssrc=ssrc), dst)
        time.sleep(0.3)  # the relay's delayed packets
    finally:
        relay.close()
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
        for s in sinks:
            s.close()
    return pcap


def test_capture_with_loss_shows_concealment_and_is_the_same_at_any_speed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pcap = _capture_call(tmp_path, 3.0)
    # the internal leg's SSRC is named; the external one is the other stream
    args = [str(pcap), "--internal-ssrc", hex(INTERNAL_SSRC), "--external-ssrc", hex(EXTERNAL_SSRC)]
    fast = _replay(capsys, *args, "--speed", "20")
    real = _replay(capsys, *args, "--speed", "1")
    legs = {leg["role"]: leg for leg in fast["legs"]}
    ext, internal = legs["external"], legs["internal"]
    assert ext["source"].startswith(f"ssrc 0x{EXTERNAL_SSRC:08x}")
    assert ext["packets_lost"] > 0 and ext["concealment_events"] > 0
    assert ext["packets_received"] == ext["packets_in_file"] < 150
    assert any(v and v > 0 for v in ext["concealed_pct_per_s"])
    assert internal["packets_lost"] == 0 and not internal["analysed"]
    assert all(not v for v in internal["concealed_pct_per_s"])
    windows = [w for dim in fast["timeline"].values() for w in dim]
    assert windows and {w["leg"] for w in windows} == {"external"}  # internal never analysed
    assert any(w["concealed_ratio"] > 0 for w in windows)
    # virtual time: nothing but the pacing differs between the two speeds
    for doc in (fast, real):
        del doc["speed"], doc["wall_s"]
    assert fast == real
    # the same packets in a pcapng file (enhanced packet blocks, ns resolution)
    ng = _replay(capsys, str(_to_pcapng(pcap, tmp_path / "call.pcapng")), *args[1:], "--speed", "0")
    del ng["speed"], ng["wall_s"]
    assert ng == {**fast, "input": str(tmp_path / "call.pcapng")}


def _to_pcapng(pcap: Path, out: Path) -> Path:
    """Rewrite a classic (nanosecond) pcap as pcapng: SHB, IDB with if_tsresol 9, EPBs."""
    import struct

    data = pcap.read_bytes()
    assert data[:4] == b"\x4d\x3c\xb2\xa1"  # tcpdump's nanosecond pcap, little-endian
    link = struct.unpack_from("<I", data, 20)[0]

    def block(btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        n = len(body) + 12
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    blocks = [block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))]
    opts = struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)
    blocks.append(block(1, struct.pack("<HHI", link, 0, 262144) + opts))
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack_from("<IIII", data, off)
        ts = sec * 1_000_000_000 + frac
        frame = data[off + 16 : off + 16 + incl]
        blocks.append(
            block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, incl, orig) + frame)
        )
        off += 16 + incl
    out.write_bytes(b"".join(blocks))
    return out


def test_bad_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture at all")
    assert main(["replay", str(junk)]) == 2
    assert "not a pcap or pcapng capture" in capsys.readouterr().err
    assert main(["replay", "--external-ssrc", "0x1", "--external", str(junk)]) == 2
    assert "captures only" in capsys.readouterr().err


def test_replay_publishes_like_a_live_call_with_redis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_server: Any
) -> None:
    import redis

    from detectors.alert_schema import Alert, CallEvent
    from detectors.bus.codec import decode
    from detectors.bus.keys import Keys

    wav = tmp_path / "call.wav"
    soundfile.write(str(wav), _marked_speech(4.0, 2.0), 8000, subtype="PCM_16")
    doc = _replay(capsys, str(wav), "--speed", "0", "--redis", redis_server.url)
    client = redis.Redis.from_url(redis_server.url)
    keys = Keys("callshield:")
    try:
        events = [decode(f) for _, f in client.xrange(keys.events)]
        alerts = [decode(f) for _, f in client.xrange(keys.alerts)]
        scores = client.xlen(keys.scores)
    finally:
        client.close()
    assert [e.event for e in events if isinstance(e, CallEvent)] == ["started", "ended"]
    assert {e.call_id for e in events} == {doc["call_id"]}
    (alert,) = doc["alerts"]
    published = [a for a in alerts if isinstance(a, Alert)]
    assert {a.alert_id for a in published} == {alert["alert_id"]}
    assert max(a.revision for a in published) == alert["revisions"]
    assert scores == sum(len(w) for w in doc["timeline"].values())
