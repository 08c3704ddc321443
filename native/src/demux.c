/* Demultiplexing table of the shared-port ingest: see demux.h. */
#include "demux.h"
#include "hugemem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(cs_demux_key) == 28, "keys are hashed and compared as 28 bytes");

void cs_demux_key_make(cs_demux_key *k, uint16_t sock, int kind, const cs_srclock_addr *a,
                       uint32_t ssrc) {
    memset(k, 0, sizeof *k);
    k->sock = sock;
    k->kind = (uint8_t)kind;
    if (kind != CS_DEMUX_SSRC && a) {
        k->family = a->family;
        k->port = a->port;
        memcpy(k->addr, a->addr, a->family == 4 ? 4 : 16);
    }
    if (kind == CS_DEMUX_ADDR_SSRC || kind == CS_DEMUX_SSRC)
        k->ssrc = ssrc;
}

int cs_demux_key_eq(const cs_demux_key *a, const cs_demux_key *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Each 64-bit word of the key times its own odd constant, xor-folded, then one
 * finalizer: about half the multiplies of mixing word by word. */
static uint32_t key_hash(const cs_demux *d, const cs_demux_key *k) {
    uint64_t w[4] = {0, 0, 0, 0};
    memcpy(w, k, sizeof *k);
    uint64_t h = (w[0] ^ d->seed) * 0x9E3779B97F4A7C15ULL;
    h ^= (w[1] + d->seed) * 0xC2B2AE3D27D4EB4FULL;
    h ^= (w[2] ^ (d->seed >> 17)) * 0x165667B19E3779F9ULL;
    h ^= (w[3] + (d->seed << 13)) * 0x85EBCA77C2B2AE63ULL;
    h = mix(h);
    return (uint32_t)(h ^ (h >> 32));
}

int cs_demux_init(cs_demux *d, uint32_t max_keys, uint64_t seed) {
    memset(d, 0, sizeof *d);
    if (max_keys == 0 || max_keys > (1u << 30))
        return -EINVAL;
    uint32_t cap = 8;
    while (cap < 2 * max_keys)
        cap <<= 1;
    /* huge pages (hugemem.h): each datagram's lookup lands on a random slot */
    d->slots = cs_huge_alloc((size_t)cap * sizeof *d->slots);
    if (!d->slots)
        return -ENOMEM;
    for (uint32_t i = 0; i < cap; i++) {
        d->slots[i].value = -1;
        d->slots[i].claims = 0;
    }
    d->mask = cap - 1;
    d->max_keys = max_keys;
    d->seed = mix(seed ^ 0x5DEECE66DULL);
    return 0;
}

void cs_demux_free(cs_demux *d) {
    if (d->slots)
        cs_huge_free(d->slots, ((size_t)d->mask + 1) * sizeof *d->slots);
    memset(d, 0, sizeof *d);
}

uint32_t cs_demux_home(const cs_demux *d, const cs_demux_key *k) {
    return key_hash(d, k) & d->mask;
}

/* Index of k's slot, or of the empty slot that ends its probe. */
static uint32_t probe(const cs_demux *d, const cs_demux_key *k, uint32_t h) {
    uint32_t i = h & d->mask;
    while (d->slots[i].value >= 0) {
        const cs_demux_entry *e = &d->slots[i];
        if (e->hash == h && cs_demux_key_eq(&e->key, k))
            return i;
        i = (i + 1) & d->mask;
    }
    return i;
}

int32_t cs_demux_find(const cs_demux *d, const cs_demux_key *k) {
    if (!d->count)
        return -1;
    const cs_demux_entry *e = &d->slots[probe(d, k, key_hash(d, k))];
    return e->claims == 1 ? e->value : -1;
}

/* A new entry for k at empty slot i (probe result for hash h). */
static int put(cs_demux *d, uint32_t i, const cs_demux_key *k, uint32_t h, int32_t value) {
    if (d->count >= d->max_keys)
        return -ENOSPC;
    d->slots[i].key = *k;
    d->slots[i].hash = h;
    d->slots[i].value = value;
    d->slots[i].claims = 1;
    d->count++;
    d->kinds[k->kind]++;
    return 0;
}

/* Remove the entry at slot i. */
static void remove_at(cs_demux *d, uint32_t i) {
    const cs_demux_key *k = &d->slots[i].key;
    d->kinds[k->kind]--;
    d->count--;
    /* Backward shift: pull later entries of the run into the hole when the hole lies on
     * their probe path (between their home slot and where they sit, cyclically). */
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & d->mask; d->slots[j].value >= 0; j = (j + 1) & d->mask) {
        uint32_t home = d->slots[j].hash & d->mask;
        if (((j - home) & d->mask) >= ((j - hole) & d->mask)) {
            d->slots[hole] = d->slots[j];
            hole = j;
        }
    }
    d->slots[hole].value = -1;
}

int cs_demux_insert(cs_demux *d, const cs_demux_key *k, int32_t value) {
    if (value < 0 || k->kind < 1 || k->kind >= CS_DEMUX_FOLLOW)
        return -EINVAL;
    uint32_t h = key_hash(d, k);
    uint32_t i = probe(d, k, h);
    if (d->slots[i].value >= 0)
        return -EEXIST;
    return put(d, i, k, h, value);
}

int cs_demux_claim(cs_demux *d, const cs_demux_key *k, int32_t value) {
    if (value < 0 || k->kind != CS_DEMUX_FOLLOW)
        return -EINVAL;
    uint32_t h = key_hash(d, k);
    uint32_t i = probe(d, k, h);
    cs_demux_entry *e = &d->slots[i];
    if (e->value < 0)
        return put(d, i, k, h, value);
    e->claims++;
    e->value ^= value; /* both >= 0: the xor is too */
    return 0;
}

int cs_demux_unclaim(cs_demux *d, const cs_demux_key *k, int32_t value) {
    if (k->kind != CS_DEMUX_FOLLOW)
        return -ENOENT;
    uint32_t i = probe(d, k, key_hash(d, k));
    cs_demux_entry *e = &d->slots[i];
    if (e->value < 0)
        return -ENOENT;
    if (e->claims == 1) {
        remove_at(d, i);
        return 0;
    }
    e->claims--;
    e->value ^= value;
    return 0;
}

int cs_demux_remove(cs_demux *d, const cs_demux_key *k) {
    uint32_t i = probe(d, k, key_hash(d, k));
    if (d->slots[i].value < 0 || k->kind == CS_DEMUX_FOLLOW)
        return -ENOENT;
    remove_at(d, i);
    return 0;
}

static const int lookup_order[] = {CS_DEMUX_ADDR_SSRC, CS_DEMUX_ADDR, CS_DEMUX_SSRC,
                                   CS_DEMUX_FOLLOW};
enum { LOOKUP_KINDS = sizeof lookup_order / sizeof lookup_order[0] };

void cs_demux_prefetch(const cs_demux *d, uint16_t sock, const cs_srclock_addr *from,
                       uint32_t ssrc) {
    cs_demux_key k;
    for (int n = 0; n < LOOKUP_KINDS; n++) {
        if (!d->kinds[lookup_order[n]])
            continue;
        cs_demux_key_make(&k, sock, lookup_order[n], from, ssrc);
        const cs_demux_entry *e = &d->slots[key_hash(d, &k) & d->mask];
        __builtin_prefetch(e, 0);
        __builtin_prefetch((const char *)(e + 1) - 1, 0); /* an entry may span two lines */
        return; /* the first kind present: where most datagrams are found */
    }
}

int32_t cs_demux_lookup(const cs_demux *d, uint16_t sock, const cs_srclock_addr *from,
                        uint32_t ssrc) {
    const int *order = lookup_order;
    cs_demux_key k;
    for (int n = 0; n < LOOKUP_KINDS; n++) {
        if (!d->kinds[order[n]])
            continue;
        cs_demux_key_make(&k, sock, order[n], from, ssrc);
        int32_t v = cs_demux_find(d, &k);
        if (v >= 0)
            return v;
    }
    return -1;
}
