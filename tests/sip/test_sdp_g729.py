"""G.729 is not decoded (no licence-compatible decoder: docs/integrations.md, "Codec
matrix"): an offer that puts G.729 first is answered with the next codec we decode and
never names G.729 (static payload type 18 or an rtpmap), so the sender cannot pick it;
an offer of G.729 alone is not acceptable (the UAS answers 488)."""

from __future__ import annotations

import pytest
from sip_wire import SDP_OFFER

from sip_bridge.sip.offer_answer import NotAcceptableError, build_answer, negotiate
from sip_bridge.sip.sdp import SessionDescription


@pytest.mark.parametrize("rtpmap", ["", "a=rtpmap:18 G729/8000\na=fmtp:18 annexb=no\n"])
def test_g729_first_is_answered_with_a_codec_we_decode(rtpmap: str) -> None:
    sdp = SDP_OFFER.replace("RTP/AVP 0 8 9 101", "RTP/AVP 18 8 101") + rtpmap
    (stream,) = negotiate(SessionDescription.parse(sdp.encode()))
    assert stream.accepted and stream.codec == "PCMA"
    assert [p.pt for p in stream.payload_types] == [8, 101]
    text = bytes(
        build_answer(
            SessionDescription.parse(sdp.encode()),
            [stream],
            {0: 20000},
            local_host="192.0.2.1",
            session_id=1,
            version=0,
        )
    ).decode()
    assert "m=audio 20000 RTP/AVP 8 101\r\n" in text
    assert "G729" not in text and ":18 " not in text


def test_g729_alone_is_not_acceptable() -> None:
    sdp = SDP_OFFER.replace("RTP/AVP 0 8 9 101", "RTP/AVP 18 101") + "a=rtpmap:18 G729/8000\n"
    with pytest.raises(NotAcceptableError):
        negotiate(SessionDescription.parse(sdp.encode()))
