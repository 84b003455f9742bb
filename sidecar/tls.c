/* tls.c: the TLS transport of rediss:// nodes on OpenSSL 3.
 *
 * The socket stays the node's stream's (stream.c): OpenSSL reads and
 * writes the fd directly (SSL_set_fd) and reports SSL_ERROR_WANT_READ/WRITE,
 * which this file turns into enum tls_io for the stream's libevent events. Verification is on unless
 * the unsafe switch says otherwise: the chain against the CA file or the
 * system store, the name (or IP) against the node's host or
 * --tls-server-name. */
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "config.h"

struct tls_ctx {
    SSL_CTX *ssl_ctx;
    bool verify;             /* false: --tls-insecure-skip-verify */
    const char *server_name; /* borrowed: --tls-server-name, or NULL */
};

struct tls_conn {
    SSL *ssl;
    bool established; /* the handshake completed */
};

/* The reason of OpenSSL's last queued error ("wrong version number"), or
 * dflt when the queue is empty. Empties the queue. */
static const char *ssl_reason(const char *dflt, char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    ERR_clear_error();
    if (e == 0) {
        return dflt;
    }
    const char *r = ERR_reason_error_string(e);
    if (r == NULL) {
        ERR_error_string_n(e, buf, len);
        return buf;
    }
    return r;
}

static void set_err(char *err, size_t errlen, const char *what, const char *why,
                    const char *hint)
{
    snprintf(err, errlen, "%s: %s%s", what, why, hint);
}

/* Loading a file failed: name it (never its contents) and say why. */
static struct tls_ctx *ctx_fail(struct tls_ctx *ctx, const char *setting,
                                const char *path, char *err, size_t errlen)
{
    char buf[128];
    snprintf(err, errlen, "%s %s: %s", setting, path,
             ssl_reason("cannot be used", buf, sizeof(buf)));
    tls_ctx_destroy(ctx);
    return NULL;
}

struct tls_ctx *tls_ctx_create(const struct config *cfg, char *err,
                               size_t errlen)
{
    struct tls_ctx *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        snprintf(err, errlen, "TLS: out of memory");
        return NULL;
    }
    ERR_clear_error();
    ctx->ssl_ctx = SSL_CTX_new(TLS_client_method());
    if (ctx->ssl_ctx == NULL) {
        snprintf(err, errlen, "TLS: cannot create a context");
        tls_ctx_destroy(ctx);
        return NULL;
    }
    ctx->verify = !cfg->tls_insecure_skip_verify;
    ctx->server_name = cfg->tls_server_name;
    SSL_CTX_set_min_proto_version(ctx->ssl_ctx, TLS1_2_VERSION);
    /* Partial writes: the stream's buffer is sent as far as the socket
     * takes. Moving buffer: a retried write may come from a regrown (or
     * compacted) buffer. */
    SSL_CTX_set_mode(ctx->ssl_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                       SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                       SSL_MODE_RELEASE_BUFFERS);
    if (cfg->tls_ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(ctx->ssl_ctx, cfg->tls_ca_file,
                                          NULL) != 1) {
            return ctx_fail(ctx, "--tls-ca-file", cfg->tls_ca_file, err,
                            errlen);
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx->ssl_ctx) != 1) {
        return ctx_fail(ctx, "TLS", "system CA store", err, errlen);
    }
    if (cfg->tls_cert_file != NULL &&
        SSL_CTX_use_certificate_chain_file(ctx->ssl_ctx, cfg->tls_cert_file) !=
            1) {
        return ctx_fail(ctx, "--tls-cert-file", cfg->tls_cert_file, err,
                        errlen);
    }
    if (cfg->tls_key_file != NULL) {
        if (SSL_CTX_use_PrivateKey_file(ctx->ssl_ctx, cfg->tls_key_file,
                                        SSL_FILETYPE_PEM) != 1) {
            return ctx_fail(ctx, "--tls-key-file", cfg->tls_key_file, err,
                            errlen);
        }
        if (SSL_CTX_check_private_key(ctx->ssl_ctx) != 1) {
            return ctx_fail(ctx,
                            "--tls-key-file does not match --tls-cert-file",
                            cfg->tls_key_file, err, errlen);
        }
    }
    SSL_CTX_set_verify(ctx->ssl_ctx,
                       ctx->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    return ctx;
}

void tls_ctx_destroy(struct tls_ctx *ctx)
{
    if (ctx == NULL) {
        return;
    }
    SSL_CTX_free(ctx->ssl_ctx);
    free(ctx);
}

bool tls_ctx_verifies(const struct tls_ctx *ctx)
{
    return ctx->verify;
}

static bool is_ip_literal(const char *host)
{
    unsigned char a[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, a) == 1 ||
           inet_pton(AF_INET6, host, a) == 1;
}

struct tls_conn *tls_conn_create(struct tls_ctx *ctx, int fd, const char *host,
                                 char *err, size_t errlen)
{
    struct tls_conn *c = calloc(1, sizeof(*c));
    const char *name = ctx->server_name != NULL ? ctx->server_name : host;
    ERR_clear_error();
    if (c == NULL || (c->ssl = SSL_new(ctx->ssl_ctx)) == NULL ||
        SSL_set_fd(c->ssl, fd) != 1) {
        snprintf(err, errlen, "TLS: cannot create a session");
        tls_conn_destroy(c);
        return NULL;
    }
    bool ip = is_ip_literal(name);
    /* SNI carries names only (RFC 6066); managed Redis routes by it. */
    if (!ip && SSL_set_tlsext_host_name(c->ssl, name) != 1) {
        snprintf(err, errlen, "TLS: cannot send server name '%s'", name);
        tls_conn_destroy(c);
        return NULL;
    }
    if (ctx->verify) {
        X509_VERIFY_PARAM *p = SSL_get0_param(c->ssl);
        int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(p, name)
                    : SSL_set1_host(c->ssl, name);
        if (ok != 1) {
            snprintf(err, errlen, "TLS: cannot check the server name '%s'",
                     name);
            tls_conn_destroy(c);
            return NULL;
        }
    }
    SSL_set_connect_state(c->ssl);
    return c;
}

void tls_conn_destroy(struct tls_conn *c)
{
    if (c == NULL) {
        return;
    }
    if (c->ssl != NULL) {
        if (c->established) {
            (void)SSL_shutdown(c->ssl); /* one non-blocking close_notify */
        }
        SSL_free(c->ssl);
    }
    ERR_clear_error();
    free(c);
}

/* Maps the result of an SSL call; fills err for TLS_CLOSED and TLS_ERROR.
 * what names the step ("TLS handshake"). */
static enum tls_io tls_result(struct tls_conn *c, int ret, const char *what,
                              char *err, size_t errlen)
{
    int e = SSL_get_error(c->ssl, ret);
    int sys = errno;
    char buf[128];
    switch (e) {
    case SSL_ERROR_WANT_READ:
        return TLS_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return TLS_WANT_WRITE;
    case SSL_ERROR_ZERO_RETURN:
        set_err(err, errlen, what, "the server closed the TLS session", "");
        return TLS_CLOSED;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_last_error() == 0) {
            if (sys == 0) { /* EOF: the _ex calls return 0 either way */
                set_err(err, errlen, what,
                        c->established ? "connection closed by the server"
                                       : "connection closed by the server "
                                         "during the TLS handshake",
                        "");
                return TLS_CLOSED;
            }
            set_err(err, errlen, what, strerror(sys), "");
            return TLS_ERROR;
        }
        break;
    default:
        break;
    }
    long v = SSL_get_verify_result(c->ssl);
    if (!c->established && v != X509_V_OK) {
        ERR_clear_error();
        bool unknown_ca = v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
                          v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT ||
                          v == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN ||
                          v == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT;
        snprintf(err, errlen, "%s: certificate verify failed: %s%s", what,
                 X509_verify_cert_error_string(v),
                 unknown_ca ? " (CA not trusted: --tls-ca-file)" : "");
        return TLS_ERROR;
    }
    const char *r = ssl_reason("failed", buf, sizeof(buf));
    const char *hint = "";
    if (strstr(r, "unexpected eof") != NULL) {
        set_err(err, errlen, what, "connection closed by the server", "");
        return TLS_CLOSED;
    }
    if (strstr(r, "certificate required") != NULL ||
        strstr(r, "handshake failure") != NULL) {
        hint = " (does the server require a client certificate? "
               "--tls-cert-file)";
    } else if (strstr(r, "wrong version number") != NULL ||
               strstr(r, "packet length too long") != NULL) {
        hint = " (is this a TLS port?)";
    }
    set_err(err, errlen, what, r, hint);
    return TLS_ERROR;
}

enum tls_io tls_handshake(struct tls_conn *c, char *err, size_t errlen)
{
    ERR_clear_error();
    errno = 0;
    int ret = SSL_do_handshake(c->ssl);
    if (ret == 1) {
        c->established = true;
        return TLS_OK;
    }
    return tls_result(c, ret, "TLS handshake", err, errlen);
}

enum tls_io tls_read(struct tls_conn *c, void *buf, size_t len, size_t *n,
                     char *err, size_t errlen)
{
    ERR_clear_error();
    errno = 0;
    *n = 0;
    int ret = SSL_read_ex(c->ssl, buf, len, n);
    if (ret == 1) {
        return TLS_OK;
    }
    return tls_result(c, ret, "TLS", err, errlen);
}

enum tls_io tls_write(struct tls_conn *c, const void *buf, size_t len,
                      size_t *n, char *err, size_t errlen)
{
    ERR_clear_error();
    errno = 0;
    *n = 0;
    int ret = SSL_write_ex(c->ssl, buf, len, n);
    if (ret == 1) {
        return TLS_OK;
    }
    return tls_result(c, ret, "TLS", err, errlen);
}

bool tls_pending(const struct tls_conn *c)
{
    return SSL_pending(c->ssl) > 0;
}
