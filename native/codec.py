"""G.711 conversion and RTP/RTCP wire parsing, backed by the native core.

The parsers are the C ones (``native/src/rtp.c``) so Python and the media path agree on
what a valid packet is; these wrappers only copy the result into frozen dataclasses and
turn error codes into exact messages. ``RtpHeader.__bytes__`` is a pure-Python builder
for tests and tools.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from native import ffi, lib

Pcm16 = npt.NDArray[np.int16]
BytesLike = bytes | bytearray | memoryview

__all__ = [
    "PacketError",
    "ReportBlock",
    "RtcpSummary",
    "RtpHeader",
    "SenderReport",
    "alaw_decode",
    "alaw_encode",
    "build_rtp",
    "parse_rtcp",
    "parse_rtp",
    "ulaw_decode",
    "ulaw_encode",
]


# ---- G.711 ---------------------------------------------------------------------------


def _decode(fn: Callable[..., None], data: BytesLike) -> Pcm16:
    n = memoryview(data).nbytes
    out = np.empty(n, dtype=np.int16)
    if n:
        fn(ffi.from_buffer("uint8_t[]", data), ffi.from_buffer("int16_t[]", out), n)
    return out


def _encode(fn: Callable[..., None], samples: Pcm16) -> bytes:
    if samples.dtype != np.int16:
        raise TypeError(f"G.711 encode needs int16 samples, got {samples.dtype}")
    if samples.ndim != 1:
        raise ValueError(f"G.711 encode needs a 1-D array, got {samples.ndim}-D")
    pcm = np.ascontiguousarray(samples)
    out = bytearray(pcm.size)
    if pcm.size:
        fn(ffi.from_buffer("int16_t[]", pcm), ffi.from_buffer("uint8_t[]", out), pcm.size)
    return bytes(out)


def ulaw_decode(data: BytesLike) -> Pcm16:
    """µ-law codes to 16-bit linear PCM, one sample per byte."""
    return _decode(lib.cs_ulaw_decode, data)


def alaw_decode(data: BytesLike) -> Pcm16:
    """A-law codes to 16-bit linear PCM, one sample per byte."""
    return _decode(lib.cs_alaw_decode, data)


def ulaw_encode(samples: Pcm16) -> bytes:
    """1-D int16 PCM to µ-law codes (bit-exact with audioop.lin2ulaw)."""
    return _encode(lib.cs_ulaw_encode, samples)


def alaw_encode(samples: Pcm16) -> bytes:
    """1-D int16 PCM to A-law codes (bit-exact with audioop.lin2alaw)."""
    return _encode(lib.cs_alaw_encode, samples)


# ---- errors --------------------------------------------------------------------------


class PacketError(ValueError):
    """A datagram the native parser rejected; ``reason`` is its snake_case label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


_RTP_MESSAGES = {
    "short": "RTP: shorter than the 12-byte fixed header",
    "version": "RTP: version is not 2",
    "csrc": "RTP: CSRC list runs past the end",
    "extension": "RTP: header extension runs past the end",
    "padding": "RTP: padding count larger than payload",
    "rtcp": "RTP: second octet is an RTCP packet type (RFC 5761 demux)",
}
_RTP_PADDING_ZERO = "RTP: padding count is zero"

_RTCP_MESSAGES = {
    "short": "RTCP: shorter than a 4-byte packet header",
    "version": "RTCP: version is not 2",
    "length": "RTCP: length field runs past the end",
    "padding": "RTCP: padding not on the last packet, zero, or larger than the packet",
    "body": "RTCP: packet shorter than the fixed part of its type",
    "report_count": "RTCP: report count runs past the packet length",
}


def _label(name_fn: Callable[[int], Any], code: int) -> str:
    label: bytes = ffi.string(name_fn(code))
    return label.decode("ascii")


# ---- RTP -----------------------------------------------------------------------------

_U32 = 0xFFFFFFFF


def _check_range(name: str, value: int, top: int) -> None:
    if not 0 <= value <= top:
        raise ValueError(f"RTP: {name} {value} outside 0..{top}")


@dataclass(frozen=True, slots=True)
class RtpHeader:
    """One RTP packet: the fixed header, CSRCs, extension, payload and padding.

    ``ext_profile`` is None when the X bit is clear; ``ext_data`` is the extension body
    (a multiple of 4 bytes). ``padding`` counts padding octets including the final count
    octet; 0 means the P bit is clear. Building a packet with the marker set and payload
    type 64..95 is allowed (to test demux) but such bytes parse as RTCP.
    """

    payload_type: int
    seq: int
    ts: int
    ssrc: int
    marker: bool = False
    csrcs: tuple[int, ...] = ()
    ext_profile: int | None = None
    ext_data: bytes = b""
    payload: bytes = b""
    padding: int = 0

    def __post_init__(self) -> None:
        _check_range("payload type", self.payload_type, 127)
        _check_range("sequence number", self.seq, 0xFFFF)
        _check_range("timestamp", self.ts, _U32)
        _check_range("SSRC", self.ssrc, _U32)
        _check_range("padding", self.padding, 255)
        if len(self.csrcs) > 15:
            raise ValueError(f"RTP: {len(self.csrcs)} CSRCs, at most 15")
        for csrc in self.csrcs:
            _check_range("CSRC", csrc, _U32)
        if self.ext_profile is None:
            if self.ext_data:
                raise ValueError("RTP: extension data without an extension profile")
        else:
            _check_range("extension profile", self.ext_profile, 0xFFFF)
            if len(self.ext_data) % 4 or len(self.ext_data) > 4 * 0xFFFF:
                raise ValueError("RTP: extension data must be whole 32-bit words")

    @classmethod
    def parse(cls, data: BytesLike) -> RtpHeader:
        """Parse with the native parser; raises PacketError (a ValueError)."""
        raw = bytes(data)
        h = ffi.new("cs_rtp_header *")
        code = lib.cs_rtp_parse(ffi.from_buffer(raw), len(raw), h)
        if code != lib.CS_RTP_OK:
            reason = _label(lib.cs_rtp_error_name, code)
            message = _RTP_MESSAGES[reason]
            if reason == "padding" and raw[-1] == 0:
                message = _RTP_PADDING_ZERO
            raise PacketError(reason, message)
        header_len = int(h.header_len)
        payload_end = header_len + int(h.payload_len)
        return cls(
            payload_type=int(h.payload_type),
            seq=int(h.seq),
            ts=int(h.ts),
            ssrc=int(h.ssrc),
            marker=bool(h.marker),
            csrcs=struct.unpack_from(f"!{h.csrc_count}I", raw, 12),
            ext_profile=int(h.ext_profile) if h.has_extension else None,
            ext_data=raw[header_len - int(h.ext_len) : header_len],
            payload=raw[header_len:payload_end],
            padding=len(raw) - payload_end,
        )

    def __bytes__(self) -> bytes:
        has_ext = self.ext_profile is not None
        first = 0x80 | (0x20 if self.padding else 0) | (0x10 if has_ext else 0)
        parts = [
            struct.pack(
                "!BBHII",
                first | len(self.csrcs),
                (0x80 if self.marker else 0) | self.payload_type,
                self.seq,
                self.ts,
                self.ssrc,
            ),
            struct.pack(f"!{len(self.csrcs)}I", *self.csrcs),
        ]
        if self.ext_profile is not None:
            parts.append(struct.pack("!HH", self.ext_profile, len(self.ext_data) // 4))
            parts.append(self.ext_data)
        parts.append(self.payload)
        if self.padding:
            parts.append(bytes(self.padding - 1) + bytes([self.padding]))
        return b"".join(parts)


def parse_rtp(data: BytesLike) -> RtpHeader:
    """Parse one RTP datagram; raises PacketError (a ValueError) naming the fault."""
    return RtpHeader.parse(data)


def build_rtp(
    payload: bytes,
    *,
    seq: int,
    ts: int,
    ssrc: int,
    payload_type: int = 0,
    marker: bool = False,
) -> bytes:
    """Wire bytes of a plain RTP packet (no CSRCs, extension or padding)."""
    return bytes(RtpHeader(payload_type, seq, ts, ssrc, marker=marker, payload=payload))


# ---- RTCP ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SenderReport:
    """SR sender info (RFC 3550 6.4.1)."""

    ssrc: int
    ntp_sec: int
    ntp_frac: int
    rtp_ts: int
    packet_count: int
    octet_count: int

    @property
    def ntp_middle32(self) -> int:
        """The middle 32 bits of the NTP time: what a later report echoes as LSR."""
        return ((self.ntp_sec & 0xFFFF) << 16) | (self.ntp_frac >> 16)


@dataclass(frozen=True, slots=True)
class ReportBlock:
    """One SR/RR report block; ``cumulative_lost`` is the signed 24-bit field."""

    reporter_ssrc: int
    ssrc: int
    fraction_lost: int
    cumulative_lost: int
    ext_highest_seq: int
    jitter: int
    lsr: int
    dlsr: int


@dataclass(frozen=True, slots=True)
class RtcpSummary:
    """What a compound RTCP datagram said. ``truncated``: more SRs or report blocks than
    the native arrays hold (4 and 31); the first ones are kept."""

    packets: int
    sender_reports: tuple[SenderReport, ...]
    report_blocks: tuple[ReportBlock, ...]
    receiver_reports: int
    sdes: int
    bye: bool
    app: int
    other: int
    truncated: bool

    @classmethod
    def parse(cls, data: BytesLike) -> RtcpSummary:
        """Parse with the native parser; raises PacketError (a ValueError)."""
        raw = bytes(data)
        s = ffi.new("cs_rtcp_summary *")
        code = lib.cs_rtcp_parse(ffi.from_buffer(raw), len(raw), s)
        if code != lib.CS_RTCP_OK:
            reason = _label(lib.cs_rtcp_error_name, code)
            raise PacketError(reason, _RTCP_MESSAGES[reason])
        srs = tuple(
            SenderReport(
                int(sr.ssrc),
                int(sr.ntp_sec),
                int(sr.ntp_frac),
                int(sr.rtp_ts),
                int(sr.packet_count),
                int(sr.octet_count),
            )
            for sr in (s.sr[i] for i in range(s.n_sr))
        )
        blocks = tuple(
            ReportBlock(
                int(rb.reporter_ssrc),
                int(rb.ssrc),
                int(rb.fraction_lost),
                int(rb.cumulative_lost),
                int(rb.ext_highest_seq),
                int(rb.jitter),
                int(rb.lsr),
                int(rb.dlsr),
            )
            for rb in (s.reports[i] for i in range(s.n_reports))
        )
        return cls(
            packets=int(s.n_packets),
            sender_reports=srs,
            report_blocks=blocks,
            receiver_reports=int(s.n_rr),
            sdes=int(s.n_sdes),
            bye=bool(s.has_bye),
            app=int(s.n_app),
            other=int(s.n_other),
            truncated=bool(s.truncated),
        )


def parse_rtcp(data: BytesLike) -> RtcpSummary:
    """Parse one (compound) RTCP datagram; raises PacketError (a ValueError)."""
    return RtcpSummary.parse(data)
