"""Source lock (RTP Bleed defence), driven directly through cffi in virtual time."""

from __future__ import annotations

from typing import Any

import pytest

from native import ffi, lib
from native.ingest_types import fill_addr

MS = 1_000_000
A = ("10.0.0.1", 4000)
B = ("10.0.0.2", 4000)
A_OTHER_PORT = ("10.0.0.1", 4002)

ACCEPTED = (lib.CS_SRC_ACCEPT, lib.CS_SRC_ACCEPT_LEARNED, lib.CS_SRC_ACCEPT_SSRC_SWITCH)


def _addr(host_port: tuple[str, int]) -> Any:
    addr = ffi.new("cs_srclock_addr *")
    fill_addr(addr, *host_port)
    return addr


class Lock:
    """A cs_srclock plus a tiny driver: check(addr, ssrc, seq, t_ms) -> outcome."""

    def __init__(self, probation: int = 2, quiet_ms: int = 80) -> None:
        cfg = ffi.new("cs_srclock_config *")
        lib.cs_srclock_default_config(cfg)
        cfg.probation = probation
        cfg.ssrc_quiet_ns = quiet_ms * MS
        self.c = ffi.new("cs_srclock *")
        lib.cs_srclock_init(self.c, cfg)

    def check(self, addr: tuple[str, int], ssrc: int, seq: int, t_ms: float) -> int:
        return int(lib.cs_srclock_check(self.c, _addr(addr), ssrc, seq & 0xFFFF, int(t_ms * MS)))

    def stream(
        self, addr: tuple[str, int], ssrc: int, seq0: int, n: int, t0_ms: float
    ) -> list[int]:
        return [self.check(addr, ssrc, seq0 + i, t0_ms + 20 * i) for i in range(n)]

    @property
    def counters(self) -> dict[str, int]:
        ct = self.c.counters
        return {name: int(getattr(ct, name)) for name, _ in ffi.typeof(ct).fields}


def test_defaults() -> None:
    cfg = ffi.new("cs_srclock_config *")
    lib.cs_srclock_default_config(cfg)
    assert cfg.probation == 2
    assert cfg.ssrc_quiet_ns == 80 * MS


def test_learns_after_probation_and_drops_probation_packets() -> None:
    lock = Lock(probation=3)
    out = lock.stream(A, 0x1111, 100, 5, 0)
    assert out == [
        lib.CS_SRC_DROP_PROBATION,
        lib.CS_SRC_DROP_PROBATION,
        lib.CS_SRC_ACCEPT_LEARNED,
        lib.CS_SRC_ACCEPT,
        lib.CS_SRC_ACCEPT,
    ]
    assert lock.c.state == lib.CS_SRCLOCK_LOCKED
    assert lock.c.ssrc == 0x1111
    assert lock.counters["probation_dropped"] == 2
    assert lock.counters["accepted"] == 3
    assert lock.counters["learned"] == 1


def test_probation_needs_consecutive_sequence_numbers() -> None:
    lock = Lock(probation=2)
    assert lock.check(A, 1, 10, 0) == lib.CS_SRC_DROP_PROBATION
    assert lock.check(A, 1, 12, 20) == lib.CS_SRC_DROP_PROBATION  # gap restarts probation
    assert lock.check(B, 1, 13, 40) == lib.CS_SRC_DROP_PROBATION  # other address restarts
    assert lock.check(A, 1, 14, 60) == lib.CS_SRC_DROP_PROBATION  # candidate is back to A
    assert lock.check(A, 1, 15, 80) == lib.CS_SRC_ACCEPT_LEARNED
    assert lock.counters["probation_dropped"] == 4


def test_probation_wraps_sequence_numbers() -> None:
    lock = Lock(probation=2)
    assert lock.stream(A, 7, 0xFFFF, 2, 0) == [
        lib.CS_SRC_DROP_PROBATION,
        lib.CS_SRC_ACCEPT_LEARNED,
    ]


def test_probation_one_locks_on_the_first_packet() -> None:
    lock = Lock(probation=1)
    assert lock.check(A, 7, 1, 0) == lib.CS_SRC_ACCEPT_LEARNED


def test_foreign_address_is_rejected_once_locked() -> None:
    lock = Lock()
    lock.stream(A, 0xAAAA, 1, 10, 0)
    # RTP Bleed: the attacker copies SSRC and in-window sequence numbers
    assert lock.check(B, 0xAAAA, 11, 200) == lib.CS_SRC_DROP_ADDRESS
    assert lock.check(A_OTHER_PORT, 0xAAAA, 11, 201) == lib.CS_SRC_DROP_ADDRESS
    for i in range(50):  # a long injected stream never gets learned
        assert lock.check(B, 0xBBBB, 1000 + i, 202 + i) == lib.CS_SRC_DROP_ADDRESS
    assert lock.check(A, 0xAAAA, 11, 260) == lib.CS_SRC_ACCEPT
    assert lock.counters["rejected_address"] == 52
    assert lock.c.state == lib.CS_SRCLOCK_LOCKED


def test_interleaved_ssrc_from_locked_address_is_rejected() -> None:
    lock = Lock(quiet_ms=80)
    lock.stream(A, 0xAAAA, 1, 5, 0)  # last accepted at t=80 ms
    t = 80.0
    for i in range(10):
        t += 10
        assert lock.check(A, 0xCCCC, 500 + i, t) == lib.CS_SRC_DROP_SSRC
        if i % 2 == 0:
            assert lock.check(A, 0xAAAA, 6 + i // 2, t + 1) == lib.CS_SRC_ACCEPT
            t += 1
    assert lock.counters["rejected_ssrc"] == 10
    assert lock.c.ssrc == 0xAAAA


def test_new_ssrc_after_quiet_time_is_accepted() -> None:
    lock = Lock(quiet_ms=80)
    lock.stream(A, 0xAAAA, 1, 5, 0)  # last at t=80 ms
    assert lock.check(A, 0xDDDD, 900, 80 + 79) == lib.CS_SRC_DROP_SSRC  # 79 ms quiet
    assert lock.check(A, 0xDDDD, 901, 80 + 80) == lib.CS_SRC_ACCEPT_SSRC_SWITCH
    assert lock.c.ssrc == 0xDDDD
    assert lock.check(A, 0xDDDD, 902, 180) == lib.CS_SRC_ACCEPT
    # the old SSRC is now the interloper
    assert lock.check(A, 0xAAAA, 6, 185) == lib.CS_SRC_DROP_SSRC
    assert lock.counters["ssrc_switches"] == 1


def test_rearm_keeps_old_source_until_new_one_passes_probation() -> None:
    lock = Lock(probation=3)
    lock.stream(A, 0xAAAA, 1, 5, 0)
    lib.cs_srclock_rearm(lock.c, 100 * MS)
    assert lock.c.state == lib.CS_SRCLOCK_REARMED
    # old source still flows while the new one is on probation
    assert lock.check(A, 0xAAAA, 6, 100) == lib.CS_SRC_ACCEPT
    assert lock.check(B, 0xBBBB, 50, 101) == lib.CS_SRC_DROP_PROBATION
    assert lock.check(A, 0xAAAA, 7, 120) == lib.CS_SRC_ACCEPT  # does not reset the candidate
    assert lock.check(B, 0xBBBB, 51, 121) == lib.CS_SRC_DROP_PROBATION
    assert lock.check(B, 0xBBBB, 52, 141) == lib.CS_SRC_ACCEPT_LEARNED
    assert lock.c.state == lib.CS_SRCLOCK_LOCKED
    assert lock.check(A, 0xAAAA, 8, 142) == lib.CS_SRC_DROP_ADDRESS
    assert lock.check(B, 0xBBBB, 53, 161) == lib.CS_SRC_ACCEPT
    c = lock.counters
    assert (c["rearms"], c["learned"], c["probation_dropped"]) == (1, 2, 2 + 2)


def test_rearm_to_same_address_new_ssrc() -> None:
    lock = Lock(probation=2)
    lock.stream(A, 0xAAAA, 1, 3, 0)
    lib.cs_srclock_rearm(lock.c, 50 * MS)
    assert lock.check(A, 0xEEEE, 1, 50) == lib.CS_SRC_DROP_PROBATION
    assert lock.check(A, 0xAAAA, 4, 51) == lib.CS_SRC_ACCEPT
    assert lock.check(A, 0xEEEE, 2, 52) == lib.CS_SRC_ACCEPT_LEARNED
    assert lock.c.ssrc == 0xEEEE


def test_expected_address_restricts_learning() -> None:
    lock = Lock(probation=2)
    lib.cs_srclock_expect(lock.c, _addr((A[0], 0)))  # port 0: any port on that host
    assert lock.stream(B, 1, 1, 3, 0) == [lib.CS_SRC_DROP_ADDRESS] * 3
    assert lock.stream(A_OTHER_PORT, 2, 1, 2, 100) == [
        lib.CS_SRC_DROP_PROBATION,
        lib.CS_SRC_ACCEPT_LEARNED,
    ]
    assert lock.counters["rejected_address"] == 3


def test_expected_address_with_port() -> None:
    lock = Lock(probation=1)
    lib.cs_srclock_expect(lock.c, _addr(A))
    assert lock.check(A_OTHER_PORT, 1, 1, 0) == lib.CS_SRC_DROP_ADDRESS
    assert lock.check(A, 1, 1, 1) == lib.CS_SRC_ACCEPT_LEARNED


@pytest.mark.parametrize("host", ["2001:db8::1", "::1"])
def test_ipv6_addresses_compare_as_bytes(host: str) -> None:
    lock = Lock(probation=1)
    assert lock.check((host, 5000), 9, 1, 0) == lib.CS_SRC_ACCEPT_LEARNED
    assert lock.check((host, 5000), 9, 2, 20) == lib.CS_SRC_ACCEPT
    assert lock.check(("2001:db8::2", 5000), 9, 3, 40) == lib.CS_SRC_DROP_ADDRESS


def test_every_packet_counted_exactly_once() -> None:
    lock = Lock(probation=2)
    outcomes = lock.stream(A, 1, 1, 20, 0)
    outcomes += lock.stream(B, 2, 1, 7, 5)
    outcomes += [lock.check(A, 3, 99, 200)]
    c = lock.counters
    dropped = c["probation_dropped"] + c["rejected_address"] + c["rejected_ssrc"]
    assert c["accepted"] + dropped == len(outcomes)
    assert sum(o in ACCEPTED for o in outcomes) == c["accepted"]
