"""The seeded G.711 packet trace behind ``callshield bench jitter``.

Real speech (the Asterisk prompts in the shared data folder, concatenated) or a tone,
packetised as 20 ms µ-law RTP (native.sim.g711_stream), then given a network from the
seeded impairment model (sip_bridge.impair): base delay, uniform jitter, loss, held-back
(reordered) packets and duplicates. Arrivals are sorted; a 20 ms pull clock runs from 0
to a little after the last arrival. The same trace feeds every driver of the benchmark.
"""

from __future__ import annotations

import os
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from native.sim import FRAME_NS, g711_stream
from sip_bridge.impair import Impairment, ImpairmentConfig, order_stats

MS = 1_000_000
SPEECH_SUBDIR = Path("data") / "speech" / "asterisk_prompts" / "en"

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """What is sent and what the network does to it. Probabilities in [0, 1]."""

    seconds: float = 60.0
    synthetic: bool = False
    speech_dir: Path | None = None  # None: $CALLSHIELD_SHARED or ../shared beside the repo
    seed: int = 1
    loss: float = 0.01
    reorder: float = 0.005
    duplicate: float = 0.005
    delay_ms: float = 20.0
    jitter_ms: float = 15.0  # uniform [0, jitter]; under 20 ms it reorders nothing itself
    reorder_ms: float = 50.0  # extra hold of a reordered packet
    tail_ms: int = 200  # the pull clock runs this long after the last arrival


@dataclass(frozen=True, slots=True)
class Trace:
    """Datagrams in arrival order (a duplicate appears twice) and the pull clock."""

    source: str
    datagrams: list[bytes]
    arrival_ns: list[int]
    pull_ns: list[int]
    order: dict[str, int]  # order_stats of the arrival order (lost, reordered, ...)
    packets_sent: int

    def packed(self) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64], Any, I64, I64]:
        """Flat arrays for the C replay: bytes, offsets, lengths, arrivals, pull times."""
        lengths = np.array([len(d) for d in self.datagrams], dtype=np.uint32)
        offsets = np.zeros(len(lengths), dtype=np.uint64)
        if len(lengths) > 1:
            offsets[1:] = np.cumsum(lengths[:-1], dtype=np.uint64)
        blob = np.frombuffer(b"".join(self.datagrams), dtype=np.uint8).copy()
        arrivals = np.array(self.arrival_ns, dtype=np.int64)
        return blob, offsets, lengths, arrivals, np.array(self.pull_ns, dtype=np.int64)


def default_speech_dir() -> Path:
    """The prompts under ``$CALLSHIELD_SHARED``, else under ``shared/`` beside the repo."""
    env = os.environ.get("CALLSHIELD_SHARED")
    shared = Path(env) if env else Path(__file__).resolve().parents[3] / "shared"
    return shared / SPEECH_SUBDIR


def load_speech(directory: Path, seconds: float) -> npt.NDArray[np.int16]:
    """8 kHz mono 16-bit speech: the prompts in name order, concatenated (and cycled)."""
    need = round(seconds * 8000)
    chunks: list[npt.NDArray[np.int16]] = []
    for path in sorted(directory.glob("*.wav")):
        with wave.open(str(path)) as w:
            if (w.getframerate(), w.getsampwidth(), w.getnchannels()) != (8000, 2, 1):
                continue
            chunks.append(np.frombuffer(w.readframes(w.getnframes()), dtype="<i2"))
        if sum(c.size for c in chunks) >= need:
            break
    if not chunks:
        raise FileNotFoundError(
            f"no 8 kHz 16-bit mono .wav files in {directory} "
            "(set CALLSHIELD_SHARED, pass --speech-dir, or use --synthetic)"
        )
    return np.resize(np.concatenate(chunks), need).astype(np.int16)


def tone(seconds: float, freq: float = 440.0) -> npt.NDArray[np.int16]:
    """A sine with a slow amplitude ramp (every frame distinct)."""
    t = np.arange(round(seconds * 8000))
    env = 0.3 + 0.7 * (t / max(len(t), 1))
    return (8000 * env * np.sin(2 * np.pi * freq * t / 8000)).astype(np.int16)


def build_trace(cfg: TraceConfig) -> Trace:
    if cfg.synthetic:
        pcm, source = tone(cfg.seconds), "tone 440 Hz"
    else:
        directory = cfg.speech_dir or default_speech_dir()
        pcm, source = load_speech(directory, cfg.seconds), f"speech {directory}"
    packets = g711_stream(pcm)
    model = Impairment(
        ImpairmentConfig(
            seed=cfg.seed,
            loss=cfg.loss,
            duplicate=cfg.duplicate,
            reorder=cfg.reorder,
            reorder_delay=cfg.reorder_ms / 1000,
            delay=cfg.delay_ms / 1000,
            jitter=cfg.jitter_ms / 1000,
        )
    )
    events = sorted(
        (p.send_ns + round(delay * 1e9), p.index, p.datagram)
        for p in packets
        for delay in model.decide(p.index).delays
    )
    if not events:
        raise ValueError("the trace is empty: no packet arrived")
    last = events[-1][0]
    return Trace(
        source=source,
        datagrams=[e[2] for e in events],
        arrival_ns=[e[0] for e in events],
        pull_ns=list(range(0, last + cfg.tail_ms * MS + 1, FRAME_NS)),
        order=order_stats([e[1] for e in events], received=len(packets)),
        packets_sent=len(packets),
    )
