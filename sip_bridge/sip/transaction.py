"""RFC 3261 §17.2 server transactions (plus RFC 6026's Accepted state), pure and
clock-free: every call takes ``now`` (seconds, any monotonic clock), and the owner polls
:meth:`TransactionLayer.poll` for timer work. Nothing here touches a socket.

- INVITE: Proceeding (a retransmitted INVITE gets the last provisional again) →
  Completed after a 3xx–6xx (Timer G retransmits it on UDP from T1 doubling to T2, until
  the ACK; Timer H = 64·T1 gives up) → Confirmed (Timer I = T4 absorbs ACK
  retransmissions) → gone. After a 2xx: Accepted (RFC 6026 Timer L = 64·T1); the 2xx
  itself is retransmitted here on UDP (the UAS core's job in RFC 3261 §13.3.1.4) until the
  dialog reports the ACK, and when none comes by 64·T1 the owner is told so it can BYE.
- Non-INVITE: Trying/Proceeding → Completed after the final response (a retransmitted
  request gets it again; Timer J = 64·T1 on UDP, 0 on TCP) → gone.

Matching (§17.2.3): the top Via's branch (with the RFC 3261 magic cookie) and sent-by,
and the method (ACK matches INVITE); pre-3261 peers are matched on Call-ID, From tag,
CSeq number and the top Via.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from sip_bridge.sip.fields import NameAddr, Via
from sip_bridge.sip.message import SipParseError, SipRequest, parse_cseq

MAGIC_COOKIE: Final = "z9hG4bK"


@dataclass(frozen=True, slots=True)
class Peer:
    """Where a message came from and where its responses go."""

    transport: str  # "udp", "tcp" or "tls"
    host: str
    port: int
    conn_id: int = 0  # the TCP or TLS connection (0 for UDP)

    @property
    def reliable(self) -> bool:
        return self.transport != "udp"

    @property
    def via_transport(self) -> str:
        """The Via transport token of requests we send on this peer's transport."""
        return self.transport.upper()

    @property
    def uri_transport(self) -> str:
        """The ;transport= parameter a URI of ours names for this transport (UDP: none)."""
        return f";transport={self.transport}" if self.reliable else ""


@dataclass(frozen=True, slots=True)
class Outgoing:
    peer: Peer
    data: bytes


@dataclass(frozen=True, slots=True)
class Timers:
    t1: float = 0.5
    t2: float = 4.0
    t4: float = 5.0


TxKey = tuple[str, ...]


def transaction_key(req: SipRequest, method: str | None = None) -> TxKey:
    """The server-transaction key of a request (``method`` overrides, e.g. INVITE for
    an ACK or a CANCEL looking for its INVITE)."""
    method = method or ("INVITE" if req.method == "ACK" else req.method)
    vias = req.headers.get_all("Via")
    if not vias:
        raise SipParseError("missing Via header")
    top = Via.parse(vias[0])
    if top.branch.startswith(MAGIC_COOKIE):
        return ("3261", top.branch, f"{top.host}:{top.port}", method)
    cseq, _ = parse_cseq(req.headers.get("CSeq") or "")
    from_tag = NameAddr.parse(req.headers.get("From") or "").tag or ""
    call_id = req.headers.get("Call-ID") or ""
    return ("2543", call_id, from_tag, str(cseq), vias[0], method)


@dataclass(slots=True)
class ServerTransaction:
    key: TxKey
    method: str
    peer: Peer
    request: SipRequest
    state: str = "proceeding"  # proceeding, completed, accepted, confirmed, terminated
    status: int = 0  # last response status sent
    last_response: bytes = b""
    retransmit_at: float | None = None
    interval: float = 0.0
    expires_at: float | None = None
    acked: bool = False
    context: dict[str, object] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        return self.status >= 200


class TransactionLayer:
    def __init__(self, timers: Timers | None = None) -> None:
        self.timers = timers or Timers()
        self._txs: dict[TxKey, ServerTransaction] = {}

    def __len__(self) -> int:
        return len(self._txs)

    def find(self, key: TxKey) -> ServerTransaction | None:
        return self._txs.get(key)

    def create(self, req: SipRequest, peer: Peer) -> ServerTransaction:
        key = transaction_key(req)
        tx = ServerTransaction(key, req.method, peer, req)
        self._txs[key] = tx
        return tx

    def on_retransmission(self, tx: ServerTransaction) -> list[Outgoing]:
        """A request matched an existing transaction: resend the last response (if any)."""
        if tx.last_response and tx.state in ("proceeding", "completed", "accepted"):
            return [Outgoing(tx.peer, tx.last_response)]
        return []

    def respond(self, tx: ServerTransaction, status: int, data: bytes, now: float) -> Outgoing:
        """Send a response on the transaction and move its state machine."""
        t = self.timers
        tx.status, tx.last_response = status, data
        unreliable = not tx.peer.reliable
        if status < 200:
            pass
        elif tx.method == "INVITE" and status < 300:
            tx.state = "accepted"
            tx.expires_at = now + 64 * t.t1
            tx.interval = t.t1
            tx.retransmit_at = now + t.t1 if unreliable else None
        elif tx.method == "INVITE":
            tx.state = "completed"
            tx.expires_at = now + 64 * t.t1
            tx.interval = t.t1
            tx.retransmit_at = now + t.t1 if unreliable else None
        else:
            tx.state = "completed"
            tx.expires_at = now + (64 * t.t1 if unreliable else 0.0)
        return Outgoing(tx.peer, data)

    def on_ack(self, tx: ServerTransaction, now: float) -> None:
        """An ACK for this INVITE's final response (non-2xx: same branch; 2xx: the
        dialog matched it)."""
        tx.acked = True
        tx.retransmit_at = None
        if tx.state == "completed":
            tx.state = "confirmed"
            tx.expires_at = now + (0.0 if tx.peer.reliable else self.timers.t4)

    def poll(self, now: float) -> tuple[list[Outgoing], list[ServerTransaction]]:
        """Timer work due at ``now``: retransmissions to send, and INVITE transactions
        whose 2xx was never acknowledged (the owner ends those dialogs)."""
        out: list[Outgoing] = []
        unacked: list[ServerTransaction] = []
        for key, tx in list(self._txs.items()):
            if tx.retransmit_at is not None and now >= tx.retransmit_at and not tx.acked:
                out.append(Outgoing(tx.peer, tx.last_response))
                tx.interval = min(tx.interval * 2, self.timers.t2)
                tx.retransmit_at = now + tx.interval
            if tx.expires_at is not None and now >= tx.expires_at:
                if tx.state == "accepted" and not tx.acked:
                    unacked.append(tx)
                tx.state = "terminated"
                del self._txs[key]
        return out, unacked

    def next_deadline(self) -> float | None:
        times = [
            t
            for tx in self._txs.values()
            for t in (tx.retransmit_at, tx.expires_at)
            if t is not None
        ]
        return min(times, default=None)
