/* waitq.c: the callers waiting for a resource, first come, first served.
 *
 *   waitq_push -> the tail of the resource's queue, with a timer of its own
 *   timer fires -> the head: try_cb (its attempt is due)
 *               -> anyone else: expired_cb (its wait_ms ran out)
 *   waitq_wake, waitq_leave -> the head's timer event made active: try_cb
 *               runs once the caller's callback has returned
 *
 * The queues are found by resource in util's hash tables, a lock's and a
 * semaphore's apart (the same resource may name both). */
#include "waitq.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "call.h"
#include "locks.h"
#include "log.h"
#include "metrics.h"
#include "rlassert.h"
#include "semaphore.h"
#include "wake.h"

#define WAITQ_BUCKETS 1024

struct waitq_set {
    struct event_base *base; /* borrowed */
    struct wake *wake;       /* borrowed: pub/sub wake-ups, or NULL */
    waitq_try_fn *try_cb;
    waitq_expired_fn *expired_cb;
    void *arg;
    /* owned: struct waitq by resource; [0] locks' queues, [1] those of
     * semaphores (table_of) */
    struct util_htable queues[2];
    int n_waiters; /* calls in every queue */
};

/* The table of the queues slot names: SEM_NO_SLOT locks', SEM_QUEUE
 * semaphores'. */
static struct util_htable *table_of(struct waitq_set *set, int slot)
{
    return &set->queues[slot != SEM_NO_SLOT];
}

struct waitq_set *waitq_set_create(struct event_base *base, struct wake *wake,
                                   waitq_try_fn *try_cb,
                                   waitq_expired_fn *expired_cb, void *arg)
{
    struct waitq_set *set = calloc(1, sizeof(*set));
    if (set == NULL) {
        return NULL;
    }
    set->base = base;
    set->wake = wake;
    set->try_cb = try_cb;
    set->expired_cb = expired_cb;
    set->arg = arg;
    if (util_htable_init(&set->queues[0], WAITQ_BUCKETS) != 0 ||
        util_htable_init(&set->queues[1], WAITQ_BUCKETS) != 0) {
        util_htable_free(&set->queues[0]);
        free(set);
        return NULL;
    }
    return set;
}

void waitq_set_destroy(struct waitq_set *set)
{
    if (set == NULL) {
        return;
    }
    for (int t = 0; t < 2; t++) {
        struct util_hnode *h = util_htable_first(&set->queues[t]);
        while (h != NULL) {
            struct util_hnode *next = util_htable_next(&set->queues[t], h);
            struct waitq *q = UTIL_CONTAINER_OF(h, struct waitq, hnode);
            free(q->resource);
            free(q);
            h = next;
        }
        util_htable_free(&set->queues[t]);
    }
    free(set);
}

struct waitq *waitq_find(struct waitq_set *set, const struct lock_name *name)
{
    struct lock_name qn = sem_queue_of(name);
    struct util_hnode *h =
        util_htable_find(table_of(set, qn.slot), qn.resource, qn.len);
    return h != NULL ? UTIL_CONTAINER_OF(h, struct waitq, hnode) : NULL;
}

/* The name of q, a lock's or a semaphore's queue; it borrows q's
 * resource. */
static struct lock_name queue_name(const struct waitq *q)
{
    return (struct lock_name){q->resource, q->resource_len, q->slot};
}

struct waitq *waitq_get(struct waitq_set *set, const struct lock_name *name)
{
    struct waitq *q = waitq_find(set, name);
    if (q != NULL) {
        return q;
    }
    size_t len = name->len;
    q = calloc(1, sizeof(*q));
    if (q == NULL) {
        return NULL;
    }
    q->resource = malloc(len + 1);
    if (q->resource == NULL) {
        free(q);
        return NULL;
    }
    memcpy(q->resource, name->resource, len);
    q->resource[len] = '\0';
    q->resource_len = len;
    q->slot = sem_queue_of(name).slot;
    q->set = set;
    util_htable_add(table_of(set, q->slot), &q->hnode, q->resource, len);
    /* Hear of releases in other daemons while anyone waits here; on
     * failure the waiters still retry on their back-off. */
    struct lock_name qn = queue_name(q);
    if (set->wake != NULL && wake_watch(set->wake, &qn) != 0) {
        log_warn(NULL, "cannot watch a resource for wake-ups (out of memory)");
    }
    return q;
}

void waitq_free_if_empty(struct waitq_set *set, struct waitq *q)
{
    if (!list_empty(&q->calls) || waitq_trying(q)) {
        return;
    }
    util_htable_remove(table_of(set, q->slot), &q->hnode);
    if (set->wake != NULL) {
        struct lock_name qn = queue_name(q);
        wake_unwatch(set->wake, &qn);
    }
    free(q->resource);
    free(q);
}

/* A queued call's timer: the head's attempt is due (unless one is in
 * flight); anyone else has waited out wait_ms behind the head. */
static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct call *call = arg;
    struct waitq *q = call->waitq;
    if (q == NULL) {
        return;
    }
    struct waitq_set *set = q->set;
    if (waitq_head(q) == call) {
        if (!waitq_trying(q)) {
            set->try_cb(call, set->arg);
        }
        return;
    }
    set->expired_cb(call, set->arg);
}

int waitq_push(struct waitq_set *set, struct waitq *q, struct call *call)
{
    /* Without a timer the call could never be answered, and as the head
     * it would stall its queue: it is refused instead. */
    if (call->retry_ev == NULL) {
        call->retry_ev = evtimer_new(set->base, retry_cb, call);
        if (call->retry_ev == NULL) {
            return -1;
        }
    }
    list_push_tail(&q->calls, &call->wlink);
    q->n_waiting++;
    call->waitq = q;
    call->waited = true;
    if (call->session != NULL) {
        call->session->waiters++;
    }
    set->n_waiters++;
    METRIC_ADD(waiters, 1);
    return 0;
}

void waitq_unlink(struct waitq_set *set, struct call *call)
{
    struct waitq *q = call->waitq;
    if (q == NULL) {
        return;
    }
    list_unlink(&q->calls, &call->wlink);
    q->n_waiting--;
    call->waitq = NULL;
    if (call->retry_ev != NULL) {
        event_free(call->retry_ev);
        call->retry_ev = NULL;
    }
    if (call->session != NULL) {
        call->session->waiters--;
    }
    set->n_waiters--;
    METRIC_ADD(waiters, -1);
}

/* The head's attempt is due: from its own event, after the caller's
 * callback has returned (see waitq.h). */
static void waitq_due(struct call *head)
{
    event_active(head->retry_ev, EV_TIMEOUT, 1);
}

void waitq_leave(struct waitq_set *set, struct call *call)
{
    struct waitq *q = call->waitq;
    if (q == NULL) {
        return;
    }
    bool was_head = waitq_head(q) == call;
    waitq_unlink(set, call);
    struct call *next = waitq_head(q);
    if (was_head && next != NULL && !waitq_trying(q)) {
        waitq_due(next);
    } else {
        waitq_free_if_empty(set, q);
    }
}

void waitq_arm(struct call *call, uint64_t delay_ms)
{
    struct timeval tv = {(time_t)(delay_ms / 1000),
                         (suseconds_t)(delay_ms % 1000) * 1000};
    evtimer_add(call->retry_ev, &tv);
}

/* The only writer of head_state: refuses a transition the head cannot
 * make (waitq.h lists them). */
static void head_set_state(struct waitq *q, enum waitq_head_state to)
{
    enum waitq_head_state from = q->head_state;
    bool ok;
    switch (to) {
    case WAITQ_HEAD_IDLE:
        ok = from == WAITQ_HEAD_TRYING || from == WAITQ_HEAD_WOKEN;
        break;
    case WAITQ_HEAD_TRYING:
        ok = from == WAITQ_HEAD_IDLE;
        break;
    case WAITQ_HEAD_WOKEN:
        ok = from == WAITQ_HEAD_IDLE || from == WAITQ_HEAD_TRYING;
        break;
    default:
        ok = false;
        break;
    }
    RL_ASSERT(ok);
    q->head_state = to;
}

void waitq_begin_try(struct call *call)
{
    evtimer_del(call->retry_ev);
    head_set_state(call->waitq, WAITQ_HEAD_TRYING);
}

struct call *waitq_head(const struct waitq *q)
{
    return LIST_ITEM(q->calls.head, struct call, wlink);
}

bool waitq_trying(const struct waitq *q)
{
    return q->head_state != WAITQ_HEAD_IDLE;
}

bool waitq_end_try(struct waitq *q)
{
    bool woken = q->head_state == WAITQ_HEAD_WOKEN;
    head_set_state(q, WAITQ_HEAD_IDLE);
    return woken;
}

void waitq_resume_try(struct waitq *q, bool woken)
{
    head_set_state(q, woken ? WAITQ_HEAD_WOKEN : WAITQ_HEAD_TRYING);
}

/* A local release was queued on every node before this, so the head's SET,
 * sent later, lands after it. */
void waitq_wake(struct waitq_set *set, const struct lock_name *name)
{
    struct waitq *q = waitq_find(set, name);
    if (q == NULL || list_empty(&q->calls)) {
        return;
    }
    if (q->head_state == WAITQ_HEAD_TRYING) {
        head_set_state(q, WAITQ_HEAD_WOKEN);
        return;
    }
    if (q->head_state == WAITQ_HEAD_WOKEN) {
        return; /* remembered already */
    }
    waitq_due(waitq_head(q));
}

int waitq_count(const struct waitq_set *set)
{
    return set->n_waiters;
}

size_t waitq_waiting(struct waitq_set *set, const struct lock_name *name)
{
    struct waitq *q = waitq_find(set, name);
    return q != NULL ? q->n_waiting : 0;
}

void waitq_drain(struct waitq_set *set, waitq_answer_fn *answer, void *arg)
{
    for (int t = 0; t < 2; t++) {
        struct util_hnode *h = util_htable_first(&set->queues[t]);
        while (h != NULL) {
            struct util_hnode *next = util_htable_next(&set->queues[t], h);
            struct waitq *q = UTIL_CONTAINER_OF(h, struct waitq, hnode);
            struct call *c = waitq_head(q);
            while (c != NULL) {
                struct call *cn = LIST_ITEM(c->wlink.next, struct call, wlink);
                if (!(c == waitq_head(q) && waitq_trying(q))) {
                    waitq_unlink(set, c);
                    answer(c, arg);
                }
                c = cn;
            }
            waitq_free_if_empty(set, q);
            h = next;
        }
    }
}
