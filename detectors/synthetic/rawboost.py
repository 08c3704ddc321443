"""RawBoost-style signal boosting of training windows (``train-synthetic --rawboost``).

The idea is RawBoost's (Tak et al., "RawBoost: a raw data boosting and augmentation
method applied to automatic speaker verification anti-spoofing", ICASSP 2022): distort
the raw waveform of both classes with random filters, nonlinearities and impulsive
noise, so that the network cannot lean on a fixed spectral shape of the training
generators and must find artefacts that survive such distortion. The paper reports that
this helps most on attacks absent from training, which is where our model is weak
(docs/models/synthetic_voice.md: Gemini TTS and the LPC vocoder). This is our own
formulation for 8 kHz telephone windows, applied before the telephone channel
(``channel.augment``):

1. convolutive, linear and nonlinear: ``y = sum_j g_j * (h_j * x) ** j`` for
   ``j = 1..order`` (order 1-3), each ``h_j`` a cascade of 1-5 random FIR notches
   (centre 20-3,900 Hz, width 50-500 Hz, off DC and Nyquist, 11-101 taps, peak gain 1),
   ``g_1 = 1`` and each higher order NONLIN_DB below the previous, scaled back to the
   input's peak;
2. impulsive, signal-dependent: up to IMPULSE_SHARE of the samples take ``x * (1 + g u)``
   with ``u`` uniform in [-1, 1] and ``g`` up to IMPULSE_GAIN.

Both steps draw only from the ``rng`` passed in, so a window is the same for a seed.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
RATE = 8_000
BANDS = (1, 5)  # notches per filter
CENTRE_HZ = (20.0, 3_900.0)
WIDTH_HZ = (50.0, 500.0)
TAPS = (11, 101)
EDGE_HZ = 20.0  # least distance of a stop band from 0 Hz
ORDER = (1, 3)  # highest power of the nonlinear sum
NONLIN_DB = (5.0, 20.0)  # each higher power's level below the previous one
IMPULSE_SHARE = 0.10
IMPULSE_GAIN = 2.0


def notch_filter(rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """A cascade of BANDS random FIR band-stop filters (linear phase), as one FIR."""
    from scipy.signal import firwin, freqz

    h = np.ones(1)
    for _ in range(int(rng.integers(BANDS[0], BANDS[1] + 1))):
        width = rng.uniform(*WIDTH_HZ)
        # the band stays off DC and Nyquist: firwin scales a band-stop to unit gain at
        # DC, which for a stop band starting near 0 Hz would amplify the rest
        centre = rng.uniform(max(CENTRE_HZ[0], width / 2 + EDGE_HZ), CENTRE_HZ[1] - width / 2)
        taps = int(rng.integers(TAPS[0], TAPS[1] + 1)) | 1  # odd: band-stop needs type I
        band = [centre - width / 2, centre + width / 2]
        h = np.convolve(h, firwin(taps, band, pass_zero="bandstop", fs=RATE))
    _, resp = freqz(h, worN=512)
    return h / max(float(np.max(np.abs(resp))), 1e-9)  # no gain above 1 anywhere


def convolutive(x: FloatArray, rng: np.random.Generator) -> FloatArray:
    """Step 1: the random linear + nonlinear filtering, at the input's peak level."""
    from scipy.signal import oaconvolve

    peak = float(np.max(np.abs(x)))
    if peak == 0.0:
        return x.astype(np.float32, copy=True)
    unit = x.astype(np.float64) / peak
    out = np.zeros(len(x), np.float64)
    gain = 1.0
    for power in range(1, int(rng.integers(ORDER[0], ORDER[1] + 1)) + 1):
        if power > 1:
            gain *= 10 ** (-rng.uniform(*NONLIN_DB) / 20)
        y = oaconvolve(unit, notch_filter(rng), mode="same")
        out += gain * y**power
    top = float(np.max(np.abs(out))) or 1.0
    result: FloatArray = (out * (peak / top)).astype(np.float32)
    return result


def impulsive(x: FloatArray, rng: np.random.Generator) -> FloatArray:
    """Step 2: signal-dependent impulses on a random share of the samples."""
    y = x.astype(np.float32, copy=True)
    n = int(len(y) * rng.uniform(0.0, IMPULSE_SHARE))
    if n:
        at = rng.choice(len(y), n, replace=False)
        g = rng.uniform(0.0, IMPULSE_GAIN)
        y[at] *= (1.0 + g * rng.uniform(-1.0, 1.0, n)).astype(np.float32)
    return y


def boost(x: FloatArray, rng: np.random.Generator) -> FloatArray:
    """Steps 1 then 2 (the paper's best series for logical-access attacks)."""
    return impulsive(convolutive(x, rng), rng)
