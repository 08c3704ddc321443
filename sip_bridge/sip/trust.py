"""Which SIP peers may talk to the bridge: an allowlist of trusted SBCs and PBXs.

Entries (``sip_trusted_peers``, comma-separated) are source networks (``10.0.0.0/8``,
``192.0.2.7``, ``2001:db8::/32``) and/or certificate names. A network matches the
message's source address on every transport; a name matches a TLS peer whose certificate
(verified against ``sip_tls_ca`` during the handshake) carries it as subject CN or as a
DNS/IP subjectAltName, compared exactly and case-insensitively (no wildcards). An empty
list trusts everyone (the default, as before). A request from an untrusted peer gets 403
with a Warning and never reaches the UAS: no dialog, no call, no RTP port; other
messages from it (ACK, responses, unparseable bytes) are dropped. The caller counts both.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sip_bridge.sip.dialog import make_response, new_tag
from sip_bridge.sip.message import SipParseError, SipRequest, parse_message
from sip_bridge.sip.transaction import Peer

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class PeerTrust:
    networks: tuple[Network, ...] = ()
    names: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str) -> PeerTrust:
        """``"10.0.0.0/8, sbc1.example.net"`` -> networks and names; ValueError for an
        entry that is neither a network nor a plausible host name."""
        networks: list[Network] = []
        names: set[str] = set()
        for item in (v.strip() for v in text.split(",")):
            if not item:
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
                continue
            except ValueError:
                pass
            if len(item) > 253 or any(c.isspace() or c in "/*" for c in item):
                raise ValueError(f"sip_trusted_peers: {item[:64]!r} is no network or name")
            names.add(item.lower())
        return cls(tuple(networks), frozenset(names))

    @property
    def everyone(self) -> bool:
        return not self.networks and not self.names

    def allows(self, host: str, cert_names: Iterable[str] = ()) -> bool:
        if self.everyone:
            return True
        try:
            address = ipaddress.ip_address(host.split("%")[0])
        except ValueError:
            address = None
        if address is not None:
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
                address = address.ipv4_mapped
            if any(address in net for net in self.networks):
                return True
        return any(name.lower() in self.names for name in cert_names)


def certificate_names(cert: dict[str, Any] | None) -> tuple[str, ...]:
    """Subject CNs and DNS/IP subjectAltNames of ``ssl.SSLSocket.getpeercert()``."""
    if not cert:
        return ()
    out: list[str] = []
    for rdn in cert.get("subject", ()):
        out.extend(str(value) for key, value in rdn if key == "commonName")
    for kind, value in cert.get("subjectAltName", ()):
        if kind in ("DNS", "IP Address"):
            out.append(str(value))
    return tuple(out)


def forbidden(data: bytes, peer: Peer) -> bytes | None:
    """The 403 for an untrusted peer's request; None for what gets no answer."""
    try:
        msg = parse_message(data, stream=peer.reliable)
    except SipParseError:
        return None
    if not isinstance(msg, SipRequest) or msg.method == "ACK":
        return None
    warning = ("Warning", '399 callshield "untrusted peer"')
    return bytes(make_response(msg.headers, peer, 403, to_tag=new_tag(), extra=[warning]))
