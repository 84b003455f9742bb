/* node.c: one Redis node behind one hiredis async connection.
 *
 * Life of a connection:
 *
 *   DOWN --reconnect timer--> CONNECTING --connect cb--> handshake
 *     (AUTH, SELECT, SCRIPT LOAD x n; all with the connect deadline)
 *     --last handshake reply--> UP --drop, stall, error--> DOWN
 *
 * Commands are written with redisAsyncFormattedCommand (we format RESP
 * ourselves, once) and kept in a FIFO in send order. Redis answers in order
 * and every command gets the same timeout, so deadlines grow along the FIFO:
 * one timer armed for the oldest live command serves them all. A command
 * that times out gets its callback at once (NODE_TIMEOUT) and stays in the
 * FIFO, marked done, until hiredis hands back its reply or drops it. */
#include "node.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "config.h"
#include "log.h"
#include "metrics.h"
#include "redlock.h"

/* The Lua scripts. Every script touches only the keys it is given, all
 * under the daemon's prefix. Replies:
 *   acquire:     {1, fence}   set (fence 0 unless asked)
 *                {0, pttl}    held by another token
 *                {2, pttl}    done mark present
 *   release, extend, complete, fence raise: 1 applied, 0 not held.
 *   fence repair: the counter after raising it to at least ARGV[1]. */
static const char *const script_source[SCRIPT__COUNT] = {
    [SCRIPT_ACQUIRE] =
        "local v = redis.call('GET', KEYS[1])\n"
        "if v then\n"
        "  local t = redis.call('PTTL', KEYS[1])\n"
        "  if string.sub(v, 1, 5) == 'done:' then return {2, t} end\n"
        "  return {0, t}\n"
        "end\n"
        "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
        "if ARGV[3] == '1' then\n"
        "  return {1, redis.call('INCR', KEYS[2])}\n"
        "end\n"
        "return {1, 0}\n",
    [SCRIPT_RELEASE] =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
        "  redis.call('DEL', KEYS[1])\n"
        "  if ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], 'r') end\n"
        "  return 1\n"
        "end\n"
        "return 0\n",
    [SCRIPT_EXTEND] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                      "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                      "end\n"
                      "return 0\n",
    [SCRIPT_COMPLETE] =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
        "  redis.call('SET', KEYS[1], 'done:' .. ARGV[1], 'PX', ARGV[2])\n"
        "  if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], 'd') end\n"
        "  return 1\n"
        "end\n"
        "return 0\n",
    [SCRIPT_FENCE_RAISE] =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
        "  local c = tonumber(redis.call('GET', KEYS[2]) or '0')\n"
        "  local t = tonumber(ARGV[2])\n"
        "  if c < t then redis.call('SET', KEYS[2], ARGV[2]) end\n"
        "  return 1\n"
        "end\n"
        "return 0\n",
    [SCRIPT_FENCE_REPAIR] =
        "local c = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
        "local t = tonumber(ARGV[1])\n"
        "if c < t then redis.call('SET', KEYS[1], ARGV[1]) return t end\n"
        "return c\n",
};

static const int script_numkeys[SCRIPT__COUNT] = {
    [SCRIPT_ACQUIRE] = 2,  [SCRIPT_RELEASE] = 1,     [SCRIPT_EXTEND] = 1,
    [SCRIPT_COMPLETE] = 1, [SCRIPT_FENCE_RAISE] = 2, [SCRIPT_FENCE_REPAIR] = 1,
};

#define HANDSHAKE_INFO (-2) /* handshake_cb tag of INFO server */
#define SHA_LEN 40

/* One command in flight. Owned by its node: taken from the node's free list
 * on send, returned there once hiredis has handed back its reply. */
struct node_cmd {
    struct node *node; /* borrowed: the node it was sent on */
    node_reply_fn *cb; /* NULL for internal handshake commands */
    void *privdata;
    uint64_t sent_us;
    uint64_t deadline_us;
    bool done;                    /* the user callback already ran (timeout) */
    int script;                   /* enum node_script, or -1 */
    const struct node_prep *prep; /* borrowed: the script command, kept
                                     for an EVAL retry on NOSCRIPT */
    struct node_prep *owned_prep; /* node_script(): ours to free */
    struct node_cmd *prev, *next; /* the node's FIFO or free list */
};

/* The SHA1 of each script as the first node reported it; every node
 * computes the same, so one prepared EVALSHA serves them all. */
static char known_sha[SCRIPT__COUNT][SHA_LEN + 1];

struct node {
    int index;
    const struct node_addr *addr; /* borrowed: owned by the config */
    struct node_options opts;
    struct event_base *base; /* borrowed */
    redisAsyncContext *ac;   /* owned by hiredis once connected */
    enum node_state state;
    node_state_fn *state_cb;
    void *state_priv;
    struct event *conn_timer; /* reconnect delay / connect deadline */
    struct event *cmd_timer;  /* deadline of the oldest live command */
    struct event *ping_timer; /* heartbeat while idle */
    uint64_t last_send_us;    /* when a command was last written */
    uint64_t last_reply_us;   /* when a reply last arrived */
    unsigned attempt;         /* failed connects in a row */
    int handshake_left;       /* replies still expected before UP */
    bool handshake_failed;
    char sha[SCRIPT__COUNT][SHA_LEN + 1];
    struct node_cmd *head, *tail; /* FIFO of commands in hiredis */
    struct node_cmd *live;        /* first command not yet timed out */
    int pending;                  /* commands in the FIFO */
    struct node_cmd *free_cmds;
    int free_count;
    char last_error[160];
    double rtt_ms;
    uint64_t reconnects;
    bool was_up;          /* has been up at least once */
    bool reloading;       /* SCRIPT LOAD after a NOSCRIPT is in flight */
    char run_id[48];      /* INFO server run_id of this connection */
    char prev_run_id[48]; /* run_id of the previous connection */
    uint64_t started_us;  /* server start, monotonic estimate from
                             INFO uptime (1 s resolution), 0 unknown */
    char subject[48];     /* "node 2" for log lines */
};

static void node_connect(struct node *node);
static void node_drop(struct node *node, const char *why);

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

const char *node_state_name(enum node_state state)
{
    switch (state) {
    case NODE_DOWN:
        return "down";
    case NODE_CONNECTING:
        return "connecting";
    case NODE_UP:
        return "up";
    case NODE_CLOSED:
        return "closed";
    }
    return "unknown";
}

static void node_set_state(struct node *node, enum node_state state)
{
    enum node_state old = node->state;
    switch (state) {
    case NODE_DOWN:
    case NODE_CONNECTING:
    case NODE_UP:
    case NODE_CLOSED:
        break;
    default:
        abort();
    }
    if (old == state) {
        return;
    }
    node->state = state;
    if (state == NODE_UP) {
        node->attempt = 0;
        if (node->was_up) {
            node->reconnects++;
            METRIC_INC(node_reconnects);
        }
        node->was_up = true;
        METRIC_ADD(nodes_up, 1);
        log_info(node->subject, "%s: up", node->addr->display);
    } else if (old == NODE_UP) {
        METRIC_ADD(nodes_up, -1);
        log_warn(node->subject, "%s: down: %s", node->addr->display,
                 node->last_error[0] ? node->last_error : "closed");
    }
    if (node->state_cb != NULL && state != NODE_CLOSED) {
        node->state_cb(node, state, node->state_priv);
    }
}

static void node_set_error(struct node *node, const char *fmt, const char *s)
{
    snprintf(node->last_error, sizeof(node->last_error), fmt, s ? s : "");
}

/* ---- command pool and FIFO ------------------------------------------- */

static struct node_cmd *cmd_get(struct node *node)
{
    struct node_cmd *cmd = node->free_cmds;
    if (cmd != NULL) {
        node->free_cmds = cmd->next;
        node->free_count--;
    } else {
        cmd = malloc(sizeof(*cmd));
        if (cmd == NULL) {
            return NULL;
        }
    }
    cmd->node = node;
    cmd->cb = NULL;
    cmd->privdata = NULL;
    cmd->done = false;
    cmd->script = -1;
    cmd->prep = NULL;
    cmd->owned_prep = NULL;
    cmd->prev = cmd->next = NULL;
    return cmd;
}

static void cmd_put(struct node *node, struct node_cmd *cmd)
{
    if (cmd->owned_prep != NULL) {
        node_prep_free(cmd->owned_prep);
        free(cmd->owned_prep);
        cmd->owned_prep = NULL;
    }
    cmd->prep = NULL;
    /* Keep a bounded pool: enough for a busy node, not a leak after a
     * burst. */
    if (node->free_count >= 4096 || node->state == NODE_CLOSED) {
        free(cmd);
        return;
    }
    cmd->next = node->free_cmds;
    node->free_cmds = cmd;
    node->free_count++;
}

static void fifo_push(struct node *node, struct node_cmd *cmd)
{
    cmd->next = NULL;
    cmd->prev = node->tail;
    if (node->tail != NULL) {
        node->tail->next = cmd;
    } else {
        node->head = cmd;
    }
    node->tail = cmd;
    if (node->live == NULL) {
        node->live = cmd;
    }
    node->pending++;
}

static void fifo_unlink(struct node *node, struct node_cmd *cmd)
{
    if (node->live == cmd) {
        node->live = cmd->next;
    }
    if (cmd->prev != NULL) {
        cmd->prev->next = cmd->next;
    } else {
        node->head = cmd->next;
    }
    if (cmd->next != NULL) {
        cmd->next->prev = cmd->prev;
    } else {
        node->tail = cmd->prev;
    }
    cmd->prev = cmd->next = NULL;
    node->pending--;
}

static void cmd_timer_arm(struct node *node)
{
    if (node->live == NULL ||
        event_pending(node->cmd_timer, EV_TIMEOUT, NULL)) {
        return;
    }
    uint64_t now = now_us();
    uint64_t wait =
        node->live->deadline_us > now ? node->live->deadline_us - now : 0;
    struct timeval tv = {(time_t)(wait / 1000000u),
                         (suseconds_t)(wait % 1000000u)};
    evtimer_add(node->cmd_timer, &tv);
}

/* The deadline timer: time out every live command past its deadline, and
 * drop the connection when the oldest command has been stuck for stall_ms
 * (a paused or wedged server), so the node shows as down. */
static void cmd_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct node *node = arg;
    uint64_t now = now_us();
    while (node->live != NULL && node->live->deadline_us <= now) {
        struct node_cmd *cmd = node->live;
        node->live = cmd->next;
        if (!cmd->done) {
            cmd->done = true;
            if (cmd->cb != NULL) {
                cmd->cb(node, NULL, NODE_TIMEOUT, cmd->privdata);
            }
        }
    }
    /* Stalled means no reply at all for stall_ms while commands wait; a
     * deep backlog that is still being answered is slow, not stuck. */
    uint64_t since = node->head != NULL ? node->head->sent_us : now;
    if (node->last_reply_us > since) {
        since = node->last_reply_us;
    }
    if (node->head != NULL && node->state == NODE_UP &&
        now - since >= (uint64_t)node->opts.stall_ms * 1000u) {
        node_set_error(node, "no reply for %s", "the stall limit");
        node_drop(node, "stalled");
        return;
    }
    if (node->live == NULL && node->head != NULL) {
        /* Only timed-out commands remain: check again for the stall. */
        struct timeval tv = {(time_t)(node->opts.timeout_ms / 1000),
                             (suseconds_t)(node->opts.timeout_ms % 1000) *
                                 1000};
        evtimer_add(node->cmd_timer, &tv);
        return;
    }
    cmd_timer_arm(node);
}

static int node_send_argv(struct node *node, int argc, const char **argv,
                          const size_t *argvlen, node_reply_fn *cb,
                          void *privdata, int timeout_ms);

static void reload_cb(struct node *node, struct redisReply *reply,
                      enum node_status status, void *privdata)
{
    (void)privdata;
    node->reloading = false;
    if (status != NODE_REPLY || reply->type == REDIS_REPLY_ERROR) {
        log_warn(node->subject, "SCRIPT LOAD after NOSCRIPT failed");
    }
}

/* One SCRIPT LOAD per script; the SHA1s are those already known. */
static void scripts_reload(struct node *node)
{
    node->reloading = true;
    for (int i = 0; i < SCRIPT__COUNT; i++) {
        const char *argv[3] = {"SCRIPT", "LOAD", script_source[i]};
        size_t lens[3] = {6, 4, strlen(script_source[i])};
        (void)node_send_argv(node, 3, argv, lens,
                             i == SCRIPT__COUNT - 1 ? reload_cb : NULL, NULL,
                             node->opts.timeout_ms);
    }
}

/* hiredis reply callback: r is NULL when the connection is going away. */
static void node_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    struct node_cmd *cmd = privdata;
    struct node *node = cmd->node;
    redisReply *reply = r;
    uint64_t now = now_us();

    if (reply != NULL && cmd->prep != NULL &&
        reply->type == REDIS_REPLY_ERROR &&
        strncmp(reply->str, "NOSCRIPT", 8) == 0 && !cmd->done &&
        node->ac != NULL) {
        /* The server lost its script cache (SCRIPT FLUSH): send the same
         * arguments with the script body, keeping the caller's callback. */
        const struct node_prep *pp = cmd->prep;
        const char *src = script_source[cmd->script];
        size_t src_len = strlen(src);
        char head[64];
        int hl = snprintf(head, sizeof(head), "*%d\r\n$4\r\nEVAL\r\n$%zu\r\n",
                          pp->argc + 3, src_len);
        const char *rest_body = pp->buf + pp->rest_off;
        size_t rest_body_len = pp->len - pp->rest_off;
        size_t total = (size_t)hl + src_len + 2 + rest_body_len;
        char *buf = malloc(total + 1);
        if (buf != NULL) {
            memcpy(buf, head, (size_t)hl);
            memcpy(buf + hl, src, src_len);
            memcpy(buf + hl + src_len, "\r\n", 2);
            memcpy(buf + hl + src_len + 2, rest_body, rest_body_len);
            buf[total] = '\0';
            fifo_unlink(node, cmd);
            cmd->sent_us = now;
            cmd->deadline_us = now + (uint64_t)node->opts.timeout_ms * 1000u;
            fifo_push(node, cmd);
            int rc = redisAsyncFormattedCommand(node->ac, node_reply_cb, cmd,
                                                buf, total);
            free(buf);
            if (rc == REDIS_OK) {
                if (!node->reloading) {
                    /* Load the scripts again so that later commands need
                     * no second round trip. */
                    log_warn(node->subject,
                             "NOSCRIPT: resent as EVAL; reloading scripts");
                    scripts_reload(node);
                }
                cmd_timer_arm(node);
                return;
            }
        }
    }

    fifo_unlink(node, cmd);
    if (reply != NULL) {
        double rtt = (double)(now - cmd->sent_us) / 1000.0;
        node->rtt_ms = rtt;
        node->last_reply_us = now;
        metrics_observe_node(node->index, now - cmd->sent_us);
    }
    if (!cmd->done) {
        cmd->done = true;
        if (cmd->cb != NULL) {
            cmd->cb(node, reply, reply != NULL ? NODE_REPLY : NODE_DISCONNECTED,
                    cmd->privdata);
        }
    }
    cmd_put(node, cmd);
    if (node->head == NULL && node->cmd_timer != NULL) {
        evtimer_del(node->cmd_timer);
    }
}

/* Sends a formatted command; the caller has filled cmd's callback. buf must
 * have a readable byte at buf[len] (a NUL): hiredis 0.14 peeks one byte past
 * the first argument when looking for SUBSCRIBE, past the end for PING. */
static int node_write(struct node *node, struct node_cmd *cmd, const char *buf,
                      size_t len, int timeout_ms)
{
    uint64_t now = now_us();
    node->last_send_us = now;
    cmd->sent_us = now;
    cmd->deadline_us = now + (uint64_t)timeout_ms * 1000u;
    fifo_push(node, cmd);
    if (redisAsyncFormattedCommand(node->ac, node_reply_cb, cmd, buf, len) !=
        REDIS_OK) {
        fifo_unlink(node, cmd);
        cmd_put(node, cmd);
        return -1;
    }
    cmd_timer_arm(node);
    return 0;
}

/* ---- RESP formatting --------------------------------------------------- */

/* A growable byte buffer that starts on the stack (or in a prep). */
struct resp {
    char *buf;
    size_t len, cap;
    char *stack; /* the initial buffer, not to be freed */
    bool failed;
};

static void resp_init(struct resp *r, char *stack, size_t cap)
{
    r->buf = r->stack = stack;
    r->len = 0;
    r->cap = cap;
    r->failed = false;
}

static char *resp_room(struct resp *r, size_t more)
{
    if (r->failed) {
        return NULL;
    }
    if (r->len + more > r->cap) {
        size_t cap = r->cap * 2;
        while (cap < r->len + more) {
            cap *= 2;
        }
        char *nb = r->buf == r->stack ? malloc(cap) : realloc(r->buf, cap);
        if (nb == NULL) {
            r->failed = true;
            return NULL;
        }
        if (r->buf == r->stack) {
            memcpy(nb, r->stack, r->len);
        }
        r->buf = nb;
        r->cap = cap;
    }
    return r->buf + r->len;
}

static void resp_raw(struct resp *r, const char *s, size_t n)
{
    char *p = resp_room(r, n);
    if (p != NULL) {
        memcpy(p, s, n);
        r->len += n;
    }
}

/* "<kind><n>\r\n" without printf: this runs for every argument of every
 * command on every node. */
static void resp_header(struct resp *r, char kind, size_t n)
{
    char tmp[24];
    char *end = tmp + sizeof(tmp);
    char *p = end;
    *--p = '\n';
    *--p = '\r';
    do {
        *--p = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    *--p = kind;
    resp_raw(r, p, (size_t)(end - p));
}

static void resp_bulk(struct resp *r, const char *s, size_t n)
{
    resp_header(r, '$', n);
    resp_raw(r, s, n);
    resp_raw(r, "\r\n", 2);
}

/* ---- public send API --------------------------------------------------- */

static bool node_accepts(const struct node *node)
{
    return node->state == NODE_UP && node->ac != NULL &&
           node->pending < node->opts.max_pending;
}

int node_prepare(struct node_prep *p, enum node_script script, int argc,
                 const char **argv, const size_t *argvlen)
{
    static const char numkeys[] = "0123456789";
    p->script = script;
    p->argc = argc;
    p->buf = NULL;
    if (known_sha[script][0] == '\0') {
        return -1; /* no node has loaded the scripts yet */
    }
    struct resp r;
    resp_init(&r, p->inline_buf, sizeof(p->inline_buf));
    resp_header(&r, '*', (size_t)argc + 3);
    resp_bulk(&r, "EVALSHA", 7);
    resp_bulk(&r, known_sha[script], SHA_LEN);
    p->rest_off = r.len;
    resp_bulk(&r, &numkeys[script_numkeys[script]], 1);
    for (int i = 0; i < argc; i++) {
        resp_bulk(&r, argv[i], argvlen[i]);
    }
    resp_raw(&r, "", 1); /* the NUL hiredis may peek at */
    if (r.failed) {
        if (r.buf != r.stack) {
            free(r.buf);
        }
        return -1;
    }
    p->buf = r.buf;
    p->len = r.len - 1;
    return 0;
}

void node_prep_free(struct node_prep *p)
{
    if (p->buf != NULL && p->buf != p->inline_buf) {
        free(p->buf);
    }
    p->buf = NULL;
}

int node_send_prepared(struct node *node, const struct node_prep *p,
                       node_reply_fn *cb, void *privdata)
{
    if (!node_accepts(node) || p->buf == NULL ||
        strcmp(node->sha[p->script], known_sha[p->script]) != 0) {
        return -1;
    }
    struct node_cmd *cmd = cmd_get(node);
    if (cmd == NULL) {
        return -1;
    }
    cmd->cb = cb;
    cmd->privdata = privdata;
    cmd->script = (int)p->script;
    cmd->prep = p;
    return node_write(node, cmd, p->buf, p->len, node->opts.timeout_ms);
}

int node_script(struct node *node, enum node_script script, int argc,
                const char **argv, const size_t *argvlen, node_reply_fn *cb,
                void *privdata)
{
    if (!node_accepts(node)) {
        return -1;
    }
    struct node_prep *p = malloc(sizeof(*p));
    if (p == NULL || node_prepare(p, script, argc, argv, argvlen) != 0) {
        free(p);
        return -1;
    }
    struct node_cmd *cmd = cmd_get(node);
    if (cmd == NULL) {
        node_prep_free(p);
        free(p);
        return -1;
    }
    cmd->cb = cb;
    cmd->privdata = privdata;
    cmd->script = (int)script;
    cmd->prep = p;
    cmd->owned_prep = p; /* freed with the command */
    return node_write(node, cmd, p->buf, p->len, node->opts.timeout_ms);
}

static int node_send_argv(struct node *node, int argc, const char **argv,
                          const size_t *argvlen, node_reply_fn *cb,
                          void *privdata, int timeout_ms)
{
    struct node_cmd *cmd = cmd_get(node);
    if (cmd == NULL) {
        return -1;
    }
    cmd->cb = cb;
    cmd->privdata = privdata;
    char stack[512];
    struct resp full;
    resp_init(&full, stack, sizeof(stack));
    resp_header(&full, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        resp_bulk(&full, argv[i], argvlen[i]);
    }
    int rc = -1;
    resp_raw(&full, "", 1); /* the NUL hiredis may peek at */
    if (!full.failed) {
        rc = node_write(node, cmd, full.buf, full.len - 1, timeout_ms);
    } else {
        cmd_put(node, cmd);
    }
    if (full.buf != full.stack) {
        free(full.buf);
    }
    return rc;
}

int node_command(struct node *node, int argc, const char **argv,
                 const size_t *argvlen, node_reply_fn *cb, void *privdata)
{
    if (!node_accepts(node)) {
        return -1;
    }
    return node_send_argv(node, argc, argv, argvlen, cb, privdata,
                          node->opts.timeout_ms);
}

/* ---- reply objects ------------------------------------------------------- */

/* hiredis allocates every reply object (an acquire answer is three) and
 * frees it after the callback: at tens of thousands of rounds a second
 * that was a fifth of the daemon's instructions. These functions build the
 * same redisReply shapes from a free list; small arrays carry their element
 * vector inline. Single-threaded, like the rest of the daemon. */
#define REPLY_INLINE 2
#define REPLY_POOL_MAX 8192

struct pooled_reply {
    redisReply r;                  /* first: cast from redisReply * */
    redisReply *inl[REPLY_INLINE]; /* element vector for small arrays */
    struct pooled_reply *next_free;
};

static struct pooled_reply *reply_pool;
static int reply_pool_len;

static redisReply *reply_new(const redisReadTask *task, int type)
{
    struct pooled_reply *p = reply_pool;
    if (p != NULL) {
        reply_pool = p->next_free;
        reply_pool_len--;
    } else {
        p = malloc(sizeof(*p));
        if (p == NULL) {
            return NULL;
        }
    }
    memset(&p->r, 0, sizeof(p->r));
    p->r.type = type;
    if (task->parent != NULL) {
        redisReply *parent = task->parent->obj;
        parent->element[task->idx] = &p->r;
    }
    return &p->r;
}

static void reply_free(void *obj)
{
    redisReply *r = obj;
    if (r == NULL) {
        return;
    }
    struct pooled_reply *p = (struct pooled_reply *)r;
    if (r->type == REDIS_REPLY_ARRAY && r->element != NULL) {
        for (size_t i = 0; i < r->elements; i++) {
            reply_free(r->element[i]);
        }
        if (r->element != p->inl) {
            free(r->element);
        }
    } else if (r->str != NULL) {
        free(r->str);
    }
    if (reply_pool_len < REPLY_POOL_MAX) {
        p->next_free = reply_pool;
        reply_pool = p;
        reply_pool_len++;
    } else {
        free(p);
    }
}

static void *reply_string(const redisReadTask *task, char *str, size_t len)
{
    char *copy = malloc(len + 1);
    if (copy == NULL) {
        return NULL;
    }
    memcpy(copy, str, len);
    copy[len] = '\0';
    redisReply *r = reply_new(task, task->type);
    if (r == NULL) {
        free(copy);
        return NULL;
    }
    r->str = copy;
    r->len = len;
    return r;
}

static void *reply_array(const redisReadTask *task, int elements)
{
    redisReply *r = reply_new(task, REDIS_REPLY_ARRAY);
    if (r == NULL) {
        return NULL;
    }
    if (elements > 0) {
        struct pooled_reply *p = (struct pooled_reply *)r;
        if (elements <= REPLY_INLINE) {
            p->inl[0] = p->inl[1] = NULL;
            r->element = p->inl;
        } else {
            r->element = calloc((size_t)elements, sizeof(redisReply *));
            if (r->element == NULL) {
                r->type = REDIS_REPLY_NIL; /* nothing to free below */
                reply_free(r);
                return NULL;
            }
        }
    }
    r->elements = (size_t)elements;
    return r;
}

static void *reply_integer(const redisReadTask *task, long long value)
{
    redisReply *r = reply_new(task, REDIS_REPLY_INTEGER);
    if (r != NULL) {
        r->integer = value;
    }
    return r;
}

static void *reply_nil(const redisReadTask *task)
{
    return reply_new(task, REDIS_REPLY_NIL);
}

static redisReplyObjectFunctions pooled_reply_fns = {
    reply_string, reply_array, reply_integer, reply_nil, reply_free,
};

/* ---- heartbeat ----------------------------------------------------------- */

#define PING_INTERVAL_MS 1000

static void ping_cb(struct node *node, struct redisReply *reply,
                    enum node_status status, void *privdata)
{
    (void)node;
    (void)reply;
    (void)status;
    (void)privdata;
}

/* An idle node gets a PING every second, so a frozen or half-dead server is
 * noticed (timeouts, then the stall rule) without waiting for traffic, and
 * health shows a fresh round trip. */
static void ping_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct node *node = arg;
    if (node->state == NODE_UP &&
        now_us() - node->last_send_us >= PING_INTERVAL_MS * 1000u) {
        const char *argv[1] = {"PING"};
        size_t lens[1] = {4};
        (void)node_command(node, 1, argv, lens, ping_cb, NULL);
    }
}

/* ---- connection lifecycle ---------------------------------------------- */

static void node_schedule_reconnect(struct node *node)
{
    uint32_t delay = redlock_backoff_ms(
        node->attempt, (uint32_t)node->opts.backoff_base_ms,
        (uint32_t)node->opts.backoff_cap_ms, (double)random() / RAND_MAX);
    node->attempt++;
    struct timeval tv = {(time_t)(delay / 1000),
                         (suseconds_t)(delay % 1000) * 1000};
    evtimer_add(node->conn_timer, &tv);
}

/* Handshake replies: any error fails the connection. */
static void handshake_cb(struct node *node, struct redisReply *reply,
                         enum node_status status, void *privdata)
{
    int script = (int)(intptr_t)privdata;
    if (node->state != NODE_CONNECTING) {
        return;
    }
    if (status != NODE_REPLY || reply->type == REDIS_REPLY_ERROR) {
        if (!node->handshake_failed) {
            node->handshake_failed = true;
            node_set_error(node, "handshake failed: %s",
                           status == NODE_REPLY     ? reply->str
                           : status == NODE_TIMEOUT ? "timeout"
                                                    : "disconnected");
            log_warn(node->subject, "%s: %s", node->addr->display,
                     node->last_error);
            node_drop(node, "handshake");
        }
        return;
    }
    if (script == HANDSHAKE_INFO) {
        /* The server's run_id: a new one means the node restarted and may
         * have lost every key (restart quarantine, in cluster.c). */
        const char *p = reply->type == REDIS_REPLY_STRING
                            ? strstr(reply->str, "run_id:")
                            : NULL;
        memcpy(node->prev_run_id, node->run_id, sizeof(node->run_id));
        node->run_id[0] = '\0';
        if (p != NULL) {
            p += 7;
            size_t n = strcspn(p, "\r\n");
            if (n >= sizeof(node->run_id)) {
                n = sizeof(node->run_id) - 1;
            }
            memcpy(node->run_id, p, n);
            node->run_id[n] = '\0';
        }
        const char *up = reply->type == REDIS_REPLY_STRING
                             ? strstr(reply->str, "uptime_in_seconds:")
                             : NULL;
        node->started_us = 0;
        if (up != NULL) {
            uint64_t secs = strtoull(up + 18, NULL, 10);
            uint64_t now = now_us();
            node->started_us =
                secs * 1000000u < now ? now - secs * 1000000u : 1;
        }
    } else if (script >= 0 && script < SCRIPT__COUNT) {
        if (reply->type != REDIS_REPLY_STRING || reply->len != SHA_LEN) {
            node->handshake_failed = true;
            node_set_error(node, "SCRIPT LOAD: unexpected reply%s", "");
            node_drop(node, "handshake");
            return;
        }
        memcpy(node->sha[script], reply->str, SHA_LEN);
        node->sha[script][SHA_LEN] = '\0';
        if (known_sha[script][0] == '\0') {
            memcpy(known_sha[script], node->sha[script], SHA_LEN + 1);
        } else if (strcmp(known_sha[script], node->sha[script]) != 0) {
            log_error(node->subject,
                      "SCRIPT LOAD returned an unexpected SHA1 "
                      "for script %d",
                      script);
        }
    }
    if (--node->handshake_left == 0) {
        evtimer_del(node->conn_timer);
        node->last_error[0] = '\0';
        node_set_state(node, NODE_UP);
    }
}

static void handshake_send(struct node *node, int argc, const char **argv,
                           size_t *lens, int script)
{
    for (int i = 0; i < argc; i++) {
        lens[i] = strlen(argv[i]);
    }
    if (node_send_argv(node, argc, argv, lens, handshake_cb,
                       (void *)(intptr_t)script,
                       node->opts.connect_timeout_ms) == 0) {
        node->handshake_left++;
    } else {
        node->handshake_failed = true;
    }
}

static void node_connect_cb(const redisAsyncContext *ac, int status)
{
    struct node *node = ac->data;
    if (status != REDIS_OK) {
        /* hiredis frees the context after this callback. */
        node_set_error(node, "connect: %s", ac->errstr);
        log_debug(node->subject, "%s: %s", node->addr->display,
                  node->last_error);
        node->ac = NULL;
        evtimer_del(node->conn_timer);
        node_set_state(node, NODE_DOWN);
        node_schedule_reconnect(node);
        return;
    }
    const char *argv[4];
    size_t lens[4];
    node->handshake_left = 0;
    node->handshake_failed = false;
    if (node->addr->password != NULL) {
        int argc = 0;
        argv[argc++] = "AUTH";
        if (node->addr->user != NULL && node->addr->user[0] != '\0') {
            argv[argc++] = node->addr->user;
        }
        argv[argc++] = node->addr->password;
        handshake_send(node, argc, argv, lens, -1);
    }
    if (node->addr->db > 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", node->addr->db);
        argv[0] = "SELECT";
        argv[1] = db;
        handshake_send(node, 2, argv, lens, -1);
    }
    argv[0] = "INFO";
    argv[1] = "server";
    handshake_send(node, 2, argv, lens, HANDSHAKE_INFO);
    for (int s = 0; s < SCRIPT__COUNT; s++) {
        argv[0] = "SCRIPT";
        argv[1] = "LOAD";
        argv[2] = script_source[s];
        handshake_send(node, 3, argv, lens, s);
    }
    if (node->handshake_failed) {
        /* Not dropped here: we are inside hiredis's connect handler. The
         * connect deadline (conn_timer) drops the connection instead. */
        node_set_error(node, "handshake: cannot queue commands%s", "");
    }
}

static void node_disconnect_cb(const redisAsyncContext *ac, int status)
{
    struct node *node = ac->data;
    /* hiredis frees the context after this callback. */
    node->ac = NULL;
    if (node->state == NODE_CLOSED) {
        return;
    }
    if (status != REDIS_OK && node->last_error[0] == '\0') {
        node_set_error(node, "connection lost: %s", ac->errstr);
    } else if (node->last_error[0] == '\0') {
        node_set_error(node, "connection closed%s", "");
    }
    evtimer_del(node->conn_timer);
    node_set_state(node, NODE_DOWN);
    node_schedule_reconnect(node);
}

/* Drops the connection; pending callbacks run with NODE_DISCONNECTED and
 * node_disconnect_cb schedules the reconnect. */
static void node_drop(struct node *node, const char *why)
{
    log_debug(node->subject, "%s: dropping connection (%s)",
              node->addr->display, why);
    if (node->ac != NULL) {
        /* Mark down first: no new command may join a dying connection. */
        if (node->state == NODE_UP) {
            node_set_state(node, NODE_DOWN);
        }
        redisAsyncContext *ac = node->ac;
        /* redisAsyncFree runs every pending callback, then the disconnect
         * callback (only for connections that were established). */
        redisAsyncFree(ac);
        if (node->ac != NULL) {
            /* Not yet connected: no disconnect callback comes. */
            node->ac = NULL;
            if (node->state != NODE_CLOSED) {
                evtimer_del(node->conn_timer);
                node_set_state(node, NODE_DOWN);
                node_schedule_reconnect(node);
            }
        }
    }
}

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct node *node = arg;
    if (node->state == NODE_CONNECTING) {
        if (node->last_error[0] == '\0') {
            node_set_error(node, "connect: timed out%s", "");
        }
        node_set_error(node, "connect or handshake timed out%s", "");
        node_drop(node, "connect timeout");
        return;
    }
    if (node->state == NODE_DOWN) {
        node_connect(node);
    }
}

static void node_connect(struct node *node)
{
    const struct node_addr *a = node->addr;
    redisAsyncContext *ac = a->kind == NODE_ADDR_UNIX
                                ? redisAsyncConnectUnix(a->path)
                                : redisAsyncConnect(a->host, a->port);
    if (ac == NULL || ac->err) {
        node_set_error(node, "connect: %s", ac ? ac->errstr : "out of memory");
        if (ac != NULL) {
            redisAsyncFree(ac);
        }
        node_set_state(node, NODE_DOWN);
        node_schedule_reconnect(node);
        return;
    }
    ac->data = node;
    node->ac = ac;
    ac->c.reader->fn = &pooled_reply_fns;
    if (redisLibeventAttach(ac, node->base) != REDIS_OK) {
        node_set_error(node, "connect: cannot attach to event loop%s", "");
        redisAsyncFree(ac);
        node->ac = NULL;
        node_set_state(node, NODE_DOWN);
        node_schedule_reconnect(node);
        return;
    }
    redisAsyncSetConnectCallback(ac, node_connect_cb);
    redisAsyncSetDisconnectCallback(ac, node_disconnect_cb);
    node_set_state(node, NODE_CONNECTING);
    struct timeval tv = {(time_t)(node->opts.connect_timeout_ms / 1000),
                         (suseconds_t)(node->opts.connect_timeout_ms % 1000) *
                             1000};
    evtimer_add(node->conn_timer, &tv);
}

struct node *node_create(struct event_base *base, int index,
                         const struct node_addr *addr,
                         const struct node_options *opts,
                         node_state_fn *state_cb, void *state_priv)
{
    struct node *node = calloc(1, sizeof(*node));
    if (node == NULL) {
        return NULL;
    }
    node->index = index;
    node->addr = addr;
    node->opts = *opts;
    node->base = base;
    node->state = NODE_DOWN;
    node->state_cb = state_cb;
    node->state_priv = state_priv;
    node->rtt_ms = -1;
    snprintf(node->subject, sizeof(node->subject), "node %d", index + 1);
    node->conn_timer = evtimer_new(base, conn_timer_cb, node);
    node->cmd_timer = evtimer_new(base, cmd_timer_cb, node);
    node->ping_timer = event_new(base, -1, EV_PERSIST, ping_timer_cb, node);
    if (node->conn_timer == NULL || node->cmd_timer == NULL ||
        node->ping_timer == NULL) {
        node_destroy(node);
        return NULL;
    }
    struct timeval every = {PING_INTERVAL_MS / 1000,
                            (PING_INTERVAL_MS % 1000) * 1000};
    event_add(node->ping_timer, &every);
    node_connect(node);
    return node;
}

void node_destroy(struct node *node)
{
    if (node == NULL) {
        return;
    }
    if (node->state == NODE_UP) {
        METRIC_ADD(nodes_up, -1);
    }
    node->state = NODE_CLOSED;
    if (node->ac != NULL) {
        redisAsyncContext *ac = node->ac;
        redisAsyncFree(ac);
        node->ac = NULL;
    }
    if (node->conn_timer != NULL) {
        event_free(node->conn_timer);
    }
    if (node->cmd_timer != NULL) {
        event_free(node->cmd_timer);
    }
    if (node->ping_timer != NULL) {
        event_free(node->ping_timer);
    }
    while (node->free_cmds != NULL) {
        struct node_cmd *c = node->free_cmds;
        node->free_cmds = c->next;
        free(c);
    }
    free(node);
}

bool node_is_up(const struct node *node)
{
    return node->state == NODE_UP;
}

enum node_state node_get_state(const struct node *node)
{
    return node->state;
}

int node_index(const struct node *node)
{
    return node->index;
}

int node_pending(const struct node *node)
{
    return node->pending;
}

const char *node_display(const struct node *node)
{
    return node->addr->display;
}

const char *node_last_error(const struct node *node)
{
    return node->last_error;
}

double node_rtt_ms(const struct node *node)
{
    return node->rtt_ms;
}

const char *node_run_id(const struct node *node)
{
    return node->run_id;
}

bool node_restarted(const struct node *node)
{
    return node->prev_run_id[0] != '\0' && node->run_id[0] != '\0' &&
           strcmp(node->prev_run_id, node->run_id) != 0;
}

bool node_first_connection(const struct node *node)
{
    return node->prev_run_id[0] == '\0' && node->run_id[0] != '\0';
}

uint64_t node_started_us(const struct node *node)
{
    return node->started_us;
}

bool node_is_persistent(const struct node *node)
{
    return node->addr->persistent;
}

uint64_t node_reconnects(const struct node *node)
{
    return node->reconnects;
}
