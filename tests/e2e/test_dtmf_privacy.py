"""DTMF digits never leave the tracker (DESIGN §2, issue 11; PCI DSS: DTMF can carry
card numbers). SIPp places a real SIPREC call into a real bridge (tiny dev fixture
models, the alert publisher, a real redis-server with AOF on) whose external stream
carries real speech with the synthetic-voice fixture's marker (so an alert is raised and
a webhook sent) and a 16-digit card-like number as RFC 4733 telephone-events. Then the
digit string, its separator-free form, its raw event codes and its plain MD5/SHA-1/SHA-256
(hex and raw) are searched for in every Redis key and value, the AOF and the other data
files, the outbox, every log record of the run (at DEBUG), every webhook body a local
receiver got, and the /metrics text: none may hold them."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import struct
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import redis
import redis.asyncio
from bridge_runner import free_udp_port, load_speech, run_sipp, wait_for
from cryptography.fernet import Fernet
from pydantic import SecretStr
from wired_bridge import InProcessBridge

from detectors.alert_schema import CallEvent
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.numbers import load_vault
from detectors.bus.redis_server import RedisServer
from detectors.bus.settings import BusSettings
from detectors.bus.webhooks.dispatcher import Dispatcher
from detectors.bus.webhooks.secrets import load_key
from detectors.bus.webhooks.store import EndpointStore
from detectors.fixture_models import MARKER_HZ
from detectors.model_store import ModelSettings
from native.codec import ulaw_encode
from sip_bridge.bench.sipp_files import _udp_frame
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring
from tests.bus.receiver import Receiver
from tests.bus.redis_dump import dump_files, dump_keys

CARD = "4877893287921746"  # Luhn-valid, card-like; not a real card
FRAME = 160
DTMF_PT = 101  # the scenario's a=rtpmap:101 telephone-event/8000 on the caller's stream


def _marked(speech: npt.NDArray[np.int16], dbfs: float = -20.0) -> npt.NDArray[np.int16]:
    t = np.arange(speech.size) / 8000
    tone = 32768 * 10 ** (dbfs / 20) * np.sin(2 * np.pi * MARKER_HZ * t)
    return np.clip(speech + tone, -32768, 32767).astype(np.int16)


def _rtp(seq: int, ts: int, payload: bytes, pt: int, marker: bool = False) -> bytes:
    ssrc = 0xD7F0
    return struct.pack("!BBHII", 0x80, pt | (0x80 * marker), seq & 0xFFFF, ts, ssrc) + payload


def write_call_pcap(path: Path, audio: npt.NDArray[np.int16], digits: str) -> int:
    """One RTP stream as a pcap for SIPp's play_pcap_audio, a packet every 20 ms: 2 s of
    µ-law speech, then each digit as an RFC 4733 event (4 updates of 20 ms, the end
    packet sent three times, as RFC 4733 §2.5.1.4 asks) followed by 60 ms of speech,
    then speech to the end of ``audio``. Returns the number of telephone-event packets."""
    ulaw = ulaw_encode(audio)
    total = len(ulaw) // FRAME
    packets: list[bytes] = []
    k = 0  # 20 ms slot: the packet's pcap time and its RTP timestamp

    def speech() -> None:
        nonlocal k
        payload = ulaw[k * FRAME : (k + 1) * FRAME]
        packets.append(_rtp(len(packets), 8000 + k * FRAME, payload, 0, marker=not packets))
        k += 1

    events = 0
    while k < 100:
        speech()
    for digit in digits:
        start = 8000 + k * FRAME  # an event's timestamp is its start, for every packet
        for i in (1, 2, 3, 4, 4, 4):
            end = 0x80 if i == 4 else 0
            payload = struct.pack("!BBH", int(digit), end | 10, i * FRAME)
            packets.append(_rtp(len(packets), start, payload, DTMF_PT, marker=i == 1))
            events += 1
            k += 1
        for _ in range(3):
            speech()
    while k < total:
        speech()
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for n, rtp in enumerate(packets):
        frame = _udp_frame(rtp, 6000, 6001)
        usec = 1_000_000 + n * 20_000
        out.append(
            struct.pack("<IIII", usec // 1_000_000, usec % 1_000_000, len(frame), len(frame))
        )
        out.append(frame)
    path.write_bytes(b"".join(out))
    return events


@dataclass
class RawReceiver(Receiver):
    """The bus tests' verifying receiver, keeping every request body as sent."""

    bodies: list[bytes] = field(default_factory=list)

    def handle(self, body: bytes, headers: dict[str, str]) -> int:
        self.bodies.append(body)
        return super().handle(body, headers)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.name} {record.getMessage()}"
        if record.exc_info:
            text += " " + logging.Formatter().formatException(record.exc_info)
        self.lines.append(text)


@pytest.fixture
def every_log_line() -> Iterator[_Collect]:
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


def needles(digits: str) -> dict[str, bytes]:
    out = {"digits": digits.encode(), "event codes": bytes(int(d) for d in digits)}
    for name in ("md5", "sha1", "sha256"):
        h = hashlib.new(name, digits.encode())
        out[f"{name} hex"] = h.hexdigest().encode()
        out[f"{name} HEX"] = h.hexdigest().upper().encode()
        out[f"{name} raw"] = h.digest()
    return out


def leaks(blob: bytes, digits: str) -> list[str]:
    """What of ``digits`` is in ``blob``: exact forms, and the digits with anything
    between them (separators, JSON lists) once every non-digit byte is removed."""
    found = [name for name, needle in needles(digits).items() if needle in blob]
    if digits.encode() in re.sub(rb"\D", b"", blob):
        found.append("digits with separators")
    return found


def test_needles_are_found_where_they_are() -> None:
    """The search itself finds each form it looks for (so a clean run means clean)."""
    assert leaks(b'{"x": [4, 8, 7, 7, 8, 9, 3, 2, 8, 7, 9, 2, 1, 7, 4, 6]}', CARD) == [
        "digits with separators"
    ]
    for name, needle in needles(CARD).items():
        assert name in leaks(b"prefix " + needle + b" suffix", CARD)
    assert leaks(b"4877 8932 8792 1745", CARD) == []


def test_dtmf_digits_reach_no_store_log_webhook_or_metric(
    shared_dir: Path,
    tmp_path: Path,
    settings: BusSettings,
    client: redis.Redis,
    redis_server: RedisServer,
    every_log_line: _Collect,
) -> None:
    speech = _marked(load_speech(shared_dir, 6.0))
    workdir = tmp_path / "call"
    workdir.mkdir()
    sent_events = write_call_pcap(workdir / "speech.pcap", speech, CARD)
    assert sent_events == 6 * len(CARD)

    bus = settings.model_copy(
        update={
            "webhook_key": SecretStr(Fernet.generate_key().decode()),
            "webhook_allow_private_targets": True,
        }
    )
    keys = Keys(bus.key_prefix)
    receiver = RawReceiver()
    fernet = load_key(bus)
    _, secret = EndpointStore(client, keys, fernet, True).add(receiver.url, allow_private=True)
    receiver.secrets = [secret]

    base = 39000 + free_udp_port() % 50 * 20
    bridge_settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 19}",
            "drain_timeout_s": 3.0,
            "http_listen": "127.0.0.1:0",
            "api_listen": "",  # no control API: not needed here
            "dev_fixture_models": "tiny",
        }
    )
    wiring = Wiring(bridge_settings, bus, ModelSettings(models_dir=tmp_path / "no-models"))
    bridge = InProcessBridge(bridge_settings, wiring)
    bridge.start()
    try:
        result = run_sipp(
            "uac_siprec_long.xml",
            bridge,  # type: ignore[arg-type]
            workdir,
            extra=["-set", "port2", str(free_udp_port())],
            media_port=free_udp_port(),
        )
        assert result.returncode == 0, result.stderr[-2000:]

        def ended() -> bool:
            return any(
                isinstance(m, CallEvent) and m.event == "ended"
                for m in (decode(f) for _, f in client.xrange(keys.events))
            )

        assert wait_for(ended, 20)
        assert wiring.http is not None
        host, port = wiring.http.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
            metrics = resp.read()
    finally:
        bridge.stop()  # drains, flushes the publisher

    # the events reached the tracker (so there was something to leak)
    counted = re.search(rb"^callshield_jb_dtmf_events_total (\S+)$", metrics, re.M)
    assert counted is not None and float(counted.group(1)) == len(CARD), metrics[-3000:]

    async def deliver() -> None:
        d = Dispatcher(redis.asyncio.Redis.from_url(redis_server.url), bus, fernet)
        try:
            await d.setup()
            for _ in range(100):
                await d.intake(block_ms=50)
                await d.deliver_due()
                if receiver.bodies and await d.queue.next_due() is None:
                    return
        finally:
            await d.aclose()

    try:
        asyncio.run(deliver())
    finally:
        receiver.close()
    assert receiver.bodies and receiver.bad_signatures == 0  # the marked call alerted

    stored = dump_keys(client)
    sealed = [
        (k.decode().rpartition(":")[2], client.hget(k, "numbers"))
        for k in client.scan_iter(match=keys.call("*"))
    ]
    redis_server.stop()  # a clean shutdown: the AOF is complete on disk
    files = dump_files(redis_server.data_dir)
    assert b"appendonly.aof" in b"\n".join(
        p.name.encode() for p in redis_server.data_dir.rglob("*")
    ), "AOF is off: the search would miss what Redis logged"
    outbox = dump_files(bus.state_dir)
    logs = "\n".join(every_log_line.lines).encode()
    assert logs, "no log line was collected"
    places = {
        "redis keys and values": stored,
        "redis data files (AOF, RDB, log)": files,
        "the outbox": outbox,
        "log records": logs,
        "webhook bodies": b"\n".join(receiver.bodies),
        "webhook payloads": json.dumps(list(receiver.first.values())).encode(),
        "/metrics": metrics,
    }
    assert b"synthetic_voice" in stored and b"synthetic_voice" in places["webhook bodies"]
    found = {where: leaks(blob, CARD) for where, blob in places.items()}
    assert not any(found.values()), found

    # issue 11: the caller's number (SIPREC metadata) is stored only sealed; the
    # deployment's numbers key opens it again (the dashboard's audited reveal)
    ani = b"15550142"
    for where in ("redis keys and values", "redis data files (AOF, RDB, log)", "the outbox"):
        assert ani not in places[where], where
    vault = load_vault(bus)
    opened = [vault.open(call_id, blob.decode()) for call_id, blob in sealed if blob]
    assert [n["ani"] for n in opened] == ["+15550142"], opened
