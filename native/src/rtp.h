/* RTP and RTCP wire parsing (RFC 3550, RFC 5761 demux). No allocation: views point into
 * the caller's buffer. */
#ifndef CS_RTP_H
#define CS_RTP_H

#include "cs_common.h"

/* CDEF BEGIN */
/* Why a datagram was rejected. 0 is success. Stable numbers: they are exported as labels. */
enum {
    CS_RTP_OK = 0,
    CS_RTP_ERR_SHORT = 1,        /* shorter than the 12-byte fixed header */
    CS_RTP_ERR_VERSION = 2,      /* version field is not 2 */
    CS_RTP_ERR_CSRC = 3,         /* CSRC list runs past the end */
    CS_RTP_ERR_EXTENSION = 4,    /* header extension runs past the end */
    CS_RTP_ERR_PADDING = 5,      /* padding count is 0 or larger than the payload */
    CS_RTP_ERR_RTCP = 6,         /* payload type 72..76 with marker: an RTCP packet (RFC 5761) */
    CS_RTP_ERR_COUNT = 7
};

typedef struct {
    uint8_t marker;
    uint8_t payload_type;
    uint8_t csrc_count;
    uint8_t has_extension;
    uint16_t seq;
    uint16_t ext_profile;     /* 0xBEDE one-byte, 0x100x two-byte (RFC 8285) */
    uint32_t ts;
    uint32_t ssrc;
    uint32_t header_len;      /* bytes before the payload (fixed + CSRC + extension) */
    uint32_t payload_len;     /* payload bytes, padding removed */
    uint32_t ext_len;         /* extension body length in bytes */
    const uint8_t *payload;   /* points into the parsed buffer */
} cs_rtp_header;

int cs_rtp_parse(const uint8_t *buf, size_t len, cs_rtp_header *out);
const char *cs_rtp_error_name(int code);
/* CDEF END */

#endif
