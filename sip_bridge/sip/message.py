"""SIP messages (RFC 3261 §7, §20, §25): requests and responses as dataclasses with
``parse()`` and ``__bytes__()``.

The parser is strict where a wrong guess would be dangerous and lenient where real
peers differ: header names are case-insensitive and compact forms (``i``, ``v``, ``f``
...) are expanded, folded lines (leading SP/HT) are joined, comma-separated values are
split outside quotes and angle brackets. Every rejection is a :class:`SipParseError`
(a ``ValueError``) with an exact message and the status a UAS should answer with, or
``None`` when the message must be dropped (a bad response, an unusable start line).
Limits: message size, header count and header-line length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

MAX_MESSAGE_BYTES: Final = 65_535
MAX_HEADERS: Final = 128
MAX_HEADER_LINE: Final = 8192
MAX_CSEQ: Final = 2**31 - 1

COMPACT_FORMS: Final = {
    "a": "Accept-Contact",
    "b": "Referred-By",
    "c": "Content-Type",
    "d": "Request-Disposition",
    "e": "Content-Encoding",
    "f": "From",
    "i": "Call-ID",
    "j": "Reject-Contact",
    "k": "Supported",
    "l": "Content-Length",
    "m": "Contact",
    "n": "Identity-Info",
    "o": "Event",
    "r": "Refer-To",
    "s": "Subject",
    "t": "To",
    "u": "Allow-Events",
    "v": "Via",
    "x": "Session-Expires",
    "y": "Identity",
}
# Canonical spelling of headers whose usual capitalisation is not Title-Case.
_CANONICAL: Final = {
    name.lower(): name
    for name in (
        "Call-ID",
        "CSeq",
        "WWW-Authenticate",
        "P-Asserted-Identity",
        "Session-ID",
        "MIME-Version",
        "RAck",
        "RSeq",
    )
}
# Headers that may appear once only; a second one is a 400.
_SINGLE: Final = frozenset({"call-id", "cseq", "content-length", "from", "to", "max-forwards"})
# Headers whose value is a comma-separated list (RFC 3261 §7.3.1).
LIST_HEADERS: Final = frozenset(
    {
        "via",
        "contact",
        "route",
        "record-route",
        "supported",
        "require",
        "proxy-require",
        "unsupported",
        "allow",
        "accept",
        "p-asserted-identity",
        "diversion",
        "history-info",
    }
)
_TOKEN_RE: Final = re.compile(r"^[A-Za-z0-9\-.!%*_+`'~]+$")
_VERSION_RE: Final = re.compile(r"^SIP/(\d+)\.(\d+)$", re.IGNORECASE)
_STATUS_RE: Final = re.compile(r"^SIP/2\.0 ([1-6]\d\d) (.*)$", re.IGNORECASE)


class SipParseError(ValueError):
    """A message we cannot accept. ``status`` is the response to send (None: drop)."""

    def __init__(self, message: str, status: int | None = 400) -> None:
        super().__init__(message)
        self.status = status


def canonical_name(name: str) -> str:
    """``v`` -> ``Via``, ``call-id`` -> ``Call-ID``, ``content-type`` -> ``Content-Type``."""
    low = name.lower()
    if low in COMPACT_FORMS:
        return COMPACT_FORMS[low]
    if low in _CANONICAL:
        return _CANONICAL[low]
    return "-".join(part.capitalize() for part in low.split("-"))


def split_list(value: str) -> list[str]:
    """Split a header value on commas outside quoted strings and <...>."""
    out: list[str] = []
    depth, quoted, escaped, start = 0, False, False, 0
    for i, ch in enumerate(value):
        if escaped:
            escaped = False
        elif quoted:
            if ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            out.append(value[start:i].strip())
            start = i + 1
    if quoted:
        raise SipParseError("unbalanced quotes in header value")
    out.append(value[start:].strip())
    return [v for v in out if v]


@dataclass(slots=True)
class Headers:
    """Ordered (name, value) pairs with canonical names; lookups are case-insensitive."""

    items: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str, default: str | None = None) -> str | None:
        key = canonical_name(name)
        for n, v in self.items:
            if n == key:
                return v
        return default

    def get_all(self, name: str) -> list[str]:
        """Every value of a header; list headers are split on commas."""
        key = canonical_name(name)
        values = [v for n, v in self.items if n == key]
        if key.lower() in LIST_HEADERS:
            return [part for v in values for part in split_list(v)]
        return values

    def add(self, name: str, value: str) -> None:
        self.items.append((canonical_name(name), value))

    def set(self, name: str, value: str) -> None:
        self.remove(name)
        self.add(name, value)

    def remove(self, name: str) -> None:
        key = canonical_name(name)
        self.items = [(n, v) for n, v in self.items if n != key]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __bytes__(self) -> bytes:
        return b"".join(f"{n}: {v}\r\n".encode() for n, v in self.items)


@dataclass(slots=True)
class SipRequest:
    method: str
    uri: str
    headers: Headers
    body: bytes = b""
    version: str = "SIP/2.0"

    @classmethod
    def parse(cls, data: bytes) -> SipRequest:
        message = parse_message(data)
        if not isinstance(message, SipRequest):
            raise SipParseError("expected a request, got a response", None)
        return message

    def __bytes__(self) -> bytes:
        return _serialise(f"{self.method} {self.uri} {self.version}", self.headers, self.body)


@dataclass(slots=True)
class SipResponse:
    status: int
    reason: str
    headers: Headers
    body: bytes = b""

    @classmethod
    def parse(cls, data: bytes) -> SipResponse:
        message = parse_message(data)
        if not isinstance(message, SipResponse):
            raise SipParseError("expected a response, got a request", None)
        return message

    def __bytes__(self) -> bytes:
        return _serialise(f"SIP/2.0 {self.status} {self.reason}", self.headers, self.body)


SipMessage = SipRequest | SipResponse


def _serialise(start: str, headers: Headers, body: bytes) -> bytes:
    hdrs = Headers([(n, v) for n, v in headers.items if n != "Content-Length"])
    hdrs.add("Content-Length", str(len(body)))
    return start.encode() + b"\r\n" + bytes(hdrs) + b"\r\n" + body


def split_head(data: bytes) -> tuple[bytes, bytes]:
    """(head, rest) at the first empty line; raises when there is none."""
    for sep in (b"\r\n\r\n", b"\n\n"):
        at = data.find(sep)
        if at >= 0:
            return data[:at], data[at + len(sep) :]
    raise SipParseError("no empty line after the headers")


def parse_message(data: bytes, *, stream: bool = False) -> SipMessage:
    """Parse one message. ``stream``: from TCP, where Content-Length is mandatory and
    the body must be exactly that long (the framer already cut it)."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise SipParseError(f"message larger than {MAX_MESSAGE_BYTES} bytes", 513)
    head, body = split_head(data)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        raise SipParseError("headers are not UTF-8") from None
    lines = re.split(r"\r?\n", text)
    start = lines[0]
    message = _start_line(start)
    headers = _header_lines(lines[1:])
    message.headers = headers
    message.body = _body(headers, body, stream, isinstance(message, SipResponse))
    if isinstance(message, SipRequest):
        _check_request(message)
    else:
        _check_response(message)
    return message


def _start_line(line: str) -> SipMessage:
    if line[:1] in (" ", "\t"):
        raise SipParseError("whitespace before the start line")
    if line.upper().startswith("SIP/"):
        m = _STATUS_RE.match(line)
        if m is None:
            raise SipParseError(f"bad status line {line[:64]!r}", None)
        return SipResponse(int(m.group(1)), m.group(2), Headers())
    parts = line.split(" ")
    if len(parts) != 3 or not all(parts):
        raise SipParseError("request line must be 'Method SP Request-URI SP SIP-Version'")
    method, uri, version = parts
    if not _TOKEN_RE.match(method):
        raise SipParseError(f"bad method {method[:32]!r}")
    vm = _VERSION_RE.match(version)
    if vm is None:
        raise SipParseError(f"bad SIP version {version[:16]!r}")
    if (vm.group(1), vm.group(2)) != ("2", "0"):
        raise SipParseError(f"SIP version {version[:16]} not supported", 505)
    if uri.startswith("<") or ":" not in uri:
        raise SipParseError(f"bad Request-URI {uri[:64]!r}")
    return SipRequest(method, uri, Headers(), b"", "SIP/2.0")


def _header_lines(lines: list[str]) -> Headers:
    headers = Headers()
    current: list[str] | None = None
    pairs: list[list[str]] = []
    for line in lines:
        if len(line) > MAX_HEADER_LINE:
            raise SipParseError(f"header line longer than {MAX_HEADER_LINE} bytes", 513)
        if line[:1] in (" ", "\t"):
            if current is None:
                raise SipParseError("continuation line before any header")
            current[1] = (current[1] + " " + line.strip()).strip()
            continue
        name, sep, value = line.partition(":")
        name = name.rstrip(" \t")
        if not sep or not _TOKEN_RE.match(name):
            raise SipParseError(f"bad header line {line[:48]!r}")
        current = [name, value.strip()]
        pairs.append(current)
        if len(pairs) > MAX_HEADERS:
            raise SipParseError(f"more than {MAX_HEADERS} headers", 513)
    seen: set[str] = set()
    for name, value in pairs:
        canon = canonical_name(name)
        low = canon.lower()
        if low in _SINGLE and low in seen:
            raise SipParseError(f"more than one {canon} header")
        seen.add(low)
        headers.add(canon, value)
    return headers


def _body(headers: Headers, rest: bytes, stream: bool, response: bool) -> bytes:
    raw = headers.get("Content-Length")
    if raw is None:
        if stream:
            raise SipParseError("Content-Length is required on stream transports")
        return rest
    if not raw.isdigit() or len(raw) > 9:
        raise SipParseError(f"bad Content-Length {raw[:16]!r}", None if response else 400)
    length = int(raw)
    if length > len(rest):
        raise SipParseError(
            f"Content-Length {length} larger than the body ({len(rest)} bytes)",
            None if response else 400,
        )
    return rest[:length]


def _check_request(req: SipRequest) -> None:
    h = req.headers
    for name in ("Via", "From", "To", "Call-ID", "CSeq"):
        if h.get(name) is None:
            raise SipParseError(f"missing {name} header")
    _, cseq_method = parse_cseq(h.get("CSeq") or "")
    if cseq_method != req.method:
        raise SipParseError(f"CSeq method {cseq_method[:16]} does not match {req.method[:16]}")
    mf = h.get("Max-Forwards")
    if mf is not None and (not mf.isdigit() or int(mf) > 255):
        raise SipParseError("bad Max-Forwards")
    for name in ("From", "To"):
        split_list(h.get(name) or "")  # balanced quotes
        value = h.get(name) or ""
        if value.count("<") != value.count(">"):
            raise SipParseError(f"unbalanced <> in {name}")


def _check_response(resp: SipResponse) -> None:
    h = resp.headers
    for name in ("Via", "From", "To", "Call-ID", "CSeq"):
        if h.get(name) is None:
            raise SipParseError(f"missing {name} header", None)
    try:
        parse_cseq(h.get("CSeq") or "")
    except SipParseError as exc:
        raise SipParseError(str(exc), None) from None


def parse_cseq(value: str) -> tuple[int, str]:
    """``"314159 INVITE"`` -> (314159, "INVITE")."""
    parts = value.split()
    if len(parts) != 2 or not parts[0].isdigit() or not _TOKEN_RE.match(parts[1]):
        raise SipParseError(f"bad CSeq {value[:32]!r}")
    if len(parts[0]) > 10 or int(parts[0]) > MAX_CSEQ:
        raise SipParseError("CSeq number larger than 2**31-1")
    return int(parts[0]), parts[1]
