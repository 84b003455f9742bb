/* test_restart.c: the pure rules of a node restart (restart.c): which
 * restarts sit out the quarantine, how a node's identity moves as its
 * connections come up and what a change of it means, the start-up check
 * of a node seen only after its restart, how a repair's reads add up, and
 * the SCAN steps and pages of the done-mark copy. The quarantine period is
 * redlock_quarantine_ms, tested in test_redlock.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "restart.h"

#define S 1000000ULL /* µs per second */

static void test_action(void **state)
{
    (void)state;
    /* the same server, or one that kept its data: nothing to do */
    assert_int_equal(restart_action(false, false, false, false), RESTART_NONE);
    assert_int_equal(restart_action(true, true, false, false), RESTART_NONE);
    assert_int_equal(restart_action(true, true, true, true), RESTART_NONE);
    /* a new run_id without persistence */
    assert_int_equal(restart_action(true, false, false, false),
                     RESTART_QUARANTINE);
    /* --unsafe-no-fence-repair alone still sits out the quarantine (the
     * repair is skipped when it ends) */
    assert_int_equal(restart_action(true, false, false, true),
                     RESTART_QUARANTINE);
    assert_int_equal(restart_action(true, false, true, false),
                     RESTART_REPAIR_NOW);
    assert_int_equal(restart_action(true, false, true, true),
                     RESTART_COUNT_NOW);
}

static void test_oldest(void **state)
{
    (void)state;
    uint64_t none[3] = {0, 0, 0};
    assert_int_equal(restart_oldest_us(none, 3), 0);
    assert_int_equal(restart_oldest_us(none, 0), 0);
    /* unknown (0) is not the oldest */
    uint64_t some[5] = {0, 50 * S, 20 * S, 0, 30 * S};
    assert_int_equal(restart_oldest_us(some, 5), 20 * S);
    assert_int_equal(restart_oldest_us(some, 2), 50 * S);
}

static void test_fresh_start(void **state)
{
    (void)state;
    uint64_t left = 12345;
    uint64_t oldest = 100 * S;
    /* started together (within the skew): not suspect */
    assert_false(restart_fresh_start(oldest + RESTART_START_SKEW_US, oldest,
                                     oldest + 4 * S, 30000, &left));
    assert_int_equal(left, 12345); /* untouched */
    /* the oldest node itself never is */
    assert_false(restart_fresh_start(oldest, oldest, oldest, 30000, &left));
    /* clearly later, inside the period: the rest of it */
    uint64_t st = oldest + 10 * S;
    assert_true(restart_fresh_start(st, oldest, st + 1 * S, 30000, &left));
    assert_int_equal(left, 29000);
    assert_true(restart_fresh_start(st, oldest, st, 30000, &left));
    assert_int_equal(left, 30000);
    /* under a millisecond left: still in, with 0 ms */
    assert_true(restart_fresh_start(st, oldest, st + 30 * S - 1, 30000, &left));
    assert_int_equal(left, 0);
    /* the period is over */
    assert_false(restart_fresh_start(st, oldest, st + 30 * S, 30000, &left));
    /* a longer period (a long TTL granted) keeps it in */
    assert_true(restart_fresh_start(st, oldest, st + 30 * S, 86400000, &left));
    assert_int_equal(left, 86400000 - 30000);
}

/* Young nodes wait for every node's first answer; old ones never do,
 * since no later start can make them fresh. */
/* Uptime is whole wall seconds minus whole wall seconds: a server up
 * 0.1 s may say 1, so the start is dated by the latest it allows. */
static void test_started_latest(void **state)
{
    (void)state;
    uint64_t now = 1000 * S + 500000;
    assert_int_equal(restart_started_us(now, 0), now);
    assert_int_equal(restart_started_us(now, 1), now);
    assert_int_equal(restart_started_us(now, 2), now - 1 * S);
    assert_int_equal(restart_started_us(now, 30), now - 29 * S);
    /* older than the daemon's clock: long ago, never 0 (unknown) */
    assert_int_equal(restart_started_us(now, 1001), 1);
    assert_int_equal(restart_started_us(now, UINT64_MAX), 1);
    assert_int_equal(restart_started_us(1000 * S, 1000), 1 * S);
}

/* The mark's PTTL dates the data set on the node's own clock. */
static void test_dataset_born(void **state)
{
    (void)state;
    uint64_t now = 1000 * S;
    const long long ttl = (long long)RESTART_DATASET_TTL_MS;
    assert_int_equal(restart_dataset_born_us(now, ttl), now);
    assert_int_equal(restart_dataset_born_us(now, ttl - 2500), now - 2500000);
    /* no TTL (an older daemon's mark) or no key: not known */
    assert_int_equal(restart_dataset_born_us(now, -1), 0);
    assert_int_equal(restart_dataset_born_us(now, -2), 0);
    /* a longer TTL set by hand dates it now, not in the future */
    assert_int_equal(restart_dataset_born_us(now, ttl + 5000), now);
    /* older than the daemon's clock: long ago, never 0 */
    assert_int_equal(restart_dataset_born_us(now, ttl - 1000 * 1000), 1);
    assert_int_equal(restart_dataset_born_us(now, 0), 1);
}

static void test_start_unsettled(void **state)
{
    (void)state;
    uint64_t st = 100 * S;
    assert_true(restart_start_unsettled(st, st, 30000));
    assert_true(restart_start_unsettled(st, st + 30 * S - 1, 30000));
    assert_false(restart_start_unsettled(st, st + 30 * S, 30000));
    assert_false(restart_start_unsettled(st, st + 3600 * S, 30000));
    /* a longer period keeps an older node waiting */
    assert_true(restart_start_unsettled(st, st + 3600 * S, 86400000));
    /* a start not known is not compared by the start-up check either */
    assert_false(restart_start_unsettled(0, st, 30000));
}

static void test_reads_all_needed(void **state)
{
    (void)state;
    /* 5 nodes, quorum 3: 3 sound nodes read in full */
    struct restart_reads r = {.need = 3, .running = 3};
    assert_int_equal(restart_reads_start(&r), RESTART_READING);
    assert_int_equal(restart_reads_done(&r), RESTART_READING);
    assert_int_equal(restart_reads_done(&r), RESTART_READING);
    assert_int_equal(restart_reads_done(&r), RESTART_RAISE);
    assert_int_equal(r.complete, 3);
    assert_int_equal(r.running, 0);

    /* one of the three fails: no longer enough */
    struct restart_reads f = {.need = 3, .running = 3};
    assert_int_equal(restart_reads_done(&f), RESTART_READING);
    assert_int_equal(restart_reads_failed(&f), RESTART_FAIL);
}

static void test_reads_spare(void **state)
{
    (void)state;
    /* four asked, three needed: one may fail */
    struct restart_reads r = {.need = 3, .running = 4};
    assert_int_equal(restart_reads_failed(&r), RESTART_READING);
    assert_int_equal(restart_reads_done(&r), RESTART_READING);
    assert_int_equal(restart_reads_done(&r), RESTART_READING);
    assert_int_equal(restart_reads_done(&r), RESTART_RAISE);

    struct restart_reads f = {.need = 3, .running = 4};
    assert_int_equal(restart_reads_failed(&f), RESTART_READING);
    assert_int_equal(restart_reads_failed(&f), RESTART_FAIL);
}

static void test_reads_start(void **state)
{
    (void)state;
    /* a single node: nothing to read, raise at once */
    struct restart_reads one = {.need = 0, .running = 0};
    assert_int_equal(restart_reads_start(&one), RESTART_RAISE);
    /* fewer could be asked than are needed */
    struct restart_reads few = {.need = 3, .running = 2};
    assert_int_equal(restart_reads_start(&few), RESTART_FAIL);
    struct restart_reads ok = {.need = 3, .running = 4};
    assert_int_equal(restart_reads_start(&ok), RESTART_READING);
}

static void test_raised(void **state)
{
    (void)state;
    assert_true(restart_raised(7, 7));
    assert_true(restart_raised(9, 7));
    assert_false(restart_raised(6, 7));
    assert_true(restart_raised(0, 0));
}

static void test_scan_cursor(void **state)
{
    (void)state;
    assert_string_equal(restart_scan_cursor(""), "0"); /* the first step */
    assert_null(restart_scan_cursor("0"));             /* back to 0: over */
    assert_string_equal(restart_scan_cursor("1536"), "1536");
    assert_string_equal(restart_scan_cursor("18446744073709551615"),
                        "18446744073709551615");
}

static void test_page_step(void **state)
{
    (void)state;
    /* a page without keys sends no read: the next SCAN step */
    assert_int_equal(restart_page_step(0), RESTART_STEP_SCAN);
    assert_int_equal(restart_page_step(1), RESTART_STEP_READ);
    assert_int_equal(restart_page_step(256), RESTART_STEP_READ);
    assert_int_equal(restart_page_step(1000), RESTART_STEP_READ);
}

static void test_read_marks(void **state)
{
    (void)state;
    assert_int_equal(restart_read_marks(0, 1), 0); /* no mark among them */
    assert_int_equal(restart_read_marks(1, 1), -1);
    assert_int_equal(restart_read_marks(2, 1), -1);
    assert_int_equal(restart_read_marks(3, 1), 1);
    assert_int_equal(restart_read_marks(4, 2), -1);
    assert_int_equal(restart_read_marks(6, 2), 2);
    /* never more marks than keys read */
    assert_int_equal(restart_read_marks(3, 0), -1);
    assert_int_equal(restart_read_marks(6, 1), -1);
    assert_int_equal(restart_read_marks(3 * 256, 256), 256);
    assert_int_equal(restart_read_marks(3 * 10, 256), 10);
}

static void test_read_step(void **state)
{
    (void)state;
    /* a read without marks sends no copy: the next SCAN step */
    assert_int_equal(restart_read_step(0), RESTART_STEP_SCAN);
    assert_int_equal(restart_read_step(1), RESTART_STEP_COPY);
    assert_int_equal(restart_read_step(256), RESTART_STEP_COPY);
}

static void test_scan_match(void **state)
{
    (void)state;
    char buf[RESTART_SCAN_MATCH_SIZE];
    restart_scan_match("", buf, sizeof(buf));
    assert_string_equal(buf, "[ls][oe][cm]*");
    restart_scan_match("redlock:", buf, sizeof(buf));
    assert_string_equal(buf, "redlock:[ls][oe][cm]*");
    /* glob characters of the prefix match only themselves */
    restart_scan_match("a*b?[c]\\", buf, sizeof(buf));
    assert_string_equal(buf, "a\\*b\\?\\[c\\]\\\\[ls][oe][cm]*");
    /* the longest prefix (64), all escaped, fits */
    char star[65];
    memset(star, '*', 64);
    star[64] = '\0';
    restart_scan_match(star, buf, sizeof(buf));
    assert_int_equal(strlen(buf), 128 + 13);
    assert_string_equal(buf + 128, "[ls][oe][cm]*");
    /* a small buffer cuts the prefix short, never the pattern */
    char small[19];
    restart_scan_match("abcdefgh", small, sizeof(small));
    assert_string_equal(small, "abcd[ls][oe][cm]*");
    restart_scan_match("abc*efgh", small, sizeof(small));
    assert_string_equal(small, "abc\\*[ls][oe][cm]*");
}

/* An identity of the given fields ("" unknown). */
static struct node_ident ident(const char *run_id, const char *replid,
                               const char *dataset)
{
    struct node_ident id;
    memset(&id, 0, sizeof(id));
    snprintf(id.run_id, sizeof(id.run_id), "%s", run_id);
    snprintf(id.replid, sizeof(id.replid), "%s", replid);
    snprintf(id.dataset, sizeof(id.dataset), "%s", dataset);
    return id;
}

static void test_ident_up(void **state)
{
    (void)state;
    struct node_ident prev = ident("", "", "");
    struct node_ident up = ident("", "", "");
    /* the first connection up: nothing before it */
    struct node_ident last = ident("r1", "p1", "m1");
    restart_ident_up(&prev, &up, &last);
    assert_string_equal(prev.run_id, "");
    assert_string_equal(up.run_id, "r1");
    assert_string_equal(up.replid, "p1");
    assert_string_equal(up.dataset, "m1");
    assert_true(restart_ident_first(&prev, &up));
    /* the next one: the one up before moves to prev */
    last = ident("r2", "p2", "m2");
    restart_ident_up(&prev, &up, &last);
    assert_string_equal(prev.run_id, "r1");
    assert_string_equal(prev.replid, "p1");
    assert_string_equal(prev.dataset, "m1");
    assert_string_equal(up.run_id, "r2");
    assert_string_equal(up.dataset, "m2");
    assert_false(restart_ident_first(&prev, &up));
    /* a mark not read keeps the one known: no change to see; an unknown
     * run_id or replid is taken as unknown */
    last = ident("", "", "");
    restart_ident_up(&prev, &up, &last);
    assert_string_equal(prev.dataset, "m2");
    assert_string_equal(up.dataset, "m2");
    assert_false(restart_ident_emptied(&prev, &up));
    assert_string_equal(up.run_id, "");
    assert_string_equal(up.replid, "");
    assert_false(restart_ident_restarted(&prev, &up));
    assert_false(restart_ident_replaced(&prev, &up));
}

static void test_ident_compare(void **state)
{
    (void)state;
    struct node_ident none = ident("", "", "");
    struct node_ident a = ident("r1", "p1", "m1");
    /* the same server, replication id and mark: nothing changed */
    assert_false(restart_ident_restarted(&a, &a));
    assert_false(restart_ident_emptied(&a, &a));
    assert_false(restart_ident_replaced(&a, &a));
    /* unknown on either side is no change */
    assert_false(restart_ident_restarted(&none, &a));
    assert_false(restart_ident_restarted(&a, &none));
    assert_false(restart_ident_emptied(&none, &a));
    assert_false(restart_ident_emptied(&a, &none));
    assert_false(restart_ident_replaced(&none, &a));
    assert_false(restart_ident_replaced(&a, &none));
    /* a new run_id: restarted; a new replid with it is not "replaced" */
    struct node_ident b = ident("r2", "p2", "m1");
    assert_true(restart_ident_restarted(&a, &b));
    assert_false(restart_ident_replaced(&a, &b));
    assert_false(restart_ident_emptied(&a, &b));
    /* the same run, another replid: replaced */
    struct node_ident c = ident("r1", "p2", "m1");
    assert_false(restart_ident_restarted(&a, &c));
    assert_true(restart_ident_replaced(&a, &c));
    /* the same run, another mark: emptied, whatever the run_id says */
    struct node_ident d = ident("r1", "p1", "m2");
    assert_true(restart_ident_emptied(&a, &d));
    assert_false(restart_ident_restarted(&a, &d));
    assert_false(restart_ident_replaced(&a, &d));
    struct node_ident e = ident("r2", "p1", "m2");
    assert_true(restart_ident_emptied(&a, &e));
    assert_true(restart_ident_restarted(&a, &e));
    /* first: a run_id up, none before */
    assert_true(restart_ident_first(&none, &a));
    assert_false(restart_ident_first(&a, &b));
    assert_false(restart_ident_first(&none, &none));
    assert_false(restart_ident_first(&a, &none));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_action),
        cmocka_unit_test(test_oldest),
        cmocka_unit_test(test_fresh_start),
        cmocka_unit_test(test_start_unsettled),
        cmocka_unit_test(test_started_latest),
        cmocka_unit_test(test_dataset_born),
        cmocka_unit_test(test_reads_all_needed),
        cmocka_unit_test(test_reads_spare),
        cmocka_unit_test(test_reads_start),
        cmocka_unit_test(test_raised),
        cmocka_unit_test(test_scan_cursor),
        cmocka_unit_test(test_page_step),
        cmocka_unit_test(test_read_marks),
        cmocka_unit_test(test_read_step),
        cmocka_unit_test(test_scan_match),
        cmocka_unit_test(test_ident_up),
        cmocka_unit_test(test_ident_compare),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
