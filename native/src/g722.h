/* ITU-T G.722 (SB-ADPCM, 7 kHz audio) decoder, 64 kbit/s mode (the RTP payload of
 * RFC 3551: one octet per pair of 16 kHz samples, the 2 high-band bits on top).
 *
 * Written from the block description of Recommendation G.722 (lower and higher
 * sub-band ADPCM decoders, receive QMF); checked bit-exact against libavcodec's decoder.
 * The output is the 14-bit reconstruction scaled to 16 bits. The state is a plain struct
 * (no allocation); reset it on packet loss, as the algorithm has no concealment. */
#ifndef CS_G722_H
#define CS_G722_H

#include "cs_common.h"

/* CDEF BEGIN */
typedef struct {
    int32_t s;    /* predictor output (signal estimate) */
    int32_t sz;   /* zero-section part of it */
    int32_t det;  /* quantizer scale factor */
    int32_t nb;   /* logarithmic scale factor */
    int32_t a[3]; /* pole coefficients a1, a2 (a[0] unused) */
    int32_t b[7]; /* zero coefficients b1..b6 */
    int32_t d[7]; /* quantized differences, d[1] newest */
    int32_t p[3]; /* partially reconstructed signal, p[1] and p[2] delayed */
    int32_t r[3]; /* reconstructed signal, r[1] and r[2] delayed */
} cs_g722_band;

typedef struct {
    cs_g722_band lo, hi;
    int32_t xd[12]; /* receive QMF delay lines: difference and sum of the bands */
    int32_t xs[12];
} cs_g722_decoder;

void cs_g722_reset(cs_g722_decoder *d);
/* Decode n octets into 2*n samples at 16 kHz. */
void cs_g722_decode(cs_g722_decoder *d, const uint8_t *in, size_t n, int16_t *out);
/* CDEF END */

#endif
