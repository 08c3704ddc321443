/* Opus packet inspection without decoding (RFC 6716): its length in 2.5 ms units, and
 * whether its first frame carries in-band FEC (SILK LBRR data) for the packet before. */
#ifndef CS_OPUS_H
#define CS_OPUS_H

#include "cs_common.h"

/* CDEF BEGIN */
/* 2.5 ms units the packet holds (1 to 48), or -1 if it is malformed. */
int cs_opus_packet_units(const uint8_t *pkt, size_t len);
/* 1 if the packet's first frame carries LBRR (FEC) data, 0 if not or if it is a
 * CELT-only packet, -1 if it is malformed. */
int cs_opus_packet_has_fec(const uint8_t *pkt, size_t len);
/* Units of one Opus frame of the packet: what in-band FEC in it can recover. */
int cs_opus_frame_units(const uint8_t *pkt, size_t len);
/* CDEF END */

#endif
