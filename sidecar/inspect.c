/* inspect.c: who holds what.
 *
 * locks   -> locks_scan (one bounded page, in the order locks were taken)
 *         -> one JSON array, answered at once
 * inspect -> one read-only script per usable node (GET, PTTL, and the fence
 *            counter when asked), all at once
 *         -> every node answered or timed out
 *         -> redlock_inspect_decide (the quorum rules of release)
 *
 * Neither answer carries a token: a node's token is compared with this
 * daemon's table (to say "mine") and dropped. */
#include "inspect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "buf.h"
#include "call.h"
#include "cluster.h"
#include "config.h"
#include "locks.h"
#include "log.h"
#include "node.h"
#include "proto.h"
#include "redlock.h"
#include "replyview.h"
#include "semaphore.h"
#include "util.h"

/* Entries looked at per page at most, matching or not: a prefix that
 * matches nothing among a million locks still answers in bounded time,
 * with a cursor to go on from. */
#define SCAN_VISIT_MAX 65536

/* Reads a resource's key, its PTTL and (ARGV[1] == "1") the node's fence
 * counter in one atomic step. Sent as EVAL: the text is the same on every
 * call, so the node's script cache holds it once. */
static const char peek_script[] =
    "local v = redis.call('GET', KEYS[1]) "
    "local t = redis.call('PTTL', KEYS[1]) "
    "local f = 0 "
    "if ARGV[1] == '1' then f = tonumber(redis.call('GET', KEYS[2]) or '0') "
    "end "
    "return {v or '', t, f}";

/* A JSON string: the resource, escaped as every answer escapes it. */
static void put_json_string(struct buf *b, const char *s, size_t n)
{
    char tmp[PROTO_RESOURCE_MAX * 6 + 1];
    size_t k = proto_json_escape(s, n, tmp, sizeof(tmp));
    if (k == 0 && n > 0) {
        buf_fail(b); /* buf.h: a failure is sticky */
        return;
    }
    buf_put(b, "\"", 1);
    buf_put(b, tmp, k);
    buf_put(b, "\"", 1);
}

static void reply(struct call *call, enum proto_err err, const char *msg,
                  const struct buf *extra)
{
    struct response rsp = {0};
    rsp.id = call->req.id_len ? call->req.id : NULL;
    rsp.id_len = call->req.id_len;
    rsp.err = err;
    rsp.message = msg;
    if (extra != NULL) {
        rsp.extra = buf_data(extra);
        rsp.extra_len = buf_len(extra);
    }
    call_done(call, &rsp);
}

/* ---- locks ----------------------------------------------------------- */

/* now: the monotonic clock; wall_ms: the wall clock at the same moment. */
static void lock_json(struct buf *b, const struct lock *l, uint64_t now,
                      int64_t wall_ms, size_t waiters)
{
    int64_t left = l->valid_until_us > now
                       ? (int64_t)((l->valid_until_us - now) / 1000u)
                       : 0;
    uint64_t held = now > l->added_us ? (now - l->added_us) / 1000u : 0;
    buf_str(b, "{\"resource\":");
    put_json_string(b, l->resource, l->resource_len);
    if (l->slot >= 0) {
        buf_printf(b, ",\"permit\":%d,\"permits\":%u", l->slot,
                   (unsigned)l->permits);
    }
    buf_printf(b,
               ",\"ttl_ms\":%u,\"validity_ms\":%lld,\"renew\":%s,"
               "\"held_ms\":%llu,\"since_ms\":%lld",
               (unsigned)l->ttl_ms, (long long)left,
               l->renew ? "true" : "false", (unsigned long long)held,
               (long long)(wall_ms - (int64_t)held));
    int64_t fence;
    if (locks_fence(l, &fence)) {
        buf_printf(b, ",\"fence\":%lld", (long long)fence);
    } else {
        buf_str(b, ",\"fence\":null");
    }
    if (l->owner == NULL) {
        buf_str(b, ",\"owner\":\"http\"");
    } else if (l->owner->has_cred) {
        buf_printf(b,
                   ",\"owner\":{\"conn\":%llu,\"pid\":%d,\"uid\":%u,"
                   "\"gid\":%u}",
                   (unsigned long long)l->owner->conn_id, l->owner->pid,
                   l->owner->uid, l->owner->gid);
    } else {
        buf_printf(b, ",\"owner\":{\"conn\":%llu}",
                   (unsigned long long)l->owner->conn_id);
    }
    buf_printf(b, ",\"waiters\":%zu}", waiters);
}

void inspect_locks(struct lock_table *t, inspect_waiters_fn *waiters,
                   void *priv, struct call *call)
{
    const struct request *req = &call->req;
    struct lock **page = malloc(sizeof(*page) * req->limit);
    if (page == NULL) {
        log_error(NULL, "locks: out of memory");
        reply(call, ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    uint64_t next = 0;
    size_t n = locks_scan(t, req->cursor, req->prefix, req->prefix_len,
                          SCAN_VISIT_MAX, page, req->limit, &next);
    /* since_ms is counted back from the wall clock by held_ms, so the
     * table keeps one clock per lock, and since_ms + held_ms is now. */
    uint64_t now = util_now_us();
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    int64_t wall_ms = (int64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
    struct buf b = {0};
    buf_str(&b, "\"locks\":[");
    for (size_t i = 0; i < n; i++) {
        if (i > 0) {
            buf_str(&b, ",");
        }
        struct lock_name name = locks_name(page[i]);
        lock_json(&b, page[i], now, wall_ms, waiters(&name, priv));
    }
    buf_printf(&b, "],\"count\":%zu,\"total\":%zu", n, locks_count(t));
    if (next != 0) {
        char cur[PROTO_CURSOR_MAX + 1];
        proto_cursor_encode(next, cur);
        buf_printf(&b, ",\"next\":\"%s\"", cur);
    }
    free(page);
    if (buf_failed(&b)) {
        log_error(NULL, "locks: out of memory");
        reply(call, ERR_INTERNAL, "out of memory", NULL);
    } else {
        reply(call, ERR_NONE, NULL, &b);
    }
    buf_free(&b);
}

/* ---- inspect --------------------------------------------------------- */

/* One inspection in flight; owned by its node callbacks, freed by the last
 * one. */
struct peek {
    struct call *call;        /* borrowed until answered */
    struct lock_table *locks; /* borrowed: read at the end */
    inspect_waiters_fn *waiters;
    void *priv;
    int *inflight; /* borrowed: lowered when answered */
    int n_nodes;
    int pending; /* node answers still owed */
    enum redlock_peek peek[REDLOCK_MAX_NODES];
    int64_t pttl[REDLOCK_MAX_NODES];
    int64_t fence[REDLOCK_MAX_NODES]; /* each node's fence counter, -1 not
                                         read */
    bool mine; /* some node holds a token of this daemon's table */
    int refused_node;  /* the lowest node that answered an error, 1-based;
                          0 none */
    char refusal[100]; /* its error text, cut */
};

/* Whether a node's value is a token this daemon holds for resource. */
static bool token_is_ours(struct peek *p, const char *v, size_t n)
{
    if (n != PROTO_TOKEN_LEN || proto_validate_token(v, n) != 0) {
        return false;
    }
    char tok[PROTO_TOKEN_LEN + 1];
    memcpy(tok, v, n);
    tok[n] = '\0';
    struct lock *l = locks_find(p->locks, tok);
    const struct request *req = &p->call->req;
    /* The key read is the lock's: a slot of the same resource is not. */
    return l != NULL && l->slot == SEM_NO_SLOT &&
           l->resource_len == req->resource_len &&
           memcmp(l->resource, req->resource, req->resource_len) == 0;
}

static const char *state_name(enum redlock_state s)
{
    switch (s) {
    case RL_STATE_FREE:
        return "free";
    case RL_STATE_HELD:
        return "held";
    case RL_STATE_DONE:
        return "done";
    default:
        return "no_quorum";
    }
}

static void peek_finish(struct peek *p)
{
    struct call *call = p->call;
    const struct request *req = &call->req;
    struct redlock_inspect d;
    redlock_inspect_decide(p->n_nodes, p->peek, p->pttl, &d);
    int answered = 0;
    for (int i = 0; i < p->n_nodes; i++) {
        answered += p->peek[i] != RL_PEEK_FAILED;
    }
    (*p->inflight)--;
    if (d.state == RL_STATE_NO_QUORUM) {
        char msg[PROTO_MSG_MAX];
        char why[sizeof(p->refusal) + 32] = "";
        if (p->refused_node > 0) {
            /* A node that answered "no" is not slow: say what it said. */
            snprintf(why, sizeof(why), "; node %d refused: %s", p->refused_node,
                     p->refusal);
        }
        snprintf(msg, sizeof(msg),
                 "no state of the resource is on more than %d of %d nodes "
                 "(%d answered, at most %d agreed%s)",
                 p->n_nodes - redlock_quorum(p->n_nodes), p->n_nodes, answered,
                 d.agree, why);
        reply(call, ERR_NO_QUORUM, msg, NULL);
        free(p);
        return;
    }
    struct buf b = {0};
    buf_str(&b, "\"resource\":");
    put_json_string(&b, req->resource, req->resource_len);
    buf_printf(&b,
               ",\"state\":\"%s\",\"agree\":%d,\"answered\":%d,\"nodes\":%d",
               state_name(d.state), d.agree, answered, p->n_nodes);
    if (d.pttl_min >= 0) {
        buf_printf(&b, ",\"pttl_ms\":%lld", (long long)d.pttl_min);
    }
    struct lock_name name = {req->resource, req->resource_len, SEM_NO_SLOT};
    buf_printf(&b, ",\"mine\":%s,\"waiters\":%zu", p->mine ? "true" : "false",
               p->waiters(&name, p->priv));
    if (req->fence) {
        /* Not the largest counter: a minority's may run ahead from
         * rounds lost there, which no quorum's next grant has to pass. */
        buf_printf(&b, ",\"fence\":%lld",
                   (long long)redlock_fence_floor(p->n_nodes, p->fence));
    }
    if (buf_failed(&b)) {
        log_error(NULL, "inspect: out of memory");
        reply(call, ERR_INTERNAL, "out of memory", NULL);
    } else {
        reply(call, ERR_NONE, NULL, &b);
    }
    buf_free(&b);
    free(p);
}

/* Reads {value, pttl, fence} into p for node i; anything else is a failed
 * answer. */
static void peek_record(struct peek *p, int i, const redisReply *r)
{
    struct replyview view;
    int64_t fence = -1;
    const char *v = NULL;
    size_t n = 0;
    const struct redlock_reply *rv = replyview_of(&view, r);
    p->peek[i] = redlock_classify_peek(rv, &p->pttl[i], &fence, &v, &n);
    const struct redlock_reply *e = redlock_reply_error(rv);
    if (e != NULL && (p->refused_node == 0 || i + 1 < p->refused_node)) {
        p->refused_node = i + 1;
        size_t elen;
        const char *why = util_script_error(e->str, e->len, &elen);
        snprintf(p->refusal, sizeof(p->refusal), "%.*s", (int)elen, why);
    }
    if (p->peek[i] == RL_PEEK_HELD && token_is_ours(p, v, n)) {
        p->mine = true;
    }
    p->fence[i] = fence;
}

static void peek_cb(struct node *node, struct redisReply *reply,
                    enum node_status status, void *privdata)
{
    struct peek *p = privdata;
    if (status == NODE_REPLY) {
        peek_record(p, node_index(node), reply);
    }
    if (--p->pending == 0) {
        peek_finish(p);
    }
}

int inspect_resource(struct cluster *c, const struct config *cfg,
                     struct lock_table *t, inspect_waiters_fn *waiters,
                     void *priv, struct call *call, int *inflight)
{
    const struct request *req = &call->req;
    struct peek *p = calloc(1, sizeof(*p));
    size_t plen = strlen(cfg->prefix);
    size_t kcap = plen + SEM_NAME_EXTRA + req->resource_len;
    char *key = malloc(kcap);
    char *fkey = malloc(plen + 6);
    if (p == NULL || key == NULL || fkey == NULL) {
        free(p);
        free(key);
        free(fkey);
        return -1;
    }
    /* The lock's key only, never a slot's (proto/README.md). */
    struct lock_name name = {req->resource, req->resource_len, SEM_NO_SLOT};
    size_t klen = sem_key(cfg->prefix, plen, &name, key, kcap);
    memcpy(fkey, cfg->prefix, plen);
    memcpy(fkey + plen, "fence", 6);
    p->call = call;
    p->locks = t;
    p->waiters = waiters;
    p->priv = priv;
    p->inflight = inflight;
    p->n_nodes = cluster_size(c);
    const char *argv[6] = {"EVAL", peek_script, "2",
                           key,    fkey,        req->fence ? "1" : "0"};
    size_t argvlen[6] = {4, sizeof(peek_script) - 1, 1, klen, plen + 5, 1};
    /* One extra count keeps p alive while sending: a node's callback may
     * run before node_command returns. */
    p->pending = 1;
    (*inflight)++;
    for (int i = 0; i < p->n_nodes; i++) {
        p->peek[i] = RL_PEEK_FAILED;
        p->pttl[i] = -1;
        p->fence[i] = -1;
        if (cluster_node_quarantined(c, i)) {
            continue; /* restarted empty: its "free" proves nothing */
        }
        p->pending++;
        if (node_command(cluster_node(c, i), 6, argv, argvlen, peek_cb, p) !=
            0) {
            p->pending--;
        }
    }
    free(key);
    free(fkey);
    if (--p->pending == 0) {
        peek_finish(p);
    }
    return 0;
}
