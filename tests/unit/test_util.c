/* test_util.c: the daemon's clock reads CLOCK_BOOTTIME (which, unlike
 * CLOCK_MONOTONIC, keeps counting through a suspend) and never goes back.
 * On a machine that was never suspended the two clocks agree, so the
 * bracket below tells them apart only where they differ. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "util.h"

static uint64_t read_us(clockid_t id)
{
    struct timespec ts;
    assert_int_equal(clock_gettime(id, &ts), 0);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void test_reads_boottime(void **state)
{
    (void)state;
#ifdef CLOCK_BOOTTIME
    for (int i = 0; i < 100; i++) {
        uint64_t before = read_us(CLOCK_BOOTTIME);
        uint64_t now = util_now_us();
        uint64_t after = read_us(CLOCK_BOOTTIME);
        assert_true(before <= now);
        assert_true(now <= after);
    }
#else
    skip();
#endif
}

static void test_never_decreases(void **state)
{
    (void)state;
    uint64_t last = util_now_us();
    assert_true(last > 0);
    for (int i = 0; i < 10000; i++) {
        uint64_t now = util_now_us();
        assert_true(now >= last);
        last = now;
    }
    /* It advances: 2 ms of sleep show as at least 2000 µs. */
    struct timespec ms2 = {0, 2000000};
    nanosleep(&ms2, NULL);
    assert_true(util_now_us() - last >= 2000u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_boottime),
        cmocka_unit_test(test_never_decreases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
