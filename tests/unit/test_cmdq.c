/* test_cmdq.c: a node's command queue (cmdq.c): wire order through
 * push, insert-before and unlink, the live pointer past timed-out
 * commands, the walk of commands due at a given time, the timer's next
 * deadline, and the bound of the pool of free entries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cmdq.h"

/* A caller's struct, its entry first as cmdq.h asks. */
struct item {
    struct cmdq_entry q;
    int tag;
};

static struct item *item_of(struct cmdq_entry *e)
{
    return e != NULL ? CMDQ_ITEM(e, struct item, q) : NULL;
}

static struct item *take(struct cmdq *q, int tag, uint64_t deadline_us)
{
    struct item *it = item_of(cmdq_get(q));
    assert_non_null(it);
    it->tag = tag;
    it->q.deadline_us = deadline_us;
    return it;
}

/* The queue's tags head to tail into out (up to cap); checks the back
 * links and len on the way. Returns how many. */
static int tags(const struct cmdq *q, int *out, int cap)
{
    int n = 0;
    const struct cmdq_entry *prev = NULL;
    for (struct cmdq_entry *e = cmdq_head(q); e != NULL; e = cmdq_next(e)) {
        assert_ptr_equal(LIST_ITEM(e->link.prev, struct cmdq_entry, link),
                         prev);
        assert_true(n < cap);
        out[n++] = item_of(e)->tag;
        prev = e;
    }
    assert_ptr_equal(cmdq_tail(q), prev);
    assert_int_equal(q->len, n);
    return n;
}

/* An empty queue q (a pool of 8) and n entries taken from it, not
 * queued: out[k] tagged k + 1, due at (k + 1) * 100. */
static void start(struct cmdq *q, struct item **out, int n)
{
    cmdq_init(q, sizeof(struct item), 8);
    for (int k = 0; k < n; k++) {
        out[k] = take(q, k + 1, (uint64_t)(k + 1) * 100);
    }
}

#define ASSERT_ORDER(q, ...)                                                   \
    do {                                                                       \
        int want_[] = {__VA_ARGS__};                                           \
        int got_[16];                                                          \
        int n_ = tags((q), got_, 16);                                          \
        assert_int_equal(n_, (int)(sizeof(want_) / sizeof(want_[0])));         \
        assert_memory_equal(got_, want_, sizeof(want_));                       \
    } while (0)

/* Puts back every queued entry and closes q. */
static void drain(struct cmdq *q)
{
    while (cmdq_head(q) != NULL) {
        struct cmdq_entry *e = cmdq_head(q);
        cmdq_unlink(q, e);
        cmdq_put(q, e);
    }
    cmdq_close(q);
}

static void test_empty(void **state)
{
    (void)state;
    struct cmdq q;
    cmdq_init(&q, sizeof(struct item), 8);
    assert_null(cmdq_head(&q));
    assert_null(cmdq_tail(&q));
    assert_null(q.live);
    assert_int_equal(q.len, 0);
    assert_null(cmdq_due(&q, UINT64_MAX));
    cmdq_find_live(&q);
    assert_null(q.live);
    uint64_t at = 77;
    assert_false(cmdq_timer_at(&q, false, 0, &at));
    assert_int_equal(at, 77); /* untouched */
    /* closing an empty queue, twice, is harmless */
    cmdq_close(&q);
    cmdq_close(&q);
    assert_int_equal(q.pool.count, 0);
}

static void test_order(void **state)
{
    (void)state;
    struct cmdq q;
    struct item *t[3];
    start(&q, t, 3);
    struct item *a = t[0], *b = t[1], *c = t[2];
    assert_null(a->q.link.prev);
    assert_null(a->q.link.next);
    assert_false(a->q.done);
    cmdq_push(&q, &a->q);
    assert_ptr_equal(q.live, &a->q);
    cmdq_push(&q, &c->q);
    ASSERT_ORDER(&q, 1, 3);
    /* before the tail, before the head, and at the tail (NULL) */
    cmdq_insert_before(&q, &b->q, &c->q);
    ASSERT_ORDER(&q, 1, 2, 3);
    struct item *z = take(&q, 0, 50);
    cmdq_insert_before(&q, &z->q, &a->q);
    ASSERT_ORDER(&q, 0, 1, 2, 3);
    assert_ptr_equal(q.live, &a->q); /* left to cmdq_find_live */
    cmdq_find_live(&q);
    assert_ptr_equal(q.live, &z->q);
    struct item *d = take(&q, 4, 400);
    cmdq_insert_before(&q, &d->q, NULL);
    ASSERT_ORDER(&q, 0, 1, 2, 3, 4);
    /* unlink from the middle, the head and the tail */
    cmdq_unlink(&q, &b->q);
    assert_null(b->q.link.prev);
    assert_null(b->q.link.next);
    ASSERT_ORDER(&q, 0, 1, 3, 4);
    cmdq_unlink(&q, &z->q);
    ASSERT_ORDER(&q, 1, 3, 4);
    assert_ptr_equal(q.live, &a->q); /* moved past the unlinked head */
    cmdq_unlink(&q, &d->q);
    ASSERT_ORDER(&q, 1, 3);
    cmdq_put(&q, &b->q);
    cmdq_put(&q, &z->q);
    cmdq_put(&q, &d->q);
    /* the last one out leaves the queue empty */
    cmdq_unlink(&q, &a->q);
    cmdq_unlink(&q, &c->q);
    assert_null(cmdq_head(&q));
    assert_null(cmdq_tail(&q));
    assert_null(q.live);
    assert_int_equal(q.len, 0);
    cmdq_put(&q, &a->q);
    cmdq_put(&q, &c->q);
    drain(&q);
}

static void test_live(void **state)
{
    (void)state;
    struct cmdq q;
    struct item *t[3];
    start(&q, t, 3);
    struct item *a = t[0], *b = t[1], *c = t[2];
    cmdq_push(&q, &a->q);
    cmdq_push(&q, &b->q);
    cmdq_push(&q, &c->q);
    /* a and b time out: they stay queued, live skips them */
    assert_ptr_equal(cmdq_due(&q, 250), &a->q);
    assert_ptr_equal(cmdq_due(&q, 250), &b->q);
    assert_null(cmdq_due(&q, 250));
    assert_true(a->q.done);
    assert_true(b->q.done);
    assert_false(c->q.done);
    ASSERT_ORDER(&q, 1, 2, 3);
    assert_ptr_equal(q.live, &c->q);
    cmdq_find_live(&q);
    assert_ptr_equal(q.live, &c->q);
    /* a's late reply: live stays on c */
    cmdq_unlink(&q, &a->q);
    cmdq_put(&q, &a->q);
    assert_ptr_equal(q.live, &c->q);
    /* c times out too: only timed-out commands are queued */
    assert_ptr_equal(cmdq_due(&q, 300), &c->q);
    assert_null(q.live);
    ASSERT_ORDER(&q, 2, 3);
    cmdq_find_live(&q);
    assert_null(q.live);
    /* a command pushed after the timed-out ones is live */
    struct item *d = take(&q, 4, 400);
    cmdq_push(&q, &d->q);
    assert_ptr_equal(q.live, &d->q);
    /* one inserted before a timed-out one while nothing is live stays
     * out of live until find_live, which then finds it */
    assert_ptr_equal(cmdq_due(&q, 400), &d->q);
    assert_null(q.live);
    struct item *e = take(&q, 5, 150);
    cmdq_insert_before(&q, &e->q, &b->q);
    ASSERT_ORDER(&q, 5, 2, 3, 4);
    assert_null(q.live);
    cmdq_find_live(&q);
    assert_ptr_equal(q.live, &e->q);
    /* a done entry marked by the caller (an answer) is skipped too */
    e->q.done = true;
    cmdq_find_live(&q);
    assert_null(q.live);
    drain(&q);
}

static void test_due(void **state)
{
    (void)state;
    struct cmdq q;
    cmdq_init(&q, sizeof(struct item), 8);
    for (int k = 1; k <= 5; k++) {
        cmdq_push(&q, &take(&q, k, (uint64_t)k * 100)->q);
    }
    /* before the first deadline: none */
    assert_null(cmdq_due(&q, 0));
    assert_null(cmdq_due(&q, 99));
    /* exactly at a deadline: due */
    struct cmdq_entry *e = cmdq_due(&q, 100);
    assert_non_null(e);
    assert_int_equal(item_of(e)->tag, 1);
    assert_null(cmdq_due(&q, 100));
    /* the same now again hands out nothing twice */
    assert_null(cmdq_due(&q, 199));
    /* a later now: the next ones, in order */
    int got[5];
    int n = 0;
    while ((e = cmdq_due(&q, 350)) != NULL) {
        got[n++] = item_of(e)->tag;
    }
    assert_int_equal(n, 2);
    assert_int_equal(got[0], 2);
    assert_int_equal(got[1], 3);
    assert_int_equal(item_of(q.live)->tag, 4);
    /* a command answered (done, still queued) by the time it is due is
     * skipped, not handed out again */
    struct cmdq_entry *four = q.live;
    four->done = true;
    e = cmdq_due(&q, 1000);
    assert_non_null(e);
    assert_int_equal(item_of(e)->tag, 5);
    assert_null(cmdq_due(&q, UINT64_MAX));
    assert_null(q.live);
    ASSERT_ORDER(&q, 1, 2, 3, 4, 5); /* all still queued */
    /* the caller may unlink the one handed out before asking again */
    drain(&q);
    cmdq_init(&q, sizeof(struct item), 8);
    cmdq_push(&q, &take(&q, 1, 10)->q);
    cmdq_push(&q, &take(&q, 2, 10)->q);
    e = cmdq_due(&q, 10);
    assert_int_equal(item_of(e)->tag, 1);
    cmdq_unlink(&q, e);
    cmdq_put(&q, e);
    e = cmdq_due(&q, 10);
    assert_int_equal(item_of(e)->tag, 2);
    assert_null(cmdq_due(&q, 10));
    drain(&q);
}

static void test_timer_at(void **state)
{
    (void)state;
    struct cmdq q;
    cmdq_init(&q, sizeof(struct item), 8);
    cmdq_push(&q, &take(&q, 1, 100)->q);
    cmdq_push(&q, &take(&q, 2, 200)->q);
    uint64_t at = 0;
    /* none armed: arm for the live command's deadline */
    assert_true(cmdq_timer_at(&q, false, 0, &at));
    assert_int_equal(at, 100);
    /* armed early enough, or exactly on time: leave it */
    assert_false(cmdq_timer_at(&q, true, 50, &at));
    assert_false(cmdq_timer_at(&q, true, 100, &at));
    /* armed too late (a deadline shortened behind a held command) */
    assert_true(cmdq_timer_at(&q, true, 150, &at));
    assert_int_equal(at, 100);
    /* once the first timed out, the next live one's deadline */
    assert_non_null(cmdq_due(&q, 100));
    assert_true(cmdq_timer_at(&q, false, 0, &at));
    assert_int_equal(at, 200);
    assert_non_null(cmdq_due(&q, 200));
    /* nothing live (only timed-out commands queued) */
    assert_false(cmdq_timer_at(&q, false, 0, &at));
    drain(&q);
}

static void test_pool(void **state)
{
    (void)state;
    struct cmdq q;
    cmdq_init(&q, sizeof(struct item), 2);
    struct cmdq_entry *e[4];
    for (int k = 0; k < 4; k++) {
        e[k] = cmdq_get(&q);
        assert_non_null(e[k]);
    }
    assert_int_equal(q.pool.count, 0);
    /* never more than the bound kept: the rest are freed */
    for (int k = 0; k < 4; k++) {
        cmdq_put(&q, e[k]);
        assert_true(q.pool.count <= 2);
    }
    assert_int_equal(q.pool.count, 2);
    /* taken from the pool again, reset, the last put first */
    item_of(e[1])->tag = 42;
    e[1]->done = true;
    e[1]->deadline_us = 9;
    struct cmdq_entry *again = cmdq_get(&q);
    assert_ptr_equal(again, e[1]);
    assert_false(again->done);
    assert_null(again->link.prev);
    assert_null(again->link.next);
    assert_int_equal(again->deadline_us, 0);
    assert_int_equal(item_of(again)->tag, 42); /* the caller's to set */
    assert_int_equal(q.pool.count, 1);
    /* closing frees the pool; an entry lent out and put back after it is
     * freed at once (ASan's leak check holds this to account) */
    cmdq_close(&q);
    assert_int_equal(q.pool.count, 0);
    assert_null(q.pool.free);
    cmdq_put(&q, again);
    assert_int_equal(q.pool.count, 0);
    assert_null(q.pool.free);
    /* a pool of 0 keeps nothing */
    cmdq_init(&q, sizeof(struct item), 0);
    cmdq_put(&q, cmdq_get(&q));
    assert_int_equal(q.pool.count, 0);
    cmdq_close(&q);
    /* an entry_size below an entry's is an entry's */
    cmdq_init(&q, 1, 1);
    assert_int_equal(q.pool.size, sizeof(struct cmdq_entry));
    cmdq_put(&q, cmdq_get(&q));
    assert_int_equal(q.pool.count, 1);
    cmdq_close(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),    cmocka_unit_test(test_order),
        cmocka_unit_test(test_live),     cmocka_unit_test(test_due),
        cmocka_unit_test(test_timer_at), cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
