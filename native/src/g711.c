/* G.711 µ-law / A-law conversion. See g711.h for the contract. */
#include "g711.h"

/* ---- decode tables, computed by the compiler --------------------------------------
 *
 * µ-law: the code is stored inverted. After inversion, bit 7 is the sign, bits 6..4 the
 * segment (exponent) and bits 3..0 the mantissa; the magnitude is
 * ((mantissa << 3) + 0x84) << segment, minus the 0x84 bias.
 * A-law: the code is stored with even bits inverted (xor 0x55). Bit 7 set means
 * positive; segment 0 is linear ((mantissa << 4) + 8), segment s >= 1 is
 * ((mantissa << 4) + 0x108) << (s - 1). */
#define CS_ULAW_MAG(v) ((((((v) & 0x0F) << 3) + 0x84) << (((v) >> 4) & 7)) - 0x84)
#define CS_ULAW_VALUE(c) \
    ((int16_t)((((c) ^ 0xFF) & 0x80) ? -CS_ULAW_MAG((c) ^ 0xFF) : CS_ULAW_MAG((c) ^ 0xFF)))

#define CS_ALAW_SEG(v) (((v) >> 4) & 7)
#define CS_ALAW_SHIFT(v) (CS_ALAW_SEG(v) ? CS_ALAW_SEG(v) - 1 : 0)
#define CS_ALAW_MAG(v) \
    (CS_ALAW_SEG(v) == 0 ? (((v) & 0x0F) << 4) + 8 \
                         : ((((v) & 0x0F) << 4) + 0x108) << CS_ALAW_SHIFT(v))
#define CS_ALAW_VALUE(c) \
    ((int16_t)((((c) ^ 0x55) & 0x80) ? CS_ALAW_MAG((c) ^ 0x55) : -CS_ALAW_MAG((c) ^ 0x55)))

/* Expand a per-code macro over 0..255. */
#define CS_X4(f, b) f(b), f((b) + 1), f((b) + 2), f((b) + 3)
#define CS_X16(f, b) CS_X4(f, b), CS_X4(f, (b) + 4), CS_X4(f, (b) + 8), CS_X4(f, (b) + 12)
#define CS_X64(f, b) CS_X16(f, b), CS_X16(f, (b) + 16), CS_X16(f, (b) + 32), CS_X16(f, (b) + 48)
#define CS_X256(f) CS_X64(f, 0), CS_X64(f, 64), CS_X64(f, 128), CS_X64(f, 192)

static const int16_t ulaw_table[256] = {CS_X256(CS_ULAW_VALUE)};
static const int16_t alaw_table[256] = {CS_X256(CS_ALAW_VALUE)};

int16_t cs_ulaw_to_linear(uint8_t code) { return ulaw_table[code]; }

int16_t cs_alaw_to_linear(uint8_t code) { return alaw_table[code]; }

/* ---- batch decode -------------------------------------------------------------------
 *
 * A table lookup per sample costs two loads and a store: a 20 ms frame (160 codes) is
 * ~160 cycles, a quarter of a jitter-buffer pull. Where the CPU has AVX2 (checked at run
 * time, so the library still runs on any x86-64), 16 codes at a time are decoded from
 * the bit layout above instead: the exponent picks a power of two from a 16-byte table
 * (vpshufb, one per lane), one multiply replaces the variable shift, and the sign is a
 * conditional negate. The magnitude stays below 2^15 (µ-law: 252 << 7, A-law: 504 << 6),
 * so 16-bit lanes are exact; the tests compare every code with the tables. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define CS_G711_AVX2 1

CS_HOT __attribute__((target("avx2"))) static void ulaw_decode_avx2(const uint8_t *in,
                                                                    int16_t *out, size_t n)
{
    /* 1 << exponent in the low byte of each 16-bit lane (high index bit: a zero byte) */
    const __m256i pow = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, (char)128, 0, 0, 0, 0, 0, 0, 0,
                                         0, 1, 2, 4, 8, 16, 32, 64, (char)128, 0, 0, 0, 0, 0, 0,
                                         0, 0);
    const __m256i seven = _mm256_set1_epi16(7), hi = _mm256_set1_epi16((short)0x8000);
    const __m256i low4 = _mm256_set1_epi16(0x0F), bias = _mm256_set1_epi16(0x84);
    const __m128i inv = _mm_set1_epi8((char)0xFF);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i c = _mm_xor_si128(_mm_loadu_si128((const void *)(in + i)), inv);
        __m256i v = _mm256_cvtepu8_epi16(c);
        __m256i e = _mm256_and_si256(_mm256_srli_epi16(v, 4), seven);
        __m256i p = _mm256_shuffle_epi8(pow, _mm256_or_si256(e, hi));
        __m256i m = _mm256_add_epi16(_mm256_slli_epi16(_mm256_and_si256(v, low4), 3), bias);
        __m256i mag = _mm256_sub_epi16(_mm256_mullo_epi16(m, p), bias);
        __m256i neg = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 15); /* bit 7: negative */
        _mm256_storeu_si256((void *)(out + i), _mm256_sub_epi16(_mm256_xor_si256(mag, neg), neg));
    }
    for (; i < n; i++)
        out[i] = ulaw_table[in[i]];
}

CS_HOT __attribute__((target("avx2"))) static void alaw_decode_avx2(const uint8_t *in,
                                                                    int16_t *out, size_t n)
{
    /* segment 0 and 1 are not shifted, segment s > 1 by s - 1 */
    const __m256i pow = _mm256_setr_epi8(1, 1, 2, 4, 8, 16, 32, 64, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                                         1, 2, 4, 8, 16, 32, 64, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i seven = _mm256_set1_epi16(7), hi = _mm256_set1_epi16((short)0x8000);
    const __m256i low4 = _mm256_set1_epi16(0x0F), zero = _mm256_setzero_si256();
    const __m256i add1 = _mm256_set1_epi16(0x108), add0 = _mm256_set1_epi16(8 - 0x108);
    const __m256i signbit = _mm256_set1_epi16(0x80);
    const __m128i key = _mm_set1_epi8(0x55);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i c = _mm_xor_si128(_mm_loadu_si128((const void *)(in + i)), key);
        __m256i v = _mm256_cvtepu8_epi16(c);
        __m256i s = _mm256_and_si256(_mm256_srli_epi16(v, 4), seven);
        __m256i p = _mm256_shuffle_epi8(pow, _mm256_or_si256(s, hi));
        __m256i add = _mm256_add_epi16(add1, _mm256_and_si256(_mm256_cmpeq_epi16(s, zero), add0));
        __m256i m = _mm256_add_epi16(_mm256_slli_epi16(_mm256_and_si256(v, low4), 4), add);
        __m256i mag = _mm256_mullo_epi16(m, p);
        __m256i neg = _mm256_cmpeq_epi16(_mm256_and_si256(v, signbit), zero); /* bit 7 clear */
        _mm256_storeu_si256((void *)(out + i), _mm256_sub_epi16(_mm256_xor_si256(mag, neg), neg));
    }
    for (; i < n; i++)
        out[i] = alaw_table[in[i]];
}
#endif

CS_HOT void cs_ulaw_decode(const uint8_t *in, int16_t *out, size_t n)
{
#ifdef CS_G711_AVX2
    if (n >= 16 && __builtin_cpu_supports("avx2")) {
        ulaw_decode_avx2(in, out, n);
        return;
    }
#endif
#pragma GCC unroll 8
    for (size_t i = 0; i < n; i++)
        out[i] = ulaw_table[in[i]];
}

CS_HOT void cs_alaw_decode(const uint8_t *in, int16_t *out, size_t n)
{
#ifdef CS_G711_AVX2
    if (n >= 16 && __builtin_cpu_supports("avx2")) {
        alaw_decode_avx2(in, out, n);
        return;
    }
#endif
#pragma GCC unroll 8
    for (size_t i = 0; i < n; i++)
        out[i] = alaw_table[in[i]];
}

/* ---- encode -----------------------------------------------------------------------
 *
 * Segment search: the segment is the index of the first end point not below the
 * (biased) magnitude. Both laws have 8 segments; a magnitude past the last end point
 * saturates to the largest code of its sign. */

static int segment_of(int magnitude, const int ends[8])
{
    int seg = 0;
    while (seg < 8 && magnitude > ends[seg])
        seg++;
    return seg;
}

static const int ulaw_seg_end[8] = {0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF};
static const int alaw_seg_end[8] = {0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF};

enum { ULAW_BIAS = 33 }; /* 0x84 >> 2: the bias at 14-bit scale */

uint8_t cs_linear_to_ulaw(int16_t sample)
{
    /* 14-bit two's complement value: floor division by 4 (gcc and clang shift negative
     * ints arithmetically), as the reference does. */
    int pcm = (int)sample >> 2;
    int mask = 0xFF;
    if (pcm < 0) {
        pcm = -pcm;
        mask = 0x7F;
    }
    pcm += ULAW_BIAS; /* magnitudes from 8159 up pass 0x1FFF and saturate below */
    int seg = segment_of(pcm, ulaw_seg_end);
    if (seg >= 8)
        return (uint8_t)(0x7F ^ mask);
    int code = (seg << 4) | ((pcm >> (seg + 1)) & 0x0F);
    return (uint8_t)(code ^ mask);
}

uint8_t cs_linear_to_alaw(int16_t sample)
{
    /* 13-bit two's complement value; negatives use one's complement magnitude. */
    int pcm = (int)sample >> 3;
    int mask = 0xD5;
    if (pcm < 0) {
        pcm = -pcm - 1;
        mask = 0x55;
    }
    int seg = segment_of(pcm, alaw_seg_end);
    if (seg >= 8)
        return (uint8_t)(0x7F ^ mask);
    int mantissa = (seg < 2 ? pcm >> 1 : pcm >> seg) & 0x0F;
    return (uint8_t)(((seg << 4) | mantissa) ^ mask);
}

void cs_ulaw_encode(const int16_t *in, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = cs_linear_to_ulaw(in[i]);
}

void cs_alaw_encode(const int16_t *in, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = cs_linear_to_alaw(in[i]);
}
