/* test_batch.c: the pure decisions of the per-node batches (batch.h) and
 * of the given-up records (givenup.h): the key filter that orders an
 * acquire behind a batch, which entries announce, which script a batch
 * uses, when two nodes' batches share one command, and when a given-up
 * record is sent again, bounded, answered for, or dropped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "batch.h"
#include "givenup.h"

#define S 1000000ULL /* µs per second */

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

static void test_native_of(void **state)
{
    (void)state;
    struct batch_entry ext = entry(&op_a, BATCH_EXTEND, false);
    struct batch_entry rel = entry(&op_a, BATCH_RELEASE, false);
    struct batch_entry done = entry(&op_a, BATCH_COMPLETE, false);
    unsigned all = CAPS_SET_IFEQ | CAPS_DELIFEQ | CAPS_DELEX;
    /* extend: SET IFEQ where listed, announcing or not */
    assert_int_equal(batch_native_of(&ext, false, CAPS_SET_IFEQ),
                     BATCH_NATIVE_SET_IFEQ);
    assert_int_equal(batch_native_of(&ext, false, CAPS_DELIFEQ),
                     BATCH_NATIVE_NONE);
    assert_int_equal(batch_native_of(&ext, false, 0), BATCH_NATIVE_NONE);
    /* release: DELIFEQ first, then DELEX; never one that announces */
    assert_int_equal(batch_native_of(&rel, false, all), BATCH_NATIVE_DELIFEQ);
    assert_int_equal(batch_native_of(&rel, false, CAPS_DELEX),
                     BATCH_NATIVE_DELEX);
    assert_int_equal(batch_native_of(&rel, true, all), BATCH_NATIVE_NONE);
    assert_int_equal(batch_native_of(&rel, false, CAPS_SET_IFEQ),
                     BATCH_NATIVE_NONE);
    /* a complete keeps its script */
    assert_int_equal(batch_native_of(&done, false, all), BATCH_NATIVE_NONE);
    /* the flag each form rests on (dropped when an ACL refuses it) */
    assert_int_equal(batch_native_caps(BATCH_NATIVE_SET_IFEQ), CAPS_SET_IFEQ);
    assert_int_equal(batch_native_caps(BATCH_NATIVE_DELIFEQ), CAPS_DELIFEQ);
    assert_int_equal(batch_native_caps(BATCH_NATIVE_DELEX), CAPS_DELEX);
    assert_int_equal(batch_native_caps(BATCH_NATIVE_NONE), 0);
}

static void test_goes_native(void **state)
{
    (void)state;
    struct batch_entry e[3];
    unsigned all = CAPS_SET_IFEQ | CAPS_DELIFEQ | CAPS_DELEX;
    for (int j = 0; j < 3; j++) {
        e[j] = entry(&op_a, BATCH_EXTEND, false);
    }
    /* extends, one or many */
    assert_true(batch_goes_native(e, 1, true, CAPS_SET_IFEQ));
    assert_true(batch_goes_native(e, 3, true, CAPS_SET_IFEQ));
    assert_false(batch_goes_native(e, 3, true, CAPS_DELIFEQ));
    assert_false(batch_goes_native(e, 0, true, all));
    /* a lone release that announces nothing: on a node that does not
     * publish this turn, a rollback, an entry without a channel */
    e[0] = entry(&op_a, BATCH_RELEASE, false);
    assert_false(batch_goes_native(e, 1, true, all));
    assert_true(batch_goes_native(e, 1, false, all));
    e[0].channel_len = 0;
    assert_true(batch_goes_native(e, 1, true, CAPS_DELEX));
    e[0] = entry(&op_a, BATCH_RELEASE, true);
    assert_true(batch_goes_native(e, 1, true, CAPS_DELIFEQ));
    /* several releases, or a release among extends: one script */
    e[1] = entry(&op_b, BATCH_RELEASE, true);
    assert_false(batch_goes_native(e, 2, false, all));
    e[1] = entry(&op_b, BATCH_EXTEND, false);
    assert_false(batch_goes_native(e, 2, false, all));
    /* a complete: its script */
    e[0] = entry(&op_a, BATCH_COMPLETE, false);
    assert_false(batch_goes_native(e, 1, false, all));
}

static void test_native_result(void **state)
{
    (void)state;
    struct redlock_reply ok = {.kind = RLR_STRING, .str = "OK", .len = 2};
    struct redlock_reply nil = {.kind = RLR_NIL};
    struct redlock_reply err = {
        .kind = RLR_ERROR, .str = "WRONGTYPE x", .len = 11};
    struct redlock_reply other = {
        .kind = RLR_STRING, .str = "QUEUED", .len = 6};
    struct redlock_reply one = {.kind = RLR_INTEGER, .integer = 1};
    struct redlock_reply zero = {.kind = RLR_INTEGER, .integer = 0};
    assert_int_equal(batch_native_result(BATCH_NATIVE_SET_IFEQ, &ok), RL_OK);
    assert_int_equal(batch_native_result(BATCH_NATIVE_SET_IFEQ, &nil), RL_BUSY);
    assert_int_equal(batch_native_result(BATCH_NATIVE_SET_IFEQ, &err),
                     RL_FAILED);
    assert_int_equal(batch_native_result(BATCH_NATIVE_SET_IFEQ, &other),
                     RL_FAILED);
    assert_int_equal(batch_native_result(BATCH_NATIVE_SET_IFEQ, &one),
                     RL_FAILED);
    for (int f = BATCH_NATIVE_DELIFEQ; f <= BATCH_NATIVE_DELEX; f++) {
        assert_int_equal(batch_native_result((enum batch_native)f, &one),
                         RL_OK);
        assert_int_equal(batch_native_result((enum batch_native)f, &zero),
                         RL_BUSY);
        assert_int_equal(batch_native_result((enum batch_native)f, &err),
                         RL_FAILED);
        assert_int_equal(batch_native_result((enum batch_native)f, &ok),
                         RL_FAILED);
    }
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

static void test_owed_after(void **state)
{
    (void)state;
    uint32_t owed = 0x15; /* nodes 1, 3, 5 */
    /* deleted, or not held: that node owes it no more */
    assert_int_equal(givenup_owed_after(owed, 0, RL_OK), 0x14);
    assert_int_equal(givenup_owed_after(owed, 2, RL_BUSY), 0x11);
    /* a node that did not owe it changes nothing */
    assert_int_equal(givenup_owed_after(owed, 1, RL_OK), owed);
    /* timeout, drop, error: still owed, sent at its next come-back */
    assert_int_equal(givenup_owed_after(owed, 0, RL_FAILED), owed);
    assert_int_equal(givenup_owed_after(owed, 4, RL_SKIPPED), owed);
    /* the last confirmation leaves none: the record goes */
    uint32_t left = owed;
    left = givenup_owed_after(left, 0, RL_OK);
    left = givenup_owed_after(left, 2, RL_BUSY);
    assert_int_not_equal(left, 0);
    left = givenup_owed_after(left, 4, RL_OK);
    assert_int_equal(left, 0);
}

static void test_bound(void **state)
{
    (void)state;
    /* the first record keeps its bound */
    assert_int_equal(givenup_bound(0, 30 * S), 30 * S);
    /* a later, longer bound is its own */
    assert_int_equal(givenup_bound(30 * S, 40 * S), 40 * S);
    /* a shorter one waits for the one before it: bounds never decrease */
    assert_int_equal(givenup_bound(30 * S, 10 * S), 30 * S);
    assert_int_equal(givenup_bound(30 * S, 30 * S), 30 * S);
}

static void test_due(void **state)
{
    (void)state;
    assert_true(givenup_due(0x2, 1, 10 * S, 5 * S));
    /* not owed by that node */
    assert_false(givenup_due(0x2, 0, 10 * S, 5 * S));
    /* past its bound no node can hold the key */
    assert_false(givenup_due(0x2, 1, 10 * S, 10 * S));
    assert_false(givenup_due(0x2, 1, 10 * S, 11 * S));
    assert_true(givenup_due(0xffffffffu, 31, 10 * S, 0));
}

static void test_names(void **state)
{
    (void)state;
    struct lock_name orders = {"orders", 6, SEM_NO_SLOT};
    struct lock_name any = {"", 0, SEM_NO_SLOT};
    struct lock_name order = {"order", 5, SEM_NO_SLOT};
    struct lock_name orderz = {"orderz", 6, SEM_NO_SLOT};
    assert_true(givenup_names(&orders, &orders));
    assert_true(givenup_names(&orders, &any)); /* any resource */
    assert_false(givenup_names(&orders, &order));
    assert_false(givenup_names(&orders, &orderz));
    /* a semaphore's permit, asked for by its semaphore's resource */
    struct lock_name slot = {"orders", 6, 3};
    struct lock_name other = {"other", 5, SEM_NO_SLOT};
    assert_true(givenup_names(&slot, &slot));
    assert_true(givenup_names(&slot, &orders));
    assert_false(givenup_names(&slot, &other));
    /* another permit, or the lock of the same resource, is not it */
    struct lock_name slot4 = {"orders", 6, 4};
    assert_false(givenup_names(&slot, &slot4));
    assert_false(givenup_names(&orders, &slot));
    /* the semaphore's queue name is no permit */
    struct lock_name queue = {"orders", 6, SEM_QUEUE};
    assert_false(givenup_names(&queue, &orders));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_hash),
        cmocka_unit_test(test_bloom),
        cmocka_unit_test(test_announces),
        cmocka_unit_test(test_script),
        cmocka_unit_test(test_same),
        cmocka_unit_test(test_owed_after),
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_due),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_native_of),
        cmocka_unit_test(test_goes_native),
        cmocka_unit_test(test_native_result),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
