/* Private to the ingest_*.c files: the cs_ingest layout and the functions they share.
 * Not read by cffi. */
#ifndef CS_INGEST_PRIV_H
#define CS_INGEST_PRIV_H

#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before including ingest_priv.h (recvmmsg)"
#endif
#include "demux.h"
#include "ingest.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>

enum {
    MAX_BATCH = 64,
    MAX_EVENTS = 256,
    CMSG_BYTES = 128,
    MAX_SLOTS = 65535,
    MAX_SOCKETS = 256,
    LEG_KEYS = 3
};
#define STOP_TOKEN UINT64_MAX
#define SOCKET_TOKEN (1ULL << 32) /* epoll token of a shared socket: SOCKET_TOKEN | id */

/* Single-writer counters read concurrently: relaxed atomic load/store, no lock prefix. */
#define BUMP(field, k) \
    __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (k), \
                     __ATOMIC_RELAXED)

/* Add one latency sample to a histogram (ingest_rx.c; the stall probe's too). */
void cs_latency_record(cs_ingest_latency *h, int64_t ns);

/* One socket's multishot receive under the io_uring backend. armed and cancel_sent
 * belong to the receiver thread; closing is set by a removal (under cmd_mu) and
 * cleared by the receiver once the socket's request has ended. */
typedef struct {
    uint8_t armed;
    uint8_t cancel_sent;
    uint8_t closing;
    uint8_t errors;      /* receiver: request endings in a row with an error */
} rx_req;

/* Field order is for the cache (the array is 64-byte aligned): what the receiver reads
 * and writes for every datagram is in line 0 (mutex, liveness, jb), lines 1-2 (the
 * prefetch hints), line 3 (the counters at the head of cs_stream_counters) and the
 * first line of the source lock. */
typedef struct {
    pthread_mutex_t mu;      /* guards everything below */
    int active;
    uint16_t gen;            /* bumped on every add; part of the id and the epoll token */
    int srtp_on;             /* datagrams are SRTP: unprotect before parsing */
    int32_t shared;          /* shared-socket slot, or -1 for a per-leg socket */
    cs_jb *jb;
    /* receiver only: cs_jb_next_lines after the leg's last insert, prefetched (never
     * dereferenced) a leg ahead by rx_prefetch_leg; stale or NULL is harmless */
    _Alignas(64) const void *hint[CS_JB_HINTS];
    uint32_t nhint;
    _Alignas(64) cs_stream_counters c; /* srclock fields are filled at copy-out */
    _Alignas(64) cs_srclock lock;
    int fd;                  /* our dup of the caller's socket; -1 on a shared socket */
    int pushed;              /* packets come from cs_ingest_push*, no socket (fd -1) */
    uint32_t ssrc;           /* shared: configured SSRC (0: none) */
    cs_srclock_addr preset;  /* shared: expected source (family 0: none) */
    cs_demux_key keys[LEG_KEYS]; /* shared: keys it holds (or claims) in the demux table */
    uint32_t nkeys;
    cs_srtp *srtp;           /* allocated on the slot's first SRTP key, kept until free */
    rx_req req;
} ingest_slot;

typedef struct {
    pthread_mutex_t mu;      /* held by the receiver while it drains the socket */
    int active;
    uint16_t gen;
    int fd;
    cs_socket_counters c;    /* receiver-written fields under mu; legs under table_mu */
    rx_req req;
} shared_socket;

/* The receiver's view of one batch (reused; MAX_BATCH entries). */
typedef struct {
    cs_rtp_header hdr[MAX_BATCH];
    cs_srclock_addr from[MAX_BATCH];
    int64_t arrival[MAX_BATCH];
    int32_t target[MAX_BATCH];   /* stream id, or -1 */
    uint8_t inserted[MAX_BATCH];
    int64_t done[MAX_BATCH];     /* CLOCK_MONOTONIC once inserted (latency end) */
} rx_batch;

struct cs_ingest {
    cs_ingest_config cfg;
    int epfd;
    int evfd;
    int running;
    pthread_t thread;
    pthread_mutex_t table_mu; /* add/remove/start/stop */
    pthread_mutex_t demux_mu; /* the demux table */
    ingest_slot *streams;
    shared_socket *sockets;
    cs_demux demux;
    /* receiver-thread buffers */
    struct mmsghdr *msgs;
    uint32_t msgs_dirty;      /* entries the last recvmmsg filled (receive() resets) */
    struct iovec *iovs;
    struct sockaddr_storage *addrs;
    uint8_t *bufs;
    uint8_t *cmsgs;
    rx_batch batch;
    struct epoll_event events[MAX_EVENTS];
    int64_t cpu_done_ns;      /* CPU of receiver threads that have exited */
    int sched;                /* cs_ingest_sched(); written by start under table_mu */
    cs_ingest_counters counters;
    cs_ingest_latency latency;    /* kernel timestamp -> after insert */
    cs_ingest_latency processing; /* recvmmsg returned -> after insert */
    /* backend (ingest_uring.c): chosen by new (probe) and start, under table_mu */
    int backend;              /* CS_INGEST_BACKEND_EPOLL or _URING */
    char backend_reason[192];
    pthread_mutex_t cmd_mu;   /* io_uring: removal handshake, thread start result */
    pthread_cond_t cmd_cv;
    int cmd_pending;          /* io_uring: adds/removes to look at (atomic) */
    int stopping;             /* io_uring: stop asked (atomic) */
    int thread_state;         /* io_uring thread start: 0 starting, 1 running, -errno */
};

/* Pacing: datagrams seen in the last full RATE_WINDOW (ingest.c). */
typedef struct {
    int64_t start_ns;
    uint64_t start_datagrams;
    uint64_t datagrams; /* in the last full window */
    int64_t span_ns;
} rate_window;
/* Datagrams expected in the next us microseconds at the last window's rate. */
uint64_t rx_expected(const cs_ingest *ing, rate_window *w, int64_t now, uint32_t us);

/* Stream and socket ids: generation (15 bits) << 16 | slot. */
#define STREAM_SLOT(id) ((uint32_t)(id) & 0xFFFFu)
#define STREAM_GEN(id) ((uint16_t)((uint32_t)(id) >> 16))
#define MAKE_ID(gen, slot) ((int32_t)(((uint32_t)(gen) << 16) | (uint32_t)(slot)))

/* ingest_rx.c: drain one ready socket (its slot mutex held); offset = REALTIME - MONO.
 * Returns 1 if it stopped at max_batches full batches (datagrams may be left). */
int rx_drain_stream(cs_ingest *ing, ingest_slot *s, int64_t offset);
/* The per-batch work on r datagrams already in the batch buffers (msgs, iovs, addrs):
 * what rx_drain_* do after each recvmmsg, and the io_uring loop after each run of one
 * socket's completions. */
void rx_process_stream(cs_ingest *ing, ingest_slot *s, int r, int64_t offset, int64_t received);
void rx_process_shared(cs_ingest *ing, shared_socket *k, uint16_t sock_slot, int r,
                       int64_t offset, int64_t received);
int rx_drain_shared(cs_ingest *ing, shared_socket *k, uint16_t sock_slot, int64_t offset);
int64_t rx_clock_ns(int clock_id);
/* Hints for the legs the receiver handles next (stream slots), so their cold state loads
 * while the current leg is processed (with hundreds of legs each one's is cold, and its
 * mutex line was last written by the pull on the other CPU). slot: the slot's own
 * per-datagram lines, reading nothing; issue it a leg earlier than leg. leg: its jitter
 * buffer's first lines (cs_jb_prefetch) and the lines its next insert touches (the
 * slot's hints); reads the slot's jb pointer and hints without its mutex, as addresses
 * to prefetch only, never dereferenced (a leg removed meanwhile is caught under the
 * mutex as before). */
void rx_prefetch_slot(cs_ingest *ing, uint32_t slot);
void rx_prefetch_leg(cs_ingest *ing, uint32_t slot);
void rx_setup_msgs(cs_ingest *ing); /* once, before the thread starts */
/* The receiver takes a stream's mutex; a wait (pull or control side holding it) is
 * counted in stream_lock_waits. */
void rx_lock_stream(cs_ingest *ing, ingest_slot *s);

/* ingest_shared.c: make a shared leg's demux keys follow its expected address, SSRC and
 * source-lock state (stream mutex held; takes the demux mutex). All or nothing: 0, or
 * -EEXIST/-ENOSPC with the old keys kept. Drop every key of the leg (remove/free). */
int shared_sync_keys(cs_ingest *ing, ingest_slot *s, int32_t id);
/* cs_ingest_expect_source's part for a shared leg: new expected address, re-keyed; 0 or
 * -EINVAL (neither an address with a port nor an SSRC left) / -EEXIST, nothing changed. */
int shared_expect(cs_ingest *ing, ingest_slot *s, int32_t id, const cs_srclock_addr *addr);
/* cs_ingest_set_ssrc's part: the leg's configured SSRC now ssrc, re-keyed; 0 or -errno
 * (the old SSRC and keys kept). */
int shared_set_ssrc(cs_ingest *ing, ingest_slot *s, int32_t id, uint32_t ssrc);
void shared_drop_keys(cs_ingest *ing, ingest_slot *s, int32_t id);
/* The receive path's call after leg s's source lock locked a source or took a new SSRC
 * from its locked address (stream mutex held): a leg keyed by SSRC takes the locked SSRC
 * as its own (counted in demux_ssrc_follows) and is re-keyed; a key held by another leg
 * is counted in demux_conflicts and the leg keeps its old SSRC. */
void shared_locked(cs_ingest *ing, ingest_slot *s, int32_t id);
/* ingest_uring.c: the io_uring backend. probe: can a ring with the configured flags and
 * a provided-buffer ring be set up here (0, or -errno with why)? rx_watch: a socket was
 * added (table mutex and its slot mutex held): epoll_ctl ADD, or under io_uring a poke
 * so the receiver arms it; 0 or -errno. rx_unwatch: a socket was removed (table mutex
 * held, slot mutex not held, slot inactive): EPOLL_CTL_DEL, or under a running io_uring
 * receiver wait until its request has ended; then close(fd). uring_main: the thread. */
int uring_probe(const cs_ingest_config *cfg, char *why, size_t len);
int rx_watch(cs_ingest *ing, int fd, uint64_t token);
void rx_unwatch(cs_ingest *ing, rx_req *req, int fd);
void *uring_main(void *arg);
/* ingest_streams.c: SO_TIMESTAMPNS and the receive buffer; reports what the kernel set. */
void tune_socket(int fd, uint32_t rcvbuf, uint64_t *rcvbuf_bytes, uint64_t *forced);

#endif
