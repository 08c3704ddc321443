"""Transfers and re-anchoring (issue 12) in the UAS and call controller, in virtual
time: SIPREC metadata updates with new participants (partial and complete, in UPDATE
and re-INVITE) keep the legs and re-map roles, re-arming the source lock of a leg whose
sender changed; a re-INVITE moving media keeps the leg and relearns its source."""

from __future__ import annotations

from sip_fakes import Harness, harness, in_dialog, invite
from sip_test_data import SIPREC_CONTENT_TYPE, siprec_body

from sip_bridge.sip.fields import NameAddr
from sip_bridge.sip.siprec import RecordingMetadata

HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'
NS = 'xmlns="urn:ietf:params:xml:ns:recording:1"'

# Blind transfer inside the contact center: agent7 hands the caller to agent9 (partial
# update naming only what changed; the new agent listed first).
AGENT_TRANSFER = f"""{HEAD}<recording {NS}>
<datamode>partial</datamode>
<participant participant_id="agent9"><nameID aor="sip:agent9@cc.example"/></participant>
<participantstreamassoc participant_id="agent9">
  <send>st-b</send><recv>st-a</recv>
</participantstreamassoc>
<participantsessionassoc participant_id="agent" session_id="sess-42">
  <disassociate-time>2025-01-01T00:00:10Z</disassociate-time>
</participantsessionassoc>
</recording>"""

# The outside party changes (the caller transferred the call to someone else): a
# complete update where a new external participant sends the caller's stream.
OUTSIDE_TRANSFER = f"""{HEAD}<recording {NS}>
<datamode>complete</datamode>
<session session_id="sess-42"/>
<participant participant_id="agent"><nameID aor="sip:agent7@cc.example"/></participant>
<participant participant_id="third"><nameID aor="sip:+15550177@carrier.example"/></participant>
<stream stream_id="st-a" session_id="sess-42"><label>1</label></stream>
<stream stream_id="st-b" session_id="sess-42"><label>2</label></stream>
<participantstreamassoc participant_id="agent"><send>st-b</send></participantstreamassoc>
<participantstreamassoc participant_id="third"><send>st-a</send></participantstreamassoc>
</recording>"""


def _siprec_call(h: Harness) -> str:
    _trying, ok = h.send(
        invite(body=siprec_body(), content_type=SIPREC_CONTENT_TYPE, extra="Require: siprec\n")
    )
    assert ok.status == 200
    tag = NameAddr.parse(ok.headers.get("To") or "").tag or ""
    h.send(in_dialog("ACK", tag, cseq=1, branch="z9hG4bKack"), now=0.1)
    return tag


def _legs(h: Harness) -> dict[str, tuple[str, str, str]]:
    (call,) = h.controller.calls.values()
    return {
        leg.label or "": (leg.leg_id, leg.role.value, leg.participant) for leg in call.legs.values()
    }


def _rearmed(h: Harness, since: int) -> list[str]:
    return [leg for op, leg in h.media.log[since:] if op == "update"]


def test_partial_update_with_a_new_agent_keeps_the_external_leg() -> None:
    h = harness()
    tag = _siprec_call(h)
    before = _legs(h)
    assert {k: v[1:] for k, v in before.items()} == {
        "1": ("external", "caller"),
        "2": ("internal", "agent"),
    }
    mark = len(h.media.log)
    (ok,) = h.send(
        in_dialog(
            "UPDATE",
            tag,
            cseq=2,
            branch="z9hG4bKu1",
            body=AGENT_TRANSFER,
            content_type="application/rs-metadata",  # Avaya: metadata alone, no +xml
        ),
        now=5,
    )
    assert ok.status == 200
    after = _legs(h)
    assert after == {"1": before["1"], "2": (before["2"][0], "internal", "agent9")}
    assert _rearmed(h, mark) == [before["2"][0]]  # only the leg whose sender changed
    (call,) = h.controller.calls.values()
    assert [aor for aor, _ in call.participants] == [
        "sip:+15550142@carrier.example",
        "sip:agent9@cc.example",
    ]
    assert (call.ani, call.dnis) == ("+15550142", "agent9")
    # a SIPREC INVITE's From/To are the recorder's: identity numbers come from metadata
    assert call.identity is not None
    assert (call.identity.caller_number, call.identity.to_number) == ("+15550142", "agent7")
    assert call.identity.verification == "absent"
    assert [e for e, _ in h.events()] == ["started", "updated"]


def test_complete_update_with_a_new_outside_party_moves_the_external_role_with_it() -> None:
    h = harness()
    tag = _siprec_call(h)
    before = _legs(h)
    mark = len(h.media.log)
    body = siprec_body().split("--BOUNDARY\nContent-Type: application/rs-metadata+xml")[0]
    body += (
        "--BOUNDARY\nContent-Type: application/rs-metadata+xml\n"
        "Content-Disposition: recording-session\n\n" + OUTSIDE_TRANSFER + "\n--BOUNDARY--\n"
    )
    (ok,) = h.send(
        in_dialog(
            "INVITE", tag, cseq=2, branch="z9hG4bKre1", body=body, content_type=SIPREC_CONTENT_TYPE
        ),
        now=5,
    )
    assert ok.status == 200
    after = _legs(h)
    assert after == {"1": (before["1"][0], "external", "third"), "2": before["2"]}
    assert _rearmed(h, mark) == [before["1"][0]]
    (call,) = h.controller.calls.values()
    assert (call.ani, call.dnis) == ("+15550177", "agent7")


def test_reinvite_moving_media_keeps_the_leg_and_relearns_its_source() -> None:
    h = harness()
    tag = _siprec_call(h)
    before = _legs(h)
    (call,) = h.controller.calls.values()
    ports = {leg.label: leg.local_port for leg in call.legs.values()}
    mark = len(h.media.log)
    moved = siprec_body(audio_port=30000, host="203.0.113.9")
    (ok,) = h.send(
        in_dialog(
            "INVITE", tag, cseq=2, branch="z9hG4bKre2", body=moved, content_type=SIPREC_CONTENT_TYPE
        ),
        now=5,
    )
    assert ok.status == 200
    assert _legs(h) == before  # same legs, same roles and senders
    (call,) = h.controller.calls.values()
    assert {leg.label: leg.local_port for leg in call.legs.values()} == ports
    assert {leg.label: leg.remote for leg in call.legs.values()} == {
        "1": ("203.0.113.9", 30000),
        "2": ("203.0.113.9", 30002),
    }
    assert sorted(_rearmed(h, mark)) == sorted(v[0] for v in before.values())
    assert {leg_id: h.media.legs[leg_id]["source"] for leg_id, *_ in before.values()} == {
        before["1"][0]: ("203.0.113.9", 0),
        before["2"][0]: ("203.0.113.9", 0),
    }
    assert [e for e, _ in h.events()] == ["started", "updated"]


def test_partial_merge_rules() -> None:
    base = RecordingMetadata.parse(
        siprec_body().split("recording-session\n\n", 1)[1].rsplit("\n--BOUNDARY--", 1)[0].encode()
    )
    update = RecordingMetadata.parse(AGENT_TRANSFER.encode())
    assert update.departed == {"agent"} and update.associated == {"agent9"}
    merged = base.merged(update)
    assert [p.participant_id for p in merged.participants] == ["caller", "agent9"]
    assert merged.caller_id("caller", base) == "caller"
    # read alone, the partial document's first participant (the new agent) is "the caller"
    assert update.caller() is not None and update.caller().participant_id == "agent9"
    assert merged.roles("caller")["2"].role == "internal"
    assert merged.session_ids == ["sess-42"] and base.participants[1].participant_id == "agent"
    complete = RecordingMetadata.parse(OUTSIDE_TRANSFER.encode())
    assert base.merged(complete) is complete
    assert complete.caller_id("caller", base) == "third"  # heir of the caller's stream
