"""MIME bodies of SIP messages (RFC 3261 §7.4, RFC 2046 multipart/mixed, RFC 5621):
content-type parsing and multipart/mixed parts as dataclasses with ``parse()`` and
``__bytes__()``. Binary-safe: part bodies are bytes, cut at the boundary delimiter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from sip_bridge.sip.message import Headers, canonical_name

MAX_PARTS: Final = 16


@dataclass(frozen=True, slots=True)
class ContentType:
    """``type/subtype;param=value`` (type and subtype lower-cased, quotes removed)."""

    mime: str
    params: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> ContentType:
        mime, _, rest = text.partition(";")
        mime = mime.strip().lower()
        main, slash, sub = mime.partition("/")
        if not slash or not main or not sub or " " in mime:
            raise ValueError(f"bad Content-Type {text[:64]!r}")
        params: list[tuple[str, str]] = []
        for part in rest.split(";"):
            name, sep, value = part.partition("=")
            if sep:
                params.append((name.strip().lower(), value.strip().strip('"')))
        return cls(mime, tuple(params))

    def param(self, name: str) -> str | None:
        for n, v in self.params:
            if n == name:
                return v
        return None

    def __bytes__(self) -> bytes:
        params = "".join(
            f';{n}="{v}"' if any(c in v for c in " ;,=") else f";{n}={v}" for n, v in self.params
        )
        return f"{self.mime}{params}".encode()


@dataclass(slots=True)
class BodyPart:
    headers: Headers
    body: bytes

    @property
    def content_type(self) -> ContentType:
        return ContentType.parse(self.headers.get("Content-Type") or "text/plain")

    @property
    def disposition(self) -> str:
        value = self.headers.get("Content-Disposition") or ""
        return value.partition(";")[0].strip().lower()


@dataclass(slots=True)
class Multipart:
    boundary: str
    parts: list[BodyPart] = field(default_factory=list)

    @classmethod
    def parse(cls, body: bytes, content_type: ContentType) -> Multipart:
        if not content_type.mime.startswith("multipart/"):
            raise ValueError(f"not a multipart body: {content_type.mime}")
        boundary = content_type.param("boundary")
        if not boundary or len(boundary) > 70:
            raise ValueError("multipart body without a usable boundary")
        delimiter = b"--" + boundary.encode()
        start = body.find(delimiter)
        if start < 0:
            raise ValueError("multipart boundary not found in the body")
        result = cls(boundary)
        pos = start + len(delimiter)
        while True:
            if body[pos : pos + 2] == b"--":
                return result
            eol = body.find(b"\n", pos)
            if eol < 0:
                raise ValueError("multipart body ends inside a delimiter line")
            nxt = body.find(b"\r\n" + delimiter, eol)
            skip = 2
            if nxt < 0:
                nxt = body.find(b"\n" + delimiter, eol)
                skip = 1
            if nxt < 0:
                raise ValueError("multipart body without a closing boundary")
            if len(result.parts) >= MAX_PARTS:
                raise ValueError(f"more than {MAX_PARTS} body parts")
            result.parts.append(_part(body[eol + 1 : nxt]))
            pos = nxt + skip + len(delimiter)

    def find(self, mime: str) -> BodyPart | None:
        """The first part of that MIME type (``application/sdp``), or None."""
        for part in self.parts:
            try:
                if part.content_type.mime == mime:
                    return part
            except ValueError:
                continue
        return None

    def __bytes__(self) -> bytes:
        delimiter = b"--" + self.boundary.encode()
        out = b""
        for part in self.parts:
            out += delimiter + b"\r\n" + bytes(part.headers) + b"\r\n" + part.body + b"\r\n"
        return out + delimiter + b"--\r\n"


def _part(raw: bytes) -> BodyPart:
    for empty in (b"\r\n", b"\n"):
        if raw.startswith(empty):  # no header lines: RFC 2046 defaults
            return BodyPart(Headers(), raw[len(empty) :])
    for blank in (b"\r\n\r\n", b"\n\n"):
        at = raw.find(blank)
        if at >= 0:
            head, body = raw[:at], raw[at + len(blank) :]
            break
    else:
        if raw.strip():
            # No header block: RFC 2046 default type, whole part is the body.
            return BodyPart(Headers(), raw)
        return BodyPart(Headers(), b"")
    headers = Headers()
    for line in head.decode("utf-8", "replace").replace("\r\n", "\n").split("\n"):
        if line[:1] in (" ", "\t") and headers.items:
            last, text = headers.items[-1]
            headers.items[-1] = (last, text + " " + line.strip())
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"bad body-part header {line[:48]!r}")
        headers.items.append((canonical_name(name.strip()), value.strip()))
    return BodyPart(headers, body)
