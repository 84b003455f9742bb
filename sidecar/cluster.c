/* cluster.c: Redlock operations across all nodes.
 *
 * Each operation (struct cluster_op) sends one script to every up node in
 * the same loop turn, so node.c writes them all in one write per node, and
 * feeds the answers to a redlock_round. The caller hears back once, as soon
 * as the round is decided; the op itself lives until every node it was sent
 * to has answered or timed out, rollbacks included. Each script is
 * formatted once per operation (struct node_prep) and the same bytes go to
 * every node. */
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "config.h"
#include "log.h"
#include "metrics.h"
#include "node.h"
#include "redlock.h"
#include "tls.h"

#define KEY_INLINE 600 /* prefix (<= 64) + "lock:" + resource (<= 512) */

enum op_kind {
    OPK_ACQUIRE,
    OPK_EXTEND,
    OPK_RELEASE,
    OPK_COMPLETE,
};

enum op_phase {
    PHASE_MAIN = 0,  /* the operation's own script on every node */
    PHASE_FENCE = 1, /* acquire with fence: writing the maximum back */
};

/* One operation in flight. Owned by the cluster (pooled); freed when it has
 * answered its caller and every node command it sent has called back. */
struct cluster_op {
    struct cluster *c;
    enum op_kind kind;
    enum op_phase phase;
    struct redlock_round round;
    struct redlock_round fence_round;
    cluster_done_fn *cb;
    void *priv;
    bool answered;
    int outstanding; /* node callbacks still due */
    bool fence;
    int64_t fence_written; /* the value the write-back raises to */
    uint32_t ttl_ms;
    char token[PROTO_TOKEN_LEN + 1];
    char key[KEY_INLINE]; /* <prefix>lock:<resource> */
    size_t key_len;
    char channel[KEY_INLINE + 8]; /* <prefix>wake:<resource> */
    size_t channel_len;
    struct node_prep prep_main;     /* the op's script, for every node */
    struct node_prep prep_fence;    /* fence write-back */
    struct node_prep prep_rollback; /* compare-and-delete after a loss */
    struct event *deadline_ev;      /* owned (kept across pool reuse): a round
                                       that cannot win any more ends early */
    bool dispatched;                /* counted in c->acquires_sent */
    bool prepared;                  /* prep_main holds the command */
    struct cluster_op *next_queued; /* the admission queue */
    struct cluster_op *next_free;
};

/* One source of a repair: a node that kept its data, whose fence counter
 * is read and whose done marks are copied to the target one SCAN step at
 * a time. */
struct repair_src {
    struct repair *r;
    int node;
    bool counter_read; /* its counter is in r->max */
    bool scan_over;    /* its SCAN came back to cursor 0, marks copied */
    bool failed;       /* a command failed: it does not count */
    char cursor[24];   /* the next SCAN cursor; "" before the first */
};

/* One repair of a restarted node before it counts again: copy the done
 * marks and read the fence counter from enough sound nodes, then raise the
 * node's counter to their maximum. Owned by its node callbacks; freed when
 * the last one has run. */
struct repair {
    struct cluster *c;
    int target;      /* the restarted node */
    int generation;  /* stale rounds are ignored */
    int outstanding; /* node callbacks still due */
    int need;        /* sources to read in full before raising */
    int complete;    /* sources read in full */
    int running;     /* sources neither complete nor failed */
    int64_t max;
    uint64_t marks; /* done marks set on the target */
    bool over;      /* raising, failed or done: send no further step */
    struct repair_src src[REDLOCK_MAX_NODES];
};

struct cluster {
    struct event_base *base;               /* borrowed */
    const struct config *cfg;              /* borrowed */
    struct node *nodes[REDLOCK_MAX_NODES]; /* owned */
    struct tls_ctx *tls;                   /* owned: for rediss:// nodes */
    int n;
    int quorum;
    char fence_key[80];
    size_t fence_key_len;
    cluster_node_fn *node_cb;
    void *node_priv;
    int ops_inflight;  /* ops not yet freed */
    int acquires_sent; /* acquire rounds sent and not finished */
    struct cluster_op *queue_head, *queue_tail; /* acquires not yet sent */
    int queue_len;
    bool dispatching; /* draining the queue (no recursion) */
    bool closing;     /* in cluster_destroy: send nothing, arm nothing */
    struct cluster_op *free_ops;
    int free_count;
    /* Restart quarantine (see README, "Fencing and restarts"). */
    bool quarantined[REDLOCK_MAX_NODES];
    struct event *quarantine_ev[REDLOCK_MAX_NODES]; /* owned */
    int repair_generation[REDLOCK_MAX_NODES];
    bool first_seen_checked[REDLOCK_MAX_NODES]; /* start-up check done */
    struct qarg {
        struct cluster *c;
        int i;
    } qargs[REDLOCK_MAX_NODES];             /* quarantine timer arguments */
    int repair_attempt[REDLOCK_MAX_NODES];  /* retries: the back-off */
    bool repair_waiting[REDLOCK_MAX_NODES]; /* no sound read yet (logged) */
    char scan_match[2 * 64 + 8];            /* SCAN MATCH for <prefix>lock:* */
    struct redlock_grants grants; /* live TTLs granted: the quarantine */
    int64_t fence_max_seen;       /* largest fence this daemon handed out */
};

uint64_t cluster_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The node to send to, or NULL while the cluster is being destroyed:
 * closing a node runs its pending callbacks at once, and those must
 * neither send to a node already freed nor start new work. */
static struct node *send_node(const struct cluster *c, int i)
{
    return c->closing ? NULL : c->nodes[i];
}

/* Decimal digits of v into buf (room for 20), no NUL; returns the length.
 * snprintf cost ~700 instructions per acquire for the ttl argument. */
static size_t dec_u64(char *buf, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    for (size_t i = 0; i < n; i++) {
        buf[i] = tmp[n - 1 - i];
    }
    return n;
}

/* ---- op pool ---------------------------------------------------------- */

static void op_deadline_cb(evutil_socket_t fd, short what, void *arg);

static struct cluster_op *op_new(struct cluster *c, enum op_kind kind,
                                 const char *resource, size_t len,
                                 const char *token, cluster_done_fn *cb,
                                 void *priv)
{
    const char *prefix = c->cfg->prefix;
    size_t plen = strlen(prefix);
    if (plen + 5 + len >= KEY_INLINE) {
        return NULL;
    }
    struct cluster_op *op = c->free_ops;
    if (op != NULL) {
        c->free_ops = op->next_free;
        c->free_count--;
    } else {
        op = malloc(sizeof(*op));
        if (op == NULL) {
            return NULL;
        }
        op->deadline_ev = evtimer_new(c->base, op_deadline_cb, op);
        if (op->deadline_ev == NULL) {
            free(op);
            return NULL;
        }
    }
    op->c = c;
    op->kind = kind;
    op->phase = PHASE_MAIN;
    op->cb = cb;
    op->priv = priv;
    op->answered = false;
    op->outstanding = 0;
    op->fence = false;
    op->ttl_ms = 0;
    memcpy(op->token, token, PROTO_TOKEN_LEN);
    op->token[PROTO_TOKEN_LEN] = '\0';
    memcpy(op->key, prefix, plen);
    memcpy(op->key + plen, "lock:", 5);
    memcpy(op->key + plen + 5, resource, len);
    op->key_len = plen + 5 + len;
    memcpy(op->channel, prefix, plen);
    memcpy(op->channel + plen, "wake:", 5);
    memcpy(op->channel + plen + 5, resource, len);
    op->channel_len = plen + 5 + len;
    op->prep_main.buf = op->prep_fence.buf = op->prep_rollback.buf = NULL;
    op->dispatched = false;
    op->prepared = false;
    op->next_queued = NULL;
    c->ops_inflight++;
    return op;
}

static void queue_drain(struct cluster *c);

static void op_release_if_finished(struct cluster_op *op)
{
    if (!op->answered || op->outstanding > 0) {
        return;
    }
    struct cluster *c = op->c;
    bool was_dispatched = op->dispatched;
    c->ops_inflight--;
    if (was_dispatched) {
        c->acquires_sent--;
    }
    node_prep_free(&op->prep_main);
    node_prep_free(&op->prep_fence);
    node_prep_free(&op->prep_rollback);
    evtimer_del(op->deadline_ev);
    if (c->free_count < 1024) {
        op->next_free = c->free_ops;
        c->free_ops = op;
        c->free_count++;
    } else {
        event_free(op->deadline_ev);
        free(op);
    }
    if (was_dispatched) {
        queue_drain(c);
    }
}

static void op_answer(struct cluster_op *op, const struct cluster_result *res)
{
    if (op->answered) {
        return;
    }
    op->answered = true;
    if (op->cb != NULL) {
        op->cb(res, op->priv);
    }
}

/* Bit i for each of n nodes; 32 nodes would shift by the width. */
static uint32_t all_nodes_mask(int n)
{
    return n >= 32 ? UINT32_MAX : (1u << n) - 1u;
}

static void result_init(struct cluster_result *res)
{
    memset(res, 0, sizeof(*res));
    res->pttl_min = -1;
}

/* ---- fire-and-forget commands ---------------------------------------- */

static void op_release_if_finished(struct cluster_op *op);

static void rollback_cb(struct node *node, struct redisReply *reply,
                        enum node_status status, void *privdata)
{
    struct cluster_op *op = privdata;
    op->outstanding--;
    if (status != NODE_REPLY) {
        log_debug(NULL, "node %d: cleanup command %s", node_index(node) + 1,
                  status == NODE_TIMEOUT ? "timed out" : "dropped");
    } else if (reply->type == REDIS_REPLY_ERROR) {
        log_warn(NULL, "node %d: cleanup command failed: %s",
                 node_index(node) + 1, reply->str);
    }
    op_release_if_finished(op);
}

/* Compare-and-delete the op's key on the nodes in mask (no publish: the
 * key was never ours to announce). */
static void op_remove_keys(struct cluster_op *op, uint32_t mask)
{
    struct cluster *c = op->c;
    const char *argv[3] = {op->key, op->token, ""};
    size_t lens[3] = {op->key_len, PROTO_TOKEN_LEN, 0};
    if (op->prep_rollback.buf != NULL ||
        node_prepare(&op->prep_rollback, SCRIPT_RELEASE, 3, argv, lens) != 0) {
        return; /* no node ever loaded the scripts: nothing was set */
    }
    uint64_t now = cluster_now_us();
    for (int i = 0; i < c->n; i++) {
        if (!(mask & (1u << i))) {
            continue;
        }
        /* A node that is down now lost the connection the SET went on;
         * whatever it applied expires with the TTL. */
        if (send_node(c, i) != NULL &&
            node_send_prepared(send_node(c, i), &op->prep_rollback, now,
                               rollback_cb, op) == 0) {
            op->outstanding++;
        }
    }
}

/* ---- reply decoding --------------------------------------------------- */

static bool reply_int(const struct redisReply *r, long long *out)
{
    if (r->type == REDIS_REPLY_INTEGER) {
        *out = r->integer;
        return true;
    }
    return false;
}

/* The acquire script answers {status, number}. */
static enum redlock_node_result decode_acquire(struct node *node,
                                               const struct redisReply *r,
                                               int64_t *fence, int64_t *pttl)
{
    long long a, b;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        reply_int(r->element[0], &a) && reply_int(r->element[1], &b)) {
        if (a == 1) {
            *fence = b;
            return RL_OK;
        }
        *pttl = b;
        return a == 2 ? RL_DONE : RL_BUSY;
    }
    log_warn(NULL, "node %d: acquire: unexpected reply: %s",
             node_index(node) + 1,
             r->type == REDIS_REPLY_ERROR ? r->str : "(not an array)");
    return RL_FAILED;
}

/* The other scripts answer 1 (applied) or 0 (not held). */
static enum redlock_node_result decode_flag(struct node *node,
                                            const struct redisReply *r)
{
    long long v;
    if (reply_int(r, &v)) {
        return v == 1 ? RL_OK : RL_BUSY;
    }
    log_warn(NULL, "node %d: script: unexpected reply: %s",
             node_index(node) + 1,
             r->type == REDIS_REPLY_ERROR ? r->str : "(not an integer)");
    return RL_FAILED;
}

static enum redlock_node_result decode_status(enum node_status status)
{
    (void)status;
    return RL_FAILED;
}

/* ---- outcomes --------------------------------------------------------- */

static void op_send_fence(struct cluster_op *op);

static bool op_sets_ttl(const struct cluster_op *op);

/* A won acquire or extend: its TTL counts toward the restart quarantine
 * until its lock can no longer stand. */
static void op_note_grant(const struct cluster_op *op)
{
    if (op_sets_ttl(op)) {
        redlock_grants_add(&op->c->grants, op->ttl_ms, op->round.start_us,
                           op->round.decided_us);
    }
}

static void op_finish_acquire(struct cluster_op *op, enum redlock_outcome out)
{
    struct cluster_result res;
    result_init(&res);
    res.n_ok = op->round.n_ok;
    res.pttl_min = op->round.pttl_min;
    switch (out) {
    case RL_WON:
        op_note_grant(op);
        if (op->fence) {
            op_send_fence(op);
            return;
        }
        res.err = ERR_NONE;
        res.validity_ms = op->round.validity_ms;
        res.valid_until_us =
            op->round.decided_us + (uint64_t)op->round.validity_ms * 1000u;
        op_answer(op, &res);
        return;
    case RL_LOST_BUSY:
        res.err = ERR_BUSY;
        break;
    case RL_LOST_DONE:
        res.err = ERR_DONE;
        break;
    case RL_LOST_NOQUORUM:
        res.err = ERR_NO_QUORUM;
        res.too_late = op->round.too_late;
        break;
    case RL_UNDECIDED:
        return;
    }
    uint32_t rollback = redlock_rollback_set(&op->round);
    if (rollback != 0) {
        METRIC_INC(rollbacks);
        op_remove_keys(op, rollback);
    }
    op_answer(op, &res);
}

/* Whether the answers prove that no quorum can still hold the token: more
 * than n - quorum nodes are known to be without it. For extend those are
 * the nodes that said it was not there; a release or complete that applied
 * also leaves its node without the token. Fewer is no proof: the nodes that
 * failed or were not asked may hold it still. */
static bool round_proves_gone(const struct cluster_op *op)
{
    const struct redlock_round *r = &op->round;
    int without = r->n_busy;
    if (op->kind == OPK_RELEASE || op->kind == OPK_COMPLETE) {
        without += r->n_ok;
    }
    return without > r->n_nodes - r->quorum;
}

static void op_finish_other(struct cluster_op *op, enum redlock_outcome out)
{
    struct cluster_result res;
    result_init(&res);
    const struct redlock_round *r = &op->round;
    res.n_ok = r->n_ok;
    res.start_us = r->start_us;
    if (out == RL_UNDECIDED) {
        return;
    }
    if (out == RL_WON) {
        op_note_grant(op);
        res.err = ERR_NONE;
        res.validity_ms = r->validity_ms;
        res.valid_until_us = r->decided_us + (uint64_t)r->validity_ms * 1000u;
    } else if (!round_proves_gone(op)) {
        /* Too few answers to know: the lock may still stand on a quorum
         * (its validity, for a renewal, stands too) and a retry may
         * succeed. */
        res.err = ERR_NO_QUORUM;
        res.too_late = r->too_late;
    } else if (op->kind == OPK_RELEASE && r->n_ok > 0) {
        /* Deleted where it still was, and no quorum holds it now: what
         * the caller asked. */
        res.err = ERR_NONE;
    } else {
        res.err = ERR_NOT_HELD;
    }
    op_answer(op, &res);
}

static void op_main_cb(struct node *node, struct redisReply *reply,
                       enum node_status status, void *privdata)
{
    struct cluster_op *op = privdata;
    int i = node_index(node);
    int64_t fence = 0, pttl = -1;
    enum redlock_node_result res;
    op->outstanding--;
    if (status != NODE_REPLY) {
        res = decode_status(status);
    } else if (op->kind == OPK_ACQUIRE) {
        res = decode_acquire(node, reply, &fence, &pttl);
    } else {
        res = decode_flag(node, reply);
    }
    bool was_decided = op->round.outcome != RL_UNDECIDED;
    enum redlock_outcome out =
        redlock_round_answer(&op->round, i, res, fence, pttl, cluster_now_us);
    if (was_decided) {
        /* A late answer after a lost acquisition: the rollback was queued
         * behind this SET already; nothing more to do. */
    } else if (out != RL_UNDECIDED) {
        if (op->kind == OPK_ACQUIRE) {
            op_finish_acquire(op, out);
        } else {
            op_finish_other(op, out);
        }
    }
    op_release_if_finished(op);
}

/* Fence write-back answers: success once a quorum raised its counter while
 * still holding our token, within the lock's validity. */
static void op_fence_cb(struct node *node, struct redisReply *reply,
                        enum node_status status, void *privdata)
{
    struct cluster_op *op = privdata;
    op->outstanding--;
    enum redlock_node_result res =
        status == NODE_REPLY ? decode_flag(node, reply) : decode_status(status);
    bool was_decided = op->fence_round.outcome != RL_UNDECIDED;
    enum redlock_outcome out = redlock_round_answer(
        &op->fence_round, node_index(node), res, 0, -1, cluster_now_us);
    if (!was_decided && out != RL_UNDECIDED) {
        struct cluster_result r;
        result_init(&r);
        r.n_ok = op->round.n_ok;
        /* Validity runs from the start of the acquisition, not of the
         * write-back. */
        uint64_t now = cluster_now_us();
        int64_t v = redlock_validity_ms(op->ttl_ms, op->round.drift_factor,
                                        now - op->round.start_us);
        if (out == RL_WON && v > 0) {
            r.err = ERR_NONE;
            r.validity_ms = v;
            r.valid_until_us = now + (uint64_t)v * 1000u;
            /* Not round.fence_max: answers that arrived after the round
             * was won may have raised it past what a quorum now holds. */
            r.fence = op->fence_written;
            if (r.fence > op->c->fence_max_seen) {
                op->c->fence_max_seen = r.fence;
            }
            op_answer(op, &r);
        } else {
            r.err = ERR_NO_QUORUM;
            r.too_late = out == RL_WON || op->fence_round.too_late;
            METRIC_INC(rollbacks);
            op_remove_keys(op, all_nodes_mask(op->c->n));
            op_answer(op, &r);
        }
    }
    op_release_if_finished(op);
}

static void op_send_fence(struct cluster_op *op)
{
    struct cluster *c = op->c;
    char val[24];
    op->fence_written = op->round.fence_max;
    int vl = snprintf(val, sizeof(val), "%lld", (long long)op->fence_written);
    const char *argv[4] = {op->key, c->fence_key, op->token, val};
    size_t lens[4] = {op->key_len, c->fence_key_len, PROTO_TOKEN_LEN,
                      (size_t)vl};
    op->phase = PHASE_FENCE;
    redlock_round_start(&op->fence_round, c->n, op->ttl_ms,
                        op->round.drift_factor, op->round.start_us, 0);
    bool prepared =
        node_prepare(&op->prep_fence, SCRIPT_FENCE_RAISE, 4, argv, lens) == 0;
    uint64_t now = cluster_now_us();
    for (int i = 0; i < c->n; i++) {
        if (prepared && send_node(c, i) != NULL &&
            node_send_prepared(send_node(c, i), &op->prep_fence, now,
                               op_fence_cb, op) == 0) {
            op->outstanding++;
        } else {
            redlock_round_answer(&op->fence_round, i, RL_SKIPPED, 0, -1,
                                 cluster_now_us);
        }
    }
    if (op->fence_round.outcome != RL_UNDECIDED && !op->answered) {
        /* Not even a quorum could be asked: undo the acquisition. Answer
         * now even when some write-backs went out: the round is decided,
         * so their callbacks will not answer (and main-round replies may
         * still be due too). */
        struct cluster_result r;
        result_init(&r);
        r.err = ERR_NO_QUORUM;
        METRIC_INC(rollbacks);
        op_remove_keys(op, all_nodes_mask(c->n));
        op_answer(op, &r);
    }
}

static void op_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cluster_op *op = arg;
    if (op->answered || op->phase != PHASE_MAIN ||
        op->round.outcome != RL_UNDECIDED) {
        return;
    }
    /* The answers still due cannot help: count them as failed (their
     * callbacks still arrive and keep the op alive until then). */
    enum redlock_outcome out = RL_UNDECIDED;
    for (int i = 0; i < op->c->n && out == RL_UNDECIDED; i++) {
        if (op->round.result[i] == RL_PENDING) {
            out = redlock_round_answer(&op->round, i, RL_FAILED, 0, -1,
                                       cluster_now_us);
        }
    }
    if (out == RL_UNDECIDED) {
        return;
    }
    op->round.too_late = true;
    if (op->kind == OPK_ACQUIRE) {
        op_finish_acquire(op, out);
    } else {
        op_finish_other(op, out);
    }
}

/* Sends the op's main script to every node; answers at once when no
 * quorum could even be asked. */
/* Acquire rounds in flight at once; more wait in the daemon, in order. A
 * backlog past the node timeout would fail every round and feed rollbacks
 * into the same queues (10,000 clients at once did exactly that); waiting
 * here costs no validity, whose clock starts when the round is sent. */
#define ACQUIRES_SENT_MAX 4096
#define ACQUIRE_QUEUE_MAX 65536

static void op_dispatch(struct cluster_op *op);

static void queue_drain(struct cluster *c)
{
    if (c->dispatching || c->closing) {
        return; /* the outer loop goes on; or cluster_destroy frees them */
    }
    c->dispatching = true;
    while (c->queue_head != NULL && c->acquires_sent < ACQUIRES_SENT_MAX) {
        struct cluster_op *op = c->queue_head;
        c->queue_head = op->next_queued;
        if (c->queue_head == NULL) {
            c->queue_tail = NULL;
        }
        c->queue_len--;
        op_dispatch(op);
    }
    c->dispatching = false;
}

/* Whether the op sets a lock's TTL. Release and complete run their rounds
 * with PROTO_TTL_MAX so that validity never ends them; that is not a TTL
 * granted, while an acquire or extend asking for PROTO_TTL_MAX is. */
static bool op_sets_ttl(const struct cluster_op *op)
{
    return op->kind == OPK_ACQUIRE || op->kind == OPK_EXTEND;
}

static void op_send_main(struct cluster_op *op, enum node_script script,
                         int argc, const char **argv, const size_t *lens,
                         uint32_t ttl_ms)
{
    struct cluster *c = op->c;
    op->ttl_ms = ttl_ms;
    op->prepared = node_prepare(&op->prep_main, script, argc, argv, lens) == 0;
    if (op->kind == OPK_ACQUIRE &&
        (c->acquires_sent >= ACQUIRES_SENT_MAX || c->queue_head != NULL)) {
        if (c->queue_len >= ACQUIRE_QUEUE_MAX) {
            struct cluster_result r;
            result_init(&r);
            r.err = ERR_LIMIT;
            op_answer(op, &r);
            op_release_if_finished(op);
            return;
        }
        if (c->queue_tail != NULL) {
            c->queue_tail->next_queued = op;
        } else {
            c->queue_head = op;
        }
        c->queue_tail = op;
        c->queue_len++;
        return;
    }
    op_dispatch(op);
}

/* Sends the prepared round to every node. */
static void op_dispatch(struct cluster_op *op)
{
    struct cluster *c = op->c;
    uint32_t ttl_ms = op->ttl_ms;
    uint64_t now = cluster_now_us();
    if (op->kind == OPK_ACQUIRE) {
        op->dispatched = true;
        c->acquires_sent++;
    }
    redlock_round_start(&op->round, c->n, ttl_ms, c->cfg->drift_factor, now, 0);
    /* Hold a reference so a synchronous decision cannot free the op while
     * we are still sending. */
    op->outstanding++;
    bool prepared = op->prepared;
    for (int i = 0; i < c->n; i++) {
        /* Once the skipped nodes alone decide the round, asking the rest
         * would only create keys to roll back. */
        /* A quarantined node may have lost keys it once held: it must
         * not help form a new quarantine-free quorum. */
        bool skip = op->kind == OPK_ACQUIRE && c->quarantined[i];
        /* A release or completion goes to every node that is up even when
         * the round is lost already: a key it could delete would otherwise
         * block the resource there until its TTL. */
        bool send_all = op->kind == OPK_RELEASE || op->kind == OPK_COMPLETE;
        if ((op->round.outcome == RL_UNDECIDED || send_all) && !skip &&
            prepared && send_node(c, i) != NULL &&
            node_send_prepared(send_node(c, i), &op->prep_main, now, op_main_cb,
                               op) == 0) {
            op->outstanding++;
        } else {
            redlock_round_answer(&op->round, i, RL_SKIPPED, 0, -1,
                                 cluster_now_us);
        }
    }
    op->outstanding--;
    enum redlock_outcome out = redlock_round_outcome(&op->round);
    /* A short TTL can run out of validity before the node timeout: from
     * then on the round cannot be won, so stop waiting for it. */
    if (out == RL_UNDECIDED && op_sets_ttl(op)) {
        int64_t v = redlock_validity_ms(ttl_ms, c->cfg->drift_factor, 0);
        if (v < c->cfg->node_timeout_ms) {
            int64_t ms = v > 0 ? v : 0;
            struct timeval tv = {(time_t)(ms / 1000),
                                 (suseconds_t)(ms % 1000) * 1000};
            evtimer_add(op->deadline_ev, &tv);
        }
    }
    if (out != RL_UNDECIDED && !op->answered && op->phase == PHASE_MAIN) {
        if (op->kind == OPK_ACQUIRE) {
            op_finish_acquire(op, out);
        } else {
            op_finish_other(op, out);
        }
    }
    op_release_if_finished(op);
}

/* ---- public operations ------------------------------------------------ */

int cluster_acquire(struct cluster *c, const char *resource, size_t len,
                    const char *token, uint32_t ttl_ms, bool fence,
                    cluster_done_fn *cb, void *priv)
{
    struct cluster_op *op =
        op_new(c, OPK_ACQUIRE, resource, len, token, cb, priv);
    if (op == NULL) {
        return -1;
    }
    op->fence = fence;
    op->ttl_ms = ttl_ms;
    char ttl[24];
    size_t tl = dec_u64(ttl, ttl_ms);
    const char *argv[5] = {op->key, c->fence_key, op->token, ttl,
                           fence ? "1" : "0"};
    size_t lens[5] = {op->key_len, c->fence_key_len, PROTO_TOKEN_LEN, tl, 1};
    op_send_main(op, SCRIPT_ACQUIRE, 5, argv, lens, ttl_ms);
    return 0;
}

int cluster_extend(struct cluster *c, const char *resource, size_t len,
                   const char *token, uint32_t ttl_ms, cluster_done_fn *cb,
                   void *priv)
{
    struct cluster_op *op =
        op_new(c, OPK_EXTEND, resource, len, token, cb, priv);
    if (op == NULL) {
        return -1;
    }
    op->ttl_ms = ttl_ms;
    char ttl[24];
    size_t tl = dec_u64(ttl, ttl_ms);
    const char *argv[3] = {op->key, op->token, ttl};
    size_t lens[3] = {op->key_len, PROTO_TOKEN_LEN, tl};
    op_send_main(op, SCRIPT_EXTEND, 3, argv, lens, ttl_ms);
    return 0;
}

int cluster_release(struct cluster *c, const char *resource, size_t len,
                    const char *token, cluster_done_fn *cb, void *priv)
{
    struct cluster_op *op =
        op_new(c, OPK_RELEASE, resource, len, token, cb, priv);
    if (op == NULL) {
        return -1;
    }
    const char *argv[3] = {op->key, op->token, op->channel};
    size_t lens[3] = {op->key_len, PROTO_TOKEN_LEN, op->channel_len};
    /* No validity to account for: a release never makes a lock valid. */
    op_send_main(op, SCRIPT_RELEASE, 3, argv, lens, PROTO_TTL_MAX);
    return 0;
}

int cluster_complete(struct cluster *c, const char *resource, size_t len,
                     const char *token, uint64_t keep_ms, cluster_done_fn *cb,
                     void *priv)
{
    struct cluster_op *op =
        op_new(c, OPK_COMPLETE, resource, len, token, cb, priv);
    if (op == NULL) {
        return -1;
    }
    char keep[24];
    size_t kl = dec_u64(keep, keep_ms);
    const char *argv[4] = {op->key, op->token, keep, op->channel};
    size_t lens[4] = {op->key_len, PROTO_TOKEN_LEN, kl, op->channel_len};
    op_send_main(op, SCRIPT_COMPLETE, 4, argv, lens, PROTO_TTL_MAX);
    return 0;
}

/* ---- nodes ------------------------------------------------------------ */

static void repair_start(struct cluster *c, int target);

/* Keys per SCAN step: the node's work per call stays bounded, and so does
 * the copy that follows it. */
#define REPAIR_SCAN_COUNT "256"

static void repair_finish(struct repair *r, int64_t value)
{
    struct cluster *c = r->c;
    c->quarantined[r->target] = false;
    c->repair_attempt[r->target] = 0;
    log_info(NULL,
             "node %d: repaired from %d node(s): %llu done mark(s) "
             "copied, fence counter >= %lld; counts toward quorums again",
             r->target + 1, r->complete, (unsigned long long)r->marks,
             (long long)value);
}

/* Tries the repair again after a capped, jittered back-off, on the
 * quarantine timer. */
static void repair_retry_later(struct cluster *c, int target)
{
    if (c->closing) {
        return; /* the timer may be freed already */
    }
    uint32_t ms = redlock_backoff_ms((unsigned)c->repair_attempt[target]++, 250,
                                     5000, (double)random() / RAND_MAX);
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(c->quarantine_ev[target], &tv);
}

static void repair_release(struct repair *r)
{
    if (r->outstanding == 0) {
        free(r);
    }
}

/* Whether r may still act: not finished or failed, not superseded by a new
 * restart of its target, not shutting down. */
static bool repair_live(const struct repair *r)
{
    return !r->over && !r->c->closing &&
           r->generation == r->c->repair_generation[r->target];
}

static void repair_fail(struct repair *r, const char *why)
{
    r->over = true;
    log_warn(NULL, "node %d: repair: %s; retrying", r->target + 1, why);
    repair_retry_later(r->c, r->target);
}

static void repair_raise_cb(struct node *node, struct redisReply *reply,
                            enum node_status status, void *privdata)
{
    (void)node;
    struct repair *r = privdata;
    struct cluster *c = r->c;
    r->outstanding--;
    if (!c->closing && r->generation == c->repair_generation[r->target]) {
        if (status == NODE_REPLY && reply->type == REDIS_REPLY_INTEGER &&
            reply->integer >= r->max) {
            repair_finish(r, reply->integer);
        } else {
            log_warn(NULL, "node %d: fence repair failed; retrying",
                     r->target + 1);
            repair_retry_later(c, r->target);
        }
    }
    repair_release(r);
}

/* Enough sources read in full: raise the target's counter. */
static void repair_raise(struct repair *r)
{
    struct cluster *c = r->c;
    r->over = true;
    char val[24];
    int vl = snprintf(val, sizeof(val), "%lld", (long long)r->max);
    const char *argv[2] = {c->fence_key, val};
    size_t lens[2] = {c->fence_key_len, (size_t)vl};
    if (node_script(c->nodes[r->target], SCRIPT_FENCE_REPAIR, 2, argv, lens,
                    repair_raise_cb, r) == 0) {
        r->outstanding++;
    } else {
        log_warn(NULL, "node %d: fence repair not sent; retrying",
                 r->target + 1);
        repair_retry_later(c, r->target);
    }
}

static void repair_src_failed(struct repair_src *s)
{
    struct repair *r = s->r;
    if (s->failed) {
        return;
    }
    s->failed = true;
    r->running--;
    if (r->complete + r->running < r->need) {
        char why[96];
        snprintf(why, sizeof(why),
                 "node %d could not be read (%d of %d "
                 "needed left)",
                 s->node + 1, r->complete + r->running, r->need);
        repair_fail(r, why);
    }
}

static void repair_src_check(struct repair_src *s)
{
    struct repair *r = s->r;
    if (s->failed || !s->counter_read || !s->scan_over) {
        return;
    }
    r->running--;
    r->complete++;
    /* Any N - quorum + 1 sound nodes meet every earlier write-back quorum
     * and every quorum of done marks in a node other than the target, so
     * what they hold covers every fence handed out and every mark that a
     * successful complete left. */
    if (r->complete >= r->need) {
        repair_raise(r);
    }
}

static void repair_scan_cb(struct node *node, struct redisReply *reply,
                           enum node_status status, void *privdata);

/* The next SCAN step on s, or s is read in full. */
static void repair_scan_next(struct repair_src *s)
{
    struct repair *r = s->r;
    struct cluster *c = r->c;
    if (strcmp(s->cursor, "0") == 0) {
        s->scan_over = true;
        repair_src_check(s);
        return;
    }
    /* "" before the first step, which starts at cursor 0 */
    const char *cursor = s->cursor[0] != '\0' ? s->cursor : "0";
    const char *argv[3] = {cursor, c->scan_match, REPAIR_SCAN_COUNT};
    size_t lens[3] = {strlen(cursor), strlen(c->scan_match),
                      sizeof(REPAIR_SCAN_COUNT) - 1};
    if (node_script(c->nodes[s->node], SCRIPT_DONE_SCAN, 3, argv, lens,
                    repair_scan_cb, s) == 0) {
        r->outstanding++;
    } else {
        repair_src_failed(s);
    }
}

static void repair_copy_cb(struct node *node, struct redisReply *reply,
                           enum node_status status, void *privdata)
{
    (void)node;
    struct repair_src *s = privdata;
    struct repair *r = s->r;
    r->outstanding--;
    if (repair_live(r) && !s->failed) {
        if (status == NODE_REPLY && reply->type == REDIS_REPLY_INTEGER) {
            r->marks += (uint64_t)reply->integer;
            repair_scan_next(s);
        } else {
            repair_fail(r,
                        status == NODE_REPLY && reply->type == REDIS_REPLY_ERROR
                            ? reply->str
                            : "copying done marks got no answer");
        }
    }
    repair_release(r);
}

/* The marks one SCAN step found: copied to the target, then the next
 * step. */
static void repair_scan_cb(struct node *node, struct redisReply *reply,
                           enum node_status status, void *privdata)
{
    struct repair_src *s = privdata;
    struct repair *r = s->r;
    r->outstanding--;
    if (!repair_live(r) || s->failed) {
        repair_release(r);
        return;
    }
    if (status != NODE_REPLY || reply->type != REDIS_REPLY_ARRAY ||
        reply->elements < 1 || (reply->elements - 1) % 3 != 0) {
        log_warn(NULL, "node %d: done-mark scan: %s", node_index(node) + 1,
                 status != NODE_REPLY               ? "no answer"
                 : reply->type == REDIS_REPLY_ERROR ? reply->str
                                                    : "unexpected reply");
        repair_src_failed(s);
        repair_release(r);
        return;
    }
    size_t argc = reply->elements - 1;
    const char **argv = argc > 0 ? malloc(argc * sizeof(*argv)) : NULL;
    size_t *lens = argc > 0 ? malloc(argc * sizeof(*lens)) : NULL;
    bool ok = reply->element[0]->type == REDIS_REPLY_STRING &&
              reply->element[0]->len < sizeof(s->cursor) &&
              (argc == 0 || (argv != NULL && lens != NULL));
    for (size_t i = 0; ok && i < argc; i++) {
        const struct redisReply *e = reply->element[i + 1];
        ok = e->type == REDIS_REPLY_STRING;
        if (ok) {
            argv[i] = e->str;
            lens[i] = e->len;
        }
    }
    if (!ok) {
        log_warn(NULL, "node %d: done-mark scan: unexpected reply",
                 node_index(node) + 1);
        repair_src_failed(s);
    } else {
        memcpy(s->cursor, reply->element[0]->str, reply->element[0]->len);
        s->cursor[reply->element[0]->len] = '\0';
        if (argc == 0) {
            repair_scan_next(s);
        } else if (node_script(r->c->nodes[r->target], SCRIPT_DONE_COPY,
                               (int)argc, argv, lens, repair_copy_cb, s) == 0) {
            r->outstanding++;
        } else {
            repair_fail(r, "copying done marks not sent");
        }
    }
    free(argv);
    free(lens);
    repair_release(r);
}

static void repair_counter_cb(struct node *node, struct redisReply *reply,
                              enum node_status status, void *privdata)
{
    (void)node;
    struct repair_src *s = privdata;
    struct repair *r = s->r;
    r->outstanding--;
    if (repair_live(r) && !s->failed) {
        if (status == NODE_REPLY && (reply->type == REDIS_REPLY_NIL ||
                                     reply->type == REDIS_REPLY_STRING)) {
            int64_t v = reply->type == REDIS_REPLY_STRING
                            ? strtoll(reply->str, NULL, 10)
                            : 0;
            if (v > r->max) {
                r->max = v;
            }
            s->counter_read = true;
            repair_src_check(s);
        } else {
            repair_src_failed(s);
        }
    }
    repair_release(r);
}

static void repair_start(struct cluster *c, int target)
{
    if (c->cfg->unsafe_no_fence_repair) {
        c->quarantined[target] = false;
        log_warn(NULL,
                 "node %d: counts again WITHOUT fence or done-mark repair "
                 "(--unsafe-no-fence-repair)",
                 target + 1);
        return;
    }
    uint32_t lost = 0, up = 0;
    for (int i = 0; i < c->n; i++) {
        lost |= c->quarantined[i] ? 1u << i : 0;
        up |= node_is_up(c->nodes[i]) ? 1u << i : 0;
    }
    uint32_t read;
    int need;
    enum redlock_repair_plan plan =
        redlock_repair_plan(c->n, target, lost, up, &read, &need);
    if (plan == RL_REPAIR_WAIT) {
        if (!c->repair_waiting[target]) {
            c->repair_waiting[target] = true;
            log_warn(NULL,
                     "node %d: too few nodes that kept their data are up "
                     "to repair it from (%d needed; a node down but never "
                     "seen to restart still holds what it must read): it "
                     "stays quarantined until enough are back",
                     target + 1, c->n - c->quorum + 1);
        }
        repair_retry_later(c, target);
        return;
    }
    c->repair_waiting[target] = false;
    if (plan == RL_REPAIR_BEST_EFFORT) {
        log_error(NULL,
                  "node %d: more nodes restarted without persistence "
                  "than a quorum can spare: no sound read exists; "
                  "repairing from every node up; fences may repeat and "
                  "done marks may be lost",
                  target + 1);
    }
    struct repair *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        repair_retry_later(c, target);
        return;
    }
    r->c = c;
    r->target = target;
    r->generation = ++c->repair_generation[target];
    r->outstanding = 1;         /* held while sending */
    r->max = c->fence_max_seen; /* a floor we know of ourselves */
    r->need = need;
    for (int i = 0; i < c->n; i++) {
        if (!(read & (1u << i))) {
            continue;
        }
        struct repair_src *s = &r->src[i];
        s->r = r;
        s->node = i;
        const char *argv[2] = {"GET", c->fence_key};
        size_t lens[2] = {3, c->fence_key_len};
        if (node_command(c->nodes[i], 2, argv, lens, repair_counter_cb, s) !=
            0) {
            s->failed = true;
            continue;
        }
        r->outstanding++;
        r->running++;
    }
    /* Scan steps after every counter read is out: a synchronous failure
     * inside one must not see sources not started yet. */
    for (int i = 0; i < c->n && repair_live(r); i++) {
        struct repair_src *s = &r->src[i];
        if ((read & (1u << i)) && !s->failed) {
            repair_scan_next(s);
        }
    }
    if (repair_live(r) && r->need == 0) {
        repair_raise(r); /* a single node: nothing to read */
    } else if (repair_live(r) && r->running < r->need) {
        repair_fail(r, "too few nodes to read could be asked");
    }
    r->outstanding--;
    repair_release(r);
}

static void quarantine_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct qarg *qa = arg;
    struct cluster *c = qa->c;
    int i = qa->i;
    struct node *node = c->nodes[i];
    if (!c->quarantined[i]) {
        return;
    }
    if (!node_is_up(node)) {
        repair_retry_later(c, i);
        return;
    }
    repair_start(c, i);
}

/* The restart quarantine now: --quarantine-ms, or the largest TTL granted
 * whose lock may still stand (at least the default TTL). */
static uint32_t quarantine_period_ms(const struct cluster *c)
{
    return redlock_quarantine_ms(&c->grants, cluster_now_us(),
                                 (uint32_t)c->cfg->quarantine_ms,
                                 PROTO_TTL_DEFAULT);
}

static void quarantine_begin(struct cluster *c, int i)
{
    uint32_t q = quarantine_period_ms(c);
    c->quarantined[i] = true;
    c->repair_generation[i]++;
    c->repair_attempt[i] = 0;
    c->repair_waiting[i] = false;
    log_warn(NULL,
             "node %d: restarted (new run_id) without persistence: "
             "quarantined for %u ms, then its done marks and fence "
             "counter are repaired",
             i + 1, q);
    struct timeval tv = {(time_t)(q / 1000), (suseconds_t)(q % 1000) * 1000};
    evtimer_add(c->quarantine_ev[i], &tv);
}

/* A daemon that starts after a node restarted has no earlier run_id to
 * compare. It looks at start times instead: a non-persistent node that
 * started within the quarantine, clearly after another node (more than
 * START_SKEW_US; a cluster started together is not suspect), may have lost
 * locks the others still hold, so it is quarantined for the rest of the
 * period. Re-checked whenever a node comes up, since the older node may
 * connect second. */
#define START_SKEW_US 3000000u

static void check_fresh_starts(struct cluster *c)
{
    if (c->cfg->unsafe_no_quarantine) {
        return;
    }
    uint64_t oldest = 0;
    for (int j = 0; j < c->n; j++) {
        uint64_t st =
            node_is_up(c->nodes[j]) ? node_started_us(c->nodes[j]) : 0;
        if (st != 0 && (oldest == 0 || st < oldest)) {
            oldest = st;
        }
    }
    uint64_t now = cluster_now_us();
    uint64_t q_us = (uint64_t)quarantine_period_ms(c) * 1000u;
    for (int i = 0; i < c->n; i++) {
        struct node *nd = c->nodes[i];
        uint64_t st = node_started_us(nd);
        if (c->first_seen_checked[i] || !node_is_up(nd) || st == 0 ||
            !node_first_connection(nd) || node_is_persistent(nd) ||
            c->quarantined[i]) {
            continue;
        }
        if (st > oldest + START_SKEW_US && now < st + q_us) {
            uint64_t left_ms = (st + q_us - now) / 1000u;
            c->first_seen_checked[i] = true;
            c->quarantined[i] = true;
            c->repair_generation[i]++;
            log_warn(NULL,
                     "node %d: started %llu s after another node and "
                     "has no persistence: it may have lost locks; "
                     "quarantined for %llu ms",
                     i + 1, (unsigned long long)((st - oldest) / 1000000u),
                     (unsigned long long)left_ms);
            struct timeval tv = {(time_t)(left_ms / 1000),
                                 (suseconds_t)(left_ms % 1000) * 1000};
            evtimer_add(c->quarantine_ev[i], &tv);
        }
    }
}

static void cluster_node_state_cb(struct node *node, enum node_state state,
                                  void *priv)
{
    struct cluster *c = priv;
    int i = node_index(node);
    if (state == NODE_UP && !node_restarted(node)) {
        check_fresh_starts(c);
    }
    /* A node back may be what a waiting repair needs: try it now. */
    for (int j = 0; state == NODE_UP && j < c->n; j++) {
        if (c->repair_waiting[j] && c->quarantined[j] && j != i) {
            struct timeval now = {0, 0};
            evtimer_add(c->quarantine_ev[j], &now);
        }
    }
    if (state == NODE_UP && node_restarted(node) && !node_is_persistent(node)) {
        if (!c->cfg->unsafe_no_quarantine) {
            quarantine_begin(c, i);
        } else {
            log_warn(NULL,
                     "node %d: restarted; counted at once "
                     "(--unsafe-no-quarantine)",
                     i + 1);
            if (!c->cfg->unsafe_no_fence_repair) {
                c->quarantined[i] = true; /* only until the repair */
                repair_start(c, i);
            }
        }
    }
    if (c->node_cb != NULL && (state == NODE_UP || state == NODE_DOWN)) {
        c->node_cb(node, state == NODE_UP, c->node_priv);
    }
}

struct cluster *cluster_create(struct event_base *base,
                               const struct config *cfg,
                               cluster_node_fn *node_cb, void *node_priv)
{
    if (cfg->n_nodes < 1 || cfg->n_nodes > REDLOCK_MAX_NODES) {
        log_error(NULL, "cluster: %d nodes configured (1..%d allowed)",
                  cfg->n_nodes, REDLOCK_MAX_NODES);
        return NULL;
    }
    struct cluster *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    c->base = base;
    c->cfg = cfg;
    c->n = cfg->n_nodes;
    c->quorum = redlock_quorum(c->n);
    c->node_cb = node_cb;
    c->node_priv = node_priv;
    int fl =
        snprintf(c->fence_key, sizeof(c->fence_key), "%sfence", cfg->prefix);
    c->fence_key_len = (size_t)fl;
    /* <prefix>lock:*, the prefix's glob characters escaped */
    size_t m = 0;
    for (const char *p = cfg->prefix;
         *p != '\0' && m + 8 < sizeof(c->scan_match); p++) {
        if (strchr("*?[]\\", *p) != NULL) {
            c->scan_match[m++] = '\\';
        }
        c->scan_match[m++] = *p;
    }
    memcpy(c->scan_match + m, "lock:*", 7);

    struct node_options opts = {
        .timeout_ms = cfg->node_timeout_ms,
        .connect_timeout_ms = config_connect_timeout_ms(cfg),
        .stall_ms =
            cfg->node_timeout_ms * 8 < 2000 ? 2000 : cfg->node_timeout_ms * 8,
        .backoff_base_ms = 50,
        .backoff_cap_ms = 5000,
        .max_pending = 1 << 20,
    };
    for (int i = 0; i < c->n && c->tls == NULL; i++) {
        char err[256];
        if (cfg->nodes[i].tls &&
            (c->tls = tls_ctx_create(cfg, err, sizeof(err))) == NULL) {
            log_error(NULL, "%s", err);
            cluster_destroy(c);
            return NULL;
        }
    }
    opts.tls = c->tls;
    for (int i = 0; i < c->n; i++) {
        c->nodes[i] = node_create(base, i, &cfg->nodes[i], &opts,
                                  cluster_node_state_cb, c);
        c->qargs[i].c = c;
        c->qargs[i].i = i;
        c->quarantine_ev[i] = evtimer_new(base, quarantine_cb, &c->qargs[i]);
        if (c->nodes[i] == NULL || c->quarantine_ev[i] == NULL) {
            log_error(NULL, "cluster: cannot create node %d", i + 1);
            cluster_destroy(c);
            return NULL;
        }
    }
    return c;
}

void cluster_destroy(struct cluster *c)
{
    if (c == NULL) {
        return;
    }
    /* node_destroy runs the node's pending callbacks (a fence repair's,
     * an op's): with c->closing set they send nothing and arm no timer,
     * and every timer is freed only once no callback can run any more. */
    c->closing = true;
    for (int i = 0; i < c->n; i++) {
        node_destroy(c->nodes[i]);
        c->nodes[i] = NULL;
    }
    for (int i = 0; i < c->n; i++) {
        if (c->quarantine_ev[i] != NULL) {
            event_free(c->quarantine_ev[i]);
        }
    }
    while (c->queue_head != NULL) {
        struct cluster_op *op = c->queue_head;
        c->queue_head = op->next_queued;
        node_prep_free(&op->prep_main);
        event_free(op->deadline_ev);
        free(op);
    }
    while (c->free_ops != NULL) {
        struct cluster_op *op = c->free_ops;
        c->free_ops = op->next_free;
        event_free(op->deadline_ev);
        free(op);
    }
    tls_ctx_destroy(c->tls); /* after every node's session */
    free(c);
}

int cluster_quorum(const struct cluster *c)
{
    return c->quorum;
}

int cluster_size(const struct cluster *c)
{
    return c->n;
}

int cluster_up_count(const struct cluster *c)
{
    int up = 0;
    for (int i = 0; i < c->n; i++) {
        up += c->nodes[i] != NULL && node_is_up(c->nodes[i]) ? 1 : 0;
    }
    return up;
}

struct node *cluster_node(const struct cluster *c, int i)
{
    return (i >= 0 && i < c->n) ? c->nodes[i] : NULL;
}

bool cluster_node_quarantined(const struct cluster *c, int i)
{
    return i >= 0 && i < c->n && c->quarantined[i];
}

int cluster_inflight(const struct cluster *c)
{
    return c->ops_inflight;
}
