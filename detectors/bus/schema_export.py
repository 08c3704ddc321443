"""JSON Schema files of the wire models, with examples, generated into ``docs/schema``.

``callshield schema`` writes them; ``callshield schema --check`` (and a test) fails when
the committed files differ from what the models generate, so the published schema can
never drift from the code.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from detectors.alert_schema import (
    SCHEMA_VERSION,
    Alert,
    Band,
    CallEvent,
    CallState,
    CoverageStatus,
    Dimension,
    LegRole,
    Reason,
    ScoreUpdate,
    SystemEvent,
    WindowQuality,
    alert_id_for,
)
from detectors.bus.webhooks.payload import WebhookEnvelope

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "docs" / "schema"
_BASE_ID = "https://callshield.invalid/schema"


def examples() -> dict[str, BaseModel]:
    at = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)
    alert = Alert(
        alert_id=alert_id_for("siprec-session-7f3a", Dimension.SYNTHETIC_VOICE, 0),
        revision=2,
        call_id="call-0001",
        correlation_id="siprec-session-7f3a",
        external_ids={"asterisk_linkedid": "1764504000.42", "freeswitch_uuid": "c0ffee"},
        node_id="node-a",
        dimension=Dimension.SYNTHETIC_VOICE,
        band=Band.HIGH,
        score=0.94,
        threshold=0.8,
        episode=0,
        reasons=(
            Reason(
                dimension=Dimension.SYNTHETIC_VOICE,
                start_s=62.0,
                end_s=70.0,
                score=0.94,
                detail="3 of 4 windows above threshold",
            ),
        ),
        call_state=CallState.LIVE,
        created_at=at - timedelta(seconds=4),
        updated_at=at,
        expires_at=at + timedelta(minutes=5),
        policy_version="default@3",
        model_versions={"synthetic_voice": "aasist-l@1.2.0"},
        provider="CPUExecutionProvider",
        thresholds={"synthetic_voice": 0.8},
    )
    system = SystemEvent(
        event_id="sys_5b0d9c2e4f61a7d3b8e9c0f1",
        type="system.coverage.degraded",
        node_id="node-a",
        at=at,
        coverage=CoverageStatus(
            dimension=Dimension.SYNTHETIC_VOICE,
            covered_ratio=0.9,
            objective=0.95,
            calls=50,
            covered_calls=45,
            min_speech_s=2.0,
        ),
    )
    return {
        "alert": alert,
        "score_update": ScoreUpdate(
            call_id="call-0001",
            leg_id="call-0001/external",
            dimension=Dimension.SYNTHETIC_VOICE,
            window_start_s=66.0,
            window_end_s=70.0,
            score=0.91,
            quality=WindowQuality(
                concealed_ratio=0.02, late_packets=1, jitter_ms=6.5, net_speech_s=3.4
            ),
            model_version="aasist-l@1.2.0",
            provider="CPUExecutionProvider",
        ),
        "call_event": CallEvent(
            call_id="call-0001",
            event="started",
            at=at - timedelta(seconds=70),
            correlation_id="siprec-session-7f3a",
            external_ids={"asterisk_linkedid": "1764504000.42"},
            legs={"call-0001/external": LegRole.EXTERNAL, "call-0001/internal": LegRole.INTERNAL},
        ),
        "webhook": WebhookEnvelope(
            type="call.alert.escalated", timestamp=alert.updated_at, stale=False, data=alert
        ),
        "system_event": system,
        "webhook_system": WebhookEnvelope(
            type=system.type, timestamp=system.at, stale=False, data=system
        ),
        **attach_examples(alert),
    }


# The ids each attach type puts on its calls (``external_ids``): what a PBX integrator
# matches webhook payloads against, and the ``{system}`` of
# GET /api/v1/calls/by-external-id/{system}/{id}/risk. One example webhook per type.
ATTACH_IDS: dict[str, tuple[str | None, dict[str, str]]] = {
    "sip": (None, {"sip-call-id": "a84b4c76e66710@pc33.example.com"}),
    "siprec": (
        "00000000-0000-0000-0000-00000000a1b2",  # the recording session's Session-ID
        {"sip-call-id": "2bc8a91e@sbc.example.com"},
    ),
    "rtp_control_api": (None, {"asterisk": "1764504000.42"}),  # ARI ExternalMedia, ids given
    "audiosocket": (None, {"asterisk_linkedid": "1764504000.40"}),  # registered with the call
    "twilio": (
        "CA5f0a4c6c3e1d4b9a8f7e6d5c4b3a2910",
        {"twilio": "CA5f0a4c6c3e1d4b9a8f7e6d5c4b3a2910", "twilio_stream": "MZ18ad3ab5a668"},
    ),
    "genesys_audiohook": (
        "090eaa2f-72fa-480a-83e0-8667ff89c0ec",
        {
            "genesys": "090eaa2f-72fa-480a-83e0-8667ff89c0ec",
            "genesys_conversation": "090eaa2f-72fa-480a-83e0-8667ff89c0ec",
            "audiohook_session": "e160e428-53e2-487c-977d-96989bf5c99d",
            "audiohook_correlation": "30b0e395-84d3-4570-ac13-9a62d8f514c0",
            "genesys_organization": "d7934305-0972-4844-938e-9060eef73d05",
        },
    ),
    "freeswitch_audio_fork": ("5f1e8a4c-fs", {"freeswitch": "5f1e8a4c-fs"}),
    "jambonz_listen": ("b2a3c4d5-jb", {"jambonz": "b2a3c4d5-jb", "direction": "inbound"}),
    "webrtc_whip": (None, {"call_id": "cc-4711", "queue": "fraud-desk"}),  # X-CallShield-*
    "amazon_connect": (
        "d111f871-5fe7-40b1-b5f7-6b67060de0c2",  # InitialContactId: transfers keep it
        {
            "connect": "d111f871-5fe7-40b1-b5f7-6b67060de0c2",
            "connect_instance": "d5b716a2-10bb-45cb-bf7f-01a9864be591",
            "connect_initial": "d111f871-5fe7-40b1-b5f7-6b67060de0c2",
        },
    ),
}


def attach_examples(alert: Alert) -> dict[str, BaseModel]:
    """The example alert webhook as each attach type would carry it."""
    out: dict[str, BaseModel] = {}
    for attach, (correlation, ids) in ATTACH_IDS.items():
        data = alert.model_copy(
            update={
                "alert_id": alert_id_for(correlation or "call-0001", alert.dimension, 0),
                "correlation_id": correlation,
                "external_ids": ids,
            }
        )
        out[f"attach/{attach}"] = WebhookEnvelope(
            type="call.alert.escalated", timestamp=data.updated_at, stale=False, data=data
        )
    return out


_MODELS: dict[str, type[BaseModel]] = {
    "alert": Alert,
    "score_update": ScoreUpdate,
    "call_event": CallEvent,
    "system_event": SystemEvent,
    "webhook": WebhookEnvelope,
}


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render() -> dict[str, str]:
    """Relative path -> file text, for every schema and example."""
    files: dict[str, str] = {}
    for name, model in _MODELS.items():
        schema = model.model_json_schema(mode="serialization")
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"{_BASE_ID}/{SCHEMA_VERSION}/{name}.schema.json"
        files[f"{name}.schema.json"] = _dump(schema)
    for name, example in examples().items():
        files[f"examples/{name}.json"] = _dump(json.loads(example.model_dump_json()))
    return files


def stale_files(directory: Path = SCHEMA_DIR) -> list[str]:
    """Files in ``directory`` that differ from what the models generate (or are missing)."""
    out = []
    for rel, text in render().items():
        path = directory / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            out.append(rel)
    return out


def write(directory: Path = SCHEMA_DIR) -> list[str]:
    written = []
    for rel, text in render().items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(rel)
    return written


def add_parser(sub: Any, name: str) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="write the wire JSON Schemas and examples (docs/schema)"
    )
    parser.add_argument("--out", type=Path, default=SCHEMA_DIR)
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.check:
        stale = stale_files(args.out)
        for rel in stale:
            print(f"stale: {args.out / rel}", file=sys.stderr)
        return 1 if stale else 0
    for rel in write(args.out):
        print(f"wrote {args.out / rel}")
    return 0
