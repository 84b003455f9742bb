/* ops.c: what each operation does, independent of framing.
 *
 * acquire  -> cluster_acquire -> lock table (+ session, + renewal)
 *          -> busy with wait_ms: the resource's wait queue, FIFO; only the
 *             queue's head tries, on a jittered back-off no shorter than the
 *             holder's PTTL; a local release wakes the head at once
 * release  -> cluster_release; on proof (ok or not_held) drop from the
 *             table and wake the next waiter; renewal pauses meanwhile
 * extend   -> cluster_extend, new validity into the table
 * complete -> cluster_complete ("done:<token>"), wake waiters (they get done);
 *             renewal pauses until the answer and resumes if it failed;
 *             the give-up (and its lost event) never pauses
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
#include "inspect.h"
#include "locks.h"
#include "log.h"
#include "metrics.h"
#include "node.h"
#include "redlock.h"
#include "semaphore.h"
#include "wake.h"

/* The callers waiting for one resource, first come, first served. Owned by
 * the ops hash; freed when it empties. */
struct waitq {
    char *resource; /* owned */
    size_t resource_len;
    struct call *head, *tail; /* borrowed calls, linked by wnext/wprev */
    bool head_trying;         /* the head has an acquisition in flight */
    bool woken;               /* a release came while the head was trying */
    size_t n_waiting;         /* calls in the queue, for listings */
    struct waitq *hnext;      /* hash chain */
};

struct ops {
    struct event_base *base;  /* borrowed */
    const struct config *cfg; /* borrowed */
    struct cluster *cluster;  /* owned */
    struct lock_table *locks; /* owned */
    struct wake *wake;        /* owned: pub/sub wake-ups from elsewhere */
    struct sem_seen *sem;     /* owned: permits asked per semaphore */
    struct event *lock_timer; /* owned: next lock deadline */
    uint64_t lock_timer_due;
    struct waitq **wq_buckets; /* owned */
    size_t wq_n_buckets;
    int n_waiters;
    int renew_inflight;   /* renewals sent, not yet answered */
    int inspect_inflight; /* inspections sent, not yet answered */
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

/* Renewals in flight at once for the locks of one connection: a client
 * with many short renewing locks must not take every slot above while
 * others' renewals fall due. */
#define RENEW_CONN_INFLIGHT_MAX 256

/* A renewal held back for want of a slot looks again this much later. */
#define RENEW_HOLD_BACK_US 5000
/* The farthest ahead the lock timer looks for renewals that may go out
 * early (redlock_renew_early_us never exceeds it). */
#define RENEW_EARLY_MAX_US 5000u

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
    char extra[32];
    const char *r;
    size_t rl;
    int k;
    if (resource != NULL && sem_parse(resource, resource_len, &r, &rl, &k) &&
        k >= 0) {
        /* A semaphore's slot: its resource, and which permit it is. */
        resource = r;
        resource_len = rl;
        rsp.extra = extra;
        rsp.extra_len =
            (size_t)snprintf(extra, sizeof(extra), "\"permit\":%d", k);
    }
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
    q->n_waiting++;
    call->waitq = q;
    call->waiting = true;
    call->waited = true;
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
    q->n_waiting--;
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

/* Arms a queued call's timer for delay_ms. Without a timer the call could
 * never be answered, and as the head it would stall its queue: it fails
 * with internal, and the next in line goes on. */
static void waiter_arm(struct ops *o, struct call *call, uint64_t delay_ms)
{
    if (call->retry_ev == NULL) {
        call->retry_ev = evtimer_new(o->base, retry_cb, call);
        if (call->retry_ev == NULL) {
            log_error(NULL, "out of memory arming a retry timer");
            METRIC_INC(acquire_error);
            waiter_finish(o, call, ERR_INTERNAL, err_message(ERR_INTERNAL));
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
    char qname[SEM_NAME_MAX + 1];
    const char *r;
    size_t rl;
    int k;
    if (sem_parse(res, len, &r, &rl, &k) && k >= 0) {
        /* A slot came free: any waiter of its semaphore may take it. */
        len = sem_queue_name(r, rl, qname);
        res = qname;
    }
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

/* A call that queued is answered: the time it spent waiting, apart from its
 * acquisition rounds, goes to redlockd_wait_seconds. */
static void observe_wait(const struct call *call, uint64_t now)
{
    if (!call->waited) {
        return;
    }
    uint64_t total = now > call->start_us ? now - call->start_us : 0;
    metrics_observe_wait(total > call->round_us ? total - call->round_us : 0);
}

/* Answers and removes a waiting call; the next in line starts trying. */
static void waiter_finish(struct ops *o, struct call *call, enum proto_err err,
                          const char *msg)
{
    struct waitq *q = call->waitq;
    bool was_head = q != NULL && q->head == call;
    waitq_unlink(o, call);
    observe_wait(call, cluster_now_us());
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

/* A semaphore call tries its slots in turn, each round from a random one:
 * req.resource becomes the slot's name (semaphore.h). */
static void sem_pick_slot(struct call *call)
{
    char tmp[SEM_NAME_MAX + 1];
    const char *r = call->req.resource;
    size_t rl = call->req.resource_len;
    int k;
    (void)sem_parse(r, rl, &r, &rl, &k);
    memcpy(tmp, r, rl); /* the name is rewritten in place */
    r = tmp;
    if (call->slots_tried == 0) {
        call->slot0 = (unsigned)random() % call->req.permits;
    }
    unsigned slot = (call->slot0 + call->slots_tried) % call->req.permits;
    call->req.resource_len = sem_slot_name(r, rl, slot, call->req.resource);
}

/* The name of a call's wait queue: its resource, or for a semaphore the
 * queue all its slots share. */
static const char *call_queue(const struct call *call, char *buf, size_t *len)
{
    const char *r;
    size_t rl;
    int k;
    if (sem_parse(call->req.resource, call->req.resource_len, &r, &rl, &k)) {
        *len = sem_queue_name(r, rl, buf);
        return buf;
    }
    *len = call->req.resource_len;
    return call->req.resource;
}

static void acquire_start(struct ops *o, struct call *call)
{
    if (call->req.permits > 0) {
        sem_pick_slot(call);
    }
    locks_new_token(call->token);
    call->attempt++;
    call->round_start_us = cluster_now_us();
    if (cluster_acquire(o->cluster, call->req.resource, call->req.resource_len,
                        call->token, call->req.ttl_ms, call->req.fence,
                        call->waitq != NULL, acquire_done_cb, call) != 0) {
        log_error(NULL, "acquire: out of memory");
        if (call->waitq != NULL) {
            call->waitq->head_trying = false;
            waiter_finish(o, call, ERR_INTERNAL, err_message(ERR_INTERNAL));
        } else {
            reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
        }
    }
}

/* The head of a queue tries (again); once shutting down it is answered
 * instead (a release or a wake-up during teardown must start nothing). */
static void waiter_try(struct ops *o, struct call *call)
{
    struct waitq *q = call->waitq;
    if (o->shutting_down) {
        waiter_finish(o, call, ERR_SHUTTING_DOWN,
                      err_message(ERR_SHUTTING_DOWN));
        return;
    }
    if (call->retry_ev != NULL) {
        evtimer_del(call->retry_ev);
    }
    q->head_trying = true;
    q->woken = false;
    acquire_start(o, call);
}

/* The renewal state of l, for redlock_renew_decide(). */
static struct redlock_renew_state lock_renew_state(const struct ops *o,
                                                   const struct lock *l)
{
    struct redlock_renew_state st = {
        .valid_until_us = l->valid_until_us,
        .ttl_ms = l->ttl_ms,
        .node_timeout_ms = (uint32_t)o->cfg->node_timeout_ms,
        .next_renew_us = l->next_renew_us,
        .sent_us = l->renew_sent_us,
        .paused = l->ending > 0,
    };
    return st;
}

/* Sets l's deadline in the heap from what it waits for now: the end of its
 * validity, or for a renewing lock the next renewal or the give-up. */
static void lock_reschedule(struct ops *o, struct lock *l, uint64_t now)
{
    uint64_t due = l->valid_until_us;
    if (l->renew) {
        struct redlock_renew_state st = lock_renew_state(o, l);
        if (redlock_renew_decide(&st, now, &due) != RL_RENEW_WAIT) {
            due = now;
        }
    }
    locks_set_deadline(o->locks, l, due);
    lock_timer_rearm(o);
}

/* A new validity for l (acquired, renewed, extended): the next renewal is
 * due by redlock_renew_next_us(). */
static void lock_schedule(struct ops *o, struct lock *l, uint64_t now)
{
    if (l->renew) {
        uint64_t give_up = redlock_renew_give_up_us(
            l->valid_until_us, l->ttl_ms, (uint32_t)o->cfg->node_timeout_ms);
        l->next_renew_us = redlock_renew_next_us(now, give_up, l->ttl_ms,
                                                 (double)random() / RAND_MAX);
    }
    lock_reschedule(o, l, now);
}

/* A release or complete of l ended without dropping it: once no other is
 * in flight, l is held as far as we know, so its renewal goes on, at once
 * if one fell due meanwhile, and a lock whose validity ran short is given
 * up (with a lost event) by the timer. */
static void lock_ending_ended(struct ops *o, struct lock *l)
{
    if (--l->ending > 0) {
        return;
    }
    lock_reschedule(o, l, cluster_now_us());
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
    observe_wait(call, now);
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
    l->permits = call->req.permits;
    l->has_fence = call->req.fence;
    l->fence = res->fence;
    l->added_us = now;
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
    call->round_us += cluster_now_us() - call->round_start_us;
    if (call->req.permits > 0 && res->err == ERR_BUSY &&
        ++call->slots_tried < call->req.permits && call->client != NULL &&
        !o->shutting_down) {
        /* That slot is taken; another may be free: try it now. */
        if (q != NULL) {
            q->head_trying = true;
        }
        acquire_start(o, call);
        return;
    }
    call->slots_tried = 0;

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
                /* A semaphore may have more slots free: at once. */
                uint64_t d = held && call->req.permits == 0
                                 ? (uint64_t)res->validity_ms + 1
                                 : 0;
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
            char qbuf[SEM_NAME_MAX + 1];
            size_t qlen;
            const char *qname = call_queue(call, qbuf, &qlen);
            fresh = waitq_find(o, qname, qlen) == NULL;
            q = waitq_get(o, qname, qlen);
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

static void lock_renew_ended(struct ops *o, struct lock *l, uint64_t now);

/* A lock leaves the table: the next waiter for its resource may go. The
 * release (if any) was already queued on every node. */
static void lock_drop(struct ops *o, struct lock *l)
{
    char res[SEM_NAME_MAX + 1];
    size_t len = l->resource_len;
    memcpy(res, l->resource, len);
    lock_renew_ended(o, l, cluster_now_us());
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

/* A release or complete of a table lock answered err. The token finds the
 * lock op_release or op_complete counted, or none (dropped meanwhile). The
 * lock leaves the table only on proof that no quorum holds it (ok, or
 * not_held): one that failed (no_quorum) may have changed nothing, and a
 * retry must ask the nodes again. A lock whose release failed is renewed
 * no more (its owner wants it gone): it ends with its validity, unless a
 * retry proves it gone first. done_why: what ok means, for the log. */
static void lock_ending_answered(struct ops *o, struct call *call,
                                 enum proto_err err, const char *done_why)
{
    struct lock *l = call_lock(o, call);
    if (l == NULL) {
        return;
    }
    if (err == ERR_NONE || err == ERR_NOT_HELD) {
        lock_drop_by(o, l, call,
                     err == ERR_NONE ? done_why : "no longer held by a quorum");
        return;
    }
    if (call->req.op == OP_RELEASE) {
        l->renew = false;
    }
    lock_ending_ended(o, l);
}

static void release_done_cb(const struct cluster_result *res, void *priv)
{
    struct call *call = priv;
    lock_ending_answered(call->ops, call, res->err,
                         "released through another connection");
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
    if (l != NULL) {
        /* No renewal while the release is in flight (it would only meet
         * the delete); lock_ending_ended() goes on with it if the release
         * fails. */
        l->ending++;
    }
    if (cluster_release(o->cluster, res, len, call->req.lock, release_done_cb,
                        call) != 0) {
        if (l != NULL) {
            lock_ending_ended(o, l);
        }
        reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
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
    if (l->renew && l->renew_sent_us == 0 && l->ending == 0) {
        l->next_renew_us = now;
    }
    lock_reschedule(o, l, now);
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

static void complete_done_cb(const struct cluster_result *res, void *priv)
{
    struct call *call = priv;
    lock_ending_answered(call->ops, call, res->err,
                         "completed through another connection");
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
        /* No renewal may race the done mark; lock_ending_ended()
         * restarts renewal if the complete fails. */
        l->ending++;
    }
    if (cluster_complete(o->cluster, res, len, call->req.lock,
                         call->req.keep_ms, complete_done_cb, call) != 0) {
        if (l != NULL) {
            lock_ending_ended(o, l);
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
        const char *r = l->resource;
        size_t rl = l->resource_len;
        int k;
        (void)sem_parse(l->resource, l->resource_len, &r, &rl, &k);
        size_t n =
            proto_encode_event("lost", l->token, r, rl, buf, sizeof(buf));
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

/* Whether the timer would send l's renewal at now. */
static bool lock_renew_would_send(const struct ops *o, const struct lock *l,
                                  uint64_t now)
{
    if (!l->renew || (l->renew_until_us != 0 && now >= l->renew_until_us)) {
        return false;
    }
    struct redlock_renew_state st = lock_renew_state(o, l);
    uint64_t wake = 0;
    return redlock_renew_decide(&st, now, &wake) == RL_RENEW_SEND;
}

/* l's renewal in flight ended (answered, or l leaves the table): a slot of
 * its owner's budget comes free, and the owner's oldest renewal waiting
 * for one is due now. A deferred lock that no longer renews (a release or
 * complete in flight, extended meanwhile, past its last moment) waits for
 * what it waits for instead, and the slot goes to the next. */
static void lock_renew_ended(struct ops *o, struct lock *l, uint64_t now)
{
    if (l->renew_sent_us == 0) {
        return;
    }
    l->renew_sent_us = 0;
    if (l->owner == NULL) {
        return;
    }
    l->owner->renewing--;
    struct lock *next;
    while ((next = locks_undefer(l->owner)) != NULL) {
        if (lock_renew_would_send(o, next, now)) {
            locks_set_deadline(o->locks, next, now);
            lock_timer_kick(o);
            return;
        }
        lock_reschedule(o, next, now);
    }
}

static void renew_done_cb(const struct cluster_result *res, void *priv)
{
    struct renew_ctx *ctx = priv;
    struct ops *o = ctx->ops;
    struct lock *l = locks_find(o->locks, ctx->token);
    free(ctx);
    /* Renewals held back for want of a slot look again within
     * RENEW_HOLD_BACK_US. */
    o->renew_inflight--;
    if (l == NULL) {
        return; /* released meanwhile */
    }
    uint64_t now = cluster_now_us();
    lock_renew_ended(o, l, now);
    if (l->ending > 0 && res->err != ERR_NONE) {
        /* A release or complete is in flight and its answer decides: a
         * renewal that met the delete or the done mark says nothing.
         * lock_ending_ended() goes on with renewal if that fails; the
         * give-up time holds meanwhile. */
        METRIC_INC(renew_failed);
        lock_reschedule(o, l, now);
        return;
    }
    if (res->err == ERR_NONE) {
        METRIC_INC(renew_ok);
        l->valid_until_us = res->valid_until_us;
        lock_schedule(o, l, now);
        return;
    }
    METRIC_INC(renew_failed);
    uint64_t give_up = redlock_renew_give_up_us(
        l->valid_until_us, l->ttl_ms, (uint32_t)o->cfg->node_timeout_ms);
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
    lock_reschedule(o, l, now);
}

/* Sends l's renewal; give_up_us is when to give up on it. */
static void lock_renew(struct ops *o, struct lock *l, uint64_t now,
                       uint64_t give_up_us)
{
    struct renew_ctx *ctx = malloc(sizeof(*ctx));
    if (ctx == NULL) {
        log_error(NULL, "renew: out of memory");
        /* Try again shortly; the give-up stands. */
        uint64_t again = now + 10000;
        locks_set_deadline(o->locks, l,
                           again < give_up_us ? again : give_up_us);
        return;
    }
    ctx->ops = o;
    memcpy(ctx->token, l->token, sizeof(ctx->token));
    l->renew_sent_us = now > 0 ? now : 1;
    o->renew_inflight++;
    if (l->owner != NULL) {
        l->owner->renewing++;
    }
    /* Until the renewal answers, the next event is giving up on it. */
    locks_set_deadline(o->locks, l, give_up_us);
    if (cluster_extend(o->cluster, l->resource, l->resource_len, l->token,
                       l->ttl_ms, renew_done_cb, ctx) != 0) {
        free(ctx);
        o->renew_inflight--;
        lock_renew_ended(o, l, now);
    }
}

/* Whether l's renewal, not yet due at now, may go out now with others
 * (redlock_renew_early_us): a renewing lock, nothing in flight, its
 * renewal within the early margin, and room in both renewal budgets. */
static bool lock_renew_early(const struct ops *o, const struct lock *l,
                             uint64_t now)
{
    if (!l->renew || o->renew_inflight >= RENEW_INFLIGHT_MAX ||
        (l->owner != NULL && l->owner->renewing >= RENEW_CONN_INFLIGHT_MAX) ||
        (l->renew_until_us != 0 && now >= l->renew_until_us)) {
        return false;
    }
    struct redlock_renew_state st = lock_renew_state(o, l);
    uint64_t early = redlock_renew_early_us(l->ttl_ms);
    st.next_renew_us = st.next_renew_us > early ? st.next_renew_us - early : 0;
    uint64_t wake = 0;
    return redlock_renew_decide(&st, now, &wake) == RL_RENEW_SEND;
}

/* When to give up on a renewal of l sent at now (the decision's wake). */
static uint64_t lock_renew_give_up_at(const struct ops *o,
                                      const struct lock *l, uint64_t now)
{
    struct redlock_renew_state st = lock_renew_state(o, l);
    st.sent_us = now > 0 ? now : 1;
    uint64_t wake = 0;
    (void)redlock_renew_decide(&st, now, &wake);
    return wake;
}

/* Why a renewing lock is given up, from its state. */
static const char *lock_give_up_reason(const struct lock *l)
{
    if (l->renew_sent_us != 0) {
        return "renewal did not answer before the validity ran short";
    }
    if (l->ending > 0) {
        return "a release or complete in flight did not answer before the "
               "validity ran short";
    }
    return "no renewal succeeded before the validity ran short";
}

static void lock_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ops *o = arg;
    o->lock_timer_due = 0;
    uint64_t now = cluster_now_us();
    /* Bounded per tick so a burst of due locks cannot starve clients. */
    for (int budget = 4096; budget > 0; budget--) {
        uint64_t due;
        struct lock *l = locks_peek_due(o->locks, &due);
        if (l == NULL || due > now + RENEW_EARLY_MAX_US) {
            break;
        }
        if (due > now) {
            /* Not due yet: only a renewal that may go out early (with
             * this wake-up's others, in the same batches) is taken now;
             * anything else waits for its own time, and so does every
             * lock behind it. */
            if (!lock_renew_early(o, l, now)) {
                break;
            }
            lock_renew(o, l, now, lock_renew_give_up_at(o, l, now));
            continue;
        }
        if (!l->renew) {
            if (now >= l->valid_until_us) {
                /* Expired by design (no renewal): forget it quietly. */
                lock_drop(o, l);
            } else {
                locks_set_deadline(o->locks, l, l->valid_until_us);
            }
            continue;
        }
        /* Renewal, release or complete in flight alike: the lost event
         * comes before the validity ends. A renewal that is due goes out
         * while the lock is valid, even when this timer fires late. */
        struct redlock_renew_state st = lock_renew_state(o, l);
        uint64_t wake = 0;
        enum redlock_renew_action act = redlock_renew_decide(&st, now, &wake);
        if (act == RL_RENEW_GIVE_UP) {
            lock_lost(o, l, lock_give_up_reason(l));
            continue;
        }
        if (act == RL_RENEW_WAIT) {
            locks_set_deadline(o->locks, l, wake);
            continue;
        }
        if (l->renew_until_us != 0 && now >= l->renew_until_us) {
            l->renew = false; /* renew_max_ms reached: expire normally */
            locks_set_deadline(o->locks, l, l->valid_until_us);
            continue;
        }
        if (o->renew_inflight >= RENEW_INFLIGHT_MAX) {
            /* Enough renewals in flight: a burst (100k locks taken
             * together) is metered out instead of queueing past the node
             * timeout. There is slack: renewals start by ttl/3. l looks
             * again shortly (not past its last moment); the locks behind
             * it go on, so a give-up never waits for a slot. */
            uint64_t again = now + RENEW_HOLD_BACK_US;
            uint64_t last = redlock_renew_last_us(l->valid_until_us, l->ttl_ms);
            locks_set_deadline(o->locks, l, again < last ? again : last);
            continue;
        }
        if (l->owner != NULL && l->owner->renewing >= RENEW_CONN_INFLIGHT_MAX) {
            /* This connection has its share in flight: its own renewals
             * wait for one of them to answer (lock_renew_ended), others'
             * go on. The give-up stands. */
            locks_defer(l);
            locks_set_deadline(
                o->locks, l,
                redlock_renew_last_us(l->valid_until_us, l->ttl_ms));
            continue;
        }
        lock_renew(o, l, now, wake);
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

/* A semaphore acquire: callers that disagree on N are told of once (in the
 * log), and the first slot is named, so the call queues with its
 * semaphore. */
static void sem_begin(struct ops *o, struct call *call)
{
    unsigned other = sem_seen_note(o->sem, call->req.resource,
                                   call->req.resource_len, call->req.permits);
    if (other != 0) {
        log_warn(NULL,
                 "semaphore '%.64s': acquired with %u and with %u permits; "
                 "it then admits as many holders as the largest count "
                 "(logged once)",
                 call->req.resource, other, (unsigned)call->req.permits);
    }
    call->slots_tried = 0;
    sem_pick_slot(call);
}

/* release, extend, complete of a permit: "permit" names the slot of the
 * resource; without it, a token this daemon holds as a slot of the named
 * resource is that slot. Either way req.resource becomes the slot's name. */
static void sem_resolve(struct ops *o, struct call *call)
{
    struct request *req = &call->req;
    if (req->resource_len == 0) {
        return;
    }
    if (req->has_permit) {
        char r[PROTO_RESOURCE_MAX + 1];
        memcpy(r, req->resource, req->resource_len);
        req->resource_len =
            sem_slot_name(r, req->resource_len, req->permit, req->resource);
        return;
    }
    struct lock *l = locks_find(o->locks, req->lock);
    const char *r;
    size_t rl;
    int k;
    if (l != NULL && sem_parse(l->resource, l->resource_len, &r, &rl, &k) &&
        rl == req->resource_len && memcmp(r, req->resource, rl) == 0) {
        memcpy(req->resource, l->resource, l->resource_len + 1);
        req->resource_len = l->resource_len;
    }
}

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
    if (call->req.permits > 0) {
        sem_begin(o, call);
    }
    char qbuf[SEM_NAME_MAX + 1];
    size_t qlen;
    const char *qname = call_queue(call, qbuf, &qlen);
    struct waitq *q = waitq_find(o, qname, qlen);
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

/* The calls queued for a resource here (inspect_waiters_fn). */
static size_t resource_waiters(const char *resource, size_t len, void *priv)
{
    char qname[SEM_NAME_MAX + 1];
    const char *r;
    size_t rl;
    int k;
    if (sem_parse(resource, len, &r, &rl, &k) && k >= 0) {
        len = sem_queue_name(r, rl, qname); /* a slot: its semaphore's */
        resource = qname;
    }
    struct waitq *q = waitq_find(priv, resource, len);
    return q != NULL ? q->n_waiting : 0;
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
        sem_resolve(o, call);
        op_release(o, call);
        return;
    case OP_EXTEND:
        sem_resolve(o, call);
        op_extend(o, call);
        return;
    case OP_COMPLETE:
        sem_resolve(o, call);
        op_complete(o, call);
        return;
    case OP_LOCKS:
        inspect_locks(o->locks, resource_waiters, o, call);
        return;
    case OP_INSPECT:
        if (inspect_resource(o->cluster, o->cfg, o->locks, resource_waiters, o,
                             call, &o->inspect_inflight) != 0) {
            log_error(NULL, "inspect: out of memory");
            reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
        }
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

/* Answers every waiter shutting_down, except a head whose attempt is in
 * flight (its answer comes from the cluster). */
static void answer_waiters(struct ops *o)
{
    if (o->wq_buckets == NULL) {
        return;
    }
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
}

void ops_shutdown(struct ops *o)
{
    if (o->shutting_down) {
        return;
    }
    o->shutting_down = true;
    /* Waiters first, so releases below do not hand locks to them. */
    answer_waiters(o);
    /* HTTP locks are not tied to this daemon (any daemon extends or
     * releases them by token and resource) and their holders cannot be
     * told: released here, another client could take one while its holder
     * believes it holds it. They are left to their TTL (or to a release
     * through another daemon). A session lock dies with its connection:
     * its owner is told (lost, then the close) before the release goes to
     * the nodes. */
    size_t kept = 0, told = 0;
    size_t guard = locks_count(o->locks) + 1;
    uint64_t due;
    struct lock *l;
    while (guard-- > 0 && (l = locks_peek_due(o->locks, &due)) != NULL) {
        struct lock_owner *s = l->owner;
        if (s == NULL) {
            locks_remove(o->locks, l);
            METRIC_ADD(locks_held, -1);
            kept++;
            continue;
        }
        for (struct lock *x = s->head; x != NULL; x = x->own_next) {
            lock_tell_lost(x);
            told++;
        }
        if (s->client != NULL) {
            server_close_client(s->client); /* releases s's locks */
        } else {
            ops_client_closed(o, s);
        }
    }
    log_info(NULL,
             "shutdown: %zu session lock(s) released on all nodes, their "
             "owners told; %zu HTTP lock(s) left to their TTL",
             told, kept);
    if (locks_count(o->locks) > 0) {
        log_error(NULL, "shutdown: %zu lock(s) left in the table",
                  locks_count(o->locks));
    }
}

bool ops_idle(const struct ops *o)
{
    return cluster_inflight(o->cluster) == 0 && o->inspect_inflight == 0;
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
        nodes[i].quarantined = cluster_node_quarantined(o->cluster, i) ? 1 : 0;
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
    o->sem = sem_seen_create();
    /* The wake before the cluster: the cluster's teardown runs callbacks
     * that reach the wait queues and so the wake (see ops_destroy). */
    o->wake = wake_create(base, cfg, wake_cb, o);
    o->cluster = o->wake != NULL ? cluster_create(base, cfg) : NULL;
    if (o->cluster == NULL || o->wake == NULL || o->sem == NULL) {
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
    /* Teardown in reverse order of start-up. From here on nothing new
     * starts: waiters are answered, and the callbacks that closing the
     * cluster runs (every pending one, exactly once) answer their calls
     * and start no attempt; they still reach the wait queues, the wake,
     * the lock table and the timer, which go after it. */
    o->shutting_down = true;
    answer_waiters(o);
    if (o->cluster != NULL) {
        cluster_destroy(o->cluster);
        o->cluster = NULL;
    }
    wake_destroy(o->wake);
    o->wake = NULL;
    if (o->lock_timer != NULL) {
        event_free(o->lock_timer);
    }
    locks_destroy(o->locks);
    sem_seen_destroy(o->sem);
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
