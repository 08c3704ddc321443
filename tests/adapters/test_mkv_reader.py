"""The streaming Matroska reader (sip_bridge.adapters.mkv) against libavformat: a file
PyAV's Matroska muxer wrote (SeekHead, CRC-32, Void, Cues, 8-byte sizes) reads back
bit-exact per track; the KVS-style fragments the tests write are demuxed by libavformat
to the same packets our reader sees (so the fixture is real Matroska); any split of the
byte stream gives the same events; malformed input raises the documented reason."""

from __future__ import annotations

import random
from pathlib import Path

import av
import numpy as np
import pytest

from sip_bridge.adapters.mkv import (
    Block,
    ClusterStart,
    FragmentStart,
    MkvError,
    MkvEvent,
    MkvReader,
    SegmentInfo,
    Tag,
    TrackInfo,
)
from tests.adapters.kvs_fixture import (
    AGENT,
    CUSTOMER,
    KvsBlock,
    demux_blocks,
    el,
    fragments_of,
    kvs_stream,
    simple_block,
    write_two_track_mkv,
)
from tests.sip.bridge_runner import load_speech


def _read(data: bytes, chunks: list[int] | None = None) -> tuple[list[MkvEvent], MkvReader]:
    """Every event of ``data`` fed in ``chunks``; a fault raises at the latest at close."""
    reader = MkvReader()
    events: list[MkvEvent] = []
    pos = 0
    for size in chunks or [len(data)]:
        events += reader.feed(data[pos : pos + size])
        pos += size
    events += reader.feed(data[pos:])
    return events + reader.close(), reader


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    return load_speech(shared_dir, 2.0), load_speech(shared_dir, 2.0, skip=20)


def test_libavformat_two_track_file_reads_bit_exact(
    tmp_path: Path, speech: tuple[np.ndarray, np.ndarray]
) -> None:
    customer, agent = speech
    path = tmp_path / "two.mkv"
    write_two_track_mkv(path, customer, agent)
    events, reader = _read(path.read_bytes())
    tracks = {e.name: e for e in events if isinstance(e, TrackInfo)}
    assert set(tracks) == {CUSTOMER, AGENT}
    assert (tracks[CUSTOMER].codec_id, tracks[CUSTOMER].sampling_frequency) == (
        "A_PCM/INT/LIT",
        8000.0,
    )
    assert (tracks[AGENT].channels, tracks[AGENT].bit_depth) == (1, 16)
    assert [e for e in events if isinstance(e, SegmentInfo)] == [SegmentInfo(1_000_000)]
    assert reader.unknown_elements == 0  # every ID libavformat writes is known
    for name, pcm in ((CUSTOMER, customer), (AGENT, agent)):
        blocks = [e for e in events if isinstance(e, Block) and e.track == tracks[name].number]
        assert [b.timecode for b in blocks] == [20 * k for k in range(len(blocks))]
        got = np.frombuffer(b"".join(b.data for b in blocks), "<i2")
        assert np.array_equal(got, pcm)


def test_kvs_fragments_are_matroska_libavformat_reads(
    tmp_path: Path, speech: tuple[np.ndarray, np.ndarray]
) -> None:
    customer, agent = speech
    path = tmp_path / "two.mkv"
    write_two_track_mkv(path, customer, agent)
    blocks = demux_blocks(path)
    stream = kvs_stream(fragments_of(blocks, 8000), contact_id="c-1")
    (tmp_path / "kvs.mkv").write_bytes(stream)
    with av.open(str(tmp_path / "kvs.mkv")) as container:
        names = {s.index: s.metadata["title"] for s in container.streams}
        theirs = [(names[p.stream.index], p.pts, bytes(p)) for p in container.demux() if p.size]
    events, reader = _read(stream)
    number = {e.number: e.name for e in events if isinstance(e, TrackInfo)}
    ours = [(number[e.track], e.timecode, e.data) for e in events if isinstance(e, Block)]
    assert ours == theirs and len(ours) == len(blocks)
    assert sum(isinstance(e, FragmentStart) for e in events) == 2  # one per second
    tags = [(e.name, e.value) for e in events if isinstance(e, Tag)]
    assert ("ContactId", "c-1") in tags
    assert ("MimeType", "audio/L16;rate=8000;channels=1;") in tags
    assert reader.unknown_elements == 0


def test_any_split_of_the_stream_gives_the_same_events(
    tmp_path: Path, speech: tuple[np.ndarray, np.ndarray]
) -> None:
    customer = speech[0]
    blocks = [
        KvsBlock(CUSTOMER, k * 160, customer[k * 160 : k * 160 + 160].tobytes()) for k in range(20)
    ]
    stream = kvs_stream(fragments_of(blocks, 1600), contact_id="c-2")
    whole, _ = _read(stream)
    rng = random.Random(7)
    for _ in range(5):
        sizes = [rng.randint(1, 40) for _ in range(len(stream) // 20)]
        assert _read(stream, sizes)[0] == whole
    assert _read(stream, [1] * len(stream))[0] == whole
    assert sum(isinstance(e, ClusterStart) for e in whole) == 2


def _one_cluster(*body: bytes) -> bytes:
    return kvs_stream([[KvsBlock(CUSTOMER, 0, b"\x01\x00" * 160), *body]], contact_id="c")


def test_unknown_elements_are_skipped_and_counted() -> None:
    odd = el(0x7E5B, b"\x00" * 40) + el(0x5FFF, b"")  # well-formed IDs nobody defines
    events, reader = _read(_one_cluster(odd, simple_block(1, 20, b"\x02\x00" * 160)))
    assert reader.unknown_elements == 2
    base = 1_726_677_688_724
    assert [e.timecode for e in events if isinstance(e, Block)] == [base, base + 20]


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        (_one_cluster()[:-300], "truncated"),  # cut inside the trailing tags
        (_one_cluster(bytes.fromhex("a3") + bytes.fromhex("0100001000000000")), "oversized"),
        (_one_cluster(b"\x00\x81\x00"), "bad_id"),  # a zero byte where an ID starts
        (_one_cluster(bytes.fromhex("ff8100")), "bad_id"),  # the reserved all-ones ID
        (b"\x42\x86\x81\x01" + _one_cluster(), "unexpected_element"),  # no EBML header first
        (el(0x7E5B, b"garbage"), "unexpected_element"),  # an unknown top-level element
        (_one_cluster(el(0x7E5B, b"", unknown_size=True)), "unknown_size"),
        (_one_cluster(simple_block(1, 0, b"\x00\x00", flags=0x82)), "laced"),
        (_one_cluster(el(0xA3, b"\x81\x00")), "bad_block"),
        (_one_cluster(el(0xA0, el(0x536E, b"x"))), "unexpected_element"),  # Name in a block
        (_one_cluster(simple_block(1, 0, b"\x00" * 64))[:-1200], "truncated"),  # mid-block
    ],
)
def test_malformed_streams_fail_with_their_reason(stream: bytes, reason: str) -> None:
    with pytest.raises(MkvError) as caught:
        _read(stream)
    assert caught.value.reason == reason


def test_a_child_running_past_its_parent_is_refused() -> None:
    track = el(0xAE, el(0xD7, b"\x01"))
    broken = bytearray(el(0x1654AE6B, track))
    broken[8] += 10  # the TrackNumber claims more bytes than its TrackEntry holds
    header = el(0x1A45DFA3, el(0x4282, b"matroska"))
    with pytest.raises(MkvError) as caught:
        _read(header + el(0x18538067, bytes(broken)))
    assert caught.value.reason == "overrun"


def test_memory_stays_bounded_on_a_huge_skipped_element() -> None:
    header = el(0x1A45DFA3, el(0x4282, b"matroska"))
    reader = MkvReader()
    reader.feed(header + bytes.fromhex("18538067") + bytes.fromhex("01ffffffffffffff"))
    reader.feed(bytes.fromhex("114d9b74") + bytes.fromhex("10800000"))  # an 8 MiB SeekHead
    for _ in range(128):
        reader.feed(b"\x00" * 65536)
        assert len(reader._buf) - reader._off == 0  # nothing of it is kept
    assert reader.position == len(header) + 12 + 8 + (8 << 20)


def test_events_before_a_fault_are_delivered_then_it_raises() -> None:
    reader = MkvReader()
    events = reader.feed(_one_cluster(b"\x00\x81\x00"))  # the whole stream in one chunk
    assert [e.track for e in events if isinstance(e, Block)] == [1]
    with pytest.raises(MkvError) as caught:
        reader.feed(b"")
    assert caught.value.reason == "bad_id"
    with pytest.raises(MkvError):
        reader.close()
