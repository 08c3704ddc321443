"""Single sign-on in a real browser: headless Debian Chromium logs in to a real
``callshield dashboard`` process through a real OpenID Connect provider
(``tests/dashboard/oidc_provider.py``: its own login form, ID tokens signed with a test
RSA key). The provider is on ``localhost`` and the dashboard on ``127.0.0.1``, so the
redirect back is a cross-site navigation, as in production: the browser-binding cookie
(SameSite=Lax) must survive it and the session cookie (SameSite=Strict) must still be
sent on the first dashboard page. Then a token with another nonce is refused in the
browser too."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from dash_process import RunningDashboard, running_dashboard
from playwright.async_api import async_playwright

from detectors.bus.redis_server import free_port
from tests.dashboard.oidc_provider import Provider

CHROMIUM = "/usr/bin/chromium"
TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningDashboard, Provider]]:
    port = free_port()
    redirect = f"http://127.0.0.1:{port}/api/v1/auth/oidc/callback"
    idp = Provider(
        "dash-e2e",
        "e2e-secret",
        redirect,
        time.time,
        {"alice": {"groups": ["fraud-analysts"]}},
        host="localhost",
    )
    idp.start()
    env = {
        "CALLSHIELD_DASHBOARD_OIDC_ISSUER": idp.issuer,
        "CALLSHIELD_DASHBOARD_OIDC_CLIENT_ID": "dash-e2e",
        "CALLSHIELD_DASHBOARD_OIDC_CLIENT_SECRET": "env:E2E_OIDC_SECRET",
        "E2E_OIDC_SECRET": "e2e-secret",
        "CALLSHIELD_DASHBOARD_OIDC_REDIRECT_URL": redirect,
        "CALLSHIELD_DASHBOARD_OIDC_ROLE_MAP": '{"fraud-analysts": "analyst"}',
    }
    try:
        with running_dashboard(tmp_path_factory.mktemp("oidc-e2e"), env, port) as dash:
            yield dash, idp
    finally:
        idp.stop()


def test_sso_login_in_chromium(setup: tuple[RunningDashboard, Provider]) -> None:
    dash, idp = setup

    async def main() -> None:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM,
                headless=True,
                args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"],
            )
            try:
                errors: list[str] = []
                for fault in (None, "wrong_nonce"):
                    idp.fault = fault
                    context = await browser.new_context(base_url=dash.base)
                    context.set_default_timeout(TIMEOUT_MS)
                    page = await context.new_page()
                    page.on("pageerror", lambda e: errors.append(str(e)))
                    await page.goto("/login")
                    await page.click("#sso-login")
                    await page.wait_for_url(idp.issuer + "/authorize?**")
                    await page.fill("#idp-user", "alice")
                    await page.click("#idp-go")
                    if fault is None:
                        await page.wait_for_url(dash.base + "/")
                        assert await page.text_content(".who") == "oidc:alice · analyst"
                        await page.goto("/alerts")  # the session holds on other pages
                        assert page.url == dash.base + "/alerts"
                    else:
                        await page.wait_for_url(dash.base + "/login?error=**")
                        assert "nonce does not match" in (await page.content())
                        assert (await context.request.get("/api/v1/auth/me")).status == 401
                    await context.close()
                assert errors == []
            finally:
                await browser.close()

    asyncio.run(asyncio.wait_for(main(), 50))
    audit = [
        f[b"action"].decode() for _, f in dash.redis.xrevrange(dash.keys.prefix + "dash:audit")
    ]
    assert audit[:2] == ["auth.login_refused", "auth.login"]
