/* resolve.c: getaddrinfo on a thread per lookup (see resolve.h).
 *
 * A lookup is shared by two owners, the loop and its thread, and freed by
 * whichever lets go last: the thread after it has posted its answer, the
 * loop after the callback ran or the caller cancelled. The thread writes
 * one byte to a pipe that the loop watches; the pipe stays open until both
 * have let go, so a late answer never writes into a reused descriptor. */
#include "resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

/* Lookups whose thread still runs, cancelled ones included: a resolver
 * that hangs for longer than the reconnect back-off must not pile up
 * threads without bound. */
#define RESOLVE_THREADS_MAX 64

struct resolve {
    atomic_int refs;  /* the loop's and the thread's */
    atomic_bool done; /* the thread filled res/gai (then wrote the byte) */
    int fds[2];       /* pipe: [0] watched by the loop, [1] the thread's */
    struct event *ev; /* EV_READ on fds[0]; NULL once delivered/cancelled */
    char *host;       /* owned */
    char port[8];
    struct addrinfo *res; /* owned: the thread's answer */
    int gai;              /* getaddrinfo's return */
    int sys_errno;        /* errno for EAI_SYSTEM */
    resolve_fn *cb;
    void *priv;
};

/* At exit, lookups about to end get this long to do so (a leak checker
 * counts a thread still running as a leak); one stuck in a slow resolver
 * does not hold the exit up for longer. */
#define RESOLVE_EXIT_WAIT_MS 200

static atomic_int threads_running;
static bool exit_hook; /* resolve_at_exit registered (loop thread only) */

int resolve_numeric(const char *host, int port, struct addrinfo **res)
{
    char ps[8];
    snprintf(ps, sizeof(ps), "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    *res = NULL;
    return getaddrinfo(host, ps, &hints, res) == 0 ? 0 : -1;
}

static void resolve_unref(struct resolve *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1) {
        return;
    }
    close(r->fds[0]);
    close(r->fds[1]);
    if (r->res != NULL) {
        freeaddrinfo(r->res);
    }
    free(r->host);
    free(r);
}

static void *resolve_thread(void *arg)
{
    struct resolve *r = arg;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM};
    r->gai = getaddrinfo(r->host, r->port, &hints, &r->res);
    r->sys_errno = r->gai == EAI_SYSTEM ? errno : 0;
    atomic_store_explicit(&r->done, true, memory_order_release);
    char one = 1;
    ssize_t n;
    do {
        n = write(r->fds[1], &one, 1);
    } while (n < 0 && errno == EINTR);
    resolve_unref(r);
    atomic_fetch_sub(&threads_running, 1);
    return NULL;
}

static void resolve_at_exit(void)
{
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < RESOLVE_EXIT_WAIT_MS; i++) {
        if (atomic_load(&threads_running) == 0) {
            nanosleep(&ms, NULL); /* the last one returns from its thread */
            return;
        }
        nanosleep(&ms, NULL);
    }
}

/* The thread's byte arrived: deliver its answer. */
static void resolve_ready_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct resolve *r = arg;
    char byte;
    if (read(fd, &byte, 1) != 1 ||
        !atomic_load_explicit(&r->done, memory_order_acquire)) {
        return; /* spurious; the byte is still to come */
    }
    event_free(r->ev);
    r->ev = NULL;
    const char *err = NULL;
    if (r->gai != 0) {
        err = r->gai == EAI_SYSTEM ? strerror(r->sys_errno)
                                   : gai_strerror(r->gai);
    }
    r->cb(r->gai == 0 ? r->res : NULL, err, r->priv);
    resolve_unref(r);
}

struct resolve *resolve_start(struct event_base *base, const char *host,
                              int port, resolve_fn *cb, void *priv)
{
    if (atomic_fetch_add(&threads_running, 1) >= RESOLVE_THREADS_MAX) {
        atomic_fetch_sub(&threads_running, 1);
        errno = EAGAIN;
        return NULL;
    }
    if (!exit_hook) {
        exit_hook = atexit(resolve_at_exit) == 0;
    }
    struct resolve *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        goto error;
    }
    r->fds[0] = r->fds[1] = -1;
    r->host = strdup(host);
    if (r->host == NULL || pipe2(r->fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        goto error;
    }
    snprintf(r->port, sizeof(r->port), "%d", port);
    r->cb = cb;
    r->priv = priv;
    r->ev =
        event_new(base, r->fds[0], EV_READ | EV_PERSIST, resolve_ready_cb, r);
    if (r->ev == NULL || event_add(r->ev, NULL) != 0) {
        errno = ENOMEM;
        goto error;
    }
    atomic_init(&r->refs, 2);
    atomic_init(&r->done, false);
    /* Signals stay with the main thread (libevent's handlers). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_t attr;
    pthread_t tid;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = pthread_create(&tid, &attr, resolve_thread, r);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
        errno = rc;
        goto error;
    }
    return r;

error:;
    int e = errno;
    if (r != NULL) {
        if (r->ev != NULL) {
            event_free(r->ev);
        }
        if (r->fds[0] >= 0) {
            close(r->fds[0]);
            close(r->fds[1]);
        }
        free(r->host);
        free(r);
    }
    atomic_fetch_sub(&threads_running, 1);
    errno = e;
    return NULL;
}

void resolve_cancel(struct resolve *r)
{
    if (r == NULL) {
        return;
    }
    if (r->ev != NULL) {
        event_free(r->ev);
        r->ev = NULL;
    }
    resolve_unref(r);
}
