"""RFC 4028 session timers in the UAS, in virtual time: the peer (uac) refreshes with
re-INVITE or UPDATE; without a refresh we send BYE at expiry minus min(32 s, SE/3) and
the call ends with reason ``session_timer_expired`` (issue 12)."""

from __future__ import annotations

from sip_fakes import Harness, harness, in_dialog, invite

from sip_bridge.sip.fields import NameAddr
from sip_bridge.sip.message import SipRequest, parse_message

SE = "Session-Expires: 120;refresher=uac\nSupported: timer\n"


def _establish(h: Harness, extra: str = SE) -> str:
    trying, ok = h.send(invite(extra=extra))
    assert (trying.status, ok.status) == (100, 200)
    assert (ok.headers.get("Session-Expires") or "").startswith("120;refresher=uac")
    tag = NameAddr.parse(ok.headers.get("To") or "").tag
    assert tag
    h.send(in_dialog("ACK", tag, cseq=1, branch="z9hG4bKack1"), now=0.1)
    return tag


def _byes(h: Harness, until: float, start: float = 0.5) -> list[SipRequest]:
    out = []
    t = start
    while t <= until:
        out += h.uas.poll(t)
        t += 0.5
    msgs = [parse_message(o.data) for o in out if o.data.startswith(b"BYE")]
    return [m for m in msgs if isinstance(m, SipRequest)]


def test_no_refresh_ends_the_call_before_the_interval_runs_out() -> None:
    h = harness()
    _establish(h)
    assert not _byes(h, until=79.5)  # 120 - min(32, 40) = 88 s
    assert h.events() == [("started", "")]
    byes = _byes(h, until=88.5, start=80.0)
    assert byes, "no BYE at session expiry"
    assert ("ended", "session_timer_expired") in h.events()
    assert h.controller.calls == {}
    assert h.uas.stats["session_timer_expired"] == 1


def test_refreshes_keep_the_call_and_a_refresh_without_the_header_turns_it_off() -> None:
    h = harness()
    tag = _establish(h)
    extra_refresh = "Session-Expires: 120;refresher=uac\n"
    t = 0.0
    for cseq in range(2, 6):  # a refresh UPDATE every 60 s, for four minutes
        t += 60.0
        assert not _byes(h, until=t - 0.5, start=t - 60.0 + 0.5)
        req = invite(
            method="UPDATE",
            to_tag=tag,
            cseq=cseq,
            branch=f"z9hG4bKupd{cseq}",
            body="",
            extra=extra_refresh,
        )
        (ok,) = h.send(req, now=t)
        assert ok.status == 200
    assert h.events()[-1][0] != "ended"
    (ok,) = h.send(in_dialog("UPDATE", tag, cseq=9, branch="z9hG4bKoff", body=""), now=t + 1)
    assert ok.status == 200 and ok.headers.get("Session-Expires") is None
    assert not _byes(h, until=t + 400, start=t + 1.5)  # timer off: no expiry
    assert [e for e, _ in h.events()].count("ended") == 0


def test_calls_without_session_timers_never_expire() -> None:
    h = harness()
    _trying, ok = h.send(invite())
    tag = NameAddr.parse(ok.headers.get("To") or "").tag or ""
    h.send(in_dialog("ACK", tag, cseq=1, branch="z9hG4bKack1"), now=0.1)
    assert not _byes(h, until=1000.0)


def test_too_short_an_interval_is_refused_with_422() -> None:
    h = harness()
    (resp,) = h.send(invite(extra="Session-Expires: 30\nSupported: timer\n"))
    assert resp.status == 422 and resp.headers.get("Min-SE") == "90"
