/* SRTP receive side (RFC 3711, RFC 7714) for SDES-keyed legs (RFC 4568 a=crypto).
 *
 * Suites: AES_CM_128_HMAC_SHA1_80, AES_CM_128_HMAC_SHA1_32 (RFC 4568 section 6.2) and
 * AEAD_AES_128_GCM (RFC 7714, 16-byte tag). Keys come from the SDP as key || salt: 30
 * bytes for AES-CM (16 + 14), 28 for GCM (16 + 12; the 96-bit salt is multiplied by 2^16
 * for the AES-CM PRF, RFC 7714 erratum 4938). Session keys are derived once per key
 * (KDR 0: no re-derivation). An optional MKI (1..4 bytes) is checked: AES-CM carries it
 * between the encrypted portion and the tag, GCM after the tag.
 *
 * cs_srtp_unprotect() works in place and authenticates before anything of the packet is
 * trusted: only the clear header's lengths, sequence number and SSRC are read before the
 * tag is checked (constant-time compare), and nothing is decrypted for AES-CM until the
 * tag matched. GCM decrypts and checks in one pass; on a failed tag the (overwritten)
 * packet is dropped all the same.
 *
 * Index estimation and replay (RFC 3711 section 3.3.1, Appendix A; section 3.3.2): the
 * 48-bit index ROC * 2^16 + SEQ is estimated from the highest authenticated index; a
 * 128-packet sliding window rejects an index already received or older than the window.
 * The window and the ROC move only after a packet authenticated. Both are per SSRC (RFC
 * 3711 section 3.2.3: an SDES key is shared by every SSRC of the leg, so a peer that
 * changes SSRC under the same key, a transfer or re-origination, starts a new index):
 * each key holds CS_SRTP_MAX_SSRCS states, preallocated in the context, and the first
 * packet of an SSRC starts at ROC 0 (as RFC 3711 says for a receiver that joins with no
 * ROC signalled). A state is claimed only by a packet that authenticated, so forged
 * packets with made-up SSRCs take none. States are never evicted while the key lives: a
 * further SSRC's authentic packets are CS_SRTP_ERR_SSRC_LIMIT (evicting one would give
 * that SSRC a blank window again, and its old packets could be replayed). A new key
 * (re-INVITE) empties the table.
 *
 * SRTCP is not handled: we never send RTCP and need none of its content. The ingest
 * drops RTCP-multiplexed datagrams of an SRTP leg before this code and counts them
 * (srtcp_ignored).
 *
 * Crypto from OpenSSL's libcrypto: AES-128-CTR and AES-128-GCM through one EVP cipher
 * context per stream, HMAC-SHA1 from SHA-1 states with the key's inner and outer pads
 * precomputed at keying. Allocation happens in cs_srtp_new() and cs_srtp_set_key() (the
 * control side) only: the per-packet calls allocate nothing (checked by the C tests).
 * Debian's libsrtp2 (2.5.0, built on NSS) was measured allocating ~28 blocks per
 * unprotect for AES-CM and ~10 for GCM, and OpenSSL 3.0's EVP_MAC HMAC two per packet;
 * hence this file. Not thread-safe: callers serialise per context (the stream mutex). */
#ifndef CS_SRTP_RX_H
#define CS_SRTP_RX_H

#include "cs_common.h"

/* CDEF BEGIN */
enum {
    CS_SRTP_NONE = 0,
    CS_SRTP_AES_CM_128_HMAC_SHA1_80 = 1,
    CS_SRTP_AES_CM_128_HMAC_SHA1_32 = 2,
    CS_SRTP_AEAD_AES_128_GCM = 3
};

/* cs_srtp_unprotect() outcomes; stable numbers. */
enum {
    CS_SRTP_OK = 0,
    CS_SRTP_ERR_MALFORMED = 1,  /* not RTP v2, header past the end, or no room for tag/MKI */
    CS_SRTP_ERR_AUTH = 2,       /* tag (or MKI) does not match: tampered or foreign */
    CS_SRTP_ERR_REPLAY = 3,     /* index already received, or older than the window */
    CS_SRTP_ERR_NO_KEY = 4,     /* no key set */
    CS_SRTP_ERR_SSRC_LIMIT = 5  /* authentic, but a new SSRC when the key has
                                 * CS_SRTP_MAX_SSRCS already (never evicted) */
};

enum { CS_SRTP_WINDOW = 128, CS_SRTP_MAX_MKI = 4, CS_SRTP_MAX_SSRCS = 4 };

typedef struct cs_srtp cs_srtp;

/* A context with no key (every packet: CS_SRTP_ERR_NO_KEY). NULL when out of memory. */
cs_srtp *cs_srtp_new(void);
void cs_srtp_free(cs_srtp *ctx);
/* Master key || master salt for suite, with an optional MKI (mki_len 0..4). Returns 1
 * when a new key was installed (the SSRC table empties: every index, ROC and replay
 * window restarts), 0 when suite, key and MKI equal the current ones (the context, its
 * SSRCs' ROCs and windows, are kept: a re-INVITE that repeats its a=crypto line must not
 * lose the ROC), -EINVAL for a bad suite or length, -ENOMEM/-EIO when libcrypto fails
 * (the context is then keyless). */
int cs_srtp_set_key(cs_srtp *ctx, int suite, const uint8_t *key_salt, size_t len,
                    const uint8_t *mki, size_t mki_len);
/* Drop the key: every later packet is CS_SRTP_ERR_NO_KEY. */
void cs_srtp_clear(cs_srtp *ctx);
int cs_srtp_suite(const cs_srtp *ctx);
/* Authenticate, check replay and decrypt pkt[0..*len) in place. On CS_SRTP_OK *len is
 * the plain RTP length (tag and MKI removed); on any error the packet must be dropped
 * (for GCM its payload may have been overwritten). */
int cs_srtp_unprotect(cs_srtp *ctx, uint8_t *pkt, size_t *len);
/* The sender's side, for tests, benchmarks and the fuzz corpus: protect pkt[0..*len)
 * in place with the given ROC (the caller tracks it), appending MKI and tag; cap is the
 * buffer size. CS_SRTP_OK, CS_SRTP_ERR_MALFORMED (no room / not RTP), CS_SRTP_ERR_NO_KEY. */
int cs_srtp_protect(cs_srtp *ctx, uint8_t *pkt, size_t *len, size_t cap, uint32_t roc);
/* Static snake_case label of a CS_SRTP_ERR_* code ("ok", "malformed", ..., "ssrc_limit"). */
const char *cs_srtp_error_name(int code);
/* `callshield bench srtp` (srtp_bench.c): packet i = data[offsets[i] ..+ lengths[i]) is
 * copied to scratch (untimed), then unprotected (ctx NULL: plain RTP, skipped) and
 * parsed, timed with CLOCK_MONOTONIC into cost_ns[i]; results[i] is the CS_SRTP_* code,
 * -2 for a parse failure, -1 when longer than scratch. Returns the packets that passed. */
size_t cs_srtp_bench_replay(cs_srtp *ctx, const uint8_t *data, const uint64_t *offsets,
                            const uint32_t *lengths, size_t n, uint8_t *scratch,
                            size_t scratch_len, int64_t *cost_ns, int8_t *results);
/* CDEF END */

/* Install session keys directly (no KDF): enc_key 16 bytes, salt 14 (AES-CM) or 12
 * (GCM), auth_key 20 (AES-CM; NULL for GCM). For the RFC known-answer tests, whose
 * vectors are given as session keys; cs_srtp_set_key() ends here too. Resets every
 * SSRC's index and window; forgets the master key. 0, -EINVAL, or -EIO. */
int cs_srtp_set_session(cs_srtp *ctx, int suite, const uint8_t *enc_key, const uint8_t *salt,
                        const uint8_t *auth_key, const uint8_t *mki, size_t mki_len);

#endif
