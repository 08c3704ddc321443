"""What a webhook carries: the Standard Webhooks envelope around one alert revision or
one system event.

``{"type": "call.alert.raised", "timestamp": ..., "stale": false, "data": <Alert>}``, or
``{"type": "system.coverage.degraded", ..., "data": <SystemEvent>}``.
``webhook-id`` is ``event_id(alert)`` (alert id + revision): the same on every retry,
new on an escalation; a system event's own ``event_id``. ``stale`` is true when the
delivery happens after the event's real-time relevance (an alert's ``expires_at``, or
the dispatcher's stale-after window).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from detectors.alert_schema import Alert, SystemEvent, event_id

EventType = Literal[
    "call.alert.raised",
    "call.alert.escalated",
    "system.coverage.degraded",
    "system.coverage.recovered",
]
EVENT_TYPES: tuple[str, ...] = get_args(EventType)
Deliverable = Annotated[Alert | SystemEvent, Field(discriminator="kind")]
_DELIVERABLE: TypeAdapter[Alert | SystemEvent] = TypeAdapter(Deliverable)


class WebhookEnvelope(BaseModel):
    # a receiver ignores fields it does not know (docs/alerts.md, "Compatibility")
    model_config = ConfigDict(frozen=True, extra="ignore")

    type: EventType
    timestamp: datetime
    stale: bool = False
    data: Deliverable


def event_type(message: Alert | SystemEvent) -> EventType:
    if isinstance(message, SystemEvent):
        return message.type
    return "call.alert.raised" if message.revision == 1 else "call.alert.escalated"


def message_id(message: Alert | SystemEvent) -> str:
    """The ``webhook-id``: one per alert revision, one per system event."""
    return message.event_id if isinstance(message, SystemEvent) else event_id(message)


def parse(body: str) -> Alert | SystemEvent:
    """A stored delivery's data (an alert or a system event, by its ``kind``)."""
    return _DELIVERABLE.validate_json(body)


def matches(event: str, patterns: Iterable[str]) -> bool:
    """Event-type filter: glob patterns (``call.alert.*``); an empty filter takes all."""
    pats = list(patterns)
    return not pats or any(fnmatch.fnmatchcase(event, p) for p in pats)


def envelope_json(message: Alert | SystemEvent, stale: bool) -> str:
    at = message.at if isinstance(message, SystemEvent) else message.updated_at
    return WebhookEnvelope(
        type=event_type(message), timestamp=at, stale=stale, data=message
    ).model_dump_json()
