"""A media backend without sockets for the UAS unit tests, and helpers that build SIP
requests the way captured traffic looks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector
from sip_wire import SDP_OFFER, crlf

from native.ingest import PayloadType
from native.srtp import SrtpKey
from sip_bridge.calls import CallController, MemoryPublisher
from sip_bridge.media import CapacityError, PushedLeg
from sip_bridge.sip.message import Headers, SipParseError, SipResponse, parse_message
from sip_bridge.sip.transaction import Outgoing, Peer
from sip_bridge.sip.uas import SipUas, UasConfig

PEER = Peer("udp", "192.0.2.10", 5060)


@dataclass
class FakeMedia:
    """Ports from 40000 up; records every call the controller makes."""

    capacity: int = 100
    next_port: int = 40000
    legs: dict[str, dict[str, object]] = field(default_factory=dict)
    log: list[tuple[str, str]] = field(default_factory=list)
    idle: dict[str, int] = field(default_factory=dict)

    def open_leg(
        self,
        leg_id: str,
        payload_types: Sequence[PayloadType],
        expected_source: tuple[str, int] | None,
        srtp: SrtpKey | None = None,
        *,
        remote: tuple[str, int] | None = None,
        ssrc: int = 0,
    ) -> int:
        if len(self.legs) >= self.capacity:
            raise CapacityError("full")
        port = self.next_port
        self.next_port += 2
        self.legs[leg_id] = {
            "port": port,
            "pts": list(payload_types),
            "source": expected_source,
            "paused": False,
            "srtp": srtp,
        }
        self.log.append(("open", leg_id))
        return port

    def update_leg(
        self,
        leg_id: str,
        payload_types: Sequence[PayloadType],
        expected_source: tuple[str, int] | None,
        *,
        remote: tuple[str, int] | None = None,
        ssrc: int = 0,
    ) -> None:
        self.legs[leg_id].update(pts=list(payload_types), source=expected_source)
        self.log.append(("update", leg_id))

    def set_srtp(self, leg_id: str, srtp: SrtpKey | None) -> bool:
        changed = srtp is not None and srtp != self.legs[leg_id]["srtp"]
        self.legs[leg_id]["srtp"] = srtp
        if changed:
            self.log.append(("rekey", leg_id))
        return changed

    def set_paused(self, leg_id: str, paused: bool) -> None:
        self.legs[leg_id]["paused"] = paused
        self.log.append(("pause" if paused else "resume", leg_id))

    def close_leg(self, leg_id: str) -> None:
        self.legs.pop(leg_id, None)
        self.log.append(("close", leg_id))

    def drain_legs(self, leg_ids: Sequence[str], then: Callable[[], None]) -> bool:
        for leg_id in leg_ids:  # nothing is ever buffered here
            self.close_leg(leg_id)
        return True

    def idle_ns(self, leg_id: str, now_ns: int) -> int:
        return self.idle.get(leg_id, 0)

    def open_pushed_leg(
        self, leg_id: str, payload_types: Sequence[PayloadType], out_rate: int = 8000
    ) -> PushedLeg:
        raise CapacityError("FakeMedia carries SIP legs only: adapters test on MediaEngine")


@dataclass
class Harness:
    media: FakeMedia
    publisher: MemoryPublisher
    controller: CallController
    uas: SipUas

    def send(self, data: bytes, now: float = 0.0, peer: Peer = PEER) -> list[SipResponse]:
        return responses(self.uas.on_datagram(data, peer, now))

    def events(self) -> list[tuple[str, str]]:
        return [(e.event, e.reason) for e, _ in self.publisher.events]


def harness(**config: object) -> Harness:
    media = FakeMedia()
    publisher = MemoryPublisher()
    controller = CallController(media, publisher)
    uas = SipUas(controller, UasConfig(host="198.51.100.1", port=5060, **config))  # type: ignore[arg-type]
    return Harness(media, publisher, controller, uas)


def responses(out: list[Outgoing]) -> list[SipResponse]:
    """Our responses, parsed. One that echoes a header too broken to parse again (a
    CSeq beyond 2**31-1 copied from the request) is read by its status line only."""
    result = []
    for o in out:
        try:
            msg = parse_message(o.data)
        except SipParseError:
            status = int(o.data.split(b" ", 2)[1])
            msg = SipResponse(status, "", Headers([("Call-ID", "?"), ("CSeq", "?")]))
        assert isinstance(msg, SipResponse), msg
        result.append(msg)
    return result


def invite(
    *,
    call_id: str = "a84b4c76e66710@pc33",
    branch: str = "z9hG4bK776asdhds",
    cseq: int = 1,
    to_tag: str = "",
    body: str = SDP_OFFER,
    content_type: str = "application/sdp",
    extra: str = "",
    method: str = "INVITE",
) -> bytes:
    to = "<sip:5550100@198.51.100.1>" + (f";tag={to_tag}" if to_tag else "")
    body_bytes = crlf(body) if body else b""
    head = (
        f"{method} sip:5550100@198.51.100.1 SIP/2.0\n"
        f"Via: SIP/2.0/UDP 192.0.2.10:5060;branch={branch};rport\n"
        "Max-Forwards: 70\n"
        f"To: {to}\n"
        'From: "Alice" <sip:5550123@192.0.2.10>;tag=1928301774\n'
        f"Call-ID: {call_id}\n"
        f"CSeq: {cseq} {method}\n"
        "Contact: <sip:alice@192.0.2.10:5060>\n"
        + (f"Content-Type: {content_type}\n" if body_bytes else "")
        + extra
        + f"Content-Length: {len(body_bytes)}\n\n"
    )
    return crlf(head) + body_bytes


def in_dialog(
    method: str,
    to_tag: str,
    *,
    cseq: int,
    branch: str,
    body: str = "",
    content_type: str = "application/sdp",
    call_id: str = "a84b4c76e66710@pc33",
) -> bytes:
    """A request inside the dialog (ACK, BYE, re-INVITE, UPDATE ...)."""
    return invite(
        call_id=call_id,
        branch=branch,
        cseq=cseq,
        to_tag=to_tag,
        body=body,
        content_type=content_type,
        method=method,
    )


def metrics_text(collector: Collector) -> str:
    """What /metrics would show for ``collector`` alone (the Prometheus text format)."""
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()
