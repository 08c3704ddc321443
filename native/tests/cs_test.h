/* A tiny test framework for the native core, made to run under ASan/UBSan.
 *
 * A test file includes this header, defines `static void test_x(void)` functions and one
 * suite table:
 *
 *     static const cs_test_case jb_cases[] = {
 *         {"jb_in_order", test_jb_in_order},
 *         ...
 *     };
 *     const cs_test_suite cs_suite_jb = {"jb", jb_cases, CS_TEST_COUNT(jb_cases)};
 *
 * and the runner (test_native.c) lists the suite by name (see "SUITES" there). CHECK
 * records a failure and carries on; REQUIRE also returns from the test. */
#ifndef CS_TEST_H
#define CS_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *name;
    void (*fn)(void);
} cs_test_case;

typedef struct {
    const char *name;
    const cs_test_case *cases;
    size_t n_cases;
} cs_test_suite;

#define CS_TEST_COUNT(arr) (sizeof(arr) / sizeof((arr)[0]))

/* Failures recorded by the test that is running (reset by the runner per test). */
extern int cs_test_failures;

void cs_test_fail(const char *file, int line, const char *what);
void cs_test_fail_int(const char *file, int line, const char *what, long long got,
                      long long want);

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond))                                                                     \
            cs_test_fail(__FILE__, __LINE__, #cond);                                     \
    } while (0)

/* Integer equality that prints both values. */
#define CHECK_EQ(got, want)                                                              \
    do {                                                                                 \
        long long cs_got_ = (long long)(got);                                            \
        long long cs_want_ = (long long)(want);                                          \
        if (cs_got_ != cs_want_)                                                         \
            cs_test_fail_int(__FILE__, __LINE__, #got " == " #want, cs_got_, cs_want_);   \
    } while (0)

/* Big-endian stores for building packets. */
static inline void cs_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void cs_put32(uint8_t *p, uint32_t v)
{
    cs_put16(p, (uint16_t)(v >> 16));
    cs_put16(p + 2, (uint16_t)v);
}

/* xorshift32: deterministic pseudo-random input for property loops. */
static inline uint32_t cs_test_rng(uint32_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    return *state;
}

/* A heap copy of exactly n bytes (at least 1 allocated), so ASan flags any read past
 * the end of the input. Free it with free(). */
uint8_t *cs_test_exact_copy(const uint8_t *src, size_t n);

#define REQUIRE(cond)                                                                    \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            cs_test_fail(__FILE__, __LINE__, #cond);                                     \
            return;                                                                      \
        }                                                                                \
    } while (0)

#endif
