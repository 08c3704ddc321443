"""The published wire schema: deterministic ids, validation at the trust boundary, and
the promise that importing it pulls in no numeric or media stack (dashboard side)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from detectors.alert_schema import (
    Alert,
    Band,
    Dimension,
    Reason,
    alert_id_for,
    event_id,
)


def _alert(**over: object) -> Alert:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    fields: dict[str, object] = {
        "alert_id": alert_id_for("call-1", Dimension.SYNTHETIC_VOICE, 0),
        "revision": 1,
        "call_id": "call-1",
        "node_id": "node-a",
        "dimension": Dimension.SYNTHETIC_VOICE,
        "band": Band.HIGH,
        "score": 0.93,
        "threshold": 0.7,
        "episode": 0,
        "reasons": (
            Reason(dimension=Dimension.SYNTHETIC_VOICE, start_s=62.0, end_s=66.0, score=0.93),
        ),
        "created_at": now,
        "updated_at": now,
        "policy_version": "p1",
        "provider": "CPUExecutionProvider",
    }
    fields.update(over)
    return Alert.model_validate(fields)


def test_alert_ids_are_deterministic_and_distinct_per_episode() -> None:
    a = alert_id_for("corr-9", Dimension.REPLAY, 0)
    assert a == alert_id_for("corr-9", Dimension.REPLAY, 0)
    assert a != alert_id_for("corr-9", Dimension.REPLAY, 1)
    assert a != alert_id_for("corr-9", Dimension.SYNTHETIC_VOICE, 0)
    assert a != alert_id_for("corr-8", Dimension.REPLAY, 0)


def test_event_id_changes_with_revision() -> None:
    first = _alert()
    escalated = first.model_copy(update={"revision": 2})
    assert event_id(first) != event_id(escalated)
    assert event_id(first).startswith(first.alert_id)


def test_round_trip_through_json() -> None:
    alert = _alert()
    assert Alert.model_validate_json(alert.model_dump_json()) == alert


@pytest.mark.parametrize(
    "bad",
    [{"score": 1.5}, {"revision": 0}, {"dimension": "telepathy"}],
    ids=["score>1", "revision 0", "unknown dimension"],
)
def test_invalid_alerts_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        _alert(**bad)


def test_an_unknown_field_is_ignored_not_kept() -> None:
    """Schema 1.x is additive (docs/alerts.md): a field a newer minor version added is
    dropped on read, so an older reader neither refuses the alert nor passes the field on."""
    alert = _alert(surprise=1)
    assert "surprise" not in alert.model_dump()
    assert alert == _alert()


def test_importing_the_schema_loads_no_numeric_or_media_stack() -> None:
    code = (
        "import sys, detectors.alert_schema; "
        "heavy = ('numpy', 'onnxruntime', 'av', 'aiortc', 'native'); "
        "bad = [m for m in heavy if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
