/* The cs_jb struct, shared by jb.c (insert) and jb_pull.c (playout). */
#ifndef CS_JB_INTERNAL_H
#define CS_JB_INTERNAL_H

#include "g722.h"
#include "cs_opus.h"
#include "jb_parts.h"
#include "resample.h"

enum {
    CS_SLOT_START = 0x40,       /* slot_state bit: first unit of a packet */
    CS_SLOT_PT_MASK = 0x1F,     /* slot_state low bits: payload-table index + 1 */
    CS_MAX_SAMPLES_PER_UNIT = 120, /* 48 kHz */
    CS_OPUS_MAX_UNITS = 48,        /* 120 ms, the longest Opus packet */
    CS_OPUS_BYTES_PER_UNIT = 160   /* 512 kbit/s: above Opus's 510 kbit/s ceiling */
};

typedef struct cs_jb_opus cs_jb_opus; /* jb_opus.c */

/* One payload-table entry as insert reads it (a copy of cfg.pts[i] with its ring bytes
 * per unit), so the per-packet path does not touch cfg or a 128-byte map. */
typedef struct {
    uint8_t pt;
    uint8_t codec;
    uint16_t bpu;              /* cs_jb_bytes_per_unit; 0 for non-audio */
    uint32_t clock_rate;
} cs_jb_pt_hot;

/* Field order is for the cache: 800 legs' buffers do not fit in L2, so each insert
 * finds its leg cold and pays per cache line it touches. Everything a packet reads or
 * writes sits in the first lines: the payload table, the sequence state's scalars, the
 * ts domain, playout edges and ring pointers, the delay estimator's scalars back to back
 * (the duplicate window and the delay deque cost one or two lines a packet); past the
 * deque and the delay histogram, the counters insert bumps, first in cs_jb_stats; the
 * pull side's and the decoders' state and the DTMF ring come last. Receivers prefetch
 * these lines a leg ahead (cs_jb_prefetch), and insert prefetches the ring slots an
 * in-order packet will fill before its sequence and delay work (jb.c). */
struct cs_jb {
    /* ---- insert's working set ----------------------------------------------------- */
    cs_jb_pt_hot pth[16];      /* cfg.pts as insert reads them (8 in the first line) */
    cs_seq_state seq;          /* the duplicate window, then the scalars */
    /* timestamp domain: pos = pos_base + round((ts_ext - anchor_ts) / tpu) */
    int64_t ts_high;
    int64_t anchor_ts;
    int64_t pos_base;
    int64_t play_pos;          /* next unit to emit */
    int64_t high_pos;          /* end of the newest audio received */
    int64_t cng_until;         /* empty units before this position are silence, not loss */
    int64_t first_arrival_ns;
    uint8_t *slot_bytes;
    int64_t *slot_arrival;
    uint32_t *slot_ts;
    uint8_t *slot_state;       /* 0 empty, else pt index + 1 | CS_SLOT_START */
    uint32_t cap;              /* ring length in units (power of two) */
    uint32_t mask;
    uint32_t stride;           /* bytes per unit slot */
    uint32_t spu;              /* output samples per unit */
    uint32_t clock_rate;
    uint32_t tpu;              /* RTP ticks per unit (Opus; 44.1 kHz: see cs_jb_tick) */
    uint32_t last_ts32;
    uint32_t group;            /* cs_jb_group(clock_rate), set with clock_rate */
    uint32_t group_ticks;      /* RTP ticks per group */
    uint32_t ns_per_tick;      /* 1e9 / clock_rate when exact, else 0 (divide) */
    uint32_t last_units;
    int last_audio_pt;
    int anchored;
    int reanchor;              /* next audio packet starts a new domain */
    int playing;
    int paused;
    int dtx;
    int jitter_have_transit;
    /* RFC 3550 interarrival jitter */
    int64_t jitter_origin_ns;
    int64_t jitter_last_transit;
    int64_t jitter_q4;
    uint32_t n_pts;
    cs_delay_est delay;        /* scalars first, then the arrival deque, then buckets */
    _Alignas(64) cs_jb_stats st; /* insert's counters in its first two lines */

    /* ---- the rest ------------------------------------------------------------------ */
    cs_jb_config cfg;
    uint16_t *slot_len;        /* Opus: payload bytes, in the packet's first unit */
    uint8_t *slot_back;        /* Opus: units since the packet's first unit */
    cs_dtmf_tracker dtmf;

    /* playout */
    int in_concealment;
    int64_t last_adjust_ns;
    double level_filt_ms;      /* smoothed buffer level (deceleration) */
    double trough_cur_ms;      /* lowest level in the current 1 s window */
    double trough_prev_ms;     /* ... in the last complete window; < 0: none yet */
    uint32_t trough_pulls;
    uint32_t hold_run;         /* consecutive frames held on underrun */
    uint32_t conceal_run;      /* consecutive concealed units (interruptions) */
    int16_t last_unit_pcm[CS_MAX_SAMPLES_PER_UNIT];

    /* decoding at playout (jb_decode.c) */
    int64_t dec_pos;           /* position right after the last decoded unit */
    int dec_idx;               /* payload-table index decoded last, -1 none */
    uint32_t rs_in_rate;       /* rate the resampler is set up from (0: not yet) */
    cs_resampler *rs;          /* NULL unless some payload type needs resampling */
    cs_jb_opus *opus;          /* NULL unless the table has Opus */
    cs_g722_decoder g722;
    size_t block_bytes;        /* the one allocation's size (cs_pool_free) */
};

void cs_jb_clear_units(cs_jb *jb, int64_t from, int64_t to, uint64_t *units, uint64_t *pkts);

/* ---- codecs (jb_codec.c) ---------------------------------------------------------- */
int cs_jb_is_audio(uint8_t codec);
/* Bytes one 2.5 ms unit occupies in the ring (Opus: the most it may take). */
uint32_t cs_jb_bytes_per_unit(const cs_pt_entry *pe);
/* Sample rate the codec decodes to before resampling to out_rate (inline: every
 * decode asks). */
static inline uint32_t cs_jb_decoded_rate(const cs_pt_entry *pe, uint32_t out_rate) {
    switch (pe->codec) {
    case CS_CODEC_G722:
        return 16000;
    case CS_CODEC_OPUS: /* libopus decodes straight to the leg's rate */
        return out_rate;
    default:
        return pe->clock_rate;
    }
}
/* 0 if the entry is usable on a ring at out_rate, else -1. */
int cs_jb_check_pt(const cs_pt_entry *pe, uint32_t out_rate);

/* ---- decoding at playout (jb_decode.c) -------------------------------------------- */
/* Decode the received unit at position u and those after it that continue it (same
 * payload type, at most max units) into out at out_rate; returns how many units.
 * *ok is 0 if they could not be decoded (out then holds concealment). */
uint32_t cs_jb_decode(cs_jb *jb, int64_t u, uint32_t max, int16_t *out, int *ok);
/* Fill the lost unit at u with concealment (max: units left in the frame, which a
 * concealment run may cover); returns 1 if it was recovered as real audio (Opus
 * in-band FEC from the packet after the gap), else 0. */
int cs_jb_conceal(cs_jb *jb, int64_t u, uint32_t max, int16_t *out);

/* ---- Opus at playout (jb_opus.c) ------------------------------------------------- */
/* Bytes of the block cs_jb_opus_init needs for a ring of spu samples per unit. */
size_t cs_jb_opus_size(uint32_t spu);
cs_jb_opus *cs_jb_opus_init(void *mem, uint32_t out_rate, uint32_t spu);
/* cs_jb_decode and cs_jb_conceal for Opus units. */
uint32_t cs_jb_opus_decode(cs_jb *jb, int64_t u, uint32_t max, int16_t *out, int *ok);
int cs_jb_opus_conceal(cs_jb *jb, int64_t u, uint32_t max, int16_t *out);

/* RTP ticks from position 0 to the start of unit u at clock_rate (floor). At 44.1 kHz a
 * 2.5 ms unit holds 110 or 111 ticks (110, 110, 110, 111 from a multiple of
 * cs_jb_group's units); a timestamp domain's first position is such a multiple, so the
 * ticks between two of its units are the difference of their cs_jb_tick. */
static inline int64_t cs_jb_tick(int64_t u, uint32_t clock_rate) {
    int64_t x = u * (int64_t)clock_rate;
    return x >= 0 ? x / CS_UNITS_PER_SECOND
                  : -((-x + CS_UNITS_PER_SECOND - 1) / CS_UNITS_PER_SECOND);
}

/* Units in the shortest run holding a whole number of ticks: 1, or 4 at 44.1 kHz. */
static inline uint32_t cs_jb_group(uint32_t clock_rate) {
    uint32_t a = clock_rate, b = CS_UNITS_PER_SECOND;
    while (b) {
        uint32_t r = a % b;
        a = b;
        b = r;
    }
    return a ? CS_UNITS_PER_SECOND / a : 1;
}

static inline uint32_t cs_jb_target_units(const cs_jb *jb) {
    return jb->delay.target_ms * CS_UNITS_PER_SECOND / 1000u;
}

/* jb_event.c: an RFC 4733 payload from a transport without RTP sequence numbers of its
 * own (digits reported as text): to the DTMF tracker, not through the sequence state.
 * Returns CS_PKT_DTMF, CS_PKT_PAUSED or CS_PKT_BAD_PAYLOAD. */
int cs_jb_insert_event(cs_jb *jb, const uint8_t *payload, uint32_t len, uint32_t ts,
                       uint32_t clock_rate, int64_t now_ns);

#endif
