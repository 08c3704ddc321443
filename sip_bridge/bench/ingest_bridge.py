"""``callshield bench ingest``'s ``bridge_shared*`` receivers: the bridge's own shared-port
receive path, not the bench's private use of the ingest.

The receiver builds the ingest and the media engine with the functions ``callshield
bridge`` builds them with (``sip_bridge.media_setup``) from a ``Settings`` with
``rtp_shared_port`` set, registers every sender as a SIP leg the way the call controller
does for an offer without ``a=ssrc`` (``MediaEngine.open_leg`` with the offer's address
as ``remote``: keyed in C by source address:port on the one shared socket), and lets the
engine's own 20 ms playout thread pull every leg into a counting sink. No SIP: the legs
are registered directly, so the figure is the receive path alone. CPU per packet is the
C receiver thread's clock, as for the ``native_*`` receivers; process CPU adds the
playout thread and the sink. The bench's ``--batch`` does not apply (the bridge has no
such setting: the ingest default), and the receivers run unpinned (the bridge does not
pin), so a pinned run skips them.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from native.jitter import PayloadType
from sip_bridge.bench.ingest_receivers import (
    Address,
    Receiver,
    Window,
    ingest_counters_report,
    ptime_ticks,
    sched_label,
)
from sip_bridge.media_setup import bridge_ingest, bridge_media
from sip_bridge.settings import Settings
from sip_bridge.sinks import CountingSink

PCMU = (PayloadType(0, "PCMU"),)


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BridgeSharedReceiver(Receiver):
    """The bridge's media engine on its shared RTP port, ``streams`` SIP-less legs."""

    def __init__(
        self, streams: int, *, coalesce_us: int, backend: str, rt_priority: int = 0
    ) -> None:
        self.settings = Settings.model_validate(
            {
                "sip_listen": "127.0.0.1:0",
                "rtp_shared_port": _free_udp_port(),
                "ingest_backend": backend,
                "ingest_coalesce_us": coalesce_us,
                "ingest_rt_priority": rt_priority,
                "max_streams": max(streams, 16),
            }
        )
        self.streams, self.coalesce_us = streams, coalesce_us
        self.sink = CountingSink()
        self.ing = bridge_ingest(self.settings)
        self.backend, reason = self.ing.backend()
        if self.backend != backend:
            self.ing.close()
            raise RuntimeError(f"ingest backend {backend} refused: {reason}")
        self.media = bridge_media(self.settings, self.ing, self.sink)
        self.legs: list[str] = []

    def addresses(self) -> list[Address]:
        return [("127.0.0.1", self.media.shared_port)] * self.streams

    def attach(self, sources: list[Address]) -> None:
        for i, (host, port) in enumerate(sources):
            leg = f"bench-{i}.0"
            # what CallController.open_leg passes for an offer with c= host, m= port
            got = self.media.open_leg(leg, PCMU, (host, 0), remote=(host, port), ssrc=0)
            if got != self.media.shared_port:
                raise RuntimeError(f"leg {leg} fell back to its own port {got}")
            self.legs.append(leg)
        self.ing.start()
        self.media.start()
        self.sched = self.ing.sched()
        self.counters0 = self.ing.counters()

    def run_until(self, done: Callable[[], bool], window: Window) -> None:
        for _ in ptime_ticks():
            window.tick(self)
            if done():
                return

    def received(self) -> list[int]:
        out = []
        for leg in self.legs:
            counters = self.media.stats(leg)["counters"]
            assert isinstance(counters, dict)
            out.append(int(counters["datagrams"]))
        return out

    def received_total(self) -> int:
        return int(self.ing.counters()["datagrams"])

    def cpu_ns(self) -> int:
        return self.ing.thread_cpu_ns()

    def report(self) -> dict[str, Any]:
        shared = self.media.shared_counters() or {}
        return {
            "receiver": "bridge: sip_bridge.media_setup's ingest and MediaEngine with "
            f"rtp_shared_port, legs by MediaEngine.open_leg (remote, no a=ssrc), its "
            f"playout thread, coalesce_us={self.coalesce_us}; CPU = the receiver thread's "
            "clock",
            "backend": self.ing.backend()[1],
            "sched": sched_label(self.sched, self.settings.ingest_rt_priority),
            "shared_socket_datagrams": shared.get("datagrams"),
            "shared_fallbacks": self.media.shared_fallbacks,
            "playout_late_ticks": self.media.late_ticks,
            **ingest_counters_report(self.ing, self.counters0, self.backend),
        }

    def close(self) -> None:
        self.media.stop()
        self.ing.close()
