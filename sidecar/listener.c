/* listener.c: the lock socket's and the metrics port's listeners, and the
 * connections they refuse at accept.
 *
 * A connection accepted goes to the server through accept_cb, which may
 * hand it back refused (listener_refuse, listener_reject). A refused
 * connection on the lock socket is held until its first bytes tell its
 * framing, so that it is refused in words it can read. Out of descriptors,
 * accepting pauses rather than spins (accept_error_cb). */
#include "listener.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "config.h"
#include "http.h"
#include "list.h"
#include "log.h"
#include "metrics.h"
#include "rlassert.h"
#include "util.h"

/* A connection refused at accept on the lock socket is held this long for
 * its first bytes, so that an HTTP client gets a status line rather than an
 * NDJSON line it cannot read; at most REFUSALS_MAX at once (the rest are
 * answered in NDJSON at once), so refused peers cannot pile up fds. */
#define REFUSAL_WAIT_MS 1000
#define REFUSALS_MAX 32
/* Out of descriptors at accept (or of kernel memory), the connection stays
 * in the listen queue and libevent would call accept again at once, for as
 * long as it lasts: a spinning core and a log line per try. The listeners
 * pause instead and try again after ACCEPT_RETRY_MS, or as soon as one of
 * our descriptors closes. An episode is logged at its start and, once no
 * accept has failed for ACCEPT_QUIET_MS, at its end with what it cost; the
 * quiet period keeps a limit that closes and fills again per connection to
 * one episode. */
#define ACCEPT_RETRY_MS 100
#define ACCEPT_QUIET_MS 1000

struct listener {
    struct event_base *base;            /* borrowed */
    const struct config *cfg;           /* borrowed */
    listener_accept_fn *accept_cb;      /* a connection accepted */
    listener_clients_fn *clients_cb;    /* lock-socket clients, for logs */
    void *arg;                          /* both callbacks' */
    struct evconnlistener *lock_lst;    /* owned, NULL once stopped */
    struct evconnlistener *metrics_lst; /* owned, NULL when off */
    char *socket_path;                  /* owned copy, for unlink */
    struct list refusals; /* owned: connections refused, not answered */
    int n_refusals;
    struct event *accept_ev; /* owned: resumes paused listeners, then ends
                                the starved episode after ACCEPT_QUIET_MS */
    bool accept_paused;      /* listeners disabled for want of resources */
    uint64_t starved_us;     /* start of the episode; 0: none */
    uint64_t resumed_us;     /* listeners last resumed in the episode */
    uint64_t accept_fails;   /* failed accepts in the episode */
};

/* A connection refused at accept, waiting (REFUSAL_WAIT_MS at most) for the
 * bytes that tell its framing. Owned by the listener's refusal list; owns
 * its fd and event. */
struct refusal {
    struct listener *lst;
    evutil_socket_t fd;
    struct event *ev;
    enum proto_err err;
    const char *message; /* static */
    struct list_node link; /* the listener's refusals */
};

static void accept_error_cb(struct evconnlistener *lst, void *arg);

/* Whether the peer on a unix connection may use the daemon: with
 * --allow-uid/--allow-gid, its uid or primary gid must be listed. */
bool listener_peer_allowed(const struct config *cfg, evutil_socket_t fd,
                           char *who, size_t wholen)
{
    if (cfg->n_allow_uids == 0 && cfg->n_allow_gids == 0) {
        return true;
    }
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        snprintf(who, wholen, "unknown peer (%s)", strerror(errno));
        return false;
    }
    snprintf(who, wholen, "pid %d uid %u gid %u", (int)cred.pid,
             (unsigned)cred.uid, (unsigned)cred.gid);
    for (int i = 0; i < cfg->n_allow_uids; i++) {
        if (cfg->allow_uids[i] == (unsigned)cred.uid) {
            return true;
        }
    }
    for (int i = 0; i < cfg->n_allow_gids; i++) {
        if (cfg->allow_gids[i] == (unsigned)cred.gid) {
            return true;
        }
    }
    return false;
}

/* Refuses a connection at accept: one answer (best effort), counted, the
 * reason logged once, and the close. */
void listener_reject(evutil_socket_t fd, const char *line, size_t len,
                     const char *why)
{
    METRIC_INC(clients_rejected);
    log_warn(NULL, "%s", why);
    ssize_t w = write(fd, line, len);
    (void)w;
    evutil_closesocket(fd);
}

/* Answers a refused connection in the framing its first bytes chose (none:
 * NDJSON), then closes it. What it sent is drained first: closing a unix
 * socket with unread input resets the peer, which may then miss the answer. */
static void refusal_answer(evutil_socket_t fd, enum proto_err err,
                           const char *message, const char *first, size_t n)
{
    char body[PROTO_RESPONSE_MAX];
    char out[PROTO_RESPONSE_MAX + 256];
    struct response rsp = {0};
    rsp.err = err;
    rsp.message = message;
    size_t blen = proto_encode_response(&rsp, body, sizeof(body));
    size_t i = 0;
    while (i < n && util_is_space((unsigned char)first[i])) {
        i++;
    }
    size_t len;
    /* The framing the connection would have had: '{' is NDJSON. */
    if (i < n && first[i] != '{') {
        bool head = n - i >= 5 && memcmp(first + i, "HEAD ", 5) == 0;
        len = http_format_head(proto_err_status(err), "application/json", blen,
                               false, NULL, out, sizeof(out));
        if (len > 0 && !head) {
            memcpy(out + len, body, blen);
            len += blen;
        }
    } else {
        memcpy(out, body, blen);
        out[blen] = '\n';
        len = blen + 1;
    }
    ssize_t w = write(fd, out, len);
    (void)w;
    char sink[4096];
    for (int k = 0; k < 16 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0;
         k++) {
    }
    shutdown(fd, SHUT_WR);
    evutil_closesocket(fd);
}

static void refusal_free(struct refusal *r, const char *first, size_t n)
{
    refusal_answer(r->fd, r->err, r->message, first, n);
    event_free(r->ev);
    struct listener *l = r->lst;
    list_unlink(&l->refusals, &r->link);
    l->n_refusals--;
    RL_ASSERT(l->n_refusals >= 0);
    free(r);
    listener_fd_freed(l);
}

static void refusal_cb(evutil_socket_t fd, short what, void *arg)
{
    char first[512];
    ssize_t n = 0;
    if (what & EV_READ) {
        do {
            n = recv(fd, first, sizeof(first), 0);
        } while (n < 0 && errno == EINTR);
    }
    refusal_free(arg, first, n > 0 ? (size_t)n : 0);
}

/* Refuses a lock-socket connection: logged and counted now, answered when
 * its first bytes come (or at REFUSAL_WAIT_MS) in NDJSON or HTTP; at once
 * in NDJSON when REFUSALS_MAX are waiting already. */
void listener_refuse(struct listener *l, evutil_socket_t fd, enum proto_err err,
                     const char *message, const char *why)
{
    METRIC_INC(clients_rejected);
    log_warn(NULL, "%s", why);
    struct refusal *r = NULL;
    if (l->n_refusals < REFUSALS_MAX) {
        r = calloc(1, sizeof(*r));
    }
    if (r != NULL) {
        r->ev = event_new(l->base, fd, EV_READ, refusal_cb, r);
    }
    struct timeval tv = {REFUSAL_WAIT_MS / 1000,
                         (REFUSAL_WAIT_MS % 1000) * 1000};
    if (r == NULL || r->ev == NULL || event_add(r->ev, &tv) != 0) {
        if (r != NULL && r->ev != NULL) {
            event_free(r->ev);
        }
        free(r);
        refusal_answer(fd, err, message, NULL, 0);
        return;
    }
    r->lst = l;
    r->fd = fd;
    r->err = err;
    r->message = message;
    list_push_head(&l->refusals, &r->link);
    l->n_refusals++;
}

static void lock_accept_cb(struct evconnlistener *lst, evutil_socket_t fd,
                           struct sockaddr *addr, int socklen, void *arg)
{
    (void)lst;
    (void)addr;
    (void)socklen;
    struct listener *l = arg;
    l->accept_cb(fd, false, l->arg);
}

static void metrics_accept_cb(struct evconnlistener *lst, evutil_socket_t fd,
                              struct sockaddr *addr, int socklen, void *arg)
{
    (void)lst;
    (void)addr;
    (void)socklen;
    struct listener *l = arg;
    l->accept_cb(fd, true, l->arg);
}

/* Opens the --metrics-listen TCP listener on HOST:PORT ([v6]:PORT too). */
static int metrics_listen(struct listener *l, const char *spec, char *err,
                          size_t errlen)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (colon == NULL || (size_t)(colon - spec) >= sizeof(host)) {
        snprintf(err, errlen, "--metrics-listen %s: want HOST:PORT", spec);
        return -1;
    }
    const char *h = spec;
    size_t hl = (size_t)(colon - spec);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    struct evutil_addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = EVUTIL_AI_PASSIVE;
    int gai = evutil_getaddrinfo(host, colon + 1, &hints, &res);
    if (gai != 0 || res == NULL) {
        snprintf(err, errlen, "--metrics-listen %s: %s", spec,
                 evutil_gai_strerror(gai));
        return -1;
    }
    l->metrics_lst = evconnlistener_new_bind(
        l->base, metrics_accept_cb, l,
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 128,
        res->ai_addr, (int)res->ai_addrlen);
    evutil_freeaddrinfo(res);
    if (l->metrics_lst == NULL) {
        snprintf(err, errlen, "--metrics-listen %s: %s", spec, strerror(errno));
        return -1;
    }
    evconnlistener_set_error_cb(l->metrics_lst, accept_error_cb);
    log_info(NULL, "metrics on http://%s/metrics", spec);
    return 0;
}

/* Enables or disables every listener: the lock socket's and the metrics
 * one share the process's descriptors, so both starve at once. */
static void accept_listeners(struct listener *l, bool on)
{
    struct evconnlistener *lst[2] = {l->lock_lst, l->metrics_lst};
    for (int i = 0; i < 2; i++) {
        if (lst[i] != NULL) {
            if (on) {
                evconnlistener_enable(lst[i]);
            } else {
                evconnlistener_disable(lst[i]);
            }
        }
    }
}

static void accept_arm(struct listener *l, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(l->accept_ev, &tv);
}

static void accept_resume(struct listener *l)
{
    l->accept_paused = false;
    l->resumed_us = util_now_us();
    accept_listeners(l, true);
    accept_arm(l, ACCEPT_QUIET_MS);
}

/* A descriptor of ours closed: a paused listener may take its place now
 * rather than at the next retry. */
void listener_fd_freed(struct listener *l)
{
    if (l != NULL && l->accept_paused) {
        accept_resume(l);
    }
}

static void accept_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct listener *l = arg;
    if (l->accept_paused) {
        accept_resume(l);
        return;
    }
    if (l->starved_us == 0) {
        return;
    }
    /* ACCEPT_QUIET_MS since the last resume and no accept failed. */
    log_warn(NULL,
             "accept: resumed after %llu ms out of file descriptors "
             "or memory; %llu accept attempts deferred meanwhile",
             (unsigned long long)((l->resumed_us - l->starved_us) / 1000),
             (unsigned long long)l->accept_fails);
    l->starved_us = 0;
    l->accept_fails = 0;
}

/* The descriptor limit as this process has it now, for messages; 0 when
 * unknown or unlimited. */
static unsigned long long fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
        return 0;
    }
    return (unsigned long long)rl.rlim_cur;
}

static void accept_error_cb(struct evconnlistener *lst, void *arg)
{
    (void)lst;
    struct listener *l = arg;
    int e = errno;
    if (e != EMFILE && e != ENFILE && e != ENOBUFS && e != ENOMEM) {
        /* Errors of one connection (EPROTO, EPERM from a filter): it has
         * left the queue, so nothing is retried in a loop. */
        log_error(NULL, "accept: %s", strerror(e));
        return;
    }
    METRIC_INC(accept_deferred);
    l->accept_fails++;
    if (l->starved_us == 0) {
        l->starved_us = util_now_us();
        l->resumed_us = l->starved_us;
        log_error(NULL,
                  "accept: out of file descriptors or memory (%s; "
                  "descriptor limit %llu, %d client connections): "
                  "not accepting for now; new connections wait in the "
                  "listen queue",
                  strerror(e), fd_limit(), l->clients_cb(l->arg));
    }
    l->accept_paused = true;
    accept_listeners(l, false);
    accept_arm(l, ACCEPT_RETRY_MS);
}

/* Makes the listening socket with exactly the configured mode. */
static int listen_unix(const char *path, int mode, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errlen, "--socket %s: path longer than %zu bytes", path,
                 sizeof(sa.sun_path) - 1);
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);

    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errlen, "--socket %s: exists and is not a socket",
                     path);
            return -1;
        }
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 &&
            connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            close(probe);
            snprintf(err, errlen,
                     "--socket %s: another process is listening there", path);
            return -1;
        }
        if (probe >= 0) {
            close(probe);
        }
        unlink(path); /* stale: nobody listens */
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    /* Bind with no permissions at all, then chmod: the socket is never
     * reachable with more than the configured mode, whatever the umask. */
    mode_t old = umask(0777);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    int bind_errno = errno;
    umask(old);
    if (rc != 0) {
        snprintf(err, errlen, "--socket %s: bind: %s", path,
                 strerror(bind_errno));
        close(fd);
        return -1;
    }
    if (chmod(path, (mode_t)mode) != 0) {
        snprintf(err, errlen, "--socket %s: chmod: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    if (listen(fd, 1024) != 0) {
        snprintf(err, errlen, "--socket %s: listen: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    return fd;
}

int listener_fd_reserve(const struct config *cfg)
{
    return 1 + REFUSALS_MAX + (cfg->metrics_listen != NULL ? 1 : 0);
}

struct listener *listener_create(struct event_base *base,
                                 const struct config *cfg,
                                 listener_accept_fn *accept_cb,
                                 listener_clients_fn *clients_cb, void *arg,
                                 char *err, size_t errlen)
{
    struct listener *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->base = base;
    l->cfg = cfg;
    l->accept_cb = accept_cb;
    l->clients_cb = clients_cb;
    l->arg = arg;
    l->socket_path = strdup(cfg->socket_path);
    int fd = listen_unix(cfg->socket_path, cfg->socket_mode, err, errlen);
    if (fd < 0 || l->socket_path == NULL) {
        free(l->socket_path);
        free(l);
        return NULL;
    }
    /* Backlog 0: the socket already listens with 1024; -1 would shrink it
     * to libevent's default of 128. */
    l->lock_lst = evconnlistener_new(base, lock_accept_cb, l,
                                     LEV_OPT_CLOSE_ON_FREE, 0, fd);
    if (l->lock_lst == NULL) {
        snprintf(err, errlen, "cannot listen on %s", cfg->socket_path);
        close(fd);
        unlink(cfg->socket_path);
        free(l->socket_path);
        free(l);
        return NULL;
    }
    evconnlistener_set_error_cb(l->lock_lst, accept_error_cb);
    l->accept_ev = evtimer_new(base, accept_timer_cb, l);
    if (l->accept_ev == NULL ||
        (cfg->metrics_listen != NULL &&
         metrics_listen(l, cfg->metrics_listen, err, errlen) != 0)) {
        if (l->accept_ev == NULL) {
            snprintf(err, errlen, "out of memory");
        } else {
            event_free(l->accept_ev);
        }
        evconnlistener_free(l->lock_lst);
        unlink(cfg->socket_path);
        free(l->socket_path);
        free(l);
        return NULL;
    }
    return l;
}

void listener_stop(struct listener *l)
{
    l->accept_paused = false;
    if (l->accept_ev != NULL) {
        evtimer_del(l->accept_ev);
    }
    if (l->lock_lst != NULL) {
        evconnlistener_free(l->lock_lst);
        l->lock_lst = NULL;
        unlink(l->socket_path);
    }
    if (l->metrics_lst != NULL) {
        evconnlistener_free(l->metrics_lst);
        l->metrics_lst = NULL;
    }
}

void listener_destroy(struct listener *l)
{
    if (l == NULL) {
        return;
    }
    listener_stop(l);
    while (!list_empty(&l->refusals)) {
        refusal_free(LIST_ITEM(l->refusals.head, struct refusal, link), NULL,
                     0);
    }
    event_free(l->accept_ev);
    free(l->socket_path);
    free(l);
}
