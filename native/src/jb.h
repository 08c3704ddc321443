/* Per-stream adaptive jitter buffer.
 *
 * One cs_jb per leg, allocated once by cs_jb_new(); insert and pull never allocate.
 * Virtual time: every call takes `now_ns` (any monotonic clock the caller chooses), and
 * the buffer reads no clock of its own, so tests run in simulated time.
 *
 * Storage is a ring of 2.5 ms "units" indexed by the unwrapped RTP timestamp (a pjmedia
 * style trick generalised below the frame size), so multi-frame packets, ptime changes
 * and DTX gaps land in the right place without per-packet bookkeeping. Output is pulled
 * on the caller's clock as fixed 20 ms frames, each flagged with what it really holds.
 *
 * The ring holds encoded bytes; decoding happens at playout, in playout order, so the
 * stateful decoders (G.722, Opus, the resampler to out_rate) see one continuous stream
 * and learn of loss where it is played: G.722 and the resampler restart after a gap,
 * Opus conceals it with its PLC or recovers it from the next packet's in-band FEC.
 * Codecs with a fixed bit rate (G.711, L16, G.722) store bytes per unit; an Opus packet
 * spreads over its units' slots and is decoded whole when its first unit is played.
 *
 * Not thread-safe: one writer and one reader, or a lock outside (ingest.c has one).
 */
#ifndef CS_JB_H
#define CS_JB_H

#include "cs_common.h"
#include "rtp.h"

/* CDEF BEGIN */
typedef struct cs_jb cs_jb;

typedef struct {
    uint8_t pt;          /* RTP payload type */
    uint8_t codec;       /* CS_CODEC_* */
    uint8_t channels;    /* L16 and Opus: 1 or 2 (2 is down-mixed) */
    uint8_t flags;       /* CS_PT_* */
    uint32_t clock_rate; /* RTP clock in Hz (telephone-event: its rtpmap clock) */
} cs_pt_entry;

typedef struct {
    uint32_t out_rate;       /* decoded sample rate of the output frames, Hz */
    uint32_t capacity_ms;    /* ring length; rounded up to a power of two of 2.5 ms units */
    uint32_t min_delay_ms;   /* floor of the adaptive target delay */
    uint32_t max_delay_ms;   /* ceiling of the adaptive target delay */
    uint32_t start_delay_ms; /* target before arrival statistics exist */
    uint32_t n_pts;
    cs_pt_entry pts[16];
    uint64_t dtmf_key;       /* per-call secret; DTMF tokens are a keyed permutation */
} cs_jb_config;

/* What happened to one inserted packet (cs_jb_insert's return value). */
enum {
    CS_PKT_IN_ORDER = 1,     /* next expected sequence number */
    CS_PKT_GAP = 2,          /* in order, but sequence numbers were skipped */
    CS_PKT_REORDERED = 3,    /* older than the highest seen, still in time: inserted */
    CS_PKT_DUPLICATE = 4,    /* seen before: dropped */
    CS_PKT_LATE = 5,         /* its audio was already played out: dropped */
    CS_PKT_RESTART = 6,      /* sequence restart confirmed: buffer re-anchored, inserted */
    CS_PKT_SSRC_CHANGE = 7,  /* new SSRC: re-anchored, inserted */
    CS_PKT_DTMF = 8,         /* RFC 4733 event: to the event tracker */
    CS_PKT_CN = 9,           /* RFC 3389 comfort noise: marks DTX */
    CS_PKT_UNKNOWN_PT = 10,  /* payload type not in the table: dropped */
    CS_PKT_BAD_PAYLOAD = 11, /* payload length not a whole number of 2.5 ms units: dropped */
    CS_PKT_PAUSED = 12,      /* stream paused: discarded, not loss */
    CS_PKT_JUMP = 13,        /* large sequence jump, awaiting confirmation: dropped */
    CS_PKT_OUTCOMES = 14
};

typedef struct {
    int64_t pos;             /* output position in 2.5 ms units; strictly increasing */
    uint32_t rtp_ts;         /* RTP timestamp of the first sample (valid if has_rtp_ts) */
    uint32_t ssrc;
    uint8_t flag;            /* CS_FRAME_* */
    uint8_t real_mask;       /* bit i set: unit i (2.5 ms) is decoded received audio
                                (Opus: or recovered from the next packet's FEC) */
    uint8_t has_rtp_ts;
    uint8_t dtx;             /* 1 while the sender is in DTX / comfort noise */
    uint16_t samples;        /* samples in the frame (out_rate / 50) */
    uint16_t concealed_samples;
    uint32_t target_delay_ms;
    uint32_t buffer_level_ms;
} cs_frame_info;

/* Histogram of per-packet buffer wait (first sample played - arrival): 1 ms buckets,
 * the last one holds everything from CS_WAIT_HIST_BUCKETS - 1 ms upward. */
enum { CS_WAIT_HIST_BUCKETS = 501 };

/* Monotonic 64-bit counters (names follow W3C RTCInboundRtpStreamStats in snake_case),
 * plus a few gauges marked as such. Durations in ns; *_delay_ns are sums over samples
 * like the W3C fields (divide by jitter_buffer_emitted_count for a mean). */
typedef struct {
    /* written by every insert: first, in two cache lines (see jb_internal.h) */
    uint64_t packets_received;            /* every packet handed to cs_jb_insert */
    uint64_t packets_in_order;
    uint64_t packets_gap;
    uint64_t packets_reordered;
    int64_t packets_lost;                 /* RFC 3550 cumulative: expected - received */
    uint64_t expected_packets;
    uint64_t ext_highest_seq;             /* gauge */
    uint64_t jitter_rtp_units;            /* gauge: RFC 3550 interarrival jitter */
    uint64_t target_delay_ms;             /* gauge */
    uint64_t units_accepted;              /* 2.5 ms units stored in the ring */
    uint64_t units_late;                  /* arrived after their slot was played */
    uint64_t total_samples_received;      /* decoded-rate samples accepted into the ring */
    uint64_t packets_duplicate;
    uint64_t packets_discarded;           /* late + flushed + dropped (W3C meaning) */
    uint64_t packets_late;
    uint64_t misaligned;                  /* timestamps not on a 2.5 ms grid (rounded) */
    /* the rest: rarer outcomes, and the pull side's counters */
    uint64_t packets_unknown_pt;
    uint64_t packets_bad_payload;
    uint64_t packets_paused;
    uint64_t packets_jump;
    uint64_t packets_played;              /* fates of accepted audio packets: played, */
    uint64_t packets_flushed;             /* flushed (overflow, pause), */
    uint64_t packets_dropped;             /* or dropped to shrink the delay */
    uint64_t packets_dtmf;
    uint64_t packets_cn;
    uint64_t restarts;
    uint64_t ssrc_changes;
    uint64_t payload_type_changes;
    uint64_t ptime_changes;
    uint64_t payload_table_updates;       /* tables replaced in place (cs_jb_set_pts) */
    uint64_t flushes;                     /* overflow flushes */
    uint64_t resyncs;                     /* forward jumps of the playout point (DTX end) */
    uint64_t jitter_buffer_emitted_count; /* samples emitted from received audio */
    uint64_t jitter_buffer_delay_ns;      /* sum over emitted samples of their wait */
    uint64_t jitter_buffer_target_delay_ns;
    uint64_t jitter_buffer_minimum_delay_ns;
    uint64_t concealed_samples;
    uint64_t concealment_events;
    uint64_t fec_samples;                 /* lost samples recovered from Opus in-band FEC */
    uint64_t decoder_resets;              /* G.722/resampler restarted: gap, drop, PT switch */
    uint64_t inserted_samples_for_deceleration;
    uint64_t removed_samples_for_acceleration;
    uint64_t cng_samples;
    uint64_t paused_samples;
    uint64_t not_started_samples;
    uint64_t frames_pulled;
    uint64_t interruption_count;          /* concealment runs of >= 150 ms */
    uint64_t total_interruption_duration_ns;
    uint64_t units_played;
    uint64_t units_flushed;               /* dropped by overflow flush or re-anchor */
    uint64_t units_dropped;               /* removed for acceleration */
    uint64_t dtmf_events;
    uint64_t buffer_level_ms;             /* gauge: audio buffered ahead of playout */
    uint64_t wait_hist[501];              /* CS_WAIT_HIST_BUCKETS */
} cs_jb_stats;

enum { CS_DTMF_KIND_DIGIT = 0, CS_DTMF_KIND_NAV = 1, CS_DTMF_KIND_OTHER = 2 };

/* A deduplicated RFC 4733 event. The digit never leaves C: `token` is a per-call keyed
 * permutation of it, good for "same key as before?" and nothing else. */
typedef struct {
    int64_t start_pos;       /* output position (units) where the event began */
    int64_t first_seen_ns;
    int64_t end_seen_ns;     /* 0 until the end bit arrived */
    uint32_t duration_ms;    /* from the RTP duration field */
    uint8_t token;
    uint8_t volume;
    uint8_t ended;
    uint8_t kind;            /* CS_DTMF_KIND_*: digit, navigation (* #) or other; no digit */
} cs_dtmf_event;

cs_jb *cs_jb_new(const cs_jb_config *cfg);
void cs_jb_free(cs_jb *jb);
void cs_jb_default_config(cs_jb_config *cfg);
int cs_jb_insert(cs_jb *jb, const cs_rtp_header *h, int64_t now_ns);
/* Parse and insert; returns a CS_PKT_* outcome, or -CS_RTP_ERR_* for a bad header. */
int cs_jb_insert_datagram(cs_jb *jb, const uint8_t *buf, size_t len, int64_t now_ns);
/* Pull one 20 ms frame into pcm (info->samples int16 samples). Returns info->flag. */
int cs_jb_pull(cs_jb *jb, int64_t now_ns, int16_t *pcm, cs_frame_info *info);
void cs_jb_set_paused(cs_jb *jb, int paused);
const cs_jb_stats *cs_jb_get_stats(const cs_jb *jb);
uint32_t cs_jb_samples_per_frame(const cs_jb *jb);
/* Replace the payload-type table in place (new signalling renumbered, added or dropped
 * payload types): the ring, sequence and timing state, decoders, DTMF tracker and
 * counters are kept. Buffered audio plays on under the new entry of the same codec,
 * clock and channels. 0; -EINVAL: a table cs_jb_new would refuse; -EOPNOTSUPP: this
 * buffer was not built for it (an entry needs more ring bytes per 2.5 ms unit, a
 * resampler or an Opus decoder it lacks: only a new buffer can take it); -EBUSY: audio
 * is buffered under an entry the new table has no equivalent for. Nothing changes on
 * an error. */
int cs_jb_set_pts(cs_jb *jb, const cs_pt_entry *pts, uint32_t n);
/* Copy up to max finished-or-updated events out; returns how many. */
int cs_jb_take_dtmf(cs_jb *jb, cs_dtmf_event *out, int max);
/* CDEF END */

/* Hints for a receiver that prefetches a leg ahead (C only, not for cffi).
 * cs_jb_prefetch: start loading the cache lines every insert touches (jb_internal.h's
 * first lines and the stats counters); computes addresses only and reads nothing, so a
 * stale pointer is harmless. cs_jb_next_lines: the addresses of the other lines the next
 * in-order packet's insert will touch (its ring slots and their metadata, the
 * duplicate-window word, the delay deque's ends), computed from jb's state (call it
 * under the lock that guards jb, after an insert); returns how many it wrote (at most
 * CS_JB_HINTS). The caller keeps them and later only prefetches them. */
enum { CS_JB_HINTS = 10 };
void cs_jb_prefetch(const cs_jb *jb);
int cs_jb_next_lines(const cs_jb *jb, const void **out);

#endif
