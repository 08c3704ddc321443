/* RTP receive thread: epoll + recvmmsg + SO_TIMESTAMPNS -> parse -> source lock -> jitter
 * buffer. See ingest.h for the thread, locking, fd-ownership and clock rules. */
#define _GNU_SOURCE
#include "ingest_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

_Static_assert(CS_RTP_ERR_COUNT == 7, "parse_errors[] size follows CS_RTP_ERR_COUNT");
_Static_assert(CS_PKT_OUTCOMES == 14, "outcomes[] size follows CS_PKT_OUTCOMES");
_Static_assert(sizeof(cs_ingest_counters) % 8 == 0, "counters are uint64 words");
_Static_assert(sizeof(cs_ingest_latency) % 8 == 0, "histogram is uint64 words");

static int64_t ts_ns(const struct timespec *t) {
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static int64_t clock_ns(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return ts_ns(&t);
}

void cs_ingest_default_config(cs_ingest_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->max_streams = 1024;
    cfg->rcvbuf_bytes = 4 * 1024 * 1024;
    cfg->batch = 32;
    cfg->max_batches = 4;
    cfg->max_datagram = 2048;
}

cs_ingest *cs_ingest_new(const cs_ingest_config *cfg_in) {
    cs_ingest_config cfg;
    if (cfg_in)
        cfg = *cfg_in;
    else
        cs_ingest_default_config(&cfg);
    if (cfg.max_streams < 1 || cfg.max_streams > MAX_SLOTS || cfg.batch < 1 ||
        cfg.batch > MAX_BATCH || cfg.max_batches < 1 || cfg.max_datagram < 12 ||
        cfg.coalesce_us > 100000)
        return NULL;
    cs_ingest *ing = calloc(1, sizeof *ing);
    if (!ing)
        return NULL;
    ing->cfg = cfg;
    ing->epfd = ing->evfd = -1;
    pthread_mutex_init(&ing->table_mu, NULL);
    ing->streams = calloc(cfg.max_streams, sizeof *ing->streams);
    ing->msgs = calloc(cfg.batch, sizeof *ing->msgs);
    ing->iovs = calloc(cfg.batch, sizeof *ing->iovs);
    ing->addrs = calloc(cfg.batch, sizeof *ing->addrs);
    ing->bufs = calloc(cfg.batch, cfg.max_datagram);
    ing->cmsgs = calloc(cfg.batch, CMSG_BYTES);
    ing->epfd = epoll_create1(EPOLL_CLOEXEC);
    ing->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    for (uint32_t i = 0; ing->streams && i < cfg.max_streams; i++) {
        pthread_mutex_init(&ing->streams[i].mu, NULL);
        ing->streams[i].fd = -1;
    }
    if (!ing->streams || !ing->msgs || !ing->iovs || !ing->addrs || !ing->bufs ||
        !ing->cmsgs || ing->epfd < 0 || ing->evfd < 0) {
        cs_ingest_free(ing);
        return NULL;
    }
    for (uint32_t i = 0; i < cfg.batch; i++) {
        ing->iovs[i].iov_base = ing->bufs + (size_t)i * cfg.max_datagram;
        ing->iovs[i].iov_len = cfg.max_datagram;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = STOP_TOKEN};
    if (epoll_ctl(ing->epfd, EPOLL_CTL_ADD, ing->evfd, &ev) != 0) {
        cs_ingest_free(ing);
        return NULL;
    }
    return ing;
}

/* ---- receiver thread ------------------------------------------------------------ */

static void to_addr(const struct sockaddr_storage *ss, cs_srclock_addr *a) {
    memset(a, 0, sizeof *a);
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        a->family = 4;
        a->port = ntohs(s4->sin_port);
        memcpy(a->addr, &s4->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        a->port = ntohs(s6->sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
            a->family = 4;
            memcpy(a->addr, s6->sin6_addr.s6_addr + 12, 4);
        } else {
            a->family = 6;
            memcpy(a->addr, s6->sin6_addr.s6_addr, 16);
        }
    }
}

/* Kernel receive time (CLOCK_REALTIME) of message m, or 0 if it carried none. */
static int64_t kernel_stamp(struct msghdr *m) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec t;
            memcpy(&t, CMSG_DATA(c), sizeof t);
            return ts_ns(&t);
        }
    }
    return 0;
}

static void record_latency(cs_ingest_latency *h, int64_t ns) {
    if (ns < 0) {
        BUMP(h->negative, 1);
        ns = 0;
    }
    uint64_t v = (uint64_t)ns;
    if (v < 1000000) {
        BUMP(h->fine[v / 1000], 1);
    } else {
        uint64_t ms = v / 1000000;
        int k = 63 - __builtin_clzll(ms);
        BUMP(h->tail[k < 11 ? k : 11], 1);
    }
    BUMP(h->count, 1);
    BUMP(h->sum_ns, v);
    if (v > __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED))
        __atomic_store_n(&h->max_ns, v, __ATOMIC_RELAXED);
}

/* One datagram of stream s (its mutex held); arrival in CLOCK_MONOTONIC ns, received
 * the time recvmmsg returned. */
static void handle_datagram(cs_ingest *ing, ingest_slot *s, int i, int64_t arrival,
                            int64_t received) {
    cs_ingest_counters *g = &ing->counters;
    struct mmsghdr *mm = &ing->msgs[i];
    uint32_t len = mm->msg_len;
    s->c.datagrams++;
    s->c.bytes += len;
    s->c.last_arrival_ns = arrival;
    if (mm->msg_hdr.msg_flags & MSG_TRUNC) {
        s->c.truncated++;
        BUMP(g->truncated, 1);
        return;
    }
    cs_rtp_header h;
    int rc = cs_rtp_parse(ing->iovs[i].iov_base, len, &h);
    if (rc != CS_RTP_OK) {
        if (rc < 0 || rc >= CS_RTP_ERR_COUNT)
            rc = 0;
        s->c.parse_errors[rc]++;
        BUMP(g->parse_errors[rc], 1);
        return;
    }
    cs_srclock_addr from;
    to_addr(&ing->addrs[i], &from);
    if (cs_srclock_check(&s->lock, &from, h.ssrc, h.seq, arrival) >= CS_SRC_DROP_PROBATION) {
        BUMP(g->srclock_dropped, 1);
        return;
    }
    int out = cs_jb_insert(s->jb, &h, arrival);
    s->c.outcomes[out > 0 && out < CS_PKT_OUTCOMES ? out : 0]++;
    s->c.inserted++;
    BUMP(g->inserted, 1);
    int64_t done = clock_ns(CLOCK_MONOTONIC);
    record_latency(&ing->latency, done - arrival);
    record_latency(&ing->processing, done - received);
}

/* Drain stream s's socket (its mutex held). offset = REALTIME - MONOTONIC. */
static void drain(cs_ingest *ing, ingest_slot *s, int64_t offset) {
    cs_ingest_counters *g = &ing->counters;
    const uint32_t batch = ing->cfg.batch;
    for (uint32_t b = 0; b < ing->cfg.max_batches; b++) {
        for (uint32_t i = 0; i < batch; i++) {
            struct msghdr *m = &ing->msgs[i].msg_hdr;
            m->msg_name = &ing->addrs[i];
            m->msg_namelen = sizeof ing->addrs[i];
            m->msg_iov = &ing->iovs[i];
            m->msg_iovlen = 1;
            m->msg_control = ing->cmsgs + (size_t)i * CMSG_BYTES;
            m->msg_controllen = CMSG_BYTES;
            m->msg_flags = 0;
        }
        int r = recvmmsg(s->fd, ing->msgs, batch, MSG_DONTWAIT, NULL);
        BUMP(g->recvmmsg_calls, 1);
        if (r <= 0) {
            if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                BUMP(g->recv_errors, 1);
            return;
        }
        int64_t received = clock_ns(CLOCK_MONOTONIC);
        uint64_t bytes = 0;
        for (int i = 0; i < r; i++) {
            int64_t stamp = kernel_stamp(&ing->msgs[i].msg_hdr);
            int64_t arrival = stamp ? stamp - offset : received;
            if (!stamp)
                BUMP(g->no_timestamp, 1);
            bytes += ing->msgs[i].msg_len;
            handle_datagram(ing, s, i, arrival, received);
        }
        BUMP(g->datagrams, (uint64_t)r);
        BUMP(g->bytes, bytes);
        if ((uint32_t)r < batch)
            return;
    }
}

static void *receiver_main(void *arg) {
    cs_ingest *ing = arg;
    cs_ingest_counters *g = &ing->counters;
    int stop = 0;
    while (!stop) {
        int n = epoll_wait(ing->epfd, ing->events, MAX_EVENTS, -1);
        if (n <= 0)
            continue; /* EINTR (signals are blocked, but be safe) */
        BUMP(g->wakeups, 1);
        int64_t m1 = clock_ns(CLOCK_MONOTONIC);
        int64_t rt = clock_ns(CLOCK_REALTIME);
        int64_t m2 = clock_ns(CLOCK_MONOTONIC);
        int64_t offset = rt - (m1 + (m2 - m1) / 2);
        for (int e = 0; e < n; e++) {
            uint64_t token = ing->events[e].data.u64;
            if (token == STOP_TOKEN) {
                uint64_t v;
                if (read(ing->evfd, &v, sizeof v) < 0) { /* nothing to read: still stop */
                }
                stop = 1;
                continue;
            }
            ingest_slot *s = &ing->streams[STREAM_SLOT(token)];
            pthread_mutex_lock(&s->mu);
            if (s->active && s->gen == STREAM_GEN(token))
                drain(ing, s, offset);
            else
                BUMP(g->unknown_socket, 1);
            pthread_mutex_unlock(&s->mu);
        }
        if (ing->cfg.coalesce_us && !stop) {
            int64_t until = m1 + (int64_t)ing->cfg.coalesce_us * 1000;
            struct timespec t = {.tv_sec = until / 1000000000, .tv_nsec = until % 1000000000};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {
            }
        }
    }
    int64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    __atomic_store_n(&ing->cpu_done_ns, ing->cpu_done_ns + cpu, __ATOMIC_RELAXED);
    return NULL;
}

/* ---- control side ---------------------------------------------------------------- */

int cs_ingest_start(cs_ingest *ing) {
    pthread_mutex_lock(&ing->table_mu);
    int rc = 0;
    if (!ing->running) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = -pthread_create(&ing->thread, NULL, receiver_main, ing);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc == 0) {
            pthread_setname_np(ing->thread, "cs-ingest");
            ing->running = 1;
        }
    }
    pthread_mutex_unlock(&ing->table_mu);
    return rc;
}

int cs_ingest_stop(cs_ingest *ing) {
    pthread_mutex_lock(&ing->table_mu);
    if (ing->running) {
        uint64_t one = 1;
        if (write(ing->evfd, &one, sizeof one) < 0) { /* counter saturated: still set */
        }
        pthread_join(ing->thread, NULL);
        ing->running = 0;
    }
    pthread_mutex_unlock(&ing->table_mu);
    return 0;
}

void cs_ingest_free(cs_ingest *ing) {
    if (!ing)
        return;
    if (ing->streams) {
        cs_ingest_stop(ing);
        for (uint32_t i = 0; i < ing->cfg.max_streams; i++) {
            ingest_slot *s = &ing->streams[i];
            if (s->active) {
                close(s->fd);
                cs_jb_free(s->jb);
            }
            pthread_mutex_destroy(&s->mu);
        }
    }
    if (ing->epfd >= 0)
        close(ing->epfd);
    if (ing->evfd >= 0)
        close(ing->evfd);
    pthread_mutex_destroy(&ing->table_mu);
    free(ing->streams);
    free(ing->msgs);
    free(ing->iovs);
    free(ing->addrs);
    free(ing->bufs);
    free(ing->cmsgs);
    free(ing);
}

