"""Timed PCM chunks through the packetizer into a real pushed ingest stream, pulled in
virtual time: what a media WebSocket or AudioSocket leg's audio goes through."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from native import lib
from native.codec import ulaw_decode, ulaw_encode
from native.ingest import Ingest, PayloadType
from sip_bridge.adapters.packetizer import Packetizer
from sip_bridge.media import PushedLeg

T0 = 5_000_000_000_000
TICK = 20_000_000
FRAME = 160
PCMU = (PayloadType(0, "PCMU"), PayloadType(101, "telephone-event"))
L16LE = (PayloadType(96, "L16LE", 8000), PayloadType(101, "telephone-event"))


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> npt.NDArray[np.int16]:
    path = sorted((shared_dir / "data" / "speech" / "asterisk_prompts" / "en").glob("*.wav"))[0]
    with wave.open(str(path)) as w:
        assert w.getframerate() == 8000
        audio = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    assert audio.size >= 8000
    return audio[: 4 * 8000].astype(np.int16)


def _leg(ingest: Ingest, pts: tuple[PayloadType, ...]) -> PushedLeg:
    sid = ingest.add_stream_push(payload_types=pts)
    return PushedLeg(ingest, sid, "leg", pts)


def _pull_all(ingest: Ingest, sid: int, ticks: int, start: int = 0) -> list[tuple[int, bytes]]:
    out = []
    for k in range(start, start + ticks):
        pulled = ingest.pull_all(T0 + k * TICK + TICK // 2)
        row = pulled.ids.tolist().index(sid)
        n = int(pulled.infos[row]["samples"])
        out.append((int(pulled.infos[row]["flag"]), pulled.pcm[row, :n].tobytes()))
    return out


def _trim(frames: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """From the first NORMAL frame to the last (the stream's start and its drained end
    are not-started and concealed)."""
    flags = [f for f, _ in frames]
    first = flags.index(lib.CS_FRAME_NORMAL)
    last = len(flags) - flags[::-1].index(lib.CS_FRAME_NORMAL)
    return frames[first:last]


def _normal_audio(frames: list[tuple[int, bytes]]) -> npt.NDArray[np.int16]:
    return np.frombuffer(
        b"".join(pcm for flag, pcm in frames if flag == lib.CS_FRAME_NORMAL), np.int16
    )


def _feed(
    ingest: Ingest,
    sid: int,
    p: Packetizer,
    chunks: list[tuple[bytes, int | None]],
    chunk_ms: int,
) -> list[tuple[int, bytes]]:
    """Chunk k arrives at k * chunk_ms; a pull every 20 ms in between, then 30 more."""
    frames: list[tuple[int, bytes]] = []
    tick = 0
    for k, (body, offset) in enumerate(chunks):
        at = T0 + k * chunk_ms * 1_000_000
        while T0 + tick * TICK + TICK // 2 < at:
            frames += _pull_all(ingest, sid, 1, tick)
            tick += 1
        p.write(body, at, offset)
    return _trim(frames + _pull_all(ingest, sid, 30, tick))


def _chunks(data: bytes, size: int) -> list[tuple[bytes, int | None]]:
    return [(data[i : i + size], None) for i in range(0, len(data), size)]


@pytest.mark.parametrize("chunk_ms", [10, 20, 60, 25])
def test_ordered_ulaw_chunks_arrive_bit_exact(speech: npt.NDArray[np.int16], chunk_ms: int) -> None:
    ulaw = ulaw_encode(speech)
    with Ingest(8) as ingest:
        leg = _leg(ingest, PCMU)
        p = Packetizer(leg, 0)
        frames = _feed(ingest, leg_sid(leg), p, _chunks(ulaw, 8 * chunk_ms), chunk_ms)
        got = _normal_audio(frames)
        want = ulaw_decode(ulaw)
        assert got.size >= want.size - 2 * FRAME  # all but the tail of a cut chunk
        np.testing.assert_array_equal(got, want[: got.size])
        assert {f for f, _ in frames} == {lib.CS_FRAME_NORMAL}
        st = ingest.stream_stats(leg_sid(leg))
        assert st["packets_lost"] == 0 and st["packets_duplicate"] == 0
        assert p.stats.carry_dropped == 0


def test_duplicate_reordered_and_missing_chunks(speech: npt.NDArray[np.int16]) -> None:
    """Offsets from the transport's own counters: a resent chunk is a duplicate, a
    swapped pair is reordered, a missing chunk is concealed, not shifted."""
    ulaw = ulaw_encode(speech[: 3 * 8000])
    chunks = [(ulaw[i : i + FRAME], i) for i in range(0, len(ulaw), FRAME)]
    chunks.insert(20, chunks[19])  # duplicate
    chunks[40], chunks[41] = chunks[41], chunks[40]  # reorder
    del chunks[80]  # lost: chunk 79 (one was inserted before it)
    with Ingest(8) as ingest:
        leg = _leg(ingest, PCMU)
        p = Packetizer(leg, 0)
        frames = _feed(ingest, leg_sid(leg), p, chunks, 20)
        st = ingest.stream_stats(leg_sid(leg))
        assert st["packets_duplicate"] == 2  # one chunk = two 10 ms packets
        assert st["packets_reordered"] >= 1
        assert st["packets_lost"] == 2
        flags = [f for f, _ in frames]
        assert flags.count(lib.CS_FRAME_CONCEALED) == 1
        decoded = ulaw_decode(ulaw)
        for k, (flag, pcm) in enumerate(frames):  # every frame sits at its own offset
            if flag == lib.CS_FRAME_NORMAL:
                got = np.frombuffer(pcm, np.int16)
                np.testing.assert_array_equal(got, decoded[k * FRAME : (k + 1) * FRAME])
        assert flags[79] == lib.CS_FRAME_CONCEALED  # the missing chunk's own slot


def test_little_endian_l16_keeps_an_asymmetric_waveform() -> None:
    """AudioSocket and audio_fork send little-endian PCM; swapped samples would turn
    this ramp (positive-heavy, asymmetric) into noise."""
    ramp = (np.arange(8000 * 2) % 400 * 60 - 4000).astype("<i2")
    with Ingest(8) as ingest:
        leg = _leg(ingest, L16LE)  # the C decoder reads little-endian samples
        p = Packetizer(leg, 96, sample_bytes=2)
        frames = _feed(ingest, leg_sid(leg), p, _chunks(ramp.tobytes(), 320), 20)
        got = _normal_audio(frames)
        assert got.size >= ramp.size - FRAME
        np.testing.assert_array_equal(got, ramp[: got.size])


def test_dtmf_reported_as_text_reaches_the_tracker_only(
    speech: npt.NDArray[np.int16],
) -> None:
    ulaw = ulaw_encode(speech[:8000])
    with Ingest(8) as ingest:
        leg = _leg(ingest, PCMU)
        sid = leg_sid(leg)
        p = Packetizer(leg, 0)
        _feed(ingest, sid, p, _chunks(ulaw, FRAME), 20)
        assert p.dtmf("7", 4000, 800, T0 + 600 * 1_000_000)
        assert p.dtmf("#", 6000, 800, T0 + 800 * 1_000_000)
        assert not p.dtmf("x", 6000, 800, T0)
        events = ingest.take_dtmf(sid)
        assert len(events) == 2
        assert all("digit" not in e and "event" not in e for e in events)  # keyed tokens
        assert ingest.stream_stats(sid)["packets_lost"] == 0  # audio sequence untouched
        ingest.set_paused(sid, True)
        p.dtmf("1", 7000, 800, T0 + 900 * 1_000_000)
        assert ingest.take_dtmf(sid) == []  # paused: discarded in C


def test_writes_after_the_leg_closed_are_counted_not_raised() -> None:
    with Ingest(8) as ingest:
        leg = _leg(ingest, PCMU)
        p = Packetizer(leg, 0)
        ingest.remove_stream(leg_sid(leg))
        assert p.write(bytes(FRAME), T0) == 0
        assert leg.closed
        assert p.write(bytes(FRAME), T0) == 0
        assert p.stats.closed_drops == 2


def leg_sid(leg: PushedLeg) -> int:
    return leg._sid
