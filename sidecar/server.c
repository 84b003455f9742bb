/* server.c: the server: the listeners' accepted connections (listener.c)
 * become clients (client.c), whose first byte picks their framing
 * (ndjson.c or httpconn.c); each call's completion is answered through
 * its connection's framing, and each session's events and shutdown reach
 * the connection here. The data flow of a connection is drawn atop
 * client.h. */
#include "server.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "client.h"
#include "config.h"
#include "http.h"
#include "httpconn.h"
#include "listener.h"
#include "locks.h"
#include "log.h"
#include "ndjson.h"
#include "proto.h"
#include "rlassert.h"
#include "util.h"

/* The --metrics-listen TCP port is reachable by more peers than the lock
 * socket (docker binds 0.0.0.0), so its connections neither count toward
 * --max-connections nor may they sit there: a scraper needs one or two. */
#define METRICS_MAX_CONNECTIONS 16
/* Calls kept for reuse past a burst. */
#define CALL_POOL_KEEP 4096
#define STR_(x) #x
#define STR(x) STR_(x)

struct server {
    struct client_env env; /* first: what every client shares */
    struct listener *lst;  /* owned; NULL in destroy */
    uint64_t next_id;
    struct http_limits http_limits;
};

static void session_close_cb(struct lock_owner *owner);

/* Every call's done (call.h): answers on the client's connection, if it is
 * still there, through its framing, which then takes the call back. */
static void call_done_cb(struct call *call, const struct response *rsp)
{
    struct client_call *sc = (struct client_call *)call; /* first member */
    struct client *cl = sc->client;
    if (cl == NULL) {
        client_call_orphan_done(sc);
        return;
    }
    client_call_unlink(cl, sc);
    if (rsp != NULL && client_attached(cl)) {
        char stack[PROTO_RESPONSE_MAX];
        char *buf = stack;
        size_t cap = sizeof(stack);
        if (rsp->extra_len > 0) {
            /* A listing or an inspection: sized by its members. */
            cap = PROTO_RESPONSE_MAX + rsp->extra_len;
            buf = malloc(cap);
        }
        size_t n = buf != NULL ? proto_encode_response(rsp, buf, cap - 1) : 0;
        if (n == 0) {
            log_error(cl->subject, "response did not fit its buffer");
        } else {
            cl->fops->answer(cl, sc, buf, n, rsp->err, false);
        }
        if (buf != stack) {
            free(buf);
        }
    }
    cl->fops->answered(cl, sc);
}

/* The connection that embeds a session. */
static struct client *session_client(struct lock_owner *owner)
{
    return (struct client *)((char *)owner - offsetof(struct client, session));
}

/* A session's event_cb (locks.h): an event line, NDJSON only. */
static void session_event_cb(struct lock_owner *owner, const char *json,
                             size_t len)
{
    struct client *cl = session_client(owner);
    if (!client_attached(cl) || !cl->fops->events) {
        return;
    }
    client_out(cl, json, len);
    client_out(cl, "\n", 1);
}

/* ---- picking the framing --------------------------------------------------
 */

/* The framing a connection's first non-space byte chooses: '{' is NDJSON,
 * anything else HTTP (always HTTP on the metrics listener). */
static const struct framing_ops *framing_of(unsigned char first,
                                            bool metrics_only)
{
    return first == '{' && !metrics_only ? &ndjson_framing : &httpconn_framing;
}

/* Drops the whitespace before a connection's first byte, however much of
 * it is buffered, and picks the framing from that byte. Returns false
 * while nothing but whitespace has come; it is all drained, so it never
 * grows. */
static bool server_pick_framing(struct client *cl)
{
    if (!cl->bom_checked) {
        /* A UTF-8 byte order mark first (some Windows tools write one) is
         * dropped, as RFC 8259 lets a parser do, rather than taken for
         * the first byte of an HTTP method. It may come in pieces. */
        static const unsigned char bom[3] = {0xEF, 0xBB, 0xBF};
        size_t n = stream_in_len(&cl->s);
        size_t look = n < 3 ? n : 3;
        if (n == 0) {
            return false;
        }
        if (memcmp(stream_in_data(&cl->s), bom, look) == 0) {
            if (look < 3) {
                return false;
            }
            bytes_consume(&cl->s.in, 3);
        }
        cl->bom_checked = true;
    }
    const unsigned char *p = (const unsigned char *)stream_in_data(&cl->s);
    size_t n = stream_in_len(&cl->s);
    size_t i = 0;
    while (i < n && util_is_space(p[i])) {
        i++;
    }
    if (i == n) {
        bytes_consume(&cl->s.in, n);
        return false;
    }
    cl->fops = framing_of(p[i], cl->metrics_only);
    bytes_consume(&cl->s.in, i);
    return true;
}

/* Before the framing is known: its first bytes choose it, then that
 * framing serves them. */
static void unknown_input(struct client *cl)
{
    if (server_pick_framing(cl)) {
        cl->fops->input(cl);
    }
}

/* The peer left before its first byte that is not whitespace (or a BOM's
 * first bytes): nothing was asked, so nothing is owed. */
static void unknown_peer_eof(struct client *cl)
{
    RL_ASSERT(cl->inflight == 0); /* no call before the framing */
    client_close_after_flush(cl);
}

/* No call is made before the framing is known: nothing to answer. */
static const struct framing_ops unknown_framing = {
    .input = unknown_input,
    .feed = NULL,
    .peer_eof = unknown_peer_eof,
    .resume = ndjson_resume,
    .answer = NULL,
    .answered = NULL,
    .events = false,
};

/* ---- accepting ------------------------------------------------------------
 */

/* The peer's pid, uid and gid, for the locks listing; left unset where
 * SO_PEERCRED has nothing to say (the TCP metrics listener). */
static void session_read_cred(struct lock_owner *session, evutil_socket_t fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
        cred.pid > 0) {
        session->has_cred = true;
        session->pid = (int)cred.pid;
        session->uid = (unsigned)cred.uid;
        session->gid = (unsigned)cred.gid;
    }
}

/* The listener's accept_cb: a client, or a refusal at accept. */
static void server_accept_cb(evutil_socket_t fd, bool metrics_only, void *arg)
{
    struct server *s = arg;
    char who[96];
    if (!metrics_only &&
        !listener_peer_allowed(s->env.cfg, fd, who, sizeof(who))) {
        char why[160];
        snprintf(why, sizeof(why), "connection refused: %s not allowed", who);
        listener_refuse(s->lst, fd, ERR_BAD_REQUEST,
                        "peer not allowed (--allow-uid/--allow-gid)", why);
        return;
    }
    if (metrics_only && s->env.n_metrics_clients >= METRICS_MAX_CONNECTIONS) {
        /* Never touches the lock socket's count; no body, so the peer
         * reads a complete answer whatever it sent. */
        static const char msg[] =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
            "Connection: close\r\n\r\n";
        listener_reject(fd, msg, sizeof(msg) - 1,
                        "metrics connection refused: " STR(
                            METRICS_MAX_CONNECTIONS) " open (limit)");
        return;
    }
    if (!metrics_only && s->env.n_clients >= s->env.cfg->max_connections) {
        listener_refuse(s->lst, fd, ERR_LIMIT,
                        "too many connections (--max-connections)",
                        "connection refused: --max-connections reached");
        return;
    }
    struct client *cl =
        client_new(&s->env, fd, metrics_only, ++s->next_id, &unknown_framing);
    if (cl == NULL) {
        return;
    }
    cl->session.event_cb = session_event_cb;
    cl->session.close_cb = session_close_cb;
    session_read_cred(&cl->session, fd);
}

/* The listener's clients_cb. */
static int server_clients_cb(void *arg)
{
    return server_client_count(arg);
}

struct server *server_create(struct event_base *base, const struct config *cfg,
                             struct ops *ops, char *err, size_t errlen)
{
    struct server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->env.base = base;
    s->env.cfg = cfg;
    s->env.ops = ops;
    s->env.http_limits = &s->http_limits;
    s->env.call_done = call_done_cb;
    pool_init(&s->env.call_pool, sizeof(struct client_call), CALL_POOL_KEEP,
              NULL);
    http_limits_default(&s->http_limits, cfg->max_line_bytes);
    s->lst = listener_create(base, cfg, server_accept_cb, server_clients_cb, s,
                             err, errlen);
    if (s->lst == NULL) {
        free(s);
        return NULL;
    }
    s->env.lst = s->lst;
    return s;
}

void server_stop_accepting(struct server *s)
{
    listener_stop(s->lst);
}

/* At exit, for a call still in flight: shutting_down, since its node
 * commands are abandoned and it will not be answered otherwise. */
static void server_answer_shutdown(struct client *cl, struct client_call *sc)
{
    struct call *call = &sc->call;
    char buf[PROTO_RESPONSE_MAX];
    struct response rsp = {0};
    rsp.id = call->req.id_len ? call->req.id : NULL;
    rsp.id_len = call->req.id_len;
    rsp.err = ERR_SHUTTING_DOWN;
    rsp.message = "the daemon is stopping";
    size_t n = proto_encode_response(&rsp, buf, sizeof(buf) - 1);
    if (n == 0) {
        return;
    }
    cl->fops->answer(cl, sc, buf, n, ERR_SHUTTING_DOWN, true);
}

/* A session's close_cb (locks.h), at shutdown. */
static void session_close_cb(struct lock_owner *owner)
{
    struct client *cl = session_client(owner);
    if (!client_attached(cl)) {
        return; /* detached already */
    }
    for (struct client_call *c = client_call_first(&cl->calls); c != NULL;
         c = client_call_next(c)) {
        server_answer_shutdown(cl, c);
    }
    /* The lost events go out before the releases they announce. */
    client_flush_now(cl);
    client_close_after_flush(cl);
}

/* Teardown runs in reverse order of start-up, so the server goes before
 * ops: closing a client needs ops (its calls are abandoned to ops, its
 * session locks released through it), and ops then finishes whatever node
 * commands are still pending (drain timed out, or a second signal) by
 * running their callbacks, which answer calls through call_done_cb().
 * Those calls have no client any more (client.c's detach) and no env
 * either (client_env_release() clears it), so client_call_free() frees
 * them directly: nothing reaches the freed server and nothing leaks. Their
 * clients get shutting_down here, then the close. */
void server_destroy(struct server *s)
{
    if (s == NULL) {
        return;
    }
    /* Clients freed below have no listener to tell. */
    listener_destroy(s->lst);
    s->lst = NULL;
    s->env.lst = NULL;
    struct client *cl;
    while ((cl = client_first(&s->env.clients)) != NULL) {
        if (client_attached(cl)) {
            for (struct client_call *c = client_call_first(&cl->calls);
                 c != NULL; c = client_call_next(c)) {
                server_answer_shutdown(cl, c);
            }
        }
        client_flush_now(cl);
        client_free(cl);
    }
    client_env_release(&s->env);
    free(s);
}

bool server_flushed(const struct server *s)
{
    for (const struct client *cl = client_first(&s->env.clients); cl != NULL;
         cl = LIST_ITEM(cl->link.next, struct client, link)) {
        if (bytes_used(&cl->s.out) > 0) {
            return false;
        }
    }
    return true;
}

int server_client_count(const struct server *s)
{
    return s->env.n_clients;
}

int server_fd_reserve(const struct config *cfg)
{
    return listener_fd_reserve(cfg) +
           (cfg->metrics_listen != NULL ? METRICS_MAX_CONNECTIONS : 0);
}
