"""What a request's body offers us: the SDP, SIPREC metadata and whether the request is
a SIPREC one, or the 4xx to answer when the body cannot be handled (RFC 3261 §21.4.13
415 with Accept, 400 for a broken SDP). Lenient for SIPREC the way vendors need
(research notes §3.1): metadata is optional (Cisco), may come alone in an UPDATE or
re-INVITE (Avaya, ``application/rs-metadata`` without ``+xml``), and broken metadata
degrades roles to unknown instead of failing the customer's call."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sip_bridge.sip.fields import NameAddr
from sip_bridge.sip.message import SipParseError, SipRequest
from sip_bridge.sip.multipart import ContentType, Multipart
from sip_bridge.sip.sdp import SessionDescription
from sip_bridge.sip.siprec import RecordingMetadata

log = logging.getLogger(__name__)
METADATA_TYPES = frozenset({"application/rs-metadata+xml", "application/rs-metadata"})


@dataclass(slots=True)
class RequestBody:
    sdp: SessionDescription | None = None
    metadata: RecordingMetadata | None = None
    siprec: bool = False
    metadata_error: str = ""


def _sdp(raw: bytes) -> SessionDescription:
    try:
        return SessionDescription.parse(raw)
    except ValueError as exc:
        raise SipParseError(f"bad SDP: {exc}") from None


def _metadata(raw: bytes, body: RequestBody) -> None:
    try:
        body.metadata = RecordingMetadata.parse(raw)
    except ValueError as exc:
        body.metadata_error = str(exc)
        log.warning("SIPREC metadata ignored: %s", str(exc)[:120])


def is_siprec_request(req: SipRequest) -> bool:
    """Require: siprec, or a Contact with the +sip.src feature tag (or BroadWorks'
    ``;src``)."""
    if any(t.strip().lower() == "siprec" for t in req.headers.get_all("Require")):
        return True
    for contact in req.headers.get_all("Contact"):
        try:
            params = NameAddr.parse(contact).params
        except SipParseError:
            continue
        if "+sip.src" in params or "src" in params:
            return True
    return False


def read_body(req: SipRequest) -> RequestBody:
    """Raises SipParseError with status 415 (unsupported type/encoding) or 400."""
    out = RequestBody(siprec=is_siprec_request(req))
    if not req.body:
        return out
    encoding = (req.headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding not in ("identity", ""):
        raise SipParseError(f"Content-Encoding {encoding[:16]} not supported", 415)
    try:
        ctype = ContentType.parse(req.headers.get("Content-Type") or "application/sdp")
    except ValueError as exc:
        raise SipParseError(str(exc), 415) from None
    if ctype.mime == "application/sdp":
        out.sdp = _sdp(req.body)
    elif ctype.mime in METADATA_TYPES:
        out.siprec = True
        _metadata(req.body, out)
    elif ctype.mime == "multipart/mixed":
        try:
            multipart = Multipart.parse(req.body, ctype)
        except ValueError as exc:
            raise SipParseError(f"bad multipart body: {exc}") from None
        sdp_part = multipart.find("application/sdp")
        if sdp_part is not None:
            out.sdp = _sdp(sdp_part.body)
        for part in multipart.parts:
            try:
                mime = part.content_type.mime
            except ValueError:
                continue
            if mime in METADATA_TYPES or part.disposition == "recording-session":
                out.siprec = True
                _metadata(part.body, out)
                break
        if out.sdp is None and not out.siprec:
            raise SipParseError("multipart body without application/sdp", 415)
    else:
        raise SipParseError(f"Content-Type {ctype.mime[:40]} not supported", 415)
    return out
