"""The UAS core in virtual time with a socket-free media backend: methods, dialogs,
RFC 3261 timers, SIPREC, draining, RTP timeout."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from sip_fakes import PEER, harness, in_dialog, invite, responses
from sip_test_data import SIPREC_CONTENT_TYPE, siprec_body
from sip_wire import SDP_OFFER

from sip_bridge.sip.fields import NameAddr
from sip_bridge.sip.message import SipRequest, parse_message
from sip_bridge.sip.sdp import SessionDescription


def _answer(resp_body: bytes) -> SessionDescription:
    return SessionDescription.parse(resp_body)


def _establish(h, **kw):  # type: ignore[no-untyped-def]
    trying, ok = h.send(invite(**kw))
    assert (trying.status, ok.status) == (100, 200)
    tag = NameAddr.parse(ok.headers.get("To") or "").tag
    assert tag
    h.send(in_dialog("ACK", tag, cseq=1, branch="z9hG4bKack1"), now=0.1)
    return tag, ok


def test_invite_ack_bye() -> None:
    h = harness()
    tag, ok = _establish(h)
    answer = _answer(ok.body)
    (m,) = answer.media
    assert m.port == 40000 and m.formats == ["0", "8", "9", "101"]  # the offer's order
    assert m.direction == "recvonly" and answer.connection == "198.51.100.1"
    assert ok.headers.get("Content-Type") == "application/sdp"
    assert "<sip:callshield@198.51.100.1:5060>" in (ok.headers.get("Contact") or "")
    (call,) = h.controller.calls.values()
    assert (call.ani, call.dnis, call.kind) == ("5550123", "5550100", "sip")
    (leg,) = call.legs.values()
    assert (leg.codec, leg.remote, leg.role.value) == ("PCMU", ("192.0.2.10", 49170), "mixed")
    assert h.media.legs[leg.leg_id]["source"] == ("192.0.2.10", 0)
    (bye_ok,) = h.send(in_dialog("BYE", tag, cseq=2, branch="z9hG4bKbye"), now=1.0)
    assert bye_ok.status == 200
    assert h.events() == [("started", ""), ("ended", "bye")]
    assert h.media.legs == {} and h.uas.dialogs == {}
    (again,) = h.send(in_dialog("BYE", tag, cseq=3, branch="z9hG4bKbye2"), now=1.1)
    assert again.status == 481


def test_ended_follows_the_legs_playout_and_runs_on_the_controllers_thread() -> None:
    """A hang-up while audio is still buffered: the BYE is answered and the call leaves
    ``calls`` at once, but "ended" (which carries the coverage) waits until the media
    says the legs have played out, and is published through ``defer`` (the loop)."""
    h = harness()
    drains: list[tuple[list[str], Callable[[], None]]] = []

    def drain_later(leg_ids: Sequence[str], then: Callable[[], None]) -> bool:
        drains.append((list(leg_ids), then))
        return False

    deferred: list[Callable[[], None]] = []
    h.media.drain_legs = drain_later  # type: ignore[method-assign]
    h.controller.defer = deferred.append
    tag, _ = _establish(h)
    (call,) = h.controller.calls.values()
    (bye_ok,) = h.send(in_dialog("BYE", tag, cseq=2, branch="z9hG4bKbye"), now=1.0)
    assert bye_ok.status == 200 and h.controller.calls == {}
    assert h.controller.ending == {call.call_id: call} and call.state == "ending"
    assert h.events() == [("started", "")]
    ((legs, played_out),) = drains
    assert legs == list(call.legs)
    played_out()  # the playout thread
    assert h.events() == [("started", "")] and len(deferred) == 1
    deferred[0]()  # the loop
    assert h.events() == [("started", ""), ("ended", "bye")]
    assert h.controller.ending == {} and (call.state, call.end_reason) == ("ended", "bye")


def test_invite_retransmission_is_absorbed_and_2xx_retransmitted_until_ack() -> None:
    h = harness()
    h.send(invite())
    (resent,) = h.send(invite(), now=0.2)  # the UAC's Timer A fired
    assert resent.status == 200 and len(h.controller.calls) == 1
    times = [t / 10 for t in range(1, 80)]
    sent = [t for t in times if responses(h.uas.poll(t))]
    assert sent[:3] == [0.5, 1.5, 3.5]  # T1, then doubling
    assert all(b - a <= 4.0 + 1e-9 for a, b in itertools.pairwise(sent))  # capped at T2
    ok = responses(h.uas.on_datagram(invite(), PEER, 8.0))[0]
    tag = NameAddr.parse(ok.headers.get("To") or "").tag or ""
    h.send(in_dialog("ACK", tag, cseq=1, branch="z9hG4bKack"), now=8.0)
    assert all(not h.uas.poll(t) for t in (8.5, 12.0, 20.0))


def test_unacknowledged_2xx_ends_the_call_with_a_bye() -> None:
    h = harness()
    h.send(invite())
    out = []
    for k in range(1, 70):
        out += h.uas.poll(k * 0.5)
    byes = [parse_message(o.data) for o in out if o.data.startswith(b"BYE")]
    assert byes and all(isinstance(b, SipRequest) for b in byes)
    assert len({b.headers.get("Via") for b in byes}) == 1  # one BYE, retransmitted (Timer E)
    assert h.events() == [("started", ""), ("ended", "ack_timeout")]


def test_cancel_before_answer() -> None:
    h = harness(answer_delay=2.0)
    trying, ringing = h.send(invite())
    assert (trying.status, ringing.status) == (100, 180)
    ok, terminated = h.send(invite(method="CANCEL", body=""), now=0.5)
    assert (ok.status, terminated.status) == (200, 487)
    assert terminated.headers.get("CSeq") == "1 INVITE"
    assert (
        NameAddr.parse(terminated.headers.get("To") or "").tag
        == NameAddr.parse(ringing.headers.get("To") or "").tag
    )
    assert [r.status for r in responses(h.uas.poll(1.0))] == [487]  # Timer G until the ACK
    h.send(invite(method="ACK", body=""), now=1.1)  # ACK for the 487: same branch
    assert all(not h.uas.poll(t) for t in (2.1, 3.0, 5.0))  # no answer after CANCEL
    assert h.events() == [] and h.controller.calls == {}
    (late,) = h.send(invite(method="CANCEL", body="", branch="z9hG4bKother"), now=6.0)
    assert late.status == 481


def test_hold_resume_and_codec_change_by_reinvite_and_update() -> None:
    h = harness()
    tag, _ = _establish(h)
    (leg_id,) = h.media.legs
    hold = SDP_OFFER.replace("a=sendrecv", "a=inactive")
    (ok,) = h.send(in_dialog("INVITE", tag, cseq=2, branch="z9hG4bKre1", body=hold), now=1)
    assert ok.status == 200 and _answer(ok.body).media[0].direction == "inactive"
    assert h.media.legs[leg_id]["paused"] is True
    h.send(in_dialog("ACK", tag, cseq=2, branch="z9hG4bKack2"), now=1.1)
    moved = SDP_OFFER.replace("49170 RTP/AVP 0 8", "50000 RTP/AVP 8 0")
    (ok2,) = h.send(in_dialog("UPDATE", tag, cseq=3, branch="z9hG4bKup1", body=moved), now=2)
    assert ok2.status == 200 and _answer(ok2.body).media[0].port == 40000  # same port
    (call,) = h.controller.calls.values()
    assert call.legs[leg_id].codec == "PCMA" and call.legs[leg_id].remote == ("192.0.2.10", 50000)
    assert ("update", leg_id) in h.media.log and h.media.legs[leg_id]["paused"] is False
    assert h.events() == [("started", ""), ("held", ""), ("resumed", "")]
    (stale,) = h.send(in_dialog("UPDATE", tag, cseq=3, branch="z9hG4bKup2", body=moved), now=3)
    assert stale.status == 500  # CSeq not increasing
    (unknown,) = h.send(in_dialog("UPDATE", "nosuchtag", cseq=9, branch="z9hG4bKup3"), now=3)
    assert unknown.status == 481


def test_siprec_two_streams_with_metadata() -> None:
    h = harness()
    body, ctype = siprec_body(), SIPREC_CONTENT_TYPE
    extra = "Require: siprec\nContact-Extra: x\n"
    _trying, ok = h.send(invite(body=body, content_type=ctype, extra=extra))
    assert ok.status == 200 and "+sip.srs" in (ok.headers.get("Contact") or "")
    answer = _answer(ok.body)
    assert [m.port for m in answer.media] == [40000, 40002]
    assert [m.direction for m in answer.media] == ["recvonly", "recvonly"]
    assert [m.label for m in answer.media] == ["1", "2"]
    (call,) = h.controller.calls.values()
    roles = {leg.label: (leg.role.value, leg.role_source) for leg in call.legs.values()}
    assert roles == {"1": ("external", "siprec_metadata"), "2": ("internal", "siprec_metadata")}
    assert (call.kind, call.ani, call.dnis) == ("siprec", "+15550142", "agent7")
    assert call.correlation_id == "sess-42"
    tag = NameAddr.parse(ok.headers.get("To") or "").tag or ""
    h.send(in_dialog("ACK", tag, cseq=1, branch="z9hG4bKack"), now=0.1)
    # Avaya style: metadata alone in an UPDATE swaps who sends which stream.
    swapped = siprec_body(swap=True).split("--BOUNDARY", 2)[2]
    meta = swapped.split("\n\n", 1)[1].rsplit("\n--BOUNDARY--", 1)[0]
    (ok2,) = h.send(
        in_dialog(
            "UPDATE",
            tag,
            cseq=2,
            branch="z9hG4bKu",
            body=meta,
            content_type="application/rs-metadata",
        ),
        now=1,
    )
    assert ok2.status == 200 and ok2.body == b""
    roles = {leg.label: leg.role.value for leg in call.legs.values()}
    assert roles == {"1": "internal", "2": "external"}


def test_siprec_without_metadata_and_plain_sdp() -> None:
    h = harness()
    two = SDP_OFFER + "m=audio 49172 RTP/AVP 0\na=sendonly\n"
    h.send(invite(body=two, extra="Require: siprec\n"))
    (call,) = h.controller.calls.values()
    assert call.kind == "siprec"
    assert sorted(leg.role.value for leg in call.legs.values()) == ["unknown", "unknown"]


def test_draining() -> None:
    h = harness()
    h.controller.draining = True
    (options,) = h.send(invite(method="OPTIONS", body=""))
    assert options.status == 503 and options.headers.get("Retry-After") == "30"
    trying = h.send(invite(branch="z9hG4bKd1"))
    assert [r.status for r in trying] == [503]
    ok = h.send(
        invite(
            branch="z9hG4bKd2",
            call_id="siprec1",
            body=siprec_body(),
            content_type=SIPREC_CONTENT_TYPE,
        )
    )
    assert [r.status for r in ok] == [100, 200]
    assert h.events() == [("started", "unanalyzed:capacity")]


def test_capacity() -> None:
    h = harness()
    h.media.capacity = 0
    assert [r.status for r in h.send(invite())] == [100, 503]
    ok = h.send(
        invite(
            branch="z9hG4bKs", call_id="s2", body=siprec_body(), content_type=SIPREC_CONTENT_TYPE
        )
    )[1]
    assert ok.status == 200 and [m.port for m in _answer(ok.body).media] == [0, 0]
    assert h.events() == [("started", "unanalyzed:capacity")]


def test_rtp_timeout_sends_bye() -> None:
    h = harness(rtp_timeout=5.0)
    _establish(h)
    (leg_id,) = h.media.legs
    assert h.uas.poll(1.0) == []
    h.media.idle[leg_id] = 6_000_000_000
    out = h.uas.poll(3.0)
    assert len(out) == 1 and out[0].data.startswith(b"BYE sip:alice@192.0.2.10:5060 SIP/2.0")
    assert out[0].peer == PEER
    assert h.events()[-1] == ("ended", "rtp_timeout")
    bye = parse_message(out[0].data)
    assert bye.headers.get("CSeq") == "2 BYE"


def test_options_in_and_out_of_dialog() -> None:
    h = harness()
    (ok,) = h.send(invite(method="OPTIONS", body=""))
    assert ok.status == 200 and "UPDATE" in (ok.headers.get("Allow") or "")
    (gone,) = h.send(in_dialog("OPTIONS", "deadbeef", cseq=5, branch="z9hG4bKo2"))
    assert gone.status == 481
    # an SBC's keepalive inside a live call: answered as that dialog, the call goes on
    tag, _ = _establish(h)
    (alive,) = h.send(in_dialog("OPTIONS", tag, cseq=6, branch="z9hG4bKo3"), now=1.0)
    assert alive.status == 200 and NameAddr.parse(alive.headers.get("To") or "").tag == tag
    assert h.events() == [("started", "")] and len(h.controller.calls) == 1
