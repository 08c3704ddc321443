"""SDP (RFC 4566 / 8866) session descriptions as dataclasses with ``parse()`` and
``__bytes__()``.

Lines are kept in order (type, value) so that what we do not interpret survives a
round trip; properties read the parts we use: c= (session and media level), m=,
a=rtpmap/fmtp/ptime/label and the direction attributes (sendrecv, sendonly, recvonly,
inactive; media level overrides session level).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Final

MAX_SDP_BYTES: Final = 32_768
MAX_LINES: Final = 1024
MAX_MEDIA: Final = 16
DIRECTIONS: Final = ("sendrecv", "sendonly", "recvonly", "inactive")
_SESSION_ORDER: Final = "voseiupcbtrzka"


@dataclass(frozen=True, slots=True)
class RtpMap:
    pt: int
    encoding: str
    clock_rate: int
    channels: int = 1


# RFC 3551 static payload types we may meet without an rtpmap.
STATIC_PAYLOADS: Final = {
    0: RtpMap(0, "PCMU", 8000),
    3: RtpMap(3, "GSM", 8000),
    4: RtpMap(4, "G723", 8000),
    8: RtpMap(8, "PCMA", 8000),
    9: RtpMap(9, "G722", 8000),
    10: RtpMap(10, "L16", 44100, 2),
    11: RtpMap(11, "L16", 44100),
    13: RtpMap(13, "CN", 8000),
    18: RtpMap(18, "G729", 8000),
}


def _attr(value: str) -> tuple[str, str | None]:
    name, sep, rest = value.partition(":")
    return name.strip(), (rest.strip() if sep else None)


def _connection_address(value: str) -> str:
    parts = value.split()
    if len(parts) != 3 or parts[0] != "IN" or parts[1] not in ("IP4", "IP6"):
        raise ValueError(f"bad c= line {value[:64]!r}")
    return parts[2].split("/")[0]


@dataclass(slots=True)
class MediaDescription:
    """One m= section: ``m=<media> <port>[/<count>] <proto> <fmt> ...`` and its lines."""

    media: str
    port: int
    proto: str
    formats: list[str]
    lines: list[tuple[str, str]] = field(default_factory=list)
    port_count: int | None = None

    @classmethod
    def parse_m_line(cls, value: str) -> MediaDescription:
        parts = value.split()
        if len(parts) < 3:
            raise ValueError(f"bad m= line {value[:64]!r}")
        port_text, _, count = parts[1].partition("/")
        if not port_text.isdigit() or int(port_text) > 65535:
            raise ValueError(f"bad m= port {parts[1][:16]!r}")
        if count and not count.isdigit():
            raise ValueError(f"bad m= port count {parts[1][:16]!r}")
        return cls(parts[0], int(port_text), parts[2], parts[3:], [], int(count) if count else None)

    @property
    def m_line(self) -> str:
        port = f"{self.port}/{self.port_count}" if self.port_count else str(self.port)
        return " ".join([self.media, port, self.proto, *self.formats])

    @property
    def attributes(self) -> list[tuple[str, str | None]]:
        return [_attr(v) for t, v in self.lines if t == "a"]

    def attribute(self, name: str) -> str | None:
        """Value of the first a=<name>:<value>; "" for a flag; None when absent."""
        for n, v in self.attributes:
            if n == name:
                return v if v is not None else ""
        return None

    @property
    def connection(self) -> str | None:
        for t, v in self.lines:
            if t == "c":
                return _connection_address(v)
        return None

    @property
    def direction(self) -> str | None:
        for n, _ in self.attributes:
            if n in DIRECTIONS:
                return n
        return None

    @property
    def label(self) -> str | None:
        return self.attribute("label")

    @property
    def ptime(self) -> int | None:
        value = self.attribute("ptime")
        return int(value) if value and value.isdigit() else None

    @property
    def rtpmaps(self) -> dict[int, RtpMap]:
        """Payload type -> RtpMap for every format (rtpmap lines, else the static table)."""
        explicit: dict[int, RtpMap] = {}
        for n, v in self.attributes:
            if n != "rtpmap" or not v:
                continue
            pt_text, _, spec = v.partition(" ")
            fields = spec.strip().split("/")
            if not pt_text.isdigit() or len(fields) < 2 or not fields[1].isdigit():
                continue
            chans = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 1
            explicit[int(pt_text)] = RtpMap(int(pt_text), fields[0], int(fields[1]), chans)
        out: dict[int, RtpMap] = {}
        for fmt in self.formats:
            if fmt.isdigit():
                pt = int(fmt)
                if pt in explicit:
                    out[pt] = explicit[pt]
                elif pt in STATIC_PAYLOADS:
                    out[pt] = STATIC_PAYLOADS[pt]
        return out

    def fmtp(self, pt: int) -> str | None:
        for n, v in self.attributes:
            if n == "fmtp" and v:
                pt_text, _, params = v.partition(" ")
                if pt_text == str(pt):
                    return params.strip()
        return None

    def __bytes__(self) -> bytes:
        return ("".join(f"{t}={v}\r\n" for t, v in [("m", self.m_line), *self.lines])).encode()


@dataclass(slots=True)
class SessionDescription:
    lines: list[tuple[str, str]]
    media: list[MediaDescription] = field(default_factory=list)

    @classmethod
    def parse(cls, data: bytes) -> SessionDescription:
        if len(data) > MAX_SDP_BYTES:
            raise ValueError(f"SDP larger than {MAX_SDP_BYTES} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("SDP is not UTF-8") from None
        raw = [line.rstrip("\r ") for line in text.split("\n")]
        raw = [line for line in raw if line]
        if len(raw) > MAX_LINES:
            raise ValueError(f"more than {MAX_LINES} SDP lines")
        if not raw or raw[0].strip() != "v=0":
            raise ValueError("SDP must start with v=0")
        sdp = cls([])
        for line in raw:
            if len(line) < 2 or line[1] != "=" or not line[0].isalpha():
                raise ValueError(f"bad SDP line {line[:48]!r}")
            kind, value = line[0], line[2:].strip()
            if kind == "m":
                if len(sdp.media) >= MAX_MEDIA:
                    raise ValueError(f"more than {MAX_MEDIA} m= lines")
                sdp.media.append(MediaDescription.parse_m_line(value))
            elif sdp.media:
                sdp.media[-1].lines.append((kind, value))
            else:
                sdp.lines.append((kind, value))
        sdp._validate()
        return sdp

    def _validate(self) -> None:
        kinds = [t for t, _ in self.lines]
        if "o" not in kinds:
            raise ValueError("SDP without o= line")
        if "s" not in kinds:
            raise ValueError("SDP without s= line")
        session_c = self.connection
        for i, m in enumerate(self.media):
            c = m.connection
            if c is None and session_c is None and m.port != 0:
                raise ValueError(f"m= line {i} has no connection address")
            for address in (c, session_c):
                if address is not None:
                    _check_address(address)

    def value(self, kind: str) -> str | None:
        for t, v in self.lines:
            if t == kind:
                return v
        return None

    @property
    def origin(self) -> str:
        return self.value("o") or ""

    @property
    def connection(self) -> str | None:
        value = self.value("c")
        return _connection_address(value) if value is not None else None

    @property
    def direction(self) -> str:
        for t, v in self.lines:
            if t == "a" and v in DIRECTIONS:
                return v
        return "sendrecv"

    def media_connection(self, m: MediaDescription) -> str | None:
        return m.connection or self.connection

    def media_direction(self, m: MediaDescription) -> str:
        return m.direction or self.direction

    def __bytes__(self) -> bytes:
        order = {k: i for i, k in enumerate(_SESSION_ORDER)}
        lines = sorted(self.lines, key=lambda tv: order.get(tv[0], len(order)))
        head = "".join(f"{t}={v}\r\n" for t, v in lines).encode()
        return head + b"".join(bytes(m) for m in self.media)


def _check_address(address: str) -> None:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        if not address or len(address) > 253 or " " in address:
            raise ValueError(f"bad connection address {address[:64]!r}") from None
