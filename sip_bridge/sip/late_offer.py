"""Late offer (RFC 3261 §13.2.1, RFC 3264): an INVITE without SDP gets our offer in the
200 OK and the peer's answer comes in the ACK. Pure functions.

We offer one receive-only audio m= line per stream we want (one for a plain call, one
per labelled stream of SIPREC metadata), with every audio codec the native core decodes
and telephone-event, in the order below. The answer picks from that list; the peer then
sends with *our* payload-type numbers (RFC 3264 §6.1), so the legs are opened with
them, in the answer's order of preference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sip_bridge.sip.offer_answer import (
    EVENT_CODECS,
    NegotiatedStream,
    NotAcceptableError,
    address_type,
    negotiate,
)
from sip_bridge.sip.sdp import MediaDescription, RtpMap, SessionDescription

OFFERED: Final = (
    RtpMap(0, "PCMU", 8000),
    RtpMap(8, "PCMA", 8000),
    RtpMap(9, "G722", 8000),
    RtpMap(111, "opus", 48000, 2),
    RtpMap(101, "telephone-event", 8000),
)
FMTP: Final = {101: "0-16", 111: "useinbandfec=1"}


def offered_streams(labels: Sequence[str | None]) -> list[NegotiatedStream]:
    """The streams of our offer before the answer: every codec, no remote address
    yet (so no expected source), assumed to send (the answer says)."""
    return [
        NegotiatedStream(i, True, OFFERED, remote_direction="sendonly", label=label)
        for i, label in enumerate(labels)
    ]


def build_offer(
    streams: Sequence[NegotiatedStream],
    ports: dict[int, int],
    *,
    local_host: str,
    session_id: int,
    version: int,
    family: str | None = None,
) -> SessionDescription:
    ip = address_type(local_host, family)
    offer = SessionDescription(
        [
            ("v", "0"),
            ("o", f"callshield {session_id} {version} IN {ip} {local_host}"),
            ("s", "callshield"),
            ("c", f"IN {ip} {local_host}"),
            ("t", "0 0"),
        ]
    )
    for s in streams:
        port = ports.get(s.index, 0) if s.accepted else 0
        media = MediaDescription("audio", port, "RTP/AVP", [str(p.pt) for p in OFFERED])
        for p in OFFERED:
            channels = f"/{p.channels}" if p.channels > 1 else ""
            media.lines.append(("a", f"rtpmap:{p.pt} {p.encoding}/{p.clock_rate}{channels}"))
            if p.pt in FMTP:
                media.lines.append(("a", f"fmtp:{p.pt} {FMTP[p.pt]}"))
        if s.label is not None:
            media.lines.append(("a", f"label:{s.label}"))
        media.lines.append(("a", "ptime:20"))
        media.lines.append(("a", "recvonly"))
        offer.media.append(media)
    return offer


def accept_answer(
    offered: Sequence[NegotiatedStream], answer: SessionDescription
) -> list[NegotiatedStream]:
    """The streams after the peer's answer; raises NotAcceptableError when the answer
    does not match the offer (m= line count) or accepts no codec we offered."""
    if len(answer.media) != len(offered):
        raise NotAcceptableError(
            f"answer has {len(answer.media)} m= lines, the offer {len(offered)}"
        )
    ours = {(p.encoding.upper(), p.clock_rate): p for p in OFFERED}
    out: list[NegotiatedStream] = []
    for theirs, mine in zip(_negotiated(answer), offered, strict=True):
        if not theirs.accepted or not mine.accepted:
            out.append(NegotiatedStream(mine.index, False, label=mine.label))
            continue
        chosen = [ours[k] for p in theirs.payload_types if (k := _key(p)) in ours]
        if not any(_key(p) not in EVENT_CODECS for p in chosen):
            out.append(NegotiatedStream(mine.index, False, label=mine.label))
            continue
        out.append(
            NegotiatedStream(
                mine.index,
                True,
                tuple(chosen),
                theirs.remote_host,
                theirs.remote_port,
                theirs.remote_direction,
                mine.label if mine.label is not None else theirs.label,
                theirs.ptime,
            )
        )
    if not any(s.accepted for s in out):
        raise NotAcceptableError("the answer accepts no codec we offered")
    return out


def _key(p: RtpMap) -> tuple[str, int]:
    return (p.encoding.upper(), p.clock_rate)


def _negotiated(answer: SessionDescription) -> list[NegotiatedStream]:
    """Each m= line of the answer read like an offer (codecs we decode, address,
    direction); rejected lines where none is usable."""
    try:
        return negotiate(answer)
    except NotAcceptableError:
        return [NegotiatedStream(i, False) for i in range(len(answer.media))]
