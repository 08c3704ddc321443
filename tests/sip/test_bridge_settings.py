"""The bridge's settings: flags over environment over config file over defaults."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import struct
import time
from pathlib import Path

import pytest

from native.ingest import Ingest
from sip_bridge.bridge import Bridge
from sip_bridge.cli import build_parser
from sip_bridge.media_setup import receive_thread_note
from sip_bridge.settings import Settings, split_host_port


def test_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "callshield.toml"
    config.write_text(
        '[bridge]\nsip-listen = "10.0.0.1:5070"\nrtp_ports = "30000-30099"\nrtp_timeout_s = 12\n'
    )
    monkeypatch.setenv("CALLSHIELD_RTP_PORTS", "31000-31999")
    s = Settings.load(config, sip_listen=None, drain_timeout_s=5.0)
    assert s.sip_address == ("10.0.0.1", 5070)  # file
    assert s.rtp_range == (31000, 31999)  # environment beats the file
    assert (s.rtp_timeout_s, s.drain_timeout_s) == (12.0, 5.0)  # file, flag
    assert Settings.load(config, rtp_ports="20000-20999").rtp_range == (20000, 20999)


@pytest.mark.parametrize("bad", ["20000", "20999-20000", "a-b", "0-10"])
def test_bad_port_range(bad: str) -> None:
    with pytest.raises(ValueError, match="RTP port"):
        Settings(rtp_ports=bad)


def test_host_port_forms() -> None:
    assert split_host_port("[::1]:5062", 5060) == ("::1", 5062)
    assert split_host_port("0.0.0.0", 5060) == ("0.0.0.0", 5060)


def test_cli_flags() -> None:
    args = build_parser().parse_args(
        ["bridge", "--sip-listen", "127.0.0.1:5090", "--rtp-ports", "20000-20999"]
    )
    assert (args.sip_listen, args.rtp_ports) == ("127.0.0.1:5090", "20000-20999")


def _bridge(**values: object) -> Bridge:
    return Bridge(Settings.model_validate({"sip_listen": "127.0.0.1:0", **values}))


def _paced_sleeps_after_bursts(ingest: Ingest, until_paced: bool) -> int:
    """Start the bridge's ingest, send bursts of G.711 RTP at one leg on a shared port;
    paced_sleeps once a sleep was seen (until_paced) or after 20 bursts."""
    ingest.start()
    kid = ingest.add_socket(0)
    dest = ingest.socket_address(kid)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind(("127.0.0.1", 0))
    ingest.add_stream_shared(kid, expected_source=sender.getsockname()[:2], ssrc=0x1234)
    seq = 0
    try:
        for _ in range(200 if until_paced else 20):
            for _ in range(200):
                sender.sendto(
                    struct.pack("!BBHII", 0x80, 0, seq, seq * 160, 0x1234) + bytes(160), dest
                )
                seq = (seq + 1) & 0xFFFF
            time.sleep(0.01)
            if until_paced and ingest.counters()["paced_sleeps"]:
                break
        return int(ingest.counters()["paced_sleeps"])
    finally:
        sender.close()


def test_receive_pacing_reaches_the_native_ingest(monkeypatch: pytest.MonkeyPatch) -> None:
    """ingest_coalesce_us (default 0 = off) is the native ingest's coalesce_us: the
    bridge's receive thread sleeps between wakeups only when it is set."""
    monkeypatch.setenv("CALLSHIELD_INGEST_COALESCE_US", "1500")
    paced = _bridge()
    monkeypatch.delenv("CALLSHIELD_INGEST_COALESCE_US")
    plain = _bridge()
    try:
        assert paced.ingest.pacing() == {"coalesce_us": 1500, "coalesce_min": 16}
        assert plain.ingest.pacing() == {"coalesce_us": 0, "coalesce_min": 16}
        assert _paced_sleeps_after_bursts(paced.ingest, until_paced=True) > 0
        assert _paced_sleeps_after_bursts(plain.ingest, until_paced=False) == 0
    finally:
        paced.ingest.close()
        plain.ingest.close()


@pytest.mark.parametrize("bad", [-1, 5001])
def test_receive_pacing_is_bounded(bad: int) -> None:
    with pytest.raises(ValueError, match="ingest_coalesce_us"):
        Settings(ingest_coalesce_us=bad)


def _cs_ingest_tids() -> list[int]:
    out = []
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/comm") as f:
            if f.read().strip() == "cs-ingest":
                out.append(int(tid))
    return out


def test_receive_thread_real_time_priority_reaches_the_native_ingest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ingest_rt_priority (default 0 = normal scheduling) runs the bridge's receive thread
    SCHED_FIFO at that priority, and the start-up note says which it got."""
    before = set(_cs_ingest_tids())
    monkeypatch.setenv("CALLSHIELD_INGEST_RT_PRIORITY", "7")
    bridge = _bridge()
    try:
        bridge.ingest.start()
        (tid,) = set(_cs_ingest_tids()) - before
        level, note = receive_thread_note(bridge.settings, bridge.ingest)
        if os.geteuid() == 0:  # CI and this box run as root: granted
            assert bridge.ingest.sched() == 1
            assert os.sched_getscheduler(tid) == os.SCHED_FIFO
            assert os.sched_getparam(tid).sched_priority == 7
            assert (level, "SCHED_FIFO priority 7" in note) == (logging.INFO, True)
        else:  # refused: it runs normally, and a WARNING says why
            assert bridge.ingest.sched() < 0 and os.sched_getscheduler(tid) == os.SCHED_OTHER
            assert level == logging.WARNING and "refused" in note
    finally:
        bridge.ingest.close()
    monkeypatch.delenv("CALLSHIELD_INGEST_RT_PRIORITY")
    plain = _bridge()
    try:
        plain.ingest.start()
        (tid,) = set(_cs_ingest_tids()) - before
        assert os.sched_getscheduler(tid) == os.SCHED_OTHER and plain.ingest.sched() == 0
        level, note = receive_thread_note(plain.settings, plain.ingest)
        assert level == logging.INFO and "normal scheduling" in note
    finally:
        plain.ingest.close()


class _Refused:
    """An ingest whose real-time request the kernel refused (EPERM): pure logic."""

    def backend(self) -> tuple[str, str]:
        return "epoll", "epoll: asked for by the configuration"

    def sched(self) -> int:
        return -errno.EPERM


def test_a_refused_real_time_priority_is_a_warning_that_names_the_setting() -> None:
    s = Settings(ingest_rt_priority=20, ingest_coalesce_us=1000)
    level, note = receive_thread_note(s, _Refused())  # type: ignore[arg-type]
    assert level == logging.WARNING
    assert "CALLSHIELD_INGEST_RT_PRIORITY=20 refused" in note
    assert os.strerror(errno.EPERM) in note and "paced 1000 us" in note


@pytest.mark.parametrize("bad", [-1, 100])
def test_receive_thread_priority_is_bounded(bad: int) -> None:
    with pytest.raises(ValueError, match="ingest_rt_priority"):
        Settings(ingest_rt_priority=bad)
