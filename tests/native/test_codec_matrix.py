"""The jitter buffer's codec matrix (issues 2 and 12): every codec (L16 at 8 to 48 kHz
and 44.1 kHz, whose 2.5 ms units hold 110 or 111 samples) through the ring at 8 and 16 kHz
legs for 60 s of virtual time against the same decoder (and resampler) run
on the whole stream at once, so any lost, repeated, misplaced or drifting sample shows;
G.722 bit-exact with libavcodec on real speech; Opus loss concealment with and without
in-band FEC, and Opus DTX as comfort noise; L16 byte order with an asymmetric signal."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from codec_refs import (
    g722_decode_av,
    g722_decode_c,
    g722_encode,
    opus_decode,
    opus_encode,
    resample,
    resampler_delay,
    speech_16k,
)

from native.codec import alaw_decode, alaw_encode, build_rtp, ulaw_decode, ulaw_encode
from native.jitter import FrameFlag, JitterBuffer, JitterConfig, PacketOutcome, PayloadType

Pcm = npt.NDArray[np.int16]
MS = 1_000_000
SECONDS = 60


def sweep(rate: int, seconds: float) -> Pcm:
    """A 200 Hz -> 3.2 kHz linear sweep repeating every second, under a slow amplitude
    ramp: every frame of the minute differs, so a shifted or repeated frame shows."""
    t = np.arange(int(rate * seconds)) / rate
    tp = t % 1.0
    phase = 2 * np.pi * (200 * tp + 3000 * tp**2 / 2)
    env = 0.35 + 0.3 * t / seconds
    return (12000 * env * np.sin(phase)).astype(np.int16)


@dataclass(frozen=True)
class Stream:
    """One encoded stream: its payload type, packets, and the reference decode."""

    pt: PayloadType
    ptime_ms: int
    payloads: list[bytes]
    reference: Callable[[int], Pcm]  # out_rate -> the whole stream decoded at that rate

    @property
    def ticks(self) -> int:
        return self.pt.clock_rate * self.ptime_ms // 1000


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data) // size * size, size)]


def _l16(rate: int, *, le: bool = False, channels: int = 1) -> Stream:
    pcm = sweep(rate, SECONDS)
    frames = np.repeat(pcm, channels) if channels == 2 else pcm
    data = frames.astype("<i2" if le else ">i2").tobytes()
    pt = PayloadType(96, "L16LE" if le else "L16", rate, channels)
    return Stream(
        pt, 20, _chunks(data, rate // 50 * 2 * channels), lambda out: resample(pcm, rate, out)
    )


def _g711(name: str) -> Stream:
    pcm = sweep(8000, SECONDS)
    encode, decode = (ulaw_encode, ulaw_decode) if name == "PCMU" else (alaw_encode, alaw_decode)
    data = encode(pcm)
    ref = decode(data)
    return Stream(
        PayloadType(0 if name == "PCMU" else 8, name),
        20,
        _chunks(data, 160),
        lambda out: resample(ref, 8000, out),
    )


def _g722(ptime_ms: int) -> Stream:
    bits = g722_encode(sweep(16000, SECONDS))[: SECONDS * 8000]
    ref = g722_decode_c(bits)
    return Stream(
        PayloadType(9, "G722"),
        ptime_ms,
        _chunks(bits, 8 * ptime_ms),
        lambda out: resample(ref, 16000, out),
    )


def _opus(frame_ms: int = 20, pcm: Pcm | None = None) -> Stream:
    packets = opus_encode(
        sweep(16000, SECONDS) if pcm is None else pcm,
        16000,
        frame_ms=frame_ms,
        fec=True,
        loss_perc=5,
    )
    return Stream(
        PayloadType(111, "opus", 48000, 2), frame_ms, packets, lambda out: opus_decode(packets, out)
    )


STREAMS: dict[str, Callable[[], Stream]] = {
    "PCMU": lambda: _g711("PCMU"),
    "PCMA": lambda: _g711("PCMA"),
    "L16-8k": lambda: _l16(8000),
    "L16-16k": lambda: _l16(16000),
    "L16-24k": lambda: _l16(24000),
    "L16-48k-stereo": lambda: _l16(48000, channels=2),
    "L16LE-16k": lambda: _l16(16000, le=True),
    "L16LE-32k": lambda: _l16(32000, le=True),
    "L16LE-44.1k": lambda: _l16(44100, le=True),
    "L16-44.1k-stereo": lambda: _l16(44100, channels=2),
    "G722-20ms": lambda: _g722(20),
    "G722-30ms": lambda: _g722(30),
    "opus-20ms": lambda: _opus(20),
}


@functools.cache
def stream(name: str) -> Stream:
    return STREAMS[name]()


@dataclass
class Played:
    real: Pcm  # received (and FEC-recovered) samples in playout order
    by_pos: dict[int, Pcm]  # frame position -> its samples, for frames that carried any
    flags: list[FrameFlag]
    stats: dict[str, int]


def play(
    s: Stream,
    out_rate: int,
    *,
    drop: frozenset[int] = frozenset(),
    send: Callable[[int, bytes], bool] = lambda i, p: True,
    fec: bool = True,
) -> Played:
    """Packets at their ptime with 5-9 ms of deterministic network delay; a pull every
    20 ms until the buffer has drained."""
    pt = PayloadType(s.pt.pt, s.pt.codec, s.pt.clock_rate, s.pt.channels, fec)
    cn = PayloadType(13, "CN")
    jb = JitterBuffer(JitterConfig(out_rate=out_rate, payload_types=(pt, cn), dtmf_key=1))
    arrivals = []
    seq = 0
    for i, payload in enumerate(s.payloads):
        if i in drop:
            seq += 1
            continue
        if not send(i, payload):
            continue  # not sent at all: the sequence number stays (silence suppression)
        dg = build_rtp(
            payload,
            seq=(7000 + seq) & 0xFFFF,
            ts=(90_000 + i * s.ticks) & 0xFFFFFFFF,
            ssrc=0xC0DEC,
            payload_type=s.pt.pt,
        )
        arrivals.append((i * s.ptime_ms * MS + (5 + (i * 7919) % 5) * MS, dg))
        seq += 1
    pcm = np.zeros(jb.samples_per_frame, dtype=np.int16)
    spu = jb.samples_per_frame // 8
    real: list[Pcm] = []
    by_pos: dict[int, Pcm] = {}
    flags: list[FrameFlag] = []
    k, t = 0, 10 * MS
    while True:
        while k < len(arrivals) and arrivals[k][0] <= t:
            jb.insert(arrivals[k][1], arrivals[k][0])
            k += 1
        st = jb.stats()
        if (
            k == len(arrivals)
            and st["units_accepted"]
            == st["units_played"] + st["units_flushed"] + st["units_dropped"]
        ):
            break
        flag = FrameFlag(jb.pull_into(t, pcm))
        info = jb.last_info
        flags.append(flag)
        mask = int(info.real_mask)
        if mask == 0xFF:
            real.append(pcm.copy())
        else:
            real.extend(pcm[u * spu : (u + 1) * spu].copy() for u in range(8) if mask >> u & 1)
        if flag not in (FrameFlag.NOT_STARTED, FrameFlag.PAUSED):
            by_pos[int(info.pos)] = pcm.copy()
        t += 20 * MS
    out = np.concatenate(real) if real else np.zeros(0, np.int16)
    return Played(out, by_pos, flags, jb.stats())


@pytest.mark.parametrize("out_rate", [8000, 16000])
@pytest.mark.parametrize("name", list(STREAMS))
def test_a_minute_through_the_ring_equals_the_whole_stream_decoded(
    name: str, out_rate: int
) -> None:
    s = stream(name)
    got = play(s, out_rate)
    want = s.reference(out_rate)
    assert len(want) == len(s.payloads) * s.ptime_ms * out_rate // 1000
    assert len(got.real) == len(want)  # every sample of the minute, once
    assert np.array_equal(got.real, want)  # in place, unchanged: no drift, no seam
    st = got.stats
    assert st["concealed_samples"] == 0 and st["decoder_resets"] == 0
    assert st["removed_samples_for_acceleration"] == 0 and st["resyncs"] == 0
    assert st["packets_played"] == len(s.payloads)
    positions = sorted(got.by_pos)
    assert positions == list(range(positions[0], positions[0] + 8 * len(positions), 8))


@pytest.mark.parametrize(("name", "rate"), [("L16-48k-stereo", 48000), ("L16LE-44.1k", 44100)])
def test_resampled_sweep_matches_the_analytic_signal(name: str, rate: int) -> None:
    """L16 at 48 or 44.1 kHz on a 16 kHz leg: the analytic sweep sampled at 16 kHz, 3 ms
    late (44.1 kHz: no sample lost or repeated over the minute, so no drift either)."""
    got = play(stream(name), 16000).real.astype(np.float64)
    delay = resampler_delay(rate, 16000)
    t = (np.arange(len(got)) - delay) / 16000
    tp = t % 1.0
    want = 12000 * (0.35 + 0.3 * t / SECONDS) * np.sin(2 * np.pi * (200 * tp + 1500 * tp**2))
    inner = [(s, s + 15000) for s in range(1000, len(got) - 16000, 16000)]  # away from the resets
    err = np.concatenate([got[a:b] - want[a:b] for a, b in inner])
    ref = np.concatenate([want[a:b] for a, b in inner])
    snr = 10 * np.log10(np.sum(ref**2) / np.sum(err**2))
    assert snr > 55, snr


def test_g722_decoder_is_bit_exact_with_libavcodec(shared_dir: Path) -> None:
    bits = g722_encode(speech_16k(shared_dir, 12.0))
    ours, theirs = g722_decode_c(bits), g722_decode_av(bits)
    n = min(len(ours), len(theirs))
    assert n >= 12 * 16000
    assert np.array_equal(ours[:n], theirs[:n])


def test_g722_loss_restarts_the_decoder() -> None:
    s = stream("G722-30ms")
    got = play(s, 16000, drop=frozenset({100, 101, 500}))
    assert got.stats["decoder_resets"] == 2
    assert got.stats["concealed_samples"] == 3 * 480
    # after the gap (packet 500) a fresh decoder starts at packet 501, whose second half
    # (units 4..11 of its 12) is the frame at unit 501 * 12 + 4 of the stream
    frame = got.by_pos[min(got.by_pos) + 501 * 12 + 4]
    fresh = g722_decode_c(b"".join(s.payloads[501:503]))
    assert np.array_equal(frame, fresh[160:480])
    continuous = s.reference(16000)[(501 * 12 + 4) * 40 :][:320]
    assert not np.array_equal(frame, continuous)


def test_l16_44k1_after_loss_stays_on_the_stream_grid() -> None:
    """44.1 kHz on an 8 kHz leg with packets lost: the resampler restarts after each gap
    on the whole stream's output grid, so every frame keeps its 160 samples in place and,
    once the filter has refilled (well under 10 ms), equals the unbroken stream's."""
    s = stream("L16LE-44.1k")
    got = play(s, 8000, drop=frozenset({100, 101, 500}))
    st = got.stats
    assert st["decoder_resets"] == 2 and st["concealed_samples"] == 3 * 160
    want = s.reference(8000)
    assert len(got.real) == len(want) - 3 * 160
    base = min(got.by_pos)
    for after in (102, 501):  # the packet after each gap, and the one after that
        for k in (after, after + 1):
            frame = got.by_pos[base + 8 * k]
            ref = want[k * 160 : (k + 1) * 160]
            skip = 0 if k > after else 80  # the first 10 ms after a gap: filter refill
            assert np.array_equal(frame[skip:], ref[skip:]), k


@pytest.mark.parametrize("frame_ms", [10, 20, 40, 60])
def test_opus_frame_sizes_on_a_16k_leg(frame_ms: int, shared_dir: Path) -> None:
    speech = speech_16k(shared_dir, 6.0)
    s = _opus(frame_ms, speech)
    got = play(s, 16000)
    assert np.array_equal(got.real, opus_decode(s.payloads, 16000))
    assert got.stats["concealed_samples"] == 0


def test_opus_fec_recovers_what_plc_would_conceal(shared_dir: Path) -> None:
    speech = speech_16k(shared_dir, 12.0)
    s = _opus(20, speech)
    rng = np.random.default_rng(5)
    drop = frozenset(int(i) for i in np.flatnonzero(rng.random(len(s.payloads)) < 0.05) if i > 5)
    with_fec, without = play(s, 16000, drop=drop), play(s, 16000, drop=drop, fec=False)
    lost = len(drop) * 320
    assert without.stats["concealed_samples"] == lost and without.stats["fec_samples"] == 0
    assert with_fec.stats["fec_samples"] > 0 and with_fec.stats["concealed_samples"] < lost
    assert with_fec.stats["concealed_samples"] + with_fec.stats["fec_samples"] == lost
    # the recovered audio is closer to what was sent than the concealment is
    clean = play(s, 16000)
    base = min(clean.by_pos)
    err_fec = err_plc = energy = 0.0
    for i in drop:
        pos = base + 8 * i
        ref = clean.by_pos[pos].astype(np.float64)
        energy += float(np.sum(ref**2))
        err_fec += float(np.sum((with_fec.by_pos[pos] - ref) ** 2))
        err_plc += float(np.sum((without.by_pos[pos] - ref) ** 2))
    assert err_fec < 0.7 * err_plc, (err_fec / energy, err_plc / energy)


def _with_pauses(speech: Pcm) -> Pcm:
    """Speech with 1.2 s of digital silence after every 1.5 s."""
    parts = []
    for i in range(0, len(speech), 24000):
        parts += [speech[i : i + 24000], np.zeros(19200, np.int16)]
    return np.concatenate(parts)


@pytest.mark.parametrize("webrtc_style", [False, True])
def test_opus_dtx_is_comfort_noise_not_concealment(webrtc_style: bool, shared_dir: Path) -> None:
    """DTX frames (TOC only) mark silence. Sent every time, or as WebRTC does: only the
    first of a run, the rest not sent at all (timestamps jump, sequence numbers don't)."""
    audio = _with_pauses(speech_16k(shared_dir, 6.0))
    packets = opus_encode(audio, 16000, dtx=True)
    assert sum(len(p) <= 2 for p in packets) > 100
    s = Stream(PayloadType(111, "opus", 48000, 2), 20, packets, lambda out: audio)

    def send(i: int, payload: bytes) -> bool:
        return not (webrtc_style and len(payload) <= 2 and i > 0 and len(packets[i - 1]) <= 2)

    got = play(s, 8000, send=send)
    assert FrameFlag.CONCEALED not in got.flags
    assert got.flags.count(FrameFlag.CNG) > 100
    assert got.flags.count(FrameFlag.NORMAL) > 150
    assert got.stats["packets_cn"] > 0


def test_l16_byte_order_with_an_asymmetric_waveform() -> None:
    """A ramp that only rises (and whose bytes differ): big-endian L16 and L16LE of the
    same samples play identically, and reading either in the other order does not."""
    x = ((np.arange(16000) * 37) % 50000 - 25000).astype(np.int16)
    x[::7] = 0x0102
    for codec, dtype in (("L16", ">i2"), ("L16LE", "<i2")):
        data = x.astype(dtype).tobytes()
        s = Stream(PayloadType(96, codec, 16000), 20, _chunks(data, 640), lambda out: x)
        assert np.array_equal(play(s, 16000).real, x)
        wrong = PayloadType(96, "L16LE" if codec == "L16" else "L16", 16000)
        swapped = play(Stream(wrong, 20, s.payloads, s.reference), 16000).real
        assert np.array_equal(swapped, x.byteswap())


def test_payload_types_validate_clock_and_channels() -> None:
    assert PayloadType(9, "G722").clock_rate == 8000
    assert PayloadType(111, "opus", channels=2).clock_rate == 48000
    with pytest.raises(ValueError, match="8000"):
        PayloadType(9, "G722", 16000)
    with pytest.raises(ValueError, match="channels"):
        PayloadType(96, "L16", 16000, 3)
    with pytest.raises(ValueError, match="invalid configuration"):
        JitterBuffer(JitterConfig(out_rate=32000, payload_types=(PayloadType(111, "opus"),)))
    jb = JitterBuffer(JitterConfig(out_rate=8000, payload_types=(PayloadType(111, "opus"),)))
    bad = build_rtp(b"\x03\x00\x01", seq=1, ts=0, ssrc=1, payload_type=111)  # 0 frames
    assert jb.insert(bad, 0) == PacketOutcome.BAD_PAYLOAD
