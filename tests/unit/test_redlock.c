/* test_redlock.c: the pure Redlock decisions: validity arithmetic, quorum,
 * early decisions, failure codes, rollback sets, back-off, an acquire
 * call's next step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "redlock.h"

#define MS 1000ULL

/* The round reads time only through its clock function: the tests give it
 * one that returns the time the test says and counts the readings. */
static uint64_t fake_now;
static int clock_reads;

static uint64_t fake_clock(void)
{
    clock_reads++;
    return fake_now;
}

static enum redlock_outcome answer_at(struct redlock_round *r, int node,
                                      enum redlock_node_result res,
                                      int64_t fence, int64_t pttl, uint64_t now)
{
    fake_now = now;
    return redlock_round_answer(r, node, res, fence, pttl, fake_clock);
}

static void test_quorum(void **state)
{
    (void)state;
    assert_int_equal(redlock_quorum(1), 1);
    assert_int_equal(redlock_quorum(2), 2);
    assert_int_equal(redlock_quorum(3), 2);
    assert_int_equal(redlock_quorum(4), 3);
    assert_int_equal(redlock_quorum(5), 3);
    assert_int_equal(redlock_quorum(7), 4);
}

static void test_validity(void **state)
{
    (void)state;
    /* 30000 - 0 - (300 + 2) */
    assert_int_equal(redlock_validity_ms(30000, 0.01, 0), 29698);
    /* elapsed rounds up: 1 us counts as 1 ms */
    assert_int_equal(redlock_validity_ms(30000, 0.01, 1), 29697);
    assert_int_equal(redlock_validity_ms(30000, 0.01, 1000), 29697);
    assert_int_equal(redlock_validity_ms(30000, 0.01, 1001), 29696);
    /* drift rounds up: 10 * 0.01 = 0.1 -> 1 ms, + 2 */
    assert_int_equal(redlock_validity_ms(10, 0.01, 0), 7);
    assert_int_equal(redlock_validity_ms(10, 0.01, 7 * MS), 0);
    assert_true(redlock_validity_ms(10, 0.01, 8 * MS) < 0);
    assert_int_equal(redlock_validity_ms(1000, 0.0, 0), 998);
    assert_int_equal(redlock_validity_ms(86400000, 0.5, 0),
                     86400000 - 43200000 - 2);
}

static void test_win_early(void **state)
{
    (void)state;
    struct redlock_round r;
    redlock_round_start(&r, 5, 30000, 0.01, 100 * MS, 0);
    assert_int_equal(r.quorum, 3);
    assert_int_equal(answer_at(&r, 0, RL_OK, 7, -1, 101 * MS), RL_UNDECIDED);
    assert_int_equal(answer_at(&r, 3, RL_OK, 9, -1, 102 * MS), RL_UNDECIDED);
    /* third ok decides without waiting for nodes 1, 2, 4 */
    assert_int_equal(answer_at(&r, 4, RL_OK, 8, -1, 103 * MS), RL_WON);
    assert_int_equal(r.validity_ms, 30000 - 3 - 302);
    assert_int_equal(r.fence_max, 9);
    assert_int_equal(redlock_ok_set(&r), (1u << 0) | (1u << 3) | (1u << 4));
    /* late answers are recorded but do not change the outcome */
    assert_int_equal(answer_at(&r, 1, RL_BUSY, 0, 50, 104 * MS), RL_WON);
    assert_int_equal(r.n_busy, 1);
}

static void test_lose_early_busy(void **state)
{
    (void)state;
    struct redlock_round r;
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_BUSY, 0, 800, 10);
    answer_at(&r, 1, RL_BUSY, 0, 700, 20);
    /* two ok + two pending could still make 3 */
    assert_int_equal(answer_at(&r, 2, RL_OK, 0, -1, 30), RL_UNDECIDED);
    /* 1 ok + 1 pending < 3: certain now */
    assert_int_equal(answer_at(&r, 3, RL_BUSY, 0, 900, 40), RL_LOST_BUSY);
    assert_int_equal(r.pttl_min, 700);
    /* rollback: node 2 (ok) and node 4 (pending), not the busy ones */
    assert_int_equal(redlock_rollback_set(&r), (1u << 2) | (1u << 4));
}

static void test_lose_noquorum_on_timeouts(void **state)
{
    (void)state;
    struct redlock_round r;
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 10);
    answer_at(&r, 1, RL_OK, 0, -1, 10);
    answer_at(&r, 2, RL_FAILED, 0, -1, 100 * MS);
    /* 2 ok + 1 pending could still make 3 */
    assert_int_equal(answer_at(&r, 3, RL_FAILED, 0, -1, 100 * MS),
                     RL_UNDECIDED);
    assert_int_equal(answer_at(&r, 4, RL_FAILED, 0, -1, 100 * MS),
                     RL_LOST_NOQUORUM);
    assert_false(r.too_late);
    /* every node that may hold the key: the oks and the timeouts */
    assert_int_equal(redlock_rollback_set(&r), 0x1fu);

    /* decided with one node still pending: it is rolled back too */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 10);
    answer_at(&r, 1, RL_FAILED, 0, -1, 10);
    answer_at(&r, 2, RL_BUSY, 0, 5, 10);
    assert_int_equal(answer_at(&r, 3, RL_FAILED, 0, -1, 10), RL_LOST_BUSY);
    assert_int_equal(redlock_rollback_set(&r), 0x1bu);
}

static void test_done_needs_marks_beyond_a_minority(void **state)
{
    (void)state;
    struct redlock_round r;
    /* Marks on 3 of 5: no acquisition can win, done at once. */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_DONE, 0, -1, 1);
    answer_at(&r, 1, RL_DONE, 0, -1, 1);
    assert_int_equal(answer_at(&r, 2, RL_DONE, 0, -1, 1), RL_LOST_DONE);
    assert_int_equal(redlock_rollback_set(&r), (1u << 3) | (1u << 4));

    /* 2 marks and a busy node: lost, but done or busy is not known yet;
     * a third mark decides done. */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_DONE, 0, -1, 1);
    answer_at(&r, 1, RL_DONE, 0, -1, 1);
    assert_int_equal(answer_at(&r, 2, RL_BUSY, 0, 5, 1), RL_UNDECIDED);
    assert_int_equal(answer_at(&r, 3, RL_DONE, 0, -1, 1), RL_LOST_DONE);
    assert_int_equal(redlock_rollback_set(&r), 1u << 4);

    /* ... and two more busy answers make it busy: a complete that reached
     * a minority while its lock stands is not done (waiters wait on). */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_DONE, 0, -1, 1);
    answer_at(&r, 1, RL_BUSY, 0, 5, 1);
    answer_at(&r, 2, RL_BUSY, 0, 5, 1);
    assert_int_equal(answer_at(&r, 3, RL_DONE, 0, -1, 1), RL_UNDECIDED);
    assert_int_equal(answer_at(&r, 4, RL_BUSY, 0, 7, 1), RL_LOST_BUSY);
    assert_int_equal(r.pttl_min, 5);

    /* A timeout among them: still undecided until no third mark can come. */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_DONE, 0, -1, 1);
    answer_at(&r, 1, RL_DONE, 0, -1, 1);
    assert_int_equal(answer_at(&r, 2, RL_FAILED, 0, -1, 1), RL_UNDECIDED);
    assert_int_equal(answer_at(&r, 3, RL_BUSY, 0, 5, 1), RL_UNDECIDED);
    assert_int_equal(answer_at(&r, 4, RL_FAILED, 0, -1, 1), RL_LOST_BUSY);

    /* Two marks and three nodes down: nothing is proved. */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0x1cu);
    answer_at(&r, 0, RL_DONE, 0, -1, 1);
    assert_int_equal(answer_at(&r, 1, RL_DONE, 0, -1, 1), RL_LOST_NOQUORUM);

    /* One mark (a complete that reached one node) does not hold an
     * acquisition back once a quorum is free, but the answer still due
     * is awaited first: it could be a second mark. */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_DONE, 0, -1, 1);
    answer_at(&r, 1, RL_OK, 0, -1, 1);
    answer_at(&r, 2, RL_OK, 0, -1, 1);
    assert_int_equal(answer_at(&r, 3, RL_OK, 0, -1, 1), RL_UNDECIDED);
    assert_int_equal(answer_at(&r, 4, RL_OK, 0, -1, 1), RL_WON);
}

/* Marks on exactly a quorum, one node restarted and lost
 * its mark. Its ok, with two others, must not win on the third ok while
 * the nodes still due may hold the marks. */
static void test_done_mark_blocks_early_grant(void **state)
{
    (void)state;
    struct redlock_round r;
    /* Third ok with one mark seen and one answer due: wait; the second
     * mark makes it done, and every ok node is rolled back. */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 1);
    answer_at(&r, 1, RL_DONE, 0, -1, 1);
    answer_at(&r, 3, RL_OK, 0, -1, 1);
    assert_int_equal(answer_at(&r, 4, RL_OK, 0, -1, 1), RL_UNDECIDED);
    assert_int_equal(answer_at(&r, 2, RL_DONE, 0, -1, 1), RL_LOST_DONE);
    assert_int_equal(redlock_rollback_set(&r),
                     (1u << 0) | (1u << 3) | (1u << 4));

    /* Two marks before the third ok: done at once. */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 1, RL_DONE, 0, -1, 1);
    answer_at(&r, 2, RL_DONE, 0, -1, 1);
    answer_at(&r, 0, RL_OK, 0, -1, 1);
    answer_at(&r, 3, RL_OK, 0, -1, 1);
    assert_int_equal(answer_at(&r, 4, RL_OK, 0, -1, 1), RL_LOST_DONE);

    /* The answer due times out: granted then, with validity measured at
     * that moment, not at the third ok. */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 1 * MS);
    answer_at(&r, 1, RL_DONE, 0, -1, 1 * MS);
    answer_at(&r, 2, RL_OK, 0, -1, 1 * MS);
    assert_int_equal(answer_at(&r, 3, RL_OK, 0, -1, 2 * MS), RL_UNDECIDED);
    assert_int_equal(answer_at(&r, 4, RL_FAILED, 0, -1, 250 * MS), RL_WON);
    assert_int_equal(r.validity_ms, 1000 - 250 - 12);

    /* No mark: the third ok still decides at once. */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 1);
    answer_at(&r, 1, RL_OK, 0, -1, 1);
    assert_int_equal(answer_at(&r, 2, RL_OK, 0, -1, 1), RL_WON);
}

static void test_free_quorum_verdict(void **state)
{
    (void)state;
    /* 5 nodes: two marks are what a quorum of marks leaves after one
     * node lost its own. */
    assert_int_equal(redlock_free_quorum(5, 0, 2), RL_FREE_GRANT);
    assert_int_equal(redlock_free_quorum(5, 1, 1), RL_FREE_WAIT);
    assert_int_equal(redlock_free_quorum(5, 1, 0), RL_FREE_GRANT);
    assert_int_equal(redlock_free_quorum(5, 2, 0), RL_FREE_DONE);
    assert_int_equal(redlock_free_quorum(5, 2, 1), RL_FREE_DONE);
    /* 7 nodes: three. */
    assert_int_equal(redlock_free_quorum(7, 1, 2), RL_FREE_WAIT);
    assert_int_equal(redlock_free_quorum(7, 1, 1), RL_FREE_GRANT);
    assert_int_equal(redlock_free_quorum(7, 2, 1), RL_FREE_WAIT);
    assert_int_equal(redlock_free_quorum(7, 3, 0), RL_FREE_DONE);
    /* 3 nodes: any mark. */
    assert_int_equal(redlock_free_quorum(3, 1, 0), RL_FREE_DONE);
    assert_int_equal(redlock_free_quorum(3, 0, 1), RL_FREE_GRANT);
}

/* 5 nodes, node 0 restarted; nodes 1 and 2 are down but
 * never restarted. A read of nodes 3 and 4 alone may miss every fence
 * written back to {0, 1, 2}: wait, do not fall back. */
static void test_repair_plan(void **state)
{
    (void)state;
    uint32_t read;
    int need;
    assert_int_equal(redlock_repair_plan(5, 0, 0x1u, 0x19u, 0, &read, &need),
                     RL_REPAIR_WAIT);
    assert_int_equal(read, 0);
    assert_int_equal(need, 0);
    /* One of them back: a sound read of three. */
    assert_int_equal(redlock_repair_plan(5, 0, 0x1u, 0x1bu, 0, &read, &need),
                     RL_REPAIR_SOUND);
    assert_int_equal(read, 0x1au);
    assert_int_equal(need, 3);
    /* Every node up: read the four others, three answers suffice. */
    assert_int_equal(redlock_repair_plan(5, 0, 0x1u, 0x1fu, 0, &read, &need),
                     RL_REPAIR_SOUND);
    assert_int_equal(read, 0x1eu);
    assert_int_equal(need, 3);
    /* Nodes 1 and 2 restarted too (quarantined): only 3 and 4 kept their
     * counters, no sound read exists: best effort over every node up. */
    assert_int_equal(redlock_repair_plan(5, 0, 0x7u, 0x1fu, 0, &read, &need),
                     RL_REPAIR_BEST_EFFORT);
    assert_int_equal(read, 0x1eu);
    assert_int_equal(need, 4);
    /* ... and with no other node up there is nothing to read yet. */
    assert_int_equal(redlock_repair_plan(5, 0, 0x7u, 0x1u, 0, &read, &need),
                     RL_REPAIR_WAIT);
    /* Two restarted, the rest sound and up: a sound read of the three. */
    assert_int_equal(redlock_repair_plan(5, 2, 0x6u, 0x1fu, 0, &read, &need),
                     RL_REPAIR_SOUND);
    assert_int_equal(read, 0x19u);
    assert_int_equal(need, 3);
    /* One node: nothing to read, nothing to wait for. */
    assert_int_equal(redlock_repair_plan(1, 0, 0x1u, 0x1u, 0, &read, &need),
                     RL_REPAIR_BEST_EFFORT);
    assert_int_equal(read, 0);
    assert_int_equal(need, 0);
    /* 32 nodes: no shift by the width. */
    assert_int_equal(
        redlock_repair_plan(32, 31, 1u << 31, UINT32_MAX, 0, &read, &need),
        RL_REPAIR_SOUND);
    assert_int_equal(read, 0x7fffffffu);
    assert_int_equal(need, 16);
}

/* A node up whose data-set mark is unknown may have been emptied unseen:
 * it is no source of the sound read, and is not taken for lost either. */
static void test_repair_plan_unmarked(void **state)
{
    (void)state;
    uint32_t read;
    int need;
    /* Node 1 unmarked, node 2 down: two sound nodes readable, wait. */
    assert_int_equal(redlock_repair_plan(5, 0, 0x1u, 0x1bu, 0x2u, &read, &need),
                     RL_REPAIR_WAIT);
    assert_int_equal(read, 0);
    assert_int_equal(need, 0);
    /* Every node up: read the three marked ones, all three answer. */
    assert_int_equal(redlock_repair_plan(5, 0, 0x1u, 0x1fu, 0x2u, &read, &need),
                     RL_REPAIR_SOUND);
    assert_int_equal(read, 0x1cu);
    assert_int_equal(need, 3);
    /* Unmarked is not lost: no best effort while it may hold the data. */
    assert_int_equal(redlock_repair_plan(5, 0, 0x1u, 0x1fu, 0x6u, &read, &need),
                     RL_REPAIR_WAIT);
    /* Restarts alone leave too few: best effort reads every node up. */
    assert_int_equal(redlock_repair_plan(5, 0, 0x7u, 0x1fu, 0x8u, &read, &need),
                     RL_REPAIR_BEST_EFFORT);
    assert_int_equal(read, 0x1eu);
    assert_int_equal(need, 4);
}

/* The restart quarantine: only grants count, and they age out. */
static void test_grants_age_out(void **state)
{
    (void)state;
    struct redlock_grants g = {0};
    assert_int_equal(redlock_grants_max_ttl(&g, 0), 0);
    assert_int_equal(redlock_quarantine_ms(&g, 0, 0, 30000), 30000);
    assert_int_equal(redlock_quarantine_ms(&g, 0, 200, 30000), 200);
    /* a day granted at t=1 s: a day of quarantine until it has expired */
    redlock_grants_add(&g, 86400000, 1000 * MS, 1000 * MS);
    redlock_grants_add(&g, 45000, 2000 * MS, 2000 * MS);
    assert_int_equal(redlock_quarantine_ms(&g, 3000 * MS, 0, 30000), 86400000);
    assert_int_equal(redlock_grants_max_ttl(&g, 86400999ULL * MS), 86400000);
    /* the day is over at 86401 s; the 45 s grant long before */
    assert_int_equal(redlock_grants_max_ttl(&g, 86401000ULL * MS), 0);
    assert_int_equal(redlock_quarantine_ms(&g, 86401000ULL * MS, 0, 30000),
                     30000);
    assert_int_equal(redlock_grants_max_ttl(&g, 46000 * MS), 86400000);

    /* the same ttl again and again: one entry, the latest */
    struct redlock_grants h = {0};
    for (int i = 0; i < 1000; i++) {
        redlock_grants_add(&h, 5000, (uint64_t)i * MS, (uint64_t)i * MS);
    }
    assert_int_equal(h.n, 1);
    assert_int_equal(redlock_grants_max_ttl(&h, 5998 * MS), 5000);
    assert_int_equal(redlock_grants_max_ttl(&h, 5999 * MS), 0);

    /* a shorter grant that ends sooner adds nothing */
    redlock_grants_add(&h, 100, 999 * MS, 999 * MS);
    assert_int_equal(h.n, 1);
    /* a grant already over by now adds nothing either */
    redlock_grants_add(&h, 100, 0, 999 * MS);
    assert_int_equal(h.n, 1);
}

/* Past REDLOCK_GRANTS_MAX steps the answer may be larger than the truth
 * for a while, never smaller. */
static void test_grants_bounded_and_conservative(void **state)
{
    (void)state;
    struct redlock_grants g = {0};
    uint32_t ttl[40];
    uint64_t sent[40];
    /* longer TTLs sent earlier, so that none covers another */
    for (int i = 0; i < 40; i++) {
        ttl[i] = (uint32_t)(100000 - i * 1000);
        sent[i] = (uint64_t)i * 2000 * MS;
        redlock_grants_add(&g, ttl[i], sent[i], sent[i]);
        assert_true(g.n <= REDLOCK_GRANTS_MAX);
    }
    assert_int_equal(g.n, REDLOCK_GRANTS_MAX);
    for (uint64_t t = 78000; t < 200000; t += 500) {
        uint32_t truth = 0;
        for (int i = 0; i < 40; i++) {
            if (sent[i] + (uint64_t)ttl[i] * MS > t * MS && ttl[i] > truth) {
                truth = ttl[i];
            }
        }
        uint32_t got = redlock_grants_max_ttl(&g, t * MS);
        assert_true(got >= truth);
        /* merging took the shortest: the longest stays exact, and once
         * every grant is over nothing is left */
        if (truth == 100000 || truth == 0) {
            assert_int_equal(got, truth);
        }
    }
}

static void test_busy_needs_reachable_quorum(void **state)
{
    (void)state;
    struct redlock_round r;
    /* nodes 2,3,4 down (skipped): one busy answer is not evidence enough */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0x1cu);
    assert_int_equal(redlock_round_outcome(&r), RL_LOST_NOQUORUM);
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0x18u);
    assert_int_equal(answer_at(&r, 0, RL_BUSY, 0, 10, 1), RL_LOST_BUSY);
}

static void test_all_skipped_decides_at_start(void **state)
{
    (void)state;
    struct redlock_round r;
    redlock_round_start(&r, 3, 1000, 0.01, 0, 0x7u);
    assert_int_equal(redlock_round_outcome(&r), RL_LOST_NOQUORUM);
    assert_int_equal(redlock_rollback_set(&r), 0);
}

static void test_quorum_too_late(void **state)
{
    (void)state;
    struct redlock_round r;
    redlock_round_start(&r, 3, 100, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 50 * MS);
    /* 100 - 97 - 3 = 0: not valid */
    assert_int_equal(answer_at(&r, 1, RL_OK, 0, -1, 97 * MS), RL_LOST_NOQUORUM);
    assert_true(r.too_late);
    assert_int_equal(redlock_rollback_set(&r), 0x7u);
}

static void test_single_node(void **state)
{
    (void)state;
    struct redlock_round r;
    redlock_round_start(&r, 1, 1000, 0.01, 0, 0);
    assert_int_equal(answer_at(&r, 0, RL_OK, 1, -1, 1), RL_WON);
}

static void test_even_nodes(void **state)
{
    (void)state;
    struct redlock_round r;
    redlock_round_start(&r, 4, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 1);
    answer_at(&r, 1, RL_OK, 0, -1, 1);
    assert_int_equal(answer_at(&r, 2, RL_BUSY, 0, 3, 1), RL_UNDECIDED);
    assert_int_equal(answer_at(&r, 3, RL_BUSY, 0, 3, 1), RL_LOST_BUSY);
}

static void test_duplicate_answer_ignored(void **state)
{
    (void)state;
    struct redlock_round r;
    redlock_round_start(&r, 3, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 1);
    /* a second answer for the same node must not count twice */
    assert_int_equal(answer_at(&r, 0, RL_OK, 0, -1, 1), RL_UNDECIDED);
    assert_int_equal(r.n_ok, 1);
    assert_int_equal(answer_at(&r, 7, RL_OK, 0, -1, 1), RL_UNDECIDED);
}

/* The clock is read once, by the answer that completes the quorum, and the
 * validity is measured at that reading: not at an earlier answer's time
 * (that would overstate it) and not again for answers after the decision. */
static void test_clock_read_at_decision_only(void **state)
{
    (void)state;
    struct redlock_round r;
    clock_reads = 0;
    redlock_round_start(&r, 5, 1000, 0.0, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 100 * MS);
    answer_at(&r, 1, RL_BUSY, 0, 50, 200 * MS);
    answer_at(&r, 2, RL_OK, 0, -1, 300 * MS);
    assert_int_equal(clock_reads, 0);
    assert_int_equal(answer_at(&r, 3, RL_OK, 0, -1, 400 * MS), RL_WON);
    assert_int_equal(clock_reads, 1);
    /* 1000 - 400 - 2, from the reading at the decision */
    assert_int_equal(r.validity_ms, 598);
    assert_int_equal(r.decided_us, 400 * MS);
    answer_at(&r, 4, RL_OK, 0, -1, 900 * MS);
    assert_int_equal(clock_reads, 1);
    assert_int_equal(r.validity_ms, 598);
    assert_int_equal(r.decided_us, 400 * MS);
}

static void test_backoff(void **state)
{
    (void)state;
    assert_int_equal(redlock_backoff_ms(0, 100, 5000, 0.0), 50);
    assert_int_equal(redlock_backoff_ms(0, 100, 5000, 0.999), 99);
    assert_int_equal(redlock_backoff_ms(3, 100, 5000, 0.0), 400);
    assert_int_equal(redlock_backoff_ms(30, 100, 5000, 0.0), 2500);
    assert_true(redlock_backoff_ms(30, 100, 5000, 0.99) <= 5000);
    assert_true(redlock_backoff_ms(0, 1, 5000, 0.0) >= 1);
    for (unsigned a = 0; a < 40; a++) {
        uint32_t v = redlock_backoff_ms(a, 100, 5000, 0.5);
        assert_true(v >= 1 && v <= 5000);
    }
}

static void test_retry_delay(void **state)
{
    (void)state;
    assert_int_equal(redlock_retry_delay_ms(0, -1, 0, 0.5), 0);
    /* never past the remaining wait */
    assert_int_equal(redlock_retry_delay_ms(10, -1, 3, 0.5), 3);
    /* never before the holder's PTTL */
    assert_int_equal(redlock_retry_delay_ms(0, 200, 10000, 0.0), 201);
    assert_int_equal(redlock_retry_delay_ms(0, 200, 100, 0.0), 100);
    uint32_t d = redlock_retry_delay_ms(0, -1, 10000, 0.0);
    assert_true(d >= 1 && d <= 5);
}

/* A semaphore waiter backs off on the slot that frees first, whichever
 * order it tried them in; a slot of unknown PTTL may free now. */
static void test_sem_pttl_min(void **state)
{
    (void)state;
    assert_int_equal(redlock_sem_pttl_min(60000, 1000), 1000);
    assert_int_equal(redlock_sem_pttl_min(1000, 60000), 1000);
    assert_int_equal(redlock_sem_pttl_min(0, 5), 0);
    assert_int_equal(redlock_sem_pttl_min(-1, 1000), -1);
    assert_int_equal(redlock_sem_pttl_min(1000, -1), -1);
    /* folded over slots 0 (1 s), 1 (60 s) from either start */
    int64_t a = redlock_sem_pttl_min(1000, 60000);
    int64_t b = redlock_sem_pttl_min(60000, 1000);
    assert_int_equal(a, b);
    /* the delay then waits for the 1 s slot, not the 60 s one */
    assert_int_equal(redlock_retry_delay_ms(3, a, 5000, 0.0), 1001);
}

/* The fence inspect reports: below every next grant, whichever quorum
 * wins it. */
static void test_fence_floor(void **state)
{
    (void)state;
    /* rounds lost on nodes 4-5 ran their counters ahead: a quorum of
     * nodes 1-3 still grants 1 */
    int64_t ahead[5] = {0, 0, 0, 5, 5};
    assert_int_equal(redlock_fence_floor(5, ahead), 0);
    int64_t even[5] = {7, 7, 7, 7, 7};
    assert_int_equal(redlock_fence_floor(5, even), 7);
    /* a write-back of 9 on a quorum: every quorum meets one 9 */
    int64_t wb[5] = {9, 3, 9, 2, 9};
    assert_int_equal(redlock_fence_floor(5, wb), 9);
    int64_t mixed[5] = {4, 1, 8, 2, 6};
    assert_int_equal(redlock_fence_floor(5, mixed), 4);
    /* a node not read may hold 0 */
    int64_t unread[5] = {9, -1, 9, -1, 9};
    assert_int_equal(redlock_fence_floor(5, unread), 9);
    int64_t unread2[5] = {9, -1, 9, -1, -1};
    assert_int_equal(redlock_fence_floor(5, unread2), 0);
    /* four nodes, quorum 3: the third smallest */
    int64_t four[4] = {1, 8, 3, 5};
    assert_int_equal(redlock_fence_floor(4, four), 5);
    int64_t one[1] = {12};
    assert_int_equal(redlock_fence_floor(1, one), 12);
    /* the bound holds for every quorum: brute force over 5 nodes */
    for (uint32_t q = 0; q < 32; q++) {
        if (__builtin_popcount(q) < 3) {
            continue;
        }
        int64_t mx = 0;
        for (int i = 0; i < 5; i++) {
            if ((q & (1u << i)) && mixed[i] > mx) {
                mx = mixed[i];
            }
        }
        assert_true(mx + 1 > redlock_fence_floor(5, mixed));
    }
}

/* Inspection by the quorum rules of release: a state needs more than
 * n - quorum nodes; otherwise no_quorum. */
static void test_inspect_decide(void **state)
{
    (void)state;
#define F RL_PEEK_FAILED
#define R RL_PEEK_FREE
#define H RL_PEEK_HELD
#define D RL_PEEK_DONE
    static const struct {
        int n;
        enum redlock_peek peek[5];
        int64_t pttl[5];
        enum redlock_state want;
        int agree;
        int64_t pttl_min;
    } cases[] = {
        {5, {H, H, H, H, H}, {900, 800, 950, 990, 700}, RL_STATE_HELD, 5, 700},
        {5, {H, H, H, F, F}, {900, 800, 950, -1, -1}, RL_STATE_HELD, 3, 800},
        {5, {H, H, F, F, F}, {900, 800, -1, -1, -1}, RL_STATE_NO_QUORUM, 2, -1},
        {5, {R, R, R, H, H}, {-2, -2, -2, 5, 6}, RL_STATE_FREE, 3, -1},
        {5, {R, R, H, H, F}, {-2, -2, 5, 6, -1}, RL_STATE_NO_QUORUM, 2, -1},
        {5, {D, D, D, H, R}, {50, 40, 60, 5, -2}, RL_STATE_DONE, 3, 40},
        {5, {F, F, F, F, F}, {-1, -1, -1, -1, -1}, RL_STATE_NO_QUORUM, 0, -1},
        /* a key without expiry has no PTTL to report */
        {5, {H, H, H, R, R}, {-1, 30, -1, -2, -2}, RL_STATE_HELD, 3, 30},
        /* n = 4: quorum 3, two nodes suffice; a tie is never "free" */
        {4, {R, R, H, H}, {-2, -2, 7, 9}, RL_STATE_HELD, 2, 7},
        {4, {R, R, R, H}, {-2, -2, -2, 9}, RL_STATE_FREE, 3, -1},
        {1, {R}, {-2}, RL_STATE_FREE, 1, -1},
        {1, {F}, {-1}, RL_STATE_NO_QUORUM, 0, -1},
        {3, {H, R, F}, {9, -2, -1}, RL_STATE_NO_QUORUM, 1, -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct redlock_inspect d;
        redlock_inspect_decide(cases[i].n, cases[i].peek, cases[i].pttl, &d);
        if (d.state != cases[i].want || d.agree != cases[i].agree ||
            d.pttl_min != cases[i].pttl_min) {
            print_error("case %zu: state %d agree %d pttl %lld\n", i,
                        (int)d.state, d.agree, (long long)d.pttl_min);
        }
        assert_int_equal(d.state, cases[i].want);
        assert_int_equal(d.agree, cases[i].agree);
        assert_int_equal(d.pttl_min, cases[i].pttl_min);
    }
#undef F
#undef R
#undef H
#undef D
}

/* Reply views for the classifiers. */
static struct redlock_reply rv_nil(void)
{
    struct redlock_reply r = {.kind = RLR_NIL};
    return r;
}

static struct redlock_reply rv_str(const char *s)
{
    struct redlock_reply r = {.kind = RLR_STRING, .str = s, .len = strlen(s)};
    return r;
}

static struct redlock_reply rv_int(long long v)
{
    struct redlock_reply r = {.kind = RLR_INTEGER, .integer = v};
    return r;
}

static struct redlock_reply rv_err(const char *s)
{
    struct redlock_reply r = {.kind = RLR_ERROR, .str = s, .len = strlen(s)};
    return r;
}

static struct redlock_reply rv_arr(const struct redlock_reply *e, size_t n)
{
    struct redlock_reply r = {.kind = RLR_ARRAY, .elem = e, .n_elem = n};
    return r;
}

static enum redlock_node_result classify(enum redlock_acquire_form form,
                                         struct redlock_reply r,
                                         int64_t *fence, int64_t *pttl)
{
    *fence = 0;
    *pttl = -1;
    return redlock_classify_acquire(form, &r, fence, pttl);
}

static void test_classify_set_get(void **state)
{
    (void)state;
    int64_t f, t;
    /* nil: the key was absent and is set now */
    assert_int_equal(classify(RL_FORM_SET_GET, rv_nil(), &f, &t), RL_OK);
    assert_int_equal(f, 0);
    /* another holder's token, or ours from an earlier attempt: busy, and
     * no PTTL in this form (asked separately) */
    assert_int_equal(
        classify(RL_FORM_SET_GET, rv_str("0123456789abcdef0123456789abcdef"),
                 &f, &t),
        RL_BUSY);
    assert_int_equal(t, -1);
    /* a done mark is told apart from busy */
    assert_int_equal(classify(RL_FORM_SET_GET,
                              rv_str("done:0123456789abcdef0123456789abcdef"),
                              &f, &t),
                     RL_DONE);
    assert_int_equal(classify(RL_FORM_SET_GET, rv_str("done:"), &f, &t),
                     RL_DONE);
    /* a prefix of the mark is not a mark */
    assert_int_equal(classify(RL_FORM_SET_GET, rv_str("done"), &f, &t),
                     RL_BUSY);
    assert_int_equal(classify(RL_FORM_SET_GET, rv_str(""), &f, &t), RL_BUSY);
    /* errors and odd shapes: unknown whether it applied */
    assert_int_equal(
        classify(RL_FORM_SET_GET, rv_err("WRONGTYPE Operation"), &f, &t),
        RL_FAILED);
    assert_int_equal(classify(RL_FORM_SET_GET, rv_int(1), &f, &t), RL_FAILED);
    struct redlock_reply e[1] = {rv_nil()};
    assert_int_equal(classify(RL_FORM_SET_GET, rv_arr(e, 1), &f, &t),
                     RL_FAILED);
}

static void test_classify_set_get_incr(void **state)
{
    (void)state;
    int64_t f, t;
    struct redlock_reply won[2] = {rv_nil(), rv_int(42)};
    assert_int_equal(classify(RL_FORM_SET_GET_INCR, rv_arr(won, 2), &f, &t),
                     RL_OK);
    assert_int_equal(f, 42);
    struct redlock_reply busy[2] = {rv_str("abc"), rv_int(43)};
    assert_int_equal(classify(RL_FORM_SET_GET_INCR, rv_arr(busy, 2), &f, &t),
                     RL_BUSY);
    assert_int_equal(f, 0); /* the counter only counts for a win */
    struct redlock_reply done[2] = {rv_str("done:abc"), rv_int(44)};
    assert_int_equal(classify(RL_FORM_SET_GET_INCR, rv_arr(done, 2), &f, &t),
                     RL_DONE);
    /* an error inside the transaction, EXEC refused, or a nil EXEC */
    struct redlock_reply bad[2] = {rv_err("WRONGTYPE"), rv_int(45)};
    assert_int_equal(classify(RL_FORM_SET_GET_INCR, rv_arr(bad, 2), &f, &t),
                     RL_FAILED);
    struct redlock_reply badinc[2] = {rv_nil(), rv_err("ERR not an integer")};
    assert_int_equal(classify(RL_FORM_SET_GET_INCR, rv_arr(badinc, 2), &f, &t),
                     RL_FAILED);
    assert_int_equal(classify(RL_FORM_SET_GET_INCR,
                              rv_err("EXECABORT Transaction discarded"), &f,
                              &t),
                     RL_FAILED);
    assert_int_equal(classify(RL_FORM_SET_GET_INCR, rv_nil(), &f, &t),
                     RL_FAILED);
    assert_int_equal(classify(RL_FORM_SET_GET_INCR, rv_arr(won, 1), &f, &t),
                     RL_FAILED);
}

static void test_classify_script(void **state)
{
    (void)state;
    int64_t f, t;
    struct redlock_reply set[2] = {rv_int(1), rv_int(7)};
    assert_int_equal(classify(RL_FORM_SCRIPT, rv_arr(set, 2), &f, &t), RL_OK);
    assert_int_equal(f, 7);
    struct redlock_reply held[2] = {rv_int(0), rv_int(1500)};
    assert_int_equal(classify(RL_FORM_SCRIPT, rv_arr(held, 2), &f, &t),
                     RL_BUSY);
    assert_int_equal(t, 1500);
    struct redlock_reply done[2] = {rv_int(2), rv_int(900)};
    assert_int_equal(classify(RL_FORM_SCRIPT, rv_arr(done, 2), &f, &t),
                     RL_DONE);
    struct redlock_reply odd[2] = {rv_int(3), rv_int(0)};
    assert_int_equal(classify(RL_FORM_SCRIPT, rv_arr(odd, 2), &f, &t),
                     RL_FAILED);
    struct redlock_reply strs[2] = {rv_str("1"), rv_int(0)};
    assert_int_equal(classify(RL_FORM_SCRIPT, rv_arr(strs, 2), &f, &t),
                     RL_FAILED);
    assert_int_equal(classify(RL_FORM_SCRIPT, rv_err("NOSCRIPT"), &f, &t),
                     RL_FAILED);
    assert_int_equal(classify(RL_FORM_SCRIPT, rv_nil(), &f, &t), RL_FAILED);
}

static void test_classify_flag(void **state)
{
    (void)state;
    struct redlock_reply r = rv_int(1);
    assert_int_equal(redlock_classify_flag(&r), RL_OK);
    r = rv_int(0);
    assert_int_equal(redlock_classify_flag(&r), RL_BUSY);
    r = rv_int(2);
    assert_int_equal(redlock_classify_flag(&r), RL_FAILED);
    r = rv_err("BUSY Redis is busy running a script");
    assert_int_equal(redlock_classify_flag(&r), RL_FAILED);
    r = rv_str("1");
    assert_int_equal(redlock_classify_flag(&r), RL_FAILED);
}

static void test_holder_pttl(void **state)
{
    (void)state;
    struct redlock_round r;
    redlock_round_start(&r, 5, 30000, 0.01, 0, 0);
    assert_int_equal(r.pttl_min, -1);
    redlock_round_holder_pttl(&r, -2); /* key gone meanwhile */
    assert_int_equal(r.pttl_min, -1);
    redlock_round_holder_pttl(&r, 800);
    redlock_round_holder_pttl(&r, 1200);
    assert_int_equal(r.pttl_min, 800);
    redlock_round_holder_pttl(&r, 0);
    assert_int_equal(r.pttl_min, 0);
}

/* A short ttl or a large drift factor leaves less validity
 * than ttl / 3; the next renewal must still come before the give-up. */
static void test_renew_schedule(void **state)
{
    (void)state;
    /* ttl 1000, drift 0.45: validity 548 ms, give-up 250 ms before it */
    uint64_t valid = 548 * MS;
    uint64_t give_up = redlock_renew_give_up_us(valid, 1000, 250);
    assert_int_equal(give_up, 298 * MS);
    uint64_t next = redlock_renew_next_us(0, give_up, 1000, 0.0);
    assert_int_equal(next, 149 * MS); /* half the time to give-up */
    assert_true(next < give_up);
    /* a long lock: ttl / 3, less the jitter */
    give_up = redlock_renew_give_up_us(29000 * MS, 30000, 250);
    assert_int_equal(give_up, 29000 * MS - 270 * MS);
    assert_int_equal(redlock_renew_next_us(0, give_up, 30000, 0.0), 10000 * MS);
    uint64_t j = redlock_renew_next_us(0, give_up, 30000, 0.999999);
    assert_true(j > 9000 * MS && j <= 10000 * MS);
    /* ttl 10: validity 7 ms, give-up a quarter ttl before, renewal first */
    give_up = redlock_renew_give_up_us(7 * MS, 10, 250);
    assert_int_equal(give_up, 4500);
    assert_int_equal(redlock_renew_next_us(0, give_up, 10, 0.0), 2250);
    /* past the give-up: due now */
    assert_int_equal(redlock_renew_next_us(5000, give_up, 10, 0.5), 5000);
    /* the last moment: a tenth of the ttl, at most 20 ms */
    assert_int_equal(redlock_renew_last_us(7 * MS, 10), 6 * MS);
    assert_int_equal(redlock_renew_last_us(29000 * MS, 30000),
                     29000 * MS - 20 * MS);
    assert_int_equal(redlock_renew_last_us(500, 10), 0);
}

/* Renewals may go out a little early to share a wake-up: never more than a
 * 64th of the ttl, nor 20 ms. */
static void test_renew_early(void **state)
{
    (void)state;
    assert_int_equal(redlock_renew_early_us(10), 156);
    assert_int_equal(redlock_renew_early_us(320), 5000);
    assert_int_equal(redlock_renew_early_us(1280), 20000);
    assert_int_equal(redlock_renew_early_us(30000), 20000);
    assert_int_equal(redlock_renew_early_us(0), 0);
}

static void test_renew_decide(void **state)
{
    (void)state;
    uint64_t wake = 0;
    /* ttl 10: valid until 7 ms, give-up 4.5 ms, last 6 ms */
    struct redlock_renew_state s = {.valid_until_us = 7 * MS,
                                    .ttl_ms = 10,
                                    .node_timeout_ms = 250,
                                    .next_renew_us = 2250};
    assert_int_equal(redlock_renew_decide(&s, 1000, &wake), RL_RENEW_WAIT);
    assert_int_equal(wake, 2250);
    /* a node timeout (250 ms) is longer than the validity: the renewal is
     * waited for until the last moment */
    assert_int_equal(redlock_renew_decide(&s, 2300, &wake), RL_RENEW_SEND);
    assert_int_equal(wake, 6 * MS);
    /* a timer firing late, past the give-up: the overdue renewal is sent
     * while the lock is valid, and waited for until the last moment */
    assert_int_equal(redlock_renew_decide(&s, 5000, &wake), RL_RENEW_SEND);
    assert_int_equal(wake, 6 * MS);
    assert_int_equal(redlock_renew_decide(&s, 6 * MS, &wake), RL_RENEW_GIVE_UP);
    /* in flight: waited for until the last moment */
    s.sent_us = 2300;
    assert_int_equal(redlock_renew_decide(&s, 4500, &wake), RL_RENEW_WAIT);
    assert_int_equal(wake, 6 * MS);
    assert_int_equal(redlock_renew_decide(&s, 6 * MS, &wake), RL_RENEW_GIVE_UP);
    /* sent late, just before the give-up: the same */
    s.sent_us = 4400;
    assert_int_equal(redlock_renew_decide(&s, 5500, &wake), RL_RENEW_WAIT);
    assert_int_equal(wake, 6 * MS);
    assert_int_equal(redlock_renew_decide(&s, 6 * MS, &wake), RL_RENEW_GIVE_UP);
    /* a long lock: a renewal sent on time is given up at the give-up time
     * (a node timeout before it, the owner has time to act) ... */
    struct redlock_renew_state l = {.valid_until_us = 20000 * MS,
                                    .ttl_ms = 30000,
                                    .node_timeout_ms = 250,
                                    .next_renew_us = 10000 * MS,
                                    .sent_us = 10000 * MS};
    assert_int_equal(redlock_renew_decide(&l, 10100 * MS, &wake),
                     RL_RENEW_WAIT);
    assert_int_equal(wake, 19730 * MS);
    assert_int_equal(redlock_renew_decide(&l, 19730 * MS, &wake),
                     RL_RENEW_GIVE_UP);
    /* ... one sent late gets a node timeout, up to the last moment */
    l.sent_us = 19700 * MS;
    assert_int_equal(redlock_renew_decide(&l, 19730 * MS, &wake),
                     RL_RENEW_WAIT);
    assert_int_equal(wake, 19950 * MS);
    l.sent_us = 19900 * MS;
    assert_int_equal(redlock_renew_decide(&l, 19930 * MS, &wake),
                     RL_RENEW_WAIT);
    assert_int_equal(wake, 19980 * MS);
    /* A complete in flight pauses renewal, never the
     * give-up */
    s.sent_us = 0;
    s.paused = true;
    assert_int_equal(redlock_renew_decide(&s, 2300, &wake), RL_RENEW_WAIT);
    assert_int_equal(wake, 4500);
    assert_int_equal(redlock_renew_decide(&s, 4500, &wake), RL_RENEW_GIVE_UP);
}

/* ---- verdicts ------------------------------------------------------------ */

/* A round of n nodes sent at 0 (ttl 1000, drift 0.01: validity 988 at
 * once) with node i answering res[i] at 1 ms; RL_PENDING leaves it open. */
static void round_with(struct redlock_round *r, int n,
                       const enum redlock_node_result *res)
{
    redlock_round_start(r, n, 1000, 0.01, 0, 0);
    for (int i = 0; i < n; i++) {
        if (res[i] != RL_PENDING) {
            answer_at(r, i, res[i], 0, -1, 1 * MS);
        }
    }
}

static void test_op_sets_ttl_and_asks(void **state)
{
    (void)state;
    assert_true(redlock_op_sets_ttl(RL_OP_ACQUIRE));
    assert_true(redlock_op_sets_ttl(RL_OP_EXTEND));
    assert_false(redlock_op_sets_ttl(RL_OP_RELEASE));
    assert_false(redlock_op_sets_ttl(RL_OP_COMPLETE));

    struct redlock_round r;
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    /* open round: everyone is asked, but a quarantined node never helps an
     * acquisition to its quorum */
    assert_true(redlock_round_asks(RL_OP_ACQUIRE, &r, false));
    assert_false(redlock_round_asks(RL_OP_ACQUIRE, &r, true));
    assert_true(redlock_round_asks(RL_OP_EXTEND, &r, true));
    assert_true(redlock_round_asks(RL_OP_RELEASE, &r, true));
    assert_true(redlock_round_asks(RL_OP_COMPLETE, &r, true));
    /* decided by the skipped nodes alone (3 of 5 skipped): only release and
     * complete still go, to delete what they can */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0x7u);
    assert_int_equal(redlock_round_outcome(&r), RL_LOST_NOQUORUM);
    assert_false(redlock_round_asks(RL_OP_ACQUIRE, &r, false));
    assert_false(redlock_round_asks(RL_OP_EXTEND, &r, false));
    assert_true(redlock_round_asks(RL_OP_RELEASE, &r, false));
    assert_true(redlock_round_asks(RL_OP_COMPLETE, &r, true));
    /* the boundary: 2 of 5 skipped leaves a quorum to ask */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0x3u);
    assert_true(redlock_round_asks(RL_OP_ACQUIRE, &r, false));
    /* one node, skipped: nothing but release and complete */
    redlock_round_start(&r, 1, 1000, 0.01, 0, 0x1u);
    assert_false(redlock_round_asks(RL_OP_ACQUIRE, &r, false));
    assert_true(redlock_round_asks(RL_OP_RELEASE, &r, false));
}

static void test_round_deadline(void **state)
{
    (void)state;
    /* a long TTL: the node timeout ends the round first */
    assert_int_equal(redlock_round_deadline_ms(RL_OP_ACQUIRE, 30000, 0.01, 250),
                     -1);
    /* validity 200 - (2 + 2) = 196 < 250: the round ends there */
    assert_int_equal(redlock_round_deadline_ms(RL_OP_ACQUIRE, 200, 0.01, 250),
                     196);
    assert_int_equal(redlock_round_deadline_ms(RL_OP_EXTEND, 200, 0.01, 250),
                     196);
    /* the boundary: validity equal to the node timeout arms nothing */
    assert_int_equal(redlock_round_deadline_ms(RL_OP_ACQUIRE, 255, 0.01, 250),
                     -1);
    assert_int_equal(redlock_round_deadline_ms(RL_OP_ACQUIRE, 254, 0.01, 250),
                     249);
    /* clock drift takes its share: half the TTL at 0.5 */
    assert_int_equal(redlock_round_deadline_ms(RL_OP_ACQUIRE, 400, 0.5, 250),
                     198);
    /* zero or negative validity: at once */
    assert_int_equal(redlock_round_deadline_ms(RL_OP_ACQUIRE, 3, 0.01, 250), 0);
    assert_int_equal(redlock_round_deadline_ms(RL_OP_ACQUIRE, 1, 0.01, 250), 0);
    assert_int_equal(redlock_round_deadline_ms(RL_OP_ACQUIRE, 0, 0.0, 250), 0);
    /* release and complete set no TTL: never an early end */
    assert_int_equal(redlock_round_deadline_ms(RL_OP_RELEASE, 1, 0.01, 250),
                     -1);
    assert_int_equal(redlock_round_deadline_ms(RL_OP_COMPLETE, 1, 0.01, 250),
                     -1);
}

static void test_round_expire(void **state)
{
    (void)state;
    struct redlock_round r;
    /* 2 ok, 3 pending: each failure is counted until certain */
    const enum redlock_node_result two_ok[5] = {RL_OK, RL_OK, RL_PENDING,
                                                RL_PENDING, RL_PENDING};
    round_with(&r, 5, two_ok);
    clock_reads = 0;
    assert_int_equal(redlock_round_expire(&r, fake_clock), RL_LOST_NOQUORUM);
    assert_true(r.too_late);
    assert_int_equal(clock_reads, 0);
    assert_int_equal(r.n_failed, 3);
    assert_int_equal(redlock_rollback_set(&r), 0x1fu);

    /* decided before the last pending node: that one stays pending */
    const enum redlock_node_result busy[5] = {RL_BUSY, RL_BUSY, RL_OK,
                                              RL_PENDING, RL_PENDING};
    round_with(&r, 5, busy);
    assert_int_equal(redlock_round_expire(&r, fake_clock), RL_LOST_BUSY);
    assert_true(r.too_late);
    assert_int_equal(r.result[3], RL_FAILED);
    assert_int_equal(r.result[4], RL_PENDING);

    /* already decided: nothing changes, too_late stays as it was */
    const enum redlock_node_result won[5] = {RL_OK, RL_OK, RL_OK, RL_PENDING,
                                             RL_PENDING};
    round_with(&r, 5, won);
    assert_int_equal(redlock_round_expire(&r, fake_clock), RL_WON);
    assert_false(r.too_late);
    assert_int_equal(r.n_pending, 2);

    /* one node */
    redlock_round_start(&r, 1, 1000, 0.01, 0, 0);
    assert_int_equal(redlock_round_expire(&r, fake_clock), RL_LOST_NOQUORUM);
    assert_true(r.too_late);
}

static void test_acquire_verdict(void **state)
{
    (void)state;
    struct redlock_round r;
    struct redlock_verdict v;
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    redlock_acquire_verdict(&r, false, &v);
    assert_int_equal(v.answer, RL_ANSWER_NONE);
    assert_int_equal(v.rollback, 0);

    /* won: the round's validity, from the moment it was measured */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 1 * MS);
    answer_at(&r, 1, RL_OK, 0, -1, 2 * MS);
    answer_at(&r, 2, RL_OK, 0, -1, 10 * MS);
    redlock_acquire_verdict(&r, false, &v);
    assert_int_equal(v.answer, RL_ANSWER_OK);
    assert_int_equal(v.validity_ms, 1000 - 10 - 12);
    assert_int_equal(v.valid_until_us, 10 * MS + 978 * MS);
    assert_false(v.send_fence);
    assert_int_equal(v.rollback, 0);
    assert_int_equal(v.fence, 0);
    /* won with a fence: the write-back of the largest counter first, no
     * answer yet */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 41, -1, 1 * MS);
    answer_at(&r, 1, RL_BUSY, 0, 99, 1 * MS);
    answer_at(&r, 2, RL_OK, 43, -1, 2 * MS);
    answer_at(&r, 3, RL_OK, 42, -1, 3 * MS);
    redlock_acquire_verdict(&r, true, &v);
    assert_int_equal(v.answer, RL_ANSWER_NONE);
    assert_true(v.send_fence);
    assert_int_equal(v.fence, 43);
    assert_int_equal(v.rollback, 0);

    /* busy: the nodes that may hold our key are rolled back */
    const enum redlock_node_result busy[5] = {RL_BUSY, RL_OK, RL_BUSY, RL_BUSY,
                                              RL_PENDING};
    round_with(&r, 5, busy);
    redlock_acquire_verdict(&r, true, &v);
    assert_int_equal(v.answer, RL_ANSWER_BUSY);
    assert_false(v.send_fence);
    assert_int_equal(v.rollback, (1u << 1) | (1u << 4));

    /* done */
    const enum redlock_node_result done[5] = {RL_DONE, RL_DONE, RL_DONE,
                                              RL_PENDING, RL_PENDING};
    round_with(&r, 5, done);
    redlock_acquire_verdict(&r, false, &v);
    assert_int_equal(v.answer, RL_ANSWER_DONE);
    assert_int_equal(v.rollback, (1u << 3) | (1u << 4));

    /* a quorum too late: no_quorum, too_late, everyone that said ok */
    redlock_round_start(&r, 3, 100, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 50 * MS);
    answer_at(&r, 1, RL_OK, 0, -1, 97 * MS); /* validity 100-97-3 = 0 */
    redlock_acquire_verdict(&r, false, &v);
    assert_int_equal(v.answer, RL_ANSWER_NO_QUORUM);
    assert_true(v.too_late);
    assert_int_equal(v.rollback, 0x7u);

    /* 32 nodes: the mask reaches bit 31 */
    redlock_round_start(&r, 32, 1000, 0.01, 0, 0);
    for (int i = 0; i < 16; i++) {
        answer_at(&r, i, RL_BUSY, 0, -1, 1 * MS);
    }
    assert_int_equal(answer_at(&r, 16, RL_BUSY, 0, -1, 1 * MS), RL_LOST_BUSY);
    redlock_acquire_verdict(&r, false, &v);
    assert_int_equal(v.answer, RL_ANSWER_BUSY);
    assert_int_equal(v.rollback, 0xfffe0000u);
}

static void test_other_verdict(void **state)
{
    (void)state;
    struct redlock_round r;
    struct redlock_verdict v;
    /* undecided */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    redlock_other_verdict(RL_OP_RELEASE, &r, &v);
    assert_int_equal(v.answer, RL_ANSWER_NONE);

    /* won: ok with validity, never a rollback */
    const enum redlock_node_result won[5] = {RL_OK, RL_OK, RL_OK, RL_FAILED,
                                             RL_PENDING};
    round_with(&r, 5, won);
    redlock_other_verdict(RL_OP_EXTEND, &r, &v);
    assert_int_equal(v.answer, RL_ANSWER_OK);
    assert_int_equal(v.validity_ms, 1000 - 1 - 12);
    assert_int_equal(v.valid_until_us, 1 * MS + 987 * MS);
    assert_int_equal(v.rollback, 0);

    /* 3 of 5 not held: proof (more than n - quorum = 2) */
    const enum redlock_node_result gone[5] = {RL_BUSY, RL_BUSY, RL_BUSY,
                                              RL_PENDING, RL_PENDING};
    round_with(&r, 5, gone);
    for (int op = RL_OP_EXTEND; op <= RL_OP_COMPLETE; op++) {
        redlock_other_verdict((enum redlock_op)op, &r, &v);
        assert_int_equal(v.answer, RL_ANSWER_NOT_HELD);
    }
    /* 2 not held, 3 failed: the failed ones may hold it still */
    const enum redlock_node_result two[5] = {RL_BUSY, RL_BUSY, RL_FAILED,
                                             RL_FAILED, RL_FAILED};
    round_with(&r, 5, two);
    for (int op = RL_OP_EXTEND; op <= RL_OP_COMPLETE; op++) {
        redlock_other_verdict((enum redlock_op)op, &r, &v);
        assert_int_equal(v.answer, RL_ANSWER_NO_QUORUM);
        assert_false(v.too_late);
    }
    /* 2 applied, 1 not held, 2 failed: a release or complete leaves 3
     * without the token; an extend that applied keeps it there */
    const enum redlock_node_result mixed[5] = {RL_OK, RL_OK, RL_BUSY, RL_FAILED,
                                               RL_FAILED};
    round_with(&r, 5, mixed);
    assert_int_equal(r.outcome, RL_LOST_BUSY);
    redlock_other_verdict(RL_OP_RELEASE, &r, &v);
    assert_int_equal(v.answer, RL_ANSWER_OK);
    assert_int_equal(v.validity_ms, 0);
    redlock_other_verdict(RL_OP_COMPLETE, &r, &v);
    assert_int_equal(v.answer, RL_ANSWER_NOT_HELD);
    redlock_other_verdict(RL_OP_EXTEND, &r, &v);
    assert_int_equal(v.answer, RL_ANSWER_NO_QUORUM);

    /* a release where none deleted it: not held */
    redlock_other_verdict(RL_OP_RELEASE, &r, &v);
    round_with(&r, 5, gone);
    redlock_other_verdict(RL_OP_RELEASE, &r, &v);
    assert_int_equal(v.answer, RL_ANSWER_NOT_HELD);

    /* an extend whose quorum came too late */
    redlock_round_start(&r, 3, 100, 0.01, 0, 0);
    answer_at(&r, 0, RL_OK, 0, -1, 99 * MS);
    answer_at(&r, 1, RL_OK, 0, -1, 99 * MS);
    redlock_other_verdict(RL_OP_EXTEND, &r, &v);
    assert_int_equal(v.answer, RL_ANSWER_NO_QUORUM);
    assert_true(v.too_late);

    /* n = 4: quorum 3, proof needs 2 without the token */
    const enum redlock_node_result four1[4] = {RL_BUSY, RL_FAILED, RL_FAILED,
                                               RL_PENDING};
    round_with(&r, 4, four1);
    redlock_other_verdict(RL_OP_EXTEND, &r, &v);
    assert_int_equal(v.answer, RL_ANSWER_NO_QUORUM);
    const enum redlock_node_result four2[4] = {RL_BUSY, RL_BUSY, RL_PENDING,
                                               RL_PENDING};
    round_with(&r, 4, four2);
    redlock_other_verdict(RL_OP_EXTEND, &r, &v);
    assert_int_equal(v.answer, RL_ANSWER_NOT_HELD);

    /* n = 1 */
    const enum redlock_node_result one_busy[1] = {RL_BUSY};
    round_with(&r, 1, one_busy);
    redlock_other_verdict(RL_OP_RELEASE, &r, &v);
    assert_int_equal(v.answer, RL_ANSWER_NOT_HELD);
    const enum redlock_node_result one_failed[1] = {RL_FAILED};
    round_with(&r, 1, one_failed);
    redlock_other_verdict(RL_OP_RELEASE, &r, &v);
    assert_int_equal(v.answer, RL_ANSWER_NO_QUORUM);
}

static void test_fence_verdict(void **state)
{
    (void)state;
    struct redlock_round acq, fence;
    struct redlock_verdict v;
    redlock_round_start(&acq, 5, 1000, 0.01, 100 * MS, 0);
    answer_at(&acq, 0, RL_OK, 4, -1, 101 * MS);
    answer_at(&acq, 1, RL_OK, 5, -1, 101 * MS);
    answer_at(&acq, 2, RL_OK, 6, -1, 102 * MS);
    assert_int_equal(acq.outcome, RL_WON);

    /* the write-back's clock starts with the acquisition */
    redlock_fence_start(&fence, &acq);
    assert_int_equal(fence.start_us, 100 * MS);
    assert_int_equal(fence.n_nodes, 5);
    assert_int_equal(fence.ttl_ms, 1000);
    assert_int_equal(fence.outcome, RL_UNDECIDED);
    clock_reads = 0;
    redlock_fence_verdict(&acq, &fence, fake_clock, &v);
    assert_int_equal(v.answer, RL_ANSWER_NONE);
    assert_int_equal(clock_reads, 0);

    /* a quorum raised it: validity from the acquisition's start, read
     * when the verdict is asked */
    answer_at(&fence, 0, RL_OK, 0, -1, 103 * MS);
    answer_at(&fence, 1, RL_OK, 0, -1, 103 * MS);
    answer_at(&fence, 2, RL_OK, 0, -1, 104 * MS);
    fake_now = 105 * MS;
    clock_reads = 0;
    redlock_fence_verdict(&acq, &fence, fake_clock, &v);
    assert_int_equal(clock_reads, 1);
    assert_int_equal(v.answer, RL_ANSWER_OK);
    assert_int_equal(v.validity_ms, 1000 - 5 - 12);
    assert_int_equal(v.valid_until_us, 105 * MS + 983 * MS);
    assert_int_equal(v.rollback, 0);

    /* won, but no validity left by the time it is read: rolled back */
    fake_now = 100 * MS + 988 * MS; /* validity exactly 0 */
    redlock_fence_verdict(&acq, &fence, fake_clock, &v);
    assert_int_equal(v.answer, RL_ANSWER_NO_QUORUM);
    assert_true(v.too_late);
    assert_int_equal(v.rollback, 0x1fu);

    /* the write-back lost its quorum: every node rolled back */
    redlock_fence_start(&fence, &acq);
    for (int i = 0; i < 3; i++) {
        answer_at(&fence, i, RL_FAILED, 0, -1, 110 * MS);
    }
    assert_int_equal(fence.outcome, RL_LOST_NOQUORUM);
    clock_reads = 0;
    redlock_fence_verdict(&acq, &fence, fake_clock, &v);
    assert_int_equal(clock_reads, 0);
    assert_int_equal(v.answer, RL_ANSWER_NO_QUORUM);
    assert_false(v.too_late);
    assert_int_equal(v.rollback, 0x1fu);

    /* its quorum came too late on its own */
    redlock_fence_start(&fence, &acq);
    for (int i = 0; i < 3; i++) {
        answer_at(&fence, i, RL_OK, 0, -1, 1100 * MS);
    }
    assert_int_equal(fence.outcome, RL_LOST_NOQUORUM);
    redlock_fence_verdict(&acq, &fence, fake_clock, &v);
    assert_true(v.too_late);

    /* 32 nodes, none could be asked: all 32 rolled back */
    redlock_round_start(&acq, 32, 1000, 0.01, 0, 0);
    redlock_fence_start(&fence, &acq);
    for (int i = 0; i < 32; i++) {
        answer_at(&fence, i, RL_SKIPPED, 0, -1, 1 * MS);
    }
    redlock_fence_verdict(&acq, &fence, fake_clock, &v);
    assert_int_equal(v.answer, RL_ANSWER_NO_QUORUM);
    assert_int_equal(v.rollback, UINT32_MAX);
    /* one node */
    redlock_round_start(&acq, 1, 1000, 0.01, 0, 0);
    redlock_fence_start(&fence, &acq);
    answer_at(&fence, 0, RL_FAILED, 0, -1, 1 * MS);
    redlock_fence_verdict(&acq, &fence, fake_clock, &v);
    assert_int_equal(v.rollback, 0x1u);
}

static void test_ask_holder_pttl(void **state)
{
    (void)state;
    assert_true(redlock_ask_holder_pttl(RL_FORM_SET_GET, RL_BUSY, true, false));
    assert_true(
        redlock_ask_holder_pttl(RL_FORM_SET_GET_INCR, RL_BUSY, true, false));
    /* the script's reply carries it */
    assert_false(redlock_ask_holder_pttl(RL_FORM_SCRIPT, RL_BUSY, true, false));
    /* not wanted, not busy, or nobody waits any more */
    assert_false(
        redlock_ask_holder_pttl(RL_FORM_SET_GET, RL_BUSY, false, false));
    assert_false(
        redlock_ask_holder_pttl(RL_FORM_SET_GET, RL_DONE, true, false));
    assert_false(redlock_ask_holder_pttl(RL_FORM_SET_GET, RL_OK, true, false));
    assert_false(redlock_ask_holder_pttl(RL_FORM_SET_GET, RL_BUSY, true, true));
}

static void test_acquire_form_pick(void **state)
{
    (void)state;
    assert_int_equal(redlock_acquire_form_pick(false, 70000, false, false),
                     RL_FORM_SET_GET);
    assert_int_equal(redlock_acquire_form_pick(false, 70000, true, false),
                     RL_FORM_SET_GET_INCR);
    assert_int_equal(redlock_acquire_form_pick(false, 70000, true, true),
                     RL_FORM_SCRIPT);
    /* refused MULTI does not matter without a fence */
    assert_int_equal(redlock_acquire_form_pick(false, 70200, false, true),
                     RL_FORM_SET_GET);
    /* older servers and --acquire-script */
    assert_int_equal(redlock_acquire_form_pick(false, 60999, false, false),
                     RL_FORM_SCRIPT);
    assert_int_equal(redlock_acquire_form_pick(false, 0, true, false),
                     RL_FORM_SCRIPT);
    assert_int_equal(redlock_acquire_form_pick(true, 70400, false, false),
                     RL_FORM_SCRIPT);

    /* EXEC refused by an ACL, or MULTI refused so EXEC had none */
    struct redlock_reply noperm =
        rv_err("NOPERM User u has no permissions to run the 'exec' command");
    struct redlock_reply nomulti = rv_err("ERR EXEC without MULTI");
    struct redlock_reply aborted = rv_err(
        "EXECABORT Transaction discarded because of: NOPERM this user has "
        "no permissions to run the 'exec' command");
    assert_true(redlock_form_refused(RL_FORM_SET_GET_INCR, RL_FAILED, &noperm));
    assert_true(
        redlock_form_refused(RL_FORM_SET_GET_INCR, RL_FAILED, &nomulti));
    assert_true(
        redlock_form_refused(RL_FORM_SET_GET_INCR, RL_FAILED, &aborted));
    /* what the node refused inside the transaction, or the node as a
     * whole, is no reason to give up MULTI/EXEC */
    static const char *const not_multi[] = {
        "EXECABORT Transaction discarded because of previous errors.",
        "BUSY Redis is busy running a script.",
        "LOADING Redis is loading the dataset in memory",
        "OOM command not allowed when used memory > 'maxmemory'.",
        /* the script needs the keys as much as the SET did */
        "NOPERM this user has no permissions to access one of the keys "
        "used as arguments",
    };
    for (size_t k = 0; k < sizeof(not_multi) / sizeof(not_multi[0]); k++) {
        struct redlock_reply e = rv_err(not_multi[k]);
        assert_false(redlock_form_refused(RL_FORM_SET_GET_INCR, RL_FAILED, &e));
    }
    assert_false(redlock_form_refused(RL_FORM_SET_GET_INCR, RL_FAILED, NULL));
    assert_false(redlock_form_refused(RL_FORM_SET_GET_INCR, RL_BUSY, &noperm));
    assert_false(redlock_form_refused(RL_FORM_SET_GET_INCR, RL_OK, &noperm));
    assert_false(redlock_form_refused(RL_FORM_SET_GET, RL_FAILED, &noperm));
    assert_false(redlock_form_refused(RL_FORM_SCRIPT, RL_FAILED, &noperm));
}

static void test_all_nodes(void **state)
{
    (void)state;
    assert_int_equal(redlock_all_nodes(1), 0x1u);
    assert_int_equal(redlock_all_nodes(5), 0x1fu);
    assert_int_equal(redlock_all_nodes(31), 0x7fffffffu);
    assert_int_equal(redlock_all_nodes(32), UINT32_MAX);
}

static void test_classify_set_nx(void **state)
{
    (void)state;
    const struct {
        struct redlock_reply r;
        enum redlock_node_result want;
    } cases[] = {
        {rv_str("OK"), RL_OK},
        {rv_nil(), RL_BUSY},
        {rv_err("ERR wrong number of arguments"), RL_FAILED},
        {rv_str("QUEUED"), RL_FAILED},
        {rv_str("O"), RL_FAILED},
        {rv_int(1), RL_FAILED},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        int64_t fence = 0, pttl = -1;
        assert_int_equal(redlock_classify_acquire(RL_FORM_SET_NX, &cases[k].r,
                                                  &fence, &pttl),
                         cases[k].want);
        /* the plain SET carries neither */
        assert_int_equal(fence, 0);
        assert_int_equal(pttl, -1);
    }
}

/* The error a refusal names: top-level, or inside EXEC's array. */
static void test_reply_error(void **state)
{
    (void)state;
    assert_null(redlock_reply_error(NULL));
    struct redlock_reply top = rv_err("OOM command not allowed");
    assert_ptr_equal(redlock_reply_error(&top), &top);
    struct redlock_reply nil = rv_nil();
    assert_null(redlock_reply_error(&nil));
    /* MULTI, SET .. GET, INCR on a list, EXEC */
    struct redlock_reply e1[2] = {
        rv_nil(), rv_err("WRONGTYPE Operation against a key holding the "
                         "wrong kind of value")};
    struct redlock_reply a1 = rv_arr(e1, 2);
    const struct redlock_reply *got = redlock_reply_error(&a1);
    assert_ptr_equal(got, &e1[1]);
    assert_true(got->len > 9 && memcmp(got->str, "WRONGTYPE", 9) == 0);
    /* the lock key of the wrong type: SET fails, INCR runs */
    struct redlock_reply e2[2] = {rv_err("WRONGTYPE first"), rv_int(3)};
    struct redlock_reply a2 = rv_arr(e2, 2);
    assert_ptr_equal(redlock_reply_error(&a2), &e2[0]);
    struct redlock_reply e3[2] = {rv_str("tok"), rv_int(3)};
    struct redlock_reply a3 = rv_arr(e3, 2);
    assert_null(redlock_reply_error(&a3));
    int64_t fence, pttl;
    assert_int_equal(classify(RL_FORM_SET_GET_INCR, a1, &fence, &pttl),
                     RL_FAILED);
}

static void test_classify_peek(void **state)
{
    (void)state;
    const char *tok = "0123456789abcdef0123456789abcdef";
    struct {
        struct redlock_reply e[3];
        size_t n;
        enum redlock_peek want;
        int64_t pttl, fence;
    } cases[] = {
        {{rv_str(""), rv_int(-2), rv_int(0)}, 3, RL_PEEK_FREE, -2, 0},
        {{rv_str("done:abc"), rv_int(900), rv_int(7)}, 3, RL_PEEK_DONE, 900, 7},
        {{rv_str(tok), rv_int(400), rv_int(12)}, 3, RL_PEEK_HELD, 400, 12},
        /* a bare "done:" is a value like any other, no mark */
        {{rv_str("done:"), rv_int(5), rv_int(0)}, 3, RL_PEEK_HELD, 5, 0},
        /* a key without expiry */
        {{rv_str(tok), rv_int(-1), rv_int(0)}, 3, RL_PEEK_HELD, -1, 0},
        /* shapes the script never answers */
        {{rv_nil(), rv_int(5), rv_int(0)}, 3, RL_PEEK_FAILED, -9, -9},
        {{rv_str(""), rv_str("5"), rv_int(0)}, 3, RL_PEEK_FAILED, -9, -9},
        {{rv_str(""), rv_int(5), rv_nil()}, 3, RL_PEEK_FAILED, -9, -9},
        {{rv_str(""), rv_int(5), rv_int(0)}, 2, RL_PEEK_FAILED, -9, -9},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct redlock_reply r = rv_arr(cases[k].e, cases[k].n);
        int64_t pttl = -9, fence = -9;
        const char *v = NULL;
        size_t n = 0;
        assert_int_equal(redlock_classify_peek(&r, &pttl, &fence, &v, &n),
                         cases[k].want);
        assert_int_equal(pttl, cases[k].pttl);
        assert_int_equal(fence, cases[k].fence);
        if (cases[k].want == RL_PEEK_HELD) {
            assert_ptr_equal(v, cases[k].e[0].str);
            assert_int_equal(n, cases[k].e[0].len);
        } else {
            assert_null(v);
        }
    }
    struct redlock_reply err = rv_err("NOSCRIPT");
    int64_t pttl = -9, fence = -9;
    const char *v = NULL;
    size_t n = 0;
    assert_int_equal(redlock_classify_peek(&err, &pttl, &fence, &v, &n),
                     RL_PEEK_FAILED);
}

/* n - quorum + 1 usable nodes announce, in turn from start: any n - quorum
 * of them failing still leaves one. */
static void test_wake_publishers(void **state)
{
    (void)state;
    assert_int_equal(redlock_wake_publishers(0x1f, 5, 3, 0), 0x07);
    assert_int_equal(redlock_wake_publishers(0x1f, 5, 3, 1), 0x0e);
    assert_int_equal(redlock_wake_publishers(0x1f, 5, 3, 4), 0x13);
    assert_int_equal(redlock_wake_publishers(0x1f, 5, 3, 9), 0x13);
    /* A node that is down is skipped, the next usable one takes its turn. */
    assert_int_equal(redlock_wake_publishers(0x1d, 5, 3, 0), 0x0d);
    assert_int_equal(redlock_wake_publishers(0x18, 5, 3, 0), 0x18);
    assert_int_equal(redlock_wake_publishers(0, 5, 3, 2), 0);
    /* One node: itself; three: two of them. */
    assert_int_equal(redlock_wake_publishers(0x1, 1, 1, 7), 0x1);
    assert_int_equal(redlock_wake_publishers(0x7, 3, 2, 2), 0x5);
    /* 32 nodes, quorum 17: 16 announce, wrapping past bit 31. */
    uint32_t m = redlock_wake_publishers(0xffffffffu, 32, 17, 24);
    assert_int_equal(__builtin_popcount(m), 16);
    assert_int_equal(m, 0x00ffu | 0xff000000u);
    assert_int_equal(redlock_wake_publishers(0xffffffffu, 33, 17, 0), 0);
}

/* A failed renewal: given up when not held or past the give-up time, else
 * tried again a quarter of the way to the give-up, at most ttl / 30 (and
 * 10 ms) later, at least 1 ms (or what is left). */
static void test_renew_failed(void **state)
{
    (void)state;
    uint64_t retry = 0;
    /* ttl 30 s, valid until 20 s: give-up at 19.73 s */
    struct redlock_renew_state s = {
        .valid_until_us = 20000 * MS, .ttl_ms = 30000, .node_timeout_ms = 250};
    /* 9.73 s left: not every 10 ms (a storm on refusing nodes), 1 s */
    assert_int_equal(redlock_renew_failed(&s, false, 10000 * MS, &retry),
                     RL_RENEW_WAIT);
    assert_int_equal(retry, 11000 * MS);
    /* 2 s left: a quarter of it */
    assert_int_equal(redlock_renew_failed(&s, false, 17730 * MS, &retry),
                     RL_RENEW_WAIT);
    assert_int_equal(retry, 18230 * MS);
    /* 20 ms before the give-up: a quarter of it, 5 ms */
    assert_int_equal(redlock_renew_failed(&s, false, 19710 * MS, &retry),
                     RL_RENEW_WAIT);
    assert_int_equal(retry, 19715 * MS);
    /* 2 ms before: not a quarter (0.5 ms) but 1 ms; 0.5 ms: the give-up */
    assert_int_equal(redlock_renew_failed(&s, false, 19728 * MS, &retry),
                     RL_RENEW_WAIT);
    assert_int_equal(retry, 19729 * MS);
    assert_int_equal(redlock_renew_failed(&s, false, 19729500, &retry),
                     RL_RENEW_WAIT);
    assert_int_equal(retry, 19730 * MS);
    /* at or past the give-up */
    retry = 7;
    assert_int_equal(redlock_renew_failed(&s, false, 19730 * MS, &retry),
                     RL_RENEW_GIVE_UP);
    assert_int_equal(redlock_renew_failed(&s, false, 25000 * MS, &retry),
                     RL_RENEW_GIVE_UP);
    assert_int_equal(retry, 7);
    /* a quorum said not held: at once, whatever the time left */
    assert_int_equal(redlock_renew_failed(&s, true, 10000 * MS, &retry),
                     RL_RENEW_GIVE_UP);
    /* ttl 150 ms (a thirtieth is 5 ms): at most 10 ms all the same */
    struct redlock_renew_state u = {
        .valid_until_us = 1000 * MS, .ttl_ms = 150, .node_timeout_ms = 250};
    assert_int_equal(redlock_renew_failed(&u, false, 500 * MS, &retry),
                     RL_RENEW_WAIT);
    assert_int_equal(retry, 510 * MS);
    /* ttl 10, valid until 7 ms: give-up at 4.5 ms; 2 ms left: 1 ms */
    struct redlock_renew_state t = {
        .valid_until_us = 7 * MS, .ttl_ms = 10, .node_timeout_ms = 250};
    assert_int_equal(redlock_renew_failed(&t, false, 2500, &retry),
                     RL_RENEW_WAIT);
    assert_int_equal(retry, 3500);
}

/* A failed extend bounds the validity by what its ttl would leave from when
 * it was sent; a longer ttl changes nothing. */
static void test_extend_failed_until(void **state)
{
    (void)state;
    /* ttl 1000, drift 0.01: validity 1000 - 10 - 2 = 988 ms */
    assert_int_equal(
        redlock_extend_failed_until_us(30000 * MS, 1000, 0.01, 5000 * MS),
        5988 * MS);
    /* the bound is past the validity already: kept */
    assert_int_equal(
        redlock_extend_failed_until_us(5500 * MS, 1000, 0.01, 5000 * MS),
        5500 * MS);
    /* a ttl too short for any validity: from its start, nothing */
    assert_int_equal(redlock_extend_failed_until_us(30000 * MS, 1, 0.01, 5000),
                     5000);
}

/* A lock given up is remembered for two ttls with their drift: the one
 * its key may still have on a node that missed the release, and the one a
 * renewal waiting in that node's socket gives it when it runs again. */
static void test_given_up_until(void **state)
{
    (void)state;
    /* ttl 6000, drift 0.01: 6000 + 60 + 2 = 6062 ms, twice */
    assert_int_equal(redlock_given_up_until_us(1000 * MS, 6000, 0.01),
                     (1000 + 2 * 6062) * MS);
    /* no drift: still the 2 ms of clock granularity per ttl */
    assert_int_equal(redlock_given_up_until_us(0, 1000, 0.0), 2004 * MS);
    /* never shorter than the validity an acquisition of that ttl had */
    uint64_t now = 5000 * MS;
    int64_t v = redlock_validity_ms(6000, 0.01, 0);
    assert_true(redlock_given_up_until_us(now, 6000, 0.01) >
                now + 2 * (uint64_t)v * MS);
    /* the largest ttl does not overflow */
    assert_true(redlock_given_up_until_us(now, UINT32_MAX, 0.01) > now);
}

/* After the head won, the next in line waits for the lock's validity (a
 * release wakes it sooner), within its own wait; a semaphore's next waiter
 * and one behind a lock given straight back try at once. */
static void test_handoff_delay(void **state)
{
    (void)state;
    assert_int_equal(redlock_handoff_delay_ms(true, false, 980, 5000), 981);
    assert_int_equal(redlock_handoff_delay_ms(true, false, 980, 300), 300);
    assert_int_equal(redlock_handoff_delay_ms(true, true, 980, 5000), 0);
    assert_int_equal(redlock_handoff_delay_ms(false, false, 980, 5000), 0);
    assert_int_equal(redlock_handoff_delay_ms(true, false, 980, 0), 0);
}

/* One round of an acquire call through redlock_acquire_decide. */
static struct redlock_acquire_step decide(enum redlock_got got, int64_t pttl,
                                          unsigned permits, bool waiting,
                                          struct redlock_sem_walk *w)
{
    struct redlock_acquire_in in = {
        .got = got,
        .pttl_min = pttl,
        .permits = permits,
        .waiting = waiting,
    };
    struct redlock_acquire_step step;
    redlock_acquire_decide(&in, w, &step);
    return step;
}

/* A won round is taken whatever the wait says: it started within it. */
static void test_acquire_decide_won(void **state)
{
    (void)state;
    struct redlock_sem_walk w = {0, 0, -1};
    struct redlock_acquire_step s = decide(RL_GOT_OK, -1, 0, true, &w);
    assert_int_equal(s.action, RL_ACQ_WON);
    assert_false(s.fence);
    assert_false(s.renew);
    /* the waiter's deadline passed while its round was out */
    s = decide(RL_GOT_OK, -1, 0, false, &w);
    assert_int_equal(s.action, RL_ACQ_WON);
    /* nobody left to hold it, or the daemon stops: given back */
    struct redlock_acquire_in in = {
        .got = RL_GOT_OK, .pttl_min = -1, .stop = true};
    redlock_acquire_decide(&in, &w, &s);
    assert_int_equal(s.action, RL_ACQ_GIVE_BACK);
    /* renewal needs a session to renew it for */
    in = (struct redlock_acquire_in){
        .got = RL_GOT_OK, .pttl_min = -1, .renew = true, .session = true};
    redlock_acquire_decide(&in, &w, &s);
    assert_int_equal(s.action, RL_ACQ_WON);
    assert_true(s.renew);
    in.session = false;
    redlock_acquire_decide(&in, &w, &s);
    assert_int_equal(s.action, RL_ACQ_WON);
    assert_false(s.renew);
    in.renew = false;
    in.session = true;
    redlock_acquire_decide(&in, &w, &s);
    assert_false(s.renew);
    /* a semaphore slot won after others were tried ends the walk */
    w = (struct redlock_sem_walk){2, 1, 700};
    s = decide(RL_GOT_OK, -1, 3, true, &w);
    assert_int_equal(s.action, RL_ACQ_WON);
    assert_int_equal(w.tried, 0);
}

/* Which failures wait, and which are answered at once, for a lock. */
static void test_acquire_decide_failures(void **state)
{
    (void)state;
    struct redlock_sem_walk w = {0, 0, -1};
    struct redlock_acquire_step s = decide(RL_GOT_BUSY, 1500, 0, true, &w);
    assert_int_equal(s.action, RL_ACQ_WAIT);
    assert_int_equal(s.answer, RL_GOT_BUSY);
    assert_int_equal(s.pttl_min, 1500);
    s = decide(RL_GOT_NO_QUORUM, -1, 0, true, &w);
    assert_int_equal(s.action, RL_ACQ_WAIT);
    assert_int_equal(s.answer, RL_GOT_NO_QUORUM);
    assert_int_equal(s.pttl_min, -1);
    /* done does not pass while waiting, nor does any other failure */
    s = decide(RL_GOT_DONE, 900, 0, true, &w);
    assert_int_equal(s.action, RL_ACQ_ANSWER);
    assert_int_equal(s.answer, RL_GOT_DONE);
    s = decide(RL_GOT_OTHER, -1, 0, true, &w);
    assert_int_equal(s.action, RL_ACQ_ANSWER);
    assert_int_equal(s.answer, RL_GOT_OTHER);
    /* the wait ran out: the round's own error is the answer */
    s = decide(RL_GOT_BUSY, 1500, 0, false, &w);
    assert_int_equal(s.action, RL_ACQ_ANSWER);
    assert_int_equal(s.answer, RL_GOT_BUSY);
    s = decide(RL_GOT_NO_QUORUM, -1, 0, false, &w);
    assert_int_equal(s.action, RL_ACQ_ANSWER);
    assert_int_equal(s.answer, RL_GOT_NO_QUORUM);
    /* the client left or the daemon stops: no wait */
    struct redlock_acquire_in in = {
        .got = RL_GOT_BUSY, .pttl_min = 10, .waiting = true, .stop = true};
    redlock_acquire_decide(&in, &w, &s);
    assert_int_equal(s.action, RL_ACQ_ANSWER);
    assert_int_equal(s.answer, RL_GOT_BUSY);
    /* a lock never walks */
    assert_int_equal(w.tried, 0);
    assert_int_equal(w.done, 0);
}

/* A semaphore walks its slots, busy or done, until one is won or every
 * permit was tried, and backs off on the slot that frees first. */
static void test_acquire_decide_sem_walk(void **state)
{
    (void)state;
    struct redlock_sem_walk w = {0, 0, 0};
    struct redlock_acquire_step s = decide(RL_GOT_BUSY, 5000, 3, true, &w);
    assert_int_equal(s.action, RL_ACQ_NEXT_SLOT);
    assert_int_equal(w.tried, 1);
    assert_int_equal(w.pttl, 5000);
    s = decide(RL_GOT_DONE, 800, 3, true, &w);
    assert_int_equal(s.action, RL_ACQ_NEXT_SLOT);
    assert_int_equal(w.tried, 2);
    assert_int_equal(w.done, 1);
    assert_int_equal(w.pttl, 800);
    /* the last slot stops the walk: busy (one completed is not all), on
     * the shortest PTTL of the three, not the last slot's */
    s = decide(RL_GOT_BUSY, 2000, 3, true, &w);
    assert_int_equal(s.action, RL_ACQ_WAIT);
    assert_int_equal(s.answer, RL_GOT_BUSY);
    assert_int_equal(s.pttl_min, 800);
    assert_int_equal(w.tried, 0);
    assert_int_equal(w.done, 1); /* for the answer's message */
    /* the next walk starts its PTTL over from its first slot */
    w.done = 0;
    s = decide(RL_GOT_BUSY, 9000, 2, true, &w);
    assert_int_equal(s.action, RL_ACQ_NEXT_SLOT);
    assert_int_equal(w.pttl, 9000);
    /* a slot of unknown PTTL may free at any moment */
    s = decide(RL_GOT_BUSY, -1, 2, false, &w);
    assert_int_equal(s.action, RL_ACQ_ANSWER);
    assert_int_equal(s.answer, RL_GOT_BUSY);
    assert_int_equal(s.pttl_min, -1);
}

/* A semaphore is done only when every slot is; a stop ends the walk; a
 * round without quorum ends it too, on that round's PTTL. */
static void test_acquire_decide_sem_stop(void **state)
{
    (void)state;
    struct redlock_sem_walk w = {0, 0, 0};
    struct redlock_acquire_step s = decide(RL_GOT_DONE, 300, 2, true, &w);
    assert_int_equal(s.action, RL_ACQ_NEXT_SLOT);
    s = decide(RL_GOT_DONE, 400, 2, true, &w);
    assert_int_equal(s.action, RL_ACQ_ANSWER);
    assert_int_equal(s.answer, RL_GOT_DONE);
    assert_int_equal(w.done, 2);
    assert_int_equal(w.tried, 0);
    /* done then busy: busy, and it may wait */
    w = (struct redlock_sem_walk){0, 0, 0};
    s = decide(RL_GOT_DONE, 300, 2, true, &w);
    s = decide(RL_GOT_BUSY, 400, 2, true, &w);
    assert_int_equal(s.action, RL_ACQ_WAIT);
    assert_int_equal(s.answer, RL_GOT_BUSY);
    assert_int_equal(s.pttl_min, 300);
    /* a stop between slots: no next slot, busy at once */
    w = (struct redlock_sem_walk){0, 0, 0};
    struct redlock_acquire_in in = {.got = RL_GOT_BUSY,
                                    .pttl_min = 50,
                                    .permits = 4,
                                    .waiting = true,
                                    .stop = true};
    redlock_acquire_decide(&in, &w, &s);
    assert_int_equal(s.action, RL_ACQ_ANSWER);
    assert_int_equal(s.answer, RL_GOT_BUSY);
    assert_int_equal(w.tried, 0);
    /* no quorum on the second slot: the walk ends, and waits on the
     * round's own PTTL */
    w = (struct redlock_sem_walk){0, 0, 0};
    s = decide(RL_GOT_BUSY, 700, 4, true, &w);
    s = decide(RL_GOT_NO_QUORUM, -1, 4, true, &w);
    assert_int_equal(s.action, RL_ACQ_WAIT);
    assert_int_equal(s.answer, RL_GOT_NO_QUORUM);
    assert_int_equal(s.pttl_min, -1);
    assert_int_equal(w.tried, 0);
    /* any other failure is answered as it is */
    s = decide(RL_GOT_OTHER, -1, 4, true, &w);
    assert_int_equal(s.action, RL_ACQ_ANSWER);
    assert_int_equal(s.answer, RL_GOT_OTHER);
}

/* A fenced acquire carries its fence when won; one whose write-back found
 * no quorum waits and is answered like any other. */
static void test_acquire_decide_fenced(void **state)
{
    (void)state;
    struct redlock_sem_walk w = {0, 0, -1};
    struct redlock_acquire_in in = {
        .got = RL_GOT_OK, .pttl_min = -1, .fence = true, .waiting = false};
    struct redlock_acquire_step s;
    redlock_acquire_decide(&in, &w, &s);
    assert_int_equal(s.action, RL_ACQ_WON);
    assert_true(s.fence);
    in.permits = 3;
    redlock_acquire_decide(&in, &w, &s);
    assert_int_equal(s.action, RL_ACQ_WON);
    assert_true(s.fence);
    in = (struct redlock_acquire_in){.got = RL_GOT_NO_QUORUM,
                                     .pttl_min = -1,
                                     .fence = true,
                                     .waiting = true};
    redlock_acquire_decide(&in, &w, &s);
    assert_int_equal(s.action, RL_ACQ_WAIT);
    assert_false(s.fence);
    in.waiting = false;
    redlock_acquire_decide(&in, &w, &s);
    assert_int_equal(s.action, RL_ACQ_ANSWER);
    assert_int_equal(s.answer, RL_GOT_NO_QUORUM);
    in = (struct redlock_acquire_in){
        .got = RL_GOT_OK, .pttl_min = -1, .fence = true, .stop = true};
    redlock_acquire_decide(&in, &w, &s);
    assert_int_equal(s.action, RL_ACQ_GIVE_BACK);
}

/* The delay of a waiting call that redlock_wait_delay arms. */
static uint64_t armed_delay(const struct redlock_wait_in *in)
{
    uint64_t d = UINT64_MAX;
    assert_true(redlock_wait_delay(in, &d));
    return d;
}

/* When a waiting call's timer fires. */
static void test_wait_delay(void **state)
{
    (void)state;
    /* behind the head: its turn, at most until its wait runs out */
    struct redlock_wait_in in = {
        .head = false, .pttl_min = 200, .wait_left_ms = 4000};
    assert_int_equal(armed_delay(&in), 4000);
    in.wait_left_ms = 0;
    assert_int_equal(armed_delay(&in), 0);
    /* the head whose wait is over answers, woken or not */
    in = (struct redlock_wait_in){
        .head = true, .pttl_min = 200, .wait_left_ms = 0};
    uint64_t d = 12345;
    assert_false(redlock_wait_delay(&in, &d));
    assert_int_equal(d, 12345);
    in.woken = true;
    assert_false(redlock_wait_delay(&in, &d));
    /* woken by a release during its round: again at once */
    in.wait_left_ms = 4000;
    assert_int_equal(armed_delay(&in), 0);
    /* no sooner than the holder's PTTL, nor past the wait left */
    in.woken = false;
    assert_int_equal(armed_delay(&in), 201);
    in.wait_left_ms = 150;
    assert_int_equal(armed_delay(&in), 150);
    /* polling: the plain back-off, whatever the PTTL */
    in = (struct redlock_wait_in){
        .head = true, .polls = true, .pttl_min = 200, .wait_left_ms = 4000};
    d = armed_delay(&in);
    assert_true(d >= 1 && d <= 5);
    in.attempt = 3;
    assert_int_equal(armed_delay(&in),
                     redlock_retry_delay_ms(3, -1, 4000, 0.0));
    /* PTTL unknown (-1): the back-off too */
    in.polls = false;
    in.pttl_min = -1;
    assert_int_equal(armed_delay(&in),
                     redlock_retry_delay_ms(3, -1, 4000, 0.0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quorum),
        cmocka_unit_test(test_sem_pttl_min),
        cmocka_unit_test(test_fence_floor),
        cmocka_unit_test(test_reply_error),
        cmocka_unit_test(test_validity),
        cmocka_unit_test(test_win_early),
        cmocka_unit_test(test_lose_early_busy),
        cmocka_unit_test(test_lose_noquorum_on_timeouts),
        cmocka_unit_test(test_done_needs_marks_beyond_a_minority),
        cmocka_unit_test(test_done_mark_blocks_early_grant),
        cmocka_unit_test(test_free_quorum_verdict),
        cmocka_unit_test(test_repair_plan),
        cmocka_unit_test(test_repair_plan_unmarked),
        cmocka_unit_test(test_grants_age_out),
        cmocka_unit_test(test_grants_bounded_and_conservative),
        cmocka_unit_test(test_busy_needs_reachable_quorum),
        cmocka_unit_test(test_all_skipped_decides_at_start),
        cmocka_unit_test(test_quorum_too_late),
        cmocka_unit_test(test_single_node),
        cmocka_unit_test(test_even_nodes),
        cmocka_unit_test(test_duplicate_answer_ignored),
        cmocka_unit_test(test_clock_read_at_decision_only),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_retry_delay),
        cmocka_unit_test(test_inspect_decide),
        cmocka_unit_test(test_classify_set_get),
        cmocka_unit_test(test_classify_set_get_incr),
        cmocka_unit_test(test_classify_script),
        cmocka_unit_test(test_classify_flag),
        cmocka_unit_test(test_holder_pttl),
        cmocka_unit_test(test_renew_schedule),
        cmocka_unit_test(test_renew_decide),
        cmocka_unit_test(test_renew_early),
        cmocka_unit_test(test_op_sets_ttl_and_asks),
        cmocka_unit_test(test_round_deadline),
        cmocka_unit_test(test_round_expire),
        cmocka_unit_test(test_acquire_verdict),
        cmocka_unit_test(test_other_verdict),
        cmocka_unit_test(test_fence_verdict),
        cmocka_unit_test(test_ask_holder_pttl),
        cmocka_unit_test(test_acquire_form_pick),
        cmocka_unit_test(test_all_nodes),
        cmocka_unit_test(test_classify_set_nx),
        cmocka_unit_test(test_classify_peek),
        cmocka_unit_test(test_wake_publishers),
        cmocka_unit_test(test_renew_failed),
        cmocka_unit_test(test_extend_failed_until),
        cmocka_unit_test(test_given_up_until),
        cmocka_unit_test(test_handoff_delay),
        cmocka_unit_test(test_acquire_decide_won),
        cmocka_unit_test(test_acquire_decide_failures),
        cmocka_unit_test(test_acquire_decide_sem_walk),
        cmocka_unit_test(test_acquire_decide_sem_stop),
        cmocka_unit_test(test_acquire_decide_fenced),
        cmocka_unit_test(test_wait_delay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
