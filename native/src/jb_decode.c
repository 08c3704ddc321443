/* Decoding at playout: the units the pull emits, in playout order, to out_rate PCM.
 *
 * Codecs with a fixed bit rate (G.711, L16 in either byte order, G.722) decode runs of
 * units at their own rate and, when that is not out_rate, go through the stream's
 * resampler. Both G.722 and the resampler carry state from unit to unit; it is kept
 * while the units played are consecutive and of one payload type, and restarted
 * otherwise (loss, a dropped frame, a jump, a payload-type switch): G.722 has no
 * concealment and must be reset on loss, and the resampler's history would smear one
 * stretch of audio into another. Opus is in jb_opus.c. */
#include <string.h>

#include "g711.h"
#include "jb_internal.h"

enum { MAX_RUN_SAMPLES = CS_UNITS_PER_FRAME * CS_MAX_SAMPLES_PER_UNIT };

static inline int16_t rd16(const uint8_t *p, int le) {
    return (int16_t)(le ? (uint16_t)(p[0] | (uint16_t)p[1] << 8)
                        : (uint16_t)((uint16_t)p[0] << 8 | p[1]));
}

static void l16_decode(const uint8_t *src, int16_t *out, uint32_t n, int channels, int le) {
    if (channels == 2) {
        for (uint32_t i = 0; i < n; i++)
            out[i] = (int16_t)(((int32_t)rd16(src + 4 * i, le) + rd16(src + 4 * i + 2, le)) / 2);
    } else {
        for (uint32_t i = 0; i < n; i++) out[i] = rd16(src + 2 * i, le);
    }
}

/* Decode `ticks` RTP ticks of units whose bytes are contiguous at src, at the codec's
 * own rate. Returns the samples written. */
CS_HOT static uint32_t decode_fixed(cs_jb *jb, const cs_pt_entry *pe, const uint8_t *src,
                             uint32_t ticks, int16_t *out) {
    switch (pe->codec) {
    case CS_CODEC_PCMU:
        cs_ulaw_decode(src, out, ticks);
        return ticks;
    case CS_CODEC_PCMA:
        cs_alaw_decode(src, out, ticks);
        return ticks;
    case CS_CODEC_L16:
    case CS_CODEC_L16LE:
        l16_decode(src, out, ticks, pe->channels, pe->codec == CS_CODEC_L16LE);
        return ticks;
    case CS_CODEC_G722:
        cs_g722_decode(&jb->g722, src, ticks, out);
        return 2 * ticks;
    default:
        memset(out, 0, (size_t)ticks * sizeof *out);
        return ticks;
    }
}

/* A discontinuity at unit u: start the payload type's decoder and the resampler afresh,
 * the resampler's outputs on the grid of the unit's timestamp domain (at 44.1 kHz a
 * unit of 110 or 111 samples still gives exactly out_rate / 400 of them). */
static void restart(cs_jb *jb, int idx, int64_t u) {
    const cs_pt_entry *pe = &jb->cfg.pts[idx];
    uint32_t rate = cs_jb_decoded_rate(pe, jb->cfg.out_rate);
    int stateful = pe->codec == CS_CODEC_G722 || rate != jb->cfg.out_rate;
    if (stateful && jb->dec_idx >= 0) jb->st.decoder_resets++;
    if (pe->codec == CS_CODEC_G722) cs_g722_reset(&jb->g722);
    if (rate != jb->cfg.out_rate) {
        if (jb->rs_in_rate != rate) {
            cs_resampler_init(jb->rs, rate, jb->cfg.out_rate); /* checked in cs_jb_new */
            jb->rs_in_rate = rate;
        }
        cs_resampler_restart_at(jb->rs, (uint64_t)cs_jb_tick(u, rate));
    }
}

/* Units from u on (at least 1, at most max <= 8) whose slots hold payload-table index
 * pti - 1. Where the 8 state bytes from u's slot lie inside the ring, one 8-byte load
 * compares them all (a loop over the bytes ended in a mispredicted exit per frame). */
static inline uint32_t run_length(const cs_jb *jb, int64_t u, uint32_t max, uint8_t pti) {
    const uint64_t slot = (uint64_t)u & jb->mask;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (max >= 1 && max <= 8 && slot + 8 <= jb->cap) {
        const uint64_t ones = 0x0101010101010101ull, low7 = 0x7F7F7F7F7F7F7F7Full;
        uint64_t w;
        memcpy(&w, jb->slot_state + slot, 8); /* byte i: unit u + i (little endian) */
        const uint64_t x = (w & (ones * CS_SLOT_PT_MASK)) ^ (ones * pti); /* 0: same pt */
        uint64_t differs = (((x & low7) + low7) | x) & ~low7;  /* bit 7 of nonzero bytes */
        if (max < 8) differs |= (uint64_t)0x80 << (8 * max); /* stop at max */
        return differs ? (uint32_t)__builtin_ctzll(differs) / 8u : 8u;
    }
#endif
    uint32_t run = 1;
    while (run < max && (jb->slot_state[(uint64_t)(u + run) & jb->mask] & CS_SLOT_PT_MASK) == pti)
        run++;
    return run;
}

CS_HOT uint32_t cs_jb_decode(cs_jb *jb, int64_t u, uint32_t max, int16_t *out, int *ok) {
    uint8_t pti = jb->slot_state[(uint64_t)u & jb->mask] & CS_SLOT_PT_MASK;
    int idx = pti - 1;
    const cs_pt_entry *pe = &jb->cfg.pts[idx];
    if (pe->codec == CS_CODEC_OPUS) return cs_jb_opus_decode(jb, u, max, out, ok);

    uint32_t run = run_length(jb, u, max, pti);
    if (u != jb->dec_pos || idx != jb->dec_idx) restart(jb, idx, u);
    const uint32_t spu = jb->spu, bpu = jb->pth[idx].bpu; /* cs_jb_bytes_per_unit(pe) */
    const int direct = cs_jb_decoded_rate(pe, jb->cfg.out_rate) == jb->cfg.out_rate;
    const int frac = pe->clock_rate % CS_UNITS_PER_SECOND != 0; /* 44.1 kHz: unit by unit */
    int16_t native[MAX_RUN_SAMPLES], resampled[MAX_RUN_SAMPLES + 1];
    uint32_t done = 0;
    while (done < run) {
        uint64_t slot = (uint64_t)(u + done) & jb->mask;
        uint32_t chunk = 1;
        if (bpu == jb->stride && !frac) { /* bytes of consecutive slots are back to back */
            chunk = run - done;
            if (slot + chunk > jb->cap) chunk = (uint32_t)(jb->cap - slot);
        }
        const uint8_t *src = jb->slot_bytes + slot * jb->stride;
        int16_t *dst = out + done * spu;
        int64_t at = u + (int64_t)done;
        uint32_t ticks =
            (uint32_t)(cs_jb_tick(at + chunk, pe->clock_rate) - cs_jb_tick(at, pe->clock_rate));
        if (direct) {
            decode_fixed(jb, pe, src, ticks, dst);
        } else {
            uint32_t n = decode_fixed(jb, pe, src, ticks, native);
            uint32_t m = cs_resampler_process(jb->rs, native, n, resampled);
            /* whole units in, whole units out: m == chunk * spu by construction */
            if (m < chunk * spu) memset(resampled + m, 0, (chunk * spu - m) * sizeof *dst);
            memcpy(dst, resampled, chunk * spu * sizeof *dst);
        }
        done += chunk;
    }
    jb->dec_pos = u + run;
    jb->dec_idx = idx;
    *ok = 1;
    return run;
}

CS_HOT int cs_jb_conceal(cs_jb *jb, int64_t u, uint32_t max, int16_t *out) {
    if (jb->opus && jb->dec_idx >= 0 && jb->cfg.pts[jb->dec_idx].codec == CS_CODEC_OPUS)
        return cs_jb_opus_conceal(jb, u, max, out);
    memset(out, 0, jb->spu * sizeof *out); /* the next decode restarts (u != dec_pos) */
    return 0;
}
