"""Wire-bytes helpers for the SIP tests (no bridge imports)."""

from __future__ import annotations


def crlf(text: str) -> bytes:
    """A message written with \\n line ends, as CRLF wire bytes (body included)."""
    return text.replace("\r\n", "\n").replace("\n", "\r\n").encode()


SDP_OFFER = """v=0
o=alice 2890844526 2890844526 IN IP4 192.0.2.10
s=-
c=IN IP4 192.0.2.10
t=0 0
m=audio 49170 RTP/AVP 0 8 9 101
a=rtpmap:0 PCMU/8000
a=rtpmap:8 PCMA/8000
a=rtpmap:9 G722/8000
a=rtpmap:101 telephone-event/8000
a=fmtp:101 0-15
a=ptime:20
a=sendrecv
"""
