/* cluster.h: Redlock operations across all nodes.
 *
 * Glue between redlock.c (decisions) and node.c (I/O): each operation sends
 * its command to every up node at once (release, extend and complete batched
 * per node and loop turn), feeds the answers to a redlock_round
 * and calls back once, as soon as the outcome is certain. The operation
 * object lives on until every node has answered or timed out, so that a
 * failed acquisition can queue its rollback behind each SET. */
#ifndef REDLOCKD_CLUSTER_H
#define REDLOCKD_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

struct event_base;
struct config;
struct cluster;
struct lock_name;
struct node;

struct cluster_result {
    enum proto_err err;      /* ERR_NONE, ERR_BUSY, ERR_DONE, ERR_NOT_HELD,
                                ERR_NO_QUORUM, ERR_LIMIT, ERR_INTERNAL,
                                ERR_SHUTTING_DOWN (never sent: the cluster
                                was destroyed first) */
    int64_t validity_ms;     /* on success */
    uint64_t valid_until_us; /* on success: monotonic end of validity */
    int64_t fence;           /* acquire with fence, on success */
    int64_t pttl_min;        /* acquire busy: shortest holder PTTL seen, -1 */
    int n_ok;                /* nodes that applied the operation */
    bool too_late;           /* no_quorum because the validity ran out, though
                                a quorum answered */
    uint64_t start_us;       /* release/extend/complete: when the round was
                                sent (a failed extend's ttl may still land,
                                counted from then) */
    int n_refused;           /* nodes that answered with an error reply */
    int refused_node;        /* the first of them, 1-based; 0 none */
    const char *refusal;     /* borrowed until the callback returns: that
                                node's error text, NULL when none */
    int n_nodes;             /* ERR_NO_QUORUM: the nodes of the round, */
    int n_unreachable;       /* those not asked for being down, */
    int n_quarantined;       /* and those not asked for their quarantine */
};

/* Runs exactly once per accepted operation; may run before the starting
 * call returns when no node can be asked. */
typedef void cluster_done_fn(const struct cluster_result *res, void *priv);

/* cluster_create: a node per configured address, connecting at once, and
 * their restart quarantine (quarantine.c). cfg is borrowed and must
 * outlive the cluster. */
struct cluster *cluster_create(struct event_base *base,
                               const struct config *cfg);

/* cluster_destroy: closes every node; every pending callback runs first,
 * exactly once (those of acquires never sent with ERR_SHUTTING_DOWN). A
 * callback may start new operations: they are answered at once. */
void cluster_destroy(struct cluster *c);

/* Each operation acts on name (semaphore.h): a lock, or one slot of a
 * semaphore (never a semaphore's queue), whose key and channel it builds
 * from the fields; name is read before the call returns.
 *
 * cluster_acquire: SET NX PX token on every node: `SET .. NX PX .. GET`
 * on Redis 7.0 and later (the old value tells a done mark from a holder),
 * inside MULTI with INCR of the node's fence counter when fence is set;
 * the acquire script on older servers. With fence the quorum's maximum is
 * written back to a quorum before the callback. want_pttl: the caller
 * backs off on the holder's PTTL when busy (res->pttl_min), so a busy
 * answer to SET is followed by PTTL on that node (the script reports it
 * anyway). Returns 0 or -1 (out of memory; cb does not run). */
int cluster_acquire(struct cluster *c, const struct lock_name *name,
                    const char *token, uint32_t ttl_ms, bool fence,
                    bool want_pttl, cluster_done_fn *cb, void *priv);

/* cluster_extend: compare-and-pexpire on every node; success when a quorum
 * extended within the validity accounting of an acquisition. For release,
 * extend and complete alike, ERR_NOT_HELD needs proof: more than n - quorum
 * nodes without the token, so no quorum can hold it; fewer answers than
 * that are ERR_NO_QUORUM. */
int cluster_extend(struct cluster *c, const struct lock_name *name,
                   const char *token, uint32_t ttl_ms, cluster_done_fn *cb,
                   void *priv);

/* cluster_release: compare-and-delete on every node (and a publish for
 * waiters elsewhere). Success when some node deleted it and more than
 * n - quorum nodes are now without it (so no quorum holds it); ERR_NOT_HELD
 * when that many lacked it already. ttl_ms: the longest ttl the lock's
 * commands asked for. Once the release is proved (ok or not_held; with cb
 * NULL, whatever it answered: nobody retries), the nodes that did not
 * confirm it (down, dropped, timed out) get a cluster_give_up record for
 * as long as a key of ttl_ms may stand: they are sent the delete as they
 * come back, and cluster_given_up names the token. None when every node
 * confirmed. A failed release leaves none, so its retry asks the nodes.
 * cb may be NULL (fire and forget). */
int cluster_release(struct cluster *c, const struct lock_name *name,
                    const char *token, uint32_t ttl_ms, cluster_done_fn *cb,
                    void *priv);

/* cluster_give_up: the release of a lock this daemon gave up (token on
 * name): sent as cluster_release's, and remembered until
 * until_us (redlock_given_up_until_us), past which no node can hold the
 * key. Meanwhile each node that did not confirm it (down, dropped, timed
 * out, refused) is sent it again whenever it comes up, and
 * cluster_given_up names the token. The record goes once every node
 * confirmed it or until_us passed; at most --max-locks are kept (the
 * oldest goes first, logged). cb may be NULL. Returns 0, or -1 out of
 * memory (nothing sent now; each node is sent it when it comes up). */
int cluster_give_up(struct cluster *c, const struct lock_name *name,
                    const char *token, uint64_t until_us, cluster_done_fn *cb,
                    void *priv);

/* cluster_given_up: whether token (PROTO_TOKEN_LEN hex) names a lock given
 * up (cluster_give_up) that a node may still hold, on name: its own, its
 * semaphore's resource without a slot for a permit, or any when name's
 * len is 0 (givenup_names). */
bool cluster_given_up(const struct cluster *c, const char *token,
                      const struct lock_name *name);

/* cluster_complete: compare-and-set the lock key to "done:<token>" with a
 * PX of keep_ms on every node; success on a quorum; ERR_NOT_HELD when more
 * than n - quorum nodes are without the token. */
int cluster_complete(struct cluster *c, const struct lock_name *name,
                     const char *token, uint64_t keep_ms, cluster_done_fn *cb,
                     void *priv);

int cluster_quorum(const struct cluster *c);
int cluster_size(const struct cluster *c);
struct node *cluster_node(const struct cluster *c, int i);

/* cluster_node_quarantined: node i restarted without persistence and does
 * not count toward acquisitions yet. */
bool cluster_node_quarantined(const struct cluster *c, int i);

/* cluster_node_refusal: the last error node i answered to a lock command
 * (OOM, READONLY, ...) since it last answered an acquire, else NULL. */
const char *cluster_node_refusal(const struct cluster *c, int i);

/* cluster_inflight: operations still waiting for node answers (including
 * rollbacks after a decision); shutdown waits for it to reach zero. */
int cluster_inflight(const struct cluster *c);


#endif
