/* test_semaphore.c: slot, queue, key and channel names of semaphores (no
 * resource can meet a slot), and the permits seen per resource. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "semaphore.h"

static void test_names_round_trip(void **state)
{
    (void)state;
    char name[SEM_NAME_MAX + 1];
    const char *r;
    size_t rl;
    int k;
    size_t n = sem_slot_name("orders:42", 9, 17, name);
    assert_int_equal(n, strlen(name));
    assert_memory_equal(name,
                        "\x01"
                        "17:orders:42",
                        n);
    assert_true(sem_parse(name, n, &r, &rl, &k));
    assert_int_equal(k, 17);
    assert_int_equal(rl, 9);
    assert_memory_equal(r, "orders:42", 9);
    n = sem_queue_name("a", 1, name);
    assert_true(sem_parse(name, n, &r, &rl, &k));
    assert_int_equal(k, -1);
    assert_memory_equal(r, "a", 1);
    /* A resource is never a slot: it cannot start with a control byte. */
    assert_false(sem_parse("17:orders", 9, &r, &rl, &k));
    assert_false(sem_parse("\x01:x", 3, &r, &rl, &k));
    assert_false(sem_parse("\x01"
                           "1x:y",
                           5, &r, &rl, &k));
    assert_false(sem_parse("\x01"
                           "12345:y",
                           8, &r, &rl, &k));
    /* The largest slot of the longest resource fits. */
    char big[PROTO_RESOURCE_MAX];
    memset(big, 'z', sizeof(big));
    n = sem_slot_name(big, sizeof(big), 1023, name);
    assert_true(n <= SEM_NAME_MAX);
}

static void test_keys_and_channels(void **state)
{
    (void)state;
    char name[SEM_NAME_MAX + 1], out[700];
    size_t n = sem_slot_name("r", 1, 2, name);
    size_t k = sem_key("redlock:", name, n, out, sizeof(out));
    assert_int_equal(k, strlen("redlock:sem:2:r"));
    assert_memory_equal(out, "redlock:sem:2:r", k);
    k = sem_channel("redlock:", name, n, out, sizeof(out));
    assert_memory_equal(out, "redlock:wake:\x01*:r", k);
    /* Every slot of a semaphore announces on the one channel its queue
     * watches. */
    char q[SEM_NAME_MAX + 1];
    size_t ql = sem_queue_name("r", 1, q);
    assert_int_equal(k, strlen("redlock:wake:") + ql);
    assert_memory_equal(out + strlen("redlock:wake:"), q, ql);
    assert_int_equal(sem_key("redlock:", "r", 1, out, sizeof(out)), 0);
    assert_int_equal(sem_key("redlock:", name, n, out, 8), 0);
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
        cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_keys_and_channels),
        cmocka_unit_test(test_seen_once),
        cmocka_unit_test(test_seen_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
