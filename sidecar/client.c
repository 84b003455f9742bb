/* client.c: a client connection's life (client.h): state, calls, output,
 * back-pressure, close, linger and free. Its framing is reached through
 * cl->fops only. */
#include "client.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "config.h"
#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "ops.h"
#include "rlassert.h"
#include "util.h"

#define OUT_HIGH (1024 * 1024)
#define OUT_LOW (256 * 1024)

#define LINGER_MS 2000
#define LINGER_BYTES (1024 * 1024)

static void client_maybe_resume(struct client *cl);

void client_set_state(struct client *cl, enum client_state state)
{
    enum client_state old = cl->state;
    if (!client_state_allowed(old, state)) {
        log_error(cl->subject, "illegal state change %d -> %d", (int)old,
                  (int)state);
        abort();
    }
    cl->state = state;
}

static void client_reading(struct client *cl, bool on)
{
    stream_reading(&cl->s, on);
}

/* ---- calls ----------------------------------------------------------------
 */

struct client_call *client_call_new(struct client *cl)
{
    /* A detached connection's calls were abandoned: no new one joins. */
    RL_ASSERT(client_attached(cl));
    struct client_env *env = cl->env;
    struct client_call *sc = pool_new(&env->call_pool);
    if (sc == NULL) {
        return NULL;
    }
    memset(sc, 0, sizeof(*sc));
    sc->call.done = env->call_done;
    sc->call.start_us = util_now_us();
    sc->env = env;
    sc->client = cl;
    list_push_head(&cl->calls, &sc->link);
    cl->inflight++;
    return sc;
}

void client_call_unlink(struct client *cl, struct client_call *sc)
{
    list_unlink(&cl->calls, &sc->link);
    cl->inflight--;
    RL_ASSERT(cl->inflight >= 0);
}

void client_call_free(struct client_call *sc)
{
    struct client_env *env = sc->env;
    if (env == NULL) {
        /* The env is gone: see client_env_release(). */
        free(sc);
        return;
    }
    pool_put(&env->call_pool, sc);
}

void client_call_orphan_done(struct client_call *sc)
{
    if (sc->env != NULL) {
        list_unlink(&sc->env->orphans, &sc->link);
    }
    client_call_free(sc);
}

void client_env_release(struct client_env *env)
{
    RL_ASSERT(list_empty(&env->clients));
    /* Orphans still in ops' hands keep their links, which nothing walks
     * again: the list is forgotten, not unlinked. */
    for (struct client_call *c = client_call_first(&env->orphans); c != NULL;
         c = client_call_next(c)) {
        c->env = NULL;
    }
    env->orphans = (struct list){0};
    pool_drain(&env->call_pool);
}

/* ---- life -----------------------------------------------------------------
 */

/* The connection is going away: its in-flight calls lose their client
 * (ops finishes them and releases whatever they win) and its session locks
 * are released now, whatever remains of the socket's own life. Runs once,
 * from client_leave(). */
static void client_detach(struct client *cl)
{
    struct client_env *env = cl->env;
    struct client_call *sc;
    while ((sc = client_call_first(&cl->calls)) != NULL) {
        /* Calls outlive their client: an orphan goes back to the pool
         * when ops answers it, or is freed then after teardown. */
        client_call_unlink(cl, sc);
        sc->client = NULL;
        list_push_head(&env->orphans, &sc->link);
        ops_call_abandoned(env->ops, &sc->call);
    }
    RL_ASSERT(cl->inflight == 0);
    if (locks_owner_first(&cl->session) != NULL) {
        ops_client_closed(env->ops, &cl->session);
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

static void client_free_events(struct client *cl)
{
    if (cl->linger_ev != NULL) {
        event_free(cl->linger_ev);
    }
    if (cl->resume_ev != NULL) {
        event_free(cl->resume_ev);
    }
    if (cl->idle_ev != NULL) {
        event_free(cl->idle_ev);
    }
}

void client_free(struct client *cl)
{
    struct client_env *env = cl->env;
    client_leave(cl, CLIENT_FREED);
    RL_ASSERT(list_empty(&cl->calls));
    client_free_events(cl);
    list_unlink(&env->clients, &cl->link);
    if (cl->metrics_only) {
        env->n_metrics_clients--;
        RL_ASSERT(env->n_metrics_clients >= 0);
    } else {
        env->n_clients--;
        RL_ASSERT(env->n_clients >= 0);
    }
    METRIC_ADD(clients, -1);
    stream_destroy(&cl->s);
    log_debug(cl->subject, "closed");
    free(cl);
    listener_fd_freed(env->lst);
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

void client_idle_arm(struct client *cl)
{
    struct timeval tv = {METRICS_IDLE_MS / 1000,
                         (METRICS_IDLE_MS % 1000) * 1000};
    evtimer_add(cl->idle_ev, &tv);
}

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
    RL_ASSERT(bytes_used(&cl->s.out) == 0);
    if (cl->state != CLIENT_CLOSING) {
        client_free(cl);
        return;
    }
    cl->linger_ev = evtimer_new(cl->env->base, linger_cb, cl);
    if (cl->linger_ev == NULL || shutdown(cl->s.fd, SHUT_WR) != 0) {
        client_free(cl);
        return;
    }
    client_set_state(cl, CLIENT_LINGERING);
    struct timeval tv = {LINGER_MS / 1000, (LINGER_MS % 1000) * 1000};
    evtimer_add(cl->linger_ev, &tv);
    client_reading(cl, true);
}

void client_close_after_flush(struct client *cl)
{
    RL_ASSERT(cl->state != CLIENT_LINGERING && cl->state != CLIENT_FREED);
    if (client_attached(cl)) {
        client_reading(cl, false);
        client_leave(cl, cl->state == CLIENT_DRAINING ? CLIENT_CLOSING_EOF
                                                      : CLIENT_CLOSING);
    }
    if (bytes_used(&cl->s.out) == 0) {
        client_finish_close(cl);
    }
}

/* After EOF: whether the peer closed both directions (it can read nothing
 * more) rather than just its writing side. A unix socket whose peer is gone
 * polls POLLHUP; a half-closed one does not. */
static bool peer_gone(struct client *cl)
{
    struct pollfd p = {cl->s.fd, POLLOUT, 0};
    if (poll(&p, 1, 0) < 0) {
        return true;
    }
    return (p.revents & (POLLHUP | POLLERR)) != 0;
}

bool client_drain_cut_request(struct client *cl)
{
    size_t n = stream_in_len(&cl->s);
    const unsigned char *p = (const unsigned char *)stream_in_data(&cl->s);
    size_t i = 0;
    while (i < n && util_is_space(p[i])) {
        i++;
    }
    bytes_consume(&cl->s.in, n);
    return i < n;
}

/* The socket ended: eof, the peer's EOF on a read; else it broke, on a
 * read or a write, errno saying why. */
static void client_sock_end(struct client *cl, bool eof)
{
    if (cl->state == CLIENT_LINGERING) {
        client_free(cl);
        return;
    }
    if (eof && !peer_gone(cl)) {
        /* A half-close (socat, `printf .. | nc -U`): still answer what was
         * asked, then close; session locks go with the close. Read again
         * after a pause, the EOF comes again. */
        if (cl->state == CLIENT_OPEN) {
            client_set_state(cl, CLIENT_DRAINING);
        } else if (cl->state == CLIENT_CLOSING) {
            client_set_state(cl, CLIENT_CLOSING_EOF);
        }
        client_reading(cl, false);
        cl->fops->peer_eof(cl);
        return;
    }
    if (!eof && errno != ECONNRESET && errno != EPIPE) {
        log_debug(cl->subject, "socket error: %s", strerror(errno));
    }
    client_free(cl);
}

/* EV_WRITE, armed while the socket was full: what it takes now goes.
 * Reading may resume once the output is down to OUT_LOW. */
static void client_write_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct client *cl = arg;
    char err[64];
    if (stream_flush(&cl->s, err, sizeof(err)) < 0) {
        client_sock_end(cl, false);
        return;
    }
    size_t left = bytes_used(&cl->s.out);
    if (!client_attached(cl)) {
        if (cl->state != CLIENT_LINGERING && left == 0) {
            client_finish_close(cl);
        }
        return;
    }
    if (left <= OUT_LOW) {
        client_maybe_resume(cl);
    }
}

/* ---- back-pressure --------------------------------------------------------
 */

void client_pause(struct client *cl)
{
    if (!cl->read_paused) {
        cl->read_paused = true;
        client_reading(cl, false);
    }
}

/* While a request is answered on a connection that answers one at a
 * time, the requests pipelined behind it wait in the input buffer; past
 * one request's worth (--max-line-bytes) reading stops until the answer
 * is out, so the kernel pushes back on the client instead of the daemon
 * buffering without limit. Holds at most that plus one read. */
static bool client_held(struct client *cl)
{
    return cl->busy && stream_in_len(&cl->s) >= cl->env->cfg->max_line_bytes;
}

bool client_over_limits(struct client *cl)
{
    return cl->inflight >= cl->env->cfg->max_inflight ||
           bytes_used(&cl->s.out) > OUT_HIGH || client_held(cl);
}

/* Going on with a connection's input (lines buffered while it was paused,
 * HTTP requests pipelined behind an answer, the close owed to a peer that
 * half-closed) happens in resume_ev's callback, never inside the answer
 * that made it possible: answers come from deep in ops and cluster
 * callbacks, and new input there may close the connection and abandon its
 * other calls, freeing what those callbacks still hold (a wait queue). */
void client_resume_later(struct client *cl)
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
    cl->fops->resume(cl);
}

static void client_maybe_resume(struct client *cl)
{
    if (!cl->read_paused || !client_attached(cl)) {
        return;
    }
    if (cl->inflight < cl->env->cfg->max_inflight &&
        bytes_used(&cl->s.out) <= OUT_LOW && !client_held(cl)) {
        cl->read_paused = false;
        client_reading(cl, true);
        /* Lines may already sit in the input buffer. */
        if (stream_in_len(&cl->s) > 0) {
            client_resume_later(cl);
        }
    }
}

void client_recheck_limits(struct client *cl)
{
    if (client_over_limits(cl)) {
        client_pause(cl);
    } else {
        client_maybe_resume(cl);
    }
}

/* ---- writing --------------------------------------------------------------
 */

void client_out(struct client *cl, const void *data, size_t len)
{
    /* Once closing, only what was queued goes out (and after the shutdown
     * of our side nothing could). Out of memory, the bytes are lost, and
     * the peer waits for an answer until it gives up. */
    RL_ASSERT(client_attached(cl));
    (void)stream_out_append(&cl->s, data, len);
}

/* When it is the connection's last answer in flight and nothing is
 * queued, nothing could join it this turn: written now, in one write(),
 * which spares the copy into the output and the flush event (the common
 * case of one request at a time). */
void client_answer(struct client *cl, const char *buf, size_t len)
{
    RL_ASSERT(client_attached(cl));
    if (cl->inflight == 0 && stream_out_idle(&cl->s)) {
        char err[64];
        ssize_t n = stream_send(&cl->s, buf, len, err, sizeof(err));
        if (n == (ssize_t)len) {
            return;
        }
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        }
        /* The rest (or all of it, after EAGAIN or an error, which the
         * flush then meets again and reports) goes the queued way. */
    }
    client_out(cl, buf, len);
}

/* End of the turn: write everything queued; what does not fit waits for
 * EV_WRITE (client_write_cb). */
static void client_flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct client *cl = arg;
    cl->s.flush_pending = false;
    if (cl->s.write_armed) {
        return;
    }
    char err[64];
    int rc = stream_flush(&cl->s, err, sizeof(err));
    if (rc < 0) {
        client_sock_end(cl, false);
        return;
    }
    if (rc == 0) {
        return; /* EV_WRITE is armed */
    }
    if (!client_attached(cl)) {
        if (cl->state != CLIENT_LINGERING) {
            client_finish_close(cl);
        }
        return;
    }
    client_maybe_resume(cl);
}

/* What is queued goes out if the socket takes it now, without waiting
 * (the loop is over); the rest is lost with the close. */
void client_flush_now(struct client *cl)
{
    char err[64];
    (void)stream_flush(&cl->s, err, sizeof(err));
}

/* ---- reading --------------------------------------------------------------
 */

void client_input(struct client *cl)
{
    if (cl->state == CLIENT_LINGERING) {
        cl->discarded += stream_in_len(&cl->s);
        bytes_consume(&cl->s.in, stream_in_len(&cl->s));
        if (cl->discarded > LINGER_BYTES) {
            client_free(cl);
        }
        return;
    }
    if (!client_attached(cl)) {
        return;
    }
    cl->fops->input(cl);
}

int client_input_keep(struct client *cl, const char *data, size_t n)
{
    if (bytes_append(&cl->s.in, data, n) != 0) {
        log_error(cl->subject, "out of memory");
        client_close_after_flush(cl);
        return -1;
    }
    return 0;
}

/* EV_READ: one read, served in place by the framing's feed when nothing
 * is buffered, else added to the input and served from there. */
static void client_sock_read_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct client *cl = arg;
    char buf[16384];
    char err[64];
    ssize_t n = stream_recv(&cl->s, buf, sizeof(buf), err, sizeof(err));
    if (n == STREAM_EOF || n == STREAM_ERR) {
        client_sock_end(cl, n == STREAM_EOF);
        return;
    }
    if (n == STREAM_WAIT) {
        return;
    }
    const struct framing_ops *f = cl->fops;
    if (f->feed != NULL && client_attached(cl) && stream_in_len(&cl->s) == 0) {
        f->feed(cl, buf, (size_t)n);
        return;
    }
    if (client_input_keep(cl, buf, (size_t)n) == 0) {
        client_input(cl);
    }
}

/* ---- accepting ------------------------------------------------------------
 */

struct client *client_new(struct client_env *env, int fd, bool metrics_only,
                          uint64_t id, const struct framing_ops *fops)
{
    struct client *cl = calloc(1, sizeof(*cl));
    if (cl == NULL) {
        evutil_closesocket(fd);
        return NULL;
    }
    if (stream_init(&cl->s, env->base, client_sock_read_cb, client_write_cb,
                    client_flush_cb, cl) != 0 ||
        stream_attach(&cl->s, fd, NULL, STREAM_OPEN) != 0) {
        stream_destroy(&cl->s);
        evutil_closesocket(fd);
        free(cl);
        return NULL;
    }
    cl->resume_ev = event_new(env->base, -1, 0, client_resume_cb, cl);
    if (metrics_only) {
        cl->idle_ev = evtimer_new(env->base, idle_cb, cl);
    }
    if (cl->resume_ev == NULL || (metrics_only && cl->idle_ev == NULL)) {
        client_free_events(cl);
        stream_destroy(&cl->s); /* closes fd */
        free(cl);
        return NULL;
    }
    cl->env = env;
    cl->fops = fops;
    cl->metrics_only = metrics_only;
    cl->id = id;
    cl->session.conn_id = id;
    snprintf(cl->subject, sizeof(cl->subject), "client %llu",
             (unsigned long long)id);
    list_push_head(&env->clients, &cl->link);
    if (metrics_only) {
        env->n_metrics_clients++;
        client_idle_arm(cl);
    } else {
        env->n_clients++;
    }
    METRIC_ADD(clients, 1);
    METRIC_INC(clients_accepted);
    client_reading(cl, true);
    log_debug(cl->subject, "connected");
    return cl;
}
