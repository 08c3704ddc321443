/* RFC 4733 telephone-event tracker. Deduplicates by (timestamp, event): the RTP
 * timestamp marks the event start and stays fixed across its updates, and the final
 * packet (E bit) is sent three times. Digits never leave this file: records carry a
 * per-call keyed permutation of the event code, enough to tell "same key again". */
#include <string.h>

#include "jb_parts.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void cs_dtmf_init(cs_dtmf_tracker *t, uint64_t key) {
    memset(t, 0, sizeof *t);
    for (uint8_t i = 0; i < 17; i++) t->perm[i] = i;
    uint64_t state = key;
    for (int i = 16; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(splitmix64(&state) % (uint64_t)(i + 1));
        uint8_t tmp = t->perm[i];
        t->perm[i] = t->perm[j];
        t->perm[j] = tmp;
    }
}

void cs_dtmf_wipe(cs_dtmf_tracker *t) {
    /* volatile writes so the key material is really gone at hang-up */
    volatile uint8_t *p = (volatile uint8_t *)t;
    for (size_t i = 0; i < sizeof *t; i++) p[i] = 0;
}

static void push(cs_dtmf_tracker *t, const cs_dtmf_event *ev) {
    if (t->len == CS_DTMF_RING) {
        t->head = (t->head + 1) % CS_DTMF_RING;
        t->len--;
        t->overwritten++;
    }
    t->ring[(t->head + t->len) % CS_DTMF_RING] = *ev;
    t->len++;
}

int cs_dtmf_packet(cs_dtmf_tracker *t, const uint8_t *payload, uint32_t len, uint32_t ts,
                   uint32_t clock_rate, int64_t start_pos, int64_t now_ns) {
    if (len < 4) return -1;
    uint8_t event = payload[0];
    int end = (payload[1] >> 7) & 1;
    uint8_t volume = payload[1] & 0x3F;
    uint32_t duration = ((uint32_t)payload[2] << 8) | payload[3];
    uint32_t duration_ms = clock_rate ? (uint32_t)((uint64_t)duration * 1000u / clock_rate) : 0;

    if (t->active && t->cur_ts == ts && t->cur_event == event) {
        if (duration_ms > t->cur.duration_ms) t->cur.duration_ms = duration_ms;
        if (end && !t->cur.ended) {
            t->cur.ended = 1;
            t->cur.end_seen_ns = now_ns;
            push(t, &t->cur);
        }
        return 0;
    }
    if (t->active && !t->cur.ended) push(t, &t->cur); /* superseded without its end */

    memset(&t->cur, 0, sizeof t->cur);
    t->active = 1;
    t->cur_ts = ts;
    t->cur_event = event;
    t->cur.start_pos = start_pos;
    t->cur.first_seen_ns = now_ns;
    t->cur.duration_ms = duration_ms;
    t->cur.token = event <= 16 ? t->perm[event] : 0xFF;
    t->cur.volume = volume;
    t->cur.kind = event <= 9                   ? CS_DTMF_KIND_DIGIT
                  : (event == 10 || event == 11) ? CS_DTMF_KIND_NAV
                                                 : CS_DTMF_KIND_OTHER;
    t->events++;
    if (end) {
        t->cur.ended = 1;
        t->cur.end_seen_ns = now_ns;
        push(t, &t->cur);
    }
    return 1;
}

int cs_dtmf_take(cs_dtmf_tracker *t, cs_dtmf_event *out, int max) {
    int n = 0;
    while (n < max && t->len > 0) {
        out[n++] = t->ring[t->head];
        t->head = (t->head + 1) % CS_DTMF_RING;
        t->len--;
    }
    return n;
}
