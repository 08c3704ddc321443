/* Target delay from relative arrival delay, after WebRTC NetEQ's current design:
 * each packet's delay is measured against the fastest packet of the last two seconds
 * (so clock drift does not inflate it), the maximum per 500 ms goes into a histogram
 * with exponential forgetting, and the target is its 95th percentile plus one frame. */
#include <string.h>

#include "jb_parts.h"

#define WINDOW_NS 2000000000LL
#define INTERVAL_NS 500000000LL
#define FORGET 0.983
#define QUANTILE 0.95
#define FRAME_MS 20u

void cs_delay_init(cs_delay_est *d, uint32_t start_ms, uint32_t min_ms, uint32_t max_ms) {
    memset(d, 0, sizeof *d);
    d->min_ms = min_ms;
    d->max_ms = max_ms < min_ms ? min_ms : max_ms;
    d->target_ms = start_ms < d->min_ms ? d->min_ms : start_ms > d->max_ms ? d->max_ms : start_ms;
    d->interval_start_ns = -1;
    d->scale = 1.0;
}

void cs_delay_rebase(cs_delay_est *d) {
    d->hist_len = 0;
    d->hist_head = 0;
    d->interval_start_ns = -1;
    d->interval_max_ns = 0;
}

CS_HOT static void update_target(cs_delay_est *d, int64_t max_rel_ns) {
    uint32_t b = (uint32_t)(max_rel_ns / (CS_DELAY_BUCKET_MS * 1000000LL));
    if (b >= CS_DELAY_BUCKETS) b = CS_DELAY_BUCKETS - 1;
    /* Start fast: the first observations weigh as much as the forgetting allows. From
     * the 63rd update on, 1 - 1/(updates + 2) >= 1 - 1/64 is far above FORGET: the
     * clamp's result, without the division. */
    double forget = FORGET;
    if (d->updates < 62) {
        forget = 1.0 - 1.0 / (double)(d->updates + 2);
        if (forget > FORGET) forget = FORGET;
    }
    d->updates++;
    /* Forgetting without touching every bucket: instead of scaling the old mass down
     * by `forget`, scale the new observation up by 1/forget (stored = true * scale). */
    d->scale /= forget;
    double add = (1.0 - forget) * d->scale;
    d->buckets[b] += add;
    d->total += add;
    if (d->scale > 1e150) { /* renormalise long before doubles overflow */
        for (uint32_t i = 0; i < CS_DELAY_BUCKETS; i++) d->buckets[i] /= d->scale;
        d->total /= d->scale;
        d->scale = 1.0;
    }

    double acc = 0.0, want = QUANTILE * d->total;
    uint32_t q = CS_DELAY_BUCKETS - 1;
    for (uint32_t i = 0; i < CS_DELAY_BUCKETS; i++) {
        acc += d->buckets[i];
        if (acc >= want) {
            q = i;
            break;
        }
    }
    uint32_t target = (q + 1) * CS_DELAY_BUCKET_MS + FRAME_MS;
    if (target < d->min_ms) target = d->min_ms;
    if (target > d->max_ms) target = d->max_ms;
    d->target_ms = target;
}

CS_HOT int64_t cs_delay_packet(cs_delay_est *d, int64_t arrival_ns, int64_t media_ns) {
    int64_t transit = arrival_ns - media_ns;
    /* Sliding-window minimum of transit over the last 2 s: a monotonic deque (transits
     * strictly increase from front to back). The new packet drops every entry from the
     * back whose transit is not below its own; those form a suffix, so the entries kept
     * are the count below `transit`, found by a branchless binary search: popping one
     * by one cost a mispredicted loop exit and a dependent load per entry (jitter makes
     * the count random, 0 to ~10), the search costs log2(len) predictable steps. */
    const uint32_t mask = CS_DELAY_WINDOW - 1;
    const uint32_t head = d->hist_head;
    uint32_t n = d->hist_len;
    if (n > 0) {
        uint32_t lo = 0; /* invariant: the count lies in [lo, lo + n] */
        while (n > 1) {
            const uint32_t half = n / 2;
            const int below = d->hist[(head + lo + half) & mask].transit_ns < transit;
            lo += half & (0u - (uint32_t)below);
            n -= half;
        }
        d->hist_len = lo + (d->hist[(head + lo) & mask].transit_ns < transit);
    }
    if (d->hist_len == CS_DELAY_WINDOW) { /* only with > 128 rising transits in 2 s */
        d->hist_head = (d->hist_head + 1) & mask;
        d->hist_len--;
    }
    uint32_t back = (d->hist_head + d->hist_len) & mask;
    d->hist[back].arrival_ns = arrival_ns;
    d->hist[back].transit_ns = transit;
    d->hist_len++;
    while (arrival_ns - d->hist[d->hist_head].arrival_ns > WINDOW_NS) {
        d->hist_head = (d->hist_head + 1) & mask;
        d->hist_len--;
    }
    int64_t min_transit = d->hist[d->hist_head].transit_ns;
    int64_t rel = transit - min_transit;

    if (d->interval_start_ns < 0) {
        d->interval_start_ns = arrival_ns;
        d->interval_max_ns = rel;
    } else {
        if (rel > d->interval_max_ns) d->interval_max_ns = rel;
        if (arrival_ns - d->interval_start_ns >= INTERVAL_NS) {
            update_target(d, d->interval_max_ns);
            d->interval_start_ns = arrival_ns;
            d->interval_max_ns = 0;
        }
    }
    return rel;
}
