/* Polyphase FIR sample-rate converter for rational ratios (8k <-> 16k, 48k -> 8k,
 * 44.1k -> 8k/16k, ...).
 *
 * One Kaiser-windowed sinc prototype per (in, out) pair, split into L branches of K taps
 * (L/M = out/in reduced). The passband is flat to 0.425 of the lower rate (3.4 kHz when
 * one side is 8 kHz, ripple < 0.05 dB), the stopband is at least 85 dB down from 0.55
 * of it, and the delay is CS_RS_ZEROS samples of the lower rate (3 ms at 8 kHz), the same
 * for every ratio. Each output sample is computed the same way however the input is
 * chunked, so a stream resampled in pieces is bit-identical to one resampled at once.
 *
 * The state lives in a caller-provided struct (cs_resampler_init; the jitter buffer
 * embeds one per stream) or in one allocation (cs_resampler_new, for tools and tests);
 * processing never allocates. Not thread-safe. */
#ifndef CS_RESAMPLE_H
#define CS_RESAMPLE_H

#include "cs_common.h"

/* CDEF BEGIN */
typedef struct cs_resampler cs_resampler;

/* 1 if in_rate -> out_rate is supported: both in 1..192000 and the reduced ratio L/M
 * with L, M <= 8 (every pair of 8, 12, 16, 24, 32 and 48 kHz qualifies), or 44.1 kHz
 * down to 8 or 16 kHz (80/441, 160/441: their branch tables, 85 KB each, are built once
 * per process on first use and shared by every stream). */
int cs_resampler_supported(uint32_t in_rate, uint32_t out_rate);
cs_resampler *cs_resampler_new(uint32_t in_rate, uint32_t out_rate);
void cs_resampler_free(cs_resampler *rs);
/* Forget the history (a discontinuity): the next output starts from silence. */
void cs_resampler_reset(cs_resampler *rs);
/* Convert n_in samples; writes the outputs that became due (at most
 * cs_resampler_max_out(rs, n_in)) and returns how many. */
uint32_t cs_resampler_process(cs_resampler *rs, const int16_t *in, uint32_t n_in,
                              int16_t *out);
uint32_t cs_resampler_max_out(const cs_resampler *rs, uint32_t n_in);
/* Group delay in output samples (may be fractional for ratios like 4/3). */
double cs_resampler_delay(const cs_resampler *rs);
/* CDEF END */

enum {
    CS_RS_ZEROS = 24,      /* sinc zero crossings per side, at the lower rate */
    CS_RS_MAX_FACTOR = 8,  /* largest L or M */
    CS_RS_MAX_PROTO = 2 * CS_RS_ZEROS * CS_RS_MAX_FACTOR + 1,
    CS_RS_MAX_POLY = CS_RS_MAX_PROTO + CS_RS_MAX_FACTOR, /* L * K, K = ceil(N / L) */
    CS_RS_BLOCK = 960      /* input samples converted per inner pass */
};

struct cs_resampler {
    uint32_t in_rate, out_rate;
    uint32_t L, M;         /* out/in = L/M, reduced */
    uint32_t K;            /* taps per branch */
    uint32_t t;            /* next output's position in prototype samples, relative to
                              the start of the next input block; always < M */
    const float *shared;   /* the branches of a 44.1 kHz ratio (built once, shared);
                              NULL: they are in poly */
    float poly[CS_RS_MAX_POLY];              /* branch p: poly[p*K .. p*K+K), time-reversed */
    float buf[CS_RS_MAX_PROTO + CS_RS_BLOCK]; /* K-1 samples of history, then the block */
};

/* Initialise caller-owned state; returns 0, or -1 if the ratio is unsupported. */
int cs_resampler_init(cs_resampler *rs, uint32_t in_rate, uint32_t out_rate);
/* Reset (as cs_resampler_reset), the next input being sample in_pos of a stream whose
 * output sample j sits at input time j * in_rate / out_rate: the outputs then fall on
 * the same grid as if the whole stream had been converted from its sample 0 (a restart
 * inside a 44.1 kHz stream keeps exactly 80 outputs per 441 inputs from any unit). */
void cs_resampler_restart_at(cs_resampler *rs, uint64_t in_pos);

#endif
