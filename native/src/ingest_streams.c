/* Control side of the RTP ingest: adding and removing streams, the batch pull and the
 * stats copy-outs. Runs on the caller's threads, concurrently with the receiver thread
 * (ingest.c); see ingest.h for the locking rules. */
#define _GNU_SOURCE
#include "ingest_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void tune_socket(int fd, uint32_t rcvbuf, uint64_t *rcvbuf_bytes, uint64_t *forced) {
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    *forced = 0;
    if (rcvbuf) {
        int want = (int)rcvbuf;
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof want) == 0)
            *forced = 1;
        else
            (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);
    }
    int got = 0;
    socklen_t len = sizeof got;
    if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0)
        *rcvbuf_bytes = (uint64_t)got;
}

int32_t cs_ingest_add_stream(cs_ingest *ing, int fd, const cs_jb_config *jb_cfg,
                             const cs_srclock_config *lock_cfg) {
    cs_jb_config def;
    if (!jb_cfg) {
        cs_jb_default_config(&def);
        jb_cfg = &def;
    }
    if (fd < 0)
        return -EBADF;
    cs_jb *jb = cs_jb_new(jb_cfg);
    if (!jb)
        return -EINVAL;
    int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dfd < 0) {
        int err = errno;
        cs_jb_free(jb);
        return -err;
    }
    pthread_mutex_lock(&ing->table_mu);
    uint32_t slot = 0;
    while (slot < ing->cfg.max_streams && ing->streams[slot].active)
        slot++;
    if (slot == ing->cfg.max_streams) {
        pthread_mutex_unlock(&ing->table_mu);
        close(dfd);
        cs_jb_free(jb);
        return -ENOSPC;
    }
    ingest_slot *s = &ing->streams[slot];
    pthread_mutex_lock(&s->mu);
    s->gen = (uint16_t)(s->gen % 0x7FFF + 1);
    s->fd = dfd;
    s->shared = -1;
    s->pushed = 0;
    s->nkeys = 0;
    s->jb = jb;
    cs_srclock_init(&s->lock, lock_cfg);
    memset(&s->c, 0, sizeof s->c);
    tune_socket(dfd, ing->cfg.rcvbuf_bytes, &s->c.rcvbuf_bytes, &s->c.rcvbuf_forced);
    s->active = 1;
    int32_t id = MAKE_ID(s->gen, slot);
    int rc = rx_watch(ing, dfd, (uint64_t)(uint32_t)id);
    if (rc) {
        s->active = 0;
        s->jb = NULL;
        s->fd = -1;
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&ing->table_mu);
    if (rc) {
        close(dfd);
        cs_jb_free(jb);
        return rc;
    }
    return id;
}

/* Lock and return the stream named by id, or NULL (nothing locked) if there is none. */
static ingest_slot *lock_stream(cs_ingest *ing, int32_t id) {
    if (id < 0 || STREAM_SLOT(id) >= ing->cfg.max_streams)
        return NULL;
    ingest_slot *s = &ing->streams[STREAM_SLOT(id)];
    pthread_mutex_lock(&s->mu);
    if (s->active && s->gen == STREAM_GEN(id))
        return s;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int cs_ingest_remove_stream(cs_ingest *ing, int32_t id) {
    pthread_mutex_lock(&ing->table_mu);
    ingest_slot *s = lock_stream(ing, id);
    if (!s) {
        pthread_mutex_unlock(&ing->table_mu);
        return -ENOENT;
    }
    int fd = -1; /* a per-leg socket: unwatched and closed once the slot is unlocked */
    if (s->shared >= 0) {
        shared_drop_keys(ing, s, id);
        ing->sockets[s->shared].c.legs--;
        s->shared = -1;
    } else if (!s->pushed) {
        fd = s->fd;
    }
    s->pushed = 0;
    s->srtp_on = 0;
    cs_srtp_clear(s->srtp); /* the context stays with the slot, keyless */
    cs_jb_free(s->jb);
    s->fd = -1;
    s->jb = NULL;
    s->active = 0;
    pthread_mutex_unlock(&s->mu);
    if (fd >= 0)
        rx_unwatch(ing, &s->req, fd);
    pthread_mutex_unlock(&ing->table_mu);
    return 0;
}

int cs_ingest_rearm(cs_ingest *ing, int32_t id, int64_t now_ns) {
    ingest_slot *s = lock_stream(ing, id);
    if (!s)
        return -ENOENT;
    cs_srclock_rearm(&s->lock, now_ns);
    int rc = s->shared >= 0 ? shared_sync_keys(ing, s, id) : 0;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int cs_ingest_expect_source(cs_ingest *ing, int32_t id, const cs_srclock_addr *addr) {
    ingest_slot *s = lock_stream(ing, id);
    if (!s)
        return -ENOENT;
    int rc = s->shared >= 0 ? shared_expect(ing, s, id, addr) : 0;
    if (!rc)
        cs_srclock_expect(&s->lock, addr);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int cs_ingest_set_ssrc(cs_ingest *ing, int32_t id, uint32_t ssrc) {
    ingest_slot *s = lock_stream(ing, id);
    if (!s)
        return -ENOENT;
    int rc = s->shared >= 0 ? shared_set_ssrc(ing, s, id, ssrc) : -EOPNOTSUPP;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int cs_ingest_set_pts(cs_ingest *ing, int32_t id, const cs_pt_entry *pts, uint32_t n) {
    ingest_slot *s = lock_stream(ing, id);
    if (!s)
        return -ENOENT;
    int rc = cs_jb_set_pts(s->jb, pts, n);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int cs_ingest_set_paused(cs_ingest *ing, int32_t id, int paused) {
    ingest_slot *s = lock_stream(ing, id);
    if (!s)
        return -ENOENT;
    cs_jb_set_paused(s->jb, paused);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int cs_ingest_set_srtp(cs_ingest *ing, int32_t id, int suite, const uint8_t *key_salt,
                       size_t len, const uint8_t *mki, size_t mki_len) {
    ingest_slot *s = lock_stream(ing, id);
    if (!s)
        return -ENOENT;
    int rc;
    if (s->pushed) {
        rc = -EOPNOTSUPP;
    } else if (suite == CS_SRTP_NONE) {
        s->srtp_on = 0;
        cs_srtp_clear(s->srtp);
        rc = 0;
    } else {
        if (!s->srtp)
            s->srtp = cs_srtp_new();
        int had_key = s->srtp_on;
        rc = s->srtp ? cs_srtp_set_key(s->srtp, suite, key_salt, len, mki, mki_len) : -ENOMEM;
        if (rc == 1 && had_key)
            s->c.srtp_rekeys++;
        if (rc < 0 && rc != -EINVAL)
            s->srtp_on = 0; /* libcrypto failed: the context is keyless now */
        else if (rc >= 0)
            s->srtp_on = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int cs_ingest_take_dtmf(cs_ingest *ing, int32_t id, cs_dtmf_event *out, int max) {
    ingest_slot *s = lock_stream(ing, id);
    if (!s)
        return -ENOENT;
    int n = cs_jb_take_dtmf(s->jb, out, max);
    pthread_mutex_unlock(&s->mu);
    return n;
}

int cs_ingest_pull(cs_ingest *ing, int64_t now_ns, const int32_t *ids, int n,
                   int16_t *pcm_out, int stride, cs_frame_info *infos) {
    int pulled = 0;
    for (int i = 0; i < n; i++) {
        int16_t *pcm = pcm_out + (size_t)i * (size_t)(stride > 0 ? stride : 0);
        cs_frame_info *info = &infos[i];
        ingest_slot *s = lock_stream(ing, ids[i]);
        if (s && stride > 0 && cs_jb_samples_per_frame(s->jb) <= (uint32_t)stride) {
            cs_jb_pull(s->jb, now_ns, pcm, info);
            pthread_mutex_unlock(&s->mu);
            pulled++;
            continue;
        }
        if (s)
            pthread_mutex_unlock(&s->mu);
        memset(info, 0, sizeof *info);
        info->flag = CS_FRAME_NOT_STARTED;
        if (stride > 0)
            memset(pcm, 0, (size_t)stride * sizeof *pcm);
    }
    return pulled;
}

int cs_ingest_stream_stats(cs_ingest *ing, int32_t id, cs_jb_stats *out) {
    ingest_slot *s = lock_stream(ing, id);
    if (!s)
        return -ENOENT;
    memcpy(out, cs_jb_get_stats(s->jb), sizeof *out);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int cs_ingest_stream_counters(cs_ingest *ing, int32_t id, cs_stream_counters *out) {
    ingest_slot *s = lock_stream(ing, id);
    if (!s)
        return -ENOENT;
    *out = s->c;
    out->srclock = s->lock.counters;
    out->srclock_state = s->lock.state;
    out->locked_ssrc = s->lock.ssrc;
    out->locked_addr = s->lock.addr;
    out->srtp_suite = s->srtp_on ? (uint32_t)cs_srtp_suite(s->srtp) : 0;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* Copy a struct of uint64 words that the receiver updates with BUMP. */
static void copy_words(void *dst, const void *src, size_t bytes) {
    uint64_t *d = dst;
    const uint64_t *w = src;
    for (size_t i = 0; i < bytes / sizeof *w; i++)
        d[i] = __atomic_load_n(&w[i], __ATOMIC_RELAXED);
}

void cs_ingest_get_counters(cs_ingest *ing, cs_ingest_counters *out) {
    copy_words(out, &ing->counters, sizeof *out);
}

void cs_ingest_get_latency(cs_ingest *ing, cs_ingest_latency *out) {
    copy_words(out, &ing->latency, sizeof *out);
}

void cs_ingest_get_processing(cs_ingest *ing, cs_ingest_latency *out) {
    copy_words(out, &ing->processing, sizeof *out);
}

int64_t cs_ingest_thread_cpu_ns(cs_ingest *ing) {
    pthread_mutex_lock(&ing->table_mu); /* a thread stops and stores cpu_done under it */
    int64_t total = __atomic_load_n(&ing->cpu_done_ns, __ATOMIC_RELAXED);
    if (ing->running) {
        clockid_t cid;
        struct timespec t;
        if (pthread_getcpuclockid(ing->thread, &cid) == 0 && clock_gettime(cid, &t) == 0)
            total += (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
    }
    pthread_mutex_unlock(&ing->table_mu);
    return total;
}
