"""Reference codecs for the codec-matrix tests: the system libopus through ctypes (the
encoder, with the FEC/DTX controls PyAV does not expose, and a plain decoder), G.722
encoding and decoding by libavcodec (PyAV), and our C G.722 decoder and resampler run
on a whole stream at once (what the jitter buffer must reproduce piece by piece)."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
import soundfile as sf

from native import ffi, lib

Pcm = npt.NDArray[np.int16]

_OPUS = ctypes.CDLL(ctypes.util.find_library("opus") or "libopus.so.0")
_OPUS.opus_encoder_create.restype = ctypes.c_void_p
_OPUS.opus_decoder_create.restype = ctypes.c_void_p
_OPUS.opus_encode.argtypes = [
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_int32,
]
_OPUS.opus_decode.argtypes = [
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int32,
    ctypes.c_void_p,
    ctypes.c_int,
    ctypes.c_int,
]
_OPUS.opus_encoder_destroy.argtypes = [ctypes.c_void_p]
_OPUS.opus_decoder_destroy.argtypes = [ctypes.c_void_p]
_APPLICATION_VOIP = 2048
_SET_BITRATE, _SET_INBAND_FEC, _SET_PACKET_LOSS_PERC, _SET_DTX = 4002, 4012, 4014, 4016


def opus_encode(
    pcm: Pcm,
    rate: int,
    *,
    frame_ms: float = 20,
    fec: bool = False,
    loss_perc: int = 0,
    dtx: bool = False,
    bitrate: int = 24000,
) -> list[bytes]:
    """Mono PCM at `rate` -> one Opus packet per frame (DTX frames are 1-2 bytes)."""
    err = ctypes.c_int()
    enc = _OPUS.opus_encoder_create(rate, 1, _APPLICATION_VOIP, ctypes.byref(err))
    assert err.value == 0 and enc
    try:
        for request, value in (
            (_SET_BITRATE, bitrate),
            (_SET_INBAND_FEC, int(fec)),
            (_SET_PACKET_LOSS_PERC, loss_perc),
            (_SET_DTX, int(dtx)),
        ):
            assert _OPUS.opus_encoder_ctl(ctypes.c_void_p(enc), request, ctypes.c_int(value)) == 0
        n = int(rate * frame_ms / 1000)
        out = ctypes.create_string_buffer(4000)
        data = np.ascontiguousarray(pcm[: len(pcm) // n * n], dtype=np.int16)
        packets = []
        for i in range(len(data) // n):
            frame = data[i * n : (i + 1) * n]
            size = _OPUS.opus_encode(enc, frame.ctypes.data, n, out, len(out))
            assert size > 0
            packets.append(out.raw[:size])
        return packets
    finally:
        _OPUS.opus_encoder_destroy(enc)


def opus_decode(packets: list[bytes], rate: int) -> Pcm:
    """What a mono libopus decoder at `rate` makes of the packets, in order, no loss."""
    err = ctypes.c_int()
    dec = _OPUS.opus_decoder_create(rate, 1, ctypes.byref(err))
    assert err.value == 0 and dec
    try:
        buf = np.zeros(rate * 120 // 1000, dtype=np.int16)
        parts = []
        for p in packets:
            n = _OPUS.opus_decode(dec, p, len(p), buf.ctypes.data, len(buf), 0)
            assert n > 0
            parts.append(buf[:n].copy())
        return np.concatenate(parts)
    finally:
        _OPUS.opus_decoder_destroy(dec)


def g722_encode(pcm16k: Pcm) -> bytes:
    """16 kHz PCM -> G.722 (64 kbit/s) by libavcodec; one octet per two samples."""
    ctx = av.CodecContext.create("g722", "w")
    ctx.sample_rate, ctx.format, ctx.layout = 16000, "s16", "mono"
    ctx.open()
    frame = av.AudioFrame.from_ndarray(pcm16k.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate, frame.pts = 16000, 0
    out = b"".join(bytes(p) for p in ctx.encode(frame))
    return out + b"".join(bytes(p) for p in ctx.encode(None))


def g722_decode_av(bits: bytes) -> Pcm:
    ctx = av.CodecContext.create("g722", "r")
    ctx.sample_rate, ctx.layout = 16000, "mono"
    frames = ctx.decode(av.Packet(bits))
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.int16)


def g722_decode_c(bits: bytes) -> Pcm:
    state = ffi.new("cs_g722_decoder *")
    lib.cs_g722_reset(state)
    out = np.zeros(2 * len(bits), dtype=np.int16)
    lib.cs_g722_decode(state, bits, len(bits), ffi.from_buffer("int16_t[]", out))
    return out


def resample(pcm: Pcm, in_rate: int, out_rate: int) -> Pcm:
    """The C resampler over a whole signal (identity at equal rates)."""
    if in_rate == out_rate:
        return pcm.copy()
    rs = ffi.gc(lib.cs_resampler_new(in_rate, out_rate), lib.cs_resampler_free)
    assert rs != ffi.NULL
    src = np.ascontiguousarray(pcm, dtype=np.int16)
    out = np.zeros(int(lib.cs_resampler_max_out(rs, len(src))), dtype=np.int16)
    n = lib.cs_resampler_process(
        rs, ffi.from_buffer("int16_t[]", src), len(src), ffi.from_buffer("int16_t[]", out)
    )
    return out[:n]


def resampler_delay(in_rate: int, out_rate: int) -> float:
    rs = ffi.gc(lib.cs_resampler_new(in_rate, out_rate), lib.cs_resampler_free)
    return float(lib.cs_resampler_delay(rs))


def speech_16k(shared_dir: Path, seconds: float) -> Pcm:
    """Real 16 kHz speech (LibriSpeech and CMU ARCTIC files of the shared corpus)."""
    need = int(seconds * 16000)
    parts: list[Pcm] = []
    for path in _speech_files(shared_dir):
        data, rate = sf.read(str(path), dtype="int16", always_2d=True)
        assert rate == 16000
        parts.append(data[:, 0])
        if sum(len(p) for p in parts) >= need:
            break
    audio = np.concatenate(parts)[:need]
    assert len(audio) == need, "not enough 16 kHz speech in the shared folder"
    return audio


def _speech_files(shared_dir: Path) -> Iterator[Path]:
    root = shared_dir / "data" / "speech"
    yield root / "librispeech_misc" / "lhotse" / "1088-134315-0000.wav"
    yield from sorted((root / "cmu_arctic").glob("*.wav"))
