"""Health (the one anonymous route), system health, the live feed and the API docs."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from fastapi import APIRouter, Request, WebSocket
from starlette.websockets import WebSocketDisconnect

from dashboard import scoping
from dashboard.auth import Role
from dashboard.deps import CtxDep, Viewer, authenticate, client_address, context, recheck
from dashboard.live import LiveClient
from dashboard.schemas import Health

_CLOSE_S = 5.0  # the most a close frame waits for a client that stopped reading
router = APIRouter(tags=["system"])
health_router = APIRouter(tags=["system"])


@health_router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: anonymous, and says nothing else."""
    return {"status": "ok"}


@router.get("/system")
async def system_health(who: Viewer, ctx: CtxDep) -> Health:
    """Redis reachable, stream lengths, ages and consumer-group lag, live-feed state."""
    found = await ctx.store.health()
    found.live_feed_clients = ctx.hub.count(who.tenants)
    found.live_feed_dropped = ctx.hub.dropped
    last = found.streams.get("alerts")
    if last is not None and last.last_id and ctx.hub.last_alert_id is not None:
        found.live_feed_behind = int(last.last_id != ctx.hub.last_alert_id)
    return await scoping.health(ctx, who, found)


@router.get("/openapi.json", include_in_schema=False)
async def openapi(who: Viewer, request: Request) -> dict[str, Any]:
    """The OpenAPI document (logged-in users only)."""
    spec: dict[str, Any] = request.app.openapi()
    return spec


@router.websocket("/live")
async def live(websocket: WebSocket) -> None:
    """New alerts, call events and triage changes as JSON messages. The Origin must be
    on the allowlist when sent (a browser always sends it; only API-key clients may
    omit it); any role may listen; 1008 (policy) closes refusals before accept, which
    the handshake answers with 403. An open socket follows its principal: 1013 when
    its tenants change (reconnect, re-scoped), 1008 when it is gone (``LiveHub.watch``)."""
    ctx = context(websocket)
    who = await authenticate(websocket, ctx)
    origin = websocket.headers.get("origin")
    allowed = (
        origin.rstrip("/") in ctx.origins if origin else who is not None and who.kind == "api_key"
    )
    if not allowed or who is None or who.role < Role.VIEWER:
        await websocket.close(code=1008)
        return
    if not await ctx.live_limit.hit("live", client_address(websocket)):
        await websocket.close(code=1008)
        return
    await websocket.accept()
    client = ctx.hub.connect(who.tenants, who.name, recheck(websocket, ctx, who))
    tasks = (
        asyncio.ensure_future(_send(websocket, client)),
        asyncio.ensure_future(_until_disconnect(websocket)),
        asyncio.ensure_future(client.ended.wait()),  # even while a send is blocked
    )
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:  # no await here: the server may be cancelling this handler
            task.add_done_callback(_retrieve)
            task.cancel()
        ctx.hub.disconnect(client)
    if client.overflowed:  # fell behind or re-scoped (1013: it reconnects), or gone (1008)
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, TimeoutError):
            # bounded: a client that stopped reading never takes the close frame
            await asyncio.wait_for(websocket.close(code=client.close_code), _CLOSE_S)


async def _send(websocket: WebSocket, client: LiveClient) -> None:
    """Writes the hub's shared, already-encoded messages until the end marker."""
    while (text := await client.queue.get()) is not None:
        await websocket.send_text(text)


def _retrieve(task: asyncio.Future[Any]) -> None:
    """A send to a client that has gone raises; that ends the connection, nothing else."""
    if not task.cancelled():
        task.exception()


async def _until_disconnect(websocket: WebSocket) -> None:
    """Client chatter is ignored; returns when the client goes."""
    while (await websocket.receive())["type"] != "websocket.disconnect":
        pass
