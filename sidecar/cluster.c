/* cluster.c: Redlock operations across all nodes.
 *
 * Each operation (struct cluster_op) sends its command to every up node in
 * the same loop turn, so node.c writes them all in one write per node, and
 * feeds the answers to a redlock_round. The caller hears back once, as soon
 * as the round is decided; the op itself lives until every node it was sent
 * to has answered or timed out, rollbacks included.
 *
 *   acquire    SET NX PX GET (Redis >= 7.0; fenced: in MULTI with INCR) or
 *              the acquire script, formatted once per op (struct node_prep)
 *              and the same bytes to every node
 *   release, extend, complete, rollback
 *              gathered per node during the loop turn into one script over
 *              their keys, sent at its end: batch.c, which hands each
 *              entry's answer back to its op (op_batch_answer_cb)
 *
 * Which nodes sit out after a restart, and their repair, are quarantine.c's:
 * it hears the nodes' state changes, and rounds skip the nodes it names.
 *
 *   give-up    a release, and a record (givenup.c) of the nodes that have
 *              not confirmed it; a node that comes up is sent it again
 *              (op_resend_cb), until every node confirmed or the key can
 *              stand nowhere (redlock_given_up_until_us) */
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "batch.h"
#include "config.h"
#include "givenup.h"
#include "locks.h"
#include "log.h"
#include "metrics.h"
#include "node.h"
#include "pool.h"
#include "quarantine.h"
#include "redlock.h"
#include "replyview.h"
#include "rlassert.h"
#include "semaphore.h"
#include "util.h"
#include "tls.h"

#define OP_POOL_KEEP 1024 /* ops kept for reuse past a burst */
/* prefix (<= 64), "lock:" or "sem:<k>:" (SEM_NAME_EXTRA), resource (<= 512) */
#define KEY_INLINE 600

enum op_phase {
    PHASE_MAIN = 0,  /* the operation's own script on every node */
    PHASE_FENCE = 1, /* acquire with fence: writing the maximum back */
};

/* One operation in flight. Owned by the cluster (pooled); freed when it has
 * answered its caller and every node command it sent has called back. */
struct cluster_op {
    struct cluster *c;
    enum redlock_op kind;
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
    char key[KEY_INLINE]; /* <prefix>lock:<resource> (sem_key) */
    size_t key_len;
    struct lock_name name;    /* what it acts on; resource: key's tail */
    char channel[KEY_INLINE]; /* <prefix>wake:<resource> (sem_channel) */
    size_t channel_len;
    struct node_prep prep_main;     /* acquire: the script, for every node
                                       on Redis < 7.0 */
    struct node_prep prep_native;   /* acquire: SET NX GET (MULTI with INCR
                                       when fenced), for Redis >= 7.0 */
    uint8_t form[REDLOCK_MAX_NODES]; /* acquire: enum redlock_acquire_form
                                        sent to each node */
    bool want_pttl;                 /* acquire: a busy answer is followed by
                                       PTTL (a waiter backs off on it) */
    int pttl_pending;               /* PTTLs not answered yet */
    bool busy_deferred;             /* a busy answer waits for them */
    struct node_prep prep_fence;    /* fence write-back */
    bool rollback_sent;             /* compare-and-delete after a loss */
    uint64_t keep_ms;               /* complete: the done mark's PX */
    uint32_t key_hash;              /* of key: batch_order */
    struct event *deadline_ev;      /* owned (kept across pool reuse): a round
                                       that cannot win any more ends early */
    bool dispatched;                /* counted in c->acquires_sent */
    bool given_up;                  /* release of a lock given up: each
                                       node's answer goes to its record */
    uint32_t miss_ttl_ms;           /* release: the lock's longest ttl, to
                                       remember the nodes that did not
                                       confirm it (op_owe); 0 never */
    uint32_t confirmed;             /* nodes that answered ok or not held */
    uint32_t refused;               /* nodes that answered an error reply */
    uint32_t quarantined;           /* nodes not asked: quarantined */
    uint32_t unreachable;           /* nodes not asked: down, or closing */
    struct cluster_op *next_queued; /* the admission queue */
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
    char dataset_key[80]; /* <prefix>dataset: node_options.dataset_key */
    int ops_inflight;  /* ops not yet freed */
    int acquires_sent; /* acquire rounds sent and not finished */
    struct cluster_op *queue_head, *queue_tail; /* acquires not yet sent */
    int queue_len;
    bool dispatching; /* draining the queue (no recursion) */
    bool closing;     /* in cluster_destroy: send nothing, arm nothing */
    /* Nodes whose MULTI/EXEC failed (an ACL without +multi +exec, say):
     * their fenced acquires go through the script from then on. */
    bool fence_multi_refused[REDLOCK_MAX_NODES];
    /* Each node's last error reply to a lock command (OOM, READONLY,
     * MISCONF, ...), named in a no_quorum answer, and its log limit. */
    struct node_refusal {
        bool active; /* refused a command since its last answered acquire */
        char text[120];
        struct log_limit log; /* the warnings that name the refusals */
    } refusal[REDLOCK_MAX_NODES];
    /* Release, extend and complete (and rollbacks) gathered per node
     * during a loop turn, sent as one script over their keys. */
    struct batcher *batches; /* owned */
    struct givenup *gu;      /* owned: locks given up (cluster_give_up) */
    struct pool op_pool; /* owned: ops kept for reuse, events and all */
    /* Restart quarantine (see README, "Fencing and restarts"). */
    struct quarantine *quar; /* owned */
    int64_t fence_max_seen;  /* largest fence this daemon handed out */
};

/* The node to send to, or NULL while the cluster is being destroyed:
 * closing a node runs its pending callbacks at once, and those must
 * neither send to a node already freed nor start new work. */
static struct node *send_node(const struct cluster *c, int i)
{
    return c->closing ? NULL : c->nodes[i];
}

/* ---- op pool ---------------------------------------------------------- */

static void op_deadline_cb(evutil_socket_t fd, short what, void *arg);

/* An op let go by its pool: its timer goes with it (pool_drop_fn). */
static void op_drop(void *o)
{
    struct cluster_op *op = o;
    event_free(op->deadline_ev);
    free(op);
}

static struct cluster_op *op_new(struct cluster *c, enum redlock_op kind,
                                 const struct lock_name *name,
                                 const char *token, cluster_done_fn *cb,
                                 void *priv)
{
    const char *prefix = c->cfg->prefix;
    size_t plen = strlen(prefix);
    if (plen + SEM_NAME_EXTRA + name->len > KEY_INLINE ||
        name->slot == SEM_QUEUE) {
        return NULL;
    }
    struct cluster_op *op = pool_get(&c->op_pool);
    if (op == NULL) {
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
    /* Both fit: checked above. A slot has its own key space and
     * announces on its semaphore's channel (semaphore.h). */
    op->key_len = sem_key(prefix, plen, name, op->key, sizeof(op->key));
    op->channel_len =
        sem_channel(prefix, plen, name, op->channel, sizeof(op->channel));
    RL_ASSERT(op->key_len > 0 && op->channel_len > 0);
    op->name = *name;
    op->name.resource = op->key + op->key_len - name->len;
    op->prep_main.buf = op->prep_fence.buf = NULL;
    op->rollback_sent = false;
    op->keep_ms = 0;
    op->key_hash = batch_key_hash(op->key, op->key_len);
    op->prep_native.buf = NULL;
    op->want_pttl = false;
    op->pttl_pending = 0;
    op->busy_deferred = false;
    op->dispatched = false;
    op->given_up = false;
    op->miss_ttl_ms = 0;
    op->confirmed = 0;
    op->refused = 0;
    op->quarantined = op->unreachable = 0;
    op->next_queued = NULL;
    c->ops_inflight++;
    return op;
}

static void queue_drain(struct cluster *c);
static void op_owe(struct cluster_op *op, uint32_t ttl_ms, uint32_t mask);

static void op_release_if_finished(struct cluster_op *op)
{
    if (!op->answered || op->outstanding > 0) {
        return;
    }
    struct cluster *c = op->c;
    if (op->miss_ttl_ms != 0) {
        op_owe(op, op->miss_ttl_ms, redlock_all_nodes(c->n) & ~op->confirmed);
    }
    bool was_dispatched = op->dispatched;
    c->ops_inflight--;
    if (was_dispatched) {
        c->acquires_sent--;
    }
    node_prep_free(&op->prep_main);
    node_prep_free(&op->prep_native);
    node_prep_free(&op->prep_fence);
    evtimer_del(op->deadline_ev);
    pool_put(&c->op_pool, op);
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

static void result_init(struct cluster_result *res)
{
    memset(res, 0, sizeof(*res));
    res->pttl_min = -1;
}

/* ---- reply text ------------------------------------------------------- */

/* At most one line a second per node: a node out of memory refuses every
 * lock command, and a line each would flood the log. */
#define REFUSAL_LOG_US 1000000u

/* Node i answered an acquire (won, busy or done): it refuses no longer.
 * Only an acquire: a node out of memory still accepts the deletes and
 * expiries of releases, extends and rollbacks, and refuses every new lock. */
static void note_accepted(struct cluster *c, int i)
{
    c->refusal[i].active = false;
}

/* Node i refused op's command (what: "acquire", ...) with text: kept as
 * the node's last refusal for the answer, and logged within the limit. */
static void note_refusal(struct cluster *c, struct cluster_op *op, int i,
                         const char *what, const char *text)
{
    struct node_refusal *nr = &c->refusal[i];
    nr->active = true;
    snprintf(nr->text, sizeof(nr->text), "%s", text);
    if (op != NULL) {
        op->refused |= 1u << i;
    }
    unsigned long skipped;
    if (!log_limit_pass(&nr->log, util_now_us(), REFUSAL_LOG_US, &skipped)) {
        return;
    }
    if (skipped > 0) {
        log_warn(NULL,
                 "node %d: %s: unexpected reply: %s (%lu more since "
                 "the last such line)",
                 i + 1, what, nr->text, skipped);
    } else {
        log_warn(NULL, "node %d: %s: unexpected reply: %s", i + 1, what,
                 nr->text);
    }
}

/* ---- batched scripts ------------------------------------------------ */

static void op_node_answer(struct cluster_op *op, int i, struct node *node,
                           enum redlock_node_result res, int64_t fence,
                           int64_t pttl);

/* Adds op's script on node i to the node's batch (batch.h): its key, token
 * and channel stay in op, alive until the entry is answered
 * (op->outstanding). Returns 0, or -1 (the node is not up, or no memory):
 * not sent. */
static int op_batch_add(struct cluster_op *op, int i, bool rollback)
{
    bool release = rollback || op->kind == RL_OP_RELEASE;
    bool extend = !release && op->kind == RL_OP_EXTEND;
    struct batch_entry e = {
        .priv = op,
        .key = op->key,
        .token = op->token,
        .channel = op->channel,
        .num = extend ? op->ttl_ms : op->keep_ms,
        .key_len = (uint32_t)op->key_len,
        .channel_len = (uint32_t)op->channel_len,
        .key_hash = op->key_hash,
        .action = release  ? BATCH_RELEASE
                  : extend ? BATCH_EXTEND
                           : BATCH_COMPLETE,
        .rollback = rollback,
    };
    /* Counted first: a full batch goes out at once, and a send that fails
     * answers its entries before batch_add returns. */
    op->outstanding++;
    if (batch_add(op->c->batches, i, &e) != 0) {
        op->outstanding--;
        return -1;
    }
    return 0;
}

/* One entry's answer from node i (batch_answer_fn). */
static void op_batch_answer_cb(void *priv, int i, bool rollback,
                               enum redlock_node_result res,
                               const char *refusal)
{
    struct cluster_op *op = priv;
    if (refusal != NULL) {
        note_refusal(op->c, rollback ? NULL : op, i, "script on one key",
                     refusal);
    }
    if (!rollback) {
        op_node_answer(op, i, NULL, res, 0, -1);
        return;
    }
    /* A rollback's answer decides nothing: 0 means the key was not (or no
     * longer) ours there. A given-up lock's delete sent again says whether
     * that node still owes it. */
    if (op->given_up) {
        givenup_answered(op->c->gu, op->token, i, res);
        givenup_resent(op->c->gu);
    } else if (res != RL_OK && res != RL_BUSY) {
        /* The SET may still run there (waiting in a dropped connection's
         * socket, say): that node is sent the delete when it is back. */
        op_owe(op, op->ttl_ms, 1u << i);
    }
    op->outstanding--;
    op_release_if_finished(op);
}

/* ---- fire-and-forget commands ---------------------------------------- */

/* Compare-and-delete the op's key on the nodes in mask (no publish: the
 * key was never ours to announce), batched with other compare-and-deletes
 * on each node; it goes behind the SET on the same connection. */
static void op_remove_keys(struct cluster_op *op, uint32_t mask)
{
    struct cluster *c = op->c;
    if (op->rollback_sent) {
        return;
    }
    op->rollback_sent = true;
    uint32_t missed = 0;
    for (int i = 0; i < c->n; i++) {
        /* A node that is down now lost the connection the SET went on,
         * but a paused one runs it when it runs again: it is sent the
         * delete when it is back (op_owe). */
        if ((mask & (1u << i)) && op_batch_add(op, i, true) != 0) {
            missed |= 1u << i;
        }
    }
    op_owe(op, op->ttl_ms, missed);
}

/* ---- reply decoding --------------------------------------------------- */

static enum redlock_node_result decode_acquire(struct cluster_op *op,
                                               struct node *node,
                                               const struct redisReply *r,
                                               int64_t *fence, int64_t *pttl)
{
    int i = node_index(node);
    enum redlock_acquire_form form = (enum redlock_acquire_form)op->form[i];
    struct replyview v;
    const struct redlock_reply *rv = replyview_of(&v, r);
    enum redlock_node_result res =
        redlock_classify_acquire(form, rv, fence, pttl);
    if (res != RL_FAILED) {
        note_accepted(op->c, i);
        return res;
    }
    note_refusal(op->c, op, i, "acquire", replyview_error_text(rv));
    if (redlock_form_refused(form, res, rv) && !op->c->fence_multi_refused[i]) {
        /* Later fenced acquires use the script, which needs no +multi
         * +exec. */
        op->c->fence_multi_refused[i] = true;
        log_warn(NULL,
                 "node %d: fenced acquire falls back to the script "
                 "(MULTI/EXEC failed; an ACL needs +multi +exec)",
                 i + 1);
    }
    return RL_FAILED;
}

/* The other scripts answer 1 (applied) or 0 (not held). */
static enum redlock_node_result decode_flag(struct cluster_op *op,
                                            struct node *node,
                                            const struct redisReply *r)
{
    struct replyview v;
    enum redlock_node_result res = redlock_classify_flag(replyview_of(&v, r));
    if (res == RL_FAILED) {
        note_refusal(op->c, op, node_index(node), "script", replyview_text(r));
    }
    return res;
}

static enum redlock_node_result decode_status(enum node_status status)
{
    (void)status;
    return RL_FAILED;
}

/* ---- outcomes --------------------------------------------------------- */

static void op_send_fence(struct cluster_op *op, int64_t value);

static bool op_sets_ttl(const struct cluster_op *op);

/* A won acquire or extend: its TTL counts toward the restart quarantine
 * until its lock can no longer stand. */
static void op_note_grant(const struct cluster_op *op)
{
    if (op_sets_ttl(op)) {
        quarantine_note_grant(op->c->quar, op->ttl_ms, op->round.start_us,
                              op->round.decided_us);
    }
}

/* The wire's error code for a verdict's answer. */
static enum proto_err answer_err(enum redlock_answer a)
{
    switch (a) {
    case RL_ANSWER_OK:
        return ERR_NONE;
    case RL_ANSWER_BUSY:
        return ERR_BUSY;
    case RL_ANSWER_DONE:
        return ERR_DONE;
    case RL_ANSWER_NOT_HELD:
        return ERR_NOT_HELD;
    case RL_ANSWER_NONE:
    case RL_ANSWER_NO_QUORUM:
        break;
    }
    return ERR_NO_QUORUM;
}

/* Fills res from op's verdict v (answer, validity, too_late) and the
 * nodes that refused op. */
static void result_from(struct cluster_result *res, const struct cluster_op *op,
                        const struct redlock_verdict *v)
{
    res->err = answer_err(v->answer);
    res->validity_ms = v->validity_ms;
    res->valid_until_us = v->valid_until_us;
    res->too_late = v->too_late;
    res->n_refused = __builtin_popcount(op->refused);
    if (op->refused != 0) {
        int i = __builtin_ctz(op->refused);
        res->refused_node = i + 1;
        res->refusal = op->c->refusal[i].text;
    }
    if (res->err == ERR_NO_QUORUM) {
        res->n_nodes = op->round.n_nodes;
        res->n_unreachable = __builtin_popcount(op->unreachable);
        res->n_quarantined = __builtin_popcount(op->quarantined);
    }
}

static void op_finish_acquire(struct cluster_op *op)
{
    struct redlock_verdict v;
    redlock_acquire_verdict(&op->round, op->fence, &v);
    if (op->round.outcome == RL_WON) {
        op_note_grant(op);
    }
    if (v.send_fence) {
        op_send_fence(op, v.fence);
        return;
    }
    if (v.answer == RL_ANSWER_NONE) {
        return;
    }
    struct cluster_result res;
    result_init(&res);
    res.n_ok = op->round.n_ok;
    res.pttl_min = op->round.pttl_min;
    result_from(&res, op, &v);
    if (v.answer == RL_ANSWER_BUSY && op->pttl_pending > 0) {
        /* The waiter backs off on the holder's PTTL: answer when the
         * PTTLs asked are in (pttl_cb). The rollback goes now. */
        op->busy_deferred = true;
    }
    if (v.rollback != 0) {
        METRIC_INC(rollbacks);
        op_remove_keys(op, v.rollback);
    }
    if (!op->busy_deferred) {
        op_answer(op, &res);
    }
}

/* A holder's PTTL, asked after its busy answer. */
static void pttl_cb(struct node *node, struct redisReply *reply,
                    enum node_status status, void *privdata)
{
    (void)node;
    struct cluster_op *op = privdata;
    op->outstanding--;
    op->pttl_pending--;
    if (status == NODE_REPLY && reply->type == REDIS_REPLY_INTEGER) {
        redlock_round_holder_pttl(&op->round, reply->integer);
    }
    if (op->pttl_pending == 0 && op->busy_deferred) {
        op->busy_deferred = false;
        struct cluster_result res;
        result_init(&res);
        res.err = ERR_BUSY;
        res.n_ok = op->round.n_ok;
        res.pttl_min = op->round.pttl_min;
        op_answer(op, &res);
    }
    op_release_if_finished(op);
}

/* Asks node i for the holder's PTTL after a busy answer to SET NX GET,
 * which does not carry it. */
static void op_ask_pttl(struct cluster_op *op, struct node *node)
{
    const char *argv[2] = {"PTTL", op->key};
    size_t lens[2] = {4, op->key_len};
    if (!op->c->closing &&
        node_command(node, 2, argv, lens, pttl_cb, op) == 0) {
        op->outstanding++;
        op->pttl_pending++;
    }
}

static void op_finish_other(struct cluster_op *op)
{
    struct redlock_verdict v;
    redlock_other_verdict(op->kind, &op->round, &v);
    if (v.answer == RL_ANSWER_NONE) {
        return;
    }
    if (op->round.outcome == RL_WON) {
        op_note_grant(op);
    }
    struct cluster_result res;
    result_init(&res);
    res.n_ok = op->round.n_ok;
    res.start_us = op->round.start_us;
    result_from(&res, op, &v);
    if (op->cb != NULL && res.err != ERR_NONE && res.err != ERR_NOT_HELD) {
        /* Not proved gone: the lock stays its owner's, whose retry must
         * ask the nodes again, not meet a record. */
        op->miss_ttl_ms = 0;
    }
    op_answer(op, &res);
}

/* The round's caller hears its verdict, once the round is decided. */
static void op_finish(struct cluster_op *op)
{
    if (op->kind == RL_OP_ACQUIRE) {
        op_finish_acquire(op);
    } else {
        op_finish_other(op);
    }
}

static void op_main_cb(struct node *node, struct redisReply *reply,
                       enum node_status status, void *privdata)
{
    struct cluster_op *op = privdata;
    int64_t fence = 0, pttl = -1;
    enum redlock_node_result res;
    if (status != NODE_REPLY) {
        res = decode_status(status);
    } else if (op->kind == RL_OP_ACQUIRE) {
        res = decode_acquire(op, node, reply, &fence, &pttl);
    } else {
        res = decode_flag(op, node, reply);
    }
    op_node_answer(op, node_index(node), node, res, fence, pttl);
}

/* Node i's answer to the op's main command (node: NULL when it came in a
 * batch, which only release, extend and complete use). */
static void op_node_answer(struct cluster_op *op, int i, struct node *node,
                           enum redlock_node_result res, int64_t fence,
                           int64_t pttl)
{
    /* This answer's own count is dropped only at the end: the decision
     * below may send rollbacks whose batch fails at once and answers
     * (here, nested) before it returns, which must not free the op under
     * this call. */
    if (res == RL_OK || res == RL_BUSY) {
        op->confirmed |= 1u << i;
    }
    if (op->given_up) {
        givenup_answered(op->c->gu, op->token, i, res);
    }
    bool was_decided = op->round.outcome != RL_UNDECIDED;
    /* node: NULL for a batch's answer, never an acquire's. */
    if (node != NULL &&
        redlock_ask_holder_pttl((enum redlock_acquire_form)op->form[i], res,
                                op->want_pttl, was_decided)) {
        op_ask_pttl(op, node);
    }
    enum redlock_outcome out =
        redlock_round_answer(&op->round, i, res, fence, pttl, util_now_us);
    if (was_decided) {
        /* A late answer after a lost acquisition: the rollback was queued
         * behind this SET already; nothing more to do. */
    } else if (out != RL_UNDECIDED) {
        op_finish(op);
    }
    op->outstanding--;
    op_release_if_finished(op);
}

/* The acquisition answers from its decided fence write-back. */
static void op_fence_finish(struct cluster_op *op)
{
    struct redlock_verdict v;
    redlock_fence_verdict(&op->round, &op->fence_round, util_now_us, &v);
    if (v.answer == RL_ANSWER_NONE || op->answered) {
        return;
    }
    struct cluster_result r;
    result_init(&r);
    r.n_ok = op->round.n_ok;
    result_from(&r, op, &v);
    if (v.answer == RL_ANSWER_OK) {
        /* Not round.fence_max: answers that arrived after the round was
         * won may have raised it past what a quorum now holds. */
        r.fence = op->fence_written;
        if (r.fence > op->c->fence_max_seen) {
            op->c->fence_max_seen = r.fence;
        }
    }
    if (v.rollback != 0) {
        METRIC_INC(rollbacks);
        op_remove_keys(op, v.rollback);
    }
    op_answer(op, &r);
}

/* Fence write-back answers: success once a quorum raised its counter while
 * still holding our token, within the lock's validity. */
static void op_fence_cb(struct node *node, struct redisReply *reply,
                        enum node_status status, void *privdata)
{
    struct cluster_op *op = privdata;
    enum redlock_node_result res = status == NODE_REPLY
                                       ? decode_flag(op, node, reply)
                                       : decode_status(status);
    bool was_decided = op->fence_round.outcome != RL_UNDECIDED;
    enum redlock_outcome out = redlock_round_answer(
        &op->fence_round, node_index(node), res, 0, -1, util_now_us);
    if (!was_decided && out != RL_UNDECIDED) {
        op_fence_finish(op); /* may roll back: see op_node_answer */
    }
    op->outstanding--;
    op_release_if_finished(op);
}

/* Writes value, the acquisition's fence, back to every node. */
static void op_send_fence(struct cluster_op *op, int64_t value)
{
    struct cluster *c = op->c;
    char val[24];
    op->fence_written = value;
    int vl = snprintf(val, sizeof(val), "%lld", (long long)op->fence_written);
    const char *argv[4] = {op->key, c->fence_key, op->token, val};
    size_t lens[4] = {op->key_len, c->fence_key_len, PROTO_TOKEN_LEN,
                      (size_t)vl};
    op->phase = PHASE_FENCE;
    redlock_fence_start(&op->fence_round, &op->round);
    bool prepared =
        node_prepare(&op->prep_fence, SCRIPT_FENCE_RAISE, 4, argv, lens) == 0;
    uint64_t now = util_now_us();
    for (int i = 0; i < c->n; i++) {
        if (prepared && send_node(c, i) != NULL &&
            node_send_prepared(send_node(c, i), &op->prep_fence, now,
                               op_fence_cb, op) == 0) {
            op->outstanding++;
        } else {
            redlock_round_answer(&op->fence_round, i, RL_SKIPPED, 0, -1,
                                 util_now_us);
        }
    }
    /* Decided already: not even a quorum could be asked, so undo the
     * acquisition. Answer now even when some write-backs went out: the
     * round is decided, so their callbacks will not answer (and main-round
     * replies may still be due too). */
    op_fence_finish(op);
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
    if (redlock_round_expire(&op->round, util_now_us) != RL_UNDECIDED) {
        op_finish(op);
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
    return redlock_op_sets_ttl(op->kind);
}

/* Sends the op now, or queues an acquire behind the admission limit. */
static void op_submit(struct cluster_op *op, uint32_t ttl_ms)
{
    struct cluster *c = op->c;
    op->ttl_ms = ttl_ms;
    /* While closing, nothing waits in the queue: the round is answered at
     * once (no node can be asked). */
    if (op->kind == RL_OP_ACQUIRE && !c->closing &&
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

/* The form of acquire node i gets: SET NX GET where the server has it
 * (7.0), in MULTI with INCR when fenced; the script on older servers,
 * with --acquire-script, and for fenced acquires on a node that refused
 * MULTI/EXEC. */
static enum redlock_acquire_form acquire_form(const struct cluster_op *op,
                                              int i)
{
    const struct cluster *c = op->c;
    return redlock_acquire_form_pick(c->cfg->acquire_script,
                                     node_version(c->nodes[i]), op->fence,
                                     c->fence_multi_refused[i]);
}

/* The command for node i: each form is formatted once per op, when the
 * first node needing it is sent. NULL when it cannot be (no scripts
 * loaded anywhere, no memory). */
static const struct node_prep *acquire_prep(struct cluster_op *op, int i)
{
    struct cluster *c = op->c;
    enum redlock_acquire_form form = acquire_form(op, i);
    op->form[i] = (uint8_t)form;
    char ttl[24];
    size_t tl = util_dec_u64(ttl, op->ttl_ms);
    if (form == RL_FORM_SCRIPT) {
        if (op->prep_main.buf == NULL) {
            const char *argv[5] = {op->key, c->fence_key, op->token, ttl,
                                   op->fence ? "1" : "0"};
            size_t lens[5] = {op->key_len, c->fence_key_len, PROTO_TOKEN_LEN,
                              tl, 1};
            if (node_prepare(&op->prep_main, SCRIPT_ACQUIRE, 5, argv, lens) !=
                0) {
                return NULL;
            }
            op->prep_main.guarded = true; /* a win on an emptied node */
        }
        return &op->prep_main;
    }
    if (op->prep_native.buf == NULL) {
        /* One op is either fenced or not, so one native form per op. */
        const char *argv[10] = {"MULTI",   "SET",          op->key,
                                op->token, "NX",           "PX",
                                ttl,       "GET",          "INCR",
                                c->fence_key};
        size_t lens[10] = {5, 3, op->key_len, PROTO_TOKEN_LEN, 2, 2, tl, 3,
                           4, c->fence_key_len};
        static const char exec[] = "EXEC";
        const char *targv[11];
        size_t tlens[11];
        int argcs[4] = {1, 7, 2, 1};
        memcpy(targv, argv, sizeof(argv));
        memcpy(tlens, lens, sizeof(lens));
        targv[10] = exec;
        tlens[10] = 4;
        int rc = form == RL_FORM_SET_GET
                     ? node_prepare_commands(&op->prep_native, 1, &argcs[1],
                                             &targv[1], &tlens[1])
                     : node_prepare_commands(&op->prep_native, 4, argcs, targv,
                                             tlens);
        if (rc != 0) {
            return NULL;
        }
        op->prep_native.guarded = true;
    }
    return &op->prep_native;
}

/* Sends the prepared round to every node. */
static void op_dispatch(struct cluster_op *op)
{
    struct cluster *c = op->c;
    uint32_t ttl_ms = op->ttl_ms;
    uint64_t now = util_now_us();
    if (op->kind == RL_OP_ACQUIRE) {
        op->dispatched = true;
        c->acquires_sent++;
    }
    redlock_round_start(&op->round, c->n, ttl_ms, c->cfg->drift_factor, now, 0);
    /* Hold a reference so a synchronous decision cannot free the op while
     * we are still sending. */
    op->outstanding++;
    for (int i = 0; i < c->n; i++) {
        const struct node_prep *prep = NULL;
        bool quarantined = quarantine_active(c->quar, i);
        bool asks = redlock_round_asks(op->kind, &op->round, quarantined);
        bool asked = asks && send_node(c, i) != NULL;
        if (asked && op->kind != RL_OP_ACQUIRE) {
            /* Release, extend, complete: one script per node per loop
             * turn over every such key (the round's clock started above,
             * before the batch goes out). */
            asked = op_batch_add(op, i, false) == 0;
        } else if (asked) {
            batch_order(c->batches, i, op->key_hash);
            prep = acquire_prep(op, i);
            asked = prep != NULL &&
                    node_send_prepared(send_node(c, i), prep, now, op_main_cb,
                                       op) == 0;
            if (asked) {
                op->outstanding++;
            }
        }
        if (!asked) {
            /* Why, for a no_quorum's message (a node left out only because
             * the round was already lost is neither). */
            if (quarantined && op->kind == RL_OP_ACQUIRE) {
                op->quarantined |= 1u << i;
            } else if (asks || !node_is_up(c->nodes[i])) {
                op->unreachable |= 1u << i; /* down, or too far behind */
            }
            redlock_round_answer(&op->round, i, RL_SKIPPED, 0, -1,
                                 util_now_us);
        }
    }
    op->outstanding--;
    enum redlock_outcome out = redlock_round_outcome(&op->round);
    /* A short TTL can run out of validity before the node timeout: from
     * then on the round cannot be won, so stop waiting for it. */
    int64_t ms =
        out == RL_UNDECIDED
            ? redlock_round_deadline_ms(op->kind, ttl_ms, c->cfg->drift_factor,
                                        c->cfg->node_timeout_ms)
            : -1;
    if (ms >= 0) {
        struct timeval tv = {(time_t)(ms / 1000),
                             (suseconds_t)(ms % 1000) * 1000};
        evtimer_add(op->deadline_ev, &tv);
    }
    if (out != RL_UNDECIDED && !op->answered && op->phase == PHASE_MAIN) {
        op_finish(op);
    }
    op_release_if_finished(op);
}

/* ---- locks given up --------------------------------------------------- */

/* The nodes in mask did not confirm op's delete (a release proved, or a lost
 * acquisition's rollback): its token is remembered as given up for as long
 * as a key of ttl_ms may stand (redlock_given_up_until_us), and those nodes
 * are sent the delete as they come back (a SET that waits in a node paused
 * longer than that still runs when it resumes). Nothing when mask is 0, the
 * common case, so a lock's cycle costs no more when every node answers. */
static void op_owe(struct cluster_op *op, uint32_t ttl_ms, uint32_t mask)
{
    struct cluster *c = op->c;
    if (mask == 0 || c->closing) {
        return;
    }
    uint64_t until =
        redlock_given_up_until_us(util_now_us(), ttl_ms, c->cfg->drift_factor);
    if (givenup_add(c->gu, &op->name, op->token, until, mask) != 0) {
        log_error(NULL, "delete: out of memory remembering the nodes that "
                        "missed a delete");
    }
}

/* Sends node i the delete of a given-up token again (givenup_send_fn), on
 * its own: a rollback entry of a batch, no announcement, no round. */
static int op_resend_cb(void *priv, int i, const struct lock_name *name,
                        const char *token)
{
    struct cluster *c = priv;
    struct cluster_op *op = op_new(c, RL_OP_RELEASE, name, token, NULL, NULL);
    if (op == NULL) {
        return -1; /* out of memory: owed still, sent at the next come-back */
    }
    op->answered = true; /* nobody waits for it */
    op->given_up = true;
    /* Held across the add: a full batch whose send fails answers the entry
     * (and would free the op) before op_batch_add returns. */
    op->outstanding++;
    int rc = op_batch_add(op, i, true);
    op->outstanding--;
    op_release_if_finished(op);
    return rc;
}

/* Every node's state change: the quarantine's, and for a node that came
 * up, the deletes of given-up locks it owes. */
static void node_state_cb(struct node *node, enum node_state state, void *priv)
{
    struct cluster *c = priv;
    quarantine_node_cb(node, state, c->quar);
    if (state != NODE_UP || c->closing) {
        return;
    }
    givenup_node_up(c->gu, node_index(node));
}

/* ---- public operations ------------------------------------------------ */

int cluster_acquire(struct cluster *c, const struct lock_name *name,
                    const char *token, uint32_t ttl_ms, bool fence,
                    bool want_pttl, cluster_done_fn *cb, void *priv)
{
    struct cluster_op *op = op_new(c, RL_OP_ACQUIRE, name, token, cb, priv);
    if (op == NULL) {
        return -1;
    }
    op->fence = fence;
    op->want_pttl = want_pttl;
    op->ttl_ms = ttl_ms;
    /* Formatted per node form when sent (acquire_prep). */
    op_submit(op, ttl_ms);
    return 0;
}

int cluster_extend(struct cluster *c, const struct lock_name *name,
                   const char *token, uint32_t ttl_ms, cluster_done_fn *cb,
                   void *priv)
{
    struct cluster_op *op = op_new(c, RL_OP_EXTEND, name, token, cb, priv);
    if (op == NULL) {
        return -1;
    }
    op_submit(op, ttl_ms); /* batched per node: batch_add */
    return 0;
}

int cluster_release(struct cluster *c, const struct lock_name *name,
                    const char *token, uint32_t ttl_ms, cluster_done_fn *cb,
                    void *priv)
{
    struct cluster_op *op = op_new(c, RL_OP_RELEASE, name, token, cb, priv);
    if (op == NULL) {
        return -1;
    }
    op->miss_ttl_ms = ttl_ms;
    /* No validity to account for: a release never makes a lock valid. */
    op_submit(op, PROTO_TTL_MAX);
    return 0;
}

int cluster_give_up(struct cluster *c, const struct lock_name *name,
                    const char *token, uint64_t until_us, cluster_done_fn *cb,
                    void *priv)
{
    if (givenup_add(c->gu, name, token, until_us, redlock_all_nodes(c->n)) !=
        0) {
        log_error(NULL, "give-up: out of memory remembering a lock");
    }
    struct cluster_op *op = op_new(c, RL_OP_RELEASE, name, token, cb, priv);
    if (op == NULL) {
        return -1; /* owed by every node: sent as each comes up */
    }
    op->given_up = true;
    op_submit(op, PROTO_TTL_MAX);
    return 0;
}

bool cluster_given_up(const struct cluster *c, const char *token,
                      const struct lock_name *name)
{
    return givenup_refuses(c->gu, token, name);
}

int cluster_complete(struct cluster *c, const struct lock_name *name,
                     const char *token, uint64_t keep_ms, cluster_done_fn *cb,
                     void *priv)
{
    struct cluster_op *op = op_new(c, RL_OP_COMPLETE, name, token, cb, priv);
    if (op == NULL) {
        return -1;
    }
    op->keep_ms = keep_ms;
    op_submit(op, PROTO_TTL_MAX);
    return 0;
}

struct cluster *cluster_create(struct event_base *base,
                               const struct config *cfg)
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
    pool_init(&c->op_pool, sizeof(struct cluster_op), OP_POOL_KEEP, op_drop);
    int fl =
        snprintf(c->fence_key, sizeof(c->fence_key), "%sfence", cfg->prefix);
    c->fence_key_len = (size_t)fl;
    snprintf(c->dataset_key, sizeof(c->dataset_key), "%sdataset", cfg->prefix);

    struct node_options opts = {
        .timeout_ms = cfg->node_timeout_ms,
        .connect_timeout_ms = config_connect_timeout_ms(cfg),
        .stall_ms =
            cfg->node_timeout_ms * 8 < 2000 ? 2000 : cfg->node_timeout_ms * 8,
        .backoff_base_ms = 50,
        .backoff_cap_ms = 5000,
        .max_pending = 1 << 20,
        .dataset_key = c->dataset_key,
        .dataset_mark = locks_new_token,
    };
    c->batches = batch_create(base, c->nodes, c->n, c->quorum,
                              op_batch_answer_cb);
    c->gu = givenup_create(base, cfg, c->nodes, c->n, op_resend_cb, c);
    if (c->batches == NULL || c->gu == NULL) {
        cluster_destroy(c);
        return NULL;
    }
    /* Before the nodes: it hears their state changes. */
    c->quar = quarantine_create(base, cfg, c->nodes, c->n, &c->fence_max_seen);
    if (c->quar == NULL) {
        cluster_destroy(c);
        return NULL;
    }
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
        c->nodes[i] =
            node_create(base, i, &cfg->nodes[i], &opts, node_state_cb, c);
        if (c->nodes[i] == NULL) {
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
    /* Open batches go out first, so that node_destroy answers their
     * entries (as dropped) and their ops are freed. */
    if (c->batches != NULL) {
        batch_flush(c->batches);
        batch_stop(c->batches);
    }
    /* node_destroy runs the node's pending callbacks (a fence repair's,
     * an op's): with closing set they send nothing and arm no timer,
     * and every timer is freed only once no callback can run any more. */
    c->closing = true;
    if (c->gu != NULL) {
        givenup_stop(c->gu);
    }
    quarantine_stop(c->quar);
    for (int i = 0; i < c->n; i++) {
        node_destroy(c->nodes[i]);
        c->nodes[i] = NULL;
    }
    quarantine_destroy(c->quar);
    /* Acquires still queued were never sent: their callbacks run too
     * (every pending callback runs exactly once), with shutting_down. */
    while (c->queue_head != NULL) {
        struct cluster_op *op = c->queue_head;
        c->queue_head = op->next_queued;
        if (c->queue_head == NULL) {
            c->queue_tail = NULL;
        }
        c->queue_len--;
        struct cluster_result r;
        result_init(&r);
        r.err = ERR_SHUTTING_DOWN;
        op_answer(op, &r);
        op_release_if_finished(op);
    }
    pool_drain(&c->op_pool);
    batch_destroy(c->batches);
    givenup_destroy(c->gu);
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

struct node *cluster_node(const struct cluster *c, int i)
{
    return (i >= 0 && i < c->n) ? c->nodes[i] : NULL;
}

bool cluster_node_quarantined(const struct cluster *c, int i)
{
    return quarantine_active(c->quar, i);
}

const char *cluster_node_refusal(const struct cluster *c, int i)
{
    return i >= 0 && i < c->n && c->refusal[i].active ? c->refusal[i].text
                                                      : NULL;
}

int cluster_inflight(const struct cluster *c)
{
    return c->ops_inflight;
}
