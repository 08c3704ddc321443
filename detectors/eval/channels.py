"""Channels a genuine call crosses before it reaches us as G.711: each takes 8 kHz float
audio and gives 8 kHz float audio back; the session evaluation then sends the result as
µ-law RTP through the native jitter buffer (``engine``'s ``g711`` condition), as a
gateway transcoding to G.711 would.

- ``g711``: nothing before the µ-law leg.
- ``gsm``: GSM 06.10 full rate (sox's ``gsm`` codec) and back.
- ``opus``: libopus (PyAV), VoIP mode, 20 ms frames, 8, 10 or 12 kbit/s (seeded per call).
- ``concealed_loss``: an upstream leg that lost 5 % of its 20 ms packets (seeded) and
  concealed them (the native jitter buffer's concealment) before re-encoding: the
  concealment reaches us as ordinary audio, with no loss mark.
- ``reverb``: sox ``reverb`` (reverberance 50 %, HF damping 50 %, room 60 %), a hands-free
  phone in a room.
- ``babble``: four other speakers talking at once, mixed 10 dB below the caller's
  active-speech level.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np

from detectors.eval.audio import FloatArray, resample, to_int16
from detectors.eval.sessions import RATE, mix_at_snr

CHANNELS: dict[str, str] = {
    "g711": "µ-law RTP through the jitter buffer, nothing before it",
    "gsm": "GSM 06.10 full rate (sox) then µ-law",
    "opus": "Opus VoIP 8/10/12 kbit/s (libopus via PyAV) then µ-law",
    "concealed_loss": "5 % packet loss concealed upstream, then re-encoded as µ-law",
    "reverb": "sox reverb 50/50/60 (hands-free in a room) then µ-law",
    "babble": "four other held-out speakers 10 dB below the caller, then µ-law",
}
OPUS_KBPS = (8, 10, 12)
UPSTREAM_LOSS = 0.05
BABBLE_SNR_DB = 10.0
BABBLE_TALKERS = 4


def apply(name: str, x: FloatArray, seed: int, noise: FloatArray | None = None) -> FloatArray:
    """``x`` (8 kHz) through channel ``name``; ``noise`` is the babble for ``babble``."""
    if name == "g711":
        return x
    if name == "gsm":
        return _sox_roundtrip(x, ["-t", "gsm"], [])
    if name == "opus":
        kbps = OPUS_KBPS[seed % len(OPUS_KBPS)]
        return opus_roundtrip(x, kbps * 1000)
    if name == "concealed_loss":
        from detectors.eval.engine import telephone_frames

        pcm, infos = telephone_frames(x, RATE, UPSTREAM_LOSS, seed)
        real = np.flatnonzero(infos["real_mask"] != 0)
        first = int(real[0]) if real.size else 0  # drop the buffer's playout delay
        y = pcm[first:].reshape(-1).astype(np.float32) / 32768.0
        return fit_length(y, len(x))
    if name == "reverb":
        return _sox_roundtrip(x, ["-t", "f32"], ["reverb", "50", "50", "60"])
    if name == "babble":
        if noise is None:
            raise ValueError("the babble channel needs the babble audio")
        return mix_at_snr(x, noise, BABBLE_SNR_DB)
    raise ValueError(f"unknown channel {name!r} (one of {', '.join(CHANNELS)})")


def fit_length(y: FloatArray, n: int) -> FloatArray:
    """``y`` cut or zero-padded to ``n`` samples, float32."""
    if len(y) >= n:
        return np.ascontiguousarray(y[:n], np.float32)
    return np.pad(y, (0, n - len(y))).astype(np.float32)


def _sox_roundtrip(x: FloatArray, encoded: list[str], effects: list[str]) -> FloatArray:
    """``x`` through sox into ``encoded`` (with ``effects``) and back to float."""
    exe = shutil.which("sox")
    if exe is None:
        raise ValueError("this channel needs sox on PATH (apt-get install sox)")
    raw = ["-t", "f32", "-r", str(RATE), "-c", "1"]
    mid = subprocess.run(
        [exe, "-q", *raw, "-", *encoded[:2], "-r", str(RATE), "-c", "1", "-", *effects],
        input=np.clip(x, -1.0, 1.0).astype("<f4").tobytes(),
        capture_output=True,
        check=True,
        timeout=300,
    ).stdout
    back = subprocess.run(
        [exe, "-q", *encoded[:2], "-r", str(RATE), "-c", "1", "-", *raw, "-"],
        input=mid,
        capture_output=True,
        check=True,
        timeout=300,
    ).stdout
    return fit_length(np.frombuffer(back, "<f4").astype(np.float32), len(x))


def opus_roundtrip(x: FloatArray, bit_rate: int) -> FloatArray:
    """``x`` encoded by libopus (VoIP, 20 ms) at ``bit_rate`` and decoded again."""
    import av

    enc = av.CodecContext.create("libopus", "w")
    enc.sample_rate = RATE
    enc.layout = "mono"
    enc.format = "s16"
    enc.bit_rate = bit_rate
    enc.options = {"application": "voip", "frame_duration": "20"}
    dec = av.CodecContext.create("libopus", "r")
    pcm = to_int16(x)
    step = RATE // 50
    pcm = np.pad(pcm, (0, -len(pcm) % step))
    packets = []
    for i in range(0, len(pcm), step):
        frame = av.AudioFrame.from_ndarray(pcm[None, i : i + step], format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = i
        packets.extend(enc.encode(frame))
    packets.extend(enc.encode(None))
    chunks: list[FloatArray] = []
    rate = RATE
    for p in packets:
        for fr in dec.decode(p):
            n_ch = len(fr.layout.channels)
            a = fr.to_ndarray().reshape(-1, n_ch).mean(axis=1)  # packed s16: interleaved
            rate = fr.sample_rate
            scale = 32768.0 if fr.format.name.startswith("s16") else 1.0
            chunks.append((a / scale).astype(np.float32))
    y = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    y = resample(y, rate, RATE)
    # libopus delays its output by its lookahead (pre-skip); realign with the input
    skip = round(0.0065 * RATE)
    return fit_length(y[skip:], len(x))
