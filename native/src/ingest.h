/* RTP receive path: one dedicated thread, epoll over UDP sockets, recvmmsg batches,
 * kernel receive timestamps, RTP parse, source lock, jitter-buffer insert.
 *
 * Two kinds of legs, mixed freely in one cs_ingest:
 *   - per-leg socket (cs_ingest_add_stream): the leg owns a UDP socket; everything that
 *     arrives on it is the leg's (the source lock still rejects foreign sources);
 *   - shared socket (cs_ingest_add_socket + cs_ingest_add_stream_shared): many legs on
 *     one socket, told apart in C by where each datagram comes from. This is how a SIP
 *     bridge advertises few ports for many calls, and how recvmmsg gets real batches:
 *     a per-leg socket at 50 pps rarely holds more than one datagram per wakeup.
 *
 * Demultiplexing rule on a shared socket (demux.h; first match wins):
 *   1. (source address:port, SSRC)  legs that share one source address, told apart by
 *                                   the SSRC given when they were added;
 *   2. (source address:port)        a leg whose source address is unique to it;
 *   3. (SSRC) from any address      a leg still learning its source (no address with a
 *                                   port was given), matched by its configured SSRC;
 *   4. (source address:port), any SSRC, where one leg keyed by SSRC has locked its
 *                                   source: that source changed its SSRC (a transfer
 *                                   or a re-origination on the same 5-tuple). Only
 *                                   while exactly one such leg locked that address:
 *                                   with two (a SIPREC pair from one port) a new SSRC
 *                                   cannot be told to be either's, and is unmatched.
 *   Anything else is counted (`unmatched`, globally and per socket) and dropped.
 * A leg's keys: its expected address if it has a port (kind 1 if an SSRC was given, else
 * kind 2); the address its source lock locked onto, once that differs from the expected
 * one (same kind); a leg with an SSRC, once locked, a claim on rule 4 for its locked
 * address; and kind 3 while it has an SSRC, no expected address with a port, and its
 * lock is learning or re-armed. So a leg learning by SSRC stops matching by SSRC once
 * its lock has locked: a foreign address sending its SSRC is then unmatched, and inside
 * the leg the source lock still rejects every source but the locked one (RTP Bleed). A
 * leg needs an expected address with a port, or an SSRC (else -EINVAL); adding a key
 * another leg holds fails with -EEXIST. SSRC 0 means "no SSRC". An SSRC change from a leg's locked source
 * reaches the leg by rule 2 or 4; its source lock takes the new SSRC once the old one
 * has been quiet for ssrc_quiet_ns (an SSRC interleaving with the live one is dropped as
 * injection), and a leg keyed by SSRC then takes it as its own and is re-keyed (counted,
 * demux_ssrc_follows). A new SSRC from any other address stays unmatched. Datagrams that
 * do not parse as RTP are counted on the socket, not on a leg.
 *
 * Threads. cs_ingest_start() spawns one receiver thread (pthread, signals blocked,
 * optionally pinned to one CPU). Under the epoll backend it waits in epoll_wait (level-triggered) on every
 * per-leg socket, every shared socket and an eventfd used to stop it, and drains each
 * ready socket with recvmmsg (at most `max_batches` batches per socket per wakeup, so a
 * flooded socket cannot starve the others). Every other function is called from the
 * control side (Python); they may run while the receiver runs.
 *
 * Locking, in this order: table mutex (add/remove, control side only) -> shared-socket
 * mutex (held by the receiver while it drains that socket) -> stream mutex (jitter
 * buffer, source lock, counters) -> demux mutex (the table of keys). Per batch of a
 * shared socket the receiver takes the demux mutex once to look up every datagram, then
 * each stream mutex once per run of consecutive datagrams of that stream; the source
 * lock's learning re-keys the leg under stream + demux mutex. cs_ingest_pull() holds one
 * stream mutex at a time. Removal is safe against the receiver: the receiver re-checks
 * slot state and generation under the slot's mutex before touching a socket or a
 * stream, so a stale epoll event or lookup is counted and ignored. Slots live for the
 * whole cs_ingest.
 *
 * fd ownership. cs_ingest_add_stream() and cs_ingest_add_socket() dup() the caller's
 * bound non-blocking UDP socket and own the duplicate (closed by remove or free); the
 * caller keeps its own fd and may close it at any time. The port stays bound until the
 * stream or socket is removed.
 *
 * Clocks. SO_TIMESTAMPNS gives each datagram a CLOCK_REALTIME kernel receive time. Per
 * wakeup the receiver samples (MONOTONIC, REALTIME, MONOTONIC) and converts the kernel
 * stamps into CLOCK_MONOTONIC (Python's time.monotonic_ns()), which is the now_ns handed
 * to cs_jb_insert: arrival time includes socket-queue wait. The clock is read once when
 * recvmmsg returns and once after each insert (per-leg socket) or after each run of one
 * stream's datagrams (shared socket), when they can be pulled. Latency histograms:
 * kernel timestamp -> that stamp, and recvmmsg return -> that stamp.
 *
 * Wakeups and pacing. With coalesce_us = 0 the thread wakes whenever a socket is ready:
 * lowest latency, but when datagrams are sparse it wakes per datagram or two, and the
 * wakeup costs more than the datagram. coalesce_us > 0 paces it: after a wakeup it waits
 * on the stop eventfd alone (a stop is still seen at once) until the next multiple of
 * coalesce_us on CLOCK_MONOTONIC (at most coalesce_us after the wakeup) before waiting
 * on the sockets again, so datagrams queue up and are read in batches, for up to that
 * much more arrival latency (never while a socket was left with datagrams after
 * max_batches full batches: then it reads on). The wakeups are on that grid because the
 * kernel's periodic tick is (at multiples of its period, 4 ms at HZ=250, since boot):
 * when the tick period is a multiple of coalesce_us, every tick that falls in a paced
 * cycle fires with the wakeup, before the batch is read. Paced at wakeup + coalesce_us
 * instead, the phase drifted and a tick landed inside a batch now and then, and every
 * datagram after it waited for it: on the 2-vCPU VM this was built on a tick costs the
 * running thread 30-150 us (a bare spin loop loses that at each 4 ms boundary): that was
 * the paced shared receiver's recvmmsg -> buffer p99.9 of 63-370 us (docs/operations.md). A timed sleep is not free
 * (measured on the 2-vCPU KVM guest this was built on: 18-28 us of thread CPU per sleep,
 * against ~2.6 us per socket-driven wakeup with its recvmmsg, ~0.55 wakeups per datagram;
 * not the timer's cost but the idle vCPU's halt and wakeup, which the woken thread is
 * charged with: an eventfd woken from the other CPU costs the same, 14 us with the CPU
 * kept from halting; `bench ingest` measures it beside every receiver, the stall probe's
 * wake_cpu_us, stall_probe.h), so it
 * is only taken while the rate of the last 20 ms predicts at least coalesce_min
 * datagrams per coalesce_us (default 16, about the break-even there; hosts with cheap
 * timers want less): at low rates the thread simply waits for the next datagram.
 * The floor per datagram on one socket per leg is the kernel's receive itself: on that
 * VM, loaded, a bare epoll + recvmmsg loop over 400 paced sockets took ~1.5 us of CPU
 * per datagram and io_uring multishot recvmsg (provided buffers, DEFER_TASKRUN) ~1.4 us;
 * one shared socket read in batches costs less (~0.8 us of kernel work per datagram at
 * ~25 per recvmmsg).
 *
 * Backends (cfg.backend, cs_ingest_backend). The epoll loop above, or io_uring
 * (ingest_uring.c): every socket, per-leg and shared, has one multishot recvmsg drawing
 * from one provided-buffer ring, every leg's datagrams complete into one CQ, and the
 * thread reaps them in batches, one io_uring_enter per batch, then runs the same
 * per-batch code (kernel stamps, SRTP, parse, demux, source lock, insert). The kernel
 * receive timestamp is kept (a cmsg in the provided buffer). With coalesce_us the
 * io_uring thread waits for the datagrams it expects in coalesce_us, or that long. AUTO
 * (default) probes io_uring in cs_ingest_new and takes epoll when it fails (the reason
 * is kept); the ring itself is set up by each start, in the thread (SINGLE_ISSUER), and
 * a failure there falls back to epoll too. Under io_uring, add/remove go through the
 * thread: an add pokes it to arm the socket, a removal waits until its request was
 * cancelled, so the port is free when remove returns (the wait: table mutex -> the
 * command mutex; the thread takes the command mutex alone, never with a slot's).
 *
 * Allocation: cs_ingest_new() allocates the tables and receive buffers, add_stream the
 * jitter buffer; the receive path allocates nothing.
 */
#ifndef CS_INGEST_H
#define CS_INGEST_H

#include "cs_common.h"
#include "jb.h"
#include "rtp.h"
#include "srclock.h"
#include "srtp_rx.h"

/* CDEF BEGIN */
typedef struct cs_ingest cs_ingest;

typedef struct {
    uint32_t max_streams;    /* table size, 1..32767 */
    uint32_t rcvbuf_bytes;   /* SO_RCVBUF(FORCE) asked for on each socket; 0 = leave */
    uint32_t batch;          /* datagrams per recvmmsg, 1..64 */
    uint32_t max_batches;    /* recvmmsg calls per ready socket per wakeup, >= 1 */
    uint32_t max_datagram;   /* receive buffer per datagram (bytes); longer = truncated */
    uint32_t coalesce_us;    /* after a wakeup, sleep until the next multiple of this
                              * (CLOCK_MONOTONIC, <= this later) before waiting again:
                              * fewer wakeups (CPU) for up to this much latency */
    uint32_t coalesce_min;   /* ... only while >= this many datagrams are expected in
                              * coalesce_us at the recent rate (0: always sleep) */
    uint32_t max_sockets;    /* shared sockets, 0..256 */
    int32_t cpu;             /* pin the receiver thread to this CPU; -1: no pinning */
    int32_t rt_priority;     /* 1..99: run the receiver thread SCHED_FIFO at this
                              * priority (needs CAP_SYS_NICE or RLIMIT_RTPRIO; see
                              * cs_ingest_sched); 0: normal scheduling */
    uint32_t backend;        /* CS_INGEST_BACKEND_*: AUTO (io_uring when its setup works,
                              * else epoll), EPOLL, URING (asked for; still falls back to
                              * epoll when refused: see cs_ingest_backend) */
    uint32_t uring_buffers;  /* io_uring: provided receive buffers, a power of two
                              * 1..32768 (0: 1024); too few only costs re-arms (ENOBUFS) */
    uint32_t uring_setup;    /* io_uring_setup flags (IORING_SETUP_*); 0: SINGLE_ISSUER |
                              * DEFER_TASKRUN. CQSIZE and R_DISABLED are always added */
    int32_t uring_refuse;    /* > 0: act as if io_uring_setup failed with this errno (tests
                              * of the fallback); 0: off */
    uint32_t discard;        /* 1: the kernel-receive floor of `bench ingest` (its *_bare
                              * receivers): every datagram is received as usual and counted
                              * (datagrams, bytes; a per-leg socket's also in its stream),
                              * then dropped: no parse, source lock, insert or latency
                              * sample. 0: off (the bridge never sets it) */
} cs_ingest_config;

enum {
    CS_INGEST_BACKEND_AUTO = 0,
    CS_INGEST_BACKEND_EPOLL = 1,
    CS_INGEST_BACKEND_URING = 2
};

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
    uint64_t unmatched;        /* shared sockets: no leg matched the datagram's source */
    uint64_t demux_conflicts;  /* a learned source's key was held by another leg */
    uint64_t demux_ssrc_follows; /* shared legs keyed by SSRC that took a new SSRC from
                                  * their locked source (re-keyed, no re-INVITE) */
    uint64_t paced_sleeps;     /* coalescing sleeps taken */
    /* SRTP legs (cs_ingest_set_srtp), summed over streams; each dropped, never inserted */
    uint64_t srtp_auth_failed; /* tag or MKI mismatch: tampered, foreign or old key */
    uint64_t srtp_replayed;    /* index seen before or older than the replay window */
    uint64_t srtp_malformed;   /* not RTP, or too short for header + MKI + tag */
    uint64_t srtp_ssrc_limit;  /* authentic, but a new SSRC past CS_SRTP_MAX_SSRCS per key */
    uint64_t srtcp_ignored;    /* RTCP-multiplexed (SRTCP) datagrams: not needed */
    uint64_t stream_lock_waits; /* the receiver found a stream's mutex held (a pull or a
                                 * control call) and waited for it */
    /* io_uring backend (ingest_uring.c); zero under epoll */
    uint64_t uring_enters;     /* io_uring_enter calls (one per reaped batch) */
    uint64_t uring_cqes;       /* completions reaped */
    uint64_t uring_arms;       /* multishot recvmsg requests submitted (first + re-arms) */
    uint64_t uring_rearms;     /* a multishot recv ended (no CQE_F_MORE) and was re-armed */
    uint64_t uring_enobufs;    /* it ended because the buffer ring was empty */
    uint64_t uring_arm_errors; /* a request ended with an error other than ENOBUFS */
    uint64_t uring_cancels;    /* requests cancelled: leg removed, or shutdown */
} cs_ingest_counters;

/* Per shared socket (monotonic). Datagrams that reach a leg are also counted there. */
typedef struct {
    uint64_t datagrams;
    uint64_t bytes;
    uint64_t recvmmsg_calls;
    uint64_t truncated;
    uint64_t parse_errors[7];
    uint64_t unmatched;
    uint64_t legs;             /* legs on the socket now */
    uint64_t rcvbuf_bytes;
    uint64_t rcvbuf_forced;
} cs_socket_counters;

/* Per-stream counters (monotonic, under the stream mutex). */
typedef struct {
    /* bumped by every datagram: first (one cache line with outcomes[1..2]) */
    uint64_t datagrams;
    uint64_t bytes;
    uint64_t inserted;
    int64_t last_arrival_ns;   /* monotonic arrival of the last datagram, 0 if none */
    int64_t first_arrival_ns;  /* monotonic arrival of the first datagram, 0 if none */
    uint64_t outcomes[14];     /* by cs_jb_insert outcome CS_PKT_* (index 0 unused) */
    uint64_t truncated;
    uint64_t parse_errors[7];
    uint64_t rcvbuf_bytes;     /* SO_RCVBUF as the kernel reports it */
    uint64_t rcvbuf_forced;    /* 1 if SO_RCVBUFFORCE was allowed */
    cs_srclock_counters srclock;
    uint32_t srclock_state;    /* CS_SRCLOCK_* */
    uint32_t locked_ssrc;
    cs_srclock_addr locked_addr;
    uint32_t srtp_suite;       /* CS_SRTP_*: 0 = plain RTP */
    uint64_t srtp_ok;          /* authenticated and decrypted */
    uint64_t srtp_auth_failed;
    uint64_t srtp_replayed;
    uint64_t srtp_malformed;
    uint64_t srtp_ssrc_limit;
    uint64_t srtcp_ignored;
    uint64_t srtp_rekeys;      /* new keys installed after the first */
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

/* Shared sockets. add: a socket id (>= 0) or -errno (-ENOSPC: max_sockets in use).
 * remove: 0, -ENOENT, or -EBUSY while legs are on it. */
int32_t cs_ingest_add_socket(cs_ingest *ing, int fd);
int cs_ingest_remove_socket(cs_ingest *ing, int32_t socket_id);
/* A leg on a shared socket: expected = where its media comes from (NULL: learn it by
 * SSRC; port 0: host only, learned by SSRC), ssrc = tie-breaker / learning key (0: none).
 * Returns a stream id (same id space and calls as cs_ingest_add_stream) or -errno:
 * -ENOENT unknown socket, -EINVAL neither address with port nor SSRC, -EEXIST a key is
 * taken by another leg, -ENOSPC, -ENOMEM. */
int32_t cs_ingest_add_stream_shared(cs_ingest *ing, int32_t socket_id,
                                    const cs_srclock_addr *expected, uint32_t ssrc,
                                    const cs_jb_config *jb_cfg,
                                    const cs_srclock_config *lock_cfg);
int cs_ingest_socket_counters(cs_ingest *ing, int32_t socket_id, cs_socket_counters *out);

/* Pushed streams (ingest_push.c): no socket; an adapter in the media process hands each
 * packet in from its own thread (WebRTC after SRTP, media WebSockets, AudioSocket). Same
 * id space, pull, stats and counters as socket streams; no source lock. add: a stream id
 * or -errno (-EINVAL bad config, -ENOSPC table full). push: the cs_jb_insert outcome
 * (> 0), 0 when the datagram is not RTP (counted in parse_errors), -ENOENT when id is not
 * a live pushed stream. push_payload inserts a payload with header fields given directly
 * (transports that carry no RTP: timestamps derived from the stream's own counters);
 * -EINVAL for a payload type above 127. */
int32_t cs_ingest_add_stream_push(cs_ingest *ing, const cs_jb_config *jb_cfg);
int cs_ingest_push(cs_ingest *ing, int32_t id, const uint8_t *data, size_t len,
                   int64_t arrival_ns);
int cs_ingest_push_payload(cs_ingest *ing, int32_t id, uint8_t payload_type, uint16_t seq,
                           uint32_t ts, uint32_t ssrc, int marker, const uint8_t *payload,
                           size_t len, int64_t arrival_ns);
/* A telephone-event payload (RFC 4733, 4+ bytes) at RTP time ts of the given clock, for
 * transports that report digits as text: to the leg's DTMF tracker, outside the RTP
 * sequence state of its audio. CS_PKT_DTMF, CS_PKT_PAUSED, CS_PKT_BAD_PAYLOAD, -ENOENT. */
int cs_ingest_push_event(cs_ingest *ing, int32_t id, const uint8_t *payload, size_t len,
                         uint32_t ts, uint32_t clock_rate, int64_t arrival_ns);
int cs_ingest_rearm(cs_ingest *ing, int32_t id, int64_t now_ns);
/* On a shared leg this also re-keys its demux entry (-EEXIST: held by another leg). */
int cs_ingest_expect_source(cs_ingest *ing, int32_t id, const cs_srclock_addr *addr);
/* A shared leg's SSRC from new signalling (a re-INVITE's a=ssrc; 0: none), re-keyed in
 * place: the stream, its jitter buffer, source lock, SRTP context (per-SSRC index and
 * replay state) and counters are kept, so a re-INVITE naming the SSRC the leg already
 * followed, or announcing the next one, costs nothing. 0, -ENOENT, -EOPNOTSUPP (not a
 * shared leg), -EINVAL (no port in its expected source and ssrc 0), -EEXIST (another
 * leg holds the new key: the old one is kept). */
int cs_ingest_set_ssrc(cs_ingest *ing, int32_t id, uint32_t ssrc);
/* A leg's payload-type table from new signalling (a re-INVITE that renumbers PCMU, adds
 * telephone-event, ...), replaced in place in its jitter buffer (cs_jb_set_pts): stream,
 * source lock, demux keys, SRTP state and counters kept. Any kind of leg. 0, -ENOENT, or
 * cs_jb_set_pts's -EINVAL / -EOPNOTSUPP / -EBUSY (nothing changed: the caller re-creates
 * the stream if it must have the table). */
int cs_ingest_set_pts(cs_ingest *ing, int32_t id, const cs_pt_entry *pts, uint32_t n);
int cs_ingest_set_paused(cs_ingest *ing, int32_t id, int paused);
/* SRTP on a socket leg (SDES, RFC 4568): key_salt as the a=crypto line's inline key,
 * suite CS_SRTP_* (CS_SRTP_NONE: plain RTP again, key ignored). From then on every
 * datagram of the leg is authenticated, replay-checked and decrypted in place before it
 * is parsed (per-leg socket) or before its payload is looked at (shared socket, where
 * the clear header's address and SSRC pick the leg first); failures are counted per
 * stream and globally and dropped. RTCP-multiplexed datagrams are dropped as
 * srtcp_ignored. The leg's context is allocated on its first key and kept by the slot;
 * the receive path allocates nothing. Returns 1 (new key), 0 (same key: ROC and window
 * kept), -ENOENT, -EOPNOTSUPP (pushed stream: its adapter decrypts), -EINVAL, -ENOMEM.
 * Known gap: on a shared socket an SRTP packet with the padding bit set fails the
 * header parse before the leg is known (counted as a padding parse error). */
int cs_ingest_set_srtp(cs_ingest *ing, int32_t id, int suite, const uint8_t *key_salt,
                       size_t len, const uint8_t *mki, size_t mki_len);
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
/* The receiver thread's scheduling: 1 SCHED_FIFO at cfg.rt_priority, 0 normal (not
 * asked, or not started), -errno when asked for and refused (it runs normally). */
int cs_ingest_sched(cs_ingest *ing);
/* CPU time (ns) used by this ingest's receiver threads so far, running or exited. */
int64_t cs_ingest_thread_cpu_ns(cs_ingest *ing);
/* The receive backend in use (CS_INGEST_BACKEND_EPOLL or _URING) and, into reason
 * (len bytes, NUL-terminated), why it was chosen: set by cs_ingest_new (io_uring probed
 * when asked for or auto) and again by cs_ingest_start (the ring is set up per start;
 * if that fails the thread runs on epoll). */
int cs_ingest_backend(cs_ingest *ing, char *reason, size_t len);
/* CDEF END */

#endif
