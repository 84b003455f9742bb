/* batch.h: per-node batches of compare-and-act scripts.
 *
 * Releases, extends, completes and rollbacks issued during a loop turn are
 * gathered per node and sent as one script over their keys at the turn's
 * end, when a batch is full, or before an acquire of one of their keys on
 * that node (order on a connection is order on the node). Each key still
 * compares its own token: batching changes the number of calls, not what
 * each key's check does.
 *
 * The caller describes each entry (struct batch_entry: its key, token,
 * channel and number, all borrowed until the entry is answered) and hears
 * each entry's answer through the batch_answer_fn it gave batch_create,
 * with the entry's priv; batch.c knows nothing of the operation behind it.
 * The decisions (which script, whether two nodes' batches share one
 * command, the key filter) are inline below, pure, and unit-tested. */
#ifndef REDLOCKD_BATCH_H
#define REDLOCKD_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "caps.h"
#include "redlock.h"
#include "scripts.h"

struct event_base;
struct node;
struct batcher;

/* Keys per batched script: past a few dozen the per-key work dominates
 * (measured: 7.0 us of redis CPU per key alone, 2.9 at 8, 2.1 at 32, 2.0
 * at 64, 2.2 at 128), and a bounded batch bounds the script's run time. */
#define BATCH_MAX 64
#define BATCH_BLOOM_WORDS 16 /* 1024 bits per node */

/* What an entry's script does to its key. */
enum batch_action {
    BATCH_RELEASE = 0, /* compare-and-delete (a rollback too) */
    BATCH_EXTEND,      /* compare-and-pexpire to num ms */
    BATCH_COMPLETE,    /* compare-and-mark done for num ms */
};

/* One key's script in a batch. Every pointer is borrowed: the caller keeps
 * it alive until the entry is answered. */
struct batch_entry {
    void *priv;          /* the caller's, handed back with the answer */
    const char *key;     /* key_len bytes */
    const char *token;   /* PROTO_TOKEN_LEN bytes */
    const char *channel; /* channel_len bytes: where a release or a
                            complete announces */
    uint64_t num;        /* extend: ttl ms; complete: keep ms */
    uint32_t key_len;
    uint32_t channel_len;
    uint32_t key_hash; /* batch_key_hash(key): acquire ordering */
    uint8_t action;    /* enum batch_action */
    bool rollback;     /* the compare-and-delete after a lost acquire:
                          announces nothing (the key was never ours) */
};

/* batch_answer_fn: entry priv's answer from node: res (RL_OK applied,
 * RL_BUSY not held, RL_FAILED error, timeout or not sent); rollback as
 * added; refusal the error text that key met on the node when its own
 * reply was one, else NULL. Runs exactly once per entry added. */
typedef void batch_answer_fn(void *priv, int node, bool rollback,
                             enum redlock_node_result res, const char *refusal);

/* batch_create: the batches of n nodes (borrowed: nodes, an array the
 * caller fills and keeps, NULL slots allowed) on base; quorum picks the
 * nodes that announce (redlock_wake_publishers). Returns NULL when out of
 * memory. */
struct batcher *batch_create(struct event_base *base, struct node *const *nodes,
                             int n, int quorum, batch_answer_fn *answer);

/* batch_add: adds e (copied; what it points to is borrowed) to node i's
 * open batch, sent at the end of the loop turn or when full. Returns 0, or
 * -1 (the node is not up, the batches are stopped, or no memory): not
 * added, and its answer never comes. */
int batch_add(struct batcher *bs, int i, const struct batch_entry *e);

/* batch_order: before an acquire of the key of hash key_hash goes to node
 * i: a batch that may hold that key goes first, so the node applies them
 * in the order they were issued (a release, then the next waiter's SET
 * NX). Other keys' commands may overtake a batch: they commute. */
void batch_order(struct batcher *bs, int i, uint32_t key_hash);

/* batch_flush: sends every node's open batch now (before the nodes close,
 * so that closing answers their entries as dropped). */
void batch_flush(struct batcher *bs);

/* batch_stop: from now on nothing is added or sent, and answered batches
 * are freed, not pooled: the nodes are closing and run their callbacks. */
void batch_stop(struct batcher *bs);

/* batch_destroy: frees bs, once no node callback can run any more. */
void batch_destroy(struct batcher *bs);

/* ---- pure decisions --------------------------------------------------- */

/* batch_key_hash: FNV-1a of s[0..n): acquire ordering only, so collisions
 * only cost an early send. */
static inline uint32_t batch_key_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    }
    return h;
}

/* batch_bloom_add, batch_bloom_has: a node's filter of the key hashes in
 * its open batch (bloom, BATCH_BLOOM_WORDS words). */
static inline void batch_bloom_add(uint64_t *bloom, uint32_t h)
{
    bloom[(h >> 6) % BATCH_BLOOM_WORDS] |= 1ull << (h & 63);
}

static inline bool batch_bloom_has(const uint64_t *bloom, uint32_t h)
{
    return (bloom[(h >> 6) % BATCH_BLOOM_WORDS] & (1ull << (h & 63))) != 0;
}

/* batch_announces: whether e announces on its channel in a batch of a node
 * that publishes (publish) or not: a rollback never (the key was never
 * ours to announce), an extend has nothing to announce. */
static inline bool batch_announces(const struct batch_entry *e, bool publish)
{
    return publish && !e->rollback && e->action != BATCH_EXTEND;
}

/* batch_script: the script for the n entries e: the release or the extend
 * one when every entry is of that kind (the common turns: a cycle's
 * releases, a renewal's extends), SCRIPT_BATCH for a mix. n > 1: a lone
 * entry goes as its own single-key script. */
static inline enum node_script batch_script(const struct batch_entry *e, int n)
{
    bool all_release = true;
    bool all_extend = true;
    for (int j = 0; j < n; j++) {
        all_release = all_release && e[j].action == BATCH_RELEASE;
        all_extend = all_extend && e[j].action == BATCH_EXTEND;
    }
    return all_release  ? SCRIPT_BATCH_RELEASE
           : all_extend ? SCRIPT_BATCH_EXTEND
                        : SCRIPT_BATCH;
}

/* The native command an entry goes as on a node that offers it (caps.h),
 * instead of its script. */
enum batch_native {
    BATCH_NATIVE_NONE = 0, /* its script */
    BATCH_NATIVE_SET_IFEQ, /* extend: SET key token IFEQ token PX ttl */
    BATCH_NATIVE_DELIFEQ,  /* release: DELIFEQ key token */
    BATCH_NATIVE_DELEX,    /* release: DELEX key IFEQ token */
};

/* batch_native_of: the native command for e on a node of caps (enum
 * caps_flag), e announcing there (announces) or not. A release that
 * announces keeps its script: one call that deletes and publishes, where
 * the native form would take two commands. A complete has no native
 * form. */
static inline enum batch_native batch_native_of(const struct batch_entry *e,
                                                bool announces, unsigned caps)
{
    if (e->action == BATCH_EXTEND) {
        return (caps & CAPS_SET_IFEQ) != 0 ? BATCH_NATIVE_SET_IFEQ
                                           : BATCH_NATIVE_NONE;
    }
    if (e->action != BATCH_RELEASE || announces) {
        return BATCH_NATIVE_NONE;
    }
    return (caps & CAPS_DELIFEQ) != 0 ? BATCH_NATIVE_DELIFEQ
           : (caps & CAPS_DELEX) != 0 ? BATCH_NATIVE_DELEX
                                      : BATCH_NATIVE_NONE;
}

/* batch_native_caps: the capability flag form rests on. */
static inline unsigned batch_native_caps(enum batch_native form)
{
    return form == BATCH_NATIVE_SET_IFEQ  ? CAPS_SET_IFEQ
           : form == BATCH_NATIVE_DELIFEQ ? CAPS_DELIFEQ
           : form == BATCH_NATIVE_DELEX   ? CAPS_DELEX
                                          : 0;
}

/* batch_goes_native: whether the n entries e of a node of caps (publish:
 * it announces this turn) go as one native command each rather than one
 * script: every entry has a native form, and, past one entry, every one
 * is an extend. Measured on Valkey 8.1 (tests/bench/native_cost.py,
 * the server's whole CPU per key, a turn's K commands written at once;
 * medians of two runs of five): SET IFEQ PX cost 3.4 us at 64 keys a
 * turn and 4.9 to 5.5 at 8, SCRIPT_BATCH_EXTEND 4.6 to 4.8 and 6.8 to
 * 7.0, and a lone key 17 to 21 against SCRIPT_EXTEND's 23 to 29; so
 * extends go native in any number. No server here has a native compare-and-
 * delete (the test module's is no measure of Valkey 9's or Redis 8.4's),
 * so releases go native alone, where it saves the script call, and a
 * turn of several stays one SCRIPT_BATCH_RELEASE. */
static inline bool batch_goes_native(const struct batch_entry *e, int n,
                                     bool publish, unsigned caps)
{
    for (int j = 0; j < n; j++) {
        bool announces =
            batch_announces(&e[j], publish) && e[j].channel_len > 0;
        if (batch_native_of(&e[j], announces, caps) == BATCH_NATIVE_NONE ||
            (n > 1 && e[j].action != BATCH_EXTEND)) {
            return false;
        }
    }
    return n > 0;
}

/* batch_native_result: an entry's answer from its native command's reply
 * v, as its script's 1 or 0 would be: SET ... IFEQ answers OK when the key
 * held the token (its TTL is then set) and nil when not; DELIFEQ and
 * DELEX 1 or 0. Anything else (an error: WRONGTYPE, ...) is RL_FAILED. */
static inline enum redlock_node_result
batch_native_result(enum batch_native form, const struct redlock_reply *v)
{
    if (form != BATCH_NATIVE_SET_IFEQ) {
        return redlock_classify_flag(v);
    }
    if (v->kind == RLR_NIL) {
        return RL_BUSY;
    }
    return v->kind == RLR_STRING && v->len == 2 && memcmp(v->str, "OK", 2) == 0
               ? RL_OK
               : RL_FAILED;
}

/* batch_same: whether two nodes' batches (a: na entries, announcing when
 * pa; b likewise) may go as one formatted command: the same entries in the
 * same order, announcing alike. */
static inline bool batch_same(const struct batch_entry *a, int na, bool pa,
                              const struct batch_entry *b, int nb, bool pb)
{
    if (na != nb || pa != pb) {
        return false;
    }
    for (int j = 0; j < na; j++) {
        if (a[j].priv != b[j].priv || a[j].rollback != b[j].rollback) {
            return false;
        }
    }
    return true;
}

#endif
