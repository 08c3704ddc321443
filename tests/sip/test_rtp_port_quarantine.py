"""RTP port quarantine before reuse (issue 12, DESIGN §8): a leg's port, once closed, is
not bound for a new leg until the quarantine has passed, so late packets of the old call
cannot land in a new one. Real UDP sockets on 127.0.0.1 through the media engine."""

from __future__ import annotations

import socket

import pytest
from bridge_runner import bindable

from native.ingest import Ingest
from native.jitter import PayloadType
from sip_bridge.media import CapacityError, MediaEngine, PortRange
from sip_bridge.sinks import CountingSink


def _two_free_even_ports() -> tuple[int, int]:
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            low = s.getsockname()[1] & ~1
        if low + 2 < 65536 and all(bindable(p) for p in (low, low + 2)):
            return low, low + 2
    raise RuntimeError("no two free even UDP ports")


def test_a_closed_legs_port_is_not_rebound_during_its_quarantine() -> None:
    low, high = _two_free_even_ports()
    media = MediaEngine(Ingest(max_streams=8), PortRange(low, high, 60.0), CountingSink())
    pcmu = (PayloadType(0, "PCMU"),)
    first = media.open_leg("a", pcmu, None)
    media.close_leg("a")
    second = media.open_leg("b", pcmu, None)
    assert second != first  # the free port, not the quarantined one
    assert bindable(first)  # the closed leg's socket is gone: nothing receives there
    with pytest.raises(CapacityError):  # the only other port is quarantined
        media.open_leg("c", pcmu, None)
    media.close_leg("b")
    assert media.free_ports == 2  # both back, in quarantine


def test_the_quarantine_ends_after_its_time() -> None:
    ports = PortRange(20000, 20002, quarantine_s=60.0)  # two ports
    a, b = ports.take(0.0), ports.take(0.0)
    ports.give_back(a, 10.0)
    with pytest.raises(CapacityError):
        ports.take(69.9)
    assert ports.take(70.0) == a
    ports.give_back(b, 70.0)
    assert ports.free == 1
