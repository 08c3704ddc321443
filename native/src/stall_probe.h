/* The machine's own stall floor: the latency baseline of `callshield bench ingest`.
 *
 * A paced receiver's "recvmmsg returned -> inserted" latency is the time from a batch's
 * start to each datagram's insert. On a quiet core it is the work before the datagram;
 * its tail is whatever takes the CPU away mid-batch: the kernel's tick, other threads,
 * the hypervisor. The probe does the same thing with no I/O and no jitter buffer: it
 * sleeps to the next multiple of period_ns on CLOCK_MONOTONIC plus offset_ns (the
 * paced receiver's grid; the bench puts the probe half a period off it, so that the two
 * never wake together and compete for a CPU, and so that, like the receiver's batches,
 * the probe's are clear of the kernel's tick on that grid), runs `units` steps of fixed
 * CPU work of about unit_ns each, and records for every step the time since the batch
 * began, in the ingest's histogram layout. Run
 * beside a receiver over the same window, its p99.9 is what any code with that shape
 * would read on this machine at that time, so a receiver's tail can be told apart from
 * the machine's.
 *
 * It also measures what a paced wakeup costs here: the thread's CPU time from each
 * sleep's call to the start of the batch it wakes for (the syscall, the context switches
 * and, on a virtual machine, the idle vCPU's halt and wakeup, which the woken thread's
 * CPU clock is charged with). A paced receiver pays about that once per wakeup on top of
 * its datagrams: on the 2-vCPU KVM guest this was built on, 25-28 us (a bare C loop's
 * timed sleeps, and an eventfd woken from the other CPU, alike; 14 us when a SCHED_IDLE
 * spinner keeps the CPU from halting), i.e. ~0.7 us per datagram at 40 datagrams per
 * wakeup.
 */
#ifndef CS_STALL_PROBE_H
#define CS_STALL_PROBE_H

#include "ingest.h"

/* CDEF BEGIN */
typedef struct {
    int64_t start_ns;    /* CLOCK_MONOTONIC: the first batch is at or after this */
    int64_t end_ns;      /* no batch starts at or after this */
    int64_t period_ns;   /* one batch per multiple of this on CLOCK_MONOTONIC, */
    int64_t offset_ns;   /* plus this (0 <= offset < period) */
    int32_t units;       /* steps per batch (datagrams per paced wakeup) */
    int64_t unit_iters;  /* work per step (cs_stall_probe_calibrate) */
} cs_stall_probe_config;

typedef struct {
    int64_t cpu_ns;      /* the thread's CPU time over the whole run */
    int64_t batches;     /* batches run: one per wakeup */
    int64_t wake_cpu_ns; /* the thread's CPU time from each sleep's call to its batch's
                          * start, summed: what the paced sleeps and wakeups cost */
} cs_stall_probe_stats;

/* Iterations of the probe's work step that take about unit_ns on this CPU (> 0). */
int64_t cs_stall_probe_calibrate(int64_t unit_ns);

/* Run the probe on the calling thread until cfg->end_ns; samples go into *out and the
 * totals into *stats (both zeroed first). Returns 0, or -1 on a bad configuration. */
int cs_stall_probe_run(const cs_stall_probe_config *cfg, cs_ingest_latency *out,
                       cs_stall_probe_stats *stats);
/* CDEF END */

#endif
