"""The SIP peer allowlist (networks and certificate names), the TLS settings' checks,
and what a TLS dialog advertises (Contact and the Via of our BYE)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sip_fakes import harness, in_dialog, invite

from sip_bridge.settings import Settings
from sip_bridge.sip.transaction import Peer
from sip_bridge.sip.trust import PeerTrust, certificate_names, forbidden


def test_allowlist_matches_networks_and_certificate_names() -> None:
    trust = PeerTrust.parse(" 10.0.0.0/8, 192.0.2.7,2001:db8::/32 , SBC1.Example.net ")
    assert trust.allows("10.9.8.7") and trust.allows("192.0.2.7")
    assert trust.allows("::ffff:10.1.1.1") and trust.allows("2001:db8::5")
    assert not trust.allows("192.0.2.8") and not trust.allows("127.0.0.1")
    assert trust.allows("127.0.0.1", ["sbc1.example.net"])
    assert not trust.allows("127.0.0.1", ["sbc2.example.net", "example.net"])
    assert PeerTrust.parse("").everyone and PeerTrust.parse("").allows("203.0.113.1")
    with pytest.raises(ValueError, match="no network or name"):
        PeerTrust.parse("10.0.0.0/33")
    with pytest.raises(ValueError, match="no network or name"):
        PeerTrust.parse("*.example.net")


def test_certificate_names_from_getpeercert() -> None:
    cert = {
        "subject": ((("countryName", "DE"),), (("commonName", "sbc-a"),)),
        "subjectAltName": (("DNS", "sbc-a.example.net"), ("IP Address", "192.0.2.1"), ("URI", "x")),
    }
    assert certificate_names(cert) == ("sbc-a", "sbc-a.example.net", "192.0.2.1")
    assert certificate_names(None) == ()


def test_forbidden_answers_requests_only() -> None:
    peer = Peer("udp", "192.0.2.10", 5060)
    reply = forbidden(invite(), peer)
    assert reply is not None and reply.startswith(b"SIP/2.0 403 Forbidden\r\n")
    assert b'Warning: 399 callshield "untrusted peer"' in reply
    assert forbidden(in_dialog("ACK", "abc", cseq=1, branch="z9hG4bKa"), peer) is None
    assert forbidden(b"\x00garbage", peer) is None


def test_tls_settings_must_be_complete() -> None:
    s = Settings.model_validate(
        {"sip_listen": "10.1.2.3:5060", "sip_tls_cert": "c", "sip_tls_key": "k"}
    )
    assert s.sip_tls_address == ("10.1.2.3", 5061)
    assert Settings.model_validate({}).sip_tls_address is None
    for bad in ({"sip_tls_cert": "c"}, {"sip_tls_ca": "ca"}, {"sip_tls_listen": "0.0.0.0:5061"}):
        with pytest.raises(ValidationError, match="sip_tls_cert and sip_tls_key"):
            Settings.model_validate(bad)
    with pytest.raises(ValidationError, match="no network or name"):
        Settings.model_validate({"sip_trusted_peers": "10.0.0.0/40"})


def test_tls_dialog_contact_and_bye_name_tls() -> None:
    h = harness(tls_port=5061)
    tls = Peer("tls", "192.0.2.10", 40123, conn_id=7)
    _, ok = h.send(invite(), peer=tls)
    assert ok.headers.get("Contact") == "<sip:callshield@198.51.100.1:5061;transport=tls>"
    sips = invite(call_id="second", branch="z9hG4bK2nd").replace(b"INVITE sip:", b"INVITE sips:")
    _, ok2 = h.send(sips, peer=tls)
    assert ok2.headers.get("Contact") == "<sips:callshield@198.51.100.1:5061>"
    (bye,) = h.uas.hangup(next(iter(h.controller.calls)), "test", 1.0)
    assert b"Via: SIP/2.0/TLS 198.51.100.1:5061;" in bye.data
    _, udp_ok = h.send(invite(call_id="third", branch="z9hG4bK3rd"))
    assert udp_ok.headers.get("Contact") == "<sip:callshield@198.51.100.1:5060>"
