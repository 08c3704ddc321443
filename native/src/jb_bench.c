/* Timed trace replay for the jitter-buffer benchmark (see jb_bench.h). */
#include "jb_bench.h"

#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define CS_BENCH_TSC 1
#endif

static inline int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + (int64_t)ts.tv_nsec;
}

/* The per-op timer: the TSC where there is one (about half of clock_gettime's cost, so
 * less of the timer in each ~100 ns figure), converted to ns by calibrate(). */
static inline int64_t ticks(void)
{
#ifdef CS_BENCH_TSC
    return (int64_t)__rdtsc();
#else
    return mono_ns();
#endif
}

typedef struct {
    int64_t mono0, ticks0;
} clock_pair;

static clock_pair pair_now(void)
{
    clock_pair p;
    p.mono0 = mono_ns();
    p.ticks0 = ticks();
    return p;
}

/* ns per tick over [start, now] (1.0 without a TSC). */
static double calibrate(clock_pair start)
{
    const int64_t t = ticks(), m = mono_ns();
    if (t <= start.ticks0 || m <= start.mono0)
        return 1.0;
    return (double)(m - start.mono0) / (double)(t - start.ticks0);
}

static void to_ns(int64_t *v, size_t n, double scale)
{
    for (size_t i = 0; v && i < n; i++)
        v[i] = (int64_t)((double)v[i] * scale + 0.5);
}

size_t cs_jb_bench_replay(cs_jb *jb, const uint8_t *data, const uint64_t *offsets,
                          const uint32_t *lengths, const int64_t *arrival_ns, size_t n_packets,
                          const int64_t *pull_ns, size_t n_pulls, int16_t *pcm,
                          int64_t *insert_cost_ns, int8_t *outcomes, int64_t *pull_cost_ns,
                          uint8_t *flags)
{
    cs_frame_info info;
    size_t k = 0;
    const int timed = insert_cost_ns && pull_cost_ns;
    const clock_pair start = pair_now();
    for (size_t j = 0; j < n_pulls; j++) {
        const int64_t t = pull_ns[j];
        while (k < n_packets && arrival_ns[k] <= t) {
            if (timed) {
                const int64_t t0 = ticks();
                const int r = cs_jb_insert_datagram(jb, data + offsets[k], lengths[k], arrival_ns[k]);
                const int64_t t1 = ticks();
                insert_cost_ns[k] = t1 - t0;
                outcomes[k] = (int8_t)r;
            } else {
                outcomes[k] = (int8_t)cs_jb_insert_datagram(jb, data + offsets[k], lengths[k],
                                                            arrival_ns[k]);
            }
            k++;
        }
        if (timed) {
            const int64_t t0 = ticks();
            const int f = cs_jb_pull(jb, t, pcm, &info);
            const int64_t t1 = ticks();
            pull_cost_ns[j] = t1 - t0;
            flags[j] = (uint8_t)f;
        } else {
            flags[j] = (uint8_t)cs_jb_pull(jb, t, pcm, &info);
        }
    }
    if (timed) {
        const double scale = calibrate(start);
        to_ns(insert_cost_ns, k, scale);
        to_ns(pull_cost_ns, n_pulls, scale);
    }
    return k;
}

void cs_bench_clock_overhead(int64_t *out, size_t n)
{
    const clock_pair start = pair_now();
    for (size_t i = 0; i < n; i++) {
        const int64_t t0 = ticks();
        const int64_t t1 = ticks();
        out[i] = t1 - t0;
    }
    to_ns(out, n, calibrate(start));
}
