"""Malformed and hostile SIP in the style of RFC 4475 (messages written here): each gets
its correct response or is dropped, the UAS never raises, and a live call in the middle
of it all does not notice."""

from __future__ import annotations

import pytest
from sip_fakes import harness, in_dialog, invite
from sip_wire import SDP_OFFER, crlf

from sip_bridge.sip.fields import NameAddr

OK = crlf(
    """OPTIONS sip:monitor@198.51.100.1 SIP/2.0
Via: SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bKtorture
To: <sip:monitor@198.51.100.1>
From: <sip:probe@192.0.2.10>;tag=t1
Call-ID: torture-1
CSeq: 1 OPTIONS
Max-Forwards: 70
Content-Length: 0

"""
)


def _sub(old: str, new: str) -> bytes:
    assert old.encode() in OK, old
    return OK.replace(old.encode(), new.encode(), 1)


def _branch(data: bytes, n: int) -> bytes:
    return data.replace(b"z9hG4bKtorture", f"z9hG4bKt{n}".encode())


CORPUS: list[tuple[str, bytes, int | None]] = [
    # --- valid but unusual (RFC 4475 §3.1.1 spirit): all answered 200
    (
        "wide whitespace and folding",
        crlf(
            "OPTIONS sip:monitor@198.51.100.1 SIP/2.0\nVia  :  SIP/2.0/UDP 192.0.2.10:5060\n"
            "  ;branch=z9hG4bKws\nTo:<sip:monitor@198.51.100.1>\nFrom   :<sip:p@192.0.2.10>;tag=w\n"
            "Call-ID:ws\ncseq:   1\n OPTIONS\nl:0\n\n"
        ),
        200,
    ),
    (
        "compact forms, unknown headers",
        _sub("Max-Forwards: 70", "X-Vendor: 1\nk: foo\nMax-Forwards: 70"),
        200,
    ),
    (
        "escaped and odd URI",
        _sub("sip:monitor@198.51.100.1 SIP", "sip:%6Donitor;x=%22y@198.51.100.1 SIP"),
        200,
    ),
    ("tel URI", _sub("sip:monitor@198.51.100.1 SIP", "tel:+15550100 SIP"), 200),
    (
        "long header value",
        _sub("Max-Forwards: 70", "X-Long: " + "a" * 4000 + "\nMax-Forwards: 70"),
        200,
    ),
    ("LF-only line ends", OK.replace(b"\r\n", b"\n"), 200),
    ("RFC 2543 peer without magic cookie", _sub("branch=z9hG4bKtorture", "branch=1"), 200),
    # --- must be rejected with a specific response
    ("unknown SIP version", _sub("SIP/2.0\r\nVia", "SIP/7.0\r\nVia"), 505),
    ("unsupported URI scheme", _sub("sip:monitor@198.51.100.1 SIP", "isbn:2983792873 SIP"), 416),
    (
        "unknown Require",
        _sub("Max-Forwards: 70", "Require: nothingSupportedHere\nMax-Forwards: 70"),
        420,
    ),
    ("missing Call-ID: unaddressable", _sub("Call-ID: torture-1\r\n", ""), None),
    ("missing Via", _sub("Via: SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bKtorture\r\n", ""), None),
    ("CSeq method mismatch", _sub("CSeq: 1 OPTIONS", "CSeq: 1 INVITE"), 400),
    ("CSeq too large", _sub("CSeq: 1 OPTIONS", "CSeq: 4294967296 OPTIONS"), 400),
    ("negative Content-Length", _sub("Content-Length: 0", "Content-Length: -999"), 400),
    ("Content-Length beyond datagram", _sub("Content-Length: 0", "Content-Length: 5000"), 400),
    ("two Content-Lengths", _sub("Content-Length: 0", "Content-Length: 0\r\nl: 0"), 400),
    ("Max-Forwards overflow", _sub("Max-Forwards: 70", "Max-Forwards: 4294967297"), 400),
    ("unterminated quote", _sub("From: <sip:probe", 'From: "Probe <sip:probe'), 400),
    (
        "<> around Request-URI",
        _sub("sip:monitor@198.51.100.1 SIP", "<sip:monitor@198.51.100.1> SIP"),
        400,
    ),
    (
        "spaces in Request-URI",
        _sub("sip:monitor@198.51.100.1 SIP", "sip:mon itor@198.51.100.1 SIP"),
        400,
    ),
    ("leading whitespace", b" " + OK, 400),
    ("header without colon", _sub("Max-Forwards: 70", "Max-Forwards 70"), 400),
    (
        "non-UTF-8 header",
        OK.replace(b"Max-Forwards: 70", b"X-Bin: \xff\xfe\r\nMax-Forwards: 70"),
        400,
    ),
    (
        "oversized",
        _sub(
            "Max-Forwards: 70",
            "X-Pad: " + "p" * 7000 + "\n" + ("X-P: q\n" * 9000) + "Max-Forwards: 70",
        ),
        513,
    ),
    ("too many headers", _sub("Max-Forwards: 70", "X-H: 1\n" * 200 + "Max-Forwards: 70"), 513),
    (
        "REGISTER is not for us",
        _sub("OPTIONS sip", "REGISTER sip").replace(b"1 OPTIONS", b"1 REGISTER"),
        405,
    ),
    (
        "unknown method",
        _sub("OPTIONS sip", "NEWMETHOD sip").replace(b"1 OPTIONS", b"1 NEWMETHOD"),
        501,
    ),
    (
        "SUBSCRIBE to an unknown package",
        _sub("OPTIONS sip", "SUBSCRIBE sip").replace(b"1 OPTIONS", b"1 SUBSCRIBE"),
        489,
    ),
    (
        "BYE outside any dialog",
        _sub("OPTIONS sip", "BYE sip")
        .replace(b"1 OPTIONS", b"1 BYE")
        .replace(b"monitor@198.51.100.1>", b"monitor@198.51.100.1>;tag=nope"),
        481,
    ),
    (
        "CANCEL without INVITE",
        _sub("OPTIONS sip", "CANCEL sip").replace(b"1 OPTIONS", b"1 CANCEL"),
        481,
    ),
    (
        "INVITE with an unknown body type",
        invite(body="hello", content_type="application/unknownformat"),
        415,
    ),
    ("INVITE with gzip body", invite(extra="Content-Encoding: gzip\n"), 415),
    ("INVITE with broken SDP", invite(body="v=0\nthis is not sdp\n"), 400),
    (
        "INVITE with G.729 only",
        invite(
            body=SDP_OFFER.replace("RTP/AVP 0 8 9 101", "RTP/AVP 18")
            .replace("a=rtpmap:0 PCMU/8000\n", "")
            .replace("a=rtpmap:8 PCMA/8000\n", "")
        ),
        488,
    ),
    ("INVITE with SRTP only", invite(body=SDP_OFFER.replace("RTP/AVP", "RTP/SAVP")), 488),
    ("INVITE without an offer (late offer: ours in the 200)", invite(body=""), 200),
    ("session interval too small", invite(extra="Session-Expires: 30\nSupported: timer\n"), 422),
    (
        "multipart without SDP",
        invite(
            body="--b\nContent-Type: text/plain\n\nhi\n--b--\n",
            content_type="multipart/mixed;boundary=b",
        ),
        415,
    ),
    # --- dropped: nothing sensible to answer
    ("garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", None),
    ("status code 99", crlf("SIP/2.0 99 Low\nVia: SIP/2.0/UDP h;branch=z9hG4bKr\n\n"), None),
    ("status code 4294967301", crlf("SIP/2.0 4294967301 Big\nVia: SIP/2.0/UDP h\n\n"), None),
    (
        "stray 200 OK",
        crlf(
            "SIP/2.0 200 OK\nVia: SIP/2.0/UDP h;branch=z9hG4bKx\nTo: <sip:a@b>\n"
            "From: <sip:c@d>;tag=1\nCall-ID: z\nCSeq: 1 BYE\nContent-Length: 0\n\n"
        ),
        None,
    ),
    ("ACK for nothing", _sub("OPTIONS sip", "ACK sip").replace(b"1 OPTIONS", b"1 ACK"), None),
    (
        "malformed ACK",
        _sub("OPTIONS sip", "ACK sip")
        .replace(b"1 OPTIONS", b"1 ACK")
        .replace(b"Call-ID: torture-1\r\n", b""),
        None,
    ),
    ("only CRLF keep-alive", b"\r\n\r\n", None),
    ("request line only", b"INVITE sip:a@b SIP/2.0\r\n\r\n", None),
]


@pytest.mark.parametrize(("name", "data", "status"), CORPUS, ids=[c[0] for c in CORPUS])
def test_torture_message(name: str, data: bytes, status: int | None) -> None:
    h = harness()
    got = h.send(_branch(data, 1))
    final = [r.status for r in got if r.status >= 200]
    assert final == ([] if status is None else [status]), name
    if status == 415:
        assert "application/sdp" in (got[-1].headers.get("Accept") or "")
    if status == 420:
        assert got[-1].headers.get("Unsupported") == "nothingSupportedHere"
    if status is not None:  # the response is addressed to the request
        assert got[-1].headers.get("Call-ID")
        assert got[-1].headers.get("CSeq")


def test_corpus_leaves_a_live_call_alone() -> None:
    h = harness()
    _trying, ok = h.send(invite(call_id="live-call"))
    tag = NameAddr.parse(ok.headers.get("To") or "").tag or ""
    h.send(in_dialog("ACK", tag, cseq=1, branch="z9hG4bKack", call_id="live-call"))
    legs_before = dict(h.media.legs)
    for n, (_, data, _) in enumerate(CORPUS * 3):
        h.send(_branch(data, n + 10), now=0.01 * n)
    assert h.media.legs == legs_before
    (call,) = h.controller.calls.values()
    assert call.sip_call_id == "live-call"
    (bye,) = h.send(in_dialog("BYE", tag, cseq=2, branch="z9hG4bKbye", call_id="live-call"), now=5)
    assert bye.status == 200
    assert [e for e in h.events() if e[0] == "ended"] == [("ended", "bye")]
    assert h.uas.stats["parse_errors"] > 0 and "handler_errors" not in h.uas.stats
