/* Control side of shared sockets: many legs on one UDP socket, told apart by source
 * address and SSRC through the demux table (demux.h). See ingest.h for the rule. */
#define _GNU_SOURCE
#include "ingest_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static int has_port(const cs_srclock_addr *a) {
    return (a->family == 4 || a->family == 6) && a->port != 0;
}

static int addr_same(const cs_srclock_addr *a, const cs_srclock_addr *b) {
    return a->family == b->family && a->port == b->port &&
           memcmp(a->addr, b->addr, a->family == 4 ? 4 : 16) == 0;
}

/* The key of address a: kind 1 (with the leg's SSRC) or kind 2. */
static void address_key(const ingest_slot *s, const cs_srclock_addr *a, cs_demux_key *k) {
    int kind = s->ssrc ? CS_DEMUX_ADDR_SSRC : CS_DEMUX_ADDR;
    cs_demux_key_make(k, (uint16_t)s->shared, kind, a, s->ssrc);
}

/* The keys leg s should hold now (see ingest.h); returns how many (<= LEG_KEYS). */
static uint32_t wanted_keys(const ingest_slot *s, cs_demux_key *out) {
    uint16_t sock = (uint16_t)s->shared;
    uint32_t n = 0;
    int preset = has_port(&s->preset);
    if (preset)
        address_key(s, &s->preset, &out[n++]);
    int locked = s->lock.state != CS_SRCLOCK_LEARNING;
    if (locked && !(preset && addr_same(&s->lock.addr, &s->preset)))
        address_key(s, &s->lock.addr, &out[n++]);
    if (locked && s->ssrc) /* rule 4: its locked source may change SSRC */
        cs_demux_key_make(&out[n++], sock, CS_DEMUX_FOLLOW, &s->lock.addr, 0);
    if (s->ssrc && !preset && s->lock.state != CS_SRCLOCK_LOCKED && n < LEG_KEYS)
        cs_demux_key_make(&out[n++], sock, CS_DEMUX_SSRC, NULL, s->ssrc);
    return n;
}

static int holds(const cs_demux_key *keys, uint32_t n, const cs_demux_key *k) {
    for (uint32_t i = 0; i < n; i++)
        if (cs_demux_key_eq(&keys[i], k))
            return 1;
    return 0;
}

/* Take or give up one key of leg id (demux mutex held): a follow key is claimed. */
static int key_add(cs_ingest *ing, const cs_demux_key *k, int32_t id) {
    return k->kind == CS_DEMUX_FOLLOW ? cs_demux_claim(&ing->demux, k, id)
                                      : cs_demux_insert(&ing->demux, k, id);
}

static void key_drop(cs_ingest *ing, const cs_demux_key *k, int32_t id) {
    if (k->kind == CS_DEMUX_FOLLOW)
        cs_demux_unclaim(&ing->demux, k, id);
    else
        cs_demux_remove(&ing->demux, k);
}

int shared_sync_keys(cs_ingest *ing, ingest_slot *s, int32_t id) {
    cs_demux_key want[LEG_KEYS];
    uint32_t nwant = wanted_keys(s, want);
    int rc = 0;
    pthread_mutex_lock(&ing->demux_mu);
    uint32_t added = 0;
    for (; added < nwant; added++) {
        if (holds(s->keys, s->nkeys, &want[added]))
            continue;
        rc = key_add(ing, &want[added], id);
        if (rc)
            break;
    }
    if (rc) { /* undo this call's inserts: the old keys stay */
        for (uint32_t i = 0; i < added; i++)
            if (!holds(s->keys, s->nkeys, &want[i]))
                key_drop(ing, &want[i], id);
    } else {
        for (uint32_t i = 0; i < s->nkeys; i++)
            if (!holds(want, nwant, &s->keys[i]))
                key_drop(ing, &s->keys[i], id);
        memcpy(s->keys, want, nwant * sizeof *want);
        s->nkeys = nwant;
    }
    pthread_mutex_unlock(&ing->demux_mu);
    return rc;
}

void shared_locked(cs_ingest *ing, ingest_slot *s, int32_t id) {
    uint32_t old = s->ssrc;
    int follow = old && s->lock.state != CS_SRCLOCK_LEARNING && s->lock.ssrc != old;
    if (follow)
        s->ssrc = s->lock.ssrc;
    if (shared_sync_keys(ing, s, id) == 0) {
        if (follow)
            BUMP(ing->counters.demux_ssrc_follows, 1);
        return;
    }
    BUMP(ing->counters.demux_conflicts, 1);
    if (follow) { /* keep the old SSRC's keys, and still key a newly learned address */
        s->ssrc = old;
        shared_sync_keys(ing, s, id);
    }
}

int shared_expect(cs_ingest *ing, ingest_slot *s, int32_t id, const cs_srclock_addr *addr) {
    cs_srclock_addr old = s->preset;
    memset(&s->preset, 0, sizeof s->preset);
    if (addr && (addr->family == 4 || addr->family == 6))
        s->preset = *addr;
    int rc = !has_port(&s->preset) && !s->ssrc ? -EINVAL : shared_sync_keys(ing, s, id);
    if (rc)
        s->preset = old;
    return rc;
}

int shared_set_ssrc(cs_ingest *ing, ingest_slot *s, int32_t id, uint32_t ssrc) {
    if (!has_port(&s->preset) && !ssrc)
        return -EINVAL;
    uint32_t old = s->ssrc;
    s->ssrc = ssrc;
    int rc = shared_sync_keys(ing, s, id);
    if (rc)
        s->ssrc = old;
    return rc;
}

void shared_drop_keys(cs_ingest *ing, ingest_slot *s, int32_t id) {
    pthread_mutex_lock(&ing->demux_mu);
    for (uint32_t i = 0; i < s->nkeys; i++)
        key_drop(ing, &s->keys[i], id);
    s->nkeys = 0;
    pthread_mutex_unlock(&ing->demux_mu);
}

/* The live shared socket named by id (table mutex held), or NULL. */
static shared_socket *find_socket(cs_ingest *ing, int32_t id) {
    if (id < 0 || STREAM_SLOT(id) >= ing->cfg.max_sockets)
        return NULL;
    shared_socket *k = &ing->sockets[STREAM_SLOT(id)];
    return k->active && k->gen == STREAM_GEN(id) ? k : NULL;
}

int32_t cs_ingest_add_socket(cs_ingest *ing, int fd) {
    if (fd < 0)
        return -EBADF;
    int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dfd < 0)
        return -errno;
    pthread_mutex_lock(&ing->table_mu);
    uint32_t slot = 0;
    while (slot < ing->cfg.max_sockets && ing->sockets[slot].active)
        slot++;
    int32_t rc = -ENOSPC;
    if (slot < ing->cfg.max_sockets) {
        shared_socket *k = &ing->sockets[slot];
        pthread_mutex_lock(&k->mu);
        k->gen = (uint16_t)(k->gen % 0x7FFF + 1);
        memset(&k->c, 0, sizeof k->c);
        tune_socket(dfd, ing->cfg.rcvbuf_bytes, &k->c.rcvbuf_bytes, &k->c.rcvbuf_forced);
        rc = MAKE_ID(k->gen, slot);
        int err = rx_watch(ing, dfd, SOCKET_TOKEN | (uint32_t)rc);
        if (err == 0) {
            k->fd = dfd;
            k->active = 1;
        } else {
            rc = err;
        }
        pthread_mutex_unlock(&k->mu);
    }
    pthread_mutex_unlock(&ing->table_mu);
    if (rc < 0)
        close(dfd);
    return rc;
}

int cs_ingest_remove_socket(cs_ingest *ing, int32_t socket_id) {
    pthread_mutex_lock(&ing->table_mu);
    shared_socket *k = find_socket(ing, socket_id);
    int rc = !k ? -ENOENT : k->c.legs ? -EBUSY : 0;
    if (rc == 0) {
        pthread_mutex_lock(&k->mu);
        int fd = k->fd;
        k->fd = -1;
        k->active = 0;
        pthread_mutex_unlock(&k->mu);
        rx_unwatch(ing, &k->req, fd);
    }
    pthread_mutex_unlock(&ing->table_mu);
    return rc;
}

int32_t cs_ingest_add_stream_shared(cs_ingest *ing, int32_t socket_id,
                                    const cs_srclock_addr *expected, uint32_t ssrc,
                                    const cs_jb_config *jb_cfg,
                                    const cs_srclock_config *lock_cfg) {
    cs_srclock_addr preset;
    memset(&preset, 0, sizeof preset);
    if (expected && (expected->family == 4 || expected->family == 6))
        preset = *expected;
    if (!has_port(&preset) && !ssrc)
        return -EINVAL;
    cs_jb_config def;
    if (!jb_cfg) {
        cs_jb_default_config(&def);
        jb_cfg = &def;
    }
    cs_jb *jb = cs_jb_new(jb_cfg);
    if (!jb)
        return -EINVAL;
    pthread_mutex_lock(&ing->table_mu);
    shared_socket *k = find_socket(ing, socket_id);
    uint32_t slot = 0;
    while (k && slot < ing->cfg.max_streams && ing->streams[slot].active)
        slot++;
    int32_t rc = !k ? -ENOENT : slot == ing->cfg.max_streams ? -ENOSPC : 0;
    if (rc == 0) {
        ingest_slot *s = &ing->streams[slot];
        pthread_mutex_lock(&s->mu);
        s->gen = (uint16_t)(s->gen % 0x7FFF + 1);
        s->fd = -1;
        s->shared = (int32_t)STREAM_SLOT(socket_id);
        s->ssrc = ssrc;
        s->preset = preset;
        s->nkeys = 0;
        s->jb = jb;
        cs_srclock_init(&s->lock, lock_cfg);
        if (preset.family)
            cs_srclock_expect(&s->lock, &preset);
        memset(&s->c, 0, sizeof s->c);
        s->c.rcvbuf_bytes = k->c.rcvbuf_bytes;
        s->c.rcvbuf_forced = k->c.rcvbuf_forced;
        rc = MAKE_ID(s->gen, slot);
        int err = shared_sync_keys(ing, s, rc);
        if (err) {
            s->shared = -1;
            s->jb = NULL;
            rc = err;
        } else {
            s->active = 1;
            k->c.legs++;
        }
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&ing->table_mu);
    if (rc < 0)
        cs_jb_free(jb);
    return rc;
}

int cs_ingest_socket_counters(cs_ingest *ing, int32_t socket_id, cs_socket_counters *out) {
    pthread_mutex_lock(&ing->table_mu);
    shared_socket *k = find_socket(ing, socket_id);
    if (k) {
        pthread_mutex_lock(&k->mu);
        *out = k->c;
        pthread_mutex_unlock(&k->mu);
    }
    pthread_mutex_unlock(&ing->table_mu);
    return k ? 0 : -ENOENT;
}
