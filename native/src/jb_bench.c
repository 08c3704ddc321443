/* Timed trace replay for the jitter-buffer benchmark (see jb_bench.h). */
#include "jb_bench.h"

#include <time.h>

static inline int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + (int64_t)ts.tv_nsec;
}

size_t cs_jb_bench_replay(cs_jb *jb, const uint8_t *data, const uint64_t *offsets,
                          const uint32_t *lengths, const int64_t *arrival_ns, size_t n_packets,
                          const int64_t *pull_ns, size_t n_pulls, int16_t *pcm,
                          int64_t *insert_cost_ns, int8_t *outcomes, int64_t *pull_cost_ns,
                          uint8_t *flags)
{
    cs_frame_info info;
    size_t k = 0;
    for (size_t j = 0; j < n_pulls; j++) {
        const int64_t t = pull_ns[j];
        while (k < n_packets && arrival_ns[k] <= t) {
            const int64_t t0 = mono_ns();
            const int r = cs_jb_insert_datagram(jb, data + offsets[k], lengths[k], arrival_ns[k]);
            const int64_t t1 = mono_ns();
            insert_cost_ns[k] = t1 - t0;
            outcomes[k] = (int8_t)r;
            k++;
        }
        const int64_t t0 = mono_ns();
        const int f = cs_jb_pull(jb, t, pcm, &info);
        const int64_t t1 = mono_ns();
        pull_cost_ns[j] = t1 - t0;
        flags[j] = (uint8_t)f;
    }
    return k;
}

void cs_bench_clock_overhead(int64_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const int64_t t0 = mono_ns();
        const int64_t t1 = mono_ns();
        out[i] = t1 - t0;
    }
}
