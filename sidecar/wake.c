/* wake.c: cross-daemon wake-ups for waiters, through Redis pub/sub.
 *
 * One subscriber connection per node, alive only while some resource is
 * watched. Every watched resource is subscribed on every node: a release
 * publishes from n - quorum + 1 of the nodes up (those that held the lock;
 * batch.c, redlock_wake_publishers), so any one node suffices to hear of
 * it, and n - quorum nodes failing still leave one announcement.
 * The connections are node.c's (plain or TLS, the same deadlines, back-off
 * and heartbeat as the lock connections), in subscriber mode: a connection
 * that comes up (again) subscribes to the whole watched set. */
#include "wake.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "config.h"
#include "log.h"
#include "node.h"
#include "redlock.h"
#include "semaphore.h"
#include "tls.h"
#include "util.h"

/* prefix (<= 64), "wake:" or "wake:\x01*:" (SEM_NAME_EXTRA), resource */
#define CHANNEL_MAX 640

/* One watched resource; owned by the wake's table. */
struct watch {
    struct util_hnode hnode; /* keyed by channel */
    char *channel;           /* owned: <prefix>wake:<resource> */
    size_t channel_len;
};

struct wake_node {
    struct wake *w; /* borrowed: the owner */
    int index;
    const struct node_addr *addr; /* borrowed: owned by the config */
    struct node *conn;            /* owned: subscriber, NULL when idle */
    bool refused;                 /* a SUBSCRIBE refusal was logged */
};

struct wake {
    struct event_base *base;  /* borrowed */
    const struct config *cfg; /* borrowed */
    wake_fn *cb;
    void *priv;
    struct wake_node nodes[REDLOCK_MAX_NODES];
    int n;
    struct node_options opts;   /* of the subscriber connections */
    struct tls_ctx *tls;        /* owned: for rediss:// nodes, else NULL */
    struct event *idle_ev;      /* owned: closes the connections when idle */
    struct util_htable watches; /* owned: struct watch by channel */
    size_t prefix_len;          /* of "<prefix>wake:" */
};

static struct watch *watch_of(struct util_hnode *n)
{
    return n != NULL ? UTIL_CONTAINER_OF(n, struct watch, hnode) : NULL;
}

/* Builds name's channel (sem_channel) into buf (CHANNEL_MAX bytes).
 * Returns its length, 0 when it does not fit. */
static size_t make_channel(const struct wake *w, const struct lock_name *name,
                           char *buf)
{
    const char *prefix = w->cfg->prefix;
    return sem_channel(prefix, strlen(prefix), name, buf, CHANNEL_MAX);
}

/* ---- subscriber connections ------------------------------------------ */

static void subscribe_cb(struct node *node, struct redisReply *reply,
                         enum node_status status, void *privdata)
{
    struct wake_node *wn = privdata;
    if (status == NODE_REPLY && reply->type == REDIS_REPLY_ERROR &&
        !wn->refused) {
        /* An ACL user without &<prefix>wake:*: waiters poll instead.
         * Once per daemon and node, not once per waiter. */
        wn->refused = true;
        log_warn(NULL,
                 "node %d: %s: SUBSCRIBE refused (waiters poll): %s; this "
                 "node wakes no waiter (the others' wake-ups still do) "
                 "until SUBSCRIBE and the channels %swake:* are allowed",
                 wn->index + 1, node_display(node), reply->str,
                 wn->w->cfg->prefix);
    }
}

/* Sends SUBSCRIBE (or UNSUBSCRIBE) for one channel on one node; a node
 * that is not up subscribes to the whole set when it comes up. */
static void node_subscribe(struct wake_node *wn, const char *verb,
                           const char *ch, size_t len)
{
    const char *argv[2] = {verb, ch};
    size_t lens[2] = {strlen(verb), len};
    if (wn->conn != NULL && node_is_up(wn->conn)) {
        (void)node_command(wn->conn, 2, argv, lens, subscribe_cb, wn);
    }
}

static void push_cb(struct node *node, const char *channel, size_t len,
                    void *privdata)
{
    (void)node;
    struct wake_node *wn = privdata;
    if (len > wn->w->prefix_len) {
        struct lock_name name;
        sem_channel_name(channel + wn->w->prefix_len, len - wn->w->prefix_len,
                         &name);
        wn->w->cb(&name, wn->w->priv);
    }
}

/* A subscriber came up (again): subscribe to the whole watched set. */
static void state_cb(struct node *node, enum node_state state, void *privdata)
{
    (void)node;
    struct wake_node *wn = privdata;
    if (state != NODE_UP) {
        return;
    }
    struct wake *w = wn->w;
    for (struct util_hnode *n = util_htable_first(&w->watches); n != NULL;
         n = util_htable_next(&w->watches, n)) {
        node_subscribe(wn, "SUBSCRIBE", n->key, n->key_len);
    }
}

static void wake_node_open(struct wake_node *wn)
{
    struct wake *w = wn->w;
    if (wn->conn != NULL || (wn->addr->tls && w->tls == NULL)) {
        return;
    }
    wn->conn =
        node_create(w->base, wn->index, wn->addr, &w->opts, state_cb, wn);
    if (wn->conn == NULL) {
        log_warn(NULL, "%s: no subscriber connection (out of memory)",
                 wn->addr->display);
    }
}

/* Runs a loop turn after the last unwatch, never inside a node's own
 * callback (a wake-up may end a waiter, which unwatches). */
static void idle_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct wake *w = arg;
    if (w->watches.count > 0) {
        return;
    }
    for (int i = 0; i < w->n; i++) {
        node_destroy(w->nodes[i].conn);
        w->nodes[i].conn = NULL;
    }
}

/* ---- watch set --------------------------------------------------------- */

int wake_watch(struct wake *w, const struct lock_name *name)
{
    char ch[CHANNEL_MAX];
    size_t cl = make_channel(w, name, ch);
    if (cl == 0) {
        return -1;
    }
    if (util_htable_find(&w->watches, ch, cl) != NULL) {
        return 0;
    }
    struct watch *x = malloc(sizeof(*x));
    if (x == NULL) {
        return -1;
    }
    x->channel = malloc(cl);
    if (x->channel == NULL) {
        free(x);
        return -1;
    }
    memcpy(x->channel, ch, cl);
    x->channel_len = cl;
    util_htable_add(&w->watches, &x->hnode, x->channel, cl);
    for (int i = 0; i < w->n; i++) {
        struct wake_node *wn = &w->nodes[i];
        if (wn->conn == NULL) {
            /* state_cb subscribes to the whole set, this one included */
            wake_node_open(wn);
        } else {
            node_subscribe(wn, "SUBSCRIBE", ch, cl);
        }
    }
    return 0;
}

void wake_unwatch(struct wake *w, const struct lock_name *name)
{
    char ch[CHANNEL_MAX];
    size_t cl = make_channel(w, name, ch);
    if (cl == 0) {
        return;
    }
    struct watch *x = watch_of(util_htable_find(&w->watches, ch, cl));
    if (x == NULL) {
        return;
    }
    util_htable_remove(&w->watches, &x->hnode);
    free(x->channel);
    free(x);
    for (int i = 0; i < w->n; i++) {
        node_subscribe(&w->nodes[i], "UNSUBSCRIBE", ch, cl);
    }
    if (w->watches.count == 0) {
        /* No waiters left: no subscriber connections either (unless a
         * watch comes back within this loop turn). */
        event_active(w->idle_ev, EV_TIMEOUT, 1);
    }
}

bool wake_possible(const struct wake *w)
{
    for (int i = 0; i < w->n; i++) {
        if (!w->nodes[i].addr->tls || w->tls != NULL) {
            return true;
        }
    }
    return false;
}

struct wake *wake_create(struct event_base *base, const struct config *cfg,
                         wake_fn *cb, void *priv)
{
    struct wake *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return NULL;
    }
    w->base = base;
    w->cfg = cfg;
    w->cb = cb;
    w->priv = priv;
    w->n = cfg->n_nodes;
    w->prefix_len = strlen(cfg->prefix) + 5;
    int rc = util_htable_init(&w->watches, 256);
    w->idle_ev = event_new(base, -1, 0, idle_cb, w);
    if (rc != 0 || w->idle_ev == NULL) {
        wake_destroy(w);
        return NULL;
    }
    int stall = cfg->node_timeout_ms * 8;
    w->opts = (struct node_options){
        .timeout_ms = cfg->node_timeout_ms,
        .connect_timeout_ms = config_connect_timeout_ms(cfg),
        .stall_ms = stall < 2000 ? 2000 : stall,
        .backoff_base_ms = 50,
        .backoff_cap_ms = 5000,
        .max_pending = 1 << 20,
        .push_cb = push_cb,
    };
    for (int i = 0; i < w->n; i++) {
        struct wake_node *wn = &w->nodes[i];
        wn->w = w;
        wn->index = i;
        wn->addr = &cfg->nodes[i];
        if (wn->addr->tls && w->tls == NULL) {
            char err[256];
            /* The same settings the lock connections loaded already. */
            w->tls = tls_ctx_create(cfg, err, sizeof(err));
            if (w->tls == NULL) {
                log_warn(NULL,
                         "wake-ups: no subscriber on rediss:// "
                         "nodes: %s",
                         err);
            }
        }
    }
    w->opts.tls = w->tls;
    return w;
}

void wake_destroy(struct wake *w)
{
    if (w == NULL) {
        return;
    }
    for (int i = 0; i < w->n; i++) {
        node_destroy(w->nodes[i].conn);
        w->nodes[i].conn = NULL;
    }
    tls_ctx_destroy(w->tls); /* after every session of it */
    if (w->idle_ev != NULL) {
        event_free(w->idle_ev);
    }
    struct util_hnode *n = util_htable_first(&w->watches);
    while (n != NULL) {
        struct util_hnode *next = util_htable_next(&w->watches, n);
        struct watch *x = watch_of(n);
        free(x->channel);
        free(x);
        n = next;
    }
    util_htable_free(&w->watches);
    free(w);
}
