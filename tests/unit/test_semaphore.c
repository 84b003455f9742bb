/* test_semaphore.c: the key and channel names of locks, semaphore slots
 * and their queues, from the fields (no resource can meet a slot), and the
 * permits seen per resource. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "semaphore.h"

/* A lock's key and channel: "lock:" and "wake:" with the resource. */
static void test_lock_names(void **state)
{
    (void)state;
    char out[700];
    struct lock_name n = {"orders:42", 9, SEM_NO_SLOT};
    size_t k = sem_key("redlock:", 8, &n, out, sizeof(out));
    assert_int_equal(k, strlen("redlock:lock:orders:42"));
    assert_memory_equal(out, "redlock:lock:orders:42", k);
    k = sem_channel("redlock:", 8, &n, out, sizeof(out));
    assert_int_equal(k, strlen("redlock:wake:orders:42"));
    assert_memory_equal(out, "redlock:wake:orders:42", k);
    /* No prefix at all. */
    k = sem_key("", 0, &n, out, sizeof(out));
    assert_memory_equal(out, "lock:orders:42", k);
}

/* A slot's key is its own, "sem:<k>:", apart from every lock's; all slots
 * of a semaphore announce on the one channel its queue watches, the same
 * bytes as ever: daemons of other versions share them. */
static void test_slot_names(void **state)
{
    (void)state;
    char out[700];
    struct lock_name n = {"r", 1, 2};
    size_t k = sem_key("redlock:", 8, &n, out, sizeof(out));
    assert_int_equal(k, strlen("redlock:sem:2:r"));
    assert_memory_equal(out, "redlock:sem:2:r", k);
    n.slot = 0;
    k = sem_key("redlock:", 8, &n, out, sizeof(out));
    assert_memory_equal(out, "redlock:sem:0:r", k);
    n.slot = 1023;
    k = sem_key("redlock:", 8, &n, out, sizeof(out));
    assert_int_equal(k, strlen("redlock:sem:1023:r"));
    assert_memory_equal(out, "redlock:sem:1023:r", k);
    k = sem_channel("redlock:", 8, &n, out, sizeof(out));
    assert_int_equal(k, strlen("redlock:wake:\x01*:r"));
    assert_memory_equal(out, "redlock:wake:\x01*:r", k);
    /* The queue's channel is its slots'; a queue has no key. */
    struct lock_name q = {"r", 1, SEM_QUEUE};
    char qc[700];
    size_t ql = sem_channel("redlock:", 8, &q, qc, sizeof(qc));
    assert_int_equal(ql, k);
    assert_memory_equal(qc, out, k);
    assert_int_equal(sem_key("redlock:", 8, &q, out, sizeof(out)), 0);
}

/* The longest prefix, slot and resource fit in the bound the callers size
 * their buffers by; one byte less and nothing is written. */
static void test_names_bounded(void **state)
{
    (void)state;
    char big[PROTO_RESOURCE_MAX], prefix[64], out[700];
    memset(big, 'z', sizeof(big));
    memset(prefix, 'p', sizeof(prefix));
    struct lock_name n = {big, sizeof(big), PROTO_PERMITS_MAX - 1};
    size_t cap = sizeof(prefix) + SEM_NAME_EXTRA + sizeof(big);
    assert_true(sem_key(prefix, sizeof(prefix), &n, out, cap) > 0);
    assert_true(sem_channel(prefix, sizeof(prefix), &n, out, cap) > 0);
    size_t k = sem_key(prefix, sizeof(prefix), &n, out, sizeof(out));
    assert_int_equal(sem_key(prefix, sizeof(prefix), &n, out, k - 1), 0);
    n.slot = SEM_NO_SLOT;
    assert_true(sem_key(prefix, sizeof(prefix), &n, out, cap) > 0);
    k = sem_channel(prefix, sizeof(prefix), &n, out, sizeof(out));
    assert_int_equal(sem_channel(prefix, sizeof(prefix), &n, out, k - 1), 0);
    struct lock_name s = {"r", 1, 7};
    assert_int_equal(sem_key("redlock:", 8, &s, out, 8), 0);
    assert_int_equal(sem_channel("redlock:", 8, &s, out, 8), 0);
}

/* A channel heard from a node is named once: a semaphore's queue, or a
 * lock (no resource can start with a control byte). */
static void test_channel_name(void **state)
{
    (void)state;
    struct lock_name n;
    sem_channel_name("\x01*:pool", 7, &n);
    assert_int_equal(n.slot, SEM_QUEUE);
    assert_int_equal(n.len, 4);
    assert_memory_equal(n.resource, "pool", 4);
    sem_channel_name("pool", 4, &n);
    assert_int_equal(n.slot, SEM_NO_SLOT);
    assert_int_equal(n.len, 4);
    assert_memory_equal(n.resource, "pool", 4);
    /* Round trip from what a queue watches. */
    char ch[700];
    struct lock_name q = {"a:b", 3, SEM_QUEUE};
    size_t cl = sem_channel("redlock:", 8, &q, ch, sizeof(ch));
    sem_channel_name(ch + strlen("redlock:wake:"), cl - strlen("redlock:wake:"),
                     &n);
    assert_true(sem_name_equal(&n, &q));
    /* Short or other marks are a lock's name. */
    sem_channel_name("\x01*", 2, &n);
    assert_int_equal(n.slot, SEM_NO_SLOT);
    sem_channel_name("\x01"
                     "3:pool",
                     7, &n);
    assert_int_equal(n.slot, SEM_NO_SLOT);
}

/* Every slot of a semaphore waits in its one queue; a lock in its own,
 * apart from a semaphore of the same resource. */
static void test_queue_of(void **state)
{
    (void)state;
    struct lock_name slot = {"pool", 4, 3}, other = {"pool", 4, 0};
    struct lock_name lock = {"pool", 4, SEM_NO_SLOT};
    struct lock_name a = sem_queue_of(&slot), b = sem_queue_of(&other);
    assert_int_equal(a.slot, SEM_QUEUE);
    assert_true(sem_name_equal(&a, &b));
    struct lock_name qq = sem_queue_of(&a);
    assert_true(sem_name_equal(&qq, &a));
    struct lock_name l = sem_queue_of(&lock);
    assert_true(sem_name_equal(&l, &lock));
    assert_false(sem_name_equal(&l, &a));
    assert_false(sem_name_equal(&slot, &other));
    struct lock_name pools = {"pools", 5, 3};
    assert_false(sem_name_equal(&slot, &pools));
}

static void test_seen_once(void **state)
{
    (void)state;
    struct sem_seen *s = sem_seen_create();
    assert_non_null(s);
    assert_int_equal(sem_seen_note(s, "a", 1, 3), 0);
    assert_int_equal(sem_seen_note(s, "a", 1, 3), 0);
    assert_int_equal(sem_seen_note(s, "b", 1, 5), 0);
    assert_int_equal(sem_seen_note(s, "a", 1, 4), 3);
    assert_int_equal(sem_seen_note(s, "a", 1, 5), 0); /* said once */
    assert_int_equal(sem_seen_note(s, "b", 1, 2), 5);
    sem_seen_destroy(s);
}

/* Bounded at 4096 resources (SEM_SEEN_MAX): past that nothing new is
 * kept, so a new one never disagrees; the ones kept still do. */
static void test_seen_bounded(void **state)
{
    (void)state;
    struct sem_seen *s = sem_seen_create();
    assert_non_null(s);
    char name[32];
    for (int i = 0; i < 4096 + 10; i++) {
        int n = snprintf(name, sizeof(name), "r%d", i);
        assert_int_equal(sem_seen_note(s, name, (size_t)n, 3), 0);
    }
    int n = snprintf(name, sizeof(name), "r%d", 4096 + 5);
    assert_int_equal(sem_seen_note(s, name, (size_t)n, 4), 0);
    assert_int_equal(sem_seen_note(s, "r4095", 5, 4), 3);
    assert_int_equal(sem_seen_note(s, "r0", 2, 9), 3);
    assert_int_equal(sem_seen_note(s, "r0", 2, 8), 0); /* said once */
    sem_seen_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock_names),
        cmocka_unit_test(test_slot_names),
        cmocka_unit_test(test_names_bounded),
        cmocka_unit_test(test_channel_name),
        cmocka_unit_test(test_queue_of),
        cmocka_unit_test(test_seen_once),
        cmocka_unit_test(test_seen_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
