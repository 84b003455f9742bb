/* httpconn.c: the HTTP/1.1 framing (httpconn.h): buffered requests to
 * calls, one at a time, and answers to responses. Below it, client.c
 * carries the connection and http.c parses and formats; requests go to
 * ops. */
#include "httpconn.h"

#include <stdlib.h>

#include "http.h"
#include "metrics.h"
#include "ops.h"
#include "rlassert.h"

/* cl->framing_bits */
#define HTTPCONN_LOOPING 1u       /* httpconn_next's loop is running */
#define HTTPCONN_CONTINUE_SENT 2u /* 100 Continue sent for the current head */

/* A call's framing_flags */
#define HTTPCALL_KEEP_ALIVE 1u /* keep-alive */
#define HTTPCALL_HEAD_ONLY 2u  /* HEAD: no body */

static void httpconn_write(struct client *cl, int status, const char *ctype,
                           const char *body, size_t len, bool keep_alive,
                           const char *allow, bool head_only)
{
    char head[512];
    size_t hl = http_format_head(status, ctype, len, keep_alive, allow, head,
                                 sizeof(head));
    client_out(cl, head, hl);
    if (!head_only && len > 0) {
        client_out(cl, body, len);
    }
}

/* head_only (HEAD): the head, with the Content-Length the body would have,
 * and no body, or a keep-alive client would read it as the next answer. */
static void httpconn_write_error_id(struct client *cl, int status,
                                    const char *id, size_t id_len,
                                    enum proto_err err, const char *msg,
                                    bool keep_alive, const char *allow,
                                    bool head_only)
{
    char buf[PROTO_RESPONSE_MAX];
    struct response rsp = {0};
    rsp.id = id_len ? id : NULL;
    rsp.id_len = id_len;
    rsp.err = err;
    rsp.message = msg;
    size_t n = proto_encode_response(&rsp, buf, sizeof(buf));
    httpconn_write(cl, status, "application/json", buf, n, keep_alive, allow,
                   head_only);
}

static void httpconn_write_error(struct client *cl, int status,
                                 enum proto_err err, const char *msg,
                                 bool keep_alive, const char *allow,
                                 bool head_only)
{
    httpconn_write_error_id(cl, status, NULL, 0, err, msg, keep_alive, allow,
                            head_only);
}

static void httpconn_next(struct client *cl);

static void httpconn_serve_local(struct client *cl,
                                 const struct http_request *h,
                                 const struct request *req)
{
    struct client_env *env = cl->env;
    bool head_only = h->method == HTTP_HEAD;
    if (req->op == OP_HEALTH) {
        bool ok;
        size_t n;
        char *json = ops_health_json(env->ops, NULL, 0, &ok, &n);
        if (json == NULL) {
            httpconn_write_error(cl, 500, ERR_INTERNAL, "out of memory",
                                 h->keep_alive, NULL, head_only);
            return;
        }
        httpconn_write(cl, ok ? 200 : 503, "application/json", json, n,
                       h->keep_alive, NULL, head_only);
        free(json);
        return;
    }
    size_t n;
    char *text = ops_metrics_text(env->ops, &n);
    if (text == NULL) {
        httpconn_write_error(cl, 500, ERR_INTERNAL, "out of memory",
                             h->keep_alive, NULL, head_only);
        return;
    }
    httpconn_write(cl, 200, "text/plain; version=0.0.4; charset=utf-8", text, n,
                   h->keep_alive, NULL, head_only);
    free(text);
}

/* At the peer's half-close, with every complete request served: bytes
 * left are a request cut short (its head, or a body shorter than its
 * Content-Length). CRLFs between requests are allowed (RFC 9112 2.2). */
static void httpconn_answer_unterminated(struct client *cl)
{
    if (client_drain_cut_request(cl)) {
        METRIC_INC(requests_bad);
        httpconn_write_error(cl, 400, ERR_BAD_REQUEST,
                             "the input ended inside a request (its head, or a "
                             "body shorter than its Content-Length)",
                             false, NULL, false);
    }
}

/* One buffered HTTP request: parses it and answers it or submits it.
 * Returns true to go on with the next one, false to stop (incomplete,
 * closing). */
static bool httpconn_one(struct client *cl)
{
    struct client_env *env = cl->env;
    size_t avail = stream_in_len(&cl->s);
    if (avail == 0) {
        return false;
    }
    const char *buf = stream_in_data(&cl->s);
    struct http_request h;
    enum http_parse_result pr = http_parse(buf, avail, env->http_limits, &h);
    if (pr == HTTP_INCOMPLETE) {
        if (h.head_done && h.expect_continue &&
            !(cl->framing_bits & HTTPCONN_CONTINUE_SENT)) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            client_out(cl, cont, sizeof(cont) - 1);
            cl->framing_bits |= HTTPCONN_CONTINUE_SENT;
        }
        return false;
    }
    if (pr == HTTP_ERROR) {
        METRIC_INC(requests_bad);
        bool big = h.error_status == 413 || h.error_status == 414 ||
                   h.error_status == 431;
        enum proto_err e = big ? ERR_TOO_LARGE : ERR_BAD_REQUEST;
        httpconn_write_error(cl, h.error_status, e,
                             h.error_message ? h.error_message : "bad request",
                             false, NULL, h.method == HTTP_HEAD);
        client_close_after_flush(cl);
        return false;
    }
    cl->framing_bits &= ~HTTPCONN_CONTINUE_SENT;
    bool head_only = h.method == HTTP_HEAD;
    if (cl->metrics_only) {
        client_idle_arm(cl); /* a request completed: the deadline restarts */
    }
    struct client_call *sc = client_call_new(cl);
    if (sc == NULL) {
        /* Answer before closing: with nothing left to send, the close
         * could free the client under the caller. */
        httpconn_write_error(cl, 500, ERR_INTERNAL, "out of memory", false,
                             NULL, head_only);
        client_close_after_flush(cl);
        return false;
    }
    struct call *call = &sc->call;
    char err[PROTO_MSG_MAX];
    int status = http_route(&h, &call->req, err, sizeof(err));
    bool keep_alive = h.keep_alive;
    if (status != 0) {
        METRIC_INC(requests_bad);
        /* The id, when the body's could be read, as over NDJSON; before
         * the call that holds it is freed. */
        httpconn_write_error_id(cl, status, call->req.id, call->req.id_len,
                                ERR_BAD_REQUEST, err, keep_alive,
                                status == 405 ? http_route_allow(h.path) : NULL,
                                head_only);
        client_call_unlink(cl, sc);
        client_call_free(sc);
    } else if (cl->metrics_only && call->req.op != OP_HEALTH &&
               call->req.op != OP_METRICS) {
        /* Prometheus' port is reachable by more peers than the lock
         * socket: it never serves lock operations. */
        client_call_unlink(cl, sc);
        client_call_free(sc);
        httpconn_write_error(cl, 404, ERR_BAD_REQUEST,
                             "only /metrics and /v1/health are served on "
                             "the metrics listener",
                             keep_alive, NULL, head_only);
    } else if (call->req.op == OP_HEALTH || call->req.op == OP_METRICS) {
        httpconn_serve_local(cl, &h, &call->req);
        client_call_unlink(cl, sc);
        client_call_free(sc);
    } else {
        bytes_consume(&cl->s.in, h.consumed);
        sc->framing_flags = (keep_alive ? HTTPCALL_KEEP_ALIVE : 0) |
                            (head_only ? HTTPCALL_HEAD_ONLY : 0);
        call->session = NULL;
        cl->busy = true;
        /* A synchronous answer clears busy (and may close) before
         * this returns; the caller's loop takes it from there. */
        ops_submit(env->ops, call);
        return true;
    }
    bytes_consume(&cl->s.in, h.consumed);
    if (!keep_alive) {
        client_close_after_flush(cl);
        return false;
    }
    return true;
}

/* Runs the buffered HTTP requests, one at a time, until one is in flight
 * or the input is used up; then decides whether to keep reading, or, after
 * the peer's EOF, closes once nothing is in flight or left to serve. It may
 * free the client: callers return right after it. A request answered
 * synchronously (ping, a bad route, limit) runs httpconn_answered() before
 * ops_submit returns, and this loop goes on with busy cleared, so
 * thousands of pipelined requests take one stack frame, not one each; a
 * call that comes back here meanwhile returns at once. */
static void httpconn_next(struct client *cl)
{
    if (cl->framing_bits & HTTPCONN_LOOPING) {
        return;
    }
    cl->framing_bits |= HTTPCONN_LOOPING;
    while (client_attached(cl) && !cl->busy) {
        if (client_over_limits(cl)) {
            break; /* output over OUT_HIGH: resumed when it drains */
        }
        if (!httpconn_one(cl)) {
            break;
        }
    }
    cl->framing_bits &= ~HTTPCONN_LOOPING;
    if (!client_attached(cl)) {
        return;
    }
    /* Over the limits, complete requests may still be buffered: they are
     * served when the output drains (client_maybe_resume). */
    if (cl->state == CLIENT_DRAINING && !cl->busy && cl->inflight == 0 &&
        !client_over_limits(cl)) {
        httpconn_answer_unterminated(cl);
        client_close_after_flush(cl);
        return;
    }
    client_recheck_limits(cl);
}

/* HTTP's peer_eof and resume: serves the next complete request unless one
 * is being answered; httpconn_next closes after the peer's EOF once all is
 * answered (or later, when the request being served is). */
static void httpconn_go_on(struct client *cl)
{
    if (!cl->busy) {
        httpconn_next(cl);
    }
}

/* head_only (HEAD) and keep-alive as the request asked; closing: the
 * connection closes after it. */
static void httpconn_answer(struct client *cl, const struct client_call *call,
                            char *json, size_t len, enum proto_err err,
                            bool closing)
{
    int status = err == ERR_NONE ? 200 : proto_err_status(err);
    bool keep_alive =
        !closing && (call->framing_flags & HTTPCALL_KEEP_ALIVE) != 0;
    httpconn_write(cl, status, "application/json", json, len, keep_alive, NULL,
                   (call->framing_flags & HTTPCALL_HEAD_ONLY) != 0);
}

static void httpconn_answered(struct client *cl, struct client_call *call)
{
    bool keep_alive = (call->framing_flags & HTTPCALL_KEEP_ALIVE) != 0;
    client_call_free(call);
    if (!client_attached(cl)) {
        return;
    }
    RL_ASSERT(cl->busy); /* one HTTP request at a time */
    cl->busy = false;
    if (!keep_alive) {
        client_close_after_flush(cl);
        return;
    }
    /* Requests pipelined behind this one are still owed, after a
     * half-close too: httpconn_next serves them, then closes. */
    client_resume_later(cl);
}

const struct framing_ops httpconn_framing = {
    .input = httpconn_next,
    .feed = NULL,
    .peer_eof = httpconn_go_on,
    .resume = httpconn_go_on,
    .answer = httpconn_answer,
    .answered = httpconn_answered,
    .events = false,
};
