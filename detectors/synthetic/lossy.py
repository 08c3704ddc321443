"""Perceptual (lossy) codecs on both classes alike: training-channel augmentation.

Genuine audio that crossed an MP3, AAC or Opus encoder before it reached us (a
LibriVox recording, a voice note, a VoIP leg) carries spectral holes, pre-echo and a
band limit that resemble a vocoder's artefacts. If only spoofs carry such artefacts in
training, the model learns "lossy codec => spoof" (the LibriSpeech copies, derived from
LibriVox MP3s, were read as synthetic: docs/models/synthetic_voice.md). ``lossy`` puts
an 8 kHz window through one such codec, chosen and parameterised by the caller's random
generator (so deterministic per window seed), and returns it time-aligned and of the
same length:

- MP3 (libmp3lame) at 16 kHz (the window is upsampled first, as a wideband recording
  would have been coded), 16-64 kbit/s;
- AAC-LC (FFmpeg's encoder) at 16 kHz, 16-48 kbit/s;
- Opus (libopus, VoIP, 20 ms) at 8 kHz, 8-24 kbit/s.

All three come with PyAV's wheel (a runtime dependency); no external tool.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import numpy.typing as npt

from detectors.eval.channels import fit_length, opus_roundtrip

FloatArray = npt.NDArray[np.float32]
RATE = 8_000
WIDE_RATE = 16_000  # MP3 and AAC code the window upsampled to this rate
MP3_KBPS = (16, 24, 32, 48, 64)
AAC_KBPS = (16, 24, 32, 48)
OPUS_KBPS = (8, 12, 16, 24)
# (codec, share of lossy windows): MP3 is what the corpus's compressed genuine files carry
KINDS = (("mp3", 0.5), ("aac", 0.2), ("opus", 0.3))
# samples of leading encoder padding the decoder does not drop, per codec (at WIDE_RATE)
_PRIMING = {"libmp3lame": 0, "aac": 1024}


def roundtrip(x: FloatArray, codec: str, rate: int, bit_rate: int) -> FloatArray:
    """Mono float ``x`` at ``rate`` through PyAV encoder ``codec`` (``libmp3lame`` or
    ``aac``) at ``bit_rate`` and its decoder; aligned with ``x``, same length."""
    import av
    from av.audio.codeccontext import AudioCodecContext

    enc = cast(AudioCodecContext, av.CodecContext.create(codec, "w"))
    enc.sample_rate = rate
    enc.layout = "mono"
    enc.format = "fltp"
    enc.bit_rate = bit_rate
    enc.open()
    step = enc.frame_size or 1152
    dec = cast(
        AudioCodecContext,
        av.CodecContext.create("mp3float" if codec == "libmp3lame" else codec, "r"),
    )
    if enc.extradata:
        dec.extradata = enc.extradata
    pcm = np.pad(np.clip(x, -1.0, 1.0).astype(np.float32), (0, -len(x) % step + step))
    packets = []
    for i in range(0, len(pcm), step):
        frame = av.AudioFrame.from_ndarray(pcm[None, i : i + step], format="fltp", layout="mono")
        frame.sample_rate = rate
        frame.pts = i
        packets.extend(enc.encode(frame))
    packets.extend(enc.encode(None))
    chunks: list[FloatArray] = []
    for p in [*packets, None]:
        for fr in dec.decode(p):
            a = fr.to_ndarray().reshape(len(fr.layout.channels), -1).mean(axis=0)
            scale = 32768.0 if fr.format.name.startswith("s16") else 1.0
            chunks.append((a / scale).astype(np.float32))
    y = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return fit_length(y[_PRIMING.get(codec, 0) :], len(x))


def wideband(x8: FloatArray, codec: str, bit_rate: int) -> FloatArray:
    """8 kHz ``x8`` upsampled to 16 kHz, through ``codec``, and back to 8 kHz."""
    from scipy.signal import resample_poly

    up = resample_poly(x8, WIDE_RATE // RATE, 1).astype(np.float32)
    y = roundtrip(up, codec, WIDE_RATE, bit_rate)
    return fit_length(resample_poly(y, 1, WIDE_RATE // RATE).astype(np.float32), len(x8))


def lossy(x8: FloatArray, rng: np.random.Generator) -> FloatArray:
    """One perceptual codec, drawn with ``rng``, on the 8 kHz window ``x8``."""
    names = [k for k, _ in KINDS]
    kind = names[int(rng.choice(len(KINDS), p=[p for _, p in KINDS]))]
    if kind == "mp3":
        return wideband(x8, "libmp3lame", int(rng.choice(MP3_KBPS)) * 1000)
    if kind == "aac":
        return wideband(x8, "aac", int(rng.choice(AAC_KBPS)) * 1000)
    return opus_roundtrip(x8, int(rng.choice(OPUS_KBPS)) * 1000)
