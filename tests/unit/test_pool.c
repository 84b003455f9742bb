/* test_pool.c: the free list reuses what was put back, newest first, keeps
 * no more than its bound (the rest is freed: valgrind and ASan in CI see a
 * leak or a double free here), drops through the pool's own function what
 * an object owns, and drains to nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "pool.h"

struct obj {
    void *link; /* the pool's, while kept */
    int value;
    char pad[40];
};

static void test_reuses_newest_first(void **state)
{
    (void)state;
    struct pool p;
    pool_init(&p, sizeof(struct obj), 4, NULL);
    assert_null(pool_get(&p)); /* nothing kept yet */
    struct obj *a = pool_new(&p), *b = pool_new(&p);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    pool_put(&p, a);
    pool_put(&p, b);
    assert_int_equal(p.count, 2);
    assert_ptr_equal(pool_get(&p), b);
    assert_ptr_equal(pool_get(&p), a);
    assert_int_equal(p.count, 0);
    assert_null(pool_get(&p));
    struct obj *c = pool_new(&p); /* empty: a new one */
    assert_non_null(c);
    assert_ptr_not_equal(c, a);
    assert_ptr_not_equal(c, b);
    free(a);
    free(b);
    free(c);
}

static void test_keeps_at_most_its_bound(void **state)
{
    (void)state;
    struct pool p;
    pool_init(&p, sizeof(struct obj), 3, NULL);
    struct obj *o[10];
    for (int i = 0; i < 10; i++) {
        o[i] = pool_new(&p);
        assert_non_null(o[i]);
        o[i]->value = i;
    }
    for (int i = 0; i < 10; i++) {
        pool_put(&p, o[i]);
        assert_true(p.count <= 3);
    }
    assert_int_equal(p.count, 3);
    /* The first three put back are the ones kept. */
    struct obj *g[3];
    for (int i = 2; i >= 0; i--) {
        g[i] = pool_get(&p);
        assert_ptr_equal(g[i], o[i]);
        assert_int_equal(g[i]->value, i); /* only the link bytes were used */
    }
    for (int i = 0; i < 3; i++) {
        pool_put(&p, g[i]);
    }
    pool_drain(&p);
    assert_int_equal(p.count, 0);
    assert_null(p.free);
}

static void test_tiny_objects_and_null(void **state)
{
    (void)state;
    struct pool p;
    pool_init(&p, 1, 2, NULL); /* rounded up to hold the link */
    assert_int_equal(p.size, sizeof(void *));
    char *x = pool_new(&p);
    assert_non_null(x);
    pool_put(&p, NULL); /* nothing happens */
    assert_int_equal(p.count, 0);
    pool_put(&p, x);
    assert_int_equal(p.count, 1);
    pool_drain(&p);
    pool_drain(&p); /* draining an empty pool is fine */
    assert_int_equal(p.count, 0);
}

static void test_keep_zero_frees_everything(void **state)
{
    (void)state;
    struct pool p;
    pool_init(&p, sizeof(struct obj), 0, NULL);
    void *o = pool_new(&p);
    assert_non_null(o);
    pool_put(&p, o);
    assert_int_equal(p.count, 0);
    assert_null(p.free);
}

/* Objects that own a buffer past their link, kept across reuse. */
struct owner {
    void *link;
    char *owned;
};

static int drops;

static void owner_drop(void *o)
{
    struct owner *w = o;
    free(w->owned);
    free(w);
    drops++;
}

static void test_drop_frees_what_an_object_owns(void **state)
{
    (void)state;
    struct pool p;
    drops = 0;
    pool_init(&p, sizeof(struct owner), 1, owner_drop);
    struct owner *w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = pool_new(&p);
        assert_non_null(w[i]);
        w[i]->owned = malloc(32);
        assert_non_null(w[i]->owned);
    }
    pool_put(&p, w[0]); /* kept, buffer and all */
    pool_put(&p, w[1]); /* over the bound: dropped */
    pool_put(&p, w[2]);
    assert_int_equal(drops, 2);
    struct owner *again = pool_get(&p);
    assert_ptr_equal(again, w[0]);
    assert_non_null(again->owned); /* what it owns survived the reuse */
    pool_put(&p, again);
    pool_drain(&p);
    assert_int_equal(drops, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuses_newest_first),
        cmocka_unit_test(test_keeps_at_most_its_bound),
        cmocka_unit_test(test_tiny_objects_and_null),
        cmocka_unit_test(test_keep_zero_frees_everything),
        cmocka_unit_test(test_drop_frees_what_an_object_owns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
