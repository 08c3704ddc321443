"""Leg roles of a plain SIP fork (issue 10): the leg-roles header and role labels on the
INVITE, re-INVITE and UPDATE, and the control API's ``leg-roles``, through the real UAS,
call controller and API app (the media backend records what it is told). Bad values
are counted by origin and reason and ignored; the call is answered as without them."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import FastAPI
from sip_fakes import harness, invite, metrics_text
from sip_test_data import SIPREC_CONTENT_TYPE, siprec_body

from detectors.alert_schema import LegRole
from sip_bridge.control_api import control_router
from sip_bridge.leg_roles import (
    RoleStatement,
    decide,
    label_role,
    leg_role_collector,
    read_header,
    taken,
)
from sip_bridge.settings import Settings
from sip_bridge.sip.fields import NameAddr

EXT, INT, MIX, UNK = LegRole.EXTERNAL, LegRole.INTERNAL, LegRole.MIXED, LegRole.UNKNOWN
HEAD = "v=0\no=pbx 1 1 IN IP4 192.0.2.10\ns=-\nc=IN IP4 192.0.2.10\nt=0 0\n"


def _sdp(*lines: str) -> str:
    """An SDP with one m-line per ``lines`` entry: "audio[:label][/dir]" or "video"."""
    out, port = HEAD, 49170
    for spec in lines:
        kind, _, direction = spec.partition("/")
        media, _, label = kind.partition(":")
        if media == "video":
            out += f"m=video {port} RTP/AVP 96\na=rtpmap:96 H264/90000\n"
        else:
            port_now = 0 if media == "gone" else port
            out += f"m=audio {port_now} RTP/AVP 0\na=rtpmap:0 PCMU/8000\n"
            out += f"a=label:{label}\n" if label else ""
        out += f"a={direction or 'sendonly'}\n"
        port += 2
    return out


def _roles(h) -> list[tuple[int, str, str]]:  # type: ignore[no-untyped-def]
    (call,) = h.controller.calls.values()
    legs = sorted(call.legs.values(), key=lambda leg: leg.index)
    return [(leg.index, leg.role.value, leg.role_source) for leg in legs]


def _start(h, body: str, header: str = "") -> str:  # type: ignore[no-untyped-def]
    extra = f"X-CallShield-Leg-Roles: {header}\n" if header else ""
    trying, ok = h.send(invite(body=body, extra=extra))
    assert (trying.status, ok.status) == (100, 200)
    tag = NameAddr.parse(ok.headers.get("To") or "").tag or ""
    h.send(invite(method="ACK", to_tag=tag, cseq=1, branch="z9hG4bKack1", body=""), now=0.1)
    return tag


def _modify(h, tag: str, cseq: int, body: str, header: str = "", method: str = "INVITE") -> int:  # type: ignore[no-untyped-def]
    extra = f"X-CallShield-Leg-Roles: {header}\n" if header else ""
    branch = f"z9hG4bK{method}{cseq}"
    (ok,) = h.send(
        invite(method=method, to_tag=tag, cseq=cseq, branch=branch, body=body, extra=extra),
        now=float(cseq),
    )
    if method == "INVITE":
        h.send(invite(method="ACK", to_tag=tag, cseq=cseq, branch=branch + "a", body=""))
    return int(ok.status)


def test_header_words_labels_and_refusals() -> None:
    assert read_header((" External", "INTERNAL "), 2) == (EXT, INT)
    assert read_header(("mixed",), 1) == (MIX,)
    assert read_header(("unknown", "external"), 2) == (UNK, EXT)
    assert read_header(("external",), 2) == "count_mismatch"
    assert read_header(("external", "internal", "mixed"), 2) == "count_mismatch"
    assert read_header(("caller", "callee"), 2) == "unknown"  # not roles (outbound calls)
    assert read_header(("external", ""), 2) == "malformed"  # "external," is not a list of 2
    assert read_header(("external;q=1",), 1) == "malformed"
    assert read_header(("\x00external",), 1) == "malformed"
    assert read_header(("e" * 33,), 1) == "malformed"
    assert [label_role(v) for v in ("external", " Internal ", "MIXED", "unknown")] == [
        EXT,
        INT,
        MIX,
        UNK,
    ]
    for free_text in ("1", "96757", "caller", "agent", "ext", "external-1", "", None):
        assert label_role(free_text) is None, free_text


def test_decide_header_first_then_labels() -> None:
    labels = ((0, "internal"), (2, "external"))
    by_header = decide(RoleStatement(("external", "internal"), (0, 2), labels))
    assert by_header.roles == {0: (EXT, "sip_header"), 2: (INT, "sip_header")}
    assert by_header.said == (("sip_header", EXT), ("sip_header", INT))
    assert by_header.rejected == (("sdp_label", "overridden"),) * 2
    bad = decide(RoleStatement(("external",), (0, 2), labels))  # miscounted: labels decide
    assert bad.roles == {0: (INT, "sdp_label"), 2: (EXT, "sdp_label")}
    assert bad.rejected == (("sip_header", "count_mismatch"),)
    assert decide(RoleStatement(None, (0, 1), ((0, "1"), (1, "2")))).roles == {}
    assert decide(RoleStatement(("  ",), (0,))) == decide(RoleStatement(None, (0,)))


def test_two_forked_directions_by_header_skip_non_audio_lines() -> None:
    h = harness()
    _start(h, _sdp("audio", "video", "audio"), "external, internal")
    assert _roles(h) == [(0, "external", "sip_header"), (2, "internal", "sip_header")]
    (event, _), *_ = h.publisher.events
    assert sorted(event.legs.values()) == [EXT, INT]  # what the detector runtime is told
    assert h.controller.leg_roles.snapshot() == {
        ("said", "sip_header", "external"): 1,
        ("said", "sip_header", "internal"): 1,
    }
    text = metrics_text(leg_role_collector(h.controller.leg_roles.snapshot))
    assert 'callshield_leg_role_total{origin="sip_header",role="external"} 1.0' in text


def test_without_a_word_legs_stay_mixed() -> None:
    h = harness()
    _start(h, _sdp("audio", "audio:1", "audio:caller"))
    assert [r[1:] for r in _roles(h)] == [("mixed", "m_line_guess")] * 3
    assert h.controller.leg_roles.snapshot() == {}  # free-text labels are not counted


def test_one_sendonly_line_forking_only_the_caller() -> None:
    h = harness()
    _start(h, _sdp("audio/sendonly"), "external")
    assert _roles(h) == [(0, "external", "sip_header")]
    (call,) = h.controller.calls.values()
    (leg,) = call.legs.values()
    assert leg.paused is False  # the PBX sends: analysed


def test_role_labels_name_legs_the_header_does_not() -> None:
    h = harness()
    _start(h, _sdp("audio:External", "audio:internal"))
    assert _roles(h) == [(0, "external", "sdp_label"), (1, "internal", "sdp_label")]
    h2 = harness()
    _start(h2, _sdp("audio:internal", "audio:external"), "external,internal")
    assert [r[1:] for r in _roles(h2)] == [("external", "sip_header"), ("internal", "sip_header")]
    assert h2.controller.leg_roles.snapshot()[("rejected", "sdp_label", "overridden")] == 2
    h3 = harness(leg_role_labels=False)
    _start(h3, _sdp("audio:external"))
    assert _roles(h3) == [(0, "mixed", "m_line_guess")]


def test_bad_headers_are_counted_and_ignored_never_refusing_the_call() -> None:
    cases = {
        "external": "count_mismatch",
        "external,agent": "unknown",
        "external;internal": "malformed",
        "external,,internal": "malformed",
    }
    for header, reason in cases.items():
        h = harness()
        _start(h, _sdp("audio", "audio"), header)
        assert [r[1:] for r in _roles(h)] == [("mixed", "m_line_guess")] * 2, header
        assert h.controller.leg_roles.snapshot() == {("rejected", "sip_header", reason): 1}
        assert h.events() == [("started", "")]
    h = harness(leg_roles_header="")  # not read at all
    _start(h, _sdp("audio"), "external")
    assert _roles(h) == [(0, "mixed", "m_line_guess")] and not h.controller.leg_roles.snapshot()


def test_reinvite_keeps_restates_adds_and_forgets_roles() -> None:
    h = harness()
    tag = _start(h, _sdp("audio", "audio"), "external,internal")
    # a refresh without the header: every line keeps its role
    assert _modify(h, tag, 2, _sdp("audio", "audio")) == 200
    assert [r[1] for r in _roles(h)] == ["external", "internal"]
    # a third line added without a word: mixed, the others kept
    assert _modify(h, tag, 3, _sdp("audio", "audio", "audio")) == 200
    assert [r[1] for r in _roles(h)] == ["external", "internal", "mixed"]
    # an UPDATE restating all three (a transfer re-anchored the streams)
    assert (
        _modify(h, tag, 4, _sdp("audio", "audio", "audio"), "internal,external,mixed", "UPDATE")
        == 200
    )
    assert [r[1:] for r in _roles(h)] == [
        ("internal", "sip_header"),
        ("external", "sip_header"),
        ("mixed", "sip_header"),
    ]
    # a miscounted restatement changes nothing
    assert _modify(h, tag, 5, _sdp("audio", "audio", "audio"), "external") == 200
    assert [r[1] for r in _roles(h)] == ["internal", "external", "mixed"]
    # line 1 removed (port 0), then re-used without a word: it starts from the default
    assert _modify(h, tag, 6, _sdp("audio", "gone", "audio")) == 200
    assert [r[:2] for r in _roles(h)] == [(0, "internal"), (2, "mixed")]
    assert _modify(h, tag, 7, _sdp("audio", "audio", "audio")) == 200
    assert [r[1] for r in _roles(h)] == ["internal", "mixed", "mixed"]
    # a re-INVITE without SDP restates against the session's SDP
    assert _modify(h, tag, 8, "", "external,internal,internal") == 200
    assert [r[1] for r in _roles(h)] == ["external", "internal", "internal"]
    events = [e for e, _ in h.publisher.events]
    assert sorted(events[-1].legs.values()) == [EXT, INT, INT]
    stats = h.controller.leg_roles.snapshot()
    assert stats[("rejected", "sip_header", "count_mismatch")] == 1
    assert stats[("said", "sip_header", "external")] == 3


def test_late_offer_header_names_our_offered_line() -> None:
    h = harness()
    _trying, ok = h.send(invite(body="", extra="X-CallShield-Leg-Roles: external\n"))
    assert ok.status == 200
    tag = NameAddr.parse(ok.headers.get("To") or "").tag or ""
    answer = _sdp("audio")
    h.send(invite(method="ACK", to_tag=tag, cseq=1, branch="z9hG4bKack1", body=answer))
    assert _roles(h) == [(0, "external", "sip_header")]


def test_siprec_header_is_counted_and_metadata_decides() -> None:
    h = harness()
    extra = "Require: siprec\nX-CallShield-Leg-Roles: internal,external\n"
    _, ok = h.send(invite(body=siprec_body(), content_type=SIPREC_CONTENT_TYPE, extra=extra))
    assert ok.status == 200
    (call,) = h.controller.calls.values()
    roles = {leg.label: (leg.role.value, leg.role_source) for leg in call.legs.values()}
    assert roles == {"1": ("external", "siprec_metadata"), "2": ("internal", "siprec_metadata")}
    assert h.controller.leg_roles.snapshot() == {("rejected", "sip_header", "siprec"): 1}


def _api(h, scenario) -> None:  # type: ignore[no-untyped-def]
    app = FastAPI()
    settings = Settings.model_validate({"control_api_token": "roles-token"})
    app.include_router(control_router(h.controller, settings))

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bridge") as client:
            await scenario(client)

    asyncio.run(main())


AUTH = {"Authorization": "Bearer roles-token"}


def test_control_api_names_legs_of_a_fork_that_cannot_send_the_header() -> None:
    h = harness()
    tag = _start(h, _sdp("audio", "audio"))
    (call,) = h.controller.calls.values()
    results: list[tuple[int, object]] = []

    async def scenario(client: httpx.AsyncClient) -> None:
        by_id = "/v1/calls/by-external-id/sip-call-id/a84b4c76e66710@pc33/leg-roles"
        for body in (
            {"roles": {"0": "external", "1": "agent"}},  # unknown word: nothing changes
            {"roles": {"7": "external"}},  # no such line
            {"roles": {"0": "ext ernal"}},
        ):
            r = await client.put(f"/v1/calls/{call.call_id}/leg-roles", json=body, headers=AUTH)
            results.append((r.status_code, r.json()["detail"]))
        r = await client.put(
            by_id, json={"roles": {"0": "External", "1": "internal"}}, headers=AUTH
        )
        results.append((r.status_code, r.json()))
        r = await client.put(
            "/v1/calls/call_nope/leg-roles", json={"roles": {"0": "mixed"}}, headers=AUTH
        )
        results.append((r.status_code, None))

    _api(h, scenario)
    assert [code for code, _ in results] == [422, 404, 422, 200, 404]
    assert results[0][1] == "leg role refused (unknown): say external, internal, mixed or unknown"
    (view,) = results[3][1]  # type: ignore[misc]
    assert [(g["index"], g["role"], g["role_source"]) for g in view["legs"]] == [
        (0, "external", "api"),
        (1, "internal", "api"),
    ]
    assert h.events()[-1] == ("updated", "leg_roles")
    # the API's word stays over a later header naming other roles (counted overridden) ...
    assert _modify(h, tag, 2, _sdp("audio", "audio"), "mixed,external") == 200
    assert [r[1:] for r in _roles(h)] == [("external", "api"), ("internal", "api")]
    # ... until its line is removed
    assert _modify(h, tag, 3, _sdp("gone", "audio")) == 200
    assert _modify(h, tag, 4, _sdp("audio", "audio")) == 200
    assert [r[1:] for r in _roles(h)] == [("mixed", "m_line_guess"), ("internal", "api")]
    stats = h.controller.leg_roles.snapshot()
    assert stats[("rejected", "api", "unknown")] == 1
    assert stats[("rejected", "api", "no_such_leg")] == 1
    assert stats[("rejected", "api", "malformed")] == 1
    assert stats[("said", "api", "external")] == 1
    assert stats[("rejected", "sip_header", "overridden")] == 2


def test_control_api_leaves_siprec_and_its_own_calls_alone() -> None:
    h = harness()
    extra = "Require: siprec\n"
    _, ok = h.send(invite(body=siprec_body(), content_type=SIPREC_CONTENT_TYPE, extra=extra))
    assert ok.status == 200
    (siprec,) = h.controller.calls.values()
    codes: list[int] = []

    async def scenario(client: httpx.AsyncClient) -> None:
        r = await client.put(
            f"/v1/calls/{siprec.call_id}/leg-roles", json={"roles": {"0": "internal"}}, headers=AUTH
        )
        codes.append(r.status_code)
        legs = [{"label": "caller", "role": "external"}]
        created = (await client.post("/v1/calls", json={"legs": legs}, headers=AUTH)).json()
        r = await client.put(
            f"/v1/calls/{created['call_id']}/leg-roles",
            json={"roles": {"0": "mixed"}},
            headers=AUTH,
        )
        codes.append(r.status_code)

    _api(h, scenario)
    assert codes == [409, 409]
    roles = {leg.label: leg.role.value for leg in siprec.legs.values()}
    assert roles == {"1": "external", "2": "internal"}
    assert h.controller.leg_roles.snapshot() == {("rejected", "api", "not_plain_sip"): 2}


def test_session_refresh_restating_the_same_roles_counts_once() -> None:
    """RFC 4028 session refreshes re-send the same SDP and headers every few minutes: a
    restatement of the roles a line already has (or of a statement already refused)
    counts nothing, so the counters do not grow with call duration; a real change
    counts, for the lines it changes."""
    decision = decide(RoleStatement(("external", "internal"), (0, 1)))
    assert taken(decision, {}).said == decision.said
    assert taken(decision, {0: (EXT, "sip_header")}).said == (("sip_header", INT),)
    assert taken(decision, {0: (EXT, "sdp_label")}).said == decision.said  # a new origin
    assert taken(decision, {1: (MIX, "api")}).said == (("sip_header", EXT),)  # not taken
    assert taken(decision, {0: (EXT, "sip_header")}).roles == decision.roles
    h = harness()
    tag = _start(h, _sdp("audio", "audio"), "external,internal")
    for cseq in range(2, 6):  # refreshes by re-INVITE (same SDP and header) ...
        assert _modify(h, tag, cseq, _sdp("audio", "audio"), "external,internal") == 200
    assert _modify(h, tag, 6, "", "external,internal", "UPDATE") == 200  # ... and UPDATE
    assert h.controller.leg_roles.snapshot() == {
        ("said", "sip_header", "external"): 1,
        ("said", "sip_header", "internal"): 1,
    }
    # a third line named mixed: only that line is new
    assert _modify(h, tag, 7, _sdp("audio", "audio", "audio"), "external,internal,mixed") == 200
    # a real change (the streams re-anchored), then refreshed
    for cseq in (8, 9):
        assert (
            _modify(h, tag, cseq, _sdp("audio", "audio", "audio"), "internal,external,mixed") == 200
        )
    assert [r[1] for r in _roles(h)] == ["internal", "external", "mixed"]
    # a refused header sent again on every refresh is counted once
    for cseq in (10, 11):
        assert _modify(h, tag, cseq, _sdp("audio", "audio", "audio"), "external") == 200
    assert h.controller.leg_roles.snapshot() == {
        ("said", "sip_header", "external"): 2,
        ("said", "sip_header", "internal"): 2,
        ("said", "sip_header", "mixed"): 1,
        ("rejected", "sip_header", "count_mismatch"): 1,
    }
    text = metrics_text(leg_role_collector(h.controller.leg_roles.snapshot))
    assert 'callshield_leg_role_total{origin="sip_header",role="external"} 2.0' in text
    # role labels restated by a refresh count once too
    h2 = harness()
    tag2 = _start(h2, _sdp("audio:external", "audio:Internal"))
    for cseq in (2, 3):
        assert _modify(h2, tag2, cseq, _sdp("audio:external", "audio:Internal")) == 200
    assert h2.controller.leg_roles.snapshot() == {
        ("said", "sdp_label", "external"): 1,
        ("said", "sdp_label", "internal"): 1,
    }
