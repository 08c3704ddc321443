"""The voice encoder's front end as numpy constants and a numpy reference.

Published front end (Resemblyzer's hparams): 16 kHz mono, 25 ms Hann window (n_fft 400),
10 ms hop (160), centred frames with zero padding, |STFT|² (power, not log), 40 mel bands
on the Slaney scale with Slaney area normalisation over 0–8 kHz. Partial utterances of
160 frames (1.6 s) every round(16000 / 1.3 / 160) = 77 frames; the last partial is kept
if at least 75 % of it is covered by audio. The utterance is first raised (never lowered)
to -30 dBFS RMS.

These arrays are baked into the ONNX graph (a strided convolution with DFT × Hann
kernels, then a matmul with the mel matrix), so the runtime needs no torch and no numpy
front end; ``mel_power_numpy`` is the same computation in numpy, for tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

SAMPLE_RATE = 16_000
N_FFT = 400
HOP = 160
N_MELS = 40
PARTIAL_FRAMES = 160
PARTIAL_RATE = 1.3  # partials per second (Resemblyzer's embed_utterance default)
MIN_COVERAGE = 0.75
TARGET_DBFS = -30.0
RMS_FLOOR = 1e-5  # digital silence: cap the gain at 20·log10(10^-1.5 / 1e-5) ≈ 70 dB

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]


def hann_periodic(n: int = N_FFT) -> F64:
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)


def dft_kernels(n_fft: int = N_FFT) -> tuple[F64, F64]:
    """Windowed real and imaginary DFT kernels, each [n_fft // 2 + 1, n_fft]."""
    k = np.arange(n_fft // 2 + 1)[:, None]
    n = np.arange(n_fft)[None, :]
    phase = 2.0 * np.pi * k * n / n_fft
    w = hann_periodic(n_fft)[None, :]
    return np.cos(phase) * w, -np.sin(phase) * w


def _hz_to_mel(f: F64) -> F64:
    """Slaney's auditory-toolbox scale: linear to 1 kHz, logarithmic above."""
    f = np.asarray(f, np.float64)
    lin = f / (200.0 / 3.0)
    logstep = math.log(6.4) / 27.0
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / logstep, lin)


def _mel_to_hz(m: F64) -> F64:
    m = np.asarray(m, np.float64)
    logstep = math.log(6.4) / 27.0
    return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), m * (200.0 / 3.0))


def mel_matrix(sr: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> F64:
    """Triangular Slaney-normalised mel filters, [n_mels, n_fft // 2 + 1]."""
    fft_hz = np.linspace(0.0, sr / 2.0, n_fft // 2 + 1)
    edges = _mel_to_hz(
        np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(sr / 2.0)), n_mels + 2)
    )
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_hz[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights


@dataclass(frozen=True, slots=True)
class PartialPlan:
    """How a window of ``samples`` is cut into partial utterances."""

    samples: int
    padded: int  # samples after zero padding at the end
    starts: tuple[int, ...]  # first mel frame of every partial

    @property
    def frames(self) -> int:
        return 1 + self.padded // HOP


def partial_plan(samples: int) -> PartialPlan:
    step = round(SAMPLE_RATE / PARTIAL_RATE / HOP)
    n_frames = math.ceil((samples + 1) / HOP)
    starts = list(range(0, max(n_frames - PARTIAL_FRAMES + step + 1, 1), step))
    last_start = starts[-1] * HOP
    covered = (samples - last_start) / (PARTIAL_FRAMES * HOP)
    if covered < MIN_COVERAGE and len(starts) > 1:
        starts.pop()
    end = (starts[-1] + PARTIAL_FRAMES) * HOP
    return PartialPlan(samples, max(samples, end), tuple(starts))


def volume_gain(wav: F32) -> float:
    rms = max(float(np.sqrt(np.mean(np.square(wav, dtype=np.float64)))), RMS_FLOOR)
    return float(max(1.0, 10.0 ** (TARGET_DBFS / 20.0) / rms))


def mel_power_numpy(wav: F32) -> F64:
    """[frames, n_mels] power mel spectrogram of ``wav`` (centred, zero-padded)."""
    x = np.pad(np.asarray(wav, np.float64), (N_FFT // 2, N_FFT // 2))
    n = 1 + (x.size - N_FFT) // HOP
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n)[:, None]
    frames = x[idx]
    re, im = dft_kernels()
    power = (frames @ re.T) ** 2 + (frames @ im.T) ** 2
    result: F64 = power @ mel_matrix().T
    return result
