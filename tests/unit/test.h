/* test.h - the whole unit-test harness: CHECK macros that count, and a summary line ctest and CI read.
 *
 *   TEST(name) { CHECK(x == 1); CHECK_NEAR(a, b, 1e-5); }
 *   int main(void) { RUN(name); return test_summary(); }
 *
 * A failed CHECK prints file:line and the expression and lets the test go on, so one run shows every
 * failure; test_summary() prints "N passed, N failed" and returns the exit code. */
#ifndef WHET_TEST_H
#define WHET_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

__attribute__((unused)) static int test_checks_failed, test_tests_passed, test_tests_failed, test_current_failed;

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
            test_checks_failed++;                                                          \
            test_current_failed = 1;                                                       \
        }                                                                                  \
    } while (0)

#define CHECK_MSG(cond, ...)                                                               \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
            test_checks_failed++;                                                          \
            test_current_failed = 1;                                                       \
        }                                                                                  \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                              \
    do {                                                                                   \
        double a_ = (a), b_ = (b);                                                         \
        CHECK_MSG(fabs(a_ - b_) <= (tol), "%s = %.9g, %s = %.9g", #a, a_, #b, b_);         \
    } while (0)

#define CHECK_STR(a, b)                                                                    \
    do {                                                                                   \
        const char *a_ = (a), *b_ = (b);                                                   \
        CHECK_MSG(a_ && b_ && strcmp(a_, b_) == 0, "\"%s\" != \"%s\"", a_ ? a_ : "(null)", \
                  b_ ? b_ : "(null)");                                                     \
    } while (0)

/* Substring check: the error message names what it should. */
#define CHECK_CONTAINS(hay, needle)                                                        \
    do {                                                                                   \
        const char *h_ = (hay), *n_ = (needle);                                            \
        CHECK_MSG(h_ && strstr(h_, n_), "\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_); \
    } while (0)

#define TEST(name) static void test_##name(void)

#define RUN(name)                                                                          \
    do {                                                                                   \
        test_current_failed = 0;                                                           \
        test_##name();                                                                     \
        if (test_current_failed) {                                                         \
            test_tests_failed++;                                                           \
            fprintf(stderr, "FAIL %s\n", #name);                                           \
        } else {                                                                           \
            test_tests_passed++;                                                           \
            fprintf(stderr, "ok   %s\n", #name);                                           \
        }                                                                                  \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_tests_passed, test_tests_failed);
    return test_tests_failed ? 1 : 0;
}

#endif
