/* The stall probe (stall_probe.h): paced batches of fixed CPU work, each step's time
 * since its batch began recorded like the ingest's processing latency. */
#define _GNU_SOURCE
#include "stall_probe.h"

#include "ingest_priv.h"

#include <errno.h>
#include <string.h>
#include <time.h>

/* A dependent chain the compiler cannot fold or vectorise: ~1 multiply-add per step. */
static uint64_t work(uint64_t x, int64_t iters) {
    for (int64_t i = 0; i < iters; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

static volatile uint64_t sink;

int64_t cs_stall_probe_calibrate(int64_t unit_ns) {
    if (unit_ns <= 0)
        return 1;
    const int64_t trial = 1 << 20;
    int64_t best = INT64_MAX;
    for (int rep = 0; rep < 5; rep++) { /* the fastest of five: a stall only slows one */
        int64_t t0 = rx_clock_ns(CLOCK_MONOTONIC);
        sink = work(sink, trial);
        int64_t dt = rx_clock_ns(CLOCK_MONOTONIC) - t0;
        if (dt < best)
            best = dt;
    }
    if (best <= 0)
        best = 1;
    int64_t iters = (int64_t)((double)trial * (double)unit_ns / (double)best);
    return iters > 0 ? iters : 1;
}

int cs_stall_probe_run(const cs_stall_probe_config *cfg, cs_ingest_latency *out,
                       cs_stall_probe_stats *stats) {
    if (!cfg || !out || !stats || cfg->period_ns <= 0 || cfg->units <= 0 ||
        cfg->unit_iters <= 0 || cfg->end_ns < cfg->start_ns || cfg->offset_ns < 0 ||
        cfg->offset_ns >= cfg->period_ns)
        return -1;
    memset(out, 0, sizeof *out);
    memset(stats, 0, sizeof *stats);
    int64_t cpu0 = rx_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    const int64_t p = cfg->period_ns, off = cfg->offset_ns;
    /* the first grid point (k * p + off) at or after max(start, now): one started late
     * does not catch up in a burst */
    int64_t now = rx_clock_ns(CLOCK_MONOTONIC);
    int64_t from = cfg->start_ns > now ? cfg->start_ns : now;
    int64_t next = (from - off + p - 1) / p * p + off;
    uint64_t x = sink;
    while (next < cfg->end_ns) {
        struct timespec at = {.tv_sec = next / 1000000000, .tv_nsec = next % 1000000000};
        int64_t asleep = rx_clock_ns(CLOCK_THREAD_CPUTIME_ID);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR) {
        }
        stats->wake_cpu_ns += rx_clock_ns(CLOCK_THREAD_CPUTIME_ID) - asleep;
        stats->batches++;
        int64_t t0 = rx_clock_ns(CLOCK_MONOTONIC);
        for (int32_t u = 0; u < cfg->units; u++) {
            x = work(x, cfg->unit_iters);
            cs_latency_record(out, rx_clock_ns(CLOCK_MONOTONIC) - t0);
        }
        /* the next multiple after this batch (an overrun skips the grid points it covered,
         * as the paced receiver's sleep does) */
        next = ((rx_clock_ns(CLOCK_MONOTONIC) - off) / p + 1) * p + off;
    }
    sink = x;
    stats->cpu_ns = rx_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    return 0;
}
