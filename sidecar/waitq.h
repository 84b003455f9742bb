/* waitq.h: the callers waiting for a resource, first come, first served.
 *
 * One queue per lock (a semaphore's slots share one: sem_queue_of), found
 * by its struct lock_name in hashes that the set owns. Only the head of a
 * queue tries; the others wait behind it until their wait_ms runs out.
 * Each queued call has a timer of its own (call->retry_ev, owned here): it
 * fires the head's next attempt, or ends a later call's wait. What an
 * attempt is and how a call is answered is up to the set's owner (ops),
 * through the callbacks given to waitq_set_create().
 *
 * A head's attempt always starts from its own event, never inside the
 * callback that made it due (a release answered, a lock lost or expired, a
 * wake-up from another daemon, the call ahead leaving): that callback may be
 * deep in another object's work, which an attempt (and its answer) must not
 * run under. The event is made active, so the attempt runs in the same loop
 * turn, once that callback has returned. */
#ifndef REDLOCKD_WAITQ_H
#define REDLOCKD_WAITQ_H

#include "list.h"
#include "semaphore.h"
#include "util.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct call;
struct event_base;
struct wake;
struct waitq_set;

/* What the head of a queue is doing. Its one writer is waitq.c
 * (waitq_begin_try, waitq_end_try, waitq_resume_try, waitq_wake):
 *   IDLE -> TRYING            an attempt starts
 *   TRYING -> WOKEN           a release came while it was in flight
 *   TRYING, WOKEN -> IDLE     its round answered (end_try says whether woken)
 *   IDLE -> TRYING, WOKEN     a semaphore's next slot, keeping what came
 *                             during the last one (resume_try) */
enum waitq_head_state {
    WAITQ_HEAD_IDLE = 0, /* waiting for its timer or a wake-up */
    WAITQ_HEAD_TRYING,   /* an attempt of it is in flight */
    WAITQ_HEAD_WOKEN,    /* in flight, and a release came meanwhile: the
                            resource may be free, try again at once */
};

/* The queue of one lock, or of a semaphore's slots. Owned by its set;
 * freed when it empties (waitq_free_if_empty). */
struct waitq {
    char *resource; /* owned */
    size_t resource_len;
    int slot;          /* SEM_NO_SLOT: a lock's; SEM_QUEUE: a semaphore's */
    struct list calls; /* borrowed: struct call by wlink, first come first */
    enum waitq_head_state head_state;
    size_t n_waiting;         /* calls in the queue, for listings */
    struct waitq_set *set;    /* borrowed: the set it belongs to */
    struct util_hnode hnode;  /* in its set's table for slot, by resource */
};

/* The head's attempt is due (call->waitq->head == call, and no attempt of
 * it is in flight). */
typedef void waitq_try_fn(struct call *call, void *arg);

/* A call behind the head waited out its wait_ms: it is to be answered (and
 * taken out with waitq_leave). */
typedef void waitq_expired_fn(struct call *call, void *arg);

/* waitq_set_create: no queue yet. wake (borrowed, may be NULL) is told which
 * resources have waiters, to hear of releases in other daemons. */
struct waitq_set *waitq_set_create(struct event_base *base, struct wake *wake,
                                   waitq_try_fn *try_cb,
                                   waitq_expired_fn *expired_cb, void *arg);

/* waitq_set_destroy: frees the queues; every call must have left them. */
void waitq_set_destroy(struct waitq_set *set);

/* waitq_find: the queue name belongs to (sem_queue_of), or NULL. */
struct waitq *waitq_find(struct waitq_set *set, const struct lock_name *name);

/* waitq_get: the queue name belongs to, made (and watched for wake-ups)
 * when there is none. Returns NULL when out of memory. */
struct waitq *waitq_get(struct waitq_set *set, const struct lock_name *name);

/* waitq_free_if_empty: frees q if no call is in it or trying. */
void waitq_free_if_empty(struct waitq_set *set, struct waitq *q);

/* waitq_push: call joins the tail of q, with its timer (not armed yet: see
 * waitq_arm). Returns 0, or -1 when out of memory (call is not queued). */
int waitq_push(struct waitq_set *set, struct waitq *q, struct call *call);

/* waitq_unlink: takes call out of its queue (if any) and frees its timer;
 * the queue stays, even empty. */
void waitq_unlink(struct waitq_set *set, struct call *call);

/* waitq_leave: takes call out of its queue; if it was the head, the next in
 * line's attempt is made due (waitq_try_fn, from its own event), else an
 * emptied queue is freed. */
void waitq_leave(struct waitq_set *set, struct call *call);

/* waitq_arm: call's timer fires in delay_ms. */
void waitq_arm(struct call *call, uint64_t delay_ms);

/* waitq_begin_try: the head starts an attempt now: its timer stops, its
 * queue is marked trying and not woken. */
void waitq_begin_try(struct call *call);

/* waitq_head: the first call of q, the one that tries; NULL when empty. */
struct call *waitq_head(const struct waitq *q);

/* waitq_trying: whether q's head has an attempt in flight. */
bool waitq_trying(const struct waitq *q);

/* waitq_end_try: q's head's round answered: it is idle again. Returns
 * whether a release came during the round. */
bool waitq_end_try(struct waitq *q);

/* waitq_resume_try: q's head tries again at once, from the answer of the
 * round waitq_end_try ended (a semaphore's next slot); woken is what that
 * call returned, kept for the next answer. */
void waitq_resume_try(struct waitq *q, bool woken);

/* waitq_wake: name (a semaphore's slot or queue: any slot of its
 * semaphore) may be free: its queue's head's attempt is made due, or, when
 * one is in flight, the queue is marked woken. */
void waitq_wake(struct waitq_set *set, const struct lock_name *name);

/* waitq_count: calls queued in the set. */
int waitq_count(const struct waitq_set *set);

/* waitq_waiting: calls queued for name (a slot: its semaphore's). */
size_t waitq_waiting(struct waitq_set *set, const struct lock_name *name);

/* Answers a call taken out of its queue by waitq_drain. */
typedef void waitq_answer_fn(struct call *call, void *arg);

/* waitq_drain: takes every call out of every queue, except a head whose
 * attempt is in flight (its attempt answers it), and hands each to answer;
 * queues left empty are freed. */
void waitq_drain(struct waitq_set *set, waitq_answer_fn *answer, void *arg);

#endif
