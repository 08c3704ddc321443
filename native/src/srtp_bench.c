/* Timed per-packet replay for `callshield bench srtp` (see srtp_rx.h). Allocates
 * nothing; every array is the caller's. */
#include "rtp.h"
#include "srtp_rx.h"

#include <string.h>
#include <time.h>

static inline int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + (int64_t)ts.tv_nsec;
}

size_t cs_srtp_bench_replay(cs_srtp *ctx, const uint8_t *data, const uint64_t *offsets,
                            const uint32_t *lengths, size_t n, uint8_t *scratch,
                            size_t scratch_len, int64_t *cost_ns, int8_t *results)
{
    size_t ok = 0;
    cs_rtp_header h;
    for (size_t i = 0; i < n; i++) {
        size_t len = lengths[i];
        if (len > scratch_len) {
            cost_ns[i] = 0;
            results[i] = -1;
            continue;
        }
        memcpy(scratch, data + offsets[i], len); /* untimed: the ingest works in place */
        const int64_t t0 = mono_ns();
        int rc = ctx ? cs_srtp_unprotect(ctx, scratch, &len) : CS_SRTP_OK;
        if (rc == CS_SRTP_OK)
            rc = cs_rtp_parse(scratch, len, &h) == CS_RTP_OK ? CS_SRTP_OK : -2;
        const int64_t t1 = mono_ns();
        cost_ns[i] = t1 - t0;
        results[i] = (int8_t)rc;
        ok += rc == CS_SRTP_OK;
    }
    return ok;
}
