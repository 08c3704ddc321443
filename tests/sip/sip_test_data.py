"""A SIPREC body (SDP with two labelled streams + RFC 7865 metadata) for the tests."""

from __future__ import annotations

SIPREC_CONTENT_TYPE = "multipart/mixed;boundary=BOUNDARY"


def siprec_body(swap: bool = False, audio_port: int = 49170, host: str = "192.0.2.10") -> str:
    a, b = ("st-b", "st-a") if swap else ("st-a", "st-b")
    return f"""--BOUNDARY
Content-Type: application/sdp

v=0
o=SRC 1 1 IN IP4 {host}
s=-
c=IN IP4 {host}
t=0 0
m=audio {audio_port} RTP/AVP 0 101
a=rtpmap:0 PCMU/8000
a=rtpmap:101 telephone-event/8000
a=label:1
a=sendonly
m=audio {audio_port + 2} RTP/AVP 0 101
a=rtpmap:0 PCMU/8000
a=rtpmap:101 telephone-event/8000
a=label:2
a=sendonly

--BOUNDARY
Content-Type: application/rs-metadata+xml
Content-Disposition: recording-session

<?xml version="1.0" encoding="UTF-8"?>
<recording xmlns="urn:ietf:params:xml:ns:recording:1">
<datamode>complete</datamode>
<session session_id="sess-42"/>
<participant participant_id="caller"><nameID aor="sip:+15550142@carrier.example"/></participant>
<participant participant_id="agent"><nameID aor="sip:agent7@cc.example"/></participant>
<stream stream_id="st-a" session_id="sess-42"><label>1</label></stream>
<stream stream_id="st-b" session_id="sess-42"><label>2</label></stream>
<participantstreamassoc participant_id="caller"><send>{a}</send></participantstreamassoc>
<participantstreamassoc participant_id="agent"><send>{b}</send></participantstreamassoc>
</recording>
--BOUNDARY--
"""
