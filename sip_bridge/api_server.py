"""The bridge's HTTP API server: one uvicorn server on the bridge's own event loop (the
loop that owns the call controller), serving the ASGI app from ``sip_bridge.api_app``:
the control API, WHIP and the media WebSockets.

uvicorn normally installs its own SIGINT/SIGTERM handlers while it serves; the bridge
already owns those signals (they start the drain, DESIGN §8), so this server does not
capture them and is stopped by the bridge instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Generator

import uvicorn
from starlette.types import ASGIApp

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the bridge handles SIGTERM/SIGINT (drain)


class ApiServer:
    """Start, address and stop of the API server; ``port`` 0 takes an ephemeral one."""

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            lifespan="off",
            log_level="warning",
            access_log=False,
            ws="websockets-sansio",
            ws_max_size=1 << 20,  # a media message is a few KiB; 1 MiB is abuse
            ws_ping_interval=20.0,
            ws_ping_timeout=20.0,
            timeout_graceful_shutdown=5,
        )
        self.app = app
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(), name="api-server")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start (port taken, ...)
                raise RuntimeError("the API server stopped before it started")
            await asyncio.sleep(0.01)
        host, port = self.address
        log.info("bridge API on http://%s:%d", host, port)

    @property
    def address(self) -> tuple[str, int]:
        sock = self._server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        return str(host), int(port)

    async def close(self) -> None:
        """Stop serving, then run the app's ``state.close_hooks`` (coroutine functions
        of adapters that hold sessions beyond a request: WHIP's peer connections)."""
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(Exception):
            await self._task
        self._task = None
        state = getattr(self.app, "state", None)
        for hook in list(getattr(state, "close_hooks", ())):
            try:
                await hook()
            except Exception:
                log.exception("an API close hook failed")
