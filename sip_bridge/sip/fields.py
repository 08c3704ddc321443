"""Structured SIP header values (RFC 3261 §19, §20, §25): URIs, name-addr headers
(From/To/Contact/P-Asserted-Identity/Route), Via. Dataclasses with ``parse()`` and
``__bytes__()``; ``str()`` gives the header-value text."""

from __future__ import annotations

from dataclasses import dataclass, field

from sip_bridge.sip.message import SipParseError

SUPPORTED_SCHEMES = frozenset({"sip", "sips", "tel"})


def _params(text: str) -> dict[str, str | None]:
    """``;a=1;b;c="x"`` -> {"a": "1", "b": None, "c": '"x"'} (names lower-cased)."""
    out: dict[str, str | None] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        out[name.strip().lower()] = value.strip() if sep else None
    return out


def _param_text(params: dict[str, str | None]) -> str:
    return "".join(f";{k}" if v is None else f";{k}={v}" for k, v in params.items())


@dataclass(slots=True)
class SipUri:
    """``sip:user@host:port;params`` (also sips: and tel:)."""

    scheme: str
    user: str = ""
    host: str = ""
    port: int | None = None
    params: dict[str, str | None] = field(default_factory=dict)
    headers: str = ""

    @classmethod
    def parse(cls, text: str) -> SipUri:
        scheme, sep, rest = text.strip().partition(":")
        if not sep or not scheme or not scheme.replace("+", "").isalnum():
            raise SipParseError(f"bad URI {text[:64]!r}")
        scheme = scheme.lower()
        if scheme == "tel":
            number, _, params = rest.partition(";")
            return cls(scheme, number, "", None, _params(params))
        rest, _, headers = rest.partition("?")
        userinfo, at, hostport = rest.rpartition("@")
        hostport, _, params = hostport.partition(";")
        user = userinfo.partition(":")[0] if at else ""
        host, port = _host_port(hostport)
        return cls(scheme, user, host, port, _params(params), headers)

    def __str__(self) -> str:
        if self.scheme == "tel":
            return f"tel:{self.user}{_param_text(self.params)}"
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port is not None else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        hdrs = f"?{self.headers}" if self.headers else ""
        return f"{self.scheme}:{user}{host}{port}{_param_text(self.params)}{hdrs}"

    def __bytes__(self) -> bytes:
        return str(self).encode()


def _host_port(text: str) -> tuple[str, int | None]:
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise SipParseError(f"bad IPv6 reference {text[:64]!r}")
        host, rest = text[1:end], text[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise SipParseError("URI without a host")
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise SipParseError(f"bad port {port_text[:8]!r}")
        return host, int(port_text)
    return host, None


@dataclass(slots=True)
class NameAddr:
    """From, To, Contact, P-Asserted-Identity, Route: ``"Name" <uri>;params``."""

    uri: str
    display: str = ""
    params: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> NameAddr:
        text = text.strip()
        if text == "*":
            return cls("*")
        lt = _unquoted_index(text, "<")
        if lt >= 0:
            gt = text.find(">", lt)
            if gt < 0:
                raise SipParseError("'<' without '>' in address")
            display = text[:lt].strip()
            if display.startswith('"'):
                if len(display) < 2 or not display.endswith('"'):
                    raise SipParseError("unbalanced quotes in display name")
                display = display[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            uri, params = text[lt + 1 : gt].strip(), text[gt + 1 :]
        else:
            if text.startswith('"'):
                raise SipParseError("quoted display name without <uri>")
            uri, _, params = text.partition(";")
            display = ""
        if ":" not in uri:
            raise SipParseError(f"bad address URI {uri[:64]!r}")
        return cls(uri, display, _params(params))

    @property
    def tag(self) -> str | None:
        return self.params.get("tag")

    @property
    def parsed_uri(self) -> SipUri:
        return SipUri.parse(self.uri)

    def __str__(self) -> str:
        if self.uri == "*":
            return "*"
        display = '"' + self.display.replace('"', '\\"') + '" ' if self.display else ""
        return f"{display}<{self.uri}>{_param_text(self.params)}"

    def __bytes__(self) -> bytes:
        return str(self).encode()


def _unquoted_index(text: str, char: str) -> int:
    quoted, escaped = False, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == char and not quoted:
            return i
    if quoted:
        raise SipParseError("unbalanced quotes in address")
    return -1


@dataclass(slots=True)
class Via:
    """``SIP/2.0/UDP host:port;branch=z9hG4bK...;rport``."""

    transport: str
    host: str
    port: int | None = None
    params: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Via:
        proto, _, rest = text.strip().partition(" ")
        parts = [p.strip() for p in proto.split("/")]
        if len(parts) != 3 or parts[0].upper() != "SIP" or parts[1] != "2.0":
            raise SipParseError(f"bad Via protocol {proto[:32]!r}")
        sent_by, _, params = rest.strip().partition(";")
        host, port = _host_port(sent_by)
        return cls(parts[2].upper(), host, port, _params(params))

    @property
    def branch(self) -> str:
        return self.params.get("branch") or ""

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.port is not None else ""
        return f"SIP/2.0/{self.transport} {host}{port}{_param_text(self.params)}"

    def __bytes__(self) -> bytes:
        return str(self).encode()


def user_of(address: str | None) -> str:
    """The user part (or tel: number) of a name-addr header value; "" when unusable."""
    if not address:
        return ""
    try:
        return NameAddr.parse(address).parsed_uri.user
    except SipParseError:
        return ""
