/* The io_uring receive backend: one ring per receiver thread (set up by the thread at
 * each start, torn down when it stops), one multishot IORING_OP_RECVMSG per socket
 * (per-leg and shared) drawing from one provided-buffer ring, so the datagrams of every
 * leg complete into one CQ and the thread reaps them in batches, one io_uring_enter per
 * batch. Raw syscalls and <linux/io_uring.h> only: no liburing.
 *
 * Ring flags: SINGLE_ISSUER | DEFER_TASKRUN by default (cs_ingest_config.uring_setup):
 * the completions' task work runs only when this thread enters the ring asking for
 * events, so a wait for N completions (pacing, below) is not woken per datagram. SQPOLL
 * is refused (it burns a core).
 *
 * Buffer layout, one provided buffer per datagram: struct io_uring_recvmsg_out | source
 * address (NAME_RES bytes) | control messages (CTRL_RES: the SO_TIMESTAMPNS stamp) |
 * payload (max_datagram). The kernel receive timestamp survives: it is a cmsg in the
 * buffer, read by the same code as under recvmmsg.
 *
 * A multishot request ends (no IORING_CQE_F_MORE) when the buffer ring ran dry
 * (-ENOBUFS: counted), the CQ overflowed, or on error: the thread recycles the batch's
 * buffers first and then re-arms the socket in the same io_uring_enter. The datagrams
 * wait in the socket's receive queue meanwhile; the leg is never dropped. A request that
 * ends with another error (e.g. -EINVAL on a kernel without multishot recvmsg) is
 * counted in uring_arm_errors and re-armed at most once per batch.
 *
 * Adds and removes come from the control side, which may not touch a SINGLE_ISSUER
 * ring: an add pokes the thread (cmd_pending + the eventfd, polled multishot in the
 * ring), which arms every active socket not yet armed; a removal marks the slot
 * closing and waits until the thread has cancelled its request and seen it end (the
 * request holds a reference to the socket: without the wait the port would stay bound
 * after remove returned). Stop cancels everything and reaps before the ring closes.
 *
 * Pacing (coalesce_us > 0): the thread waits for the datagrams it expects in coalesce_us
 * at the last 20 ms's rate (IORING_ENTER_EXT_ARG: min_complete = that, timeout =
 * coalesce_us), so it wakes about once per coalesce_us under load, without a timed
 * sleep of its own, and at once when traffic is sparse enough to expect < 2 (unless
 * coalesce_min is 0: then it always waits for 2 or coalesce_us). Counted in
 * paced_sleeps. coalesce_min's other use (the break-even of epoll's timed sleep) does
 * not apply: such a wait costs no more than an unpaced one.
 */
#define _GNU_SOURCE
#include "hugemem.h"
#include "ingest_priv.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum {
    NAME_RES = 32,  /* >= sizeof(struct sockaddr_in6); keeps the cmsgs 8-aligned */
    CTRL_RES = 64,  /* CMSG_SPACE(struct timespec) = 32, room for one more */
    HDR_BYTES = (int)sizeof(struct io_uring_recvmsg_out) + NAME_RES + CTRL_RES,
    SQ_ENTRIES = 256,
    DEFAULT_BUFFERS = 1024,
    BGID = 0
};

/* user_data: kind << 56 | generation << 16 | slot */
enum { UD_STREAM = 1, UD_SOCKET = 2, UD_WAKE = 3, UD_CANCEL = 4 };
#define UD(kind, gen, slot) (((uint64_t)(kind) << 56) | ((uint64_t)(gen) << 16) | (slot))
#define UD_KIND(ud) ((int)((ud) >> 56))
#define UD_SLOT(ud) ((uint32_t)((ud) & 0xFFFFu))

typedef struct {
    int fd;
    void *sq_ptr, *cq_ptr;
    size_t sq_len, cq_len;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    size_t sqes_len;
    struct io_uring_cqe *cqes;
    unsigned sq_local;      /* our SQ tail, published by submit */
    unsigned to_submit;
    struct io_uring_buf_ring *br;
    size_t br_len;
    uint8_t *bufs;
    size_t bufs_len;
    uint32_t nbufs, buf_size;
    uint16_t br_tail;
    struct msghdr tmpl;     /* the multishot recvmsg template: name and control sizes */
    uint64_t wake_buf;
} uring;

static int sys_setup(unsigned entries, struct io_uring_params *p) {
    long r = syscall(__NR_io_uring_setup, entries, p);
    return r < 0 ? -errno : (int)r;
}

static int sys_enter(int fd, unsigned submit, unsigned wait, unsigned flags, void *arg,
                     size_t argsz) {
    long r = syscall(__NR_io_uring_enter, fd, submit, wait, flags, arg, argsz);
    return r < 0 ? -errno : (int)r;
}

static int sys_register(int fd, unsigned op, void *arg, unsigned nr) {
    long r = syscall(__NR_io_uring_register, fd, op, arg, nr);
    return r < 0 ? -errno : (int)r;
}

static unsigned setup_flags(const cs_ingest_config *cfg) {
    return cfg->uring_setup ? cfg->uring_setup
                            : IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
}

static uint32_t cq_entries(const cs_ingest_config *cfg, uint32_t nbufs) {
    uint32_t want = 2 * nbufs + 2 * (cfg->max_streams + cfg->max_sockets) + 64, n = 1024;
    while (n < want && n < 65536)
        n *= 2;
    return n;
}

static void ring_close(uring *u) {
    if (u->bufs)
        cs_huge_free(u->bufs, u->bufs_len);
    if (u->br)
        munmap(u->br, u->br_len);
    if (u->sqes)
        munmap(u->sqes, u->sqes_len);
    if (u->cq_ptr && u->cq_ptr != u->sq_ptr)
        munmap(u->cq_ptr, u->cq_len);
    if (u->sq_ptr)
        munmap(u->sq_ptr, u->sq_len);
    if (u->fd >= 0)
        close(u->fd);
    memset(u, 0, sizeof *u);
    u->fd = -1;
}

static void *map(size_t len, int fd, off_t off) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, off);
    return p == MAP_FAILED ? NULL : p;
}

static int op_supported(int fd, int op) {
    size_t len = sizeof(struct io_uring_probe) + 256 * sizeof(struct io_uring_probe_op);
    struct io_uring_probe *p = calloc(1, len);
    if (!p)
        return 0;
    int ok = sys_register(fd, IORING_REGISTER_PROBE, p, 256) == 0 && op <= p->last_op &&
             (p->ops[op].flags & IO_URING_OP_SUPPORTED);
    free(p);
    return ok;
}

/* Set up a ring and its provided-buffer ring; 0, or -errno with why. */
static int ring_open(uring *u, const cs_ingest_config *cfg, char *why, size_t len) {
    memset(u, 0, sizeof *u);
    u->fd = -1;
    unsigned flags = setup_flags(cfg);
    if (cfg->uring_refuse) {
        snprintf(why, len, "refused by the configuration (uring_refuse=%d: %s)",
                 cfg->uring_refuse, strerror(cfg->uring_refuse));
        return -cfg->uring_refuse;
    }
    if (flags & IORING_SETUP_SQPOLL) {
        snprintf(why, len, "IORING_SETUP_SQPOLL is not supported (it burns a core)");
        return -EINVAL;
    }
    u->nbufs = cfg->uring_buffers ? cfg->uring_buffers : DEFAULT_BUFFERS;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = flags | IORING_SETUP_CQSIZE;
    p.cq_entries = cq_entries(cfg, u->nbufs);
    int fd = sys_setup(SQ_ENTRIES, &p);
    if (fd < 0) {
        snprintf(why, len, "io_uring_setup(flags 0x%x): %s%s", p.flags, strerror(-fd),
                 fd == -EPERM   ? " (kernel.io_uring_disabled, or a seccomp filter)"
                 : fd == -EINVAL ? " (a flag this kernel lacks: DEFER_TASKRUN needs 6.1)"
                                 : "");
        return fd;
    }
    u->fd = fd;
    int err = -ENOMEM;
    if (!(p.features & IORING_FEAT_NODROP)) {
        snprintf(why, len, "kernel lacks IORING_FEAT_NODROP");
        err = -EOPNOTSUPP;
        goto fail;
    }
    u->sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    u->cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        if (u->cq_len > u->sq_len)
            u->sq_len = u->cq_len;
        u->sq_ptr = u->cq_ptr = map(u->sq_len, fd, IORING_OFF_SQ_RING);
    } else {
        u->sq_ptr = map(u->sq_len, fd, IORING_OFF_SQ_RING);
        u->cq_ptr = u->sq_ptr ? map(u->cq_len, fd, IORING_OFF_CQ_RING) : NULL;
    }
    u->sqes_len = p.sq_entries * sizeof(struct io_uring_sqe);
    u->sqes = u->cq_ptr ? map(u->sqes_len, fd, IORING_OFF_SQES) : NULL;
    if (!u->sqes) {
        snprintf(why, len, "mmap of the rings: %s", strerror(errno));
        goto fail;
    }
    uint8_t *sq = u->sq_ptr, *cq = u->cq_ptr;
    u->sq_head = (unsigned *)(sq + p.sq_off.head);
    u->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    u->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    u->sq_array = (unsigned *)(sq + p.sq_off.array);
    u->cq_head = (unsigned *)(cq + p.cq_off.head);
    u->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    u->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    u->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    for (unsigned i = 0; i < p.sq_entries; i++)
        u->sq_array[i] = i;
    u->sq_local = *u->sq_tail;
    if (!op_supported(fd, IORING_OP_RECVMSG) || !op_supported(fd, IORING_OP_POLL_ADD) ||
        !op_supported(fd, IORING_OP_ASYNC_CANCEL)) {
        snprintf(why, len, "kernel lacks IORING_OP_RECVMSG, POLL_ADD or ASYNC_CANCEL");
        err = -EOPNOTSUPP;
        goto fail;
    }
    /* the provided-buffer ring and its buffers */
    long page = sysconf(_SC_PAGESIZE);
    u->br_len = (u->nbufs * sizeof(struct io_uring_buf) + (size_t)page - 1) & ~((size_t)page - 1);
    void *br = mmap(NULL, u->br_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    u->br = br == MAP_FAILED ? NULL : br;
    u->buf_size = (uint32_t)((HDR_BYTES + cfg->max_datagram + 63) & ~63u);
    u->bufs_len = (size_t)u->nbufs * u->buf_size;
    /* on huge pages (hugemem.h): the kernel fills the buffers round the ring, each
     * datagram another page of the 1024 buffers' 2 MiB otherwise */
    u->bufs = cs_huge_alloc(u->bufs_len);
    if (!u->br || !u->bufs) {
        snprintf(why, len, "mmap of %u receive buffers: %s", u->nbufs, strerror(errno));
        goto fail;
    }
    struct io_uring_buf_reg reg;
    memset(&reg, 0, sizeof reg);
    reg.ring_addr = (uint64_t)(uintptr_t)u->br;
    reg.ring_entries = u->nbufs;
    reg.bgid = BGID;
    err = sys_register(fd, IORING_REGISTER_PBUF_RING, &reg, 1);
    if (err < 0) {
        snprintf(why, len, "IORING_REGISTER_PBUF_RING: %s (kernel < 5.19?)", strerror(-err));
        goto fail;
    }
    for (uint32_t i = 0; i < u->nbufs; i++) {
        struct io_uring_buf *b = &u->br->bufs[i];
        b->addr = (uint64_t)(uintptr_t)(u->bufs + (size_t)i * u->buf_size);
        b->len = u->buf_size;
        b->bid = (uint16_t)i;
    }
    u->br_tail = (uint16_t)u->nbufs;
    __atomic_store_n(&u->br->tail, u->br_tail, __ATOMIC_RELEASE);
    u->tmpl.msg_namelen = NAME_RES;
    u->tmpl.msg_controllen = CTRL_RES;
    snprintf(why, len, "flags 0x%x, %u buffers of %u bytes, CQ %u", flags, u->nbufs,
             u->buf_size, p.cq_entries);
    return 0;
fail:
    ring_close(u);
    return err < 0 ? err : -ENOMEM;
}

int uring_probe(const cs_ingest_config *cfg, char *why, size_t len) {
    uring u;
    int rc = ring_open(&u, cfg, why, len);
    if (rc == 0)
        ring_close(&u);
    return rc;
}

/* ---- control side ----------------------------------------------------------------- */

static void poke(cs_ingest *ing) {
    __atomic_store_n(&ing->cmd_pending, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    if (write(ing->evfd, &one, sizeof one) < 0) { /* counter saturated: still poked */
    }
}

int rx_watch(cs_ingest *ing, int fd, uint64_t token) {
    if (ing->backend == CS_INGEST_BACKEND_URING) {
        if (ing->running)
            poke(ing);
        return 0; /* armed by the thread: at start, or now */
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = token};
    return epoll_ctl(ing->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

void rx_unwatch(cs_ingest *ing, rx_req *req, int fd) {
    if (ing->backend == CS_INGEST_BACKEND_URING) {
        if (ing->running) {
            pthread_mutex_lock(&ing->cmd_mu);
            req->closing = 1;
            poke(ing);
            while (req->closing)
                pthread_cond_wait(&ing->cmd_cv, &ing->cmd_mu);
            pthread_mutex_unlock(&ing->cmd_mu);
        }
    } else {
        (void)epoll_ctl(ing->epfd, EPOLL_CTL_DEL, fd, NULL);
    }
    close(fd);
}

/* ---- receiver thread: submission ---------------------------------------------------- */

static int submit(cs_ingest *ing, uring *u, unsigned wait, unsigned flags, void *arg,
                  size_t argsz) {
    __atomic_store_n(u->sq_tail, u->sq_local, __ATOMIC_RELEASE);
    int r = sys_enter(u->fd, u->to_submit, wait, flags | IORING_ENTER_GETEVENTS, arg, argsz);
    BUMP(ing->counters.uring_enters, 1);
    if (r > 0) /* else nothing submitted (0, -ETIME, -EINTR): kept for the next enter */
        u->to_submit -= (unsigned)r < u->to_submit ? (unsigned)r : u->to_submit;
    return r;
}

static struct io_uring_sqe *get_sqe(cs_ingest *ing, uring *u) {
    unsigned head = __atomic_load_n(u->sq_head, __ATOMIC_ACQUIRE);
    if (u->sq_local - head >= SQ_ENTRIES) { /* full: hand what we have to the kernel */
        (void)submit(ing, u, 0, 0, NULL, 0);
        head = __atomic_load_n(u->sq_head, __ATOMIC_ACQUIRE);
        if (u->sq_local - head >= SQ_ENTRIES)
            return NULL;
    }
    struct io_uring_sqe *sqe = &u->sqes[u->sq_local & *u->sq_mask];
    memset(sqe, 0, sizeof *sqe);
    u->sq_local++;
    u->to_submit++;
    return sqe;
}

static void arm_recv(cs_ingest *ing, uring *u, rx_req *req, int fd, uint64_t ud) {
    struct io_uring_sqe *sqe = get_sqe(ing, u);
    if (!sqe)
        return; /* SQ stuck full: armed on the next scan */
    sqe->opcode = IORING_OP_RECVMSG;
    sqe->fd = fd;
    sqe->addr = (uint64_t)(uintptr_t)&u->tmpl;
    sqe->len = 1;
    sqe->ioprio = IORING_RECV_MULTISHOT;
    sqe->flags = IOSQE_BUFFER_SELECT;
    sqe->buf_group = BGID;
    sqe->user_data = ud;
    req->armed = 1;
    req->cancel_sent = 0;
    BUMP(ing->counters.uring_arms, 1);
}

static void arm_wake(cs_ingest *ing, uring *u) {
    struct io_uring_sqe *sqe = get_sqe(ing, u);
    if (!sqe)
        return;
    sqe->opcode = IORING_OP_POLL_ADD;
    sqe->fd = ing->evfd;
    sqe->poll32_events = POLLIN;
    sqe->len = IORING_POLL_ADD_MULTI;
    sqe->user_data = UD(UD_WAKE, 0, 0);
}

static void cancel(cs_ingest *ing, uring *u, uint64_t ud, unsigned flags) {
    struct io_uring_sqe *sqe = get_sqe(ing, u);
    if (!sqe)
        return;
    sqe->opcode = IORING_OP_ASYNC_CANCEL;
    sqe->addr = ud;
    sqe->cancel_flags = flags;
    sqe->user_data = UD(UD_CANCEL, 0, 0);
}

/* Adds and removes: arm every active socket that has no request; cancel the requests
 * of sockets being removed (and release the removals whose request has ended). */
static void scan(cs_ingest *ing, uring *u) {
    pthread_mutex_lock(&ing->cmd_mu);
    int released = 0;
    for (uint32_t i = 0; i < ing->cfg.max_streams + ing->cfg.max_sockets; i++) {
        int sock = i >= ing->cfg.max_streams;
        uint32_t slot = sock ? i - ing->cfg.max_streams : i;
        rx_req *req = sock ? &ing->sockets[slot].req : &ing->streams[slot].req;
        if (!req->closing)
            continue;
        if (!req->armed) {
            req->closing = 0;
            released = 1;
        } else if (!req->cancel_sent) {
            uint16_t gen = sock ? ing->sockets[slot].gen : ing->streams[slot].gen;
            cancel(ing, u, UD(sock ? UD_SOCKET : UD_STREAM, gen, slot), 0);
            req->cancel_sent = 1;
        }
    }
    if (released)
        pthread_cond_broadcast(&ing->cmd_cv);
    pthread_mutex_unlock(&ing->cmd_mu);
    for (uint32_t i = 0; i < ing->cfg.max_streams; i++) {
        ingest_slot *s = &ing->streams[i];
        if (s->req.armed)
            continue;
        pthread_mutex_lock(&s->mu);
        if (s->active && s->fd >= 0 && s->shared < 0 && !s->pushed)
            arm_recv(ing, u, &s->req, s->fd, UD(UD_STREAM, s->gen, i));
        pthread_mutex_unlock(&s->mu);
    }
    for (uint32_t i = 0; i < ing->cfg.max_sockets; i++) {
        shared_socket *k = &ing->sockets[i];
        if (k->req.armed)
            continue;
        pthread_mutex_lock(&k->mu);
        if (k->active)
            arm_recv(ing, u, &k->req, k->fd, UD(UD_SOCKET, k->gen, i));
        pthread_mutex_unlock(&k->mu);
    }
}

/* ---- receiver thread: completions ----------------------------------------------------- */

typedef struct {
    uint64_t ud;
    int res;
} ending; /* a recv request that ended (no CQE_F_MORE) and how */

typedef struct {
    uint64_t ud;       /* the socket of the pending run, 0: none */
    int n;             /* datagrams in the batch buffers */
    uint16_t bids[MAX_BATCH];
    int64_t offset, received;
} run_state;

static void recycle(uring *u, uint16_t bid) {
    struct io_uring_buf *b = &u->br->bufs[u->br_tail & (u->nbufs - 1)];
    b->addr = (uint64_t)(uintptr_t)(u->bufs + (size_t)bid * u->buf_size);
    b->len = u->buf_size;
    b->bid = bid;
    u->br_tail++;
}

/* Hand the pending run of one socket's datagrams to the per-batch code. */
static void flush(cs_ingest *ing, uring *u, run_state *run) {
    if (!run->n)
        return;
    uint64_t ud = run->ud;
    uint32_t slot = UD_SLOT(ud);
    uint16_t gen = (uint16_t)(ud >> 16);
    if (UD_KIND(ud) == UD_STREAM) {
        ingest_slot *s = &ing->streams[slot];
        rx_lock_stream(ing, s);
        if (s->active && s->gen == gen && s->shared < 0)
            rx_process_stream(ing, s, run->n, run->offset, run->received);
        else
            BUMP(ing->counters.unknown_socket, (uint64_t)run->n);
        pthread_mutex_unlock(&s->mu);
    } else {
        shared_socket *k = &ing->sockets[slot];
        pthread_mutex_lock(&k->mu);
        if (k->active && k->gen == gen) {
            BUMP(k->c.recvmmsg_calls, 1);
            rx_process_shared(ing, k, (uint16_t)slot, run->n, run->offset, run->received);
        } else {
            BUMP(ing->counters.unknown_socket, (uint64_t)run->n);
        }
        pthread_mutex_unlock(&k->mu);
    }
    for (int i = 0; i < run->n; i++)
        recycle(u, run->bids[i]);
    run->n = 0;
    run->ud = 0;
}

/* One datagram in buffer bid (cqe->res bytes) into the batch buffers at index n. */
static void stage(cs_ingest *ing, uring *u, run_state *run, uint64_t ud, uint16_t bid, int res) {
    if (run->ud != ud && UD_KIND(ud) == UD_STREAM && UD_SLOT(ud) < ing->cfg.max_streams)
        rx_prefetch_leg(ing, UD_SLOT(ud)); /* its lines load while the run before is flushed */
    if (run->n && (run->ud != ud || (uint32_t)run->n >= ing->cfg.batch))
        flush(ing, u, run);
    int i = run->n++;
    run->ud = ud;
    run->bids[i] = bid;
    uint8_t *buf = u->bufs + (size_t)bid * u->buf_size;
    const struct io_uring_recvmsg_out *o = (const struct io_uring_recvmsg_out *)buf;
    struct msghdr *m = &ing->msgs[i].msg_hdr;
    m->msg_control = buf + sizeof *o + NAME_RES;
    m->msg_controllen = o->controllen < CTRL_RES ? o->controllen : CTRL_RES;
    m->msg_flags = (int)o->flags;
    ing->msgs[i].msg_len = res > HDR_BYTES ? (unsigned)(res - HDR_BYTES) : 0;
    ing->iovs[i].iov_base = buf + HDR_BYTES;
    memset(&ing->addrs[i], 0, sizeof ing->addrs[i]);
    memcpy(&ing->addrs[i], buf + sizeof *o, o->namelen < NAME_RES ? o->namelen : NAME_RES);
}

/* A socket's request ended: re-arm it (still live), or release its removal. After
 * MAX_ERRORS endings in a row with an error other than ENOBUFS it is left unarmed
 * (counted in uring_arm_errors: a kernel that refuses the request would spin). */
enum { MAX_ERRORS = 64 };
static void ended(cs_ingest *ing, uring *u, ending e) {
    uint64_t ud = e.ud;
    uint32_t slot = UD_SLOT(ud);
    uint16_t gen = (uint16_t)(ud >> 16);
    int sock = UD_KIND(ud) == UD_SOCKET;
    if (sock ? slot >= ing->cfg.max_sockets : slot >= ing->cfg.max_streams)
        return;
    rx_req *req = sock ? &ing->sockets[slot].req : &ing->streams[slot].req;
    req->armed = 0;
    pthread_mutex_lock(&ing->cmd_mu);
    int closing = req->closing;
    if (closing) {
        req->closing = 0;
        pthread_cond_broadcast(&ing->cmd_cv);
    }
    pthread_mutex_unlock(&ing->cmd_mu);
    if (closing || __atomic_load_n(&ing->stopping, __ATOMIC_ACQUIRE))
        return;
    if (e.res < 0 && e.res != -ENOBUFS && e.res != -ECANCELED) {
        if (req->errors >= MAX_ERRORS)
            return;
        req->errors++;
    } else {
        req->errors = 0;
    }
    if (sock) {
        shared_socket *k = &ing->sockets[slot];
        pthread_mutex_lock(&k->mu);
        if (k->active && k->gen == gen) {
            arm_recv(ing, u, req, k->fd, ud);
            BUMP(ing->counters.uring_rearms, 1);
        }
        pthread_mutex_unlock(&k->mu);
    } else {
        ingest_slot *s = &ing->streams[slot];
        pthread_mutex_lock(&s->mu);
        if (s->active && s->gen == gen && s->fd >= 0) {
            arm_recv(ing, u, req, s->fd, ud);
            BUMP(ing->counters.uring_rearms, 1);
        }
        pthread_mutex_unlock(&s->mu);
    }
}

/* Reap every CQE there is. Returns the number of recv requests that ended (their
 * re-arms wait until the batch's buffers are back in the ring). */
static unsigned reap(cs_ingest *ing, uring *u, run_state *run, ending *ended_ud,
                     unsigned max_ended, int *wake) {
    /* per reaped batch: one clock offset, one "received" time */
    int64_t m1 = rx_clock_ns(CLOCK_MONOTONIC);
    int64_t rt = rx_clock_ns(CLOCK_REALTIME);
    int64_t m2 = rx_clock_ns(CLOCK_MONOTONIC);
    run->offset = rt - (m1 + (m2 - m1) / 2);
    run->received = m2;
    unsigned head = *u->cq_head, n_ended = 0;
    unsigned tail = __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE);
    uint64_t cqes = 0;
    for (; head != tail; head++, cqes++) {
        const struct io_uring_cqe *c = &u->cqes[head & *u->cq_mask];
        uint64_t ud = c->user_data;
        int kind = UD_KIND(ud);
        if (tail - head > 2) { /* a leg two completions ahead: its slot lines (stage) */
            uint64_t ahead = u->cqes[(head + 2) & *u->cq_mask].user_data;
            if (UD_KIND(ahead) == UD_STREAM && UD_SLOT(ahead) < ing->cfg.max_streams)
                rx_prefetch_slot(ing, UD_SLOT(ahead));
        }
        if (kind == UD_WAKE) {
            *wake = 1;
            if (!(c->flags & IORING_CQE_F_MORE))
                arm_wake(ing, u);
            continue;
        }
        if (kind != UD_STREAM && kind != UD_SOCKET) {
            continue; /* a cancel's own completion */
        }
        if (c->res >= 0 && (c->flags & IORING_CQE_F_BUFFER))
            stage(ing, u, run, ud, (uint16_t)(c->flags >> IORING_CQE_BUFFER_SHIFT), c->res);
        else if (c->res == -ENOBUFS)
            BUMP(ing->counters.uring_enobufs, 1);
        else if (c->res == -ECANCELED)
            BUMP(ing->counters.uring_cancels, 1);
        else if (c->res < 0)
            BUMP(ing->counters.uring_arm_errors, 1);
        if (!(c->flags & IORING_CQE_F_MORE) && n_ended < max_ended)
            ended_ud[n_ended++] = (ending){ud, c->res};
    }
    flush(ing, u, run);
    __atomic_store_n(u->cq_head, head, __ATOMIC_RELEASE);
    __atomic_store_n(&u->br->tail, u->br_tail, __ATOMIC_RELEASE);
    BUMP(ing->counters.uring_cqes, cqes);
    if (cqes)
        BUMP(ing->counters.wakeups, 1);
    return n_ended;
}

static unsigned armed_count(const cs_ingest *ing) {
    unsigned n = 0;
    for (uint32_t i = 0; i < ing->cfg.max_streams; i++)
        n += ing->streams[i].req.armed;
    for (uint32_t i = 0; i < ing->cfg.max_sockets; i++)
        n += ing->sockets[i].req.armed;
    return n;
}

/* Stop: cancel every request and reap until each has ended (bounded: 1 s). */
static void drain_all(cs_ingest *ing, uring *u, run_state *run, ending *ended_ud,
                      unsigned max_ended) {
    cancel(ing, u, 0, IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
    int64_t deadline = rx_clock_ns(CLOCK_MONOTONIC) + 1000000000;
    while (armed_count(ing) && rx_clock_ns(CLOCK_MONOTONIC) < deadline) {
        struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = 10000000};
        struct io_uring_getevents_arg arg = {.ts = (uint64_t)(uintptr_t)&ts};
        (void)submit(ing, u, 1, IORING_ENTER_EXT_ARG, &arg, sizeof arg);
        int wake = 0;
        unsigned n = reap(ing, u, run, ended_ud, max_ended, &wake);
        for (unsigned i = 0; i < n; i++) {
            uint32_t slot = UD_SLOT(ended_ud[i].ud);
            if (UD_KIND(ended_ud[i].ud) == UD_SOCKET)
                ing->sockets[slot].req.armed = 0;
            else
                ing->streams[slot].req.armed = 0;
        }
    }
    for (uint32_t i = 0; i < ing->cfg.max_streams; i++)
        ing->streams[i].req.armed = 0; /* the ring's close ends anything left */
    for (uint32_t i = 0; i < ing->cfg.max_sockets; i++)
        ing->sockets[i].req.armed = 0;
}

static void started(cs_ingest *ing, int state) {
    pthread_mutex_lock(&ing->cmd_mu);
    ing->thread_state = state;
    pthread_cond_broadcast(&ing->cmd_cv);
    pthread_mutex_unlock(&ing->cmd_mu);
}

void *uring_main(void *arg) {
    cs_ingest *ing = arg;
    uring u;
    char why[128];
    int rc = ring_open(&u, &ing->cfg, why, sizeof why);
    unsigned max_ended = ing->cfg.max_streams + ing->cfg.max_sockets;
    ending *ended_ud = rc == 0 ? calloc(max_ended, sizeof *ended_ud) : NULL;
    if (rc == 0 && !ended_ud) {
        ring_close(&u);
        rc = -ENOMEM;
    }
    if (rc) {
        started(ing, rc);
        return NULL;
    }
    started(ing, 1);
    run_state run = {0};
    rate_window rate = {.start_ns = rx_clock_ns(CLOCK_MONOTONIC)};
    rate.start_datagrams = __atomic_load_n(&ing->counters.datagrams, __ATOMIC_RELAXED);
    arm_wake(ing, &u);
    const uint32_t pace_us = ing->cfg.coalesce_us;
    const unsigned wait_cap = u.nbufs / 2 > 1 ? u.nbufs / 2 : 1;
    for (;;) {
        if (__atomic_exchange_n(&ing->cmd_pending, 0, __ATOMIC_ACQ_REL))
            scan(ing, &u);
        if (__atomic_load_n(&ing->stopping, __ATOMIC_ACQUIRE))
            break;
        unsigned wait = 1;
        int64_t now = rx_clock_ns(CLOCK_MONOTONIC);
        uint64_t expect = pace_us ? rx_expected(ing, &rate, now, pace_us) : 0;
        if (pace_us && (expect >= 2 || !ing->cfg.coalesce_min)) {
            wait = expect < 2 ? 2 : expect < wait_cap ? (unsigned)expect : wait_cap;
            struct __kernel_timespec ts = {.tv_sec = pace_us / 1000000,
                                           .tv_nsec = (long long)(pace_us % 1000000) * 1000};
            struct io_uring_getevents_arg ea = {.ts = (uint64_t)(uintptr_t)&ts};
            (void)submit(ing, &u, wait, IORING_ENTER_EXT_ARG, &ea, sizeof ea);
            BUMP(ing->counters.paced_sleeps, 1);
        } else {
            (void)submit(ing, &u, wait, 0, NULL, 0);
        }
        int wake = 0;
        unsigned n = reap(ing, &u, &run, ended_ud, max_ended, &wake);
        for (unsigned i = 0; i < n; i++)
            ended(ing, &u, ended_ud[i]);
        if (wake) {
            uint64_t v;
            if (read(ing->evfd, &v, sizeof v) < 0) { /* already read: fine */
            }
        }
    }
    drain_all(ing, &u, &run, ended_ud, max_ended);
    ring_close(&u);
    free(ended_ud);
    /* release any removal still waiting (none can be: removals hold the table mutex) */
    int64_t cpu = rx_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    __atomic_store_n(&ing->cpu_done_ns, ing->cpu_done_ns + cpu, __ATOMIC_RELAXED);
    return NULL;
}
