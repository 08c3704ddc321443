"""WHIP (RFC 9725, WebRTC-HTTP Ingestion Protocol): a browser or media server publishes
a call's audio to the bridge over WebRTC.

- ``POST /v1/whip`` with ``Content-Type: application/sdp`` (the full offer, candidates
  gathered: no trickle) and ``Authorization: Bearer <whip_token>`` -> ``201 Created``,
  the SDP answer, ``Location: /v1/whip/{resource-id}`` and an ``ETag``.
- ``DELETE /v1/whip/{resource-id}`` ends the session and the call (200, reason
  ``whip_delete``); an unknown resource is 404.
- ``PATCH`` on a resource (trickle ICE, ICE restart) is not implemented: 405 with
  ``Allow``, as RFC 9725 §4.3 prescribes for a server without trickle ICE support.
  Clients send complete offers (every candidate gathered), which browsers and OBS do.
- ``OPTIONS``: a CORS preflight (origins from ``whip_cors_origins``) gets 204 with the
  allowed methods and headers, without authentication (browsers send none); a plain
  OPTIONS gets 204 with ``Allow`` and ``Accept-Post: application/sdp``.
- Errors: no token configured 403 (WHIP is off), missing/wrong token 401, wrong content
  type 415, body over 64 KiB 413, bad or unanswerable SDP 400, draining or no capacity
  503 with Retry-After. Each counted in :meth:`WhipApi.stats`.

Call metadata comes from headers or query parameters: ``X-CallShield-Role`` / ``role``
(``external``, ``internal``, ``mixed``, ``unknown``; one value for every audio m-line or
a comma list per m-line; default ``external``, role_source ``api``),
``X-CallShield-Ani`` / ``ani``, ``X-CallShield-Dnis`` / ``dnis``,
``X-CallShield-Correlation-Id`` / ``correlation_id``, ``X-CallShield-Call-Id`` /
``call_id`` (external id ``call_id``), any ``X-CallShield-Ext-<key>`` /
``ext.<key>`` (external id ``<key>``), and ``X-CallShield-Tenant`` / ``tenant``: the
call's tenant, an explicit value of origin ``whip_request`` (:mod:`sip_bridge.tenant`;
header and query both given and different = conflicting; a refused value is counted
and the call takes the DNIS mapping or the default, never a 4xx).
"""

from __future__ import annotations

import hmac
import logging
import re
from collections import Counter

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse

from detectors.alert_schema import LegRole
from sip_bridge.adapters.whip_session import OfferError, PublishRequest, WhipSessions
from sip_bridge.calls import CallController
from sip_bridge.media import CapacityError
from sip_bridge.settings import Settings
from sip_bridge.tenant import hints_of

log = logging.getLogger(__name__)
PREFIX = "/v1/whip"
MAX_SDP_BYTES = 64 * 1024
MAX_EXTERNAL_IDS = 16
_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_ALLOW_HEADERS = ("authorization", "content-type", "if-match")  # and any x-callshield-*
_EXPOSE_HEADERS = "Location, ETag, Link, Accept-Post, Retry-After"


class WhipApi:
    """The WHIP endpoint's state: sessions, token, CORS, counters."""

    def __init__(self, controller: CallController, settings: Settings) -> None:
        secret = settings.whip_token
        value = secret.get_secret_value() if secret is not None else ""
        self.token = value.encode() if value else None
        self.controller = controller
        codecs = [c.strip() for c in settings.whip_codecs.split(",") if c.strip()]
        ice = tuple(a.strip() for a in settings.whip_ice_addresses.split(",") if a.strip())
        self.sessions = WhipSessions(controller, codecs, ice)
        self.origins = {o.strip() for o in settings.whip_cors_origins.split(",") if o.strip()}
        self.retry_after = str(settings.retry_after_s)
        self.requests: Counter[str] = Counter()  # by outcome: answered, bad_sdp, 401, ...
        ice_log = logging.getLogger("aioice.ice")  # logs every ICE check at INFO
        if ice_log.level == logging.NOTSET:
            ice_log.setLevel(logging.WARNING)

    def stats(self) -> dict[str, object]:
        return {
            "requests": dict(self.requests),
            **self.sessions.stats.as_dict(len(self.sessions.sessions)),
        }

    # ---- helpers ------------------------------------------------------------------------

    def cors(self, request: Request) -> dict[str, str]:
        origin = request.headers.get("origin")
        if not origin or not self.origins:
            return {}
        if "*" in self.origins:
            return {
                "Access-Control-Allow-Origin": "*",
                "Access-Control-Expose-Headers": _EXPOSE_HEADERS,
            }
        if origin in self.origins:
            return {
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Expose-Headers": _EXPOSE_HEADERS,
                "Vary": "Origin",
            }
        return {}

    def error(
        self, request: Request, status: int, outcome: str, detail: str, **headers: str
    ) -> Response:
        self.requests[outcome] += 1
        return JSONResponse({"detail": detail}, status, headers={**self.cors(request), **headers})

    def denied(self, request: Request) -> Response | None:
        """403 while WHIP is off, 401 for a missing or wrong bearer token."""
        if self.token is None:
            return self.error(request, 403, "off", "WHIP disabled: no whip_token configured")
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return self.error(
                request,
                401,
                "unauthorized",
                "bearer token required",
                **{"WWW-Authenticate": "Bearer"},
            )
        if not hmac.compare_digest(given.strip().encode(), self.token):
            return self.error(
                request,
                401,
                "unauthorized",
                "invalid token",
                **{"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return None

    def options(self, request: Request, allow: str, resource: bool) -> Response:
        if self.token is None:
            return self.error(request, 403, "off", "WHIP disabled: no whip_token configured")
        headers = self.cors(request)
        if headers and request.headers.get("access-control-request-method"):
            headers |= {
                "Access-Control-Allow-Methods": allow,
                "Access-Control-Allow-Headers": _allowed_headers(request),
                "Access-Control-Max-Age": "600",
            }
        headers["Allow"] = allow
        if not resource:
            headers["Accept-Post"] = "application/sdp"
        self.requests["options"] += 1
        return Response(status_code=204, headers=headers)


def _allowed_headers(request: Request) -> str:
    """The preflight's requested headers that WHIP reads (CORS has no ``X-Foo-*``
    pattern, so each X-CallShield-* header the page wants is listed back)."""
    asked = request.headers.get("access-control-request-headers", "")
    names = [h.strip().lower() for h in asked.split(",") if h.strip()]
    ok = [h for h in names if h in _ALLOW_HEADERS or h.startswith("x-callshield-")]
    return ", ".join(ok or _ALLOW_HEADERS)


def publish_request(request: Request) -> PublishRequest:
    """Roles and call metadata from X-CallShield-* headers or query parameters."""
    h, q = request.headers, request.query_params

    def get(header: str, param: str) -> str:
        return (h.get(f"x-callshield-{header}") or q.get(param) or "").strip()

    roles_text = get("role", "role") or "external"
    try:
        roles = tuple(LegRole(r.strip().lower()) for r in roles_text.split(","))
    except ValueError:
        raise OfferError(f"bad role {roles_text!r}: external, internal, mixed or unknown") from None
    external: dict[str, str] = {}
    if call_id := get("call-id", "call_id"):
        external["call_id"] = call_id
    for name, value in h.items():
        if name.startswith("x-callshield-ext-"):
            external[name.removeprefix("x-callshield-ext-")] = value.strip()
    for name, value in q.items():
        if name.startswith("ext."):
            external[name.removeprefix("ext.")] = value.strip()
    if len(external) > MAX_EXTERNAL_IDS:
        raise OfferError(f"at most {MAX_EXTERNAL_IDS} external ids")
    for key, value in external.items():
        if not _KEY.match(key) or len(value) > 256:
            raise OfferError(
                f"bad external id {key[:64]!r}: key [A-Za-z0-9_.-]{{1,64}}, value <= 256"
            )
    fields = {k: get(k, k.replace("-", "_")) for k in ("ani", "dnis", "correlation-id")}
    if any(len(v) > 256 for v in fields.values()):
        raise OfferError("ani, dnis and correlation id are at most 256 characters")
    return PublishRequest(
        tenant_hints=hints_of("whip_request", h.get("x-callshield-tenant"), q.get("tenant")),
        roles=roles,
        ani=fields["ani"],
        dnis=fields["dnis"],
        correlation_id=fields["correlation-id"] or None,
        external_ids=external,
    )


class WhipRouter(APIRouter):
    """The router, holding its :class:`WhipApi` (sessions and ``stats()``)."""

    def __init__(self, whip: WhipApi) -> None:
        super().__init__(prefix=PREFIX, tags=["whip"])
        self.whip = whip


def include_whip(app: FastAPI, controller: CallController, settings: Settings) -> WhipApi:
    """Mount the WHIP router on ``app``; its :class:`WhipApi` goes to ``app.state.whip``
    (where ``stats()`` and the live sessions are reachable), and closing its peer
    connections to ``app.state.close_hooks`` (run by the API server when it stops)."""
    router = whip_router(controller, settings)
    app.include_router(router)
    app.state.whip = router.whip
    hooks = getattr(app.state, "close_hooks", None)
    if hooks is None:
        hooks = app.state.close_hooks = []
    hooks.append(lambda: router.whip.sessions.close_all("bridge_stopped"))
    return router.whip


def whip_router(controller: CallController, settings: Settings) -> WhipRouter:
    """The WHIP endpoint and its session resources on ``controller``."""
    whip = WhipApi(controller, settings)
    router = WhipRouter(whip)

    @router.options("", include_in_schema=False)
    async def endpoint_options(request: Request) -> Response:
        return whip.options(request, "POST, OPTIONS", resource=False)

    @router.options("/{resource_id}", include_in_schema=False)
    async def resource_options(request: Request, resource_id: str) -> Response:
        return whip.options(request, "DELETE, OPTIONS", resource=True)

    @router.post("", summary="Publish: an SDP offer in, 201 with the SDP answer out")
    async def publish(request: Request) -> Response:
        if (denied := whip.denied(request)) is not None:
            return denied
        ctype = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if ctype != "application/sdp":
            return whip.error(
                request, 415, "bad_content_type", "Content-Type must be application/sdp"
            )
        if controller.draining:
            return whip.error(
                request, 503, "draining", "draining", **{"Retry-After": whip.retry_after}
            )
        body = await request.body()
        if len(body) > MAX_SDP_BYTES:
            return whip.error(request, 413, "too_large", f"SDP over {MAX_SDP_BYTES} bytes")
        try:
            offer = body.decode("utf-8")
            session = await whip.sessions.publish(offer, publish_request(request))
        except UnicodeDecodeError:
            whip.sessions.stats.refused["bad_sdp"] += 1
            return whip.error(request, 400, "bad_sdp", "the SDP is not UTF-8")
        except OfferError as exc:
            whip.sessions.stats.refused["bad_sdp"] += 1
            return whip.error(request, 400, "bad_sdp", str(exc))
        except CapacityError:
            whip.sessions.stats.refused["capacity"] += 1
            return whip.error(
                request, 503, "capacity", "no capacity", **{"Retry-After": whip.retry_after}
            )
        whip.requests["answered"] += 1
        headers = {
            **whip.cors(request),
            "Location": f"{PREFIX}/{session.resource_id}",
            "ETag": session.etag,
        }
        return Response(session.answer_sdp, 201, headers=headers, media_type="application/sdp")

    @router.delete("/{resource_id}", summary="End the session and its call")
    async def delete(request: Request, resource_id: str) -> Response:
        if (denied := whip.denied(request)) is not None:
            return denied
        if not await whip.sessions.end(resource_id, "whip_delete"):
            return whip.error(request, 404, "unknown_resource", "no such WHIP session")
        whip.requests["deleted"] += 1
        return Response(status_code=200, headers=whip.cors(request))

    @router.patch("/{resource_id}", summary="Trickle ICE / ICE restart: not implemented (405)")
    async def patch(request: Request, resource_id: str) -> Response:
        if (denied := whip.denied(request)) is not None:
            return denied
        if resource_id not in whip.sessions.sessions:
            return whip.error(request, 404, "unknown_resource", "no such WHIP session")
        return whip.error(
            request,
            405,
            "patch",
            "trickle ICE and ICE restart are not supported: send a complete offer",
            Allow="DELETE, OPTIONS",
        )

    return router
