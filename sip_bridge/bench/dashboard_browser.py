"""Real browser pages on the dashboard's alert queue for ``callshield bench dashboard``:
when each alert is *shown*, not only received.

Headless Chromium (Playwright, the system ``chromium``, no browser download) logs in as
an analyst through the login form and opens ``/alerts``, whose live WebSocket feed
inserts a row per new alert (``dashboard/static/app.js``). An init script notes when the
page's main thread gets each alert's WebSocket message (``received``: a listener that
runs before the page's own), and watches the queue with a ``MutationObserver``: ``dom``
is when the row is in the document with its
cells filled (the observer runs at the end of the task that inserted it), ``frame`` the
first ``requestAnimationFrame`` after that, the start of the frame that paints it. Both
are read as ``performance.timeOrigin + performance.now()``, the same wall clock as the
publisher's ``time.time()`` on one machine; ``clock_check`` measures how well the two
agree (each page's offset and the bound given by the round trip that read it).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
WATCH = """
window.__shown = [];
window.__recv = new Map();
const NativeWebSocket = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const ws = new NativeWebSocket(url, protocols);
  ws.addEventListener("message", (ev) => {  // runs before the page's own onmessage
    const at = performance.timeOrigin + performance.now();
    const m = JSON.parse(ev.data);
    const id = m.type === "alert" ? m.alert.alert_id : null;
    if (id && !window.__recv.has(id)) window.__recv.set(id, at);
  });
  return ws;
};
window.WebSocket.prototype = NativeWebSocket.prototype;
new MutationObserver((records) => {
  const dom = performance.timeOrigin + performance.now();
  for (const r of records) for (const n of r.addedNodes) {
    if (n.nodeType !== 1 || !n.dataset || !n.dataset.alertId) continue;
    const id = n.dataset.alertId;
    const recv = window.__recv.get(id);
    requestAnimationFrame(() => {
      window.__shown.push([id, recv, dom, performance.timeOrigin + performance.now()]);
    });
  }
}).observe(document, {subtree: true, childList: true});
"""
CLOCK = "[Date.now(), performance.timeOrigin + performance.now(), document.visibilityState]"


@dataclass
class Shown:
    """One phase's figures over every page: latencies in ms from publish."""

    recv_ms: list[float] = field(default_factory=list)
    dom_ms: list[float] = field(default_factory=list)
    frame_ms: list[float] = field(default_factory=list)
    received: list[int] = field(default_factory=list)  # alerts of this phase, per page


def chromium_cpu_s() -> float | None:
    """User + system CPU seconds so far of this process's Chromium descendants (the
    browser, its renderers, GPU and utility processes); None off Linux."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            comm, rest = (entry / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        if "chrom" in comm.split("(", 1)[1].lower():
            cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    me, total = os.getpid(), 0.0
    for pid, seconds in cpu.items():
        up = parent.get(pid)
        while up is not None and up > 1 and up != me:
            up = parent.get(up)
        total += seconds if up == me else 0.0
    return total


class BrowserFeed:
    """``n`` logged-in pages on ``/alerts`` in one headless Chromium."""

    def __init__(self) -> None:
        self._pw: Any = None
        self._browser: Any = None
        self.pages: list[Any] = []

    async def start(self, base: str, user: str, password: str, n: int) -> None:
        try:
            from playwright.async_api import async_playwright
        except ImportError:
            raise RuntimeError(
                "--browsers needs Playwright (the dev extra) and Debian chromium; "
                "--browsers 0 measures sockets only"
            ) from None
        self._pw = await async_playwright().start()
        self._browser = await self._pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=ARGS
        )
        for _ in range(n):
            context = await self._browser.new_context(base_url=base)
            context.set_default_timeout(30_000)
            await context.add_init_script(WATCH)
            page = await context.new_page()
            await page.goto("/login")
            await page.fill('input[name="username"]', user)
            await page.fill('input[name="password"]', password)
            await page.click('form.login button[type="submit"]')
            await page.wait_for_url(base + "/")
            await page.goto("/alerts")
            await page.wait_for_selector('#live[data-state="on"]')
            self.pages.append(page)

    async def clock_check(self, tries: int = 5) -> list[dict[str, Any]]:
        """Per page: the browser clock minus ``time.time()`` in ms (``Date.now()`` and
        ``timeOrigin + now()``), within ``± bound_ms`` (half the round trip that read
        it; the tightest of ``tries`` reads)."""
        out = []
        for page in self.pages:
            best: dict[str, Any] | None = None
            for _ in range(tries):
                t0 = time.time()
                date_now, perf_now, visibility = await page.evaluate(CLOCK)
                t1 = time.time()
                mid = (t0 + t1) / 2 * 1000
                read = {
                    "date_now_offset_ms": round(date_now - mid, 3),
                    "perf_offset_ms": round(perf_now - mid, 3),
                    "bound_ms": round((t1 - t0) / 2 * 1000, 3),
                    "visibility": visibility,
                }
                if best is None or read["bound_ms"] < best["bound_ms"]:
                    best = read
            assert best is not None
            out.append(best)
        return out

    async def collect(self, sent_wall: dict[str, float]) -> Shown:
        """What the pages showed of the alerts in ``sent_wall`` (publish times, s)."""
        shown = Shown()
        for page in self.pages:
            seen: set[str] = set()
            for alert_id, recv, dom, frame in await page.evaluate("window.__shown.splice(0)"):
                t0 = sent_wall.get(alert_id)
                if t0 is None or alert_id in seen:
                    continue
                seen.add(alert_id)
                if recv is not None:
                    shown.recv_ms.append(recv - t0 * 1000)
                shown.dom_ms.append(dom - t0 * 1000)
                shown.frame_ms.append(frame - t0 * 1000)
            shown.received.append(len(seen))
        return shown

    async def shown_count(self, sent_wall: dict[str, float]) -> int:
        """The fewest of the phase's alerts any page has shown so far."""
        counts = []
        for page in self.pages:
            ids = await page.evaluate("window.__shown.map((s) => s[0])")
            counts.append(len(set(ids) & sent_wall.keys()))
        return min(counts, default=0)

    async def close(self) -> None:
        if self._browser is not None:
            await self._browser.close()
        if self._pw is not None:
            await self._pw.stop()
