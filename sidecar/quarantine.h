/* quarantine.h: the restart quarantine of the nodes (README, "Fencing and
 * restarts").
 *
 * A node that comes back with a new run_id and no persistence may have
 * lost keys it held: it sits out (does not count toward acquisitions) for
 * the quarantine period, the largest TTL granted that may still stand
 * (or --quarantine-ms); then its done marks are copied from, and its fence
 * counter raised to the maximum of, enough nodes that kept their data, one
 * bounded SCAN step at a time, waiting for nodes down. Only then does it
 * count again. The rules are pure, in restart.c and redlock.c; this module
 * holds the per-node state, the timers and the repair's commands.
 *
 * cluster.c owns it, feeds it every grant, and asks it which nodes sit
 * out; it listens to the nodes' state changes itself (quarantine_node_cb
 * is given to node_create). */
#ifndef REDLOCKD_QUARANTINE_H
#define REDLOCKD_QUARANTINE_H

#include <stdbool.h>
#include <stdint.h>

#include "node.h"

struct event_base;
struct config;
struct quarantine;

/* quarantine_create: nodes is the array of n nodes the quarantine watches
 * and repairs (borrowed: owned by the caller, filled in after this call,
 * each entry NULL until its node_create returns, outliving the
 * quarantine; no node comes up before every entry is set); cfg is
 * borrowed likewise. fence_floor (borrowed) is the largest fence the
 * daemon handed out, a floor for every repair. Returns NULL on allocation
 * failure. */
struct quarantine *quarantine_create(struct event_base *base,
                                     const struct config *cfg,
                                     struct node *const *nodes, int n,
                                     const int64_t *fence_floor);

/* quarantine_node_cb: the node_state_fn to create every node with, with
 * the quarantine as its privdata. */
void quarantine_node_cb(struct node *node, enum node_state state, void *priv);

/* quarantine_stop: from now on nothing is sent and no timer armed; call it
 * before the nodes are destroyed (their pending repair callbacks run then
 * and free what they hold). NULL is a no-op. */
void quarantine_stop(struct quarantine *q);

/* quarantine_destroy: frees the timers and q; after the nodes are gone.
 * NULL is a no-op. */
void quarantine_destroy(struct quarantine *q);

/* quarantine_note_grant: a lock of ttl_ms was granted by a round sent at
 * sent_us and decided at now_us: a node that restarts from now on sits
 * out until it can no longer stand. */
void quarantine_note_grant(struct quarantine *q, uint32_t ttl_ms,
                           uint64_t sent_us, uint64_t now_us);

/* quarantine_active: node i restarted without persistence and does not
 * count toward acquisitions yet. */
bool quarantine_active(const struct quarantine *q, int i);

#endif
