"""A bridge with its full wiring (detector runtime, bus, HTTP port), in a thread."""

from __future__ import annotations

import asyncio
import threading

from bridge_runner import wait_for

from sip_bridge.bridge import Bridge
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring


class InProcessBridge:
    def __init__(self, settings: Settings, wiring: Wiring) -> None:
        self.bridge = Bridge(settings, wiring=wiring)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self.bridge.serve())
        except BaseException as exc:
            self.error = exc

    @property
    def sip_port(self) -> int:
        return self.bridge.server.port

    def start(self) -> None:
        self.thread.start()
        assert wait_for(lambda: self.bridge.ready.is_set() or self.error is not None, 60)
        assert self.error is None, self.error

    def leg_ports(self) -> dict[str, int]:
        async def get() -> dict[str, int]:
            return {
                leg.label or "": leg.local_port
                for call in self.bridge.controller.calls.values()
                for leg in call.legs.values()
            }

        return asyncio.run_coroutine_threadsafe(get(), self.loop).result(timeout=5)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.bridge.request_stop)
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), "bridge did not stop"
        if self.error is not None:
            raise self.error
