"""The recorded call's state from a SIPREC metadata extension (early media, issue 10):
read from the metadata, and applied by the real UAS and call controller (the media
backend records what it is told), answered being one-way."""

from __future__ import annotations

from sip_fakes import harness, in_dialog, invite, metrics_text
from sip_test_data import SIPREC_CONTENT_TYPE, siprec_body

from sip_bridge.call_state import call_state_collector
from sip_bridge.sip.fields import NameAddr
from sip_bridge.sip.siprec import RecordingMetadata

DOC = b"""<?xml version="1.0"?>
<recording xmlns="urn:ietf:params:xml:ns:recording:1"><datamode>%s</datamode>
<participant participant_id="a"><nameID aor="sip:a@x"/></participant>
%s</recording>"""


def _meta(mode: str, ext: str = "") -> RecordingMetadata:
    return RecordingMetadata.parse(DOC % (mode.encode(), ext.encode()))


def test_early_states_and_answer() -> None:
    for state in ("early", "Alerting", " ringing ", "progress"):
        ext = f'<extensiondata><v:callState xmlns:v="urn:v">{state}</v:callState></extensiondata>'
        assert _meta("complete", ext).early
    assert not _meta(
        "complete", "<extensiondata><call-state>connected</call-state></extensiondata>"
    ).early
    assert not _meta("complete").early  # never said: answered, nothing is early


def test_partial_update_keeps_or_changes_the_state() -> None:
    early = _meta("complete", "<extensiondata><callstate>early</callstate></extensiondata>")
    assert early.merged(_meta("partial")).early  # an update that does not say keeps it
    answered = early.merged(_meta("partial", "<callstate>answered</callstate>"))
    assert not answered.early and answered.call_state == "answered"
    again = RecordingMetadata.parse(bytes(early))
    assert again.early  # written back as an extension


def _update(state: str) -> str:
    """A partial metadata update saying only the recorded call's state."""
    return (
        '<?xml version="1.0"?>\n<recording xmlns="urn:ietf:params:xml:ns:recording:1">'
        f"<datamode>partial</datamode><extensiondata><callstate>{state}</callstate>"
        "</extensiondata></recording>"
    )


def test_metadata_cannot_take_an_answered_call_back_to_early() -> None:
    """Answered is one-way, as for every other origin: a later update saying early is
    refused (``after_answer``, origin ``siprec_metadata``), counted and ignored; the call,
    its legs and the stored metadata stay answered. ``ringing`` after ``early`` restates
    the same refusal (both read as early), so it is counted once."""
    h = harness()
    body = siprec_body().replace(
        "</recording>",
        "<extensiondata><callstate>alerting</callstate></extensiondata>\n</recording>",
    )
    extra = "Require: siprec\n"
    _, ok = h.send(invite(body=body, content_type=SIPREC_CONTENT_TYPE, extra=extra))
    assert ok.status == 200
    tag = NameAddr.parse(ok.headers.get("To") or "").tag or ""
    h.send(in_dialog("ACK", tag, cseq=1, branch="z9hG4bKack"), now=0.1)
    (call,) = h.controller.calls.values()
    assert call.early_media is True
    legs = dict(h.media.legs)
    for cseq, state in ((2, "connected"), (3, "early"), (4, "ringing")):
        (resp,) = h.send(
            in_dialog(
                "UPDATE",
                tag,
                cseq=cseq,
                branch=f"z9hG4bKu{cseq}",
                body=_update(state),
                content_type="application/rs-metadata+xml",
            ),
            now=float(cseq),
        )
        assert resp.status == 200  # SIP never refuses the update for it
        assert call.early_media is False, state
    assert h.media.legs == legs and len(legs) == 2
    assert call.metadata is not None and not call.metadata.early
    said = h.controller.call_states.snapshot()
    assert said == {
        ("said", "siprec_metadata", "early"): 1,
        ("said", "siprec_metadata", "answered"): 1,
        ("rejected", "siprec_metadata", "after_answer"): 1,
    }
    text = metrics_text(call_state_collector(h.controller.call_states.snapshot))
    line = (
        'callshield_call_state_rejected_total{origin="siprec_metadata",reason="after_answer"} 1.0'
    )
    assert line in text


def test_session_refreshes_resending_the_metadata_count_once() -> None:
    """A SIPREC SRC re-sends its SDP and metadata on every RFC 4028 session refresh
    (re-INVITE): the call state it restates counts once, the real change (an update
    saying connected) counts, and a stale early restated after the answer is refused
    once per call; /metrics does not grow with call duration."""
    h = harness()

    def said(state: str) -> str:
        return siprec_body().replace(
            "</recording>",
            f"<extensiondata><callstate>{state}</callstate></extensiondata>\n</recording>",
        )

    extra = "Require: siprec\nSession-Expires: 1800;refresher=uac\nSupported: timer\n"
    _, ok = h.send(invite(body=said("alerting"), content_type=SIPREC_CONTENT_TYPE, extra=extra))
    assert ok.status == 200
    tag = NameAddr.parse(ok.headers.get("To") or "").tag or ""
    h.send(in_dialog("ACK", tag, cseq=1, branch="z9hG4bKack"), now=0.1)
    (call,) = h.controller.calls.values()
    legs = dict(h.media.legs)

    def refresh(cseq: int, body: str, method: str = "INVITE") -> None:
        kind = SIPREC_CONTENT_TYPE if method == "INVITE" else "application/rs-metadata+xml"
        req = in_dialog(
            method, tag, cseq=cseq, branch=f"z9hG4bKr{cseq}", body=body, content_type=kind
        )
        (resp,) = h.send(req, now=cseq * 60.0)
        assert resp.status == 200
        if method == "INVITE":
            h.send(
                in_dialog("ACK", tag, cseq=cseq, branch=f"z9hG4bKra{cseq}"), now=cseq * 60.0 + 0.1
            )

    for cseq in (2, 3, 4):
        refresh(cseq, said("alerting"))
    assert call.early_media is True
    refresh(5, _update("connected"), "UPDATE")  # the real change
    assert call.early_media is False
    for cseq in (6, 7, 8):
        refresh(cseq, said("connected"))
    for cseq in (9, 10, 11):  # a stale SRC re-sending its first metadata
        refresh(cseq, said("alerting"))
    assert call.early_media is False and h.media.legs == legs
    assert h.controller.call_states.snapshot() == {
        ("said", "siprec_metadata", "early"): 1,
        ("said", "siprec_metadata", "answered"): 1,
        ("rejected", "siprec_metadata", "after_answer"): 1,
    }
    text = metrics_text(call_state_collector(h.controller.call_states.snapshot))
    for line in (
        'callshield_call_state_total{origin="siprec_metadata",state="early"} 1.0',
        'callshield_call_state_total{origin="siprec_metadata",state="answered"} 1.0',
        'callshield_call_state_rejected_total{origin="siprec_metadata",reason="after_answer"} 1.0',
    ):
        assert line in text, line
