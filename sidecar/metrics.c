/* metrics.c: the metric values and their Prometheus text rendering.
 *
 * Names follow Prometheus conventions: base units (seconds), _total for
 * counters. Counters that share a name differ by one label (result="ok"),
 * and HELP/TYPE are written once per name, at its first entry. */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "redlock.h"

#ifndef REDLOCKD_VERSION
#define REDLOCKD_VERSION "0.0.0"
#endif

struct metrics metrics;

/* Upper bounds in seconds; the +Inf bucket is implicit. */
static const double latency_bounds[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,
};
#define N_BOUNDS (sizeof(latency_bounds) / sizeof(latency_bounds[0]))

/* Waiting for a busy lock takes longer than a node round trip: up to
 * wait_ms, 300 s at most. As many bounds as latency_bounds. */
static const double wait_bounds[N_BOUNDS] = {
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
};

struct histogram {
    uint64_t buckets[N_BOUNDS + 1]; /* non-cumulative; last is +Inf */
    uint64_t count;
    double sum;           /* seconds */
    const double *bounds; /* borrowed: static; NULL means latency_bounds */
};

static struct histogram acquire_hist;
static struct histogram node_hist[REDLOCK_MAX_NODES];
static struct histogram wait_hist = {.bounds = wait_bounds};

static const double *hist_bounds(const struct histogram *h)
{
    return h->bounds != NULL ? h->bounds : latency_bounds;
}

static void hist_observe(struct histogram *h, uint64_t usec)
{
    double s = (double)usec / 1e6;
    const double *bounds = hist_bounds(h);
    size_t i = 0;
    while (i < N_BOUNDS && s > bounds[i]) {
        i++;
    }
    h->buckets[i]++;
    h->count++;
    h->sum += s;
}

void metrics_observe_acquire(uint64_t usec)
{
    hist_observe(&acquire_hist, usec);
}

void metrics_observe_wait(uint64_t usec)
{
    hist_observe(&wait_hist, usec);
}

void metrics_observe_node(int node, uint64_t usec)
{
    if (node >= 0 && node < REDLOCK_MAX_NODES) {
        hist_observe(&node_hist[node], usec);
    }
}

/* Label values are escaped as the exposition format asks: \\, \" and \n. */
static void put_label(struct buf *o, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') {
            buf_printf(o, "\\%c", *v);
        } else if (*v == '\n') {
            buf_printf(o, "\\n");
        } else {
            buf_printf(o, "%c", *v);
        }
    }
}

static void render_hist(struct buf *o, const char *name, const char *help,
                        const struct histogram *h, const char *label,
                        const char *value, int with_header)
{
    if (with_header) {
        buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    }
    uint64_t cum = 0;
    for (size_t i = 0; i <= N_BOUNDS; i++) {
        cum += h->buckets[i];
        buf_printf(o, "%s_bucket{", name);
        if (label != NULL) {
            buf_printf(o, "%s=\"", label);
            put_label(o, value);
            buf_printf(o, "\",");
        }
        if (i < N_BOUNDS) {
            buf_printf(o, "le=\"%g\"} %llu\n", hist_bounds(h)[i],
                       (unsigned long long)cum);
        } else {
            buf_printf(o, "le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        }
    }
    const char *sfx[2] = {"_sum", "_count"};
    for (int k = 0; k < 2; k++) {
        buf_printf(o, "%s%s", name, sfx[k]);
        if (label != NULL) {
            buf_printf(o, "{%s=\"", label);
            put_label(o, value);
            buf_printf(o, "\"}");
        }
        if (k == 0) {
            buf_printf(o, " %.9g\n", h->sum);
        } else {
            buf_printf(o, " %llu\n", (unsigned long long)h->count);
        }
    }
}

/* One series per node: its value read from struct metrics_node. */
enum node_field {
    NODE_UP,
    NODE_QUARANTINED,
    NODE_MAY_EVICT,
    NODE_REFUSING,
    NODE_RECONNECTS
};

struct node_series {
    const char *name, *type, *help;
    enum node_field field;
};

static const struct node_series node_series[] = {
    {"redlockd_node_up", "gauge",
     "Whether the node is connected and ready (1) or not (0)", NODE_UP},
    {"redlockd_node_quarantined", "gauge",
     "Whether the node is in its restart quarantine and counts for no "
     "acquisition (1) or not (0)",
     NODE_QUARANTINED},
    {"redlockd_node_may_evict", "gauge",
     "Whether the node's last check found a maxmemory with a policy other "
     "than noeviction, so it may evict lock keys (1) or not (0)",
     NODE_MAY_EVICT},
    {"redlockd_node_refusing", "gauge",
     "Whether the node refused a lock command (OOM, READONLY, MISCONF, ...) "
     "since it last answered an acquire (1) or not (0)",
     NODE_REFUSING},
    {"redlockd_node_reconnects_total", "counter",
     "Connections to the node re-established after it was lost (the first "
     "connect is not counted)",
     NODE_RECONNECTS},
};

static unsigned long long node_value(const struct metrics_node *nd,
                                     enum node_field f)
{
    switch (f) {
    case NODE_UP:
        return nd->up ? 1 : 0;
    case NODE_QUARANTINED:
        return nd->quarantined ? 1 : 0;
    case NODE_MAY_EVICT:
        return nd->may_evict ? 1 : 0;
    case NODE_REFUSING:
        return nd->refusing ? 1 : 0;
    case NODE_RECONNECTS:
        return (unsigned long long)nd->reconnects;
    }
    return 0;
}

static void render_node_series(struct buf *o, const struct node_series *s,
                               const struct metrics_node *nodes, int n_nodes)
{
    buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", s->name, s->help, s->name,
               s->type);
    for (int i = 0; i < n_nodes; i++) {
        buf_printf(o, "%s{node=\"", s->name);
        put_label(o, nodes[i].addr);
        buf_printf(o, "\"} %llu\n", node_value(&nodes[i], s->field));
    }
}

char *metrics_render(const struct metrics_node *nodes, int n_nodes, size_t *len)
{
    struct buf o = {0};
    if (buf_reserve(&o, 8192) != 0) {
        return NULL;
    }
    /* Constant 1; the label says what is running (a dashboard shows it, an
     * alert can tell versions apart during a rollout). */
    buf_printf(&o, "# HELP redlockd_build_info The version of this daemon\n"
                   "# TYPE redlockd_build_info gauge\n"
                   "redlockd_build_info{version=\"%s\"} 1\n",
               REDLOCKD_VERSION);
    const char *last = "";
#define RENDER_COUNTER(f, name, help, label, value)                            \
    if (strcmp(last, name) != 0) {                                             \
        buf_printf(&o, "# HELP %s %s\n# TYPE %s counter\n", name, help, name); \
        last = name;                                                           \
    }                                                                          \
    if ((label) != NULL) {                                                     \
        buf_printf(&o, "%s{%s=\"%s\"} %llu\n", name, (const char *)(label),    \
                   (const char *)(value), (unsigned long long)metrics.f);      \
    } else {                                                                   \
        buf_printf(&o, "%s %llu\n", name, (unsigned long long)metrics.f);      \
    }
    METRICS_COUNTERS(RENDER_COUNTER)
#undef RENDER_COUNTER
#define RENDER_GAUGE(f, name, help)                                            \
    buf_printf(&o, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help,     \
               name, name, (long long)metrics.f);
    METRICS_GAUGES(RENDER_GAUGE)
#undef RENDER_GAUGE

    for (size_t k = 0; k < sizeof(node_series) / sizeof(node_series[0]); k++) {
        render_node_series(&o, &node_series[k], nodes, n_nodes);
    }
    render_hist(&o, "redlockd_acquire_duration_seconds",
                "Time from request to acquire answer, successful acquisitions",
                &acquire_hist, NULL, NULL, 1);
    render_hist(&o, "redlockd_wait_seconds",
                "Time acquire requests spent waiting for a busy lock, "
                "apart from their acquisition rounds",
                &wait_hist, NULL, NULL, 1);
    for (int i = 0; i < n_nodes && i < REDLOCK_MAX_NODES; i++) {
        render_hist(&o, "redlockd_node_command_duration_seconds",
                    "Round trip of commands to each node", &node_hist[i],
                    "node", nodes[i].addr, i == 0);
    }
    return buf_take(&o, len);
}
