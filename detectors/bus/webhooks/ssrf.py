"""SSRF checks for webhook targets, at creation and at every send (DESIGN.md §6).

A target must be http(s) without credentials in the URL, and every address its host
resolves to must be a public unicast address: no loopback, private (RFC 1918, ULA),
link-local (incl. the 169.254.169.254 / fd00:ec2::254 metadata services), CGNAT,
multicast, reserved or unspecified address, unless the endpoint is explicitly allowed
to (labs, tests). The sender then connects to the address it checked (pinned), so a
DNS answer that changes between check and connect (rebinding) cannot redirect it;
redirects are never followed.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
_CGNAT = ipaddress.ip_network("100.64.0.0/10")


class BlockedTarget(ValueError):  # noqa: N818 - reads as the condition, like ValueError
    """The URL or an address it resolves to is not an allowed webhook target."""


@dataclass(frozen=True, slots=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # path + query


def parse_target(url: str) -> Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise BlockedTarget(f"webhook URL scheme must be http or https, not {parts.scheme!r}")
    if parts.username or parts.password:
        raise BlockedTarget("webhook URL must not carry credentials")
    if not parts.hostname:
        raise BlockedTarget("webhook URL has no host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, path)


def address_problem(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why ``ip`` is not a public unicast address, or None."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return address_problem(ip.ipv4_mapped)
    if ip in _METADATA:
        return "a cloud metadata address"
    checks = (
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local"),
        (ip.is_private, "private"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT, "shared (CGNAT)"),
        (ip.is_multicast, "multicast"),
        (ip.is_unspecified, "unspecified"),
        (ip.is_reserved, "reserved"),
    )
    for hit, what in checks:
        if hit:
            return what
    return None


def resolve(host: str, port: int, allow_private: bool) -> str:
    """The address to connect to: the first that resolves and passes the check. Every
    resolved address must pass (one bad answer blocks the target)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise BlockedTarget(f"webhook host does not resolve: {exc}") from None
    addresses = [str(info[4][0]) for info in infos]
    for text in addresses:
        problem = address_problem(ipaddress.ip_address(text.split("%")[0]))
        if problem and not allow_private:
            raise BlockedTarget(f"webhook host resolves to {problem} address {text}")
    return addresses[0]


def check_url(url: str, allow_private: bool) -> tuple[Target, str]:
    """Parse and resolve ``url``; (target, pinned address) or ``BlockedTarget``."""
    target = parse_target(url)
    return target, resolve(target.host, target.port, allow_private)
