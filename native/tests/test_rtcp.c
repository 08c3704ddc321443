/* RTCP compound parsing (native/src/rtp.c). */
#include "cs_test.h"

#include <stdlib.h>
#include <string.h>

#include "rtp.h"

static int rtcp_exact(const uint8_t *src, size_t n, cs_rtcp_summary *s)
{
    uint8_t *p = cs_test_exact_copy(src, n);
    int rc = cs_rtcp_parse(p, n, s);
    CHECK(rc >= 0 && rc < CS_RTCP_ERR_COUNT);
    CHECK(s->n_sr <= CS_RTCP_MAX_SR && s->n_reports <= CS_RTCP_MAX_REPORTS);
    free(p);
    return rc;
}

static uint32_t rng_state = 0x9E3779B9u;

/* RTCP common header for a packet of `len` bytes (a multiple of 4). */
static void put_rtcp_header(uint8_t *b, uint8_t count, uint8_t type, size_t len)
{
    b[0] = (uint8_t)(0x80 | count);
    b[1] = type;
    cs_put16(b + 2, (uint16_t)(len / 4 - 1));
}

static void put_block(uint8_t *b, uint32_t ssrc, uint8_t fraction, uint32_t lost24)
{
    cs_put32(b, ssrc);
    cs_put32(b + 4, ((uint32_t)fraction << 24) | (lost24 & 0xFFFFFFu));
    cs_put32(b + 8, 0x00012345u);
    cs_put32(b + 12, 77);
    cs_put32(b + 16, 0xAABBCCDDu);
    cs_put32(b + 20, 0x00018000u);
}

/* SR (1 block) + SDES CNAME "cs" + BYE + APP: 52 + 16 + 8 + 12 = 88 bytes. */
static size_t build_compound(uint8_t *b)
{
    put_rtcp_header(b, 1, CS_RTCP_SR, 52);
    cs_put32(b + 4, 0x5EED0001u);
    cs_put32(b + 8, 3900000000u);
    cs_put32(b + 12, 0x40000000u);
    cs_put32(b + 16, 8000);
    cs_put32(b + 20, 50);
    cs_put32(b + 24, 8000);
    put_block(b + 28, 0x0BADCAFEu, 12, 3);
    uint8_t *s = b + 52;
    put_rtcp_header(s, 1, CS_RTCP_SDES, 16);
    cs_put32(s + 4, 0x5EED0001u);
    s[8] = 1; /* CNAME */
    s[9] = 2;
    s[10] = 'c';
    s[11] = 's';
    cs_put32(s + 12, 0); /* the terminating null octets fill a whole new word */
    uint8_t *y = b + 68;
    put_rtcp_header(y, 1, CS_RTCP_BYE, 8);
    cs_put32(y + 4, 0x5EED0001u);
    uint8_t *a = b + 76;
    put_rtcp_header(a, 0, CS_RTCP_APP, 12);
    cs_put32(a + 4, 0x5EED0001u);
    memcpy(a + 8, "TEST", 4);
    return 88;
}

static void test_rtcp_compound(void)
{
    uint8_t b[128];
    size_t n = build_compound(b);
    cs_rtcp_summary s;
    REQUIRE(rtcp_exact(b, n, &s) == CS_RTCP_OK);
    CHECK_EQ(s.n_packets, 4);
    CHECK_EQ(s.n_sr, 1);
    CHECK_EQ(s.sr[0].ssrc, 0x5EED0001u);
    CHECK_EQ(s.sr[0].ntp_sec, 3900000000u);
    CHECK_EQ(s.sr[0].ntp_frac, 0x40000000u);
    CHECK_EQ(s.sr[0].rtp_ts, 8000);
    CHECK_EQ(s.sr[0].packet_count, 50);
    CHECK_EQ(s.sr[0].octet_count, 8000);
    CHECK_EQ(s.n_reports, 1);
    CHECK_EQ(s.reports[0].reporter_ssrc, 0x5EED0001u);
    CHECK_EQ(s.reports[0].ssrc, 0x0BADCAFEu);
    CHECK_EQ(s.reports[0].fraction_lost, 12);
    CHECK_EQ(s.reports[0].cumulative_lost, 3);
    CHECK_EQ(s.reports[0].ext_highest_seq, 0x00012345u);
    CHECK_EQ(s.reports[0].jitter, 77);
    CHECK_EQ(s.reports[0].lsr, 0xAABBCCDDu);
    CHECK_EQ(s.reports[0].dlsr, 0x00018000u);
    CHECK_EQ(s.n_sdes, 1);
    CHECK_EQ(s.n_bye, 1);
    CHECK_EQ(s.has_bye, 1);
    CHECK_EQ(s.n_app, 1);
    CHECK_EQ(s.truncated, 0);
}

static void test_rtcp_every_truncation(void)
{
    uint8_t b[128];
    size_t n = build_compound(b);
    static const size_t boundaries[] = {52, 68, 76, 88};
    cs_rtcp_summary s;
    for (size_t len = 0; len <= n; len++) {
        int rc = rtcp_exact(b, len, &s);
        uint32_t whole = 0;
        for (size_t k = 0; k < CS_TEST_COUNT(boundaries); k++)
            whole += boundaries[k] == len ? (uint32_t)k + 1 : 0;
        if (whole) {
            CHECK_EQ(rc, CS_RTCP_OK);
            CHECK_EQ(s.n_packets, whole);
        } else {
            /* a prefix ends inside a packet: its length field, or its header, is cut */
            CHECK(rc == CS_RTCP_ERR_LENGTH || rc == CS_RTCP_ERR_SHORT);
        }
    }
}

static void test_rtcp_cumulative_lost_sign(void)
{
    static const struct {
        uint32_t wire;
        int32_t value;
    } cases[] = {{0, 0},       {1, 1},      {0x7FFFFF, 8388607},
                 {0x800000, -8388608}, {0xFFFFFF, -1}, {0xFFFFFE, -2}};
    uint8_t b[32];
    cs_rtcp_summary s;
    for (size_t i = 0; i < CS_TEST_COUNT(cases); i++) {
        put_rtcp_header(b, 1, CS_RTCP_RR, 32);
        cs_put32(b + 4, 9);
        put_block(b + 8, 10, 255, cases[i].wire);
        REQUIRE(rtcp_exact(b, 32, &s) == CS_RTCP_OK);
        CHECK_EQ(s.n_rr, 1);
        CHECK_EQ(s.reports[0].cumulative_lost, cases[i].value);
        CHECK_EQ(s.reports[0].fraction_lost, 255);
    }
}

static void test_rtcp_malformed(void)
{
    uint8_t b[64] = {0};
    cs_rtcp_summary s;
    put_rtcp_header(b, 0, CS_RTCP_RR, 8);
    CHECK_EQ(rtcp_exact(b, 3, &s), CS_RTCP_ERR_SHORT);
    CHECK_EQ(rtcp_exact(b, 7, &s), CS_RTCP_ERR_LENGTH);
    CHECK_EQ(rtcp_exact(b, 8, &s), CS_RTCP_OK);
    put_rtcp_header(b + 8, 0, CS_RTCP_RR, 8);
    CHECK_EQ(rtcp_exact(b, 10, &s), CS_RTCP_ERR_SHORT); /* 2 trailing bytes */
    b[8] = 0xC0;
    CHECK_EQ(rtcp_exact(b, 16, &s), CS_RTCP_ERR_VERSION);
    CHECK_EQ(s.n_packets, 1); /* what came before the fault is kept */

    put_rtcp_header(b, 1, CS_RTCP_RR, 8); /* RC 1, no room for the block */
    CHECK_EQ(rtcp_exact(b, 8, &s), CS_RTCP_ERR_REPORT_COUNT);
    put_rtcp_header(b, 0, CS_RTCP_SR, 8); /* SR without sender info */
    CHECK_EQ(rtcp_exact(b, 8, &s), CS_RTCP_ERR_BODY);
    put_rtcp_header(b, 0, CS_RTCP_RR, 4);
    CHECK_EQ(rtcp_exact(b, 4, &s), CS_RTCP_ERR_BODY);
    put_rtcp_header(b, 0, CS_RTCP_APP, 8);
    CHECK_EQ(rtcp_exact(b, 8, &s), CS_RTCP_ERR_BODY);
    put_rtcp_header(b, 3, CS_RTCP_BYE, 12); /* 3 SSRCs claimed, 2 present */
    CHECK_EQ(rtcp_exact(b, 12, &s), CS_RTCP_ERR_REPORT_COUNT);
    put_rtcp_header(b, 0, CS_RTCP_BYE, 4);
    CHECK_EQ(rtcp_exact(b, 4, &s), CS_RTCP_OK);
    CHECK_EQ(s.has_bye, 1);

    /* padding: count 0, past the body, on a packet that is not last, and valid */
    put_rtcp_header(b, 0, CS_RTCP_RR, 12);
    b[0] |= 0x20;
    b[11] = 0;
    CHECK_EQ(rtcp_exact(b, 12, &s), CS_RTCP_ERR_PADDING);
    b[11] = 9;
    CHECK_EQ(rtcp_exact(b, 12, &s), CS_RTCP_ERR_PADDING);
    b[11] = 4;
    CHECK_EQ(rtcp_exact(b, 12, &s), CS_RTCP_OK);
    put_rtcp_header(b + 12, 0, CS_RTCP_RR, 8);
    CHECK_EQ(rtcp_exact(b, 20, &s), CS_RTCP_ERR_PADDING);

    /* SDES: item length past the end, and a chunk without its terminator */
    put_rtcp_header(b, 1, CS_RTCP_SDES, 12);
    b[8] = 1;
    b[9] = 9;
    CHECK_EQ(rtcp_exact(b, 12, &s), CS_RTCP_ERR_REPORT_COUNT);
    b[9] = 1;
    b[10] = 'x';
    b[11] = 7;
    CHECK_EQ(rtcp_exact(b, 12, &s), CS_RTCP_ERR_REPORT_COUNT);
    b[11] = 0;
    CHECK_EQ(rtcp_exact(b, 12, &s), CS_RTCP_OK);
}

/* Two SDES chunks: the second starts at the 32-bit boundary after the first's null
 * octet. Read one byte early, its SSRC would look like an item of length 255. */
static void test_rtcp_sdes_chunk_alignment(void)
{
    uint8_t b[24] = {0};
    put_rtcp_header(b, 2, CS_RTCP_SDES, 24);
    cs_put32(b + 4, 0x5EED0001u);
    memcpy(b + 8, "\x01\x02xy", 4); /* CNAME "xy", then the null octet at 12 */
    cs_put32(b + 16, 0x00FFFF00u);      /* second chunk, null octet at 20 */
    cs_rtcp_summary s;
    CHECK_EQ(rtcp_exact(b, sizeof b, &s), CS_RTCP_OK);
    CHECK_EQ(s.n_sdes, 1);
    put_rtcp_header(b, 3, CS_RTCP_SDES, 24); /* a third chunk is not there */
    CHECK_EQ(rtcp_exact(b, sizeof b, &s), CS_RTCP_ERR_REPORT_COUNT);
}

static void test_rtcp_capacity(void)
{
    enum { RR_LEN = 8 + 31 * 24 };
    static uint8_t b[2 * RR_LEN];
    for (int k = 0; k < 2; k++) {
        uint8_t *p = b + k * RR_LEN;
        put_rtcp_header(p, 31, CS_RTCP_RR, RR_LEN);
        cs_put32(p + 4, (uint32_t)k);
        for (uint32_t i = 0; i < 31; i++)
            put_block(p + 8 + 24 * i, i, 0, 0);
    }
    cs_rtcp_summary s;
    REQUIRE(rtcp_exact(b, sizeof b, &s) == CS_RTCP_OK);
    CHECK_EQ(s.n_packets, 2);
    CHECK_EQ(s.n_reports, CS_RTCP_MAX_REPORTS);
    CHECK_EQ(s.reports[30].ssrc, 30);
    CHECK_EQ(s.truncated, 1);

    uint8_t sr[5 * 28];
    for (int k = 0; k < 5; k++) {
        put_rtcp_header(sr + 28 * k, 0, CS_RTCP_SR, 28);
        memset(sr + 28 * k + 4, k, 24);
    }
    REQUIRE(rtcp_exact(sr, sizeof sr, &s) == CS_RTCP_OK);
    CHECK_EQ(s.n_sr, CS_RTCP_MAX_SR);
    CHECK_EQ(s.sr[3].ssrc, 0x03030303u);
    CHECK_EQ(s.truncated, 1);
}

static void test_rtcp_error_names(void)
{
    static const char *const want[] = {"ok",      "short", "version",     "length",
                                       "padding", "body",  "report_count"};
    for (int c = 0; c < CS_RTCP_ERR_COUNT; c++)
        CHECK(strcmp(cs_rtcp_error_name(c), want[c]) == 0);
    CHECK(strcmp(cs_rtcp_error_name(CS_RTCP_ERR_COUNT), "unknown") == 0);
}

static void test_rtcp_random_bytes(void)
{
    uint8_t b[128];
    cs_rtcp_summary s;
    int ok = 0;
    for (int i = 0; i < 200000; i++) {
        size_t n = 4 * (cs_test_rng(&rng_state) % 8);
        for (size_t j = 0; j < n; j++)
            b[j] = (uint8_t)cs_test_rng(&rng_state);
        /* plausible headers: V=2, no padding, a length inside the datagram */
        for (size_t off = 0; off + 4 <= n; off += 4 * ((size_t)b[off + 3] + 1)) {
            b[off] = (uint8_t)(0x80 | (b[off] & 0x1F));
            b[off + 2] = 0;
            b[off + 3] = (uint8_t)(b[off + 3] % ((n - off) / 4));
        }
        ok += rtcp_exact(b, n, &s) == CS_RTCP_OK;
    }
    CHECK(ok > 1000);
}

static const cs_test_case rtcp_cases[] = {
    {"compound", test_rtcp_compound},
    {"every_truncation", test_rtcp_every_truncation},
    {"cumulative_lost_sign", test_rtcp_cumulative_lost_sign},
    {"malformed", test_rtcp_malformed},
    {"sdes_chunk_alignment", test_rtcp_sdes_chunk_alignment},
    {"capacity", test_rtcp_capacity},
    {"error_names", test_rtcp_error_names},
    {"random_bytes", test_rtcp_random_bytes},
};
const cs_test_suite cs_suite_rtcp = {"rtcp", rtcp_cases, CS_TEST_COUNT(rtcp_cases)};

