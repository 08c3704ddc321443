/* Per-stream RTP source lock against injected packets (RTP Bleed, Asterisk AST-2017-005).
 *
 * A stream learns its peer (address + SSRC) from the first packets: a candidate must send
 * `probation` consecutive in-sequence packets from one address and SSRC before it is
 * locked; probation packets are dropped (nothing unverified reaches the jitter buffer).
 * Once locked:
 *   - a packet from any other address is dropped and counted (rejected_address);
 *   - a new SSRC from the locked address is accepted (and becomes the locked SSRC) only
 *     when the locked SSRC has been quiet for at least `ssrc_quiet_ns`; an SSRC that
 *     interleaves with the live one is injection: dropped and counted (rejected_ssrc).
 * cs_srclock_rearm() is for signalling that legitimately moves the media (re-INVITE,
 * UPDATE, transfer): a new source is learned with probation again, while the old one
 * stays accepted until the new one has passed it.
 * An expected address (from SDP) may be set: then only that address can be learned.
 *
 * Pure: no allocation, no clock reads (virtual time: `now_ns` is a parameter), no locks.
 * The struct is public so callers embed it (ingest.c) or allocate it (tests, via cffi).
 */
#ifndef CS_SRCLOCK_H
#define CS_SRCLOCK_H

#include "cs_common.h"

/* CDEF BEGIN */
/* Peer transport address, compared as bytes. IPv4-mapped IPv6 addresses are stored as
 * family 4, so a dual-stack socket and a v4 socket see the same peer the same way. */
typedef struct {
    uint8_t family;   /* 0 = unset, 4 = IPv4 (addr[0..3]), 6 = IPv6 (addr[0..15]) */
    uint8_t reserved;
    uint16_t port;    /* host byte order; 0 in an expected address means "any port" */
    uint8_t addr[16];
} cs_srclock_addr;

typedef struct {
    uint32_t probation;      /* consecutive in-sequence packets to learn a source; >= 1 */
    uint32_t reserved;
    int64_t ssrc_quiet_ns;   /* quiet time of the locked SSRC before a new one is taken */
} cs_srclock_config;

/* Outcome of cs_srclock_check(). Values below CS_SRC_DROP_PROBATION are accepted. */
enum {
    CS_SRC_ACCEPT = 0,           /* from the locked source */
    CS_SRC_ACCEPT_LEARNED = 1,   /* completed probation: this source is now locked */
    CS_SRC_ACCEPT_SSRC_SWITCH = 2, /* new SSRC from the locked address after quiet time */
    CS_SRC_DROP_PROBATION = 3,   /* candidate still under probation: dropped */
    CS_SRC_DROP_ADDRESS = 4,     /* foreign address: dropped */
    CS_SRC_DROP_SSRC = 5,        /* interleaved SSRC from the locked address: dropped */
    CS_SRC_OUTCOMES = 6
};

enum {
    CS_SRCLOCK_LEARNING = 0,     /* nothing locked yet */
    CS_SRCLOCK_LOCKED = 1,
    CS_SRCLOCK_REARMED = 2       /* locked, and learning a replacement source */
};

typedef struct {
    uint64_t accepted;           /* packets passed on (all ACCEPT* outcomes) */
    uint64_t probation_dropped;
    uint64_t rejected_address;
    uint64_t rejected_ssrc;
    uint64_t learned;            /* times a source was locked (first lock and rearms) */
    uint64_t ssrc_switches;      /* quiet SSRC switches from the locked address */
    uint64_t rearms;
} cs_srclock_counters;

typedef struct {
    /* what a packet from the locked source reads and writes: first, in 48 bytes */
    uint32_t state;              /* CS_SRCLOCK_* */
    uint32_t ssrc;               /* locked SSRC (valid unless LEARNING) */
    int64_t last_ns;             /* last accepted packet of the locked SSRC */
    cs_srclock_addr addr;        /* locked address (valid unless LEARNING) */
    uint32_t reserved3;
    cs_srclock_counters counters;
    cs_srclock_config cfg;
    cs_srclock_addr expected;    /* family 0: no expectation */
    cs_srclock_addr cand_addr;   /* probation candidate (valid if cand_count > 0) */
    uint32_t cand_ssrc;
    uint32_t cand_count;         /* consecutive in-sequence packets seen so far */
    uint16_t cand_seq;           /* sequence number of the candidate's last packet */
    uint16_t reserved;
    uint32_t reserved2;
} cs_srclock;

void cs_srclock_default_config(cs_srclock_config *cfg);
/* Reset `lock` to LEARNING with `cfg` (NULL: defaults); counters are zeroed. */
void cs_srclock_init(cs_srclock *lock, const cs_srclock_config *cfg);
/* Restrict learning to `addr` (NULL or family 0 clears it). Applies to later learning;
 * an already locked source is kept until the next rearm. */
void cs_srclock_expect(cs_srclock *lock, const cs_srclock_addr *addr);
/* Judge one packet; returns a CS_SRC_* outcome and counts it. */
int cs_srclock_check(cs_srclock *lock, const cs_srclock_addr *from, uint32_t ssrc,
                     uint16_t seq, int64_t now_ns);
/* Media moved by signalling: learn a new source with probation, keep the old meanwhile. */
void cs_srclock_rearm(cs_srclock *lock, int64_t now_ns);
/* CDEF END */

#endif
