"""Control API for AudioSocket calls: ``/v1/audiosocket/calls``, behind the control
API's bearer token (``control_api_token``, checked before the body is parsed).

``POST`` registers a call with one leg per AudioSocket connection Asterisk will open
and answers with each leg's UUID and where to connect (``audiosocket.external_host``,
for ARI ``POST /channels/externalMedia?encapsulation=audiosocket&transport=tcp&
external_host=...&data=<uuid>``); only registered UUIDs are accepted on the socket
(and only from ``audiosocket_allow``). ``GET`` lists or shows live ones, ``PATCH
{"paused": true|false}`` is the secure pause (audio and DTMF dropped in C, the gap is a
pause, not loss), ``DELETE`` ends the call. While draining, ``POST`` gets 503.

A dedicated resource rather than an RTP-attach leg with ``transport: audiosocket``:
its legs have no RTP port, no codec or payload type to choose, and carry a UUID
instead; sharing ``/v1/calls`` would make every field there optional for one transport.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Response, status
from fastapi.security import HTTPBearer

from sip_bridge.adapters.audiosocket_calls import (
    AudioSocketCallCreate,
    AudioSocketCalls,
    AudioSocketCallUpdate,
    AudioSocketCallView,
    AudioSocketTarget,
    UuidInUseError,
)
from sip_bridge.control_api import control_token, guarded_route, token_check
from sip_bridge.media import CapacityError
from sip_bridge.settings import Settings

PREFIX = "/v1/audiosocket/calls"
_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="control_api_token",
    description="the bridge's control_api_token (CALLSHIELD_CONTROL_API_TOKEN)",
)
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or wrong bearer token"},
    403: {"description": "the control API is off (no token configured)"},
}


def audiosocket_router(
    calls: AudioSocketCalls, target: Callable[[], AudioSocketTarget], settings: Settings
) -> APIRouter:
    """The AudioSocket call API over ``calls``; ``target`` says where Asterisk connects."""
    controller = calls.controller
    retry_after = {"Retry-After": str(settings.retry_after_s)}
    router = APIRouter(
        prefix=PREFIX,
        tags=["audiosocket"],
        dependencies=[Depends(_bearer)],
        responses=_ERRORS,
        route_class=guarded_route(token_check(control_token(settings))),
    )

    def found(call_id: str) -> Any:
        call = calls.get(call_id)
        if call is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such live call")
        return call

    @router.post(
        "",
        status_code=status.HTTP_201_CREATED,
        response_model=AudioSocketCallView,
        summary="Register a call whose legs Asterisk streams over AudioSocket",
        responses={
            409: {"description": "a given uuid belongs to a live call"},
            503: {"description": "draining or no capacity; see Retry-After"},
        },
    )
    async def create_call(spec: AudioSocketCallCreate) -> AudioSocketCallView:
        if controller.draining:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "draining", retry_after)
        try:
            call = calls.create(spec)
        except UuidInUseError as exc:
            raise HTTPException(status.HTTP_409_CONFLICT, f"uuid {exc} in use") from None
        except CapacityError:
            raise HTTPException(
                status.HTTP_503_SERVICE_UNAVAILABLE, "no capacity", retry_after
            ) from None
        return calls.view(call, target())

    @router.get("", response_model=list[AudioSocketCallView], summary="Live AudioSocket calls")
    async def list_calls() -> list[AudioSocketCallView]:
        where = target()
        return [calls.view(c, where) for c in calls.live()]

    @router.get(
        "/{call_id}",
        response_model=AudioSocketCallView,
        summary="One live AudioSocket call",
        responses={404: {"description": "no such live call"}},
    )
    async def get_call(call_id: str) -> AudioSocketCallView:
        return calls.view(found(call_id), target())

    @router.patch(
        "/{call_id}",
        response_model=AudioSocketCallView,
        summary="Secure pause or resume of every leg",
        responses={404: {"description": "no such live call"}},
    )
    async def update_call(call_id: str, change: AudioSocketCallUpdate) -> AudioSocketCallView:
        call = found(call_id)
        calls.set_paused(call_id, change.paused)
        return calls.view(call, target())

    @router.delete(
        "/{call_id}",
        status_code=status.HTTP_204_NO_CONTENT,
        response_class=Response,
        summary="End the call (reason: api)",
        responses={404: {"description": "no such live call"}},
    )
    async def end_call(call_id: str) -> Response:
        if not calls.end(call_id, "api"):
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such live call")
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    return router
