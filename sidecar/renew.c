/* renew.c: renewals, expiry and lost events of the locks in the table.
 *
 *   lock_timer_cb (one timer: the earliest deadline in the table's heap)
 *     -> due renewal: cluster_extend -> renew_done_cb -> new validity, or a
 *        retry (redlock_renew_failed), or lost
 *     -> past the give-up (redlock_renew_decide): lost
 *     -> a lock without renewal past its validity: dropped quietly
 *   lost -> log (rate-limited), lost event to the owner (event_cb),
 *           release on every node (cluster_give_up: the nodes down now get
 *           it when they come back), renew_drop
 *   renew_drop -> out of the table -> freed_cb (ops wakes the waiters)
 *
 * Renewals in flight are bounded overall and per connection; a lock held
 * back for a slot keeps its give-up time. */
#include "renew.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "cluster.h"
#include "config.h"
#include "locks.h"
#include "log.h"
#include "metrics.h"
#include "proto.h"
#include "redlock.h"
#include "semaphore.h"
#include "util.h"

struct renew {
    const struct config *cfg; /* borrowed */
    struct lock_table *locks; /* borrowed */
    struct cluster *cluster;  /* borrowed */
    renew_freed_fn *freed_cb;
    void *arg;
    struct event *lock_timer; /* owned: next lock deadline */
    uint64_t lock_timer_due;
    int renew_inflight; /* renewals sent, not yet answered */
};

/* A renewal in flight; owned by the cluster callback. The lock is looked up
 * again by token, since it may be released meanwhile. */
struct renew_ctx {
    struct renew *r;
    char token[PROTO_TOKEN_LEN + 1];
};

static void lock_timer_cb(evutil_socket_t fd, short what, void *arg);
static void lock_timer_rearm(struct renew *r);
static void lock_timer_kick(struct renew *r);
static void lock_renew_ended(struct renew *r, struct lock *l, uint64_t now);

/* Renewals in flight at once, across all locks. */
#define RENEW_INFLIGHT_MAX 2048

/* Renewals in flight at once for the locks of one connection: a client
 * with many short renewing locks must not take every slot above while
 * others' renewals fall due. */
#define RENEW_CONN_INFLIGHT_MAX 256

/* A renewal held back for want of a slot looks again this much later. */
#define RENEW_HOLD_BACK_US 5000

/* Whether l's renew_max_ms has passed: it renews no more. */
static bool renew_cap_passed(const struct lock *l, uint64_t now)
{
    return l->renew_max_ms != 0 &&
           now >= l->added_us + (uint64_t)l->renew_max_ms * 1000u;
}

/* The renewal state of l, for redlock_renew_decide(). */
static struct redlock_renew_state lock_renew_state(const struct renew *r,
                                                   const struct lock *l)
{
    struct redlock_renew_state st = {
        .valid_until_us = l->valid_until_us,
        .ttl_ms = l->ttl_ms,
        .node_timeout_ms = (uint32_t)r->cfg->node_timeout_ms,
        .next_renew_us = l->next_renew_us,
        .sent_us = l->renew_sent_us,
        .paused = l->ending > 0,
    };
    return st;
}

/* Sets l's deadline in the heap from what it waits for now: the end of its
 * validity, or for a renewing lock the next renewal or the give-up. */
static void renew_reschedule(struct renew *r, struct lock *l, uint64_t now)
{
    uint64_t due = l->valid_until_us;
    if (l->renew) {
        struct redlock_renew_state st = lock_renew_state(r, l);
        if (redlock_renew_decide(&st, now, &due) != RL_RENEW_WAIT) {
            due = now;
        }
    }
    locks_set_deadline(r->locks, l, due);
    lock_timer_rearm(r);
}

/* The next renewal is due by redlock_renew_next_us(). */
void renew_schedule(struct renew *r, struct lock *l, uint64_t now)
{
    if (l->renew) {
        uint64_t give_up = redlock_renew_give_up_us(
            l->valid_until_us, l->ttl_ms, (uint32_t)r->cfg->node_timeout_ms);
        l->next_renew_us = redlock_renew_next_us(now, give_up, l->ttl_ms,
                                                 (double)random() / RAND_MAX);
    }
    renew_reschedule(r, l, now);
}

/* Once no release or complete is in flight, l is held as far as we know,
 * so its renewal goes on (renew.h). */
void renew_ending_ended(struct renew *r, struct lock *l)
{
    if (--l->ending > 0) {
        return;
    }
    renew_reschedule(r, l, util_now_us());
}

void renew_drop(struct renew *r, struct lock *l)
{
    char res[PROTO_RESOURCE_MAX];
    struct lock_name name = locks_name(l);
    memcpy(res, name.resource, name.len);
    name.resource = res;
    lock_renew_ended(r, l, util_now_us());
    locks_remove(r->locks, l);
    METRIC_ADD(locks_held, -1);
    r->freed_cb(&name, r->arg);
}

/* An extend to ttl_ms sent at start_us failed, but it may have reached some
 * nodes, which then let the key go at start + ttl: a shorter ttl bounds the
 * lock's validity from then on. A renewing lock renews at once (with its own
 * ttl), or is given up, with a lost event, before that bound. */
void renew_extend_failed(struct renew *r, struct lock *l, uint32_t ttl_ms,
                         uint64_t start_us)
{
    uint64_t bound = redlock_extend_failed_until_us(
        l->valid_until_us, ttl_ms, r->cfg->drift_factor, start_us);
    if (bound >= l->valid_until_us) {
        return;
    }
    l->valid_until_us = bound;
    uint64_t now = util_now_us();
    if (l->renew && l->renew_sent_us == 0 && l->ending == 0) {
        l->next_renew_us = now;
    }
    renew_reschedule(r, l, now);
}

/* Logs a lost lock, at most LOST_LOG_PER_S lines a second: a quorum lost
 * under 100,000 locks must not become 100,000 lines. The rest are counted
 * and summed up in the next second's first line (and in the metric). */
#define LOST_LOG_PER_S 20

static void log_lost(const struct lock *l, const char *why)
{
    static uint64_t second;
    static unsigned logged, suppressed;
    uint64_t now_s = util_now_us() / 1000000u;
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
    char tag[9], token[PROTO_TOKEN_LEN + 1];
    locks_token_hex(l, token);
    if (l->slot >= 0) {
        log_warn(NULL, "lock %s on '%.64s' (permit %d) lost: %s",
                 log_token_hash(token, tag), l->resource, l->slot, why);
        return;
    }
    log_warn(NULL, "lock %s on '%.64s' lost: %s", log_token_hash(token, tag),
             l->resource, why);
}

void renew_tell_lost(const struct lock *l)
{
    if (l->owner != NULL && l->owner->event_cb != NULL) {
        char buf[PROTO_RESPONSE_MAX], token[PROTO_TOKEN_LEN + 1];
        locks_token_hex(l, token);
        size_t n = proto_encode_event("lost", token, l->resource,
                                      l->resource_len, buf, sizeof(buf));
        if (n > 0) {
            l->owner->event_cb(l->owner, buf, n);
        }
    }
}

static void lock_lost(struct renew *r, struct lock *l, const char *why)
{
    log_lost(l, why);
    METRIC_INC(locks_lost);
    renew_tell_lost(l);
    /* Whatever nodes still hold it let go now rather than at expiry, and
     * those that cannot be reached now when they come back. */
    (void)renew_release_everywhere(r, l, NULL, NULL);
    renew_drop(r, l);
}

int renew_release_everywhere(struct renew *r, const struct lock *l,
                             cluster_done_fn *cb, void *priv)
{
    char token[PROTO_TOKEN_LEN + 1];
    locks_token_hex(l, token);
    uint64_t until = redlock_given_up_until_us(
        util_now_us(), l->ttl_sent_max_ms, r->cfg->drift_factor);
    struct lock_name name = locks_name(l);
    return cluster_give_up(r->cluster, &name, token, until, cb, priv);
}

/* Whether the timer would send l's renewal at now. */
static bool lock_renew_would_send(const struct renew *r, const struct lock *l,
                                  uint64_t now)
{
    if (!l->renew || renew_cap_passed(l, now)) {
        return false;
    }
    struct redlock_renew_state st = lock_renew_state(r, l);
    uint64_t wake = 0;
    return redlock_renew_decide(&st, now, &wake) == RL_RENEW_SEND;
}

/* l's renewal in flight ended (answered, or l leaves the table): a slot of
 * its owner's budget comes free, and the owner's oldest renewal waiting
 * for one is due now. A deferred lock that no longer renews (a release or
 * complete in flight, extended meanwhile, past its last moment) waits for
 * what it waits for instead, and the slot goes to the next. */
static void lock_renew_ended(struct renew *r, struct lock *l, uint64_t now)
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
        if (lock_renew_would_send(r, next, now)) {
            locks_set_deadline(r->locks, next, now);
            lock_timer_kick(r);
            return;
        }
        renew_reschedule(r, next, now);
    }
}

static void renew_done_cb(const struct cluster_result *res, void *priv)
{
    struct renew_ctx *ctx = priv;
    struct renew *r = ctx->r;
    struct lock *l = locks_find(r->locks, ctx->token);
    free(ctx);
    /* Renewals held back for want of a slot look again within
     * RENEW_HOLD_BACK_US. */
    r->renew_inflight--;
    if (l == NULL) {
        return; /* released meanwhile */
    }
    uint64_t now = util_now_us();
    lock_renew_ended(r, l, now);
    if (l->ending > 0 && res->err != ERR_NONE) {
        /* A release or complete is in flight and its answer decides: a
         * renewal that met the delete or the done mark says nothing.
         * renew_ending_ended() goes on with renewal if that fails; the
         * give-up time holds meanwhile. */
        METRIC_INC(renew_failed);
        renew_reschedule(r, l, now);
        return;
    }
    if (res->err == ERR_NONE) {
        METRIC_INC(renew_ok);
        l->retrying = false;
        l->valid_until_us = res->valid_until_us;
        renew_schedule(r, l, now);
        return;
    }
    METRIC_INC(renew_failed);
    struct redlock_renew_state st = lock_renew_state(r, l);
    bool not_held = res->err == ERR_NOT_HELD;
    uint64_t again = 0;
    if (redlock_renew_failed(&st, not_held, now, &again) == RL_RENEW_GIVE_UP) {
        lock_lost(r, l,
                  not_held ? "no longer held by a quorum" : "renewal failed");
        return;
    }
    /* Still valid: try again soon, well before the validity ends, and not
     * before again: a retry sent early with others would go out at once
     * whenever again is within the early margin, and nodes that fail at
     * once would draw thousands of them in the last stretch. */
    l->next_renew_us = again;
    l->retrying = true;
    renew_reschedule(r, l, now);
}

/* Sends l's renewal; give_up_us is when to give up on it. */
static void lock_renew(struct renew *r, struct lock *l, uint64_t now,
                       uint64_t give_up_us)
{
    struct renew_ctx *ctx = malloc(sizeof(*ctx));
    if (ctx == NULL) {
        log_error(NULL, "renew: out of memory");
        /* Try again shortly; the give-up stands. */
        uint64_t again = now + 10000;
        locks_set_deadline(r->locks, l,
                           again < give_up_us ? again : give_up_us);
        return;
    }
    ctx->r = r;
    locks_token_hex(l, ctx->token);
    l->renew_sent_us = now > 0 ? now : 1;
    r->renew_inflight++;
    if (l->owner != NULL) {
        l->owner->renewing++;
    }
    /* Until the renewal answers, the next event is giving up on it. */
    locks_set_deadline(r->locks, l, give_up_us);
    struct lock_name name = locks_name(l);
    if (cluster_extend(r->cluster, &name, ctx->token, l->ttl_ms, renew_done_cb,
                       ctx) != 0) {
        free(ctx);
        r->renew_inflight--;
        lock_renew_ended(r, l, now);
    }
}

/* Whether l's renewal, not yet due at now, may go out now with others
 * (redlock_renew_early_us): a renewing lock, nothing in flight, not a
 * retry, its renewal within the early margin, and room in both renewal
 * budgets. */
static bool lock_renew_early(const struct renew *r, const struct lock *l,
                             uint64_t now)
{
    if (!l->renew || l->retrying || r->renew_inflight >= RENEW_INFLIGHT_MAX ||
        (l->owner != NULL && l->owner->renewing >= RENEW_CONN_INFLIGHT_MAX) ||
        renew_cap_passed(l, now)) {
        return false;
    }
    struct redlock_renew_state st = lock_renew_state(r, l);
    uint64_t early = redlock_renew_early_us(l->ttl_ms);
    st.next_renew_us = st.next_renew_us > early ? st.next_renew_us - early : 0;
    uint64_t wake = 0;
    return redlock_renew_decide(&st, now, &wake) == RL_RENEW_SEND;
}

/* When to give up on a renewal of l sent at now (the decision's wake). */
static uint64_t lock_renew_give_up_at(const struct renew *r,
                                      const struct lock *l, uint64_t now)
{
    struct redlock_renew_state st = lock_renew_state(r, l);
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
    struct renew *r = arg;
    r->lock_timer_due = 0;
    uint64_t now = util_now_us();
    /* Bounded per tick so a burst of due locks cannot starve clients. */
    for (int budget = 4096; budget > 0; budget--) {
        uint64_t due;
        struct lock *l = locks_peek_due(r->locks, &due);
        if (l == NULL || due > now + REDLOCK_RENEW_EARLY_MAX_US) {
            break;
        }
        if (due > now) {
            /* Not due yet: only a renewal that may go out early (with
             * this wake-up's others, in the same batches) is taken now;
             * anything else waits for its own time, and so does every
             * lock behind it. */
            if (!lock_renew_early(r, l, now)) {
                break;
            }
            lock_renew(r, l, now, lock_renew_give_up_at(r, l, now));
            continue;
        }
        if (!l->renew) {
            if (now >= l->valid_until_us) {
                /* Expired by design (no renewal): forget it quietly. */
                renew_drop(r, l);
            } else {
                locks_set_deadline(r->locks, l, l->valid_until_us);
            }
            continue;
        }
        /* Renewal, release or complete in flight alike: the lost event
         * comes before the validity ends. A renewal that is due goes out
         * while the lock is valid, even when this timer fires late. */
        struct redlock_renew_state st = lock_renew_state(r, l);
        uint64_t wake = 0;
        enum redlock_renew_action act = redlock_renew_decide(&st, now, &wake);
        if (act == RL_RENEW_GIVE_UP) {
            lock_lost(r, l, lock_give_up_reason(l));
            continue;
        }
        if (act == RL_RENEW_WAIT) {
            locks_set_deadline(r->locks, l, wake);
            continue;
        }
        if (renew_cap_passed(l, now)) {
            l->renew = false; /* renew_max_ms reached: expire normally */
            locks_set_deadline(r->locks, l, l->valid_until_us);
            continue;
        }
        if (r->renew_inflight >= RENEW_INFLIGHT_MAX) {
            /* Enough renewals in flight: a burst (100k locks taken
             * together) is metered out instead of queueing past the node
             * timeout. There is slack: renewals start by ttl/3. l looks
             * again shortly (not past its last moment); the locks behind
             * it go on, so a give-up never waits for a slot. */
            uint64_t again = now + RENEW_HOLD_BACK_US;
            uint64_t last = redlock_renew_last_us(l->valid_until_us, l->ttl_ms);
            locks_set_deadline(r->locks, l, again < last ? again : last);
            continue;
        }
        if (l->owner != NULL && l->owner->renewing >= RENEW_CONN_INFLIGHT_MAX) {
            /* This connection has its share in flight: its own renewals
             * wait for one of them to answer (lock_renew_ended), others'
             * go on. The give-up stands. */
            locks_defer(l);
            locks_set_deadline(
                r->locks, l,
                redlock_renew_last_us(l->valid_until_us, l->ttl_ms));
            continue;
        }
        lock_renew(r, l, now, wake);
    }
    lock_timer_rearm(r);
}

/* Runs the lock timer again at once (a renewal slot came free). */
static void lock_timer_kick(struct renew *r)
{
    struct timeval now = {0, 0};
    evtimer_add(r->lock_timer, &now);
    r->lock_timer_due = 1;
}

static void lock_timer_rearm(struct renew *r)
{
    uint64_t due;
    if (locks_peek_due(r->locks, &due) == NULL) {
        return;
    }
    if (r->lock_timer_due != 0 && r->lock_timer_due <= due &&
        evtimer_pending(r->lock_timer, NULL)) {
        return;
    }
    uint64_t now = util_now_us();
    uint64_t wait = due > now ? due - now : 0;
    struct timeval tv = {(time_t)(wait / 1000000u),
                         (suseconds_t)(wait % 1000000u)};
    evtimer_add(r->lock_timer, &tv);
    r->lock_timer_due = due;
}

struct renew *renew_create(struct event_base *base, const struct config *cfg,
                           struct lock_table *locks, struct cluster *cluster,
                           renew_freed_fn *freed_cb, void *arg)
{
    struct renew *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return NULL;
    }
    r->cfg = cfg;
    r->locks = locks;
    r->cluster = cluster;
    r->freed_cb = freed_cb;
    r->arg = arg;
    r->lock_timer = evtimer_new(base, lock_timer_cb, r);
    if (r->lock_timer == NULL) {
        free(r);
        return NULL;
    }
    return r;
}

void renew_destroy(struct renew *r)
{
    if (r == NULL) {
        return;
    }
    event_free(r->lock_timer);
    free(r);
}
