/* test_metrics.c: the Prometheus rendering: HELP/TYPE once per name,
 * labelled counters, cumulative histogram buckets, escaped label values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "metrics.h"

static int count_occurrences(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++) {
        n++;
    }
    return n;
}

static void test_render(void **state)
{
    (void)state;
    memset(&metrics, 0, sizeof(metrics));
    metrics.acquire_ok = 7;
    metrics.acquire_busy = 2;
    metrics.locks_held = 5;
    metrics_observe_acquire(50);      /* 0.00005 s: first bucket */
    metrics_observe_acquire(3000);    /* 0.003 s */
    metrics_observe_acquire(9000000); /* 9 s: +Inf only */
    metrics_observe_node(0, 200);
    struct metrics_node nodes[2] = {
        {.addr = "unix:/tmp/a \"q\"", .up = 1, .reconnects = 3},
        {.addr = "127.0.0.1:6379",
         .up = 0,
         .quarantined = 1,
         .may_evict = 1,
         .refusing = 1}};
    size_t len;
    char *text = metrics_render(nodes, 2, &len);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    assert_non_null(strstr(text,
                           "redlockd_acquisitions_total{result=\"ok\"} 7\n"));
    assert_non_null(strstr(text,
                           "redlockd_acquisitions_total{result=\"busy\"} 2\n"));
    assert_int_equal(count_occurrences(text,
                                       "# TYPE redlockd_acquisitions_total "
                                       "counter"),
                     1);
    assert_non_null(strstr(text, "redlockd_locks_held 5\n"));
    assert_non_null(strstr(text, "redlockd_acquire_duration_seconds_bucket{"
                                 "le=\"0.0001\"} 1\n"));
    assert_non_null(strstr(text, "redlockd_acquire_duration_seconds_bucket{"
                                 "le=\"0.005\"} 2\n"));
    assert_non_null(strstr(text, "redlockd_acquire_duration_seconds_bucket{"
                                 "le=\"+Inf\"} 3\n"));
    assert_non_null(strstr(text, "redlockd_acquire_duration_seconds_count 3\n"));
    assert_non_null(
        strstr(text, "redlockd_node_up{node=\"unix:/tmp/a \\\"q\\\"\"} 1\n"));
    assert_non_null(strstr(text, "redlockd_node_up{node=\"127.0.0.1:6379\"} "
                                 "0\n"));
    assert_int_equal(
        count_occurrences(text,
                          "# TYPE redlockd_node_command_duration_seconds"),
        1);
    /* What is running, per node quarantine, and reconnections per node
     * under the name that says what they count. */
    assert_non_null(strstr(text, "# TYPE redlockd_build_info gauge\n"
                                 "redlockd_build_info{version=\""));
    assert_non_null(strstr(text, "redlockd_node_quarantined{node="
                                 "\"127.0.0.1:6379\"} 1\n"));
    assert_non_null(strstr(text, "redlockd_node_quarantined{node="
                                 "\"unix:/tmp/a \\\"q\\\"\"} 0\n"));
    assert_non_null(strstr(text, "redlockd_node_reconnects_total{node="
                                 "\"unix:/tmp/a \\\"q\\\"\"} 3\n"));
    assert_null(strstr(text, "node_connects_total"));
    assert_non_null(strstr(text, "# TYPE redlockd_node_may_evict gauge\n"
                                 "redlockd_node_may_evict{node="
                                 "\"unix:/tmp/a \\\"q\\\"\"} 0\n"
                                 "redlockd_node_may_evict{node="
                                 "\"127.0.0.1:6379\"} 1\n"));
    assert_non_null(strstr(text, "redlockd_node_refusing{node="
                                 "\"127.0.0.1:6379\"} 1\n"));
    /* One family per name: a TYPE line never repeats. */
    for (const char *p = text; (p = strstr(p, "# TYPE ")) != NULL; p++) {
        char name[128];
        size_t n = strcspn(p + 7, " ");
        assert_true(n < sizeof(name) - 8);
        memcpy(name, p, n + 7);
        name[n + 7] = ' ';
        name[n + 8] = '\0';
        assert_int_equal(count_occurrences(text, name), 1);
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
