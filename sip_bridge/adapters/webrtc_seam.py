"""The seam between aiortc and the native jitter buffer (DESIGN §1, aiortc#543).

aiortc's audio path (``RTCRtpReceiver`` -> its ``JitterBuffer(capacity=16, prefetch=4)``
-> decoder thread -> ``RemoteStreamTrack.recv()``) stalls after a loss. We keep aiortc
for ICE, DTLS and SRTP only and take every audio RTP packet right after SRTP
decryption: ``RTCDtlsTransport._handle_rtp_data`` unprotects, parses and routes each
packet to its receiver by calling ``receiver._handle_rtp_packet(packet,
arrival_time_ms=...)`` through an attribute lookup. :func:`tap_receiver` shadows that
method on one receiver instance (no global patch) with a function that hands the
parsed packet to a callback, feeds aiortc's RTCP receiver statistics (so its receiver
reports still carry loss and jitter for the sender) and, unless told to keep it, never
reaches aiortc's jitter buffer or decoder.

The seam is private aiortc API, so the version is pinned (pyproject) and
:func:`check_seam` verifies it; tests/adapters/test_webrtc_seam.py fails loudly when an
aiortc upgrade moves it.

Also here: codec preferences for the answer (only codecs the native jitter buffer
decodes, in the configured order) and the host addresses ICE gathers on.
"""

from __future__ import annotations

import contextvars
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import aioice.ice
import aiortc
from aiortc import RTCRtpReceiver
from aiortc.rtcrtpparameters import RTCRtpCodecCapability
from aiortc.rtcrtpreceiver import StreamStatistics
from aiortc.rtp import RtpPacket

from native.ingest import PayloadType
from native.jitter import CODEC_IDS
from sip_bridge.media import NATIVE_CODECS

AIORTC_VERSION = "1.16.0"
OnPacket = Callable[[RtpPacket, int], None]  # (packet after SRTP, arrival monotonic ns)
_STATS_ATTR = "_RTCRtpReceiver__remote_streams"  # aiortc's per-SSRC RTCP statistics


class SeamError(RuntimeError):
    """The aiortc installed does not have the seam this adapter relies on."""


def check_seam() -> None:
    """Raise SeamError unless aiortc has the pinned version and the private method the
    tap shadows, with the parameters its caller passes."""
    if aiortc.__version__ != AIORTC_VERSION:
        raise SeamError(f"aiortc {aiortc.__version__} installed, the seam is for {AIORTC_VERSION}")
    method = getattr(RTCRtpReceiver, "_handle_rtp_packet", None)
    if method is None or not inspect.iscoroutinefunction(method):
        raise SeamError("aiortc RTCRtpReceiver._handle_rtp_packet is gone")
    params = list(inspect.signature(method).parameters)
    if params != ["self", "packet", "arrival_time_ms"]:
        raise SeamError(f"aiortc RTCRtpReceiver._handle_rtp_packet{params} changed")


def tap_receiver(
    receiver: RTCRtpReceiver,
    on_packet: OnPacket,
    clock_rates: dict[int, int],
    *,
    keep_aiortc: bool = False,
) -> None:
    """Hand every RTP packet that reaches ``receiver`` (decrypted, parsed, header
    extensions read, padding stripped) to ``on_packet`` with its arrival time on the
    monotonic clock. ``clock_rates`` (negotiated payload type -> clock rate) sizes the
    RTCP jitter statistics. ``keep_aiortc`` also passes the packet on to aiortc's own
    jitter buffer and decoder (the benchmark's baseline); otherwise only aiortc's RTCP
    statistics see it."""
    check_seam()
    original: Callable[[RtpPacket, int], Awaitable[None]] = receiver._handle_rtp_packet
    stats: dict[int, Any] | None = getattr(receiver, _STATS_ATTR, None)
    if stats is None:
        raise SeamError("aiortc RTCRtpReceiver has no per-SSRC RTCP statistics to feed")

    async def tapped(packet: RtpPacket, arrival_time_ms: int) -> None:
        on_packet(packet, time.monotonic_ns())
        if keep_aiortc:
            await original(packet, arrival_time_ms)
            return
        stream = stats.get(packet.ssrc)
        if stream is None:
            rate = clock_rates.get(packet.payload_type, 0)
            if not rate:
                return  # a payload type the answer did not accept: no statistics
            stream = stats[packet.ssrc] = StreamStatistics(rate)
        stream.add(packet)

    receiver._handle_rtp_packet = tapped  # type: ignore[method-assign]


# ---- codecs ---------------------------------------------------------------------------


def native_audio_codecs() -> frozenset[str]:
    """Encoding names the native jitter buffer decodes right now (Opus once native/ has it)."""
    return frozenset(c for c in NATIVE_CODECS if c in CODEC_IDS)


def codec_preferences(preference: Iterable[str]) -> list[RTCRtpCodecCapability]:
    """aiortc's audio capabilities restricted to ``preference`` (encoding names, most
    preferred first) that the native jitter buffer decodes, in that order."""
    usable = {c.lower() for c in native_audio_codecs()}
    caps = RTCRtpReceiver.getCapabilities("audio")
    assert caps is not None
    out: list[RTCRtpCodecCapability] = []
    for name in preference:
        if name.lower() not in usable:
            continue
        out += [c for c in caps.codecs if c.mimeType.lower() == f"audio/{name.lower()}"]
    return out


def native_name(mime_type: str) -> str:
    """``audio/PCMU`` -> ``PCMU``, ``audio/opus`` -> ``opus``: the native table's spelling."""
    sub = mime_type.partition("/")[2]
    by_lower = {c.lower(): c for c in CODEC_IDS}
    return by_lower.get(sub.lower(), sub)


def payload_types(codecs: Iterable[Any]) -> tuple[PayloadType, ...]:
    """aiortc's negotiated ``RTCRtpCodecParameters`` -> the leg's payload-type table."""
    out = []
    for c in codecs:
        name = native_name(c.mimeType)
        if name in CODEC_IDS:
            out.append(PayloadType(c.payloadType, name, c.clockRate, c.channels or 1))
    return tuple(out)


# ---- ICE host addresses -----------------------------------------------------------------

_addresses: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "callshield_ice_addresses", default=None
)
_original_host_addresses = aioice.ice.get_host_addresses


def _host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    chosen = _addresses.get()
    if chosen is None:
        return _original_host_addresses(use_ipv4, use_ipv6)
    return [a for a in chosen if (":" in a and use_ipv6) or (":" not in a and use_ipv4)]


@contextmanager
def ice_host_addresses(addresses: tuple[str, ...]) -> Iterator[None]:
    """ICE gathering inside this block (aioice runs it in tasks that inherit the
    context) offers exactly ``addresses`` as host candidates, loopback included
    (aioice alone skips 127.0.0.1); empty: aioice's own choice. The module hook is
    installed once and is a no-op outside such a block."""
    if not addresses:
        yield
        return
    aioice.ice.get_host_addresses = _host_addresses
    token = _addresses.set(addresses)
    try:
        yield
    finally:
        _addresses.reset(token)
