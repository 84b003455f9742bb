/* tls.h: the TLS transport of rediss:// nodes (OpenSSL 3), for stream.c
 * and node_io.c's handshake.
 *
 * One context per daemon (the --tls-* settings), one session per node
 * connection. The step functions never block: on a non-blocking socket they
 * say which readiness the caller must wait for, and the caller calls the
 * same function again once the socket has it. A read may need the socket
 * writable and a write may need it readable (TLS records and key updates go
 * both ways), hence TLS_WANT_READ/TLS_WANT_WRITE from every step.
 *
 * Errors fill the caller's err buffer with one line fit for /v1/health
 * ("TLS handshake: certificate verify failed: certificate has expired");
 * no private key material ever reaches a message. */
#ifndef REDLOCKD_TLS_H
#define REDLOCKD_TLS_H

#include <stdbool.h>
#include <stddef.h>

struct config;
struct tls_ctx;
struct tls_conn;

enum tls_io {
    TLS_OK = 0,         /* done: bytes moved or handshake complete */
    TLS_WANT_READ = 1,  /* call again once the socket is readable */
    TLS_WANT_WRITE = 2, /* call again once the socket is writable */
    TLS_CLOSED = 3,     /* the peer closed the connection */
    TLS_ERROR = 4,      /* err holds why; the connection is unusable */
};

/* tls_ctx_create: the client context from cfg's --tls-* settings: verify
 * the server against --tls-ca-file or the system CA store (unless
 * --tls-insecure-skip-verify), present --tls-cert-file/--tls-key-file when
 * set. Returns NULL with err filled when a file cannot be used. Owned by
 * the caller; free with tls_ctx_destroy after every tls_conn of it. */
struct tls_ctx *tls_ctx_create(const struct config *cfg, char *err,
                               size_t errlen);
void tls_ctx_destroy(struct tls_ctx *ctx);

/* tls_ctx_verifies: false when --tls-insecure-skip-verify is set. */
bool tls_ctx_verifies(const struct tls_ctx *ctx);

/* tls_conn_create: a client session on the connected (or connecting)
 * non-blocking socket fd, checking the server's certificate against host
 * (borrowed for the call; an IP literal is matched as an address and sent
 * no SNI) unless the context names --tls-server-name. Does not own fd.
 * Returns NULL with err filled. */
struct tls_conn *tls_conn_create(struct tls_ctx *ctx, int fd, const char *host,
                                 char *err, size_t errlen);

/* tls_conn_destroy: sends close_notify when the session was established
 * (best effort, never blocks) and frees it; NULL is ignored. */
void tls_conn_destroy(struct tls_conn *c);

/* tls_handshake: one step of the client handshake. */
enum tls_io tls_handshake(struct tls_conn *c, char *err, size_t errlen);

/* tls_read / tls_write: move up to len bytes; on TLS_OK *n > 0 bytes
 * moved. A tls_write that returned a WANT must be retried with the same
 * bytes at the front of buf (more may follow; buf may have moved). */
enum tls_io tls_read(struct tls_conn *c, void *buf, size_t len, size_t *n,
                     char *err, size_t errlen);
enum tls_io tls_write(struct tls_conn *c, const void *buf, size_t len,
                      size_t *n, char *err, size_t errlen);

/* tls_pending: decrypted bytes held in the session, readable without
 * waiting for the socket. */
bool tls_pending(const struct tls_conn *c);

#endif
