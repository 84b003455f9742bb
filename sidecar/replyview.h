/* replyview.h: a hiredis reply as redlock.c's classifiers see it.
 *
 * redlock.c decides from struct redlock_reply and knows no Redis client;
 * this is the one place that turns a hiredis reply into that view, for the
 * daemon (cluster.c, batch.c) and for the benchmark's in-process limit
 * (rlbench), so that both classify node replies with the same functions.
 * Inline: it runs once per node reply, and a call per reply showed in the
 * limit's instruction count. No I/O, no allocation. */
#ifndef REDLOCKD_REPLYVIEW_H
#define REDLOCKD_REPLYVIEW_H

#include <stddef.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "redlock.h"

/* The view of one reply and, for arrays, of up to three elements (every
 * acquire form answers at most two, the inspect script three). Lives on
 * the caller's stack. */
#define REPLYVIEW_ELEMS 3
struct replyview {
    struct redlock_reply top;
    struct redlock_reply elem[REPLYVIEW_ELEMS];
};

/* replyview_one: the view of a reply that is not an array. */
static inline void replyview_one(struct redlock_reply *v, const redisReply *r)
{
    memset(v, 0, sizeof(*v));
    switch (r->type) {
    case REDIS_REPLY_NIL:
        v->kind = RLR_NIL;
        break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        v->kind = RLR_STRING;
        v->str = r->str;
        v->len = (size_t)r->len;
        break;
    case REDIS_REPLY_ERROR:
        v->kind = RLR_ERROR;
        v->str = r->str;
        v->len = (size_t)r->len;
        break;
    case REDIS_REPLY_INTEGER:
        v->kind = RLR_INTEGER;
        v->integer = r->integer;
        break;
    default:
        v->kind = RLR_OTHER;
        break;
    }
}

/* replyview_of: fills v from r and returns &v->top. The view borrows r's
 * strings: it is valid only while r is (inside its callback). An array of
 * more than REPLYVIEW_ELEMS elements is viewed as RLR_OTHER (no classifier
 * takes more), and so is a NULL r (no reply: a disconnect). */
static inline const struct redlock_reply *replyview_of(struct replyview *v,
                                                       const redisReply *r)
{
    if (r != NULL && r->type != REDIS_REPLY_ARRAY) {
        replyview_one(&v->top, r);
        return &v->top;
    }
    memset(&v->top, 0, sizeof(v->top));
    if (r == NULL || r->elements > REPLYVIEW_ELEMS) {
        v->top.kind = RLR_OTHER;
        return &v->top;
    }
    v->top.kind = RLR_ARRAY;
    v->top.n_elem = r->elements;
    v->top.elem = v->elem;
    for (size_t k = 0; k < r->elements; k++) {
        replyview_one(&v->elem[k], r->element[k]);
    }
    return &v->top;
}

/* replyview_error_text: the error text of the reply viewed as v, also one
 * inside an EXEC's array (a fenced acquire's INCR refused with
 * WRONGTYPE): the view borrows hiredis's strings, which end in a NUL. */
static inline const char *replyview_error_text(const struct redlock_reply *v)
{
    const struct redlock_reply *e = redlock_reply_error(v);
    return e != NULL ? e->str : "(unexpected shape)";
}

/* replyview_text: replyview_error_text of r's view, for a log line. */
static inline const char *replyview_text(const redisReply *r)
{
    struct replyview v;
    return replyview_error_text(replyview_of(&v, r));
}

#endif
