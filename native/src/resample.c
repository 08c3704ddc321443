/* Polyphase FIR sample-rate converter (see resample.h).
 *
 * Output j sits at prototype time j*M (the input upsampled by L); it is the dot product
 * of branch (j*M mod L) with the K newest inputs up to index floor(j*M / L). The branch
 * taps are stored time-reversed so the dot product runs forward over the input. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "resample.h"

#define KAISER_BETA 8.5
#define CUTOFF 0.94 /* -6 dB point, as a fraction of the lower rate's Nyquist frequency */

static uint32_t gcd_u32(uint32_t a, uint32_t b) {
    while (b) {
        uint32_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* Ratios beyond CS_RS_MAX_FACTOR: one branch table per process, built on first use. */
typedef struct {
    uint32_t in_rate, out_rate;
    float *table;
} big_ratio;
static float tab_44k1_8k[80 * 265], tab_44k1_16k[160 * 133]; /* L * K */
static big_ratio BIG[] = {
    {44100, 8000, tab_44k1_8k},
    {44100, 16000, tab_44k1_16k},
};

static big_ratio *big_ratio_for(uint32_t in_rate, uint32_t out_rate) {
    for (size_t i = 0; i < sizeof BIG / sizeof BIG[0]; i++)
        if (BIG[i].in_rate == in_rate && BIG[i].out_rate == out_rate) return &BIG[i];
    return NULL;
}

int cs_resampler_supported(uint32_t in_rate, uint32_t out_rate) {
    if (in_rate == 0 || out_rate == 0 || in_rate > 192000 || out_rate > 192000) return 0;
    uint32_t g = gcd_u32(in_rate, out_rate);
    return (out_rate / g <= CS_RS_MAX_FACTOR && in_rate / g <= CS_RS_MAX_FACTOR) ||
           big_ratio_for(in_rate, out_rate) != NULL;
}

/* Zeroth-order modified Bessel function of the first kind (power series). */
static double bessel_i0(double x) {
    double sum = 1.0, term = 1.0, q = x * x / 4.0;
    for (int k = 1; k < 50; k++) {
        term *= q / ((double)k * (double)k);
        sum += term;
        if (term < sum * 1e-17) break;
    }
    return sum;
}

/* Taps per branch of the L/M prototype. */
static uint32_t branch_taps(uint32_t L, uint32_t M) {
    uint32_t half = CS_RS_ZEROS * (L > M ? L : M); /* prototype samples per side */
    return (2 * half + 1 + L - 1) / L;
}

/* The L branches of K taps, time-reversed, into poly. */
static void design(uint32_t L, uint32_t M, float *poly) {
    uint32_t half = CS_RS_ZEROS * (L > M ? L : M);
    uint32_t n_taps = 2 * half + 1;
    uint32_t K = branch_taps(L, M);
    /* Prototype at rate in*L: cutoff fc (cycles per prototype sample) at CUTOFF of the
     * lower Nyquist frequency. Each branch is normalised to unit DC gain. */
    double fc = CUTOFF * 0.5 / (double)(L > M ? L : M);
    double i0_beta = bessel_i0(KAISER_BETA);
    for (uint32_t p = 0; p < L; p++) {
        double sum = 0.0;
        double taps[CS_RS_MAX_PROTO];
        for (uint32_t q = 0; q < K; q++) {
            uint32_t n = p + q * L;
            double v = 0.0;
            if (n < n_taps) {
                double x = (double)n - (double)half;
                double sinc = x == 0.0 ? 1.0 : sin(2.0 * M_PI * fc * x) / (2.0 * M_PI * fc * x);
                double r = x / (double)half;
                double w = bessel_i0(KAISER_BETA * sqrt(fmax(0.0, 1.0 - r * r))) / i0_beta;
                v = sinc * w;
            }
            taps[q] = v;
            sum += v;
        }
        for (uint32_t q = 0; q < K; q++)
            poly[p * K + (K - 1 - q)] = (float)(taps[q] / sum);
    }
}

static void design_big(void) {
    for (size_t i = 0; i < sizeof BIG / sizeof BIG[0]; i++) {
        uint32_t g = gcd_u32(BIG[i].in_rate, BIG[i].out_rate);
        design(BIG[i].out_rate / g, BIG[i].in_rate / g, BIG[i].table);
    }
}
static pthread_once_t big_once = PTHREAD_ONCE_INIT;

int cs_resampler_init(cs_resampler *rs, uint32_t in_rate, uint32_t out_rate) {
    if (!cs_resampler_supported(in_rate, out_rate)) return -1;
    memset(rs, 0, sizeof *rs);
    uint32_t g = gcd_u32(in_rate, out_rate);
    uint32_t L = out_rate / g, M = in_rate / g;
    rs->in_rate = in_rate;
    rs->out_rate = out_rate;
    rs->L = L;
    rs->M = M;
    rs->K = branch_taps(L, M);
    big_ratio *big = big_ratio_for(in_rate, out_rate);
    if (big != NULL && (L > CS_RS_MAX_FACTOR || M > CS_RS_MAX_FACTOR)) {
        pthread_once(&big_once, design_big);
        rs->shared = big->table;
    } else {
        design(L, M, rs->poly);
    }
    return 0;
}

void cs_resampler_restart_at(cs_resampler *rs, uint64_t in_pos) {
    cs_resampler_reset(rs);
    /* first output j with j*M >= in_pos*L, relative to in_pos*L */
    uint64_t r = (in_pos % rs->M) * rs->L % rs->M;
    rs->t = (uint32_t)((rs->M - r) % rs->M);
}

void cs_resampler_reset(cs_resampler *rs) {
    rs->t = 0;
    memset(rs->buf, 0, sizeof rs->buf);
}

cs_resampler *cs_resampler_new(uint32_t in_rate, uint32_t out_rate) {
    cs_resampler *rs = malloc(sizeof *rs);
    if (!rs) return NULL;
    if (cs_resampler_init(rs, in_rate, out_rate) != 0) {
        free(rs);
        return NULL;
    }
    return rs;
}

void cs_resampler_free(cs_resampler *rs) { free(rs); }

uint32_t cs_resampler_max_out(const cs_resampler *rs, uint32_t n_in) {
    return (uint32_t)(((uint64_t)n_in * rs->L) / rs->M) + 1u;
}

double cs_resampler_delay(const cs_resampler *rs) {
    uint32_t big = rs->L > rs->M ? rs->L : rs->M;
    return (double)(CS_RS_ZEROS * big) / (double)rs->M;
}

static inline int16_t to_i16(float y) {
    if (y >= 32767.0f) return 32767;
    if (y <= -32768.0f) return -32768;
    return (int16_t)(y >= 0.0f ? y + 0.5f : y - 0.5f);
}

uint32_t cs_resampler_process(cs_resampler *rs, const int16_t *in, uint32_t n_in,
                              int16_t *out) {
    const uint32_t K = rs->K, L = rs->L, M = rs->M, hist = K - 1;
    const float *poly = rs->shared ? rs->shared : rs->poly;
    uint32_t produced = 0;
    while (n_in > 0) {
        uint32_t n = n_in < CS_RS_BLOCK ? n_in : CS_RS_BLOCK;
        float *blk = rs->buf + hist;
        for (uint32_t i = 0; i < n; i++) blk[i] = (float)in[i];
        uint32_t t = rs->t;
        const uint32_t end = n * L;
        while (t < end) {
            uint32_t m = t / L;          /* newest input index within the block */
            const float *h = poly + (t - m * L) * K;
            const float *x = rs->buf + m; /* x[K-1] is input m */
            float acc = 0.0f;
            for (uint32_t j = 0; j < K; j++) acc += h[j] * x[j];
            out[produced++] = to_i16(acc);
            t += M;
        }
        rs->t = t - end;
        memmove(rs->buf, rs->buf + n, hist * sizeof(float));
        in += n;
        n_in -= n;
    }
    return produced;
}
