/* server.h: the unix-socket listener (listener.c) and client connections.
 *
 * The first byte of a connection picks its framing: '{' (after optional
 * whitespace) means NDJSON, anything else HTTP/1.1. Each connection reads
 * only while its output buffer and its in-flight requests (for HTTP: the
 * input pipelined behind the request being answered) are under their
 * limits, so a client that never reads cannot grow the daemon's memory. */
#ifndef REDLOCKD_SERVER_H
#define REDLOCKD_SERVER_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct config;
struct ops;
struct server;

/* server_create: binds and listens on cfg->socket_path with cfg->socket_mode
 * (not widened by the umask). A stale socket file with no listener is
 * replaced; a live one is an error. Out of descriptors later, accepting
 * pauses and new connections wait in the listen queue. Returns NULL with
 * err filled. */
struct server *server_create(struct event_base *base, const struct config *cfg,
                             struct ops *ops, char *err, size_t errlen);

/* server_stop_accepting: closes the listener and removes the socket file;
 * open connections stay until server_destroy(). */
void server_stop_accepting(struct server *s);

/* server_destroy: answers calls still in flight shutting_down, closes every
 * connection and frees the server. Calls that ops answers afterwards (its
 * teardown) are freed without it; call it before ops_destroy(). */
void server_destroy(struct server *s);

/* server_fd_reserve: descriptors the server may hold besides the client
 * connections that cfg->max_connections bounds: its listeners, the metrics
 * listener's connections, the refused connections awaiting their answer. */
int server_fd_reserve(const struct config *cfg);

/* server_client_count: connections on the lock socket, the ones that
 * --max-connections bounds (the metrics listener's are not counted). */
int server_client_count(const struct server *s);

/* server_flushed: every answer queued for a client has been written (or
 * its client is gone); shutdown waits for it so final answers arrive. */
bool server_flushed(const struct server *s);

#endif
