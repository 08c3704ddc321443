"""Alerts, score updates and call events for the bus tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from detectors.alert_schema import (
    Alert,
    Band,
    CallEvent,
    Dimension,
    Reason,
    ScoreUpdate,
    alert_id_for,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def make_alert(call: int, episode: int = 0, revision: int = 1, seq: int = 0) -> Alert:
    call_id = f"call-{call}"
    at = T0 + timedelta(milliseconds=seq)
    return Alert(
        alert_id=alert_id_for(call_id, Dimension.SYNTHETIC_VOICE, episode),
        revision=revision,
        call_id=call_id,
        node_id="node-t",
        dimension=Dimension.SYNTHETIC_VOICE,
        band=Band.HIGH if revision > 1 else Band.ELEVATED,
        score=0.9,
        threshold=0.7,
        episode=episode,
        reasons=(Reason(dimension=Dimension.SYNTHETIC_VOICE, start_s=1.0, end_s=5.0, score=0.9),),
        created_at=at,
        updated_at=at,
        policy_version="p1",
        provider="CPUExecutionProvider",
    )


def make_score(call: int, i: int) -> ScoreUpdate:
    return ScoreUpdate(
        call_id=f"call-{call}",
        leg_id=f"call-{call}/ext",
        dimension=Dimension.SYNTHETIC_VOICE,
        window_start_s=float(i),
        window_end_s=float(i) + 4.0,
        score=0.5,
    )


def make_event(call: int, event: str = "started") -> CallEvent:
    return CallEvent.model_validate({"call_id": f"call-{call}", "event": event, "at": T0})
