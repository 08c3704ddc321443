"""Ended call events with coverage records, shaped as the bridge publishes them."""

from __future__ import annotations

from datetime import UTC, datetime

from detectors.alert_schema import (
    Abstention,
    CallCoverage,
    CallEvent,
    Dimension,
    DimensionCoverage,
    LegCoverage,
    LegRole,
)

SV = Dimension.SYNTHETIC_VOICE
SA = Dimension.SPEECH_ACTIVITY


def ended(
    call: str,
    speech_s: float = 10.0,
    *,
    media: str = "all",
    shed: bool = False,
    reason: str = "bye",
    ttfp_s: float = 0.05,
    abstained: dict[Abstention, int] | None = None,
    unavailable: dict[str, int] | None = None,
) -> CallEvent:
    """A two-leg call (external + internal). ``media`` none/one_way makes legs silent
    (one_way: the internal leg); ``shed``: answered, not analysed."""
    silent_ext = media == "none"
    silent_int = media in ("none", "one_way")
    legs = {
        f"{call}/ext": LegCoverage(
            role=LegRole.EXTERNAL,
            media_s=0.0 if silent_ext else 20.0,
            time_to_first_packet_s=None if silent_ext else ttfp_s,
            silent=silent_ext,
            analysed=not shed and not silent_ext,
        ),
        f"{call}/int": LegCoverage(
            role=LegRole.INTERNAL,
            media_s=0.0 if silent_int else 20.0,
            time_to_first_packet_s=None if silent_int else ttfp_s * 2,
            silent=silent_int,
        ),
    }
    dims = {}
    if not shed:
        scored = 0 if silent_ext else max(1, int(speech_s // 2))
        for dim in (SV, SA):
            dims[dim] = DimensionCoverage(
                windows=scored + sum((abstained or {}).values()),
                scored_windows=scored,
                analysed_speech_s=0.0 if silent_ext else speech_s,
                abstentions=abstained or {},
                unavailable=unavailable or {},
            )
    coverage = CallCoverage(
        duration_s=20.0,
        media=media,  # type: ignore[arg-type]
        analysed=not shed,
        unanalyzed="capacity" if shed else "",
        legs=legs,
        dimensions=dims,
    )
    return CallEvent(
        call_id=call,
        event="ended",
        at=datetime.now(UTC),
        reason=reason,
        legs={k: v.role for k, v in legs.items()},
        coverage=coverage,
    )
