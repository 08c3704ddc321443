"""SDP, multipart/mixed and SIPREC metadata parsing, and offer/answer."""

from __future__ import annotations

import pytest
from sip_wire import SDP_OFFER, crlf

from sip_bridge.sip.multipart import ContentType, Multipart
from sip_bridge.sip.offer_answer import NotAcceptableError, build_answer, negotiate
from sip_bridge.sip.sdp import RtpMap, SessionDescription
from sip_bridge.sip.siprec import RecordingMetadata

# Two streams from an SBC, RFC 7866 §8.1.1 style (labels, sendonly, session-level c=).
SIPREC_SDP = """v=0
o=SRC 2890844526 2890844526 IN IP4 192.0.2.20
s=-
c=IN IP4 192.0.2.20
t=0 0
m=audio 49170 RTP/AVP 8 0 101
a=rtpmap:8 PCMA/8000
a=rtpmap:0 PCMU/8000
a=rtpmap:101 telephone-event/8000
a=label:96
a=sendonly
m=audio 49172 RTP/AVP 0
c=IN IP4 192.0.2.21
a=label:97
a=sendonly
m=video 49174 RTP/AVP 31
a=label:98
"""

RFC7865_METADATA = b"""<?xml version="1.0" encoding="UTF-8"?>
<recording xmlns='urn:ietf:params:xml:ns:recording:1'>
  <datamode>complete</datamode>
  <session session_id="hVpd7YQgRW2nD22h7q60JQ==">
    <sipSessionID>ab30317f1a784dc48ff824d0d3715d86;remote=47755a9de7794ba387653f2099600ef2</sipSessionID>
  </session>
  <participant participant_id="srfBElmCRp2QB23b7Mpk0w==">
    <nameID aor="sip:+15550123@example.com"><name xml:lang="it">Bob</name></nameID>
  </participant>
  <participant participant_id="zSfPoSvdSDCmU3A3TRDxAw==">
    <nameID aor="sip:agent17@cc.example.com"/>
  </participant>
  <stream stream_id="UAAMm5GRQKSCMVvLyl4rFw==" session_id="hVpd7YQgRW2nD22h7q60JQ==">
    <label>96</label></stream>
  <stream stream_id="i1Pz3to5hGk8fuXl+PbwCw==" session_id="hVpd7YQgRW2nD22h7q60JQ==">
    <label>97</label></stream>
  <participantstreamassoc participant_id="srfBElmCRp2QB23b7Mpk0w==">
    <send>UAAMm5GRQKSCMVvLyl4rFw==</send><recv>i1Pz3to5hGk8fuXl+PbwCw==</recv>
  </participantstreamassoc>
  <participantstreamassoc participant_id="zSfPoSvdSDCmU3A3TRDxAw==">
    <send>i1Pz3to5hGk8fuXl+PbwCw==</send><recv>UAAMm5GRQKSCMVvLyl4rFw==</recv>
  </participantstreamassoc>
</recording>"""

# Acme/Oracle SBC style: draft-era ids, send inside <participant>, a callingParty
# extension that names the caller although it is listed second, and prefixed tags.
ACME_METADATA = b"""<?xml version='1.0' encoding='UTF-8'?>
<rec:recording xmlns:rec='urn:ietf:params:xml:ns:recording'>
  <rec:datamode>complete</rec:datamode>
  <rec:session id="S1"/>
  <rec:participant id="P-agent" session="S1">
    <rec:nameID aor="sip:2001@10.0.0.2"><rec:name>2001</rec:name></rec:nameID>
    <rec:send>ST-b</rec:send>
    <rec:extensiondata xmlns:apkt="http://acmepacket.com/siprec/extensiondata">
      <apkt:callingParty>false</apkt:callingParty>
    </rec:extensiondata>
  </rec:participant>
  <rec:participant id="P-cust" session="S1">
    <rec:nameID aor="sip:+15550199@carrier.example"/>
    <rec:send>ST-a</rec:send>
    <rec:extensiondata xmlns:apkt="http://acmepacket.com/siprec/extensiondata">
      <apkt:callingParty>true</apkt:callingParty>
    </rec:extensiondata>
  </rec:participant>
  <rec:stream id="ST-a" session="S1"><rec:label>16777227</rec:label>
    <rec:mode>separate</rec:mode></rec:stream>
  <rec:stream id="ST-b" session="S1"><rec:label>16777228</rec:label></rec:stream>
</rec:recording>"""

# BroadWorks: the pre-RFC root element and namespace, one mixed stream.
BROADWORKS_METADATA = b"""<recording_metadata xmlns="urn:ietf:params:xml:ns:siprec">
  <dataMode>complete</dataMode>
  <session id="urn:uuid:e76f6cf1"><ExtensionData/></session>
  <participant id="p1"><nameID aor="sip:+15550111@sbc.example"/><send>s1</send></participant>
  <participant id="p2"><nameID aor="sip:5550100@sbc.example"/><send>s1</send></participant>
  <stream id="s1" session="urn:uuid:e76f6cf1"><label>1</label><mode>mixed</mode></stream>
</recording_metadata>"""


def test_sdp_fields_and_round_trip() -> None:
    sdp = SessionDescription.parse(crlf(SIPREC_SDP))
    assert [m.label for m in sdp.media] == ["96", "97", "98"]
    first, second, video = sdp.media
    assert sdp.media_connection(first) == "192.0.2.20"
    assert sdp.media_connection(second) == "192.0.2.21"
    assert sdp.media_direction(first) == "sendonly"
    assert first.rtpmaps == {
        8: RtpMap(8, "PCMA", 8000),
        0: RtpMap(0, "PCMU", 8000),
        101: RtpMap(101, "telephone-event", 8000),
    }
    assert second.rtpmaps == {0: RtpMap(0, "PCMU", 8000)}  # static payload, no rtpmap
    assert video.media == "video"
    again = SessionDescription.parse(bytes(sdp))
    assert bytes(again) == bytes(sdp)


def test_sdp_tolerates_lf_and_trailing_space() -> None:
    sdp = SessionDescription.parse(SDP_OFFER.replace("\n", " \n").encode())
    assert sdp.media[0].ptime == 20 and sdp.media[0].fmtp(101) == "0-15"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("o=x 1 1 IN IP4 h\ns=-\n", "SDP must start with v=0"),
        ("v=0\ns=-\nc=IN IP4 1.2.3.4\n", "SDP without o= line"),
        (
            "v=0\no=x 1 1 IN IP4 h\ns=-\nm=audio 5 RTP/AVP 0\n",
            "m= line 0 has no connection address",
        ),
        (
            "v=0\no=x 1 1 IN IP4 h\ns=-\nc=IN IP4 h\nm=audio 99999 RTP/AVP 0\n",
            "bad m= port '99999'",
        ),
        ("v=0\no=x 1 1 IN IP4 h\ns=-\nc=IN IP9 h\n", "bad c= line 'IN IP9 h'"),
        ("v=0\no=x 1 1 IN IP4 h\ns=-\nthis is not sdp\n", "bad SDP line 'this is not sdp'"),
        ("v=0\no=x\ns=-\nc=IN IP4 h\n" + "m=audio 1 RTP/AVP 0\n" * 17, "more than 16 m= lines"),
    ],
)
def test_bad_sdp(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        SessionDescription.parse(text.encode())
    assert str(info.value) == message


def test_offer_answer_answers_only_what_we_decode() -> None:
    offer = SessionDescription.parse(crlf(SIPREC_SDP))
    streams = negotiate(offer)
    assert [s.accepted for s in streams] == [True, True, False]
    assert streams[0].codec == "PCMA"  # the offerer's preference among ours
    assert [p.encoding for p in streams[0].payload_types] == ["PCMA", "PCMU", "telephone-event"]
    answer = build_answer(
        offer, streams, {0: 20000, 1: 20002}, local_host="198.51.100.1", session_id=7, version=0
    )
    text = bytes(answer).decode()
    assert "m=audio 20000 RTP/AVP 8 0 101\r\n" in text
    assert "m=audio 20002 RTP/AVP 0\r\n" in text
    assert "m=video 0 RTP/AVP 31\r\n" in text
    assert text.count("a=recvonly") == 2 and "a=label:97" in text
    assert "c=IN IP4 198.51.100.1" in text


def test_g722_and_opus_are_answered_in_the_offer_order() -> None:
    sdp = SDP_OFFER.replace("m=audio 49170 RTP/AVP 0 8 9 101", "m=audio 49170 RTP/AVP 111 9 0 101")
    sdp += "a=rtpmap:111 opus/48000/2\na=fmtp:111 useinbandfec=1\n"
    offer = SessionDescription.parse(sdp.encode())
    (stream,) = negotiate(offer)
    assert stream.codec == "OPUS"
    assert [(p.encoding, p.clock_rate, p.channels) for p in stream.payload_types] == [
        ("opus", 48000, 2),
        ("G722", 8000, 1),
        ("PCMU", 8000, 1),
        ("telephone-event", 8000, 1),
    ]
    text = bytes(
        build_answer(offer, [stream], {0: 20000}, local_host="192.0.2.1", session_id=1, version=0)
    ).decode()
    assert "m=audio 20000 RTP/AVP 111 9 0 101\r\n" in text
    assert "a=rtpmap:111 opus/48000/2\r\n" in text and "a=fmtp:111 useinbandfec=1" in text
    assert "a=rtpmap:9 G722/8000\r\n" in text


def test_codecs_we_do_not_decode_are_not_acceptable() -> None:
    sdp = SDP_OFFER.replace("m=audio 49170 RTP/AVP 0 8 9 101", "m=audio 49170 RTP/AVP 18 111")
    sdp += "a=rtpmap:111 opus/16000/2\n"  # not Opus's RTP clock
    sdp = sdp.replace("a=rtpmap:0 PCMU/8000\n", "").replace("a=rtpmap:8 PCMA/8000\n", "")
    with pytest.raises(NotAcceptableError):
        negotiate(SessionDescription.parse(sdp.encode()))


@pytest.mark.parametrize(
    ("direction", "answer", "sends"),
    [
        ("sendrecv", "recvonly", True),
        ("sendonly", "recvonly", True),
        ("recvonly", "inactive", False),
        ("inactive", "inactive", False),
    ],
)
def test_directions(direction: str, answer: str, sends: bool) -> None:
    sdp = SessionDescription.parse(SDP_OFFER.replace("a=sendrecv", f"a={direction}").encode())
    (stream,) = negotiate(sdp)
    assert (stream.answer_direction, stream.peer_sends) == (answer, sends)


def multipart_body(
    meta: bytes, sdp: str = SIPREC_SDP, boundary: str = "OSS-unique-boundary-42"
) -> bytes:
    return (
        b"--"
        + boundary.encode()
        + b"\r\nContent-Type: application/sdp\r\n\r\n"
        + crlf(sdp)
        + b"\r\n--"
        + boundary.encode()
        + b"\r\nContent-Type: application/rs-metadata+xml\r\n"
        b"Content-Disposition: recording-session\r\n\r\n"
        + meta
        + b"\r\n--"
        + boundary.encode()
        + b"--\r\n"
    )


def test_multipart_mixed() -> None:
    ctype = ContentType.parse('multipart/mixed;boundary="OSS-unique-boundary-42"')
    body = multipart_body(RFC7865_METADATA)
    mp = Multipart.parse(body, ctype)
    assert [p.content_type.mime for p in mp.parts] == [
        "application/sdp",
        "application/rs-metadata+xml",
    ]
    assert mp.parts[1].disposition == "recording-session"
    assert mp.parts[1].body == RFC7865_METADATA
    assert Multipart.parse(bytes(mp), ctype).parts[1].body == RFC7865_METADATA
    binary = Multipart.parse(multipart_body(b"\x00\r\n\xff--x"), ctype)
    assert binary.parts[1].body == b"\x00\r\n\xff--x"


@pytest.mark.parametrize(
    ("body", "ctype", "message"),
    [
        (
            b"--b\r\n\r\nx",
            "multipart/mixed;boundary=b",
            "multipart body without a closing boundary",
        ),
        (b"nothing", "multipart/mixed;boundary=b", "multipart boundary not found in the body"),
        (b"--b--", "multipart/mixed", "multipart body without a usable boundary"),
    ],
)
def test_bad_multipart(body: bytes, ctype: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        Multipart.parse(body, ContentType.parse(ctype))
    assert str(info.value) == message


def test_rfc7865_metadata_roles() -> None:
    meta = RecordingMetadata.parse(RFC7865_METADATA)
    assert [p.aor for p in meta.participants] == [
        "sip:+15550123@example.com",
        "sip:agent17@cc.example.com",
    ]
    assert meta.participants[0].name == "Bob"
    roles = meta.roles()
    assert (roles["96"].role, roles["97"].role) == ("external", "internal")
    again = RecordingMetadata.parse(bytes(meta))
    assert again.roles() == roles


def test_vendor_metadata_is_read_leniently() -> None:
    acme = RecordingMetadata.parse(ACME_METADATA).roles()
    assert acme["16777227"].role == "external"  # the callingParty, though listed second
    assert acme["16777228"].role == "internal"
    assert acme["16777227"].participant is not None
    assert acme["16777227"].participant.aor == "sip:+15550199@carrier.example"
    broadworks = RecordingMetadata.parse(BROADWORKS_METADATA)
    assert broadworks.roles()["1"].role == "mixed"
    assert broadworks.session_ids == ["urn:uuid:e76f6cf1"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"<recording><unclosed></recording>", "recording metadata is not well-formed XML"),
        (
            b'<!DOCTYPE r [<!ENTITY a "aaaa">]><recording>&a;</recording>',
            "recording metadata must not contain a DTD or entities",
        ),
        (b"<html/>", "unexpected metadata root element 'html'"),
    ],
)
def test_bad_metadata(data: bytes, message: str) -> None:
    with pytest.raises(ValueError) as info:
        RecordingMetadata.parse(data)
    assert str(info.value).startswith(message)
