/* RTP ingest (native/src/ingest.c, ingest_streams.c) over real UDP on 127.0.0.1: the
 * receive path, removal and re-adding while a sender thread floods the sockets, and
 * the error returns. Run under ASan/UBSan (run_sanitizers.sh) and, by hand, TSan. */
#define _GNU_SOURCE
#include "cs_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "demux.h"
#include "ingest.h"

enum { STREAMS = 4, FLOOD_STREAMS = 8 };

static int64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int bound_socket(struct sockaddr_in *where)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)where, &len) != 0)
        return -1;
    return fd;
}

static void send_rtp(int tx, const struct sockaddr_in *to, uint16_t seq, uint32_t ssrc)
{
    uint8_t p[12 + 160];
    memset(p, 0xFF, sizeof p);
    p[0] = 0x80;
    p[1] = 0;
    cs_put16(p + 2, seq);
    cs_put32(p + 4, (uint32_t)seq * 160u);
    cs_put32(p + 8, ssrc);
    (void)sendto(tx, p, sizeof p, 0, (const struct sockaddr *)to, sizeof *to);
}

/* Wait (bounded) until the receiver has read `want` datagrams. */
static uint64_t wait_datagrams(cs_ingest *ing, uint64_t want)
{
    cs_ingest_counters c;
    int64_t deadline = mono_ns() + 2000000000;
    do {
        cs_ingest_get_counters(ing, &c);
        if (c.datagrams >= want)
            break;
        usleep(1000);
    } while (mono_ns() < deadline);
    return c.datagrams;
}

static void test_ingest_receive_and_pull(void)
{
    cs_ingest *ing = cs_ingest_new(NULL);
    REQUIRE(ing != NULL);
    REQUIRE(cs_ingest_start(ing) == 0);
    struct sockaddr_in to[STREAMS];
    int32_t ids[STREAMS + 1];
    for (int i = 0; i < STREAMS; i++) {
        int fd = bound_socket(&to[i]);
        REQUIRE(fd >= 0);
        ids[i] = cs_ingest_add_stream(ing, fd, NULL, NULL);
        close(fd); /* the ingest keeps its own duplicate */
        REQUIRE(ids[i] >= 0);
    }
    ids[STREAMS] = 12345; /* unknown */
    int tx = socket(AF_INET, SOCK_DGRAM, 0);
    for (uint16_t seq = 0; seq < 20; seq++)
        for (int i = 0; i < STREAMS; i++)
            send_rtp(tx, &to[i], seq, 0x100u + (uint32_t)i);
    CHECK_EQ(wait_datagrams(ing, 20 * STREAMS), 20 * STREAMS);

    cs_ingest_counters g;
    cs_ingest_get_counters(ing, &g);
    CHECK_EQ(g.inserted, 19 * STREAMS); /* one probation packet per stream */
    CHECK_EQ(g.srclock_dropped, STREAMS);
    CHECK_EQ(g.no_timestamp, 0);
    cs_stream_counters sc;
    REQUIRE(cs_ingest_stream_counters(ing, ids[0], &sc) == 0);
    CHECK_EQ(sc.datagrams, 20);
    CHECK_EQ(sc.outcomes[CS_PKT_IN_ORDER], 19);
    CHECK_EQ(sc.srclock_state, CS_SRCLOCK_LOCKED);
    CHECK_EQ(sc.locked_ssrc, 0x100);
    cs_jb_stats st;
    REQUIRE(cs_ingest_stream_stats(ing, ids[1], &st) == 0);
    CHECK_EQ(st.packets_received, 19);
    cs_ingest_latency lat;
    cs_ingest_get_latency(ing, &lat);
    CHECK_EQ(lat.count, 19 * STREAMS);

    int16_t pcm[(STREAMS + 1) * 160];
    cs_frame_info info[STREAMS + 1];
    CHECK_EQ(cs_ingest_pull(ing, mono_ns() + 200000000, ids, STREAMS + 1, pcm, 160, info),
             STREAMS);
    CHECK_EQ(info[0].samples, 160);
    CHECK_EQ(info[STREAMS].samples, 0);
    CHECK_EQ(info[STREAMS].flag, CS_FRAME_NOT_STARTED);
    CHECK(cs_ingest_thread_cpu_ns(ing) > 0);
    close(tx);
    cs_ingest_free(ing);
}

typedef struct {
    struct sockaddr_in to[FLOOD_STREAMS];
    volatile int stop;
} flood;

static void *flood_main(void *arg)
{
    flood *f = arg;
    int tx = socket(AF_INET, SOCK_DGRAM, 0);
    for (uint16_t seq = 0; !__atomic_load_n(&f->stop, __ATOMIC_RELAXED); seq++) {
        for (int i = 0; i < FLOOD_STREAMS; i++)
            send_rtp(tx, &f->to[i], seq, 7);
        if (seq % 16 == 0)
            usleep(100);
    }
    close(tx);
    return NULL;
}

static void remove_and_add_under_traffic(uint32_t backend)
{
    cs_ingest_config cfg;
    cs_ingest_default_config(&cfg);
    cfg.backend = backend;
    cfg.max_streams = FLOOD_STREAMS;
    cfg.batch = 4;
    cs_ingest *ing = cs_ingest_new(&cfg);
    REQUIRE(ing != NULL);
    flood f;
    memset(&f, 0, sizeof f);
    int fds[FLOOD_STREAMS];
    int32_t ids[FLOOD_STREAMS];
    for (int i = 0; i < FLOOD_STREAMS; i++) {
        fds[i] = bound_socket(&f.to[i]);
        REQUIRE(fds[i] >= 0);
        ids[i] = cs_ingest_add_stream(ing, fds[i], NULL, NULL);
        REQUIRE(ids[i] >= 0);
    }
    REQUIRE(cs_ingest_start(ing) == 0);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, flood_main, &f) == 0);
    int16_t pcm[FLOOD_STREAMS * 160];
    cs_frame_info info[FLOOD_STREAMS];
    for (int round = 0; round < 300; round++) {
        int i = round % FLOOD_STREAMS;
        int32_t old = ids[i];
        CHECK_EQ(cs_ingest_remove_stream(ing, old), 0);
        CHECK_EQ(cs_ingest_remove_stream(ing, old), -ENOENT);
        ids[i] = cs_ingest_add_stream(ing, fds[i], NULL, NULL);
        CHECK(ids[i] >= 0 && ids[i] != old);
        cs_ingest_pull(ing, mono_ns(), ids, FLOOD_STREAMS, pcm, 160, info);
        if (round % 50 == 0) { /* stop and restart the thread mid-traffic too */
            CHECK_EQ(cs_ingest_stop(ing), 0);
            CHECK_EQ(cs_ingest_start(ing), 0);
        }
    }
    __atomic_store_n(&f.stop, 1, __ATOMIC_RELAXED);
    pthread_join(th, NULL);
    cs_ingest_counters g;
    cs_ingest_get_counters(ing, &g);
    CHECK(g.datagrams > 0);
    CHECK_EQ(g.recv_errors, 0);
    cs_ingest_free(ing);
    for (int i = 0; i < FLOOD_STREAMS; i++)
        close(fds[i]);
}

/* default: io_uring where it works (ingest_uring's tests check that it is chosen) */
static void test_ingest_remove_and_add_under_traffic(void)
{
    remove_and_add_under_traffic(CS_INGEST_BACKEND_AUTO);
}

static void test_ingest_remove_and_add_under_traffic_epoll(void)
{
    remove_and_add_under_traffic(CS_INGEST_BACKEND_EPOLL);
}

static void test_ingest_errors(void)
{
    cs_ingest_config cfg;
    cs_ingest_default_config(&cfg);
    cfg.batch = 0;
    CHECK(cs_ingest_new(&cfg) == NULL);
    cs_ingest_default_config(&cfg);
    cfg.max_streams = 1;
    cs_ingest *ing = cs_ingest_new(&cfg);
    REQUIRE(ing != NULL);
    CHECK_EQ(cs_ingest_add_stream(ing, -1, NULL, NULL), -EBADF);
    struct sockaddr_in a;
    int fd = bound_socket(&a);
    REQUIRE(fd >= 0);
    int32_t id = cs_ingest_add_stream(ing, fd, NULL, NULL);
    CHECK(id >= 0);
    CHECK_EQ(cs_ingest_add_stream(ing, fd, NULL, NULL), -ENOSPC);
    cs_jb_config bad;
    cs_jb_default_config(&bad);
    bad.out_rate = 0;
    CHECK_EQ(cs_ingest_add_stream(ing, fd, &bad, NULL), -EINVAL);
    CHECK_EQ(cs_ingest_rearm(ing, id + 1, 0), -ENOENT);
    CHECK_EQ(cs_ingest_rearm(ing, -5, 0), -ENOENT);
    CHECK_EQ(cs_ingest_rearm(ing, id, 0), 0);
    close(fd);
    cs_ingest_free(ing); /* never started: free must still close the stream's fd */
}


/* Pushed streams (ingest_push.c): packets in from the caller's thread, pulled like the
 * rest; push into a socket stream, a removed stream or a free slot is -ENOENT; a slot
 * freed by a pushed stream can take a socket stream and vice versa. */
static void test_ingest_pushed_stream(void)
{
    cs_ingest_config cfg;
    cs_ingest_default_config(&cfg);
    cfg.max_streams = 2;
    cs_ingest *ing = cs_ingest_new(&cfg);
    REQUIRE(ing != NULL);
    int32_t id = cs_ingest_add_stream_push(ing, NULL);
    REQUIRE(id >= 0);
    uint8_t p[12 + 160];
    memset(p, 0xFF, sizeof p);
    p[0] = 0x80;
    p[1] = 0; /* PCMU */
    int64_t t0 = 1000000000;
    for (uint16_t seq = 0; seq < 10; seq++) {
        cs_put16(p + 2, seq);
        cs_put32(p + 4, (uint32_t)seq * 160u);
        cs_put32(p + 8, 0x1234);
        CHECK_EQ(cs_ingest_push(ing, id, p, sizeof p, t0 + seq * 20000000), CS_PKT_IN_ORDER);
    }
    CHECK_EQ(cs_ingest_push(ing, id, p, 5, t0), 0); /* short: counted, not inserted */
    CHECK_EQ(cs_ingest_push_payload(ing, id, 0, 10, 1600, 0x1234, 0, p + 12, 160,
                                    t0 + 10 * 20000000), CS_PKT_IN_ORDER);
    CHECK_EQ(cs_ingest_push_payload(ing, id, 128, 11, 1760, 0x1234, 0, p + 12, 160, t0),
             -EINVAL);
    int16_t pcm[160 * 2];
    cs_frame_info info[2];
    int normal = 0;
    for (int k = 0; k < 20; k++) {
        CHECK_EQ(cs_ingest_pull(ing, t0 + k * 20000000 + 10000000, &id, 1, pcm, 160, info), 1);
        normal += info[0].flag == CS_FRAME_NORMAL;
    }
    CHECK(normal >= 8);
    cs_stream_counters c;
    CHECK_EQ(cs_ingest_stream_counters(ing, id, &c), 0);
    CHECK_EQ(c.datagrams, 12u);
    CHECK_EQ(c.inserted, 11u);
    CHECK_EQ(c.parse_errors[CS_RTP_ERR_SHORT], 1u);
    struct sockaddr_in a;
    int fd = bound_socket(&a);
    REQUIRE(fd >= 0);
    int32_t sid = cs_ingest_add_stream(ing, fd, NULL, NULL);
    CHECK(sid >= 0);
    CHECK_EQ(cs_ingest_push(ing, sid, p, sizeof p, t0), -ENOENT);
    CHECK_EQ(cs_ingest_add_stream_push(ing, NULL), -ENOSPC);
    CHECK_EQ(cs_ingest_remove_stream(ing, id), 0);
    CHECK_EQ(cs_ingest_push(ing, id, p, sizeof p, t0), -ENOENT);
    int32_t id2 = cs_ingest_add_stream(ing, fd, NULL, NULL); /* the freed slot, a socket */
    CHECK(id2 >= 0);
    CHECK_EQ(cs_ingest_push(ing, id2, p, sizeof p, t0), -ENOENT);
    CHECK_EQ(cs_ingest_remove_stream(ing, id2), 0);
    int32_t id3 = cs_ingest_add_stream_push(ing, NULL); /* and back to pushed */
    CHECK(id3 >= 0);
    close(fd);
    cs_ingest_free(ing); /* frees the pushed stream's buffer, closes only real fds */
}

/* cs_ingest_set_pts: the stream's table replaced in place (same id, counters go on, PCMU
 * under its new number in order), refused with the table kept (-EOPNOTSUPP: Opus on a
 * buffer built without it), -ENOENT for a removed stream. */
static void test_ingest_set_pts(void)
{
    cs_ingest *ing = cs_ingest_new(NULL);
    REQUIRE(ing != NULL);
    int32_t id = cs_ingest_add_stream_push(ing, NULL);
    REQUIRE(id >= 0);
    uint8_t p[12 + 160];
    memset(p, 0xFF, sizeof p);
    p[0] = 0x80;
    int64_t t0 = 1000000000;
    uint16_t seq = 0;
    for (; seq < 5; seq++)
        CHECK_EQ(cs_ingest_push_payload(ing, id, 0, seq, seq * 160u, 0x1234, 0, p + 12, 160,
                                        t0 + seq * 20000000), CS_PKT_IN_ORDER);
    cs_pt_entry opus[] = {{111, CS_CODEC_OPUS, 2, 0, 48000}};
    cs_pt_entry renumbered[] = {{96, CS_CODEC_PCMU, 1, 0, 8000},
                                {100, CS_CODEC_TELEPHONE_EVENT, 1, 0, 8000}};
    CHECK_EQ(cs_ingest_set_pts(ing, id, opus, 1), -EOPNOTSUPP);
    CHECK_EQ(cs_ingest_set_pts(ing, id, renumbered, 2), 0);
    for (; seq < 10; seq++)
        CHECK_EQ(cs_ingest_push_payload(ing, id, 96, seq, seq * 160u, 0x1234, 0, p + 12, 160,
                                        t0 + seq * 20000000), CS_PKT_IN_ORDER);
    CHECK_EQ(cs_ingest_push_payload(ing, id, 0, seq, seq * 160u, 0x1234, 0, p + 12, 160,
                                    t0 + seq * 20000000), CS_PKT_UNKNOWN_PT);
    cs_jb_stats st;
    REQUIRE(cs_ingest_stream_stats(ing, id, &st) == 0);
    CHECK_EQ(st.packets_received, 11u);
    CHECK_EQ(st.packets_in_order, 10u);
    CHECK_EQ(st.payload_table_updates, 1u);
    CHECK_EQ(st.restarts, 0u);
    CHECK_EQ(cs_ingest_remove_stream(ing, id), 0);
    CHECK_EQ(cs_ingest_set_pts(ing, id, renumbered, 2), -ENOENT);
    cs_ingest_free(ing);
}

/* ---- the shared-port demux table (demux.c) ------------------------------------------ */

static cs_srclock_addr v4addr(uint8_t last, uint16_t port)
{
    cs_srclock_addr a;
    memset(&a, 0, sizeof a);
    a.family = 4;
    a.port = port;
    a.addr[0] = 192;
    a.addr[1] = 0;
    a.addr[2] = 2;
    a.addr[3] = last;
    return a;
}

static cs_demux_key addr_key(uint16_t sock, uint8_t last, uint16_t port)
{
    cs_srclock_addr a = v4addr(last, port);
    cs_demux_key k;
    cs_demux_key_make(&k, sock, CS_DEMUX_ADDR, &a, 0);
    return k;
}

static void test_demux_insert_find_remove(void)
{
    cs_demux d;
    REQUIRE(cs_demux_init(&d, 16, 1) == 0);
    cs_demux_key a = addr_key(0, 1, 4000), b = addr_key(1, 1, 4000), c = addr_key(0, 1, 4002);
    CHECK_EQ(cs_demux_find(&d, &a), -1);
    CHECK_EQ(cs_demux_insert(&d, &a, 10), 0);
    CHECK_EQ(cs_demux_insert(&d, &b, 11), 0); /* same source on another socket */
    CHECK_EQ(cs_demux_insert(&d, &c, 12), 0);
    CHECK_EQ(cs_demux_insert(&d, &a, 13), -EEXIST);
    CHECK_EQ(cs_demux_insert(&d, &a, -1), -EINVAL);
    CHECK_EQ(cs_demux_find(&d, &a), 10);
    CHECK_EQ(cs_demux_find(&d, &b), 11);
    CHECK_EQ(cs_demux_find(&d, &c), 12);
    CHECK_EQ(d.count, 3);
    CHECK_EQ(d.kinds[CS_DEMUX_ADDR], 3);
    CHECK_EQ(cs_demux_remove(&d, &a), 0);
    CHECK_EQ(cs_demux_remove(&d, &a), -ENOENT);
    CHECK_EQ(cs_demux_find(&d, &a), -1);
    CHECK_EQ(cs_demux_find(&d, &c), 12);
    CHECK_EQ(d.count, 2);
    cs_demux_free(&d);
    CHECK(cs_demux_init(&d, 0, 1) == -EINVAL);
}

static void test_demux_full(void)
{
    cs_demux d;
    REQUIRE(cs_demux_init(&d, 5, 7) == 0);
    CHECK(d.mask + 1 >= 2 * 5);
    for (uint16_t i = 0; i < 5; i++) {
        cs_demux_key k = addr_key(0, 9, (uint16_t)(5000 + i));
        CHECK_EQ(cs_demux_insert(&d, &k, i), 0);
    }
    cs_demux_key extra = addr_key(0, 9, 6000), first = addr_key(0, 9, 5000);
    CHECK_EQ(cs_demux_insert(&d, &extra, 99), -ENOSPC);
    CHECK_EQ(cs_demux_find(&d, &extra), -1);
    CHECK_EQ(cs_demux_remove(&d, &first), 0);
    CHECK_EQ(cs_demux_insert(&d, &extra, 99), 0);
    CHECK_EQ(cs_demux_find(&d, &extra), 99);
    cs_demux_free(&d);
}

/* Keys that all start probing at one slot (found by search; the seed is fixed), then
 * removal from the front, the middle and the end of the run, wrapping past the end. */
static void test_demux_collisions(void)
{
    cs_demux d;
    REQUIRE(cs_demux_init(&d, 32, 3) == 0);
    enum { RUN = 6 };
    cs_demux_key run[RUN];
    int n = 0;
    for (uint32_t port = 1; port < 65536 && n < RUN; port++) {
        cs_demux_key k = addr_key(2, 7, (uint16_t)port);
        if (cs_demux_home(&d, &k) == d.mask) /* the last slot: the run wraps to slot 0 */
            run[n++] = k;
    }
    REQUIRE(n == RUN);
    for (int i = 0; i < RUN; i++)
        CHECK_EQ(cs_demux_insert(&d, &run[i], 100 + i), 0);
    for (int i = 0; i < RUN; i++)
        CHECK_EQ(cs_demux_find(&d, &run[i]), 100 + i);
    CHECK_EQ(cs_demux_remove(&d, &run[0]), 0); /* front of the run */
    CHECK_EQ(cs_demux_remove(&d, &run[3]), 0); /* middle */
    CHECK_EQ(cs_demux_remove(&d, &run[RUN - 1]), 0); /* end */
    for (int i = 0; i < RUN; i++)
        CHECK_EQ(cs_demux_find(&d, &run[i]), (i == 0 || i == 3 || i == RUN - 1) ? -1 : 100 + i);
    CHECK_EQ(cs_demux_insert(&d, &run[3], 7), 0);
    CHECK_EQ(cs_demux_find(&d, &run[3]), 7);
    cs_demux_free(&d);
}

/* Random inserts and removes against a reference array: every key is found exactly when
 * the reference holds it, with its value, and the count agrees. */
static void test_demux_random_against_reference(void)
{
    enum { UNIVERSE = 96, MAX_KEYS = 48 };
    cs_demux d;
    REQUIRE(cs_demux_init(&d, MAX_KEYS, 11) == 0);
    int32_t ref[UNIVERSE];
    uint32_t held = 0, rng = 12345;
    for (int i = 0; i < UNIVERSE; i++)
        ref[i] = -1;
    for (int step = 0; step < 40000; step++) {
        uint32_t r = cs_test_rng(&rng);
        int i = (int)(r % UNIVERSE);
        cs_demux_key k = addr_key(0, (uint8_t)(i % 3), (uint16_t)(7000 + i));
        if ((r >> 8) & 1) {
            int rc = cs_demux_insert(&d, &k, step);
            int want = ref[i] >= 0 ? -EEXIST : held >= MAX_KEYS ? -ENOSPC : 0;
            CHECK_EQ(rc, want);
            if (rc == 0) {
                ref[i] = step;
                held++;
            }
        } else {
            CHECK_EQ(cs_demux_remove(&d, &k), ref[i] >= 0 ? 0 : -ENOENT);
            if (ref[i] >= 0)
                held--;
            ref[i] = -1;
        }
        if (step % 997 == 0) {
            for (int j = 0; j < UNIVERSE; j++) {
                cs_demux_key q = addr_key(0, (uint8_t)(j % 3), (uint16_t)(7000 + j));
                CHECK_EQ(cs_demux_find(&d, &q), ref[j]);
            }
        }
    }
    CHECK_EQ(d.count, held);
    cs_demux_free(&d);
}

static void test_demux_lookup_most_specific_first(void)
{
    cs_demux d;
    REQUIRE(cs_demux_init(&d, 8, 5) == 0);
    cs_srclock_addr src = v4addr(1, 4000), other = v4addr(2, 4000);
    cs_demux_key k;
    cs_demux_key_make(&k, 0, CS_DEMUX_SSRC, NULL, 0xAA);
    CHECK_EQ(cs_demux_insert(&d, &k, 3), 0);
    CHECK_EQ(cs_demux_lookup(&d, 0, &other, 0xAA), 3); /* learning by SSRC */
    CHECK_EQ(cs_demux_lookup(&d, 1, &other, 0xAA), -1); /* another socket */
    cs_demux_key_make(&k, 0, CS_DEMUX_ADDR, &src, 0);
    CHECK_EQ(cs_demux_insert(&d, &k, 2), 0);
    CHECK_EQ(cs_demux_lookup(&d, 0, &src, 0xAA), 2); /* the address wins over the SSRC */
    cs_demux_key_make(&k, 0, CS_DEMUX_ADDR_SSRC, &src, 0xAA);
    CHECK_EQ(cs_demux_insert(&d, &k, 1), 0);
    CHECK_EQ(cs_demux_lookup(&d, 0, &src, 0xAA), 1); /* address and SSRC win over both */
    CHECK_EQ(cs_demux_lookup(&d, 0, &src, 0xBB), 2);
    CHECK_EQ(cs_demux_lookup(&d, 0, &other, 0xBB), -1);
    cs_demux_free(&d);
}

/* Follow keys are shared: found only while one leg claims them, and the last claimant
 * is known again when the others give their claims up (in any order). */
static void test_demux_follow_claims(void)
{
    cs_demux d;
    REQUIRE(cs_demux_init(&d, 8, 9) == 0);
    cs_srclock_addr src = v4addr(1, 4000), other = v4addr(2, 4000);
    cs_demux_key f;
    cs_demux_key_make(&f, 0, CS_DEMUX_FOLLOW, &src, 0xAA);
    CHECK_EQ(f.ssrc, 0); /* any SSRC */
    CHECK_EQ(cs_demux_insert(&d, &f, 1), -EINVAL); /* claimed, never owned */
    CHECK_EQ(cs_demux_claim(&d, &f, 5), 0);
    CHECK_EQ(cs_demux_lookup(&d, 0, &src, 0x77), 5); /* a new SSRC from its source */
    CHECK_EQ(cs_demux_lookup(&d, 0, &other, 0x77), -1);
    CHECK_EQ(cs_demux_claim(&d, &f, 9), 0);
    CHECK_EQ(cs_demux_claim(&d, &f, 12), 0);
    CHECK_EQ(d.count, 1);
    CHECK_EQ(cs_demux_lookup(&d, 0, &src, 0x77), -1); /* three legs: whose? */
    CHECK_EQ(cs_demux_remove(&d, &f), -ENOENT);
    CHECK_EQ(cs_demux_unclaim(&d, &f, 5), 0);
    CHECK_EQ(cs_demux_find(&d, &f), -1);
    CHECK_EQ(cs_demux_unclaim(&d, &f, 12), 0);
    CHECK_EQ(cs_demux_find(&d, &f), 9); /* the one left */
    cs_demux_key k;
    cs_demux_key_make(&k, 0, CS_DEMUX_ADDR_SSRC, &src, 0x77);
    CHECK_EQ(cs_demux_insert(&d, &k, 3), 0);
    CHECK_EQ(cs_demux_lookup(&d, 0, &src, 0x77), 3); /* an exact key wins */
    CHECK_EQ(cs_demux_unclaim(&d, &f, 9), 0);
    CHECK_EQ(cs_demux_unclaim(&d, &f, 9), -ENOENT);
    CHECK_EQ(cs_demux_lookup(&d, 0, &src, 0x78), -1);
    CHECK_EQ(d.count, 1);
    CHECK_EQ(d.kinds[CS_DEMUX_FOLLOW], 0);
    cs_demux_free(&d);
}

static const cs_test_case ingest_cases[] = {
    {"ingest_receive_and_pull", test_ingest_receive_and_pull},
    {"ingest_remove_and_add_under_traffic", test_ingest_remove_and_add_under_traffic},
    {"ingest_remove_and_add_under_traffic_epoll",
     test_ingest_remove_and_add_under_traffic_epoll},
    {"ingest_errors", test_ingest_errors},
    {"ingest_pushed_stream", test_ingest_pushed_stream},
    {"ingest_set_pts", test_ingest_set_pts},
    {"demux_insert_find_remove", test_demux_insert_find_remove},
    {"demux_full", test_demux_full},
    {"demux_collisions", test_demux_collisions},
    {"demux_random_against_reference", test_demux_random_against_reference},
    {"demux_lookup_most_specific_first", test_demux_lookup_most_specific_first},
    {"demux_follow_claims", test_demux_follow_claims},
};

const cs_test_suite cs_suite_ingest = {"ingest", ingest_cases, CS_TEST_COUNT(ingest_cases)};
