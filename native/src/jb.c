/* Per-stream adaptive jitter buffer: insert (packet side) and configuration.
 * The pull side (playout decisions and decoding) is in jb_pull.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hugemem.h"
#include "jb_internal.h"

void cs_jb_default_config(cs_jb_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->out_rate = 8000;
    cfg->capacity_ms = 2000;
    cfg->min_delay_ms = 40;
    cfg->max_delay_ms = 400;
    cfg->start_delay_ms = 80;
    cs_pt_entry defaults[] = {
        {0, CS_CODEC_PCMU, 1, 0, 8000},
        {8, CS_CODEC_PCMA, 1, 0, 8000},
        {13, CS_CODEC_CN, 1, 0, 8000},
        {101, CS_CODEC_TELEPHONE_EVENT, 1, 0, 8000},
    };
    cfg->n_pts = sizeof defaults / sizeof defaults[0];
    memcpy(cfg->pts, defaults, sizeof defaults);
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

cs_jb *cs_jb_new(const cs_jb_config *cfg) {
    if (!cfg || cfg->out_rate == 0 || cfg->out_rate % CS_UNITS_PER_SECOND) return NULL;
    if (cfg->out_rate / CS_UNITS_PER_SECOND > CS_MAX_SAMPLES_PER_UNIT) return NULL;
    if (cfg->n_pts == 0 || cfg->n_pts > 16) return NULL;
    if (cfg->min_delay_ms > cfg->max_delay_ms) return NULL;
    uint32_t stride = 0;
    int need_rs = 0, need_opus = 0;
    for (uint32_t i = 0; i < cfg->n_pts; i++) {
        const cs_pt_entry *pe = &cfg->pts[i];
        if (cs_jb_check_pt(pe, cfg->out_rate) != 0) return NULL;
        for (uint32_t j = 0; j < i; j++)
            if (cfg->pts[j].pt == pe->pt) return NULL;
        if (!cs_jb_is_audio(pe->codec)) continue;
        uint32_t bpu = cs_jb_bytes_per_unit(pe);
        if (bpu > stride) stride = bpu;
        if (cs_jb_decoded_rate(pe, cfg->out_rate) != cfg->out_rate) need_rs = 1;
        if (pe->codec == CS_CODEC_OPUS) need_opus = 1;
    }
    if (stride == 0) return NULL;

    uint64_t want = (uint64_t)cfg->capacity_ms * CS_UNITS_PER_SECOND / 1000u;
    uint64_t need = (uint64_t)cfg->max_delay_ms * CS_UNITS_PER_SECOND / 1000u * 2u + 64u;
    if (want < need) want = need;
    uint32_t cap = 64;
    while (cap < want && cap < (1u << 20)) cap <<= 1;
    uint32_t spu = cfg->out_rate / CS_UNITS_PER_SECOND;

    /* The one allocation: struct, every array and the decoder states in a single block,
     * from the huge-page pool (hugemem.h): insert touches the struct's first lines and
     * the ring slots of each datagram's leg, a TLB miss per leg on 4 KiB pages. */
    size_t off_bytes = align64(sizeof(cs_jb));
    size_t off_arrival = off_bytes + (((size_t)cap * stride + 7) & ~(size_t)7);
    size_t off_ts = off_arrival + (size_t)cap * sizeof(int64_t);
    size_t off_len = off_ts + (size_t)cap * sizeof(uint32_t);
    size_t off_state = off_len + (need_opus ? (size_t)cap * sizeof(uint16_t) : 0);
    size_t off_back = off_state + cap;
    size_t off_rs = align64(off_back + (need_opus ? cap : 0));
    size_t off_opus = align64(off_rs + (need_rs ? sizeof(cs_resampler) : 0));
    size_t total = off_opus + (need_opus ? cs_jb_opus_size(spu) : 0);
    uint8_t *block = cs_pool_alloc(align64(total)); /* zeroed */
    if (!block) return NULL;
    cs_jb *jb = (cs_jb *)block;
    jb->block_bytes = align64(total);
    jb->cfg = *cfg;
    jb->cap = cap;
    jb->mask = cap - 1;
    jb->stride = stride;
    jb->spu = spu;
    jb->slot_bytes = block + off_bytes;
    jb->slot_arrival = (int64_t *)(void *)(block + off_arrival);
    jb->slot_ts = (uint32_t *)(void *)(block + off_ts);
    jb->slot_state = block + off_state;
    if (need_opus) {
        jb->slot_len = (uint16_t *)(void *)(block + off_len);
        jb->slot_back = block + off_back;
        jb->opus = cs_jb_opus_init(block + off_opus, cfg->out_rate, spu);
        if (!jb->opus) {
            cs_pool_free(block, jb->block_bytes);
            return NULL;
        }
    }
    if (need_rs) jb->rs = (cs_resampler *)(void *)(block + off_rs);
    jb->n_pts = cfg->n_pts;
    for (uint32_t i = 0; i < cfg->n_pts; i++) {
        const cs_pt_entry *pe = &cfg->pts[i];
        jb->pth[i].pt = pe->pt;
        jb->pth[i].codec = pe->codec;
        jb->pth[i].bpu = (uint16_t)(cs_jb_is_audio(pe->codec) ? cs_jb_bytes_per_unit(pe) : 0);
        jb->pth[i].clock_rate = pe->clock_rate;
    }
    jb->last_audio_pt = -1;
    jb->dec_idx = -1;
    cs_delay_init(&jb->delay, cfg->start_delay_ms, cfg->min_delay_ms, cfg->max_delay_ms);
    jb->st.target_delay_ms = jb->delay.target_ms;
    cs_dtmf_init(&jb->dtmf, cfg->dtmf_key);
    return jb;
}

void cs_jb_free(cs_jb *jb) {
    if (!jb) return;
    cs_dtmf_wipe(&jb->dtmf);
    cs_pool_free(jb, jb->block_bytes);
}

const cs_jb_stats *cs_jb_get_stats(const cs_jb *jb) { return &jb->st; }

void cs_jb_prefetch(const cs_jb *jb) {
    const char *p = (const char *)jb;
    __builtin_prefetch(p, 0); /* the payload table */
    const char *from = (const char *)&jb->seq.initialised;
    const char *to = (const char *)jb->delay.hist;
    for (const char *q = from; q < to; q += 64) __builtin_prefetch(q, 1);
    __builtin_prefetch((const char *)&jb->st, 1);
    __builtin_prefetch((const char *)&jb->st + 64, 1);
}

/* cs_jb_next_lines' body, inline so prefetch_next's copy keeps the addresses in
 * registers instead of an array it then reads back. */
static inline int next_lines(const cs_jb *jb, const void **out) {
    if (!jb->anchored) return 0;
    int n = 0;
    uint64_t slot = (uint64_t)jb->high_pos & jb->mask;
    uint64_t units = jb->last_units ? jb->last_units : CS_UNITS_PER_FRAME;
    if (slot + units > jb->cap) units = jb->cap - slot;
    /* ring bytes: up to 4 lines (G.711 20 ms: 160 bytes), first and last always */
    const uint8_t *b = jb->slot_bytes + slot * jb->stride;
    uint64_t bytes = units * jb->stride;
    for (uint64_t off = 0; off < bytes && n < 3; off += 64) out[n++] = b + off;
    out[n++] = b + bytes - 1;
    out[n++] = &jb->slot_state[slot];
    out[n++] = &jb->slot_arrival[slot];
    out[n++] = &jb->slot_arrival[slot + units - 1];
    out[n++] = &jb->slot_ts[slot];
    uint32_t bit = (uint32_t)((jb->seq.cycles + jb->seq.max_seq + 1u) % CS_SEQ_WINDOW);
    out[n++] = &jb->seq.seen[bit >> 6];
    const cs_delay_est *d = &jb->delay; /* the deque's back (written) and head (read) */
    out[n++] = &d->hist[(d->hist_head + d->hist_len) & (CS_DELAY_WINDOW - 1)];
    return n; /* <= 3 + 7 = CS_JB_HINTS */
}

int cs_jb_next_lines(const cs_jb *jb, const void **out) { return next_lines(jb, out); }

/* Before the sequence and delay work: start loading what an in-order packet will write
 * (cs_jb_next_lines), so those misses overlap the work instead of following it (a
 * receiver that prefetched them a leg ahead finds them loaded already). */
CS_HOT static void prefetch_next(const cs_jb *jb) {
    const void *lines[CS_JB_HINTS];
    int n = next_lines(jb, lines);
    for (int i = 0; i < n; i++) __builtin_prefetch(lines[i], 1);
    __builtin_prefetch(&jb->delay.hist[jb->delay.hist_head], 0);
}

uint32_t cs_jb_samples_per_frame(const cs_jb *jb) { return jb->spu * CS_UNITS_PER_FRAME; }

int cs_jb_take_dtmf(cs_jb *jb, cs_dtmf_event *out, int max) {
    return cs_dtmf_take(&jb->dtmf, out, max);
}

CS_HOT void cs_jb_clear_units(cs_jb *jb, int64_t from, int64_t to, uint64_t *units,
                              uint64_t *pkts) {
    for (int64_t u = from; u < to; u++) {
        uint8_t *state = &jb->slot_state[(uint64_t)u & jb->mask];
        if (*state) {
            (*units)++;
            if (*state & CS_SLOT_START) (*pkts)++;
            *state = 0;
        }
    }
}

/* The entry of the new table that plays what old entry pe held: the same codec, clock
 * and channels, the same payload type preferred; -1 none. */
static int same_decoding(const cs_pt_entry *pe, const cs_pt_entry *pts, uint32_t n) {
    int found = -1;
    for (uint32_t j = 0; j < n; j++) {
        const cs_pt_entry *q = &pts[j];
        if (q->codec != pe->codec || q->clock_rate != pe->clock_rate || q->channels != pe->channels)
            continue;
        if (q->pt == pe->pt) return (int)j;
        if (found < 0) found = (int)j;
    }
    return found;
}

int cs_jb_set_pts(cs_jb *jb, const cs_pt_entry *pts, uint32_t n) {
    if (!pts || n == 0 || n > 16) return -EINVAL;
    uint32_t stride = 0;
    for (uint32_t i = 0; i < n; i++) {
        const cs_pt_entry *pe = &pts[i];
        if (cs_jb_check_pt(pe, jb->cfg.out_rate) != 0) return -EINVAL;
        for (uint32_t j = 0; j < i; j++)
            if (pts[j].pt == pe->pt) return -EINVAL;
        if (!cs_jb_is_audio(pe->codec)) continue;
        uint32_t bpu = cs_jb_bytes_per_unit(pe);
        if (bpu > stride) stride = bpu;
        /* what cs_jb_new sized or built for the old table must serve the new one */
        if (bpu > jb->stride) return -EOPNOTSUPP;
        if (cs_jb_decoded_rate(pe, jb->cfg.out_rate) != jb->cfg.out_rate && !jb->rs)
            return -EOPNOTSUPP;
        if (pe->codec == CS_CODEC_OPUS && !jb->opus) return -EOPNOTSUPP;
    }
    if (stride == 0) return -EINVAL;
    int map[16];
    for (uint32_t i = 0; i < jb->n_pts; i++) map[i] = same_decoding(&jb->cfg.pts[i], pts, n);
    for (uint32_t u = 0; u < jb->cap; u++) {
        uint8_t st = jb->slot_state[u];
        if (st && map[(st & CS_SLOT_PT_MASK) - 1] < 0) return -EBUSY;
    }
    /* From here nothing fails: buffered audio re-pointed at its new entry. */
    for (uint32_t u = 0; u < jb->cap; u++) {
        uint8_t st = jb->slot_state[u];
        if (st)
            jb->slot_state[u] = (uint8_t)((st & ~CS_SLOT_PT_MASK) |
                                          (map[(st & CS_SLOT_PT_MASK) - 1] + 1));
    }
    /* gone: 16 matches no entry, the next audio is a change; one already gone (16, from
     * an earlier update with no audio since) stays gone */
    if (jb->last_audio_pt >= (int)jb->n_pts)
        jb->last_audio_pt = 16;
    else if (jb->last_audio_pt >= 0)
        jb->last_audio_pt = map[jb->last_audio_pt] < 0 ? 16 : map[jb->last_audio_pt];
    if (jb->dec_idx >= 0) jb->dec_idx = map[jb->dec_idx];
    memcpy(jb->cfg.pts, pts, n * sizeof *pts);
    jb->cfg.n_pts = n;
    jb->n_pts = n;
    for (uint32_t i = 0; i < n; i++) {
        const cs_pt_entry *pe = &pts[i];
        jb->pth[i].pt = pe->pt;
        jb->pth[i].codec = pe->codec;
        jb->pth[i].bpu = (uint16_t)(cs_jb_is_audio(pe->codec) ? cs_jb_bytes_per_unit(pe) : 0);
        jb->pth[i].clock_rate = pe->clock_rate;
    }
    jb->st.payload_table_updates++;
    return 0;
}

void cs_jb_set_paused(cs_jb *jb, int paused) {
    if (paused && !jb->paused) {
        /* Buffered audio is discarded before any detector sees it. */
        uint64_t pkts = 0;
        cs_jb_clear_units(jb, jb->play_pos, jb->high_pos, &jb->st.units_flushed, &pkts);
        jb->st.packets_flushed += pkts;
        jb->high_pos = jb->play_pos;
    }
    if (!paused && jb->paused) jb->reanchor = 1; /* the gap is a pause, not loss */
    jb->paused = paused ? 1 : 0;
}

/* Map a new timestamp domain (first packet, restart, SSRC or clock change) so that its
 * first packet lands after everything already buffered: buffered audio drains. */
static void anchor(cs_jb *jb, uint32_t ts, uint32_t clock_rate) {
    /* The first domain starts one ring length in, so packets that arrive before the
     * first one still have non-negative positions. */
    int64_t base = jb->anchored ? jb->high_pos : (int64_t)jb->cap;
    if (jb->anchored && jb->playing) {
        int64_t want = jb->play_pos + (int64_t)cs_jb_target_units(jb);
        if (want > base) base = want;
    }
    /* the domain starts on a group boundary (44.1 kHz: every 4th unit; a re-anchor
     * then leaves up to 3 units, 7.5 ms, unfilled between the domains) */
    int64_t g = (int64_t)cs_jb_group(clock_rate);
    base = (base + g - 1) / g * g;
    jb->clock_rate = clock_rate;
    jb->tpu = clock_rate / CS_UNITS_PER_SECOND;
    jb->group = (uint32_t)g;
    jb->group_ticks = (uint32_t)((int64_t)clock_rate * g / CS_UNITS_PER_SECOND);
    jb->ns_per_tick = 1000000000u % clock_rate ? 0 : 1000000000u / clock_rate;
    jb->last_ts32 = ts;
    jb->ts_high = ts;
    jb->anchor_ts = ts;
    jb->pos_base = base;
    if (!jb->anchored) {
        jb->play_pos = base;
        jb->high_pos = base;
    }
    jb->anchored = 1;
    jb->reanchor = 0;
    cs_delay_rebase(&jb->delay);
}

CS_HOT static int64_t unwrap_ts(cs_jb *jb, uint32_t ts, int update) {
    int32_t diff = (int32_t)(ts - jb->last_ts32);
    int64_t ext = jb->ts_high + diff;
    if (update && diff > 0) {
        jb->ts_high = ext;
        jb->last_ts32 = ts;
    }
    return ext;
}

/* Rounded to the nearest unit (44.1 kHz: group of four units, 441 ticks). */
CS_HOT static int64_t pos_of(cs_jb *jb, int64_t ts_ext, int *misaligned) {
    int64_t d = ts_ext - jb->anchor_ts;
    int64_t g = (int64_t)jb->group;      /* cached by anchor() with clock_rate */
    int64_t per = (int64_t)jb->group_ticks; /* ticks per group */
    int64_t q = d >= 0 ? (d + per / 2) / per : -((-d + per / 2) / per);
    *misaligned = (q * per != d);
    return jb->pos_base + q * g;
}

CS_HOT static void rfc3550_jitter(cs_jb *jb, int64_t now_ns, int64_t ts_ext) {
    /* transit in RTP units; relative times keep the products inside 64 bits */
    int64_t rel_ns = now_ns - jb->jitter_origin_ns;
    int64_t arrival_rtp = rel_ns / 1000 * (int64_t)jb->clock_rate / 1000000;
    int64_t transit = arrival_rtp - ts_ext;
    if (jb->jitter_have_transit) {
        int64_t d = transit - jb->jitter_last_transit;
        if (d < 0) d = -d;
        jb->jitter_q4 += d - ((jb->jitter_q4 + 8) >> 4);
    }
    jb->jitter_last_transit = transit;
    jb->jitter_have_transit = 1;
    jb->st.jitter_rtp_units = (uint64_t)(jb->jitter_q4 >> 4);
}

/* Units of the packet, or -1 if its payload is not a whole number of units. */
CS_HOT static int64_t payload_units(const cs_jb *jb, const cs_jb_pt_hot *pe,
                                    const cs_rtp_header *h) {
    uint32_t bpu = pe->bpu;
    int64_t n;
    if (pe->codec == CS_CODEC_OPUS) {
        n = cs_opus_packet_units(h->payload, h->payload_len);
        if (n > 0 && h->payload_len > (uint64_t)n * CS_OPUS_BYTES_PER_UNIT) n = -1;
    } else if (pe->clock_rate % CS_UNITS_PER_SECOND) { /* 44.1 kHz L16: whole groups */
        uint32_t bps = bpu / ((pe->clock_rate + CS_UNITS_PER_SECOND - 1) / CS_UNITS_PER_SECOND);
        uint64_t ticks = h->payload_len / bps;
        n = h->payload_len % bps == 0 && ticks * CS_UNITS_PER_SECOND % pe->clock_rate == 0
                ? (int64_t)(ticks * CS_UNITS_PER_SECOND / pe->clock_rate)
                : -1;
    } else {
        n = h->payload_len && h->payload_len % bpu == 0 ? (int64_t)(h->payload_len / bpu) : -1;
    }
    return n > 0 && n <= (int64_t)jb->cap / 4 ? n : -1;
}

/* An Opus packet is stored whole: its bytes spread over the slots of all its units
 * (those already played too, so a unit in the middle can still decode the packet), or
 * not at all if any of those slots is taken. Returns the units made playable. */
static uint64_t store_packet(cs_jb *jb, const cs_rtp_header *h, int idx, int64_t pos,
                             int64_t first, int64_t end, int64_t now) {
    for (int64_t u = pos; u < end; u++)
        if (jb->slot_state[(uint64_t)u & jb->mask]) return 0;
    for (int64_t u = pos; u < end; u++) {
        uint64_t slot = (uint64_t)u & jb->mask;
        uint64_t off = (uint64_t)(u - pos) * jb->stride;
        if (off < h->payload_len) {
            uint64_t chunk = h->payload_len - off;
            if (chunk > jb->stride) chunk = jb->stride;
            memcpy(jb->slot_bytes + slot * jb->stride, h->payload + off, chunk);
        }
        jb->slot_back[slot] = (uint8_t)(u - pos);
        jb->slot_ts[slot] = h->ts + (uint32_t)((u - pos) * jb->tpu);
        if (u >= first) {
            jb->slot_state[slot] = (uint8_t)((idx + 1) | (u == first ? CS_SLOT_START : 0));
            jb->slot_arrival[slot] = now;
        }
    }
    jb->slot_len[(uint64_t)pos & jb->mask] = (uint16_t)h->payload_len;
    return (uint64_t)(end - first);
}

CS_HOT static int insert_audio(cs_jb *jb, const cs_rtp_header *h, int idx, int outcome,
                               int64_t now) {
    const cs_jb_pt_hot *pe = &jb->pth[idx];
    uint32_t bpu = pe->bpu;
    int64_t n = payload_units(jb, pe, h);
    if (n < 0) {
        jb->st.packets_bad_payload++;
        return CS_PKT_BAD_PAYLOAD;
    }
    int fresh = !jb->anchored;
    if (fresh || jb->reanchor || outcome == CS_PKT_RESTART || outcome == CS_PKT_SSRC_CHANGE ||
        pe->clock_rate != jb->clock_rate) {
        anchor(jb, h->ts, pe->clock_rate);
        jb->jitter_have_transit = 0;
        if (fresh) jb->jitter_origin_ns = now;
    }
    if (jb->last_audio_pt >= 0 && jb->last_audio_pt != idx) jb->st.payload_type_changes++;
    jb->last_audio_pt = idx;
    if (jb->last_units && (uint32_t)n != jb->last_units) jb->st.ptime_changes++;
    jb->last_units = (uint32_t)n;

    int misaligned;
    int64_t ts_ext = unwrap_ts(jb, h->ts, 1);
    int64_t pos = pos_of(jb, ts_ext, &misaligned);
    if (pos + n > jb->high_pos + (int64_t)jb->cap || pos + (int64_t)jb->cap < jb->play_pos) {
        /* The timestamp leapt with the sequence intact (an SBC re-based it): re-anchor
         * rather than flush the ring or call everything late. */
        anchor(jb, h->ts, pe->clock_rate);
        ts_ext = unwrap_ts(jb, h->ts, 1);
        pos = pos_of(jb, ts_ext, &misaligned);
        jb->st.resyncs++;
    }
    if (misaligned) jb->st.misaligned++;
    if (!jb->playing && pos < jb->play_pos && jb->high_pos - pos <= (int64_t)jb->cap)
        jb->play_pos = pos; /* still prefetching: an earlier packet moves the start back */

    if (!jb->first_arrival_ns) jb->first_arrival_ns = now ? now : 1;
    if (outcome != CS_PKT_REORDERED) {
        /* late packets inform the delay estimate too: they are why it must grow */
        int64_t media_ns = jb->ns_per_tick
                               ? (ts_ext - jb->anchor_ts) * (int64_t)jb->ns_per_tick
                               : (ts_ext - jb->anchor_ts) * 1000000000LL / (int64_t)jb->clock_rate;
        cs_delay_packet(&jb->delay, now, media_ns);
        if (jb->st.target_delay_ms != jb->delay.target_ms)
            jb->st.target_delay_ms = jb->delay.target_ms;
        rfc3550_jitter(jb, now, ts_ext);
    }

    int64_t end = pos + n;
    int64_t first = pos > jb->play_pos ? pos : jb->play_pos;
    if (first >= end) {
        jb->st.packets_late++;
        jb->st.packets_discarded++;
        jb->st.units_late += (uint64_t)n;
        return CS_PKT_LATE;
    }
    if (end - jb->play_pos > (int64_t)jb->cap) {
        /* Overflow: flush the oldest audio down to the target delay (NetEQ smart flush). */
        int64_t new_play = end - (int64_t)cs_jb_target_units(jb);
        uint64_t pkts = 0;
        cs_jb_clear_units(jb, jb->play_pos, new_play, &jb->st.units_flushed, &pkts);
        jb->st.packets_flushed += pkts;
        jb->st.packets_discarded += pkts;
        jb->play_pos = new_play;
        if (jb->high_pos < new_play) jb->high_pos = new_play;
        jb->st.flushes++;
        if (first < new_play) first = new_play;
    }

    uint64_t written = 0;
    uint8_t start_flag = CS_SLOT_START;
    uint64_t first_slot = (uint64_t)first & jb->mask;
    uint64_t n_new = (uint64_t)(end - first);
    int packet = pe->codec == CS_CODEC_OPUS;
    if (packet) {
        written = store_packet(jb, h, idx, pos, first, end, now);
        n_new = 0; /* skips the per-unit copy below */
    }
    /* 44.1 kHz: units of 110 or 111 ticks, each copied on its own */
    const uint32_t clk = pe->clock_rate, frac = clk % CS_UNITS_PER_SECOND != 0;
    const uint32_t bps = frac ? bpu / ((clk + CS_UNITS_PER_SECOND - 1) / CS_UNITS_PER_SECOND) : 0;
    int bulk = !packet && !frac && bpu == jb->stride && first_slot + n_new <= jb->cap;
    if (bulk) { /* common case: one copy when the slots are back to back and all free */
        uint8_t *const state = jb->slot_state + first_slot;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (n_new - 1u < 8u && first_slot + 8 <= jb->cap) { /* one load tests them all */
            uint64_t w; /* byte i: slot first_slot + i */
            memcpy(&w, state, 8);
            bulk = (w & (~0ull >> (64 - 8 * n_new))) == 0;
        } else
#endif
        {
            for (uint64_t i = 0; i < n_new; i++) bulk &= !state[i];
        }
        if (bulk) {
            memcpy(jb->slot_bytes + first_slot * bpu, h->payload + (first - pos) * bpu,
                   n_new * bpu);
            /* what the loop below writes, without its per-unit tests: every slot is
             * free, none wraps, and a unit is tpu whole ticks (clock_rate == jb's,
             * a multiple of 400 Hz) */
            const uint32_t tpu = jb->tpu, ts0 = h->ts + (uint32_t)((uint64_t)(first - pos) * tpu);
            int64_t *const arrival = jb->slot_arrival + first_slot;
            uint32_t *const ts = jb->slot_ts + first_slot;
            memset(state, idx + 1, n_new);
            state[0] |= CS_SLOT_START;
            for (uint64_t i = 0; i < n_new; i++) { /* locals: no reload after each store */
                arrival[i] = now;
                ts[i] = ts0 + (uint32_t)i * tpu;
            }
            written = n_new;
            n_new = 0; /* skips the per-unit loop */
        }
    }
    const int64_t tick0 = n_new ? cs_jb_tick(pos, clk) : 0;
    for (int64_t u = first; u < first + (int64_t)n_new; u++) {
        uint64_t slot = (uint64_t)u & jb->mask;
        if (jb->slot_state[slot]) continue; /* overlap with audio we already hold */
        int64_t tick = cs_jb_tick(u, clk) - tick0;
        if (frac)
            memcpy(jb->slot_bytes + slot * jb->stride, h->payload + (uint64_t)tick * bps,
                   (size_t)(cs_jb_tick(u + 1, clk) - tick0 - tick) * bps);
        else if (!bulk)
            memcpy(jb->slot_bytes + slot * jb->stride, h->payload + (u - pos) * bpu, bpu);
        jb->slot_state[slot] = (uint8_t)((idx + 1) | start_flag);
        jb->slot_arrival[slot] = now;
        jb->slot_ts[slot] = h->ts + (uint32_t)tick;
        start_flag = 0;
        written++;
    }
    if (written == 0) {
        jb->st.packets_duplicate++;
        return CS_PKT_DUPLICATE;
    }
    jb->st.units_late += (uint64_t)(first - pos);
    jb->st.units_accepted += written;
    jb->st.total_samples_received += written * jb->spu;
    if (end >= jb->high_pos) {
        /* A gap before this packet was silence, not loss, if the sender said so (CN)
         * or skipped timestamps without skipping sequence numbers (VAD suppression). */
        if ((jb->dtx || (outcome == CS_PKT_IN_ORDER && pos > jb->high_pos)) &&
            pos > jb->cng_until)
            jb->cng_until = pos;
        jb->high_pos = end;
        jb->dtx = 0;
    }
    return outcome;
}

CS_HOT int cs_jb_insert(cs_jb *jb, const cs_rtp_header *h, int64_t now_ns) {
    prefetch_next(jb);
    jb->st.packets_received++;
    int idx = -1; /* payload types are unique in the table (cs_jb_new) */
    for (uint32_t i = 0; i < jb->n_pts; i++)
        if (jb->pth[i].pt == h->payload_type) {
            idx = (int)i;
            break;
        }
    if (idx < 0) {
        jb->st.packets_unknown_pt++;
        return CS_PKT_UNKNOWN_PT;
    }
    int outcome;
    uint64_t ext = 0;
    if (!jb->seq.initialised) {
        cs_seq_start(&jb->seq, h->ssrc, h->seq);
        outcome = CS_PKT_IN_ORDER;
    } else if (h->ssrc != jb->seq.ssrc) {
        jb->st.ssrc_changes++;
        cs_seq_start(&jb->seq, h->ssrc, h->seq);
        outcome = CS_PKT_SSRC_CHANGE;
    } else {
        outcome = cs_seq_update(&jb->seq, h->seq, &ext);
        if (outcome == CS_PKT_DUPLICATE) {
            jb->st.packets_duplicate++;
            return outcome;
        }
        if (outcome == CS_PKT_JUMP) {
            jb->st.packets_jump++;
            return outcome;
        }
        if (outcome == CS_PKT_RESTART) {
            jb->st.restarts++;
            cs_seq_start(&jb->seq, h->ssrc, h->seq);
        }
    }
    jb->st.expected_packets = cs_seq_expected(&jb->seq);
    jb->st.packets_lost = (int64_t)jb->st.expected_packets - (int64_t)cs_seq_received(&jb->seq);
    jb->st.ext_highest_seq = jb->seq.cycles + jb->seq.max_seq - 65536u;
    if (outcome == CS_PKT_RESTART || outcome == CS_PKT_SSRC_CHANGE) jb->reanchor = 1;

    if (jb->paused) {
        jb->st.packets_paused++;
        return CS_PKT_PAUSED;
    }
    const cs_jb_pt_hot *pe = &jb->pth[idx];
    if (pe->codec == CS_CODEC_TELEPHONE_EVENT) {
        int64_t start_pos = -1;
        if (jb->anchored && !jb->reanchor && pe->clock_rate == jb->clock_rate) {
            int misaligned;
            start_pos = pos_of(jb, unwrap_ts(jb, h->ts, 0), &misaligned);
        }
        int r = cs_dtmf_packet(&jb->dtmf, h->payload, h->payload_len, h->ts, pe->clock_rate,
                               start_pos, now_ns);
        if (r < 0) {
            jb->st.packets_bad_payload++;
            return CS_PKT_BAD_PAYLOAD;
        }
        jb->st.packets_dtmf++;
        jb->st.dtmf_events += (uint64_t)r;
        return CS_PKT_DTMF;
    }
    if (pe->codec == CS_CODEC_CN || (pe->codec == CS_CODEC_OPUS && h->payload_len <= 2)) {
        /* RFC 3389 comfort noise, or an Opus DTX frame (TOC only): silence, not loss */
        jb->st.packets_cn++;
        jb->dtx = 1;
        return CS_PKT_CN;
    }
    outcome = insert_audio(jb, h, idx, outcome, now_ns);
    switch (outcome) {
    case CS_PKT_IN_ORDER: jb->st.packets_in_order++; break;
    case CS_PKT_GAP: jb->st.packets_gap++; break;
    case CS_PKT_REORDERED: jb->st.packets_reordered++; break;
    default: break;
    }
    return outcome;
}

CS_HOT int cs_jb_insert_datagram(cs_jb *jb, const uint8_t *buf, size_t len, int64_t now_ns) {
    cs_rtp_header h;
    int err = cs_rtp_parse(buf, len, &h);
    if (err != CS_RTP_OK) return -err;
    return cs_jb_insert(jb, &h, now_ns);
}
