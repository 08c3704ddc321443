"""detectors/bus/voice_id.py: our bands and scores as Voice ID-compatible 0-100 contact
attributes. The policy threshold lands on the Voice ID threshold, the mapping is
monotone, a raised band is never below it, the attribute set is the documented one,
and the module needs nothing but the standard library (a Lambda carries the file)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from detectors.bus import voice_id
from detectors.bus.voice_id import ATTRIBUTES, DimensionRisk, from_risk, merge_alert, to_0_100

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 0.8, 0.9, 1.0])
@pytest.mark.parametrize("at", [1, 10, 50, 90])
def test_threshold_lands_on_the_voice_id_threshold_and_order_is_kept(
    threshold: float, at: int
) -> None:
    scores = [i / 200 for i in range(201)]
    mapped = [to_0_100(DimensionRisk("low", s, threshold), at) for s in scores]
    assert mapped == sorted(mapped) and mapped[0] >= 0 and mapped[-1] <= 100
    for s, m in zip(scores, mapped, strict=True):
        assert (m >= at) == (s >= threshold), (s, m)
    assert all(to_0_100(DimensionRisk("elevated", s, threshold), at) >= at for s in scores)
    if threshold < 1.0:
        assert mapped[-1] == 100


def test_the_risk_api_answer_as_attributes() -> None:
    risk = {
        "call_id": "call_9c1f",
        "band": "high",
        "dimensions": {
            "synthetic_voice": {"band": "high", "score": 0.94, "threshold": 0.8},
            "replay": {"band": "low", "score": 0.2, "threshold": 0.5},
            "caller_id": {"band": "elevated", "score": 0.6, "threshold": 0.5},
        },
        "unanalyzed": "",
    }
    attrs = from_risk(risk)
    assert attrs == {
        "VoiceSpoofingRisk": "85",  # 50 + 50 * (0.94 - 0.8) / 0.2
        "KnownFraudsterRisk": "0",
        "FraudRiskThreshold": "50",
        "FraudDetectionDecision": "HIGH_RISK",
        "FraudDetectionReasons": "VOICE_SPOOFING",
        "CallShieldBand": "high",
        "CallShieldDimensions": "caller_id,synthetic_voice",
        "CallShieldCallId": "call_9c1f",
    }
    shed = from_risk({"call_id": "c", "dimensions": {}, "unanalyzed": "capacity"})
    assert shed["FraudDetectionDecision"] == "NOT_ENOUGH_SPEECH"
    assert shed["CallShieldUnanalyzed"] == "capacity"
    calm = from_risk({"dimensions": {"voice_mismatch": {"score": 0.1, "threshold": 0.9}}})
    assert (calm["AuthenticationDecision"], calm["AuthenticationScore"]) == ("ACCEPT", "99")
    assert calm["FraudDetectionDecision"] == "LOW_RISK"


def test_alerts_merge_into_the_contact_attributes_risks_only_rise() -> None:
    high = {"dimension": "known_fraudster", "band": "high", "score": 0.9, "threshold": 0.5}
    later = {"dimension": "known_fraudster", "band": "elevated", "score": 0.6, "threshold": 0.5}
    first = merge_alert({"CustomerSegment": "gold"}, high)
    assert "CustomerSegment" not in first  # only our keys are written back
    second = merge_alert({**first, "CustomerSegment": "gold"}, later)
    assert second["KnownFraudsterRisk"] == first["KnownFraudsterRisk"] == "90"
    assert second["FraudDetectionReasons"] == "KNOWN_FRAUDSTER"


def test_every_attribute_is_documented_and_the_module_is_stdlib_only() -> None:
    docs = (REPO / "docs/integrations.md").read_text()
    section = docs[docs.index("## Amazon Connect") :]
    for name in ATTRIBUTES:
        assert f"`{name}`" in section, name
    tree = ast.parse(Path(voice_id.__file__).read_text())
    imported = {
        (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
