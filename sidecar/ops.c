/* ops.c: what each operation does, independent of framing.
 *
 * acquire  -> cluster_acquire -> lock table (+ session, + renewal)
 *          -> busy with wait_ms: the resource's wait queue, FIFO; only the
 *             queue's head tries, on a jittered back-off no shorter than the
 *             holder's PTTL; a local release wakes the head at once
 * release  -> drop from the table, cluster_release, wake the next waiter
 * extend   -> cluster_extend, new validity into the table
 * complete -> cluster_complete ("done:<token>"), wake waiters (they get done);
 *             renewal pauses until the answer and resumes if it failed
 *
 * A release, extend or complete finds the table's lock by token but acts on
 * the request's resource when one is given; only a request that names the
 * lock's own resource (or none) may change or drop the table's entry.
 *
 * One timer serves every lock through the table's deadline heap: renewals
 * that are due, and the removal of locks whose validity ended. */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "cluster.h"
#include "config.h"
#include "locks.h"
#include "log.h"
#include "metrics.h"
#include "node.h"
#include "redlock.h"
#include "wake.h"

/* The callers waiting for one resource, first come, first served. Owned by
 * the ops hash; freed when it empties. */
struct waitq {
    char *resource; /* owned */
    size_t resource_len;
    struct call *head, *tail; /* borrowed calls, linked by wnext/wprev */
    bool head_trying;         /* the head has an acquisition in flight */
    bool woken;               /* a release came while the head was trying */
    struct waitq *hnext;      /* hash chain */
};

struct ops {
    struct event_base *base;  /* borrowed */
    const struct config *cfg; /* borrowed */
    struct cluster *cluster;  /* owned */
    struct lock_table *locks; /* owned */
    struct wake *wake;        /* owned: pub/sub wake-ups from elsewhere */
    struct event *lock_timer; /* owned: next lock deadline */
    uint64_t lock_timer_due;
    struct waitq **wq_buckets; /* owned */
    size_t wq_n_buckets;
    int n_waiters;
    int renew_inflight; /* renewals sent, not yet answered */
    bool shutting_down;
};

/* A renewal in flight; owned by the cluster callback. The lock is looked up
 * again by token, since it may be released meanwhile. */
struct renew_ctx {
    struct ops *ops;
    char token[PROTO_TOKEN_LEN + 1];
};

static void waiter_try(struct ops *o, struct call *call);
static void waiter_finish(struct ops *o, struct call *call, enum proto_err err,
                          const char *msg);
static void lock_timer_rearm(struct ops *o);
static void lock_timer_kick(struct ops *o);

/* Renewals in flight at once, across all locks. */
#define RENEW_INFLIGHT_MAX 2048

/* ---- replies ------------------------------------------------------------ */

static void reply_error(struct call *call, enum proto_err err, const char *msg)
{
    struct response rsp = {0};
    rsp.id = call->req.id_len ? call->req.id : NULL;
    rsp.id_len = call->req.id_len;
    rsp.err = err;
    rsp.message = msg;
    server_call_done(call, &rsp);
}

static void reply_ok(struct call *call, const char *lock, const char *resource,
                     size_t resource_len, int64_t validity_ms, bool has_fence,
                     int64_t fence)
{
    struct response rsp = {0};
    rsp.id = call->req.id_len ? call->req.id : NULL;
    rsp.id_len = call->req.id_len;
    rsp.err = ERR_NONE;
    rsp.lock = lock;
    rsp.resource = resource;
    rsp.resource_len = resource_len;
    rsp.validity_ms = validity_ms;
    rsp.has_fence = has_fence;
    rsp.fence = fence;
    server_call_done(call, &rsp);
}

#define TOO_LATE_MESSAGE                                                       \
    "no quorum within the lock's validity: the ttl is too short for the "      \
    "nodes' latency"

/* The message for a failed cluster operation. */
static const char *result_message(const struct cluster_result *res);

static const char *err_message(enum proto_err err)
{
    switch (err) {
    case ERR_BUSY:
        return "the resource is held by another owner";
    case ERR_DONE:
        return "the resource was completed and its done mark has not expired";
    case ERR_NOT_HELD:
        return "the lock is not held (unknown token, expired or lost)";
    case ERR_NO_QUORUM:
        return "fewer than a quorum of nodes answered in time";
    case ERR_SHUTTING_DOWN:
        return "the daemon is shutting down";
    case ERR_LIMIT:
        return "limit reached";
    case ERR_INTERNAL:
        return "internal error (logged)";
    default:
        return "error";
    }
}

static const char *result_message(const struct cluster_result *res)
{
    if (res->err == ERR_NO_QUORUM && res->too_late) {
        return TOO_LATE_MESSAGE;
    }
    return err_message(res->err);
}

/* ---- wait queues -------------------------------------------------------- */

static size_t resource_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return (size_t)h;
}

static struct waitq **waitq_slot(struct ops *o, const char *res, size_t len)
{
    size_t h = resource_hash(res, len) & (o->wq_n_buckets - 1);
    struct waitq **pp = &o->wq_buckets[h];
    while (*pp != NULL && ((*pp)->resource_len != len ||
                           memcmp((*pp)->resource, res, len) != 0)) {
        pp = &(*pp)->hnext;
    }
    return pp;
}

static struct waitq *waitq_find(struct ops *o, const char *res, size_t len)
{
    return *waitq_slot(o, res, len);
}

static struct waitq *waitq_get(struct ops *o, const char *res, size_t len)
{
    struct waitq **pp = waitq_slot(o, res, len);
    if (*pp != NULL) {
        return *pp;
    }
    struct waitq *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        return NULL;
    }
    q->resource = malloc(len + 1);
    if (q->resource == NULL) {
        free(q);
        return NULL;
    }
    memcpy(q->resource, res, len);
    q->resource[len] = '\0';
    q->resource_len = len;
    *pp = q;
    /* Hear of releases in other daemons while anyone waits here; on
     * failure the waiters still retry on their back-off. */
    if (o->wake != NULL && wake_watch(o->wake, res, len) != 0) {
        log_warn(NULL, "cannot watch a resource for wake-ups (out of memory)");
    }
    return q;
}

static void waitq_free_if_empty(struct ops *o, struct waitq *q)
{
    if (q->head != NULL || q->head_trying) {
        return;
    }
    struct waitq **pp = waitq_slot(o, q->resource, q->resource_len);
    if (*pp == q) {
        *pp = q->hnext;
    }
    if (o->wake != NULL) {
        wake_unwatch(o->wake, q->resource, q->resource_len);
    }
    free(q->resource);
    free(q);
}

/* Whether one more waiter may queue: NULL, or why not. A call counts
 * against its connection's --max-conn-waiters while it is queued and its
 * session is known (an HTTP connection answers one request at a time, so
 * it never has more than one waiter). */
static const char *waiter_refusal(const struct ops *o, const struct call *call)
{
    if (o->n_waiters >= o->cfg->max_waiters) {
        return "too many waiters in this daemon (--max-waiters)";
    }
    if (call->session != NULL &&
        call->session->waiters >= (size_t)o->cfg->max_conn_waiters) {
        return "too many waiters on this connection (--max-conn-waiters)";
    }
    return NULL;
}

static void waitq_push(struct ops *o, struct waitq *q, struct call *call)
{
    call->wnext = NULL;
    call->wprev = q->tail;
    if (q->tail != NULL) {
        q->tail->wnext = call;
    } else {
        q->head = call;
    }
    q->tail = call;
    call->waitq = q;
    call->waiting = true;
    if (call->session != NULL) {
        call->session->waiters++;
    }
    o->n_waiters++;
    METRIC_ADD(waiters, 1);
}

/* Takes a call out of its queue and stops its retry timer. */
static void waitq_unlink(struct ops *o, struct call *call)
{
    struct waitq *q = call->waitq;
    if (q == NULL) {
        return;
    }
    if (call->wprev != NULL) {
        call->wprev->wnext = call->wnext;
    } else {
        q->head = call->wnext;
    }
    if (call->wnext != NULL) {
        call->wnext->wprev = call->wprev;
    } else {
        q->tail = call->wprev;
    }
    call->wnext = call->wprev = NULL;
    call->waitq = NULL;
    call->waiting = false;
    if (call->retry_ev != NULL) {
        event_free(call->retry_ev);
        call->retry_ev = NULL;
    }
    if (call->session != NULL) {
        call->session->waiters--;
    }
    o->n_waiters--;
    METRIC_ADD(waiters, -1);
}

/* A queued call's timer: the head retries; anyone else has waited out
 * wait_ms behind the head and answers busy. */
static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct call *call = arg;
    struct ops *o = call->ops;
    struct waitq *q = call->waitq;
    if (q == NULL) {
        return;
    }
    if (q->head == call) {
        if (!q->head_trying) {
            waiter_try(o, call);
        }
        return;
    }
    METRIC_INC(acquire_busy);
    waiter_finish(o, call, ERR_BUSY,
                  "the resource is held by another owner "
                  "(wait_ms ran out in the queue)");
}

/* Arms a queued call's timer for delay_ms. */
static void waiter_arm(struct ops *o, struct call *call, uint64_t delay_ms)
{
    if (call->retry_ev == NULL) {
        call->retry_ev = evtimer_new(o->base, retry_cb, call);
        if (call->retry_ev == NULL) {
            log_error(NULL, "out of memory arming a retry timer");
            return;
        }
    }
    struct timeval tv = {(time_t)(delay_ms / 1000),
                         (suseconds_t)(delay_ms % 1000) * 1000};
    evtimer_add(call->retry_ev, &tv);
}

static uint64_t wait_left_ms(const struct call *call, uint64_t now)
{
    return call->wait_until_us > now ? (call->wait_until_us - now) / 1000u : 0;
}

/* Wakes the queue of a resource: its head tries now (a local release was
 * queued on every node before this, so the head's SET lands after it). */
static void waitq_wake(struct ops *o, const char *res, size_t len)
{
    struct waitq *q = waitq_find(o, res, len);
    if (q == NULL || q->head == NULL) {
        return;
    }
    if (q->head_trying) {
        q->woken = true;
        return;
    }
    waiter_try(o, q->head);
}

/* A release or completion was announced by a node (perhaps from another
 * daemon). */
static void wake_cb(const char *resource, size_t len, void *priv)
{
    waitq_wake(priv, resource, len);
}

/* Answers and removes a waiting call; the next in line starts trying. */
static void waiter_finish(struct ops *o, struct call *call, enum proto_err err,
                          const char *msg)
{
    struct waitq *q = call->waitq;
    bool was_head = q != NULL && q->head == call;
    waitq_unlink(o, call);
    reply_error(call, err, msg);
    if (q != NULL) {
        if (was_head && q->head != NULL && !q->head_trying) {
            waiter_try(o, q->head);
        } else {
            waitq_free_if_empty(o, q);
        }
    }
}

/* ---- acquire --------------------------------------------------------------
 */

static void acquire_done_cb(const struct cluster_result *res, void *priv);

static void acquire_start(struct ops *o, struct call *call)
{
    locks_new_token(call->token);
    call->attempt++;
    if (cluster_acquire(o->cluster, call->req.resource, call->req.resource_len,
                        call->token, call->req.ttl_ms, call->req.fence,
                        acquire_done_cb, call) != 0) {
        log_error(NULL, "acquire: out of memory");
        if (call->waitq != NULL) {
            call->waitq->head_trying = false;
            waiter_finish(o, call, ERR_INTERNAL, err_message(ERR_INTERNAL));
        } else {
            reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
        }
    }
}

/* The head of a queue tries (again). */
static void waiter_try(struct ops *o, struct call *call)
{
    struct waitq *q = call->waitq;
    if (call->retry_ev != NULL) {
        evtimer_del(call->retry_ev);
    }
    q->head_trying = true;
    q->woken = false;
    acquire_start(o, call);
}

/* When a renewing lock is given up: early enough that the lost event
 * reaches its owner before the validity ends, with room for one more node
 * round trip and the event's own delivery. */
static uint64_t lock_give_up_us(const struct ops *o, const struct lock *l)
{
    if (!l->renew) {
        return l->valid_until_us;
    }
    uint64_t guard = (uint64_t)o->cfg->node_timeout_ms * 1000u + 20000u;
    uint64_t quarter = (uint64_t)l->ttl_ms * 1000u / 4u;
    if (guard > quarter) {
        guard = quarter;
    }
    return l->valid_until_us > guard ? l->valid_until_us - guard : 0;
}

static void lock_schedule(struct ops *o, struct lock *l, uint64_t now)
{
    uint64_t due = lock_give_up_us(o, l);
    if (l->renew) {
        /* About every ttl/3, with up to 10% jitter so that locks taken
         * together do not renew in the same tick. */
        uint64_t period = (uint64_t)l->ttl_ms * 1000u / 3u;
        uint64_t jitter = period / 10u;
        uint64_t j = jitter ? (uint64_t)random() % jitter : 0;
        l->next_renew_us = now + period - j;
        if (l->next_renew_us < due) {
            due = l->next_renew_us;
        }
    }
    locks_set_deadline(o->locks, l, due);
    lock_timer_rearm(o);
}

/* The --max-locks or --max-conn-locks refusal for one more lock, or NULL. */
static const char *lock_limit_refusal(const struct ops *o,
                                      const struct call *call)
{
    if (locks_count(o->locks) >= (size_t)o->cfg->max_locks) {
        return "too many locks held by this daemon (--max-locks)";
    }
    if (call->session != NULL &&
        call->session->count >= (size_t)o->cfg->max_conn_locks) {
        return "too many locks held by this connection (--max-conn-locks)";
    }
    return NULL;
}

/* Takes a won lock into the table and answers. Returns whether it is held:
 * false when it was given back on the nodes (the client left, shutdown,
 * a limit reached meanwhile, out of memory). */
static bool acquire_won(struct ops *o, struct call *call,
                        const struct cluster_result *res)
{
    uint64_t now = cluster_now_us();
    metrics_observe_acquire(now - call->start_us);
    if (call->client == NULL || o->shutting_down) {
        /* Nobody is left to hold it, or everything is being let go. */
        cluster_release(o->cluster, call->req.resource, call->req.resource_len,
                        call->token, NULL, NULL);
        METRIC_INC(session_releases);
        reply_error(call, ERR_SHUTTING_DOWN,
                    call->client == NULL ? "client closed"
                                         : err_message(ERR_SHUTTING_DOWN));
        return false;
    }
    /* op_acquire checked the limits too, but every acquisition then in
     * flight (pipelined, or waiting) passed the same check: the one that
     * would go over gives back what it won. */
    const char *over = lock_limit_refusal(o, call);
    if (over != NULL) {
        cluster_release(o->cluster, call->req.resource, call->req.resource_len,
                        call->token, NULL, NULL);
        METRIC_INC(acquire_error);
        reply_error(call, ERR_LIMIT, over);
        return false;
    }
    struct lock *l = locks_add(o->locks, call->token, call->req.resource,
                               call->req.resource_len, call->session,
                               call->req.ttl_ms, res->valid_until_us);
    if (l == NULL) {
        log_error(NULL, "acquire: out of memory adding a lock");
        cluster_release(o->cluster, call->req.resource, call->req.resource_len,
                        call->token, NULL, NULL);
        reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
        return false;
    }
    METRIC_INC(acquire_ok);
    METRIC_ADD(locks_held, 1);
    if (call->req.renew && call->session != NULL) {
        l->renew = true;
        if (call->req.renew_max_ms > 0) {
            l->renew_until_us = now + call->req.renew_max_ms * 1000u;
        }
    }
    lock_schedule(o, l, now);
    reply_ok(call, l->token, l->resource, l->resource_len, res->validity_ms,
             call->req.fence, res->fence);
    return true;
}

static void acquire_done_cb(const struct cluster_result *res, void *priv)
{
    struct call *call = priv;
    struct ops *o = call->ops;
    struct waitq *q = call->waitq;
    if (q != NULL) {
        q->head_trying = false;
    }

    if (res->err == ERR_NONE) {
        if (q != NULL) {
            waitq_unlink(o, call);
            q->woken = false;
            bool held = acquire_won(o, call, res);
            /* The next in line waits for this lock's release (a local wake)
             * or its expiry, whichever comes first, within its wait; at
             * once if it was given straight back. */
            if (q->head != NULL) {
                uint64_t now = cluster_now_us();
                uint64_t left = wait_left_ms(q->head, now);
                uint64_t d = held ? (uint64_t)res->validity_ms + 1 : 0;
                waiter_arm(o, q->head, d < left ? d : left);
            } else {
                waitq_free_if_empty(o, q);
            }
            return;
        }
        acquire_won(o, call, res);
        return;
    }

    uint64_t now = cluster_now_us();
    bool can_wait = (res->err == ERR_BUSY || res->err == ERR_NO_QUORUM) &&
                    call->wait_until_us > now && call->client != NULL &&
                    !o->shutting_down;
    if (can_wait) {
        bool fresh = false;
        if (q == NULL) {
            /* Refused before waitq_get(), which would leave an empty queue
             * (and its wake-up watch) behind. */
            const char *refusal = waiter_refusal(o, call);
            if (refusal != NULL) {
                METRIC_INC(acquire_error);
                reply_error(call, ERR_LIMIT, refusal);
                return;
            }
            fresh = waitq_find(o, call->req.resource, call->req.resource_len) ==
                    NULL;
            q = waitq_get(o, call->req.resource, call->req.resource_len);
            if (q == NULL) {
                log_error(NULL, "acquire: out of memory queueing a waiter");
                METRIC_INC(acquire_error);
                reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
                return;
            }
            waitq_push(o, q, call);
            if (q->head != call) {
                /* Someone queued meanwhile is ahead: wait our turn, at most
                 * until our own wait runs out. */
                waiter_arm(o, call, wait_left_ms(call, now));
                return;
            }
        }
        uint64_t left = wait_left_ms(call, now);
        /* Right after subscribing, a release may have slipped by before
         * the subscription: retry once on the plain back-off. So does
         * every retry when no wake-up can come (rediss:// nodes only). */
        bool polls = fresh || !wake_possible(o->wake);
        uint32_t delay =
            q->woken ? 0
                     : redlock_retry_delay_ms(call->attempt,
                                              polls ? -1 : res->pttl_min, left,
                                              (double)random() / RAND_MAX);
        q->woken = false;
        if (left > 0) {
            waiter_arm(o, call, delay);
            return;
        }
    }

    switch (res->err) {
    case ERR_BUSY:
        METRIC_INC(acquire_busy);
        break;
    case ERR_DONE:
        METRIC_INC(acquire_done);
        break;
    case ERR_NO_QUORUM:
        METRIC_INC(acquire_no_quorum);
        break;
    default:
        METRIC_INC(acquire_error);
        break;
    }
    if (q != NULL) {
        waiter_finish(o, call, res->err, result_message(res));
    } else {
        reply_error(call, res->err, result_message(res));
    }
}

/* ---- release, extend, complete ------------------------------------------ */

/* A lock leaves the table: the next waiter for its resource may go. The
 * release (if any) was already queued on every node. */
static void lock_drop(struct ops *o, struct lock *l)
{
    char res[PROTO_RESOURCE_MAX + 1];
    size_t len = l->resource_len;
    memcpy(res, l->resource, len);
    locks_remove(o->locks, l);
    METRIC_ADD(locks_held, -1);
    waitq_wake(o, res, len);
}

static void lock_tell_lost(const struct lock *l);

/* l leaves the table through a call from another connection (its token
 * passed on): released, completed, or proved gone by an extend. Its owner
 * would learn of it at its next renewal at best, so it is told now. Not
 * counted as lost (redlockd_locks_lost_total is for locks that could not
 * be kept): someone holding the token let it go. */
static void lock_drop_by(struct ops *o, struct lock *l, const struct call *call,
                         const char *why)
{
    if (l->owner != NULL && call->session != l->owner) {
        char tag[9];
        log_debug(NULL, "lock %s on '%.64s': %s", log_token_hash(l->token, tag),
                  l->resource, why);
        lock_tell_lost(l);
    }
    lock_drop(o, l);
}

/* Resolves which resource a token refers to: the request's, else the
 * table's. Returns NULL when neither knows. */
static const char *call_resource(struct call *call, struct lock *l, size_t *len)
{
    if (call->req.resource_len > 0) {
        *len = call->req.resource_len;
        return call->req.resource;
    }
    if (l != NULL) {
        *len = l->resource_len;
        return l->resource;
    }
    return NULL;
}

/* Whether a call addressed the table's lock l (found by its token): it
 * names no resource or l's own. A token with another resource names a lock
 * that is not l, so its result says nothing about l. */
static bool call_addresses(const struct call *call, const struct lock *l)
{
    if (l == NULL) {
        return false;
    }
    return call->req.resource_len == 0 ||
           (call->req.resource_len == l->resource_len &&
            memcmp(call->req.resource, l->resource, l->resource_len) == 0);
}

/* The table's lock a call addressed, or NULL (unknown token, or a token
 * with another resource). */
static struct lock *call_lock(struct ops *o, const struct call *call)
{
    struct lock *l = locks_find(o->locks, call->req.lock);
    return call_addresses(call, l) ? l : NULL;
}

static void release_done_cb(const struct cluster_result *res, void *priv)
{
    struct call *call = priv;
    switch (res->err) {
    case ERR_NONE:
        METRIC_INC(release_ok);
        reply_ok(call, NULL, NULL, 0, 0, false, 0);
        return;
    case ERR_NOT_HELD:
        METRIC_INC(release_not_held);
        break;
    default:
        METRIC_INC(release_error);
        break;
    }
    reply_error(call, res->err, err_message(res->err));
}

static void op_release(struct ops *o, struct call *call)
{
    struct lock *l = call_lock(o, call);
    size_t len = 0;
    const char *res = call_resource(call, l, &len);
    if (res == NULL) {
        METRIC_INC(release_not_held);
        reply_error(call, ERR_NOT_HELD,
                    "unknown token (pass \"resource\" to release a "
                    "lock taken through another daemon)");
        return;
    }
    if (cluster_release(o->cluster, res, len, call->req.lock, release_done_cb,
                        call) != 0) {
        reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
        return;
    }
    if (l != NULL) {
        lock_drop_by(o, l, call, "released through another connection");
    }
}

/* An extend to ttl_ms sent at start_us failed, but it may have reached some
 * nodes, which then let the key go at start + ttl: a shorter ttl bounds the
 * lock's validity from then on. A renewing lock renews at once (with its own
 * ttl), or is given up, with a lost event, before that bound. */
static void extend_failed_ttl(struct ops *o, struct lock *l, uint32_t ttl_ms,
                              uint64_t start_us)
{
    int64_t v = redlock_validity_ms(ttl_ms, o->cfg->drift_factor, 0);
    uint64_t bound = start_us + (uint64_t)(v > 0 ? v : 0) * 1000u;
    if (bound >= l->valid_until_us) {
        return;
    }
    l->valid_until_us = bound;
    uint64_t now = cluster_now_us();
    uint64_t due = lock_give_up_us(o, l);
    if (l->renew && !l->renewing && !l->completing) {
        l->next_renew_us = now;
        due = now;
    }
    locks_set_deadline(o->locks, l, due);
    lock_timer_rearm(o);
}

static void extend_done_cb(const struct cluster_result *res, void *priv)
{
    struct call *call = priv;
    struct ops *o = call->ops;
    struct lock *l = call_lock(o, call);
    if (res->err == ERR_NONE) {
        METRIC_INC(extend_ok);
        size_t len = 0;
        const char *r = call_resource(call, l, &len);
        if (l != NULL) {
            l->valid_until_us = res->valid_until_us;
            if (call->req.has_ttl) {
                l->ttl_ms = call->req.ttl_ms;
            }
            lock_schedule(o, l, cluster_now_us());
        }
        reply_ok(call, call->req.lock, r, len, res->validity_ms, false, 0);
        return;
    }
    if (res->err == ERR_NOT_HELD) {
        METRIC_INC(extend_not_held);
        if (l != NULL) {
            lock_drop_by(o, l, call, "no longer held by a quorum");
        }
    } else {
        METRIC_INC(extend_error);
        if (l != NULL && call->req.has_ttl) {
            extend_failed_ttl(o, l, call->req.ttl_ms, res->start_us);
        }
    }
    reply_error(call, res->err, result_message(res));
}

static void op_extend(struct ops *o, struct call *call)
{
    struct lock *l = call_lock(o, call);
    size_t len = 0;
    const char *res = call_resource(call, l, &len);
    if (res == NULL) {
        METRIC_INC(extend_not_held);
        reply_error(call, ERR_NOT_HELD,
                    "unknown token (pass \"resource\" to extend a "
                    "lock taken through another daemon)");
        return;
    }
    uint32_t ttl = call->req.has_ttl ? call->req.ttl_ms
                   : l != NULL       ? l->ttl_ms
                                     : PROTO_TTL_DEFAULT;
    if (cluster_extend(o->cluster, res, len, call->req.lock, ttl,
                       extend_done_cb, call) != 0) {
        reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
    }
}

/* A complete of l ended without dropping it: once no other is in flight,
 * l is held as far as we know, so its renewal goes on, at once if one fell
 * due meanwhile, and a lock whose validity ran short is given up (with a
 * lost event) by the timer. */
static void lock_complete_ended(struct ops *o, struct lock *l)
{
    if (--l->completing > 0) {
        return;
    }
    uint64_t due = lock_give_up_us(o, l);
    if (l->renew && !l->renewing && l->next_renew_us < due) {
        due = l->next_renew_us;
    }
    locks_set_deadline(o->locks, l, due);
    lock_timer_rearm(o);
}

static void complete_done_cb(const struct cluster_result *res, void *priv)
{
    struct call *call = priv;
    struct ops *o = call->ops;
    /* The token finds the lock op_complete counted, or none (dropped). */
    struct lock *l = call_lock(o, call);
    if (l != NULL) {
        if (res->err == ERR_NONE || res->err == ERR_NOT_HELD) {
            lock_drop_by(o, l, call,
                         res->err == ERR_NONE
                             ? "completed through another connection"
                             : "no longer held by a quorum");
        } else {
            lock_complete_ended(o, l);
        }
    }
    if (res->err == ERR_NONE) {
        METRIC_INC(complete_ok);
        reply_ok(call, NULL, NULL, 0, 0, false, 0);
        return;
    }
    if (res->err == ERR_NOT_HELD) {
        METRIC_INC(complete_not_held);
    } else {
        METRIC_INC(complete_error);
    }
    reply_error(call, res->err, err_message(res->err));
}

static void op_complete(struct ops *o, struct call *call)
{
    struct lock *l = call_lock(o, call);
    size_t len = 0;
    const char *res = call_resource(call, l, &len);
    if (res == NULL) {
        METRIC_INC(complete_not_held);
        reply_error(call, ERR_NOT_HELD,
                    "unknown token (pass \"resource\" to complete "
                    "a lock taken through another daemon)");
        return;
    }
    if (l != NULL) {
        /* No renewal may race the done mark; lock_complete_ended()
         * restarts renewal if the complete fails. */
        l->completing++;
    }
    if (cluster_complete(o->cluster, res, len, call->req.lock,
                         call->req.keep_ms, complete_done_cb, call) != 0) {
        if (l != NULL) {
            lock_complete_ended(o, l);
        }
        reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
    }
}

/* ---- renewal and expiry ---------------------------------------------------
 */

/* Logs a lost lock, at most LOST_LOG_PER_S lines a second: a quorum lost
 * under 100,000 locks must not become 100,000 lines. The rest are counted
 * and summed up in the next second's first line (and in the metric). */
#define LOST_LOG_PER_S 20

static void log_lost(const struct lock *l, const char *why)
{
    static uint64_t second;
    static unsigned logged, suppressed;
    uint64_t now_s = cluster_now_us() / 1000000u;
    if (now_s != second) {
        if (suppressed > 0) {
            log_warn(NULL,
                     "%u more lock(s) lost in the previous second "
                     "(not logged one by one)",
                     suppressed);
        }
        second = now_s;
        logged = suppressed = 0;
    }
    if (logged >= LOST_LOG_PER_S) {
        suppressed++;
        return;
    }
    logged++;
    char tag[9];
    log_warn(NULL, "lock %s on '%.64s' lost: %s", log_token_hash(l->token, tag),
             l->resource, why);
}

/* Sends l's owner, if it is an NDJSON session, the lost event. */
static void lock_tell_lost(const struct lock *l)
{
    if (l->owner != NULL && l->owner->client != NULL) {
        char buf[PROTO_RESPONSE_MAX];
        size_t n = proto_encode_event("lost", l->token, l->resource,
                                      l->resource_len, buf, sizeof(buf));
        if (n > 0) {
            server_send_event(l->owner->client, buf, n);
        }
    }
}

static void lock_lost(struct ops *o, struct lock *l, const char *why)
{
    log_lost(l, why);
    METRIC_INC(locks_lost);
    lock_tell_lost(l);
    /* Whatever nodes still hold it let go now rather than at expiry. */
    cluster_release(o->cluster, l->resource, l->resource_len, l->token, NULL,
                    NULL);
    lock_drop(o, l);
}

static void renew_done_cb(const struct cluster_result *res, void *priv)
{
    struct renew_ctx *ctx = priv;
    struct ops *o = ctx->ops;
    struct lock *l = locks_find(o->locks, ctx->token);
    free(ctx);
    if (o->renew_inflight-- >= RENEW_INFLIGHT_MAX) {
        /* Renewals were held back for want of a slot: go on with them. */
        lock_timer_kick(o);
    }
    if (l == NULL) {
        return; /* released meanwhile */
    }
    l->renewing = false;
    uint64_t now = cluster_now_us();
    if (l->completing && res->err != ERR_NONE) {
        /* A complete is in flight and its answer decides: a renewal that
         * met the done mark says nothing. lock_complete_ended() retries it
         * if the complete fails. */
        METRIC_INC(renew_failed);
        return;
    }
    if (res->err == ERR_NONE) {
        METRIC_INC(renew_ok);
        l->valid_until_us = res->valid_until_us;
        lock_schedule(o, l, now);
        return;
    }
    METRIC_INC(renew_failed);
    uint64_t give_up = lock_give_up_us(o, l);
    if (res->err == ERR_NOT_HELD || now >= give_up) {
        lock_lost(o, l,
                  res->err == ERR_NOT_HELD ? "no longer held by a quorum"
                                           : "renewal failed");
        return;
    }
    /* Still valid: try again soon, well before the validity ends. */
    uint64_t left = give_up - now;
    uint64_t again = left / 4 < 10000 ? left / 4 : 10000;
    l->next_renew_us = now + again;
    locks_set_deadline(o->locks, l, l->next_renew_us);
    lock_timer_rearm(o);
}

static void lock_renew(struct ops *o, struct lock *l)
{
    struct renew_ctx *ctx = malloc(sizeof(*ctx));
    if (ctx == NULL) {
        log_error(NULL, "renew: out of memory");
        locks_set_deadline(o->locks, l, l->valid_until_us);
        return;
    }
    ctx->ops = o;
    memcpy(ctx->token, l->token, sizeof(ctx->token));
    l->renewing = true;
    o->renew_inflight++;
    /* Until the renewal answers, the next event is giving up on it. */
    locks_set_deadline(o->locks, l, lock_give_up_us(o, l));
    if (cluster_extend(o->cluster, l->resource, l->resource_len, l->token,
                       l->ttl_ms, renew_done_cb, ctx) != 0) {
        free(ctx);
        l->renewing = false;
        o->renew_inflight--;
    }
}

static void lock_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ops *o = arg;
    o->lock_timer_due = 0;
    uint64_t now = cluster_now_us();
    bool held_back = false;
    /* Bounded per tick so a burst of due locks cannot starve clients. */
    for (int budget = 4096; budget > 0; budget--) {
        uint64_t due;
        struct lock *l = locks_peek_due(o->locks, &due);
        if (l == NULL || due > now) {
            break;
        }
        if (l->completing) {
            /* Completing: neither renew nor give up until it answers
             * (within the node timeout); look again then. */
            locks_set_deadline(o->locks, l,
                               now + (uint64_t)o->cfg->node_timeout_ms * 1000u);
            continue;
        }
        if (now >= lock_give_up_us(o, l)) {
            if (l->renew && !l->renewing) {
                lock_lost(o, l,
                          "no renewal succeeded before the validity "
                          "ran short");
            } else if (l->renew) {
                lock_lost(o, l,
                          "renewal did not answer before the validity "
                          "ran short");
            } else {
                /* Expired by design (no renewal): forget it quietly. */
                lock_drop(o, l);
            }
            continue;
        }
        if (l->renew && l->renew_until_us != 0 && now >= l->renew_until_us) {
            l->renew = false; /* renew_max_ms reached: expire normally */
            locks_set_deadline(o->locks, l, l->valid_until_us);
            continue;
        }
        if (l->renew && !l->renewing && now >= l->next_renew_us) {
            if (o->renew_inflight >= RENEW_INFLIGHT_MAX) {
                /* Enough renewals in flight: a burst (100k locks taken
                 * together) is metered out instead of queueing past the
                 * node timeout. There is slack: renewals start at ttl/3. */
                held_back = true;
                break;
            }
            lock_renew(o, l);
            continue;
        }
        locks_set_deadline(o->locks, l, lock_give_up_us(o, l));
    }
    if (held_back) {
        /* A finished renewal kicks the timer; this is the fallback. */
        struct timeval tv = {0, 5000};
        evtimer_add(o->lock_timer, &tv);
        o->lock_timer_due = now + 5000;
        return;
    }
    lock_timer_rearm(o);
}

/* Runs the lock timer again at once (a renewal slot came free). */
static void lock_timer_kick(struct ops *o)
{
    struct timeval now = {0, 0};
    evtimer_add(o->lock_timer, &now);
    o->lock_timer_due = 1;
}

static void lock_timer_rearm(struct ops *o)
{
    uint64_t due;
    if (locks_peek_due(o->locks, &due) == NULL) {
        return;
    }
    if (o->lock_timer_due != 0 && o->lock_timer_due <= due &&
        evtimer_pending(o->lock_timer, NULL)) {
        return;
    }
    uint64_t now = cluster_now_us();
    uint64_t wait = due > now ? due - now : 0;
    struct timeval tv = {(time_t)(wait / 1000000u),
                         (suseconds_t)(wait % 1000000u)};
    evtimer_add(o->lock_timer, &tv);
    o->lock_timer_due = due;
}

/* ---- entry points ---------------------------------------------------------
 */

static void op_acquire(struct ops *o, struct call *call)
{
    if (call->req.renew && call->session == NULL) {
        reply_error(call, ERR_BAD_REQUEST,
                    "renew: not available over HTTP; use extend or an NDJSON "
                    "session");
        return;
    }
    const char *over = lock_limit_refusal(o, call);
    if (over != NULL) {
        METRIC_INC(acquire_error);
        reply_error(call, ERR_LIMIT, over);
        return;
    }
    call->attempt = 0;
    call->wait_until_us = call->start_us + (uint64_t)call->req.wait_ms * 1000u;
    struct waitq *q = waitq_find(o, call->req.resource, call->req.resource_len);
    if (q != NULL && q->head != NULL && call->req.wait_ms > 0) {
        /* Others are already waiting: first come, first served. */
        const char *refusal = waiter_refusal(o, call);
        if (refusal != NULL) {
            METRIC_INC(acquire_error);
            reply_error(call, ERR_LIMIT, refusal);
            return;
        }
        waitq_push(o, q, call);
        waiter_arm(o, call, call->req.wait_ms);
        return;
    }
    acquire_start(o, call);
}

void ops_submit(struct ops *o, struct call *call)
{
    call->ops = o;
    if (o->shutting_down && call->req.op != OP_PING) {
        reply_error(call, ERR_SHUTTING_DOWN, err_message(ERR_SHUTTING_DOWN));
        return;
    }
    switch (call->req.op) {
    case OP_PING:
        reply_ok(call, NULL, NULL, 0, 0, false, 0);
        return;
    case OP_ACQUIRE:
        op_acquire(o, call);
        return;
    case OP_RELEASE:
        op_release(o, call);
        return;
    case OP_EXTEND:
        op_extend(o, call);
        return;
    case OP_COMPLETE:
        op_complete(o, call);
        return;
    case OP_HEALTH:
    case OP_METRICS:
    case OP_NONE:
        break;
    }
    log_error(NULL, "ops_submit: op %d is not an ops operation",
              (int)call->req.op);
    reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
}

void ops_call_abandoned(struct ops *o, struct call *call)
{
    if (call->waitq != NULL && call->session != NULL) {
        /* The session dies with its connection, possibly before the call
         * leaves the queue (a head whose attempt is in flight). */
        call->session->waiters--;
    }
    call->client = NULL;
    call->session = NULL;
    if (call->waitq == NULL) {
        return; /* in flight: acquire_won releases what it wins */
    }
    struct waitq *q = call->waitq;
    if (q->head == call && q->head_trying) {
        return; /* its attempt answers later */
    }
    waiter_finish(o, call, ERR_SHUTTING_DOWN, "client closed");
}

void ops_client_closed(struct ops *o, struct lock_owner *session)
{
    while (session->head != NULL) {
        struct lock *l = session->head;
        char tag[9];
        log_debug(NULL, "session closed: releasing %s",
                  log_token_hash(l->token, tag));
        cluster_release(o->cluster, l->resource, l->resource_len, l->token,
                        NULL, NULL);
        METRIC_INC(session_releases);
        lock_drop(o, l);
    }
}

void ops_shutdown(struct ops *o)
{
    if (o->shutting_down) {
        return;
    }
    o->shutting_down = true;
    /* Waiters first, so releases below do not hand locks to them. */
    for (size_t b = 0; b < o->wq_n_buckets; b++) {
        struct waitq *q = o->wq_buckets[b];
        while (q != NULL) {
            struct waitq *next = q->hnext;
            struct call *c = q->head;
            while (c != NULL) {
                struct call *cn = c->wnext;
                if (!(c == q->head && q->head_trying)) {
                    waitq_unlink(o, c);
                    reply_error(c, ERR_SHUTTING_DOWN,
                                err_message(ERR_SHUTTING_DOWN));
                }
                c = cn;
            }
            waitq_free_if_empty(o, q);
            q = next;
        }
    }
    size_t n = locks_count(o->locks);
    log_info(NULL, "shutdown: releasing %zu lock(s) on all nodes", n);
    uint64_t due;
    struct lock *l;
    while ((l = locks_peek_due(o->locks, &due)) != NULL) {
        cluster_release(o->cluster, l->resource, l->resource_len, l->token,
                        NULL, NULL);
        locks_remove(o->locks, l);
        METRIC_ADD(locks_held, -1);
    }
    if (locks_count(o->locks) > 0) {
        log_error(NULL, "shutdown: %zu lock(s) were not scheduled",
                  locks_count(o->locks));
    }
}

bool ops_idle(const struct ops *o)
{
    return cluster_inflight(o->cluster) == 0;
}

bool ops_shutting_down(const struct ops *o)
{
    return o->shutting_down;
}

char *ops_health_json(struct ops *o, const char *id, size_t id_len,
                      bool *quorum_ok, size_t *len)
{
    int n = cluster_size(o->cluster);
    struct proto_node_health nodes[REDLOCK_MAX_NODES];
    for (int i = 0; i < n; i++) {
        struct node *nd = cluster_node(o->cluster, i);
        nodes[i].addr = node_display(nd);
        nodes[i].up = node_is_up(nd);
        nodes[i].state = node_state_name(node_get_state(nd));
        const char *e = node_last_error(nd);
        nodes[i].last_error = e[0] ? e : NULL;
        nodes[i].rtt_ms = node_rtt_ms(nd);
        nodes[i].quarantined = cluster_node_quarantined(o->cluster, i);
        nodes[i].tls = node_tls_mode(nd);
    }
    int usable = 0;
    for (int i = 0; i < n; i++) {
        usable += nodes[i].up && !nodes[i].quarantined;
    }
    *quorum_ok = usable >= cluster_quorum(o->cluster);
    return proto_encode_health(id, id_len, *quorum_ok,
                               cluster_quorum(o->cluster), nodes, n, len);
}

char *ops_metrics_text(struct ops *o, size_t *len)
{
    int n = cluster_size(o->cluster);
    struct metrics_node nodes[REDLOCK_MAX_NODES];
    for (int i = 0; i < n; i++) {
        struct node *nd = cluster_node(o->cluster, i);
        nodes[i].addr = node_display(nd);
        nodes[i].up = node_is_up(nd) ? 1 : 0;
        nodes[i].reconnects = node_reconnects(nd);
    }
    return metrics_render(nodes, n, len);
}

struct ops *ops_create(struct event_base *base, const struct config *cfg)
{
    struct ops *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        return NULL;
    }
    o->base = base;
    o->cfg = cfg;
    o->wq_n_buckets = 1024;
    o->wq_buckets = calloc(o->wq_n_buckets, sizeof(*o->wq_buckets));
    o->locks = locks_create();
    o->lock_timer = evtimer_new(base, lock_timer_cb, o);
    if (o->wq_buckets == NULL || o->locks == NULL || o->lock_timer == NULL) {
        ops_destroy(o);
        return NULL;
    }
    o->cluster = cluster_create(base, cfg, NULL, NULL);
    o->wake = wake_create(base, cfg, wake_cb, o);
    if (o->cluster == NULL || o->wake == NULL) {
        ops_destroy(o);
        return NULL;
    }
    return o;
}

void ops_destroy(struct ops *o)
{
    if (o == NULL) {
        return;
    }
    wake_destroy(o->wake);
    if (o->cluster != NULL) {
        cluster_destroy(o->cluster);
    }
    if (o->lock_timer != NULL) {
        event_free(o->lock_timer);
    }
    locks_destroy(o->locks);
    if (o->wq_buckets != NULL) {
        for (size_t b = 0; b < o->wq_n_buckets; b++) {
            struct waitq *q = o->wq_buckets[b];
            while (q != NULL) {
                struct waitq *next = q->hnext;
                free(q->resource);
                free(q);
                q = next;
            }
        }
        free(o->wq_buckets);
    }
    free(o);
}
