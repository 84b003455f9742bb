/* ops.h: what each operation does, independent of framing.
 *
 * The server decodes a request (NDJSON or HTTP) into a struct call (call.h)
 * and hands it to ops_submit(); ops runs it against the cluster and the lock
 * table (waiting, renewal, sessions) and answers through the call's own done
 * callback. A session's lost events and its close at shutdown go up through
 * the callbacks its struct lock_owner carries (locks.h). ops never names
 * the server. */
#ifndef REDLOCKD_OPS_H
#define REDLOCKD_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "call.h"
#include "locks.h"
#include "proto.h"

struct event_base;
struct config;
struct cluster;
struct ops;

/* ops_create: the lock table, the cluster (connecting to every node) and
 * the renewal timer. cfg is borrowed and must outlive ops. */
struct ops *ops_create(struct event_base *base, const struct config *cfg);
void ops_destroy(struct ops *o);

/* ops_submit: runs the call; call_done() is called exactly once,
 * possibly before ops_submit returns. */
void ops_submit(struct ops *o, struct call *call);

/* ops_client_closed: a connection went away: its waiting calls are answered
 * (to nobody) and dropped, its session locks released on all nodes. */
void ops_client_closed(struct ops *o, struct lock_owner *session);

/* ops_call_abandoned: the client of an in-flight call closed; the call will
 * still be completed, but an acquisition it wins is released at once. */
void ops_call_abandoned(struct ops *o, struct call *call);

/* ops_shutdown: stop taking new work: waiters are answered shutting_down;
 * each connection holding session locks gets a lost event per lock, then
 * is closed, and its locks are released on all nodes; HTTP locks are left
 * to their TTL (their holders cannot be told, and any daemon can release
 * them). ops_idle() turns true once no node command is outstanding. */
void ops_shutdown(struct ops *o);
bool ops_idle(const struct ops *o);

/* ops_session_releases_failed: releases of session locks (a connection
 * closed, or the shutdown) that no quorum confirmed; those locks stay on
 * their nodes until their TTL. */
size_t ops_session_releases_failed(const struct ops *o);

/* ops_nodes_counted: the nodes that count toward quorums now: up, marked
 * and not quarantined (health's "ok" is this against the quorum). */
int ops_nodes_counted(const struct ops *o);

/* ops_health: whether a quorum of nodes is up, and the health JSON (malloc'd,
 * owned by the caller). */
char *ops_health_json(struct ops *o, const char *id, size_t id_len,
                      bool *quorum_ok, size_t *len);

/* ops_metrics_text: Prometheus text (malloc'd, owned by the caller). */
char *ops_metrics_text(struct ops *o, size_t *len);

#endif
