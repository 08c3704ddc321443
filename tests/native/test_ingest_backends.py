"""Both receive backends (io_uring and epoll) over real UDP on 127.0.0.1: every datagram
of many legs (per-leg sockets and a shared socket) arrives, in order; legs come and go
while the receiver runs and a removed leg's port is free at once; a two-buffer io_uring
ring runs dry (ENOBUFS) without losing a datagram; a refused io_uring falls back to
epoll and says why. The io_uring cases assert that io_uring was actually chosen and fail
with the host's reason when it was not (CI must have it: kernel >= 6.1, not disabled by
kernel.io_uring_disabled or a seccomp profile)."""

from __future__ import annotations

import errno
import logging
import socket

import pytest
from rtp_call import rtp_packet, wait_until

from native import lib
from native.ingest import Ingest

BACKENDS = ["epoll", "io_uring"]
PAYLOAD = b"\xff" * 160


def _open(backend: str, max_streams: int, **kw: int | bool) -> Ingest:
    ing = Ingest(max_streams, backend=backend, **kw)  # type: ignore[arg-type]
    name, reason = ing.backend()
    if name != backend:
        ing.close()
        pytest.fail(f"ingest backend {backend} not chosen on this host: {reason}")
    return ing


def _send(tx: socket.socket, dest: tuple[str, int], seqs: range, ssrc: int) -> None:
    for seq in seqs:
        tx.sendto(rtp_packet(seq, seq * 160, ssrc, PAYLOAD), dest)


def _assert_in_order(ing: Ingest, sid: int, packets: int) -> None:
    c = ing.stream_counters(sid)
    assert c["datagrams"] == packets
    # the first is the source lock's probation; every other one in order, none lost
    assert c["outcomes"][lib.CS_PKT_IN_ORDER] == packets - 1
    assert ing.stream_stats(sid)["packets_lost"] == 0


def test_auto_chooses_io_uring() -> None:
    with Ingest(8) as ing:
        name, reason = ing.backend()
        assert name == "io_uring", f"io_uring not chosen on this host: {reason}"
        assert "multishot recvmsg" in reason


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_legs_arrive_complete_and_in_order(backend: str) -> None:
    legs, shared_legs, packets = 48, 8, 40
    with _open(backend, legs + shared_legs) as ing:
        ids = [ing.add_stream(0) for _ in range(legs)]
        kid = ing.add_socket(0)
        txs = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(legs + shared_legs)]
        for tx in txs:
            tx.bind(("127.0.0.1", 0))
        shared = [ing.add_stream_shared(kid, expected_source=tx.getsockname()) for tx in txs[legs:]]
        for burst in range(0, packets, 10):  # interleaved legs, bursts of 10 per leg
            for i, sid in enumerate(ids):
                _send(txs[i], ing.local_address(sid), range(burst, burst + 10), 0x100 + i)
            for j in range(shared_legs):
                _send(txs[legs + j], ing.socket_address(kid), range(burst, burst + 10), 0x200 + j)
        total = (legs + shared_legs) * packets
        wait_until(lambda: ing.counters()["datagrams"] >= total, 5.0)
        for sid in ids + shared:
            _assert_in_order(ing, sid, packets)
        g = ing.counters()
        assert g["datagrams"] == total
        assert g["no_timestamp"] == 0  # kernel receive stamps on both backends
        assert g["unmatched"] == 0
        if backend == "io_uring":
            assert g["uring_cqes"] >= total and g["uring_arm_errors"] == 0
        else:
            assert g["uring_enters"] == 0
        for tx in txs:
            tx.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_legs_added_and_removed_while_running(backend: str) -> None:
    """Rounds of 10 packets to every live leg; between rounds the three oldest legs are
    removed (their ports free at once: one is reused) and three new ones added."""
    with _open(backend, 16) as ing:
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sent: dict[int, int] = {ing.add_stream(0): 0 for _ in range(8)}  # sid -> packets
        for round_ in range(5):
            for sid in sent:
                _send(tx, ing.local_address(sid), range(sent[sid], sent[sid] + 10), sid)
                sent[sid] += 10
            wait_until(
                lambda: all(ing.stream_counters(s)["datagrams"] == n for s, n in sent.items())
            )
            for sid, n in sent.items():
                _assert_in_order(ing, sid, n)
            gone = list(sent)[:3]
            ports = [ing.local_address(sid)[1] for sid in gone]
            for sid in gone:
                ing.remove_stream(sid)
                del sent[sid]
            for port in ports:  # the receiver let go of the socket before remove returned
                probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                probe.bind(("127.0.0.1", port))
                probe.close()
            sent[ing.add_stream(ports[round_ % 3])] = 0
            sent.update({ing.add_stream(0): 0 for _ in range(2)})
        assert ing.counters()["recv_errors"] == 0
        tx.close()


def test_tiny_buffer_ring_runs_dry_and_loses_nothing() -> None:
    legs, burst = 8, 100
    with _open("io_uring", legs, uring_buffers=2) as ing:
        ids = [ing.add_stream(0) for _ in range(legs)]
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i, sid in enumerate(ids):
            _send(tx, ing.local_address(sid), range(burst), 0x400 + i)
        wait_until(lambda: ing.counters()["datagrams"] >= legs * burst, 5.0)
        g = ing.counters()
        assert g["uring_enobufs"] > 0
        assert g["uring_rearms"] >= g["uring_enobufs"]
        for sid in ids:
            _assert_in_order(ing, sid, burst)
        tx.close()


def test_refused_io_uring_falls_back_to_epoll(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="native.ingest"):
        ing = Ingest(8, backend="io_uring", uring_refuse=errno.EPERM)
    with ing:
        name, reason = ing.backend()
        assert name == "epoll"
        assert "refused by the configuration" in reason
        warned = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert warned and "epoll" in warned[0].getMessage()
        sid = ing.add_stream(0)
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        _send(tx, ing.local_address(sid), range(10), 0x500)
        wait_until(lambda: ing.stream_counters(sid)["datagrams"] == 10)
        _assert_in_order(ing, sid, 10)
        assert ing.counters()["uring_enters"] == 0
        tx.close()
    with pytest.raises(ValueError, match="backend must be one of"):
        Ingest(8, backend="kqueue")


@pytest.mark.parametrize("backend", BACKENDS)
def test_discard_counts_every_datagram_and_inserts_none(backend: str) -> None:
    """The kernel-receive floor of ``bench ingest`` (its *_bare receivers): per-leg and
    shared sockets read as usual, each datagram counted (per leg, per socket and in
    total, bytes too) and dropped: nothing parsed, locked, inserted or timed."""
    legs, packets = 6, 25
    with _open(backend, legs + 1, discard=True) as ing:
        ids = [ing.add_stream(0) for _ in range(legs)]
        kid = ing.add_socket(0)
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx.bind(("127.0.0.1", 0))
        shared = ing.add_stream_shared(kid, expected_source=tx.getsockname())
        for i, sid in enumerate(ids):
            _send(tx, ing.local_address(sid), range(packets), 0x100 + i)
        _send(tx, ing.socket_address(kid), range(packets), 0x200)
        total = (legs + 1) * packets
        wait_until(lambda: ing.counters()["datagrams"] >= total, 5.0)
        g = ing.counters()
        assert (g["datagrams"], g["bytes"]) == (total, total * (12 + len(PAYLOAD)))
        assert g["inserted"] == 0 and sum(g["parse_errors"].values()) == 0
        assert ing.latency().count == ing.processing().count == 0
        for sid in ids:
            c = ing.stream_counters(sid)
            assert c["datagrams"] == packets and c["inserted"] == 0 and sum(c["outcomes"]) == 0
        # the shared socket's datagrams are its own, no leg's: nothing was demultiplexed
        assert ing.stream_counters(shared)["datagrams"] == 0
        assert ing.socket_counters(kid)["datagrams"] == packets
        assert g["unmatched"] == 0
        tx.close()
