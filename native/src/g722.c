/* G.722 decoder (see g722.h). Block names in comments follow the Recommendation's
 * decoder description: INVQAL/INVQBL/INVQAH (inverse quantizers), LOGSCL/LOGSCH and
 * SCALEL/SCALEH (scale factor adaptation), UPPOL1/UPPOL2/UPZERO (predictor
 * coefficient adaptation), FILTEP/FILTEZ/PREDIC (prediction), RECONS/LIMIT. All
 * arithmetic is the Recommendation's 16-bit fixed point, held in 32-bit integers. */
#include <string.h>

#include "g722.h"

/* 6-bit lower sub-band inverse quantizer (64 kbit/s), signed, indexed by the code. */
static const int16_t QM6[64] = {
    -136,   -136,   -136,   -136,   -24808, -21904, -19008, -16704, -14984, -13512, -12280,
    -11192, -10232, -9360,  -8576,  -7856,  -7192,  -6576,  -6000,  -5456,  -4944,  -4464,
    -4008,  -3576,  -3168,  -2776,  -2400,  -2032,  -1688,  -1360,  -1040,  -728,   24808,
    21904,  19008,  16704,  14984,  13512,  12280,  11192,  10232,  9360,   8576,   7856,
    7192,   6576,   6000,   5456,   4944,   4464,   4008,   3576,   3168,   2776,   2400,
    2032,   1688,   1360,   1040,   728,    432,    136,    -432,   -136};
/* 4-bit truncated code (the predictor's input), its scale-factor multiplier index. */
static const int16_t QM4[16] = {0,     -20456, -12896, -8968, -6288, -4240, -2584, -1200,
                                20456, 12896,  8968,   6288,  4240,  2584,  1200,  0};
static const uint8_t RL42[16] = {0, 7, 6, 5, 4, 3, 2, 1, 7, 6, 5, 4, 3, 2, 1, 0};
static const int16_t WL[8] = {-60, -30, 58, 172, 334, 538, 1198, 3042};
/* 2-bit higher sub-band. */
static const int16_t QM2[4] = {-7408, -1616, 7408, 1616};
static const uint8_t RH2[4] = {2, 1, 2, 1};
static const int16_t WH[3] = {0, -214, 798};
/* 2^(i/32) * 2048: the antilog of the scale factor's fraction. */
static const int16_t ILB[32] = {2048, 2093, 2139, 2186, 2233, 2282, 2332, 2383,
                                2435, 2489, 2543, 2599, 2656, 2714, 2774, 2834,
                                2896, 2960, 3025, 3091, 3158, 3228, 3298, 3371,
                                3444, 3520, 3597, 3676, 3756, 3838, 3922, 4008};
/* Receive QMF: h0..h23 (symmetric). */
static const int16_t QMF[24] = {3,    -11, -11,  53,   12,  -156, 32,   362,
                                -210, -805, 951, 3876, 3876, 951, -805, -210,
                                362,  32,   -156, 12,  53,   -11, -11,  3};

static inline int32_t sat16(int32_t v) {
    return v > 32767 ? 32767 : v < -32768 ? -32768 : v;
}

static inline int32_t limit15(int32_t v) {
    return v > 16383 ? 16383 : v < -16384 ? -16384 : v;
}

/* SCALEL / SCALEH: scale factor from the log scale factor; `base` is 8 (lower band)
 * or 10 (higher band). A negative shift count is a left shift. */
static int32_t scale(int32_t nb, int base) {
    int32_t frac = ILB[(nb >> 6) & 31];
    int sh = base - (nb >> 11);
    int32_t v = sh >= 0 ? frac >> sh : frac << -sh;
    return v << 2;
}

/* The predictor half shared by both bands: PARREC, RECONS, UPPOL2, UPPOL1, UPZERO,
 * DELAYA, then FILTEP, FILTEZ and PREDIC for the next sample. `dq` is the quantized
 * difference the predictor sees (DLT or DH). */
static void adapt(cs_g722_band *b, int32_t dq) {
    int32_t p = sat16(dq + b->sz);   /* PARREC */
    int32_t r = sat16(b->s + dq);    /* RECONS */

    /* UPPOL2 */
    int sg0 = p < 0, sg1 = b->p[1] < 0, sg2 = b->p[2] < 0;
    int32_t wd1 = sat16(b->a[1] * 4);
    int32_t wd2 = sg0 == sg1 ? -wd1 : wd1;
    if (wd2 > 32767) wd2 = 32767;
    wd2 >>= 7;
    int32_t wd3 = sg0 == sg2 ? 128 : -128;
    int32_t apl2 = wd2 + wd3 + ((b->a[2] * 32512) >> 15);
    if (apl2 > 12288) apl2 = 12288;
    if (apl2 < -12288) apl2 = -12288;

    /* UPPOL1 */
    int32_t apl1 = (sg0 == sg1 ? 192 : -192) + ((b->a[1] * 32640) >> 15);
    int32_t lim = 15360 - apl2;
    if (apl1 > lim) apl1 = lim;
    if (apl1 < -lim) apl1 = -lim;

    /* UPZERO */
    int32_t step = dq == 0 ? 0 : 128;
    for (int i = 1; i <= 6; i++) {
        int32_t s = (dq < 0) == (b->d[i] < 0) ? step : -step;
        b->b[i] = s + ((b->b[i] * 32640) >> 15);
    }

    /* DELAYA */
    for (int i = 6; i > 1; i--) b->d[i] = b->d[i - 1];
    b->d[1] = dq;
    b->a[1] = apl1;
    b->a[2] = apl2;
    b->p[2] = b->p[1];
    b->p[1] = p;
    b->r[2] = b->r[1];
    b->r[1] = r;

    /* FILTEP, FILTEZ, PREDIC */
    int32_t sp = ((b->a[1] * sat16(2 * b->r[1])) >> 15) + ((b->a[2] * sat16(2 * b->r[2])) >> 15);
    int32_t sz = 0;
    for (int i = 1; i <= 6; i++) sz += (b->b[i] * sat16(2 * b->d[i])) >> 15;
    b->sz = sat16(sz);
    b->s = sat16(sp + b->sz);
}

static int32_t lower(cs_g722_band *b, int code) {
    int32_t dl = (b->det * QM6[code]) >> 15;          /* INVQAL */
    int32_t yl = limit15(b->s + dl);                  /* RECONS, LIMIT */
    int ril4 = code >> 2;
    int32_t dlt = (b->det * QM4[ril4]) >> 15;         /* INVQBL */
    int32_t nb = ((b->nb * 32512) >> 15) + WL[RL42[ril4]]; /* LOGSCL */
    b->nb = nb < 0 ? 0 : nb > 18432 ? 18432 : nb;
    b->det = scale(b->nb, 8);                         /* SCALEL */
    adapt(b, dlt);
    return yl;
}

static int32_t higher(cs_g722_band *b, int code) {
    int32_t dh = (b->det * QM2[code]) >> 15;          /* INVQAH */
    int32_t yh = limit15(b->s + dh);                  /* RECONS, LIMIT */
    int32_t nb = ((b->nb * 32512) >> 15) + WH[RH2[code]]; /* LOGSCH */
    b->nb = nb < 0 ? 0 : nb > 22528 ? 22528 : nb;
    b->det = scale(b->nb, 10);                        /* SCALEH */
    adapt(b, dh);
    return yh;
}

void cs_g722_reset(cs_g722_decoder *d) {
    memset(d, 0, sizeof *d);
    d->lo.det = 32;
    d->hi.det = 8;
}

static inline int16_t out16(int32_t v) {
    v >>= 11; /* 14-bit QMF output (>> 13) in the top of 16 bits */
    return (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v);
}

void cs_g722_decode(cs_g722_decoder *d, const uint8_t *in, size_t n, int16_t *out) {
    for (size_t k = 0; k < n; k++) {
        int32_t rl = lower(&d->lo, in[k] & 0x3F);
        int32_t rh = higher(&d->hi, in[k] >> 6);
        /* Receive QMF: two 16 kHz samples per pair of sub-band samples. */
        memmove(d->xd + 1, d->xd, 11 * sizeof d->xd[0]);
        memmove(d->xs + 1, d->xs, 11 * sizeof d->xs[0]);
        d->xd[0] = rl - rh;
        d->xs[0] = rl + rh;
        int32_t a = 0, b = 0;
        for (int i = 0; i < 12; i++) {
            a += QMF[2 * i] * d->xd[i];
            b += QMF[2 * i + 1] * d->xs[i];
        }
        out[2 * k] = out16(a);
        out[2 * k + 1] = out16(b);
    }
}
