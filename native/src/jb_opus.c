/* Opus in the jitter buffer: packet inspection (cs_opus.h) and decoding at playout.
 *
 * An Opus packet cannot be cut into units, so it is decoded whole (with libopus, at the
 * leg's rate, down-mixed to mono) into a stage when its first playable unit is reached,
 * and the following units are copied from there. A lost stretch is concealed the same
 * way: if the packet right after it is already buffered and FEC is allowed, libopus
 * decodes that packet's in-band FEC for the gap (its own PLC covers any part the FEC
 * does not reach), else it runs its PLC for the lost units of the frame. Recovered
 * units count as real audio only where the packet really carried LBRR data. */
#include <opus/opus.h>
#include <string.h>

#include "jb_internal.h"

enum { STAGE_NONE = 0, STAGE_PACKET = 1, STAGE_CONCEAL = 2 };

struct cs_jb_opus {
    OpusDecoder *dec;
    uint32_t spu;
    int kind;          /* what the stage holds */
    int64_t from, to;  /* the positions it covers */
    uint32_t ts0;      /* STAGE_PACKET: the packet's RTP timestamp */
    uint64_t real;     /* STAGE_CONCEAL: bit i set if unit from + i is recovered audio */
    int16_t *stage;    /* CS_OPUS_MAX_UNITS * spu samples */
    uint8_t *scratch;  /* one packet's bytes gathered from the ring */
};

/* ---- packet inspection ------------------------------------------------------------ */

static int parse(const uint8_t *pkt, size_t len, const uint8_t **frame0, int16_t *size0) {
    if (!pkt || len == 0 || len > 0x7FFFFFF) return -1;
    unsigned char toc;
    const unsigned char *frames[48];
    opus_int16 sizes[48];
    int nf = opus_packet_parse(pkt, (opus_int32)len, &toc, frames, sizes, NULL);
    if (nf <= 0) return -1;
    if (frame0) *frame0 = frames[0];
    if (size0) *size0 = sizes[0];
    return nf;
}

int cs_opus_packet_units(const uint8_t *pkt, size_t len) {
    int nf = parse(pkt, len, NULL, NULL);
    if (nf <= 0) return -1;
    int samples = nf * opus_packet_get_samples_per_frame(pkt, 48000);
    if (samples <= 0 || samples % 120 || samples / 120 > CS_OPUS_MAX_UNITS) return -1;
    return samples / 120;
}

int cs_opus_frame_units(const uint8_t *pkt, size_t len) {
    if (parse(pkt, len, NULL, NULL) <= 0) return -1;
    return opus_packet_get_samples_per_frame(pkt, 48000) / 120;
}

/* The range decoder of RFC 6716 section 4.1, just far enough to read the SILK header
 * flags (each coded with probability 1/2). */
typedef struct {
    const uint8_t *buf;
    uint32_t len, pos;
    uint32_t rng, val;
    uint32_t saved; /* the last byte read: its low bit is the next symbol's high bit */
} range_dec;

static uint32_t next_byte(range_dec *d) { return d->pos < d->len ? d->buf[d->pos++] : 0; }

static void normalize(range_dec *d) {
    while (d->rng <= (1u << 23)) {
        d->rng <<= 8;
        uint32_t b = next_byte(d);
        uint32_t sym = ((d->saved << 7) | (b >> 1)) & 0xFF;
        d->saved = b;
        d->val = ((d->val << 8) + (255 - sym)) & 0x7FFFFFFF;
    }
}

static int bit_logp(range_dec *d, unsigned logp) {
    uint32_t s = d->rng >> logp;
    int bit = d->val < s;
    if (bit) {
        d->rng = s;
    } else {
        d->val -= s;
        d->rng -= s;
    }
    normalize(d);
    return bit;
}

int cs_opus_packet_has_fec(const uint8_t *pkt, size_t len) {
    const uint8_t *f0;
    int16_t n0;
    if (parse(pkt, len, &f0, &n0) <= 0) return -1;
    int config = pkt[0] >> 3;
    if (config >= 16 || n0 <= 0) return 0; /* CELT only (no SILK layer), or empty */
    /* SILK frames in this Opus frame: 10 and 20 ms hold one, 40 ms two, 60 ms three */
    int silk_frames = config < 12 ? (int[]){1, 1, 2, 3}[config & 3] : 1;
    int stereo = (pkt[0] >> 2) & 1;
    range_dec d = {f0, (uint32_t)n0, 0, 128, 0, 0};
    d.saved = next_byte(&d);
    d.val = 127 - (d.saved >> 1);
    normalize(&d);
    int lbrr = 0;
    for (int ch = 0; ch <= stereo; ch++) {
        for (int i = 0; i < silk_frames; i++) bit_logp(&d, 1); /* VAD flags */
        lbrr |= bit_logp(&d, 1);
    }
    return lbrr;
}

/* ---- playout ---------------------------------------------------------------------- */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t cs_jb_opus_size(uint32_t spu) {
    return align64(sizeof(cs_jb_opus)) + align64((size_t)opus_decoder_get_size(1)) +
           align64((size_t)CS_OPUS_MAX_UNITS * spu * sizeof(int16_t)) +
           (size_t)CS_OPUS_MAX_UNITS * CS_OPUS_BYTES_PER_UNIT;
}

cs_jb_opus *cs_jb_opus_init(void *mem, uint32_t out_rate, uint32_t spu) {
    uint8_t *p = mem;
    cs_jb_opus *o = (cs_jb_opus *)(void *)p;
    size_t off = align64(sizeof *o);
    o->dec = (OpusDecoder *)(void *)(p + off);
    if (opus_decoder_init(o->dec, (opus_int32)out_rate, 1) != OPUS_OK) return NULL;
    off += align64((size_t)opus_decoder_get_size(1));
    o->stage = (int16_t *)(void *)(p + off);
    off += align64((size_t)CS_OPUS_MAX_UNITS * spu * sizeof(int16_t));
    o->scratch = p + off;
    o->spu = spu;
    o->kind = STAGE_NONE;
    return o;
}

/* The packet whose first unit is at position start (RTP timestamp ts0), gathered from
 * its slots into the scratch buffer; NULL if the slots no longer all hold it. */
static const uint8_t *gather(cs_jb *jb, int64_t start, uint32_t ts0, uint32_t *len, int *n) {
    uint64_t s0 = (uint64_t)start & jb->mask;
    uint32_t l = jb->slot_len[s0];
    if (jb->slot_back[s0] != 0 || jb->slot_ts[s0] != ts0 || l == 0 ||
        l > CS_OPUS_MAX_UNITS * CS_OPUS_BYTES_PER_UNIT)
        return NULL;
    uint8_t *dst = jb->opus->scratch;
    for (uint32_t off = 0, i = 0; off < l; off += jb->stride, i++) {
        uint32_t chunk = l - off < jb->stride ? l - off : jb->stride;
        memcpy(dst + off, jb->slot_bytes + ((uint64_t)(start + i) & jb->mask) * jb->stride, chunk);
    }
    int units = cs_opus_packet_units(dst, l);
    if (units <= 0 || l > (uint32_t)units * CS_OPUS_BYTES_PER_UNIT) return NULL;
    for (int i = 1; i < units; i++) {
        uint64_t s = (uint64_t)(start + i) & jb->mask;
        if (jb->slot_back[s] != i || jb->slot_ts[s] != ts0 + (uint32_t)i * jb->tpu) return NULL;
    }
    *len = l;
    *n = units;
    return dst;
}

static void plc(cs_jb_opus *o, int16_t *out, uint32_t units) {
    int want = (int)(units * o->spu);
    int got = opus_decode(o->dec, NULL, 0, out, want, 0);
    if (got < want) memset(out + (got > 0 ? got : 0), 0, (size_t)(want - (got > 0 ? got : 0)) * 2);
}

uint32_t cs_jb_opus_decode(cs_jb *jb, int64_t u, uint32_t max, int16_t *out, int *ok) {
    cs_jb_opus *o = jb->opus;
    const uint32_t spu = jb->spu;
    uint64_t slot = (uint64_t)u & jb->mask;
    uint8_t pti = jb->slot_state[slot] & CS_SLOT_PT_MASK;
    uint32_t back = jb->slot_back[slot];
    int64_t start = u - back;
    uint32_t ts0 = jb->slot_ts[slot] - back * jb->tpu;
    uint32_t run = 1;
    while (run < max) { /* the following units of the same packet, still buffered */
        uint64_t s = (uint64_t)(u + run) & jb->mask;
        if ((jb->slot_state[s] & CS_SLOT_PT_MASK) != pti || jb->slot_back[s] != back + run ||
            jb->slot_ts[s] != jb->slot_ts[slot] + run * jb->tpu)
            break;
        run++;
    }
    int staged = o->kind == STAGE_PACKET && o->from == start && o->ts0 == ts0;
    if (!staged) {
        uint32_t len = 0;
        int n = 0;
        const uint8_t *pkt = gather(jb, start, ts0, &len, &n);
        int got = pkt ? opus_decode(o->dec, pkt, (opus_int32)len, o->stage, n * (int)spu, 0) : -1;
        if (got == n * (int)spu) {
            o->kind = STAGE_PACKET;
            o->from = start;
            o->to = start + n;
            o->ts0 = ts0;
        } else {
            o->kind = STAGE_NONE;
        }
    }
    jb->dec_idx = pti - 1;
    jb->dec_pos = u + run;
    if (o->kind != STAGE_PACKET || u >= o->to) {
        plc(o, out, run); /* the packet could not be decoded: conceal its units */
        *ok = 0;
        return run;
    }
    if (u + run > o->to) run = (uint32_t)(o->to - u);
    memcpy(out, o->stage + (u - o->from) * spu, (size_t)run * spu * sizeof *out);
    *ok = 1;
    return run;
}

int cs_jb_opus_conceal(cs_jb *jb, int64_t u, uint32_t max, int16_t *out) {
    cs_jb_opus *o = jb->opus;
    const uint32_t spu = jb->spu;
    if (o->kind != STAGE_CONCEAL || u < o->from || u >= o->to) {
        o->kind = STAGE_NONE;
        const cs_pt_entry *pe = &jb->cfg.pts[jb->dec_idx];
        int64_t limit = u + CS_OPUS_MAX_UNITS;
        if (limit > jb->high_pos) limit = jb->high_pos;
        int64_t g = -1;
        for (int64_t v = u + 1; v < limit && g < 0; v++)
            if (jb->slot_state[(uint64_t)v & jb->mask]) g = v;
        uint64_t sg = (uint64_t)g & jb->mask;
        if (!(pe->flags & CS_PT_NO_FEC) && g > u &&
            jb->cfg.pts[(jb->slot_state[sg] & CS_SLOT_PT_MASK) - 1].codec == CS_CODEC_OPUS &&
            jb->slot_back[sg] == 0) {
            uint32_t len = 0;
            int n = 0;
            const uint8_t *pkt = gather(jb, g, jb->slot_ts[sg], &len, &n);
            int gap = (int)(g - u);
            if (pkt && opus_decode(o->dec, pkt, (opus_int32)len, o->stage, gap * (int)spu, 1) ==
                           gap * (int)spu) {
                int frame = cs_opus_frame_units(pkt, len);
                o->kind = STAGE_CONCEAL;
                o->from = u;
                o->to = g;
                o->real = 0;
                if (cs_opus_packet_has_fec(pkt, len) == 1 && frame > 0 && gap >= frame)
                    for (int i = gap - frame; i < gap; i++) o->real |= 1ull << i;
            }
        }
        if (o->kind == STAGE_NONE) { /* PLC for the lost units of this frame */
            uint32_t r = 1;
            while (r < max && !jb->slot_state[(uint64_t)(u + r) & jb->mask]) r++;
            plc(o, o->stage, r);
            o->kind = STAGE_CONCEAL;
            o->from = u;
            o->to = u + r;
            o->real = 0;
        }
    }
    memcpy(out, o->stage + (u - o->from) * spu, spu * sizeof *out);
    return (int)((o->real >> (u - o->from)) & 1u);
}
