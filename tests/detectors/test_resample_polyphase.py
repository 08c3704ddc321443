"""The streaming polyphase resampler: chunk by chunk equals one-shot resample_poly
(delayed by the filter's group delay), keeps a tone's frequency, removes images."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import resample_poly

from detectors.resample import PolyphaseResampler


@pytest.mark.parametrize(
    ("rate_in", "rate_out", "chunk"),
    [(8000, 16000, 160), (48000, 16000, 960), (16000, 8000, 320)],
)
def test_streaming_equals_one_shot(rate_in: int, rate_out: int, chunk: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, chunk * 40)).astype(np.float32)
    r = PolyphaseResampler(rate_in, rate_out, chunk, rows=6)
    rows = np.array([5, 0, 3])
    out = np.concatenate(
        [r.process(rows, x[:, i * chunk : (i + 1) * chunk]) for i in range(40)], axis=1
    )
    ref = resample_poly(x.astype(np.float64), r.up, r.down, axis=1)
    d = r.delay
    settled = 50  # past resample_poly's own start-up edge
    np.testing.assert_allclose(out[:, d + settled :], ref[:, settled : out.shape[1] - d], atol=2e-5)


def test_rows_are_independent() -> None:
    r = PolyphaseResampler(8000, 16000, 160, rows=2)
    x = np.random.default_rng(2).standard_normal((1, 160 * 5)).astype(np.float32)
    a = [r.process(np.array([0]), x[:, i * 160 : (i + 1) * 160]) for i in range(5)]
    # Interleave a different stream in row 1: row 0's output must not change.
    r2 = PolyphaseResampler(8000, 16000, 160, rows=2)
    noise = np.ones((1, 160), np.float32)
    b = []
    for i in range(5):
        b.append(r2.process(np.array([0]), x[:, i * 160 : (i + 1) * 160]))
        r2.process(np.array([1]), noise)
    np.testing.assert_array_equal(np.concatenate(a, 1), np.concatenate(b, 1))


def test_tone_keeps_its_frequency_and_no_image() -> None:
    t = np.arange(8000 * 2) / 8000
    tone = np.sin(2 * np.pi * 1000 * t).astype(np.float32)[None, :]
    r = PolyphaseResampler(8000, 16000, 160, rows=1)
    y = np.concatenate(
        [r.process(np.array([0]), tone[:, i * 160 : (i + 1) * 160]) for i in range(100)], 1
    )[0, 1000:]
    spec = np.abs(np.fft.rfft(y * np.hanning(y.size)))
    freqs = np.fft.rfftfreq(y.size, 1 / 16000)
    assert abs(freqs[np.argmax(spec)] - 1000) < 5
    image = spec[(freqs > 6900) & (freqs < 7100)].max()  # linear interpolation leaves one
    assert image < spec.max() * 1e-3


def test_identity_and_bad_chunk() -> None:
    r = PolyphaseResampler(8000, 8000, 160, rows=1)
    x = np.ones((1, 160), np.float32)
    assert r.process(np.array([0]), x) is x
    with pytest.raises(ValueError, match="whole output samples"):
        PolyphaseResampler(8000, 11025, 160, rows=1)
