/* givenup.c: the records of locks given up, by token, oldest first, and
 * the deletes sent again to the nodes that come back (givenup.h).
 *
 *   givenup_add        a record, at the tail; the timer at the head's bound
 *   givenup_answered   a node confirmed: it owes the delete no more
 *   givenup_node_up    the node's cursor to the head; resend_cb sends what
 *                      it owes, GIVEN_UP_STEP records a turn, at most
 *                      GIVEN_UP_INFLIGHT_MAX deletes unanswered */
#include "givenup.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "list.h"
#include "log.h"
#include "node.h"
#include "proto.h"
#include "util.h"

/* One lock given up. Kept until until_us, or until no node owes it. */
struct given_up {
    struct util_hnode hn;         /* gu->table, by token */
    struct list_node link;        /* gu->records, oldest first */
    uint64_t until_us;            /* never less than the previous one's */
    uint32_t owed;                /* nodes that may still hold the key */
    char token[PROTO_TOKEN_LEN + 1];
    struct lock_name name; /* resource: the bytes below */
    char resource[];       /* NUL-terminated, part of this allocation */
};

struct givenup {
    const struct config *cfg;  /* borrowed */
    struct node *const *nodes; /* borrowed: owned by the caller, n of them */
    int n;
    givenup_send_fn *send;
    void *send_priv;
    bool stopped; /* the nodes are closing: send nothing, arm nothing */
    struct util_htable table;
    struct list records; /* struct given_up by link, oldest first */
    size_t count;
    struct given_up *cursor[REDLOCK_MAX_NODES]; /* next record to send node
                                                   i; NULL: none */
    struct event *resend_ev; /* owned: sends to the nodes that came up */
    struct event *timer;     /* owned: frees records past their bound */
    int inflight;            /* deletes sent again, not yet answered */
    struct log_limit log;    /* records dropped for room */
};

/* Deletes sent again at once, across the nodes: a node back after a
 * give-up of 100,000 locks gets them in steps, not all in one turn. */
#define GIVEN_UP_INFLIGHT_MAX 256

/* Records looked at per node and turn while sending again. */
#define GIVEN_UP_STEP 4096

/* At most one line a minute for records dropped for want of room. */
#define GIVEN_UP_LOG_US 60000000u

static struct given_up *oldest(const struct givenup *gu)
{
    return LIST_ITEM(gu->records.head, struct given_up, link);
}

static struct given_up *newest(const struct givenup *gu)
{
    return LIST_ITEM(gu->records.tail, struct given_up, link);
}

static struct given_up *record_next(const struct given_up *g)
{
    return LIST_ITEM(g->link.next, struct given_up, link);
}

static struct given_up *given_up_find(const struct givenup *gu,
                                      const char *token)
{
    struct util_hnode *n = util_htable_find(&gu->table, token, PROTO_TOKEN_LEN);
    return n != NULL ? UTIL_CONTAINER_OF(n, struct given_up, hn) : NULL;
}

static void given_up_free(struct givenup *gu, struct given_up *g)
{
    for (int i = 0; i < gu->n; i++) {
        if (gu->cursor[i] == g) {
            gu->cursor[i] = record_next(g);
        }
    }
    util_htable_remove(&gu->table, &g->hn);
    list_unlink(&gu->records, &g->link);
    gu->count--;
    free(g);
}

/* Arms the timer for the oldest record's bound. */
static void timer_arm(struct givenup *gu)
{
    if (oldest(gu) == NULL || gu->stopped) {
        return;
    }
    uint64_t now = util_now_us();
    uint64_t until = oldest(gu)->until_us;
    uint64_t wait = until > now ? until - now : 0;
    struct timeval tv = {(time_t)(wait / 1000000u),
                         (suseconds_t)(wait % 1000000u)};
    evtimer_add(gu->timer, &tv);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct givenup *gu = arg;
    uint64_t now = util_now_us();
    for (struct given_up *g = oldest(gu); g != NULL && g->until_us <= now;
         g = oldest(gu)) {
        given_up_free(gu, g);
    }
    timer_arm(gu);
}

int givenup_add(struct givenup *gu, const struct lock_name *name,
                const char *token, uint64_t until_us, uint32_t owed)
{
    size_t len = name->len;
    struct given_up *g = given_up_find(gu, token);
    if (g != NULL) {
        /* The same token again: the later bound counts, at the tail. */
        owed |= g->owed;
        if (g->until_us > until_us) {
            until_us = g->until_us;
        }
        given_up_free(gu, g);
    }
    if (gu->count >= (size_t)gu->cfg->max_locks && oldest(gu) != NULL) {
        /* Every record was a lock of this daemon, so this takes more
         * give-ups within two ttls than --max-locks: the oldest goes. */
        unsigned long skipped;
        if (log_limit_pass(&gu->log, util_now_us(), GIVEN_UP_LOG_US,
                           &skipped)) {
            log_warn(NULL,
                     "%lu lock(s) given up forgotten before their bound "
                     "(more than --max-locks given up within their ttls): "
                     "their keys may stay on the nodes that missed the "
                     "release until their ttl",
                     skipped + 1);
        }
        given_up_free(gu, oldest(gu));
    }
    g = malloc(sizeof(*g) + len + 1);
    if (g == NULL) {
        return -1;
    }
    memcpy(g->token, token, PROTO_TOKEN_LEN);
    g->token[PROTO_TOKEN_LEN] = '\0';
    memcpy(g->resource, name->resource, len);
    g->resource[len] = '\0';
    g->name = (struct lock_name){g->resource, len, name->slot};
    g->owed = owed;
    g->until_us =
        givenup_bound(newest(gu) != NULL ? newest(gu)->until_us : 0, until_us);
    list_push_tail(&gu->records, &g->link);
    gu->count++;
    util_htable_add(&gu->table, &g->hn, g->token, PROTO_TOKEN_LEN);
    if (g == oldest(gu)) {
        timer_arm(gu);
    }
    return 0;
}

void givenup_answered(struct givenup *gu, const char *token, int i,
                      enum redlock_node_result res)
{
    struct given_up *g = given_up_find(gu, token);
    if (g == NULL) {
        return;
    }
    g->owed = givenup_owed_after(g->owed, i, res);
    if (g->owed == 0) {
        given_up_free(gu, g);
    }
}

/* Sends the nodes that came up the deletes they owe, in steps. */
static void resend_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct givenup *gu = arg;
    uint64_t now = util_now_us();
    bool more = false;
    for (int i = 0; i < gu->n && !gu->stopped; i++) {
        struct node *node = gu->nodes[i];
        if (node == NULL || !node_is_up(node)) {
            gu->cursor[i] = NULL; /* its next come-back starts again */
            continue;
        }
        for (int step = 0; gu->cursor[i] != NULL && step < GIVEN_UP_STEP;
             step++) {
            if (gu->inflight >= GIVEN_UP_INFLIGHT_MAX) {
                return; /* givenup_resent goes on */
            }
            struct given_up *g = gu->cursor[i];
            gu->cursor[i] = record_next(g);
            if (givenup_due(g->owed, i, g->until_us, now) &&
                gu->send(gu->send_priv, i, &g->name, g->token) == 0) {
                gu->inflight++;
            }
        }
        more = more || gu->cursor[i] != NULL;
    }
    if (more) {
        event_active(gu->resend_ev, EV_TIMEOUT, 1);
    }
}

void givenup_resent(struct givenup *gu)
{
    if (--gu->inflight == GIVEN_UP_INFLIGHT_MAX - 1 && !gu->stopped) {
        event_active(gu->resend_ev, EV_TIMEOUT, 1);
    }
}

void givenup_node_up(struct givenup *gu, int i)
{
    if (gu->stopped || oldest(gu) == NULL) {
        return;
    }
    gu->cursor[i] = oldest(gu);
    event_active(gu->resend_ev, EV_TIMEOUT, 1);
}

bool givenup_refuses(const struct givenup *gu, const char *token,
                     const struct lock_name *name)
{
    const struct given_up *g = given_up_find(gu, token);
    if (g == NULL || g->until_us <= util_now_us()) {
        return false;
    }
    return givenup_names(&g->name, name);
}

void givenup_stop(struct givenup *gu)
{
    gu->stopped = true;
}

struct givenup *givenup_create(struct event_base *base,
                               const struct config *cfg,
                               struct node *const *nodes, int n,
                               givenup_send_fn *send, void *priv)
{
    struct givenup *gu = calloc(1, sizeof(*gu));
    if (gu == NULL) {
        return NULL;
    }
    gu->cfg = cfg;
    gu->nodes = nodes;
    gu->n = n;
    gu->send = send;
    gu->send_priv = priv;
    gu->resend_ev = event_new(base, -1, 0, resend_cb, gu);
    gu->timer = evtimer_new(base, timer_cb, gu);
    if (gu->resend_ev == NULL || gu->timer == NULL ||
        util_htable_init(&gu->table, 16384) != 0) {
        givenup_destroy(gu);
        return NULL;
    }
    return gu;
}

void givenup_destroy(struct givenup *gu)
{
    if (gu == NULL) {
        return;
    }
    while (oldest(gu) != NULL) {
        given_up_free(gu, oldest(gu));
    }
    util_htable_free(&gu->table);
    if (gu->resend_ev != NULL) {
        event_free(gu->resend_ev);
    }
    if (gu->timer != NULL) {
        event_free(gu->timer);
    }
    free(gu);
}
