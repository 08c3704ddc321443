"""Early media for plain SIP forks (issue 10): the call-state header on the INVITE, and
on a re-INVITE, UPDATE or (legacy) INFO inside the dialog, through the real UAS and call
controller (the media backend records what it is told). Bad values are counted by
origin and reason and ignored; the call and its media never suffer for them."""

from __future__ import annotations

from sip_fakes import harness, invite, metrics_text, responses
from sip_wire import SDP_OFFER

from sip_bridge.call_state import StateHint, Verdict, call_state_collector, read_state, taken
from sip_bridge.sip.dialog import MAX_PENDING
from sip_bridge.sip.fields import NameAddr
from sip_bridge.sip.sdp import SessionDescription

EARLY = "X-CallShield-Call-State: early\n"
ANSWERED = "X-CallShield-Call-State: answered\n"
SE = "Session-Expires: 1800;refresher=uac\nSupported: timer\n"


def _establish(h, extra: str = ""):  # type: ignore[no-untyped-def]
    trying, ok = h.send(invite(extra=extra))
    assert (trying.status, ok.status) == (100, 200)
    tag = NameAddr.parse(ok.headers.get("To") or "").tag
    assert tag
    h.send(invite(method="ACK", to_tag=tag, cseq=1, branch="z9hG4bKack1", body=""), now=0.1)
    return tag, ok


def _in_dialog(h, method, tag, cseq, extra, body="", now=1.0, n=0):  # type: ignore[no-untyped-def]
    """A request inside the dialog; ``n`` tells apart two with one CSeq (branches)."""
    return h.send(
        invite(
            method=method,
            to_tag=tag,
            cseq=cseq,
            branch=f"z9hG4bK{method}{cseq}x{n}",
            body=body,
            extra=extra,
        ),
        now=now,
    )


def test_read_state_words_and_refusals() -> None:
    for word in ("early", " Ringing ", "PROGRESS", "alerting", "proceeding", "ring"):
        assert read_state([word]).state == "early", word
    for word in ("answered", "Up", "connected", "confirmed", "active", "answer"):
        assert read_state([word]).state == "answered", word
    assert read_state([]).state is None and read_state([]).reason is None
    assert read_state(["  "]).reason is None  # empty: nothing said, nothing counted
    assert read_state(["early", "EARLY"]).state == "early"  # the same state twice
    assert read_state(["early", "answered"]).reason == "conflicting"
    assert read_state(["hold"]).reason == "unknown"
    assert read_state(["early;x=1"]).reason == "malformed"
    assert read_state(["e" * 33]).reason == "malformed"
    assert read_state(["\x00early"]).reason == "malformed"


def test_invite_early_then_reinvite_answered_keeps_the_media() -> None:
    h = harness()
    tag, ok = _establish(h, EARLY)
    (call,) = h.controller.calls.values()
    (leg_id,) = h.media.legs
    assert call.early_media is True and call.kind == "sip"
    port = SessionDescription.parse(ok.body).media[0].port
    log_before = list(h.media.log)
    (ok2,) = _in_dialog(h, "INVITE", tag, 2, ANSWERED, body=SDP_OFFER)
    assert ok2.status == 200 and SessionDescription.parse(ok2.body).media[0].port == port
    assert call.early_media is False
    assert h.media.log == log_before  # same offer: the leg was not touched
    assert h.media.legs[leg_id]["paused"] is False
    assert h.events() == [("started", ""), ("updated", "")]
    said = h.controller.call_states.snapshot()
    assert said == {("said", "sip_header", "early"): 1, ("said", "sip_header", "answered"): 1}
    # answered stays answered: a later "early" is refused and counted, the call unchanged
    (ok3,) = _in_dialog(h, "UPDATE", tag, 3, EARLY, now=2.0)
    assert ok3.status == 200 and ok3.body == b"" and call.early_media is False
    assert h.controller.call_states.snapshot()[("rejected", "sip_header", "after_answer")] == 1


def test_update_without_sdp_says_answered() -> None:
    h = harness()
    tag, _ = _establish(h, "X-CallShield-Call-State: ringing\n")
    (call,) = h.controller.calls.values()
    assert call.early_media is True
    (ok,) = _in_dialog(h, "UPDATE", tag, 2, "X-CallShield-Call-State: Up\n")
    assert ok.status == 200 and ok.body == b"" and call.early_media is False
    assert len(h.media.legs) == 1 and h.events()[-1] == ("updated", "")


def test_info_says_answered_and_is_answered_per_rfc_6086() -> None:
    h = harness()
    tag, _ = _establish(h, EARLY)
    (call,) = h.controller.calls.values()
    (pkg,) = _in_dialog(h, "INFO", tag, 2, "Info-Package: dtmf\n" + ANSWERED)
    assert pkg.status == 469 and pkg.headers.get("Recv-Info") == ""
    assert call.early_media is True  # the refused INFO changed nothing
    (stale,) = _in_dialog(h, "INFO", tag, 2, ANSWERED, n=1)
    assert stale.status == 500 and call.early_media is True  # CSeq not increasing
    (ok,) = _in_dialog(h, "INFO", tag, 3, ANSWERED)
    assert ok.status == 200 and call.early_media is False
    assert NameAddr.parse(ok.headers.get("To") or "").tag == tag
    assert h.events() == [("started", ""), ("updated", "answered")]
    (plain,) = _in_dialog(h, "INFO", tag, 4, "")
    assert plain.status == 200 and h.events()[-1] == ("updated", "answered")
    (gone,) = _in_dialog(h, "INFO", "nosuchtag", 5, ANSWERED)
    assert gone.status == 481
    assert h.uas.stats["info_package_refused"] == 1 and len(h.media.legs) == 1


def test_bad_values_are_counted_and_ignored_never_refusing_the_call() -> None:
    h = harness()
    _establish(h, "X-CallShield-Call-State: ringing-ish\nP-Early-Media: supported\n")
    (call,) = h.controller.calls.values()
    assert call.early_media is False and len(h.media.legs) == 1  # as if nothing was said
    h2 = harness()
    _establish(h2, "X-CallShield-Call-State: early, answered\n")
    assert next(iter(h2.controller.calls.values())).early_media is False
    assert h.controller.call_states.snapshot() == {("rejected", "sip_header", "unknown"): 1}
    assert h2.controller.call_states.snapshot() == {("rejected", "sip_header", "conflicting"): 1}
    assert h.uas.stats["p_early_media_ignored"] == 1  # RFC 5009 is no call state
    text = metrics_text(call_state_collector(h2.controller.call_states.snapshot))
    assert (
        'callshield_call_state_rejected_total{origin="sip_header",reason="conflicting"} 1.0' in text
    )


def test_header_name_is_configurable_and_can_be_off() -> None:
    h = harness(call_state_header="X-Acme-State")
    tag, _ = _establish(h, EARLY + "X-Acme-State: early\n")
    (call,) = h.controller.calls.values()
    assert call.early_media is True
    _in_dialog(h, "UPDATE", tag, 2, ANSWERED)  # not the configured name: not read
    assert call.early_media is True
    _in_dialog(h, "UPDATE", tag, 3, "X-Acme-State: answered\n")
    assert call.early_media is False
    off = harness(call_state_header="")
    _establish(off, EARLY)
    assert next(iter(off.controller.calls.values())).early_media is False
    assert off.controller.call_states.snapshot() == {}


def test_no_header_no_early_phase() -> None:
    h = harness()
    _establish(h)
    (call,) = h.controller.calls.values()
    assert call.early_media is False and h.controller.call_states.snapshot() == {}


def test_info_in_the_early_dialog_is_applied_when_answered() -> None:
    h = harness(answer_delay=2.0)
    trying, ringing = h.send(invite(extra=EARLY))
    assert (trying.status, ringing.status) == (100, 180)
    tag = NameAddr.parse(ringing.headers.get("To") or "").tag
    assert tag and h.controller.calls == {}
    (ok,) = _in_dialog(h, "INFO", tag, 2, ANSWERED, now=0.5)
    assert ok.status == 200
    (final,) = responses(h.uas.poll(2.5))
    assert final.status == 200
    (call,) = h.controller.calls.values()
    assert call.early_media is False
    assert h.events() == [("started", ""), ("updated", "answered")]


def _retry_after(resp) -> int:  # type: ignore[no-untyped-def]
    value = resp.headers.get("Retry-After") or ""
    assert value.isdigit() and 0 <= int(value) <= 10, value  # RFC 3261 §14.2, RFC 3311 §5.2
    return int(value)


def test_update_in_the_early_dialog_is_answered_and_applied_when_answered() -> None:
    """RFC 3311: UPDATE is allowed in the early dialog (before the bridge's delayed
    answer). One without SDP is answered at once and its call state and leg roles are
    applied when the call is answered; one with SDP while the INVITE's offer is still
    unanswered (our 180 carries none) gets 500 + Retry-After (§5.2), changing nothing."""
    h = harness(answer_delay=2.0)
    trying, ringing = h.send(invite(extra=EARLY))
    tag = NameAddr.parse(ringing.headers.get("To") or "").tag
    assert (trying.status, ringing.status) == (100, 180) and tag
    roles = "X-CallShield-Leg-Roles: external\n"
    (ok,) = _in_dialog(h, "UPDATE", tag, 2, ANSWERED + roles, now=0.5)
    assert ok.status == 200 and ok.body == b""
    assert NameAddr.parse(ok.headers.get("To") or "").tag == tag
    assert (ok.headers.get("Contact") or "").startswith("<sip:callshield@")  # §5.2: target refresh
    assert h.controller.calls == {}  # nothing started before the answer
    (offer,) = _in_dialog(h, "UPDATE", tag, 3, "", body=SDP_OFFER, now=0.6)
    assert offer.status == 500
    _retry_after(offer)
    (final,) = responses(h.uas.poll(2.5))
    assert final.status == 200 and final.headers.get("CSeq") == "1 INVITE"
    (call,) = h.controller.calls.values()
    assert call.early_media is False
    (leg,) = call.legs.values()
    assert (leg.role.value, leg.role_source) == ("external", "sip_header")
    assert h.controller.call_states.snapshot() == {
        ("said", "sip_header", "early"): 1,
        ("said", "sip_header", "answered"): 1,
    }
    assert h.events()[0] == ("started", "") and ("updated", "answered") in h.events()


def test_reinvite_before_the_answer_gets_500_with_retry_after() -> None:
    """RFC 3261 §14.2: a second INVITE before our final response to the first gets 500
    with Retry-After (0-10 s), not 491 (that is for glare with our own INVITE); the
    call is answered as usual and a re-INVITE after the ACK is taken."""
    h = harness(answer_delay=2.0)
    _, ringing = h.send(invite(extra=EARLY))
    tag = NameAddr.parse(ringing.headers.get("To") or "").tag
    (early,) = _in_dialog(h, "INVITE", tag, 2, ANSWERED, body=SDP_OFFER, now=0.5)
    assert early.status == 500
    _retry_after(early)
    h.send(invite(method="ACK", to_tag=tag, cseq=2, branch="z9hG4bKINVITE2x0", body=""), now=0.6)
    assert h.controller.calls == {}
    (final,) = responses(h.uas.poll(2.5))
    assert final.status == 200
    (call,) = h.controller.calls.values()
    assert call.early_media is True  # the refused re-INVITE's header was not taken
    h.send(invite(method="ACK", to_tag=tag, cseq=1, branch="z9hG4bKack1", body=""), now=2.6)
    (ok,) = _in_dialog(h, "INVITE", tag, 3, ANSWERED, body=SDP_OFFER, now=3.0)
    assert ok.status == 200 and call.early_media is False


def test_session_refreshes_restating_the_call_state_count_once() -> None:
    """RFC 4028: a PBX that copies the call-state header into every session refresh
    (re-INVITE, same SDP) says nothing new: the state counts once, a real change counts,
    and a refused value restated on every refresh (``early`` after the answer) counts
    once per call, so /metrics does not grow with call duration."""
    h = harness()
    tag, _ = _establish(h, SE + EARLY)
    (call,) = h.controller.calls.values()

    def refresh(cseq: int, extra: str) -> None:
        (ok,) = _in_dialog(h, "INVITE", tag, cseq, SE + extra, body=SDP_OFFER, now=cseq * 60.0)
        assert ok.status == 200
        h.send(
            invite(method="ACK", to_tag=tag, cseq=cseq, branch=f"z9hG4bKa{cseq}", body=""),
            now=cseq * 60.0 + 0.1,
        )

    for cseq in (2, 3, 4):
        refresh(cseq, EARLY)
    assert call.early_media is True
    (ok,) = _in_dialog(h, "UPDATE", tag, 5, ANSWERED, now=300.0)  # the real change
    assert ok.status == 200 and call.early_media is False
    for cseq in (6, 7, 8):
        refresh(cseq, ANSWERED)
    for cseq in (9, 10, 11):  # the PBX went back to copying the INVITE's header
        refresh(cseq, EARLY)
    (info,) = _in_dialog(h, "INFO", tag, 12, "X-CallShield-Call-State: Up\n", now=720.0)
    assert info.status == 200 and call.early_media is False  # answered already: not new
    assert h.controller.call_states.snapshot() == {
        ("said", "sip_header", "early"): 1,
        ("said", "sip_header", "answered"): 1,
        ("rejected", "sip_header", "after_answer"): 1,
    }
    h.controller.set_call_state(call.call_id, StateHint("api", ("answered",)))  # a new origin
    text = metrics_text(call_state_collector(h.controller.call_states.snapshot))
    for line in (
        'callshield_call_state_total{origin="sip_header",state="early"} 1.0',
        'callshield_call_state_total{origin="sip_header",state="answered"} 1.0',
        'callshield_call_state_total{origin="api",state="answered"} 1.0',
        'callshield_call_state_rejected_total{origin="sip_header",reason="after_answer"} 1.0',
    ):
        assert line in text, line


def test_taken_counts_only_a_change_of_state_or_origin() -> None:
    assert taken(Verdict("answered"), "sip_header", None) == Verdict("answered")
    assert taken(Verdict("answered"), "sip_header", ("early", "sip_header")).state == "answered"
    assert taken(Verdict("answered"), "api", ("answered", "sip_header")).state == "answered"
    assert taken(Verdict("answered"), "sip_header", ("answered", "sip_header")) == Verdict()
    refused = Verdict(reason="after_answer")
    assert taken(refused, "sip_header", ("answered", "sip_header")) == refused


def test_early_dialog_holds_a_bounded_number_of_requests() -> None:
    """A peer that keeps sending INFO/UPDATE before the delayed answer cannot grow the
    dialog without bound: past MAX_PENDING held requests the next gets 500 +
    Retry-After and is not taken; the held ones still apply at the answer."""
    h = harness(answer_delay=2.0)
    _, ringing = h.send(invite(extra=EARLY))
    tag = NameAddr.parse(ringing.headers.get("To") or "").tag
    for k in range(MAX_PENDING):
        method = "UPDATE" if k % 2 else "INFO"
        (ok,) = _in_dialog(h, method, tag, 2 + k, EARLY, now=0.1 + k * 0.01)
        assert ok.status == 200, (k, ok.status)
    (full,) = _in_dialog(h, "UPDATE", tag, 2 + MAX_PENDING, ANSWERED, now=0.5)
    assert full.status == 500
    _retry_after(full)
    (info,) = _in_dialog(h, "INFO", tag, 3 + MAX_PENDING, ANSWERED, now=0.6)
    assert info.status == 500
    (final,) = responses(h.uas.poll(2.5))
    assert final.status == 200
    (call,) = h.controller.calls.values()
    assert call.early_media is True  # the refused "answered" was not taken
    assert h.uas.stats["early_pending_full"] == 2
