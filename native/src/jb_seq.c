/* RFC 3550 appendix A.1 sequence-number tracking with a duplicate-detection window. */
#include <string.h>

#include "jb_parts.h"

enum { MAX_DROPOUT = 3000, MAX_MISORDER = 100, SEQ_MOD = 1 << 16 };

static inline int seen_test(const cs_seq_state *s, uint64_t ext) {
    uint32_t bit = (uint32_t)(ext % CS_SEQ_WINDOW);
    return (int)((s->seen[bit >> 6] >> (bit & 63)) & 1u);
}

static inline void seen_set(cs_seq_state *s, uint64_t ext) {
    uint32_t bit = (uint32_t)(ext % CS_SEQ_WINDOW);
    s->seen[bit >> 6] |= (uint64_t)1 << (bit & 63);
}

static inline void seen_clear(cs_seq_state *s, uint64_t ext) {
    uint32_t bit = (uint32_t)(ext % CS_SEQ_WINDOW);
    s->seen[bit >> 6] &= ~((uint64_t)1 << (bit & 63));
}

void cs_seq_start(cs_seq_state *s, uint32_t ssrc, uint16_t seq) {
    /* totals of the previous source or run carry over into expected/received */
    uint64_t prior_expected = cs_seq_expected(s);
    uint64_t prior_received = cs_seq_received(s);
    memset(s->seen, 0, sizeof s->seen);
    s->initialised = 1;
    s->ssrc = ssrc;
    s->max_seq = seq;
    s->bad_seq = SEQ_MOD + 1;
    s->cycles = SEQ_MOD; /* keep extended numbers away from zero so "behind" never underflows */
    s->base_ext = s->cycles + seq;
    s->received = 1; /* the packet that starts the run */
    s->prior_expected = prior_expected;
    s->prior_received = prior_received;
    seen_set(s, s->base_ext);
}

CS_HOT uint64_t cs_seq_expected(const cs_seq_state *s) {
    if (!s->initialised) return 0;
    return s->prior_expected + (s->cycles + s->max_seq) - s->base_ext + 1;
}

CS_HOT uint64_t cs_seq_received(const cs_seq_state *s) {
    return s->prior_received + s->received;
}

CS_HOT int cs_seq_update(cs_seq_state *s, uint16_t seq, uint64_t *ext_seq) {
    uint16_t udelta = (uint16_t)(seq - s->max_seq);
    uint64_t max_ext = s->cycles + s->max_seq;

    if (udelta == 0) {
        *ext_seq = max_ext;
        return CS_PKT_DUPLICATE;
    }
    if (udelta < MAX_DROPOUT) {
        if (seq < s->max_seq) s->cycles += SEQ_MOD;
        uint64_t ext = max_ext + udelta;
        /* forget window bits the new maximum has moved past */
        uint64_t clear_from = max_ext + 1;
        if (udelta > CS_SEQ_WINDOW) clear_from = ext - CS_SEQ_WINDOW + 1;
        for (uint64_t e = clear_from; e <= ext; e++) seen_clear(s, e);
        s->max_seq = seq;
        s->bad_seq = SEQ_MOD + 1;
        seen_set(s, ext);
        s->received++;
        *ext_seq = ext;
        return udelta == 1 ? CS_PKT_IN_ORDER : CS_PKT_GAP;
    }
    if (udelta <= SEQ_MOD - MAX_MISORDER) {
        if (seq == s->bad_seq) {
            /* two consecutive packets agree on the jump: the sender restarted */
            return CS_PKT_RESTART;
        }
        s->bad_seq = (uint32_t)((seq + 1) & (SEQ_MOD - 1));
        *ext_seq = 0;
        return CS_PKT_JUMP;
    }
    /* behind the maximum by less than MAX_MISORDER: reordered or duplicate */
    uint64_t behind = (uint64_t)(uint16_t)(s->max_seq - seq);
    uint64_t ext = max_ext - behind;
    *ext_seq = ext;
    if (behind >= CS_SEQ_WINDOW || seen_test(s, ext)) return CS_PKT_DUPLICATE;
    seen_set(s, ext);
    s->received++;
    return CS_PKT_REORDERED;
}
