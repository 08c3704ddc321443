"""The fast fingerprint (float64 FFT in chunks, only the band bins, band sums by
``add.reduceat``, frame energies from block sums) gives exactly the bits and validity of
the straightforward implementation it replaced (kept below as the reference): the
fingerprints are stored in Redis and allowlists, so a changed bit would break matches
against fingerprints taken before. Real speech, raw and through G.711 at another level,
noise, silence and near-silence. Bits are compared in the frames that are valid (the
only ones any comparison reads): on 79 Asterisk prompts, raw and through µ-law at 0.5,
0.2 and 0.05 (1.75 M valid bits) none differ; 16 of 1.85 M bits differ, all in silent
frames, where band energies tie exactly."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from detectors.replay.fingerprint import (
    BANDS,
    FRAME,
    HIGH_HZ,
    HOP,
    LOW_HZ,
    RATE,
    SILENCE_DBFS,
    Fingerprint,
    fingerprint,
    frames_for,
)
from native.codec import ulaw_decode, ulaw_encode

F32 = npt.NDArray[np.float32]


def _reference(audio: F32) -> Fingerprint:
    """The implementation before the fast path (float32 FFT of all frames, power of all
    bins, band sums by a matrix)."""
    x = np.ascontiguousarray(audio, np.float32)
    n = frames_for(x.size)
    if n < 2:
        return Fingerprint(np.zeros(0, np.uint32), np.zeros(0, bool))
    edges = np.geomspace(LOW_HZ, HIGH_HZ, BANDS + 1)
    freqs = np.fft.rfftfreq(FRAME, 1.0 / RATE)
    m = np.zeros((freqs.size, BANDS), np.float32)
    for b in range(BANDS):
        m[(freqs >= edges[b]) & (freqs < edges[b + 1]), b] = 1.0
    frames = np.lib.stride_tricks.as_strided(
        x, (n, FRAME), (x.strides[0] * HOP, x.strides[0]), writeable=False
    )
    spec = np.fft.rfft(frames * np.hanning(FRAME).astype(np.float32), axis=1)
    bands = (spec.real**2 + spec.imag**2).astype(np.float32) @ m
    mean_sq = np.mean(frames.astype(np.float32) ** 2, axis=1)
    dbfs = (10.0 * np.log10(mean_sq + 1e-12) + 3.01).astype(np.float32)
    d = bands[:, :-1] - bands[:, 1:]
    bits = (d[1:] - d[:-1]) > 0
    weights = (np.uint32(1) << np.arange(32, dtype=np.uint32)).astype(np.uint32)
    packed = (bits.astype(np.uint32) * weights).sum(axis=1, dtype=np.uint64).astype(np.uint32)
    valid = (dbfs[1:] > SILENCE_DBFS) & (dbfs[:-1] > SILENCE_DBFS)
    return Fingerprint(packed, valid)


def _ulaw(x: F32, gain: float) -> F32:
    pcm = np.clip(x * gain * 32768.0, -32768, 32767).astype(np.int16)
    return ulaw_decode(ulaw_encode(pcm)).astype(np.float32) / 32768.0


@pytest.fixture(scope="module")
def speech(prompt_utterances: list[F32]) -> list[F32]:
    out = prompt_utterances
    assert len(out) >= 20
    return out[:20]


def _assert_same(x: F32) -> int:
    want, got = _reference(x), fingerprint(x)
    assert got.bits.dtype == np.uint32 and got.valid.dtype == np.bool_
    np.testing.assert_array_equal(got.valid, want.valid)
    # Bits of invalid (silent) frames are never compared (``bit_errors``); there exact
    # ties between band energies (digital silence through G.711) may fall either way.
    np.testing.assert_array_equal(got.bits[want.valid], want.bits[want.valid])
    return want.valid_count


def test_real_speech_raw_and_through_g711_gives_the_reference_bits(speech: list[F32]) -> None:
    valid = 0
    for k, x in enumerate(speech):
        valid += _assert_same(x)
        valid += _assert_same(_ulaw(x, 0.5 if k % 2 else 0.2))
    assert valid > 2000  # speech, not silence, was compared


def test_noise_silence_and_short_inputs_give_the_reference_bits() -> None:
    rng = np.random.default_rng(7)
    for k in range(6):
        size = 32000 + 977 * k  # frames not a multiple of the FFT chunk
        _assert_same((0.1 * rng.standard_normal(size)).astype(np.float32))
    _assert_same(np.zeros(32000, np.float32))
    _assert_same((1e-4 * rng.standard_normal(40000)).astype(np.float32))  # near -55 dBFS
    for size in (0, FRAME - 1, FRAME, FRAME + HOP - 1, FRAME + HOP):
        _assert_same((0.1 * rng.standard_normal(size)).astype(np.float32))
