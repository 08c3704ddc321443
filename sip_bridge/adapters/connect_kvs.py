"""Amazon Connect live media streaming, listen-only: one contact's Kinesis Video Streams
media (Matroska fragments) into two pushed legs.

What Connect writes (and what this reads): one KVS stream per active contact, reused
by later contacts; each fragment an EBML header and a Segment with two audio tracks,
``AUDIO_FROM_CUSTOMER`` (what the customer says: the ``customer`` leg, external) and
``AUDIO_TO_CUSTOMER`` (what the customer hears, the agent and prompts: the ``agent``
leg, internal), both ``role_source`` ``vendor_track``; 16-bit little-endian PCM, mono,
8 kHz. Connect declares the tracks as ``A_AAC`` although the payload is PCM: the
``MimeType`` tag (``audio/L16;rate=8000;channels=1;``) is the true statement, so a
Connect-named ``A_AAC`` track is taken as that profile and a MimeType tag that says
otherwise stops the contact (``unsupported_format``). ``A_PCM/INT/LIT`` tracks (any
Matroska muxer) use their own rate; a rate the native core does not decode is refused.
Tags per fragment: ``AWS_KINESISVIDEO_FRAGMENT_NUMBER`` (before the Cluster: fragments
before the contact's ``start_fragment`` are skipped), then after the Cluster
``ContactId`` (a different contact on the reused stream ends ours:
``contact_changed``; the audio of at most that one fragment has been pushed by then),
``InstanceId``, ``MimeType`` and the track-name -> number tags (used when a track has
no name). ``AWS_KINESISVIDEO_EXCEPTION_*`` tags (GetMedia's in-band errors) end the
contact (``kvs_error``).

Timing: a block's time is its cluster timecode plus its relative timecode, in
TimecodeScale units. Sample offsets run from the first block of the contact (both legs
on one timeline, one RTP timestamp origin), and a block within one timecode tick of
where its track's previous block ended continues it exactly (timecodes are whole
milliseconds; a 20 ms block is 160 samples); otherwise its own time places it, so gaps,
reordering and duplicates reach the jitter buffer as such (via the packetizer). Blocks
are released at the pace of their timecodes (a backlog from a past start fragment is
read no faster than real time, which also bounds what is read ahead).

The stream's end ends the call (``end_of_stream``); malformed Matroska ends it with
``bad_media`` (counted by the reader's reason); nothing here touches another contact.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from detectors.alert_schema import LegRole
from sip_bridge.adapters.connect_media import aclose
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
from sip_bridge.adapters.packetizer import Packetizer
from sip_bridge.adapters.pcm import L16_PTS
from sip_bridge.adapters.ws_common import AdapterStats
from sip_bridge.media import PushedLeg

log = logging.getLogger(__name__)

CUSTOMER_TRACK = "AUDIO_FROM_CUSTOMER"
AGENT_TRACK = "AUDIO_TO_CUSTOMER"
# track name -> (leg label, role)
TRACK_LEGS: dict[str, tuple[str, LegRole]] = {
    CUSTOMER_TRACK: ("customer", LegRole.EXTERNAL),
    AGENT_TRACK: ("agent", LegRole.INTERNAL),
}
CONNECT_CODEC = "A_AAC"  # what Connect declares for its PCM tracks
PCM_CODEC = "A_PCM/INT/LIT"
_NS = 1_000_000_000


class ContactEndedError(Exception):
    """Stops one contact: ``reason`` is the call's end reason, ``bad`` the counter the
    stream's fault goes under (empty when it is nobody's fault)."""

    def __init__(self, reason: str, bad: str = "", detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.bad = bad


@dataclass(slots=True)
class _Track:
    label: str
    packetizer: Packetizer
    rate: int
    tolerance: int  # samples within which a block continues the previous one
    next_offset: int | None = None


@dataclass(frozen=True, slots=True)
class PendingBlock:
    track: _Track
    offset: int  # sample offset on the contact's timeline
    media_s: float  # seconds since the contact's first block
    data: bytes


def mime_format(value: str) -> tuple[int, int] | None:
    """``audio/L16;rate=8000;channels=1;`` -> (8000, 1); None if not L16."""
    kind, *params = [p.strip() for p in value.split(";") if p.strip()]
    if kind.lower() != "audio/l16":
        return None
    fields = dict(p.partition("=")[::2] for p in params)
    try:
        return int(fields.get("rate", "8000")), int(fields.get("channels", "1"))
    except ValueError:
        return None


@dataclass
class ContactStream:
    """The Matroska events of one contact -> blocks placed on its legs' timeline."""

    contact_id: str
    legs: dict[str, PushedLeg]  # by label
    rates: tuple[int, ...]  # L16 rates the legs decode
    stats: AdapterStats
    start_fragment: int | None = None
    ts0: int = field(default_factory=lambda: secrets.randbits(32))
    _scale: int = 1_000_000
    _tracks_by_number: dict[int, TrackInfo] = field(default_factory=dict)
    _names_by_tag: dict[int, str] = field(default_factory=dict)
    _tracks: dict[str, _Track] = field(default_factory=dict)  # by track name
    _mime: tuple[int, int] | None = None
    _origin_ns: int | None = None
    _skipping: bool = False

    def handle(self, event: MkvEvent) -> PendingBlock | None:
        if isinstance(event, Block):
            return self._block(event)
        if isinstance(event, Tag):
            self._tag(event)
        elif isinstance(event, ClusterStart):
            self.stats.events["cluster"] += 1
        elif isinstance(event, TrackInfo):
            self._tracks_by_number[event.number] = event
        elif isinstance(event, SegmentInfo):
            self._scale = event.timecode_scale
        elif isinstance(event, FragmentStart):
            self.stats.events["fragment"] += 1
            self._skipping = False
            self._scale = 1_000_000
        return None

    def push(self, block: PendingBlock) -> None:
        t = block.track
        t.packetizer.write(block.data, time.monotonic_ns(), block.offset)
        end = block.offset + len(block.data) // 2
        if t.next_offset is None or end > t.next_offset:
            t.next_offset = end
        self.stats.messages += 1
        self.stats.audio_bytes += len(block.data)

    @property
    def closed(self) -> bool:
        return all(leg.closed for leg in self.legs.values())

    # ---- events ------------------------------------------------------------------------

    def _tag(self, tag: Tag) -> None:
        name, value = tag.name, tag.value.strip()
        self.stats.events["tag"] += 1
        if name == "AWS_KINESISVIDEO_FRAGMENT_NUMBER" and value.isdigit():
            if self.start_fragment is not None and int(value) < self.start_fragment:
                self._skipping = True
                self.stats.events["fragment_skipped"] += 1
        elif name == "ContactId":
            if value != self.contact_id and not self._skipping:
                raise ContactEndedError("contact_changed", detail="the stream moved on")
        elif name == "MimeType":
            fmt = mime_format(value)
            if fmt is None or fmt[1] != 1:
                raise ContactEndedError("bad_media", "unsupported_format", f"MimeType {value!r}")
            if any(t.rate != fmt[0] for t in self._tracks.values()):
                raise ContactEndedError("bad_media", "unsupported_format", "rate changed")
            self._mime = fmt
        elif name in TRACK_LEGS and value.isdigit():
            self._names_by_tag[int(value)] = name
        elif name.startswith("AWS_KINESISVIDEO_EXCEPTION"):
            raise ContactEndedError("kvs_error", "kvs_error", f"{name}={value[:200]}")

    def _block(self, block: Block) -> PendingBlock | None:
        if self._skipping:
            self.stats.events["block_skipped"] += 1
            return None
        info = self._tracks_by_number.get(block.track)
        name = (info.name if info is not None else "") or self._names_by_tag.get(block.track, "")
        track = self._tracks.get(name)
        if track is None:
            if name not in TRACK_LEGS:
                self.stats.events["other_track"] += 1
                return None
            track = self._open_track(name, info)
        t_ns = block.timecode * self._scale
        if self._origin_ns is None:
            self._origin_ns = t_ns
        if t_ns < self._origin_ns:
            self.stats.events["before_start"] += 1
            return None
        offset = ((t_ns - self._origin_ns) * track.rate + _NS // 2) // _NS
        if track.next_offset is not None and abs(offset - track.next_offset) <= track.tolerance:
            offset = track.next_offset
        media_s = (t_ns - self._origin_ns) / _NS
        return PendingBlock(track, offset, media_s, block.data)

    def _open_track(self, name: str, info: TrackInfo | None) -> _Track:
        rate = self._rate(name, info)
        if rate not in self.rates or rate not in L16_PTS:
            raise ContactEndedError("bad_media", "unsupported_rate", f"{name} at {rate} Hz")
        label = TRACK_LEGS[name][0]
        packetizer = Packetizer(self.legs[label], L16_PTS[rate], rate, 2, ts0=self.ts0)
        tolerance = max(1, -(-self._scale * rate // _NS))  # one timecode tick, rounded up
        track = _Track(label, packetizer, rate, tolerance)
        self._tracks[name] = track
        return track

    def _rate(self, name: str, info: TrackInfo | None) -> int:
        if self._mime is not None:
            return self._mime[0]
        codec = info.codec_id if info is not None else CONNECT_CODEC
        if codec == PCM_CODEC and info is not None:
            if (info.channels or 1) != 1 or (info.bit_depth or 16) != 16:
                raise ContactEndedError("bad_media", "unsupported_format", f"{name}: not mono s16")
            return int(info.sampling_frequency or 8000)
        if codec == CONNECT_CODEC:  # Connect's profile, checked when its MimeType tag comes
            return 8000
        raise ContactEndedError("bad_media", "unsupported_format", f"{name}: codec {codec!r}")


async def run_contact(
    stream: ContactStream, media: AsyncIterator[bytes], reader: MkvReader | None = None
) -> ContactEndedError | None:
    """Read ``media`` to its end (or until the contact stops), pushing blocks at the pace
    of their timecodes. Returns why it stopped; None when the call was ended elsewhere
    (hang-up by the API, RTP timeout, drain)."""
    reader = reader or MkvReader()
    anchor: float | None = None  # monotonic time of media second 0
    unknown = 0
    try:
        async for chunk in media:
            events = reader.feed(chunk)
            if reader.unknown_elements != unknown:
                stream.stats.events["unknown_element"] += reader.unknown_elements - unknown
                unknown = reader.unknown_elements
            for event in events:
                pending = stream.handle(event)
                if pending is None:
                    continue
                now = time.monotonic()
                if anchor is None:
                    anchor = now - pending.media_s
                delay = anchor + pending.media_s - now
                if delay > 0:
                    await asyncio.sleep(delay)
                if stream.closed:
                    return None
                stream.push(pending)
            if stream.closed:
                return None
        for event in reader.close():
            if (pending := stream.handle(event)) is not None:
                stream.push(pending)
    except MkvError as exc:
        log.info("contact %s: bad media (%s)", stream.contact_id, exc)
        return ContactEndedError("bad_media", exc.reason, str(exc))
    except ContactEndedError as exc:
        return exc
    finally:
        await aclose(media)
    return ContactEndedError("end_of_stream")
