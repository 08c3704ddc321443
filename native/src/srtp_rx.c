/* SRTP receive side: key derivation, index estimation, replay window, authentication
 * and decryption. See srtp_rx.h for the rules and why libcrypto rather than libsrtp2.
 *
 * Packet layouts (RFC 3711 section 3.1, RFC 7714 section 8):
 *   AES-CM:  header | encrypted payload | MKI (optional) | tag (10 or 4 bytes)
 *            tag = HMAC-SHA1(k_a, header | encrypted payload | ROC) truncated
 *   GCM:     header (AAD) | encrypted payload | tag (16 bytes) | MKI (optional)
 * Every length is checked as "remaining >= needed" on size_t values before it is used. */
#ifndef OPENSSL_SUPPRESS_DEPRECATED
#define OPENSSL_SUPPRESS_DEPRECATED /* SHA1_Init & co: the only allocation-free SHA-1 */
#endif
#include "srtp_rx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

enum {
    KEY_LEN = 16,
    CM_SALT_LEN = 14,
    GCM_SALT_LEN = 12,
    AUTH_KEY_LEN = 20,
    GCM_TAG_LEN = 16,
    MAX_MASTER = KEY_LEN + CM_SALT_LEN,
    LABEL_ENC = 0,
    LABEL_AUTH = 1,
    LABEL_SALT = 2
};

typedef unsigned __int128 window_t;

/* One SSRC's receive state under the key (RFC 3711 3.2.3: keys may be shared across
 * SSRCs, ROC and replay list may not). Claimed only by an authenticated packet. */
typedef struct {
    window_t window;            /* bit k: index (highest - k) was received */
    uint64_t highest;           /* highest authenticated index (ROC << 16 | SEQ) */
    uint32_t ssrc;
    int used;                   /* an authenticated packet of ssrc was seen under this key */
} rx_state;

struct cs_srtp {
    int suite;
    uint32_t tag_len;
    uint32_t mki_len;
    uint8_t mki[CS_SRTP_MAX_MKI];
    uint8_t master[MAX_MASTER]; /* key || salt as signalled, to recognise a repeat */
    uint32_t master_len;
    uint8_t salt[CM_SALT_LEN];  /* session salt (12 bytes used for GCM) */
    EVP_CIPHER_CTX *cipher;     /* session key: AES-128-CTR or AES-128-GCM */
    SHA_CTX inner;              /* SHA-1 state after (k_a ^ ipad) */
    SHA_CTX outer;              /* SHA-1 state after (k_a ^ opad) */
    rx_state rx[CS_SRTP_MAX_SSRCS]; /* per SSRC, in the order first authenticated */
};

static uint16_t rd16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static uint32_t rd32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
           (uint32_t)p[3];
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

cs_srtp *cs_srtp_new(void)
{
    cs_srtp *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    ctx->cipher = EVP_CIPHER_CTX_new();
    if (!ctx->cipher) {
        free(ctx);
        return NULL;
    }
    return ctx;
}

void cs_srtp_clear(cs_srtp *ctx)
{
    if (!ctx)
        return;
    EVP_CIPHER_CTX *cipher = ctx->cipher;
    EVP_CIPHER_CTX_reset(cipher);
    OPENSSL_cleanse(ctx, sizeof *ctx);
    ctx->cipher = cipher;
    ctx->suite = CS_SRTP_NONE;
}

void cs_srtp_free(cs_srtp *ctx)
{
    if (!ctx)
        return;
    EVP_CIPHER_CTX_free(ctx->cipher);
    OPENSSL_cleanse(ctx, sizeof *ctx);
    free(ctx);
}

int cs_srtp_suite(const cs_srtp *ctx) { return ctx ? ctx->suite : CS_SRTP_NONE; }

static int salt_len(int suite) { return suite == CS_SRTP_AEAD_AES_128_GCM ? GCM_SALT_LEN : CM_SALT_LEN; }

static int valid_suite(int suite)
{
    return suite == CS_SRTP_AES_CM_128_HMAC_SHA1_80 || suite == CS_SRTP_AES_CM_128_HMAC_SHA1_32 ||
           suite == CS_SRTP_AEAD_AES_128_GCM;
}

/* HMAC pads: the SHA-1 states after one block of key ^ pad, copied per packet. */
static void hmac_key(cs_srtp *ctx, const uint8_t *auth_key)
{
    uint8_t block[SHA_CBLOCK];
    memset(block, 0x36, sizeof block);
    for (int i = 0; i < AUTH_KEY_LEN; i++)
        block[i] ^= auth_key[i];
    SHA1_Init(&ctx->inner);
    SHA1_Update(&ctx->inner, block, sizeof block);
    memset(block, 0x5c, sizeof block);
    for (int i = 0; i < AUTH_KEY_LEN; i++)
        block[i] ^= auth_key[i];
    SHA1_Init(&ctx->outer);
    SHA1_Update(&ctx->outer, block, sizeof block);
    OPENSSL_cleanse(block, sizeof block);
}

static void hmac(const cs_srtp *ctx, const uint8_t *msg, size_t n, uint32_t roc,
                 uint8_t out[SHA_DIGEST_LENGTH])
{
    uint8_t r[4], inner[SHA_DIGEST_LENGTH];
    put32(r, roc);
    SHA_CTX s = ctx->inner;
    SHA1_Update(&s, msg, n);
    SHA1_Update(&s, r, sizeof r);
    SHA1_Final(inner, &s);
    s = ctx->outer;
    SHA1_Update(&s, inner, sizeof inner);
    SHA1_Final(out, &s);
}

int cs_srtp_set_session(cs_srtp *ctx, int suite, const uint8_t *enc_key, const uint8_t *salt,
                        const uint8_t *auth_key, const uint8_t *mki, size_t mki_len)
{
    if (!ctx || !valid_suite(suite) || !enc_key || !salt || mki_len > CS_SRTP_MAX_MKI ||
        (mki_len && !mki) || (suite != CS_SRTP_AEAD_AES_128_GCM && !auth_key))
        return -EINVAL;
    cs_srtp_clear(ctx);
    int gcm = suite == CS_SRTP_AEAD_AES_128_GCM;
    const EVP_CIPHER *cipher = gcm ? EVP_aes_128_gcm() : EVP_aes_128_ctr();
    if (EVP_CipherInit_ex(ctx->cipher, cipher, NULL, enc_key, NULL, 0) != 1) {
        cs_srtp_clear(ctx);
        return -EIO;
    }
    memcpy(ctx->salt, salt, (size_t)salt_len(suite));
    if (!gcm)
        hmac_key(ctx, auth_key);
    if (mki_len)
        memcpy(ctx->mki, mki, mki_len);
    ctx->mki_len = (uint32_t)mki_len;
    ctx->tag_len = gcm ? GCM_TAG_LEN : suite == CS_SRTP_AES_CM_128_HMAC_SHA1_80 ? 10 : 4;
    ctx->suite = suite;
    return 0;
}

/* RFC 3711 4.3.3 AES-CM PRF with KDR 0: AES-CTR(master key) keystream from
 * IV = (master salt ^ label at octet 7) * 2^16. */
static int prf(EVP_CIPHER_CTX *c, const uint8_t *key, const uint8_t salt[CM_SALT_LEN],
               uint8_t label, uint8_t *out, int n)
{
    static const uint8_t zeros[32];
    uint8_t iv[16] = {0};
    int got = 0;
    memcpy(iv, salt, CM_SALT_LEN);
    iv[7] ^= label;
    if (EVP_EncryptInit_ex(c, EVP_aes_128_ctr(), NULL, key, iv) != 1 ||
        EVP_EncryptUpdate(c, out, &got, zeros, n) != 1 || got != n)
        return -EIO;
    return 0;
}

int cs_srtp_set_key(cs_srtp *ctx, int suite, const uint8_t *key_salt, size_t len,
                    const uint8_t *mki, size_t mki_len)
{
    if (!ctx || !valid_suite(suite) || !key_salt || mki_len > CS_SRTP_MAX_MKI ||
        (mki_len && !mki) || len != (size_t)(KEY_LEN + salt_len(suite)))
        return -EINVAL;
    if (ctx->suite == suite && ctx->master_len == len && ctx->mki_len == mki_len &&
        CRYPTO_memcmp(ctx->master, key_salt, len) == 0 &&
        (!mki_len || memcmp(ctx->mki, mki, mki_len) == 0))
        return 0;
    /* a 96-bit GCM salt enters the PRF times 2^16 (RFC 7714 erratum 4938) */
    uint8_t master_salt[CM_SALT_LEN] = {0};
    memcpy(master_salt, key_salt + KEY_LEN, len - KEY_LEN);
    uint8_t enc[KEY_LEN], salt[CM_SALT_LEN], auth[AUTH_KEY_LEN];
    int gcm = suite == CS_SRTP_AEAD_AES_128_GCM;
    int rc = prf(ctx->cipher, key_salt, master_salt, LABEL_ENC, enc, KEY_LEN);
    if (!rc)
        rc = prf(ctx->cipher, key_salt, master_salt, LABEL_SALT, salt, salt_len(suite));
    if (!rc && !gcm)
        rc = prf(ctx->cipher, key_salt, master_salt, LABEL_AUTH, auth, AUTH_KEY_LEN);
    if (!rc)
        rc = cs_srtp_set_session(ctx, suite, enc, salt, gcm ? NULL : auth, mki, mki_len);
    else
        cs_srtp_clear(ctx);
    OPENSSL_cleanse(enc, sizeof enc);
    OPENSSL_cleanse(salt, sizeof salt);
    OPENSSL_cleanse(auth, sizeof auth);
    OPENSSL_cleanse(master_salt, sizeof master_salt);
    if (rc)
        return rc;
    memcpy(ctx->master, key_salt, len);
    ctx->master_len = (uint32_t)len;
    return 1;
}

/* Bytes before the payload (fixed header, CSRCs, extension), or 0 when the datagram is
 * not RTP version 2 or its header runs past the end. */
static size_t header_len(const uint8_t *p, size_t len)
{
    if (len < 12 || (p[0] >> 6) != 2)
        return 0;
    size_t h = 12 + 4u * (p[0] & 0x0Fu);
    if (h > len)
        return 0;
    if (p[0] & 0x10) {
        if (len - h < 4)
            return 0;
        size_t ext = 4u * (size_t)rd16(p + h + 2);
        if (len - h - 4 < ext)
            return 0;
        h += 4 + ext;
    }
    return h;
}

/* RFC 3711 Appendix A: the index closest to the highest one seen. -1 when it would
 * need a ROC outside 0..2^32-1 (before the first packet of the SSRC: too old). */
static int estimate(const rx_state *st, uint16_t seq, uint64_t *index)
{
    if (!st->used) {
        *index = seq;
        return 0;
    }
    int64_t roc = (int64_t)(st->highest >> 16), v = roc;
    int s_l = (int)(st->highest & 0xFFFFu), s = seq;
    if (s_l < 32768) {
        if (s - s_l > 32768)
            v = roc - 1;
    } else if (s_l - 32768 > s) {
        v = roc + 1;
    }
    if (v < 0 || v > (int64_t)UINT32_MAX)
        return -1;
    *index = ((uint64_t)v << 16) | seq;
    return 0;
}

static int replayed(const rx_state *st, uint64_t index)
{
    if (!st->used || index > st->highest)
        return 0;
    uint64_t d = st->highest - index;
    return d >= CS_SRTP_WINDOW || ((st->window >> d) & 1u);
}

static void commit(rx_state *st, uint64_t index)
{
    if (!st->used) {
        st->used = 1;
        st->highest = index;
        st->window = 1;
    } else if (index > st->highest) {
        uint64_t d = index - st->highest;
        st->window = d >= CS_SRTP_WINDOW ? 1 : (st->window << d) | 1u;
        st->highest = index;
    } else {
        st->window |= (window_t)1 << (st->highest - index);
    }
}

/* The state of ssrc, or NULL when it has none yet under this key. */
static rx_state *state_of(cs_srtp *ctx, uint32_t ssrc)
{
    for (int i = 0; i < CS_SRTP_MAX_SSRCS; i++)
        if (ctx->rx[i].used && ctx->rx[i].ssrc == ssrc)
            return &ctx->rx[i];
    return NULL;
}

/* A free slot for a new SSRC whose first packet authenticated, or NULL when all are
 * taken. Slots are never evicted under a key: an evicted SSRC would start again at a
 * blank replay window, and its old packets would be accepted a second time. */
static rx_state *claim(cs_srtp *ctx, uint32_t ssrc)
{
    for (int i = 0; i < CS_SRTP_MAX_SSRCS; i++)
        if (!ctx->rx[i].used) {
            ctx->rx[i].ssrc = ssrc;
            return &ctx->rx[i];
        }
    return NULL;
}

/* AES-CM counter block: (salt * 2^16) ^ (SSRC * 2^64) ^ (index * 2^16). */
static int ctr_crypt(cs_srtp *ctx, uint8_t *p, size_t n, uint32_t ssrc, uint64_t index)
{
    uint8_t iv[16] = {0};
    memcpy(iv, ctx->salt, CM_SALT_LEN);
    for (int i = 0; i < 4; i++)
        iv[4 + i] ^= (uint8_t)(ssrc >> (24 - 8 * i));
    for (int i = 0; i < 6; i++)
        iv[8 + i] ^= (uint8_t)(index >> (40 - 8 * i));
    int got = 0;
    if (EVP_EncryptInit_ex(ctx->cipher, NULL, NULL, NULL, iv) != 1)
        return -1;
    if (n && (EVP_EncryptUpdate(ctx->cipher, p, &got, p, (int)n) != 1 || got != (int)n))
        return -1;
    return 0;
}

/* RFC 7714 8.1 IV: (00 00 || SSRC || ROC || SEQ) ^ salt. */
static void gcm_iv(const cs_srtp *ctx, uint32_t ssrc, uint64_t index, uint8_t iv[12])
{
    memset(iv, 0, 12);
    put32(iv + 2, ssrc);
    put32(iv + 6, (uint32_t)(index >> 16));
    iv[10] = (uint8_t)(index >> 8);
    iv[11] = (uint8_t)index;
    for (int i = 0; i < GCM_SALT_LEN; i++)
        iv[i] ^= ctx->salt[i];
}

/* GCM over pkt: AAD pkt[0..h), text pkt[h..end) in place; tag read (decrypt) or
 * written (encrypt) at pkt + end. 0 on success, -1 on a failed tag or error. */
static int gcm_crypt(cs_srtp *ctx, uint8_t *pkt, size_t h, size_t end, uint32_t ssrc,
                     uint64_t index, int enc)
{
    EVP_CIPHER_CTX *c = ctx->cipher;
    uint8_t iv[12], tag[GCM_TAG_LEN], scratch[GCM_TAG_LEN];
    int got = 0;
    gcm_iv(ctx, ssrc, index, iv);
    if (EVP_CipherInit_ex(c, NULL, NULL, NULL, iv, enc) != 1 ||
        EVP_CipherUpdate(c, NULL, &got, pkt, (int)h) != 1)
        return -1;
    size_t n = end - h;
    if (n && (EVP_CipherUpdate(c, pkt + h, &got, pkt + h, (int)n) != 1 || got != (int)n))
        return -1;
    if (!enc) {
        memcpy(tag, pkt + end, GCM_TAG_LEN);
        if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, GCM_TAG_LEN, tag) != 1)
            return -1;
    }
    if (EVP_CipherFinal_ex(c, scratch, &got) != 1)
        return -1;
    if (enc && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, GCM_TAG_LEN, pkt + end) != 1)
        return -1;
    return 0;
}

int cs_srtp_unprotect(cs_srtp *ctx, uint8_t *pkt, size_t *len)
{
    if (!ctx || ctx->suite == CS_SRTP_NONE)
        return CS_SRTP_ERR_NO_KEY;
    size_t n = *len, h = header_len(pkt, n);
    size_t trailer = (size_t)ctx->tag_len + ctx->mki_len;
    if (!h || n - h < trailer)
        return CS_SRTP_ERR_MALFORMED;
    static const rx_state fresh; /* an SSRC not seen yet: ROC 0, empty window */
    uint32_t ssrc = rd32(pkt + 8);
    rx_state *st = state_of(ctx, ssrc);
    uint64_t index;
    if (estimate(st ? st : &fresh, rd16(pkt + 2), &index) ||
        replayed(st ? st : &fresh, index))
        return CS_SRTP_ERR_REPLAY;
    size_t end = n - trailer; /* end of the encrypted portion */
    if (ctx->suite == CS_SRTP_AEAD_AES_128_GCM) {
        if (ctx->mki_len && CRYPTO_memcmp(pkt + n - ctx->mki_len, ctx->mki, ctx->mki_len))
            return CS_SRTP_ERR_AUTH;
        if (gcm_crypt(ctx, pkt, h, end, ssrc, index, 0))
            return CS_SRTP_ERR_AUTH;
        if (!st && !(st = claim(ctx, ssrc)))
            return CS_SRTP_ERR_SSRC_LIMIT; /* authentic, but no room: dropped */
    } else {
        uint8_t mac[SHA_DIGEST_LENGTH];
        hmac(ctx, pkt, end, (uint32_t)(index >> 16), mac);
        int bad = CRYPTO_memcmp(mac, pkt + n - ctx->tag_len, ctx->tag_len) != 0;
        if (ctx->mki_len)
            bad |= CRYPTO_memcmp(pkt + end, ctx->mki, ctx->mki_len) != 0;
        if (bad)
            return CS_SRTP_ERR_AUTH;
        if (!st && !(st = claim(ctx, ssrc)))
            return CS_SRTP_ERR_SSRC_LIMIT; /* authentic, but no room: not decrypted */
        if (ctr_crypt(ctx, pkt + h, end - h, ssrc, index))
            return CS_SRTP_ERR_AUTH;
    }
    commit(st, index);
    *len = end;
    return CS_SRTP_OK;
}

int cs_srtp_protect(cs_srtp *ctx, uint8_t *pkt, size_t *len, size_t cap, uint32_t roc)
{
    if (!ctx || ctx->suite == CS_SRTP_NONE)
        return CS_SRTP_ERR_NO_KEY;
    size_t n = *len, h = header_len(pkt, n);
    size_t trailer = (size_t)ctx->tag_len + ctx->mki_len;
    if (!h || cap < n || cap - n < trailer)
        return CS_SRTP_ERR_MALFORMED;
    uint64_t index = ((uint64_t)roc << 16) | rd16(pkt + 2);
    uint32_t ssrc = rd32(pkt + 8);
    if (ctx->suite == CS_SRTP_AEAD_AES_128_GCM) {
        if (gcm_crypt(ctx, pkt, h, n, ssrc, index, 1))
            return CS_SRTP_ERR_MALFORMED;
        memcpy(pkt + n + GCM_TAG_LEN, ctx->mki, ctx->mki_len);
    } else {
        uint8_t mac[SHA_DIGEST_LENGTH];
        if (ctr_crypt(ctx, pkt + h, n - h, ssrc, index))
            return CS_SRTP_ERR_MALFORMED;
        hmac(ctx, pkt, n, roc, mac);
        memcpy(pkt + n, ctx->mki, ctx->mki_len);
        memcpy(pkt + n + ctx->mki_len, mac, ctx->tag_len);
    }
    *len = n + trailer;
    return CS_SRTP_OK;
}

const char *cs_srtp_error_name(int code)
{
    static const char *const names[] = {"ok", "malformed", "auth", "replay", "no_key",
                                         "ssrc_limit"};
    return code >= 0 && code < (int)(sizeof names / sizeof names[0]) ? names[code] : "unknown";
}
