"""Late offer (INVITE without SDP: our offer in the 200, the answer in the ACK) and
reliable provisional responses (RFC 3262 PRACK / 100rel), in virtual time."""

from __future__ import annotations

from sip_fakes import PEER, Harness, harness, in_dialog, invite, responses
from sip_test_data import siprec_body

from sip_bridge.sip.fields import NameAddr
from sip_bridge.sip.message import SipRequest, SipResponse, parse_message
from sip_bridge.sip.sdp import SessionDescription
from sip_bridge.sip.transaction import Outgoing

ANSWER = """v=0
o=alice 1 1 IN IP4 192.0.2.10
s=-
c=IN IP4 192.0.2.10
t=0 0
m=audio 49170 RTP/AVP 8 101
a=rtpmap:8 PCMA/8000
a=rtpmap:101 telephone-event/8000
a=sendonly
"""


def _tag(resp: SipResponse) -> str:
    return NameAddr.parse(resp.headers.get("To") or "").tag or ""


def _offer(h: Harness, body: str = "", **kw: str) -> tuple[str, SessionDescription]:
    trying, ok = h.send(invite(body=body, **kw))
    assert (trying.status, ok.status) == (100, 200)
    assert ok.headers.get("Content-Type") == "application/sdp"
    return _tag(ok), SessionDescription.parse(ok.body)


def _byes(out: list[Outgoing]) -> list[SipRequest]:
    msgs = [parse_message(o.data) for o in out]
    return [m for m in msgs if isinstance(m, SipRequest) and m.method == "BYE"]


def test_late_offer_answer_in_ack_opens_the_leg() -> None:
    h = harness()
    tag, offer = _offer(h)
    (m,) = offer.media
    assert (m.port, m.formats, m.direction) == (40000, ["0", "8", "9", "111", "101"], "recvonly")
    maps = {p.pt: (p.encoding, p.clock_rate, p.channels) for p in m.rtpmaps.values()}
    assert maps[111] == ("opus", 48000, 2) and maps[101] == ("telephone-event", 8000, 1)
    (call,) = h.controller.calls.values()
    (leg_id,) = h.media.legs
    assert h.media.legs[leg_id]["source"] is None  # nothing learned before the answer
    assert h.uas.on_datagram(_ack(tag, body=ANSWER), PEER, 0.1) == []
    leg = call.legs[leg_id]
    assert (leg.codec, leg.remote, leg.paused) == ("PCMA", ("192.0.2.10", 49170), False)
    assert h.media.legs[leg_id]["source"] == ("192.0.2.10", 0)
    assert [p.codec for p in h.media.legs[leg_id]["pts"]] == ["PCMA", "telephone-event"]  # type: ignore[attr-defined]
    assert h.events() == [("started", ""), ("updated", "")]
    assert h.uas.poll(1.0) == [] and h.uas.poll(5.0) == []  # the ACK stopped the 2xx
    h.send(_ack(tag, body=ANSWER), now=0.2)  # a retransmitted ACK changes nothing
    assert h.events() == [("started", ""), ("updated", "")]


def test_ack_without_an_answer_ends_the_call() -> None:
    h = harness()
    tag, _ = _offer(h)
    out = h.uas.on_datagram(_ack(tag), PEER, 0.1)
    (bye,) = _byes(out)
    assert bye.headers.get("CSeq") == "2 BYE"
    assert h.events() == [("started", ""), ("ended", "no_answer_in_ack")]
    assert h.controller.calls == {} and h.media.legs == {}
    assert h.uas.stats["ack_without_answer"] == 1


def test_ack_whose_answer_takes_no_offered_codec_ends_the_call() -> None:
    h = harness()
    tag, _ = _offer(h)
    g729 = ANSWER.replace("RTP/AVP 8 101", "RTP/AVP 18").replace("PCMA/8000", "G729/8000")
    out = h.uas.on_datagram(_ack(tag, body=g729), PEER, 0.1)
    assert len(_byes(out)) == 1
    assert h.events()[-1] == ("ended", "bad_answer_in_ack")


def test_siprec_late_offer_offers_one_labelled_line_per_metadata_stream() -> None:
    h = harness()
    body = siprec_body()
    meta = body.split("--BOUNDARY", 2)[2].split("\n\n", 1)[1].rsplit("\n--BOUNDARY--", 1)[0]
    tag, offer = _offer(
        h, body=meta, content_type="application/rs-metadata+xml", extra="Require: siprec\n"
    )
    assert [(m.label, m.direction) for m in offer.media] == [("1", "recvonly"), ("2", "recvonly")]
    sdp = body.split("\n\n", 2)[1].split("\n--BOUNDARY", 1)[0] + "\n"
    h.send(_ack(tag, body=sdp), now=0.1)
    (call,) = h.controller.calls.values()
    legs = {leg.label: (leg.role.value, leg.codec, leg.remote) for leg in call.legs.values()}
    assert legs == {
        "1": ("external", "PCMU", ("192.0.2.10", 49170)),
        "2": ("internal", "PCMU", ("192.0.2.10", 49172)),
    }


def test_reinvite_without_offer_takes_the_answer_from_its_ack() -> None:
    h = harness()
    _trying, ok = h.send(invite())
    tag = _tag(ok)
    h.send(_ack(tag), now=0.1)
    (re_ok,) = h.send(in_dialog("INVITE", tag, cseq=2, branch="z9hG4bKre", body=""), now=1)
    assert re_ok.status == 200 and re_ok.body  # our offer
    moved = ANSWER.replace("49170", "50002")
    h.send(_ack(tag, cseq=2, branch="z9hG4bKack2", body=moved), now=1.1)
    (call,) = h.controller.calls.values()
    (leg,) = call.legs.values()
    assert (leg.remote, leg.codec) == (("192.0.2.10", 50002), "PCMA")
    (re2,) = h.send(in_dialog("INVITE", tag, cseq=3, branch="z9hG4bKre3", body=""), now=2)
    assert re2.status == 200
    assert h.uas.on_datagram(_ack(tag, cseq=3, branch="z9hG4bKack3"), PEER, 2.1) == []
    assert h.events()[-1][0] != "ended"  # an established call survives a bare ACK


# ---- PRACK / 100rel -------------------------------------------------------------------


def test_reliable_180_is_retransmitted_until_prack() -> None:
    h = harness(answer_delay=4.0)
    trying, ringing = h.send(invite(extra="Require: 100rel\nSupported: timer\n"))
    assert (trying.status, ringing.status) == (100, 180)
    rseq = ringing.headers.get("RSeq") or ""
    assert ringing.headers.get("Require") == "100rel" and rseq.isdigit()
    assert ringing.headers.get("Contact")
    again = [r.status for t in (0.2, 0.5, 1.0, 1.5) for r in responses(h.uas.poll(t))]
    assert again == [180, 180]  # at T1 and 3*T1
    tag = _tag(ringing)
    bad = in_dialog("PRACK", tag, cseq=2, branch="z9hG4bKpr0").replace(
        b"Content-Length", f"RAck: {int(rseq) + 1} 1 INVITE\r\nContent-Length".encode()
    )
    (nope,) = h.send(bad, now=1.6)
    assert nope.status == 481
    prack = in_dialog("PRACK", tag, cseq=3, branch="z9hG4bKpr1").replace(
        b"Content-Length", f"RAck: {rseq} 1 INVITE\r\nContent-Length".encode()
    )
    (ok,) = h.send(prack, now=1.7)
    assert ok.status == 200 and ok.headers.get("CSeq") == "3 PRACK"
    assert h.uas.poll(3.5) == []  # no more 180s
    (final,) = responses(h.uas.poll(4.0))
    assert final.status == 200 and _tag(final) == tag
    assert h.uas.stats["prack"] == 1


def test_no_prack_rejects_the_invite_after_64_t1() -> None:
    h = harness(answer_delay=60.0)
    _trying, ringing = h.send(invite(extra="Require: 100rel\n"))
    assert ringing.headers.get("RSeq")
    statuses = []
    t = 0.0
    while t < 33.0:
        t += 0.25
        statuses += [r.status for r in responses(h.uas.poll(t))]
    assert statuses.count(180) == 6  # at 0.5, 1.5, 3.5, 7.5, 15.5, 31.5 s (no T2 cap)
    assert statuses[-1] == 500
    assert h.controller.calls == {} and h.uas.dialogs == {} and h.media.legs == {}
    assert h.events() == [("started", ""), ("ended", "prack_timeout")]  # started at the 180


def test_supported_100rel_alone_keeps_the_180_unreliable() -> None:
    h = harness(answer_delay=1.0)
    _trying, ringing = h.send(invite(extra="Supported: 100rel, timer\n"))
    assert ringing.status == 180 and ringing.headers.get("RSeq") is None
    assert responses(h.uas.poll(0.6)) == []
    (ok,) = responses(h.uas.poll(1.0))
    assert ok.status == 200


def _prack(tag: str, rseq: str, *, cseq: int = 2, body: str = "") -> bytes:
    return in_dialog("PRACK", tag, cseq=cseq, branch=f"z9hG4bKpr{cseq}", body=body).replace(
        b"Content-Length", f"RAck: {rseq} 1 INVITE\r\nContent-Length".encode()
    )


def test_reliable_180_carries_the_answer_and_the_200_repeats_it() -> None:
    """RFC 3261 §13.2.1 / RFC 6337: the INVITE's offer is answered in the first
    reliable non-failure response; the 200 repeats it byte for byte (no second
    answer), and not before the 180's PRACK (RFC 3262 §3). Media before the 200 is
    the dialog's early media."""
    h = harness(answer_delay=1.0)
    _trying, ringing = h.send(invite(extra="Require: 100rel\n"))
    assert ringing.status == 180 and ringing.headers.get("Content-Type") == "application/sdp"
    answer = SessionDescription.parse(ringing.body)
    (m,) = answer.media
    (call,) = h.controller.calls.values()
    (leg,) = call.legs.values()
    assert (m.port, m.direction) == (leg.local_port, "recvonly") and leg.local_port == 40000
    assert call.early_media and call.state_said == ("early", "sip_dialog")
    waiting = [r.status for r in responses(h.uas.poll(1.2))]
    assert waiting == [180]  # retransmitted; the 200 is due but the 180 holds SDP (no PRACK)
    prack_ok, ok = h.send(_prack(_tag(ringing), ringing.headers.get("RSeq") or ""), now=1.3)
    assert (prack_ok.status, prack_ok.body) == (200, b"")
    assert prack_ok.headers.get("CSeq") == "2 PRACK" and ok.headers.get("CSeq") == "1 INVITE"
    assert ok.status == 200 and ok.body == ringing.body  # same o= version: not a new answer
    assert not call.early_media and h.events() == [("started", ""), ("updated", "answered")]
    assert h.controller.call_states.snapshot() == {
        ("said", "sip_dialog", "early"): 1,
        ("said", "sip_dialog", "answered"): 1,
    }
    assert h.uas.stats["answer_in_reliable_provisional"] == 1


def test_pbx_saying_early_keeps_the_call_early_after_our_200() -> None:
    h = harness(answer_delay=0.5)
    _trying, ringing = h.send(invite(extra="Require: 100rel\nX-CallShield-Call-State: early\n"))
    h.send(_prack(_tag(ringing), ringing.headers.get("RSeq") or ""), now=0.1)
    (ok,) = responses(h.uas.poll(0.5))
    (call,) = h.controller.calls.values()
    assert ok.status == 200 and call.state_said == ("early", "sip_header")  # the PBX's word


def test_offerless_invite_gets_our_offer_in_the_reliable_180_and_the_answer_in_prack() -> None:
    h = harness(answer_delay=2.0)
    _trying, ringing = h.send(invite(body="", extra="Require: 100rel\n"))
    assert ringing.status == 180 and ringing.headers.get("RSeq")
    (m,) = SessionDescription.parse(ringing.body).media
    assert (m.port, m.direction, m.formats[0]) == (40000, "recvonly", "0")
    tag, rseq = _tag(ringing), ringing.headers.get("RSeq") or ""
    g722 = ANSWER.replace("RTP/AVP 8 101", "RTP/AVP 9").replace("PCMA/8000", "G722/8000")
    (offer_upd,) = h.send(in_dialog("UPDATE", tag, cseq=2, branch="z9hG4bKu", body=g722), 0.1)
    assert offer_upd.status == 491  # RFC 3311 §5.2: our offer is still unanswered
    (prack_ok,) = h.send(_prack(tag, rseq, cseq=3, body=ANSWER), now=0.2)
    assert prack_ok.status == 200
    (call,) = h.controller.calls.values()
    (leg,) = call.legs.values()
    assert (leg.codec, leg.remote) == ("PCMA", ("192.0.2.10", 49170))
    (ok,) = responses(h.uas.poll(2.0))
    assert ok.status == 200 and ok.body == ringing.body  # our offer, unchanged
    assert h.uas.on_datagram(_ack(tag), PEER, 2.1) == []  # no answer due in the ACK
    assert h.events() == [("started", ""), ("updated", ""), ("updated", "answered")]
    assert h.uas.stats["offer_in_reliable_provisional"] == 1


def test_prack_without_the_answer_to_our_offer_fails_the_invite() -> None:
    h = harness(answer_delay=2.0)
    _trying, ringing = h.send(invite(body="", extra="Require: 100rel\n"))
    prack_ok, refused = h.send(_prack(_tag(ringing), ringing.headers.get("RSeq") or ""), 0.1)
    assert (prack_ok.status, refused.status) == (200, 488)
    assert refused.headers.get("CSeq") == "1 INVITE" and "no_answer_in_prack" in (
        refused.headers.get("Warning") or ""
    )
    assert h.controller.calls == {} and h.media.legs == {} and h.uas.dialogs == {}
    assert h.events() == [("started", ""), ("ended", "no_answer_in_prack")]
    assert h.uas.stats["prack_without_answer"] == 1
    again = [r.status for t in (0.7, 1.7, 3.0) for r in responses(h.uas.poll(t))]
    assert again and set(again) == {488}  # the 488 until its ACK; no 180 again, no 200


def _ack(tag: str, *, cseq: int = 1, branch: str = "z9hG4bKack1", body: str = "") -> bytes:
    return in_dialog("ACK", tag, cseq=cseq, branch=branch, body=body)


def test_a_new_offer_in_the_prack_after_the_180s_answer_is_answered_in_its_200() -> None:
    h = harness(answer_delay=1.0)
    _trying, ringing = h.send(invite(extra="Require: 100rel\n"))
    moved = ANSWER.replace("49170", "50010").replace("a=sendonly", "a=sendrecv")
    (prack_ok,) = h.send(_prack(_tag(ringing), ringing.headers.get("RSeq") or "", body=moved))
    assert prack_ok.status == 200 and prack_ok.headers.get("CSeq") == "2 PRACK"
    answer = SessionDescription.parse(prack_ok.body)
    assert answer.lines[1][1].split()[2] == "1"  # o= version moved on: a new answer
    (call,) = h.controller.calls.values()
    (leg,) = call.legs.values()
    assert (leg.remote, leg.codec) == (("192.0.2.10", 50010), "PCMA")
    (ok,) = responses(h.uas.poll(1.0))
    assert ok.status == 200 and ok.body == prack_ok.body  # the session as it now stands


def test_ending_a_call_before_our_200_answers_its_invite_480_not_bye() -> None:
    h = harness(answer_delay=60.0, rtp_timeout=5.0)
    _trying, ringing = h.send(invite(extra="Require: 100rel\n"))
    h.send(_prack(_tag(ringing), ringing.headers.get("RSeq") or ""), now=0.1)
    (leg_id,) = h.media.legs
    h.media.idle[leg_id] = 6 * 10**9  # no RTP for longer than rtp_timeout
    out = h.uas.poll(1.0)
    assert _byes(out) == []  # RFC 3261 §15: no BYE in an early dialog from the callee
    (gone,) = responses(out)
    assert (gone.status, gone.headers.get("CSeq")) == (480, "1 INVITE")
    assert h.events() == [("started", ""), ("ended", "rtp_timeout")]
