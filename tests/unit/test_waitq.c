/* test_waitq.c: the wait queues on a real event base, without nodes: first
 * come, first served; only the head tries; a wake-up or a head leaving
 * makes the next attempt due from the head's own event, never inside the
 * call that woke it; a waiter behind the head ends its wait by its timer;
 * a semaphore's slots share its queue. The wake (wake.c) is stubbed: the
 * set only tells it which resources to watch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "call.h"
#include "locks.h"
#include "semaphore.h"
#include "waitq.h"

/* ---- wake.c stubs: what the set watches -------------------------------- */

static int watched;

int wake_watch(struct wake *w, const struct lock_name *name)
{
    (void)w;
    (void)name;
    watched++;
    return 0;
}

void wake_unwatch(struct wake *w, const struct lock_name *name)
{
    (void)w;
    (void)name;
    watched--;
}

/* A lock (no semaphore's) on the resource r. */
#define LOCK(r) (&(struct lock_name){(r), strlen(r), SEM_NO_SLOT})

/* ---- what the owner is told --------------------------------------------- */

#define SEEN_MAX 16

static struct call *tried[SEEN_MAX], *expired[SEEN_MAX];
static int n_tried, n_expired;

static void try_cb(struct call *call, void *arg)
{
    (void)arg;
    assert_true(n_tried < SEEN_MAX);
    tried[n_tried++] = call;
}

static struct event_base *base;
static struct waitq_set *set;

/* Answered and taken out, as ops does. */
static void expired_cb(struct call *call, void *arg)
{
    (void)arg;
    assert_true(n_expired < SEEN_MAX);
    expired[n_expired++] = call;
    waitq_leave(set, call);
}

/* A non-NULL wake handle, so that the set watches (the stubs count). */
static char fake_wake;

static int setup(void **state)
{
    (void)state;
    n_tried = n_expired = watched = 0;
    base = event_base_new();
    assert_non_null(base);
    set = waitq_set_create(base, (struct wake *)&fake_wake, try_cb, expired_cb,
                           NULL);
    assert_non_null(set);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    waitq_set_destroy(set);
    event_base_free(base);
    return 0;
}

/* Runs the callbacks that are due now (active events, zero timers). */
static void turn(void)
{
    for (int i = 0; i < 3; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
    }
}

/* Queues call on res, its timer far away. */
static struct waitq *queue(struct call *call, const char *res)
{
    struct waitq *q = waitq_get(set, LOCK(res));
    assert_non_null(q);
    assert_int_equal(waitq_push(set, q, call), 0);
    waitq_arm(call, 60000);
    return q;
}

static void test_wake_runs_the_head_later(void **state)
{
    (void)state;
    struct call a = {0}, b = {0}, c = {0};
    struct lock_owner s = {0};
    b.session = &s;
    struct waitq *q = queue(&a, "r");
    queue(&b, "r");
    queue(&c, "r");
    assert_int_equal(watched, 1);
    assert_ptr_equal(waitq_head(q), &a);
    assert_int_equal(waitq_count(set), 3);
    assert_int_equal(waitq_waiting(set, LOCK("r")), 3);
    assert_int_equal(s.waiters, 1);
    /* Not inside the wake: once it has returned. */
    waitq_wake(set, LOCK("r"));
    assert_int_equal(n_tried, 0);
    turn();
    assert_int_equal(n_tried, 1);
    assert_ptr_equal(tried[0], &a);
    /* While the head tries, a wake is remembered, and starts nothing. */
    waitq_begin_try(&a);
    assert_true(waitq_trying(q));
    assert_int_equal(q->head_state, WAITQ_HEAD_TRYING);
    waitq_wake(set, LOCK("r"));
    turn();
    assert_int_equal(n_tried, 1);
    assert_int_equal(q->head_state, WAITQ_HEAD_WOKEN);
    waitq_wake(set, LOCK("r")); /* remembered once */
    assert_int_equal(q->head_state, WAITQ_HEAD_WOKEN);
    /* The head won: it leaves, and the next in line goes, later. */
    assert_true(waitq_end_try(q));
    assert_false(waitq_trying(q));
    waitq_leave(set, &a);
    assert_int_equal(n_tried, 1);
    turn();
    assert_int_equal(n_tried, 2);
    assert_ptr_equal(tried[1], &b);
    assert_int_equal(waitq_count(set), 2);
    /* A wake for another resource touches nothing. */
    waitq_wake(set, LOCK("x"));
    turn();
    assert_int_equal(n_tried, 2);
    waitq_leave(set, &b);
    assert_int_equal(s.waiters, 0);
    turn();
    assert_ptr_equal(tried[2], &c);
    waitq_leave(set, &c);
    turn();
    assert_int_equal(n_tried, 3);
    /* The last one out frees the queue and stops watching. */
    assert_null(waitq_find(set, LOCK("r")));
    assert_int_equal(watched, 0);
    assert_int_equal(waitq_count(set), 0);
}

/* A call behind the head whose wait ran out is handed to expired_cb; the
 * head is not disturbed. */
static void test_wait_runs_out_behind_the_head(void **state)
{
    (void)state;
    struct call a = {0}, b = {0};
    struct waitq *q = queue(&a, "r");
    queue(&b, "r");
    waitq_arm(&b, 0);
    turn();
    assert_int_equal(n_expired, 1);
    assert_ptr_equal(expired[0], &b);
    assert_int_equal(n_tried, 0);
    assert_ptr_equal(waitq_head(q), &a);
    assert_int_equal(q->n_waiting, 1);
    /* The head's own timer: its next attempt. */
    waitq_arm(&a, 0);
    turn();
    assert_int_equal(n_tried, 1);
    assert_ptr_equal(tried[0], &a);
    waitq_leave(set, &a);
}

/* Every slot of a semaphore wakes its one queue, which a lock of the same
 * resource does not share. */
static void test_semaphore_slots_share_a_queue(void **state)
{
    (void)state;
    struct lock_name sem = {"pool", 4, SEM_QUEUE};
    struct lock_name slot = {"pool", 4, 3}, slot0 = {"pool", 4, 0};
    struct call a = {0}, b = {0};
    struct waitq *q = waitq_get(set, &sem);
    assert_non_null(q);
    assert_ptr_equal(waitq_get(set, &slot), q);
    assert_int_equal(waitq_push(set, q, &a), 0);
    waitq_arm(&a, 60000);
    assert_int_equal(waitq_waiting(set, &slot), 1);
    assert_int_equal(waitq_waiting(set, &slot0), 1);
    /* The lock "pool" is another thing: its own queue, its own watch. */
    assert_null(waitq_find(set, LOCK("pool")));
    struct waitq *lq = queue(&b, "pool");
    assert_true(lq != q);
    assert_int_equal(watched, 2);
    assert_int_equal(waitq_waiting(set, LOCK("pool")), 1);
    waitq_wake(set, LOCK("pool"));
    turn();
    assert_int_equal(n_tried, 1);
    assert_ptr_equal(tried[0], &b);
    waitq_wake(set, &slot);
    turn();
    assert_int_equal(n_tried, 2);
    assert_ptr_equal(tried[1], &a);
    waitq_leave(set, &a);
    waitq_leave(set, &b);
    assert_null(waitq_find(set, &slot));
    assert_null(waitq_find(set, LOCK("pool")));
    assert_int_equal(watched, 0);
}

/* Drained at shutdown: everyone but a head whose attempt is in flight. */
static struct call *answered[SEEN_MAX];
static int n_answered;

static void answer(struct call *call, void *arg)
{
    (void)arg;
    answered[n_answered++] = call;
}

/* The head's states as waitq.h lists them; any other change aborts. */
static void test_head_states(void **state)
{
    (void)state;
    struct call a = {0};
    struct waitq *q = queue(&a, "h");
    assert_int_equal(q->head_state, WAITQ_HEAD_IDLE);
    waitq_begin_try(&a);
    assert_false(waitq_end_try(q));
    /* A semaphore's next slot keeps a release that came meanwhile. */
    waitq_resume_try(q, true);
    assert_int_equal(q->head_state, WAITQ_HEAD_WOKEN);
    assert_true(waitq_end_try(q));
    waitq_resume_try(q, false);
    assert_int_equal(q->head_state, WAITQ_HEAD_TRYING);
    assert_false(waitq_end_try(q));
    /* Ending a round that never started is a bug: it aborts. */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, STDERR_FILENO);
        }
        (void)waitq_end_try(q);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    waitq_leave(set, &a);
    assert_null(waitq_find(set, LOCK("h")));
}

static void test_drain_keeps_a_trying_head(void **state)
{
    (void)state;
    struct call a = {0}, b = {0}, c = {0}, d = {0};
    struct waitq *q = queue(&a, "r");
    queue(&b, "r");
    queue(&c, "s");
    struct lock_name slot = {"s", 1, 2};
    assert_int_equal(waitq_push(set, waitq_get(set, &slot), &d), 0);
    waitq_begin_try(&a);
    n_answered = 0;
    waitq_drain(set, answer, NULL);
    assert_int_equal(n_answered, 3);
    assert_ptr_equal(waitq_head(q), &a);
    assert_null(waitq_find(set, LOCK("s")));
    assert_null(waitq_find(set, &slot));
    assert_int_equal(waitq_count(set), 1);
    turn();
    assert_int_equal(n_tried, 0);
    assert_false(waitq_end_try(q)); /* no release came meanwhile */
    waitq_leave(set, &a);
    assert_null(waitq_find(set, LOCK("r")));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wake_runs_the_head_later, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_wait_runs_out_behind_the_head,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_semaphore_slots_share_a_queue,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_head_states, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain_keeps_a_trying_head, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
