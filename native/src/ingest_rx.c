/* The receiver thread's per-batch work: recvmmsg -> kernel stamps -> (SRTP legs:
 * authenticate, replay check, decrypt) -> RTP parse -> (shared sockets: demux, then the
 * SRTP step and the parse of the plain packet) -> source lock -> jitter-buffer insert ->
 * latency histograms. Called by receiver_main (ingest.c) with the ready socket's slot
 * mutex held; see ingest.h for the demultiplexing rule, the locking order and the
 * clocks. */
#define _GNU_SOURCE
#include "ingest_priv.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <time.h>

void rx_lock_stream(cs_ingest *ing, ingest_slot *s) {
    if (pthread_mutex_trylock(&s->mu) == 0)
        return;
    BUMP(ing->counters.stream_lock_waits, 1);
    pthread_mutex_lock(&s->mu);
}

int64_t rx_clock_ns(int clock_id) {
    struct timespec t;
    clock_gettime((clockid_t)clock_id, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

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

            return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
        }
    }
    return 0;
}

void cs_latency_record(cs_ingest_latency *h, int64_t ns) {
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

/* One recvmmsg into the batch buffers. Returns the datagram count (0: none or error). */
static int receive(cs_ingest *ing, int fd) {
    const uint32_t batch = ing->cfg.batch;
    /* The kernel writes back only the lengths and flags of the entries it filled (the
     * pointers are set by rx_setup_msgs when the epoll thread starts; the io_uring loop
     * points them into its buffers): reset those, not the whole batch, so a
     * one-datagram read (per-leg sockets) touches one or two headers, not 32. */
    uint32_t dirty = ing->msgs_dirty < batch ? ing->msgs_dirty + 1 : batch;
    for (uint32_t i = 0; i < dirty; i++) {
        struct msghdr *m = &ing->msgs[i].msg_hdr;
        m->msg_namelen = sizeof ing->addrs[i];
        m->msg_controllen = CMSG_BYTES;
        m->msg_flags = 0;
    }
    int r = recvmmsg(fd, ing->msgs, batch, MSG_DONTWAIT, NULL);
    ing->msgs_dirty = r > 0 ? (uint32_t)r : 0;
    BUMP(ing->counters.recvmmsg_calls, 1);
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        BUMP(ing->counters.recv_errors, 1);
    return r > 0 ? r : 0;
}

void rx_setup_msgs(cs_ingest *ing) {
    for (uint32_t i = 0; i < ing->cfg.batch; i++) {
        struct msghdr *m = &ing->msgs[i].msg_hdr;
        ing->iovs[i].iov_base = ing->bufs + (size_t)i * ing->cfg.max_datagram;
        ing->iovs[i].iov_len = ing->cfg.max_datagram;
        m->msg_name = &ing->addrs[i];
        m->msg_namelen = sizeof ing->addrs[i];
        m->msg_iov = &ing->iovs[i];
        m->msg_iovlen = 1;
        m->msg_control = ing->cmsgs + (size_t)i * CMSG_BYTES;
        m->msg_controllen = CMSG_BYTES;
        m->msg_flags = 0;
    }
    ing->msgs_dirty = ing->cfg.batch;
}

/* SRTP leg s (its mutex held): drop SRTCP, then authenticate, replay-check and decrypt
 * datagram i in place. Returns 0 with *len the plain length, or -1 (counted, drop). */
static int srtp_step(cs_ingest *ing, ingest_slot *s, int i, size_t *len) {
    uint8_t *buf = ing->iovs[i].iov_base;
    if (cs_rtp_is_rtcp(buf, *len)) {
        s->c.srtcp_ignored++;
        BUMP(ing->counters.srtcp_ignored, 1);
        return -1;
    }
    switch (cs_srtp_unprotect(s->srtp, buf, len)) {
    case CS_SRTP_OK:
        s->c.srtp_ok++;
        return 0;
    case CS_SRTP_ERR_AUTH:
        s->c.srtp_auth_failed++;
        BUMP(ing->counters.srtp_auth_failed, 1);
        return -1;
    case CS_SRTP_ERR_REPLAY:
        s->c.srtp_replayed++;
        BUMP(ing->counters.srtp_replayed, 1);
        return -1;
    case CS_SRTP_ERR_SSRC_LIMIT:
        s->c.srtp_ssrc_limit++;
        BUMP(ing->counters.srtp_ssrc_limit, 1);
        return -1;
    default:
        s->c.srtp_malformed++;
        BUMP(ing->counters.srtp_malformed, 1);
        return -1;
    }
}

/* RTP parse of datagram i's first len bytes; parse errors counted globally. */
static int parse(cs_ingest *ing, int i, size_t len) {
    int rc = cs_rtp_parse(ing->iovs[i].iov_base, len, &ing->batch.hdr[i]);
    if (rc != CS_RTP_OK) {
        if (rc < 0 || rc >= CS_RTP_ERR_COUNT)
            rc = 0;
        BUMP(ing->counters.parse_errors[rc], 1);
    }
    return rc;
}

/* Arrival time, truncation, (SRTP leg s of a per-leg socket: the SRTP step) and RTP
 * parse of datagram i. Returns CS_RTP_OK, a CS_RTP_ERR_* code, -1 for a truncated
 * datagram, or -2 for one the SRTP step dropped. */
static int classify(cs_ingest *ing, int i, int64_t offset, int64_t received, ingest_slot *s) {
    rx_batch *b = &ing->batch;
    int64_t stamp = kernel_stamp(&ing->msgs[i].msg_hdr);
    b->arrival[i] = stamp ? stamp - offset : received;
    b->inserted[i] = 0;
    if (!stamp)
        BUMP(ing->counters.no_timestamp, 1);
    if (ing->msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
        BUMP(ing->counters.truncated, 1);
        return -1;
    }
    size_t len = ing->msgs[i].msg_len;
    if (s && s->srtp_on && srtp_step(ing, s, i, &len))
        return -2;
    return parse(ing, i, len);
}

/* Source lock and insert of parsed datagram i into stream s (its mutex held). */
static void deliver(cs_ingest *ing, ingest_slot *s, int32_t id, int i) {
    rx_batch *b = &ing->batch;
    int64_t arrival = b->arrival[i];
    int src = cs_srclock_check(&s->lock, &b->from[i], b->hdr[i].ssrc, b->hdr[i].seq, arrival);
    if (s->shared >= 0 && (src == CS_SRC_ACCEPT_LEARNED || src == CS_SRC_ACCEPT_SSRC_SWITCH))
        shared_locked(ing, s, id);
    if (src >= CS_SRC_DROP_PROBATION) {
        BUMP(ing->counters.srclock_dropped, 1);
        return;
    }
    int out = cs_jb_insert(s->jb, &b->hdr[i], arrival);
    __atomic_store_n(&s->nhint, (uint32_t)cs_jb_next_lines(s->jb, s->hint), __ATOMIC_RELAXED);
    s->c.outcomes[out > 0 && out < CS_PKT_OUTCOMES ? out : 0]++;
    s->c.inserted++;
    b->inserted[i] = 1;
    b->done[i] = 0; /* stamped by the caller once the datagram is in (rx_stamp) */
}

/* The datagrams [from, to) of the batch that were inserted are in their buffer now. */
static void rx_stamp(rx_batch *b, int from, int to) {
    int64_t now = rx_clock_ns(CLOCK_MONOTONIC);
    for (int i = from; i < to; i++)
        if (b->inserted[i] && !b->done[i])
            b->done[i] = now;
}

static void count_to_stream(ingest_slot *s, const cs_ingest *ing, int i) {
    s->c.datagrams++;
    s->c.bytes += ing->msgs[i].msg_len;
    s->c.last_arrival_ns = ing->batch.arrival[i];
    if (!s->c.first_arrival_ns)
        s->c.first_arrival_ns = ing->batch.arrival[i];
}

/* Each inserted datagram's latency ends at its own stamp (rx_stamp): after its insert
 * (per-leg socket) or after its stream's run was inserted (shared socket). */
static void finish_batch(cs_ingest *ing, int r, int64_t received) {
    cs_ingest_counters *g = &ing->counters;
    uint64_t bytes = 0, inserted = 0;
    for (int i = 0; i < r; i++) {
        bytes += ing->msgs[i].msg_len;
        if (!ing->batch.inserted[i])
            continue;
        inserted++;
        int64_t done = ing->batch.done[i];
        cs_latency_record(&ing->latency, done - ing->batch.arrival[i]);
        cs_latency_record(&ing->processing, done - received);
    }
    BUMP(g->datagrams, (uint64_t)r);
    BUMP(g->bytes, bytes);
    BUMP(g->inserted, inserted);
}

static uint64_t batch_bytes(const cs_ingest *ing, int r) {
    uint64_t bytes = 0;
    for (int i = 0; i < r; i++)
        bytes += ing->msgs[i].msg_len;
    return bytes;
}

/* cfg.discard: count a received batch of ``bytes`` and drop it (the bench's
 * kernel-receive floor). */
static void discard_batch(cs_ingest *ing, ingest_slot *s, int r, uint64_t bytes) {
    if (s) {
        s->c.datagrams += (uint64_t)r;
        s->c.bytes += bytes;
    }
    BUMP(ing->counters.datagrams, (uint64_t)r);
    BUMP(ing->counters.bytes, bytes);
}

void rx_process_stream(cs_ingest *ing, ingest_slot *s, int r, int64_t offset, int64_t received) {
    if (ing->cfg.discard) {
        discard_batch(ing, s, r, batch_bytes(ing, r));
        return;
    }
    int32_t id = MAKE_ID(s->gen, s - ing->streams);
    for (int i = 0; i < r; i++) {
            int rc = classify(ing, i, offset, received, s);
            count_to_stream(s, ing, i);
            if (rc == -2) {
                continue; /* SRTP dropped it (counted) */
            } else if (rc < 0) {
                s->c.truncated++;
            } else if (rc != CS_RTP_OK) {
                s->c.parse_errors[rc]++;
            } else {
                to_addr(&ing->addrs[i], &ing->batch.from[i]);
                deliver(ing, s, id, i);
                rx_stamp(&ing->batch, i, i + 1);
            }
    }
    finish_batch(ing, r, received);
}

int rx_drain_stream(cs_ingest *ing, ingest_slot *s, int64_t offset) {
    for (uint32_t n = 0; n < ing->cfg.max_batches; n++) {
        int r = receive(ing, s->fd);
        if (!r)
            return 0;
        rx_process_stream(ing, s, r, offset, rx_clock_ns(CLOCK_MONOTONIC));
        if ((uint32_t)r < ing->cfg.batch)
            return 0;
    }
    return 1; /* stopped at max_batches: more may be queued */
}

/* A shared SRTP leg's datagram j, found by its clear header: the SRTP step, then the
 * parse of the plain packet. 1 to deliver it, 0 when dropped (counted). */
static int shared_srtp(cs_ingest *ing, ingest_slot *s, int j) {
    size_t len = ing->msgs[j].msg_len;
    if (srtp_step(ing, s, j, &len))
        return 0;
    int rc = parse(ing, j, len);
    if (rc == CS_RTP_OK)
        return 1;
    s->c.parse_errors[rc]++;
    return 0;
}

/* Look up every parsed datagram of the batch under one demux lock. */
static void demux_batch(cs_ingest *ing, shared_socket *k, uint16_t sock_slot, int r,
                        int64_t offset, int64_t received) {
    rx_batch *b = &ing->batch;
    uint64_t unmatched = 0;
    uint8_t parsed[MAX_BATCH];
    pthread_mutex_lock(&ing->demux_mu);
    /* two passes: every parsed datagram's table slot starts loading, then the lookups
     * (otherwise each one's slot is a cache miss of its own, one after the other) */
    for (int i = 0; i < r; i++) {
        b->target[i] = -1;
        parsed[i] = 0;
        int rc = classify(ing, i, offset, received, NULL);
        if (rc < 0) {
            BUMP(k->c.truncated, 1);
            continue;
        }
        if (rc != CS_RTP_OK) {
            BUMP(k->c.parse_errors[rc], 1);
            continue;
        }
        to_addr(&ing->addrs[i], &b->from[i]);
        cs_demux_prefetch(&ing->demux, sock_slot, &b->from[i], b->hdr[i].ssrc);
        parsed[i] = 1;
    }
    for (int i = 0; i < r; i++) {
        if (!parsed[i])
            continue;
        b->target[i] = cs_demux_lookup(&ing->demux, sock_slot, &b->from[i], b->hdr[i].ssrc);
        if (b->target[i] < 0)
            unmatched++;
    }
    pthread_mutex_unlock(&ing->demux_mu);
    BUMP(k->c.unmatched, unmatched);
    BUMP(ing->counters.unmatched, unmatched);
}

void rx_prefetch_slot(cs_ingest *ing, uint32_t slot) {
    ingest_slot *s = &ing->streams[slot];
    __builtin_prefetch(s, 1);          /* mutex, liveness, jb */
    __builtin_prefetch(s->hint, 0);    /* the hints (two lines) */
    __builtin_prefetch(&s->hint[8], 0);
    __builtin_prefetch(&s->c, 1);      /* the counters deliver bumps */
    __builtin_prefetch(&s->lock, 1);   /* the source lock's hot line */
}

void rx_prefetch_leg(cs_ingest *ing, uint32_t slot) {
    ingest_slot *s = &ing->streams[slot];
    cs_jb *jb = __atomic_load_n(&s->jb, __ATOMIC_RELAXED);
    if (jb)
        cs_jb_prefetch(jb);
    uint32_t n = __atomic_load_n(&s->nhint, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < n && i < CS_JB_HINTS; i++)
        __builtin_prefetch(__atomic_load_n(&s->hint[i], __ATOMIC_RELAXED), 1);
}

/* Index of the first datagram after the run of b->target[i] (r: none). */
static int run_end(const rx_batch *b, int i, int r) {
    int end = i + 1;
    while (end < r && b->target[end] == b->target[i])
        end++;
    return end;
}

void rx_process_shared(cs_ingest *ing, shared_socket *k, uint16_t sock_slot, int r,
                       int64_t offset, int64_t received) {
    rx_batch *b = &ing->batch;
        uint64_t bytes = batch_bytes(ing, r);
        BUMP(k->c.datagrams, (uint64_t)r);
        BUMP(k->c.bytes, bytes);
        if (ing->cfg.discard) { /* the socket's count, no leg's: nothing is demultiplexed */
            discard_batch(ing, NULL, r, bytes);
            return;
        }
        demux_batch(ing, k, sock_slot, r, offset, received);
        /* each stream's mutex once per run of its consecutive datagrams */
        for (int i = 0; i < r;) {
            int32_t id = b->target[i];
            int end = run_end(b, i, r);
            /* while this leg is inserted: the next leg's jitter-buffer lines load, and
             * the slot lines (mutex, jb pointer, hints, counters) of the one after it,
             * so reading its jb pointer and hints on the next turn does not wait */
            if (end < r && b->target[end] >= 0)
                rx_prefetch_leg(ing, STREAM_SLOT(b->target[end]));
            int end2 = end < r ? run_end(b, end, r) : r;
            if (end2 < r && b->target[end2] >= 0)
                rx_prefetch_slot(ing, STREAM_SLOT(b->target[end2]));
            if (id >= 0) {
                ingest_slot *s = &ing->streams[STREAM_SLOT(id)];
                rx_lock_stream(ing, s);
                int live = s->active && s->gen == STREAM_GEN(id);
                for (int j = i; j < end && live; j++) {
                    count_to_stream(s, ing, j);
                    if (s->srtp_on && !shared_srtp(ing, s, j))
                        continue;
                    deliver(ing, s, id, j);
                }
                pthread_mutex_unlock(&s->mu);
                rx_stamp(b, i, end);
                if (!live) { /* removed between lookup and delivery */
                    BUMP(k->c.unmatched, (uint64_t)(end - i));
                    BUMP(ing->counters.unmatched, (uint64_t)(end - i));
                }
            }
            i = end;
        }
        finish_batch(ing, r, received);
}

int rx_drain_shared(cs_ingest *ing, shared_socket *k, uint16_t sock_slot, int64_t offset) {
    for (uint32_t n = 0; n < ing->cfg.max_batches; n++) {
        int r = receive(ing, k->fd);
        BUMP(k->c.recvmmsg_calls, 1);
        if (!r)
            return 0;
        rx_process_shared(ing, k, sock_slot, r, offset, rx_clock_ns(CLOCK_MONOTONIC));
        if ((uint32_t)r < ing->cfg.batch)
            return 0;
    }
    return 1;
}
