/* ops.h: what each operation does, independent of framing.
 *
 * The server decodes a request (NDJSON or HTTP) into a struct call and hands
 * it to ops_submit(); ops runs it against the cluster and the lock table
 * (waiting, renewal, sessions) and answers through server_call_done(). */
#ifndef REDLOCKD_OPS_H
#define REDLOCKD_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "locks.h"
#include "proto.h"

struct event_base;
struct config;
struct cluster;
struct client;
struct ops;

/* One request in flight. Owned by the server (which allocates and frees it);
 * ops borrows it from ops_submit() until it calls server_call_done(). */
struct call {
    struct request req;              /* decoded request */
    struct client *client;           /* borrowed: NULL once the client closed */
    struct lock_owner *session;      /* borrowed: the NDJSON session, or NULL */
    uint64_t start_us;               /* when it was decoded */
    uint64_t wait_until_us;          /* acquire with wait_ms: give up then */
    unsigned attempt;                /* acquire retries so far */
    char token[PROTO_TOKEN_LEN + 1]; /* acquire: the token being tried */
    bool waiting;                    /* in a wait queue or retry timer */
    bool http;                       /* server: answer as HTTP */
    bool keep_alive;                 /* server: HTTP keep-alive */
    bool head_only;                  /* server: HTTP HEAD, no body */
    struct call *next, *prev;        /* server: the client's in-flight list */
    struct ops *ops;                 /* ops: borrowed, set by ops_submit */
    struct call *wnext, *wprev;      /* ops: the resource's wait queue */
    struct event *retry_ev;          /* ops: owned retry timer, or NULL */
    struct waitq *waitq; /* ops: borrowed queue we are in, or NULL */
};

/* ops_create: the lock table, the cluster (connecting to every node) and
 * the renewal timer. cfg is borrowed and must outlive ops. */
struct ops *ops_create(struct event_base *base, const struct config *cfg);
void ops_destroy(struct ops *o);

/* ops_submit: runs the call; server_call_done() is called exactly once,
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
bool ops_shutting_down(const struct ops *o);

/* ops_health: whether a quorum of nodes is up, and the health JSON (malloc'd,
 * owned by the caller). */
char *ops_health_json(struct ops *o, const char *id, size_t id_len,
                      bool *quorum_ok, size_t *len);

/* ops_metrics_text: Prometheus text (malloc'd, owned by the caller). */
char *ops_metrics_text(struct ops *o, size_t *len);

/* Defined by server.c: answer a call and free it. */
void server_call_done(struct call *call, const struct response *rsp);

/* Defined by server.c: send an unsolicited event line to a session. */
void server_send_event(struct client *client, const char *json, size_t len);

/* Defined by server.c: closes a session's connection at shutdown: its
 * calls in flight are answered shutting_down, what is queued for it is
 * written now, and it closes once flushed. Its session locks are released
 * (ops_client_closed) before this returns; client may be freed by then. */
void server_close_client(struct client *client);

#endif
