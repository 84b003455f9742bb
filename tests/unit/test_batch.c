/* test_batch.c: the pure decisions of the per-node batches (batch.h): the
 * key filter that orders an acquire behind a batch, which entries
 * announce, which script a batch uses, and when two nodes' batches share
 * one command. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "batch.h"

static int op_a, op_b, op_c; /* stand-ins for the ops behind entries */

static struct batch_entry entry(void *priv, enum batch_action action,
                                bool rollback)
{
    struct batch_entry e;
    memset(&e, 0, sizeof(e));
    e.priv = priv;
    e.key = "rl:lock:x";
    e.key_len = 9;
    e.token = "0123456789abcdef0123456789abcdef";
    e.channel = "rl:wake:x";
    e.channel_len = 9;
    e.action = (uint8_t)action;
    e.rollback = rollback;
    return e;
}

static void test_key_hash(void **state)
{
    (void)state;
    /* FNV-1a 32-bit reference values */
    assert_int_equal(batch_key_hash("", 0), 2166136261u);
    assert_int_equal(batch_key_hash("a", 1), 0xe40c292cu);
    assert_int_equal(batch_key_hash("foobar", 6), 0xbf9cf968u);
    /* only the n bytes count */
    assert_int_equal(batch_key_hash("foobarbaz", 6), 0xbf9cf968u);
}

static void test_bloom(void **state)
{
    (void)state;
    uint64_t bloom[BATCH_BLOOM_WORDS];
    memset(bloom, 0, sizeof(bloom));
    uint32_t h = batch_key_hash("rl:lock:x", 9);
    assert_false(batch_bloom_has(bloom, h));
    batch_bloom_add(bloom, h);
    assert_true(batch_bloom_has(bloom, h));
    /* low 6 bits pick the bit, the next bits the word */
    assert_false(batch_bloom_has(bloom, h ^ 1u));
    assert_false(batch_bloom_has(bloom, h ^ (1u << 6)));
    /* a hash that lands on the same bit is a false positive: an early
     * send, never a missed one */
    assert_true(batch_bloom_has(bloom, h + (BATCH_BLOOM_WORDS << 6)));
    /* every bit of every word reachable, none outside the filter */
    uint64_t all[BATCH_BLOOM_WORDS + 1];
    memset(all, 0, sizeof(all));
    for (uint32_t x = 0; x < 64 * BATCH_BLOOM_WORDS * 4; x++) {
        batch_bloom_add(all, x);
    }
    for (int w = 0; w < BATCH_BLOOM_WORDS; w++) {
        assert_true(all[w] == UINT64_MAX);
    }
    assert_true(all[BATCH_BLOOM_WORDS] == 0);
}

static void test_announces(void **state)
{
    (void)state;
    struct batch_entry rel = entry(&op_a, BATCH_RELEASE, false);
    struct batch_entry rb = entry(&op_a, BATCH_RELEASE, true);
    struct batch_entry ext = entry(&op_a, BATCH_EXTEND, false);
    struct batch_entry done = entry(&op_a, BATCH_COMPLETE, false);
    assert_true(batch_announces(&rel, true));
    assert_true(batch_announces(&done, true));
    /* a rollback's key was never ours; an extend frees nothing */
    assert_false(batch_announces(&rb, true));
    assert_false(batch_announces(&ext, true));
    /* a node that does not publish this turn announces nothing */
    assert_false(batch_announces(&rel, false));
    assert_false(batch_announces(&done, false));
}

static void test_script(void **state)
{
    (void)state;
    struct batch_entry e[3];
    /* releases and rollbacks alike: the release script */
    e[0] = entry(&op_a, BATCH_RELEASE, false);
    e[1] = entry(&op_b, BATCH_RELEASE, true);
    e[2] = entry(&op_c, BATCH_RELEASE, false);
    assert_int_equal(batch_script(e, 3), SCRIPT_BATCH_RELEASE);
    /* extends only: the extend script */
    for (int j = 0; j < 3; j++) {
        e[j].action = BATCH_EXTEND;
        e[j].rollback = false;
    }
    assert_int_equal(batch_script(e, 3), SCRIPT_BATCH_EXTEND);
    /* one release among extends: the mixed script */
    e[1] = entry(&op_b, BATCH_RELEASE, false);
    assert_int_equal(batch_script(e, 3), SCRIPT_BATCH);
    /* completes have no script of their own */
    for (int j = 0; j < 3; j++) {
        e[j] = entry(&op_a, BATCH_COMPLETE, false);
    }
    assert_int_equal(batch_script(e, 3), SCRIPT_BATCH);
    e[0] = entry(&op_a, BATCH_RELEASE, false);
    assert_int_equal(batch_script(e, 2), SCRIPT_BATCH);
}

static void test_same(void **state)
{
    (void)state;
    struct batch_entry a[2] = {entry(&op_a, BATCH_RELEASE, false),
                               entry(&op_b, BATCH_EXTEND, false)};
    struct batch_entry b[2] = {entry(&op_a, BATCH_RELEASE, false),
                               entry(&op_b, BATCH_EXTEND, false)};
    assert_true(batch_same(a, 2, true, b, 2, true));
    assert_true(batch_same(a, 2, false, b, 2, false));
    /* announcing on one node and not the other: different bytes */
    assert_false(batch_same(a, 2, true, b, 2, false));
    /* a prefix is not the same batch */
    assert_false(batch_same(a, 2, true, b, 1, true));
    /* the same ops in another order */
    struct batch_entry c[2] = {b[1], b[0]};
    assert_false(batch_same(a, 2, true, c, 2, true));
    /* the same op as a rollback on one node */
    b[0].rollback = true;
    assert_false(batch_same(a, 2, true, b, 2, true));
    /* another op, even with the same key and token */
    b[0] = entry(&op_c, BATCH_RELEASE, false);
    assert_false(batch_same(a, 2, true, b, 2, true));
    assert_true(batch_same(a, 0, true, b, 0, true));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_hash),  cmocka_unit_test(test_bloom),
        cmocka_unit_test(test_announces), cmocka_unit_test(test_script),
        cmocka_unit_test(test_same),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
