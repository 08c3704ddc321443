/* Internal parts of the jitter buffer: sequence tracking, delay estimation and the
 * DTMF event tracker. Each is a plain struct embedded in cs_jb (no allocation). */
#ifndef CS_JB_PARTS_H
#define CS_JB_PARTS_H

#include "jb.h"

/* ---- RFC 3550 A.1 sequence tracking (jb_seq.c) ---------------------------------- */
enum { CS_SEQ_WINDOW = 1024 }; /* duplicate detection window, in packets */

/* The duplicate window first, the scalars last: cs_jb puts its other per-packet
 * scalars right after this struct (jb_internal.h). */
typedef struct {
    uint64_t seen[CS_SEQ_WINDOW / 64];
    int initialised;
    uint32_t ssrc;
    uint16_t max_seq;
    uint32_t bad_seq;          /* 65536 + 1 when none pending */
    uint64_t cycles;           /* wraps * 65536 */
    uint64_t base_ext;
    uint64_t received;         /* unique packets accepted by the tracker */
    uint64_t prior_expected;   /* from earlier SSRCs / restarts */
    uint64_t prior_received;
} cs_seq_state;

/* Classify a sequence number. Returns CS_PKT_IN_ORDER, CS_PKT_GAP, CS_PKT_REORDERED,
 * CS_PKT_DUPLICATE, CS_PKT_JUMP or CS_PKT_RESTART; *ext_seq gets the extended number. */
int cs_seq_update(cs_seq_state *s, uint16_t seq, uint64_t *ext_seq);
void cs_seq_start(cs_seq_state *s, uint32_t ssrc, uint16_t seq);
uint64_t cs_seq_expected(const cs_seq_state *s);
uint64_t cs_seq_received(const cs_seq_state *s);

/* ---- NetEQ-style target delay from relative arrival delay (jb_delay.c) ---------- */
enum { CS_DELAY_WINDOW = 128 /* power of two */, CS_DELAY_BUCKETS = 100, CS_DELAY_BUCKET_MS = 10 };

typedef struct {
    int64_t arrival_ns;
    int64_t transit_ns;        /* arrival - media time */
} cs_delay_sample;

/* Scalars first, then the deque (each entry's two values in one 16-byte pair, so a
 * packet touches the lines of the deque's head and back only), then the histogram,
 * which only the 500 ms update reads. */
typedef struct {
    uint32_t hist_head;        /* monotonic deque of (arrival, transit) */
    uint32_t hist_len;
    int64_t interval_start_ns;
    int64_t interval_max_ns;
    uint32_t target_ms;
    uint32_t min_ms, max_ms;
    uint64_t updates;
    double scale;
    double total;                      /* sum of buckets (scaled) */
    cs_delay_sample hist[CS_DELAY_WINDOW];
    double buckets[CS_DELAY_BUCKETS]; /* histogram, stored scaled by `scale` */
} cs_delay_est;

void cs_delay_init(cs_delay_est *d, uint32_t start_ms, uint32_t min_ms, uint32_t max_ms);
/* Forget the arrival history (new timestamp domain); keeps the learned histogram. */
void cs_delay_rebase(cs_delay_est *d);
/* One packet: arrival time and media time (ns since the anchor). Returns the current
 * relative delay in ns (0 for the fastest packet of the window). */
int64_t cs_delay_packet(cs_delay_est *d, int64_t arrival_ns, int64_t media_ns);

/* ---- RFC 4733 telephone-event tracker (dtmf.c) ---------------------------------- */
enum { CS_DTMF_RING = 32 };

typedef struct {
    uint8_t perm[17];          /* keyed permutation of events 0..16 */
    int active;                /* an event is in progress */
    uint32_t cur_ts;
    uint8_t cur_event;
    cs_dtmf_event cur;
    cs_dtmf_event ring[CS_DTMF_RING];
    uint32_t head, len;
    uint64_t events;           /* distinct events seen */
    uint64_t overwritten;      /* ring full: oldest record lost */
} cs_dtmf_tracker;

void cs_dtmf_init(cs_dtmf_tracker *t, uint64_t key);
/* One telephone-event payload. Returns 1 if it started a new event, 0 otherwise,
 * -1 if the payload is malformed (shorter than 4 bytes). */
int cs_dtmf_packet(cs_dtmf_tracker *t, const uint8_t *payload, uint32_t len, uint32_t ts,
                   uint32_t clock_rate, int64_t start_pos, int64_t now_ns);
int cs_dtmf_take(cs_dtmf_tracker *t, cs_dtmf_event *out, int max);
void cs_dtmf_wipe(cs_dtmf_tracker *t);

#endif
