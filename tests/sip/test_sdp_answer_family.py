"""The SDP answer's address follows the offer's family (a dual-stack RTP bind, ``::``):
an ``IN IP4`` offer gets ``c=``/``o=`` ``IN IP4`` and an IPv4 address, an ``IN IP6``
offer ``IN IP6`` and an IPv6 one, whatever family the SIP itself runs over. SIPp calls
over real UDP, signalling on 127.0.0.1 and on ::1, each with media of both families,
per-leg ports and the shared port; SIPp sends its pcap's RTP to the address and port
the answer gives, so the audio reaches the call only if that address is of the
offer's family (an IPv6 media socket cannot send to an IPv4 answer, nor the reverse)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bridge_runner import free_udp_port, load_speech, run_sipp, running_bridge, wait_for
from rtp_pcap import write_rtp_pcap

from sip_bridge.settings import Settings

# (bridge SIP address, the per-family setting the other family needs, SIPp's address)
SIGNALLING = {
    "sip4": ("127.0.0.1:0", {"advertised_address_ip6": "::1"}, "127.0.0.1"),
    "sip6": ("[::1]:0", {"advertised_address_ip4": "127.0.0.1"}, "::1"),
}
MEDIA = {"IP4": "127.0.0.1", "IP6": "::1"}


def _answer(workdir: Path) -> str:
    """The SDP of the bridge's 200 to the INVITE, from SIPp's -trace_msg log."""
    (log,) = workdir.glob("uac_family_*_messages.log")
    text = log.read_text()
    head = text.index("SIP/2.0 200 OK")
    body = text[head : text.index("m=audio", head)]
    return body


@pytest.mark.parametrize("shared", [False, True], ids=["per_leg", "shared_port"])
@pytest.mark.parametrize("signalling", sorted(SIGNALLING))
def test_answer_address_follows_the_offer_family(
    signalling: str, shared: bool, shared_dir: Path, tmp_path: Path
) -> None:
    listen, family_setting, sipp_ip = SIGNALLING[signalling]
    settings: dict[str, object] = {"sip_listen": listen, "rtp_host": "::", **family_setting}
    if shared:
        settings["rtp_shared_port"] = free_udp_port()
    speech = load_speech(shared_dir, 1.2)
    with running_bridge(**settings) as bridge:
        for n, (family, media_ip) in enumerate(sorted(MEDIA.items())):
            workdir = tmp_path / family
            workdir.mkdir()
            write_rtp_pcap(workdir / "speech.pcap", speech, ssrc=0xFA0 + n)
            before = len(bridge.publisher.events)
            result = run_sipp(
                "uac_family.xml",
                bridge,
                workdir,
                ip=sipp_ip,
                extra=["-mi", media_ip, "-trace_msg"],
            )
            assert result.returncode == 0, result.stderr[-2000:]
            sdp = _answer(workdir)
            assert re.search(rf"^o=callshield \d+ \d+ IN {family} {media_ip}\s*$", sdp, re.M), sdp
            assert re.search(rf"^c=IN {family} {media_ip}\s*$", sdp, re.M), sdp
            started = [c for e, c in bridge.publisher.events[before:] if e.event == "started"]
            (leg,) = started[0].legs.values()
            assert wait_for(lambda lid=leg.leg_id: bridge.sink.counts(lid).get("normal", 0) >= 20)
            if shared:
                assert leg.local_port == settings["rtp_shared_port"]
        assert wait_for(lambda: bridge.calls() == {})


def test_family_addresses_from_settings() -> None:
    def addresses(**values: object) -> tuple[str | None, str | None]:
        return Settings.model_validate(values).sdp_addresses()

    assert addresses(sip_listen="127.0.0.1:5060") == ("127.0.0.1", None)
    assert addresses(sip_listen="[::]:5060", rtp_host="::") == (None, None)  # wildcards
    assert addresses(sip_listen="10.0.0.5:5060", rtp_host="2001:db8::5") == (
        "10.0.0.5",
        "2001:db8::5",
    )
    # an advertised address (NAT) is all that is advertised: no bound address leaks
    assert addresses(sip_listen="10.0.0.5", advertised_address="203.0.113.9") == (
        "203.0.113.9",
        None,
    )
    assert addresses(
        sip_listen="10.0.0.5",
        advertised_address="203.0.113.9",
        advertised_address_ip6="2001:db8::9",
    ) == ("203.0.113.9", "2001:db8::9")
    with pytest.raises(ValueError, match="advertised_address_ip4"):
        Settings.model_validate({"advertised_address_ip4": "::1"})
    with pytest.raises(ValueError, match="advertised_address_ip6"):
        Settings.model_validate({"advertised_address_ip6": "::"})
