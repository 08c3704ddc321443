"""``callshield bench ingest`` at a small load: every receiver runs, counts every packet
the sender sent, and the report names its comparisons. No timing assertions (DESIGN.md
§10): CPU and latency figures are only checked for presence."""

from __future__ import annotations

import argparse
import os
from typing import Any

import pytest

from sip_bridge.bench import ingest

EPOLL = ("native_per_leg", "native_shared", "native_per_leg_paced", "native_shared_paced")
URING = tuple(
    name.replace("native_per_leg", "native_per_leg_uring").replace(
        "native_shared", "native_shared_uring"
    )
    for name in EPOLL
)
NATIVE = EPOLL + URING
BRIDGE = (
    "bridge_shared",
    "bridge_shared_paced",
    "bridge_shared_uring",
    "bridge_shared_uring_paced",
)
BARE = ("native_per_leg_uring_bare", "native_per_leg_uring_paced_bare")


def _args(**over: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    ingest.add_arguments(parser)
    args = parser.parse_args(
        ["--pps", "1000", "--streams", "20", "--seconds", "0.4", "--warmup", "0.2"]
    )
    for key, value in over.items():
        setattr(args, key, value)
    return args


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return ingest.run(_args())


def test_every_receiver_gets_every_packet(result: dict[str, Any]) -> None:
    (run,) = result["runs"]
    assert (run["offered_pps"], run["streams"], run["ptime_ms"]) == (1000, 20, 20.0)
    for name in ingest.RECEIVERS:
        r = run[name]
        assert r["sent"] > 0
        assert r["received"] == r["sent"], name
        assert r["app_loss"] == 0
        assert r["unmatched"] == 0
        assert r["cpu_us_per_packet"] > 0
    for name in NATIVE + BRIDGE:
        r = run[name]
        assert r["latency"]["n"] == r["received"] - 20  # one probation packet per leg
    for name in BARE:  # the per-leg kernel floor: every datagram counted, none inserted
        r = run[name]
        assert "dropped" in r["receiver"] and "io_uring" in r["backend"], r["receiver"]
        assert r["latency"]["n"] == r["processing"]["n"] == 0
        assert r["latency"]["p99.9"] is None and r["processing"]["mean"] is None
        assert run["cpu_ratios"][f"asyncio_per_leg/{name}"]["receiver"] > 0
        assert r["receiver"].endswith(
            f"coalesce_us={1000 if 'paced' in name else 0}; CPU = the receiver thread's clock"
        )
    for name in BRIDGE:  # the bridge's media engine, every leg on its one shared port
        r = run[name]
        assert r["receiver"].startswith("bridge: sip_bridge.media_setup"), r["receiver"]
        assert (r["shared_fallbacks"], r["shared_socket_datagrams"]) == (0, r["received"])
        assert ("uring" in name) == r["backend"].startswith("io_uring"), r["backend"]
    for name in EPOLL:
        assert run[name]["datagrams_per_recvmmsg"] >= 1.0
        assert run[name]["cqes_per_enter"] is None
    for name in URING:  # the io_uring backend was the one measured
        assert "multishot recvmsg" in run[name]["backend"], run[name]["backend"]
        assert run[name]["cqes_per_enter"] >= 1.0


def test_every_receiver_has_the_machine_floor_beside_it(result: dict[str, Any]) -> None:
    """The stall probe ran in its own process over each receiver's window: bare batches of
    the paced receiver's size (1 datagram per 1 ms wakeup at 1,000 pps), half a period off
    its grid, and its p99.9 is in the table row."""
    (run,) = result["runs"]
    for name in ingest.RECEIVERS:
        floor = run[name]["machine_floor"]
        assert "error" not in floor, (name, floor)
        assert (floor["period_us"], floor["offset_us"], floor["units"]) == (1000, 500, 1)
        assert floor["n"] > 0 and floor["unit_iters"] > 0 and floor["cpu_s"] > 0
        assert floor["p50"] <= floor["p99.9"] <= max(floor["max"], floor["p99.9"])
        row = next(r for r in result["table"] if r["receiver"] == name)
        assert row["floor_p99_9_us"] == round(floor["p99.9"], 2)
        # what one of its paced wakeups cost, per batch
        assert floor["batches"] > 0 and floor["wake_cpu_us"] > 0
        assert row["floor_wake_cpu_us"] == round(floor["wake_cpu_us"], 2)


def test_report_names_each_comparison(result: dict[str, Any]) -> None:
    (run,) = result["runs"]
    assert set(run["cpu_ratios"]) == {
        f"{b}/{n}" for b in ingest.BASELINES for n in NATIVE + BRIDGE + BARE
    }
    assert {row["receiver"] for row in result["table"]} == set(ingest.RECEIVERS)
    row = next(r for r in result["table"] if r["receiver"] == "native_shared")
    assert (
        row["x_vs_asyncio_per_leg"]
        == run["cpu_ratios"]["asyncio_per_leg/native_shared"]["receiver"]
    )
    assert result["goals"] == ingest.GOALS


def test_report_says_what_puts_its_memory_on_huge_pages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    monkeypatch.delenv("CALLSHIELD_NO_HUGEMEM", raising=False)
    mem = ingest.memory_setup()
    assert mem["glibc_tunables"] == "glibc.malloc.hugetlb=1"
    assert mem["native_hugemem"] is True
    if os.path.exists(ingest.THP_ENABLED):
        assert mem["thp_enabled"] in {"always", "madvise", "never"}
    monkeypatch.delenv("GLIBC_TUNABLES")
    monkeypatch.setenv("CALLSHIELD_NO_HUGEMEM", "1")
    mem = ingest.memory_setup()
    assert (mem["glibc_tunables"], mem["native_hugemem"]) == (None, False)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs")
def test_pinned_run_restores_affinity() -> None:
    before = os.sched_getaffinity(0)
    out = ingest.run(_args(pin="on", receivers=["native_shared", "asyncio_shared"]))
    (run,) = out["runs"]
    assert run["pinned"]
    assert run["native_shared"]["received"] == run["native_shared"]["sent"]
    assert os.sched_getaffinity(0) == before


def test_rt_priority_reaches_the_native_receiver(result: dict[str, Any]) -> None:
    assert result["runs"][0]["native_per_leg"]["sched"] == "normal"
    out = ingest.run(_args(rt_priority=5, receivers=["native_per_leg"]))
    r = out["runs"][0]["native_per_leg"]
    assert r["received"] == r["sent"]
    # granted with CAP_SYS_NICE (root here); elsewhere refused, counted, and run normally
    assert r["sched"] == "SCHED_FIFO 5" or r["sched"].startswith("normal (SCHED_FIFO 5 refused")
    assert out["table"][0]["sched"] == r["sched"]
    assert isinstance(r["stream_lock_waits"], int)
