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

static void test_ingest_remove_and_add_under_traffic(void)
{
    cs_ingest_config cfg;
    cs_ingest_default_config(&cfg);
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

static const cs_test_case ingest_cases[] = {
    {"ingest_receive_and_pull", test_ingest_receive_and_pull},
    {"ingest_remove_and_add_under_traffic", test_ingest_remove_and_add_under_traffic},
    {"ingest_errors", test_ingest_errors},
};

const cs_test_suite cs_suite_ingest = {"ingest", ingest_cases, CS_TEST_COUNT(ingest_cases)};
