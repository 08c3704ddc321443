"""caller_id end to end: SIPp calls into a real bridge with its full wiring (real
redis-server, trust store made by the test). A call whose PASSporT names another number
than the one it claims (a spoofed ANI) raises a high caller_id alert in Redis, naming
the failed check but no number; a genuine call without an Identity header is scored,
and raises none."""

from __future__ import annotations

import time
from pathlib import Path

import redis
from bridge_runner import run_sipp, wait_for
from stir_fixtures import StirPki
from wired_bridge import InProcessBridge

from detectors.alert_schema import Alert, Band, CallEvent, Dimension, ScoreUpdate
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings
from detectors.model_store import ModelSettings
from sip_bridge.caller_id import CallerIdCollector
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring


def test_spoofed_ani_alerts_and_a_call_without_identity_does_not(
    tmp_path: Path, settings: BusSettings, client: redis.Redis
) -> None:
    pki = StirPki.make()
    ca_dir, cache = pki.trust_dirs(tmp_path / "trust")
    base = 39500 + (time.monotonic_ns() // 1000 % 20) * 20
    bridge_settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 19}",
            "drain_timeout_s": 3.0,
            "http_listen": "",
            "api_listen": "127.0.0.1:0",
            "stir_ca_dir": str(ca_dir),
            "stir_cert_cache": str(cache),
        }
    )
    wiring = Wiring(bridge_settings, settings, ModelSettings(models_dir=tmp_path / "none"))
    bridge = InProcessBridge(bridge_settings, wiring)
    keys = Keys(settings.key_prefix)

    def stream(key: str) -> list[object]:
        return [decode(f) for _, f in client.xrange(key)]

    def started() -> list[str]:
        return [
            e.call_id
            for e in stream(keys.events)
            if isinstance(e, CallEvent) and e.event == "started"
        ]

    bridge.start()
    try:
        (tmp_path / "forged").mkdir()
        # signed by a trusted SP, but for another calling number than the INVITE's
        forged = pki.passport(orig="12155550999", iat=int(time.time()))
        result = run_sipp(
            "uac_identity.xml",
            bridge,
            tmp_path / "forged",
            extra=["-set", "identity", forged],  # type: ignore[arg-type]
        )
        assert result.returncode == 0, result.stderr[-2000:]
        (tmp_path / "genuine").mkdir()
        result = run_sipp("uac_no_identity.xml", bridge, tmp_path / "genuine")  # type: ignore[arg-type]
        assert result.returncode == 0, result.stderr[-2000:]
        assert wait_for(lambda: len(started()) == 2, 10)
        assert wait_for(
            lambda: (
                sum(
                    1
                    for s in stream(keys.scores)
                    if isinstance(s, ScoreUpdate) and s.dimension is Dimension.CALLER_ID
                )
                == 2
            ),
            10,
        )
    finally:
        bridge.stop()
    forged_id, genuine_id = started()
    (family,) = CallerIdCollector(wiring.caller_id).collect()  # its part of /metrics
    counts = {s.labels["what"]: s.value for s in family.samples}
    assert counts["emitted"] == 2 and counts["redis_errors"] == 0  # one verdict per call
    alerts = [a for a in stream(keys.alerts) if isinstance(a, Alert)]
    caller = [a for a in alerts if a.dimension is Dimension.CALLER_ID]
    assert caller and {a.call_id for a in caller} == {forged_id}, caller
    first = min(caller, key=lambda a: a.revision)
    assert (first.band, first.revision) == (Band.HIGH, 1)
    assert "STIR/SHAKEN verification failed (tn_mismatch)" in first.reasons[0].detail
    scores = {
        s.call_id: s.score
        for s in stream(keys.scores)
        if isinstance(s, ScoreUpdate) and s.dimension is Dimension.CALLER_ID
    }
    assert scores[genuine_id] == 0.0 and (scores[forged_id] or 0.0) >= 0.9
    # nothing stored or published names the number, in clear, anywhere in Redis
    for key in client.keys("*"):
        assert b"2155550121" not in key and b"2155550999" not in key
        if client.type(key) == b"stream":
            for _, fields in client.xrange(key):
                blob = b"".join(k + v for k, v in fields.items())
                assert b"2155550121" not in blob and b"2155550999" not in blob
