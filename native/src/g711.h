/* G.711 µ-law and A-law, batch decode and encode.
 *
 * Decoding is a lookup in 256-entry tables built by the compiler (no start-up code, no
 * locks). Encoding is the classic segment search on the 14-bit (µ-law) or 13-bit (A-law)
 * magnitude, bit-exact with the Sun/CCITT reference used by CPython's audioop, so a
 * decode-encode round trip returns every code except µ-law 0x7F (negative zero encodes
 * as 0xFF). In-place use is not supported: `in` and `out` must not overlap. */
#ifndef CS_G711_H
#define CS_G711_H

#include "cs_common.h"

/* CDEF BEGIN */
void cs_ulaw_decode(const uint8_t *in, int16_t *out, size_t n);
void cs_alaw_decode(const uint8_t *in, int16_t *out, size_t n);
void cs_ulaw_encode(const int16_t *in, uint8_t *out, size_t n);
void cs_alaw_encode(const int16_t *in, uint8_t *out, size_t n);
/* CDEF END */

/* Single-sample forms, for callers that convert one value at a time. */
int16_t cs_ulaw_to_linear(uint8_t code);
int16_t cs_alaw_to_linear(uint8_t code);
uint8_t cs_linear_to_ulaw(int16_t sample);
uint8_t cs_linear_to_alaw(int16_t sample);

#endif
