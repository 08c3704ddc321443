"""RTP ingest: native C receiver (per-leg sockets and one shared port) vs asyncio.

Every receiver takes the same paced load in the same run, one after the other: one
sender process (``sip_bridge.bench.rtp_load``) with one UDP socket per leg, so every leg
has its own source port, sending G.711 20 ms packets on 127.0.0.1 either to one port
per leg or to one shared port. Receivers (``ingest_receivers``):

- ``native_per_leg`` / ``native_shared``: ``native.ingest.Ingest`` with one socket per
  leg, or one socket for all legs demultiplexed in C by source address; the receiver
  thread wakes whenever a socket is ready.
- ``native_per_leg_paced`` / ``native_shared_paced``: the same with paced wakeups
  (``--coalesce-us``, default 1000: at most ~1,000 wakeups/s, up to 1 ms more latency,
  taken only while the rate predicts >= 16 datagrams per sleep).
- ``native_*_uring`` / ``native_*_uring_paced``: the same four on the io_uring backend
  (native/src/ingest_uring.c: multishot recvmsg on every socket, one provided-buffer
  ring, every leg's datagrams reaped from one completion queue; paced: it waits for
  the datagrams expected in ``--coalesce-us`` or that long, whichever comes first). The
  plain names run the epoll backend (epoll + recvmmsg), so one run compares asyncio,
  epoll and io_uring on the same load. A receiver whose backend is refused is an error.
- ``bridge_shared*``: the bridge's own shared-port receive path (``ingest_bridge``): the
  ingest and media engine built as ``callshield bridge`` builds them with
  ``rtp_shared_port`` on, every sender registered as a SIP leg through
  ``MediaEngine.open_leg`` (no SIP), pulled by the engine's playout thread; same four
  variants (epoll / io_uring, paced or not); unpinned, so a pinned run skips them;
  ``--rt-priority`` is the bridge's ``CALLSHIELD_INGEST_RT_PRIORITY``.
- ``asyncio_per_leg`` (the baseline of DESIGN.md §3) / ``asyncio_shared`` (the
  like-for-like baseline of the shared port): ``DatagramProtocol`` per socket, or one
  protocol demultiplexing by a dict keyed by source address.

Per receiver: CPU µs per packet over a steady-state window (after ``--warmup``; native:
the receiver thread's own CPU clock; asyncio: the process's CPU clock; process CPU is
reported for both); ``background_cpu_share``, what else ran on the machine meanwhile
(all CPUs' busy time from /proc/stat less this process and the sender: a run with much
of it is disturbed); app loss (sent vs received per leg) and the kernel's ``Udp:
RcvbufErrors`` delta (/proc/net/snmp); native: wakeups, datagrams per recvmmsg, and the
C latency histograms (kernel receive timestamp -> the datagram inserted into its jitter
buffer, stamped after each insert, or after each run of one leg's datagrams on a shared
socket; 1 µs buckets below 1 ms; and recvmmsg returned -> the same: the issue's
"arrival stamped right after the syscall" -> in the buffer), and stream_lock_waits (the
receiver found a leg's mutex held by the pull). asyncio has no kernel timestamp: its
latency is the sender's send time (carried in the payload) -> the callback's append; on
loopback the kernel stamps a datagram inside the sender's sendto, so the two are close
to comparable. ``cpu_ratios`` names each
comparison as ``baseline/receiver`` (receiver-thread and process CPU).

``machine_floor``, the latency baseline of every receiver, measured beside it over the
same window (``stall_probe``: its own process, bare C batches of the paced receiver's
size on its grid, half a period off it, no I/O): what code of that shape reads on this
machine then. A receiver's p99.9 near it is the machine's tail, not the receiver's; the
goal stays judged on the receiver's own figure. Its ``wake_cpu_us`` (the row's
``floor_wake_cpu_us``) is the CPU one of its paced wakeups cost: a paced receiver pays
about that per wakeup on top of its datagrams (``wakeups_per_1k_pkts`` × it / 1000 per
packet), which on a virtual machine, where a halted vCPU's wakeup is charged to the woken
thread, can be a third of its CPU per packet.

``--pin on`` pins the sender to CPU 1 and the receiving thread to CPU 0 (native: the C
receiver thread, with the Python pull loop moved to CPU 1; asyncio: the event loop);
``--pin both`` runs everything unpinned and then pinned.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from sip_bridge.bench.ingest_bridge import BridgeSharedReceiver
from sip_bridge.bench.ingest_receivers import (
    AsyncioReceiver,
    NativeReceiver,
    Pinning,
    Receiver,
    Window,
)
from sip_bridge.bench.stall_probe import StallProbe, units_for

RECEIVERS = (
    "native_per_leg",
    "native_shared",
    "native_per_leg_paced",
    "native_shared_paced",
    "native_per_leg_uring",
    "native_shared_uring",
    "native_per_leg_uring_paced",
    "native_shared_uring_paced",
    # the kernel-receive floor of one socket per leg: the same receiver, every datagram
    # dropped once counted (no parse, source lock or insert); its ratio is the ceiling
    # any per-leg receiver can reach against asyncio on this machine
    "native_per_leg_uring_bare",
    "native_per_leg_uring_paced_bare",
    "bridge_shared",
    "bridge_shared_paced",
    "bridge_shared_uring",
    "bridge_shared_uring_paced",
    "asyncio_per_leg",
    "asyncio_shared",
)
BASELINES = ("asyncio_per_leg", "asyncio_shared")
GOALS = {"cpu_ratio_min": 4.0, "loss_at_40kpps": 0, "p99_9_us_max": 50.0}
SENDER_CPU, RECEIVER_CPU = 1, 0
DRAIN_MAX_S = 2.0  # after the sender stops: how long to wait for the last datagrams


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pps",
        type=int,
        nargs="+",
        default=[20_000],
        help="total packets/s offered; several values run one after another "
        "(default 20000 = 200 calls x 2 legs x 50 pps)",
    )
    parser.add_argument(
        "--streams",
        type=int,
        default=None,
        help="legs (sender sockets); default pps / 50, i.e. 20 ms G.711 legs",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measured send time")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured send time first")
    parser.add_argument(
        "--batch",
        type=int,
        default=16,
        help="native recvmmsg batch (default 16, the bridge's; each socket drains up to 128 "
        "datagrams per wakeup in batches of this size)",
    )
    parser.add_argument(
        "--coalesce-us",
        type=int,
        default=1000,
        help="wakeup pacing of the *_paced native runs (0: skip those runs)",
    )
    parser.add_argument(
        "--rt-priority",
        type=int,
        default=0,
        help="run the native receiver thread SCHED_FIFO at this priority (1..99; "
        "0: normal scheduling, the default)",
    )
    parser.add_argument(
        "--uring-setup",
        type=lambda s: int(s, 0),
        default=0,
        help="IORING_SETUP_* flags of the *_uring receivers' ring, e.g. 0x1100 "
        "(SINGLE_ISSUER|COOP_TASKRUN); 0: the default, 0x3000 (SINGLE_ISSUER|DEFER_TASKRUN)",
    )
    parser.add_argument(
        "--receivers",
        nargs="+",
        choices=list(RECEIVERS),
        default=list(RECEIVERS),
        help="which receivers to measure (default: all)",
    )
    parser.add_argument(
        "--pin",
        choices=["off", "on", "both"],
        default="off",
        help=f"pin the sender to CPU {SENDER_CPU} and the receiving thread to CPU "
        f"{RECEIVER_CPU} (both: unpinned, then pinned)",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    pin_modes = {"off": [False], "on": [True], "both": [False, True]}[args.pin]
    if args.pin != "off" and len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("--pin needs two CPUs")
    for pinned in pin_modes:
        for pps in args.pps:
            runs.append(_run_load(args, pps, pinned))
    return {
        "benchmark": "ingest",
        "sender": "python -m sip_bridge.bench.rtp_load: a separate process, one socket per "
        "leg (distinct source ports), socket.sendto paced in 1 ms slots",
        "goals": GOALS,
        "memory": memory_setup(),
        "table": [row for r in runs for row in _rows(r)],
        "runs": runs,
    }


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def memory_setup() -> dict[str, Any]:
    """What decides whether the receivers' memory is on huge pages, which moves their CPU
    per packet (docs/operations.md, "RTP receive pacing"): the host's THP mode (the
    bracketed word), whether the native receive state asks for them (native/src/hugemem.c,
    off with CALLSHIELD_NO_HUGEMEM), and GLIBC_TUNABLES (deploy/ sets
    glibc.malloc.hugetlb=1 for the bridge; a run without it does not measure that)."""
    try:
        with open(THP_ENABLED) as f:
            words = f.read().split()
        thp = next((w.strip("[]") for w in words if w.startswith("[")), None)
    except OSError:
        thp = None
    return {
        "thp_enabled": thp,
        "native_hugemem": not os.environ.get("CALLSHIELD_NO_HUGEMEM"),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
    }


def _run_load(args: argparse.Namespace, pps: int, pinned: bool) -> dict[str, Any]:
    streams = args.streams or max(1, pps // 50)
    payload = round(8000 * streams / pps)
    if payload % 20 or payload < 20:
        raise SystemExit(f"{pps} pps over {streams} streams is not a whole 2.5 ms ptime")
    pin = Pinning(RECEIVER_CPU, frozenset({SENDER_CPU})) if pinned else None
    result: dict[str, Any] = {
        "offered_pps": pps,
        "streams": streams,
        "ptime_ms": payload / 8,
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "pinned": f"sender CPU {SENDER_CPU}, receiving thread CPU {RECEIVER_CPU}"
        if pinned
        else False,
    }
    for name in args.receivers:
        paced = "_paced" in name
        if paced and not args.coalesce_us:
            continue
        shared = "_shared" in name
        rx: Receiver
        backend = "io_uring" if "_uring" in name else "epoll"
        if name.startswith("asyncio"):
            rx = AsyncioReceiver(streams, shared=shared, pin=pin)
        elif name.startswith("bridge"):
            if pinned:
                continue
            coalesce = args.coalesce_us if paced else 0
            rx = BridgeSharedReceiver(
                streams, coalesce_us=coalesce, backend=backend, rt_priority=args.rt_priority
            )
        else:
            coalesce = args.coalesce_us if paced else 0
            rx = NativeReceiver(
                streams,
                shared=shared,
                batch=args.batch,
                coalesce_us=coalesce,
                pin=pin,
                rt_priority=args.rt_priority,
                backend=backend,
                uring_setup=args.uring_setup,
                bare=name.endswith("_bare"),
            )
        result[name] = _measure(rx, pps, payload, args, SENDER_CPU if pinned else None)
    result["cpu_ratios"] = _ratios(result)
    return result


def _ratios(result: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """baseline/receiver CPU per packet (> 1: the receiver needs less CPU)."""
    out = {}
    for base in BASELINES:
        for name in RECEIVERS:
            if not name.startswith("asyncio") and base in result and name in result:
                b, n = result[base], result[name]
                out[f"{base}/{name}"] = {
                    "receiver": _ratio(b["cpu_us_per_packet"], n["cpu_us_per_packet"]),
                    "process": _ratio(
                        b["process_cpu_us_per_packet"], n["process_cpu_us_per_packet"]
                    ),
                }
    return out


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b > 0 else None


def _rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One compact row per receiver of a run."""
    rows = []
    for name in RECEIVERS:
        r = run.get(name)
        if r is None:
            continue
        lat = r["latency"]
        row: dict[str, Any] = {
            "pinned": bool(run["pinned"]),
            "pps": run["offered_pps"],
            "receiver": name,
            "cpu_us_per_pkt": round(r["cpu_us_per_packet"], 3),
            "process_cpu_us_per_pkt": round(r["process_cpu_us_per_packet"], 3),
        }
        for base in BASELINES:
            ratio = run["cpu_ratios"].get(f"{base}/{name}")
            row[f"x_vs_{base}"] = ratio["receiver"] if ratio else None
        row.update(
            app_loss=r["app_loss"],
            rcvbuf_errors=r["rcvbuf_errors_delta"],
            dgrams_per_recvmmsg=_round(r.get("datagrams_per_recvmmsg")),
            cqes_per_enter=_round(r.get("cqes_per_enter")),
            lock_waits=r.get("stream_lock_waits"),
            sched=r.get("sched"),
            proc_p99_9_us=_round(r["processing"]["p99.9"]) if "processing" in r else None,
            wakeups_per_1k_pkts=_round(r["wakeups"] * 1000 / max(1, r["received"]))
            if "wakeups" in r
            else None,
            p50_us=_round(lat.get("p50")),
            p99_us=_round(lat.get("p99")),
            p99_9_us=_round(lat.get("p99.9")),
            floor_p99_9_us=_round(r["machine_floor"].get("p99.9")),
            floor_wake_cpu_us=_round(r["machine_floor"].get("wake_cpu_us")),
            background_cpus=_round(r["background_cpu_share"]),
        )
        rows.append(row)
    return rows


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


# ---- measurement harness -----------------------------------------------------------------


def _measure(
    rx: Receiver, pps: int, payload: int, args: argparse.Namespace, sender_cpu: int | None
) -> dict[str, Any]:
    job = {
        "dests": rx.addresses(),
        "pps": pps,
        "seconds": args.warmup + args.seconds,
        "payload_bytes": payload,
        "cpu": sender_cpu,
    }
    period_us = args.coalesce_us or 1000
    probe = StallProbe(period_us, units_for(pps, period_us))
    sender = subprocess.Popen(
        [sys.executable, "-m", "sip_bridge.bench.rtp_load"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sender.stdin is not None and sender.stdout is not None
    try:
        sender.stdin.write(json.dumps(job) + "\n")
        sender.stdin.flush()
        ready = json.loads(sender.stdout.readline() or "{}")
        if "ready" not in ready:
            raise RuntimeError("load generator failed to start")
        rx.attach([(str(h), int(p)) for h, p in ready["ready"]])
        snmp0 = _udp_snmp()
        window = Window(time.monotonic() + args.warmup)
        probe.begin(window.mark_at, args.seconds)
        sender.stdin.write("go\n")
        sender.stdin.flush()
        result: dict[str, Any] = {}

        def done() -> bool:
            """The sender has finished and every datagram is in (or DRAIN_MAX_S passed)."""
            if not result:
                if sender.poll() is None:
                    return False
                assert sender.stdout is not None
                result.update(json.loads(sender.stdout.readline()), at=time.monotonic())
            sent_all: int = sum(result["sent"])
            waited: float = time.monotonic() - result["at"]
            return rx.received_total() >= sent_all or waited > DRAIN_MAX_S

        rx.run_until(done, window)
        steady = window.finish(rx)
        floor = probe.result(timeout=args.seconds + 30)
        snmp1 = _udp_snmp()
        load = result
        got = rx.received()
        out = rx.report()
    finally:
        rx.close()
        probe.close()
        if sender.poll() is None:
            sender.kill()
        sender.wait()
    sent = load["sent"]
    lost = [max(0, s - r) for s, r in zip(sent, got, strict=True)]
    send_s = (load["finished_ns"] - load["started_ns"]) / 1e9
    out.update(steady)
    out.update(
        sent=sum(sent),
        received=sum(got),
        sent_pps=sum(sent) / send_s,
        received_pps=sum(got) / send_s,
        app_loss=sum(lost),
        streams_with_loss=sum(1 for x in lost if x),
        rcvbuf_errors_delta=snmp1.get("RcvbufErrors", 0) - snmp0.get("RcvbufErrors", 0),
        udp_in_errors_delta=snmp1.get("InErrors", 0) - snmp0.get("InErrors", 0),
        sender_cpu_share=load["cpu_s"] / send_s,
        background_cpu_share=max(
            0.0,
            steady["system_cpu_share"]
            - steady["process_cpu_share"]
            - load["cpu_s"] / send_s
            - floor.get("cpu_s", 0.0) / max(args.seconds, 1e-9),
        ),
        machine_floor=floor,
        sender_late_slots=load["late_slots"],
        sender_errors=load["send_errors"],
    )
    return out


def _udp_snmp() -> dict[str, int]:
    """The kernel's Udp: counters from /proc/net/snmp (system-wide)."""
    try:
        with open("/proc/net/snmp") as f:
            rows = [line.split() for line in f if line.startswith("Udp:")]
    except OSError:
        return {}
    if len(rows) < 2:
        return {}
    return {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:], strict=False)}
