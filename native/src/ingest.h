/* RTP receive path: one dedicated thread, epoll over many UDP sockets, recvmmsg batches,
 * kernel receive timestamps, RTP parse, source lock, jitter-buffer insert.
 *
 * Threads. cs_ingest_start() spawns one receiver thread (pthread, signals blocked). It
 * waits in epoll_wait (level-triggered) on every stream socket plus an eventfd used to
 * stop it, and drains each ready socket with recvmmsg (at most `max_batches` batches per
 * socket per wakeup, so a flooded socket cannot starve the others). Every other function
 * is called from the control side (Python); they may run while the receiver runs.
 *
 * Locking. Each stream has a mutex guarding its jitter buffer, source lock and counters;
 * the receiver holds it while it reads and inserts that socket's batch, cs_ingest_pull()
 * holds it per stream while pulling. A table mutex serialises add/remove (control side
 * only). Removal is safe against the receiver: remove takes the stream mutex, marks the
 * slot free and deregisters the fd; the receiver re-checks slot state and generation
 * under the stream mutex before touching a socket, so a stale epoll event is counted
 * (unknown_socket) and ignored. Slots live for the whole cs_ingest.
 *
 * fd ownership. cs_ingest_add_stream() dup()s the caller's bound non-blocking UDP socket
 * and owns the duplicate (closed by remove or free); the caller keeps its own fd and may
 * close it at any time. The port stays bound until the stream is removed.
 *
 * Clocks. SO_TIMESTAMPNS gives each datagram a CLOCK_REALTIME kernel receive time. Per
 * wakeup the receiver samples (MONOTONIC, REALTIME, MONOTONIC) and converts the kernel
 * stamps into CLOCK_MONOTONIC (Python's time.monotonic_ns()), which is the now_ns handed
 * to cs_jb_insert: arrival time includes socket-queue wait. Latency histograms: kernel
 * timestamp -> just after the jitter-buffer insert, and recvmmsg return -> the same.
 *
 * Wakeups. With coalesce_us = 0 the thread wakes for nearly every datagram when
 * streams are many and sparse (one socket per 50 pps leg): lowest latency, but the
 * context switch dominates the CPU cost. coalesce_us > 0 caps the wakeup rate at about
 * 1e6 / coalesce_us per second, trading that much arrival latency for CPU.
 *
 * Allocation: cs_ingest_new() allocates the table and receive buffers, add_stream the
 * jitter buffer; the receive path allocates nothing.
 */
#ifndef CS_INGEST_H
#define CS_INGEST_H

#include "cs_common.h"
#include "jb.h"
#include "rtp.h"
#include "srclock.h"

/* CDEF BEGIN */
typedef struct cs_ingest cs_ingest;

typedef struct {
    uint32_t max_streams;    /* table size, 1..32767 */
    uint32_t rcvbuf_bytes;   /* SO_RCVBUF(FORCE) asked for on each socket; 0 = leave */
    uint32_t batch;          /* datagrams per recvmmsg, 1..64 */
    uint32_t max_batches;    /* recvmmsg calls per ready socket per wakeup, >= 1 */
    uint32_t max_datagram;   /* receive buffer per datagram (bytes); longer = truncated */
    uint32_t coalesce_us;    /* after a wakeup, sleep until wakeup + this before waiting
                              * again: fewer wakeups (CPU) for up to this much latency */
} cs_ingest_config;

/* Latency histogram: fine[i] counts [i, i+1) µs for i < 1000; tail[k] counts
 * [2^k, 2^(k+1)) ms for k < 11, tail[11] everything from 2048 ms up. Two are kept:
 * arrival (kernel timestamp -> after insert: includes socket-queue wait, thread wake-up
 * and coalescing) and processing (recvmmsg returned -> after insert: our code only). */
typedef struct {
    uint64_t fine[1000];
    uint64_t tail[12];
    uint64_t count;
    uint64_t sum_ns;
    uint64_t max_ns;
    uint64_t negative;       /* conversion put the kernel stamp after the insert: 0 ns */
} cs_ingest_latency;

/* Receiver-wide counters (monotonic). */
typedef struct {
    uint64_t wakeups;          /* epoll_wait returns with at least one event */
    uint64_t recvmmsg_calls;
    uint64_t datagrams;        /* datagrams read from stream sockets */
    uint64_t bytes;
    uint64_t truncated;        /* longer than max_datagram: dropped */
    uint64_t parse_errors[7];  /* by CS_RTP_ERR_* (index 0 unused) */
    uint64_t srclock_dropped;  /* DROP_* outcomes of the source locks */
    uint64_t inserted;         /* handed to cs_jb_insert */
    uint64_t unknown_socket;   /* events for removed or replaced streams */
    uint64_t no_timestamp;     /* no SO_TIMESTAMPNS cmsg: clock read after recvmmsg */
    uint64_t recv_errors;      /* recvmmsg failures other than EAGAIN */
} cs_ingest_counters;

/* Per-stream counters (monotonic, under the stream mutex). */
typedef struct {
    uint64_t datagrams;
    uint64_t bytes;
    uint64_t truncated;
    uint64_t parse_errors[7];
    uint64_t inserted;
    uint64_t outcomes[14];     /* by cs_jb_insert outcome CS_PKT_* (index 0 unused) */
    int64_t last_arrival_ns;   /* monotonic arrival of the last datagram, 0 if none */
    uint64_t rcvbuf_bytes;     /* SO_RCVBUF as the kernel reports it */
    uint64_t rcvbuf_forced;    /* 1 if SO_RCVBUFFORCE was allowed */
    cs_srclock_counters srclock;
    uint32_t srclock_state;    /* CS_SRCLOCK_* */
    uint32_t locked_ssrc;
    cs_srclock_addr locked_addr;
} cs_stream_counters;

void cs_ingest_default_config(cs_ingest_config *cfg);
cs_ingest *cs_ingest_new(const cs_ingest_config *cfg);
/* Stops the receiver if running, frees every stream (closing the owned fds). */
void cs_ingest_free(cs_ingest *ing);
/* 0 on success, -errno on failure. Idempotent. */
int cs_ingest_start(cs_ingest *ing);
int cs_ingest_stop(cs_ingest *ing);

/* Returns a stream id (>= 0) or -errno: -ENOSPC table full, -EINVAL bad config,
 * -ENOMEM jitter buffer allocation failed, or the errno of dup/epoll_ctl. */
int32_t cs_ingest_add_stream(cs_ingest *ing, int fd, const cs_jb_config *jb_cfg,
                             const cs_srclock_config *lock_cfg);
/* 0, or -ENOENT for an unknown id. After it returns the receiver never touches the fd. */
int cs_ingest_remove_stream(cs_ingest *ing, int32_t id);
int cs_ingest_rearm(cs_ingest *ing, int32_t id, int64_t now_ns);
int cs_ingest_expect_source(cs_ingest *ing, int32_t id, const cs_srclock_addr *addr);
int cs_ingest_set_paused(cs_ingest *ing, int32_t id, int paused);
/* Copies up to max DTMF events (cs_jb_take_dtmf); returns the count or -ENOENT. */
int cs_ingest_take_dtmf(cs_ingest *ing, int32_t id, cs_dtmf_event *out, int max);

/* Pull one 20 ms frame from each of n streams: frame i goes to pcm_out + i * stride and
 * infos[i]. An unknown id, or a frame longer than stride, yields zeros with
 * infos[i].samples == 0 and flag NOT_STARTED. Returns the number of frames pulled. */
int cs_ingest_pull(cs_ingest *ing, int64_t now_ns, const int32_t *ids, int n,
                   int16_t *pcm_out, int stride, cs_frame_info *infos);

/* Copy-outs; 0 or -ENOENT. None of them allocates. */
int cs_ingest_stream_stats(cs_ingest *ing, int32_t id, cs_jb_stats *out);
int cs_ingest_stream_counters(cs_ingest *ing, int32_t id, cs_stream_counters *out);
void cs_ingest_get_counters(cs_ingest *ing, cs_ingest_counters *out);
void cs_ingest_get_latency(cs_ingest *ing, cs_ingest_latency *out);
void cs_ingest_get_processing(cs_ingest *ing, cs_ingest_latency *out);
/* CPU time (ns) used by this ingest's receiver threads so far, running or exited. */
int64_t cs_ingest_thread_cpu_ns(cs_ingest *ing);
/* CDEF END */

#endif
