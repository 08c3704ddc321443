/* Source lock (native/src/srclock.c): learning, rejection, SSRC switch, rearm. */
#include "cs_test.h"

#include <string.h>

#include "srclock.h"

static const int64_t MS = 1000000;

static cs_srclock_addr v4(uint8_t last, uint16_t port)
{
    cs_srclock_addr a;
    memset(&a, 0, sizeof a);
    a.family = 4;
    a.port = port;
    a.addr[0] = 10;
    a.addr[3] = last;
    return a;
}

static void make_lock(cs_srclock *lock, uint32_t probation)
{
    cs_srclock_config cfg;
    cs_srclock_default_config(&cfg);
    cfg.probation = probation;
    cs_srclock_init(lock, &cfg);
}

static void test_srclock_learn_then_reject_foreign(void)
{
    cs_srclock lock;
    make_lock(&lock, 2);
    cs_srclock_addr a = v4(1, 4000), b = v4(2, 4000), a2 = v4(1, 4002);
    CHECK_EQ(cs_srclock_check(&lock, &a, 7, 100, 0), CS_SRC_DROP_PROBATION);
    CHECK_EQ(cs_srclock_check(&lock, &a, 7, 101, 20 * MS), CS_SRC_ACCEPT_LEARNED);
    CHECK_EQ(cs_srclock_check(&lock, &b, 7, 102, 21 * MS), CS_SRC_DROP_ADDRESS);
    CHECK_EQ(cs_srclock_check(&lock, &a2, 7, 102, 22 * MS), CS_SRC_DROP_ADDRESS);
    CHECK_EQ(cs_srclock_check(&lock, &a, 7, 102, 40 * MS), CS_SRC_ACCEPT);
    CHECK_EQ(lock.counters.accepted, 2);
    CHECK_EQ(lock.counters.probation_dropped, 1);
    CHECK_EQ(lock.counters.rejected_address, 2);
}

static void test_srclock_ssrc_quiet_rule(void)
{
    cs_srclock lock;
    make_lock(&lock, 1);
    cs_srclock_addr a = v4(1, 4000);
    CHECK_EQ(cs_srclock_check(&lock, &a, 1, 1, 0), CS_SRC_ACCEPT_LEARNED);
    CHECK_EQ(cs_srclock_check(&lock, &a, 2, 50, 79 * MS), CS_SRC_DROP_SSRC);
    CHECK_EQ(cs_srclock_check(&lock, &a, 2, 51, 80 * MS), CS_SRC_ACCEPT_SSRC_SWITCH);
    CHECK_EQ(cs_srclock_check(&lock, &a, 1, 2, 81 * MS), CS_SRC_DROP_SSRC);
    CHECK_EQ(lock.ssrc, 2);
}

static void test_srclock_rearm(void)
{
    cs_srclock lock;
    make_lock(&lock, 2);
    cs_srclock_addr a = v4(1, 4000), b = v4(2, 5000);
    cs_srclock_check(&lock, &a, 1, 1, 0);
    cs_srclock_check(&lock, &a, 1, 2, 20 * MS);
    cs_srclock_rearm(&lock, 30 * MS);
    CHECK_EQ(lock.state, CS_SRCLOCK_REARMED);
    CHECK_EQ(cs_srclock_check(&lock, &b, 9, 500, 31 * MS), CS_SRC_DROP_PROBATION);
    CHECK_EQ(cs_srclock_check(&lock, &a, 1, 3, 40 * MS), CS_SRC_ACCEPT);
    CHECK_EQ(cs_srclock_check(&lock, &b, 9, 501, 51 * MS), CS_SRC_ACCEPT_LEARNED);
    CHECK_EQ(cs_srclock_check(&lock, &a, 1, 4, 60 * MS), CS_SRC_DROP_ADDRESS);
    CHECK_EQ(lock.counters.learned, 2);
}

static void test_srclock_random_input_counts_every_packet(void)
{
    cs_srclock lock;
    make_lock(&lock, 3);
    uint32_t rng = 0x9E3779B9u;
    uint64_t n = 0;
    for (int i = 0; i < 20000; i++) {
        uint32_t r = cs_test_rng(&rng);
        cs_srclock_addr from = v4((uint8_t)(r & 3), (uint16_t)(4000 + ((r >> 2) & 1)));
        if ((r >> 3) % 97 == 0)
            cs_srclock_rearm(&lock, (int64_t)i * MS);
        int rc = cs_srclock_check(&lock, &from, (r >> 8) & 3, (uint16_t)(i + (r >> 20) % 3),
                                  (int64_t)i * MS);
        CHECK(rc >= 0 && rc < CS_SRC_OUTCOMES);
        n++;
    }
    const cs_srclock_counters *c = &lock.counters;
    CHECK_EQ(c->accepted + c->probation_dropped + c->rejected_address + c->rejected_ssrc, n);
}

static const cs_test_case srclock_cases[] = {
    {"srclock_learn_then_reject_foreign", test_srclock_learn_then_reject_foreign},
    {"srclock_ssrc_quiet_rule", test_srclock_ssrc_quiet_rule},
    {"srclock_rearm", test_srclock_rearm},
    {"srclock_random_input_counts_every_packet", test_srclock_random_input_counts_every_packet},
};

const cs_test_suite cs_suite_srclock = {"srclock", srclock_cases,
                                        CS_TEST_COUNT(srclock_cases)};
