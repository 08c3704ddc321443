"""A streaming Matroska (MKV/WebM, EBML) reader for audio tracks: pure Python, bounded
memory, fed arbitrary byte chunks (a file, a FIFO, an HTTP or Kinesis Video Streams
GetMedia body).

EBML: every element is an ID (a 1-4 byte variable-length integer kept with its length
marker, e.g. ``0x1A45DFA3``), a size (a 1-8 byte variable-length integer; all value
bits set = unknown size, used by live producers for Segment and Cluster) and a payload.
Master elements hold elements; an unknown-size master ends where an element arrives
that cannot be its child (a new Cluster, Tags at Segment level, a new EBML header).

What comes out (:data:`MkvEvent`): :class:`FragmentStart` for each EBML header (KVS
GetMedia returns one EBML header + Segment per fragment), :class:`SegmentInfo`,
:class:`TrackInfo` per TrackEntry, :class:`ClusterStart`, :class:`Block` per
SimpleBlock or BlockGroup Block (absolute timecode = cluster timecode + the block's
signed 16-bit relative one, in TimecodeScale units) and :class:`Tag` per SimpleTag
(TagName/TagString; nested ones too). Everything else is skipped without buffering.

Memory: only one leaf element is ever held (a block at most ``max_block`` bytes, text
at most ``max_text``), plus the partial header of the next one; masters are entered,
never buffered, and skipped elements are discarded as they stream past. Faults raise
:class:`MkvError` with a ``reason`` (``bad_id``, ``bad_size``, ``oversized``,
``overrun``, ``unexpected_element``, ``unknown_size``, ``bad_doctype``, ``bad_block``,
``laced``, ``truncated``), from the call after the one that met the fault (whose
events before it are returned); the reader is then unusable. IDs we do not know inside a
master are skipped (the Matroska rule) and counted in :attr:`MkvReader.unknown_elements`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

# Element IDs (Matroska / EBML specifications)
EBML = 0x1A45DFA3
DOC_TYPE = 0x4282
SEGMENT = 0x18538067
INFO = 0x1549A966
TIMECODE_SCALE = 0x2AD7B1
TRACKS = 0x1654AE6B
TRACK_ENTRY = 0xAE
TRACK_NUMBER = 0xD7
TRACK_TYPE = 0x83
NAME = 0x536E
CODEC_ID = 0x86
CODEC_PRIVATE = 0x63A2
AUDIO = 0xE1
SAMPLING_FREQUENCY = 0xB5
CHANNELS = 0x9F
BIT_DEPTH = 0x6264
CLUSTER = 0x1F43B675
TIMECODE = 0xE7
SIMPLE_BLOCK = 0xA3
BLOCK_GROUP = 0xA0
BLOCK = 0xA1
TAGS = 0x1254C367
TAG = 0x7373
SIMPLE_TAG = 0x67C8
TAG_NAME = 0x45A3
TAG_STRING = 0x4487
VOID = 0xEC
CRC32 = 0xBF

_ROOT = 0  # the parent of top-level elements
_ANY = -1  # Void and CRC-32 may sit in any master
_PARENTS: dict[int, frozenset[int]] = {
    EBML: frozenset({_ROOT}),
    SEGMENT: frozenset({_ROOT}),
    INFO: frozenset({SEGMENT}),
    TRACKS: frozenset({SEGMENT}),
    CLUSTER: frozenset({SEGMENT}),
    TAGS: frozenset({SEGMENT}),
    0x114D9B74: frozenset({SEGMENT}),  # SeekHead
    0x1C53BB6B: frozenset({SEGMENT}),  # Cues
    0x1043A770: frozenset({SEGMENT}),  # Chapters
    0x1941A469: frozenset({SEGMENT}),  # Attachments
    TRACK_ENTRY: frozenset({TRACKS}),
    AUDIO: frozenset({TRACK_ENTRY}),
    BLOCK_GROUP: frozenset({CLUSTER}),
    TAG: frozenset({TAGS}),
    SIMPLE_TAG: frozenset({TAG, SIMPLE_TAG}),
    DOC_TYPE: frozenset({EBML}),
    TIMECODE_SCALE: frozenset({INFO}),
    TRACK_NUMBER: frozenset({TRACK_ENTRY}),
    TRACK_TYPE: frozenset({TRACK_ENTRY}),
    NAME: frozenset({TRACK_ENTRY}),
    CODEC_ID: frozenset({TRACK_ENTRY}),
    CODEC_PRIVATE: frozenset({TRACK_ENTRY}),
    SAMPLING_FREQUENCY: frozenset({AUDIO}),
    CHANNELS: frozenset({AUDIO}),
    BIT_DEPTH: frozenset({AUDIO}),
    TIMECODE: frozenset({CLUSTER}),
    SIMPLE_BLOCK: frozenset({CLUSTER}),
    BLOCK: frozenset({BLOCK_GROUP}),
    TAG_NAME: frozenset({SIMPLE_TAG}),
    TAG_STRING: frozenset({SIMPLE_TAG}),
    VOID: frozenset({_ANY}),
    CRC32: frozenset({_ANY}),
}
# known elements we never read (header fields, UIDs, flags, cue data ...): skipped
# wherever they sit, and not counted as unknown
_KNOWN_SKIPPED = (
    *(0x4286, 0x42F7, 0x42F2, 0x42F3, 0x4287, 0x4285),  # EBML header fields
    *(0x73A4, 0x7384, 0x3CB923, 0x3EB923, 0x4444, 0x4489, 0x4461, 0x7BA9, 0x4D80, 0x5741),
    *(0x73C5, 0xB9, 0x88, 0x55AA, 0x9C, 0x23E383, 0x22B59C, 0x22B59D, 0x56AA, 0x56BB),
    *(0x258688, 0x6DE7, 0x55EE, 0x23314F, 0xE0, 0x6D80, 0x78B5, 0x7D7B, 0x55AB, 0x55AC),
    *(0xA7, 0xAB, 0x5854, 0xAF, 0x9B, 0xFB, 0x75A2, 0x75A1, 0xFA, 0xA4),  # Cluster, BlockGroup
    *(0x63C0, 0x447A, 0x447B, 0x4484, 0x4485),  # Targets, SimpleTag fields
)
_PARENTS.update(dict.fromkeys(_KNOWN_SKIPPED, frozenset({_ANY})))
# masters we enter (their children are read); known IDs not here and not read are skipped
_ENTER = frozenset(
    {EBML, SEGMENT, INFO, TRACKS, TRACK_ENTRY, AUDIO, CLUSTER, BLOCK_GROUP, TAGS, TAG, SIMPLE_TAG}
)
_UNKNOWN_SIZE_OK = frozenset({SEGMENT, CLUSTER})
_UINTS = frozenset({TIMECODE_SCALE, TRACK_NUMBER, TRACK_TYPE, CHANNELS, BIT_DEPTH, TIMECODE})
_TEXTS = frozenset({DOC_TYPE, NAME, CODEC_ID, TAG_NAME, TAG_STRING})
_BLOCKS = frozenset({SIMPLE_BLOCK, BLOCK})
_READ = _UINTS | _TEXTS | _BLOCKS | {CODEC_PRIVATE, SAMPLING_FREQUENCY}
DOC_TYPES = frozenset({"matroska", "webm"})


class MkvError(ValueError):
    """The stream is not Matroska we can read; ``reason`` is the counter's name."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class FragmentStart:
    """An EBML header: a new Matroska document (in KVS, a new fragment)."""

    doc_type: str


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    timecode_scale: int  # nanoseconds per timecode tick (default 1 ms)


@dataclass(frozen=True, slots=True)
class TrackInfo:
    number: int
    name: str
    codec_id: str
    codec_private: bytes = b""
    sampling_frequency: float | None = None
    channels: int | None = None
    bit_depth: int | None = None


@dataclass(frozen=True, slots=True)
class ClusterStart:
    timecode: int


@dataclass(frozen=True, slots=True)
class Block:
    track: int
    timecode: int  # absolute, in TimecodeScale ticks
    keyframe: bool
    data: bytes


@dataclass(frozen=True, slots=True)
class Tag:
    name: str
    value: str


MkvEvent = FragmentStart | SegmentInfo | TrackInfo | ClusterStart | Block | Tag


@dataclass(slots=True)
class _Open:
    eid: int
    end: int | None  # absolute stream offset where it ends; None: unknown size
    fields: dict[int, Any] = field(default_factory=dict)


def _vint(buf: bytearray, at: int, what: str) -> tuple[int, int, bool] | None:
    """(value without the length marker, length, all value bits set) of the
    variable-length integer at ``buf[at]``; None when the buffer ends inside it."""
    if at >= len(buf):
        return None
    first = buf[at]
    if first == 0:
        raise MkvError(f"bad_{what}", f"{what} longer than 8 bytes at a zero byte")
    length = 9 - first.bit_length()
    if at + length > len(buf):
        return None
    value = first & (0xFF >> length)
    for b in buf[at + 1 : at + length]:
        value = (value << 8) | b
    return value, length, value == (1 << (7 * length)) - 1


class MkvReader:
    """Incremental reader: :meth:`feed` chunks, get the events they complete; :meth:`close`
    at the end of the stream (raises ``truncated`` if it ended inside an element)."""

    def __init__(
        self, *, max_block: int = 256 * 1024, max_text: int = 64 * 1024, max_skip: int = 16 << 20
    ) -> None:
        self.max_block = max_block
        self.max_text = max_text
        self.max_skip = max_skip
        self.unknown_elements = 0  # IDs we do not know, skipped
        self.position = 0  # stream offset of the next unread byte
        self._buf = bytearray()
        self._off = 0  # bytes of _buf already consumed
        self._skip = 0  # payload bytes still to discard
        self._stack: list[_Open] = []
        self._cluster_tc: int | None = None
        self._error: MkvError | None = None

    # ---- public --------------------------------------------------------------------

    def feed(self, data: bytes) -> list[MkvEvent]:
        """The events ``data`` completes. A fault is raised by the next call (``feed`` or
        ``close``), so the events before it in the same chunk are still delivered."""
        if self._error is not None:
            raise self._error
        if self._off and self._off >= len(self._buf) // 2:
            del self._buf[: self._off]
            self._off = 0
        self._buf += data
        out: list[MkvEvent] = []
        try:
            while self._step(out):
                pass
        except MkvError as exc:
            self._error = exc
        return out

    def close(self) -> list[MkvEvent]:
        """End of stream: close unknown-size masters; raise if inside an element."""
        if self._error is not None:
            raise self._error
        out: list[MkvEvent] = []
        pending = len(self._buf) - self._off
        if self._skip or pending:
            raise MkvError("truncated", f"stream ended inside an element at byte {self.position}")
        while self._stack:
            top = self._stack[-1]
            if top.end is not None and top.end > self.position:
                raise MkvError("truncated", f"stream ended inside element {top.eid:#x}")
            self._close_top(out)
        return out

    # ---- parsing ---------------------------------------------------------------------

    def _step(self, out: list[MkvEvent]) -> bool:
        if self._skip:
            n = min(self._skip, len(self._buf) - self._off)
            self._off += n
            self.position += n
            self._skip -= n
            if self._skip:
                return False
        while self._stack and self._stack[-1].end == self.position:
            self._close_top(out)
        head = _vint(self._buf, self._off, "id")
        if head is None:
            return False
        id_value, id_len, id_ones = head
        eid = int.from_bytes(self._buf[self._off : self._off + id_len], "big")
        if id_len > 4 or id_ones or id_value == 0:
            raise MkvError("bad_id", f"element ID {eid:#x} ({id_len} bytes) is not valid EBML")
        size_v = _vint(self._buf, self._off + id_len, "size")
        if size_v is None:
            return False
        size, size_len, unknown = size_v
        hlen = id_len + size_len
        self._place(eid, unknown, out)
        parent = self._stack[-1] if self._stack else None
        end = None if unknown else self.position + hlen + size
        if end is not None and parent is not None and parent.end is not None and end > parent.end:
            raise MkvError("overrun", f"element {eid:#x} runs past its parent {parent.eid:#x}")
        if eid in _ENTER:
            self._consume(hlen)
            self._open(eid, end, out)
            return True
        if unknown:
            raise MkvError("unknown_size", f"element {eid:#x} of unknown size")
        if eid not in _READ:
            if size > self.max_skip:
                raise MkvError("oversized", f"element {eid:#x} of {size} bytes")
            self._consume(hlen)
            self._skip = size
            return True
        limit = self.max_block if eid in _BLOCKS else self.max_text
        if size > limit:
            raise MkvError("oversized", f"element {eid:#x} of {size} bytes (limit {limit})")
        if len(self._buf) - self._off < hlen + size:
            return False
        payload = bytes(self._buf[self._off + hlen : self._off + hlen + size])
        self._consume(hlen + size)
        self._leaf(eid, payload, out)
        return True

    def _consume(self, n: int) -> None:
        self._off += n
        self.position += n

    def _place(self, eid: int, unknown: bool, out: list[MkvEvent]) -> None:
        """Close unknown-size masters the element cannot belong to; refuse an element
        out of place. Unknown IDs are children of the current master (then skipped)."""
        parents = _PARENTS.get(eid)
        if parents is None:
            if not self._stack:
                raise MkvError("unexpected_element", f"unknown top-level element {eid:#x}")
            if unknown:
                raise MkvError("unknown_size", f"unknown element {eid:#x} of unknown size")
            self.unknown_elements += 1
            return
        if _ANY in parents and self._stack:
            return
        while self._stack and self._stack[-1].eid not in parents:
            if self._stack[-1].end is not None:
                where = f"{self._stack[-1].eid:#x}"
                raise MkvError("unexpected_element", f"element {eid:#x} inside {where}")
            self._close_top(out)
        if not self._stack and _ROOT not in parents:
            raise MkvError("unexpected_element", f"element {eid:#x} at the top level")
        if unknown and eid not in _UNKNOWN_SIZE_OK:
            raise MkvError("unknown_size", f"element {eid:#x} of unknown size")

    def _open(self, eid: int, end: int | None, out: list[MkvEvent]) -> None:
        self._stack.append(_Open(eid, end))
        if eid == CLUSTER:
            self._cluster_tc = None
        if end == self.position:  # an empty master
            self._close_top(out)

    def _leaf(self, eid: int, payload: bytes, out: list[MkvEvent]) -> None:
        top = self._stack[-1]
        if eid in _UINTS:
            if len(payload) > 8:
                raise MkvError("bad_size", f"integer element {eid:#x} of {len(payload)} bytes")
            value: Any = int.from_bytes(payload, "big")
        elif eid in _TEXTS:
            value = payload.rstrip(b"\0").decode("utf-8", "replace")
        elif eid == SAMPLING_FREQUENCY:
            if len(payload) not in (0, 4, 8):
                raise MkvError("bad_size", f"float element of {len(payload)} bytes")
            value = (
                struct.unpack(">f" if len(payload) == 4 else ">d", payload)[0] if payload else 0.0
            )
        else:
            value = payload
        if eid == TIMECODE:
            self._cluster_tc = value
            out.append(ClusterStart(value))
        elif eid in _BLOCKS:
            out.append(self._block(payload))
        else:
            top.fields[eid] = value

    def _block(self, payload: bytes) -> Block:
        if self._cluster_tc is None:
            raise MkvError("bad_block", "block before its cluster's timecode")
        buf = bytearray(payload[:8])
        track = _vint(buf, 0, "block")
        if track is None or len(payload) < track[1] + 3:
            raise MkvError("bad_block", f"block header truncated ({len(payload)} bytes)")
        number, n, _ = track
        rel = struct.unpack_from(">h", payload, n)[0]
        flags = payload[n + 2]
        if flags & 0x06:
            raise MkvError("laced", f"laced block on track {number} (lacing unsupported)")
        return Block(number, self._cluster_tc + rel, bool(flags & 0x80), payload[n + 3 :])

    def _close_top(self, out: list[MkvEvent]) -> None:
        top = self._stack.pop()
        f = top.fields
        if top.eid == EBML:
            doc_type = f.get(DOC_TYPE, "matroska")
            if doc_type not in DOC_TYPES:
                raise MkvError("bad_doctype", f"DocType {doc_type!r}")
            out.append(FragmentStart(doc_type))
        elif top.eid == INFO:
            out.append(SegmentInfo(f.get(TIMECODE_SCALE) or 1_000_000))
        elif top.eid == AUDIO and self._stack:
            self._stack[-1].fields.update(f)
        elif top.eid == TRACK_ENTRY:
            if TRACK_NUMBER not in f:
                raise MkvError("bad_track", "TrackEntry without a TrackNumber")
            out.append(
                TrackInfo(
                    number=f[TRACK_NUMBER],
                    name=f.get(NAME, ""),
                    codec_id=f.get(CODEC_ID, ""),
                    codec_private=f.get(CODEC_PRIVATE, b""),
                    sampling_frequency=f.get(SAMPLING_FREQUENCY),
                    channels=f.get(CHANNELS),
                    bit_depth=f.get(BIT_DEPTH),
                )
            )
        elif top.eid == SIMPLE_TAG and TAG_NAME in f:
            out.append(Tag(f[TAG_NAME], f.get(TAG_STRING, "")))
        elif top.eid == CLUSTER:
            self._cluster_tc = None
