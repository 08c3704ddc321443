/* RTP receive thread: lifecycle and the epoll loop with its pacing. The per-batch work is
 * in ingest_rx.c, the control side in ingest_streams.c and ingest_shared.c. See ingest.h
 * for the thread, locking, fd-ownership, demultiplexing and clock rules. */
#define _GNU_SOURCE
#include "hugemem.h"
#include "ingest_priv.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

_Static_assert(CS_RTP_ERR_COUNT == 7, "parse_errors[] size follows CS_RTP_ERR_COUNT");
_Static_assert(CS_PKT_OUTCOMES == 14, "outcomes[] size follows CS_PKT_OUTCOMES");
_Static_assert(sizeof(cs_ingest_counters) % 8 == 0, "counters are uint64 words");
_Static_assert(sizeof(cs_socket_counters) % 8 == 0, "counters are uint64 words");
_Static_assert(sizeof(cs_ingest_latency) % 8 == 0, "histogram is uint64 words");

enum { DEFAULT_COALESCE_MIN = 16 };
static const int64_t RATE_WINDOW_NS = 20 * 1000 * 1000;

void cs_ingest_default_config(cs_ingest_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->max_streams = 1024;
    cfg->rcvbuf_bytes = 4 * 1024 * 1024;
    /* 16 x 8, not 32 x 4: the same 128 datagrams per socket per wakeup, but a datagram
     * waits behind at most 15 others of its recvmmsg before its insert (ingest.h) */
    cfg->batch = 16;
    cfg->max_batches = 8;
    cfg->max_datagram = 2048;
    cfg->coalesce_min = DEFAULT_COALESCE_MIN;
    cfg->max_sockets = 16;
    cfg->cpu = -1;
    cfg->backend = CS_INGEST_BACKEND_AUTO;
}

static size_t streams_bytes(const cs_ingest_config *c) {
    return (size_t)c->max_streams * sizeof(ingest_slot);
}

static int bad_config(const cs_ingest_config *c) {
    return c->max_streams < 1 || c->max_streams > MAX_SLOTS || c->batch < 1 ||
           c->batch > MAX_BATCH || c->max_batches < 1 || c->max_datagram < 12 ||
           c->coalesce_us > 100000 || c->max_sockets > MAX_SOCKETS || c->cpu < -1 ||
           c->cpu >= CPU_SETSIZE || c->rt_priority < 0 || c->rt_priority > 99 ||
           c->backend > CS_INGEST_BACKEND_URING || c->uring_buffers > 32768 ||
           (c->uring_buffers & (c->uring_buffers - 1)) || c->uring_refuse < 0 ||
           c->discard > 1;
}

/* io_uring when asked for (or auto) and a ring with a provided-buffer ring can be set
 * up here; the ring itself is set up by each start, in the receiver thread. */
static void choose_backend(cs_ingest *ing) {
    ing->backend = CS_INGEST_BACKEND_EPOLL;
    if (ing->cfg.backend == CS_INGEST_BACKEND_EPOLL) {
        snprintf(ing->backend_reason, sizeof ing->backend_reason,
                 "epoll: asked for by the configuration");
        return;
    }
    char why[128];
    if (uring_probe(&ing->cfg, why, sizeof why) == 0) {
        ing->backend = CS_INGEST_BACKEND_URING;
        snprintf(ing->backend_reason, sizeof ing->backend_reason,
                 "io_uring: multishot recvmsg + provided-buffer ring set up (%s)", why);
    } else {
        snprintf(ing->backend_reason, sizeof ing->backend_reason,
                 "epoll: io_uring %s failed: %s",
                 ing->cfg.backend == CS_INGEST_BACKEND_URING ? "(asked for)" : "(auto)", why);
    }
}

int cs_ingest_backend(cs_ingest *ing, char *reason, size_t len) {
    pthread_mutex_lock(&ing->table_mu);
    int b = ing->backend;
    if (reason && len)
        snprintf(reason, len, "%s", ing->backend_reason);
    pthread_mutex_unlock(&ing->table_mu);
    return b;
}

cs_ingest *cs_ingest_new(const cs_ingest_config *cfg_in) {
    cs_ingest_config cfg;
    if (cfg_in)
        cfg = *cfg_in;
    else
        cs_ingest_default_config(&cfg);
    if (bad_config(&cfg))
        return NULL;
    cs_ingest *ing = calloc(1, sizeof *ing);
    if (!ing)
        return NULL;
    ing->cfg = cfg;
    ing->epfd = ing->evfd = -1;
    /* A real-time receiver waits on locks that normal threads hold (a pull holds a leg's
     * mutex, a control call the demux table): with priority inheritance the holder runs
     * at the receiver's priority until it lets go, instead of sitting preempted by the
     * host's other work while the receiver waits (on a loaded 2-vCPU VM, per-leg
     * sockets: kernel stamp -> buffer p99.9 0.5-2 ms without it, 40-100 us with it). */
    pthread_mutexattr_t pi, *ma = NULL;
    if (cfg.rt_priority > 0 && pthread_mutexattr_init(&pi) == 0) {
        if (pthread_mutexattr_setprotocol(&pi, PTHREAD_PRIO_INHERIT) == 0)
            ma = &pi;
    }
    pthread_mutex_init(&ing->table_mu, NULL);
    pthread_mutex_init(&ing->demux_mu, ma);
    pthread_mutex_init(&ing->cmd_mu, NULL);
    pthread_cond_init(&ing->cmd_cv, NULL);
    /* line-aligned: the receiver's per-datagram fields sit in known lines (ingest_priv.h);
     * on huge pages (hugemem.h): every datagram touches its leg's slot */
    ing->streams = cs_huge_alloc(streams_bytes(&cfg)); /* zeroed */
    ing->sockets = calloc(cfg.max_sockets ? cfg.max_sockets : 1, sizeof *ing->sockets);
    ing->msgs = calloc(cfg.batch, sizeof *ing->msgs);
    ing->iovs = calloc(cfg.batch, sizeof *ing->iovs);
    ing->addrs = calloc(cfg.batch, sizeof *ing->addrs);
    ing->bufs = calloc(cfg.batch, cfg.max_datagram);
    ing->cmsgs = calloc(cfg.batch, CMSG_BYTES);
    ing->epfd = epoll_create1(EPOLL_CLOEXEC);
    ing->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    /* every leg holds at most LEG_KEYS keys; a re-key briefly holds old and new */
    uint64_t seed = (uint64_t)rx_clock_ns(CLOCK_REALTIME) ^ (uint64_t)(uintptr_t)ing;
    int demux_rc = cs_demux_init(&ing->demux, LEG_KEYS * cfg.max_streams + 2 * LEG_KEYS, seed);
    for (uint32_t i = 0; ing->streams && i < cfg.max_streams; i++) {
        pthread_mutex_init(&ing->streams[i].mu, ma);
        ing->streams[i].fd = -1;
        ing->streams[i].shared = -1;
    }
    for (uint32_t i = 0; ing->sockets && i < cfg.max_sockets; i++) {
        pthread_mutex_init(&ing->sockets[i].mu, ma);
        ing->sockets[i].fd = -1;
    }
    if (ma)
        pthread_mutexattr_destroy(ma);
    if (!ing->streams || !ing->sockets || !ing->msgs || !ing->iovs || !ing->addrs ||
        !ing->bufs || !ing->cmsgs || ing->epfd < 0 || ing->evfd < 0 || demux_rc != 0) {
        cs_ingest_free(ing);
        return NULL;
    }
    rx_setup_msgs(ing);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = STOP_TOKEN};
    if (epoll_ctl(ing->epfd, EPOLL_CTL_ADD, ing->evfd, &ev) != 0) {
        cs_ingest_free(ing);
        return NULL;
    }
    choose_backend(ing);
    return ing;
}

/* ---- receiver thread ------------------------------------------------------------ */

static int is_leg_token(const cs_ingest *ing, uint64_t token) {
    return token != STOP_TOKEN && !(token & SOCKET_TOKEN) &&
           STREAM_SLOT(token) < ing->cfg.max_streams;
}

/* Drain the socket behind one epoll token; 1 if datagrams may be left on it. */
static int dispatch(cs_ingest *ing, uint64_t token, int64_t offset) {
    int more = 0;
    if (token & SOCKET_TOKEN) {
        uint32_t id = (uint32_t)token;
        shared_socket *k = &ing->sockets[STREAM_SLOT(id)];
        pthread_mutex_lock(&k->mu);
        if (k->active && k->gen == STREAM_GEN(id))
            more = rx_drain_shared(ing, k, (uint16_t)STREAM_SLOT(id), offset);
        else
            BUMP(ing->counters.unknown_socket, 1);
        pthread_mutex_unlock(&k->mu);
        return more;
    }
    ingest_slot *s = &ing->streams[STREAM_SLOT(token)];
    rx_lock_stream(ing, s);
    if (s->active && s->gen == STREAM_GEN(token) && s->fd >= 0)
        more = rx_drain_stream(ing, s, offset);
    else
        BUMP(ing->counters.unknown_socket, 1);
    pthread_mutex_unlock(&s->mu);
    return more;
}

uint64_t rx_expected(const cs_ingest *ing, rate_window *w, int64_t now, uint32_t us) {
    uint64_t seen = __atomic_load_n(&ing->counters.datagrams, __ATOMIC_RELAXED);
    if (now - w->start_ns >= RATE_WINDOW_NS) {
        w->datagrams = seen - w->start_datagrams;
        w->span_ns = now - w->start_ns;
        w->start_ns = now;
        w->start_datagrams = seen;
    }
    return w->span_ns > 0 ? w->datagrams * us * 1000 / (uint64_t)w->span_ns : 0;
}

/* Pacing: is a sleep of coalesce_us worth it at the rate of the last full window? */
static int worth_sleeping(const cs_ingest *ing, rate_window *w, int64_t now) {
    const cs_ingest_config *c = &ing->cfg;
    uint64_t expect = rx_expected(ing, w, now, c->coalesce_us);
    if (!c->coalesce_us)
        return 0;
    return !c->coalesce_min || (w->span_ns > 0 && expect >= c->coalesce_min);
}

static void *receiver_main(void *arg) {
    cs_ingest *ing = arg;
    cs_ingest_counters *g = &ing->counters;
    rate_window rate = {.start_ns = rx_clock_ns(CLOCK_MONOTONIC)};
    rate.start_datagrams = __atomic_load_n(&g->datagrams, __ATOMIC_RELAXED);
    rx_setup_msgs(ing); /* the io_uring loop points them into its buffers */
    int stop = 0;
    while (!stop) {
        int n = epoll_wait(ing->epfd, ing->events, MAX_EVENTS, -1);
        if (n <= 0)
            continue; /* EINTR (signals are blocked, but be safe) */
        BUMP(g->wakeups, 1);
        int64_t m1 = rx_clock_ns(CLOCK_MONOTONIC);
        int64_t rt = rx_clock_ns(CLOCK_REALTIME);
        int64_t m2 = rx_clock_ns(CLOCK_MONOTONIC);
        int64_t offset = rt - (m1 + (m2 - m1) / 2);
        int backlog = 0; /* a socket still had datagrams: no pacing sleep now */
        for (int e = 0; e < n; e++) {
            uint64_t token = ing->events[e].data.u64;
            if (token == STOP_TOKEN) {
                uint64_t v;
                if (read(ing->evfd, &v, sizeof v) < 0) { /* nothing to read: still stop */
                }
                stop = 1;
                continue;
            }
            /* the next ready legs' state loads while this one drains (ingest_priv.h) */
            if (e + 1 < n && is_leg_token(ing, ing->events[e + 1].data.u64))
                rx_prefetch_leg(ing, STREAM_SLOT(ing->events[e + 1].data.u64));
            if (e + 2 < n && is_leg_token(ing, ing->events[e + 2].data.u64))
                rx_prefetch_slot(ing, STREAM_SLOT(ing->events[e + 2].data.u64));
            backlog |= dispatch(ing, token, offset);
        }
        if (!stop && worth_sleeping(ing, &rate, m2) && !backlog) {
            /* pace: wait for the stop eventfd alone until the first multiple of
             * coalesce_us on CLOCK_MONOTONIC after the wakeup (at most coalesce_us later),
             * so a stop is still seen at once while the data sockets fill up. On that grid,
             * not at wakeup + coalesce_us: the kernel's tick fires at multiples of its
             * period on this clock, so with a period that is a multiple of coalesce_us
             * (HZ 100/250/1000 and 1000 us) a tick due during a paced cycle comes with
             * the wakeup, before the recvmmsg, instead of at a drifting phase that lands
             * it inside a batch, where every datagram after it waits for the tick
             * (30-150 us on a 2-vCPU VM: the syscall -> buffer p99.9; ingest.h) */
            BUMP(g->paced_sleeps, 1);
            const int64_t period = (int64_t)ing->cfg.coalesce_us * 1000;
            int64_t left = (m1 + period) / period * period - rx_clock_ns(CLOCK_MONOTONIC);
            if (left > 0) {
                struct timespec t = {.tv_sec = left / 1000000000, .tv_nsec = left % 1000000000};
                struct pollfd p = {.fd = ing->evfd, .events = POLLIN};
                (void)ppoll(&p, 1, &t, NULL);
            }
        }
    }
    int64_t cpu = rx_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    __atomic_store_n(&ing->cpu_done_ns, ing->cpu_done_ns + cpu, __ATOMIC_RELAXED);
    return NULL;
}

/* ---- control side ---------------------------------------------------------------- */

static int spawn(cs_ingest *ing, void *(*fn)(void *)) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (ing->cfg.cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(ing->cfg.cpu, &set);
        pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = -pthread_create(&ing->thread, &attr, fn, ing);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

/* The io_uring thread could not set its ring up: every socket goes to epoll. */
static void fall_back_to_epoll(cs_ingest *ing, int err) {
    snprintf(ing->backend_reason, sizeof ing->backend_reason,
             "epoll: the io_uring ring could not be set up at start: %s", strerror(-err));
    ing->backend = CS_INGEST_BACKEND_EPOLL;
    for (uint32_t i = 0; i < ing->cfg.max_streams; i++) {
        ingest_slot *s = &ing->streams[i];
        pthread_mutex_lock(&s->mu);
        if (s->active && s->fd >= 0 && s->shared < 0 && !s->pushed) {
            struct epoll_event ev = {.events = EPOLLIN,
                                     .data.u64 = (uint32_t)MAKE_ID(s->gen, i)};
            (void)epoll_ctl(ing->epfd, EPOLL_CTL_ADD, s->fd, &ev);
        }
        pthread_mutex_unlock(&s->mu);
    }
    for (uint32_t i = 0; i < ing->cfg.max_sockets; i++) {
        shared_socket *k = &ing->sockets[i];
        pthread_mutex_lock(&k->mu);
        if (k->active) {
            struct epoll_event ev = {.events = EPOLLIN,
                                     .data.u64 = SOCKET_TOKEN | (uint32_t)MAKE_ID(k->gen, i)};
            (void)epoll_ctl(ing->epfd, EPOLL_CTL_ADD, k->fd, &ev);
        }
        pthread_mutex_unlock(&k->mu);
    }
}

int cs_ingest_start(cs_ingest *ing) {
    pthread_mutex_lock(&ing->table_mu);
    int rc = 0;
    if (!ing->running) {
        uint64_t v;
        while (read(ing->evfd, &v, sizeof v) > 0) { /* a stale stop or poke */
        }
        if (ing->backend == CS_INGEST_BACKEND_URING) {
            __atomic_store_n(&ing->stopping, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&ing->cmd_pending, 1, __ATOMIC_RELAXED);
            ing->thread_state = 0;
            rc = spawn(ing, uring_main);
            if (rc == 0) { /* wait for its ring: set up, or refused */
                pthread_mutex_lock(&ing->cmd_mu);
                while (ing->thread_state == 0)
                    pthread_cond_wait(&ing->cmd_cv, &ing->cmd_mu);
                int state = ing->thread_state;
                pthread_mutex_unlock(&ing->cmd_mu);
                if (state < 0) {
                    pthread_join(ing->thread, NULL);
                    fall_back_to_epoll(ing, state);
                }
            }
        }
        if (rc == 0 && ing->backend == CS_INGEST_BACKEND_EPOLL)
            rc = spawn(ing, receiver_main);
        if (rc == 0) {
            pthread_setname_np(ing->thread, "cs-ingest");
            ing->running = 1;
            ing->sched = 0;
            if (ing->cfg.rt_priority > 0) {
                /* a short burst per wakeup: real-time so a loaded host's other work
                 * does not sit between a datagram's arrival and its insert */
                struct sched_param sp = {.sched_priority = ing->cfg.rt_priority};
                int err = pthread_setschedparam(ing->thread, SCHED_FIFO, &sp);
                ing->sched = err ? -err : 1;
            }
        }
    }
    pthread_mutex_unlock(&ing->table_mu);
    return rc;
}

int cs_ingest_sched(cs_ingest *ing) {
    pthread_mutex_lock(&ing->table_mu);
    int v = ing->running ? ing->sched : 0;
    pthread_mutex_unlock(&ing->table_mu);
    return v;
}

int cs_ingest_stop(cs_ingest *ing) {
    pthread_mutex_lock(&ing->table_mu);
    if (ing->running) {
        uint64_t one = 1;
        __atomic_store_n(&ing->stopping, 1, __ATOMIC_RELEASE);
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
                if (s->fd >= 0)
                    close(s->fd);
                cs_jb_free(s->jb);
            }
            cs_srtp_free(s->srtp);
            pthread_mutex_destroy(&s->mu);
        }
    }
    for (uint32_t i = 0; ing->sockets && i < ing->cfg.max_sockets; i++) {
        if (ing->sockets[i].active)
            close(ing->sockets[i].fd);
        pthread_mutex_destroy(&ing->sockets[i].mu);
    }
    if (ing->epfd >= 0)
        close(ing->epfd);
    if (ing->evfd >= 0)
        close(ing->evfd);
    cs_demux_free(&ing->demux);
    pthread_mutex_destroy(&ing->table_mu);
    pthread_mutex_destroy(&ing->demux_mu);
    pthread_mutex_destroy(&ing->cmd_mu);
    pthread_cond_destroy(&ing->cmd_cv);
    cs_huge_free(ing->streams, streams_bytes(&ing->cfg));
    free(ing->sockets);
    free(ing->msgs);
    free(ing->iovs);
    free(ing->addrs);
    free(ing->bufs);
    free(ing->cmsgs);
    free(ing);
}
