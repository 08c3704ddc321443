"""Helpers for the adapters' tenant tests: the bridge's tenant settings they share and
what a call ended up with (its tenant and what decided it, and the tenant its
``started`` CallEvent carried), plus the resolver's rejection counters."""

from __future__ import annotations

from tests.sip.bridge_runner import RunningBridge

# two known tenants; a call to +1800... maps to globex when nothing explicit is usable
TENANTS: dict[str, object] = {
    "tenants_known": "acme,globex",
    "tenant_by_dnis_prefix": {"+1800": "globex"},
}


def tenant_of(bridge: RunningBridge, call_id: str) -> tuple[str, str, str | None]:
    """(call.tenant, call.tenant_source, the started CallEvent's tenant)."""
    call = bridge.calls().get(call_id)
    assert call is not None, f"call {call_id} is not live"
    started = [e.tenant for e, c in bridge.publisher.events if c.call_id == call_id]
    return call.tenant, call.tenant_source, started[0] if started else None


def rejected(bridge: RunningBridge) -> dict[tuple[str, str], int]:
    """Refused explicit values by (origin, reason), as /metrics counts them."""
    snap = bridge.bridge.tenants.snapshot()
    return {(k[1], k[2]): n for k, n in snap.items() if k[0] == "rejected"}
