/* call.h: one request in flight, as the server hands it down to ops.
 *
 * Calls go down, answers come up: the server allocates a call (inside a
 * struct of its own), sets done, and passes it to ops_submit(). Whoever
 * answers it (ops, inspect) calls call_done() exactly once; from
 * then on the call is the server's again and may already be freed. Nothing
 * below the server names it: done is the only way up. */
#ifndef REDLOCKD_CALL_H
#define REDLOCKD_CALL_H

#include <stdbool.h>
#include <stdint.h>

#include "list.h"
#include "proto.h"

struct call;
struct event;
struct lock_owner;
struct ops;
struct waitq;

/* Answers call with rsp (NULL: nobody to answer, just let it go) and gives
 * it back to its submitter, which frees it. */
typedef void call_done_fn(struct call *call, const struct response *rsp);

/* Owned by the submitter (the server), which allocates and frees it; ops
 * borrows it from ops_submit() until it calls call_done(). */
struct call {
    struct request req;              /* decoded request */
    call_done_fn *done;              /* set by the submitter, never NULL */
    struct lock_owner *session;      /* borrowed: the NDJSON session, or NULL */
    uint64_t start_us;               /* when it was decoded */
    bool abandoned;                  /* ops: its client closed: nobody will
                                        read the answer */
    uint64_t wait_until_us;          /* acquire with wait_ms: give up then */
    unsigned attempt;                /* acquire retries so far */
    char token[PROTO_TOKEN_LEN + 1]; /* acquire: the token being tried */
    struct ops *ops;                 /* ops: borrowed, set by ops_submit */
    struct list_node wlink;          /* waitq: the resource's wait queue */
    struct event *retry_ev;          /* waitq: owned retry timer, or NULL */
    struct waitq *waitq;     /* waitq: borrowed queue we are in, or NULL */
    bool waited;             /* waitq: was queued: its wait is measured */
    uint64_t round_start_us; /* ops: when its last acquire round went out */
    uint64_t round_us;       /* ops: time spent in acquire rounds */
    int slot;                /* ops: the semaphore slot it acts on, with
                                req.resource (struct lock_name, ops_submit
                                sets it): an acquire's slot this round
                                tries, a release's, extend's or complete's
                                from its permit or the table; SEM_NO_SLOT
                                (-1): a lock */
    unsigned slot0;          /* ops: semaphore: first slot of this round */
    unsigned slots_tried;    /* ops: semaphore: slots tried this round */
    unsigned slots_done;     /* ops: semaphore: of them, completed (done) */
    int64_t slots_pttl;      /* ops: semaphore: the PTTL to back off on
                                over them (redlock_sem_pttl_min) */
};

/* call_done: answers call through its submitter's callback. */
static inline void call_done(struct call *call, const struct response *rsp)
{
    call->done(call, rsp);
}

#endif
