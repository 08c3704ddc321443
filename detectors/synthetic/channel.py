"""The telephone channel, simulated on both classes alike (training and dev scoring), so
the model learns synthetic vs real and not 16 kHz vs 8 kHz, clean vs G.711, or digital
silence vs room noise.

Every clip is first brought to 8 kHz with the runtime's own polyphase resampler. Then
``augment`` draws, per training window: a level, an optional 300-3400 Hz-style band
limit (edges drawn), optional noise (white, pink or brown, 10-45 dB SNR), an optional
noise gate (digital silence between words, as silence suppression makes it), and a
codec: G.711 µ-law through the native jitter buffer (optionally with packet loss,
concealed exactly as the live runtime conceals it), G.711 A-law, or plain 16-bit PCM.
``wide=True`` (the optional second training stage) adds what a call crosses before the gateway:
room reverberation (sox) and an upstream mobile / VoIP codec (GSM 06.10 via sox, or
Opus 8-16 kbit/s via libopus), on both classes alike, so that a codec's artefacts are
not taken for a vocoder's. ``codec_aug=True`` (``train-synthetic --codec-aug``) first puts
CODEC_AUG of the windows through a perceptual codec (MP3, AAC or Opus, ``lossy``) before
the telephone steps, on both classes alike, so that compressed genuine recordings are not
taken for synthetic ones. ``rawboost=True`` (``train-synthetic --rawboost``) first puts
RAWBOOST of the windows through random notch filters, a nonlinearity and impulsive noise
(``rawboost``), on both classes alike. ``condition`` applies one named condition
deterministically (dev scoring).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from detectors.eval.audio import resample, to_int16
from detectors.windowing import IN_RATE

FloatArray = npt.NDArray[np.float32]
RATE = IN_RATE  # 8 kHz
CONDITIONS = ("clean", "pcmu", "pcma", "pcmu_loss5")


def to_8k(x: FloatArray, rate: int) -> FloatArray:
    return resample(x, rate, RATE)


def bandpass_taps(low_hz: float, high_hz: float, taps: int = 129) -> npt.NDArray[np.float64]:
    """A linear-phase FIR band-pass (Hamming-windowed difference of sincs) at 8 kHz."""
    n = np.arange(taps) - (taps - 1) / 2
    lo, hi = low_hz / RATE, high_hz / RATE
    h = 2 * hi * np.sinc(2 * hi * n) - 2 * lo * np.sinc(2 * lo * n)
    out: npt.NDArray[np.float64] = h * np.hamming(taps)
    return out


def ulaw_channel(x: FloatArray, loss: float, seed: int) -> FloatArray:
    """µ-law RTP through the native jitter buffer (loss concealed by it), as live."""
    from detectors.eval.engine import telephone_frames
    from native import lib

    pcm, infos = telephone_frames(x, RATE, loss, seed)
    started = np.nonzero(infos["flag"] != int(lib.CS_FRAME_NOT_STARTED))[0]
    first = int(started[0]) if started.size else 0
    y = pcm[first:].reshape(-1).astype(np.float32) / 32768.0
    out = np.zeros(len(x), np.float32)
    out[: min(len(x), len(y))] = y[: len(x)]
    return out


def alaw_channel(x: FloatArray) -> FloatArray:
    from native.codec import alaw_decode, alaw_encode

    return alaw_decode(alaw_encode(to_int16(x))).astype(np.float32) / 32768.0


def pcm16(x: FloatArray) -> FloatArray:
    return to_int16(x).astype(np.float32) / 32768.0


def condition(x8: FloatArray, name: str, seed: int = 0) -> FloatArray:
    """One named channel condition on 8 kHz audio."""
    if name == "clean":
        return pcm16(x8)
    if name == "pcmu":
        return ulaw_channel(x8, 0.0, seed)
    if name == "pcmu_loss5":
        return ulaw_channel(x8, 0.05, seed)
    if name == "pcma":
        return alaw_channel(x8)
    raise ValueError(f"unknown channel condition {name!r} (one of {', '.join(CONDITIONS)})")


def _noise(n: int, rng: np.random.Generator) -> FloatArray:
    from scipy.signal import lfilter

    out = rng.standard_normal(n)
    kind = int(rng.integers(3))
    if kind:  # pink-ish (one-pole) or brown-ish (leaky integrator)
        out = lfilter([1.0], [1.0, -(0.9 if kind == 1 else 0.995)], out)
    out = np.asarray(out, np.float64)
    out = out - out.mean()
    result: FloatArray = (out / (np.std(out) + 1e-12)).astype(np.float32)
    return result


WIDE_REVERB = 0.1  # share of windows reverberated (wide channel only)
WIDE_UPSTREAM = 0.35  # share through an upstream GSM / Opus leg (wide channel only)
CODEC_AUG = 0.35  # share through a perceptual codec first (codec_aug only)
RAWBOOST = 0.5  # share through the RawBoost-style distortion first (rawboost only)


def _upstream(y: FloatArray, rng: np.random.Generator) -> FloatArray:
    from detectors.eval import channels

    if rng.random() < 0.4:
        return channels.apply("gsm", y, 0)
    return channels.opus_roundtrip(y, int(rng.choice((8, 10, 12, 16))) * 1000)


def augment(
    x8: FloatArray,
    rng: np.random.Generator,
    wide: bool = False,
    codec_aug: bool = False,
    rawboost: bool = False,
) -> FloatArray:
    """One random telephone channel on an 8 kHz window (see the module docstring)."""
    y = x8.astype(np.float32, copy=True)
    if rawboost and rng.random() < RAWBOOST:  # no draw when off: old windows unchanged
        from detectors.synthetic import rawboost as rb

        y = rb.boost(y, rng)
    if wide and rng.random() < WIDE_REVERB:
        from detectors.eval import channels

        y = channels.apply("reverb", y, 0)
    if codec_aug and rng.random() < CODEC_AUG:  # no draw when off: old windows unchanged
        from detectors.synthetic.lossy import lossy

        y = lossy(y, rng)
    peak = float(np.max(np.abs(y))) or 1.0
    y *= np.float32(rng.uniform(0.08, 0.9) / peak)
    if rng.random() < 0.6:
        taps = bandpass_taps(rng.uniform(150, 400), rng.uniform(3100, 3750))
        y = np.convolve(y, taps, mode="same").astype(np.float32)
    if rng.random() < 0.6:
        power = float(np.mean(y**2)) + 1e-10
        snr_db = rng.uniform(10, 45)
        y += _noise(len(y), rng) * np.float32(np.sqrt(power / 10 ** (snr_db / 10)))
    if rng.random() < 0.2:
        frames = y[: len(y) // 160 * 160].reshape(-1, 160)
        quiet = np.mean(frames**2, axis=1) < 10 ** (rng.uniform(-55, -40) / 10)
        frames[quiet] = 0.0
    if wide and rng.random() < WIDE_UPSTREAM:
        y = _upstream(y, rng)
    codec = rng.random()
    if codec < 0.45:
        loss = float(rng.uniform(0.01, 0.08)) if rng.random() < 0.3 else 0.0
        return ulaw_channel(y, loss, int(rng.integers(1 << 31)))
    if codec < 0.75:
        return alaw_channel(y)
    return pcm16(y)
