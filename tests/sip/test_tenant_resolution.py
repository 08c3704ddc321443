"""A call's tenant (sip_bridge.tenant): the resolution order (explicit value, DNIS
prefix, source network, default), validation of explicit values (rejected, counted,
fallen back from, never fatal), the settings that configure it, and where the values
come from: the INVITE's header, a SIPREC metadata extension element, the control API."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError
from sip_fakes import PEER, FakeMedia, Harness, invite
from sip_test_data import SIPREC_CONTENT_TYPE, siprec_body

from detectors.alert_schema import Abstention, Alert, CallEvent, ScoreUpdate, SystemEvent
from detectors.bus.biometrics import BiometricsMode
from detectors.bus.evidence import EvidenceMeta, EvidenceMode, EvidenceSettings, load_evidence_vault
from detectors.bus.policy import PolicyBody, Scope
from detectors.runtime import DetectorRuntime
from detectors.speaker.mode_gate import ModeGate
from detectors.speaker.settings import BiometricsSettings
from native.ingest import Ingest
from sip_bridge.analysis import Analysis
from sip_bridge.attach import AttachedCalls, CallCreate, LegSpec
from sip_bridge.calls import CallController, MemoryPublisher
from sip_bridge.evidence import EvidenceRecorder
from sip_bridge.settings import Settings
from sip_bridge.sip.siprec import RecordingMetadata
from sip_bridge.sip.transaction import Peer
from sip_bridge.sip.uas import SipUas, UasConfig
from sip_bridge.tenant import Hint, TenantResolver, TenantRules, hints_of

RULES = TenantRules.parse(
    "default",
    ["acme", "globex", "initech"],
    by_dnis_prefix={"+1800555": "acme", "+18005559": "globex"},
    by_source={"10.0.0.0/8": "initech", "10.9.0.0/16": "globex", "2001:db8::/32": "acme"},
)


def _header(*values: str) -> tuple[Hint, ...]:
    return (Hint("sip_header", values),)


def test_explicit_value_wins_and_is_normalised() -> None:
    r = TenantResolver(RULES)
    got = r.resolve(_header("  Acme "), source="10.9.1.1", dnis="+18005559000")
    assert (got.tenant, got.source, got.rejected) == ("acme", "sip_header", ())
    meta = (Hint("sip_header", ()), Hint("siprec_metadata", ("globex",)))
    assert r.resolve(meta).tenant == "globex"  # no header: the metadata's value
    assert r.resolve((Hint("api", ("initech",)),)).source == "api"
    assert r.snapshot() == {
        ("resolved", "sip_header"): 1,
        ("resolved", "siprec_metadata"): 1,
        ("resolved", "api"): 1,
    }


def test_mappings_longest_prefix_then_most_specific_network_then_default() -> None:
    r = TenantResolver(RULES)
    assert r.resolve(dnis="+18005559000").tenant == "globex"  # the longer prefix
    assert r.resolve(dnis="+18005551234").tenant == "acme"
    # the DNIS prefix is consulted before the source network
    got = r.resolve(source="10.9.1.1", dnis="+18005551234")
    assert (got.tenant, got.source) == ("acme", "dnis_prefix")
    assert r.resolve(source="10.9.1.1").tenant == "globex"  # the /16 over the /8
    assert r.resolve(source="10.1.1.1").tenant == "initech"
    assert r.resolve(source="[2001:db8::7]").tenant == "acme"
    got = r.resolve(source="192.0.2.1", dnis="5550100")
    assert (got.tenant, got.source) == ("default", "default")
    assert r.resolve(source="not-an-address").source == "default"


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        (("ACME;DROP TABLE",), "malformed"),
        (("-acme",), "malformed"),
        (("a" * 33,), "malformed"),
        (("x" * 5000,), "malformed"),
        (("acmé",), "malformed"),
        (("umbrella",), "unknown"),  # well-formed, but not a configured tenant
        (("acme", "globex"), "conflicting"),
    ],
)
def test_a_rejected_value_is_counted_and_the_call_falls_back(
    values: tuple[str, ...], reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    r = TenantResolver(RULES)
    with caplog.at_level(logging.WARNING, logger="sip_bridge.tenant"):
        got = r.resolve(_header(*values), source="10.1.2.3", dnis="5550100", call_id="c1")
    # as if nothing had been sent: the source mapping decides, never the rejected name
    assert (got.tenant, got.source) == ("initech", "sip_source")
    assert got.rejected == (("sip_header", reason),)
    assert r.snapshot() == {("rejected", "sip_header", reason): 1, ("resolved", "sip_source"): 1}
    (record,) = caplog.records
    assert f"call c1: tenant from sip_header rejected ({reason})" in record.getMessage()
    assert len(record.getMessage()) < 120  # never the whole junk value


def test_a_rejected_header_falls_to_the_siprec_value_then_to_default() -> None:
    r = TenantResolver(RULES)
    hints = (Hint("sip_header", ("bad tenant",)), Hint("siprec_metadata", ("globex",)))
    assert r.resolve(hints).tenant == "globex"
    both_bad = (Hint("sip_header", ("bad tenant",)), Hint("siprec_metadata", ("nope",)))
    got = r.resolve(both_bad)
    assert (got.tenant, got.source) == ("default", "default")
    assert got.rejected == (("sip_header", "malformed"), ("siprec_metadata", "unknown"))
    assert r.resolve(_header("", "  ")).rejected == ()  # empty: not sent, not counted


def test_without_known_tenants_any_wellformed_id_is_taken_and_gets_no_other_tenants_rules() -> None:
    r = TenantResolver(TenantRules.parse(by_source={"10.0.0.0/8": "acme"}))
    got = r.resolve(_header("umbrella"), source="10.1.1.1")
    assert (got.tenant, got.source) == ("umbrella", "sip_header")
    # a policy that does not name the tenant gives it the global rules, not acme's
    policy = PolicyBody.model_validate(
        {"tenants": {"acme": {"dimensions": {"synthetic_voice": {"threshold": 0.2}}}}}
    )
    rules = policy.resolve(Scope(tenant="umbrella"))
    assert rules == policy.resolve(Scope())
    assert rules != policy.resolve(Scope(tenant="acme"))


def test_the_default_tenant_is_always_accepted() -> None:
    r = TenantResolver(TenantRules.parse("shared", ["acme"]))
    assert r.resolve(_header("shared")).source == "sip_header"
    assert r.resolve(_header("default")).rejected == (("sip_header", "unknown"),)


@pytest.mark.parametrize(
    "bad",
    [
        {"tenant_default": "Not Valid"},
        {"tenants_known": "acme,b@d"},
        {"tenants_known": "acme", "tenant_by_source": {"10.0.0.0/8": "globex"}},
        {"tenant_by_source": {"10.0.0.300/8": "acme"}},
        {"tenant_by_dnis_prefix": {"800-555": "acme"}},
        {"tenant_by_dnis_prefix": {"+1800": "ACME"}},
        {"tenant_header": "X Tenant"},
    ],
)
def test_bad_tenant_settings_are_refused_at_load(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings.model_validate(bad)


def test_tenant_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALLSHIELD_TENANTS_KNOWN", "acme, globex")
    monkeypatch.setenv("CALLSHIELD_TENANT_BY_SOURCE", '{"192.0.2.0/24": "globex"}')
    monkeypatch.setenv("CALLSHIELD_TENANT_BY_DNIS_PREFIX", '{"+1800": "acme"}')
    monkeypatch.setenv("CALLSHIELD_TENANT_HEADER", "X-Client")
    s = Settings.load()
    assert s.tenant_rules.known == frozenset({"acme", "globex"})
    r = TenantResolver(s.tenant_rules)
    assert r.resolve(source="192.0.2.9").tenant == "globex"
    assert r.resolve(dnis="+18001").tenant == "acme"


def test_siprec_metadata_tenant_extension() -> None:
    xml = (
        b'<recording xmlns="urn:ietf:params:xml:ns:recording:1"><datamode>complete</datamode>'
        b'<participant participant_id="a"/><extensiondata xmlns:cc="urn:example:cc">'
        b"<cc:tenant> Acme </cc:tenant></extensiondata></recording>"
    )
    meta = RecordingMetadata.parse(xml)
    assert meta.tenant == "Acme"  # raw: the resolver validates and lower-cases it
    partial = RecordingMetadata.parse(
        b'<recording xmlns="urn:ietf:params:xml:ns:recording:1"><datamode>partial</datamode>'
        b"</recording>"
    )
    assert meta.merged(partial).tenant == "Acme"
    assert RecordingMetadata.parse(bytes(meta)).tenant == "Acme"
    assert RecordingMetadata.parse(xml.replace(b"cc:tenant", b"tenant-id")).tenant == "Acme"


def _uas(rules: TenantRules, **config: object) -> Harness:
    media, publisher = FakeMedia(), MemoryPublisher()
    controller = CallController(media, publisher, tenants=TenantResolver(rules))
    uas = SipUas(controller, UasConfig(host="198.51.100.1", port=5060, **config))  # type: ignore[arg-type]
    return Harness(media, publisher, controller, uas)


def test_invites_get_their_tenant_from_header_source_or_siprec_metadata() -> None:
    rules = TenantRules.parse(
        "default",
        ["acme", "globex"],
        by_dnis_prefix={"+1800": "acme"},
        by_source={"192.0.2.0/24": "globex"},
    )
    h = _uas(rules)
    h.send(invite(call_id="one", extra="X-CallShield-Tenant: ACME\n"))
    h.send(invite(call_id="two", branch="z9hG4bK2", extra="X-CallShield-Tenant: <junk>\n"))
    h.send(invite(call_id="three", branch="z9hG4bK3"), peer=Peer("udp", "203.0.113.5", 5060))
    siprec = siprec_body().replace(
        "</recording>", "<extensiondata><tenant>acme</tenant></extensiondata></recording>"
    )
    h.send(
        invite(call_id="four", branch="z9hG4bK4", body=siprec, content_type=SIPREC_CONTENT_TYPE),
        peer=PEER,
    )
    # no explicit value: the recorded callee's number (metadata) picks the tenant
    mapped = siprec_body().replace("sip:agent7@cc.example", "sip:+18005550100@cc.example")
    h.send(
        invite(call_id="five", branch="z9hG4bK5", body=mapped, content_type=SIPREC_CONTENT_TYPE),
        peer=Peer("udp", "203.0.113.5", 5060),
    )
    by_sip_id = {c.sip_call_id: (c.tenant, c.tenant_source) for c in h.controller.calls.values()}
    assert by_sip_id == {
        "one": ("acme", "sip_header"),
        "two": ("globex", "sip_source"),  # the junk header is dropped; PEER is 192.0.2.10
        "three": ("default", "default"),
        "four": ("acme", "siprec_metadata"),
        "five": ("acme", "dnis_prefix"),
    }
    started = {c.sip_call_id: e.tenant for e, c in h.publisher.events if e.event == "started"}
    assert started == {k: v[0] for k, v in by_sip_id.items()}
    assert h.controller.tenants.snapshot()[("rejected", "sip_header", "malformed")] == 1


def test_the_header_name_is_configurable_and_can_be_switched_off() -> None:
    rules = TenantRules.parse()
    h = _uas(rules, tenant_header="X-Client-Id")
    h.send(invite(call_id="a", extra="X-Client-Id: acme\nX-CallShield-Tenant: globex\n"))
    off = _uas(rules, tenant_header="")
    off.send(invite(call_id="b", extra="X-CallShield-Tenant: globex\n"))
    ((call_a,), (call_b,)) = (h.controller.calls.values(), off.controller.calls.values())
    assert (call_a.tenant, call_b.tenant) == ("acme", "default")


def test_control_api_attach_takes_a_tenant_and_shows_what_it_got() -> None:
    controller = CallController(
        FakeMedia(),
        MemoryPublisher(),
        tenants=TenantResolver(TenantRules.parse("default", ["acme"], {"8005": "acme"})),
    )
    calls = AttachedCalls(controller, "198.51.100.1", 30.0)
    legs = [LegSpec(label="caller", role="external")]  # type: ignore[arg-type]
    given = calls.view(calls.create(CallCreate(legs=legs, tenant="acme")))
    assert (given.tenant, given.tenant_source) == ("acme", "api")
    junk = calls.view(calls.create(CallCreate(legs=legs, tenant="Umbrella", dnis="80050")))
    assert (junk.tenant, junk.tenant_source) == ("acme", "dnis_prefix")
    none = calls.view(calls.create(CallCreate(legs=legs)))
    assert (none.tenant, none.tenant_source) == ("default", "default")


class _Bus:
    """Where Analysis hands call events and alerts (the bus publisher's place)."""

    def __init__(self) -> None:
        self.events: list[CallEvent] = []

    def publish_alert(self, alert: Alert) -> None: ...

    def publish_score(self, score: ScoreUpdate) -> None: ...

    def publish_event(self, event: CallEvent) -> None:
        self.events.append(event)

    def publish_system(self, event: SystemEvent) -> None: ...


class _Writer:
    def write(self, meta: EvidenceMeta, blob: bytes) -> None: ...


def test_the_calls_tenant_picks_its_biometrics_and_evidence_modes(tmp_path: Path) -> None:
    """A real detector runtime with the speaker model's mode gate (biometrics off for
    acme) and a real evidence recorder (clips for globex only) behind Analysis: the
    resolved tenant reaches both when the call is admitted and published."""
    bio = BiometricsSettings(tenant_modes={"acme": BiometricsMode.OFF})
    gate = ModeGate(bio.config(), "speaker")
    bus = _Bus()
    runtime = DetectorRuntime([], bus, stage=gate)
    ev = EvidenceSettings(mode=EvidenceMode.OFF, tenant_modes={"globex": EvidenceMode.CLIP})
    recorder = EvidenceRecorder(ev, load_evidence_vault(ev, tmp_path), _Writer(), "node-1")
    analysis = Analysis(runtime, bus, Ingest(max_streams=8), evidence=recorder)
    rules = TenantRules.parse("default", ["acme", "globex"])
    controller = CallController(FakeMedia(), analysis, analysis, TenantResolver(rules))
    calls = AttachedCalls(controller, "198.51.100.1", 30.0)
    legs = [LegSpec(label="caller", role="external")]  # type: ignore[arg-type]
    acme = calls.create(CallCreate(legs=legs, tenant="acme"))
    globex = calls.create(CallCreate(legs=legs, tenant="globex"))
    assert gate.gate("speaker", acme.call_id) is Abstention.BIOMETRICS_OFF
    assert gate.gate("speaker", globex.call_id) is None
    for call in (acme, globex):
        recorder.add_leg(call.call_id, f"{call.call_id}.0", hash(call.call_id) % 1000)
    kept = {leg.call_id for leg in recorder._by_sid.values()}  # clip rings kept
    assert kept == {globex.call_id}
    assert {(e.call_id, e.tenant) for e in bus.events} == {
        (acme.call_id, "acme"),
        (globex.call_id, "globex"),
    }


def test_adapter_values_become_hints_and_non_strings_are_malformed() -> None:
    """What the adapters (sip_bridge.adapters) pass: absent or empty values say nothing;
    a JSON number or list is refused as malformed (never read as the id ``42``); header
    and query disagreeing is one origin's conflict."""
    assert hints_of("twilio_parameter", None, "") == ()
    assert hints_of("whip_request", "acme", None) == (Hint("whip_request", ("acme",)),)
    r = TenantResolver(TenantRules.parse(known=["acme", "42"]))
    number = r.resolve(hints_of("audio_fork_metadata", 42))
    assert (number.tenant, number.source) == ("default", "default")
    assert number.rejected == (("audio_fork_metadata", "malformed"),)
    both = r.resolve(hints_of("whip_request", "acme", "42"))
    assert both.rejected == (("whip_request", "conflicting"),)
    given = r.resolve(hints_of("audiohook_open", " ACME "))
    assert (given.tenant, given.source) == ("acme", "audiohook_open")
