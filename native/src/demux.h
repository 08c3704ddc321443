/* Demultiplexing table of the shared-port RTP ingest: which leg a datagram on a shared
 * socket belongs to, from its source transport address and SSRC.
 *
 * A fixed-capacity open-addressing hash table (linear probing, backward-shift deletion,
 * so there are no tombstones and a miss ends at the first empty slot however much the
 * table has churned). The capacity is a power of two >= 2 * max_keys, so the load factor
 * stays <= 1/2; cs_demux_init() allocates it once and nothing allocates afterwards.
 *
 * Keys are plain bytes (struct fields zeroed where unused) hashed with a per-table seed.
 * Only the control side and the source lock's learning insert keys, never a datagram by
 * itself, so a flood of forged sources cannot lengthen the probe chains: a lookup costs at
 * most the longest run of occupied slots that legitimate keys built.
 *
 * Not thread-safe: the ingest guards it with its demux mutex. Not read by cffi.
 */
#ifndef CS_DEMUX_H
#define CS_DEMUX_H

#include "cs_common.h"
#include "srclock.h"

/* What a key matches on. */
enum {
    CS_DEMUX_ADDR_SSRC = 1, /* source address + port, and SSRC (legs sharing an address) */
    CS_DEMUX_ADDR = 2,      /* source address + port, any SSRC */
    CS_DEMUX_SSRC = 3,      /* SSRC from any address (a leg learning by SSRC) */
    CS_DEMUX_FOLLOW = 4,    /* source address + port, any SSRC, claimed by every leg keyed
                             * there by SSRC (kind 1): matches only while one leg claims
                             * it (an SSRC change of that leg's source); shared, not owned */
    CS_DEMUX_KINDS = 5
};

typedef struct {
    uint16_t sock;    /* shared-socket slot */
    uint8_t kind;     /* CS_DEMUX_* */
    uint8_t family;   /* 4 or 6; 0 for CS_DEMUX_SSRC */
    uint16_t port;    /* 0 for CS_DEMUX_SSRC */
    uint16_t reserved;
    uint32_t ssrc;    /* 0 for CS_DEMUX_ADDR and CS_DEMUX_FOLLOW */
    uint8_t addr[16]; /* family 4 uses addr[0..3]; the rest is zero */
} cs_demux_key;

typedef struct {
    cs_demux_key key;
    int32_t value;   /* < 0: empty slot; CS_DEMUX_FOLLOW: xor of the claimants' values */
    uint32_t hash;
    uint32_t claims; /* 1, or a CS_DEMUX_FOLLOW key's claimants (found only when 1) */
} cs_demux_entry;

typedef struct {
    cs_demux_entry *slots;
    uint32_t mask;               /* capacity - 1 */
    uint32_t count;
    uint32_t max_keys;
    uint32_t kinds[CS_DEMUX_KINDS]; /* keys per kind: lookups skip absent kinds */
    uint64_t seed;
} cs_demux;

/* Build a key (zeroing what `kind` does not use). */
void cs_demux_key_make(cs_demux_key *k, uint16_t sock, int kind, const cs_srclock_addr *a,
                       uint32_t ssrc);
int cs_demux_key_eq(const cs_demux_key *a, const cs_demux_key *b);

/* 0, -EINVAL (max_keys 0 or > 2^30) or -ENOMEM. */
int cs_demux_init(cs_demux *d, uint32_t max_keys, uint64_t seed);
void cs_demux_free(cs_demux *d);
/* value >= 0. Returns 0, -EEXIST (key present: nothing changed), -ENOSPC (max_keys
 * reached) or -EINVAL (negative value, bad kind, or CS_DEMUX_FOLLOW). */
int cs_demux_insert(cs_demux *d, const cs_demux_key *k, int32_t value);
/* 0 or -ENOENT (also for CS_DEMUX_FOLLOW keys: unclaim those). */
int cs_demux_remove(cs_demux *d, const cs_demux_key *k);
/* A CS_DEMUX_FOLLOW key: claim it for value (a claimant claims a key once) or give its
 * claim up (the key goes with the last claim). The entry keeps the count and the xor of
 * the claimants' values, so with one claimant left its value is known without a scan.
 * claim: 0, -ENOSPC, -EINVAL (not a FOLLOW key, value < 0); unclaim: 0 or -ENOENT. */
int cs_demux_claim(cs_demux *d, const cs_demux_key *k, int32_t value);
int cs_demux_unclaim(cs_demux *d, const cs_demux_key *k, int32_t value);
/* The value stored for k, or -1 (also for a FOLLOW key with more than one claimant). */
int32_t cs_demux_find(const cs_demux *d, const cs_demux_key *k);
/* The slot where a probe for k starts (for tests that build collisions). */
uint32_t cs_demux_home(const cs_demux *d, const cs_demux_key *k);

/* The receive path's rule for one datagram on shared socket `sock`: the first of
 * (from, ssrc) exact, (from, any SSRC), (any address, ssrc), (from, followed by one leg)
 * that is present; -1 if none. */
int32_t cs_demux_lookup(const cs_demux *d, uint16_t sock, const cs_srclock_addr *from,
                        uint32_t ssrc);
/* A hint before cs_demux_lookup with the same arguments: start loading the table slot
 * where its first probe begins (a batch issues these for all its datagrams, then looks
 * them up, so the misses overlap). Reads the table's counts and seed only. */
void cs_demux_prefetch(const cs_demux *d, uint16_t sock, const cs_srclock_addr *from,
                       uint32_t ssrc);

#endif
