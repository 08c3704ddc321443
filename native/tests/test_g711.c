/* G.711 tables and encoders (native/src/g711.c). */
#include "cs_test.h"

#include <stdlib.h>

#include "g711.h"

/* Reference decoders written from the bit layout, independently of the tables. */
static int ref_ulaw(uint8_t code)
{
    int v = (uint8_t)~code;
    int mag = ((((v & 0x0F) << 3) + 0x84) << ((v >> 4) & 7)) - 0x84;
    return (v & 0x80) ? -mag : mag;
}

static int ref_alaw(uint8_t code)
{
    int v = code ^ 0x55;
    int seg = (v >> 4) & 7;
    int mag = ((v & 0x0F) << 4) + (seg ? 0x108 : 8);
    if (seg > 1)
        mag <<= seg - 1;
    return (v & 0x80) ? mag : -mag;
}

static void test_g711_decode_tables(void)
{
    uint8_t codes[256];
    int16_t pcm_u[256], pcm_a[256];
    for (int c = 0; c < 256; c++)
        codes[c] = (uint8_t)c;
    cs_ulaw_decode(codes, pcm_u, 256);
    cs_alaw_decode(codes, pcm_a, 256);
    for (int c = 0; c < 256; c++) {
        CHECK_EQ(pcm_u[c], ref_ulaw((uint8_t)c));
        CHECK_EQ(pcm_a[c], ref_alaw((uint8_t)c));
        CHECK_EQ(cs_ulaw_to_linear((uint8_t)c), pcm_u[c]);
        CHECK_EQ(cs_alaw_to_linear((uint8_t)c), pcm_a[c]);
    }
    CHECK_EQ(pcm_u[0x00], -32124);
    CHECK_EQ(pcm_u[0x80], 32124);
    CHECK_EQ(pcm_a[0xD5], 8);
    CHECK_EQ(pcm_a[0x2A], -32256);
}

/* Encoder values taken from CPython's audioop.lin2ulaw / lin2alaw. */
static void test_g711_encode_known_points(void)
{
    static const struct {
        int16_t pcm;
        uint8_t ulaw, alaw;
    } cases[] = {
        {0, 0xFF, 0xD5},       {-1, 0x7E, 0x55},      {1, 0xFF, 0xD5},
        {4, 0xFE, 0xD5},       {-5, 0x7E, 0x55},      {100, 0xF2, 0xD3},
        {-100, 0x72, 0x53},    {1000, 0xCE, 0xFA},    {32767, 0x80, 0xAA},
        {-32768, 0x00, 0x2A},  {32632, 0x80, 0xAA},   {-32636, 0x00, 0x2A},
    };
    for (size_t i = 0; i < CS_TEST_COUNT(cases); i++) {
        CHECK_EQ(cs_linear_to_ulaw(cases[i].pcm), cases[i].ulaw);
        CHECK_EQ(cs_linear_to_alaw(cases[i].pcm), cases[i].alaw);
    }
}

static void test_g711_round_trip(void)
{
    for (int c = 0; c < 256; c++) {
        uint8_t u = cs_linear_to_ulaw(cs_ulaw_to_linear((uint8_t)c));
        CHECK_EQ(u, c == 0x7F ? 0xFF : c); /* negative zero encodes as positive zero */
        CHECK_EQ(cs_linear_to_alaw(cs_alaw_to_linear((uint8_t)c)), c);
    }
}

static void test_g711_encode_all_int16(void)
{
    enum { N = 65536 };
    static int16_t pcm[N], back_u[N], back_a[N];
    static uint8_t u[N], a[N];
    for (int i = 0; i < N; i++)
        pcm[i] = (int16_t)(i - 32768);
    cs_ulaw_encode(pcm, u, N);
    cs_alaw_encode(pcm, a, N);
    cs_ulaw_decode(u, back_u, N);
    cs_alaw_decode(a, back_a, N);
    int max_u = 0, max_a = 0;
    for (int i = 0; i < N; i++) {
        CHECK_EQ(u[i], cs_linear_to_ulaw(pcm[i]));
        CHECK_EQ(a[i], cs_linear_to_alaw(pcm[i]));
        if (i > 0) { /* quantisation preserves order */
            CHECK(back_u[i] >= back_u[i - 1]);
            CHECK(back_a[i] >= back_a[i - 1]);
        }
        int eu = abs(back_u[i] - pcm[i]), ea = abs(back_a[i] - pcm[i]);
        max_u = eu > max_u ? eu : max_u;
        max_a = ea > max_a ? ea : max_a;
    }
    CHECK_EQ(max_u, 644); /* clipping of -32768 to -32124 */
    CHECK_EQ(max_a, 512); /* half the top A-law step, and clipping to +-32256 */
}

/* The batch decoders take 16 codes at a time where the CPU allows (g711.c) and the rest
 * one by one: every length and start offset must agree with the single-sample form, and
 * nothing past out[n - 1] may be written. */
static void test_g711_decode_any_length_and_offset(void)
{
    enum { LEN = 96, OFFS = 19 };
    uint8_t codes[LEN + OFFS];
    int16_t pcm[LEN + 1];
    for (int i = 0; i < LEN + OFFS; i++)
        codes[i] = (uint8_t)(i * 37 + 11);
    for (int off = 0; off < OFFS; off++)
        for (int n = 0; n <= LEN; n++)
            for (int law = 0; law < 2; law++) {
                for (int i = 0; i <= LEN; i++)
                    pcm[i] = 0x5A5A;
                if (law)
                    cs_alaw_decode(codes + off, pcm, (size_t)n);
                else
                    cs_ulaw_decode(codes + off, pcm, (size_t)n);
                for (int i = 0; i < n; i++)
                    CHECK_EQ(pcm[i], law ? cs_alaw_to_linear(codes[off + i])
                                         : cs_ulaw_to_linear(codes[off + i]));
                CHECK_EQ(pcm[n], 0x5A5A);
            }
}

static const cs_test_case g711_cases[] = {
    {"decode_tables", test_g711_decode_tables},
    {"decode_any_length_and_offset", test_g711_decode_any_length_and_offset},
    {"encode_known_points", test_g711_encode_known_points},
    {"round_trip", test_g711_round_trip},
    {"encode_all_int16", test_g711_encode_all_int16},
};
const cs_test_suite cs_suite_g711 = {"g711", g711_cases, CS_TEST_COUNT(g711_cases)};
