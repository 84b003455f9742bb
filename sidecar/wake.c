/* wake.c: cross-daemon wake-ups for waiters, through Redis pub/sub.
 *
 * One subscriber connection per node, alive only while some resource is
 * watched. Every watched resource is subscribed on every node: a release
 * publishes from each node that held the lock, so any one node suffices to
 * hear of it, and a node that is down costs nothing but its announcement.
 * A connection that drops is re-established with back-off and subscribes
 * to the whole watched set again. rediss:// nodes get no subscriber (the
 * hiredis 0.14 async client here speaks no TLS, and a plain connection to
 * a TLS port must never be tried): waiters then hear only from plain nodes,
 * or fall back to their retry polling. */
#include "wake.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "config.h"
#include "log.h"
#include "redlock.h"

#define CHANNEL_MAX 640 /* prefix (<= 64) + "wake:" + resource (<= 512) */

/* One watched resource; owned by the wake's hash. */
struct watch {
    char *channel; /* owned: <prefix>wake:<resource> */
    size_t channel_len;
    struct watch *next;
};

struct wake_node {
    struct wake *w; /* borrowed: the owner */
    int index;
    const struct node_addr *addr; /* borrowed: owned by the config */
    redisAsyncContext *ac;        /* owned by hiredis once connected */
    bool ready;                   /* connected, subscribed to the set */
    struct event *retry_ev;       /* owned: reconnect timer */
    struct event *connect_ev;     /* owned: connect deadline */
    unsigned attempt;
    char subject[32];
};

struct wake {
    struct event_base *base;  /* borrowed */
    const struct config *cfg; /* borrowed */
    wake_fn *cb;
    void *priv;
    struct wake_node nodes[REDLOCK_MAX_NODES];
    int n;
    struct watch **buckets; /* owned */
    size_t n_buckets;
    size_t count;
    size_t prefix_len; /* of "<prefix>wake:" */
    bool closing;
};

static void wake_node_connect(struct wake_node *wn);

/* Reconnects after the capped, jittered back-off shared with node.c. */
static void wake_node_retry_later(struct wake_node *wn)
{
    uint32_t d = redlock_backoff_ms(wn->attempt++, 50, 5000,
                                    (double)random() / RAND_MAX);
    struct timeval tv = {(time_t)(d / 1000), (suseconds_t)(d % 1000) * 1000};
    evtimer_add(wn->retry_ev, &tv);
}

static size_t chan_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return (size_t)h;
}

static struct watch **watch_slot(struct wake *w, const char *ch, size_t len)
{
    struct watch **pp = &w->buckets[chan_hash(ch, len) & (w->n_buckets - 1)];
    while (*pp != NULL &&
           ((*pp)->channel_len != len || memcmp((*pp)->channel, ch, len))) {
        pp = &(*pp)->next;
    }
    return pp;
}

/* Builds "<prefix>wake:<resource>" into buf (at least 600 bytes). */
static size_t make_channel(const struct wake *w, const char *res, size_t len,
                           char *buf)
{
    size_t pl = strlen(w->cfg->prefix);
    memcpy(buf, w->cfg->prefix, pl);
    memcpy(buf + pl, "wake:", 5);
    memcpy(buf + pl + 5, res, len);
    return pl + 5 + len;
}

/* ---- subscriber connections ------------------------------------------ */

static void message_cb(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    struct wake_node *wn = privdata;
    redisReply *reply = r;
    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY ||
        reply->elements < 3) {
        return;
    }
    redisReply *kind = reply->element[0];
    redisReply *chan = reply->element[1];
    if (kind->type != REDIS_REPLY_STRING || chan->type != REDIS_REPLY_STRING ||
        strcmp(kind->str, "message") != 0 || chan->len <= wn->w->prefix_len) {
        return;
    }
    wn->w->cb(chan->str + wn->w->prefix_len, chan->len - wn->w->prefix_len,
              wn->w->priv);
}

/* Sends SUBSCRIBE (or UNSUBSCRIBE) for one channel on one node. */
static void node_subscribe(struct wake_node *wn, const char *verb,
                           const char *ch, size_t len)
{
    const char *argv[2] = {verb, ch};
    size_t lens[2] = {strlen(verb), len};
    redisAsyncCommandArgv(wn->ac, message_cb, wn, 2, argv, lens);
}

static void auth_cb(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    struct wake_node *wn = privdata;
    redisReply *reply = r;
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR) {
        log_warn(wn->subject, "%s: AUTH refused: %s", wn->addr->display,
                 reply->str);
        redisAsyncDisconnect(wn->ac);
    }
}

static void connect_cb(const redisAsyncContext *ac, int status)
{
    struct wake_node *wn = ac->data;
    if (wn->ac != ac) {
        return; /* a connection we already let go of */
    }
    evtimer_del(wn->connect_ev);
    if (status != REDIS_OK) {
        wn->ac = NULL; /* hiredis frees it */
        if (!wn->w->closing && wn->w->count > 0) {
            wake_node_retry_later(wn);
        }
        return;
    }
    wn->attempt = 0;
    /* An idle subscriber sends nothing, so only keepalive notices a peer
     * that vanished without a reset; redisEnableKeepAlive is TCP-only. */
    if (wn->addr->kind == NODE_ADDR_TCP &&
        redisEnableKeepAlive(&wn->ac->c) != REDIS_OK) {
        log_debug(wn->subject, "%s: no TCP keepalive", wn->addr->display);
    }
    if (wn->addr->password != NULL) {
        const char *argv[3];
        size_t lens[3];
        int argc = 0;
        argv[argc++] = "AUTH";
        if (wn->addr->user != NULL && wn->addr->user[0] != '\0') {
            argv[argc++] = wn->addr->user;
        }
        argv[argc++] = wn->addr->password;
        for (int i = 0; i < argc; i++) {
            lens[i] = strlen(argv[i]);
        }
        redisAsyncCommandArgv(wn->ac, auth_cb, wn, argc, argv, lens);
    }
    /* Subscribe to the whole watched set. */
    struct wake *w = wn->w;
    for (size_t b = 0; b < w->n_buckets; b++) {
        for (struct watch *x = w->buckets[b]; x != NULL; x = x->next) {
            node_subscribe(wn, "SUBSCRIBE", x->channel, x->channel_len);
        }
    }
    wn->ready = true;
    log_debug(wn->subject, "%s: subscriber connected", wn->addr->display);
}

static void disconnect_cb(const redisAsyncContext *ac, int status)
{
    (void)status;
    struct wake_node *wn = ac->data;
    if (wn->ac != ac) {
        return; /* a connection we already let go of */
    }
    wn->ac = NULL;
    wn->ready = false;
    if (!wn->w->closing && wn->w->count > 0) {
        wake_node_retry_later(wn);
    }
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct wake_node *wn = arg;
    if (wn->ac == NULL && wn->w->count > 0 && !wn->w->closing) {
        wake_node_connect(wn);
    }
}

/* hiredis 0.14 has no connect timeout, and a SYN into a black hole waits
 * out the kernel's retries (about two minutes) while that node's wake-ups
 * are lost: give up on the node connections' deadline and start again. */
static void connect_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct wake_node *wn = arg;
    if (wn->ac == NULL || wn->ready) {
        return;
    }
    redisAsyncContext *ac = wn->ac;
    wn->ac = NULL; /* the callbacks of a let-go context return at once */
    redisAsyncFree(ac);
    log_debug(wn->subject, "%s: subscriber connect timed out",
              wn->addr->display);
    if (!wn->w->closing && wn->w->count > 0) {
        wake_node_retry_later(wn);
    }
}

static void wake_node_connect(struct wake_node *wn)
{
    const struct node_addr *a = wn->addr;
    if (a->tls) {
        return; /* hiredis 0.14 has no TLS: never subscribe in plain text */
    }
    redisAsyncContext *ac = a->kind == NODE_ADDR_UNIX
                                ? redisAsyncConnectUnix(a->path)
                                : redisAsyncConnect(a->host, a->port);
    if (ac == NULL || ac->err) {
        if (ac != NULL) {
            redisAsyncFree(ac);
        }
        wake_node_retry_later(wn);
        return;
    }
    ac->data = wn;
    wn->ac = ac;
    if (redisLibeventAttach(ac, wn->w->base) != REDIS_OK) {
        wn->ac = NULL;
        redisAsyncFree(ac);
        wake_node_retry_later(wn);
        return;
    }
    redisAsyncSetConnectCallback(ac, connect_cb);
    redisAsyncSetDisconnectCallback(ac, disconnect_cb);
    int ms = config_connect_timeout_ms(wn->w->cfg);
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(wn->connect_ev, &tv);
}

/* ---- watch set --------------------------------------------------------- */

int wake_watch(struct wake *w, const char *resource, size_t len)
{
    char ch[CHANNEL_MAX];
    if (strlen(w->cfg->prefix) + 5 + len > sizeof(ch)) {
        return -1;
    }
    size_t cl = make_channel(w, resource, len, ch);
    struct watch **pp = watch_slot(w, ch, cl);
    if (*pp != NULL) {
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
    x->next = NULL;
    *pp = x;
    w->count++;
    for (int i = 0; i < w->n; i++) {
        struct wake_node *wn = &w->nodes[i];
        if (wn->ready) {
            node_subscribe(wn, "SUBSCRIBE", ch, cl);
        } else if (wn->ac == NULL && !evtimer_pending(wn->retry_ev, NULL)) {
            /* connect_cb subscribes to the whole set, this one included */
            wake_node_connect(wn);
        }
    }
    return 0;
}

void wake_unwatch(struct wake *w, const char *resource, size_t len)
{
    char ch[CHANNEL_MAX];
    if (strlen(w->cfg->prefix) + 5 + len > sizeof(ch)) {
        return;
    }
    size_t cl = make_channel(w, resource, len, ch);
    struct watch **pp = watch_slot(w, ch, cl);
    struct watch *x = *pp;
    if (x == NULL) {
        return;
    }
    *pp = x->next;
    free(x->channel);
    free(x);
    w->count--;
    for (int i = 0; i < w->n; i++) {
        struct wake_node *wn = &w->nodes[i];
        if (wn->ac == NULL) {
            continue;
        }
        if (w->count == 0) {
            /* No waiters left: no subscriber connections either. */
            redisAsyncContext *ac = wn->ac;
            wn->ac = NULL;
            wn->ready = false;
            redisAsyncFree(ac);
        } else if (wn->ready) {
            node_subscribe(wn, "UNSUBSCRIBE", ch, cl);
        }
    }
    if (w->count == 0) {
        for (int i = 0; i < w->n; i++) {
            evtimer_del(w->nodes[i].retry_ev);
            evtimer_del(w->nodes[i].connect_ev);
        }
    }
}

size_t wake_watching(const struct wake *w)
{
    return w->count;
}

bool wake_possible(const struct wake *w)
{
    for (int i = 0; i < w->n; i++) {
        if (!w->nodes[i].addr->tls) {
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
    w->n_buckets = 256;
    w->buckets = calloc(w->n_buckets, sizeof(*w->buckets));
    if (w->buckets == NULL) {
        free(w);
        return NULL;
    }
    for (int i = 0; i < w->n; i++) {
        struct wake_node *wn = &w->nodes[i];
        wn->w = w;
        wn->index = i;
        wn->addr = &cfg->nodes[i];
        snprintf(wn->subject, sizeof(wn->subject), "node %d sub", i + 1);
        if (wn->addr->tls) {
            log_warn(wn->subject,
                     "%s: rediss:// node: no cross-daemon wake-ups from it "
                     "(pub/sub is not over TLS yet); waiters poll",
                     wn->addr->display);
        }
        wn->retry_ev = evtimer_new(base, retry_cb, wn);
        wn->connect_ev = evtimer_new(base, connect_timeout_cb, wn);
        if (wn->retry_ev == NULL || wn->connect_ev == NULL) {
            wake_destroy(w);
            return NULL;
        }
    }
    return w;
}

void wake_destroy(struct wake *w)
{
    if (w == NULL) {
        return;
    }
    w->closing = true;
    for (int i = 0; i < w->n; i++) {
        struct wake_node *wn = &w->nodes[i];
        if (wn->ac != NULL) {
            redisAsyncContext *ac = wn->ac;
            wn->ac = NULL;
            redisAsyncFree(ac);
        }
        if (wn->retry_ev != NULL) {
            event_free(wn->retry_ev);
        }
        if (wn->connect_ev != NULL) {
            event_free(wn->connect_ev);
        }
    }
    for (size_t b = 0; b < w->n_buckets; b++) {
        struct watch *x = w->buckets[b];
        while (x != NULL) {
            struct watch *next = x->next;
            free(x->channel);
            free(x);
            x = next;
        }
    }
    free(w->buckets);
    free(w);
}
