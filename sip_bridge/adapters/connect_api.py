"""Monitoring Amazon Connect contacts: ``/v1/connect/contacts`` behind the control API's
bearer token (``control_api_token``, checked before the body is parsed; none = 403).

``POST {"contact_id", "stream_arn", "start_fragment", "instance_id",
"initial_contact_id"}`` (what a contact flow's Lambda has after a *Start media
streaming* block: ``ContactId``, ``MediaStreams.Customer.Audio.StreamARN`` and
``StartFragmentNumber``, the instance ARN) opens a call with two pushed legs
(``customer`` external, ``agent`` internal) and starts reading the contact's media
(``sip_bridge.adapters.connect_kvs``) from the configured source
(``sip_bridge.adapters.connect_media``; none configured = 403). The call carries
``external_ids`` ``connect`` (ContactId), ``connect_instance`` and ``connect_initial``
when given, so risk by external id, webhooks and the write-back to contact attributes
(``deploy/connect/``) all name the contact; ``correlation_id`` is the initial contact id
(a transfer keeps one risk history). ``tenant`` is the contact's tenant (the Lambda
passes the contact attribute ``callshield_tenant``): an explicit value of origin
``connect_request`` (:mod:`sip_bridge.tenant`; a refused one is counted and the call
takes the DNIS mapping or default, the request still succeeds). ``GET`` lists or shows
monitored contacts by ContactId, ``DELETE`` stops one (reason ``api``; e.g. from a
disconnect flow). While draining, ``POST`` gets 503. A ContactId already monitored gets 409.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Response, status
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from sip_bridge.adapters.connect_kvs import TRACK_LEGS, ContactStream, run_contact
from sip_bridge.adapters.connect_media import (
    MediaRequest,
    MediaSource,
    MediaSourceError,
    aclose,
    load_media_source,
)
from sip_bridge.adapters.pcm import l16_payload_types, native_l16_rates
from sip_bridge.adapters.ws_common import AdapterStats
from sip_bridge.attach import Text
from sip_bridge.calls import CallController, CallSetup, PushedLegSpec
from sip_bridge.control_api import control_token, guarded_route, token_check
from sip_bridge.media import CapacityError
from sip_bridge.settings import Settings
from sip_bridge.tenant import hints_of

log = logging.getLogger(__name__)
PREFIX = "/v1/connect/contacts"
ConnectId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$")]
_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="control_api_token",
    description="the bridge's control_api_token (CALLSHIELD_CONTROL_API_TOKEN)",
)
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or wrong bearer token"},
    403: {"description": "the control API or the Connect adapter is off"},
}


class ContactCreate(BaseModel):
    """Start monitoring one contact's live media stream."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "contact_id": "d111f871-5fe7-40b1-b5f7-6b67060de0c2",
                    "stream_arn": "arn:aws:kinesisvideo:eu-west-2:111111111111:stream/"
                    "connect-live-contact-ddddddd/1571360125131",
                    "start_fragment": "91343852333181531502161607852955530730504675150",
                    "instance_id": "d5b716a2-10bb-45cb-bf7f-01a9864be591",
                }
            ]
        },
    )

    contact_id: ConnectId = Field(description="ContactId (the ContactId tag must match)")
    stream_arn: Annotated[str, StringConstraints(min_length=1, max_length=1024)] = Field(
        description="MediaStreams.Customer.Audio.StreamARN (or a capture name/path, or '-')"
    )
    start_fragment: Annotated[str, StringConstraints(pattern=r"^[0-9]{1,128}$")] | None = Field(
        None, description="MediaStreams.Customer.Audio.StartFragmentNumber"
    )
    start_timestamp: Annotated[str, StringConstraints(pattern=r"^[0-9]{1,20}$")] | None = Field(
        None, description="MediaStreams.Customer.Audio.StartTimestamp (ms since the epoch)"
    )
    instance_id: ConnectId | None = Field(None, description="the Connect instance (id or ARN)")
    initial_contact_id: ConnectId | None = Field(None, description="InitialContactId")
    ani: Text = Field("", description="customer's number (never logged)")
    dnis: Text = Field("", description="dialled number (never logged)")
    tenant: Text | None = Field(
        None,
        description="the client company the contact belongs to (a tenant id, "
        "^[a-z0-9][a-z0-9_-]{0,31}$), e.g. the contact attribute callshield_tenant; a "
        "value the bridge rejects is counted and the call takes the DNIS mapping or the "
        "default tenant instead: see the response's tenant",
    )


class ContactLegView(BaseModel):
    leg_id: str
    label: str
    track: str
    role: str


class ContactView(BaseModel):
    contact_id: str
    call_id: str
    state: str
    stream_arn: str
    start_fragment: str | None
    correlation_id: str | None
    external_ids: dict[str, str]
    unanalyzed: str
    tenant: str | None = Field(description="the call's tenant, decided when it started")
    tenant_source: str | None = Field(description="what decided it (sip_bridge.tenant Source)")
    legs: list[ContactLegView]


@dataclass(slots=True)
class _Contact:
    spec: ContactCreate
    call_id: str
    task: asyncio.Task[None] | None = None
    stop_reason: str = ""  # why we cancelled the reader (api, bridge_stopped)


class ConnectContacts:
    """ContactId -> the monitored call and its reader task (on the bridge's loop)."""

    def __init__(self, controller: CallController, source: MediaSource, stats: AdapterStats):
        self.controller = controller
        self.source = source
        self.stats = stats
        self.rates = native_l16_rates()
        self._live: dict[str, _Contact] = {}

    def create(self, spec: ContactCreate) -> _Contact:
        """Open the call and start reading. MediaSourceError / CapacityError / KeyError
        (ContactId already monitored) leave nothing open."""
        if spec.contact_id in self._live:
            raise KeyError(spec.contact_id)
        request = MediaRequest(
            spec.contact_id, spec.stream_arn, spec.start_fragment, spec.start_timestamp
        )
        media = self.source.open(request)  # checks the request first
        external_ids = {"connect": spec.contact_id}
        if spec.instance_id:
            external_ids["connect_instance"] = spec.instance_id.rpartition("/")[2]
        if spec.initial_contact_id:
            external_ids["connect_initial"] = spec.initial_contact_id
        setup = CallSetup(
            "connect",
            ani=spec.ani,
            dnis=spec.dnis,
            correlation_id=spec.initial_contact_id or spec.contact_id,
            external_ids=external_ids,
            tenant_hints=hints_of("connect_request", spec.tenant),
        )
        pts = l16_payload_types(self.rates)
        legs = [
            PushedLegSpec(label, role, "vendor_track", "L16", pts)
            for label, role in TRACK_LEGS.values()
        ]
        try:
            call, handles = self.controller.start_pushed_call(setup, legs)
        except CapacityError:
            asyncio.get_running_loop().create_task(aclose(media))
            raise
        self.stats.calls_started += 1
        self.stats.connections += 1
        contact = _Contact(spec, call.call_id)
        stream = ContactStream(
            spec.contact_id,
            handles,
            self.rates,
            self.stats,
            int(spec.start_fragment) if spec.start_fragment else None,
        )
        contact.task = asyncio.get_running_loop().create_task(
            self._read(contact, stream, media), name=f"connect-{spec.contact_id}"
        )
        self._live[spec.contact_id] = contact
        return contact

    async def _read(self, contact: _Contact, stream: ContactStream, media: Any) -> None:
        reason = "reader_failed"
        try:
            ended = await run_contact(stream, media)
            if ended is None:  # the call was ended elsewhere
                reason = ""
                return
            reason = ended.reason
            if ended.bad:
                self.stats.bad[ended.bad] += 1
        except asyncio.CancelledError:
            reason = contact.stop_reason
            raise
        except Exception:
            log.exception("contact %s: the media reader failed", contact.spec.contact_id)
            reason = "media_error"
        finally:
            if self._live.get(contact.spec.contact_id) is contact:
                del self._live[contact.spec.contact_id]
            call = self.controller.calls.get(contact.call_id)
            if call is not None and reason:
                self.controller.end_call(contact.call_id, reason)
            self.stats.calls_ended[reason or "ended"] += 1

    def get(self, contact_id: str) -> _Contact | None:
        return self._live.get(contact_id)

    def live(self) -> list[_Contact]:
        return list(self._live.values())

    async def stop(self, contact_id: str, reason: str = "api") -> bool:
        contact = self._live.get(contact_id)
        if contact is None:
            return False
        await self._cancel(contact, reason)
        return True

    async def close_all(self) -> None:
        for contact in list(self._live.values()):
            await self._cancel(contact, "bridge_stopped")

    async def _cancel(self, contact: _Contact, reason: str) -> None:
        contact.stop_reason = reason
        if contact.task is not None and not contact.task.done():
            contact.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await contact.task

    def view(self, contact: _Contact) -> ContactView:
        call = self.controller.calls.get(contact.call_id)
        legs = []
        if call is not None:
            tracks = {label: track for track, (label, _) in TRACK_LEGS.items()}
            legs = [
                ContactLegView(
                    leg_id=leg.leg_id,
                    label=leg.label or "",
                    track=tracks.get(leg.label or "", ""),
                    role=leg.role.value,
                )
                for leg in call.legs.values()
            ]
        return ContactView(
            contact_id=contact.spec.contact_id,
            call_id=contact.call_id,
            state=call.state if call is not None else "ended",
            stream_arn=contact.spec.stream_arn,
            start_fragment=contact.spec.start_fragment,
            correlation_id=call.correlation_id if call is not None else None,
            external_ids=dict(call.external_ids) if call is not None else {},
            unanalyzed=call.unanalyzed if call is not None else "",
            tenant=call.tenant if call is not None else None,
            tenant_source=call.tenant_source if call is not None else None,
            legs=legs,
        )


def include_connect(
    app: FastAPI,
    controller: CallController,
    settings: Settings,
    registry: dict[str, AdapterStats],
) -> ConnectContacts | None:
    """Mount ``/v1/connect/contacts`` with the configured media source (None: the
    adapter is off); counters in ``registry["connect"]``; readers are cancelled by
    ``app.state.close_hooks`` when the API server stops."""
    source = load_media_source(settings)
    stats = AdapterStats("connect")
    registry[stats.name] = stats
    contacts = ConnectContacts(controller, source, stats) if source is not None else None
    app.include_router(connect_router(contacts, controller, settings, stats))
    if contacts is not None:
        hooks = getattr(app.state, "close_hooks", None)
        if hooks is None:
            hooks = app.state.close_hooks = []
        hooks.append(contacts.close_all)
    return contacts


def connect_router(
    contacts: ConnectContacts | None,
    controller: CallController,
    settings: Settings,
    stats: AdapterStats,
) -> APIRouter:
    retry_after = {"Retry-After": str(settings.retry_after_s)}
    router = APIRouter(
        prefix=PREFIX,
        tags=["amazon-connect"],
        dependencies=[Depends(_bearer)],
        responses=_ERRORS,
        route_class=guarded_route(token_check(control_token(settings))),
    )

    def enabled() -> ConnectContacts:
        if contacts is None:
            stats.refused["disabled"] += 1
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                "Connect adapter off: no media source (connect_media_dir, connect_media_source)",
            )
        return contacts

    def found(contact_id: str) -> Any:
        contact = enabled().get(contact_id)
        if contact is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such monitored contact")
        return contact

    @router.post(
        "",
        status_code=status.HTTP_201_CREATED,
        response_model=ContactView,
        summary="Start monitoring a contact's Kinesis Video Streams media",
        responses={
            400: {"description": "the stream cannot be read (bad name or path)"},
            404: {"description": "the source has no such stream"},
            409: {"description": "the contact is monitored already"},
            503: {"description": "draining or no capacity; see Retry-After"},
        },
    )
    async def create_contact(spec: ContactCreate) -> ContactView:
        registry = enabled()
        if controller.draining:
            stats.refused["draining"] += 1
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "draining", retry_after)
        try:
            contact = registry.create(spec)
        except KeyError:
            stats.refused["contact_in_use"] += 1
            raise HTTPException(status.HTTP_409_CONFLICT, "contact monitored already") from None
        except MediaSourceError as exc:
            stats.refused[f"source_{exc.status}"] += 1
            raise HTTPException(exc.status, str(exc)) from None
        except CapacityError:
            stats.calls_refused["capacity"] += 1
            raise HTTPException(
                status.HTTP_503_SERVICE_UNAVAILABLE, "no capacity", retry_after
            ) from None
        return registry.view(contact)

    @router.get("", response_model=list[ContactView], summary="Monitored contacts")
    async def list_contacts() -> list[ContactView]:
        registry = enabled()
        return [registry.view(c) for c in registry.live()]

    @router.get(
        "/{contact_id}",
        response_model=ContactView,
        summary="One monitored contact",
        responses={404: {"description": "no such monitored contact"}},
    )
    async def get_contact(contact_id: str) -> ContactView:
        return enabled().view(found(contact_id))

    @router.delete(
        "/{contact_id}",
        status_code=status.HTTP_204_NO_CONTENT,
        response_class=Response,
        summary="Stop monitoring: end the call (reason: api)",
        responses={404: {"description": "no such monitored contact"}},
    )
    async def stop_contact(contact_id: str) -> Response:
        if not await enabled().stop(contact_id):
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such monitored contact")
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    return router
