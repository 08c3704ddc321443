"""UAS dialogs (RFC 3261 §12) and the messages we build inside them: responses to any
request, and the BYE we send when a call ends on our side (RTP timeout, draining),
with its small non-INVITE client transaction (Timer E/F)."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from sip_bridge.call_state import StateHint
from sip_bridge.leg_roles import RoleStatement
from sip_bridge.sip.body import RequestBody
from sip_bridge.sip.fields import NameAddr, Via
from sip_bridge.sip.identity import CallerIdentity
from sip_bridge.sip.message import Headers, SipParseError, SipRequest, SipResponse, parse_cseq
from sip_bridge.sip.offer_answer import NegotiatedStream
from sip_bridge.sip.sdp import SessionDescription
from sip_bridge.sip.siprec import RecordingMetadata
from sip_bridge.sip.transaction import MAGIC_COOKIE, Outgoing, Peer, ServerTransaction, Timers

SERVER = "CallShield"
ALLOW = "INVITE, ACK, BYE, CANCEL, OPTIONS, UPDATE, INFO, PRACK"
ACCEPT = "application/sdp, multipart/mixed, application/rs-metadata+xml"
SUPPORTED = "siprec, timer, replaces, 100rel"
REASONS = {
    100: "Trying",
    180: "Ringing",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    405: "Method Not Allowed",
    415: "Unsupported Media Type",
    416: "Unsupported URI Scheme",
    420: "Bad Extension",
    422: "Session Interval Too Small",
    469: "Bad Info Package",
    480: "Temporarily Unavailable",
    481: "Call/Transaction Does Not Exist",
    486: "Busy Here",
    487: "Request Terminated",
    488: "Not Acceptable Here",
    489: "Bad Event",
    491: "Request Pending",
    500: "Server Internal Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "Version Not Supported",
    513: "Message Too Large",
}


def new_tag() -> str:
    return secrets.token_hex(6)


def new_branch() -> str:
    return MAGIC_COOKIE + secrets.token_hex(8)


def response_headers(headers: Headers, peer: Peer, to_tag: str | None) -> Headers:
    """The headers every response copies from its request (§8.2.6.2): Via (the top one
    stamped with received/rport, §18.2.1), From, To (+ our tag), Call-ID, CSeq."""
    out = Headers()
    for i, via in enumerate(headers.get_all("Via")):
        if i == 0:
            try:
                v = Via.parse(via)
                if v.host != peer.host:
                    v.params["received"] = peer.host
                if "rport" in v.params and not v.params["rport"]:
                    v.params["rport"] = str(peer.port)
                via = str(v)
            except SipParseError:
                pass
        out.add("Via", via)
    for name in ("From", "To", "Call-ID", "CSeq"):
        value = headers.get(name)
        if value is None:
            continue
        if name == "To" and to_tag and ";tag=" not in value.replace(" ", "").lower():
            value = f"{value};tag={to_tag}"
        out.add(name, value)
    return out


def make_response(
    headers: Headers,
    peer: Peer,
    status: int,
    *,
    to_tag: str | None = None,
    extra: list[tuple[str, str]] | None = None,
    body: bytes = b"",
    content_type: str = "application/sdp",
) -> SipResponse:
    h = response_headers(headers, peer, to_tag if status > 100 else None)
    h.add("Server", SERVER)
    for name, value in extra or []:
        h.add(name, value)
    if body:
        h.add("Content-Type", content_type)
    return SipResponse(status, REASONS.get(status, "Unknown"), h, body)


MAX_PENDING = 16  # early-dialog INFO/UPDATEs held for the delayed answer, per dialog


@dataclass(slots=True)
class ReliableProvisional:
    """A reliable provisional response (RFC 3262): retransmitted from T1, doubling,
    until its PRACK; given up (the INVITE gets a 5xx) after 64*T1."""

    rseq: int
    cseq: int
    out: Outgoing
    interval: float
    retransmit_at: float
    give_up_at: float

    def rack_matches(self, rack: str) -> bool:
        """``RAck: <rseq> <cseq> INVITE`` (RFC 3262 §7.2)."""
        parts = rack.split()
        return (
            len(parts) == 3
            and parts[0] == str(self.rseq)
            and parts[1] == str(self.cseq)
            and parts[2].upper() == "INVITE"
        )


@dataclass(slots=True)
class Dialog:
    """One INVITE dialog, from our (the UAS's) side."""

    sip_call_id: str
    local_tag: str
    remote_tag: str
    local_uri: str  # the INVITE's To (without tag): our From when we send
    remote_uri: str  # the INVITE's From: our To when we send
    remote_target: str  # Contact URI of the peer
    route_set: list[str]
    peer: Peer
    remote_cseq: int
    siprec: bool
    invite_tx: ServerTransaction
    local_cseq: int = 0
    state: str = "early"  # early, confirmed, terminated
    call_id: str = ""  # the controller's call id once media is up
    streams: list[NegotiatedStream] = field(default_factory=list)
    offer: SessionDescription | None = None
    answer: SessionDescription | None = None
    metadata: RecordingMetadata | None = None
    sdp_session: int = 0
    sdp_version: int = 0
    answer_at: float | None = None  # a delayed answer (plain SIP, answer_delay)
    session_expires_at: float | None = None  # RFC 4028: hang up if no refresh by then
    unanalyzed: str = ""
    identity: CallerIdentity | None = None
    # "initial"/"reinvite": our 2xx has the offer, the ACK the answer; "prack": our
    # reliable 180 has the offer (an offerless INVITE with 100rel), the PRACK the answer
    late_offer: str = ""
    # RFC 3262: our reliable 180 awaiting its PRACK; it carries SDP (the answer, or our
    # offer), so no 2xx is sent until the PRACK (RFC 3262 §3)
    reliable: ReliableProvisional | None = None
    # what INFO/UPDATE said in the early dialog (call state, leg roles), applied in order
    # once the delayed answer starts the call; at most MAX_PENDING (more: 500 + Retry-After)
    pending: list[tuple[StateHint | None, RoleStatement | None]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.sip_call_id, self.local_tag, self.remote_tag)

    def bye(self, via_host: str, via_port: int) -> tuple[str, SipRequest]:
        """A BYE for this dialog; returns (branch, request)."""
        self.local_cseq = max(self.local_cseq, 1) + 1
        branch = new_branch()
        transport = self.peer.via_transport
        h = Headers()
        h.add("Via", f"SIP/2.0/{transport} {via_host}:{via_port};branch={branch};rport")
        h.add("Max-Forwards", "70")
        for route in self.route_set:
            h.add("Route", route)
        h.add("From", str(NameAddr(self.local_uri, params={"tag": self.local_tag})))
        to = NameAddr.parse(self.remote_uri)
        to.params["tag"] = self.remote_tag
        h.add("To", str(to))
        h.add("Call-ID", self.sip_call_id)
        h.add("CSeq", f"{self.local_cseq} BYE")
        h.add("User-Agent", SERVER)
        return branch, SipRequest("BYE", self.remote_target, h)


@dataclass(slots=True)
class ClientTransaction:
    """A non-INVITE request we sent (BYE): retransmitted on UDP until any response."""

    out: Outgoing
    interval: float
    retransmit_at: float | None
    expires_at: float


class ClientTransactions:
    def __init__(self, timers: Timers) -> None:
        self.timers = timers
        self._txs: dict[str, ClientTransaction] = {}

    def send(self, branch: str, out: Outgoing, now: float) -> Outgoing:
        t = self.timers
        again = None if out.peer.reliable else now + t.t1
        self._txs[branch] = ClientTransaction(out, t.t1, again, now + 64 * t.t1)
        return out

    def on_response(self, branch: str, status: int) -> bool:
        tx = self._txs.get(branch)
        if tx is None:
            return False
        if status >= 200:
            del self._txs[branch]
        else:
            tx.retransmit_at = None  # Proceeding: Timer E stops growing faster; wait
        return True

    def poll(self, now: float) -> list[Outgoing]:
        out = []
        for branch, tx in list(self._txs.items()):
            if now >= tx.expires_at:
                del self._txs[branch]
                continue
            if tx.retransmit_at is not None and now >= tx.retransmit_at:
                out.append(tx.out)
                tx.interval = min(tx.interval * 2, self.timers.t2)
                tx.retransmit_at = now + tx.interval
        return out

    def next_deadline(self) -> float | None:
        times = [t for tx in self._txs.values() for t in (tx.retransmit_at, tx.expires_at)]
        return min((t for t in times if t is not None), default=None)

    def __len__(self) -> int:
        return len(self._txs)


def new_dialog(
    req: SipRequest,
    tx: ServerTransaction,
    body: RequestBody,
    streams: list[NegotiatedStream],
    unanalyzed: str,
) -> Dialog:
    from_addr = NameAddr.parse(req.headers.get("From") or "")
    to_addr = NameAddr.parse(req.headers.get("To") or "")
    contacts = req.headers.get_all("Contact")
    target = NameAddr.parse(contacts[0]).uri if contacts else from_addr.uri
    cseq, _ = parse_cseq(req.headers.get("CSeq") or "")
    return Dialog(
        sip_call_id=req.headers.get("Call-ID") or "",
        local_tag=new_tag(),
        remote_tag=from_addr.tag or "",
        local_uri=to_addr.uri,
        remote_uri=str(NameAddr(from_addr.uri, from_addr.display)),
        remote_target=target,
        route_set=req.headers.get_all("Record-Route"),
        peer=tx.peer,
        remote_cseq=cseq,
        siprec=body.siprec,
        invite_tx=tx,
        streams=streams,
        offer=body.sdp,
        metadata=body.metadata,
        unanalyzed=unanalyzed,
    )


def warning_text(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9 .,:=()\'/_-]", "", text)[:80]


_HEADER_RE = re.compile(r"^(via|v|from|f|to|t|call-id|i|cseq)\s*:\s*(.*)$", re.IGNORECASE)


def salvage_headers(data: bytes) -> Headers | None:
    """Best-effort headers of a request we must reject, enough to address a response."""
    text = data[:8192].decode("utf-8", "replace")
    lines = re.split(r"\r?\n", text)
    first = lines[0].split(" ")
    if not first or first[0].upper().startswith("SIP/") or first[0].upper() == "ACK":
        return None
    headers = Headers()
    for line in lines[1:]:
        if not line:
            break
        m = _HEADER_RE.match(line)
        if m:
            headers.add(m.group(1), m.group(2).strip())
    if not all(headers.get(n) for n in ("Via", "From", "To", "Call-ID", "CSeq")):
        return None
    return headers
