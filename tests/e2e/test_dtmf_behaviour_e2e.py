"""A PIN-guessing caller raises a dtmf_behaviour alert, and the PINs are nowhere in
clear (issue 6). SIPp places a real SIPREC call into a real bridge (tiny fixture
models, a real redis-server) whose caller stream carries six different 4-digit PINs
with human timing: two as RFC 4733 telephone-events only, two as in-band tones only
(µ-law audio), and two both ways at once (as an SBC that forwards the tones and
sends the events), which the bridge must count once. Then the alert's reasons must
name six distinct 4-digit entries (if the last two were counted twice they would be
8-digit entries and the call would not alert), and every Redis key and value, the
AOF, every log record of the run and /metrics are searched for the PINs."""

from __future__ import annotations

import logging
import random
import re
import struct
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import redis
from bridge_runner import free_udp_port, load_speech, run_sipp, wait_for
from wired_bridge import InProcessBridge

from detectors.alert_schema import Alert, CallEvent, Dimension
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.redis_server import RedisServer
from detectors.bus.settings import BusSettings
from detectors.dtmf.goertzel import COLS, KEYS, ROWS
from detectors.model_store import ModelSettings
from native.codec import ulaw_encode
from sip_bridge.bench.sipp_files import _udp_frame
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring
from tests.bus.redis_dump import dump_files, dump_keys

FRAME = 160
DTMF_PT = 101  # a=rtpmap:101 telephone-event/8000 on the scenario's caller stream
KEY_SLOTS = 5  # 100 ms per key
ENTRY_PAUSE_SLOTS = 125  # 2.5 s after each PIN: the entry is over
MODES = ("rfc", "rfc", "inband", "inband", "both", "both")


def _rtp(seq: int, ts: int, payload: bytes, pt: int, marker: bool = False) -> bytes:
    return struct.pack("!BBHII", 0x80, pt | (0x80 * marker), seq & 0xFFFF, ts, 0xD7F1) + payload


def _tone(key: str, n: int) -> npt.NDArray[np.float64]:
    i = KEYS.index(key)
    t = np.arange(n) / 8000
    a = 32768 * 10 ** (-12 / 20)
    return a * (np.sin(2 * np.pi * ROWS[i // 4] * t) + np.sin(2 * np.pi * COLS[i % 4] * t))


def write_pin_pcap(path: Path, speech: npt.NDArray[np.int16], pins: list[str]) -> float:
    """The caller's RTP as a pcap for play_pcap_audio, 20 ms slots: 2 s of speech, then
    each PIN (keys of 100 ms, 200-400 ms apart, human-irregular) sent as ``MODES``
    says, then 2.5 s of speech. Returns the media's length in seconds."""
    rng = random.Random(7)
    plan: list[tuple[str, str | None, int]] = [("speech", None, 0)] * 100  # (what, key, n)
    for pin, mode in zip(pins, MODES, strict=True):
        for key in pin:
            plan += [(mode, key, i) for i in range(KEY_SLOTS)]
            plan += [("quiet", None, 0)] * rng.randint(10, 20)
        plan += [("speech", None, 0)] * ENTRY_PAUSE_SLOTS
    audio = np.zeros(len(plan) * FRAME)
    speech_part = speech[: audio.size]
    for k, (what, key, i) in enumerate(plan):
        span = slice(k * FRAME, (k + 1) * FRAME)
        if what == "speech":
            audio[span] = speech_part[span]
        elif what in ("inband", "both") and key is not None:
            audio[span] = _tone(key, KEY_SLOTS * FRAME)[i * FRAME : (i + 1) * FRAME]
    ulaw = ulaw_encode(np.clip(audio, -32768, 32767).astype(np.int16))
    timed: list[tuple[int, bytes]] = []  # (µs, RTP)
    seq = 0
    for k, (what, key, i) in enumerate(plan):
        ts, at = 8000 + k * FRAME, 1_000_000 + k * 20_000
        if what != "rfc":
            payload = ulaw[k * FRAME : (k + 1) * FRAME]
            timed.append((at, _rtp(seq, ts, payload, 0, marker=seq == 0)))
            seq += 1
        if what in ("rfc", "both") and key is not None:
            start = ts - i * FRAME
            end = i == KEY_SLOTS - 1
            for again in range(3 if end else 1):  # the end packet three times
                flags = (0x80 if end else 0) | 10  # E bit, volume -10 dBm0
                payload = struct.pack("!BBH", int(key), flags, (i + 1) * FRAME)
                timed.append((at + 1000 * again, _rtp(seq, start, payload, DTMF_PT, i == 0)))
                seq += 1
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for usec, rtp in timed:
        frame = _udp_frame(rtp, 6000, 6001)
        out.append(
            struct.pack("<IIII", usec // 1_000_000, usec % 1_000_000, len(frame), len(frame))
        )
        out.append(frame)
    path.write_bytes(b"".join(out))
    return len(plan) * 0.02


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name} {record.getMessage()}")


@pytest.fixture
def log_lines() -> Iterator[_Collect]:
    handler = _Collect()
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def test_pin_guessing_call_alerts_dtmf_behaviour_without_digits_in_clear(
    shared_dir: Path,
    tmp_path: Path,
    settings: BusSettings,
    client: redis.Redis,
    redis_server: RedisServer,
    log_lines: _Collect,
) -> None:
    rng = random.Random(11)
    pins = [f"{rng.randrange(1000, 10_000)}" for _ in MODES]
    assert len(set(pins)) == len(pins)
    workdir = tmp_path / "call"
    workdir.mkdir()
    seconds = write_pin_pcap(workdir / "speech.pcap", load_speech(shared_dir, 40.0), pins)

    base = 39000 + free_udp_port() % 50 * 20
    bridge_settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 19}",
            "drain_timeout_s": 3.0,
            "http_listen": "127.0.0.1:0",
            "api_listen": "",
            "dev_fixture_models": "tiny",
        }
    )
    wiring = Wiring(bridge_settings, settings, ModelSettings(models_dir=tmp_path / "no-models"))
    bridge = InProcessBridge(bridge_settings, wiring)
    bridge.start()
    keys = Keys(settings.key_prefix)
    try:
        result = run_sipp(
            "uac_siprec_dtmf.xml",
            bridge,  # type: ignore[arg-type]
            workdir,
            extra=["-set", "port2", str(free_udp_port()), "-d", str(int(seconds * 1000) + 500)],
            media_port=free_udp_port(),
            timeout=seconds + 30,
        )
        assert result.returncode == 0, result.stderr[-2000:]

        def ended() -> bool:
            return any(
                isinstance(m, CallEvent) and m.event == "ended"
                for m in (decode(f) for _, f in client.xrange(keys.events))
            )

        assert wait_for(ended, 20)
        analysis = wiring.analysis
        assert analysis is not None and analysis.dtmf is not None
        stats = analysis.dtmf.stats
        assert wiring.http is not None
        host, port = wiring.http.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
            metrics = resp.read()
    finally:
        bridge.stop()

    # what the tap saw: 16 RFC 4733 keys, 16 in-band keys, 8 of them duplicates
    assert (stats.rfc_events, stats.inband_keys, stats.inband_deduplicated) == (16, 16, 8), stats
    found = re.search(rb"^callshield_dtmf_inband_duplicates_total (\S+)$", metrics, re.M)
    assert found is not None and float(found.group(1)) == 8.0, metrics[-3000:]
    alerts = [m for m in (decode(f) for _, f in client.xrange(keys.alerts)) if isinstance(m, Alert)]
    dtmf = [a for a in alerts if a.dimension is Dimension.DTMF_BEHAVIOUR]
    assert dtmf, [a.dimension for a in alerts]
    last = max(dtmf, key=lambda a: a.revision)
    details = " ".join(r.detail for r in last.reasons)
    assert "6 distinct 4-digit entries" in details, details
    assert last.score >= 0.5

    stored = dump_keys(client)
    redis_server.stop()  # a clean shutdown: the AOF is complete on disk
    files = dump_files(redis_server.data_dir)
    logs = "\n".join(log_lines.lines).encode()
    assert b"dtmf_behaviour" in stored and logs
    # the PINs one after another, as text (with or without anything between them) or as
    # event codes: found nowhere. A single 4-digit PIN could occur by chance in a
    # timestamp, so it is looked for in the text an alert shows (its reasons) only.
    typed = "".join(pins)
    places = {"redis": stored, "redis files": files, "logs": logs, "/metrics": metrics}
    for where, blob in places.items():
        assert typed.encode() not in blob, where
        assert typed.encode() not in re.sub(rb"\D", b"", blob), where
        assert bytes(int(d) for d in typed) not in blob, where
    shown = " ".join(f"{a.score} {r.detail}" for a in dtmf for r in a.reasons)
    assert not [pin for pin in pins if pin in shown], shown
