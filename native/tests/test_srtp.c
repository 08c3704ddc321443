/* SRTP receive side (native/src/srtp_rx.c): RFC 3711 Appendix B.2 (AES-CM keystream) and
 * B.3 (key derivation), RFC 7714 16.1.1 (AEAD_AES_128_GCM), tampering at every byte,
 * replay window, ROC rollover, MKI, re-keying, per-SSRC index and replay state under one
 * key (its 4-SSRC limit, forged SSRCs taking no slot), malformed input and no allocation
 * per packet. Interop with an independent implementation (libsrtp through pylibsrtp) is in
 * tests/native/test_srtp_interop.py. */
#include "cs_test.h"

#include <stdlib.h>
#include <string.h>

#include "srtp_rx.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CS_HAVE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CS_HAVE_ASAN 1
#endif
#ifdef CS_HAVE_ASAN
#include <sanitizer/allocator_interface.h>
#endif

static size_t unhex(const char *s, uint8_t *out)
{
    size_t n = 0;
    for (; s[0] && s[1]; s += 2) {
        unsigned v;
        sscanf(s, "%2x", &v);
        out[n++] = (uint8_t)v;
    }
    return n;
}

/* An RTP packet: V=2, PT 0, seq, ts = seq * 160, ssrc, payload bytes i * 7 + seq. */
static size_t make_rtp(uint8_t *buf, uint16_t seq, uint32_t ssrc, size_t payload)
{
    memset(buf, 0, 12);
    buf[0] = 0x80;
    cs_put16(buf + 2, seq);
    cs_put32(buf + 4, (uint32_t)seq * 160u);
    cs_put32(buf + 8, ssrc);
    for (size_t i = 0; i < payload; i++)
        buf[12 + i] = (uint8_t)(i * 7u + seq);
    return 12 + payload;
}

static cs_srtp *keyed(int suite, const uint8_t *mki, size_t mki_len)
{
    uint8_t master[30];
    for (int i = 0; i < 30; i++)
        master[i] = (uint8_t)(i * 11 + 3);
    cs_srtp *c = cs_srtp_new();
    size_t len = suite == CS_SRTP_AEAD_AES_128_GCM ? 28 : 30;
    if (c && cs_srtp_set_key(c, suite, master, len, mki, mki_len) != 1) {
        cs_srtp_free(c);
        return NULL;
    }
    return c;
}

static const int SUITES[] = {CS_SRTP_AES_CM_128_HMAC_SHA1_80, CS_SRTP_AES_CM_128_HMAC_SHA1_32,
                             CS_SRTP_AEAD_AES_128_GCM};

/* RFC 3711 B.2: keystream of session key 2B7E..., salt F0F1...FD, SSRC 0, index 0. */
static void test_srtp_rfc3711_b2_keystream(void)
{
    uint8_t key[16], salt[14], auth[20] = {0}, buf[128], want[48];
    unhex("2B7E151628AED2A6ABF7158809CF4F3C", key);
    unhex("F0F1F2F3F4F5F6F7F8F9FAFBFCFD", salt);
    unhex("E03EAD0935C95E80E166B16DD92B4EB4"
          "D23513162B02D0F72A43A2FE4A5F97AB"
          "41E95B3BB0A2E8DD477901E4FCA894C0",
          want);
    cs_srtp *c = cs_srtp_new();
    REQUIRE(c != NULL);
    CHECK_EQ(cs_srtp_set_session(c, CS_SRTP_AES_CM_128_HMAC_SHA1_80, key, salt, auth, NULL, 0), 0);
    size_t len = make_rtp(buf, 0, 0, 48);
    memset(buf + 12, 0, 48);
    CHECK_EQ(cs_srtp_protect(c, buf, &len, sizeof buf, 0), CS_SRTP_OK);
    CHECK_EQ(len, 12 + 48 + 10);
    CHECK(memcmp(buf + 12, want, 48) == 0);
    cs_srtp_free(c);
}

/* RFC 3711 B.3: the master key and salt derive the listed session keys, shown by
 * protecting one packet both ways (derived by us / installed from the RFC's values). */
static void test_srtp_rfc3711_b3_key_derivation(void)
{
    uint8_t master[30], enc[16], salt[14], auth[20];
    unhex("E1F97A0D3E018BE0D64FA32C06DE4139" "0EC675AD498AFEEBB6960B3AABE6", master);
    unhex("C61E7A93744F39EE10734AFE3FF7A087", enc);
    unhex("30CBBC08863D8C85D49DB34A9AE1", salt);
    unhex("CEBE321F6FF7716B6FD4AB49AF256A156D38BAA4", auth);
    for (int s = 0; s < 2; s++) {
        cs_srtp *a = cs_srtp_new(), *b = cs_srtp_new();
        REQUIRE(a && b);
        CHECK_EQ(cs_srtp_set_key(a, SUITES[s], master, 30, NULL, 0), 1);
        CHECK_EQ(cs_srtp_set_session(b, SUITES[s], enc, salt, auth, NULL, 0), 0);
        uint8_t pa[256], pb[256];
        size_t la = make_rtp(pa, 0x1234, 0xCAFEBABE, 160), lb = make_rtp(pb, 0x1234, 0xCAFEBABE, 160);
        CHECK_EQ(cs_srtp_protect(a, pa, &la, sizeof pa, 3), CS_SRTP_OK);
        CHECK_EQ(cs_srtp_protect(b, pb, &lb, sizeof pb, 3), CS_SRTP_OK);
        CHECK_EQ(la, lb);
        CHECK(memcmp(pa, pb, la) == 0);
        cs_srtp_free(a);
        cs_srtp_free(b);
    }
}

/* RFC 7714 16.1.1 (protect) and 16.1.2 (unprotect), then its replay and a flipped bit. */
static void test_srtp_rfc7714_gcm_vector(void)
{
    uint8_t key[16], salt[12], plain[128], want[128], buf[160];
    unhex("000102030405060708090a0b0c0d0e0f", key);
    unhex("517569642070726f2071756f", salt);
    size_t pn = unhex("8040f17b8041f8d35501a0b2"
                      "47616c6c696120657374206f6d6e69732064697669736120696e207061727465732074726573",
                      plain);
    size_t wn = unhex("8040f17b8041f8d35501a0b2"
                      "f24de3a3fb34de6cacba861c9d7e4bcabe633bd50d294e6f42a5f47a51c7d19b36de3adf8833"
                      "899d7f27beb16a9152cf765ee4390cce",
                      want);
    cs_srtp *tx = cs_srtp_new(), *rx = cs_srtp_new();
    REQUIRE(tx && rx);
    CHECK_EQ(cs_srtp_set_session(tx, CS_SRTP_AEAD_AES_128_GCM, key, salt, NULL, NULL, 0), 0);
    CHECK_EQ(cs_srtp_set_session(rx, CS_SRTP_AEAD_AES_128_GCM, key, salt, NULL, NULL, 0), 0);
    memcpy(buf, plain, pn);
    size_t len = pn;
    CHECK_EQ(cs_srtp_protect(tx, buf, &len, sizeof buf, 0), CS_SRTP_OK);
    REQUIRE(len == wn);
    CHECK(memcmp(buf, want, wn) == 0);
    uint8_t copy[160];
    memcpy(copy, want, wn);
    copy[20] ^= 1;
    size_t cl = wn;
    CHECK_EQ(cs_srtp_unprotect(rx, copy, &cl), CS_SRTP_ERR_AUTH);
    memcpy(buf, want, wn);
    len = wn;
    CHECK_EQ(cs_srtp_unprotect(rx, buf, &len), CS_SRTP_OK);
    CHECK_EQ(len, pn);
    CHECK(memcmp(buf, plain, pn) == 0);
    memcpy(buf, want, wn);
    len = wn;
    CHECK_EQ(cs_srtp_unprotect(rx, buf, &len), CS_SRTP_ERR_REPLAY);
    cs_srtp_free(tx);
    cs_srtp_free(rx);
}

/* Every suite, with and without MKI: a flipped bit anywhere fails authentication (the
 * clear header's seq/SSRC included) and leaves the context able to take the original. */
static void test_srtp_tamper_every_byte(void)
{
    static const uint8_t mki[3] = {9, 8, 7};
    for (int s = 0; s < 3; s++) {
        for (size_t m = 0; m <= 3; m += 3) {
            cs_srtp *tx = keyed(SUITES[s], mki, m), *rx = keyed(SUITES[s], mki, m);
            REQUIRE(tx && rx);
            uint8_t orig[256], buf[256];
            size_t len = make_rtp(orig, 500, 0x11223344, 40);
            REQUIRE(cs_srtp_protect(tx, orig, &len, sizeof orig, 0) == CS_SRTP_OK);
            for (size_t i = 0; i < len; i++) {
                memcpy(buf, orig, len);
                buf[i] ^= 0x10;
                size_t l = len;
                int rc = cs_srtp_unprotect(rx, buf, &l);
                /* version bits live in byte 0's top two; 0x10 is the X bit there */
                CHECK(rc == CS_SRTP_ERR_AUTH || (i == 0 && rc == CS_SRTP_ERR_MALFORMED) ||
                      (i == 2 && rc == CS_SRTP_ERR_REPLAY));
            }
            memcpy(buf, orig, len);
            size_t l = len;
            CHECK_EQ(cs_srtp_unprotect(rx, buf, &l), CS_SRTP_OK);
            CHECK_EQ(l, 12 + 40);
            uint8_t plain[64];
            make_rtp(plain, 500, 0x11223344, 40);
            CHECK(memcmp(buf, plain, l) == 0);
            cs_srtp_free(tx);
            cs_srtp_free(rx);
        }
    }
}

static int round_trip(cs_srtp *tx, cs_srtp *rx, uint16_t seq, uint32_t roc)
{
    uint8_t buf[256];
    size_t len = make_rtp(buf, seq, 0xABCD, 20);
    if (cs_srtp_protect(tx, buf, &len, sizeof buf, roc) != CS_SRTP_OK)
        return -1;
    return cs_srtp_unprotect(rx, buf, &len);
}

/* Packet seq of ssrc under tx's key with the sender's ROC, unprotected by rx; on
 * CS_SRTP_OK the plain packet must equal what was protected. */
static int ssrc_trip(cs_srtp *tx, cs_srtp *rx, uint32_t ssrc, uint16_t seq, uint32_t roc)
{
    uint8_t buf[256], plain[256];
    size_t len = make_rtp(buf, seq, ssrc, 20), plen = make_rtp(plain, seq, ssrc, 20);
    if (cs_srtp_protect(tx, buf, &len, sizeof buf, roc) != CS_SRTP_OK)
        return -1;
    int rc = cs_srtp_unprotect(rx, buf, &len);
    if (rc == CS_SRTP_OK && (len != plen || memcmp(buf, plain, plen) != 0))
        return -2;
    return rc;
}

/* The protected form of packet seq of ssrc (ROC roc) into out; its length. */
static size_t wire(cs_srtp *tx, uint32_t ssrc, uint16_t seq, uint32_t roc, uint8_t out[256])
{
    size_t len = make_rtp(out, seq, ssrc, 20);
    return cs_srtp_protect(tx, out, &len, 256, roc) == CS_SRTP_OK ? len : 0;
}

static int unprotect_copy(cs_srtp *rx, const uint8_t *pkt, size_t len)
{
    uint8_t buf[256];
    memcpy(buf, pkt, len);
    return cs_srtp_unprotect(rx, buf, &len);
}

/* RFC 3711 3.2.3: the peer changes SSRC under the same SDES key (a transfer). The new
 * SSRC starts its own index at ROC 0 whatever the old one reached (before: after A's
 * seq 40009, B at 1000 failed auth and C at 30000 was a replay), and each SSRC keeps its
 * own replay window: A's old packets stay refused after B and back to A. */
static void test_srtp_ssrc_change_under_one_key(void)
{
    enum { A = 0xA0A0A0A0u, B = 0xB0B0u, C = 0xC0C0C0u };
    for (int s = 0; s < 3; s++) {
        cs_srtp *tx = keyed(SUITES[s], NULL, 0), *rx = keyed(SUITES[s], NULL, 0);
        REQUIRE(tx && rx);
        uint8_t old_a[3][256];
        size_t old_len[3];
        for (uint32_t q = 39990; q <= 40009; q++)
            if (q != 39996) /* comes late, below */
                CHECK_EQ(ssrc_trip(tx, rx, A, (uint16_t)q, 0), CS_SRTP_OK);
        old_len[0] = wire(tx, A, 40009, 0, old_a[0]); /* already received */
        old_len[1] = wire(tx, A, 39995, 0, old_a[1]); /* inside A's window, received */
        old_len[2] = wire(tx, A, 39000, 0, old_a[2]); /* older than A's window */
        for (uint32_t q = 1000; q < 1010; q++)
            CHECK_EQ(ssrc_trip(tx, rx, B, (uint16_t)q, 0), CS_SRTP_OK);
        CHECK_EQ(ssrc_trip(tx, rx, B, 1005, 0), CS_SRTP_ERR_REPLAY);
        CHECK_EQ(ssrc_trip(tx, rx, C, 30000, 0), CS_SRTP_OK);
        CHECK_EQ(ssrc_trip(tx, rx, C, 30001, 0), CS_SRTP_OK);
        for (int k = 0; k < 3; k++) { /* after B and C: A's past is still A's */
            REQUIRE(old_len[k] > 0);
            CHECK_EQ(unprotect_copy(rx, old_a[k], old_len[k]), CS_SRTP_ERR_REPLAY);
        }
        CHECK_EQ(ssrc_trip(tx, rx, A, 40010, 0), CS_SRTP_OK); /* back to A, where it was */
        CHECK_EQ(ssrc_trip(tx, rx, A, 39996, 0), CS_SRTP_OK); /* late, inside A's window */
        for (int k = 0; k < 3; k++)
            CHECK_EQ(unprotect_copy(rx, old_a[k], old_len[k]), CS_SRTP_ERR_REPLAY);
        CHECK_EQ(ssrc_trip(tx, rx, B, 1009, 0), CS_SRTP_ERR_REPLAY);
        CHECK_EQ(ssrc_trip(tx, rx, B, 1010, 0), CS_SRTP_OK);
        /* each SSRC wraps on its own: B across 65535 -> 0 at ROC 1, A still at ROC 0 */
        CHECK_EQ(ssrc_trip(tx, rx, B, 30000, 0), CS_SRTP_OK);
        CHECK_EQ(ssrc_trip(tx, rx, B, 60000, 0), CS_SRTP_OK);
        CHECK_EQ(ssrc_trip(tx, rx, B, 200, 1), CS_SRTP_OK);
        CHECK_EQ(ssrc_trip(tx, rx, A, 40011, 0), CS_SRTP_OK);
        CHECK_EQ(ssrc_trip(tx, rx, A, 40012, 1), CS_SRTP_ERR_AUTH); /* A has not wrapped */
        cs_srtp_free(tx);
        cs_srtp_free(rx);
    }
}

/* Forged packets with distinct SSRCs (wrong tag, or another key) take no slot; four
 * authentic SSRCs do; an authentic fifth is CS_SRTP_ERR_SSRC_LIMIT (not decrypted, not
 * remembered), a forged fifth stays an auth failure; the four keep working. */
static void test_srtp_ssrc_limit_and_forged_ssrcs(void)
{
    uint8_t other[30];
    for (int i = 0; i < 30; i++)
        other[i] = (uint8_t)(200 - i);
    for (int s = 0; s < 3; s++) {
        cs_srtp *tx = keyed(SUITES[s], NULL, 0), *rx = keyed(SUITES[s], NULL, 0);
        cs_srtp *forger = cs_srtp_new();
        REQUIRE(tx && rx && forger);
        size_t klen = SUITES[s] == CS_SRTP_AEAD_AES_128_GCM ? 28 : 30;
        REQUIRE(cs_srtp_set_key(forger, SUITES[s], other, klen, NULL, 0) == 1);
        for (uint32_t i = 0; i < 500; i++) {
            uint8_t pkt[256];
            size_t len = wire(tx, 0x10000u + i, (uint16_t)(7 * i), 0, pkt);
            REQUIRE(len > 0);
            pkt[len - 1] ^= 0x20; /* our key, a broken tag */
            CHECK_EQ(unprotect_copy(rx, pkt, len), CS_SRTP_ERR_AUTH);
            CHECK_EQ(ssrc_trip(forger, rx, 0x20000u + i, (uint16_t)i, 0), CS_SRTP_ERR_AUTH);
        }
        for (uint32_t k = 0; k < CS_SRTP_MAX_SSRCS; k++)
            CHECK_EQ(ssrc_trip(tx, rx, 100 + k, (uint16_t)(5000 * k), 0), CS_SRTP_OK);
        uint8_t fifth[256];
        size_t flen = wire(tx, 999, 42, 0, fifth);
        REQUIRE(flen > 0);
        CHECK_EQ(unprotect_copy(rx, fifth, flen), CS_SRTP_ERR_SSRC_LIMIT);
        CHECK_EQ(unprotect_copy(rx, fifth, flen), CS_SRTP_ERR_SSRC_LIMIT); /* not a replay */
        CHECK_EQ(ssrc_trip(forger, rx, 998, 42, 0), CS_SRTP_ERR_AUTH);
        for (uint32_t k = 0; k < CS_SRTP_MAX_SSRCS; k++) { /* nobody was evicted */
            CHECK_EQ(ssrc_trip(tx, rx, 100 + k, (uint16_t)(5000 * k), 0), CS_SRTP_ERR_REPLAY);
            CHECK_EQ(ssrc_trip(tx, rx, 100 + k, (uint16_t)(5000 * k + 1), 0), CS_SRTP_OK);
        }
        CHECK(strcmp(cs_srtp_error_name(CS_SRTP_ERR_SSRC_LIMIT), "ssrc_limit") == 0);
        cs_srtp_free(tx);
        cs_srtp_free(rx);
        cs_srtp_free(forger);
    }
}

/* A repeated a=crypto keeps the SSRC table; a new key (re-INVITE), a session install or
 * clear + key empties it: four fresh SSRCs fit again and an old one restarts at ROC 0. */
static void test_srtp_set_key_resets_ssrcs(void)
{
    uint8_t k1[30], k2[30];
    for (int i = 0; i < 30; i++) {
        k1[i] = (uint8_t)(i * 3);
        k2[i] = (uint8_t)(77 + i);
    }
    cs_srtp *tx = cs_srtp_new(), *rx = cs_srtp_new();
    REQUIRE(tx && rx);
    int suite = CS_SRTP_AES_CM_128_HMAC_SHA1_80;
    CHECK_EQ(cs_srtp_set_key(tx, suite, k1, 30, NULL, 0), 1);
    CHECK_EQ(cs_srtp_set_key(rx, suite, k1, 30, NULL, 0), 1);
    for (uint32_t k = 0; k < CS_SRTP_MAX_SSRCS; k++) {
        CHECK_EQ(ssrc_trip(tx, rx, 10 + k, 65535, 0), CS_SRTP_OK);
        CHECK_EQ(ssrc_trip(tx, rx, 10 + k, 1, 1), CS_SRTP_OK); /* each at ROC 1 */
    }
    CHECK_EQ(ssrc_trip(tx, rx, 50, 1, 0), CS_SRTP_ERR_SSRC_LIMIT);
    CHECK_EQ(cs_srtp_set_key(rx, suite, k1, 30, NULL, 0), 0); /* same a=crypto: kept */
    CHECK_EQ(ssrc_trip(tx, rx, 50, 1, 0), CS_SRTP_ERR_SSRC_LIMIT);
    CHECK_EQ(ssrc_trip(tx, rx, 10, 2, 1), CS_SRTP_OK);
    CHECK_EQ(cs_srtp_set_key(tx, suite, k2, 30, NULL, 0), 1);
    CHECK_EQ(cs_srtp_set_key(rx, suite, k2, 30, NULL, 0), 1); /* re-INVITE: new key */
    CHECK_EQ(ssrc_trip(tx, rx, 10, 3, 1), CS_SRTP_ERR_AUTH);  /* index restarted: ROC 0 */
    CHECK_EQ(ssrc_trip(tx, rx, 10, 3, 0), CS_SRTP_OK);
    for (uint32_t k = 0; k < CS_SRTP_MAX_SSRCS - 1; k++)
        CHECK_EQ(ssrc_trip(tx, rx, 50 + k, 1, 0), CS_SRTP_OK);
    CHECK_EQ(ssrc_trip(tx, rx, 60, 1, 0), CS_SRTP_ERR_SSRC_LIMIT);
    cs_srtp_clear(rx);
    CHECK_EQ(ssrc_trip(tx, rx, 60, 1, 0), CS_SRTP_ERR_NO_KEY);
    CHECK_EQ(cs_srtp_set_key(rx, suite, k2, 30, NULL, 0), 1);
    CHECK_EQ(ssrc_trip(tx, rx, 60, 1, 0), CS_SRTP_OK);
    CHECK_EQ(ssrc_trip(tx, rx, 10, 3, 0), CS_SRTP_OK); /* the old window went with it */
    cs_srtp_free(tx);
    cs_srtp_free(rx);
}

/* RFC 3711 3.3.2: duplicates and indices older than the 128-packet window are refused;
 * late packets inside it are accepted once. */
static void test_srtp_replay_window(void)
{
    for (int s = 0; s < 3; s++) {
        cs_srtp *tx = keyed(SUITES[s], NULL, 0), *rx = keyed(SUITES[s], NULL, 0);
        REQUIRE(tx && rx);
        CHECK_EQ(round_trip(tx, rx, 1000, 0), CS_SRTP_OK);
        CHECK_EQ(round_trip(tx, rx, 1000, 0), CS_SRTP_ERR_REPLAY);
        CHECK_EQ(round_trip(tx, rx, 1200, 0), CS_SRTP_OK);
        CHECK_EQ(round_trip(tx, rx, 1073, 0), CS_SRTP_OK);   /* 127 behind: inside */
        CHECK_EQ(round_trip(tx, rx, 1073, 0), CS_SRTP_ERR_REPLAY);
        CHECK_EQ(round_trip(tx, rx, 1072, 0), CS_SRTP_ERR_REPLAY); /* 128 behind */
        CHECK_EQ(round_trip(tx, rx, 1000, 0), CS_SRTP_ERR_REPLAY);
        CHECK_EQ(round_trip(tx, rx, 1199, 0), CS_SRTP_OK);
        CHECK_EQ(round_trip(tx, rx, 1201, 0), CS_SRTP_OK);
        CHECK_EQ(round_trip(tx, rx, 1199, 0), CS_SRTP_ERR_REPLAY);
        cs_srtp_free(tx);
        cs_srtp_free(rx);
    }
}

/* Index estimation across the 16-bit wrap, with reordering on both sides of it; a
 * forged "replay" with the wrong ROC fails authentication rather than moving the ROC. */
static void test_srtp_roc_rollover(void)
{
    for (int s = 0; s < 3; s++) {
        cs_srtp *tx = keyed(SUITES[s], NULL, 0), *rx = keyed(SUITES[s], NULL, 0);
        REQUIRE(tx && rx);
        for (uint32_t i = 65500; i < 65536 + 40; i++) {
            if (i == 65534 || i == 65536 + 2)
                continue; /* sent late, below */
            CHECK_EQ(round_trip(tx, rx, (uint16_t)i, i >> 16), CS_SRTP_OK);
        }
        CHECK_EQ(round_trip(tx, rx, 65534, 0), CS_SRTP_OK); /* late, before the wrap */
        CHECK_EQ(round_trip(tx, rx, 2, 1), CS_SRTP_OK);
        CHECK_EQ(round_trip(tx, rx, 50, 0), CS_SRTP_ERR_AUTH); /* sender says ROC 0 */
        CHECK_EQ(round_trip(tx, rx, 50, 1), CS_SRTP_OK);
        /* a long silence of 20000 packets, then on */
        CHECK_EQ(round_trip(tx, rx, 20050, 1), CS_SRTP_OK);
        CHECK_EQ(round_trip(tx, rx, 40050, 1), CS_SRTP_OK);
        CHECK_EQ(round_trip(tx, rx, 60050, 1), CS_SRTP_OK);
        CHECK_EQ(round_trip(tx, rx, 14000, 2), CS_SRTP_OK);
        cs_srtp_free(tx);
        cs_srtp_free(rx);
    }
}

/* The same a=crypto again keeps ROC and window; a new key restarts them. */
static void test_srtp_rekey(void)
{
    uint8_t k1[30], k2[30];
    for (int i = 0; i < 30; i++) {
        k1[i] = (uint8_t)i;
        k2[i] = (uint8_t)(100 + i);
    }
    cs_srtp *tx = cs_srtp_new(), *rx = cs_srtp_new();
    REQUIRE(tx && rx);
    CHECK_EQ(cs_srtp_set_key(tx, CS_SRTP_AES_CM_128_HMAC_SHA1_80, k1, 30, NULL, 0), 1);
    CHECK_EQ(cs_srtp_set_key(rx, CS_SRTP_AES_CM_128_HMAC_SHA1_80, k1, 30, NULL, 0), 1);
    CHECK_EQ(round_trip(tx, rx, 65535, 0), CS_SRTP_OK);
    CHECK_EQ(round_trip(tx, rx, 3, 1), CS_SRTP_OK);
    CHECK_EQ(cs_srtp_set_key(rx, CS_SRTP_AES_CM_128_HMAC_SHA1_80, k1, 30, NULL, 0), 0);
    CHECK_EQ(round_trip(tx, rx, 3, 1), CS_SRTP_ERR_REPLAY);
    CHECK_EQ(round_trip(tx, rx, 4, 1), CS_SRTP_OK);
    CHECK_EQ(cs_srtp_set_key(rx, CS_SRTP_AES_CM_128_HMAC_SHA1_32, k1, 30, NULL, 0), 1);
    CHECK_EQ(cs_srtp_suite(rx), CS_SRTP_AES_CM_128_HMAC_SHA1_32);
    CHECK_EQ(cs_srtp_set_key(rx, CS_SRTP_AES_CM_128_HMAC_SHA1_80, k2, 30, NULL, 0), 1);
    CHECK_EQ(round_trip(tx, rx, 5, 1), CS_SRTP_ERR_AUTH); /* old key */
    CHECK_EQ(cs_srtp_set_key(tx, CS_SRTP_AES_CM_128_HMAC_SHA1_80, k2, 30, NULL, 0), 1);
    CHECK_EQ(round_trip(tx, rx, 6, 0), CS_SRTP_OK);      /* new context: ROC 0 */
    CHECK_EQ(cs_srtp_set_key(rx, CS_SRTP_AEAD_AES_128_GCM, k2, 30, NULL, 0), -22);
    CHECK_EQ(cs_srtp_set_key(rx, 9, k2, 30, NULL, 0), -22);
    CHECK_EQ(cs_srtp_set_key(rx, CS_SRTP_AES_CM_128_HMAC_SHA1_80, k2, 30, k2, 5), -22);
    cs_srtp_clear(rx);
    CHECK_EQ(round_trip(tx, rx, 7, 0), CS_SRTP_ERR_NO_KEY);
    cs_srtp_free(tx);
    cs_srtp_free(rx);
}

/* Short, wrong version, CSRC or extension past the end, no room for the tag: malformed,
 * read within bounds (exact-size heap copies under ASan). */
static void test_srtp_malformed(void)
{
    for (int s = 0; s < 3; s++) {
        cs_srtp *rx = keyed(SUITES[s], NULL, 0);
        REQUIRE(rx);
        uint8_t buf[64];
        size_t len = make_rtp(buf, 1, 2, 30);
        for (size_t n = 0; n < 12 + 4; n++) {
            uint8_t *p = cs_test_exact_copy(buf, n);
            size_t l = n;
            CHECK_EQ(cs_srtp_unprotect(rx, p, &l), CS_SRTP_ERR_MALFORMED);
            free(p);
        }
        uint8_t bad[64];
        memcpy(bad, buf, len);
        bad[0] = 0x40; /* version 1 */
        size_t l = len;
        CHECK_EQ(cs_srtp_unprotect(rx, bad, &l), CS_SRTP_ERR_MALFORMED);
        bad[0] = 0x8F; /* 15 CSRCs: 72 bytes of header */
        uint8_t *p = cs_test_exact_copy(bad, len);
        l = len;
        CHECK_EQ(cs_srtp_unprotect(rx, p, &l), CS_SRTP_ERR_MALFORMED);
        free(p);
        memcpy(bad, buf, len);
        bad[0] = 0x90; /* extension of 0xFFFF words */
        bad[14] = 0xFF;
        bad[15] = 0xFF;
        p = cs_test_exact_copy(bad, len);
        l = len;
        CHECK_EQ(cs_srtp_unprotect(rx, p, &l), CS_SRTP_ERR_MALFORMED);
        free(p);
        cs_srtp_free(rx);
    }
    size_t l = 20;
    uint8_t buf[20] = {0x80};
    CHECK_EQ(cs_srtp_unprotect(NULL, buf, &l), CS_SRTP_ERR_NO_KEY);
    CHECK(strcmp(cs_srtp_error_name(CS_SRTP_ERR_REPLAY), "replay") == 0);
    CHECK(strcmp(cs_srtp_error_name(77), "unknown") == 0);
}

#ifdef CS_HAVE_ASAN
static volatile long mallocs;
static volatile int counting;
static void on_malloc(const volatile void *p, size_t n)
{
    (void)p;
    (void)n;
    if (counting)
        mallocs++;
}
static void on_free(const volatile void *p) { (void)p; }
#endif

/* DESIGN §3: no allocation on the per-packet path (ASan's malloc hook counts them). */
static void test_srtp_no_allocation_per_packet(void)
{
#ifdef CS_HAVE_ASAN
    static int hooked;
    if (!hooked)
        hooked = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
    REQUIRE(hooked);
    for (int s = 0; s < 3; s++) {
        cs_srtp *tx = keyed(SUITES[s], NULL, 0), *rx = keyed(SUITES[s], NULL, 0);
        REQUIRE(tx && rx);
        uint8_t pkts[8][256];
        size_t lens[8];
        for (int i = 0; i < 8; i++) {
            lens[i] = make_rtp(pkts[i], (uint16_t)(7 + i), 99, 160);
            REQUIRE(cs_srtp_protect(tx, pkts[i], &lens[i], 256, 0) == CS_SRTP_OK);
        }
        mallocs = 0;
        counting = 1;
        for (int i = 0; i < 8; i++) {
            uint8_t copy[256];
            size_t l = lens[i];
            memcpy(copy, pkts[i], l);
            copy[30] ^= 1;
            CHECK_EQ(cs_srtp_unprotect(rx, copy, &l), CS_SRTP_ERR_AUTH);
            for (int again = 0; again < 2; again++) {
                l = lens[i];
                memcpy(copy, pkts[i], l);
                CHECK_EQ(cs_srtp_unprotect(rx, copy, &l), again ? CS_SRTP_ERR_REPLAY : CS_SRTP_OK);
            }
        }
        /* new SSRCs claiming slots, and one past the limit */
        for (uint32_t k = 0; k < CS_SRTP_MAX_SSRCS + 1; k++) {
            int rc = ssrc_trip(tx, rx, 1000 + k, 7, 0);
            CHECK_EQ(rc, k < CS_SRTP_MAX_SSRCS - 1 ? CS_SRTP_OK : CS_SRTP_ERR_SSRC_LIMIT);
        }
        counting = 0;
        CHECK_EQ(mallocs, 0);
        cs_srtp_free(tx);
        cs_srtp_free(rx);
    }
#endif
}

static const cs_test_case srtp_cases[] = {
    {"rfc3711_b2_keystream", test_srtp_rfc3711_b2_keystream},
    {"rfc3711_b3_key_derivation", test_srtp_rfc3711_b3_key_derivation},
    {"rfc7714_gcm_vector", test_srtp_rfc7714_gcm_vector},
    {"tamper_every_byte", test_srtp_tamper_every_byte},
    {"replay_window", test_srtp_replay_window},
    {"roc_rollover", test_srtp_roc_rollover},
    {"rekey", test_srtp_rekey},
    {"ssrc_change_under_one_key", test_srtp_ssrc_change_under_one_key},
    {"ssrc_limit_and_forged_ssrcs", test_srtp_ssrc_limit_and_forged_ssrcs},
    {"set_key_resets_ssrcs", test_srtp_set_key_resets_ssrcs},
    {"malformed", test_srtp_malformed},
    {"no_allocation_per_packet", test_srtp_no_allocation_per_packet},
};
const cs_test_suite cs_suite_srtp = {"srtp", srtp_cases, CS_TEST_COUNT(srtp_cases)};
