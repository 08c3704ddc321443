"""SIP message parsing: captured-style wire bytes in, fields and exact errors out."""

from __future__ import annotations

import pytest
from sip_wire import crlf

from sip_bridge.sip.fields import NameAddr, SipUri, Via
from sip_bridge.sip.message import (
    SipParseError,
    SipRequest,
    SipResponse,
    canonical_name,
    parse_message,
    split_list,
)

# RFC 3261 §24.2 style INVITE from a softphone, compact forms and a folded header.
COMPACT = crlf(
    """INVITE sip:bob@biloxi.example.com SIP/2.0
v: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bKnashds8
v: SIP/2.0/TCP proxy.example.com:5061;branch=z9hG4bK1, SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK2
Max-Forwards: 70
t: Bob <sip:bob@biloxi.example.com>
f: "Alice \\"A\\", Smith" <sip:alice@atlanta.example.com>;tag=1928301774
i: a84b4c76e66710
CSeq: 314159 INVITE
m: <sip:alice@pc33.atlanta.example.com>
Subject: folded
 across
\tlines
k: timer, 100rel
c: application/sdp
l: 5

v=0
EXTRA"""
)


def test_compact_forms_folding_and_lists() -> None:
    req = SipRequest.parse(COMPACT)
    assert (req.method, req.uri, req.version) == ("INVITE", "sip:bob@biloxi.example.com", "SIP/2.0")
    h = req.headers
    assert h.get("call-id") == "a84b4c76e66710"
    assert h.get("Subject") == "folded across lines"
    assert len(h.get_all("Via")) == 3
    assert Via.parse(h.get_all("via")[1]).branch == "z9hG4bK1"
    assert h.get_all("Supported") == ["timer", "100rel"]
    assert req.body == b"v=0\r\n"  # Content-Length cuts the UDP datagram's tail
    assert NameAddr.parse(h.get("From") or "").display == 'Alice "A", Smith'
    assert NameAddr.parse(h.get("From") or "").tag == "1928301774"


def test_folded_empty_value() -> None:  # found by test_sip_mutations
    req = SipRequest.parse(COMPACT.replace(b"i: a84b4c76e66710", b"i:\r\n a84b4c76e66710"))
    assert req.headers.get("Call-ID") == "a84b4c76e66710"
    assert bytes(SipRequest.parse(bytes(req))) == bytes(req)


def test_round_trip_is_stable() -> None:
    req = SipRequest.parse(COMPACT)
    again = SipRequest.parse(bytes(req))
    assert again == req
    assert bytes(again) == bytes(req)
    assert b"Call-ID: a84b4c76e66710\r\n" in bytes(req)


def test_response() -> None:
    data = crlf(
        """SIP/2.0 180 Ringing
Via: SIP/2.0/UDP 198.51.100.1:5060;branch=z9hG4bKabc;received=192.0.2.1
To: <sip:bob@b.example>;tag=a6c85cf
From: <sip:alice@a.example>;tag=1928301774
Call-ID: x@y
CSeq: 2 BYE
Content-Length: 0

"""
    )
    resp = SipResponse.parse(data)
    assert (resp.status, resp.reason) == (180, "Ringing")
    assert bytes(SipResponse.parse(bytes(resp))) == bytes(resp)


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("v", "Via"),
        ("CALL-ID", "Call-ID"),
        ("cseq", "CSeq"),
        ("content-type", "Content-Type"),
        ("p-asserted-identity", "P-Asserted-Identity"),
        ("X-Custom-thing", "X-Custom-Thing"),
    ],
)
def test_canonical_names(name: str, canonical: str) -> None:
    assert canonical_name(name) == canonical


def test_split_list_respects_quotes_and_brackets() -> None:
    value = '"Doe, J" <sip:a@b;x=1,2>, <sip:c@d>;q=0.5'
    assert split_list(value) == ['"Doe, J" <sip:a@b;x=1,2>', "<sip:c@d>;q=0.5"]


BASE = """INVITE sip:bob@b.example SIP/2.0
Via: SIP/2.0/UDP a.example;branch=z9hG4bK1
To: <sip:bob@b.example>
From: <sip:alice@a.example>;tag=1
Call-ID: c1
CSeq: 1 INVITE
Max-Forwards: 70
Content-Length: 0

"""


@pytest.mark.parametrize(
    ("mutate", "message", "status"),
    [
        (
            lambda s: s.replace("SIP/2.0\n", "SIP/7.0\n", 1),
            "SIP version SIP/7.0 not supported",
            505,
        ),
        (
            lambda s: s.replace("INVITE sip:", "INVITE  sip:", 1),
            "request line must be 'Method SP Request-URI SP SIP-Version'",
            400,
        ),
        (
            lambda s: s.replace("sip:bob@b.example SIP", "<sip:bob@b.example> SIP", 1),
            "bad Request-URI '<sip:bob@b.example>'",
            400,
        ),
        (lambda s: " " + s, "whitespace before the start line", 400),
        (lambda s: s.replace("Call-ID: c1\n", ""), "missing Call-ID header", 400),
        (
            lambda s: s.replace("CSeq: 1 INVITE", "CSeq: 1 ACK"),
            "CSeq method ACK does not match INVITE",
            400,
        ),
        (
            lambda s: s.replace("CSeq: 1 INVITE", "CSeq: 36893488147419103232 INVITE"),
            "CSeq number larger than 2**31-1",
            400,
        ),
        (lambda s: s.replace("Max-Forwards: 70", "Max-Forwards: 300"), "bad Max-Forwards", 400),
        (
            lambda s: s.replace("Content-Length: 0", "Content-Length: 0\nContent-Length: 0"),
            "more than one Content-Length header",
            400,
        ),
        (
            lambda s: s.replace("Content-Length: 0", "Content-Length: -5"),
            "bad Content-Length '-5'",
            400,
        ),
        (
            lambda s: s.replace("Content-Length: 0", "Content-Length: 99"),
            "Content-Length 99 larger than the body (0 bytes)",
            400,
        ),
        (
            lambda s: s.replace("From: <sip:alice", 'From: "Alice <sip:alice'),
            "unbalanced quotes in header value",
            400,
        ),
        (
            lambda s: s.replace("Max-Forwards: 70", "Max Forwards: 70"),
            "bad header line 'Max Forwards: 70'",
            400,
        ),
        (
            lambda s: s.replace("Max-Forwards: 70", "Max-Forwards: 70\n" + "X-A: b\n" * 130),
            "more than 128 headers",
            513,
        ),
        (lambda s: s.replace("\n\n", "\n"), "no empty line after the headers", 400),
        (
            lambda s: s.replace("To: <sip:bob@b.example>", "To: <sip:bob@b.example"),
            "unbalanced <> in To",
            400,
        ),
    ],
)
def test_malformed_requests(mutate, message: str, status: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SipParseError) as info:
        parse_message(crlf(mutate(BASE)))
    assert str(info.value) == message
    assert info.value.status == status


@pytest.mark.parametrize(
    "start", ["SIP/2.0 99 Too small", "SIP/2.0 900 Big", "SIP/2.0 4294967301 Huge", "SIP/2.0 200"]
)
def test_bad_status_lines_are_dropped(start: str) -> None:
    data = crlf(BASE.replace("INVITE sip:bob@b.example SIP/2.0", start, 1))
    with pytest.raises(SipParseError) as info:
        parse_message(data)
    assert info.value.status is None


def test_oversized_message() -> None:
    with pytest.raises(SipParseError, match="message larger than 65535 bytes") as info:
        parse_message(crlf(BASE) + b"x" * 70_000)
    assert info.value.status == 513


def test_tcp_requires_content_length() -> None:
    data = crlf(BASE.replace("Content-Length: 0\n", ""))
    assert parse_message(data).body == b""
    with pytest.raises(SipParseError, match="Content-Length is required on stream transports"):
        parse_message(data, stream=True)


@pytest.mark.parametrize(
    ("text", "scheme", "user", "host", "port"),
    [
        (
            "sip:alice@atlanta.example.com:5070;transport=tcp",
            "sip",
            "alice",
            "atlanta.example.com",
            5070,
        ),
        (
            "sips:+15550100;user=phone@gw.example",
            "sips",
            "+15550100;user=phone",
            "gw.example",
            None,
        ),
        ("sip:[2001:db8::10]:5060", "sip", "", "2001:db8::10", 5060),
        ("tel:+1-201-555-0123;phone-context=x", "tel", "+1-201-555-0123", "", None),
        ("sip:user:pw@h.example?subject=hi", "sip", "user", "h.example", None),
    ],
)
def test_uris(text: str, scheme: str, user: str, host: str, port: int | None) -> None:
    uri = SipUri.parse(text)
    assert (uri.scheme, uri.user, uri.host, uri.port) == (scheme, user, host, port)


def test_uri_round_trip() -> None:
    uri = SipUri.parse("sip:bob@[2001:db8::1]:5061;transport=tls;lr")
    assert str(uri) == "sip:bob@[2001:db8::1]:5061;transport=tls;lr"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nouri", "bad URI 'nouri'"),
        ("sip:a@h:99999", "bad port '99999'"),
        ("sip:[::1", "bad IPv6 reference '[::1'"),
    ],
)
def test_bad_uris(text: str, message: str) -> None:
    with pytest.raises(SipParseError) as info:
        SipUri.parse(text)
    assert str(info.value) == message


def test_name_addr_forms() -> None:
    plain = NameAddr.parse("sip:alice@a.example;tag=88")
    assert (plain.uri, plain.tag) == ("sip:alice@a.example", "88")
    quoted = NameAddr.parse('"Bob \\"B\\"" <sip:bob@b.example;transport=udp>;tag=x;expires=60')
    assert quoted.display == 'Bob "B"' and quoted.uri == "sip:bob@b.example;transport=udp"
    assert quoted.params == {"tag": "x", "expires": "60"}
    assert NameAddr.parse(str(quoted)) == quoted
    with pytest.raises(SipParseError, match="quoted display name without <uri>"):
        NameAddr.parse('"Bob" sip:bob@b.example')


def test_via() -> None:
    via = Via.parse("SIP/2.0/UDP [2001:db8::9]:5070;branch=z9hG4bKx;rport;received=192.0.2.1")
    assert (via.transport, via.host, via.port, via.branch) == (
        "UDP",
        "2001:db8::9",
        5070,
        "z9hG4bKx",
    )
    assert via.params["rport"] is None
    assert Via.parse(str(via)) == via
    with pytest.raises(SipParseError, match=r"bad Via protocol 'SIP/3\.0/UDP'"):
        Via.parse("SIP/3.0/UDP a.example")
