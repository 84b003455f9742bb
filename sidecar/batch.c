/* batch.c: releases, extends, completes and rollbacks gathered per node
 * during a loop turn and sent as one script over their keys (batch.h).
 *
 *   batch_add      an entry joins its node's open batch (bs->open[i]); the
 *                  first one of the turn makes batch_ev active
 *   batch_ev_cb    the turn's end: every open batch goes out, formatted
 *                  once for the nodes whose batches hold the same entries
 *   batch_cb       the node's answer: each entry's own, to batch_answer_fn
 *   native_cb      or, on a node with native forms (batch_goes_native),
 *                  each entry's own command's answer
 *
 * A batch is owned by its batcher while open, then by its node callback,
 * which answers every entry and frees it (pooled). */
#include "batch.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "log.h"
#include "node.h"
#include "pool.h"
#include "proto.h"
#include "replyview.h"
#include "util.h"

#define BATCH_POOL_KEEP 64 /* batches kept for reuse: a turn's worth */

struct batch;

/* A native command's privdata: its entry. */
struct batch_slot {
    struct batch *b;
    int j;
};

/* Up to BATCH_MAX entries on one node, in the order issued, in one script
 * call, or one native command each. */
struct batch {
    struct batcher *bs;
    int node;
    int n;
    struct batch_entry e[BATCH_MAX];
    struct node_prep prep;
    /* Nodes mostly get the same entries in a turn: the command is then
     * formatted once. owner is the batch whose prep went out (itself, or
     * an identical batch of another node), refs the batches still due to
     * answer that send that prep (the owner is recycled at 0). */
    struct batch *owner;
    int refs;
    bool publish; /* this node announces its releases and completes */
    int left;     /* native: entries whose answer is still due */
    uint8_t native[BATCH_MAX]; /* native: each entry's enum batch_native */
    struct batch_slot slot[BATCH_MAX];
};

struct batcher {
    struct node *const *nodes; /* borrowed: owned by the caller, n of them */
    int n;
    int quorum;
    batch_answer_fn *answer;
    bool stopped; /* the nodes are closing: send nothing, pool nothing */
    struct batch *open[REDLOCK_MAX_NODES]; /* sent at the turn's end */
    /* The key hashes of each open batch (batch_order). */
    uint64_t open_bloom[REDLOCK_MAX_NODES][BATCH_BLOOM_WORDS];
    struct event *batch_ev; /* owned */
    bool batch_armed;
    unsigned wake_turn; /* whose turn to announce (batch_publishers) */
    struct pool pool; /* owned: batches kept for reuse */
};

/* The node to send to, or NULL once stopped: closing a node runs its
 * pending callbacks at once, and those must neither send to a node already
 * freed nor start new work. */
static struct node *send_node(const struct batcher *bs, int i)
{
    return bs->stopped ? NULL : bs->nodes[i];
}

static void batch_recycle(struct batch *b)
{
    struct batcher *bs = b->bs;
    node_prep_free(&b->prep);
    if (bs->stopped) {
        free(b);
    } else {
        pool_put(&bs->pool, b);
    }
}

/* b has answered its entries: it and the prep it sent may go. */
static void batch_free(struct batch *b)
{
    struct batch *o = b->owner;
    if (o != b) {
        batch_recycle(b);
    }
    if (--o->refs == 0) {
        batch_recycle(o);
    }
}

static void batch_answer(const struct batch *b, int j,
                         enum redlock_node_result res, const char *refusal)
{
    const struct batch_entry *e = &b->e[j];
    b->bs->answer(e->priv, b->node, e->rollback, res, refusal);
}

static void batch_cb(struct node *node, struct redisReply *reply,
                     enum node_status status, void *privdata)
{
    struct batch *b = privdata;
    bool whole = status == NODE_REPLY && b->n > 1 &&
                 reply->type == REDIS_REPLY_ARRAY &&
                 reply->elements == (size_t)b->n;
    if (status == NODE_REPLY && b->n > 1 && !whole) {
        log_warn(NULL, "node %d: batched script over %d keys: %s",
                 node_index(node) + 1, b->n, replyview_text(reply));
    } else if (status != NODE_REPLY) {
        log_debug(NULL, "node %d: batched script over %d keys %s",
                  node_index(node) + 1, b->n,
                  status == NODE_TIMEOUT ? "timed out" : "dropped");
    }
    for (int j = 0; j < b->n; j++) {
        enum redlock_node_result res = RL_FAILED;
        const char *refusal = NULL;
        if (status == NODE_REPLY && (b->n == 1 || whole)) {
            /* Each key's own answer: 1, 0, or the error it met. */
            const struct redisReply *el = b->n == 1 ? reply : reply->element[j];
            struct replyview v;
            res = redlock_classify_flag(replyview_of(&v, el));
            if (res == RL_FAILED) {
                refusal = el->type == REDIS_REPLY_STRING ||
                                  el->type == REDIS_REPLY_ERROR
                              ? el->str
                              : "(unexpected reply)";
            }
        }
        batch_answer(b, j, res, refusal);
    }
    batch_free(b);
}

/* The channel entry j announces on, "" when none (batch_announces). */
static const char *batch_entry_channel(const struct batch *b, int j,
                                       size_t *len)
{
    const struct batch_entry *e = &b->e[j];
    if (!batch_announces(e, b->publish)) {
        *len = 0;
        return "";
    }
    *len = e->channel_len;
    return e->channel;
}

/* A batch of one goes as the single-key script of its entry, the cheapest
 * call for a lone key. */
static int batch_prepare_one(struct batch *b)
{
    const struct batch_entry *e = &b->e[0];
    char num[24];
    size_t ch_len;
    const char *ch = batch_entry_channel(b, 0, &ch_len);
    const char *argv[4] = {e->key, e->token, num, ch};
    size_t lens[4] = {e->key_len, PROTO_TOKEN_LEN, 0, ch_len};
    if (e->action == BATCH_RELEASE) {
        argv[2] = ch;
        lens[2] = ch_len;
        return node_prepare(&b->prep, SCRIPT_RELEASE, 3, argv, lens);
    }
    lens[2] = util_dec_u64(num, e->num);
    if (e->action == BATCH_EXTEND) {
        return node_prepare(&b->prep, SCRIPT_EXTEND, 3, argv, lens);
    }
    return node_prepare(&b->prep, SCRIPT_COMPLETE, 4, argv, lens);
}

/* The arguments of b's batch script (scripts.h): the keys, then for
 * SCRIPT_BATCH per key its action, token, number (ttl or keep_ms) and
 * channel; for the release one the tokens, then the channels on a node
 * that announces; for the extend one the tokens, then the ttls. */
static int batch_prepare(struct batch *b)
{
    static const char *const action_arg[] = {"r", "e", "c"};
    const char *argv[BATCH_MAX * 5];
    size_t lens[BATCH_MAX * 5];
    char nums[BATCH_MAX][24];
    enum node_script script = batch_script(b->e, b->n);
    int a = 0;
    for (int j = 0; j < b->n; j++) {
        argv[a] = b->e[j].key;
        lens[a++] = b->e[j].key_len;
    }
    if (script != SCRIPT_BATCH) {
        for (int j = 0; j < b->n; j++) {
            argv[a] = b->e[j].token;
            lens[a++] = PROTO_TOKEN_LEN;
        }
        if (script == SCRIPT_BATCH_EXTEND) {
            for (int j = 0; j < b->n; j++) {
                argv[a] = nums[j];
                lens[a++] = util_dec_u64(nums[j], b->e[j].num);
            }
        } else if (b->publish) {
            for (int j = 0; j < b->n; j++) {
                argv[a] = batch_entry_channel(b, j, &lens[a]);
                a++;
            }
        }
        return node_prepare_keys(&b->prep, script, b->n, a, argv, lens);
    }
    for (int j = 0; j < b->n; j++) {
        const struct batch_entry *e = &b->e[j];
        bool release = e->action == BATCH_RELEASE;
        argv[a] = action_arg[e->action];
        lens[a++] = 1;
        argv[a] = e->token;
        lens[a++] = PROTO_TOKEN_LEN;
        argv[a] = nums[j];
        lens[a++] = release ? 0 : util_dec_u64(nums[j], e->num);
        argv[a] = batch_entry_channel(b, j, &lens[a]);
        a++;
    }
    return node_prepare_keys(&b->prep, SCRIPT_BATCH, b->n, a, argv, lens);
}

static void native_cb(struct node *node, struct redisReply *reply,
                      enum node_status status, void *privdata)
{
    struct batch_slot *slot = privdata;
    struct batch *b = slot->b;
    enum batch_native form = (enum batch_native)b->native[slot->j];
    enum redlock_node_result res = RL_FAILED;
    const char *refusal = NULL;
    if (status == NODE_REPLY) {
        struct replyview v;
        res = batch_native_result(form, replyview_of(&v, reply));
        if (res == RL_FAILED) {
            refusal = reply->type == REDIS_REPLY_STRING ||
                              reply->type == REDIS_REPLY_ERROR
                          ? reply->str
                          : "(unexpected reply)";
        }
        if (reply->type == REDIS_REPLY_ERROR &&
            strncmp(reply->str, "NOPERM", 6) == 0) {
            /* An ACL that allows the scripts but not this command. */
            node_caps_refused(node, batch_native_caps(form), reply->str);
        }
    } else {
        log_debug(NULL, "node %d: native %s %s", node_index(node) + 1,
                  form == BATCH_NATIVE_SET_IFEQ ? "extend" : "release",
                  status == NODE_TIMEOUT ? "timed out" : "dropped");
    }
    batch_answer(b, slot->j, res, refusal);
    if (--b->left == 0) {
        batch_free(b);
    }
}

/* Sends each entry of b as its native command on node, each answered by
 * its own reply; an entry that cannot be sent fails at once. The extra
 * count held over the loop keeps b alive until every send is made. */
static void batch_send_native(struct batch *b, struct node *node)
{
    unsigned caps = node_caps(node);
    b->owner = b;
    b->refs = 1;
    b->left = b->n + 1;
    for (int j = 0; j < b->n; j++) {
        const struct batch_entry *e = &b->e[j];
        enum batch_native form = batch_native_of(e, false, caps);
        char ttl[24];
        const char *argv[7] = {NULL,     e->key, e->token, "IFEQ",
                               e->token, "PX",   ttl};
        size_t lens[7] = {0, e->key_len, PROTO_TOKEN_LEN, 4, PROTO_TOKEN_LEN,
                          2, 0};
        int argc = 3;
        if (form == BATCH_NATIVE_SET_IFEQ) {
            argv[0] = "SET";
            lens[0] = 3;
            lens[6] = util_dec_u64(ttl, e->num);
            argc = 7;
        } else if (form == BATCH_NATIVE_DELIFEQ) {
            argv[0] = "DELIFEQ";
            lens[0] = 7;
        } else {
            argv[0] = "DELEX";
            lens[0] = 5;
            argv[2] = "IFEQ";
            lens[2] = 4;
            argv[3] = e->token;
            lens[3] = PROTO_TOKEN_LEN;
            argc = 4;
        }
        b->native[j] = (uint8_t)form;
        b->slot[j].b = b;
        b->slot[j].j = j;
        if (node_command(node, argc, argv, lens, native_cb, &b->slot[j]) != 0) {
            batch_answer(b, j, RL_FAILED, NULL);
            b->left--;
        }
    }
    if (--b->left == 0) {
        batch_free(b);
    }
}

/* Sends node i's open batch, if any, with like's command when like (sent
 * in this turn, its answer not yet in) holds the same entries; when it
 * cannot be sent, every entry fails there at once. Returns the batch sent
 * with a command of its own (a template for the next node), else NULL. */
static struct batch *batch_send_like(struct batcher *bs, int i,
                                     struct batch *like, uint32_t publishers)
{
    struct batch *b = bs->open[i];
    if (b == NULL) {
        return NULL;
    }
    b->publish = (publishers >> i) & 1u;
    bs->open[i] = NULL; /* entries added from here on start anew */
    memset(bs->open_bloom[i], 0, sizeof(bs->open_bloom[i]));
    struct node *node = send_node(bs, i);
    int rc = 0;
    if (node != NULL && node_is_up(node) &&
        batch_goes_native(b->e, b->n, b->publish, node_caps(node))) {
        batch_send_native(b, node);
        return NULL; /* no template: another node formats its own */
    }
    if (like != NULL &&
        batch_same(like->e, like->n, like->publish, b->e, b->n, b->publish)) {
        b->owner = like;
    } else {
        b->owner = b;
        rc = b->n == 1 ? batch_prepare_one(b) : batch_prepare(b);
    }
    b->owner->refs++;
    if (rc == 0 && node != NULL &&
        node_send_prepared(node, &b->owner->prep, util_now_us(), batch_cb,
                           b) == 0) {
        return b->owner == b ? b : NULL;
    }
    /* Down since the entries were added: as if never sent. */
    for (int j = 0; j < b->n; j++) {
        batch_answer(b, j, RL_FAILED, NULL);
    }
    batch_free(b);
    return NULL;
}

/* The nodes that announce this turn's releases and completes; the turn
 * moves on to the next ones at its end (batch_ev_cb). */
static uint32_t batch_publishers(const struct batcher *bs)
{
    uint32_t up = 0;
    for (int i = 0; i < bs->n; i++) {
        struct node *node = send_node(bs, i);
        if (node != NULL && node_is_up(node)) {
            up |= 1u << i;
        }
    }
    return redlock_wake_publishers(up, bs->n, bs->quorum, bs->wake_turn);
}

static void batch_send(struct batcher *bs, int i)
{
    (void)batch_send_like(bs, i, NULL, batch_publishers(bs));
}

/* End of the loop turn: every open batch goes out. Batches opened by the
 * answers this gives (a failed send answers at once) are sent too, or
 * wait for the next turn. */
static void batch_ev_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct batcher *bs = arg;
    bs->batch_armed = false;
    uint32_t publishers = batch_publishers(bs);
    bs->wake_turn++;
    /* One template for the nodes that announce, one for the others. */
    struct batch *like[2] = {NULL, NULL};
    for (int i = 0; i < bs->n; i++) {
        int p = (int)((publishers >> i) & 1u);
        struct batch *sent = batch_send_like(bs, i, like[p], publishers);
        if (sent != NULL) {
            like[p] = sent;
        }
    }
}

void batch_order(struct batcher *bs, int i, uint32_t key_hash)
{
    if (batch_bloom_has(bs->open_bloom[i], key_hash)) {
        batch_send(bs, i);
    }
}

int batch_add(struct batcher *bs, int i, const struct batch_entry *e)
{
    struct node *node = send_node(bs, i);
    if (node == NULL || !node_is_up(node)) {
        return -1;
    }
    struct batch *b = bs->open[i];
    if (b == NULL) {
        if ((b = pool_new(&bs->pool)) == NULL) {
            return -1;
        }
        b->bs = bs;
        b->node = i;
        b->n = 0;
        b->prep.buf = NULL;
        b->owner = NULL;
        b->refs = 0;
        bs->open[i] = b;
    }
    b->e[b->n++] = *e;
    batch_bloom_add(bs->open_bloom[i], e->key_hash);
    if (b->n == BATCH_MAX) {
        batch_send(bs, i);
    } else if (!bs->batch_armed) {
        bs->batch_armed = true;
        event_active(bs->batch_ev, EV_TIMEOUT, 1);
    }
    return 0;
}

void batch_flush(struct batcher *bs)
{
    for (int i = 0; i < bs->n; i++) {
        if (bs->nodes[i] != NULL) {
            batch_send(bs, i);
        }
    }
}

void batch_stop(struct batcher *bs)
{
    bs->stopped = true;
}

struct batcher *batch_create(struct event_base *base, struct node *const *nodes,
                             int n, int quorum, batch_answer_fn *answer)
{
    struct batcher *bs = calloc(1, sizeof(*bs));
    if (bs == NULL) {
        return NULL;
    }
    bs->nodes = nodes;
    bs->n = n;
    bs->quorum = quorum;
    bs->answer = answer;
    pool_init(&bs->pool, sizeof(struct batch), BATCH_POOL_KEEP, NULL);
    bs->batch_ev = event_new(base, -1, 0, batch_ev_cb, bs);
    if (bs->batch_ev == NULL) {
        free(bs);
        return NULL;
    }
    return bs;
}

void batch_destroy(struct batcher *bs)
{
    if (bs == NULL) {
        return;
    }
    pool_drain(&bs->pool);
    event_free(bs->batch_ev);
    free(bs);
}
