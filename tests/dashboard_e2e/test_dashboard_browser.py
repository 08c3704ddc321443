"""The dashboard in a real browser: headless Debian Chromium (Playwright) against a real
``callshield dashboard`` process and a real redis-server, with calls and alerts written
by the real bus publisher.

- an analyst logs in through the form (its CSRF token), watches a call and then an alert
  arrive over the live WebSocket without a reload, acknowledges, assigns and labels the
  alert, opens the call, reveals its numbers (audited, the numbers not in the audit
  entry), logs out;
- a viewer gets the live feed but no triage button, no reveal, no management page, and
  the server refuses the triage call itself;
- an admin adds and removes a watchlist entry (voiceprint file from
  ``callshield watchlist embed``), adds a webhook endpoint (secret shown once), sees a
  dead letter the real dispatcher made, replays it to a receiver verifying the secret,
  disables and enables the endpoint, reads the audit page.

Every page: no console error, no Content-Security-Policy violation; an injected inline
script is refused. Screenshots of the main pages go to ``artifacts/dashboard_e2e/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import struct
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dash_process import ANI, PASSWORD, RunningDashboard, running_dashboard
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from detectors.alert_schema import event_id
from detectors.bus.biometrics import Enrolment, encode_embedding
from detectors.bus.liveness import NodeLiveness
from detectors.bus.node_status import ModelStatus, NodeStatus
from detectors.bus.webhooks.schedule import VirtualClock
from tests.bus.receiver import Receiver
from tests.dashboard.webhook_driver import deliver_all

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "dashboard_e2e"
TIMEOUT_MS = 10_000
# every page records its own problems: console errors, uncaught errors, CSP violations
WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
});
"""


@pytest.fixture(scope="module")
def dash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDashboard]:
    with running_dashboard(tmp_path_factory.mktemp("dash-e2e")) as running:
        yield running
    text = running.log_text()
    assert "Application startup complete" in text  # the log was written: the scan means something
    assert ANI not in text and ANI[1:] not in text  # no phone number in any log line


class Session:
    """One logged-in browser context and what went wrong on its pages."""

    def __init__(self, context: BrowserContext, page: Page) -> None:
        self.context, self.page = context, page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    async def csp_violations(self) -> list[str]:
        found: list[str] = await self.page.evaluate("window.__csp || []")
        return found

    async def goto(self, url: str) -> None:
        resp = await self.page.goto(url)
        assert resp is not None and resp.status == 200, (url, resp and resp.status)
        assert await self.csp_violations() == []

    async def live(self) -> None:
        await self.page.wait_for_selector('#live[data-state="on"]', timeout=TIMEOUT_MS)

    async def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        await self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

    def clean(self) -> None:
        assert self.errors == [], self.errors


async def _login(browser: Browser, base: str, user: str) -> Session:
    context = await browser.new_context(base_url=base)
    context.set_default_timeout(TIMEOUT_MS)
    await context.add_init_script(WATCH)
    session = Session(context, await context.new_page())
    page = session.page
    await session.goto("/login")
    await page.fill('input[name="username"]', user)
    await page.fill('input[name="password"]', PASSWORD)
    await page.click('form.login button[type="submit"]')
    await page.wait_for_url(base + "/")
    assert await page.text_content(".who") == f"{user} · {user}"
    return session


def _run(test: Any, dash: RunningDashboard) -> None:
    async def main() -> None:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM,
                headless=True,
                args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"],
            )
            try:
                await test(browser, dash)
            finally:
                await browser.close()

    asyncio.run(asyncio.wait_for(main(), 50))


def _audit(dash: RunningDashboard) -> list[dict[str, str]]:
    entries = dash.redis.xrange(f"{dash.keys.prefix}dash:audit")
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]


async def _analyst(browser: Browser, dash: RunningDashboard) -> None:
    s = await _login(browser, dash.base, "analyst")
    page = s.page
    await s.live()
    # a call starts: the live calls page shows it, number masked, without a reload
    await page.evaluate("window.__same_page = true")
    dash.start_call("call-e2e-1")
    row = page.locator('#calls tr[data-call-id="call-e2e-1"]')
    await row.wait_for()
    caller = await row.locator("td.mono").text_content() or ""
    assert "•" in caller and caller.endswith(ANI[-3:]) and ANI not in caller
    await s.shot("calls")

    await s.goto("/alerts")
    await s.live()
    await page.evaluate("window.__same_page = true")
    alert = dash.raise_alert("call-e2e-1")
    row = page.locator(f'#alerts tr[data-alert-id="{alert.alert_id}"]')
    await row.wait_for()
    assert await page.evaluate("window.__same_page") is True  # arrived live, no reload
    assert await row.locator('[data-field="band"]').text_content() == "high"
    assert await row.locator('[data-field="status"]').text_content() == "new"

    # a row's triage controls come when it is used, by keyboard too: the call link's
    # focus gives the row its controls and Tab goes on to Ack
    assert await row.locator('button[data-act="ack"]').count() == 0
    await row.locator('[data-field="call"] a').focus()
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.dataset.act") == "ack"
    await row.locator('button[data-act="ack"]').click()
    await row.locator('[data-field="status"]:text-is("acknowledged")').wait_for()
    await row.locator('input[data-input="assignee"]').fill("admin")
    await row.locator('button[data-act="assign"]').click()
    await row.locator('[data-field="assignee"]:text-is("admin")').wait_for()
    await row.locator('button[data-act="label"][data-label="true_positive"]').click()
    await row.locator('[data-field="label"]:text-is("true positive")').wait_for()
    await row.locator('input[data-input="comment"]').fill("cloned voice, called back")
    await row.locator('button[data-act="comment"]').click()
    await row.locator('input[data-input="comment"]:text-is("")').wait_for()
    await s.shot("alerts")
    triage = dash.redis.hgetall(f"{dash.keys.prefix}dash:triage:{alert.alert_id}")
    assert triage[b"status"] == b"acknowledged" and triage[b"assignee"] == b"admin"
    assert triage[b"label"] == b"true_positive" and triage[b"ack_by"] == b"analyst"
    label = json.loads(dash.redis.hget(f"{dash.keys.prefix}dash:labels", alert.alert_id) or "{}")
    assert label["score"] == alert.score and label["policy_version"] == "e2e-1"

    # open the call: the alert with its triage, numbers masked until revealed
    await row.locator('[data-field="call"] a').click()
    await page.wait_for_url(dash.base + "/calls/call-e2e-1")
    section = page.locator(f'section.alert[data-alert-id="{alert.alert_id}"]')
    heading = await section.locator("h3").text_content() or ""
    assert "acknowledged" in heading and "true positive" in heading
    assert "cloned voice, called back" in (await section.text_content() or "")
    assert ANI not in (await page.content())
    await s.shot("call")
    await page.fill('form.reveal input[name="reason"]', "customer callback requested")
    await page.click('form.reveal button[type="submit"]')
    await page.locator(f'#ani:text-is("{ANI}")').wait_for()
    revealed = [e for e in _audit(dash) if e["action"] == "call.reveal_numbers"]
    assert [(e["actor"], e["target"]) for e in revealed] == [("analyst", "call-e2e-1")]
    assert ANI not in json.dumps(_audit(dash)) and ANI[1:] not in json.dumps(_audit(dash))
    assert {"alert.ack", "alert.assign", "alert.label", "alert.comment"} <= {
        e["action"] for e in _audit(dash)
    }

    await page.click('header form button[type="submit"]')  # log out
    await page.wait_for_url(dash.base + "/login")
    await page.goto("/")
    assert page.url == dash.base + "/login"  # the session is gone
    assert await s.csp_violations() == []
    s.clean()
    await s.context.close()


def test_analyst_watches_live_and_triages(dash: RunningDashboard) -> None:
    _run(_analyst, dash)


async def _viewer(browser: Browser, dash: RunningDashboard) -> None:
    dash.start_call("call-e2e-2")
    first = dash.raise_alert("call-e2e-2")
    s = await _login(browser, dash.base, "viewer")
    page = s.page
    nav = await page.text_content("header nav") or ""
    assert "Alerts" in nav and not {"Watchlist", "Webhooks", "Audit"} & set(nav.split())
    await s.goto("/alerts")
    await s.live()
    await page.locator(f'tr[data-alert-id="{first.alert_id}"]').wait_for()
    later = dash.raise_alert("call-e2e-2", revision=2)  # an escalation, live
    await page.locator(f'tr[data-alert-id="{later.alert_id}"] td:text-is("0.93")').wait_for()
    second = dash.raise_alert("call-e2e-2b")
    await page.locator(f'tr[data-alert-id="{second.alert_id}"]').wait_for()
    assert await page.locator("#alerts button, #alerts input").count() == 0
    await s.goto("/calls/call-e2e-2")
    assert await page.locator("form.reveal").count() == 0
    for path in ("/watchlist", "/webhooks", "/audit"):
        assert (await s.context.request.get(dash.base + path)).status == 403
    s.clean()
    # hidden buttons are not the control: the server refuses the viewer's triage
    status = await page.evaluate(
        """async (id) => (await fetch("/api/v1/alerts/" + id + "/ack", {method: "POST",
            headers: {"X-CSRF-Token": document.querySelector('meta[name="csrf-token"]').content}
        })).status""",
        first.alert_id,
    )
    assert status == 403
    assert s.errors == [
        "Failed to load resource: the server responded with a status of 403 (Forbidden)"
    ]
    await s.context.close()


def test_viewer_sees_no_triage(dash: RunningDashboard) -> None:
    _run(_viewer, dash)


def _voiceprint_file(path: Path) -> Path:
    dim = 16
    vector = struct.pack(f"<{dim}f", *([1 / math.sqrt(dim)] * dim))
    body = {
        "model": "speaker-resemblyzer-1.0.0+w300",
        "dim": dim,
        "embedding": encode_embedding(vector),
        "net_speech_s": 9.5,
        "source": "wav:case114.wav",
    }
    path.write_text(json.dumps(body))  # what `callshield watchlist embed` prints
    return path


async def _admin(browser: Browser, dash: RunningDashboard, tmp: Path, receiver: Receiver) -> None:
    s = await _login(browser, dash.base, "admin")
    page = s.page
    # --- watchlist ---------------------------------------------------------------------
    await s.goto("/watchlist")
    form = page.locator("#watchlist-add")
    await form.locator('input[name="label"]').fill("case 114 caller")
    await form.locator('input[name="legal_basis"]').fill("GDPR art. 9(2)(f) legal claims")
    await form.locator('input[name="case_ref"]').fill("FR-2026-114")
    bad = tmp / "not-a-voiceprint.json"
    bad.write_text("RIFF....WAVE")
    await form.locator('input[name="voiceprint"]').set_input_files(str(bad))
    await form.locator('button[type="submit"]').click()
    await page.locator("#watchlist-status:has-text('callshield watchlist embed')").wait_for()
    await form.locator('input[name="voiceprint"]').set_input_files(
        str(_voiceprint_file(tmp / "voiceprint.json"))
    )
    async with page.expect_navigation():
        await form.locator('button[type="submit"]').click()
    row = page.locator("#watchlist tr[data-entry-id]")
    assert await row.count() == 1
    assert "FR-2026-114" in (await row.text_content() or "")
    assert "embedding" not in await page.content()
    assert dash.redis.hlen(dash.keys.watchlist("default")) == 1
    # two-person rule: pending, and its author has no approve button
    assert await row.get_attribute("data-status") == "pending"
    assert await row.locator("button[data-approve]").count() == 0
    other = await _login(browser, dash.base, "analyst")
    await other.goto("/watchlist")
    async with other.page.expect_navigation():
        await other.page.locator("#watchlist tr[data-entry-id] button[data-approve]").click()
    approved = other.page.locator("#watchlist tr[data-entry-id]")
    assert await approved.get_attribute("data-status") == "active"
    assert "approved by analyst" in (await approved.text_content() or "")
    other.clean()
    await other.context.close()
    await s.goto("/watchlist")
    await s.shot("watchlist")
    await row.locator("button[data-remove]").click()
    await page.locator("#watchlist-count:text-is('0')").wait_for()
    assert dash.redis.hlen(dash.keys.watchlist("default")) == 0

    # --- customer enrolments: masked, expired now, removed --------------------------------
    vp = json.loads(_voiceprint_file(tmp / "customer.json").read_text())
    now = datetime.now(UTC)
    customer = Enrolment(
        subject="acct-20260077",
        tenant="default",
        consent_ref="IVR-consent-5521",
        expires_at=now + timedelta(days=365),
        added_by="analyst",
        created_at=now,
        **vp,
    )
    dash.redis.set(dash.keys.enrolment("default", customer.subject), customer.model_dump_json())
    await s.goto("/enrolments")
    enrolled = page.locator("#enrolments tr[data-ref]")
    assert "•••••••••0077" in (await enrolled.text_content() or "")
    assert "acct-20260077" not in await page.content()
    async with page.expect_navigation():
        await enrolled.locator("button[data-en-expire]").click()
    assert "expired" in (await enrolled.locator('[data-field="expires"]').text_content() or "")
    await s.shot("enrolments")
    await enrolled.locator("button[data-en-remove]").click()
    await page.locator("#enrolment-count:text-is('0')").wait_for()
    assert not dash.redis.exists(dash.keys.enrolment("default", customer.subject))

    # --- system health: a bridge node's heartbeat summary ----------------------------------
    summary = NodeStatus(
        node_id="edge-1",
        boot="boot-1",
        state="ready",
        at=now,
        live_calls=3,
        analysed_calls=3,
        capacity=48,
        models=[
            ModelStatus(
                name="aasist",
                dimension="synthetic_voice",
                version="1.0.0",
                provider="cpu",
                windows=5000,
                recent_windows=240,
                p50_ms=4.1,
                p99_ms=18.5,
            )
        ],
        jitter={"packets_received": 90000, "packets_late": 12, "concealment_events": 4},
        latency_window_s=60.0,
    )
    node_bus = dash.bus.model_copy(update={"node_id": "edge-1"})
    NodeLiveness(dash.redis, node_bus, "boot-1", status=lambda: summary).beat()
    await s.goto("/system")
    assert "edge-1" in (await page.text_content("main") or "")
    assert "3 / 48" in (await page.text_content("main") or "")
    await s.shot("system")

    # --- webhooks: add (secret once), a dead letter, replay, disable / enable -------------
    await s.goto("/webhooks")
    add = page.locator("#webhook-add")
    await add.locator('input[name="url"]').fill(receiver.url)
    await add.locator('input[value="call.alert.raised"]').check()
    await add.locator('input[name="allow_private"]').check()
    await add.locator('button[type="submit"]').click()
    box = page.locator("#new-secret")
    await box.wait_for()
    secret = await box.locator('[data-field="secret"]').text_content() or ""
    assert secret.startswith("whsec_")
    receiver.secrets, receiver.status = [secret], 500
    async with page.expect_navigation():
        await box.locator('button[data-act="done"]').click()
    (endpoint_id,) = [k.decode() for k in dash.redis.hkeys(dash.keys.wh_endpoints)]
    assert secret not in await page.content()  # shown once, never listed

    # the dispatcher has been running all along: it starts from the stream's end
    dash.redis.xgroup_create(dash.keys.alerts, "webhooks", id="$", mkstream=True)
    alert = dash.raise_alert("call-e2e-3")
    clock = VirtualClock()
    stats = await asyncio.to_thread(deliver_all, dash.bus, clock)
    assert stats["dead"] == 1
    await s.goto("/webhooks")
    ep_row = page.locator(f'#endpoints tr[data-endpoint-id="{endpoint_id}"]')
    assert await ep_row.locator('[data-field="dead"]').text_content() == "1"
    assert "500" in (await ep_row.locator('[data-field="last"]').text_content() or "")
    dead_row = page.locator(f'#dead tr[data-event-id="{event_id(alert)}"]')
    assert ANI not in (await dead_row.text_content() or "")
    await s.shot("webhooks")
    await dead_row.locator('button[data-wh-act="replay"]').click()
    await dead_row.locator('[data-field="replay"]:text-is("queued")').wait_for()
    receiver.status = None
    assert (await asyncio.to_thread(deliver_all, dash.bus, clock))["delivered"] == 1
    assert list(receiver.first) == [event_id(alert)] and receiver.bad_signatures == 0
    await s.goto("/webhooks")
    assert await page.locator("#dead tr[data-event-id]").count() == 0
    assert "204" in (await ep_row.locator('[data-field="last"]').text_content() or "")

    async with page.expect_navigation():
        await ep_row.locator('button[data-wh-act="disable"]').click()
    assert "disabled" in (await ep_row.locator('[data-field="state"]').text_content() or "")
    async with page.expect_navigation():
        await ep_row.locator('button[data-wh-act="enable"]').click()
    assert (await ep_row.locator('[data-field="state"]').text_content() or "").strip() == "enabled"

    await s.goto("/audit")
    audit = await page.text_content("main") or ""
    for action in (
        "watchlist.add",
        "watchlist.approve",
        "watchlist.remove",
        "webhook.add",
        "webhook.replay",
        "enrolment.expire",
        "enrolment.remove",
    ):
        assert action in audit
    assert secret not in audit
    await s.shot("audit")

    # the CSP holds in the browser: an injected inline script does not run
    assert await s.csp_violations() == []
    s.clean()
    with contextlib.suppress(Exception):  # Playwright may report the refused script
        await page.add_script_tag(content="window.__inline_ran = true")
    assert await page.evaluate("window.__inline_ran === undefined")
    assert any(v.startswith("script-src") for v in await s.csp_violations())
    await s.context.close()


def test_admin_manages_watchlist_and_webhooks(dash: RunningDashboard, tmp_path: Path) -> None:
    receiver = Receiver()
    try:
        _run(lambda browser, d: _admin(browser, d, tmp_path, receiver), dash)
    finally:
        receiver.close()
