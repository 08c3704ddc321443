/* RTP fixed-header validation and RFC 5761 demux (native/src/rtp.c). */
#include "cs_test.h"

#include <stdlib.h>
#include <string.h>

#include "rtp.h"

/* A 12-byte RTP fixed header. */
static void put_fixed(uint8_t *b, uint8_t first, uint8_t second, uint16_t seq, uint32_t ts,
                      uint32_t ssrc)
{
    b[0] = first;
    b[1] = second;
    cs_put16(b + 2, seq);
    cs_put32(b + 4, ts);
    cs_put32(b + 8, ssrc);
}

/* Parse from a heap copy of exactly n bytes, so ASan flags any read past the end; checks
 * the invariants of a successful parse. The payload pointer is cleared (it would dangle). */
static int rtp_exact(const uint8_t *src, size_t n, cs_rtp_header *h)
{
    uint8_t *p = cs_test_exact_copy(src, n);
    int rc = cs_rtp_parse(p, n, h);
    CHECK(rc >= 0 && rc < CS_RTP_ERR_COUNT);
    if (rc == CS_RTP_OK) {
        CHECK(h->header_len >= 12u + 4u * h->csrc_count);
        CHECK((size_t)h->header_len + h->payload_len <= n);
        CHECK(h->payload == p + h->header_len);
    }
    free(p);
    h->payload = NULL;
    return rc;
}

static uint32_t rng_state = 0x2545F491u;

static void test_rtp_fixed_header_fields(void)
{
    uint8_t b[12 + 160];
    put_fixed(b, 0x80, 0x80 | 8, 0xFFFF, 0xFFFFFFFFu, 0x11223344u);
    memset(b + 12, 0xD5, 160);
    cs_rtp_header h;
    REQUIRE(cs_rtp_parse(b, sizeof b, &h) == CS_RTP_OK);
    CHECK_EQ(h.marker, 1);
    CHECK_EQ(h.payload_type, 8);
    CHECK_EQ(h.seq, 0xFFFF);
    CHECK_EQ(h.ts, 0xFFFFFFFFu);
    CHECK_EQ(h.ssrc, 0x11223344u);
    CHECK_EQ(h.csrc_count, 0);
    CHECK_EQ(h.has_extension, 0);
    CHECK_EQ(h.header_len, 12);
    CHECK_EQ(h.payload_len, 160);
    CHECK(h.payload == b + 12);
}

/* CC=2, X (RFC 8285 two-byte profile, 2 words), P (3 octets), 5 payload bytes. */
static size_t build_full(uint8_t *b)
{
    put_fixed(b, 0x80 | 0x20 | 0x10 | 2, 0, 7, 160, 1);
    cs_put32(b + 12, 0xC0C0C0C0u);
    cs_put32(b + 16, 0xC1C1C1C1u);
    cs_put16(b + 20, 0x1000);
    cs_put16(b + 22, 2);
    memset(b + 24, 0xEE, 8);
    memcpy(b + 32, "hello", 5);
    b[37] = 0;
    b[38] = 0;
    b[39] = 3;
    return 40;
}

static void test_rtp_csrc_extension_padding(void)
{
    uint8_t b[64];
    size_t n = build_full(b);
    cs_rtp_header h;
    REQUIRE(cs_rtp_parse(b, n, &h) == CS_RTP_OK);
    CHECK_EQ(h.csrc_count, 2);
    CHECK_EQ(h.has_extension, 1);
    CHECK_EQ(h.ext_profile, 0x1000);
    CHECK_EQ(h.ext_len, 8);
    CHECK_EQ(h.header_len, 32);
    CHECK_EQ(h.payload_len, 5);
    CHECK(memcmp(h.payload, "hello", 5) == 0);
}

static void test_rtp_every_truncation(void)
{
    uint8_t b[64];
    size_t n = build_full(b);
    b[0] &= (uint8_t)~0x20; /* no padding: every prefix past the header is valid */
    cs_rtp_header h;
    for (size_t len = 0; len <= n; len++) {
        int rc = rtp_exact(b, len, &h);
        int want = len < 12   ? CS_RTP_ERR_SHORT
                   : len < 20 ? CS_RTP_ERR_CSRC
                   : len < 32 ? CS_RTP_ERR_EXTENSION
                              : CS_RTP_OK;
        CHECK_EQ(rc, want);
        if (rc == CS_RTP_OK)
            CHECK_EQ(h.payload_len, len - 32);
    }
}

static void test_rtp_csrc_fifteen_short(void)
{
    uint8_t b[12 + 60] = {0};
    put_fixed(b, 0x8F, 0, 1, 2, 3);
    cs_rtp_header h;
    CHECK_EQ(rtp_exact(b, 12 + 59, &h), CS_RTP_ERR_CSRC);
    CHECK_EQ(rtp_exact(b, 12 + 60, &h), CS_RTP_OK);
    CHECK_EQ(h.csrc_count, 15);
    CHECK_EQ(h.payload_len, 0);
}

static void test_rtp_extension_bounds(void)
{
    uint8_t b[12 + 4 + 8] = {0};
    put_fixed(b, 0x90, 0, 1, 2, 3);
    cs_put16(b + 12, 0xBEDE);
    cs_put16(b + 14, 2);
    cs_rtp_header h;
    CHECK_EQ(rtp_exact(b, 14, &h), CS_RTP_ERR_EXTENSION);      /* header cut */
    CHECK_EQ(rtp_exact(b, 16 + 7, &h), CS_RTP_ERR_EXTENSION);  /* body cut */
    CHECK_EQ(rtp_exact(b, 16 + 8, &h), CS_RTP_OK);
    CHECK_EQ(h.ext_profile, 0xBEDE);
    CHECK_EQ(h.ext_len, 8);
    cs_put16(b + 14, 0xFFFF); /* 262140 bytes claimed */
    CHECK_EQ(rtp_exact(b, sizeof b, &h), CS_RTP_ERR_EXTENSION);
}

static void test_rtp_padding_bounds(void)
{
    uint8_t b[16];
    put_fixed(b, 0xA0, 0, 1, 2, 3);
    memcpy(b + 12, "abc", 3);
    cs_rtp_header h;
    b[15] = 0;
    CHECK_EQ(rtp_exact(b, 16, &h), CS_RTP_ERR_PADDING);
    b[15] = 5;
    CHECK_EQ(rtp_exact(b, 16, &h), CS_RTP_ERR_PADDING);
    b[15] = 4; /* the whole payload is padding */
    CHECK_EQ(rtp_exact(b, 16, &h), CS_RTP_OK);
    CHECK_EQ(h.payload_len, 0);
    b[15] = 1;
    CHECK_EQ(rtp_exact(b, 16, &h), CS_RTP_OK);
    CHECK_EQ(h.payload_len, 3);
    /* P set on a bare header: the "count" is the SSRC's last byte, and nothing follows */
    CHECK_EQ(rtp_exact(b, 12, &h), CS_RTP_ERR_PADDING);
}

static void test_rtp_versions(void)
{
    uint8_t b[12];
    cs_rtp_header h;
    for (int v = 0; v < 4; v++) {
        put_fixed(b, (uint8_t)(v << 6), 0, 1, 2, 3);
        CHECK_EQ(rtp_exact(b, 12, &h), v == 2 ? CS_RTP_OK : CS_RTP_ERR_VERSION);
    }
}

static void test_rtp_rtcp_demux(void)
{
    uint8_t b[12];
    cs_rtp_header h;
    for (int second = 0; second < 256; second++) {
        put_fixed(b, 0x80, (uint8_t)second, 1, 2, 3);
        int is_rtcp = second >= 192 && second <= 223;
        CHECK_EQ(cs_rtp_is_rtcp(b, 12), is_rtcp);
        CHECK_EQ(rtp_exact(b, 12, &h), is_rtcp ? CS_RTP_ERR_RTCP : CS_RTP_OK);
    }
    /* classified before the length check: an empty RR is 8 bytes */
    put_fixed(b, 0x80, 201, 1, 2, 3);
    CHECK_EQ(rtp_exact(b, 8, &h), CS_RTP_ERR_RTCP);
    CHECK_EQ(rtp_exact(b, 1, &h), CS_RTP_ERR_SHORT);
    b[0] = 0x40; /* version 1 is never RTCP */
    CHECK_EQ(rtp_exact(b, 12, &h), CS_RTP_ERR_VERSION);
}

static void test_rtp_error_names(void)
{
    static const char *const want[] = {"ok",        "short",   "version", "csrc",
                                       "extension", "padding", "rtcp"};
    for (int c = 0; c < CS_RTP_ERR_COUNT; c++)
        CHECK(strcmp(cs_rtp_error_name(c), want[c]) == 0);
    CHECK(strcmp(cs_rtp_error_name(-1), "unknown") == 0);
    CHECK(strcmp(cs_rtp_error_name(CS_RTP_ERR_COUNT), "unknown") == 0);
}

static void test_rtp_random_bytes(void)
{
    uint8_t b[96];
    cs_rtp_header h;
    int ok = 0;
    for (int i = 0; i < 200000; i++) {
        size_t n = cs_test_rng(&rng_state) % sizeof b;
        for (size_t j = 0; j < n; j++)
            b[j] = (uint8_t)cs_test_rng(&rng_state);
        if (n > 0 && (i & 1))
            b[0] = (uint8_t)(0x80 | (b[0] & 0x3F)); /* half the time a plausible V=2 */
        ok += rtp_exact(b, n, &h) == CS_RTP_OK;
    }
    CHECK(ok > 1000); /* the generator does reach the success path */
}

static const cs_test_case rtp_cases[] = {
    {"fixed_header_fields", test_rtp_fixed_header_fields},
    {"csrc_extension_padding", test_rtp_csrc_extension_padding},
    {"every_truncation", test_rtp_every_truncation},
    {"csrc_fifteen_short", test_rtp_csrc_fifteen_short},
    {"extension_bounds", test_rtp_extension_bounds},
    {"padding_bounds", test_rtp_padding_bounds},
    {"versions", test_rtp_versions},
    {"rtcp_demux", test_rtp_rtcp_demux},
    {"error_names", test_rtp_error_names},
    {"random_bytes", test_rtp_random_bytes},
};
const cs_test_suite cs_suite_rtp = {"rtp", rtp_cases, CS_TEST_COUNT(rtp_cases)};

