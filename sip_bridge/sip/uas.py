"""The SIP user-agent server of the bridge: synchronous and pure apart from the call
controller it drives. Bytes (or parsed messages) go in with their peer and ``now``;
messages to send come out. The asyncio transports (sip_bridge.sip.transport) are a thin
shell that feeds it datagrams and stream-framed messages and runs :meth:`SipUas.poll`.

Methods: INVITE (100 Trying, optional 180 + delayed answer for plain SIP, 200 with the
SDP answer), ACK, BYE, CANCEL (487 to the INVITE), OPTIONS (503 while draining),
UPDATE and re-INVITE (hold, codec/port change, SIPREC metadata, call state), INFO
(legacy, RFC 6086 §2: the call-state header; one naming an Info-Package gets 469, we
receive none), PRACK; other methods get 405/501. An INVITE without SDP (late offer)
gets our offer in the 200 and its answer is read from the ACK (none: BYE,
``no_answer_in_ack``). With ``Require: 100rel`` the 180 is sent reliably (RFC 3262:
RSeq, retransmitted until its PRACK) and carries SDP: the answer to the INVITE's offer,
or our offer to an offerless INVITE, answered in the PRACK (RFC 3261 §13.2.1, RFC 6337);
the call starts there (the dialog's early media, ``sip_dialog``, until the 200), and the
200 follows the PRACK with the same SDP. An unreliable 180 carries none.
Each INVITE's caller identity inputs (From, PAI, STIR/SHAKEN, Diversion, History-Info)
are read once, the PASSporT verified against the configured trust store.
Early media (``sip_bridge.call_state``): the INVITE's ``call_state_header`` says the
forked call is not answered yet; the same header on a re-INVITE, UPDATE or INFO says it
was answered. A bad value is counted and ignored, the request answered as without it.
In the early dialog of a delayed answer an INFO or SDP-less UPDATE is answered at once and
applied when the call starts; an UPDATE with SDP or a re-INVITE gets 500 + Retry-After
(RFC 3311 §5.2, RFC 3261 §14.2: see ``_modify``).
Leg roles of a plain SIP fork (``sip_bridge.leg_roles``): the INVITE's
``leg_roles_header`` lists the role of each audio m-line, or an m-line's ``a=label`` is a
role word; a re-INVITE or UPDATE may restate them. Bad values are counted and ignored.
Draining (SIGTERM): plain INVITEs get 503 + Retry-After; SIPREC is still answered and
marked ``unanalyzed:capacity`` (DESIGN §8).
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final

from sip_bridge.call_state import StateHint
from sip_bridge.calls import CallController, CallSetup
from sip_bridge.leg_roles import RoleStatement
from sip_bridge.media import CapacityError
from sip_bridge.sip.body import RequestBody, read_body
from sip_bridge.sip.dialog import (
    ACCEPT,
    ALLOW,
    MAX_PENDING,
    SUPPORTED,
    ClientTransactions,
    Dialog,
    ReliableProvisional,
    make_response,
    new_dialog,
    new_tag,
    salvage_headers,
    warning_text,
)
from sip_bridge.sip.fields import SUPPORTED_SCHEMES, NameAddr, SipUri, Via, user_of
from sip_bridge.sip.identity import CallerIdentity, caller_identity
from sip_bridge.sip.late_offer import accept_answer, build_offer, offered_streams
from sip_bridge.sip.message import (
    SipParseError,
    SipRequest,
    SipResponse,
    parse_cseq,
    parse_message,
)
from sip_bridge.sip.offer_answer import (
    NegotiatedStream,
    NotAcceptableError,
    build_answer,
    negotiate,
    offer_family,
)
from sip_bridge.sip.passport import TrustStore
from sip_bridge.sip.sdp import SessionDescription
from sip_bridge.sip.siprec import RecordingMetadata
from sip_bridge.sip.transaction import (
    Outgoing,
    Peer,
    ServerTransaction,
    Timers,
    TransactionLayer,
    transaction_key,
)
from sip_bridge.tenant import Hint

log = logging.getLogger(__name__)
KNOWN_TAGS: Final = frozenset({"siprec", "timer", "replaces", "100rel"})
NOT_ALLOWED: Final = frozenset({"REGISTER", "MESSAGE", "REFER"})
NO_EVENTS: Final = frozenset({"SUBSCRIBE", "PUBLISH"})  # no event package: 489 Bad Event


@dataclass(frozen=True, slots=True)
class UasConfig:
    host: str = "127.0.0.1"  # advertised in Contact and SDP
    # SDP address for an IN IP4 / IN IP6 offer ("" = host): a dual-stack RTP bind
    # answers each offer with an address of its own family
    host4: str = ""
    host6: str = ""
    port: int = 5060
    tls_port: int = 0  # SIP over TLS (0: none); Contact and Via of TLS dialogs use it
    answer_delay: float = 0.0  # plain SIP: 180 Ringing, answer after this (0: at once)
    retry_after: int = 30
    max_dialogs_per_source: int = 1000
    reject_siprec_when_draining: bool = False
    rtp_timeout: float = 30.0
    min_se: int = 90
    timers: Timers = field(default_factory=Timers)
    trust_store: TrustStore | None = None  # STIR/SHAKEN (None: PASSporTs unverified)
    wall_clock: Callable[[], float] = time.time  # PASSporT iat freshness
    tenant_header: str = "X-CallShield-Tenant"  # the PBX's explicit tenant ("" = not read)
    call_state_header: str = "X-CallShield-Call-State"  # early media ("" = not read)
    leg_roles_header: str = "X-CallShield-Leg-Roles"  # plain SIP leg roles ("" = not read)
    leg_role_labels: bool = True  # an a=label that is a role word names its leg's role

    def sdp_host(self, family: str | None) -> tuple[str, str | None]:
        """(address, family) for our SDP toward an offer of ``family`` ("IP4", "IP6"):
        that family's address, else ``host`` (whatever its family)."""
        chosen = {"IP4": self.host4, "IP6": self.host6}.get(family or "", "")
        return (chosen, family) if chosen else (self.host, None)


def peer_family(host: str) -> str:
    """The family of a signalling peer's address (an IPv4 peer on a dual-stack SIP
    socket arrives as ::ffff:a.b.c.d and is IPv4)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return "IP4"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        return "IP6"
    return "IP4"


class SipUas:
    def __init__(self, controller: CallController, config: UasConfig | None = None) -> None:
        self.controller = controller
        self.config = config or UasConfig()
        self.transactions = TransactionLayer(self.config.timers)
        self.clients = ClientTransactions(self.config.timers)
        self.dialogs: dict[tuple[str, str, str], Dialog] = {}
        self.stats: Counter[str] = Counter()
        self._next_media_check = 0.0

    # ---- input -------------------------------------------------------------------------

    def on_datagram(self, data: bytes, peer: Peer, now: float) -> list[Outgoing]:
        """One UDP datagram or one framed TCP message."""
        if not data.strip():
            return []  # CRLF keep-alive
        self.stats["received"] += 1
        try:
            message = parse_message(data, stream=peer.reliable)
        except SipParseError as exc:
            self.stats["parse_errors"] += 1
            log.debug("unparseable message: %s", exc)
            return self._error_reply(data, peer, exc)
        try:
            return self.on_message(message, peer, now)
        except SipParseError as exc:  # a header the dispatcher needed was malformed
            self.stats["parse_errors"] += 1
            return self._error_reply(data, peer, exc)

    def on_message(self, msg: SipRequest | SipResponse, peer: Peer, now: float) -> list[Outgoing]:
        if isinstance(msg, SipResponse):
            branch = Via.parse(msg.headers.get_all("Via")[0]).branch
            if not self.clients.on_response(branch, msg.status):
                self.stats["dropped"] += 1
            return []
        if msg.method == "ACK":
            return self._ack(msg, now)
        existing = self.transactions.find(_key(msg))
        if existing is not None:
            self.stats["retransmissions"] += 1
            return self.transactions.on_retransmission(existing)
        tx = self.transactions.create(msg, peer)
        uri_scheme = msg.uri.partition(":")[0].lower()
        if uri_scheme not in SUPPORTED_SCHEMES:
            return [self._reply(tx, 416, now)]
        if msg.method != "CANCEL":
            unknown = [
                t for t in msg.headers.get_all("Require") if t.strip().lower() not in KNOWN_TAGS
            ]
            if unknown:
                return [self._reply(tx, 420, now, extra=[("Unsupported", ", ".join(unknown))])]
        handler = getattr(self, "_on_" + msg.method.lower(), None)
        if handler is not None and msg.method in _HANDLED:
            result: list[Outgoing] = handler(tx, msg, now)
            return result
        if msg.method in NO_EVENTS:
            return [self._reply(tx, 489, now)]
        if msg.method == "NOTIFY":
            return [self._reply(tx, 481, now)]
        status = 405 if msg.method in NOT_ALLOWED else 501
        return [self._reply(tx, status, now, extra=[("Allow", ALLOW)])]

    # ---- methods ----------------------------------------------------------------------

    def _on_invite(self, tx: ServerTransaction, req: SipRequest, now: float) -> list[Outgoing]:
        if NameAddr.parse(req.headers.get("To") or "").tag:
            return self._modify(tx, req, now)
        try:
            body = read_body(req)
        except SipParseError as exc:
            return [self._reply(tx, exc.status or 400, now, extra=_accept_if(exc.status))]
        if body.sdp is None:  # late offer: ours goes in the 200, the answer in the ACK
            streams = offered_streams(_stream_labels(body))
        else:
            try:
                streams = negotiate(body.sdp)
            except NotAcceptableError:
                warning = [("Warning", '305 callshield "no codec"')]
                return [self._reply(tx, 488, now, extra=warning)]
        se = _session_expires(req)
        if se is not None and se < self.config.min_se:
            return [self._reply(tx, 422, now, extra=[("Min-SE", str(self.config.min_se))])]
        unanalyzed = ""
        crowded = self._dialogs_from(tx.peer.host) >= self.config.max_dialogs_per_source
        if self.controller.draining or crowded:
            if not body.siprec or self.config.reject_siprec_when_draining:
                extra = [("Retry-After", str(self.config.retry_after))]
                return [self._reply(tx, 503, now, extra=extra)]
            unanalyzed = "capacity"
        dialog = new_dialog(req, tx, body, streams, unanalyzed)
        dialog.late_offer = "" if body.sdp is not None else "initial"
        dialog.identity = self._identity(req, body)
        self.dialogs[dialog.key] = dialog
        tx.context["dialog"] = dialog
        out = [self._reply(tx, 100, now)]
        if body.siprec or self.config.answer_delay <= 0:
            return out + self._answer(dialog, now)
        dialog.answer_at = now + self.config.answer_delay
        if _has_tag(req, "Require", "100rel"):
            return out + self._reliable_ringing(dialog, tx, now)
        # unreliable: no SDP (it could only preview the 2xx's answer, RFC 3261 §13.2.1),
        # so no media before our 200; the call starts then
        return [*out, self._reply(tx, 180, now, to_tag=dialog.local_tag)]

    def _reliable_ringing(
        self, dialog: Dialog, tx: ServerTransaction, now: float
    ) -> list[Outgoing]:
        """RFC 3262 with SDP (RFC 3261 §13.2.1, RFC 6337 §2.1): the call starts now and
        the 180 carries the answer to the INVITE's offer, or, for an offerless INVITE,
        our offer (its answer then comes in the PRACK). Media flows before our 200 (the
        dialog's early media); the 200, sent once the 180 is PRACKed, repeats the same
        SDP (same o= version): offer/answer is already complete."""
        refused = self._open(dialog, now, early=True)
        if refused:
            return refused
        assert dialog.answer is not None
        rseq = secrets.randbelow(2**31 - 2) + 1
        cseq, _ = parse_cseq(tx.request.headers.get("CSeq") or "")
        extra = self._dialog_headers(dialog, tx.request, session_timer=False)
        extra += [("Require", "100rel"), ("RSeq", str(rseq))]
        out = self._reply(
            tx, 180, now, to_tag=dialog.local_tag, extra=extra, body=bytes(dialog.answer)
        )
        t1 = self.config.timers.t1
        dialog.reliable = ReliableProvisional(rseq, cseq, out, t1, now + t1, now + 64 * t1)
        if dialog.offer is None:
            dialog.late_offer = "prack"
            self.stats["offer_in_reliable_provisional"] += 1
        else:
            self.stats["answer_in_reliable_provisional"] += 1
        self.stats["reliable_provisionals"] += 1
        return [out]

    def _identity(self, req: SipRequest, body: RequestBody) -> CallerIdentity:
        """The INVITE's caller identity inputs. A SIPREC INVITE's From and To are the
        recording client's: the call's parties come from the metadata instead."""
        parties: tuple[str, str] | None = None
        if body.siprec:
            meta = body.metadata
            caller = meta.caller() if meta is not None else None
            others = [p for p in meta.participants if p is not caller] if meta else []
            parties = (
                _uri_user(caller.aor) if caller else "",
                _uri_user(others[0].aor) if others else "",
            )
        try:
            return caller_identity(
                req.headers,
                request_uri=req.uri,
                trust=self.config.trust_store,
                now=self.config.wall_clock(),
                parties=parties,
            )
        except Exception as exc:  # never let identity inputs fail the call
            self.stats["identity_errors"] += 1
            log.error("caller identity inputs could not be read (%s)", type(exc).__name__)
            return CallerIdentity(verification="failed", verification_reason="error")

    def _tenant_hints(
        self, req: SipRequest, metadata: RecordingMetadata | None
    ) -> tuple[Hint, ...]:
        """The INVITE's explicit tenant: the configured header, then SIPREC metadata."""
        hints = []
        if self.config.tenant_header:
            hints.append(Hint("sip_header", tuple(req.headers.get_all(self.config.tenant_header))))
        if metadata is not None and metadata.tenant:
            hints.append(Hint("siprec_metadata", (metadata.tenant,)))
        return tuple(hints)

    def _call_state(self, req: SipRequest) -> StateHint | None:
        """The request's call-state header (None: absent or not read), comma lists
        split. ``P-Early-Media`` is counted, never read as a state (module doc of
        ``sip_bridge.call_state``)."""
        if req.headers.get("P-Early-Media") is not None:
            self.stats["p_early_media_ignored"] += 1
        name = self.config.call_state_header
        raw = req.headers.get_all(name) if name else []
        if not raw:
            return None
        return StateHint("sip_header", tuple(p for v in raw for p in v.split(",")))

    def _leg_roles(
        self, req: SipRequest, sdp: SessionDescription | None, streams: list[NegotiatedStream]
    ) -> RoleStatement:
        """What the request says about its legs: the leg-roles header (comma lists
        split) against ``sdp``'s audio m-lines (no SDP: our late offer's, all audio),
        and their role labels when read."""
        name = self.config.leg_roles_header
        raw = req.headers.get_all(name) if name else []
        header = tuple(p for v in raw for p in v.split(",")) if raw else None
        if sdp is None:
            return RoleStatement(header, tuple(s.index for s in streams))
        audio = [(i, m) for i, m in enumerate(sdp.media) if m.media == "audio"]
        labels = (
            tuple((i, m.label) for i, m in audio if m.label is not None)
            if self.config.leg_role_labels
            else ()
        )
        return RoleStatement(header, tuple(i for i, _ in audio), labels)

    def _answer(self, dialog: Dialog, now: float) -> list[Outgoing]:
        """Our 200 to the INVITE. A call started at a reliable 180 sends the SDP that
        180 carried, unchanged (RFC 6337 §3.1: no second answer), and leaves the
        dialog's early media (``sip_dialog``) for answered."""
        dialog.answer_at = None
        req, tx = dialog.invite_tx.request, dialog.invite_tx
        if not dialog.call_id:
            refused = self._open(dialog, now, early=False)
            if refused:
                return refused
        else:
            call = self.controller.calls.get(dialog.call_id)
            if call is not None and call.state_said == ("early", "sip_dialog"):
                self.controller.set_call_state(call.call_id, StateHint("sip_dialog", ("answered",)))
        assert dialog.answer is not None
        extra = self._dialog_headers(dialog, req)
        _arm_session_timer(dialog, req, now)
        return [
            self._reply(
                tx, 200, now, to_tag=dialog.local_tag, extra=extra, body=bytes(dialog.answer)
            )
        ]

    def _open(self, dialog: Dialog, now: float, *, early: bool) -> list[Outgoing]:
        """Start the call and build our SDP (the answer, or a late offer) into
        ``dialog.answer``; returns the INVITE's 503 when a plain call finds no capacity
        (nothing else: started). ``early``: before our 2xx (a reliable 180): a call the
        PBX says nothing about is the dialog's early media (``sip_dialog``) until the 200."""
        req, tx = dialog.invite_tx.request, dialog.invite_tx
        state = self._call_state(req)
        if early and state is None:
            state = StateHint("sip_dialog", ("early",))
        setup = CallSetup(
            "siprec" if dialog.siprec else "sip",
            dialog.sip_call_id,
            ani=user_of(req.headers.get("P-Asserted-Identity") or req.headers.get("From")),
            dnis=user_of(req.headers.get("To")) or _uri_user(req.uri),
            correlation_id=req.headers.get("Session-ID"),
            identity=dialog.identity,
            tenant_hints=self._tenant_hints(req, dialog.metadata),
            source=tx.peer.host,
            call_state=state,
            leg_roles_said=self._leg_roles(req, dialog.offer, dialog.streams),
        )
        try:
            call, ports = self.controller.start_call(
                setup, dialog.streams, dialog.metadata, dialog.unanalyzed
            )
        except CapacityError:
            if not dialog.siprec:
                del self.dialogs[dialog.key]
                extra = [("Retry-After", str(self.config.retry_after))]
                return [self._reply(tx, 503, now, to_tag=dialog.local_tag, extra=extra)]
            dialog.streams = [replace(s, accepted=False) for s in dialog.streams]
            call, ports = self.controller.start_call(setup, dialog.streams, None, "capacity")
        dialog.call_id = call.call_id
        for hint, said in dialog.pending:  # early INFO/UPDATE, in the order they came
            if hint is not None:
                self.controller.set_call_state(call.call_id, hint)
            if said is not None and said.header is not None:
                self.controller.update_call(call.call_id, None, leg_roles=said)
        dialog.pending = []
        dialog.sdp_session = int(now * 1000) & 0x7FFFFFFF
        if dialog.offer is None:  # late offer: this is our offer, in the peer's family
            host, family = self.config.sdp_host(peer_family(tx.peer.host))
            dialog.answer = build_offer(
                dialog.streams,
                ports,
                local_host=host,
                session_id=dialog.sdp_session,
                version=dialog.sdp_version,
                family=family,
            )
        else:
            host, family = self.config.sdp_host(offer_family(dialog.offer))
            dialog.answer = build_answer(
                dialog.offer,
                dialog.streams,
                ports,
                local_host=host,
                session_id=dialog.sdp_session,
                version=dialog.sdp_version,
                family=family,
            )
        return []

    def _sequenced(
        self, tx: ServerTransaction, req: SipRequest, now: float
    ) -> Dialog | list[Outgoing]:
        """The dialog of an in-dialog request whose CSeq moves on (taken), or the
        answer that ends it: 481 outside a dialog, 500 for a stale CSeq (RFC 3261 §12.2.2)."""
        dialog = self._dialog_of(req)
        if dialog is None:
            return [self._reply(tx, 481, now)]
        cseq, _ = parse_cseq(req.headers.get("CSeq") or "")
        if cseq <= dialog.remote_cseq:
            return [self._reply(tx, 500, now, extra=[("Retry-After", "1")])]
        dialog.remote_cseq = cseq
        return dialog

    def _modify(self, tx: ServerTransaction, req: SipRequest, now: float) -> list[Outgoing]:
        """re-INVITE or UPDATE inside a dialog. Before our 2xx to the INVITE (the early
        dialog of a delayed answer): a re-INVITE gets 500 + Retry-After (RFC 3261 §14.2:
        an INVITE before the final response to a lower-CSeq one), an UPDATE is taken
        (RFC 3311, ``_early_update``). After the 2xx, before its ACK: a re-INVITE gets 491."""
        dialog = self._sequenced(tx, req, now)
        if isinstance(dialog, list):
            return dialog
        if not dialog.invite_tx.final and req.method == "INVITE":
            self.stats["reinvite_before_answer"] += 1
            return [self._reply(tx, 500, now, extra=[("Retry-After", _retry_after())])]
        if req.method == "INVITE" and not dialog.invite_tx.acked:
            return [self._reply(tx, 491, now)]
        try:
            body = read_body(req)
        except SipParseError as exc:
            return [self._reply(tx, exc.status or 400, now, extra=_accept_if(exc.status))]
        if not dialog.call_id:
            return [self._early_update(tx, req, body, dialog, now)]
        if body.sdp is not None and dialog.late_offer == "prack":
            # RFC 3311 §5.2: our offer (in the reliable 180) is not answered yet
            self.stats["early_update_offer_refused"] += 1
            return [self._reply(tx, 491, now)]
        streams: list[NegotiatedStream] | None = None
        if body.sdp is not None:
            try:
                streams = negotiate(body.sdp)
            except NotAcceptableError:
                return [self._reply(tx, 488, now)]
        said = self._leg_roles(req, body.sdp or dialog.offer, streams or dialog.streams)
        if body.sdp is None:  # no SDP: labels are the session's, not restated here
            said = replace(said, labels=())
        ports = self.controller.update_call(
            dialog.call_id, streams, body.metadata, self._call_state(req), said
        )
        if body.metadata is not None:
            dialog.metadata = body.metadata
        if streams is not None and body.sdp is not None:
            dialog.offer, dialog.streams = body.sdp, streams
            dialog.sdp_version += 1
            host, family = self.config.sdp_host(offer_family(body.sdp))
            dialog.answer = build_answer(
                body.sdp,
                streams,
                ports,
                local_host=host,
                session_id=dialog.sdp_session,
                version=dialog.sdp_version,
                family=family,
            )
        if req.method == "INVITE":
            dialog.invite_tx = tx
            dialog.late_offer = "reinvite" if body.sdp is None else ""
        send_sdp = req.method == "INVITE" or streams is not None
        body_bytes = bytes(dialog.answer) if send_sdp and dialog.answer is not None else b""
        extra = self._dialog_headers(dialog, req)
        _arm_session_timer(dialog, req, now)  # a refresh (or, without the header, off)
        return [self._reply(tx, 200, now, to_tag=dialog.local_tag, extra=extra, body=body_bytes)]

    _on_update = _modify

    def _early_update(
        self, tx: ServerTransaction, req: SipRequest, body: RequestBody, dialog: Dialog, now: float
    ) -> Outgoing:
        """UPDATE in the early dialog of an unreliable 180 (RFC 3311; after a reliable
        one the call has started and ``_modify`` takes it). With SDP: 500 +
        Retry-After, as §5.2 requires while the INVITE's offer is unanswered (that 180
        carries no SDP; an offerless INVITE's offer is ours, in the 2xx). Without: 200
        at once, its call state and leg roles held and applied in order when the delayed
        answer starts the call (as an early INFO's call state)."""
        if body.sdp is not None:
            self.stats["early_update_offer_refused"] += 1
            return self._reply(tx, 500, now, extra=[("Retry-After", _retry_after())])
        if len(dialog.pending) >= MAX_PENDING:
            return self._pending_full(tx, now)
        said = replace(self._leg_roles(req, dialog.offer, dialog.streams), labels=())
        dialog.pending.append((self._call_state(req), said))
        self.stats["early_update"] += 1
        extra = self._dialog_headers(dialog, req, session_timer=False)
        return self._reply(tx, 200, now, to_tag=dialog.local_tag, extra=extra)

    def _ack(self, req: SipRequest, now: float) -> list[Outgoing]:
        tx = self.transactions.find(_key(req))
        if tx is not None and tx.status >= 300:
            self.transactions.on_ack(tx, now)
            return []
        dialog = self._dialog_of(req)
        if dialog is None:
            self.stats["dropped"] += 1
            return []
        first = not dialog.invite_tx.acked
        self.transactions.on_ack(dialog.invite_tx, now)
        dialog.state = "confirmed"
        if dialog.late_offer and first and dialog.call_id:
            return self._answer_in_ack(dialog, req, now)
        return []

    def _answer_in_ack(self, dialog: Dialog, ack: SipRequest, now: float) -> list[Outgoing]:
        """Our 2xx carried an offer: the ACK has the answer (RFC 3264 §5)."""
        kind, dialog.late_offer = dialog.late_offer, ""
        try:
            sdp = read_body(ack).sdp
        except SipParseError:
            sdp = None
        if sdp is None:
            self.stats["ack_without_answer"] += 1
            if kind == "initial":
                return self.hangup(dialog.call_id, "no_answer_in_ack", now)
            return []  # a re-INVITE's: the session stays as it was
        if not any(s.accepted for s in dialog.streams):
            return []  # answered unanalysed (capacity): nothing to open
        try:
            streams = accept_answer(dialog.streams, sdp) if kind == "initial" else negotiate(sdp)
        except NotAcceptableError:
            self.stats["bad_answer_in_ack"] += 1
            return self.hangup(dialog.call_id, "bad_answer_in_ack", now)
        self.controller.update_call(dialog.call_id, streams, None)
        dialog.offer, dialog.streams = sdp, streams
        return []

    def _on_bye(self, tx: ServerTransaction, req: SipRequest, now: float) -> list[Outgoing]:
        dialog = self._dialog_of(req)
        if dialog is None:
            return [self._reply(tx, 481, now)]
        out = [self._reply(tx, 200, now)]
        if not dialog.invite_tx.final:
            out.append(self._reply(dialog.invite_tx, 487, now, to_tag=dialog.local_tag))
        self._end(dialog, "bye")
        return out

    def _on_cancel(self, tx: ServerTransaction, req: SipRequest, now: float) -> list[Outgoing]:
        invite = self.transactions.find(_key(req, "INVITE"))
        if invite is None:
            return [self._reply(tx, 481, now)]
        out = [self._reply(tx, 200, now)]
        dialog = invite.context.get("dialog")
        if not invite.final and isinstance(dialog, Dialog):
            out.append(self._reply(invite, 487, now, to_tag=dialog.local_tag))
            self._end(dialog, "cancel")
        return out

    def _on_options(self, tx: ServerTransaction, req: SipRequest, now: float) -> list[Outgoing]:
        extra = [("Allow", ALLOW), ("Accept", ACCEPT), ("Supported", SUPPORTED)]
        if NameAddr.parse(req.headers.get("To") or "").tag:
            dialog = self._dialog_of(req)
            if dialog is None:
                return [self._reply(tx, 481, now)]
            # an SBC's in-dialog keepalive: answered as the dialog (its To tag), draining
            # or not, and the call's session timer is not touched
            return [self._reply(tx, 200, now, to_tag=dialog.local_tag, extra=extra)]
        if self.controller.draining:
            extra.append(("Retry-After", str(self.config.retry_after)))
            return [self._reply(tx, 503, now, extra=extra)]
        return [self._reply(tx, 200, now, to_tag=new_tag(), extra=extra)]

    def _on_info(self, tx: ServerTransaction, req: SipRequest, now: float) -> list[Outgoing]:
        """Legacy INFO (RFC 6086 §2; no ``Info-Package``) in a dialog: 200, the
        call-state header applied. We announce no ``Recv-Info``, so an INFO naming a
        package gets 469 with an empty ``Recv-Info`` (§4.2.2, §5.2.3); a stale CSeq gets
        500 (RFC 3261 §12.2.2). Neither touches the call or its media."""
        dialog = self._sequenced(tx, req, now)
        if isinstance(dialog, list):
            return dialog
        if req.headers.get("Info-Package") is not None:
            self.stats["info_package_refused"] += 1
            return [self._reply(tx, 469, now, extra=[("Recv-Info", "")])]
        hint = self._call_state(req)
        if hint is not None and dialog.call_id:
            self.controller.set_call_state(dialog.call_id, hint)
        elif hint is not None:  # an early dialog (answer_delay): applied once answered
            if len(dialog.pending) >= MAX_PENDING:
                return [self._pending_full(tx, now)]
            dialog.pending.append((hint, None))
        return [self._reply(tx, 200, now)]

    def _pending_full(self, tx: ServerTransaction, now: float) -> Outgoing:
        """An early dialog already holds MAX_PENDING INFO/UPDATEs for the delayed answer:
        a peer sending more before the answer gets 500 + Retry-After (the request is not
        taken; it may retry once the call is answered), so a dialog's memory is bounded."""
        self.stats["early_pending_full"] += 1
        return self._reply(tx, 500, now, extra=[("Retry-After", _retry_after())])

    def _on_prack(self, tx: ServerTransaction, req: SipRequest, now: float) -> list[Outgoing]:
        """RFC 3262 §3: a PRACK whose RAck names our pending reliable 180 stops its
        retransmissions; one for anything else is 481. When the 180 held our offer the
        PRACK must hold the answer (§5): without one, or one taking no codec we offered,
        the PRACK gets 200 and the INVITE 488 (the call ends). After an answer in the
        180 a PRACK may hold a new offer: answered in its 200 (as an UPDATE's). A
        delayed answer that fell due while waiting for the PRACK is sent now."""
        dialog = self._dialog_of(req)
        rel = dialog.reliable if dialog is not None else None
        if dialog is None or rel is None or not rel.rack_matches(req.headers.get("RAck") or ""):
            self.stats["prack_unmatched"] += 1
            return [self._reply(tx, 481, now)]
        dialog.reliable = None
        self.stats["prack"] += 1
        try:
            sdp = read_body(req).sdp
        except SipParseError:
            sdp = None
        if dialog.late_offer == "prack":
            dialog.late_offer = ""
            refused = self._answer_in_prack(dialog, sdp)
            if refused:
                out = [self._reply(tx, 200, now, to_tag=dialog.local_tag)]
                warning = [("Warning", f'399 callshield "{refused}"')]
                invite_tx = dialog.invite_tx
                out.append(self._reply(invite_tx, 488, now, to_tag=dialog.local_tag, extra=warning))
                self._end(dialog, refused)
                return out
        elif sdp is not None:
            out = self._modify(tx, req, now)  # a new offer, answered in the PRACK's 200
            return out + self._answer_if_due(dialog, now)
        cseq, _ = parse_cseq(req.headers.get("CSeq") or "")
        dialog.remote_cseq = max(dialog.remote_cseq, cseq)
        out = [self._reply(tx, 200, now, to_tag=dialog.local_tag)]
        return out + self._answer_if_due(dialog, now)

    def _answer_in_prack(self, dialog: Dialog, sdp: SessionDescription | None) -> str:
        """Our reliable 180 held the offer: take the PRACK's answer (RFC 3262 §5);
        returns why it is refused ("" when taken)."""
        if sdp is None:
            self.stats["prack_without_answer"] += 1
            return "no_answer_in_prack"
        if not any(s.accepted for s in dialog.streams):
            return ""  # answered unanalysed (capacity): nothing to open
        try:
            streams = accept_answer(dialog.streams, sdp)
        except NotAcceptableError:
            self.stats["bad_answer_in_prack"] += 1
            return "bad_answer_in_prack"
        self.controller.update_call(dialog.call_id, streams, None)
        dialog.offer, dialog.streams = sdp, streams
        return ""

    def _answer_if_due(self, dialog: Dialog, now: float) -> list[Outgoing]:
        if dialog.key in self.dialogs and dialog.answer_at is not None and now >= dialog.answer_at:
            return self._answer(dialog, now)
        return []

    # ---- timers, hang-up, draining -----------------------------------------------------

    def poll(self, now: float) -> list[Outgoing]:
        out, unacked = self.transactions.poll(now)
        for tx in unacked:
            dialog = tx.context.get("dialog")
            if isinstance(dialog, Dialog) and dialog.key in self.dialogs:
                out += self.hangup(dialog.call_id, "ack_timeout", now)
        out += self.clients.poll(now)
        for dialog in list(self.dialogs.values()):
            if dialog.reliable is not None:
                out += self._retransmit_reliable(dialog, now)
                if dialog.key not in self.dialogs:
                    continue
            if dialog.reliable is None and dialog.answer_at is not None and now >= dialog.answer_at:
                out += self._answer(dialog, now)  # (a reliable 180 held SDP: not before its PRACK)
            elif dialog.session_expires_at is not None and now >= dialog.session_expires_at:
                self.stats["session_timer_expired"] += 1
                out += self.hangup(dialog.call_id, "session_timer_expired", now)
        if now >= self._next_media_check:
            self._next_media_check = now + 1.0
            timeout_ns = int(self.config.rtp_timeout * 1e9)
            for call_id in self.controller.timed_out(int(now * 1e9), timeout_ns):
                out += self.hangup(call_id, "rtp_timeout", now)
        return out

    def _retransmit_reliable(self, dialog: Dialog, now: float) -> list[Outgoing]:
        rel = dialog.reliable
        assert rel is not None
        if now >= rel.give_up_at:  # no PRACK in 64*T1: reject the INVITE (RFC 3262 §3)
            dialog.reliable = None
            self.stats["prack_timeout"] += 1
            reply = self._reply(dialog.invite_tx, 500, now, to_tag=dialog.local_tag)
            self._end(dialog, "prack_timeout")
            return [reply]
        if now < rel.retransmit_at:
            return []
        rel.interval *= 2  # no T2 cap: RFC 3262 doubles each time
        rel.retransmit_at = now + rel.interval
        return [rel.out]

    def hangup(self, call_id: str, reason: str, now: float) -> list[Outgoing]:
        """End a call from our side: BYE to the peer, then the call ends. A call started
        in the early dialog (a reliable 180) before our 2xx gets 480 to its INVITE
        instead (RFC 3261 §15: the callee ends an early dialog with a final response)."""
        for dialog in list(self.dialogs.values()):
            if dialog.call_id == call_id and not dialog.invite_tx.final:
                reply = self._reply(dialog.invite_tx, 480, now, to_tag=dialog.local_tag)
                self._end(dialog, reason)
                return [reply]
            if dialog.call_id == call_id:
                port = _contact_parts(self.config, dialog.peer, "")[1]
                branch, bye = dialog.bye(self.config.host, port)
                self._end(dialog, reason)
                return [self.clients.send(branch, Outgoing(dialog.peer, bytes(bye)), now)]
        self.controller.end_call(call_id, reason)
        return []

    def hangup_all(self, reason: str, now: float) -> list[Outgoing]:
        out: list[Outgoing] = []
        for dialog in list(self.dialogs.values()):
            if dialog.call_id:
                out += self.hangup(dialog.call_id, reason, now)
        return out

    def next_deadline(self) -> float | None:
        times = [self.transactions.next_deadline(), self.clients.next_deadline()]
        times += [d.answer_at for d in self.dialogs.values() if d.reliable is None]
        times += [d.session_expires_at for d in self.dialogs.values()]
        for d in self.dialogs.values():
            if d.reliable is not None:
                times += [d.reliable.retransmit_at, d.reliable.give_up_at]
        return min((t for t in times if t is not None), default=None)

    # ---- helpers ----------------------------------------------------------------------

    def _end(self, dialog: Dialog, reason: str) -> None:
        dialog.state = "terminated"
        self.dialogs.pop(dialog.key, None)
        if dialog.call_id:
            self.controller.end_call(dialog.call_id, reason)

    def _dialog_of(self, req: SipRequest) -> Dialog | None:
        to_tag = NameAddr.parse(req.headers.get("To") or "").tag or ""
        from_tag = NameAddr.parse(req.headers.get("From") or "").tag or ""
        return self.dialogs.get((req.headers.get("Call-ID") or "", to_tag, from_tag))

    def _dialogs_from(self, host: str) -> int:
        return sum(1 for d in self.dialogs.values() if d.peer.host == host)

    def _dialog_headers(
        self, dialog: Dialog, req: SipRequest, *, session_timer: bool = True
    ) -> list[tuple[str, str]]:
        scheme, port, transport = _contact_parts(self.config, dialog.peer, req.uri)
        feature = ";+sip.srs" if dialog.siprec else ""
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        extra = [
            ("Contact", f"<{scheme}:callshield@{host}:{port}{transport}>{feature}"),
            ("Allow", ALLOW),
            ("Supported", SUPPORTED),
        ]
        extra += [("Record-Route", rr) for rr in req.headers.get_all("Record-Route")]
        se = _session_expires(req) if session_timer else None
        if se is not None:
            extra.append(("Session-Expires", f"{se};refresher=uac"))
            if any(t.strip().lower() == "timer" for t in req.headers.get_all("Supported")):
                extra.append(("Require", "timer"))
        return extra

    def _reply(
        self,
        tx: ServerTransaction,
        status: int,
        now: float,
        *,
        to_tag: str | None = None,
        extra: list[tuple[str, str]] | None = None,
        body: bytes = b"",
    ) -> Outgoing:
        if to_tag is None and status > 100:
            to_tag = new_tag()
        resp = make_response(
            tx.request.headers, tx.peer, status, to_tag=to_tag, extra=extra, body=body
        )
        self.stats[f"sent.{status}"] += 1
        return self.transactions.respond(tx, status, bytes(resp), now)

    def _error_reply(self, data: bytes, peer: Peer, exc: SipParseError) -> list[Outgoing]:
        headers = salvage_headers(data) if exc.status is not None else None
        if headers is None:
            self.stats["dropped"] += 1
            return []
        resp = make_response(
            headers,
            peer,
            exc.status or 400,
            to_tag=new_tag(),
            extra=[("Warning", f'399 callshield "{warning_text(str(exc))}"')],
        )
        self.stats[f"sent.{resp.status}"] += 1
        return [Outgoing(peer, bytes(resp))]


_HANDLED = frozenset({"INVITE", "BYE", "CANCEL", "OPTIONS", "UPDATE", "INFO", "PRACK"})


def _key(req: SipRequest, method: str | None = None) -> tuple[str, ...]:
    return transaction_key(req, method)


def _retry_after() -> str:
    """A Retry-After of 0-10 s, randomly chosen (RFC 3261 §14.2, RFC 3311 §5.2)."""
    return str(secrets.randbelow(11))


def _session_expires(req: SipRequest) -> int | None:
    value = req.headers.get("Session-Expires")
    if value is None:
        return None
    head = value.partition(";")[0].strip()
    return int(head) if head.isdigit() and len(head) < 10 else None


def _arm_session_timer(dialog: Dialog, req: SipRequest, now: float) -> None:
    """RFC 4028 with the peer (uac) as refresher: a session refresh must come before
    the interval ends; we, the other side, send BYE at expiry minus min(32 s, SE/3)
    (section 10). A refresh without Session-Expires turns the timer off."""
    se = _session_expires(req)
    if se is None:
        dialog.session_expires_at = None
        return
    dialog.session_expires_at = now + se - min(32.0, se / 3)


def _has_tag(req: SipRequest, header: str, tag: str) -> bool:
    return any(t.strip().lower() == tag for t in req.headers.get_all(header))


def _stream_labels(body: RequestBody) -> list[str | None]:
    """The m= lines of our late offer: one per labelled SIPREC metadata stream, else
    one unlabelled."""
    if body.metadata is not None:
        labels = [s.label for s in body.metadata.streams if s.label][:4]
        if labels:
            return list(labels)
    return [None]


def _contact_parts(config: UasConfig, peer: Peer, request_uri: str) -> tuple[str, int, str]:
    """(scheme, port, transport parameter) of our Contact for a dialog with ``peer``: a
    sips request URI gets a sips Contact (TLS implied), other TLS dialogs
    ;transport=tls, TCP ;transport=tcp, UDP none; TLS dialogs name the TLS port."""
    port = config.tls_port if peer.transport == "tls" and config.tls_port else config.port
    if peer.transport == "tls" and request_uri[:5].lower() == "sips:":
        return "sips", port, ""
    return "sip", port, peer.uri_transport


def _uri_user(uri: str) -> str:
    try:
        return SipUri.parse(uri).user
    except SipParseError:
        return ""


def _accept_if(status: int | None) -> list[tuple[str, str]]:
    return [("Accept", ACCEPT)] if status == 415 else []
