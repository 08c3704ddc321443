"""Python face of the native jitter buffer (native/src/jb.h).

The per-packet and per-frame paths stay in C: ``insert`` hands the datagram bytes to C
(parse + insert in one call) and ``pull_into`` writes a frame into a caller-owned numpy
array. ``pull`` is the convenient form for tests and tools; it allocates a Frame.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from native import ffi, lib

# Codec names as SDP's rtpmap spells them -> the C enum. "L16LE" is ours: L16 in
# little-endian order, for transports that carry PCM that way (AudioSocket, audio_fork).
CODEC_IDS: dict[str, int] = {
    "PCMU": lib.CS_CODEC_PCMU,
    "PCMA": lib.CS_CODEC_PCMA,
    "L16": lib.CS_CODEC_L16,
    "L16LE": lib.CS_CODEC_L16LE,
    "G722": lib.CS_CODEC_G722,
    "opus": lib.CS_CODEC_OPUS,
    "CN": lib.CS_CODEC_CN,
    "telephone-event": lib.CS_CODEC_TELEPHONE_EVENT,
}

# RTP clock rates fixed by the codec's RTP payload format (RFC 3551, RFC 7587).
FIXED_CLOCK: dict[str, int] = {"PCMU": 8000, "PCMA": 8000, "G722": 8000, "opus": 48000}


class FrameFlag(IntEnum):
    NOT_STARTED = lib.CS_FRAME_NOT_STARTED
    NORMAL = lib.CS_FRAME_NORMAL
    CONCEALED = lib.CS_FRAME_CONCEALED
    CNG = lib.CS_FRAME_CNG
    PAUSED = lib.CS_FRAME_PAUSED


class PacketOutcome(IntEnum):
    IN_ORDER = lib.CS_PKT_IN_ORDER
    GAP = lib.CS_PKT_GAP
    REORDERED = lib.CS_PKT_REORDERED
    DUPLICATE = lib.CS_PKT_DUPLICATE
    LATE = lib.CS_PKT_LATE
    RESTART = lib.CS_PKT_RESTART
    SSRC_CHANGE = lib.CS_PKT_SSRC_CHANGE
    DTMF = lib.CS_PKT_DTMF
    CN = lib.CS_PKT_CN
    UNKNOWN_PT = lib.CS_PKT_UNKNOWN_PT
    BAD_PAYLOAD = lib.CS_PKT_BAD_PAYLOAD
    PAUSED = lib.CS_PKT_PAUSED
    JUMP = lib.CS_PKT_JUMP
    MALFORMED = 0  # the RTP header itself was rejected (see rtp_error)


# Indexed by the C return value: an enum lookup without constructing one per packet.
_OUTCOME_BY_CODE: tuple[PacketOutcome, ...] = tuple(sorted(PacketOutcome, key=lambda o: o.value))
assert [o.value for o in _OUTCOME_BY_CODE] == list(range(len(_OUTCOME_BY_CODE)))

ACCEPTED = frozenset(
    {
        PacketOutcome.IN_ORDER,
        PacketOutcome.GAP,
        PacketOutcome.REORDERED,
        PacketOutcome.RESTART,
        PacketOutcome.SSRC_CHANGE,
    }
)


@dataclass(frozen=True, slots=True)
class PayloadType:
    """One entry of a leg's payload-type table (from the SDP rtpmap).

    ``clock_rate`` is the RTP clock (G.722: 8000 over 16 kHz audio; Opus: 48000 whatever
    the audio); 0 means the codec's fixed clock (8000 for L16). ``channels`` matters for
    L16 (byte layout) and is down-mixed; ``fec`` lets Opus recover a lost packet from the
    next one's in-band FEC (else its PLC alone conceals the loss).
    """

    pt: int
    codec: str  # an encoding name of CODEC_IDS
    clock_rate: int = 0
    channels: int = 1
    fec: bool = True

    def __post_init__(self) -> None:
        if self.codec not in CODEC_IDS:
            known = ", ".join(CODEC_IDS)
            raise ValueError(f"unknown codec {self.codec!r} (known: {known})")
        fixed = FIXED_CLOCK.get(self.codec)
        if self.clock_rate == 0:
            object.__setattr__(self, "clock_rate", fixed or 8000)
        elif fixed is not None and self.clock_rate != fixed:
            raise ValueError(f"{self.codec} runs an RTP clock of {fixed} Hz, not {self.clock_rate}")
        if not 1 <= self.channels <= 2:
            raise ValueError(f"{self.codec}: 1 or 2 channels, not {self.channels}")


DEFAULT_PAYLOAD_TYPES: tuple[PayloadType, ...] = (
    PayloadType(0, "PCMU"),
    PayloadType(8, "PCMA"),
    PayloadType(13, "CN"),
    PayloadType(101, "telephone-event"),
)


@dataclass(frozen=True, slots=True)
class JitterConfig:
    """Per-leg settings. Delays bound the adaptive target; capacity bounds memory."""

    out_rate: int = 8000
    capacity_ms: int = 2000
    min_delay_ms: int = 40
    max_delay_ms: int = 400
    start_delay_ms: int = 80
    payload_types: tuple[PayloadType, ...] = DEFAULT_PAYLOAD_TYPES
    dtmf_key: int = field(default_factory=lambda: secrets.randbits(64))

    def to_c(self) -> Any:
        cfg = ffi.new("cs_jb_config *")
        cfg.out_rate = self.out_rate
        cfg.capacity_ms = self.capacity_ms
        cfg.min_delay_ms = self.min_delay_ms
        cfg.max_delay_ms = self.max_delay_ms
        cfg.start_delay_ms = self.start_delay_ms
        if not 0 < len(self.payload_types) <= 16:
            raise ValueError(f"1 to 16 payload types, got {len(self.payload_types)}")
        cfg.n_pts = len(self.payload_types)
        for i, p in enumerate(self.payload_types):
            cfg.pts[i].pt = p.pt
            cfg.pts[i].codec = CODEC_IDS[p.codec]
            cfg.pts[i].clock_rate = p.clock_rate
            cfg.pts[i].channels = p.channels
            cfg.pts[i].flags = 0 if p.fec else lib.CS_PT_NO_FEC
        cfg.dtmf_key = self.dtmf_key & (2**64 - 1)
        return cfg


@dataclass(frozen=True, slots=True)
class Frame:
    pos: int
    flag: FrameFlag
    real_mask: int
    rtp_ts: int | None
    ssrc: int
    dtx: bool
    concealed_samples: int
    target_delay_ms: int
    buffer_level_ms: int
    pcm: npt.NDArray[np.int16]


@dataclass(frozen=True, slots=True)
class DtmfEvent:
    """A telephone-event, digit withheld: `token` only compares equal within a call."""

    start_pos: int
    first_seen_ns: int
    end_seen_ns: int
    duration_ms: int
    token: int
    volume: int
    ended: bool
    kind: int = 0  # 0 digit, 1 navigation (* or #), 2 other (A-D, flash): never the digit


_STATS_FIELDS = tuple(name for name, _ in ffi.typeof("cs_jb_stats").fields if name != "wait_hist")


def stats_dict(stats: Any) -> dict[str, int]:
    """Counters of a cs_jb_stats struct as a dict (wait_hist excluded)."""
    return {name: int(getattr(stats, name)) for name in _STATS_FIELDS}


class JitterBuffer:
    """One leg's jitter buffer. Not thread-safe (the ingest thread wraps it in a lock)."""

    def __init__(self, config: JitterConfig | None = None) -> None:
        self.config = config or JitterConfig()
        handle = lib.cs_jb_new(self.config.to_c())
        if handle == ffi.NULL:
            raise ValueError(
                "jitter buffer: invalid configuration (out_rate a multiple of 400 Hz up to "
                "48000, and one libopus decodes to if Opus is listed; L16 clocks multiples of "
                "400 Hz or 44100 to an 8 or 16 kHz leg; PCMU/PCMA/G722 clock 8000, Opus 48000; "
                "min_delay <= max_delay)"
            )
        self._jb: Any = ffi.gc(handle, lib.cs_jb_free)
        self.samples_per_frame = int(lib.cs_jb_samples_per_frame(self._jb))
        self._info: Any = ffi.new("cs_frame_info *")
        self._stats: Any = lib.cs_jb_get_stats(self._jb)
        self.rtp_error = 0
        self._pcm_array: npt.NDArray[np.int16] | None = None
        self._pcm_ptr: Any = None

    def insert(self, datagram: bytes, now_ns: int) -> PacketOutcome:
        """Parse and insert one RTP datagram; a bad header is MALFORMED (see rtp_error)."""
        result: int = lib.cs_jb_insert_datagram(self._jb, datagram, len(datagram), now_ns)
        if result < 0:
            self.rtp_error = -result
            return PacketOutcome.MALFORMED
        return _OUTCOME_BY_CODE[result]

    def pull_into(self, now_ns: int, pcm: npt.NDArray[np.int16]) -> int:
        """Pull one frame into `pcm` (int16, samples_per_frame long); returns the flag.
        Frame metadata is in `last_info` until the next pull."""
        if pcm is not self._pcm_array:  # wrap a new buffer once, then reuse the pointer
            if pcm.dtype != np.int16 or pcm.size < self.samples_per_frame:
                raise ValueError("pull_into: pcm must be int16 with samples_per_frame samples")
            self._pcm_ptr = ffi.cast("int16_t *", ffi.from_buffer(pcm, require_writable=True))
            self._pcm_array = pcm
        flag: int = lib.cs_jb_pull(self._jb, now_ns, self._pcm_ptr, self._info)
        return flag

    @property
    def last_info(self) -> Any:
        return self._info

    def pull(self, now_ns: int) -> Frame:
        pcm = np.zeros(self.samples_per_frame, dtype=np.int16)
        self.pull_into(now_ns, pcm)
        i = self._info
        return Frame(
            pos=int(i.pos),
            flag=FrameFlag(i.flag),
            real_mask=int(i.real_mask),
            rtp_ts=int(i.rtp_ts) if i.has_rtp_ts else None,
            ssrc=int(i.ssrc),
            dtx=bool(i.dtx),
            concealed_samples=int(i.concealed_samples),
            target_delay_ms=int(i.target_delay_ms),
            buffer_level_ms=int(i.buffer_level_ms),
            pcm=pcm,
        )

    def set_paused(self, paused: bool) -> None:
        lib.cs_jb_set_paused(self._jb, 1 if paused else 0)

    def stats(self) -> dict[str, int]:
        return stats_dict(self._stats)

    def wait_histogram(self) -> npt.NDArray[np.uint64]:
        """Zero-copy view of the 1 ms buffer-wait histogram (last bucket: >= 500 ms)."""
        buf = ffi.buffer(ffi.addressof(self._stats, "wait_hist"))
        return np.frombuffer(buf, dtype=np.uint64)

    def take_dtmf(self, max_events: int = 32) -> list[DtmfEvent]:
        out = ffi.new("cs_dtmf_event[]", max_events)
        n = int(lib.cs_jb_take_dtmf(self._jb, out, max_events))
        return [
            DtmfEvent(
                start_pos=int(e.start_pos),
                first_seen_ns=int(e.first_seen_ns),
                end_seen_ns=int(e.end_seen_ns),
                duration_ms=int(e.duration_ms),
                token=int(e.token),
                volume=int(e.volume),
                ended=bool(e.ended),
                kind=int(e.kind),
            )
            for e in (out[k] for k in range(n))
        ]
