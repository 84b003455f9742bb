/* test_redlock.c: the pure Redlock decisions: validity arithmetic, quorum,
 * early decisions, failure codes, rollback sets, back-off. */
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

    /* Marks never hold an acquisition back once a quorum is free. */
    redlock_round_start(&r, 5, 1000, 0.01, 0, 0);
    answer_at(&r, 0, RL_DONE, 0, -1, 1);
    answer_at(&r, 1, RL_OK, 0, -1, 1);
    answer_at(&r, 2, RL_OK, 0, -1, 1);
    assert_int_equal(answer_at(&r, 3, RL_OK, 0, -1, 1), RL_WON);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quorum),
        cmocka_unit_test(test_validity),
        cmocka_unit_test(test_win_early),
        cmocka_unit_test(test_lose_early_busy),
        cmocka_unit_test(test_lose_noquorum_on_timeouts),
        cmocka_unit_test(test_done_needs_marks_beyond_a_minority),
        cmocka_unit_test(test_busy_needs_reachable_quorum),
        cmocka_unit_test(test_all_skipped_decides_at_start),
        cmocka_unit_test(test_quorum_too_late),
        cmocka_unit_test(test_single_node),
        cmocka_unit_test(test_even_nodes),
        cmocka_unit_test(test_duplicate_answer_ignored),
        cmocka_unit_test(test_clock_read_at_decision_only),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_retry_delay),
        cmocka_unit_test(test_classify_set_get),
        cmocka_unit_test(test_classify_set_get_incr),
        cmocka_unit_test(test_classify_script),
        cmocka_unit_test(test_classify_flag),
        cmocka_unit_test(test_holder_pttl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
