"""The control API of the bridge (RTP attach without SIP), as a FastAPI router that the
bridge's HTTP server mounts: ``app.include_router(control_router(controller, settings))``.

For PBX integrations that fork RTP where they are told: Asterisk ARI ExternalMedia
(``external_host`` = a leg's ``rtp.external_host``), rtpengine subscribe. Create a
monitored call with its legs and metadata, get back one RTP port per leg on the
advertised address, PATCH metadata (and ``call_state``: early media until answered),
DELETE it; a call whose legs all stay silent for the RTP timeout ends by itself (reason
``rtp_timeout``). ``PUT /v1/calls/{id}/call-state`` says answered for any live call, also
found by an id of the PBX's (``/v1/calls/by-external-id/{system}/{value}/call-state``,
e.g. ``sip-call-id``: the Call-ID of the SIP fork). ``PUT /v1/calls/{id}/leg-roles``
(also by external id) says which party each leg of a plain SIP fork carries, for a PBX
that cannot add the leg-roles header to its fork (``sip_bridge.leg_roles``).

Every request needs ``Authorization: Bearer <control_api_token>`` (settings; compared in
constant time), checked before the body is even parsed: missing or wrong -> 401; no
token configured -> 403 (the API is off). While draining, creating a call gets 503 with
Retry-After (DESIGN §8); live calls can still be changed and ended. Handlers are
``async def`` on purpose: they run on the event loop that owns the call controller
(the SIP UAS's loop), never in a thread pool.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from detectors.alert_schema import LegRole
from sip_bridge.attach import (
    STATE_DOC,
    AttachedCalls,
    CallCreate,
    CallUpdate,
    CallView,
    UnknownLegError,
    state_hint,
)
from sip_bridge.call_state import StateHint
from sip_bridge.calls import CallController, external_ids
from sip_bridge.media import CapacityError
from sip_bridge.settings import Settings

log = logging.getLogger(__name__)
PREFIX = "/v1/calls"
_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="control_api_token",
    description="the bridge's control_api_token (CALLSHIELD_CONTROL_API_TOKEN)",
)
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or wrong bearer token"},
    403: {"description": "the control API is off (no token configured)"},
}


def token_check(token: bytes | None) -> Callable[[Request], None]:
    def check(request: Request) -> None:
        if token is None:
            raise HTTPException(status.HTTP_403_FORBIDDEN, "control API disabled: no token")
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "bearer token required",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not hmac.compare_digest(given.strip().encode(), token):
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "invalid token",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )

    return check


def control_token(settings: Settings) -> bytes | None:
    """The control API's bearer token (None: not configured, the API is off)."""
    secret = settings.control_api_token
    return secret.get_secret_value().encode() if secret and secret.get_secret_value() else None


def guarded_route(check: Callable[[Request], None]) -> type[APIRoute]:
    """Routes that authenticate before FastAPI reads and validates the body (so an
    unauthenticated caller learns nothing from validation errors)."""

    class GuardedRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                check(request)
                return await handler(request)

            return guarded

    return GuardedRoute


class PauseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    paused: bool
    reason: str = Field(default="", max_length=64, pattern=r"^[A-Za-z0-9_.:-]*$")


class PauseView(BaseModel):
    call_id: str
    paused: bool


class CallStateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    call_state: str = Field(max_length=1024, description=STATE_DOC)


class CallStateView(BaseModel):
    call_id: str
    early_media: bool


class LegRolesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    roles: dict[str, str] = Field(
        min_length=1,
        max_length=16,
        description='leg id, or the m-line index in decimal ("0" = the INVITE\'s first '
        "m-line) -> external, internal, mixed or unknown",
    )


class LegRoleView(BaseModel):
    leg_id: str
    index: int = Field(description="the leg's m-line in the SDP")
    role: LegRole
    role_source: str


class LegRolesView(BaseModel):
    call_id: str
    legs: list[LegRoleView]


def control_router(controller: CallController, settings: Settings) -> APIRouter:
    """The control API on ``controller``; tokens, addresses and timers from settings."""
    sip_host, _ = settings.sip_address
    advertised = settings.advertised_address or settings.rtp_host or sip_host
    calls = AttachedCalls(controller, advertised, settings.rtp_timeout_s)
    retry_after = {"Retry-After": str(settings.retry_after_s)}
    router = APIRouter(
        prefix=PREFIX,
        tags=["control"],
        dependencies=[Depends(_bearer)],  # documents the scheme; the route class checks it
        responses=_ERRORS,
        route_class=guarded_route(token_check(control_token(settings))),
    )

    def checked_state(call_id: str | None, value: str | None) -> None:
        """Refuse a call state the bridge would ignore, counted (origin ``api``), before
        anything changes: 422, or 409 for ``early`` on an answered call."""
        hint = state_hint(value)
        if hint is None:
            return
        verdict = controller.check_call_state(call_id, hint)
        if verdict.reason is None:
            return
        controller.call_states.count(hint, verdict, call_id or "")
        if verdict.reason == "after_answer":
            raise HTTPException(
                status.HTTP_409_CONFLICT, "call_state early: the call is already answered"
            )
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"call_state refused ({verdict.reason}): say early or answered",
        )

    def found(call_id: str) -> Any:
        call = calls.get(call_id)
        if call is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such live call")
        return call

    def carrying(system: str, value: str) -> list[str]:
        """The live calls whose ``system`` id (``sip-call-id`` or an ``external_ids``
        key) is ``value``; 404 when none."""
        ids = [c for c, call in controller.calls.items() if external_ids(call).get(system) == value]
        if not ids:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no live call carries that id")
        return ids

    @router.post(
        "",
        status_code=status.HTTP_201_CREATED,
        response_model=CallView,
        summary="Create a monitored call and get the RTP ports to send its legs to",
        responses={503: {"description": "draining or no free RTP port; see Retry-After"}},
    )
    async def create_call(spec: CallCreate) -> CallView:
        if controller.draining:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "draining", retry_after)
        checked_state(None, spec.call_state)
        try:
            call = calls.create(spec)
        except CapacityError as exc:  # which capacity: detectors, RTP ports, streams
            raise HTTPException(
                status.HTTP_503_SERVICE_UNAVAILABLE, f"no capacity: {exc}", retry_after
            ) from None
        return calls.view(call)

    @router.get("", response_model=list[CallView], summary="Live calls created by this API")
    async def list_calls() -> list[CallView]:
        return [calls.view(c) for c in calls.live()]

    @router.get(
        "/{call_id}",
        response_model=CallView,
        summary="One live call",
        responses={404: {"description": "no such live call"}},
    )
    async def get_call(call_id: str) -> CallView:
        return calls.view(found(call_id))

    @router.patch(
        "/{call_id}",
        response_model=CallView,
        summary="Change ANI/DNIS, correlation id, external ids, leg roles, pause or call state",
        responses={
            404: {"description": "no such live call or leg"},
            409: {"description": "call_state early on an answered call"},
        },
    )
    async def update_call(call_id: str, change: CallUpdate) -> CallView:
        found(call_id)
        checked_state(call_id, change.call_state)
        try:
            call = calls.update(call_id, change)
        except UnknownLegError as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no leg {exc.args[0]!r}") from None
        return calls.view(call)

    @router.put(
        "/{call_id}/pause",
        response_model=PauseView,
        summary="Secure pause (or resume) of ANY live call, whatever its transport",
        responses={404: {"description": "no such live call on this bridge"}},
    )
    async def pause_call(call_id: str, body: PauseIn) -> PauseView:
        """PCI secure pause for calls the PBX did not create here (SIP, SIPREC, media
        WebSockets, WHIP, AudioSocket, Connect): every leg's audio and DTMF are dropped
        in C until resumed; the gap counts as a pause, not loss; held/resumed events
        carry ``reason``. The transport's own pause (AudioHook, SIPREC inactive) acts on
        the same state: the last word wins."""
        if call_id not in controller.calls:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such live call")
        controller.set_call_paused(
            call_id, body.paused, f"api:{body.reason}" if body.reason else "api"
        )
        legs = controller.calls[call_id].legs.values()
        return PauseView(call_id=call_id, paused=all(leg.paused for leg in legs))

    @router.put(
        "/{call_id}/call-state",
        response_model=CallStateView,
        summary="Early media or answered, for ANY live call, whatever its transport",
        responses={
            404: {"description": "no such live call on this bridge"},
            409: {"description": "early on an answered call"},
        },
    )
    async def set_call_state(call_id: str, body: CallStateIn) -> CallStateView:
        """Say that a call forked before it was answered (SIP without header control,
        media WebSockets, WHIP, AudioSocket, ...) is answered now: its windows from this
        point on may alert. ``early`` is taken only while the call is still early."""
        if call_id not in controller.calls:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such live call")
        checked_state(call_id, body.call_state)
        controller.set_call_state(call_id, StateHint("api", (body.call_state,)))
        return CallStateView(call_id=call_id, early_media=controller.calls[call_id].early_media)

    @router.put(
        "/by-external-id/{system}/{value}/call-state",
        response_model=list[CallStateView],
        summary="The same, for the live calls an id of yours names (e.g. sip-call-id)",
        responses={
            404: {"description": "no live call on this bridge carries that id"},
            409: {"description": "early on an answered call"},
        },
    )
    async def set_call_state_by_id(system: str, value: str, body: CallStateIn) -> Any:
        """``system``: ``sip-call-id`` (the SIP fork's Call-ID), or a key of the call's
        ``external_ids``; every live call carrying it is changed."""
        return [await set_call_state(call_id, body) for call_id in carrying(system, value)]

    @router.put(
        "/{call_id}/leg-roles",
        response_model=LegRolesView,
        summary="Which party each leg of a live plain SIP fork carries",
        responses={
            404: {"description": "no such live call (or leg) on this bridge"},
            409: {"description": "not a plain SIP call: its roles come from elsewhere"},
        },
    )
    async def set_leg_roles(call_id: str, body: LegRolesIn) -> LegRolesView:
        """For a PBX that cannot add ``X-CallShield-Leg-Roles`` to its fork: the roles
        of the named legs, all or nothing; they win over what SIP says for those m-lines
        until the line is removed. SIPREC calls take roles from their metadata, adapters'
        from their tracks, this API's own calls from ``PATCH`` (409). Refusals are
        counted (``callshield_leg_role_rejected_total{origin="api"}``)."""
        if call_id not in controller.calls:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such live call")
        refused = controller.set_leg_roles(call_id, body.roles)
        if refused == "not_plain_sip":
            raise HTTPException(
                status.HTTP_409_CONFLICT, "not a plain SIP call: its roles come from elsewhere"
            )
        if refused == "no_such_leg":
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such leg (leg id or m-line)")
        if refused is not None:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"leg role refused ({refused}): say external, internal, mixed or unknown",
            )
        legs = sorted(controller.calls[call_id].legs.values(), key=lambda leg: leg.index)
        return LegRolesView(
            call_id=call_id,
            legs=[
                LegRoleView(leg_id=g.leg_id, index=g.index, role=g.role, role_source=g.role_source)
                for g in legs
            ],
        )

    @router.put(
        "/by-external-id/{system}/{value}/leg-roles",
        response_model=list[LegRolesView],
        summary="The same, for the live calls an id of yours names (e.g. sip-call-id)",
        responses={
            404: {"description": "no live call on this bridge carries that id"},
            409: {"description": "not a plain SIP call"},
        },
    )
    async def set_leg_roles_by_id(system: str, value: str, body: LegRolesIn) -> Any:
        """``system``: ``sip-call-id`` (the SIP fork's Call-ID), or a key of the call's
        ``external_ids``; every live call carrying it is changed."""
        return [await set_leg_roles(call_id, body) for call_id in carrying(system, value)]

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
