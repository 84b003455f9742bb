/* main.c: redlockd's entry point: configuration, the --dev cluster, the
 * event loop, signals. Start-up in order (config, log, dev, ops, server),
 * teardown in reverse. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <event2/event.h>

#include "cluster.h"
#include "config.h"
#include "dev.h"
#include "log.h"
#include "ops.h"
#include "resp.h"
#include "server.h"
#include "util.h"

struct daemon {
    struct config cfg;
    struct event_base *base;
    struct ops *ops;
    struct server *server;
    struct dev_cluster *dev;
    struct event *sigterm_ev;
    struct event *sigint_ev;
    struct event *sighup_ev;
    struct event *sigusr_ev[2]; /* SIGUSR1, SIGUSR2: logged, no action */
    struct event *drain_ev;
    uint64_t drain_deadline_us;
    struct event *dev_ready_ev; /* --dev: the banner once every node counts */
    int dev_ready_checks;
    int signals;
};

/* --dev: every 20 ms until its nodes all count toward quorums, then the
 * banner, so that "ready" means a pasted example succeeds. Its own nodes
 * are local and fresh: after 10 s something is wrong, and the banner says
 * so instead of waiting on. */
#define DEV_READY_CHECK_MS 20
#define DEV_READY_CHECKS 500

static void dev_ready_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct daemon *d = arg;
    if (d->signals > 0) {
        return; /* stopping: nothing to try */
    }
    int n = d->cfg.n_nodes;
    int counted = ops_nodes_counted(d->ops);
    if (counted < n && ++d->dev_ready_checks < DEV_READY_CHECKS) {
        struct timeval tv = {0, DEV_READY_CHECK_MS * 1000};
        evtimer_add(d->dev_ready_ev, &tv);
        return;
    }
    if (counted < n) {
        log_warn(NULL, "--dev: %d of %d node(s) count toward quorums after "
                       "%d s; see health",
                 counted, n, DEV_READY_CHECKS * DEV_READY_CHECK_MS / 1000);
    }
    dev_print_examples(d->cfg.socket_path);
}

/* Every 10 ms during shutdown: exit once no node command is outstanding,
 * or when the shutdown timeout has passed. */
static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct daemon *d = arg;
    if (ops_idle(d->ops) && server_flushed(d->server)) {
        size_t failed = ops_session_releases_failed(d->ops);
        if (failed > 0) {
            log_warn(NULL,
                     "shutdown: all releases answered, %zu without a "
                     "quorum: those locks expire with their TTL",
                     failed);
        } else {
            log_info(NULL, "shutdown: all releases answered");
        }
        event_base_loopexit(d->base, NULL);
        return;
    }
    if (util_now_us() >= d->drain_deadline_us) {
        log_warn(NULL, "shutdown: timed out waiting for nodes; locks not "
                       "confirmed released expire with their TTL");
        event_base_loopexit(d->base, NULL);
        return;
    }
    struct timeval tv = {0, 10000};
    evtimer_add(d->drain_ev, &tv);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    struct daemon *d = arg;
    if (++d->signals > 1) {
        log_warn(NULL, "second signal: exiting now");
        event_base_loopbreak(d->base);
        return;
    }
    log_info(NULL, "%s: stopping",
             sig == SIGTERM  ? "SIGTERM"
             : sig == SIGINT ? "SIGINT"
                             : "SIGHUP");
    server_stop_accepting(d->server);
    ops_shutdown(d->ops);
    d->drain_deadline_us =
        util_now_us() + (uint64_t)d->cfg.shutdown_timeout_ms * 1000u;
    d->drain_ev = evtimer_new(d->base, drain_cb, d);
    if (d->drain_ev == NULL) {
        event_base_loopexit(d->base, NULL);
        return;
    }
    drain_cb(-1, 0, d);
}

/* SIGUSR1 and SIGUSR2 have no action here; by default they would kill the
 * daemon without releasing its locks or removing its socket. An operator
 * used to them meaning "reopen the log" or "reload" learns they did
 * nothing. */
static void sigusr_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    (void)arg;
    log_warn(NULL, "%s: ignored: redlockd has no action for it (SIGTERM stops)",
             sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
}

/* Raises the soft RLIMIT_NOFILE to the hard limit: the soft default (1024
 * on most systems) protects programs that use select(), which redlockd
 * does not, and each client connection is a descriptor. Then warns when
 * even that cannot serve --max-connections with the daemon's own
 * descriptors: connections past it wait in the listen queue (the server
 * pauses accepting) instead of being served or refused. A warning, not a
 * refusal to start: the need is an upper bound that few deployments reach,
 * and the default --max-connections would otherwise not start on a host
 * with a hard limit of 4096. */
static void fd_limit_prepare(const struct config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        log_warn(NULL, "cannot read the file descriptor limit: %s",
                 strerror(errno));
        return;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < rl.rlim_max) {
        struct rlimit raised = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
            log_info(NULL,
                     "file descriptor limit raised from %llu to %llu "
                     "(the hard limit)",
                     (unsigned long long)rl.rlim_cur,
                     (unsigned long long)rl.rlim_max);
            rl.rlim_cur = rl.rlim_max;
        } else {
            log_warn(NULL,
                     "cannot raise the file descriptor limit from %llu to "
                     "%llu: %s",
                     (unsigned long long)rl.rlim_cur,
                     (unsigned long long)rl.rlim_max, strerror(errno));
        }
    }
    long need = config_fd_need(cfg, server_fd_reserve(cfg));
    if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)need > rl.rlim_cur) {
        log_warn(NULL,
                 "file descriptor limit %llu is below the %ld that "
                 "--max-connections %d needs with %d node(s): connections "
                 "past it wait unserved in the listen queue until "
                 "descriptors free; raise the hard limit (ulimit -Hn, "
                 "systemd LimitNOFILE=) to %ld or lower --max-connections",
                 (unsigned long long)rl.rlim_cur, need, cfg->max_connections,
                 cfg->n_nodes, need);
    }
}

int main(int argc, char **argv)
{
    struct daemon d;
    memset(&d, 0, sizeof(d));
    char err[512];
    int rc = 1;

    enum config_result cr = config_load(&d.cfg, argc, argv, err, sizeof(err));
    if (cr == CONFIG_EXIT) {
        config_free(&d.cfg);
        return 0;
    }
    if (cr == CONFIG_ERROR) {
        fprintf(stderr, "redlockd: %s\n", err);
        config_free(&d.cfg);
        return 2;
    }
    log_init(d.cfg.log_level, d.cfg.log_format);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGUSR1, SIG_IGN); /* until the loop logs them (sigusr_cb) */
    signal(SIGUSR2, SIG_IGN);
    srandom((unsigned)time(NULL) ^ (unsigned)getpid());

    /* The stop signals wait until the loop can handle them: one arriving
     * during start-up (--dev's nodes starting, the listener binding) would
     * otherwise kill us before anything is cleaned. Unblocked just before
     * the loop; a pending one then stops the daemon the normal way. SIGHUP
     * (a closed terminal) stops it like SIGTERM. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGHUP);
    sigprocmask(SIG_BLOCK, &stop_signals, NULL);

    if (d.cfg.dev) {
        d.dev = dev_start(&d.cfg, 5, err, sizeof(err));
        if (d.dev == NULL) {
            config_free(&d.cfg);
            if (dev_stop_pending()) {
                log_info(NULL, "stopped during start-up");
                return 0;
            }
            fprintf(stderr, "redlockd: %s\n", err);
            return 2;
        }
    }

    fd_limit_prepare(&d.cfg);

    /* Precise timers: by default libevent may read a coarse clock (one
     * kernel tick, often 4 ms), so every timer could fire that late; a
     * 10 ms lock's renewal has no such slack. */
    struct event_config *ecfg = event_config_new();
    if (ecfg != NULL) {
        event_config_set_flag(ecfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        d.base = event_base_new_with_config(ecfg);
        event_config_free(ecfg);
    }
    if (d.base == NULL) {
        log_error(NULL, "cannot create the event loop");
        goto out;
    }
    d.ops = ops_create(d.base, &d.cfg);
    if (d.ops == NULL) {
        log_error(NULL, "cannot start the node connections");
        goto out;
    }
    d.server = server_create(d.base, &d.cfg, d.ops, err, sizeof(err));
    if (d.server == NULL) {
        fprintf(stderr, "redlockd: %s\n", err);
        rc = 2;
        goto out;
    }
    d.sigterm_ev = evsignal_new(d.base, SIGTERM, signal_cb, &d);
    d.sigint_ev = evsignal_new(d.base, SIGINT, signal_cb, &d);
    d.sighup_ev = evsignal_new(d.base, SIGHUP, signal_cb, &d);
    if (d.sigterm_ev == NULL || d.sigint_ev == NULL || d.sighup_ev == NULL ||
        evsignal_add(d.sigterm_ev, NULL) != 0 ||
        evsignal_add(d.sigint_ev, NULL) != 0 ||
        evsignal_add(d.sighup_ev, NULL) != 0) {
        log_error(NULL, "cannot install signal handlers");
        goto out;
    }
    for (int k = 0; k < 2; k++) {
        d.sigusr_ev[k] =
            evsignal_new(d.base, k == 0 ? SIGUSR1 : SIGUSR2, sigusr_cb, &d);
        if (d.sigusr_ev[k] == NULL || evsignal_add(d.sigusr_ev[k], NULL) != 0) {
            log_error(NULL, "cannot install signal handlers");
            goto out;
        }
    }
    sigprocmask(SIG_UNBLOCK, &stop_signals, NULL);
    log_info(NULL, "redlockd %s: %d node(s), quorum %d, serving on %s",
             REDLOCKD_VERSION, d.cfg.n_nodes, d.cfg.n_nodes / 2 + 1,
             d.cfg.socket_path);
    if (d.dev) {
        d.dev_ready_ev = evtimer_new(d.base, dev_ready_cb, &d);
        struct timeval now = {0, 0};
        if (d.dev_ready_ev == NULL || evtimer_add(d.dev_ready_ev, &now) != 0) {
            log_error(NULL, "cannot create a timer");
            goto out;
        }
    }
    event_base_dispatch(d.base);
    rc = 0;

out:
    /* From here on a further stop signal must not kill us half-way
     * (freeing the signal events restores the default action): block them
     * until exit, so --dev's children and temp dir are always cleaned. */
    sigprocmask(SIG_BLOCK, &stop_signals, NULL);
    /* Teardown in reverse order of start-up. */
    if (d.drain_ev != NULL) {
        event_free(d.drain_ev);
    }
    if (d.dev_ready_ev != NULL) {
        event_free(d.dev_ready_ev);
    }
    if (d.sigint_ev != NULL) {
        event_free(d.sigint_ev);
    }
    if (d.sighup_ev != NULL) {
        event_free(d.sighup_ev);
    }
    if (d.sigterm_ev != NULL) {
        event_free(d.sigterm_ev);
    }
    for (int k = 0; k < 2; k++) {
        if (d.sigusr_ev[k] != NULL) {
            event_free(d.sigusr_ev[k]);
        }
    }
    /* ops_destroy may still answer calls (commands pending after a timed
     * out drain or a second signal): server_destroy leaves them to free
     * themselves (see there). */
    server_destroy(d.server);
    ops_destroy(d.ops);
    resp_pool_drain(); /* cached reply objects: nothing may hold one now */
    if (d.base != NULL) {
        event_base_free(d.base);
    }
    dev_stop(d.dev);
    config_free(&d.cfg);
    if (rc == 0) {
        log_info(NULL, "stopped");
    }
    return rc;
}
