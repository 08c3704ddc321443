"""Recorded-media fixtures for the Amazon Connect / Kinesis Video Streams tests, built by
the tests themselves.

1. :func:`write_two_track_mkv`: PyAV (libavformat's Matroska muxer) writes a two-track
   file, each track ``pcm_s16le`` mono 8 kHz with real speech, named as Amazon Connect
   names its tracks (``AUDIO_FROM_CUSTOMER``, ``AUDIO_TO_CUSTOMER``).
2. :func:`demux_blocks`: PyAV reads its packets back (track name, sample offset, bytes).
3. :func:`kvs_stream`: those blocks cut into fragments the way KVS GetMedia returns a
   Connect stream, written here EBML element by element because libavformat cannot: each
   fragment is an EBML header and an unknown-size Segment with Info, Tracks (Connect
   declares ``A_AAC`` with CodecPrivate ``11 90`` and no Audio element, although the
   payload is 16-bit little-endian PCM), a Tags element with the KVS fragment number
   and server/producer timestamps, one unknown-size Cluster whose Timecode is the
   producer time in ms, SimpleBlocks, then the Connect tags at Segment level after the
   Cluster (ContactId, InstanceId, MimeType ``audio/L16;rate=8000;channels=1``, the
   track-name -> number tags, Events, MILLIS_BEHIND_NOW, CONTINUATION_TOKEN).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt

CUSTOMER = "AUDIO_FROM_CUSTOMER"
AGENT = "AUDIO_TO_CUSTOMER"
RATE = 8000


def _vint_size(n: int | None) -> bytes:
    if n is None:
        return bytes.fromhex("01ffffffffffffff")
    for length in range(1, 9):
        if n < (1 << (7 * length)) - 1:
            return ((1 << (7 * length)) | n).to_bytes(length, "big")
    raise ValueError(n)


def el(eid: int, payload: bytes = b"", *, unknown_size: bool = False) -> bytes:
    """One EBML element (the ID written with its own length marker)."""
    ident = eid.to_bytes((eid.bit_length() + 7) // 8, "big")
    return ident + _vint_size(None if unknown_size else len(payload)) + payload


def uint(eid: int, value: int) -> bytes:
    return el(eid, value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))


def text(eid: int, value: str) -> bytes:
    return el(eid, value.encode())


def simple_tags(*pairs: tuple[str, str]) -> bytes:
    body = b"".join(el(0x67C8, text(0x45A3, k) + text(0x4487, v)) for k, v in pairs)
    return el(0x1254C367, el(0x7373, body))


def simple_block(track: int, rel: int, data: bytes, flags: int = 0x80) -> bytes:
    return el(0xA3, _vint_size(track) + rel.to_bytes(2, "big", signed=True) + bytes([flags]) + data)


@dataclass(frozen=True, slots=True)
class KvsBlock:
    track: str  # CUSTOMER or AGENT
    offset: int  # sample offset on the contact's timeline
    data: bytes  # little-endian 16-bit PCM


def write_two_track_mkv(
    path: Path,
    customer: npt.NDArray[np.int16],
    agent: npt.NDArray[np.int16],
    block: int = 160,
) -> None:
    """Both tracks through libavformat's Matroska muxer, ``block`` samples per packet."""
    with av.open(str(path), "w", format="matroska") as out:
        streams = []
        for name in (CUSTOMER, AGENT):
            stream = out.add_stream("pcm_s16le", rate=RATE, layout="mono")
            stream.metadata["title"] = name  # the muxer writes it as the track's Name
            streams.append(stream)
        for start in range(0, max(customer.size, agent.size), block):
            for stream, pcm in zip(streams, (customer, agent), strict=True):
                chunk = pcm[start : start + block]
                if chunk.size == 0:
                    continue
                frame = av.AudioFrame.from_ndarray(
                    chunk.astype(np.int16).reshape(1, -1), format="s16", layout="mono"
                )
                frame.sample_rate, frame.pts, frame.time_base = RATE, start, Fraction(1, RATE)
                for packet in stream.encode(frame):
                    out.mux(packet)
        for stream in streams:
            for packet in stream.encode(None):
                out.mux(packet)


def demux_blocks(path: Path) -> list[KvsBlock]:
    """The file's packets as libavformat reads them: track name, sample offset, bytes."""
    blocks: list[KvsBlock] = []
    with av.open(str(path)) as container:
        names = {s.index: s.metadata.get("title", "") for s in container.streams}
        for packet in container.demux():
            if packet.size == 0 or packet.pts is None:
                continue
            assert packet.time_base is not None
            offset = int(packet.pts * packet.time_base * RATE)
            blocks.append(KvsBlock(names[packet.stream.index], offset, bytes(packet)))
    return blocks


def kvs_stream(
    fragments: Sequence[Sequence[KvsBlock | bytes]],
    *,
    contact_id: str,
    instance_id: str = "d5b716a2-10bb-45cb-bf7f-01a9864be591",
    base_ms: int = 1_726_677_688_724,
    first_fragment: int = 91343852333181531502161607852955530730504675150,
    contact_ids: Sequence[str] | None = None,
    mime: str = "audio/L16;rate=8000;channels=1;",
) -> bytes:
    """GetMedia's body for a Connect stream: one fragment per entry of ``fragments``;
    raw ``bytes`` entries go into the Cluster as they are (unknown elements, faults).
    ``contact_ids`` overrides the ContactId tag per fragment (stream reuse)."""
    numbers = {CUSTOMER: 1, AGENT: 2}
    out = bytearray()
    for k, items in enumerate(fragments):
        blocks = [b for b in items if isinstance(b, KvsBlock)]
        cluster_ms = base_ms + min((b.offset for b in blocks), default=0) * 1000 // RATE
        header = el(
            0x1A45DFA3,
            uint(0x4286, 1)
            + uint(0x42F7, 1)
            + uint(0x42F2, 4)
            + uint(0x42F3, 8)
            + text(0x4282, "matroska")
            + uint(0x4287, 2)
            + uint(0x4285, 2),
        )
        info = el(
            0x1549A966,
            el(0x73A4, bytes(range(16)))
            + uint(0x2AD7B1, 1_000_000)
            + text(0x7BA9, "Kinesis Video SDK")
            + text(0x4D80, "Kinesis Video SDK 1.1.0 JNI 2.0")
            + text(0x5741, "Kinesis Video SDK 1.1.0 JNI 2.0"),
        )
        tracks = el(
            0x1654AE6B,
            b"".join(
                el(
                    0xAE,
                    uint(0xD7, number)
                    + uint(0x73C5, number)
                    + uint(0x83, 2)
                    + text(0x536E, name)
                    + text(0x86, "A_AAC")
                    + el(0x63A2, bytes.fromhex("1190")),
                )
                for name, number in numbers.items()
            ),
        )
        fragment_number = str(first_fragment + k)
        kvs_tags = simple_tags(
            ("AWS_KINESISVIDEO_FRAGMENT_NUMBER", fragment_number),
            ("AWS_KINESISVIDEO_SERVER_TIMESTAMP", f"{cluster_ms / 1000 - 0.9:.3f}"),
            ("AWS_KINESISVIDEO_PRODUCER_TIMESTAMP", f"{cluster_ms / 1000:.3f}"),
        )
        body = bytearray(uint(0xE7, cluster_ms) + uint(0xA7, 0))
        for item in items:
            if isinstance(item, bytes):
                body += item
                continue
            rel = base_ms + item.offset * 1000 // RATE - cluster_ms
            body += simple_block(numbers[item.track], rel, item.data)
        contact = contact_ids[k] if contact_ids is not None else contact_id
        after = b"".join(
            simple_tags(pair)
            for pair in (
                ("ContactId", contact),
                ("InstanceId", instance_id),
                ("MimeType", mime),
                (CUSTOMER, "1"),
                (AGENT, "2"),
                ("Events", "[]"),
            )
        ) + simple_tags(
            ("AWS_KINESISVIDEO_MILLIS_BEHIND_NOW", "78569"),
            ("AWS_KINESISVIDEO_CONTINUATION_TOKEN", fragment_number),
        )
        segment = info + tracks + kvs_tags + el(0x1F43B675, bytes(body), unknown_size=True)
        out += header + el(0x18538067, segment + after, unknown_size=True)
    return bytes(out)


def fragments_of(blocks: Sequence[KvsBlock], fragment_samples: int) -> list[list[KvsBlock]]:
    """Blocks grouped into fragments of ``fragment_samples`` by offset, in stream order."""
    grouped: dict[int, list[KvsBlock]] = {}
    for b in blocks:
        grouped.setdefault(b.offset // fragment_samples, []).append(b)
    return [grouped[k] for k in sorted(grouped)]
