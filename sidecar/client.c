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

#include <event2/buffer.h>
#include <event2/bufferevent.h>
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
    bufferevent_free(cl->bev);
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
    RL_ASSERT(evbuffer_get_length(bufferevent_get_output(cl->bev)) == 0);
    if (cl->state != CLIENT_CLOSING) {
        client_free(cl);
        return;
    }
    cl->linger_ev = evtimer_new(cl->env->base, linger_cb, cl);
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

void client_close_after_flush(struct client *cl)
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

bool client_drain_cut_request(struct client *cl)
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
        cl->fops->peer_eof(cl);
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
    return cl->busy && evbuffer_get_length(bufferevent_get_input(cl->bev)) >=
                           cl->env->cfg->max_line_bytes;
}

bool client_over_limits(struct client *cl)
{
    return cl->inflight >= cl->env->cfg->max_inflight ||
           evbuffer_get_length(bufferevent_get_output(cl->bev)) > OUT_HIGH ||
           client_held(cl);
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
        evbuffer_get_length(bufferevent_get_output(cl->bev)) <= OUT_LOW &&
        !client_held(cl)) {
        cl->read_paused = false;
        client_reading(cl, true);
        /* Lines may already sit in the input buffer. */
        if (evbuffer_get_length(bufferevent_get_input(cl->bev)) > 0) {
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
     * of our side nothing could). */
    RL_ASSERT(client_attached(cl));
    evbuffer_add(bufferevent_get_output(cl->bev), data, len);
    if (!cl->flush_pending && !cl->write_on) {
        cl->flush_pending = true;
        event_active(cl->flush_ev, EV_WRITE, 1);
    }
}

/* When it is the connection's last answer in flight and nothing is
 * queued, nothing could join it this turn: written now, which spares the
 * evbuffer chain and the flush event (the common case of one request at a
 * time). */
void client_answer(struct client *cl, const char *buf, size_t len)
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

/* What is queued goes out if the socket takes it now, without waiting
 * (the loop is over); the rest is lost with the close. */
void client_flush_now(struct client *cl)
{
    struct evbuffer *out = bufferevent_get_output(cl->bev);
    evutil_socket_t sock = bufferevent_getfd(cl->bev);
    evbuffer_unfreeze(out, 1);
    while (evbuffer_get_length(out) > 0 && evbuffer_write(out, sock) > 0) {
    }
    evbuffer_freeze(out, 1);
}

/* ---- reading --------------------------------------------------------------
 */

void client_input(struct client *cl)
{
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
    cl->fops->input(cl);
}

static void client_read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    client_input(arg);
}

int client_input_keep(struct client *cl, const char *data, size_t n)
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
    const struct framing_ops *f = cl->fops;
    if (f->feed != NULL && client_attached(cl) &&
        evbuffer_get_length(in) == 0) {
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
    cl->bev = bufferevent_socket_new(env->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (cl->bev == NULL) {
        evutil_closesocket(fd);
        free(cl);
        return NULL;
    }
    cl->flush_ev = event_new(env->base, -1, 0, client_flush_cb, cl);
    cl->resume_ev = event_new(env->base, -1, 0, client_resume_cb, cl);
    cl->read_ev =
        event_new(env->base, fd, EV_READ | EV_PERSIST, client_sock_read_cb, cl);
    if (metrics_only) {
        cl->idle_ev = evtimer_new(env->base, idle_cb, cl);
    }
    if (cl->flush_ev == NULL || cl->resume_ev == NULL || cl->read_ev == NULL ||
        (metrics_only && cl->idle_ev == NULL)) {
        client_free_events(cl);
        bufferevent_free(cl->bev);
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
    bufferevent_setcb(cl->bev, client_read_cb, client_write_cb, client_event_cb,
                      cl);
    bufferevent_setwatermark(cl->bev, EV_WRITE, OUT_LOW, 0);
    /* A new bufferevent has EV_WRITE enabled; answers are written by
     * client_flush_cb instead (see client.h). */
    bufferevent_disable(cl->bev, EV_READ | EV_WRITE);
    client_reading(cl, true);
    log_debug(cl->subject, "connected");
    return cl;
}
