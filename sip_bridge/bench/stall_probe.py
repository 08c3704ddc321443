"""The machine's stall floor beside each ``callshield bench ingest`` receiver: the latency
baseline measured in the same run (native/src/stall_probe.h).

A paced receiver's "recvmmsg returned -> in the buffer" tail is set by whatever takes
its CPU away mid-batch. The probe, in its own process (so it adds nothing to the
receiver's or the bench's CPU figures), does the same shape of work with no I/O: at each
multiple of the pacing period on CLOCK_MONOTONIC, half a period off the receiver's
wakeups (the two never compete for a CPU at a wakeup), it runs as many ~400 ns steps as the
offered load puts datagrams in a paced wakeup, recording each step's time since the
batch began. Over the receiver's steady-state window, its p99.9 is what code of that
shape reads on this machine at that moment: where a receiver's p99.9 sits near it, the
tail is the machine's, not the receiver's.

It also reports ``wake_cpu_us``: the probe thread's CPU time per paced wakeup, from the
sleep's call to its batch's start (syscall, context switches and, on a virtual machine,
the halted vCPU's wakeup, which the woken thread is charged with). A paced receiver pays
about that per wakeup besides its datagrams, so it tells what pacing costs per packet on
this machine (wakeups per packet × this).

``python -m sip_bridge.bench.stall_probe`` reads one JSON job on stdin and prints one
JSON summary on stdout (``StallProbe`` runs it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

UNIT_NS = 400  # per step: the paced receivers' processing p50 is ~8 µs at ~40 datagrams
DEFINITION = (
    "bare C batches, half a period off the paced receiver's grid, no I/O: batch start -> "
    "each step done"
)


def units_for(pps: int, period_us: int) -> int:
    """Steps per batch: the datagrams a paced wakeup takes at ``pps``."""
    return max(1, round(pps * period_us / 1e6))


class StallProbe:
    """The probe process: started early (its imports overlap the sender's start), then
    ``begin`` gives it its window of ``time.monotonic()``."""

    def __init__(self, period_us: int, units: int) -> None:
        self.period_us, self.units = period_us, units
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sip_bridge.bench.stall_probe"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def begin(self, start_s: float, seconds: float) -> None:
        """Probe [start_s, start_s + seconds)."""
        job = {
            "start_ns": int(start_s * 1e9),
            "end_ns": int((start_s + seconds) * 1e9),
            "period_ns": self.period_us * 1000,
            "offset_ns": self.period_us * 500,  # half a period off the receiver's wakeups
            "units": self.units,
            "unit_ns": UNIT_NS,
        }
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()  # communicate() closes it

    def result(self, timeout: float) -> dict[str, Any]:
        """The probe's summary (waits for it to end); an ``error`` entry if it failed."""
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return {"error": f"the stall probe did not finish in {timeout:.0f} s"}
        if self.proc.returncode != 0 or not out.strip():
            return {"error": f"the stall probe failed (exit {self.proc.returncode})"}
        summary: dict[str, Any] = json.loads(out)
        return summary

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def main() -> int:
    from native import stall_probe
    from sip_bridge.bench.ingest_receivers import histogram_summary

    line = sys.stdin.readline()  # after the imports: the window may start soon after
    if not line:
        return 0  # closed before a job: the bench gave up on this receiver
    job = json.loads(line)
    r = stall_probe.run(
        job["start_ns"], job["end_ns"], job["period_ns"], job["units"], job["unit_ns"],
        job["offset_ns"],
    )  # fmt: skip
    out = histogram_summary(r.histogram, DEFINITION)
    out.update(
        period_us=job["period_ns"] / 1000,
        offset_us=job["offset_ns"] / 1000,
        units=job["units"],
        unit_ns=job["unit_ns"],
        unit_iters=r.unit_iters,
        cpu_s=r.cpu_ns / 1e9,
        batches=r.batches,
        wake_cpu_us=r.wake_cpu_us,  # CPU per paced wakeup, the sleep's own cost
    )
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
