/* RTP and RTCP wire parsing (RFC 3550, RFC 5761 demux). No allocation: views point into
 * the caller's buffer.
 *
 * RTP/RTCP demultiplexing on one port (RFC 5761 section 4): RTCP packet types 192..223
 * occupy the second octet, where RTP keeps the marker bit and the payload type, so with
 * RTCP multiplexed RTP must not use payload types 64..95. The rule applied here is: a
 * datagram whose version field is 2 and whose second octet is 192..223 (marker set and
 * PT 64..95) is RTCP. It is checked first, before the 12-byte minimum, because an RTCP
 * packet may be as short as 4 bytes (an empty BYE) or 8 (an empty RR).
 *
 * Order of the RTP checks, so a datagram with several faults always gets the same code:
 * RTCP demux, short (< 12 bytes), version, CSRC list, header extension, padding.
 * Datagram lengths are assumed below 4 GiB (UDP carries at most 64 KiB). */
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
    CS_RTP_ERR_RTCP = 6,         /* second octet 192..223 (marker + PT 64..95): RTCP (RFC 5761) */
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

/* Parse an RTP datagram. On success fills *out and returns CS_RTP_OK; otherwise returns
 * a CS_RTP_ERR_* code and leaves *out zeroed. Reads only buf[0..len). */
int cs_rtp_parse(const uint8_t *buf, size_t len, cs_rtp_header *out);
/* Static snake_case label of a CS_RTP_* code ("ok", "short", ...); "unknown" otherwise. */
const char *cs_rtp_error_name(int code);
/* 1 if the datagram is RTCP by the RFC 5761 rule above, else 0. */
int cs_rtp_is_rtcp(const uint8_t *buf, size_t len);
/* CDEF END */

/* CDEF BEGIN */
/* RTCP compound packets (RFC 3550 section 6). Walks every packet of the compound,
 * decodes SR sender info and SR/RR report blocks, recognises SDES, BYE and APP (and any
 * other type, e.g. RTPFB/PSFB/XR) and skips them. Reduced-size RTCP (RFC 5506) is
 * accepted: the first packet need not be SR or RR. Padding is allowed on the last packet
 * only. Codes are checked per packet in this order: short, version, length, padding,
 * body, count. */
enum {
    CS_RTCP_OK = 0,
    CS_RTCP_ERR_SHORT = 1,       /* datagram, or bytes after the last packet, < 4 bytes */
    CS_RTCP_ERR_VERSION = 2,     /* a packet's version field is not 2 */
    CS_RTCP_ERR_LENGTH = 3,      /* a packet's length field runs past the datagram */
    CS_RTCP_ERR_PADDING = 4,     /* padding not on the last packet, count 0 or too large */
    CS_RTCP_ERR_BODY = 5,        /* shorter than its type's fixed part (SR 28, RR 8, APP 12) */
    CS_RTCP_ERR_REPORT_COUNT = 6,/* report/source/chunk count runs past the packet length */
    CS_RTCP_ERR_COUNT = 7
};

enum {
    CS_RTCP_SR = 200,
    CS_RTCP_RR = 201,
    CS_RTCP_SDES = 202,
    CS_RTCP_BYE = 203,
    CS_RTCP_APP = 204
};

enum { CS_RTCP_MAX_SR = 4, CS_RTCP_MAX_REPORTS = 31 };

typedef struct {
    uint32_t ssrc;            /* sender */
    uint32_t ntp_sec;
    uint32_t ntp_frac;
    uint32_t rtp_ts;
    uint32_t packet_count;
    uint32_t octet_count;
} cs_rtcp_sr;

typedef struct {
    uint32_t reporter_ssrc;   /* SSRC of the SR/RR that carried the block */
    uint32_t ssrc;            /* source the block reports on */
    uint8_t fraction_lost;    /* fixed point, /256 */
    int32_t cumulative_lost;  /* signed 24-bit on the wire, sign-extended */
    uint32_t ext_highest_seq;
    uint32_t jitter;          /* RTP timestamp units */
    uint32_t lsr;             /* middle 32 bits of the last SR's NTP time */
    uint32_t dlsr;            /* 1/65536 s */
} cs_rtcp_report_block;

typedef struct {
    uint32_t n_packets;       /* RTCP packets in the compound */
    uint32_t n_sr;            /* SR packets stored in sr[] */
    uint32_t n_rr;            /* RR packets seen */
    uint32_t n_reports;       /* report blocks stored in reports[] */
    uint32_t n_sdes;
    uint32_t n_bye;
    uint32_t n_app;
    uint32_t n_other;         /* any other packet type, skipped */
    uint8_t has_bye;
    uint8_t truncated;        /* more SRs or report blocks than the arrays hold */
    uint8_t reserved[2];
    cs_rtcp_sr sr[4];                    /* CS_RTCP_MAX_SR */
    cs_rtcp_report_block reports[31];    /* CS_RTCP_MAX_REPORTS */
} cs_rtcp_summary;

/* Parse a compound RTCP datagram into *out (zeroed first). Returns CS_RTCP_OK or a
 * CS_RTCP_ERR_* code; on error *out holds what was decoded before the fault. */
int cs_rtcp_parse(const uint8_t *buf, size_t len, cs_rtcp_summary *out);
/* Static snake_case label of a CS_RTCP_* code; "unknown" otherwise. */
const char *cs_rtcp_error_name(int code);
/* CDEF END */

#endif
