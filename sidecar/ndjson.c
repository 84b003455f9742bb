/* ndjson.c: the NDJSON framing (ndjson.h): lines to calls, answers to
 * lines. Below it, client.c carries the connection; requests go to ops. */
#include "ndjson.h"

#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "metrics.h"
#include "ops.h"

static void ndjson_write_error(struct client *cl, const char *id, size_t id_len,
                               enum proto_err err, const char *msg)
{
    char buf[PROTO_RESPONSE_MAX];
    struct response rsp = {0};
    rsp.id = id_len ? id : NULL;
    rsp.id_len = id_len;
    rsp.err = err;
    rsp.message = msg;
    size_t n = proto_encode_response(&rsp, buf, sizeof(buf) - 1);
    if (n > 0) {
        buf[n++] = '\n';
        client_out(cl, buf, n);
    }
}

static bool line_is_blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') {
            return false;
        }
    }
    return true;
}

/* A line over the limit: answer once and close (the stream cannot be
 * resynchronised without reading the whole line). */
static void ndjson_too_large(struct client *cl, size_t max)
{
    METRIC_INC(requests_bad);
    log_warn(cl->subject, "line over %zu bytes: closing", max);
    ndjson_write_error(cl, NULL, 0, ERR_TOO_LARGE,
                       "request line over the limit (--max-line-bytes)");
    client_close_after_flush(cl);
}

/* One complete line (without its newline). Returns false once the
 * connection is closing and nothing more may be read from it. */
static bool ndjson_line(struct client *cl, const char *line, size_t len)
{
    struct ops *ops = cl->env->ops;
    if (line_is_blank(line, len)) {
        return true;
    }
    struct client_call *sc = client_call_new(cl);
    if (sc == NULL) {
        log_error(cl->subject, "out of memory");
        client_close_after_flush(cl);
        return false;
    }
    struct call *call = &sc->call;
    char err[PROTO_MSG_MAX];
    int rc = proto_decode(line, len, OP_NONE, &call->req, err, sizeof(err));
    if (rc != 0) {
        METRIC_INC(requests_bad);
        client_call_unlink(cl, sc);
        ndjson_write_error(cl, call->req.id, call->req.id_len, ERR_BAD_REQUEST,
                           err);
        bool fatal = rc == -2;
        client_call_free(sc);
        if (fatal) {
            /* The stream cannot be trusted past a line that is not JSON:
             * answer once and close. */
            log_warn(cl->subject, "unparseable line: closing");
            client_close_after_flush(cl);
            return false;
        }
        return true;
    }
    if (call->req.op == OP_HEALTH) {
        bool ok;
        size_t n;
        char *json =
            ops_health_json(ops, call->req.id, call->req.id_len, &ok, &n);
        client_call_unlink(cl, sc);
        client_call_free(sc);
        if (json != NULL) {
            client_out(cl, json, n);
            client_out(cl, "\n", 1);
            free(json);
        }
        return true;
    }
    call->session = &cl->session;
    ops_submit(ops, call);
    return client_attached(cl);
}

/* Lines buffered in the input (after a pause, a partial line, or the
 * first read that chose the framing). */
static void ndjson_read(struct client *cl)
{
    size_t max = cl->env->cfg->max_line_bytes;
    while (client_attached(cl)) {
        if (client_over_limits(cl)) {
            client_pause(cl);
            return;
        }
        const char *in = stream_in_data(&cl->s);
        size_t avail = stream_in_len(&cl->s);
        const char *eol = avail > 0 ? memchr(in, '\n', avail) : NULL;
        if (eol == NULL) {
            if (avail > max) {
                ndjson_too_large(cl, max);
            }
            return;
        }
        size_t len = (size_t)(eol - in);
        if (len > max) {
            ndjson_too_large(cl, max);
            return;
        }
        /* Taken out of the buffer before it is handled: handling may
         * re-enter this reader (a synchronous answer resumes reading). */
        char stack[4096];
        char *line = len < sizeof(stack) ? stack : malloc(len + 1);
        if (line == NULL) {
            log_error(cl->subject, "out of memory");
            client_close_after_flush(cl);
            return;
        }
        memcpy(line, in, len + 1);
        bytes_consume(&cl->s.in, len + 1);
        bool more = ndjson_line(cl, line, len);
        if (line != stack) {
            free(line);
        }
        if (!more) {
            return;
        }
    }
}

/* Bytes read straight off the socket while the input is empty: complete
 * lines are handled in place, and only what is left (a partial line, or
 * lines held back by a pause) is kept in the input. */
static void ndjson_feed(struct client *cl, const char *buf, size_t n)
{
    size_t max = cl->env->cfg->max_line_bytes;
    size_t off = 0;
    while (off < n) {
        if (client_over_limits(cl)) {
            client_pause(cl);
            break;
        }
        const char *nl = memchr(buf + off, '\n', n - off);
        if (nl == NULL) {
            break;
        }
        size_t len = (size_t)(nl - (buf + off));
        if (len > max) {
            ndjson_too_large(cl, max);
            return;
        }
        const char *line = buf + off;
        off += len + 1;
        if (!ndjson_line(cl, line, len)) {
            return;
        }
    }
    if (off < n && client_input_keep(cl, buf + off, n - off) == 0 &&
        !cl->read_paused && stream_in_len(&cl->s) > max) {
        ndjson_too_large(cl, max);
    }
}

/* NDJSON bytes after the last newline are a request that never ended
 * (`printf '{"op":"ping"}' | socat ...`). Lines waiting behind a pause are
 * not here: reading, and so the EOF, waits for them. */
static void ndjson_answer_unterminated(struct client *cl)
{
    if (!client_attached(cl) || cl->read_paused) {
        return;
    }
    if (client_drain_cut_request(cl)) {
        METRIC_INC(requests_bad);
        ndjson_write_error(cl, NULL, 0, ERR_BAD_REQUEST,
                           "the input ended inside a line: every request "
                           "ends with a newline (\\n)");
    }
}

/* A line cut short is answered, and the close waits for the calls in
 * flight. */
static void ndjson_peer_eof(struct client *cl)
{
    ndjson_answer_unterminated(cl);
    if (cl->inflight == 0 || !client_attached(cl)) {
        client_close_after_flush(cl);
    }
}

void ndjson_resume(struct client *cl)
{
    if (cl->state == CLIENT_DRAINING && cl->inflight == 0) {
        /* NDJSON submits every buffered line at once (reading stops
         * before EOF while lines wait), so none is left behind. */
        client_close_after_flush(cl);
        return;
    }
    if (!cl->read_paused && stream_in_len(&cl->s) > 0) {
        client_input(cl);
    }
}

/* The answer is a line. At shutdown other calls are still in flight, so
 * client_answer queues it like the rest. */
static void ndjson_answer(struct client *cl, const struct client_call *call,
                          char *json, size_t len, enum proto_err err,
                          bool closing)
{
    (void)call;
    (void)err;
    (void)closing;
    json[len++] = '\n';
    client_answer(cl, json, len);
}

static void ndjson_answered(struct client *cl, struct client_call *call)
{
    client_call_free(call);
    if (!client_attached(cl)) {
        return;
    }
    if (cl->state == CLIENT_DRAINING && cl->inflight == 0) {
        client_resume_later(cl); /* to close */
        return;
    }
    client_recheck_limits(cl);
}

const struct framing_ops ndjson_framing = {
    .input = ndjson_read,
    .feed = ndjson_feed,
    .peer_eof = ndjson_peer_eof,
    .resume = ndjson_resume,
    .answer = ndjson_answer,
    .answered = ndjson_answered,
    .events = true,
};
