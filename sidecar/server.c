/* server.c: client connections, from the accepted socket to the close
 * (listener.c accepts them).
 *
 * Data flow of one connection:
 *
 *   bytes -> first non-space byte '{' ? NDJSON : HTTP
 *   NDJSON: one line -> proto_decode -> struct call -> ops_submit
 *           (pipelined: every complete line is submitted at once; answers go
 *            out as each completes, carrying the request's id)
 *   HTTP:   http_parse -> http_route -> struct call -> ops_submit
 *           (one request at a time, so answers keep request order)
 *   answer -> call_done_cb (each call's done) -> output buffer -> socket,
 *             written at the end of the loop turn (flush_ev), one write for
 *             every answer that turn produced; EV_WRITE is enabled on the
 *             bufferevent only while the socket is full, which saves the
 *             epoll_ctl pair bufferevent spends on each answer
 *
 * Back-pressure: a connection stops being read while it has max_inflight
 * calls outstanding or more than OUT_HIGH bytes unsent, and resumes when
 * the output drains below OUT_LOW. A client that never reads therefore holds
 * at most OUT_HIGH plus one read's worth of replies. An HTTP connection also
 * stops while a request is answered and --max-line-bytes of pipelined input
 * wait behind it.
 *
 * Each framing is reached through its struct framing_ops, so a
 * connection's life (enum client_state) is written once for both. The
 * framings stay in this file, which puts it over the house's 1,500 lines:
 * they use every part of struct client (its output, pause and state), and
 * apart they would need it in a header of its own that three files could
 * change. */
#include "server.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "cluster.h"
#include "config.h"
#include "http.h"
#include "listener.h"
#include "locks.h"
#include "log.h"
#include "metrics.h"
#include "ops.h"
#include "proto.h"
#include "rlassert.h"
#include "util.h"

#define OUT_HIGH (1024 * 1024)
#define OUT_LOW (256 * 1024)

/* The --metrics-listen TCP port is reachable by more peers than the lock
 * socket (docker binds 0.0.0.0), so its connections neither count toward
 * --max-connections nor may they sit there: a scraper needs one or two. */
#define METRICS_MAX_CONNECTIONS 16
/* A metrics connection must complete a request this soon after it opens
 * or after its last answer; an idle or trickling peer is closed. */
#define METRICS_IDLE_MS 5000
#define STR_(x) #x
#define STR(x) STR_(x)

/* A call as the server keeps it: what ops sees, and how to answer it. */
struct server_call {
    struct call call;      /* first: handed to ops; its done is call_done_cb */
    struct server *srv;    /* borrowed: NULL once server_destroy ran */
    struct client *client; /* borrowed: NULL once the client closed */
    struct server_call *next, *prev; /* the client's in-flight list, or
                                        the server's orphans */
    bool http;                       /* answer as HTTP */
    bool keep_alive;                 /* HTTP keep-alive */
    bool head_only;                  /* HTTP HEAD, no body */
};

enum framing {
    FRAMING_UNKNOWN = 0, /* nothing but whitespace read yet */
    FRAMING_NDJSON,      /* first byte '{' */
    FRAMING_HTTP,        /* anything else */
};

struct client;

/* What the client code asks of a framing (framing_ops_of()): one table
 * per enum framing, so that the connection's life is written once and
 * each framing says only how it reads and when it is done. */
struct framing_ops {
    /* Serves what the input buffer holds. */
    void (*input)(struct client *cl);
    /* Bytes read off the socket while the input buffer is empty, served
     * in place; NULL: they are buffered first, then input(). */
    void (*feed)(struct client *cl, const char *buf, size_t n);
    /* The peer shut its writing side: what is owed gets answered, and
     * the connection closes once nothing more is. */
    void (*peer_eof)(struct client *cl);
    /* resume_ev: going on after an answer or a pause (see
     * client_resume_later()). */
    void (*resume)(struct client *cl);
    bool events; /* a session's event lines are written */
};

static const struct framing_ops *framing_ops_of(enum framing framing);

/* Where a connection is in its life. Only client_set_state() writes it,
 * and it aborts on a transition not listed here:
 *
 *   OPEN     -> DRAINING     the peer shut its writing side
 *   OPEN     -> CLOSING      we close (an error, a line that is not JSON,
 *                            Connection: close, shutdown)
 *   DRAINING -> CLOSING_EOF  we close (all answered, or as above)
 *   CLOSING  -> CLOSING_EOF  the peer's half-close while we flush
 *   CLOSING  -> LINGERING    flushed: our side shut
 *   any but FREED -> FREED   client_free()
 *
 * OPEN and DRAINING are attached: the connection has its calls and its
 * session. Leaving them detaches it (client_leave()), and from then on
 * nothing is read, submitted or written but what is queued already. */
enum client_state {
    CLIENT_OPEN = 0,    /* reading requests and answering them */
    CLIENT_DRAINING,    /* the peer shut its writing side: what it asked
                           is answered, then the connection closes */
    CLIENT_CLOSING,     /* detached, flushing its output; then our side
                           shuts and it lingers, as the peer may still be
                           sending */
    CLIENT_CLOSING_EOF, /* detached, flushing its output; the peer sent
                           its EOF already, so it is freed once flushed */
    CLIENT_LINGERING,   /* our side shut: what comes is discarded until
                           the peer's EOF, LINGER_MS or LINGER_BYTES */
    CLIENT_FREED,       /* client_free() is letting it go */
};

/* One client connection. Owned by the server's list; freed by
 * client_free() once closed and flushed. The bools below are not phases
 * of its life: each says whether one of its events is armed or one of its
 * input's conditions holds, and any of them may be true in several
 * states. */
struct client {
    struct server *srv; /* borrowed */
    uint64_t id;
    struct bufferevent *bev; /* owned */
    enum framing framing;
    enum client_state state;   /* written by client_set_state() only */
    struct lock_owner session; /* NDJSON: locks that die with us */
    struct server_call *calls; /* in-flight calls (owned by the server) */
    int inflight;
    bool read_paused;        /* back-pressure: over a limit, not read */
    bool bom_checked;        /* the stream's first bytes were not a BOM */
    size_t discarded;        /* bytes thrown away while lingering */
    struct event *linger_ev; /* owned: bound on lingering */
    struct event *flush_ev;  /* owned: made active to write this turn */
    struct event *resume_ev; /* owned: made active to go on reading */
    struct event *read_ev;   /* owned: EV_READ on the socket */
    struct event *idle_ev;   /* owned: metrics only: METRICS_IDLE_MS */
    bool reading;            /* read_ev is added */
    bool flush_pending;      /* flush_ev is active */
    bool resume_pending;     /* resume_ev is active */
    bool write_on;           /* EV_WRITE enabled: the socket was full */
    bool http_busy;          /* an HTTP request is being answered */
    bool http_looping;       /* http_next's loop is running */
    bool http_continue_sent; /* 100 Continue sent for the current head */
    bool metrics_only;       /* from --metrics-listen: no lock routes */
    struct client *prev, *next;
    char subject[32];
};

struct server {
    struct event_base *base;  /* borrowed */
    const struct config *cfg; /* borrowed */
    struct ops *ops;          /* borrowed */
    struct listener *lst;     /* owned; NULL in destroy */
    struct client *clients;
    int n_clients;         /* lock socket: bounded by --max-connections */
    int n_metrics_clients; /* metrics listener: METRICS_MAX_CONNECTIONS */
    uint64_t next_id;
    struct server_call *free_calls;
    int free_calls_count;
    struct server_call *orphans; /* in flight, their client closed */
    struct http_limits http_limits;
};

static void client_read_cb(struct bufferevent *bev, void *arg);
static void client_maybe_resume(struct client *cl);
static void session_close_cb(struct lock_owner *owner);

/* Moves cl to state; a transition that enum client_state does not list is
 * a bug in this file, never a peer's doing, and aborts. */
static void client_set_state(struct client *cl, enum client_state state)
{
    enum client_state old = cl->state;
    bool legal;
    switch (state) {
    case CLIENT_DRAINING:
    case CLIENT_CLOSING:
        legal = old == CLIENT_OPEN;
        break;
    case CLIENT_CLOSING_EOF:
        legal = old == CLIENT_DRAINING || old == CLIENT_CLOSING;
        break;
    case CLIENT_LINGERING:
        legal = old == CLIENT_CLOSING;
        break;
    case CLIENT_FREED:
        legal = old != CLIENT_FREED;
        break;
    case CLIENT_OPEN: /* the state a connection starts in, never reentered */
    default:
        abort();
    }
    if (!legal) {
        log_error(cl->subject, "illegal state change %d -> %d", (int)old,
                  (int)state);
        abort();
    }
    cl->state = state;
}

/* Whether cl still has its calls and session: reading, answering. */
static bool client_attached(const struct client *cl)
{
    return cl->state == CLIENT_OPEN || cl->state == CLIENT_DRAINING;
}

/* Reading is ours, not the bufferevent's: its reads cost an
 * ioctl(FIONREAD) each. */
static void client_reading(struct client *cl, bool on)
{
    if (on != cl->reading) {
        cl->reading = on;
        if (on) {
            event_add(cl->read_ev, NULL);
        } else {
            event_del(cl->read_ev);
        }
    }
}

/* ---- calls ----------------------------------------------------------------
 */

static void call_done_cb(struct call *call, const struct response *rsp);

static struct server_call *call_new(struct server *s, struct client *cl)
{
    /* A detached connection's calls were abandoned: no new one joins. */
    RL_ASSERT(client_attached(cl));
    struct server_call *sc = s->free_calls;
    if (sc != NULL) {
        s->free_calls = sc->next;
        s->free_calls_count--;
    } else {
        sc = malloc(sizeof(*sc));
        if (sc == NULL) {
            return NULL;
        }
    }
    memset(sc, 0, sizeof(*sc));
    sc->call.done = call_done_cb;
    sc->call.start_us = util_now_us();
    sc->srv = s;
    sc->client = cl;
    /* link into the client's in-flight list */
    sc->next = cl->calls;
    sc->prev = NULL;
    if (cl->calls != NULL) {
        cl->calls->prev = sc;
    }
    cl->calls = sc;
    cl->inflight++;
    return sc;
}

/* Unlinks sc from the list headed by *head. */
static void call_list_unlink(struct server_call **head, struct server_call *sc)
{
    if (sc->prev != NULL) {
        sc->prev->next = sc->next;
    } else {
        *head = sc->next;
    }
    if (sc->next != NULL) {
        sc->next->prev = sc->prev;
    }
    sc->next = sc->prev = NULL;
}

static void call_unlink(struct client *cl, struct server_call *sc)
{
    call_list_unlink(&cl->calls, sc);
    cl->inflight--;
    RL_ASSERT(cl->inflight >= 0);
}

static void call_free(struct server *s, struct server_call *sc)
{
    if (s == NULL) {
        /* The server is gone: see server_destroy(). */
        free(sc);
        return;
    }
    if (s->free_calls_count < 4096) {
        sc->next = s->free_calls;
        s->free_calls = sc;
        s->free_calls_count++;
    } else {
        free(sc);
    }
}

/* ---- client lifecycle -----------------------------------------------------
 */

/* The connection is going away: its in-flight calls lose their client
 * (ops finishes them and releases whatever they win) and its session locks
 * are released now, whatever remains of the socket's own life. Runs once,
 * from client_leave(). */
static void client_detach(struct client *cl)
{
    struct server *s = cl->srv;
    while (cl->calls != NULL) {
        /* Calls outlive their client: an orphan goes back to the pool
         * when ops answers it, or is freed then after server_destroy. */
        struct server_call *sc = cl->calls;
        call_unlink(cl, sc);
        sc->client = NULL;
        sc->next = s->orphans;
        if (s->orphans != NULL) {
            s->orphans->prev = sc;
        }
        s->orphans = sc;
        ops_call_abandoned(s->ops, &sc->call);
    }
    RL_ASSERT(cl->inflight == 0);
    if (locks_owner_first(&cl->session) != NULL) {
        ops_client_closed(s->ops, &cl->session);
    }
    RL_ASSERT(locks_owner_first(&cl->session) == NULL);
}

/* Moves an attached connection to state (a closing one, or FREED) and
 * detaches it; the state changes first, so that whatever ops says while
 * it lets the calls and session go (a lost event) is not written. */
static void client_leave(struct client *cl, enum client_state state)
{
    bool attached = client_attached(cl);
    client_set_state(cl, state);
    if (attached) {
        client_detach(cl);
    }
}

static void client_free(struct client *cl)
{
    struct server *s = cl->srv;
    client_leave(cl, CLIENT_FREED);
    RL_ASSERT(cl->calls == NULL);
    if (cl->linger_ev != NULL) {
        event_free(cl->linger_ev);
    }
    if (cl->flush_ev != NULL) {
        event_free(cl->flush_ev);
    }
    if (cl->resume_ev != NULL) {
        event_free(cl->resume_ev);
    }
    if (cl->read_ev != NULL) {
        event_free(cl->read_ev);
    }
    if (cl->idle_ev != NULL) {
        event_free(cl->idle_ev);
    }
    if (cl->prev != NULL) {
        cl->prev->next = cl->next;
    } else {
        s->clients = cl->next;
    }
    if (cl->next != NULL) {
        cl->next->prev = cl->prev;
    }
    if (cl->metrics_only) {
        s->n_metrics_clients--;
        RL_ASSERT(s->n_metrics_clients >= 0);
    } else {
        s->n_clients--;
        RL_ASSERT(s->n_clients >= 0);
    }
    METRIC_ADD(clients, -1);
    bufferevent_free(cl->bev);
    log_debug(cl->subject, "closed");
    free(cl);
    listener_fd_freed(s->lst);
}

/* A metrics connection's deadline passed with no request completed: free
 * it at once, since a peer that does not read may still hold answers. */
static void idle_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct client *cl = arg;
    log_debug(cl->subject, "metrics connection idle for %d ms: closing",
              METRICS_IDLE_MS);
    client_free(cl);
}

/* (Re)starts a metrics connection's deadline. */
static void client_idle_arm(struct client *cl)
{
    struct timeval tv = {METRICS_IDLE_MS / 1000,
                         (METRICS_IDLE_MS % 1000) * 1000};
    evtimer_add(cl->idle_ev, &tv);
}

#define LINGER_MS 2000
#define LINGER_BYTES (1024 * 1024)

static void linger_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct client *cl = arg;
    RL_ASSERT(cl->state == CLIENT_LINGERING);
    client_free(cl);
}

/* Everything is written: close. A peer may still be sending (the rest of
 * an oversized body or line); closing on unread data would reset the
 * connection and could destroy our answer before it is read, so shut our
 * side and discard what comes, for a bounded time and size. */
static void client_finish_close(struct client *cl)
{
    RL_ASSERT(!client_attached(cl));
    RL_ASSERT(evbuffer_get_length(bufferevent_get_output(cl->bev)) == 0);
    if (cl->state != CLIENT_CLOSING) {
        client_free(cl);
        return;
    }
    cl->linger_ev = evtimer_new(cl->srv->base, linger_cb, cl);
    if (cl->linger_ev == NULL ||
        shutdown(bufferevent_getfd(cl->bev), SHUT_WR) != 0) {
        client_free(cl);
        return;
    }
    client_set_state(cl, CLIENT_LINGERING);
    struct timeval tv = {LINGER_MS / 1000, (LINGER_MS % 1000) * 1000};
    evtimer_add(cl->linger_ev, &tv);
    client_reading(cl, true);
}

/* Closes now if nothing is left to send, else after the flush. */
static void client_close_after_flush(struct client *cl)
{
    RL_ASSERT(cl->state != CLIENT_LINGERING && cl->state != CLIENT_FREED);
    if (client_attached(cl)) {
        client_reading(cl, false);
        client_leave(cl, cl->state == CLIENT_DRAINING ? CLIENT_CLOSING_EOF
                                                      : CLIENT_CLOSING);
    }
    if (evbuffer_get_length(bufferevent_get_output(cl->bev)) == 0) {
        client_finish_close(cl);
    }
}

/* After EOF: whether the peer closed both directions (it can read nothing
 * more) rather than just its writing side. A unix socket whose peer is gone
 * polls POLLHUP; a half-closed one does not. */
static bool peer_gone(struct client *cl)
{
    struct pollfd p = {bufferevent_getfd(cl->bev), POLLOUT, 0};
    if (poll(&p, 1, 0) < 0) {
        return true;
    }
    return (p.revents & (POLLHUP | POLLERR)) != 0;
}

static bool line_is_blank(const char *p, size_t n);
static void http_next(struct client *cl);
static void write_ndjson_error(struct client *cl, const char *id, size_t id_len,
                               enum proto_err err, const char *msg);

/* At the peer's half-close: drains the bytes left after the last complete
 * request and returns true when they are more than blanks (spaces, tabs,
 * CRs, LFs), that is a request cut short, owed an answer rather than a
 * silent close. */
static bool client_drain_cut_request(struct client *cl)
{
    struct evbuffer *in = bufferevent_get_input(cl->bev);
    size_t n = evbuffer_get_length(in);
    const unsigned char *p = n > 0 ? evbuffer_pullup(in, -1) : NULL;
    size_t i = 0;
    while (p != NULL && i < n && util_is_space(p[i])) {
        i++;
    }
    evbuffer_drain(in, n);
    return p != NULL && i < n;
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
        write_ndjson_error(cl, NULL, 0, ERR_BAD_REQUEST,
                           "the input ended inside a line: every request "
                           "ends with a newline (\\n)");
    }
}

static void client_event_cb(struct bufferevent *bev, short events, void *arg)
{
    (void)bev;
    struct client *cl = arg;
    if (cl->state == CLIENT_LINGERING) {
        client_free(cl);
        return;
    }
    if ((events & BEV_EVENT_EOF) && !(events & BEV_EVENT_ERROR) &&
        !(events & BEV_EVENT_WRITING) && !peer_gone(cl)) {
        /* A half-close (socat, `printf .. | nc -U`): still answer what was
         * asked, then close; session locks go with the close. Read again
         * after a pause, the EOF comes again. */
        if (cl->state == CLIENT_OPEN) {
            client_set_state(cl, CLIENT_DRAINING);
        } else if (cl->state == CLIENT_CLOSING) {
            client_set_state(cl, CLIENT_CLOSING_EOF);
        }
        client_reading(cl, false);
        framing_ops_of(cl->framing)->peer_eof(cl);
        return;
    }
    if (events & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        if ((events & BEV_EVENT_ERROR) && errno != ECONNRESET &&
            errno != EPIPE) {
            log_debug(cl->subject, "socket error: %s", strerror(errno));
        }
        client_free(cl);
    }
}

static void client_write_cb(struct bufferevent *bev, void *arg)
{
    struct client *cl = arg;
    if (cl->write_on && client_attached(cl) &&
        evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        /* Drained: back to writing at the end of each turn. */
        cl->write_on = false;
        bufferevent_disable(bev, EV_WRITE);
    }
    if (!client_attached(cl)) {
        if (cl->state != CLIENT_LINGERING &&
            evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
            client_finish_close(cl);
        }
        return;
    }
    client_maybe_resume(cl);
}

static void client_pause(struct client *cl)
{
    if (!cl->read_paused) {
        cl->read_paused = true;
        client_reading(cl, false);
    }
}

/* While an HTTP request is answered, the requests pipelined behind it wait
 * in the input buffer; past one request's worth (--max-line-bytes) reading
 * stops until the answer is out, so the kernel pushes back on the client
 * instead of the daemon buffering without limit. Holds at most that plus
 * one read. */
static bool client_http_held(struct client *cl)
{
    return cl->http_busy &&
           evbuffer_get_length(bufferevent_get_input(cl->bev)) >=
               cl->srv->cfg->max_line_bytes;
}

static bool client_over_limits(struct client *cl)
{
    return cl->inflight >= cl->srv->cfg->max_inflight ||
           evbuffer_get_length(bufferevent_get_output(cl->bev)) > OUT_HIGH ||
           client_http_held(cl);
}

/* Going on with a connection's input (lines buffered while it was paused,
 * HTTP requests pipelined behind an answer, the close owed to a peer that
 * half-closed) happens in resume_ev's callback, never inside the answer
 * that made it possible: answers come from deep in ops and cluster
 * callbacks, and new input there may close the connection and abandon its
 * other calls, freeing what those callbacks still hold (a wait queue). */
static void client_resume_later(struct client *cl)
{
    if (!cl->resume_pending) {
        cl->resume_pending = true;
        event_active(cl->resume_ev, EV_READ, 0);
    }
}

static void client_resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct client *cl = arg;
    cl->resume_pending = false;
    if (!client_attached(cl)) {
        return;
    }
    framing_ops_of(cl->framing)->resume(cl);
}

/* NDJSON's resume (and a connection's whose framing is not known yet):
 * closes after the peer's EOF once all is answered, else reads the lines
 * held back by a pause. */
static void ndjson_resume(struct client *cl)
{
    if (cl->state == CLIENT_DRAINING && cl->inflight == 0) {
        /* NDJSON submits every buffered line at once (reading stops
         * before EOF while lines wait), so none is left behind. */
        client_close_after_flush(cl);
        return;
    }
    if (!cl->read_paused &&
        evbuffer_get_length(bufferevent_get_input(cl->bev)) > 0) {
        client_read_cb(cl->bev, cl);
    }
}

static void client_maybe_resume(struct client *cl)
{
    if (!cl->read_paused || !client_attached(cl)) {
        return;
    }
    if (cl->inflight < cl->srv->cfg->max_inflight &&
        evbuffer_get_length(bufferevent_get_output(cl->bev)) <= OUT_LOW &&
        !client_http_held(cl)) {
        cl->read_paused = false;
        client_reading(cl, true);
        /* Lines may already sit in the input buffer. */
        if (evbuffer_get_length(bufferevent_get_input(cl->bev)) > 0) {
            client_resume_later(cl);
        }
    }
}

/* After answers or reads changed a connection's load: stop reading it over
 * the limits, else let it resume. */
static void client_recheck_limits(struct client *cl)
{
    if (client_over_limits(cl)) {
        client_pause(cl);
    } else {
        client_maybe_resume(cl);
    }
}

/* ---- writing answers ------------------------------------------------------
 */

/* Queues bytes for the client; they go out at the end of this loop turn. */
static void client_out(struct client *cl, const void *data, size_t len)
{
    /* Once closing, only what was queued goes out (and after the shutdown
     * of our side nothing could). */
    RL_ASSERT(client_attached(cl));
    evbuffer_add(bufferevent_get_output(cl->bev), data, len);
    if (!cl->flush_pending && !cl->write_on) {
        cl->flush_pending = true;
        event_active(cl->flush_ev, EV_WRITE, 1);
    }
}

/* An NDJSON answer. When it is the connection's last one in flight and
 * nothing is queued, nothing could join it this turn: write it now, which
 * spares the evbuffer chain and the flush event (the common case of one
 * request at a time). */
static void client_answer(struct client *cl, const char *buf, size_t len)
{
    RL_ASSERT(client_attached(cl));
    if (cl->inflight == 0 && !cl->flush_pending && !cl->write_on &&
        evbuffer_get_length(bufferevent_get_output(cl->bev)) == 0) {
        ssize_t n;
        do {
            n = write(bufferevent_getfd(cl->bev), buf, len);
        } while (n < 0 && errno == EINTR);
        if (n == (ssize_t)len) {
            return;
        }
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        }
        /* The rest (or all of it, after EAGAIN or an error, which the
         * bufferevent then reports) goes the queued way. */
    }
    client_out(cl, buf, len);
}

/* End of the turn: write everything queued; what does not fit is left to
 * the bufferevent (EV_WRITE), which also reports a broken socket. */
static void client_flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct client *cl = arg;
    cl->flush_pending = false;
    if (cl->write_on) {
        return;
    }
    struct evbuffer *out = bufferevent_get_output(cl->bev);
    evutil_socket_t sock = bufferevent_getfd(cl->bev);
    /* A bufferevent keeps the front of its output frozen so that only it
     * drains it; thaw it for this write. */
    evbuffer_unfreeze(out, 1);
    int n = 1;
    while (n > 0 && evbuffer_get_length(out) > 0) {
        n = evbuffer_write(out, sock);
    }
    evbuffer_freeze(out, 1);
    if (evbuffer_get_length(out) > 0) {
        cl->write_on = true;
        bufferevent_enable(cl->bev, EV_WRITE);
        return;
    }
    if (!client_attached(cl)) {
        if (cl->state != CLIENT_LINGERING) {
            client_finish_close(cl);
        }
        return;
    }
    client_maybe_resume(cl);
}

static void write_ndjson_error(struct client *cl, const char *id, size_t id_len,
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

static void write_http(struct client *cl, int status, const char *ctype,
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
static void write_http_error_id(struct client *cl, int status, const char *id,
                                size_t id_len, enum proto_err err,
                                const char *msg, bool keep_alive,
                                const char *allow, bool head_only)
{
    char buf[PROTO_RESPONSE_MAX];
    struct response rsp = {0};
    rsp.id = id_len ? id : NULL;
    rsp.id_len = id_len;
    rsp.err = err;
    rsp.message = msg;
    size_t n = proto_encode_response(&rsp, buf, sizeof(buf));
    write_http(cl, status, "application/json", buf, n, keep_alive, allow,
               head_only);
}

static void write_http_error(struct client *cl, int status, enum proto_err err,
                             const char *msg, bool keep_alive,
                             const char *allow, bool head_only)
{
    write_http_error_id(cl, status, NULL, 0, err, msg, keep_alive, allow,
                        head_only);
}

static void http_next(struct client *cl);

/* Every call's done (call.h): answers on the client's connection, if it is
 * still there, and takes the call back. */
static void call_done_cb(struct call *call, const struct response *rsp)
{
    struct server_call *sc = (struct server_call *)call; /* first member */
    struct server *s = sc->srv;
    struct client *cl = sc->client;
    if (cl != NULL) {
        call_unlink(cl, sc);
        if (rsp != NULL && client_attached(cl)) {
            char stack[PROTO_RESPONSE_MAX];
            char *buf = stack;
            size_t cap = sizeof(stack);
            if (rsp->extra_len > 0) {
                /* A listing or an inspection: sized by its members. */
                cap = PROTO_RESPONSE_MAX + rsp->extra_len;
                buf = malloc(cap);
            }
            size_t n =
                buf != NULL ? proto_encode_response(rsp, buf, cap - 1) : 0;
            if (n == 0) {
                log_error(cl->subject, "response did not fit its buffer");
            } else if (sc->http) {
                int status =
                    rsp->err == ERR_NONE ? 200 : proto_err_status(rsp->err);
                write_http(cl, status, "application/json", buf, n,
                           sc->keep_alive, NULL, sc->head_only);
            } else {
                buf[n++] = '\n';
                client_answer(cl, buf, n);
            }
            if (buf != stack) {
                free(buf);
            }
        }
        bool http = sc->http;
        bool keep_alive = sc->keep_alive;
        call_free(s, sc);
        if (!client_attached(cl)) {
            return;
        }
        if (http) {
            RL_ASSERT(cl->http_busy); /* one HTTP request at a time */
            cl->http_busy = false;
            if (!keep_alive) {
                client_close_after_flush(cl);
                return;
            }
            /* Requests pipelined behind this one are still owed, after a
             * half-close too: http_next serves them, then closes. */
            client_resume_later(cl);
            return;
        }
        if (cl->state == CLIENT_DRAINING && cl->inflight == 0) {
            client_resume_later(cl); /* to close */
            return;
        }
        client_recheck_limits(cl);
        return;
    }
    if (s != NULL) {
        call_list_unlink(&s->orphans, sc);
    }
    call_free(s, sc);
}

/* The connection that embeds a session. */
static struct client *client_of(struct lock_owner *owner)
{
    return (struct client *)((char *)owner - offsetof(struct client, session));
}

/* A session's event_cb (locks.h): an event line, NDJSON only. */
static void session_event_cb(struct lock_owner *owner, const char *json,
                             size_t len)
{
    struct client *cl = client_of(owner);
    if (!client_attached(cl) || !framing_ops_of(cl->framing)->events) {
        return;
    }
    client_out(cl, json, len);
    client_out(cl, "\n", 1);
}

/* ---- NDJSON ---------------------------------------------------------------
 */

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
    write_ndjson_error(cl, NULL, 0, ERR_TOO_LARGE,
                       "request line over the limit (--max-line-bytes)");
    client_close_after_flush(cl);
}

/* One complete line (without its newline). Returns false once the
 * connection is closing and nothing more may be read from it. */
static bool ndjson_line(struct client *cl, const char *line, size_t len)
{
    struct server *s = cl->srv;
    if (line_is_blank(line, len)) {
        return true;
    }
    struct server_call *sc = call_new(s, cl);
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
        call_unlink(cl, sc);
        write_ndjson_error(cl, call->req.id, call->req.id_len, ERR_BAD_REQUEST,
                           err);
        bool fatal = rc == -2;
        call_free(s, sc);
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
            ops_health_json(s->ops, call->req.id, call->req.id_len, &ok, &n);
        call_unlink(cl, sc);
        call_free(s, sc);
        if (json != NULL) {
            client_out(cl, json, n);
            client_out(cl, "\n", 1);
            free(json);
        }
        return true;
    }
    call->session = &cl->session;
    ops_submit(s->ops, call);
    return client_attached(cl);
}

/* Lines buffered in the input evbuffer (after a pause, a partial line, or
 * the first read that chose the framing). */
static void ndjson_read(struct client *cl)
{
    struct evbuffer *in = bufferevent_get_input(cl->bev);
    size_t max = cl->srv->cfg->max_line_bytes;
    while (client_attached(cl)) {
        if (client_over_limits(cl)) {
            client_pause(cl);
            return;
        }
        size_t eol_len = 0;
        struct evbuffer_ptr eol =
            evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        if (eol.pos < 0) {
            if (evbuffer_get_length(in) > max) {
                ndjson_too_large(cl, max);
            }
            return;
        }
        size_t len = (size_t)eol.pos;
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
        evbuffer_remove(in, line, len + 1);
        bool more = ndjson_line(cl, line, len);
        if (line != stack) {
            free(line);
        }
        if (!more) {
            return;
        }
    }
}

/* Appends bytes read from the socket to the input evbuffer. Returns 0, or
 * -1 (out of memory; the connection is closing). */
static int input_keep(struct client *cl, const char *data, size_t n)
{
    struct evbuffer *in = bufferevent_get_input(cl->bev);
    /* The bufferevent freezes its input's end so that only it adds. */
    evbuffer_unfreeze(in, 0);
    int rc = evbuffer_add(in, data, n);
    evbuffer_freeze(in, 0);
    if (rc != 0) {
        log_error(cl->subject, "out of memory");
        client_close_after_flush(cl);
        return -1;
    }
    return 0;
}

/* Bytes read straight off the socket while the input evbuffer is empty:
 * complete lines are handled in place, and only what is left (a partial
 * line, or lines held back by a pause) is kept in the evbuffer. */
static void ndjson_feed(struct client *cl, const char *buf, size_t n)
{
    size_t max = cl->srv->cfg->max_line_bytes;
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
    if (off < n && input_keep(cl, buf + off, n - off) == 0 &&
        !cl->read_paused &&
        evbuffer_get_length(bufferevent_get_input(cl->bev)) > max) {
        ndjson_too_large(cl, max);
    }
}

/* ---- HTTP -----------------------------------------------------------------
 */

static void http_serve_local(struct client *cl, const struct http_request *h,
                             const struct request *req)
{
    struct server *s = cl->srv;
    bool head_only = h->method == HTTP_HEAD;
    if (req->op == OP_HEALTH) {
        bool ok;
        size_t n;
        char *json = ops_health_json(s->ops, NULL, 0, &ok, &n);
        if (json == NULL) {
            write_http_error(cl, 500, ERR_INTERNAL, "out of memory",
                             h->keep_alive, NULL, head_only);
            return;
        }
        write_http(cl, ok ? 200 : 503, "application/json", json, n,
                   h->keep_alive, NULL, head_only);
        free(json);
        return;
    }
    size_t n;
    char *text = ops_metrics_text(s->ops, &n);
    if (text == NULL) {
        write_http_error(cl, 500, ERR_INTERNAL, "out of memory", h->keep_alive,
                         NULL, head_only);
        return;
    }
    write_http(cl, 200, "text/plain; version=0.0.4; charset=utf-8", text, n,
               h->keep_alive, NULL, head_only);
    free(text);
}

/* At the peer's half-close, with every complete request served: bytes
 * left are a request cut short (its head, or a body shorter than its
 * Content-Length). CRLFs between requests are allowed (RFC 9112 2.2). */
static void http_answer_unterminated(struct client *cl)
{
    if (client_drain_cut_request(cl)) {
        METRIC_INC(requests_bad);
        write_http_error(cl, 400, ERR_BAD_REQUEST,
                         "the input ended inside a request (its head, or a "
                         "body shorter than its Content-Length)",
                         false, NULL, false);
    }
}

/* One buffered HTTP request: parses it and answers it or submits it.
 * Returns true to go on with the next one, false to stop (incomplete,
 * closing). */
static bool http_one(struct client *cl)
{
    struct server *s = cl->srv;
    struct evbuffer *in = bufferevent_get_input(cl->bev);
    size_t avail = evbuffer_get_length(in);
    if (avail == 0) {
        return false;
    }
    const char *buf = (const char *)evbuffer_pullup(in, -1);
    struct http_request h;
    enum http_parse_result pr = http_parse(buf, avail, &s->http_limits, &h);
    if (pr == HTTP_INCOMPLETE) {
        if (h.head_done && h.expect_continue && !cl->http_continue_sent) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            client_out(cl, cont, sizeof(cont) - 1);
            cl->http_continue_sent = true;
        }
        return false;
    }
    if (pr == HTTP_ERROR) {
        METRIC_INC(requests_bad);
        bool big = h.error_status == 413 || h.error_status == 414 ||
                   h.error_status == 431;
        enum proto_err e = big ? ERR_TOO_LARGE : ERR_BAD_REQUEST;
        write_http_error(cl, h.error_status, e,
                         h.error_message ? h.error_message : "bad request",
                         false, NULL, h.method == HTTP_HEAD);
        client_close_after_flush(cl);
        return false;
    }
    cl->http_continue_sent = false;
    bool head_only = h.method == HTTP_HEAD;
    if (cl->metrics_only) {
        client_idle_arm(cl); /* a request completed: the deadline restarts */
    }
    struct server_call *sc = call_new(s, cl);
    if (sc == NULL) {
        /* Answer before closing: with nothing left to send, the close
         * could free the client under the caller. */
        write_http_error(cl, 500, ERR_INTERNAL, "out of memory", false, NULL,
                         head_only);
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
        write_http_error_id(cl, status, call->req.id, call->req.id_len,
                            ERR_BAD_REQUEST, err, keep_alive,
                            status == 405 ? http_route_allow(h.path) : NULL,
                            head_only);
        call_unlink(cl, sc);
        call_free(s, sc);
    } else if (cl->metrics_only && call->req.op != OP_HEALTH &&
               call->req.op != OP_METRICS) {
        /* Prometheus' port is reachable by more peers than the lock
         * socket: it never serves lock operations. */
        call_unlink(cl, sc);
        call_free(s, sc);
        write_http_error(cl, 404, ERR_BAD_REQUEST,
                         "only /metrics and /v1/health are served on "
                         "the metrics listener",
                         keep_alive, NULL, head_only);
    } else if (call->req.op == OP_HEALTH || call->req.op == OP_METRICS) {
        http_serve_local(cl, &h, &call->req);
        call_unlink(cl, sc);
        call_free(s, sc);
    } else {
        evbuffer_drain(in, h.consumed);
        sc->http = true;
        sc->keep_alive = keep_alive;
        sc->head_only = head_only;
        call->session = NULL;
        cl->http_busy = true;
        /* A synchronous answer clears http_busy (and may close) before
         * this returns; the caller's loop takes it from there. */
        ops_submit(s->ops, call);
        return true;
    }
    evbuffer_drain(in, h.consumed);
    if (!keep_alive) {
        client_close_after_flush(cl);
        return false;
    }
    return true;
}

/* Runs the buffered HTTP requests, one at a time, until one is in flight
 * or the input is used up; then decides whether to keep reading, or, after
 * the peer's EOF, closes once nothing is in flight or left to serve. It may
 * free the client: callers return right after it. A request
 * answered synchronously (ping, a bad route, limit) calls
 * call_done_cb(), which calls back here: that inner call returns at
 * once and this loop goes on, so thousands of pipelined requests take one
 * stack frame, not one each. */
static void http_next(struct client *cl)
{
    if (cl->http_looping) {
        return;
    }
    cl->http_looping = true;
    while (client_attached(cl) && !cl->http_busy) {
        if (client_over_limits(cl)) {
            break; /* output over OUT_HIGH: resumed when it drains */
        }
        if (!http_one(cl)) {
            break;
        }
    }
    cl->http_looping = false;
    if (!client_attached(cl)) {
        return;
    }
    /* Over the limits, complete requests may still be buffered: they are
     * served when the output drains (client_maybe_resume). */
    if (cl->state == CLIENT_DRAINING && !cl->http_busy && cl->inflight == 0 &&
        !client_over_limits(cl)) {
        http_answer_unterminated(cl);
        client_close_after_flush(cl);
        return;
    }
    client_recheck_limits(cl);
}

/* ---- reading --------------------------------------------------------------
 */

/* The framing a connection's first non-space byte chooses: '{' is NDJSON,
 * anything else HTTP (always HTTP on the metrics listener). */
static enum framing framing_of(unsigned char first, bool metrics_only)
{
    return first == '{' && !metrics_only ? FRAMING_NDJSON : FRAMING_HTTP;
}

/* Drops the whitespace before a connection's first byte, however much of
 * it is buffered (looked at a slice at a time, so a long run costs no big
 * pull-up), and picks the framing from that byte. Returns false while
 * nothing but whitespace has come; it is all drained, so it never grows. */
static bool client_pick_framing(struct client *cl)
{
    struct evbuffer *in = bufferevent_get_input(cl->bev);
    if (!cl->bom_checked) {
        /* A UTF-8 byte order mark first (some Windows tools write one) is
         * dropped, as RFC 8259 lets a parser do, rather than taken for
         * the first byte of an HTTP method. It may come in pieces. */
        static const unsigned char bom[3] = {0xEF, 0xBB, 0xBF};
        size_t n = evbuffer_get_length(in);
        size_t look = n < 3 ? n : 3;
        const unsigned char *p = evbuffer_pullup(in, (ssize_t)look);
        if (p != NULL && memcmp(p, bom, look) == 0) {
            if (look < 3) {
                return false;
            }
            evbuffer_drain(in, 3);
        }
        cl->bom_checked = true;
    }
    for (;;) {
        size_t n = evbuffer_get_length(in);
        if (n == 0) {
            return false;
        }
        size_t look = n < 512 ? n : 512;
        const unsigned char *p = evbuffer_pullup(in, (ssize_t)look);
        if (p == NULL) {
            log_error(cl->subject, "out of memory");
            client_close_after_flush(cl);
            return false;
        }
        size_t i = 0;
        while (i < look && util_is_space(p[i])) {
            i++;
        }
        if (i < look) {
            cl->framing = framing_of(p[i], cl->metrics_only);
            evbuffer_drain(in, i);
            return true;
        }
        evbuffer_drain(in, look);
    }
}

static void client_read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct client *cl = arg;
    if (cl->state == CLIENT_LINGERING) {
        struct evbuffer *in = bufferevent_get_input(cl->bev);
        cl->discarded += evbuffer_get_length(in);
        evbuffer_drain(in, evbuffer_get_length(in));
        if (cl->discarded > LINGER_BYTES) {
            client_free(cl);
        }
        return;
    }
    if (!client_attached(cl)) {
        return;
    }
    framing_ops_of(cl->framing)->input(cl);
}

static void client_event_cb(struct bufferevent *bev, short events, void *arg);

/* EV_READ: one read into the input buffer, then the framing's reader. */
static void client_sock_read_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct client *cl = arg;
    char buf[16384];
    ssize_t n;
    do {
        n = read(fd, buf, sizeof(buf));
    } while (n < 0 && errno == EINTR);
    if (n == 0) {
        client_event_cb(cl->bev, BEV_EVENT_READING | BEV_EVENT_EOF, cl);
        return;
    }
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            client_event_cb(cl->bev, BEV_EVENT_READING | BEV_EVENT_ERROR, cl);
        }
        return;
    }
    struct evbuffer *in = bufferevent_get_input(cl->bev);
    const struct framing_ops *f = framing_ops_of(cl->framing);
    if (f->feed != NULL && client_attached(cl) &&
        evbuffer_get_length(in) == 0) {
        f->feed(cl, buf, (size_t)n);
        return;
    }
    if (input_keep(cl, buf, (size_t)n) == 0) {
        client_read_cb(cl->bev, cl);
    }
}

/* ---- framings -------------------------------------------------------------
 */

/* NDJSON's peer_eof: a line cut short is answered, and the close waits
 * for the calls in flight. */
static void ndjson_peer_eof(struct client *cl)
{
    ndjson_answer_unterminated(cl);
    if (cl->inflight == 0 || !client_attached(cl)) {
        client_close_after_flush(cl);
    }
}

/* HTTP's peer_eof and resume: serves the next complete request unless one
 * is being answered; http_next closes after the peer's EOF once all is
 * answered (or later, when the request being served is). */
static void http_go_on(struct client *cl)
{
    if (!cl->http_busy) {
        http_next(cl);
    }
}

/* Before the framing is known: its first bytes choose it, then that
 * framing serves them. */
static void unknown_input(struct client *cl)
{
    if (client_pick_framing(cl)) {
        framing_ops_of(cl->framing)->input(cl);
    }
}

/* The peer left before its first byte that is not whitespace (or a BOM's
 * first bytes): nothing was asked, so nothing is owed. */
static void unknown_peer_eof(struct client *cl)
{
    RL_ASSERT(cl->inflight == 0); /* no call before the framing */
    client_close_after_flush(cl);
}

static const struct framing_ops unknown_ops = {
    .input = unknown_input,
    .feed = NULL,
    .peer_eof = unknown_peer_eof,
    .resume = ndjson_resume,
    .events = false,
};

static const struct framing_ops ndjson_ops = {
    .input = ndjson_read,
    .feed = ndjson_feed,
    .peer_eof = ndjson_peer_eof,
    .resume = ndjson_resume,
    .events = true,
};

static const struct framing_ops http_ops = {
    .input = http_next,
    .feed = NULL,
    .peer_eof = http_go_on,
    .resume = http_go_on,
    .events = false,
};

static const struct framing_ops *framing_ops_of(enum framing framing)
{
    switch (framing) {
    case FRAMING_UNKNOWN:
        return &unknown_ops;
    case FRAMING_NDJSON:
        return &ndjson_ops;
    case FRAMING_HTTP:
        return &http_ops;
    default:
        abort();
    }
}

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
static void client_accept(evutil_socket_t fd, bool metrics_only, void *arg)
{
    struct server *s = arg;
    char who[96];
    if (!metrics_only && !listener_peer_allowed(s->cfg, fd, who, sizeof(who))) {
        char why[160];
        snprintf(why, sizeof(why), "connection refused: %s not allowed", who);
        listener_refuse(s->lst, fd, ERR_BAD_REQUEST,
                        "peer not allowed (--allow-uid/--allow-gid)", why);
        return;
    }
    if (metrics_only && s->n_metrics_clients >= METRICS_MAX_CONNECTIONS) {
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
    if (!metrics_only && s->n_clients >= s->cfg->max_connections) {
        listener_refuse(s->lst, fd, ERR_LIMIT,
                        "too many connections (--max-connections)",
                        "connection refused: --max-connections reached");
        return;
    }
    struct client *cl = calloc(1, sizeof(*cl));
    if (cl == NULL) {
        evutil_closesocket(fd);
        return;
    }
    cl->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (cl->bev == NULL) {
        evutil_closesocket(fd);
        free(cl);
        return;
    }
    cl->flush_ev = event_new(s->base, -1, 0, client_flush_cb, cl);
    cl->resume_ev = event_new(s->base, -1, 0, client_resume_cb, cl);
    cl->read_ev =
        event_new(s->base, fd, EV_READ | EV_PERSIST, client_sock_read_cb, cl);
    if (metrics_only) {
        cl->idle_ev = evtimer_new(s->base, idle_cb, cl);
    }
    if (cl->flush_ev == NULL || cl->resume_ev == NULL || cl->read_ev == NULL ||
        (metrics_only && cl->idle_ev == NULL)) {
        if (cl->flush_ev != NULL) {
            event_free(cl->flush_ev);
        }
        if (cl->resume_ev != NULL) {
            event_free(cl->resume_ev);
        }
        if (cl->read_ev != NULL) {
            event_free(cl->read_ev);
        }
        if (cl->idle_ev != NULL) {
            event_free(cl->idle_ev);
        }
        bufferevent_free(cl->bev);
        free(cl);
        return;
    }
    cl->srv = s;
    cl->metrics_only = metrics_only;
    cl->id = ++s->next_id;
    cl->session.event_cb = session_event_cb;
    cl->session.close_cb = session_close_cb;
    cl->session.conn_id = cl->id;
    session_read_cred(&cl->session, fd);
    snprintf(cl->subject, sizeof(cl->subject), "client %llu",
             (unsigned long long)cl->id);
    cl->next = s->clients;
    if (s->clients != NULL) {
        s->clients->prev = cl;
    }
    s->clients = cl;
    if (metrics_only) {
        s->n_metrics_clients++;
        client_idle_arm(cl);
    } else {
        s->n_clients++;
    }
    METRIC_ADD(clients, 1);
    METRIC_INC(clients_accepted);
    bufferevent_setcb(cl->bev, client_read_cb, client_write_cb, client_event_cb,
                      cl);
    bufferevent_setwatermark(cl->bev, EV_WRITE, OUT_LOW, 0);
    /* A new bufferevent has EV_WRITE enabled; answers are written by
     * client_flush_cb instead (see the top of this file). */
    bufferevent_disable(cl->bev, EV_READ | EV_WRITE);
    client_reading(cl, true);
    log_debug(cl->subject, "connected");
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
    s->base = base;
    s->cfg = cfg;
    s->ops = ops;
    http_limits_default(&s->http_limits, cfg->max_line_bytes);
    s->lst = listener_create(base, cfg, client_accept, server_clients_cb, s,
                             err, errlen);
    if (s->lst == NULL) {
        free(s);
        return NULL;
    }
    return s;
}

void server_stop_accepting(struct server *s)
{
    listener_stop(s->lst);
}

/* At exit, for a call still in flight: shutting_down, since its node
 * commands are abandoned and it will not be answered otherwise. */
static void client_answer_shutdown(struct client *cl, struct server_call *sc)
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
    if (sc->http) {
        write_http(cl, proto_err_status(ERR_SHUTTING_DOWN), "application/json",
                   buf, n, false, NULL, sc->head_only);
    } else {
        buf[n++] = '\n';
        client_out(cl, buf, n);
    }
}

/* At exit: what is queued for the client goes out if the socket takes it
 * now, without waiting (the loop is over); the rest is lost with the
 * close. */
static void client_flush_now(struct client *cl)
{
    struct evbuffer *out = bufferevent_get_output(cl->bev);
    evutil_socket_t sock = bufferevent_getfd(cl->bev);
    evbuffer_unfreeze(out, 1);
    while (evbuffer_get_length(out) > 0 && evbuffer_write(out, sock) > 0) {
    }
    evbuffer_freeze(out, 1);
}

/* A session's close_cb (locks.h), at shutdown. */
static void session_close_cb(struct lock_owner *owner)
{
    struct client *cl = client_of(owner);
    if (!client_attached(cl)) {
        return; /* detached already */
    }
    for (struct server_call *c = cl->calls; c != NULL; c = c->next) {
        client_answer_shutdown(cl, c);
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
 * Those calls have no client any more (client_detach) and no server either
 * (their srv is cleared here), so call_free() frees them directly: nothing
 * reaches the freed server and nothing leaks. Their clients get shutting_down
 * here, then the close. */
void server_destroy(struct server *s)
{
    if (s == NULL) {
        return;
    }
    /* Clients freed below have no listener to tell. */
    listener_destroy(s->lst);
    s->lst = NULL;
    while (s->clients != NULL) {
        struct client *cl = s->clients;
        if (client_attached(cl)) {
            for (struct server_call *c = cl->calls; c != NULL; c = c->next) {
                client_answer_shutdown(cl, c);
            }
        }
        client_flush_now(cl);
        client_free(cl);
    }
    for (struct server_call *c = s->orphans; c != NULL; c = c->next) {
        c->srv = NULL;
    }
    s->orphans = NULL;
    while (s->free_calls != NULL) {
        struct server_call *c = s->free_calls;
        s->free_calls = c->next;
        free(c);
    }
    free(s);
}

bool server_flushed(const struct server *s)
{
    for (const struct client *cl = s->clients; cl != NULL; cl = cl->next) {
        if (evbuffer_get_length(bufferevent_get_output(cl->bev)) > 0) {
            return false;
        }
    }
    return true;
}

int server_client_count(const struct server *s)
{
    return s->n_clients;
}

int server_fd_reserve(const struct config *cfg)
{
    return listener_fd_reserve(cfg) +
           (cfg->metrics_listen != NULL ? METRICS_MAX_CONNECTIONS : 0);
}
