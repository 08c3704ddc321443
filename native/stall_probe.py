"""The machine's stall floor (native/src/stall_probe.h): paced batches of fixed CPU work
with no I/O, each step's time since its batch began recorded in the ingest's latency
histogram layout, the baseline ``callshield bench ingest`` measures beside each receiver."""

from __future__ import annotations

from dataclasses import dataclass

from native import ffi, lib
from native.ingest_types import LatencyHistogram, histogram_of


@dataclass(frozen=True, slots=True)
class ProbeResult:
    histogram: LatencyHistogram  # ns since the batch began, one sample per step
    cpu_ns: int  # the probe thread's own CPU time
    unit_iters: int  # work per step, as calibrated
    batches: int  # batches run, one per wakeup
    wake_cpu_ns: int  # its CPU time from each sleep's call to its batch's start, summed

    @property
    def wake_cpu_us(self) -> float | None:
        """CPU µs one paced wakeup costs this thread (None: no batch ran)."""
        return self.wake_cpu_ns / self.batches / 1e3 if self.batches else None


def calibrate(unit_ns: int) -> int:
    """Iterations of the probe's work step that take about ``unit_ns`` here."""
    return int(lib.cs_stall_probe_calibrate(unit_ns))


def run(
    start_ns: int, end_ns: int, period_ns: int, units: int, unit_ns: int, offset_ns: int = 0
) -> ProbeResult:
    """Probe this thread from ``start_ns`` to ``end_ns`` (``time.monotonic_ns()`` clock):
    a batch of ``units`` steps of ~``unit_ns`` at each multiple of ``period_ns`` plus
    ``offset_ns``. Blocks (the GIL is released) until ``end_ns``."""
    iters = calibrate(unit_ns)
    cfg = ffi.new("cs_stall_probe_config *")
    cfg.start_ns, cfg.end_ns, cfg.period_ns = start_ns, end_ns, period_ns
    cfg.offset_ns = offset_ns
    cfg.units, cfg.unit_iters = units, iters
    out = ffi.new("cs_ingest_latency *")
    stats = ffi.new("cs_stall_probe_stats *")
    if lib.cs_stall_probe_run(cfg, out, stats) < 0:
        raise ValueError(
            f"bad stall probe settings: period {period_ns} ns, offset {offset_ns} ns, "
            f"{units} units, {start_ns}..{end_ns}"
        )
    return ProbeResult(
        histogram_of(out), int(stats.cpu_ns), iters, int(stats.batches), int(stats.wake_cpu_ns)
    )
