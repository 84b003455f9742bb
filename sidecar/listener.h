/* listener.h: the lock socket's and the metrics port's listeners, and the
 * connections refused at accept.
 *
 * Out of descriptors at accept, both listeners pause and retry rather
 * than spin, and resume as soon as a descriptor of ours closes
 * (listener_fd_freed). */
#ifndef REDLOCKD_LISTENER_H
#define REDLOCKD_LISTENER_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/util.h>

#include "proto.h"

struct event_base;
struct config;
struct listener;

/* A connection accepted on the lock socket, or on the metrics port when
 * metrics_only; the callee owns fd from then on. */
typedef void listener_accept_fn(evutil_socket_t fd, bool metrics_only,
                                void *arg);
/* How many lock-socket connections are open, for the log. */
typedef int listener_clients_fn(void *arg);

/* listener_create: binds and listens on cfg->socket_path with
 * cfg->socket_mode (not widened by the umask), and on cfg->metrics_listen
 * when set. A stale socket file with no listener is replaced; a live one
 * is an error. accept_cb and clients_cb get arg. Returns NULL with err
 * filled. */
struct listener *listener_create(struct event_base *base,
                                 const struct config *cfg,
                                 listener_accept_fn *accept_cb,
                                 listener_clients_fn *clients_cb, void *arg,
                                 char *err, size_t errlen);

/* listener_stop: closes both listeners and removes the socket file;
 * connections refused and not yet answered wait for listener_destroy. */
void listener_stop(struct listener *l);

/* listener_destroy: stops l, answers and closes the refused connections
 * it holds, and frees it. NULL is a no-op. */
void listener_destroy(struct listener *l);

/* listener_fd_freed: a descriptor of ours closed: a listener paused for
 * want of them resumes now rather than at its next retry. NULL is a
 * no-op. */
void listener_fd_freed(struct listener *l);

/* listener_fd_reserve: the descriptors the listeners and their refusals
 * may hold at once, for the start-up check of the limit. */
int listener_fd_reserve(const struct config *cfg);

/* listener_peer_allowed: whether the peer on unix connection fd may use
 * the daemon: with --allow-uid/--allow-gid, its uid or primary gid must
 * be listed. who gets the peer's pid, uid and gid (or why unknown). */
bool listener_peer_allowed(const struct config *cfg, evutil_socket_t fd,
                           char *who, size_t wholen);

/* listener_refuse: refuses a lock-socket connection fd (owned from now
 * on): why is logged and counted now; err and message (static) are
 * answered when its first bytes come, or after a bound, in NDJSON or HTTP
 * as they ask. */
void listener_refuse(struct listener *l, evutil_socket_t fd, enum proto_err err,
                     const char *message, const char *why);

/* listener_reject: refuses connection fd (owned from now on) at once with
 * the len bytes of line, best effort; why is logged and counted. */
void listener_reject(evutil_socket_t fd, const char *line, size_t len,
                     const char *why);

#endif
