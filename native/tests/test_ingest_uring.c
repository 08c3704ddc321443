/* The receive backends (native/src/ingest_uring.c and the epoll loop in ingest.c) over
 * real UDP on 127.0.0.1: io_uring is chosen where it works (and the test fails, naming
 * why, where it was not), both backends deliver every datagram of many legs in order,
 * a removed leg's port is free when remove returns, a two-buffer ring runs dry
 * (ENOBUFS: counted, re-armed, nothing lost), and a refused io_uring falls back to
 * epoll. Run under ASan/UBSan by run_sanitizers.sh. */
#define _GNU_SOURCE
#include "cs_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ingest.h"

enum { LEGS = 16, PACKETS = 50 };

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int bound_at(struct sockaddr_in *where, uint16_t port)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)where, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
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

static uint64_t wait_datagrams(cs_ingest *ing, uint64_t want)
{
    cs_ingest_counters c;
    int64_t deadline = now_ns() + 3000000000LL;
    do {
        cs_ingest_get_counters(ing, &c);
        if (c.datagrams >= want)
            break;
        usleep(1000);
    } while (now_ns() < deadline);
    return c.datagrams;
}

/* A new ingest on the backend asked for; fails the test (with the reason) if another
 * backend was chosen. */
static cs_ingest *open_backend(cs_ingest_config *cfg, uint32_t backend)
{
    cfg->backend = backend;
    cs_ingest *ing = cs_ingest_new(cfg);
    if (!ing)
        return NULL;
    char why[256];
    int got = cs_ingest_backend(ing, why, sizeof why);
    if (got != (int)backend) {
        fprintf(stderr, "  asked for backend %u, got %d: %s\n", backend, got, why);
        CHECK_EQ(got, backend);
        cs_ingest_free(ing);
        return NULL;
    }
    return ing;
}

static void test_uring_chosen_by_default(void)
{
    cs_ingest *ing = cs_ingest_new(NULL);
    REQUIRE(ing != NULL);
    char why[256];
    int got = cs_ingest_backend(ing, why, sizeof why);
    if (got != CS_INGEST_BACKEND_URING)
        fprintf(stderr, "  io_uring not chosen on this host: %s\n", why);
    CHECK_EQ(got, CS_INGEST_BACKEND_URING);
    REQUIRE(cs_ingest_start(ing) == 0);
    CHECK_EQ(cs_ingest_backend(ing, why, sizeof why), got); /* the ring set up at start */
    cs_ingest_free(ing);
}

/* LEGS legs, PACKETS each, interleaved: every leg gets all of them, in order; then one
 * leg is removed and its port can be bound again at once. */
static void receive_in_order(uint32_t backend)
{
    cs_ingest_config cfg;
    cs_ingest_default_config(&cfg);
    cfg.max_streams = LEGS;
    cs_ingest *ing = open_backend(&cfg, backend);
    REQUIRE(ing != NULL);
    struct sockaddr_in to[LEGS];
    int32_t ids[LEGS];
    for (int i = 0; i < LEGS; i++) {
        int fd = bound_at(&to[i], 0);
        REQUIRE(fd >= 0);
        ids[i] = cs_ingest_add_stream(ing, fd, NULL, NULL);
        close(fd);
        REQUIRE(ids[i] >= 0);
        if (i == LEGS / 2)
            REQUIRE(cs_ingest_start(ing) == 0); /* half added before, half while running */
    }
    int tx = socket(AF_INET, SOCK_DGRAM, 0);
    for (uint16_t seq = 0; seq < PACKETS; seq++) {
        for (int i = 0; i < LEGS; i++)
            send_rtp(tx, &to[i], seq, 0x300u + (uint32_t)i);
        if (seq % 8 == 7)
            usleep(500);
    }
    CHECK_EQ(wait_datagrams(ing, LEGS * PACKETS), LEGS * PACKETS);
    for (int i = 0; i < LEGS; i++) {
        cs_stream_counters sc;
        REQUIRE(cs_ingest_stream_counters(ing, ids[i], &sc) == 0);
        CHECK_EQ(sc.datagrams, PACKETS);
        CHECK_EQ(sc.outcomes[CS_PKT_IN_ORDER], PACKETS - 1); /* one probation packet */
    }
    cs_ingest_counters g;
    cs_ingest_get_counters(ing, &g);
    CHECK_EQ(g.no_timestamp, 0); /* kernel receive stamps on both backends */
    CHECK_EQ(g.recv_errors, 0);
    CHECK_EQ(g.uring_arm_errors, 0);
    if (backend == CS_INGEST_BACKEND_URING) {
        CHECK_EQ(g.uring_arms, LEGS);
        CHECK(g.uring_cqes >= LEGS * PACKETS);
    } else {
        CHECK_EQ(g.uring_enters, 0);
    }
    /* removed while running: the port is free when remove returns */
    uint16_t port = ntohs(to[0].sin_port);
    CHECK_EQ(cs_ingest_remove_stream(ing, ids[0]), 0);
    struct sockaddr_in again;
    int fd = bound_at(&again, port);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    close(tx);
    cs_ingest_free(ing);
}

static void test_epoll_receive_in_order(void) { receive_in_order(CS_INGEST_BACKEND_EPOLL); }
static void test_uring_receive_in_order(void) { receive_in_order(CS_INGEST_BACKEND_URING); }

/* Two provided buffers for 8 legs' bursts: the multishot requests keep ending with
 * ENOBUFS and are re-armed; every datagram still arrives (the socket queues hold them). */
static void test_uring_enobufs_rearms_and_loses_nothing(void)
{
    enum { N = 8, BURST = 100 };
    cs_ingest_config cfg;
    cs_ingest_default_config(&cfg);
    cfg.max_streams = N;
    cfg.uring_buffers = 2;
    cs_ingest *ing = open_backend(&cfg, CS_INGEST_BACKEND_URING);
    REQUIRE(ing != NULL);
    struct sockaddr_in to[N];
    int32_t ids[N];
    for (int i = 0; i < N; i++) {
        int fd = bound_at(&to[i], 0);
        REQUIRE(fd >= 0);
        ids[i] = cs_ingest_add_stream(ing, fd, NULL, NULL);
        close(fd);
        REQUIRE(ids[i] >= 0);
    }
    REQUIRE(cs_ingest_start(ing) == 0);
    int tx = socket(AF_INET, SOCK_DGRAM, 0);
    for (uint16_t seq = 0; seq < BURST; seq++)
        for (int i = 0; i < N; i++)
            send_rtp(tx, &to[i], seq, 0x400u + (uint32_t)i);
    CHECK_EQ(wait_datagrams(ing, N * BURST), N * BURST);
    cs_ingest_counters g;
    cs_ingest_get_counters(ing, &g);
    CHECK(g.uring_enobufs > 0);
    CHECK(g.uring_rearms >= g.uring_enobufs);
    for (int i = 0; i < N; i++) {
        cs_stream_counters sc;
        REQUIRE(cs_ingest_stream_counters(ing, ids[i], &sc) == 0);
        CHECK_EQ(sc.datagrams, BURST);
        CHECK_EQ(sc.outcomes[CS_PKT_IN_ORDER], BURST - 1);
    }
    close(tx);
    cs_ingest_free(ing);
}

/* io_uring refused (as if io_uring_setup returned EPERM): epoll, and it works. */
static void test_uring_refused_falls_back_to_epoll(void)
{
    cs_ingest_config cfg;
    cs_ingest_default_config(&cfg);
    cfg.backend = CS_INGEST_BACKEND_URING;
    cfg.uring_refuse = EPERM;
    cs_ingest *ing = cs_ingest_new(&cfg);
    REQUIRE(ing != NULL);
    char why[256];
    CHECK_EQ(cs_ingest_backend(ing, why, sizeof why), CS_INGEST_BACKEND_EPOLL);
    CHECK(strstr(why, "refused") != NULL);
    struct sockaddr_in to;
    int fd = bound_at(&to, 0);
    REQUIRE(fd >= 0);
    int32_t id = cs_ingest_add_stream(ing, fd, NULL, NULL);
    close(fd);
    REQUIRE(id >= 0);
    REQUIRE(cs_ingest_start(ing) == 0);
    int tx = socket(AF_INET, SOCK_DGRAM, 0);
    for (uint16_t seq = 0; seq < 10; seq++)
        send_rtp(tx, &to, seq, 0x500u);
    CHECK_EQ(wait_datagrams(ing, 10), 10);
    cs_ingest_counters g;
    cs_ingest_get_counters(ing, &g);
    CHECK_EQ(g.uring_enters, 0);
    close(tx);
    cs_ingest_free(ing);
    cs_ingest_default_config(&cfg); /* SQPOLL is refused too, with its reason */
    cfg.uring_setup = 1u << 1;      /* IORING_SETUP_SQPOLL */
    ing = cs_ingest_new(&cfg);
    REQUIRE(ing != NULL);
    CHECK_EQ(cs_ingest_backend(ing, why, sizeof why), CS_INGEST_BACKEND_EPOLL);
    CHECK(strstr(why, "SQPOLL") != NULL);
    cs_ingest_free(ing);
    cs_ingest_default_config(&cfg);
    cfg.uring_buffers = 3; /* not a power of two */
    CHECK(cs_ingest_new(&cfg) == NULL);
}

static const cs_test_case uring_cases[] = {
    {"uring_chosen_by_default", test_uring_chosen_by_default},
    {"epoll_receive_in_order", test_epoll_receive_in_order},
    {"uring_receive_in_order", test_uring_receive_in_order},
    {"uring_enobufs_rearms_and_loses_nothing", test_uring_enobufs_rearms_and_loses_nothing},
    {"uring_refused_falls_back_to_epoll", test_uring_refused_falls_back_to_epoll},
};

const cs_test_suite cs_suite_ingest_uring = {"ingest_uring", uring_cases,
                                             CS_TEST_COUNT(uring_cases)};
