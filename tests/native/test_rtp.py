"""RTP header validation, RFC 5761 demux and RTCP compound parsing (native/src/rtp.c)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from native import ffi, lib
from native.codec import PacketError, RtpHeader, build_rtp, parse_rtcp, parse_rtp

SSRC = 0x11223344

MSG = {
    "short": "RTP: shorter than the 12-byte fixed header",
    "version": "RTP: version is not 2",
    "csrc": "RTP: CSRC list runs past the end",
    "extension": "RTP: header extension runs past the end",
    "padding": "RTP: padding count larger than payload",
    "padding_zero": "RTP: padding count is zero",
    "rtcp": "RTP: second octet is an RTCP packet type (RFC 5761 demux)",
}


def fixed(first: int = 0x80, second: int = 0x00, seq: int = 1, ts: int = 160) -> bytes:
    return struct.pack("!BBHII", first, second, seq, ts, SSRC)


def expect_error(data: bytes, reason: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_rtp(data)
    assert str(info.value) == message
    assert isinstance(info.value, PacketError)
    assert info.value.reason == reason


# ---- valid packets -----------------------------------------------------------------

VALID = [
    pytest.param(
        fixed(0x80, 0x00, 7, 160),
        RtpHeader(0, 7, 160, SSRC),
        id="bare-header",
    ),
    pytest.param(
        fixed(0x80, 0x80 | 8, 0xFFFF, 0xFFFFFFFF) + b"\xd5" * 160,
        RtpHeader(8, 0xFFFF, 0xFFFFFFFF, SSRC, marker=True, payload=b"\xd5" * 160),
        id="marker-pcma-max-seq-ts",
    ),
    pytest.param(
        fixed(0x8F) + b"".join(struct.pack("!I", i) for i in range(15)) + b"xy",
        RtpHeader(0, 1, 160, SSRC, csrcs=tuple(range(15)), payload=b"xy"),
        id="fifteen-csrcs",
    ),
    pytest.param(
        fixed(0x90) + b"\xbe\xde\x00\x01" + b"\x10\xaa\x00\x00" + b"pl",
        RtpHeader(0, 1, 160, SSRC, ext_profile=0xBEDE, ext_data=b"\x10\xaa\x00\x00", payload=b"pl"),
        id="one-byte-extension",
    ),
    pytest.param(
        fixed(0x91) + b"\x00\x00\x00\x05" + b"\x10\x00\x00\x02" + bytes(8) + b"p",
        RtpHeader(0, 1, 160, SSRC, csrcs=(5,), ext_profile=0x1000, ext_data=bytes(8), payload=b"p"),
        id="csrc-and-two-byte-extension",
    ),
    pytest.param(
        fixed(0x90) + b"\xbe\xde\x00\x00",
        RtpHeader(0, 1, 160, SSRC, ext_profile=0xBEDE),
        id="empty-extension",
    ),
    pytest.param(
        fixed(0xA0) + b"abc" + b"\x00\x00\x03",
        RtpHeader(0, 1, 160, SSRC, payload=b"abc", padding=3),
        id="padding-3",
    ),
    pytest.param(
        fixed(0xA0) + b"\x01",
        RtpHeader(0, 1, 160, SSRC, padding=1),
        id="padding-is-whole-payload",
    ),
    pytest.param(
        fixed(0xA0) + b"\x00\x00\x00\x04",
        RtpHeader(0, 1, 160, SSRC, padding=4),
        id="padding-count-equals-payload-length",
    ),
    pytest.param(
        fixed(0x80, 0x80 | 63),
        RtpHeader(63, 1, 160, SSRC, marker=True),
        id="second-octet-191-is-rtp",
    ),
    pytest.param(
        fixed(0x80, 0x80 | 96),
        RtpHeader(96, 1, 160, SSRC, marker=True),
        id="second-octet-224-is-rtp",
    ),
    pytest.param(
        fixed(0x80, 72),
        RtpHeader(72, 1, 160, SSRC),
        id="pt-72-without-marker-is-rtp",
    ),
]


@pytest.mark.parametrize(("data", "expected"), VALID)
def test_valid_packets_parse(data: bytes, expected: RtpHeader) -> None:
    assert parse_rtp(data) == expected
    assert bytes(expected) == data


def test_native_header_fields() -> None:
    # P, X and CC=1: CSRC 5, one extension word, payload "pa", 2 padding octets "y\x02"
    data = fixed(0xB1) + b"\x00\x00\x00\x05" + b"\xbe\xde\x00\x01" + bytes(4) + b"pay\x02"
    h = ffi.new("cs_rtp_header *")
    assert lib.cs_rtp_parse(ffi.from_buffer(data), len(data), h) == lib.CS_RTP_OK
    assert (h.csrc_count, h.has_extension, h.ext_profile, h.ext_len) == (1, 1, 0xBEDE, 4)
    assert (h.header_len, h.payload_len) == (12 + 4 + 4 + 4, 2)
    assert ffi.buffer(h.payload, h.payload_len)[:] == b"pa"


# ---- malformed packets -------------------------------------------------------------


MALFORMED = [
    pytest.param(b"", "short", id="empty"),
    pytest.param(fixed()[:11], "short", id="eleven-bytes"),
    pytest.param(fixed(0x00), "version", id="version-0"),
    pytest.param(fixed(0x40), "version", id="version-1"),
    pytest.param(fixed(0xC0), "version", id="version-3"),
    pytest.param(fixed(0xC0, 200), "version", id="version-3-with-sr-type"),
    pytest.param(fixed(0x8F) + bytes(59), "csrc", id="fifteen-csrcs-one-byte-short"),
    pytest.param(fixed(0x81), "csrc", id="one-csrc-missing"),
    pytest.param(fixed(0x90) + b"\xbe\xde", "extension", id="extension-header-cut"),
    pytest.param(
        fixed(0x90) + b"\xbe\xde\x00\x02" + bytes(7), "extension", id="extension-body-cut"
    ),
    pytest.param(
        fixed(0x90) + b"\xbe\xde\xff\xff" + bytes(64), "extension", id="extension-65535-words"
    ),
    pytest.param(fixed(0xA0) + b"abc\x05", "padding", id="padding-larger-than-payload"),
    pytest.param(fixed(0xA0) + b"abc\xff", "padding", id="padding-255"),
    pytest.param(fixed(0xA0, ts=0x0102), "padding", id="padding-no-payload"),
    pytest.param(
        fixed(0xB0) + b"\xbe\xde\x00\x00" + b"\x02", "padding", id="padding-into-extension"
    ),
    pytest.param(fixed(0x80, 200), "rtcp", id="sr-type-200"),
    pytest.param(fixed(0x80, 201), "rtcp", id="rr-type-201"),
    pytest.param(fixed(0x80, 192), "rtcp", id="type-192"),
    pytest.param(fixed(0x80, 223), "rtcp", id="type-223"),
    pytest.param(b"\x80\xc9\x00\x01" + struct.pack("!I", SSRC), "rtcp", id="empty-rr-8-bytes"),
    pytest.param(b"\x81\xcb", "rtcp", id="two-bytes-rtcp-demux-first"),
]


@pytest.mark.parametrize(("data", "reason"), MALFORMED)
def test_malformed_packets_name_their_fault(data: bytes, reason: str) -> None:
    expect_error(data, reason, MSG[reason])


def test_padding_count_zero_has_its_own_message() -> None:
    expect_error(fixed(0xA0) + b"abc\x00", "padding", MSG["padding_zero"])


def test_every_truncation_names_the_first_missing_part() -> None:
    full = bytes(
        RtpHeader(
            0, 9, 320, SSRC, csrcs=(1, 2), ext_profile=0xBEDE, ext_data=bytes(8), payload=b"0123"
        )
    )
    csrc_end, ext_end = 12 + 8, 12 + 8 + 4 + 8
    for n in range(len(full)):
        cut = full[:n]
        if n < 12:
            expect_error(cut, "short", MSG["short"])
        elif n < csrc_end:
            expect_error(cut, "csrc", MSG["csrc"])
        elif n < ext_end:  # extension header (to ext_hdr_end) or its body cut
            expect_error(cut, "extension", MSG["extension"])
        else:
            assert parse_rtp(cut).payload == full[ext_end:n]


def test_error_labels_are_stable() -> None:
    labels = [ffi.string(lib.cs_rtp_error_name(c)).decode() for c in range(lib.CS_RTP_ERR_COUNT)]
    assert labels == ["ok", "short", "version", "csrc", "extension", "padding", "rtcp"]
    assert ffi.string(lib.cs_rtp_error_name(-1)) == b"unknown"
    assert ffi.string(lib.cs_rtp_error_name(lib.CS_RTP_ERR_COUNT)) == b"unknown"


def test_is_rtcp_matches_rfc5761_range() -> None:
    for second in range(256):
        data = ffi.from_buffer(bytes([0x80, second]))
        assert lib.cs_rtp_is_rtcp(data, 2) == (192 <= second <= 223)
    assert lib.cs_rtp_is_rtcp(ffi.from_buffer(b"\x40\xc8"), 2) == 0  # version 1: never RTCP
    assert lib.cs_rtp_is_rtcp(ffi.from_buffer(b"\x80\xc8"), 1) == 0  # one byte: too short


def test_build_rtp_and_builder_validation() -> None:
    data = build_rtp(b"\xff" * 160, seq=65535, ts=2**32 - 1, ssrc=SSRC, payload_type=0, marker=True)
    assert data[:2] == b"\x80\x80" and len(data) == 172
    with pytest.raises(ValueError, match=r"payload type 128 outside 0\.\.127"):
        RtpHeader(128, 0, 0, 0)
    with pytest.raises(ValueError, match="16 CSRCs"):
        RtpHeader(0, 0, 0, 0, csrcs=(0,) * 16)
    with pytest.raises(ValueError, match="whole 32-bit words"):
        RtpHeader(0, 0, 0, 0, ext_profile=0xBEDE, ext_data=b"abc")
    with pytest.raises(ValueError, match="without an extension profile"):
        RtpHeader(0, 0, 0, 0, ext_data=bytes(4))


# ---- properties --------------------------------------------------------------------


@given(st.binary(max_size=96))
def test_random_bytes_parse_or_raise_value_error(data: bytes) -> None:
    try:
        h = parse_rtp(data)
    except PacketError as exc:
        assert str(exc) in MSG.values()
    else:
        # anything accepted rebuilds to the same bytes, up to the padding filler octets
        rebuilt = bytes(h)
        kept = len(data) - h.padding
        assert len(rebuilt) == len(data) and rebuilt[:kept] == data[:kept]
        assert rebuilt[-1:] == data[-1:] if h.padding else True


def _not_rtcp(h: RtpHeader) -> bool:
    return not (h.marker and 64 <= h.payload_type <= 95)


@st.composite
def headers(draw: st.DrawFn) -> RtpHeader:
    ext_profile = draw(st.none() | st.sampled_from([0xBEDE, 0x1000, 0x1003, 0x0000]))
    words = st.lists(st.binary(min_size=4, max_size=4), max_size=3).map(b"".join)
    return RtpHeader(
        payload_type=draw(st.integers(0, 127)),
        seq=draw(st.integers(0, 0xFFFF)),
        ts=draw(st.integers(0, 2**32 - 1)),
        ssrc=draw(st.integers(0, 2**32 - 1)),
        marker=draw(st.booleans()),
        csrcs=tuple(draw(st.lists(st.integers(0, 2**32 - 1), max_size=15))),
        ext_profile=ext_profile,
        ext_data=b"" if ext_profile is None else draw(words),
        payload=draw(st.binary(max_size=64)),
        padding=draw(st.integers(0, 255)),
    )


@given(headers().filter(_not_rtcp))
def test_build_then_parse_round_trips(h: RtpHeader) -> None:
    assert parse_rtp(bytes(h)) == h


# ---- RTCP --------------------------------------------------------------------------


def rtcp(first_count: int, ptype: int, body: bytes, *, padding: int = 0) -> bytes:
    """One RTCP packet with a correct length field (body must be whole words)."""
    if padding:
        body = body + bytes(padding - 1) + bytes([padding])
    assert len(body) % 4 == 0
    first = 0x80 | (0x20 if padding else 0) | first_count
    return struct.pack("!BBH", first, ptype, len(body) // 4) + body


def report_block(
    ssrc: int, fraction: int, lost24: int, ext_seq: int, jitter: int, lsr: int, dlsr: int
) -> bytes:
    return struct.pack(
        "!IIIIII", ssrc, (fraction << 24) | (lost24 & 0xFFFFFF), ext_seq, jitter, lsr, dlsr
    )


def sender_info(
    ssrc: int, ntp_sec: int, ntp_frac: int, rtp_ts: int, packets: int, octets: int
) -> bytes:
    return struct.pack("!IIIIII", ssrc, ntp_sec, ntp_frac, rtp_ts, packets, octets)


def sdes_cname(ssrc: int, cname: bytes) -> bytes:
    chunk = struct.pack("!IBB", ssrc, 1, len(cname)) + cname + b"\x00"
    chunk += bytes(-len(chunk) % 4)
    return rtcp(1, 202, chunk)


SR_INFO = sender_info(SSRC, 0xE8000000, 0x80000000, 123456, 1000, 160000)
BLOCK_A = report_block(0xAAAA0001, 25, 5, 0x0001FFFF, 42, 0x12345678, 65536)


def test_sr_with_report_block() -> None:
    s = parse_rtcp(rtcp(1, 200, SR_INFO + BLOCK_A))
    assert s.packets == 1 and s.truncated is False
    (sr,) = s.sender_reports
    assert (sr.ssrc, sr.ntp_sec, sr.ntp_frac, sr.rtp_ts) == (SSRC, 0xE8000000, 0x80000000, 123456)
    assert (sr.packet_count, sr.octet_count) == (1000, 160000)
    assert sr.ntp_middle32 == 0x00008000
    (rb,) = s.report_blocks
    assert (rb.reporter_ssrc, rb.ssrc) == (SSRC, 0xAAAA0001)
    assert (rb.fraction_lost, rb.cumulative_lost) == (25, 5)
    assert (rb.ext_highest_seq, rb.jitter, rb.lsr, rb.dlsr) == (0x0001FFFF, 42, 0x12345678, 65536)


def test_compound_sr_and_sdes() -> None:
    s = parse_rtcp(rtcp(0, 200, SR_INFO) + sdes_cname(SSRC, b"user@host.example"))
    assert (s.packets, len(s.sender_reports), s.sdes) == (2, 1, 1)
    assert s.bye is False and s.report_blocks == ()


@pytest.mark.parametrize(
    ("lost24", "expected"),
    [(0, 0), (5, 5), (0x7FFFFF, 8388607), (0x800000, -8388608), (0xFFFFFF, -1), (0xFFFFFE, -2)],
)
def test_cumulative_lost_is_signed_24_bit(lost24: int, expected: int) -> None:
    block = report_block(1, 0xFF, lost24, 0, 0, 0, 0)
    s = parse_rtcp(rtcp(1, 201, struct.pack("!I", SSRC) + block))
    assert s.report_blocks[0].cumulative_lost == expected
    assert s.report_blocks[0].fraction_lost == 0xFF
    assert s.receiver_reports == 1


def test_compound_rr_sdes_bye_app_and_feedback() -> None:
    data = (
        rtcp(2, 201, struct.pack("!I", SSRC) + BLOCK_A + BLOCK_A)
        + sdes_cname(SSRC, b"a")
        + rtcp(1, 204, struct.pack("!I", SSRC) + b"NAME" + b"data")
        + rtcp(1, 205, struct.pack("!II", SSRC, 7) + b"\x00\x05\x00\x00")  # RTPFB NACK
        + rtcp(1, 203, struct.pack("!I", SSRC), padding=4)
    )
    s = parse_rtcp(data)
    assert (s.packets, s.receiver_reports, s.sdes, s.app, s.other, s.bye) == (5, 1, 1, 1, 1, True)
    assert len(s.report_blocks) == 2 and s.sender_reports == ()


def test_capacity_overflow_sets_truncated() -> None:
    rr31 = rtcp(31, 201, struct.pack("!I", 1) + BLOCK_A * 31)
    s = parse_rtcp(rr31 + rtcp(1, 201, struct.pack("!I", 2) + BLOCK_A))
    assert len(s.report_blocks) == 31 and s.truncated is True and s.packets == 2
    s = parse_rtcp(rtcp(0, 200, SR_INFO) * 5)
    assert len(s.sender_reports) == 4 and s.truncated is True
    assert len(ffi.new("cs_rtcp_summary *").sr) == lib.CS_RTCP_MAX_SR
    assert len(ffi.new("cs_rtcp_summary *").reports) == lib.CS_RTCP_MAX_REPORTS


RTCP_MSG = {
    "short": "RTCP: shorter than a 4-byte packet header",
    "version": "RTCP: version is not 2",
    "length": "RTCP: length field runs past the end",
    "padding": "RTCP: padding not on the last packet, zero, or larger than the packet",
    "body": "RTCP: packet shorter than the fixed part of its type",
    "report_count": "RTCP: report count runs past the packet length",
}

RR_EMPTY = rtcp(0, 201, struct.pack("!I", SSRC))

RTCP_MALFORMED = [
    pytest.param(b"\x80\xc9\x00", "short", id="three-bytes"),
    pytest.param(RR_EMPTY + b"\x80\xca", "short", id="trailing-two-bytes"),
    pytest.param(b"\x40\xc9\x00\x01" + bytes(4), "version", id="version-1"),
    pytest.param(RR_EMPTY + b"\xc0\xca\x00\x00", "version", id="second-packet-version-3"),
    pytest.param(b"\x80\xc9\x00\x02" + bytes(4), "length", id="length-past-end"),
    pytest.param(RR_EMPTY[:-1], "length", id="rr-cut-by-one"),
    pytest.param(rtcp(0, 201, bytes(4), padding=4) + RR_EMPTY, "padding", id="padding-not-last"),
    pytest.param(b"\xa0\xc9\x00\x01" + bytes(4), "padding", id="padding-zero"),
    pytest.param(b"\xa0\xc9\x00\x01" + b"\x00\x00\x00\x09", "padding", id="padding-past-packet"),
    pytest.param(b"\x80\xc8\x00\x01" + bytes(4), "body", id="sr-without-sender-info"),
    pytest.param(b"\x80\xc9\x00\x00", "body", id="rr-without-ssrc"),
    pytest.param(rtcp(0, 204, bytes(4)), "body", id="app-without-name"),
    pytest.param(
        rtcp(2, 201, struct.pack("!I", SSRC) + BLOCK_A), "report_count", id="rr-count-2-has-1"
    ),
    pytest.param(rtcp(1, 200, SR_INFO), "report_count", id="sr-count-1-has-0"),
    pytest.param(
        rtcp(1, 201, struct.pack("!I", SSRC) + BLOCK_A[:20], padding=4),
        "report_count",
        id="block-ends-in-padding",
    ),
    pytest.param(rtcp(2, 203, struct.pack("!I", SSRC)), "report_count", id="bye-count-past-end"),
    pytest.param(
        rtcp(2, 202, sdes_cname(SSRC, b"ab")[4:]), "report_count", id="sdes-second-chunk-missing"
    ),
    pytest.param(
        rtcp(1, 202, struct.pack("!IBB", SSRC, 1, 9) + b"ab"),
        "report_count",
        id="sdes-item-past-end",
    ),
    pytest.param(
        rtcp(1, 202, struct.pack("!IBBBB", SSRC, 1, 1, 0x61, 0x62)),
        "report_count",
        id="sdes-no-end",
    ),
]


@pytest.mark.parametrize(("data", "reason"), RTCP_MALFORMED)
def test_malformed_rtcp_names_its_fault(data: bytes, reason: str) -> None:
    with pytest.raises(PacketError) as info:
        parse_rtcp(data)
    assert (info.value.reason, str(info.value)) == (reason, RTCP_MSG[reason])


def test_rtcp_error_labels_are_stable() -> None:
    labels = [ffi.string(lib.cs_rtcp_error_name(c)).decode() for c in range(lib.CS_RTCP_ERR_COUNT)]
    assert labels == ["ok", "short", "version", "length", "padding", "body", "report_count"]
    assert ffi.string(lib.cs_rtcp_error_name(99)) == b"unknown"


def test_rtcp_demuxed_by_rtp_parser_then_parsed() -> None:
    data = rtcp(0, 200, SR_INFO) + sdes_cname(SSRC, b"x")
    expect_error(data, "rtcp", MSG["rtcp"])
    assert parse_rtcp(data).sender_reports[0].rtp_ts == 123456


@given(st.binary(max_size=128))
def test_random_bytes_rtcp_parse_or_raise_value_error(data: bytes) -> None:
    try:
        s = parse_rtcp(data)
    except PacketError as exc:
        assert str(exc) in RTCP_MSG.values()
    else:
        assert len(data) % 4 == 0 and s.packets >= 1
