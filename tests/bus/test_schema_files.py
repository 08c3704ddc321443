"""The JSON Schema files in docs/schema are what the models generate, and the examples
validate against the models (and round-trip through the stream codec)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from detectors.alert_schema import Alert, CallEvent, ScoreUpdate, SystemEvent
from detectors.bus.codec import decode, encode
from detectors.bus.schema_export import SCHEMA_DIR, examples, render, stale_files
from detectors.bus.webhooks.payload import WebhookEnvelope, event_type, matches


def test_committed_schema_files_are_current() -> None:
    stale = stale_files()
    assert not stale, f"run `callshield schema` to regenerate: {stale}"


def test_stale_files_notices_a_change(tmp_path: Path) -> None:
    for rel, text in render().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert stale_files(tmp_path) == []
    (tmp_path / "alert.schema.json").write_text("{}\n")
    assert stale_files(tmp_path) == ["alert.schema.json"]


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("alert", Alert),
        ("score_update", ScoreUpdate),
        ("call_event", CallEvent),
        ("webhook", WebhookEnvelope),
        ("system_event", SystemEvent),
    ],
)
def test_examples_validate(name: str, model: type[Alert]) -> None:
    text = (SCHEMA_DIR / "examples" / f"{name}.json").read_text()
    parsed = model.model_validate_json(text)
    schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    assert set(json.loads(text)) <= set(schema["properties"])
    assert parsed == examples()[name]


def test_system_event_webhook_example_validates() -> None:
    text = (SCHEMA_DIR / "examples" / "webhook_system.json").read_text()
    parsed = WebhookEnvelope.model_validate_json(text)
    assert isinstance(parsed.data, SystemEvent) and parsed == examples()["webhook_system"]
    assert event_type(parsed.data) == parsed.type == "system.coverage.degraded"


def test_codec_round_trip_and_rejects() -> None:
    for name in ("alert", "score_update", "call_event", "system_event"):
        message = examples()[name]
        assert isinstance(message, Alert | ScoreUpdate | CallEvent | SystemEvent)
        fields = {k.encode(): v.encode() for k, v in encode(message).items()}
        assert decode(fields) == message
    with pytest.raises(ValueError, match="unknown kind 'x'"):
        decode({"kind": "x", "json": "{}"})
    with pytest.raises(ValueError, match="does not validate"):
        decode({"kind": "alert", "json": '{"alert_id": 1}'})


def test_event_types_and_filters() -> None:
    alert = examples()["alert"]
    assert isinstance(alert, Alert)
    assert event_type(alert) == "call.alert.escalated"
    assert event_type(alert.model_copy(update={"revision": 1})) == "call.alert.raised"
    assert matches("call.alert.raised", [])
    assert matches("call.alert.raised", ["call.alert.*"])
    assert not matches("call.alert.raised", ["call.alert.escalated"])
