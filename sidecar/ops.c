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
 * Dispatch and replies live here; what an acquire's round means next
 * (answer, next semaphore slot, wait and its back-off) is decided in
 * redlock.c (redlock_acquire_decide); the wait queues are waitq.c's, and
 * renewal, expiry and lost events renew.c's. Both report up by callback:
 * waitq when a head's attempt is due or a waiter's wait ran out, renew when
 * a lock left the table (its waiters may go). */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "config.h"
#include "inspect.h"
#include "locks.h"
#include "log.h"
#include "metrics.h"
#include "node.h"
#include "redlock.h"
#include "renew.h"
#include "semaphore.h"
#include "waitq.h"
#include "wake.h"
#include "util.h"

struct ops {
    const struct config *cfg; /* borrowed */
    struct cluster *cluster;  /* owned */
    struct lock_table *locks; /* owned */
    struct wake *wake;        /* owned: pub/sub wake-ups from elsewhere */
    struct waitq_set *waitqs; /* owned: the wait queues */
    struct renew *renew;      /* owned: renewals, expiry, lost events */
    struct sem_seen *sem;     /* owned: permits asked per semaphore */
    int inspect_inflight;     /* inspections sent, not yet answered */
    size_t session_releases_failed; /* answered without a quorum */
    bool shutting_down;
};

static void waiter_finish(struct ops *o, struct call *call, enum proto_err err,
                          const char *msg);

/* ---- replies ------------------------------------------------------------ */

static void reply_error(struct call *call, enum proto_err err, const char *msg)
{
    struct response rsp = {0};
    rsp.id = call->req.id_len ? call->req.id : NULL;
    rsp.id_len = call->req.id_len;
    rsp.err = err;
    rsp.message = msg;
    call_done(call, &rsp);
}

/* An ok answer; name: the lock or slot it names (its resource, and for a
 * slot which permit it is), or NULL. */
static void reply_ok(struct call *call, const char *lock,
                     const struct lock_name *name, int64_t validity_ms,
                     bool has_fence, int64_t fence)
{
    struct response rsp = {0};
    char extra[32];
    if (name != NULL && name->slot >= 0) {
        rsp.extra = extra;
        rsp.extra_len =
            (size_t)snprintf(extra, sizeof(extra), "\"permit\":%d", name->slot);
    }
    rsp.id = call->req.id_len ? call->req.id : NULL;
    rsp.id_len = call->req.id_len;
    rsp.err = ERR_NONE;
    rsp.lock = lock;
    rsp.resource = name != NULL ? name->resource : NULL;
    rsp.resource_len = name != NULL ? name->len : 0;
    rsp.validity_ms = validity_ms;
    rsp.has_fence = has_fence;
    rsp.fence = fence;
    call_done(call, &rsp);
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

/* Valid until the next call: answers are encoded before that. */
static const char *result_message(const struct cluster_result *res)
{
    static char msg[PROTO_MSG_MAX + 1];
    if (res->err == ERR_NO_QUORUM && res->too_late) {
        return TOO_LATE_MESSAGE;
    }
    if (res->err == ERR_NO_QUORUM && res->n_refused > 0 &&
        res->refusal != NULL) {
        /* Nodes that answered "no" are not slow: say what they said. */
        snprintf(msg, sizeof(msg),
                 "fewer than a quorum of nodes accepted it: %d refused "
                 "(node %d: %s)",
                 res->n_refused, res->refused_node, res->refusal);
        return msg;
    }
    if (res->err == ERR_NO_QUORUM &&
        res->n_unreachable + res->n_quarantined > 0) {
        /* Nodes that were never asked: say which kind, so that "answered
         * in time" is not taken for slowness. */
        char down[32] = "", quar[64] = "";
        if (res->n_unreachable > 0) {
            snprintf(down, sizeof(down), "%d down%s", res->n_unreachable,
                     res->n_quarantined > 0 ? ", " : "");
        }
        if (res->n_quarantined > 0) {
            snprintf(quar, sizeof(quar),
                     "%d quarantined (restarted or emptied)",
                     res->n_quarantined);
        }
        snprintf(msg, sizeof(msg), "%s: of %d nodes, %s%s; see health",
                 err_message(res->err), res->n_nodes, down, quar);
        return msg;
    }
    return err_message(res->err);
}

/* A semaphore is busy when every one of its slots is, perhaps all held by
 * the asker itself: "held by another owner" would send it looking for an
 * owner that may not exist. */
#define SEM_BUSY_MESSAGE "all permits of the semaphore are held"
#define SEM_BUSY_DONE_MESSAGE                                                  \
    "all permits of the semaphore are held or completed (a completed permit "  \
    "is taken until its done mark expires)"
#define SEM_DONE_MESSAGE                                                       \
    "every permit of the semaphore was completed and their done marks have "   \
    "not expired"

/* The message for a failed acquire call answering err after its round res:
 * result_message's, but a semaphore's busy and done say so. */
static const char *acquire_message(const struct call *call, enum proto_err err,
                                   const struct cluster_result *res)
{
    if (err == ERR_BUSY && call->req.permits > 0) {
        return call->slots_done > 0 ? SEM_BUSY_DONE_MESSAGE : SEM_BUSY_MESSAGE;
    }
    if (err == ERR_DONE && call->req.permits > 0) {
        return SEM_DONE_MESSAGE;
    }
    return result_message(res);
}

/* ---- waiters ------------------------------------------------------------ */

/* Whether one more waiter may queue: NULL, or why not. A call counts
 * against its connection's --max-conn-waiters while it is queued and its
 * session is known (an HTTP connection answers one request at a time, so
 * it never has more than one waiter). */
static const char *waiter_refusal(const struct ops *o, const struct call *call)
{
    if (waitq_count(o->waitqs) >= o->cfg->max_waiters) {
        return "too many waiters in this daemon (--max-waiters)";
    }
    if (call->session != NULL &&
        call->session->waiters >= (size_t)o->cfg->max_conn_waiters) {
        return "too many waiters on this connection (--max-conn-waiters)";
    }
    return NULL;
}

static uint64_t wait_left_ms(const struct call *call, uint64_t now)
{
    return call->wait_until_us > now ? (call->wait_until_us - now) / 1000u : 0;
}

/* A release or completion was announced by a node (perhaps from another
 * daemon). */
static void wake_cb(const struct lock_name *name, void *priv)
{
    struct ops *o = priv;
    waitq_wake(o->waitqs, name);
}

/* A lock left the table (renew_drop): the next waiter may go. */
static void lock_freed_cb(const struct lock_name *name, void *arg)
{
    struct ops *o = arg;
    waitq_wake(o->waitqs, name);
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

/* Answers and removes a waiting call; the next in line's attempt is due
 * (waitq_leave). */
static void waiter_finish(struct ops *o, struct call *call, enum proto_err err,
                          const char *msg)
{
    waitq_leave(o->waitqs, call);
    observe_wait(call, util_now_us());
    reply_error(call, err, msg);
}

/* ---- acquire --------------------------------------------------------------
 */

static void acquire_done_cb(const struct cluster_result *res, void *priv);

/* What call acts on: its request's resource and the slot ops chose. */
static struct lock_name call_name(const struct call *call)
{
    return (struct lock_name){call->req.resource, call->req.resource_len,
                              call->slot};
}

/* A semaphore call tries its slots in turn, each round from a random one:
 * call->slot is the one this round tries. */
static void sem_pick_slot(struct call *call)
{
    if (call->slots_tried == 0) {
        call->slot0 = (unsigned)random() % call->req.permits;
        call->slots_done = 0;
    }
    call->slot = (int)((call->slot0 + call->slots_tried) % call->req.permits);
}

static void acquire_start(struct ops *o, struct call *call)
{
    if (call->req.permits > 0) {
        sem_pick_slot(call);
    }
    locks_new_token(call->token);
    call->attempt++;
    call->round_start_us = util_now_us();
    struct lock_name name = call_name(call);
    if (cluster_acquire(o->cluster, &name, call->token, call->req.ttl_ms,
                        call->req.fence, call->waitq != NULL, acquire_done_cb,
                        call) != 0) {
        log_error(NULL, "acquire: out of memory");
        if (call->waitq != NULL) {
            (void)waitq_end_try(call->waitq);
            waiter_finish(o, call, ERR_INTERNAL, err_message(ERR_INTERNAL));
        } else {
            reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
        }
    }
}

/* The head of a queue tries (again) (waitq_try_fn); once shutting down it
 * is answered instead (a release or a wake-up during teardown must start
 * nothing). */
static void waiter_try_cb(struct call *call, void *arg)
{
    struct ops *o = arg;
    if (o->shutting_down) {
        waiter_finish(o, call, ERR_SHUTTING_DOWN,
                      err_message(ERR_SHUTTING_DOWN));
        return;
    }
    waitq_begin_try(call);
    acquire_start(o, call);
}

/* A call behind the head waited out wait_ms (waitq_expired_fn). */
static void waiter_expired_cb(struct call *call, void *arg)
{
    METRIC_INC(acquire_busy);
    waiter_finish(arg, call, ERR_BUSY,
                  call->req.permits > 0
                      ? SEM_BUSY_MESSAGE " (wait_ms ran out in the queue)"
                      : "the resource is held by another owner "
                        "(wait_ms ran out in the queue)");
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

/* What a round's error is to redlock_acquire_decide. */
static enum redlock_got acquire_got(enum proto_err err)
{
    switch (err) {
    case ERR_NONE:
        return RL_GOT_OK;
    case ERR_BUSY:
        return RL_GOT_BUSY;
    case ERR_DONE:
        return RL_GOT_DONE;
    case ERR_NO_QUORUM:
        return RL_GOT_NO_QUORUM;
    default:
        return RL_GOT_OTHER;
    }
}

/* The error an acquire answers for got; other: the round's own. */
static enum proto_err acquire_err(enum redlock_got got, enum proto_err other)
{
    switch (got) {
    case RL_GOT_OK:
        return ERR_NONE;
    case RL_GOT_BUSY:
        return ERR_BUSY;
    case RL_GOT_DONE:
        return ERR_DONE;
    case RL_GOT_NO_QUORUM:
        return ERR_NO_QUORUM;
    case RL_GOT_OTHER:
        return other;
    }
    return other;
}

/* Takes a won lock into the table and answers, as step (RL_ACQ_WON or
 * RL_ACQ_GIVE_BACK) says. Returns whether it is held: false when it was
 * given back on the nodes (the client left, shutdown, a limit reached
 * meanwhile, out of memory). */
static bool acquire_won(struct ops *o, struct call *call,
                        const struct cluster_result *res,
                        const struct redlock_acquire_step *step)
{
    uint64_t now = util_now_us();
    struct lock_name name = call_name(call);
    metrics_observe_acquire(now - call->start_us);
    observe_wait(call, now);
    if (step->action == RL_ACQ_GIVE_BACK) {
        /* Nobody is left to hold it, or everything is being let go. */
        cluster_release(o->cluster, &name, call->token, call->req.ttl_ms, NULL,
                        NULL);
        METRIC_INC(session_releases);
        reply_error(call, ERR_SHUTTING_DOWN,
                    call->abandoned ? "client closed"
                                    : err_message(ERR_SHUTTING_DOWN));
        return false;
    }
    /* op_acquire checked the limits too, but every acquisition then in
     * flight (pipelined, or waiting) passed the same check: the one that
     * would go over gives back what it won. */
    const char *over = lock_limit_refusal(o, call);
    if (over != NULL) {
        cluster_release(o->cluster, &name, call->token, call->req.ttl_ms, NULL,
                        NULL);
        METRIC_INC(acquire_error);
        reply_error(call, ERR_LIMIT, over);
        return false;
    }
    struct lock *l =
        locks_add(o->locks, call->token, &name, call->session, call->req.ttl_ms,
                  res->valid_until_us, step->fence ? &res->fence : NULL);
    if (l == NULL) {
        log_error(NULL, "acquire: out of memory adding a lock");
        cluster_release(o->cluster, &name, call->token, call->req.ttl_ms, NULL,
                        NULL);
        reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
        return false;
    }
    METRIC_INC(acquire_ok);
    METRIC_ADD(locks_held, 1);
    l->permits = call->req.permits;
    l->added_us = now;
    if (step->renew) {
        l->renew = true;
        _Static_assert(PROTO_RENEW_MAX_MAX <= UINT32_MAX,
                       "renew_max_ms is kept in 32 bits");
        l->renew_max_ms = (uint32_t)call->req.renew_max_ms;
    }
    renew_schedule(o->renew, l, now);
    name = locks_name(l);
    reply_ok(call, call->token, &name, res->validity_ms, step->fence,
             res->fence);
    return true;
}

/* A won round (RL_ACQ_WON, RL_ACQ_GIVE_BACK): a queued call leaves its
 * queue, and the next in line waits for this lock's release (a local wake)
 * or its expiry, whichever comes first, within its wait. */
static void acquire_taken(struct ops *o, struct call *call,
                          const struct cluster_result *res,
                          const struct redlock_acquire_step *step)
{
    struct waitq *q = call->waitq;
    if (q == NULL) {
        acquire_won(o, call, res, step);
        return;
    }
    waitq_unlink(o->waitqs, call);
    /* Read before the answer gives the call back to the server. */
    bool sem = call->req.permits > 0;
    bool held = acquire_won(o, call, res, step);
    struct call *next = waitq_head(q);
    if (next != NULL) {
        uint64_t left = wait_left_ms(next, util_now_us());
        waitq_arm(next,
                  redlock_handoff_delay_ms(held, sem, res->validity_ms, left));
    } else {
        waitq_free_if_empty(o->waitqs, q);
    }
}

/* Queues call (RL_ACQ_WAIT) unless it is already, and arms its timer as
 * redlock_wait_delay says; woken: a release came during the round (the
 * head's waitq_end_try). Returns false when its wait is over and it is
 * still to be answered; true when it waits, or was answered (a limit, out
 * of memory). */
static bool acquire_wait(struct ops *o, struct call *call,
                         const struct redlock_acquire_step *step, uint64_t now,
                         bool woken)
{
    struct waitq *q = call->waitq;
    bool fresh = false;
    if (q == NULL) {
        /* Refused before waitq_get(), which would leave an empty queue
         * (and its wake-up watch) behind. */
        const char *why = waiter_refusal(o, call);
        if (why != NULL) {
            METRIC_INC(acquire_error);
            reply_error(call, ERR_LIMIT, why);
            return true;
        }
        struct lock_name name = call_name(call);
        fresh = waitq_find(o->waitqs, &name) == NULL;
        q = waitq_get(o->waitqs, &name);
        if (q == NULL || waitq_push(o->waitqs, q, call) != 0) {
            log_error(NULL, "acquire: out of memory queueing a waiter");
            if (q != NULL) {
                waitq_free_if_empty(o->waitqs, q);
            }
            METRIC_INC(acquire_error);
            reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
            return true;
        }
    }
    struct redlock_wait_in in = {
        .head = waitq_head(q) == call,
        .woken = woken,
        .attempt = call->attempt,
        .pttl_min = step->pttl_min,
        .wait_left_ms = wait_left_ms(call, now),
    };
    if (in.head && !in.woken) {
        /* Only a back-off reads them. Right after subscribing, a release
         * may have slipped by before the subscription: retry once on the
         * plain back-off. So does every retry when no wake-up can come
         * (rediss:// nodes only). */
        in.polls = fresh || !wake_possible(o->wake);
        in.rand01 = (double)random() / RAND_MAX;
    }
    uint64_t delay;
    bool armed = redlock_wait_delay(&in, &delay);
    if (armed) {
        waitq_arm(call, delay);
    }
    return armed;
}

/* A round of an acquire call was answered: the decision is
 * redlock_acquire_decide's, carried out here. */
static void acquire_done_cb(const struct cluster_result *res, void *priv)
{
    struct call *call = priv;
    struct ops *o = call->ops;
    struct waitq *q = call->waitq;
    bool woken = q != NULL && waitq_end_try(q);
    uint64_t now = util_now_us();
    call->round_us += now - call->round_start_us;
    struct redlock_acquire_in in = {
        .got = acquire_got(res->err),
        .pttl_min = res->pttl_min,
        .permits = call->req.permits,
        .fence = call->req.fence,
        .renew = call->req.renew,
        .session = call->session != NULL,
        .stop = call->abandoned || o->shutting_down,
        .waiting = call->wait_until_us > now,
    };
    struct redlock_sem_walk walk = {
        .tried = call->slots_tried,
        .done = call->slots_done,
        .pttl = call->slots_pttl,
    };
    struct redlock_acquire_step step;
    redlock_acquire_decide(&in, &walk, &step);
    call->slots_tried = walk.tried;
    call->slots_done = walk.done;
    call->slots_pttl = walk.pttl;

    switch (step.action) {
    case RL_ACQ_NEXT_SLOT:
        if (q != NULL) {
            waitq_resume_try(q, woken);
        }
        acquire_start(o, call);
        return;
    case RL_ACQ_WON:
    case RL_ACQ_GIVE_BACK:
        acquire_taken(o, call, res, &step);
        return;
    case RL_ACQ_WAIT:
        if (acquire_wait(o, call, &step, now, woken)) {
            return;
        }
        break;
    case RL_ACQ_ANSWER:
        break;
    }

    enum proto_err err = acquire_err(step.answer, res->err);
    switch (err) {
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
    /* Queued by now when it waited (acquire_wait). */
    if (call->waitq != NULL) {
        waiter_finish(o, call, err, acquire_message(call, err, res));
    } else {
        reply_error(call, err, acquire_message(call, err, res));
    }
}

/* ---- release, extend, complete ------------------------------------------ */

/* l leaves the table through a call from another connection (its token
 * passed on): released, completed, or proved gone by an extend. Its owner
 * would learn of it at its next renewal at best, so it is told now. Not
 * counted as lost (redlockd_locks_lost_total is for locks that could not
 * be kept): someone holding the token let it go. */
static void lock_drop_by(struct ops *o, struct lock *l, const struct call *call,
                         const char *why)
{
    if (l->owner != NULL && call->session != l->owner) {
        char tag[9], token[PROTO_TOKEN_LEN + 1];
        locks_token_hex(l, token);
        log_debug(NULL, "lock %s on '%.64s': %s", log_token_hash(token, tag),
                  l->resource, why);
        renew_tell_lost(l);
    }
    renew_drop(o->renew, l);
}

/* Resolves which lock or slot a token refers to, into *name: the
 * request's, else the table's. Returns false when neither knows. */
static bool call_resource(const struct call *call, const struct lock *l,
                          struct lock_name *name)
{
    if (call->req.resource_len > 0) {
        *name = call_name(call);
        return true;
    }
    if (l != NULL) {
        *name = locks_name(l);
        return true;
    }
    return false;
}

/* Whether a call addressed the table's lock l (found by its token): it
 * names no resource or l's own (and l's slot). A token with another names
 * a lock that is not l, so its result says nothing about l. */
static bool call_addresses(const struct call *call, const struct lock *l)
{
    if (l == NULL) {
        return false;
    }
    struct lock_name asked = call_name(call);
    struct lock_name held = locks_name(l);
    return asked.len == 0 || sem_name_equal(&asked, &held);
}

/* The table's lock a call addressed, or NULL (unknown token, or a token
 * with another resource). */
static struct lock *call_lock(struct ops *o, const struct call *call)
{
    struct lock *l = locks_find(o->locks, call->req.lock);
    return call_addresses(call, l) ? l : NULL;
}

/* The table's lock (or NULL) and the lock or slot a release, extend or
 * complete acts on, into *name. Returns false, having answered not_held,
 * when neither the request nor the table names a resource for the token. */
static bool call_target(struct ops *o, struct call *call, struct lock **l,
                        struct lock_name *name)
{
    *l = call_lock(o, call);
    bool known = call_resource(call, *l, name);
    if (!known) {
        char msg[PROTO_MSG_MAX];
        snprintf(msg, sizeof(msg),
                 "unknown token (pass \"resource\" to %s a lock taken "
                 "through another daemon)",
                 proto_op_name(call->req.op));
        reply_error(call, ERR_NOT_HELD, msg);
    }
    return known;
}

/* Whether the call names a lock this daemon gave up (lost), or released
 * while nodes missed the delete: answered not_held with nothing sent,
 * since it cannot be brought back and a complete by its token must mark
 * nothing, even where a node that missed its release still holds it. */
static bool call_given_up(struct ops *o, struct call *call)
{
    struct lock_name name = call_name(call);
    if (!cluster_given_up(o->cluster, call->req.lock, &name)) {
        return false;
    }
    reply_error(call, ERR_NOT_HELD,
                "the lock was released, or lost (its owner got the lost "
                "event): take a new one");
    return true;
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
    renew_ending_ended(o->renew, l);
}

static void release_done_cb(const struct cluster_result *res, void *priv)
{
    struct call *call = priv;
    lock_ending_answered(call->ops, call, res->err,
                         "released through another connection");
    switch (res->err) {
    case ERR_NONE:
        METRIC_INC(release_ok);
        reply_ok(call, NULL, NULL, 0, false, 0);
        return;
    case ERR_NOT_HELD:
        METRIC_INC(release_not_held);
        break;
    default:
        METRIC_INC(release_error);
        break;
    }
    reply_error(call, res->err, result_message(res));
}

static void op_release(struct ops *o, struct call *call)
{
    struct lock *l;
    struct lock_name name;
    if (!call_target(o, call, &l, &name) ||
        (l == NULL && call_given_up(o, call))) {
        METRIC_INC(release_not_held);
        return;
    }
    if (l != NULL) {
        /* No renewal while the release is in flight (it would only meet
         * the delete); lock_ending_ended() goes on with it if the release
         * fails. */
        l->ending++;
    }
    /* A token this daemon does not hold may have any ttl: the longest. */
    uint32_t ttl = l != NULL ? l->ttl_sent_max_ms : PROTO_TTL_MAX;
    if (cluster_release(o->cluster, &name, call->req.lock, ttl, release_done_cb,
                        call) != 0) {
        if (l != NULL) {
            renew_ending_ended(o->renew, l);
        }
        reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
    }
}

static void extend_done_cb(const struct cluster_result *res, void *priv)
{
    struct call *call = priv;
    struct ops *o = call->ops;
    struct lock *l = call_lock(o, call);
    if (res->err == ERR_NONE) {
        METRIC_INC(extend_ok);
        struct lock_name name;
        bool known = call_resource(call, l, &name);
        if (l != NULL) {
            l->valid_until_us = res->valid_until_us;
            if (call->req.has_ttl) {
                l->ttl_ms = call->req.ttl_ms;
            }
            renew_schedule(o->renew, l, util_now_us());
        }
        reply_ok(call, call->req.lock, known ? &name : NULL, res->validity_ms,
                 false, 0);
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
            renew_extend_failed(o->renew, l, call->req.ttl_ms, res->start_us);
        }
    }
    reply_error(call, res->err, result_message(res));
}

static void op_extend(struct ops *o, struct call *call)
{
    struct lock *l;
    struct lock_name name;
    if (!call_target(o, call, &l, &name) ||
        (l == NULL && call_given_up(o, call))) {
        METRIC_INC(extend_not_held);
        return;
    }
    uint32_t ttl = call->req.has_ttl ? call->req.ttl_ms
                   : l != NULL       ? l->ttl_ms
                                     : PROTO_TTL_DEFAULT;
    if (l != NULL && ttl > l->ttl_sent_max_ms) {
        l->ttl_sent_max_ms = ttl; /* a node may keep it so long */
    }
    if (cluster_extend(o->cluster, &name, call->req.lock, ttl, extend_done_cb,
                       call) != 0) {
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
        reply_ok(call, NULL, NULL, 0, false, 0);
        return;
    }
    if (res->err == ERR_NOT_HELD) {
        METRIC_INC(complete_not_held);
    } else {
        METRIC_INC(complete_error);
    }
    reply_error(call, res->err, result_message(res));
}

static void op_complete(struct ops *o, struct call *call)
{
    struct lock *l;
    struct lock_name name;
    if (!call_target(o, call, &l, &name) ||
        (l == NULL && call_given_up(o, call))) {
        METRIC_INC(complete_not_held);
        return;
    }
    if (l != NULL) {
        /* No renewal may race the done mark; lock_ending_ended()
         * restarts renewal if the complete fails. */
        l->ending++;
    }
    if (cluster_complete(o->cluster, &name, call->req.lock, call->req.keep_ms,
                         complete_done_cb, call) != 0) {
        if (l != NULL) {
            renew_ending_ended(o->renew, l);
        }
        reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
    }
}

/* ---- entry points ---------------------------------------------------------
 */

/* A semaphore acquire: callers that disagree on N are told of once (in the
 * log), and the first slot is chosen, so the call queues with its
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
 * resource is that slot. Either way call->slot becomes it. */
static void sem_resolve(struct ops *o, struct call *call)
{
    const struct request *req = &call->req;
    if (req->resource_len == 0) {
        return;
    }
    if (req->has_permit) {
        call->slot = (int)req->permit;
        return;
    }
    const struct lock *l = locks_find(o->locks, req->lock);
    if (l != NULL && l->slot >= 0 && l->resource_len == req->resource_len &&
        memcmp(l->resource, req->resource, req->resource_len) == 0) {
        call->slot = l->slot;
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
    struct lock_name name = call_name(call);
    struct waitq *q = waitq_find(o->waitqs, &name);
    if (q != NULL && waitq_head(q) != NULL && call->req.wait_ms > 0) {
        /* Others are already waiting: first come, first served. */
        const char *why = waiter_refusal(o, call);
        if (why != NULL) {
            METRIC_INC(acquire_error);
            reply_error(call, ERR_LIMIT, why);
            return;
        }
        if (waitq_push(o->waitqs, q, call) != 0) {
            log_error(NULL, "acquire: out of memory queueing a waiter");
            METRIC_INC(acquire_error);
            reply_error(call, ERR_INTERNAL, err_message(ERR_INTERNAL));
            return;
        }
        waitq_arm(call, call->req.wait_ms);
        return;
    }
    acquire_start(o, call);
}

/* The calls queued for a resource here (inspect_waiters_fn). */
static size_t resource_waiters(const struct lock_name *name, void *priv)
{
    struct ops *o = priv;
    return waitq_waiting(o->waitqs, name);
}

void ops_submit(struct ops *o, struct call *call)
{
    call->ops = o;
    call->slot = SEM_NO_SLOT; /* sem_begin, sem_resolve: a permit's */
    if (o->shutting_down && call->req.op != OP_PING) {
        reply_error(call, ERR_SHUTTING_DOWN, err_message(ERR_SHUTTING_DOWN));
        return;
    }
    switch (call->req.op) {
    case OP_PING:
        reply_ok(call, NULL, NULL, 0, false, 0);
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
    call->abandoned = true;
    call->session = NULL;
    if (call->waitq == NULL) {
        return; /* in flight: acquire_won releases what it wins */
    }
    struct waitq *q = call->waitq;
    if (waitq_head(q) == call && waitq_trying(q)) {
        return; /* its attempt answers later */
    }
    waiter_finish(o, call, ERR_SHUTTING_DOWN, "client closed");
}

/* A session lock's release: nobody waits for it, but a failed one leaves
 * the lock on its nodes until its TTL, which a shutdown must not call
 * released. */
static void session_release_cb(const struct cluster_result *res, void *priv)
{
    struct ops *o = priv;
    if (res->err != ERR_NONE && res->err != ERR_NOT_HELD) {
        o->session_releases_failed++;
        log_debug(NULL, "session release failed: %s", result_message(res));
    }
}

void ops_client_closed(struct ops *o, struct lock_owner *session)
{
    struct lock *l;
    while ((l = locks_owner_first(session)) != NULL) {
        char tag[9], token[PROTO_TOKEN_LEN + 1];
        locks_token_hex(l, token);
        log_debug(NULL, "session closed: releasing %s",
                  log_token_hash(token, tag));
        /* On every node: one down now would keep it for a ttl after it
         * came back, held by nobody. */
        (void)renew_release_everywhere(o->renew, l, session_release_cb, o);
        METRIC_INC(session_releases);
        renew_drop(o->renew, l);
    }
}

/* A waiter taken out at shutdown (waitq_answer_fn). */
static void answer_shutting_down(struct call *call, void *arg)
{
    (void)arg;
    reply_error(call, ERR_SHUTTING_DOWN, err_message(ERR_SHUTTING_DOWN));
}

/* Answers every waiter shutting_down, except a head whose attempt is in
 * flight (its answer comes from the cluster). */
static void answer_waiters(struct ops *o)
{
    if (o->waitqs != NULL) {
        waitq_drain(o->waitqs, answer_shutting_down, NULL);
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
        for (struct lock *x = locks_owner_first(s); x != NULL;
             x = locks_owner_next(x)) {
            renew_tell_lost(x);
            told++;
        }
        if (s->close_cb != NULL) {
            s->close_cb(s); /* releases s's locks */
        } else {
            ops_client_closed(o, s);
        }
    }
    log_info(NULL,
             "shutdown: releasing %zu session lock(s) on all nodes, their "
             "owners told; %zu HTTP lock(s) left to their TTL",
             told, kept);
    if (locks_count(o->locks) > 0) {
        log_error(NULL, "shutdown: %zu lock(s) left in the table",
                  locks_count(o->locks));
    }
}

size_t ops_session_releases_failed(const struct ops *o)
{
    return o->session_releases_failed;
}

bool ops_idle(const struct ops *o)
{
    return cluster_inflight(o->cluster) == 0 && o->inspect_inflight == 0;
}

int ops_nodes_counted(const struct ops *o)
{
    int usable = 0;
    for (int i = 0; i < cluster_size(o->cluster); i++) {
        struct node *nd = cluster_node(o->cluster, i);
        usable += node_is_up(nd) && !cluster_node_quarantined(o->cluster, i) &&
                  !node_unmarked(nd);
    }
    return usable;
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
        nodes[i].eviction = node_eviction_policy(nd);
        nodes[i].refusing = cluster_node_refusal(o->cluster, i);
        nodes[i].not_counted = node_unmarked(nd);
    }
    *quorum_ok = ops_nodes_counted(o) >= cluster_quorum(o->cluster);
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
        nodes[i].may_evict = node_eviction_policy(nd) != NULL ? 1 : 0;
        nodes[i].refusing = cluster_node_refusal(o->cluster, i) != NULL ? 1 : 0;
    }
    return metrics_render(nodes, n, len);
}

struct ops *ops_create(struct event_base *base, const struct config *cfg)
{
    struct ops *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        return NULL;
    }
    o->cfg = cfg;
    o->locks = locks_create();
    o->sem = sem_seen_create();
    if (o->locks == NULL || o->sem == NULL) {
        ops_destroy(o);
        return NULL;
    }
    /* The wake and the wait queues before the cluster: the cluster's
     * teardown runs callbacks that reach them (see ops_destroy). */
    o->wake = wake_create(base, cfg, wake_cb, o);
    o->waitqs = o->wake != NULL ? waitq_set_create(base, o->wake, waiter_try_cb,
                                                   waiter_expired_cb, o)
                                : NULL;
    o->cluster =
        o->waitqs != NULL ? cluster_create(base, cfg) : NULL;
    o->renew = o->cluster != NULL ? renew_create(base, cfg, o->locks,
                                                 o->cluster, lock_freed_cb, o)
                                  : NULL;
    if (o->renew == NULL) {
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
     * and start no attempt; they still reach the renewals, the wait
     * queues, the wake and the lock table, which go after it. */
    o->shutting_down = true;
    answer_waiters(o);
    if (o->cluster != NULL) {
        cluster_destroy(o->cluster);
        o->cluster = NULL;
    }
    renew_destroy(o->renew);
    wake_destroy(o->wake);
    o->wake = NULL;
    waitq_set_destroy(o->waitqs);
    locks_destroy(o->locks);
    sem_seen_destroy(o->sem);
    free(o);
}
