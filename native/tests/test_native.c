/* Test runner for the native core's C tests (test_rtp.c, test_rtcp.c, test_g711.c, ...).
 *
 * Build and run under sanitizers with native/tests/run_sanitizers.sh. Usage:
 *     test_native [substring]   run the tests whose "suite.name" contains substring
 * Prints one line per failed CHECK and per failed test, then exactly "N passed, M failed";
 * exits nonzero if any test failed or none ran. */
#include "cs_test.h"

#include <stdlib.h>
#include <string.h>

/* ---- SUITES -------------------------------------------------------------------------
 * One line per test file. Suites of other files are weak references: a file that is not
 * linked yet is reported as missing and skipped, so the runner builds with any subset.
 * To add a file: define `const cs_test_suite cs_suite_<name>` there (see cs_test.h) and
 * add it to both lists below. */
extern const cs_test_suite cs_suite_rtp;
extern const cs_test_suite cs_suite_rtcp;
extern const cs_test_suite cs_suite_g711;
extern const cs_test_suite cs_suite_jb __attribute__((weak));
extern const cs_test_suite cs_suite_srclock __attribute__((weak));
extern const cs_test_suite cs_suite_ingest __attribute__((weak));
extern const cs_test_suite cs_suite_ingest_shared __attribute__((weak));
extern const cs_test_suite cs_suite_ingest_uring __attribute__((weak));
extern const cs_test_suite cs_suite_resample __attribute__((weak));
extern const cs_test_suite cs_suite_jb_codecs __attribute__((weak));
extern const cs_test_suite cs_suite_srtp __attribute__((weak));

static const struct {
    const char *name;
    const cs_test_suite *suite;
} suites[] = {
    {"rtp", &cs_suite_rtp},
    {"rtcp", &cs_suite_rtcp},
    {"g711", &cs_suite_g711},
    {"jb", &cs_suite_jb},
    {"srclock", &cs_suite_srclock},
    {"ingest", &cs_suite_ingest},
    {"ingest_shared", &cs_suite_ingest_shared},
    {"ingest_uring", &cs_suite_ingest_uring},
    {"resample", &cs_suite_resample},
    {"jb_codecs", &cs_suite_jb_codecs},
    {"srtp", &cs_suite_srtp},
};

/* ---- runner ------------------------------------------------------------------------ */

int cs_test_failures;

void cs_test_fail(const char *file, int line, const char *what)
{
    cs_test_failures++;
    printf("%s:%d: CHECK failed: %s\n", file, line, what);
}

uint8_t *cs_test_exact_copy(const uint8_t *src, size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    if (n)
        memcpy(p, src, n);
    return p;
}

void cs_test_fail_int(const char *file, int line, const char *what, long long got,
                      long long want)
{
    cs_test_failures++;
    printf("%s:%d: CHECK failed: %s (got %lld, want %lld)\n", file, line, what, got, want);
}

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0;
    char full[256];
    for (size_t s = 0; s < CS_TEST_COUNT(suites); s++) {
        const cs_test_suite *suite = suites[s].suite;
        if (suite == NULL) {
            printf("suite %s: not linked, skipped\n", suites[s].name);
            continue;
        }
        for (size_t i = 0; i < suite->n_cases; i++) {
            const cs_test_case *tc = &suite->cases[i];
            snprintf(full, sizeof full, "%s.%s", suite->name, tc->name);
            if (filter != NULL && strstr(full, filter) == NULL)
                continue;
            cs_test_failures = 0;
            tc->fn();
            if (cs_test_failures) {
                printf("FAIL %s\n", full);
                failed++;
            } else {
                passed++;
            }
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return (failed || passed == 0) ? 1 : 0;
}

