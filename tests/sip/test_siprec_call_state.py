"""The recorded call's state from a SIPREC metadata extension (early media, issue 10)."""

from __future__ import annotations

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
