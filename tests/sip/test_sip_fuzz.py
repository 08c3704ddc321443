"""Property fuzzing of the SIP, SDP, multipart and SIPREC parsers (Hypothesis): any
input either parses or raises ValueError with a message, and what parses survives a
serialise/parse round trip. ``tests/sip/fuzz_sip.py`` is the same target for atheris."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sip_wire import SDP_OFFER, crlf

from sip_bridge.sip.message import SipParseError, parse_message
from sip_bridge.sip.multipart import ContentType, Multipart
from sip_bridge.sip.sdp import SessionDescription
from sip_bridge.sip.siprec import RecordingMetadata

SEED = (
    crlf(
        """INVITE sip:bob@b.example SIP/2.0
v: SIP/2.0/UDP a.example:5060;branch=z9hG4bK1;rport
To: "Bob" <sip:bob@b.example>
f: <sip:alice@a.example>;tag=1
i: c1@a
CSeq: 1 INVITE
Max-Forwards: 70
Subject: folded
 line
Content-Type: application/sdp
"""
    )
    + b"Content-Length: "
    + str(len(crlf(SDP_OFFER))).encode()
    + b"\r\n\r\n"
    + crlf(SDP_OFFER)
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    """The seed with a few byte-level edits: insert, delete, replace, truncate."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "truncate"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        chunk = draw(
            st.sampled_from(
                [b"\r\n", b" ", b":", b";", b"<", b'"', b",", b"\x00", b"\xff", b"=", b"/", b"0"]
            )
        )
        if op == "insert":
            data[at:at] = chunk
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "replace" and data:
            data[at : at + len(chunk)] = chunk
        else:
            del data[at:]
    return bytes(data)


def _check_sip(data: bytes) -> None:
    try:
        message = parse_message(data)
    except SipParseError as exc:
        assert str(exc)
        return
    again = parse_message(bytes(message))
    assert bytes(again) == bytes(message)


@FUZZ
@given(st.binary(max_size=2048))
def test_sip_random_bytes(data: bytes) -> None:
    _check_sip(data)


@FUZZ
@given(mutated(SEED))
def test_sip_mutations(data: bytes) -> None:
    _check_sip(data)


def _check_sdp(data: bytes) -> None:
    try:
        sdp = SessionDescription.parse(data)
    except ValueError as exc:
        assert str(exc)
        return
    for m in sdp.media:  # the properties the UAS reads never raise
        _ = (m.rtpmaps, m.direction, m.label, m.ptime, sdp.media_connection(m))
    assert bytes(SessionDescription.parse(bytes(sdp))) == bytes(sdp)


@FUZZ
@given(mutated(crlf(SDP_OFFER)))
def test_sdp_mutations(data: bytes) -> None:
    _check_sdp(data)


@FUZZ
@given(st.text(alphabet="vocmas=0123456789 IPN4/.:-\n", max_size=400))
def test_sdp_random_text(text: str) -> None:
    _check_sdp(text.encode())


@FUZZ
@given(mutated(b"--b\r\nContent-Type: application/sdp\r\n\r\nv=0\r\n--b\r\n\r\n<x/>\r\n--b--\r\n"))
def test_multipart_mutations(data: bytes) -> None:
    try:
        Multipart.parse(data, ContentType.parse("multipart/mixed;boundary=b"))
    except ValueError as exc:
        assert str(exc)


@FUZZ
@given(
    mutated(
        b"<recording xmlns='urn:ietf:params:xml:ns:recording:1'><participant "
        b"participant_id='p'><nameID aor='sip:a@b'/></participant><stream stream_id='s'>"
        b"<label>1</label></stream></recording>"
    )
)
def test_metadata_mutations(data: bytes) -> None:
    try:
        RecordingMetadata.parse(data).roles()
    except ValueError as exc:
        assert str(exc)
