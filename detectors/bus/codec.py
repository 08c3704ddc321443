"""Stream entries <-> schema models: one ``kind`` field and the model's JSON.

Readers validate with pydantic at this trust boundary; an entry that does not parse is
a ``ValueError`` with the exact reason (receive loops count and drop it). An entry of
a newer minor version reads (its unknown fields ignored); one of another major version
is ``UnsupportedSchemaVersionError``, a ``ValueError`` too (``detectors.alert_schema``).
"""

from __future__ import annotations

from typing import Final

from pydantic import ValidationError

from detectors.alert_schema import NEWER_MAJOR, Alert, CallEvent, ScoreUpdate, SystemEvent

Message = Alert | ScoreUpdate | CallEvent | SystemEvent

_MODELS: Final[dict[str, type[Alert] | type[ScoreUpdate] | type[CallEvent] | type[SystemEvent]]] = {
    "alert": Alert,
    "score": ScoreUpdate,
    "call_event": CallEvent,
    "system": SystemEvent,
}


class UnsupportedSchemaVersionError(ValueError):
    """The entry is of another major schema version than this reader's."""


def encode(message: Message) -> dict[str, str]:
    """The fields of one stream entry."""
    return {"kind": message.kind, "json": message.model_dump_json()}


def decode(fields: dict[bytes, bytes] | dict[str, str]) -> Message:
    """The model in one stream entry; ``ValueError`` when it is not one."""
    norm = {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in fields.items()
    }
    kind = norm.get("kind")
    if kind not in _MODELS:
        raise ValueError(f"stream entry has unknown kind {kind!r}")
    body = norm.get("json")
    if body is None:
        raise ValueError("stream entry has no json field")
    try:
        return _MODELS[kind].model_validate_json(body)
    except ValidationError as exc:
        for error in exc.errors():
            if error["loc"] == ("schema_version",) and NEWER_MAJOR in error["msg"]:
                reason = error["msg"].removeprefix("Value error, ")
                message = f"stream entry of kind {kind!r}: {reason}"
                raise UnsupportedSchemaVersionError(message) from None
        raise ValueError(f"stream entry of kind {kind!r} does not validate: {exc}") from None


def decode_alert(fields: dict[bytes, bytes] | dict[str, str]) -> Alert:
    message = decode(fields)
    if not isinstance(message, Alert):
        raise ValueError(f"expected an alert, got {message.kind!r}")
    return message
