"""CallShield risk as Amazon Connect contact attributes named like Voice ID's results.

Amazon Connect Voice ID reached end of support on 2026-05-20. Its flows branched on a
fraud detection result (``Decision`` HIGH_RISK | LOW_RISK | NOT_ENOUGH_SPEECH, with
``Reasons`` KNOWN_FRAUDSTER and VOICE_SPOOFING, and 0-100 ``RiskScore`` s for
``KnownFraudsterRisk`` and ``VoiceSpoofingRisk`` against a ``RiskThreshold``) and an
authentication result (``Decision`` ACCEPT | REJECT | ..., a 0-100 ``Score`` against an
``AcceptanceThreshold``; 90 recommended). This module writes the same quantities as
flat string contact attributes a flow can check (``$.Attributes.VoiceSpoofingRisk``):

==============================  ===========================================================
``VoiceSpoofingRisk``           0-100 from ``synthetic_voice`` and ``replay`` (the higher)
``KnownFraudsterRisk``          0-100 from ``known_fraudster``
``FraudRiskThreshold``          the risk at which our alert threshold sits (default 50)
``FraudDetectionDecision``      HIGH_RISK when either risk reaches the threshold (an alert
                                was raised), NOT_ENOUGH_SPEECH when the call was not
                                analysed, else LOW_RISK
``FraudDetectionReasons``       KNOWN_FRAUDSTER,VOICE_SPOOFING (those that reached it)
``AuthenticationScore``         0-100, only once ``voice_mismatch`` scored a claimed
                                identity: 100 = the enrolled voice
``AuthenticationDecision``      ACCEPT when the score reaches the acceptance threshold,
                                else REJECT (only with a claimed identity)
``AuthenticationAcceptanceThreshold``  the acceptance threshold used (default 90)
``CallShieldBand``              low | elevated | high over every dimension
``CallShieldDimensions``        the raised dimensions, comma-separated
``CallShieldCallId``            our call id (when known)
``CallShieldUnanalyzed``        why the call was not analysed (only then)
==============================  ===========================================================

Scores map piecewise-linearly so that our policy threshold lands exactly on the Voice
ID threshold: ``[0, threshold)`` -> ``[0, risk_threshold)`` and ``[threshold, 1]`` ->
``[risk_threshold, 100]``; a raised band never maps below the threshold. So a flow that
compared ``RiskScore >= RiskThreshold`` keeps its meaning with the same number.

Standard library only (no CallShield imports), so a Lambda can carry this one file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BANDS = ("low", "elevated", "high")
SPOOFING = ("synthetic_voice", "replay")
FRAUDSTER = "known_fraudster"
MISMATCH = "voice_mismatch"
ATTRIBUTES = (
    "VoiceSpoofingRisk",
    "KnownFraudsterRisk",
    "FraudRiskThreshold",
    "FraudDetectionDecision",
    "FraudDetectionReasons",
    "AuthenticationScore",
    "AuthenticationDecision",
    "AuthenticationAcceptanceThreshold",
    "CallShieldBand",
    "CallShieldDimensions",
    "CallShieldCallId",
    "CallShieldUnanalyzed",
)
_EPS = 1e-9  # 0.7 over a 0.5 threshold is 70, not 69.99999999999999
_RISK_KEYS = {"VoiceSpoofingRisk": "VOICE_SPOOFING", "KnownFraudsterRisk": "KNOWN_FRAUDSTER"}


@dataclass(frozen=True, slots=True)
class DimensionRisk:
    band: str  # low | elevated | high
    score: float  # 0..1
    threshold: float  # 0..1, where the policy raises an alert

    @classmethod
    def of(cls, value: DimensionRisk | Mapping[str, Any]) -> DimensionRisk:
        if isinstance(value, DimensionRisk):
            return value
        band = str(value.get("band", "low"))
        return cls(
            band if band in BANDS else "low", float(value["score"]), float(value["threshold"])
        )

    @property
    def raised(self) -> bool:
        return self.band != "low"


def to_0_100(risk: DimensionRisk, at: int) -> int:
    """``risk.score`` on 0-100 with ``risk.threshold`` landing on ``at``."""
    s, t = min(max(risk.score, 0.0), 1.0), min(max(risk.threshold, 0.0), 1.0)
    if s >= t:
        above = 100 if t >= 1.0 else at + (100 - at) * (s - t) / (1.0 - t)
        value = max(at, math.floor(above + _EPS))
    else:
        value = min(at - 1, math.floor(at * s / t + _EPS)) if at > 0 else 0
    if risk.raised:
        value = max(value, at)
    return min(100, max(0, value))


def voice_id_attributes(
    dimensions: Mapping[str, DimensionRisk | Mapping[str, Any]],
    *,
    unanalyzed: str = "",
    call_id: str = "",
    risk_threshold: int = 50,
    acceptance_threshold: int = 90,
) -> dict[str, str]:
    """The attribute set for a call whose scored dimensions are ``dimensions`` (absent
    dimensions: nothing raised, risk 0)."""
    risks = {str(k): DimensionRisk.of(v) for k, v in dimensions.items()}
    spoof = [to_0_100(risks[d], risk_threshold) for d in SPOOFING if d in risks]
    values = {
        "VoiceSpoofingRisk": max(spoof, default=0),
        "KnownFraudsterRisk": to_0_100(risks[FRAUDSTER], risk_threshold)
        if FRAUDSTER in risks
        else 0,
    }
    out = {k: str(v) for k, v in values.items()}
    out["FraudRiskThreshold"] = str(risk_threshold)
    out.update(_decision(values, risk_threshold, unanalyzed))
    if MISMATCH in risks:
        mismatch = risks[MISMATCH]
        score = 100 - to_0_100(mismatch, 100 - acceptance_threshold)
        if mismatch.raised:
            score = min(score, acceptance_threshold - 1)
        out["AuthenticationScore"] = str(score)
        out["AuthenticationDecision"] = "ACCEPT" if score >= acceptance_threshold else "REJECT"
        out["AuthenticationAcceptanceThreshold"] = str(acceptance_threshold)
    raised = [d for d, r in sorted(risks.items()) if r.raised]
    band = max((r.band for r in risks.values()), key=BANDS.index, default="low")
    out["CallShieldBand"] = band
    out["CallShieldDimensions"] = ",".join(raised)
    if call_id:
        out["CallShieldCallId"] = call_id
    if unanalyzed:
        out["CallShieldUnanalyzed"] = unanalyzed
    return out


def _decision(values: Mapping[str, int], threshold: int, unanalyzed: str) -> dict[str, str]:
    reasons = [reason for key, reason in _RISK_KEYS.items() if values.get(key, 0) >= threshold]
    if reasons:
        decision = "HIGH_RISK"
    elif unanalyzed:
        decision = "NOT_ENOUGH_SPEECH"
    else:
        decision = "LOW_RISK"
    return {"FraudDetectionDecision": decision, "FraudDetectionReasons": ",".join(sorted(reasons))}


def from_risk(risk: Mapping[str, Any], **options: Any) -> dict[str, str]:
    """The answer of ``GET /api/v1/calls/by-external-id/connect/{ContactId}/risk``."""
    return voice_id_attributes(
        risk.get("dimensions") or {},
        unanalyzed=str(risk.get("unanalyzed") or ""),
        call_id=str(risk.get("call_id") or ""),
        **options,
    )


def merge_alert(
    previous: Mapping[str, str],
    alert: Mapping[str, Any],
    *,
    risk_threshold: int = 50,
    **options: Any,
) -> dict[str, str]:
    """The attributes after one alert webhook (``data`` of the envelope), given the
    contact's current attributes: each risk only rises (alerts arrive one dimension at
    a time, out of order across dimensions), the decision and reasons follow the merged
    risks. Returns only the keys this module owns."""
    dimension = str(alert["dimension"])
    fresh = voice_id_attributes(
        {dimension: alert},
        call_id=str(alert.get("call_id") or ""),
        risk_threshold=risk_threshold,
        **options,
    )
    out = {k: v for k, v in previous.items() if k in ATTRIBUTES}
    for key in _RISK_KEYS:
        out[key] = str(max(_int(previous.get(key)), _int(fresh.get(key))))
    out["FraudRiskThreshold"] = str(risk_threshold)
    out.update(_decision({k: int(out[k]) for k in _RISK_KEYS}, risk_threshold, ""))
    if dimension == MISMATCH:
        for key in (
            "AuthenticationScore",
            "AuthenticationDecision",
            "AuthenticationAcceptanceThreshold",
        ):
            out[key] = fresh[key]
    bands = [out.get("CallShieldBand", "low"), fresh["CallShieldBand"]]
    out["CallShieldBand"] = max((b if b in BANDS else "low" for b in bands), key=BANDS.index)
    raised = {d for d in out.get("CallShieldDimensions", "").split(",") if d}
    raised.update(d for d in fresh["CallShieldDimensions"].split(",") if d)
    out["CallShieldDimensions"] = ",".join(sorted(raised))
    if fresh.get("CallShieldCallId"):
        out["CallShieldCallId"] = fresh["CallShieldCallId"]
    return out


def _int(value: str | None) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0
