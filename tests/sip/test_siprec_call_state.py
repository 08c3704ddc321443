"""The recorded call's state from a SIPREC metadata extension (early media, issue 10):
read from the metadata, and applied by the real UAS and call controller (the media
backend records what it is told), answered being one-way."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from sip_fakes import harness, in_dialog, invite
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
    its legs and the stored metadata stay answered."""
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
        ("rejected", "siprec_metadata", "after_answer"): 2,
    }
    registry = CollectorRegistry()
    registry.register(call_state_collector(h.controller.call_states.snapshot))
    text = generate_latest(registry).decode()
    line = (
        'callshield_call_state_rejected_total{origin="siprec_metadata",reason="after_answer"} 2.0'
    )
    assert line in text
