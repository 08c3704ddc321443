"""A queue claimed mid-call re-scopes the call's alert policy (issue 12): windows before
the claim are judged by the tenant's rules, windows after it by the queue's, and the
alerts say which rules (thresholds, band cap) they were raised under. Other calls and
an unknown call are untouched."""

from __future__ import annotations

from datetime import UTC, datetime

from test_fusion_policy import Publisher, _result

from detectors.alert_schema import Band, Dimension
from detectors.bus.policy import PolicyBody, Scope
from detectors.fusion import Fusion

SV = Dimension.SYNTHETIC_VOICE
POLICY = PolicyBody.model_validate(
    {
        "dimensions": {"synthetic_voice": {"threshold": 0.8, "max_band": "elevated"}},
        "tenants": {
            "bank": {
                "queues": {
                    "wire-transfers": {
                        "dimensions": {"synthetic_voice": {"threshold": 0.4, "n": 1, "m": 1}}
                    }
                }
            }
        },
    }
).versioned(3)


def _fusion() -> tuple[Fusion, Publisher]:
    pub = Publisher()
    f = Fusion(pub, POLICY, node_id="n1", now=lambda: datetime(2026, 11, 30, tzinfo=UTC))
    for call in ("c1", "c2"):
        f.open_call(call, scope=Scope("bank", dnis="8005550100"))
    return f, pub


def test_claimed_queue_rules_apply_from_the_next_window() -> None:
    f, pub = _fusion()
    for i in range(4):  # under the tenant's 0.8: nothing
        f.on_result(_result(2.0 * i, 0.6, call="c1"))
    assert pub.alerts == []
    assert f.set_queue("c1", "wire-transfers")
    f.on_result(_result(8.0, 0.6, call="c1"))  # one window over the queue's 0.4 (1 of 1)
    assert len(pub.alerts) == 1
    alert = pub.alerts[0]
    assert alert.call_id == "c1" and alert.tenant == "bank"
    assert alert.policy_version == POLICY.version == "3-" + POLICY.content_hash()
    assert (alert.thresholds["threshold"], alert.thresholds["n"]) == (0.4, 1.0)
    assert alert.band is Band.ELEVATED  # the queue's rule does not cap the band ...
    f.on_result(_result(10.0, 0.99, call="c1"))
    assert pub.alerts[-1].band is Band.HIGH  # ... so stronger evidence reaches high
    # the other call of the tenant keeps the tenant's rules
    for i in range(3):
        f.on_result(_result(2.0 * i, 0.99, call="c2"))
    c2 = [a for a in pub.alerts if a.call_id == "c2"]
    assert c2 and all(a.thresholds["threshold"] == 0.8 for a in c2)
    assert all(a.band is Band.ELEVATED for a in c2)


def test_set_queue_is_idempotent_keeps_dnis_and_refuses_unknown_calls() -> None:
    f, pub = _fusion()
    assert f.set_queue("c1", "wire-transfers") and f.set_queue("c1", "wire-transfers")
    assert not f.set_queue("nope", "wire-transfers")
    assert f._calls["c1"].scope == Scope("bank", "wire-transfers", "8005550100")
    f.on_result(_result(0.0, 0.5, call="c1"))
    assert [a.thresholds["threshold"] for a in pub.alerts] == [0.4]
    # a queue the policy does not name falls back to the tenant's (here the default) rules
    assert f.set_queue("c1", "general")
    f.on_result(_result(2.0, 0.5, call="c1"))
    f.on_result(_result(4.0, 0.5, call="c1"))
    assert len(pub.alerts) == 1  # 0.5 < 0.8: no revision, no new alert
