"""Caller identity inputs: STIR/SHAKEN PASSporTs made with a test PKI (verified,
tampered, stale, unknown x5u, untrusted chain, number mismatch, malformed, no trust
store), Diversion and History-Info chains, and the number-free summary on the call
events of a real INVITE through the UAS."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from bridge_runner import run_sipp, running_bridge, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sip_fakes import harness, invite
from stir_fixtures import X5U, StirPki, b64url

from sip_bridge.sip.identity import Diversions, caller_identity
from sip_bridge.sip.message import Headers
from sip_bridge.sip.passport import Passport, TrustStore, verify

ORIG, DEST = "+1 215-555-0121", "12155550131"


@pytest.fixture(scope="module")
def pki() -> StirPki:
    return StirPki.make()


@pytest.fixture
def store(pki: StirPki, tmp_path: Path) -> TrustStore:
    return TrustStore.load(*pki.trust_dirs(tmp_path))


def _check(
    pki: StirPki, store: TrustStore | None, *, caller: str = ORIG, **kw: object
) -> tuple[str, str]:
    now = time.time()
    iat = int(now) - 2
    value = pki.passport(iat=iat, **kw)  # type: ignore[arg-type]
    result = verify(Passport.parse(value), store, caller, now)
    return result.status, result.reason


def test_valid_a_attestation_is_verified(pki: StirPki, store: TrustStore) -> None:
    value = pki.passport(iat=int(time.time()))
    p = Passport.parse(value)
    assert (p.attest, p.origid, p.orig_tn, p.dest_tns, p.x5u, p.info) == (
        "A",
        "123e4567-e89b-12d3-a456-426655440000",
        "12155550121",
        (DEST,),
        X5U,
        X5U,
    )
    assert _check(pki, store) == ("verified", "")
    assert _check(pki, store, attest="C") == ("verified", "")


def test_tampered_signature_fails(pki: StirPki, store: TrustStore) -> None:
    value = pki.passport(iat=int(time.time()), attest="B")
    header, claims, rest = value.split(".", 2)
    body = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    body["attest"] = "A"  # upgrade the attestation after signing
    tampered = f"{header}.{b64url(json.dumps(body).encode())}.{rest}"
    result = verify(Passport.parse(tampered), store, ORIG, time.time())
    assert (result.status, result.reason) == ("failed", "bad_signature")
    sig, _, params = rest.partition(";")
    flipped = sig[:10] + ("A" if sig[10] != "A" else "B") + sig[11:]
    result = verify(
        Passport.parse(f"{header}.{claims}.{flipped};{params}"), store, ORIG, time.time()
    )
    assert (result.status, result.reason) == ("failed", "bad_signature")


def test_expired_iat_fails(pki: StirPki, store: TrustStore) -> None:
    now = time.time()
    stale = pki.passport(iat=int(now) - 61)
    assert verify(Passport.parse(stale), store, ORIG, now).reason == "stale_iat"
    future = pki.passport(iat=int(now) + 120)
    assert verify(Passport.parse(future), store, ORIG, now).status == "failed"
    fresh = pki.passport(iat=int(now) - 59)
    assert verify(Passport.parse(fresh), store, ORIG, now).status == "verified"


def test_unknown_x5u_is_unverified_and_a_digest_named_cache_file_is_found(
    pki: StirPki, store: TrustStore
) -> None:
    other = "https://cr.elsewhere.example/sp.pem"
    assert _check(pki, store, x5u=other) == ("unverified", "unknown_x5u")
    assert store.cert_cache is not None
    pki.cache_by_digest(store.cert_cache, other)
    assert _check(pki, store, x5u=other) == ("verified", "")


def test_no_trust_store_is_unverified_with_the_claims_still_read(pki: StirPki) -> None:
    assert _check(pki, None) == ("unverified", "no_trust_store")
    headers = Headers(
        [
            ("From", "<sip:+12155550121@carrier.example>;tag=1"),
            ("To", "<sip:+12155550131@cc.example>"),
            ("Identity", pki.passport(iat=int(time.time()), attest="B")),
        ]
    )
    ident = caller_identity(headers, now=time.time())
    assert (ident.attestation, ident.verification, ident.verification_reason) == (
        "B",
        "unverified",
        "no_trust_store",
    )
    info = ident.info()
    assert (info.orig_tn_matches_caller, info.dest_tn_matches_called) == (True, True)


def test_untrusted_chain_mismatched_number_and_malformed_fail(pki: StirPki, tmp_path: Path) -> None:
    untrusted = TrustStore.load(*pki.trust_dirs(tmp_path / "u", trusted=False))
    assert _check(pki, untrusted) == ("failed", "untrusted_chain")
    trusted = TrustStore.load(*pki.trust_dirs(tmp_path / "t"))
    assert _check(pki, trusted, caller="+12155550999") == ("failed", "tn_mismatch")
    headers = Headers([("From", "<sip:+12155550121@x>"), ("Identity", "not.a;info=<x>")])
    ident = caller_identity(headers, trust=trusted, now=time.time())
    assert (ident.verification, ident.verification_reason) == ("failed", "malformed")
    assert _check(pki, trusted, alg="RS256") == ("failed", "unsupported_alg")


def test_diversion_chain() -> None:
    values = Headers(
        [
            (
                "Diversion",
                "<tel:+12155550177>;reason=user-busy;counter=2, "
                '<sip:+12155550131@cc.example>;reason="Unconditional"',
            )
        ]
    ).get_all("Diversion")
    d = Diversions.from_diversion(values)
    assert (d.count, d.reasons, d.original_called, d.source) == (
        3,
        ("user-busy", "unconditional"),
        "+12155550131",
        "diversion",
    )


def test_history_info_chain() -> None:
    values = Headers(
        [
            (
                "History-Info",
                "<sip:+12155550131@cc.example?Reason=SIP%3Bcause%3D486%3Btext%3D%22Busy%22>"
                ";index=1, <sip:+12155550177@cc.example>;index=1.1;mp=1, "
                "<sip:+12155550188@cc.example;cause=408>;index=1.1.1;mp=1.1, "
                "<sip:agent@10.0.0.5>;index=1.1.1.1;rc=1.1.1",
            )
        ]
    ).get_all("History-Info")
    d = Diversions.from_history_info(values)
    assert (d.count, d.reasons, d.original_called, d.source) == (
        2,
        ("user-busy", "no-answer"),
        "+12155550131",
        "history-info",
    )


def test_invite_identity_reaches_the_call_and_its_events_without_numbers(
    pki: StirPki, store: TrustStore
) -> None:
    identity = pki.passport(iat=int(time.time()), orig="15550123", dest="5550100")
    h = harness(trust_store=store)
    extra = (
        f"Identity: {identity}\n"
        "P-Asserted-Identity: <sip:5550123@carrier.example>, <tel:5550123>\n"
        "Diversion: <sip:5550199@pbx.example>;reason=no-answer\n"
    )
    _trying, ok = h.send(invite(extra=extra))
    assert ok.status == 200
    (call,) = h.controller.calls.values()
    assert call.identity is not None
    assert (call.identity.verification, call.identity.verification_reason) == (
        "failed",
        "tn_mismatch",
    )
    ((event, _),) = h.publisher.events
    info = event.identity
    assert info is not None
    assert (info.attestation, info.verification, info.has_pai, info.pai_matches_from) == (
        "A",
        "failed",
        True,
        True,
    )
    assert (info.diversion_count, info.diversion_reasons) == (1, ["no-answer"])
    assert info.original_called_matches_called is False
    wire = event.model_dump_json()
    for number in ("5550123", "5550100", "5550199", "15550123"):
        assert number not in wire


def test_invite_with_a_verified_passport(pki: StirPki, store: TrustStore) -> None:
    identity = pki.passport(iat=int(time.time()), orig="5550123", dest="5550100")
    h = harness(trust_store=store)
    h.send(invite(extra=f"Identity: {identity}\n"))
    ((event, call),) = h.publisher.events
    assert call.identity is not None and call.identity.caller_number == "5550123"
    assert event.identity is not None
    assert (event.identity.verification, event.identity.orig_tn_matches_caller) == (
        "verified",
        True,
    )
    assert event.identity.dest_tn_matches_called is True


HEADER_TEXT = st.text(
    alphabet=st.sampled_from([*'<>;=,.:@+-_"%?&ABCxyz0123456789 ', "\u00b2", "\u0661"]),
    max_size=200,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    identity=HEADER_TEXT,
    diversion=HEADER_TEXT,
    history=HEADER_TEXT,
    pai=HEADER_TEXT,
    jws=st.lists(st.binary(max_size=80), min_size=3, max_size=3),
)
def test_hostile_identity_headers_never_raise(
    identity: str, diversion: str, history: str, pai: str, jws: list[bytes]
) -> None:
    token = ".".join(b64url(part) for part in jws) + ";info=<x>;ppt=shaken"
    nested = b64url(b"[" * 3000) + "." + b64url(b"{}") + ".AA"
    for value in (identity, token, nested):
        headers = Headers(
            [
                ("From", "<sip:+12155550121@x>"),
                ("P-Asserted-Identity", pai),
                ("Identity", value),
                ("Diversion", diversion),
                ("History-Info", history),
            ]
        )
        info = caller_identity(headers, now=time.time()).info()
        assert info.verification in ("absent", "failed", "unverified")


def test_bridge_verifies_a_passport_with_its_configured_trust_store(
    pki: StirPki, tmp_path: Path
) -> None:
    ca_dir, cache = pki.trust_dirs(tmp_path / "trust")
    identity = pki.passport(iat=int(time.time()))  # 12155550121 -> 12155550131
    with running_bridge(stir_ca_dir=str(ca_dir), stir_cert_cache=str(cache)) as bridge:
        result = run_sipp(
            "uac_identity.xml", bridge, tmp_path, extra=["-set", "identity", identity]
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert wait_for(lambda: bridge.calls() == {})
    started, ended = (e for e, _ in bridge.publisher.events)
    assert (started.event, ended.event, ended.identity) == ("started", "ended", None)
    info = started.identity
    assert info is not None
    assert (info.attestation, info.verification, info.verification_reason) == ("A", "verified", "")
    assert (info.orig_tn_matches_caller, info.dest_tn_matches_called, info.pai_matches_from) == (
        True,
        True,
        True,
    )
    assert (info.diversion_count, info.diversion_reasons) == (1, ["user-busy"])
