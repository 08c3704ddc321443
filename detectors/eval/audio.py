"""Reading labelled audio (WAV/FLAC/… at any rate) and resampling it whole.

soundfile (libsndfile) reads WAV, FLAC, OGG and MP3; without it the stdlib ``wave``
module reads 8/16/24/32-bit PCM WAV and anything else is a clear error.
"""

from __future__ import annotations

import wave
from math import gcd
from pathlib import Path

import numpy as np
import numpy.typing as npt

from detectors.resample import PolyphaseResampler

FloatArray = npt.NDArray[np.float32]
AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".ogg", ".mp3"})


class AudioError(ValueError):
    """A file that cannot be read as audio."""


def read_audio(path: Path) -> tuple[FloatArray, int]:
    """Mono float32 in [-1, 1] (channels averaged) and the file's sample rate."""
    try:
        import soundfile
    except ImportError:
        return _read_wave(path)
    try:
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except Exception as exc:  # libsndfile's errors are RuntimeError/LibsndfileError
        raise AudioError(f"{path}: cannot read audio: {exc}") from exc
    return np.ascontiguousarray(data.mean(axis=1), np.float32), int(rate)


def _read_wave(path: Path) -> tuple[FloatArray, int]:
    if path.suffix.lower() != ".wav":
        raise AudioError(
            f"{path}: {path.suffix} needs the soundfile package (pip install soundfile); "
            "without it only PCM WAV is read"
        )
    try:
        with wave.open(str(path)) as w:
            width, channels, rate = w.getsampwidth(), w.getnchannels(), w.getframerate()
            raw = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as exc:
        raise AudioError(f"{path}: not a PCM WAV file ({exc})") from exc
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v) / float(1 << 23)).astype(np.float32)
    elif width == 4:
        x = np.frombuffer(raw, "<i4").astype(np.float32) / 2147483648.0
    else:
        raise AudioError(f"{path}: {8 * width}-bit WAV is not supported")
    return np.ascontiguousarray(x.reshape(-1, channels).mean(axis=1), np.float32), rate


def resample(x: FloatArray, in_rate: int, out_rate: int) -> FloatArray:
    """Whole-signal resampling with the runtime's polyphase resampler (its group delay
    removed, so the output is aligned with the input and ``len * out / in`` long)."""
    if in_rate == out_rate:
        return x.astype(np.float32, copy=False)
    g = gcd(in_rate, out_rate)
    down = in_rate // g
    chunk = down * max(1, -(-in_rate // down))  # about one second, whole output samples
    rs = PolyphaseResampler(in_rate, out_rate, chunk, 1)
    n_out = len(x) * out_rate // in_rate
    need = n_out + rs.delay
    total_in = -(-max(need * in_rate // out_rate + down, len(x)) // chunk) * chunk
    total_in = max(total_in, -(-len(x) // chunk) * chunk)
    while total_in * out_rate // in_rate < need:
        total_in += chunk
    padded = np.zeros(total_in, np.float32)
    padded[: len(x)] = x
    rows = np.zeros(1, np.intp)
    out = np.concatenate(
        [rs.process(rows, padded[None, i : i + chunk])[0] for i in range(0, total_in, chunk)]
    )
    return np.ascontiguousarray(out[rs.delay : rs.delay + n_out], np.float32)


def to_int16(x: FloatArray) -> npt.NDArray[np.int16]:
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16)
