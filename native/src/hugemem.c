/* Huge-page backed allocations for the per-datagram state: see hugemem.h. */
#define _GNU_SOURCE
#include "hugemem.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define CS_HUGEMEM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CS_HUGEMEM_ASAN 1
#endif
#endif
#ifndef CS_HUGEMEM_ASAN
#define CS_HUGEMEM_ASAN 0
#endif

enum { HUGE = 2u << 20, CHUNK = 4u << 20, CLASSES = 32 };

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* 1: use mappings; 0: aligned_alloc (ASan, or CALLSHIELD_NO_HUGEMEM). Decided once. */
static int enabled(void) {
    static int state = -1; /* benign race: every thread computes the same value */
    int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (s < 0) {
        s = !CS_HUGEMEM_ASAN && !getenv("CALLSHIELD_NO_HUGEMEM");
        __atomic_store_n(&state, s, __ATOMIC_RELAXED);
    }
    return s;
}

/* A 2 MiB-aligned anonymous mapping of len (a multiple of HUGE), advised huge. */
static void *map_huge(size_t len) {
    uint8_t *p = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint8_t *a = (uint8_t *)round_up((uintptr_t)p, HUGE);
    if (a > p)
        munmap(p, (size_t)(a - p));
    size_t tail = (size_t)(p + len + HUGE - (a + len));
    if (tail)
        munmap(a + len, tail);
    madvise(a, len, MADV_HUGEPAGE); /* advice: refused (THP off) is ordinary pages */
    return a;
}

static void *plain_alloc(size_t bytes) {
    size_t n = round_up(bytes ? bytes : 1, 64);
    void *p = aligned_alloc(64, n);
    if (p)
        memset(p, 0, n);
    return p;
}

void *cs_huge_alloc(size_t bytes) {
    if (!enabled())
        return plain_alloc(bytes);
    return map_huge(round_up(bytes ? bytes : 1, HUGE)); /* fresh mappings are zero */
}

void cs_huge_free(void *p, size_t bytes) {
    if (!p)
        return;
    if (!enabled()) {
        free(p);
        return;
    }
    munmap(p, round_up(bytes ? bytes : 1, HUGE));
}

/* ---- the pool ------------------------------------------------------------------- */

typedef struct {
    size_t size;  /* block size (multiple of 64); 0: unused class */
    void *free;   /* free list, linked through each block's first word */
} size_class;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static size_class classes[CLASSES];
static uint8_t *chunk_next; /* bump pointer in the current chunk */
static size_t chunk_left;

/* The class of size n (creating it if there is room), or NULL. pool_mu held. */
static size_class *class_of(size_t n, int create) {
    for (int i = 0; i < CLASSES; i++) {
        if (classes[i].size == n)
            return &classes[i];
        if (!classes[i].size) {
            if (!create)
                return NULL;
            classes[i].size = n;
            return &classes[i];
        }
    }
    return NULL;
}

void *cs_pool_alloc(size_t bytes) {
    size_t n = round_up(bytes ? bytes : 1, 64);
    if (!enabled() || n > CHUNK / 4)
        return plain_alloc(n);
    pthread_mutex_lock(&pool_mu);
    size_class *c = class_of(n, 1);
    void *p = NULL;
    if (c && c->free) {
        p = c->free;
        c->free = *(void **)p;
        memset(p, 0, n);
    } else if (c) {
        if (chunk_left < n) {
            /* the old chunk's remainder is left unused (under n bytes) */
            chunk_next = map_huge(CHUNK);
            chunk_left = chunk_next ? CHUNK : 0;
        }
        if (chunk_left >= n) {
            p = chunk_next; /* untouched chunk memory is zero */
            chunk_next += n;
            chunk_left -= n;
        }
    }
    pthread_mutex_unlock(&pool_mu);
    /* no class left (32 sizes in use): an ordinary block, freed as one (class_of finds
     * no class for its size then either, since classes are never dropped) */
    return c ? p : plain_alloc(n);
}

void cs_pool_free(void *p, size_t bytes) {
    if (!p)
        return;
    size_t n = round_up(bytes ? bytes : 1, 64);
    if (!enabled() || n > CHUNK / 4) {
        free(p);
        return;
    }
    pthread_mutex_lock(&pool_mu);
    size_class *c = class_of(n, 0);
    if (c) {
        *(void **)p = c->free;
        c->free = p;
    }
    pthread_mutex_unlock(&pool_mu);
    if (!c)
        free(p);
}
