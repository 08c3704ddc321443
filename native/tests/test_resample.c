/* Sample-rate converter tests (native/src/resample.c): tone gain and phase against the
 * analytic signal, rejection of what would alias, chunking invariance, exact output
 * counts and reset. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cs_test.h"
#include "resample.h"

static const uint32_t PAIRS[][2] = {
    {8000, 16000}, {16000, 8000}, {48000, 8000}, {48000, 16000}, {8000, 48000},
    {24000, 16000}, {32000, 8000}, {32000, 16000}, {12000, 16000}, {16000, 48000},
    {44100, 8000},  {44100, 16000},
};
#define N_PAIRS (sizeof PAIRS / sizeof PAIRS[0])

static int16_t *sine(uint32_t rate, double freq, double amp, uint32_t n) {
    int16_t *x = malloc(n * sizeof *x);
    for (uint32_t i = 0; i < n; i++)
        x[i] = (int16_t)lrint(amp * sin(2.0 * M_PI * freq * (double)i / (double)rate));
    return x;
}

static void test_resample_supported(void) {
    CHECK(cs_resampler_supported(8000, 16000));
    CHECK(cs_resampler_supported(48000, 8000));
    CHECK(cs_resampler_supported(16000, 16000));
    CHECK(cs_resampler_supported(44100, 16000)); /* 160/441: a shared table */
    CHECK(cs_resampler_supported(44100, 8000));
    CHECK(!cs_resampler_supported(44100, 48000)); /* 160/147: no table */
    CHECK(!cs_resampler_supported(22050, 8000));
    CHECK(!cs_resampler_supported(0, 8000));
    CHECK(cs_resampler_new(44100, 48000) == NULL);
}

/* A restart at input sample P keeps the outputs on the whole stream's grid: after the
 * filter's warm-up they equal the whole stream's from output ceil(P * L / M) on, and
 * 441 inputs always give exactly 80 (160) outputs, whatever P. */
static void test_resample_restart_at_keeps_the_grid(void) {
    const uint32_t outs[] = {8000, 16000, 8000};
    const uint32_t ins[] = {44100, 44100, 48000};
    uint32_t rng = 777;
    for (size_t k = 0; k < 3; k++) {
        uint32_t fin = ins[k], fout = outs[k], n_in = fin / 2; /* 500 ms */
        int16_t *x = malloc(n_in * sizeof *x);
        for (uint32_t i = 0; i < n_in; i++) x[i] = (int16_t)(cs_test_rng(&rng) & 0x3FFF);
        cs_resampler *whole = cs_resampler_new(fin, fout), *part = cs_resampler_new(fin, fout);
        REQUIRE(whole != NULL && part != NULL);
        int16_t *y = malloc(cs_resampler_max_out(whole, n_in) * sizeof *y);
        int16_t *z = malloc(cs_resampler_max_out(part, n_in) * sizeof *z);
        uint32_t ny = cs_resampler_process(whole, x, n_in, y);
        CHECK_EQ(ny, (uint64_t)n_in * fout / fin);
        const uint32_t starts[] = {110, 220, 331, 441, 1000};
        for (size_t s = 0; s < 5; s++) {
            uint32_t p = starts[s];
            uint64_t first = ((uint64_t)p * fout + fin - 1) / fin; /* ceil(p * L / M) */
            cs_resampler_restart_at(part, p);
            uint32_t nz = cs_resampler_process(part, x + p, n_in - p, z);
            CHECK_EQ(nz, ny - first);
            uint32_t warm = 2 * (uint32_t)cs_resampler_delay(part) + 2;
            CHECK(memcmp(z + warm, y + first + warm, (nz - warm) * sizeof *z) == 0);
        }
        free(x);
        free(y);
        free(z);
        cs_resampler_free(whole);
        cs_resampler_free(part);
    }
}

/* A passband tone comes out with unit gain, delayed by exactly cs_resampler_delay. */
static void test_resample_tone_matches_analytic(void) {
    for (size_t p = 0; p < N_PAIRS; p++) {
        uint32_t fin = PAIRS[p][0], fout = PAIRS[p][1];
        uint32_t fmin = fin < fout ? fin : fout;
        const double freqs[] = {300.0, 0.25 * fmin, 0.42 * fmin};
        for (size_t f = 0; f < 3; f++) {
            cs_resampler *rs = cs_resampler_new(fin, fout);
            REQUIRE(rs != NULL);
            uint32_t n_in = fin / 5; /* 200 ms */
            int16_t *x = sine(fin, freqs[f], 12000.0, n_in);
            int16_t *y = malloc(cs_resampler_max_out(rs, n_in) * sizeof *y);
            uint32_t n_out = cs_resampler_process(rs, x, n_in, y);
            CHECK_EQ(n_out, (uint64_t)n_in * fout / fin);
            double delay = cs_resampler_delay(rs), worst = 0.0;
            for (uint32_t j = fout / 50; j < n_out; j++) { /* after 20 ms of warm-up */
                double want = 12000.0 * sin(2.0 * M_PI * freqs[f] * ((double)j - delay) / fout);
                double err = fabs((double)y[j] - want);
                if (err > worst) worst = err;
            }
            /* rounding of input and output only, plus < 0.02 dB of ripple at the edge */
            double limit = f == 2 ? 25.0 : 2.0;
            if (worst > limit)
                printf("  %u->%u at %.0f Hz: worst error %.1f\n", fin, fout, freqs[f], worst);
            CHECK(worst <= limit);
            free(x);
            free(y);
            cs_resampler_free(rs);
        }
    }
}

/* Input above 0.55 of the lower rate's Nyquist frequency does not alias back. */
static void test_resample_rejects_alias(void) {
    for (size_t p = 0; p < N_PAIRS; p++) {
        uint32_t fin = PAIRS[p][0], fout = PAIRS[p][1];
        if (fin <= fout) continue;
        double freq = 0.6 * fout; /* folds to 0.4 * fout */
        cs_resampler *rs = cs_resampler_new(fin, fout);
        REQUIRE(rs != NULL);
        uint32_t n_in = fin / 5;
        int16_t *x = sine(fin, freq, 20000.0, n_in);
        int16_t *y = malloc(cs_resampler_max_out(rs, n_in) * sizeof *y);
        uint32_t n_out = cs_resampler_process(rs, x, n_in, y);
        int peak = 0;
        for (uint32_t j = fout / 50; j < n_out; j++)
            if (abs(y[j]) > peak) peak = abs(y[j]);
        CHECK(peak <= 2); /* 20000 attenuated by > 80 dB */
        free(x);
        free(y);
        cs_resampler_free(rs);
    }
}

/* Chunked processing is bit-identical to one call; reset restarts from silence. */
static void test_resample_chunking_and_reset(void) {
    uint32_t rng = 12345;
    for (size_t p = 0; p < N_PAIRS; p++) {
        uint32_t fin = PAIRS[p][0], fout = PAIRS[p][1];
        uint32_t n_in = 3000;
        int16_t *x = malloc(n_in * sizeof *x);
        for (uint32_t i = 0; i < n_in; i++) x[i] = (int16_t)(cs_test_rng(&rng) & 0xFFFF);
        cs_resampler *a = cs_resampler_new(fin, fout), *b = cs_resampler_new(fin, fout);
        REQUIRE(a != NULL && b != NULL);
        int16_t *ya = malloc(cs_resampler_max_out(a, n_in) * sizeof *ya);
        int16_t *yb = malloc(cs_resampler_max_out(b, n_in) * sizeof *yb);
        uint32_t na = cs_resampler_process(a, x, n_in, ya), nb = 0, done = 0;
        while (done < n_in) {
            uint32_t chunk = 1 + cs_test_rng(&rng) % 1500;
            if (chunk > n_in - done) chunk = n_in - done;
            nb += cs_resampler_process(b, x + done, chunk, yb + nb);
            done += chunk;
        }
        CHECK_EQ(nb, na);
        CHECK(memcmp(ya, yb, na * sizeof *ya) == 0);
        cs_resampler_reset(a);
        int16_t *y2 = malloc(cs_resampler_max_out(a, fin / 100) * sizeof *y2);
        uint32_t n2 = cs_resampler_process(a, x, fin / 100, y2); /* 10 ms */
        CHECK_EQ(n2, fout / 100);
        CHECK(memcmp(y2, ya, n2 * sizeof *y2) == 0);
        free(y2);
        free(x);
        free(ya);
        free(yb);
        cs_resampler_free(a);
        cs_resampler_free(b);
    }
}

static const cs_test_case resample_cases[] = {
    {"supported", test_resample_supported},
    {"tone_matches_analytic", test_resample_tone_matches_analytic},
    {"rejects_alias", test_resample_rejects_alias},
    {"chunking_and_reset", test_resample_chunking_and_reset},
    {"restart_at_keeps_the_grid", test_resample_restart_at_keeps_the_grid},
};
const cs_test_suite cs_suite_resample = {"resample", resample_cases,
                                         CS_TEST_COUNT(resample_cases)};
