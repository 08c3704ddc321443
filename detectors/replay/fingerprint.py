"""Compact audio fingerprints of 8 kHz telephone audio (replay detection, the benign
audio allowlist; DESIGN §2, §5).

Band-energy bit fingerprints in the manner of Haitsma & Kalker (2002): long frames
(256 ms) every 16 ms, the power in 33 bands spaced logarithmically over 300-3400 Hz
(the telephone band), and one 32-bit *sub-fingerprint* per frame whose bit m is the
sign of the band-energy difference (m, m+1) minus the same difference one frame
earlier. Long, heavily overlapped frames make the bits change slowly with time, so a
copy shifted by a fraction of a hop (or by 20 ms: 1.25 hops, compared at the nearest
offset) keeps most bits; signs of energy differences ignore level, and G.711's
quantisation noise sits far below the band energies of speech.

Frames quieter than ``SILENCE_DBFS`` are *invalid*: silence and near-silence give
sub-fingerprints of noise (or all zeros) that would match each other everywhere.

Comparison is the bit error rate (BER) between two aligned sequences over their
frames valid in both. Same audio through G.711 and a 20 ms shift: BER about 0.1;
different speech: about 0.5 (see ``docs/models/replay.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

RATE = 8000
FRAME = 2048  # 256 ms
HOP = 128  # 16 ms
BANDS = 33  # -> 32 bits
LOW_HZ, HIGH_HZ = 300.0, 3400.0
SILENCE_DBFS = -55.0

U32 = npt.NDArray[np.uint32]
Bools = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float32]

_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], np.uint8)


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """Sub-fingerprints of consecutive frames (``HOP`` apart) and which are valid."""

    bits: U32
    valid: Bools

    def __len__(self) -> int:
        return int(self.bits.shape[0])

    def slice(self, start: int, stop: int) -> Fingerprint:
        return Fingerprint(self.bits[start:stop], self.valid[start:stop])

    @property
    def valid_count(self) -> int:
        return int(np.count_nonzero(self.valid))


def frame_seconds(index: int) -> float:
    """Start of frame ``index`` in seconds from the start of the fingerprinted audio."""
    return index * HOP / RATE


def frames_for(samples: int) -> int:
    return 0 if samples < FRAME else 1 + (samples - FRAME) // HOP


_CHUNK = 32  # frames per FFT call: 0.5 MB of float64 frames stays in cache


@lru_cache(maxsize=1)
def _band_bins() -> tuple[int, int, npt.NDArray[np.intp]]:
    """(first bin, stop bin, band starts relative to the first bin): band b sums the FFT
    bins [starts[b], starts[b + 1]) of the rfft's bins over ``LOW_HZ``-``HIGH_HZ``
    (bins outside every band are never computed into power)."""
    edges = np.geomspace(LOW_HZ, HIGH_HZ, BANDS + 1)
    freqs = np.fft.rfftfreq(FRAME, 1.0 / RATE)
    first = [int(np.argmax(freqs >= e)) for e in edges[:-1]]
    stop = int(np.argmax(freqs >= edges[-1]))
    starts = np.asarray(first, np.intp)
    assert np.all(np.diff(np.append(starts, stop)) > 0), "every band holds a bin"
    return first[0], stop, starts - first[0]


@lru_cache(maxsize=1)
def _window() -> npt.NDArray[np.float64]:
    """The float32 Hann window, held as float64 (exact) for a float64 product."""
    return np.hanning(FRAME).astype(np.float32).astype(np.float64)


def band_energies(audio: FloatArray) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """([frames, BANDS] band power, [frames] frame power in dBFS) of float audio in
    [-1, 1) at ``RATE``.

    float64 throughout: numpy's float64 rfft is 2.5x faster than its float32 one, and
    the window product of float32 samples is exact in it. Frames go to the FFT in
    chunks of ``_CHUNK`` (one call over a whole 4 s window's 3.8 MB of frames measured
    1.9x slower); only the bins inside the bands are squared, and each band is one
    contiguous run of bins summed by ``add.reduceat`` (no BLAS call, so no BLAS
    threads). Frame energies come from per-hop block sums. Same bits and validity as
    the float32 matrix version before it on real speech and noise (the frames any
    comparison reads; ``tests/detectors/test_replay_fingerprint_reference.py``)."""
    x = np.asarray(audio, np.float32).reshape(-1).astype(np.float64)
    n = frames_for(x.size)
    if n == 0:
        return np.zeros((0, BANDS)), np.zeros(0)
    lo, hi, starts = _band_bins()
    frames = np.lib.stride_tricks.sliding_window_view(x, FRAME)[::HOP]
    window = _window()
    bands = np.empty((n, BANDS))
    for s in range(0, n, _CHUNK):
        spec = np.fft.rfft(frames[s : s + _CHUNK] * window, axis=1)
        ri = spec[:, lo:hi].view(np.float64)  # [chunk, 2 * bins]: re, im interleaved
        np.square(ri, out=ri)
        bands[s : s + _CHUNK] = np.add.reduceat(ri, 2 * starts, axis=1)
    per = FRAME // HOP
    blocks = np.square(x[: (n + per - 1) * HOP]).reshape(-1, HOP).sum(axis=1)
    cum = np.concatenate(([0.0], np.cumsum(blocks)))
    mean_sq = (cum[per : per + n] - cum[:n]) / FRAME
    dbfs = 10.0 * np.log10(np.maximum(mean_sq, 0.0) + 1e-12) + 3.01  # re a full-scale sine
    return bands, dbfs


def fingerprint(audio: FloatArray, silence_dbfs: float = SILENCE_DBFS) -> Fingerprint:
    """The fingerprint of ``audio`` (float32 at 8 kHz). Frame 0 has no predecessor and
    is dropped, so frame i of the result starts at sample ``(i + 1) * HOP``."""
    bands, dbfs = band_energies(audio)
    if bands.shape[0] < 2:
        return Fingerprint(np.zeros(0, np.uint32), np.zeros(0, bool))
    d = bands[:, :-1] - bands[:, 1:]  # [frames, 32]
    bits = (d[1:] - d[:-1]) > 0
    packed = np.packbits(bits, axis=1, bitorder="little").view("<u4").reshape(-1)
    valid = (dbfs[1:] > silence_dbfs) & (dbfs[:-1] > silence_dbfs)
    return Fingerprint(packed.astype(np.uint32), valid)


def popcount(x: U32) -> npt.NDArray[np.int64]:
    b = x.view(np.uint8).reshape(*x.shape, 4)
    out: npt.NDArray[np.int64] = _POPCOUNT[b].sum(axis=-1, dtype=np.int64)
    return out


def bit_errors(a: Fingerprint, b: Fingerprint) -> tuple[int, int]:
    """(differing bits, compared frames) over frames valid in both (same length)."""
    both = a.valid & b.valid
    n = int(np.count_nonzero(both))
    if n == 0:
        return 0, 0
    return int(popcount(a.bits[both] ^ b.bits[both]).sum()), n


def ber(a: Fingerprint, b: Fingerprint) -> float:
    """Bit error rate of two aligned fingerprints (1.0 when nothing is comparable)."""
    errors, n = bit_errors(a, b)
    return errors / (32 * n) if n else 1.0


def best_alignment(query: Fingerprint, ref: Fingerprint, max_shift: int) -> tuple[float, int, int]:
    """(BER, shift, compared frames) of the best alignment of ``query`` against ``ref``
    with ``query[i]`` against ``ref[i + shift]`` for |shift| <= max_shift."""
    best = (1.0, 0, 0)
    for shift in range(-max_shift, max_shift + 1):
        q0 = max(0, -shift)
        r0 = q0 + shift
        n = min(len(query) - q0, len(ref) - r0)
        if n <= 0:
            continue
        errors, m = bit_errors(query.slice(q0, q0 + n), ref.slice(r0, r0 + n))
        if m and errors / (32 * m) < best[0]:
            best = (errors / (32 * m), shift, m)
    return best


# ---- a fingerprint as a float32 vector (the detector contract's embedding slot) ------


def to_vector(fp: Fingerprint) -> FloatArray:
    """[2 * frames] float32, exact: the high and low 16 bits of every sub-fingerprint,
    and -1 in the high half of an invalid frame."""
    hi = (fp.bits >> np.uint32(16)).astype(np.float32)
    lo = (fp.bits & np.uint32(0xFFFF)).astype(np.float32)
    hi[~fp.valid] = -1.0
    return np.concatenate([hi, lo])


def from_vector(v: FloatArray) -> Fingerprint:
    v = np.asarray(v, np.float32).reshape(-1)
    n = v.size // 2
    hi, lo = v[:n], v[n:]
    valid = hi >= 0
    bits = (np.where(valid, hi, 0).astype(np.uint32) << np.uint32(16)) | lo.astype(np.uint32)
    return Fingerprint(bits.astype(np.uint32), valid)


def encode(fp: Fingerprint) -> str:
    """Compact text for Redis and JSON: ``<frames>.<base64 of the little-endian
    bits>.<base64 of the validity bitmap>`` (about 5.5 characters a frame)."""
    import base64

    bits = fp.bits.astype("<u4").tobytes()
    valid = np.packbits(fp.valid.astype(np.uint8)).tobytes()
    return (
        f"{len(fp)}."
        + base64.urlsafe_b64encode(bits).decode().rstrip("=")
        + "."
        + base64.urlsafe_b64encode(valid).decode().rstrip("=")
    )


def decode(text: str) -> Fingerprint:
    """Inverse of ``encode``; ValueError on anything else."""
    import base64
    import binascii

    try:
        count_s, bits_s, valid_s = text.split(".")
        n = int(count_s)
        bits_b = base64.urlsafe_b64decode(bits_s + "=" * (-len(bits_s) % 4))
        valid_b = base64.urlsafe_b64decode(valid_s + "=" * (-len(valid_s) % 4))
    except (ValueError, binascii.Error):
        raise ValueError("not an encoded fingerprint") from None
    if n < 0 or len(bits_b) != 4 * n or len(valid_b) != (n + 7) // 8:
        raise ValueError("encoded fingerprint has the wrong length")
    bits = np.frombuffer(bits_b, "<u4").astype(np.uint32)
    valid = np.unpackbits(np.frombuffer(valid_b, np.uint8))[:n].astype(bool)
    return Fingerprint(bits, valid)
