/* metrics.h: every metric of redlockd, declared once in the X-macro lists
 * below; adding one is one line. Rendered in the Prometheus text format by
 * metrics_render(). Single-threaded daemon: plain integers, no atomics. */
#ifndef REDLOCKD_METRICS_H
#define REDLOCKD_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* Counters by result label: X(field, name, help, label, value). */
#define METRICS_COUNTERS(X)                                                    \
    X(acquire_ok, "redlockd_acquisitions_total", "Acquire requests by result", \
      "result", "ok")                                                          \
    X(acquire_busy, "redlockd_acquisitions_total", "", "result", "busy")       \
    X(acquire_done, "redlockd_acquisitions_total", "", "result", "done")       \
    X(acquire_no_quorum, "redlockd_acquisitions_total", "", "result",          \
      "no_quorum")                                                             \
    X(acquire_error, "redlockd_acquisitions_total", "", "result", "error")     \
    X(release_ok, "redlockd_releases_total", "Release requests by result",     \
      "result", "ok")                                                          \
    X(release_not_held, "redlockd_releases_total", "", "result", "not_held")   \
    X(release_error, "redlockd_releases_total", "", "result", "error")         \
    X(extend_ok, "redlockd_extends_total", "Extend requests by result",        \
      "result", "ok")                                                          \
    X(extend_not_held, "redlockd_extends_total", "", "result", "not_held")     \
    X(extend_error, "redlockd_extends_total", "", "result", "error")           \
    X(complete_ok, "redlockd_completes_total", "Complete requests by result",  \
      "result", "ok")                                                          \
    X(complete_not_held, "redlockd_completes_total", "", "result", "not_held") \
    X(complete_error, "redlockd_completes_total", "", "result", "error")       \
    X(renew_ok, "redlockd_renewals_total", "Automatic renewals by result",     \
      "result", "ok")                                                          \
    X(renew_failed, "redlockd_renewals_total", "", "result", "failed")         \
    X(locks_lost, "redlockd_locks_lost_total",                                 \
      "Renewing locks that could not be kept", NULL, NULL)                     \
    X(rollbacks, "redlockd_rollbacks_total",                                   \
      "Failed acquisitions rolled back on the nodes that set the key or had "  \
      "not answered yet",                                                      \
      NULL, NULL)                                                              \
    X(session_releases, "redlockd_session_releases_total",                     \
      "Locks released because their connection closed", NULL, NULL)            \
    X(requests_bad, "redlockd_bad_requests_total",                             \
      "Requests refused as malformed or too large", NULL, NULL)                \
    X(clients_accepted, "redlockd_client_connections_total",                   \
      "Client connections accepted", NULL, NULL)                               \
    X(clients_rejected, "redlockd_client_rejections_total",                    \
      "Client connections refused (limit or peer credentials)", NULL, NULL)    \
    X(accept_deferred, "redlockd_accept_deferred_total",                       \
      "Accepts that failed for want of a file descriptor or memory; the "      \
      "listeners pause and try again",                                         \
      NULL, NULL)

/* Gauges: X(field, name, help). */
#define METRICS_GAUGES(X)                                                      \
    X(locks_held, "redlockd_locks_held", "Locks held by this daemon")          \
    X(waiters, "redlockd_waiters", "Acquire requests waiting for a lock")      \
    X(clients, "redlockd_client_connections", "Open client connections")       \
    X(nodes_up, "redlockd_nodes_up", "Nodes connected and ready")

struct metrics {
#define METRICS_FIELD(f, ...) uint64_t f;
    METRICS_COUNTERS(METRICS_FIELD)
#undef METRICS_FIELD
#define METRICS_GFIELD(f, ...) int64_t f;
    METRICS_GAUGES(METRICS_GFIELD)
#undef METRICS_GFIELD
};

/* The daemon's one instance. */
extern struct metrics metrics;

#define METRIC_INC(f) (metrics.f++)
#define METRIC_ADD(f, n) (metrics.f += (n))

/* Latency histograms: acquire latency and per-node command latency. */
void metrics_observe_acquire(uint64_t usec);
void metrics_observe_node(int node, uint64_t usec);

/* metrics_observe_wait: an acquire that queued is answered after waiting
 * usec (its acquisition rounds not counted). */
void metrics_observe_wait(uint64_t usec);

/* Per-node state for rendering: provided by the caller of metrics_render. */
struct metrics_node {
    const char *addr; /* no password */
    int up;
    int quarantined;     /* restarted without persistence: counts for no
                            acquisition until its quarantine ends */
    uint64_t reconnects; /* connections re-established after a loss */
    int may_evict;       /* maxmemory with an evicting policy: lock keys
                            may vanish before their ttl */
    int refusing;        /* refused a lock command (OOM, ...) since it
                            last answered an acquire */
};

/* metrics_render: Prometheus text exposition into a malloc'd string owned by
 * the caller (*len set); NULL on allocation failure. */
char *metrics_render(const struct metrics_node *nodes, int n_nodes,
                     size_t *len);

#endif
