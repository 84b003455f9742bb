/* test_locks.c: the lock table: token lookup across growth, session lists,
 * the deadline heap's order under updates and removals, token shape. */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "locks.h"

/* A lock (no semaphore's slot) on r[0..n). */
#define NAME(r, n) (&(struct lock_name){(r), (n), SEM_NO_SLOT})

static void test_token_shape_and_uniqueness(void **state)
{
    (void)state;
    char a[PROTO_TOKEN_LEN + 1], b[PROTO_TOKEN_LEN + 1];
    locks_new_token(a);
    locks_new_token(b);
    assert_int_equal(strlen(a), 32);
    for (int i = 0; i < 32; i++) {
        assert_true((a[i] >= '0' && a[i] <= '9') ||
                    (a[i] >= 'a' && a[i] <= 'f'));
    }
    assert_string_not_equal(a, b);
}

static void test_version_bits_are_random(void **state)
{
    (void)state;
    /* In a v4 UUID, hex char 12 is always '4'; our tokens refill it. */
    int not_four = 0;
    for (int i = 0; i < 64; i++) {
        char t[PROTO_TOKEN_LEN + 1];
        locks_new_token(t);
        not_four += t[12] != '4';
    }
    assert_true(not_four > 0);
}

static void test_add_find_remove_many(void **state)
{
    (void)state;
    struct lock_table *t = locks_create();
    assert_non_null(t);
    enum { N = 5000 };
    static char tokens[N][PROTO_TOKEN_LEN + 1];
    for (int i = 0; i < N; i++) {
        locks_new_token(tokens[i]);
        char res[32];
        int n = snprintf(res, sizeof(res), "r%d", i);
        assert_non_null(locks_add(t, tokens[i], NAME(res, (size_t)n), NULL,
                                  1000, (uint64_t)i, NULL));
    }
    assert_int_equal(locks_count(t), N);
    for (int i = 0; i < N; i++) {
        struct lock *l = locks_find(t, tokens[i]);
        assert_non_null(l);
        char res[32];
        snprintf(res, sizeof(res), "r%d", i);
        assert_string_equal(l->resource, res);
    }
    for (int i = 0; i < N; i += 2) {
        locks_remove(t, locks_find(t, tokens[i]));
    }
    assert_int_equal(locks_count(t), N / 2);
    for (int i = 0; i < N; i++) {
        assert_true((locks_find(t, tokens[i]) != NULL) == (i % 2 == 1));
    }
    char missing[PROTO_TOKEN_LEN + 1];
    locks_new_token(missing);
    assert_null(locks_find(t, missing));
    locks_destroy(t);
}

static void test_owner_list(void **state)
{
    (void)state;
    struct lock_table *t = locks_create();
    struct lock_owner a = {0}, b = {0};
    char tok[4][PROTO_TOKEN_LEN + 1];
    struct lock *l[4];
    for (int i = 0; i < 4; i++) {
        locks_new_token(tok[i]);
        l[i] =
            locks_add(t, tok[i], NAME("x", 1), i < 3 ? &a : &b, 100, 0, NULL);
    }
    assert_int_equal(a.count, 3);
    assert_int_equal(b.count, 1);
    locks_remove(t, l[1]); /* middle of a's list */
    assert_int_equal(a.count, 2);
    int seen = 0;
    for (struct lock *p = locks_owner_first(&a); p != NULL;
         p = locks_owner_next(p)) {
        assert_ptr_equal(p->owner, &a);
        seen++;
    }
    assert_int_equal(seen, 2);
    while (locks_owner_first(&a) != NULL) {
        locks_remove(t, locks_owner_first(&a));
    }
    assert_int_equal(a.count, 0);
    assert_int_equal(locks_count(t), 1);
    locks_destroy(t);
}

static void test_deadline_heap(void **state)
{
    (void)state;
    struct lock_table *t = locks_create();
    enum { N = 3000 }; /* six levels of the 4-ary heap */
    struct lock *l[N];
    srand(7);
    for (int i = 0; i < N; i++) {
        char tok[PROTO_TOKEN_LEN + 1];
        locks_new_token(tok);
        l[i] = locks_add(t, tok, NAME("r", 1), NULL, 100, 0, NULL);
        locks_set_deadline(t, l[i], (uint64_t)(rand() % 100000));
    }
    /* move some (up, down, to the same time, as a renewal moves its lock
     * from due now to its give-up), remove some */
    for (int i = 0; i < N; i += 3) {
        locks_set_deadline(t, l[i], (uint64_t)(rand() % 100000));
    }
    for (int k = 0; k < N; k++) {
        uint64_t d;
        struct lock *top = locks_peek_due(t, &d);
        locks_set_deadline(t, top, d + (uint64_t)(rand() % 50000));
    }
    for (int i = 0; i < N; i += 11) {
        locks_set_deadline(t, l[i], (uint64_t)(rand() % 3));
    }
    for (int i = 1; i < N; i += 7) {
        locks_remove(t, l[i]);
    }
    uint64_t prev = 0, due;
    size_t popped = 0;
    struct lock *p;
    while ((p = locks_peek_due(t, &due)) != NULL) {
        assert_true(due >= prev);
        prev = due;
        locks_remove(t, p);
        popped++;
    }
    assert_int_equal(popped, N - (N + 5) / 7);
    assert_int_equal(locks_count(t), 0);

    /* Added first, scheduled after: locks_add made the heap's room, so
     * every lock is scheduled (none left out to never renew nor expire). */
    enum { M = 600 };
    struct lock *m[M];
    for (int i = 0; i < M; i++) {
        char tok[PROTO_TOKEN_LEN + 1];
        locks_new_token(tok);
        m[i] = locks_add(t, tok, NAME("r", 1), NULL, 100, 0, NULL);
        assert_non_null(m[i]);
    }
    for (int i = 0; i < M; i++) {
        locks_set_deadline(t, m[i], (uint64_t)(M - i));
    }
    for (popped = 0; locks_peek_due(t, &due) != NULL; popped++) {
        locks_remove(t, locks_peek_due(t, &due));
    }
    assert_int_equal(popped, M);
    locks_destroy(t);
}

/* The listing order: pages in the order locks were added, resumed after
 * a cursor whatever was removed meanwhile, filtered by prefix, bounded in
 * the entries one page looks at. */
static void test_scan_pages(void **state)
{
    (void)state;
    struct lock_table *t = locks_create();
    struct lock *all[3000];
    for (int i = 0; i < 3000; i++) {
        char tok[PROTO_TOKEN_LEN + 1], res[32];
        locks_new_token(tok);
        int n = snprintf(res, sizeof(res), "%s:%d", i % 3 ? "b" : "a", i);
        all[i] = locks_add(t, tok, NAME(res, (size_t)n), NULL, 1000, 0, NULL);
        assert_non_null(all[i]);
        assert_int_equal(all[i]->seq, (uint64_t)i + 1);
    }
    /* Remove most of the first 2000 (compaction runs), keep every 10th. */
    for (int i = 0; i < 2000; i++) {
        if (i % 10 != 0) {
            locks_remove(t, all[i]);
            all[i] = NULL;
        }
    }
    struct lock *page[64];
    uint64_t after = 0, next = 0;
    int seen = 0, last = -1;
    for (;;) {
        size_t n = locks_scan(t, after, "", 0, 100000, page, 64, &next);
        for (size_t k = 0; k < n; k++) {
            int i = (int)page[k]->seq - 1;
            assert_true(i > last);
            assert_ptr_equal(all[i], page[k]);
            last = i;
            seen++;
        }
        if (next == 0) {
            break;
        }
        assert_true(next > after);
        after = next;
    }
    assert_int_equal(seen, 200 + 1000);
    /* A prefix; a cursor at a removed lock still resumes after it. */
    size_t n = locks_scan(t, 2, "a:", 2, 100000, page, 64, &next);
    assert_int_equal(n, 64);
    assert_int_equal(page[0]->seq, 31); /* "a:30": i = 30 */
    assert_memory_equal(page[0]->resource, "a:30", 4);
    /* A visit budget stops a page early, with a cursor to go on from. */
    n = locks_scan(t, 0, "zzz", 3, 50, page, 64, &next);
    assert_int_equal(n, 0);
    assert_true(next != 0);
    /* The end. */
    n = locks_scan(t, 3000, "", 0, 100, page, 64, &next);
    assert_int_equal(n, 0);
    assert_int_equal(next, 0);
    locks_destroy(t);
}

/* A semaphore's slot is kept as fields: its resource as the client named
 * it, which a listing's prefix matches, and its slot, apart from a lock of
 * the same resource. */
static void test_slot_fields(void **state)
{
    (void)state;
    struct lock_table *t = locks_create();
    char tok[PROTO_TOKEN_LEN + 1];
    locks_new_token(tok);
    struct lock_name slot = {"pool:a", 6, 1023};
    struct lock *s = locks_add(t, tok, &slot, NULL, 1000, 0, NULL);
    assert_non_null(s);
    struct lock_name got = locks_name(s);
    assert_true(sem_name_equal(&got, &slot));
    assert_string_equal(s->resource, "pool:a");
    locks_new_token(tok);
    struct lock *l = locks_add(t, tok, NAME("pool:a", 6), NULL, 1000, 0, NULL);
    assert_non_null(l);
    got = locks_name(l);
    assert_int_equal(got.slot, SEM_NO_SLOT);
    assert_false(sem_name_equal(&got, &slot));
    struct lock *page[4];
    uint64_t next;
    assert_int_equal(locks_scan(t, 0, "pool:", 5, 100, page, 4, &next), 2);
    assert_ptr_equal(page[0], s);
    assert_ptr_equal(page[1], l);
    assert_int_equal(locks_scan(t, 0, "pool:b", 6, 100, page, 4, &next), 0);
    /* A semaphore's queue is no lock. */
    locks_new_token(tok);
    struct lock_name queue = {"pool:a", 6, SEM_QUEUE};
    assert_null(locks_add(t, tok, &queue, NULL, 1000, 0, NULL));
    assert_int_equal(locks_count(t), 2);
    locks_destroy(t);
}

/* A page that stops on a removed lock (not yet compacted away) gives that
 * lock's number as the cursor, and resuming from it starts after it. */
static void test_scan_cursor_on_removed_lock(void **state)
{
    (void)state;
    struct lock_table *t = locks_create();
    struct lock *all[10];
    for (int i = 0; i < 10; i++) {
        char tok[PROTO_TOKEN_LEN + 1];
        locks_new_token(tok);
        all[i] = locks_add(t, tok, NAME("r", 1), NULL, 1000, 0, NULL);
        assert_non_null(all[i]);
    }
    locks_remove(t, all[4]); /* number 5 */
    locks_remove(t, all[5]); /* number 6 */
    struct lock *page[16];
    uint64_t next = 0;
    size_t n = locks_scan(t, 0, "", 0, 5, page, 16, &next);
    assert_int_equal(n, 4);
    assert_int_equal(next, 5);
    n = locks_scan(t, next, "", 0, 100, page, 16, &next);
    assert_int_equal(n, 4);
    assert_ptr_equal(page[0], all[6]);
    assert_int_equal(next, 0);
    n = locks_scan(t, 4, "", 0, 100, page, 16, &next);
    assert_ptr_equal(page[0], all[6]);
    assert_int_equal(n, 4);
    locks_destroy(t);
}

/* The resource lives inside the lock's own block: the longest one a
 * request can name keeps every byte, NULs too, and ends in a NUL. */
static void test_resource_inline(void **state)
{
    (void)state;
    struct lock_table *t = locks_create();
    char res[PROTO_RESOURCE_MAX];
    for (size_t i = 0; i < sizeof(res); i++) {
        res[i] = (char)('a' + i % 26);
    }
    res[7] = '\0';
    char tok[PROTO_TOKEN_LEN + 1];
    locks_new_token(tok);
    struct lock *l =
        locks_add(t, tok, NAME(res, sizeof(res)), NULL, 1000, 0, NULL);
    assert_non_null(l);
    assert_int_equal(l->resource_len, sizeof(res));
    assert_memory_equal(l->resource, res, sizeof(res));
    assert_int_equal(l->resource[sizeof(res)], '\0');
    assert_ptr_equal(locks_find(t, tok), l);
    locks_new_token(tok);
    struct lock *e = locks_add(t, tok, NAME("", 0), NULL, 1000, 0, NULL);
    assert_non_null(e);
    assert_int_equal(e->resource_len, 0);
    assert_int_equal(e->resource[0], '\0');
    locks_remove(t, l);
    locks_remove(t, e);
    assert_int_equal(locks_count(t), 0);
    locks_destroy(t);
}

/* Memory per lock is a budget the renew bench measures (100k renewing
 * locks): a new field that grows the fixed part past it has to be weighed
 * there, and this bound raised on purpose. */
static void test_lock_fixed_size_budget(void **state)
{
    (void)state;
    assert_true(offsetof(struct lock, resource) <= 120);
}

/* The table keeps a token's 16 bytes; it spells them back as the same
 * lowercase hex, and no other spelling (upper case, short, not hex) finds
 * the lock: the nodes compare the hex. */
static void test_token_kept_as_bytes(void **state)
{
    (void)state;
    struct lock_table *t = locks_create();
    char tok[PROTO_TOKEN_LEN + 1], back[PROTO_TOKEN_LEN + 1];
    locks_new_token(tok);
    tok[0] = 'a'; /* at least one letter to upper-case */
    struct lock *l = locks_add(t, tok, NAME("r", 1), NULL, 1000, 0, NULL);
    assert_non_null(l);
    locks_token_hex(l, back);
    assert_string_equal(back, tok);
    assert_ptr_equal(locks_find(t, tok), l);
    char up[PROTO_TOKEN_LEN + 1];
    memcpy(up, tok, sizeof(up));
    up[0] = 'A';
    assert_null(locks_find(t, up));
    assert_null(locks_find(t, "abc"));
    assert_null(locks_find(t, NULL));
    char bad[PROTO_TOKEN_LEN + 1];
    memcpy(bad, tok, sizeof(bad));
    bad[31] = 'g';
    assert_null(locks_find(t, bad));
    /* Every byte value in a high and a low digit's place: only the
     * token's own finds it, and only the 16 lowercase digits spell a
     * token at all. */
    for (int pos = 0; pos < 2; pos++) {
        for (int b = 1; b < 256; b++) {
            memcpy(bad, tok, sizeof(bad));
            bad[pos] = (char)b;
            bool digit = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f');
            if (b == (unsigned char)tok[pos]) {
                assert_ptr_equal(locks_find(t, bad), l);
                continue;
            }
            assert_null(locks_find(t, bad));
            struct lock *o =
                locks_add(t, bad, NAME("r", 1), NULL, 1000, 0, NULL);
            assert_true((o != NULL) == digit);
            if (o != NULL) {
                assert_ptr_equal(locks_find(t, bad), o);
                locks_remove(t, o);
            }
        }
    }
    assert_null(locks_add(t, up, NAME("r", 1), NULL, 1000, 0, NULL));
    assert_int_equal(locks_count(t), 1);
    locks_destroy(t);
}

/* The owner's list walks the same both ways, ends at its tail, holds
 * count locks, and from defer_head on holds only deferred ones (and
 * before it none). */
static void assert_owner_list(const struct lock_owner *o)
{
    size_t n = 0;
    bool in_tail = false;
    const struct lock *prev = NULL;
    for (const struct lock *p = locks_owner_first(o); p != NULL;
         p = locks_owner_next(p)) {
        assert_ptr_equal(LIST_ITEM(p->own_link.prev, struct lock, own_link),
                         prev);
        assert_ptr_equal(p->owner, o);
        if (p == o->defer_head) {
            in_tail = true;
        }
        assert_int_equal(p->deferred, in_tail);
        prev = p;
        n++;
    }
    assert_ptr_equal(LIST_ITEM(o->locks.tail, struct lock, own_link), prev);
    assert_int_equal(n, o->count);
    assert_true(o->defer_head == NULL || in_tail);
}

/* Deferred locks come back oldest first; a removed one (first deferred or
 * not) leaves the others in order; a lock added meanwhile is not
 * deferred. */
static void test_defer_order(void **state)
{
    (void)state;
    struct lock_table *t = locks_create();
    struct lock_owner o = {0};
    struct lock *l[6];
    for (int i = 0; i < 6; i++) {
        char tok[PROTO_TOKEN_LEN + 1];
        locks_new_token(tok);
        l[i] = locks_add(t, tok, NAME("x", 1), &o, 100, 0, NULL);
    }
    assert_null(locks_undefer(&o));
    int order[] = {2, 0, 5, 3, 1};
    for (int i = 0; i < 5; i++) {
        locks_defer(l[order[i]]);
        assert_owner_list(&o);
    }
    locks_defer(l[0]); /* already deferred: stays where it is */
    assert_owner_list(&o);
    assert_ptr_equal(locks_undefer(&o), l[2]);
    assert_owner_list(&o);
    locks_remove(t, l[0]); /* now the first deferred */
    assert_owner_list(&o);
    locks_remove(t, l[3]); /* in the middle */
    assert_owner_list(&o);
    char tok[PROTO_TOKEN_LEN + 1];
    locks_new_token(tok);
    struct lock *fresh = locks_add(t, tok, NAME("x", 1), &o, 100, 0, NULL);
    assert_false(fresh->deferred);
    assert_owner_list(&o);
    locks_defer(l[2]); /* deferred again: behind the others */
    assert_ptr_equal(locks_undefer(&o), l[5]);
    assert_ptr_equal(locks_undefer(&o), l[1]);
    assert_owner_list(&o);
    locks_remove(t, l[2]); /* the last one, at the tail */
    assert_owner_list(&o);
    assert_null(locks_undefer(&o));
    assert_null(o.defer_head);
    while (locks_owner_first(&o) != NULL) {
        locks_remove(t, locks_owner_first(&o));
        assert_owner_list(&o);
    }
    assert_null(o.locks.tail);
    locks_destroy(t);
}

/* A fence lives after the resource, whatever its length; a lock without
 * one says so. */
static void test_fence_after_resource(void **state)
{
    (void)state;
    struct lock_table *t = locks_create();
    char res[PROTO_RESOURCE_MAX];
    memset(res, 'r', sizeof(res));
    for (size_t len = 0; len < sizeof(res); len += 37) {
        char tok[PROTO_TOKEN_LEN + 1];
        locks_new_token(tok);
        int64_t f = (int64_t)len * 1000003 - 7, got = 0;
        struct lock *l = locks_add(t, tok, NAME(res, len), NULL, 100, 0, &f);
        assert_non_null(l);
        assert_true(locks_fence(l, &got));
        assert_int_equal(got, f);
        assert_memory_equal(l->resource, res, len);
        assert_int_equal(l->resource[len], '\0');
        locks_new_token(tok);
        struct lock *n = locks_add(t, tok, NAME(res, len), NULL, 100, 0, NULL);
        assert_non_null(n);
        assert_false(locks_fence(n, &got));
        assert_int_equal(got, f);
    }
    locks_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_shape_and_uniqueness),
        cmocka_unit_test(test_version_bits_are_random),
        cmocka_unit_test(test_add_find_remove_many),
        cmocka_unit_test(test_owner_list),
        cmocka_unit_test(test_deadline_heap),
        cmocka_unit_test(test_scan_pages),
        cmocka_unit_test(test_scan_cursor_on_removed_lock),
        cmocka_unit_test(test_slot_fields),
        cmocka_unit_test(test_resource_inline),
        cmocka_unit_test(test_lock_fixed_size_budget),
        cmocka_unit_test(test_token_kept_as_bytes),
        cmocka_unit_test(test_defer_order),
        cmocka_unit_test(test_fence_after_resource),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
