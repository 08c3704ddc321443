"""Twilio request validation (``X-Twilio-Signature``) for the Media Streams upgrade.

Twilio signs each request it makes with the account's auth token: base64 of
HMAC-SHA1 over the full URL it requested followed by the POST parameters sorted by name
(name + value, concatenated). A WebSocket upgrade has no POST parameters, so the
signed string is the ``wss://`` URL itself, query included.

Behind a TLS terminator the bridge sees ``ws://`` and its own host, not the URL Twilio
signed; ``public_url`` (settings ``twilio_public_url``, e.g. ``wss://shield.example.com``)
says what Twilio connected to. Without it the URL is rebuilt from the request
(``X-Forwarded-Proto``, ``Host``). Like Twilio's own helper libraries, the URL is also
tried with the default port added or removed, since proxies differ on that.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

_DEFAULT_PORTS = {"wss": 443, "https": 443, "ws": 80, "http": 80}


def twilio_signature(auth_token: bytes, url: str, params: Mapping[str, str] | None = None) -> str:
    """The signature Twilio sends for ``url`` (and form ``params``, none for WebSockets)."""
    data = url + "".join(k + v for k, v in sorted((params or {}).items()))
    return base64.b64encode(hmac.new(auth_token, data.encode(), hashlib.sha1).digest()).decode()


def url_variants(url: str) -> list[str]:
    """``url`` as given, and with its scheme's default port added or removed."""
    parts = urlsplit(url)
    default = _DEFAULT_PORTS.get(parts.scheme)
    out = [url]
    if default is None or parts.hostname is None:
        return out
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if parts.port is None:
        out.append(urlunsplit(parts._replace(netloc=f"{host}:{default}")))
    elif parts.port == default:
        out.append(urlunsplit(parts._replace(netloc=host)))
    return out


def signed_url(
    path: str, query: str, headers: Mapping[str, str], scheme: str, public_url: str | None
) -> str:
    """The URL Twilio presumably signed for this upgrade request."""
    tail = path + (f"?{query}" if query else "")
    if public_url:
        return public_url.rstrip("/") + tail
    proto = headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    if proto in ("https", "wss"):
        scheme = "wss"
    elif proto in ("http", "ws"):
        scheme = "ws"
    return f"{scheme}://{headers.get('host', '')}{tail}"


def valid_signature(auth_token: bytes, urls: Iterable[str], given: str) -> bool:
    """Whether ``given`` is Twilio's signature of one of ``urls`` (constant-time
    comparison for each candidate)."""
    ok = False
    for url in urls:
        for variant in url_variants(url):
            expected = twilio_signature(auth_token, variant)
            ok |= hmac.compare_digest(expected.encode(), given.encode())
    return ok
