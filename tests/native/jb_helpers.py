"""Shared helpers for the jitter-buffer tests: signals, network schedules, assertions."""

from __future__ import annotations

import itertools
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt

from native.codec import ulaw_decode, ulaw_encode
from native.jitter import FrameFlag, JitterBuffer, JitterConfig
from native.sim import Packet, SimResult

MS = 1_000_000


def tone(seconds: float, freq: float = 440.0, rate: int = 8000) -> npt.NDArray[np.int16]:
    t = np.arange(int(seconds * rate))
    # a slow amplitude ramp makes every frame distinct, so misplaced audio is visible
    env = 0.3 + 0.7 * (t / max(len(t), 1))
    return (8000 * env * np.sin(2 * np.pi * freq * t / rate)).astype(np.int16)


def load_wav(path: Path) -> npt.NDArray[np.int16]:
    with wave.open(str(path)) as w:
        assert w.getframerate() == 8000 and w.getsampwidth() == 2 and w.getnchannels() == 1
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).copy()


def g711_roundtrip(pcm: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
    return ulaw_decode(ulaw_encode(pcm))


def fixed_delay(packets: list[Packet], delay_ns: int = 5 * MS) -> list[tuple[int, int, bytes]]:
    return [(p.send_ns + delay_ns, p.index, p.datagram) for p in packets]


def new_jb(**overrides: int) -> JitterBuffer:
    return JitterBuffer(JitterConfig(dtmf_key=42, **overrides))


def real_audio(result: SimResult) -> npt.NDArray[np.int16]:
    """The samples that came from received packets, in playout order."""
    parts = []
    for frame in result.frames:
        spu = len(frame.pcm) // 8
        for k in range(8):
            if frame.real_mask >> k & 1:
                parts.append(frame.pcm[k * spu : (k + 1) * spu])
    return np.concatenate(parts) if parts else np.zeros(0, np.int16)


def flags(result: SimResult) -> list[FrameFlag]:
    return [f.flag for f in result.frames]


def assert_positions_advance(result: SimResult) -> None:
    """Frames carrying received audio have strictly increasing stream positions."""
    positions = [f.pos for f in result.frames if f.real_mask]
    assert all(b > a for a, b in itertools.pairwise(positions)), positions
