"""``--advertised-address`` for NAT and cloud nodes (issue 12): a real bridge listening on
127.0.0.1 answers a real UDP INVITE with the advertised address in its SDP (``c=`` and
``o=``) and Contact, while its RTP port still receives on the address it bound: audio
sent there reaches the call."""

from __future__ import annotations

import socket

from bridge_runner import running_bridge, wait_for
from test_rtp_robustness import _invite, _rtp

from sip_bridge.sip.message import SipResponse, parse_message
from sip_bridge.sip.sdp import SessionDescription

PUBLIC = "203.0.113.9"


def test_sdp_and_contact_carry_the_advertised_address() -> None:
    with (
        running_bridge(advertised_address=PUBLIC) as bridge,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sip,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rtp,
    ):
        sip.bind(("127.0.0.1", 0))
        rtp.bind(("127.0.0.1", 0))
        sip.settimeout(5)
        invite = _invite("adv1", rtp.getsockname()[1], sip.getsockname()[1])
        sip.sendto(invite, ("127.0.0.1", bridge.sip_port))
        while True:
            ok = parse_message(sip.recv(65535))
            assert isinstance(ok, SipResponse)
            if ok.status == 200:
                break
        text = ok.body.decode()
        assert f"c=IN IP4 {PUBLIC}\r\n" in text and f"IN IP4 {PUBLIC}\r\n" in text.split("s=")[0]
        assert PUBLIC in (ok.headers.get("Contact") or "")
        assert "127.0.0.1" not in text  # nothing of the bound address leaks into the SDP
        port = SessionDescription.parse(ok.body).media[0].port
        for k in range(50):
            rtp.sendto(_rtp(k, k * 160, 0xAD, b"\xff" * 160), ("127.0.0.1", port))
        (leg_id,) = bridge.on_loop(lambda: bridge.bridge.media.leg_ids)
        assert wait_for(lambda: bridge.sink.counts(leg_id).get("normal", 0) > 0, 5)
