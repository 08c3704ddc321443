"""Tenants end to end: three SIPp calls from a multi-tenant PBX into a real bridge with
its full wiring (real redis-server, a STIR/SHAKEN trust store made by the test). Every
call carries a forged PASSporT, so caller_id scores it 0.95; what differs is the
``X-CallShield-Tenant`` header. The stored policy gives tenant ``acme`` a caller_id
threshold of 0.97 (no alert) and ``globex`` one of 0.5 (an alert under globex's rule).
The third call's header is junk: it is rejected, counted on /metrics, and the call is
still analysed, under the default tenant and the default rule (0.6: an alert). Call
events and alerts in Redis carry each call's tenant."""

from __future__ import annotations

import time
from pathlib import Path

import redis
from bridge_runner import run_sipp, wait_for
from stir_fixtures import StirPki
from test_policy_hot_reload import _apply
from wired_bridge import InProcessBridge

from detectors.alert_schema import Alert, CallEvent, Dimension, ScoreUpdate
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings
from detectors.model_store import ModelSettings
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring

POLICY = {
    "tenants": {
        "acme": {"dimensions": {"caller_id": {"threshold": 0.97, "high_threshold": 0.99}}},
        "globex": {"dimensions": {"caller_id": {"threshold": 0.5, "n": 1, "m": 1}}},
    }
}
TENANTS = ("acme", "globex", "Globex;<script>")


def test_each_call_gets_its_tenants_policy_and_a_junk_tenant_falls_back(
    tmp_path: Path, settings: BusSettings, client: redis.Redis
) -> None:
    keys = Keys(settings.key_prefix)
    policy = _apply(settings.redis_url.get_secret_value(), keys, POLICY)  # type: ignore[union-attr]
    pki = StirPki.make()
    ca_dir, cache = pki.trust_dirs(tmp_path / "trust")
    base = 41500 + (time.monotonic_ns() // 1000 % 20) * 20
    bridge_settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 19}",
            "drain_timeout_s": 3.0,
            "http_listen": "",
            "api_listen": "",
            "stir_ca_dir": str(ca_dir),
            "stir_cert_cache": str(cache),
            "tenants_known": "acme,globex",
        }
    )
    wiring = Wiring(bridge_settings, settings, ModelSettings(models_dir=tmp_path / "none"))
    bridge = InProcessBridge(bridge_settings, wiring)

    def stream(key: str) -> list[object]:
        return [decode(f) for _, f in client.xrange(key)]

    def started() -> list[CallEvent]:
        return [e for e in stream(keys.events) if isinstance(e, CallEvent) and e.event == "started"]

    def scored() -> set[str]:
        return {
            s.call_id
            for s in stream(keys.scores)
            if isinstance(s, ScoreUpdate) and s.dimension is Dimension.CALLER_ID
        }

    bridge.start()
    try:
        forged = pki.passport(orig="12155550999", iat=int(time.time()))
        for n, tenant in enumerate(TENANTS):
            work = tmp_path / f"call{n}"
            work.mkdir()
            extra = ["-set", "identity", forged, "-set", "tenant", tenant]
            result = run_sipp("uac_tenant.xml", bridge, work, extra=extra)  # type: ignore[arg-type]
            assert result.returncode == 0, result.stderr[-2000:]
            assert wait_for(lambda n=n: len(started()) == n + 1, 10)  # in order
        ids = [e.call_id for e in started()]
        assert wait_for(lambda: scored() == set(ids), 10)  # all three analysed
        assert wait_for(
            lambda: (
                {a.call_id for a in stream(keys.alerts) if isinstance(a, Alert)} == {ids[1], ids[2]}
            ),
            10,
        )
        metrics = wiring.metrics()[0].decode()
    finally:
        bridge.stop()

    acme, globex, junk = ids
    events = [e for e in stream(keys.events) if isinstance(e, CallEvent)]
    tenants = {(e.call_id, e.tenant) for e in events}
    assert tenants == {(acme, "acme"), (globex, "globex"), (junk, "default")}
    assert {e.event for e in events if e.call_id == junk} >= {"started", "ended"}
    alerts = [a for a in stream(keys.alerts) if isinstance(a, Alert)]
    assert {a.policy_version for a in alerts} == {policy.version}
    by_call = {a.call_id: a for a in alerts}
    assert acme not in by_call  # 0.95 is under acme's 0.97
    assert (by_call[globex].tenant, by_call[globex].thresholds["threshold"]) == ("globex", 0.5)
    assert (by_call[junk].tenant, by_call[junk].thresholds["threshold"]) == ("default", 0.6)
    assert 'callshield_tenant_rejected_total{origin="sip_header",reason="malformed"} 1.0' in (
        metrics
    )
    assert 'callshield_tenant_resolved_total{source="sip_header"} 2.0' in metrics
    assert 'callshield_tenant_resolved_total{source="default"} 1.0' in metrics
