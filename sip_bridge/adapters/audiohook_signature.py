"""HTTP Message Signatures on the AudioHook WebSocket upgrade (Genesys Cloud signs it
with the integration's client secret: ``hmac-sha256``, draft-ietf-httpbis-message-
signatures as the AudioHook protocol specification profiles it).

The client sends ``Signature-Input: sig1=("@request-target" "@authority"
"audiohook-organization-id" "audiohook-session-id" "audiohook-correlation-id"
"x-api-key");keyid="<api key>";nonce="...";alg="hmac-sha256";created=...;expires=...``
and ``Signature: sig1=:<base64 HMAC>:``. The signed text is one line per covered
component (``"name": value``) and a last line ``"@signature-params": <the inner list>``.

Checked here: both headers parse as RFC 8941 dictionaries; every component AudioHook
requires is covered, no unknown derived component and no component parameters; the
``keyid`` is the request's ``X-API-KEY``; ``alg`` (if given) is hmac-sha256; the nonce
is there and long enough; ``created`` is not in the future and at most ``max_age_s``
old, ``expires`` not passed (a few seconds of clock skew allowed); the HMAC matches in
constant time. :class:`NonceCache` refuses a nonce seen again while its signature is
still fresh (a replayed upgrade). Only the first signature label is verified.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

REQUIRED = (
    "@request-target",
    "@authority",
    "audiohook-organization-id",
    "audiohook-session-id",
    "audiohook-correlation-id",
    "x-api-key",
)
DERIVED = frozenset({"@method", "@authority", "@request-target"})  # of a WebSocket upgrade
CLOCK_SKEW_S = 3
MIN_NONCE = 22  # 16 random bytes in base64


class Token(str):
    """An RFC 8941 token (bare, unquoted)."""


Bare = str | int | float | bool | bytes
Params = list[tuple[str, Bare]]
Item = tuple[Bare, Params]
InnerList = tuple[list[Item], Params]

_KEY = re.compile(r"[a-z*][a-z0-9_\-.*]*")
_TOKEN = re.compile(r"[A-Za-z*][A-Za-z0-9:/!#$%&'*+\-.^_`|~]*")
_NUMBER = re.compile(r"-?\d{1,15}(\.\d{1,3})?")
_BYTES = re.compile(r":([A-Za-z0-9+/]*={0,2}):")


class _Parser:
    """RFC 8941 dictionaries (the subset signatures use: strings, integers, decimals,
    tokens, byte sequences, booleans, inner lists, parameters)."""

    def __init__(self, text: str) -> None:
        self.s = text.strip(" ")
        self.i = 0

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def ows(self) -> None:
        while self.peek() in (" ", "\t") and self.peek():
            self.i += 1

    def match(self, pattern: re.Pattern[str], what: str) -> re.Match[str]:
        m = pattern.match(self.s, self.i)
        if m is None:
            raise ValueError(f"expected {what} at {self.i}")
        self.i = m.end()
        return m

    def dictionary(self) -> dict[str, Item | InnerList]:
        out: dict[str, Item | InnerList] = {}
        while self.i < len(self.s):
            key = self.match(_KEY, "a key").group()
            if self.peek() == "=":
                self.i += 1
                if self.peek() == "(":
                    out[key] = self.inner_list()
                else:
                    out[key] = (self.bare(), self.params())
            else:
                out[key] = (True, self.params())
            self.ows()
            if self.i == len(self.s):
                break
            if self.peek() != ",":
                raise ValueError(f"expected ',' at {self.i}")
            self.i += 1
            self.ows()
            if self.i == len(self.s):
                raise ValueError("a dictionary ends in ','")
        return out

    def inner_list(self) -> InnerList:
        self.i += 1  # "("
        items: list[Item] = []
        while True:
            while self.peek() == " ":
                self.i += 1
            if self.peek() == ")":
                self.i += 1
                return items, self.params()
            if not self.peek():
                raise ValueError("an inner list does not end")
            items.append((self.bare(), self.params()))
            if self.peek() not in (" ", ")"):
                raise ValueError(f"expected ' ' or ')' at {self.i}")

    def params(self) -> Params:
        out: Params = []
        while self.peek() == ";":
            self.i += 1
            while self.peek() == " ":
                self.i += 1
            key = self.match(_KEY, "a parameter key").group()
            value: Bare = True
            if self.peek() == "=":
                self.i += 1
                value = self.bare()
            out = [(k, v) for k, v in out if k != key] + [(key, value)]
        return out

    def bare(self) -> Bare:
        c = self.peek()
        if c == '"':
            return self.string()
        if c == ":":
            try:
                return base64.b64decode(self.match(_BYTES, "bytes").group(1), validate=True)
            except binascii.Error:
                raise ValueError("bad byte sequence") from None
        if c == "?":
            value = self.s[self.i + 1 : self.i + 2]
            if value not in ("0", "1"):
                raise ValueError("bad boolean")
            self.i += 2
            return value == "1"
        if c == "-" or c.isdigit():
            text = self.match(_NUMBER, "a number").group()
            return float(text) if "." in text else int(text)
        return Token(self.match(_TOKEN, "a token").group())

    def string(self) -> str:
        out = []
        self.i += 1
        while self.i < len(self.s):
            c = self.s[self.i]
            self.i += 1
            if c == "\\":
                nxt = self.s[self.i : self.i + 1]
                if nxt not in ('"', "\\"):
                    raise ValueError("bad escape in a string")
                out.append(nxt)
                self.i += 1
            elif c == '"':
                return "".join(out)
            elif not " " <= c <= "~":
                raise ValueError("a string holds a non-ASCII character")
            else:
                out.append(c)
        raise ValueError("a string does not end")


def parse_dictionary(text: str) -> dict[str, Item | InnerList]:
    return _Parser(text).dictionary()


def _bare(value: Bare) -> str:
    if isinstance(value, bool):
        return "?1" if value else "?0"
    if isinstance(value, Token):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bytes):
        return ":" + base64.b64encode(value).decode() + ":"
    if isinstance(value, float):
        text = f"{value:.3f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    return str(value)


def _params(params: Params) -> str:
    return "".join(f";{k}" if v is True else f";{k}={_bare(v)}" for k, v in params)


def serialize_inner_list(value: InnerList) -> str:
    items, params = value
    return "(" + " ".join(_bare(v) + _params(p) for v, p in items) + ")" + _params(params)


@dataclass(frozen=True, slots=True)
class Verified:
    keyid: str
    nonce: str
    expires_at: float  # when this signature stops being acceptable (replay window)


class SignatureError(ValueError):
    """Why a signature was not accepted (for the log and the refusal counter)."""


def _canonical(value: str) -> str:
    return re.sub(r"[ \t]*\r\n[ \t]+", " ", value.strip())


def verify(
    headers: Mapping[str, str],
    request_target: str,
    secret: bytes,
    *,
    now: float | None = None,
    max_age_s: float = 10.0,
) -> Verified:
    """Verify the upgrade request's signature; raises :class:`SignatureError`."""
    now = time.time() if now is None else now
    try:
        inputs = parse_dictionary(headers.get("signature-input", ""))
        signatures = parse_dictionary(headers.get("signature", ""))
    except ValueError as exc:
        raise SignatureError(f"unparsable signature header: {exc}") from None
    if not inputs or not signatures:
        raise SignatureError("unsigned")
    label, covered = next(iter(inputs.items()))
    sig = signatures.get(label)
    if sig is None or not isinstance(sig[0], bytes):
        raise SignatureError(f"no signature for label {label}")
    if not isinstance(covered[0], list):
        raise SignatureError("signature-input is not an inner list")
    members, sig_params = covered[0], covered[1]
    params = dict(sig_params)
    if set(params) - {"alg", "created", "expires", "keyid", "nonce"}:
        raise SignatureError("unknown signature parameter")
    keyid, nonce, alg = params.get("keyid"), params.get("nonce"), params.get("alg", "hmac-sha256")
    created, expires = params.get("created"), params.get("expires")
    api_key = _canonical(headers.get("x-api-key", ""))
    if not isinstance(keyid, str) or not hmac.compare_digest(keyid.encode(), api_key.encode()):
        raise SignatureError("keyid is not the X-API-KEY")
    if alg != "hmac-sha256":
        raise SignatureError("unsupported algorithm")
    if not isinstance(nonce, str) or len(nonce) < MIN_NONCE:
        raise SignatureError("missing or short nonce")
    if not isinstance(created, int) or isinstance(created, bool) or created < 0:
        raise SignatureError("missing created")
    if created > now + CLOCK_SKEW_S:
        raise SignatureError("created in the future")
    if now - created > max_age_s + CLOCK_SKEW_S:
        raise SignatureError("expired (too old)")
    if expires is not None and (not isinstance(expires, int) or expires < now - CLOCK_SKEW_S):
        raise SignatureError("expired")
    lines, seen = [], set()
    for name, component_params in members:
        if not isinstance(name, str) or isinstance(name, Token) or component_params:
            raise SignatureError("bad covered component")
        if name in seen:
            raise SignatureError(f"duplicate component {name}")
        seen.add(name)
        if name.startswith("@"):
            if name not in DERIVED:
                raise SignatureError(f"unsupported derived component {name}")
            value = {
                "@request-target": request_target,
                "@authority": _canonical(headers.get("host", "")).lower(),
                "@method": "GET",
            }[name]
            if not value:
                raise SignatureError(f"cannot resolve {name}")
        else:
            if name != name.lower() or name in ("signature", "signature-input"):
                raise SignatureError(f"bad component {name}")
            value = _canonical(headers.get(name, ""))
            if not value:
                raise SignatureError(f"header {name} missing")
        lines.append(f'"{name}": {value}')
    missing = [c for c in REQUIRED if c not in seen]
    if missing:
        raise SignatureError(f"not covered: {', '.join(missing)}")
    lines.append('"@signature-params": ' + serialize_inner_list(covered))
    mac = hmac.new(secret, "\n".join(lines).encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(mac, sig[0]):
        raise SignatureError("signature mismatch")
    window = created + max_age_s + CLOCK_SKEW_S
    return Verified(keyid, nonce, min(window, expires) if isinstance(expires, int) else window)


class NonceCache:
    """Nonces of accepted signatures until they expire: a replayed upgrade (same nonce
    while the signature is still fresh) is refused. Bounded: the oldest go first."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._max = max_entries

    def fresh(self, nonce: str, until: float, now: float) -> bool:
        while self._seen and next(iter(self._seen.values())) < now:
            self._seen.popitem(last=False)
        if nonce in self._seen:
            return False
        self._seen[nonce] = until
        if len(self._seen) > self._max:
            self._seen.popitem(last=False)
        return True
