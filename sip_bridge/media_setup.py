"""How the bridge builds its RTP receive side from its settings: the native ingest and the
media engine on it. One place, so ``callshield bench ingest``'s ``bridge_*`` receivers
measure exactly what ``callshield bridge`` runs (same ingest configuration, same media
engine, same leg registration), not a copy of it."""

from __future__ import annotations

import logging
import os

from native.ingest import Ingest
from sip_bridge.media import FrameSink, MediaEngine, PortRange
from sip_bridge.settings import Settings


def bridge_ingest(s: Settings) -> Ingest:
    """The bridge's native ingest (receiver thread, backend, pacing and real-time priority
    as configured)."""
    return Ingest(
        max_streams=s.max_streams,
        backend=s.ingest_backend,
        coalesce_us=s.ingest_coalesce_us,
        rt_priority=s.ingest_rt_priority,
    )


def bridge_media(s: Settings, ingest: Ingest, sink: FrameSink) -> MediaEngine:
    """The bridge's media engine on ``ingest``: RTP port range (quarantine twice the RTP
    timeout), bind address, jitter ceiling and the shared RTP port as configured."""
    host, _ = s.sip_address
    low, high = s.rtp_range
    return MediaEngine(
        ingest,
        PortRange(low, high, quarantine_s=2 * s.rtp_timeout_s),
        sink,
        host=s.rtp_host or host,
        max_delay_ms=s.jitter_max_delay_ms,
        shared_port=s.rtp_shared_port,
    )


def receive_thread_note(s: Settings, ingest: Ingest) -> tuple[int, str]:
    """(logging level, message) on the started ingest's receive thread: its backend,
    pacing and scheduling; WARNING when the real-time priority asked for was refused."""
    _, why = ingest.backend()
    pacing = f"paced {s.ingest_coalesce_us} us" if s.ingest_coalesce_us else "unpaced"
    state = ingest.sched()
    if not s.ingest_rt_priority:
        return logging.INFO, f"RTP receive thread: {why}; {pacing}; normal scheduling"
    if state == 1:
        return (
            logging.INFO,
            f"RTP receive thread: {why}; {pacing}; SCHED_FIFO priority {s.ingest_rt_priority}",
        )
    return (
        logging.WARNING,
        f"RTP receive thread: {why}; {pacing}; CALLSHIELD_INGEST_RT_PRIORITY="
        f"{s.ingest_rt_priority} refused ({os.strerror(-state) if state < 0 else 'not running'}"
        "; needs CAP_SYS_NICE or root): it runs with normal scheduling",
    )
