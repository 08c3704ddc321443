"""Helpers for the ingest tests: G.711 legs sent over real UDP, a real-time pull loop,
and exact checks of the pulled audio against what was sent."""

from __future__ import annotations

import socket
import struct
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from native import lib
from native.codec import ulaw_decode, ulaw_encode
from native.ingest import Ingest

FRAME = 160  # samples per 20 ms at 8 kHz
TICK_NS = 20_000_000
SPEECH = "asterisk_prompts/en"


def rtp_packet(seq: int, ts: int, ssrc: int, payload: bytes, pt: int = 0) -> bytes:
    return struct.pack("!BBHII", 0x80, pt, seq & 0xFFFF, ts & 0xFFFFFFFF, ssrc) + payload


def load_speech(shared_dir: Path, seconds: float) -> npt.NDArray[np.int16]:
    """Real 8 kHz speech (Asterisk prompts, CC BY-SA), concatenated to `seconds`."""
    need = int(seconds * 8000)
    chunks: list[npt.NDArray[np.int16]] = []
    for path in sorted((shared_dir / "data" / "speech" / SPEECH).glob("*.wav")):
        with wave.open(str(path)) as w:
            assert (w.getframerate(), w.getsampwidth(), w.getnchannels()) == (8000, 2, 1)
            chunks.append(np.frombuffer(w.readframes(w.getnframes()), dtype="<i2"))
        if sum(c.size for c in chunks) >= need:
            break
    audio = np.concatenate(chunks)[:need].astype(np.int16)
    assert audio.size == need, "not enough speech in the shared folder"
    return audio


@dataclass
class Leg:
    """One sent RTP stream: µ-law of `source`, 20 ms per packet, from its own socket."""

    source: npt.NDArray[np.int16]
    ssrc: int
    seq0: int = 1000
    ts0: int = 50_000
    sock: socket.socket = field(default_factory=lambda: _sender())
    ulaw: bytes = b""
    decoded: npt.NDArray[np.int16] = field(default_factory=lambda: np.zeros(0, np.int16))

    def __post_init__(self) -> None:
        self.ulaw = ulaw_encode(self.source)
        self.decoded = ulaw_decode(self.ulaw)

    @property
    def packets(self) -> int:
        return len(self.ulaw) // FRAME

    def packet(self, k: int) -> bytes:
        payload = self.ulaw[k * FRAME : (k + 1) * FRAME]
        return rtp_packet(self.seq0 + k, self.ts0 + k * FRAME, self.ssrc, payload)

    def send(self, k: int, dest: tuple[str, int]) -> None:
        self.sock.sendto(self.packet(k), dest)


def _sender() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    return s


@dataclass
class Frame:
    flag: int
    rtp_ts: int | None
    pcm: npt.NDArray[np.int16]


def source_of(sock: socket.socket) -> tuple[str, int]:
    """The (host, port) a sender's socket sends from: what a leg expects or locks."""
    host, port = sock.getsockname()[:2]
    return str(host), int(port)


def frames_sent_by(frames: list[Frame], leg: Leg) -> list[Frame]:
    """The frames whose RTP timestamps lie in what ``leg`` sent."""
    end = leg.ts0 + leg.packets * FRAME
    return [f for f in frames if f.rtp_ts is not None and leg.ts0 <= f.rtp_ts < end]


def run_realtime(
    ingest: Ingest, ticks: int, on_tick: Callable[[int], None]
) -> dict[int, list[Frame]]:
    """Every 20 ms: on_tick(k) (send), then one batch pull. Frames recorded per stream id."""
    frames: dict[int, list[Frame]] = {}
    t0 = time.monotonic_ns()
    for k in range(ticks):
        delay = t0 + k * TICK_NS - time.monotonic_ns()
        if delay > 0:
            time.sleep(delay / 1e9)
        on_tick(k)
        pulled = ingest.pull_all(time.monotonic_ns())
        for i, sid in enumerate(pulled.ids.tolist()):
            info = pulled.infos[i]
            n = int(info["samples"])
            ts = int(info["rtp_ts"]) if info["has_rtp_ts"] else None
            frames.setdefault(sid, []).append(
                Frame(int(info["flag"]), ts, pulled.pcm[i, :n].copy())
            )
    return frames


def normal_by_ts(frames: list[Frame], leg: Leg) -> dict[int, npt.NDArray[np.int16]]:
    """NORMAL frames keyed by sample offset into the leg's audio."""
    out = {}
    for f in frames:
        if f.flag == lib.CS_FRAME_NORMAL:
            assert f.rtp_ts is not None
            out[(f.rtp_ts - leg.ts0) & 0xFFFFFFFF] = f.pcm
    return out


def assert_exact(
    frames: list[Frame], leg: Leg, min_frames: int
) -> dict[int, npt.NDArray[np.int16]]:
    """Every NORMAL frame is bit-exactly the µ-law decode of what was sent at its ts."""
    normal = normal_by_ts(frames, leg)
    assert len(normal) >= min_frames, f"only {len(normal)} normal frames"
    for off, pcm in normal.items():
        assert off + pcm.size <= leg.decoded.size, f"frame at {off} beyond the sent audio"
        np.testing.assert_array_equal(pcm, leg.decoded[off : off + pcm.size], f"offset {off}")
    return normal


def flags_between_first_and_last_normal(frames: list[Frame]) -> list[int]:
    flags = [f.flag for f in frames]
    first = flags.index(lib.CS_FRAME_NORMAL)
    last = len(flags) - 1 - flags[::-1].index(lib.CS_FRAME_NORMAL)
    return flags[first : last + 1]


def wait_until(condition: Callable[[], bool], limit_s: float = 2.0) -> None:
    """Let the receiver thread catch up with the last datagrams sent (bounded wait; the
    test then asserts on counters, never on how long this took)."""
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.002)
