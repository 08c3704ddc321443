/* The cs_jb struct, shared by jb.c (insert) and jb_pull.c (playout). */
#ifndef CS_JB_INTERNAL_H
#define CS_JB_INTERNAL_H

#include "jb_parts.h"

enum {
    CS_SLOT_START = 0x40,       /* slot_state bit: first unit of a packet */
    CS_SLOT_PT_MASK = 0x1F,     /* slot_state low bits: payload-table index + 1 */
    CS_MAX_SAMPLES_PER_UNIT = 120 /* 48 kHz */
};

struct cs_jb {
    cs_jb_config cfg;
    cs_jb_stats st;
    int8_t pt_map[128];
    uint32_t cap;              /* ring length in units (power of two) */
    uint32_t mask;
    uint32_t stride;           /* bytes per unit slot */
    uint32_t spu;              /* output samples per unit */
    uint8_t *slot_bytes;
    int64_t *slot_arrival;
    uint32_t *slot_ts;
    uint8_t *slot_state;       /* 0 empty, else pt index + 1 | CS_SLOT_START */

    cs_seq_state seq;
    cs_delay_est delay;
    cs_dtmf_tracker dtmf;

    /* timestamp domain: pos = pos_base + round((ts_ext - anchor_ts) / tpu) */
    int anchored;
    int reanchor;              /* next audio packet starts a new domain */
    uint32_t clock_rate;
    uint32_t tpu;              /* RTP ticks per unit */
    uint32_t last_ts32;
    int64_t ts_high;
    int64_t anchor_ts;
    int64_t pos_base;

    /* playout */
    int playing;
    int paused;
    int dtx;
    int64_t play_pos;          /* next unit to emit */
    int64_t high_pos;          /* end of the newest audio received */
    int64_t first_arrival_ns;
    int64_t last_adjust_ns;
    double level_filt_ms;      /* smoothed buffer level (deceleration) */
    double trough_cur_ms;      /* lowest level in the current 1 s window */
    double trough_prev_ms;     /* ... in the last complete window; < 0: none yet */
    uint32_t trough_pulls;
    int64_t cng_until;         /* empty units before this position are silence, not loss */
    uint32_t hold_run;         /* consecutive frames held on underrun */
    uint32_t conceal_run;      /* consecutive concealed units (interruptions) */
    int in_concealment;
    int last_audio_pt;
    uint32_t last_units;
    int16_t last_unit_pcm[CS_MAX_SAMPLES_PER_UNIT];

    /* RFC 3550 interarrival jitter */
    int64_t jitter_origin_ns;
    int64_t jitter_last_transit;
    int64_t jitter_q4;
    int jitter_have_transit;
};

uint32_t cs_jb_bytes_per_unit(const cs_pt_entry *pe);
void cs_jb_clear_units(cs_jb *jb, int64_t from, int64_t to, uint64_t *units, uint64_t *pkts);

static inline uint32_t cs_jb_target_units(const cs_jb *jb) {
    return jb->delay.target_ms * CS_UNITS_PER_SECOND / 1000u;
}

/* jb_event.c: an RFC 4733 payload from a transport without RTP sequence numbers of its
 * own (digits reported as text): to the DTMF tracker, not through the sequence state.
 * Returns CS_PKT_DTMF, CS_PKT_PAUSED or CS_PKT_BAD_PAYLOAD. */
int cs_jb_insert_event(cs_jb *jb, const uint8_t *payload, uint32_t len, uint32_t ts,
                       uint32_t clock_rate, int64_t now_ns);

#endif
