"""Multi-minute sessions from short recordings: one speaker per session, their utterances
in a seeded random order with realistic pauses (short gaps between sentences, longer
stretches where the caller listens), repeated when the speaker has less speech than the
session needs (every pass reshuffled, each utterance at a random level within ±3 dB).
``unique_s`` and ``passes`` say how much distinct speech a session really holds.

Babble is several other speakers' sessions summed at equal level (no pauses to speak of),
for mixing under a session at a chosen SNR (``mix_at_snr``, against the session's
active-speech level).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from detectors.eval.audio import FloatArray, read_audio, resample

RATE = 8000
SPEECH_GATE = 10 ** (-45.0 / 10)  # the frame bank's speech gate, as power


@dataclass(frozen=True, slots=True)
class Pauses:
    """Silence on the caller's leg: between utterances, and while the caller listens."""

    gap_s: tuple[float, float] = (0.25, 1.2)
    listen_prob: float = 0.35
    listen_s: tuple[float, float] = (1.5, 8.0)


TALK = Pauses()
BABBLE = Pauses(gap_s=(0.05, 0.3), listen_prob=0.0)


@dataclass(frozen=True, slots=True)
class Session:
    audio: FloatArray  # float32 at ``RATE``
    speech_s: float  # utterance audio placed in the session (with repeats)
    unique_s: float  # the speaker's distinct audio
    passes: float  # speech_s / unique_s: how often each utterance recurs, on average


@lru_cache(maxsize=512)
def _utterance(path: Path) -> FloatArray:
    x, rate = read_audio(path)
    y = resample(x, rate, RATE)
    y.setflags(write=False)
    return y


def render(files: Sequence[Path], seconds: float, seed: int, pauses: Pauses = TALK) -> Session:
    """A ``seconds`` long session of the speaker in ``files`` (cut at the end)."""
    if not files:
        raise ValueError("a session needs at least one file")
    utts = [_utterance(f) for f in files]
    unique = sum(len(u) for u in utts) / RATE
    if unique <= 0:
        raise ValueError("the session's files hold no audio")
    rng = np.random.default_rng(seed)
    total = int(seconds * RATE)
    out = np.zeros(total, np.float32)
    pos = int(rng.uniform(0.2, 1.0) * RATE)  # the caller does not speak at once
    placed = 0
    while pos < total:
        for i in rng.permutation(len(utts)):
            if pos >= total:
                break
            u = utts[i] * np.float32(10 ** (rng.uniform(-3.0, 3.0) / 20))
            n = min(len(u), total - pos)
            out[pos : pos + n] = u[:n]
            placed += n
            pos += n + int(rng.uniform(*pauses.gap_s) * RATE)
            if rng.random() < pauses.listen_prob:
                pos += int(rng.uniform(*pauses.listen_s) * RATE)
    np.clip(out, -1.0, 1.0, out=out)
    return Session(out, placed / RATE, unique, placed / RATE / unique)


def babble(speakers: Sequence[Sequence[Path]], seconds: float, seed: int) -> FloatArray:
    """The sum of each speaker's near-continuous talk, each at the same RMS."""
    if not speakers:
        raise ValueError("babble needs at least one speaker")
    total = np.zeros(int(seconds * RATE), np.float32)
    for k, files in enumerate(speakers):
        x = render(files, seconds, seed * 1009 + k, BABBLE).audio
        rms = float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))
        if rms > 0:
            total += x * np.float32(0.1 / rms)
    return total


def active_power(x: FloatArray) -> float:
    """Mean power over 2.5 ms units above the speech gate (0 when none is)."""
    unit = RATE // 400
    n = len(x) // unit
    if n == 0:
        return 0.0
    p = np.mean(x[: n * unit].astype(np.float64).reshape(n, unit) ** 2, axis=1)
    on = p[p > SPEECH_GATE]
    return float(np.mean(on)) if on.size else 0.0


def mix_at_snr(speech: FloatArray, noise: FloatArray, snr_db: float) -> FloatArray:
    """``speech`` plus ``noise`` scaled to ``snr_db`` below the speech's active level."""
    n = noise[: len(speech)]
    if len(n) < len(speech):
        n = np.pad(n, (0, len(speech) - len(n)))
    ps = active_power(speech)
    pn = float(np.mean(n.astype(np.float64) ** 2))
    if ps <= 0 or pn <= 0:
        return speech.copy()
    gain = np.sqrt(ps / pn / 10 ** (snr_db / 10))
    return np.clip(speech + n * np.float32(gain), -1.0, 1.0).astype(np.float32)
