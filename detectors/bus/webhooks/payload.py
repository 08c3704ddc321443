"""What a webhook carries: the Standard Webhooks envelope around one alert revision.

``{"type": "call.alert.raised", "timestamp": ..., "stale": false, "data": <Alert>}``.
``webhook-id`` is ``event_id(alert)`` (alert id + revision): the same on every retry,
new on an escalation. ``stale`` is true when the delivery happens after the alert's
real-time relevance (its ``expires_at``, or the dispatcher's stale-after window).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from detectors.alert_schema import Alert

EventType = Literal["call.alert.raised", "call.alert.escalated"]
EVENT_TYPES: tuple[str, ...] = ("call.alert.raised", "call.alert.escalated")


class WebhookEnvelope(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    type: EventType
    timestamp: datetime
    stale: bool = False
    data: Alert


def event_type(alert: Alert) -> EventType:
    return "call.alert.raised" if alert.revision == 1 else "call.alert.escalated"


def matches(event: str, patterns: Iterable[str]) -> bool:
    """Event-type filter: glob patterns (``call.alert.*``); an empty filter takes all."""
    pats = list(patterns)
    return not pats or any(fnmatch.fnmatchcase(event, p) for p in pats)


def envelope_json(alert: Alert, stale: bool) -> str:
    return WebhookEnvelope(
        type=event_type(alert), timestamp=alert.updated_at, stale=stale, data=alert
    ).model_dump_json()
