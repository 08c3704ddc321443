/* Playout side of the jitter buffer: one 20 ms frame per pull on the caller's clock.
 *
 * Each pull emits the frame at the playout point and normally advances it by one frame.
 * The delay is steered toward the target with whole frames, never by time-stretching:
 *  - underrun (nothing buffered at or after the playout point, not DTX): hold, i.e.
 *    emit concealment without advancing, so a late packet is still played; capped at
 *    max_delay, after which the playout point moves on (the sender went quiet);
 *  - buffered audio well below target: hold once (deceleration, rate limited);
 *  - the lowest level over the last second (the trough, immune to the sawtooth of long
 *    packets) well above target: drop the frame at the playout point (acceleration, at
 *    most once per window unless the buffer is far over target). This buffer feeds
 *    analysis, where a complete signal is worth more than shaving delay, so audio is
 *    dropped only to stop growth (drift, recovery after a spike);
 *  - the next audio lies far ahead of an empty playout point (DTX end, silence
 *    suppression, a burst loss): jump forward to target delay before it.
 * Loss never stalls output: a missing frame with audio buffered behind it is concealed
 * and passed (the aiortc#543 failure mode). */
#include <string.h>

#include "jb_internal.h"

#define ADJUST_INTERVAL_NS 200000000LL
#define INTERRUPTION_UNITS 60 /* 150 ms, as NetEQ's interruption metric */
#define LOW_MARGIN_MS 15.0
#define HIGH_MARGIN_MS 60.0 /* or the target itself, whichever is larger */
#define TROUGH_WINDOW_PULLS 50u
#define UNIT_MS 2.5

#define NONE INT64_MIN

CS_HOT static int64_t next_present(const cs_jb *jb, int64_t from, int64_t to) {
    for (int64_t u = from; u < to; u++)
        if (jb->slot_state[(uint64_t)u & jb->mask]) return u;
    return NONE;
}

CS_HOT static void conceal_units(cs_jb *jb, uint32_t units) {
    if (!jb->in_concealment) {
        jb->in_concealment = 1;
        jb->st.concealment_events++;
    }
    jb->conceal_run += units;
}

CS_HOT static void end_concealment(cs_jb *jb) {
    if (jb->in_concealment && jb->conceal_run >= INTERRUPTION_UNITS) {
        jb->st.interruption_count++;
        jb->st.total_interruption_duration_ns += (uint64_t)jb->conceal_run * 2500000u;
    }
    jb->in_concealment = 0;
    jb->conceal_run = 0;
}

CS_HOT static int finish(cs_jb *jb, cs_frame_info *info, uint8_t flag) {
    info->flag = flag;
    info->dtx = (uint8_t)jb->dtx;
    info->ssrc = jb->seq.ssrc;
    return flag;
}

/* Emit the frame at the playout point and advance past it. Received units are decoded
 * in runs (jb_decode.c); a lost unit is concealed, or recovered by Opus in-band FEC. */
CS_HOT static int emit(cs_jb *jb, int64_t now, int16_t *pcm, cs_frame_info *info) {
    uint32_t concealed = 0, cng = 0, real_units = 0, played_units = 0;
    uint64_t wait_sum = 0;
    uint8_t mask = 0;
    const uint32_t spu = jb->spu;
    info->pos = jb->play_pos;
    uint32_t k = 0;
    while (k < CS_UNITS_PER_FRAME) {
        int64_t u = jb->play_pos + k;
        uint64_t slot = (uint64_t)u & jb->mask;
        if (!jb->slot_state[slot]) {
            if (jb->dtx || u < jb->cng_until) {
                memset(pcm + k * spu, 0, spu * sizeof *pcm);
                cng += spu;
                end_concealment(jb);
            } else if (cs_jb_conceal(jb, u, CS_UNITS_PER_FRAME - k, pcm + k * spu)) {
                mask |= (uint8_t)(1u << k);
                jb->st.fec_samples += spu;
                end_concealment(jb);
            } else {
                concealed += spu;
                conceal_units(jb, 1);
            }
            k++;
            continue;
        }
        int ok = 1;
        uint32_t run = cs_jb_decode(jb, u, CS_UNITS_PER_FRAME - k, pcm + k * spu, &ok);
        if (!info->has_rtp_ts) {
            uint32_t clk = jb->cfg.pts[(jb->slot_state[slot] & CS_SLOT_PT_MASK) - 1].clock_rate;
            info->rtp_ts = jb->slot_ts[slot] - (uint32_t)(cs_jb_tick(u, clk) -
                                                          cs_jb_tick(u - (int64_t)k, clk));
            info->has_rtp_ts = 1;
        }
        /* locals: the stores below (a byte, a counter) would otherwise make the compiler
         * reload the ring's pointers and mask from jb after each of them */
        const uint64_t ring_mask = jb->mask;
        uint8_t *const states = jb->slot_state;
        const int64_t *const arrivals = jb->slot_arrival;
        for (uint32_t r = 0; r < run; r++) {
            uint64_t sr = (uint64_t)(u + r) & ring_mask;
            uint8_t st = states[sr];
            int64_t wait = now - arrivals[sr];
            if (wait < 0) wait = 0;
            if (st & CS_SLOT_START) {
                uint64_t b = (uint64_t)(wait / 1000000);
                if (b >= CS_WAIT_HIST_BUCKETS) b = CS_WAIT_HIST_BUCKETS - 1;
                jb->st.wait_hist[b]++;
                jb->st.packets_played++;
            }
            states[sr] = 0;
            if (ok) wait_sum += (uint64_t)wait;
        }
        if (ok) {
            mask |= (uint8_t)(((1u << run) - 1u) << k);
            real_units += run;
            end_concealment(jb);
        } else { /* received but undecodable: concealment, and counted as such */
            concealed += run * spu;
            conceal_units(jb, run);
        }
        played_units += run;
        k += run;
    }
    if (real_units) {
        uint64_t samples = (uint64_t)real_units * spu;
        jb->st.jitter_buffer_delay_ns += wait_sum * spu;
        jb->st.jitter_buffer_target_delay_ns += samples * jb->delay.target_ms * 1000000u;
        jb->st.jitter_buffer_minimum_delay_ns += samples * jb->delay.min_ms * 1000000u;
        jb->st.jitter_buffer_emitted_count += samples;
    }
    jb->st.units_played += played_units;
    jb->st.concealed_samples += concealed;
    jb->st.cng_samples += cng;
    jb->play_pos += CS_UNITS_PER_FRAME;
    info->real_mask = mask;
    info->concealed_samples = (uint16_t)concealed;
    uint8_t flag = concealed ? CS_FRAME_CONCEALED : mask == 0xFF ? CS_FRAME_NORMAL : CS_FRAME_CNG;
    return finish(jb, info, flag);
}

/* Emit concealment without advancing the playout point. */
CS_HOT static int hold(cs_jb *jb, int16_t *pcm, cs_frame_info *info, int underrun) {
    uint32_t spf = jb->spu * CS_UNITS_PER_FRAME;
    memset(pcm, 0, spf * sizeof *pcm);
    info->pos = jb->play_pos;
    info->concealed_samples = (uint16_t)spf;
    if (underrun) {
        jb->st.concealed_samples += spf;
        conceal_units(jb, CS_UNITS_PER_FRAME);
        jb->hold_run++;
    } else {
        jb->st.inserted_samples_for_deceleration += spf;
    }
    return finish(jb, info, CS_FRAME_CONCEALED);
}

CS_HOT int cs_jb_pull(cs_jb *jb, int64_t now, int16_t *pcm, cs_frame_info *info) {
    uint32_t spf = jb->spu * CS_UNITS_PER_FRAME;
    memset(info, 0, sizeof *info);
    info->samples = (uint16_t)spf;
    info->pos = -1;
    info->target_delay_ms = jb->delay.target_ms;
    jb->st.frames_pulled++;

    if (jb->paused) {
        memset(pcm, 0, spf * sizeof *pcm);
        jb->st.paused_samples += spf;
        end_concealment(jb);
        return finish(jb, info, CS_FRAME_PAUSED);
    }
    if (!jb->playing) {
        if (!jb->first_arrival_ns ||
            now - jb->first_arrival_ns < (int64_t)jb->delay.target_ms * 1000000) {
            memset(pcm, 0, spf * sizeof *pcm);
            jb->st.not_started_samples += spf;
            return finish(jb, info, CS_FRAME_NOT_STARTED);
        }
        jb->playing = 1;
        jb->last_adjust_ns = now;
        jb->level_filt_ms = (double)(jb->high_pos - jb->play_pos) * UNIT_MS;
        jb->trough_prev_ms = -1.0;
        jb->trough_cur_ms = 1e18;
    }

    int64_t target_u = (int64_t)cs_jb_target_units(jb);
    double target_ms = (double)jb->delay.target_ms;
    int64_t next = next_present(jb, jb->play_pos, jb->high_pos);
    if (next >= jb->play_pos + CS_UNITS_PER_FRAME && next - jb->play_pos > target_u + 8) {
        jb->play_pos = next - target_u; /* only empty units lie in between */
        jb->st.resyncs++;
        jb->level_filt_ms = (double)(jb->high_pos - jb->play_pos) * UNIT_MS;
    }
    int64_t level_u = jb->high_pos - jb->play_pos;
    double level_ms = (double)(level_u > 0 ? level_u : 0) * UNIT_MS;
    jb->level_filt_ms += (level_ms - jb->level_filt_ms) / 8.0;
    if (level_ms < jb->trough_cur_ms) jb->trough_cur_ms = level_ms;
    if (++jb->trough_pulls >= TROUGH_WINDOW_PULLS) {
        jb->trough_prev_ms = jb->trough_cur_ms;
        jb->trough_cur_ms = 1e18;
        jb->trough_pulls = 0;
    }
    info->buffer_level_ms = (uint32_t)level_ms;
    jb->st.buffer_level_ms = (uint64_t)level_ms;
    /* written only on a change: the line is insert's (jb_internal.h), and a store from
     * the pull's CPU would take it from the receiver's cache every frame */
    if (jb->st.target_delay_ms != jb->delay.target_ms) jb->st.target_delay_ms = jb->delay.target_ms;

    if (next == NONE && !jb->dtx) {
        if ((uint64_t)jb->hold_run * 20u < jb->delay.max_ms) return hold(jb, pcm, info, 1);
        return emit(jb, now, pcm, info); /* quiet sender: let the playout point move on */
    }
    jb->hold_run = 0;
    if (jb->dtx) return emit(jb, now, pcm, info);

    int far_over = level_ms > 2.0 * target_ms + 100.0;
    if (now - jb->last_adjust_ns >= ADJUST_INTERVAL_NS &&
        jb->level_filt_ms < target_ms - LOW_MARGIN_MS && level_ms < target_ms) {
        jb->last_adjust_ns = now;
        jb->level_filt_ms += 20.0;
        return hold(jb, pcm, info, 0);
    }
    double margin = target_ms > HIGH_MARGIN_MS ? target_ms : HIGH_MARGIN_MS;
    if ((jb->trough_prev_ms > target_ms + margin && level_ms > target_ms + 20.0) || far_over) {
        uint64_t units = 0, pkts = 0;
        cs_jb_clear_units(jb, jb->play_pos, jb->play_pos + CS_UNITS_PER_FRAME, &units, &pkts);
        jb->st.units_dropped += units;
        jb->st.removed_samples_for_acceleration += units * jb->spu;
        jb->st.packets_dropped += pkts;
        jb->st.packets_discarded += pkts;
        jb->play_pos += CS_UNITS_PER_FRAME;
        jb->last_adjust_ns = now;
        jb->level_filt_ms -= 20.0;
        /* the trough must be measured again after the change: one drop per window */
        jb->trough_prev_ms = -1.0;
        jb->trough_cur_ms = 1e18;
        jb->trough_pulls = 0;
    }
    return emit(jb, now, pcm, info);
}
