/* libFuzzer target: RTP and RTCP parsing (native/src/rtp.c), the payload decoders and
 * the SRTP receive path (native/src/srtp_rx.c).
 *
 * Feeds each input to cs_rtp_parse and cs_rtcp_parse, checks the invariants of a
 * successful parse, and decodes the returned payload view with G.711 and G.722 and
 * inspects it as an Opus packet (frame count, the SILK header's LBRR flag), so ASan
 * checks that the view lies inside the input and that no decoder reads past it. Each
 * input is also unprotected as SRTP under every suite (exact-size copy: nothing may be
 * read past it; a forgery must never authenticate), and, when its header allows,
 * protected and unprotected again, which must give the input back. Build and run with
 * native/fuzz/run_fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cs_opus.h"
#include "g711.h"
#include "g722.h"
#include "rtp.h"
#include "srtp_rx.h"

#define FUZZ_ASSERT(cond)                                                                \
    do {                                                                                 \
        if (!(cond))                                                                     \
            __builtin_trap();                                                            \
    } while (0)

static void check_rtp(const uint8_t *data, size_t size)
{
    cs_rtp_header h;
    int rc = cs_rtp_parse(data, size, &h);
    FUZZ_ASSERT(rc >= 0 && rc < CS_RTP_ERR_COUNT);
    FUZZ_ASSERT((rc == CS_RTP_ERR_RTCP) == (cs_rtp_is_rtcp(data, size) != 0));
    if (rc != CS_RTP_OK)
        return;
    FUZZ_ASSERT(h.header_len >= 12u + 4u * h.csrc_count);
    FUZZ_ASSERT((size_t)h.header_len + h.payload_len <= size);
    FUZZ_ASSERT(h.payload == data + h.header_len);
    FUZZ_ASSERT(h.has_extension || h.ext_len == 0);

    int16_t pcm[256];
    size_t n = h.payload_len < 256 ? h.payload_len : 256;
    cs_ulaw_decode(h.payload + h.payload_len - n, pcm, n); /* touches the view's last byte */
    cs_alaw_decode(h.payload, pcm, n);

    cs_g722_decoder g722;
    cs_g722_reset(&g722);
    cs_g722_decode(&g722, h.payload, n / 2, pcm);
    int units = cs_opus_packet_units(h.payload, h.payload_len);
    FUZZ_ASSERT(units == -1 || (units >= 1 && units <= 48));
    int fec = cs_opus_packet_has_fec(h.payload, h.payload_len);
    FUZZ_ASSERT(fec >= -1 && fec <= 1 && (units == -1 || fec != -1));
}

static void check_rtcp(const uint8_t *data, size_t size)
{
    cs_rtcp_summary s;
    int rc = cs_rtcp_parse(data, size, &s);
    FUZZ_ASSERT(rc >= 0 && rc < CS_RTCP_ERR_COUNT);
    FUZZ_ASSERT(s.n_sr <= CS_RTCP_MAX_SR && s.n_reports <= CS_RTCP_MAX_REPORTS);
    if (rc == CS_RTCP_OK) {
        FUZZ_ASSERT(size % 4 == 0 && s.n_packets >= 1);
        FUZZ_ASSERT(s.n_packets * 4u <= size);
    }
    for (uint32_t i = 0; i < s.n_reports; i++) {
        int32_t lost = s.reports[i].cumulative_lost;
        FUZZ_ASSERT(lost >= -8388608 && lost <= 8388607);
    }
}

/* Per suite: a receiver keyed once (its replay state carries across inputs, as on a
 * live leg), a sender, and a receiver re-keyed fresh for each round trip. */
static cs_srtp *rx[3], *tx[3], *rt[3];
static uint8_t key[30];

static void check_srtp(const uint8_t *data, size_t size)
{
    static const int suites[3] = {CS_SRTP_AES_CM_128_HMAC_SHA1_80,
                                  CS_SRTP_AES_CM_128_HMAC_SHA1_32, CS_SRTP_AEAD_AES_128_GCM};
    if (!rx[0]) {
        for (int i = 0; i < 30; i++)
            key[i] = (uint8_t)(i * 29 + 1);
        for (int s = 0; s < 3; s++) {
            rx[s] = cs_srtp_new();
            tx[s] = cs_srtp_new();
            rt[s] = cs_srtp_new();
            size_t len = suites[s] == CS_SRTP_AEAD_AES_128_GCM ? 28 : 30;
            FUZZ_ASSERT(cs_srtp_set_key(rx[s], suites[s], key, len, NULL, 0) == 1);
            FUZZ_ASSERT(cs_srtp_set_key(tx[s], suites[s], key, len, NULL, 0) == 1);
        }
    }
    if (size > 2048)
        return;
    uint8_t *copy = malloc(size ? size : 1);
    uint8_t buf[2048 + 32];
    FUZZ_ASSERT(copy != NULL);
    for (int s = 0; s < 3; s++) {
        memcpy(copy, data, size);
        size_t len = size;
        int rc = cs_srtp_unprotect(rx[s], copy, &len);
        FUZZ_ASSERT(rc >= CS_SRTP_OK && rc <= CS_SRTP_ERR_SSRC_LIMIT && rc != CS_SRTP_ERR_NO_KEY);
        FUZZ_ASSERT(rc != CS_SRTP_OK); /* a random input never carries a valid tag */
        memcpy(buf, data, size);
        len = size;
        if (cs_srtp_protect(tx[s], buf, &len, sizeof buf, 0) != CS_SRTP_OK)
            continue;
        cs_srtp_clear(rt[s]);
        size_t klen = suites[s] == CS_SRTP_AEAD_AES_128_GCM ? 28 : 30;
        FUZZ_ASSERT(cs_srtp_set_key(rt[s], suites[s], key, klen, NULL, 0) == 1);
        FUZZ_ASSERT(cs_srtp_unprotect(rt[s], buf, &len) == CS_SRTP_OK);
        FUZZ_ASSERT(len == size && memcmp(buf, data, size) == 0);
        FUZZ_ASSERT(cs_srtp_unprotect(rt[s], buf, &(size_t){len}) != CS_SRTP_OK);
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_rtp(data, size);
    check_rtcp(data, size);
    check_srtp(data, size);
    return 0;
}
