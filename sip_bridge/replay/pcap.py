"""Reading UDP datagrams out of pcap and pcapng captures (stdlib only).

Classic pcap (either byte order, micro- or nanosecond timestamps) and pcapng (section
header, interface description with ``if_tsresol``, enhanced and simple packet blocks;
other blocks skipped). Link types: Ethernet (with 802.1Q/QinQ tags), Linux cooked
capture v1 and v2, raw IP and BSD loopback. IPv4 (unfragmented, or the first fragment
when it holds the whole UDP datagram) and IPv6 (the UDP header right after the fixed
header or after hop-by-hop/routing/destination options). Everything else is counted in
:class:`CaptureStats` and skipped; a file that is not a capture is a clear error.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PCAP_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1_000),  # microseconds, little-endian
    b"\xa1\xb2\xc3\xd4": (">", 1_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),  # nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
PCAPNG_SHB = 0x0A0D0D0A
LINK_NULL, LINK_ETHERNET, LINK_RAW, LINK_RAW_ALT = 0, 1, 101, 12
LINK_IPV4, LINK_IPV6, LINK_SLL, LINK_SLL2, LINK_LOOP = 228, 229, 113, 276, 108
_IPV6_EXT = {0, 43, 60}  # hop-by-hop, routing, destination options


class CaptureError(ValueError):
    """The file is not a pcap/pcapng capture, or is truncated in its header."""


@dataclass(frozen=True, slots=True)
class Datagram:
    """One UDP datagram: capture time (ns since the epoch), addresses and payload."""

    time_ns: int
    src: tuple[str, int]
    dst: tuple[str, int]
    payload: bytes


@dataclass(slots=True)
class CaptureStats:
    frames: int = 0
    udp: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def read_udp(path: Path, stats: CaptureStats | None = None) -> Iterator[Datagram]:
    """Every UDP datagram in the capture, in file order."""
    stats = stats if stats is not None else CaptureStats()
    data = path.read_bytes()
    if len(data) >= 24 and data[:4] in PCAP_MAGIC:
        frames = _pcap_frames(data)
    elif len(data) >= 12 and struct.unpack_from("<I", data)[0] == PCAPNG_SHB:
        frames = _pcapng_frames(data)
    else:
        raise CaptureError(f"{path}: not a pcap or pcapng capture")
    for time_ns, link, frame in frames:
        stats.frames += 1
        dgram = _udp_of_frame(time_ns, link, frame, stats)
        if dgram is not None:
            stats.udp += 1
            yield dgram


def _pcap_frames(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    order, ns_per_unit = PCAP_MAGIC[data[:4]]
    link = struct.unpack_from(order + "I", data, 20)[0] & 0x0FFFFFFF
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack_from(order + "IIII", data, off)
        off += 16
        if off + incl > len(data):
            return  # a capture cut short: keep what is whole
        yield sec * 1_000_000_000 + frac * ns_per_unit, link, data[off : off + incl]
        off += incl


def _pcapng_frames(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    order = "<"
    links: list[tuple[int, int]] = []  # interface -> (link type, ns per tick)
    off = 0
    while off + 12 <= len(data):
        btype = struct.unpack_from(order + "I", data, off)[0]
        if btype == PCAPNG_SHB:
            magic = data[off + 8 : off + 12]
            order = "<" if magic == b"\x4d\x3c\x2b\x1a" else ">"
            if struct.unpack_from(order + "I", data, off + 8)[0] != 0x1A2B3C4D:
                raise CaptureError("pcapng: bad byte-order magic")
            links = []
        blen = struct.unpack_from(order + "I", data, off + 4)[0]
        if blen < 12 or off + blen > len(data):
            return
        body = data[off + 8 : off + blen - 4]
        if btype == 1 and len(body) >= 8:  # interface description
            link = struct.unpack_from(order + "H", body, 0)[0]
            links.append((link, _tsresol(body[8:], order)))
        elif btype == 6 and len(body) >= 20:  # enhanced packet
            iface, hi, lo, cap, _orig = struct.unpack_from(order + "IIIII", body, 0)
            if iface < len(links):
                link, ns = links[iface]
                yield ((hi << 32) | lo) * ns, link, body[20 : 20 + cap]
        elif btype == 3 and len(body) >= 4 and links:  # simple packet: no timestamp
            orig = struct.unpack_from(order + "I", body, 0)[0]
            yield 0, links[0][0], body[4 : 4 + orig]
        off += blen


def _tsresol(options: bytes, order: str) -> int:
    """Nanoseconds per timestamp tick from the interface's options (default µs)."""
    off = 0
    while off + 4 <= len(options):
        code, length = struct.unpack_from(order + "HH", options, off)
        if code == 0:
            break
        if code == 9 and length >= 1:
            v = options[off + 4]
            if v & 0x80:
                return max(1, round(1e9 / (1 << (v & 0x7F))))
            return max(1, 10 ** (9 - v)) if v <= 9 else 1
        off += 4 + (length + 3) // 4 * 4
    return 1_000


def _udp_of_frame(time_ns: int, link: int, frame: bytes, stats: CaptureStats) -> Datagram | None:
    ethertype, off = _network_layer(link, frame)
    if ethertype is None:
        stats.skip(f"link type {link}")
        return None
    if ethertype == 0x0800:
        return _ipv4(time_ns, frame, off, stats)
    if ethertype == 0x86DD:
        return _ipv6(time_ns, frame, off, stats)
    stats.skip("not IP")
    return None


def _network_layer(link: int, frame: bytes) -> tuple[int | None, int]:
    """(ethertype of the network layer, its offset) for the link type."""
    if link == LINK_ETHERNET and len(frame) >= 14:
        ethertype, off = struct.unpack_from(">H", frame, 12)[0], 14
        while ethertype in (0x8100, 0x88A8) and len(frame) >= off + 4:  # VLAN tags
            ethertype, off = struct.unpack_from(">H", frame, off + 2)[0], off + 4
        return ethertype, off
    if link in (LINK_RAW, LINK_RAW_ALT, LINK_IPV4, LINK_IPV6) and frame:
        return (0x0800 if frame[0] >> 4 == 4 else 0x86DD), 0
    if link == LINK_SLL and len(frame) >= 16:
        return struct.unpack_from(">H", frame, 14)[0], 16
    if link == LINK_SLL2 and len(frame) >= 20:
        return struct.unpack_from(">H", frame, 0)[0], 20
    if link in (LINK_NULL, LINK_LOOP) and len(frame) >= 4:
        family = struct.unpack_from("<I", frame)[0]
        if family > 0xFFFF:
            family = struct.unpack_from(">I", frame)[0]
        return (0x0800 if family == 2 else 0x86DD), 4
    return None, 0


def _ipv4(time_ns: int, frame: bytes, off: int, stats: CaptureStats) -> Datagram | None:
    if len(frame) < off + 20 or frame[off] >> 4 != 4:
        stats.skip("short IPv4")
        return None
    ihl = (frame[off] & 0x0F) * 4
    total = struct.unpack_from(">H", frame, off + 2)[0]
    flags_frag = struct.unpack_from(">H", frame, off + 6)[0]
    if frame[off + 9] != 17:
        stats.skip("not UDP")
        return None
    if flags_frag & 0x3FFF:  # more fragments, or a later fragment
        stats.skip("IPv4 fragment")
        return None
    src = socket.inet_ntop(socket.AF_INET, frame[off + 12 : off + 16])
    dst = socket.inet_ntop(socket.AF_INET, frame[off + 16 : off + 20])
    end = min(len(frame), off + total) if total else len(frame)
    return _udp(time_ns, frame[off + ihl : end], src, dst, stats)


def _ipv6(time_ns: int, frame: bytes, off: int, stats: CaptureStats) -> Datagram | None:
    if len(frame) < off + 40:
        stats.skip("short IPv6")
        return None
    nxt = frame[off + 6]
    plen = struct.unpack_from(">H", frame, off + 4)[0]
    src = socket.inet_ntop(socket.AF_INET6, frame[off + 8 : off + 24])
    dst = socket.inet_ntop(socket.AF_INET6, frame[off + 24 : off + 40])
    payload = frame[off + 40 : off + 40 + plen]
    while nxt in _IPV6_EXT and len(payload) >= 8:
        nxt, hlen = payload[0], (payload[1] + 1) * 8
        payload = payload[hlen:]
    if nxt != 17:
        stats.skip("not UDP")
        return None
    return _udp(time_ns, payload, src, dst, stats)


def _udp(time_ns: int, seg: bytes, src: str, dst: str, stats: CaptureStats) -> Datagram | None:
    if len(seg) < 8:
        stats.skip("short UDP")
        return None
    sport, dport, length = struct.unpack_from(">HHH", seg)
    if length < 8 or length > len(seg):
        stats.skip("truncated UDP (capture snap length)")
        return None
    return Datagram(time_ns, (src, sport), (dst, dport), bytes(seg[8:length]))
