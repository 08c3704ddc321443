/* RTP fixed-header validation and RTCP compound parsing. See rtp.h for the rules.
 *
 * Every read is preceded by a bounds check against the datagram length, written as
 * "remaining >= needed" on size_t values so no sum can overflow. */
#include "rtp.h"

#include <string.h>

static uint16_t rd16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static uint32_t rd32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
           (uint32_t)p[3];
}

/* ---- RTP --------------------------------------------------------------------------- */

enum {
    RTP_FIXED_LEN = 12,
    RTP_VERSION = 2,
    RTCP_MUX_FIRST = 192, /* RFC 5761: RTCP packet types that collide with marker + PT */
    RTCP_MUX_LAST = 223
};

CS_HOT int cs_rtp_is_rtcp(const uint8_t *buf, size_t len)
{
    return len >= 2 && (buf[0] >> 6) == RTP_VERSION && buf[1] >= RTCP_MUX_FIRST &&
           buf[1] <= RTCP_MUX_LAST;
}

CS_HOT int cs_rtp_parse(const uint8_t *buf, size_t len, cs_rtp_header *out)
{
    memset(out, 0, sizeof *out);
    if (cs_rtp_is_rtcp(buf, len))
        return CS_RTP_ERR_RTCP;
    if (len < RTP_FIXED_LEN)
        return CS_RTP_ERR_SHORT;
    if ((buf[0] >> 6) != RTP_VERSION)
        return CS_RTP_ERR_VERSION;

    unsigned csrc_count = buf[0] & 0x0F;
    size_t header_len = RTP_FIXED_LEN + 4u * csrc_count;
    if (header_len > len)
        return CS_RTP_ERR_CSRC;

    uint16_t ext_profile = 0;
    size_t ext_len = 0;
    if (buf[0] & 0x10) {
        if (len - header_len < 4)
            return CS_RTP_ERR_EXTENSION;
        ext_profile = rd16(buf + header_len);
        ext_len = 4u * (size_t)rd16(buf + header_len + 2);
        if (len - header_len - 4 < ext_len)
            return CS_RTP_ERR_EXTENSION;
        header_len += 4 + ext_len;
    }

    /* RFC 3550 5.1: the last octet of the padding counts the padding octets, itself
     * included, so it is at least 1 and cannot exceed what follows the header. */
    size_t padding = 0;
    if (buf[0] & 0x20) {
        padding = buf[len - 1];
        if (padding == 0 || padding > len - header_len)
            return CS_RTP_ERR_PADDING;
    }

    out->marker = (uint8_t)(buf[1] >> 7);
    out->payload_type = (uint8_t)(buf[1] & 0x7F);
    out->csrc_count = (uint8_t)csrc_count;
    out->has_extension = (uint8_t)((buf[0] >> 4) & 1);
    out->seq = rd16(buf + 2);
    out->ext_profile = ext_profile;
    out->ts = rd32(buf + 4);
    out->ssrc = rd32(buf + 8);
    out->header_len = (uint32_t)header_len;
    out->payload_len = (uint32_t)(len - header_len - padding);
    out->ext_len = (uint32_t)ext_len;
    out->payload = buf + header_len;
    return CS_RTP_OK;
}

const char *cs_rtp_error_name(int code)
{
    static const char *const names[CS_RTP_ERR_COUNT] = {
        "ok", "short", "version", "csrc", "extension", "padding", "rtcp",
    };
    if (code < 0 || code >= CS_RTP_ERR_COUNT)
        return "unknown";
    return names[code];
}

/* ---- RTCP -------------------------------------------------------------------------- */

enum {
    RTCP_HEADER_LEN = 4,
    RTCP_SENDER_INFO_LEN = 20,
    RTCP_REPORT_BLOCK_LEN = 24,
    RTCP_SR_FIXED = 28, /* header + SSRC + sender info */
    RTCP_RR_FIXED = 8,  /* header + SSRC */
    RTCP_APP_FIXED = 12 /* header + SSRC + 4-byte name */
};

/* One packet of the compound: body is p[0..end), end excludes any padding. */
typedef struct {
    const uint8_t *p;
    size_t end;
    unsigned count; /* the 5-bit RC / SC field */
} rtcp_packet;

static int32_t sign_extend_24(uint32_t v)
{
    v &= 0xFFFFFFu;
    return (v & 0x800000u) ? (int32_t)v - 0x1000000 : (int32_t)v;
}

static void read_report_block(const uint8_t *b, uint32_t reporter, cs_rtcp_report_block *rb)
{
    rb->reporter_ssrc = reporter;
    rb->ssrc = rd32(b);
    rb->fraction_lost = b[4];
    rb->cumulative_lost = sign_extend_24(rd32(b + 4));
    rb->ext_highest_seq = rd32(b + 8);
    rb->jitter = rd32(b + 12);
    rb->lsr = rd32(b + 16);
    rb->dlsr = rd32(b + 20);
}

/* Report blocks of an SR or RR starting at offset `at`; extra bytes after them are a
 * profile-specific extension and are ignored. */
static int read_report_blocks(const rtcp_packet *pk, size_t at, cs_rtcp_summary *out)
{
    if ((pk->end - at) / RTCP_REPORT_BLOCK_LEN < pk->count)
        return CS_RTCP_ERR_REPORT_COUNT;
    uint32_t reporter = rd32(pk->p + 4);
    for (unsigned i = 0; i < pk->count; i++) {
        if (out->n_reports >= CS_RTCP_MAX_REPORTS) {
            out->truncated = 1;
            break;
        }
        read_report_block(pk->p + at + (size_t)i * RTCP_REPORT_BLOCK_LEN, reporter,
                          &out->reports[out->n_reports++]);
    }
    return CS_RTCP_OK;
}

static int parse_sr(const rtcp_packet *pk, cs_rtcp_summary *out)
{
    if (pk->end < RTCP_SR_FIXED)
        return CS_RTCP_ERR_BODY;
    int rc = read_report_blocks(pk, RTCP_SR_FIXED, out);
    if (rc != CS_RTCP_OK)
        return rc;
    if (out->n_sr >= CS_RTCP_MAX_SR) {
        out->truncated = 1;
        return CS_RTCP_OK;
    }
    const uint8_t *s = pk->p + 4;
    cs_rtcp_sr *sr = &out->sr[out->n_sr++];
    sr->ssrc = rd32(s);
    sr->ntp_sec = rd32(s + 4);
    sr->ntp_frac = rd32(s + 8);
    sr->rtp_ts = rd32(s + 12);
    sr->packet_count = rd32(s + 16);
    sr->octet_count = rd32(s + 20);
    return CS_RTCP_OK;
}

/* SDES (RFC 3550 6.5): `count` chunks, each an SSRC then items (type, length, text)
 * ended by a zero type octet and null octets up to the next 32-bit boundary. */
static int skip_sdes(const rtcp_packet *pk)
{
    size_t at = RTCP_HEADER_LEN;
    for (unsigned chunk = 0; chunk < pk->count; chunk++) {
        if (pk->end - at < 4)
            return CS_RTCP_ERR_REPORT_COUNT;
        at += 4;
        for (;;) {
            if (at >= pk->end)
                return CS_RTCP_ERR_REPORT_COUNT;
            if (pk->p[at] == 0) {
                at = (at + 4) & ~(size_t)3; /* past the null octet, to the boundary */
                if (at > pk->end)
                    return CS_RTCP_ERR_REPORT_COUNT;
                break;
            }
            if (pk->end - at < 2 || pk->end - at - 2 < pk->p[at + 1])
                return CS_RTCP_ERR_REPORT_COUNT;
            at += 2 + (size_t)pk->p[at + 1];
        }
    }
    return CS_RTCP_OK;
}

static int parse_packet(int type, const rtcp_packet *pk, cs_rtcp_summary *out)
{
    switch (type) {
    case CS_RTCP_SR:
        return parse_sr(pk, out);
    case CS_RTCP_RR:
        if (pk->end < RTCP_RR_FIXED)
            return CS_RTCP_ERR_BODY;
        out->n_rr++;
        return read_report_blocks(pk, RTCP_RR_FIXED, out);
    case CS_RTCP_SDES:
        out->n_sdes++;
        return skip_sdes(pk);
    case CS_RTCP_BYE:
        if ((pk->end - RTCP_HEADER_LEN) / 4 < pk->count)
            return CS_RTCP_ERR_REPORT_COUNT;
        out->n_bye++;
        out->has_bye = 1;
        return CS_RTCP_OK;
    case CS_RTCP_APP:
        if (pk->end < RTCP_APP_FIXED)
            return CS_RTCP_ERR_BODY;
        out->n_app++;
        return CS_RTCP_OK;
    default:
        out->n_other++;
        return CS_RTCP_OK;
    }
}

int cs_rtcp_parse(const uint8_t *buf, size_t len, cs_rtcp_summary *out)
{
    memset(out, 0, sizeof *out);
    if (len < RTCP_HEADER_LEN)
        return CS_RTCP_ERR_SHORT;
    size_t off = 0;
    while (off < len) {
        const uint8_t *p = buf + off;
        size_t left = len - off;
        if (left < RTCP_HEADER_LEN)
            return CS_RTCP_ERR_SHORT;
        if ((p[0] >> 6) != RTP_VERSION)
            return CS_RTCP_ERR_VERSION;
        size_t pkt_len = 4u * ((size_t)rd16(p + 2) + 1);
        if (pkt_len > left)
            return CS_RTCP_ERR_LENGTH;

        rtcp_packet pk = {.p = p, .end = pkt_len, .count = p[0] & 0x1Fu};
        if (p[0] & 0x20) {
            /* Only the last packet of a compound may be padded (RFC 3550 6.4.1). */
            size_t padding = p[pkt_len - 1];
            if (pkt_len != left || padding == 0 || padding > pkt_len - RTCP_HEADER_LEN)
                return CS_RTCP_ERR_PADDING;
            pk.end -= padding;
        }
        int rc = parse_packet(p[1], &pk, out);
        if (rc != CS_RTCP_OK)
            return rc;
        out->n_packets++;
        off += pkt_len;
    }
    return CS_RTCP_OK;
}

const char *cs_rtcp_error_name(int code)
{
    static const char *const names[CS_RTCP_ERR_COUNT] = {
        "ok", "short", "version", "length", "padding", "body", "report_count",
    };
    if (code < 0 || code >= CS_RTCP_ERR_COUNT)
        return "unknown";
    return names[code];
}
