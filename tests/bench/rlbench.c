/* rlbench.c: load generator for redlockd, and the in-process limit.
 *
 * Daemon mode speaks NDJSON over the daemon's unix socket. A "client" is one
 * logical user with exactly one request in flight at a time; clients get a
 * connection each, or share --conns connections (pipelined, matched by id).
 *
 *   cycle        each client: acquire its own resource, release it, repeat
 *   contended    C clients on R resources, acquire with wait_ms, release
 *   renew        hold K renewing locks over a few connections; report the
 *                daemon's CPU% and RSS (/proc/<pid>/stat and status)
 *   connections  open many idle connections, report RSS per connection,
 *                then run the cycle through a few clients
 *
 * --inproc runs a Redlock cycle inside this process, on hiredis async and
 * libevent with one connection per node, deciding with the daemon's own
 * quorum and validity rules (sidecar/redlock.c, linked in). By default it is
 * the cheapest correct cycle (SET NX PX to every node, then one
 * compare-and-delete EVALSHA); --limit scripts runs the daemon's own acquire
 * and release scripts (sidecar/scripts.c) instead. No socket to a daemon, no
 * JSON: the limit a daemon on this machine could reach.
 *
 * With --redis, cycle runs also report the nodes' work per completed cycle
 * from INFO commandstats and INFO cpu (see "Redis work" below).
 *
 * Every run is bounded: warmup + duration, then a drain of at most --drain
 * seconds in which in-flight cycles finish (acquired locks are released),
 * then a hard stop. Each run prints a human block and one line
 *   RESULT mode=cycle impl=daemon conc=64 ... cps=... p50_us=... ...
 * that run.sh collects. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <uuid/uuid.h>

#include "redlock.h" /* the daemon's quorum and validity rules */
#include "replyview.h"
#include "scripts.h" /* the daemon's Lua scripts, not a copy */
#include "util.h"    /* the daemon's hash table */

#define MAX_CONC 64
#define MAX_NODES 16
#define MAX_PIDS 32
#define TOKEN_LEN 32
#define SAMPLES_CAP (32u * 1024u * 1024u)

/* ---- options ------------------------------------------------------------ */

enum mode {
    MODE_CYCLE,
    MODE_CONTENDED,
    MODE_RENEW,
    MODE_CONNECTIONS,
};

struct opts {
    const char *socket;
    enum mode mode;
    int conc[MAX_CONC];
    int n_conc;
    double duration;
    double warmup;
    double drain;
    int daemon_pid;
    int redis_pids[MAX_PIDS];
    int n_redis_pids;
    bool inproc;
    const char *redis[MAX_NODES];
    int n_redis;
    int conns;      /* 0: one connection per client */
    int resources;  /* contended: R */
    int wait_ms;    /* contended */
    int hold_ms;    /* contended: time a lock is held before release */
    int ttl_ms;
    int locks;      /* renew: K */
    int window;     /* bulk phases: requests in flight per connection */
    int idle;       /* connections mode: idle connections */
    int held;       /* cycle: locks held (not renewed) during the runs */
    int held_ttl_ms;
    double ramp;    /* renew: spread the acquisitions over this many s */
    const char *impl;
    const char *prefix;
    const char *tag; /* free text added to RESULT lines */
    double drift;
};

static struct opts opt = {
    .mode = MODE_CYCLE,
    .duration = 10,
    .warmup = 2,
    .drain = 5,
    .resources = 4,
    .wait_ms = 1000,
    .ttl_ms = 10000,
    .locks = 100000,
    .window = 256,
    .held_ttl_ms = 600000,
    .prefix = "redlock:",
    .drift = 0.01,
};

/* ---- small helpers ------------------------------------------------------ */

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("rlbench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (p == NULL) {
        die("out of memory (%zu bytes)", n);
    }
    return p;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n, sz);
    if (p == NULL) {
        die("out of memory");
    }
    return p;
}

/* Token source of the in-process limit: 128 bits from the kernel's CSPRNG,
 * taken from a buffer refilled by one getrandom() per 256 tokens. With
 * --token uuid it does what the daemon's locks_new_token does instead (one
 * uuid_generate_random call per token), to price that choice. */
static bool token_uuid;

static void random_bytes(unsigned char *out, size_t n)
{
    static unsigned char pool[4096];
    static size_t left;
    while (n > 0) {
        if (left == 0) {
            size_t got = 0;
            while (got < sizeof(pool)) {
                ssize_t r = getrandom(pool + got, sizeof(pool) - got, 0);
                if (r < 0 && errno != EINTR) {
                    die("getrandom: %s", strerror(errno));
                }
                got += r > 0 ? (size_t)r : 0;
            }
            left = sizeof(pool);
        }
        size_t take = n < left ? n : left;
        memcpy(out, pool + sizeof(pool) - left, take);
        /* Never hand out the same bytes twice. */
        memset(pool + sizeof(pool) - left, 0, take);
        left -= take;
        out += take;
        n -= take;
    }
}

static void new_token(char out[TOKEN_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char u[16];
    if (token_uuid) {
        /* As the daemon's locks_new_token (since 3e57a54): one v4 UUID,
         * its 6 fixed version and variant bits refilled from the pool. */
        unsigned char extra[1];
        uuid_generate_random(u);
        random_bytes(extra, sizeof(extra));
        u[6] = (unsigned char)((u[6] & 0x0f) | (extra[0] & 0xf0));
        u[8] = (unsigned char)((u[8] & 0x3f) | ((extra[0] << 4) & 0xc0));
    } else {
        random_bytes(u, sizeof(u));
    }
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[u[i] >> 4];
        out[2 * i + 1] = hex[u[i] & 0xf];
    }
    out[TOKEN_LEN] = '\0';
}

/* ---- /proc sampling ----------------------------------------------------- */

/* proc_cpu_ticks: utime + stime of pid in clock ticks, or -1. */
static long long proc_cpu_ticks(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields after the ")" that closes comm: state is field 3; utime and
     * stime are fields 14 and 15. */
    char *p = strrchr(buf, ')');
    if (p == NULL) {
        return -1;
    }
    p += 2;
    unsigned long long ut = 0, st = 0;
    int field = 3;
    char *save = NULL;
    for (char *t = strtok_r(p, " ", &save); t != NULL;
         t = strtok_r(NULL, " ", &save), field++) {
        if (field == 14) {
            ut = strtoull(t, NULL, 10);
        } else if (field == 15) {
            st = strtoull(t, NULL, 10);
            break;
        }
    }
    return (long long)(ut + st);
}

/* proc_rss_kb: VmRSS of pid in kB, or -1. */
static long proc_rss_kb(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    long kb = -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
}

static long long self_cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
           (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
}

/* proc_stat_ticks: machine-wide busy and total ticks from /proc/stat. */
static void proc_stat_ticks(long long *busy, long long *total)
{
    *busy = *total = -1;
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL) {
        return;
    }
    unsigned long long v[10] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
                   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7],
                   &v[8], &v[9]);
    fclose(f);
    if (n < 8) {
        return;
    }
    /* user nice system idle iowait irq softirq steal (guest is in user) */
    unsigned long long tot = 0;
    for (int i = 0; i < 8; i++) {
        tot += v[i];
    }
    *total = (long long)tot;
    *busy = (long long)(tot - v[3] - v[4]);
}

/* A CPU snapshot of the daemon, the redis nodes, ourselves and the whole
 * machine (to tell how much else was running: the machine is shared). */
struct cpu_snap {
    uint64_t t_us;
    long long daemon_ticks;
    long long redis_ticks;
    long long self_us;
    long long mach_busy, mach_total;
};

static void cpu_snap(struct cpu_snap *s)
{
    s->t_us = now_us();
    s->daemon_ticks = opt.daemon_pid > 0 ? proc_cpu_ticks(opt.daemon_pid) : -1;
    s->redis_ticks = 0;
    for (int i = 0; i < opt.n_redis_pids; i++) {
        long long t = proc_cpu_ticks(opt.redis_pids[i]);
        if (t < 0) {
            s->redis_ticks = -1;
            break;
        }
        s->redis_ticks += t;
    }
    if (opt.n_redis_pids == 0) {
        s->redis_ticks = -1;
    }
    s->self_us = self_cpu_us();
    proc_stat_ticks(&s->mach_busy, &s->mach_total);
}

/* Machine-wide CPU between a and b, in percent of one core (200 = both
 * cores of a 2-core machine busy). */
static double machine_pct(const struct cpu_snap *a, const struct cpu_snap *b)
{
    if (a->mach_total < 0 || b->mach_total <= a->mach_total) {
        return -1;
    }
    double frac = (double)(b->mach_busy - a->mach_busy) /
                  (double)(b->mach_total - a->mach_total);
    return frac * (double)sysconf(_SC_NPROCESSORS_ONLN) * 100.0;
}

/* Percent of one core used between a and b; -1 when unknown. */
static double ticks_pct(long long a, long long b, uint64_t dt_us)
{
    if (a < 0 || b < 0 || dt_us == 0) {
        return -1;
    }
    double hz = (double)sysconf(_SC_CLK_TCK);
    return (double)(b - a) / hz * 1e6 / (double)dt_us * 100.0;
}

/* ---- samples and percentiles ------------------------------------------ */

struct samples {
    uint32_t *v;
    size_t n, cap;
};

static void samples_add(struct samples *s, uint64_t us)
{
    if (s->n == s->cap) {
        if (s->cap >= SAMPLES_CAP) {
            return; /* enough for any percentile we print */
        }
        size_t cap = s->cap ? s->cap * 2 : 65536;
        uint32_t *v = realloc(s->v, cap * sizeof(*v));
        if (v == NULL) {
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void samples_sort(struct samples *s)
{
    qsort(s->v, s->n, sizeof(*s->v), cmp_u32);
}

/* Nearest-rank percentile of sorted samples; -1 when empty. */
static long pct(const struct samples *s, double p)
{
    if (s->n == 0) {
        return -1;
    }
    size_t rank = (size_t)ceil(p / 100.0 * (double)s->n);
    if (rank < 1) {
        rank = 1;
    }
    if (rank > s->n) {
        rank = s->n;
    }
    return (long)s->v[rank - 1];
}

static double samples_mean(const struct samples *s)
{
    if (s->n == 0) {
        return -1;
    }
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) {
        sum += s->v[i];
    }
    return sum / (double)s->n;
}

/* ---- error codes -------------------------------------------------------- */

static const char *const err_codes[] = {
    "bad_request", "not_held", "busy",     "done",     "too_large", "limit",
    "no_quorum",   "shutting_down", "internal", "other", "io",
};
#define N_ERR (sizeof(err_codes) / sizeof(err_codes[0]))
#define ERR_OTHER 9
#define ERR_IO 10
#define ERR_BUSY_IDX 2
#define ERR_NOT_HELD_IDX 1
#define ERR_NO_QUORUM_IDX 6
#define ERR_DONE_IDX 3

static int err_index(const char *s, size_t n)
{
    for (size_t i = 0; i < N_ERR; i++) {
        if (strlen(err_codes[i]) == n && memcmp(err_codes[i], s, n) == 0) {
            return (int)i;
        }
    }
    return ERR_OTHER;
}

/* ---- the bench state ---------------------------------------------------- */

enum phase {
    PH_IDLE,    /* between runs */
    PH_WARMUP,  /* load on, nothing recorded */
    PH_MEASURE, /* load on, recorded */
    PH_DRAIN,   /* no new cycles; in-flight ones finish */
};

enum cstate {
    CS_STOPPED,
    CS_ACQ,  /* acquire in flight */
    CS_HOLD, /* contended: holding before the release */
    CS_REL,  /* release in flight */
};

struct conn;
struct iop;

struct client {
    int idx;
    struct conn *conn; /* daemon: borrowed from the run's connections */
    enum cstate st;
    uint64_t t_cycle; /* start of the current cycle */
    uint64_t t_req;   /* start of the current request */
    char token[TOKEN_LEN + 1];
    char resource[96];
    size_t res_len;
    struct event *hold_ev;
    /* inproc: the key and channel of the resource */
    char key[128];
    size_t key_len;
    char chan[128];
    size_t chan_len;
    /* daemon: request lines built once */
    char acq_line[256];
    size_t acq_len;
    char rel_line[128];
    size_t rel_len, rel_tok;
};

struct conn {
    int fd;
    int idx;
    struct event *rev, *wev;
    char *in;
    size_t in_len, in_cap;
    char *out;
    size_t out_len, out_off, out_cap;
    bool dead;
    void (*on_line)(struct conn *c, const char *line, size_t len);
    int inflight; /* bulk phases; --serve: rounds in flight for it */
    size_t next;  /* bulk phases: next index this connection sends */
    /* --serve: a client's connection to the floor sidecar */
    void (*on_dead)(struct conn *c); /* instead of the daemon's message */
    struct event *flush_ev;          /* end of the loop turn: one write */
    bool flush_on;                   /* flush_ev is active */
    bool closing;                    /* peer gone: freed once inflight is 0 */
    struct conn *prev_s, *next_s;    /* the floor's list of connections */
};

/* The Redis work of one measured interval (filled by stats_end). */
#define MAX_CMDS 64

struct cmd_count {
    char name[48];
    long long calls;
};

struct rwork {
    bool ok;               /* every node answered at both ends */
    bool settled;          /* the nodes were idle when read (see
                              stats_settle) */
    long long calls, usec; /* commandstats sums over the nodes */
    double cpu_s;          /* used_cpu_sys + used_cpu_user deltas, summed */
    struct cmd_count cmd[MAX_CMDS]; /* calls by command, over the nodes */
    int n_cmd;
};

struct run {
    enum phase phase;
    int conc;
    struct client *clients;
    int n_clients;
    struct conn **conns;
    int n_conns;
    int active; /* clients not stopped */
    uint64_t t_start, t_measure, t_end;
    struct samples acq, cyc;
    uint64_t cycles;     /* completed in the measured interval */
    uint64_t cycles_all; /* completed in the whole run (Redis work) */
    uint64_t acq_ok;
    uint64_t errs[N_ERR];
    uint64_t events;
    struct cpu_snap cpu0, cpu1;
    struct rwork work; /* the nodes' work over the whole run */
    struct event *phase_ev;
    struct event *deadline_ev;
    unsigned run_no;
};

static struct event_base *base;
static struct run R;
static unsigned run_counter;

/* ---- connections to the daemon ------------------------------------------ */

static void conn_flush(struct conn *c);

/* unix_addr: *sa for the unix socket at path (dies when it is too long). */
static void unix_addr(struct sockaddr_un *sa, const char *path)
{
    if (strlen(path) >= sizeof(sa->sun_path)) {
        die("socket path too long: %s", path);
    }
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    strcpy(sa->sun_path, path);
}

static int unix_connect(const char *path)
{
    struct sockaddr_un sa;
    unix_addr(&sa, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    /* Blocking connect: with a full listen backlog it waits for the
     * daemon to accept instead of failing with EAGAIN. */
    for (int tries = 0; connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0;
         tries++) {
        if ((errno != EAGAIN && errno != EINTR) || tries > 1000) {
            close(fd);
            return -1;
        }
        usleep(1000);
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    return fd;
}

static void conn_read_cb(evutil_socket_t fd, short what, void *arg);
static void conn_write_cb(evutil_socket_t fd, short what, void *arg);

/* conn_wrap: a connection on the nonblocking fd, read into on_line. */
static struct conn *
conn_wrap(int fd, int idx, void (*on_line)(struct conn *, const char *, size_t))
{
    struct conn *c = xcalloc(1, sizeof(*c));
    c->fd = fd;
    c->idx = idx;
    c->on_line = on_line;
    c->in_cap = 16384;
    c->in = xmalloc(c->in_cap);
    c->out_cap = 4096;
    c->out = xmalloc(c->out_cap);
    c->rev = event_new(base, fd, EV_READ | EV_PERSIST, conn_read_cb, c);
    c->wev = event_new(base, fd, EV_WRITE | EV_PERSIST, conn_write_cb, c);
    event_add(c->rev, NULL);
    return c;
}

static struct conn *conn_open(int idx, void (*on_line)(struct conn *,
                                                       const char *, size_t))
{
    int fd = unix_connect(opt.socket);
    if (fd < 0) {
        fprintf(stderr, "rlbench: connect %s: %s\n", opt.socket,
                strerror(errno));
        return NULL;
    }
    return conn_wrap(fd, idx, on_line);
}

static void conn_close(struct conn *c)
{
    if (c == NULL) {
        return;
    }
    event_free(c->rev);
    event_free(c->wev);
    if (c->flush_ev != NULL) {
        event_free(c->flush_ev);
    }
    close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

static void conn_append(struct conn *c, const char *s, size_t n)
{
    if (c->out_len + n > c->out_cap) {
        if (c->out_off > 0) {
            memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
            c->out_len -= c->out_off;
            c->out_off = 0;
        }
        while (c->out_len + n > c->out_cap) {
            c->out_cap *= 2;
        }
        char *o = realloc(c->out, c->out_cap);
        if (o == NULL) {
            die("out of memory");
        }
        c->out = o;
    }
    memcpy(c->out + c->out_len, s, n);
    c->out_len += n;
}

static void conn_dead(struct conn *c)
{
    if (!c->dead) {
        c->dead = true;
        event_del(c->rev);
        event_del(c->wev);
        if (c->on_dead != NULL) {
            c->on_dead(c);
            return;
        }
        fprintf(stderr, "rlbench: connection %d closed by the daemon\n",
                c->idx);
    }
}

static void conn_flush(struct conn *c)
{
    while (c->out_off < c->out_len && !c->dead) {
        ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (w > 0) {
            c->out_off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_add(c->wev, NULL);
            return;
        }
        conn_dead(c);
        return;
    }
    c->out_off = c->out_len = 0;
    event_del(c->wev);
}

static void conn_write_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_flush(arg);
}

static void conn_read_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct conn *c = arg;
    for (int rounds = 0; rounds < 4; rounds++) {
        if (c->in_cap - c->in_len < 4096) {
            c->in_cap *= 2;
            char *p = realloc(c->in, c->in_cap);
            if (p == NULL) {
                die("out of memory");
            }
            c->in = p;
        }
        ssize_t r = read(fd, c->in + c->in_len, c->in_cap - c->in_len);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR &&
                       errno != EWOULDBLOCK)) {
            conn_dead(c);
            return;
        }
        if (r < 0) {
            break;
        }
        c->in_len += (size_t)r;
        size_t start = 0;
        for (;;) {
            char *nl = memchr(c->in + start, '\n', c->in_len - start);
            if (nl == NULL) {
                break;
            }
            size_t len = (size_t)(nl - (c->in + start));
            c->on_line(c, c->in + start, len);
            start += len + 1;
        }
        if (start > 0) {
            memmove(c->in, c->in + start, c->in_len - start);
            c->in_len -= start;
        }
        if ((size_t)r < 4096) {
            break; /* drained, most likely */
        }
    }
    conn_flush(c);
}

/* ---- minimal response parsing ------------------------------------------- */

/* Finds "key": in line and parses the integer after it. */
static bool find_int(const char *l, size_t n, const char *key, long long *out)
{
    size_t kl = strlen(key);
    const char *p = memmem(l, n, key, kl);
    if (p == NULL) {
        return false;
    }
    p += kl;
    const char *end = l + n;
    bool neg = false;
    if (p < end && *p == '-') {
        neg = true;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9') {
        return false;
    }
    long long v = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        v = v * 10 + (*p - '0');
        p++;
    }
    *out = neg ? -v : v;
    return true;
}

/* Finds "key":"..." and returns the string's bytes (no unescaping: the
 * values we read are tokens and error codes). */
static bool find_str(const char *l, size_t n, const char *key, const char **s,
                     size_t *sl)
{
    size_t kl = strlen(key);
    const char *p = memmem(l, n, key, kl);
    if (p == NULL) {
        return false;
    }
    p += kl;
    const char *end = l + n;
    if (p >= end || *p != '"') {
        return false;
    }
    p++;
    const char *q = memchr(p, '"', (size_t)(end - p));
    if (q == NULL) {
        return false;
    }
    *s = p;
    *sl = (size_t)(q - p);
    return true;
}

/* Parses a response: returns -1 for an event line, else 0 with *ok, the id
 * (or -1), the error index and the token when present. */
struct resp {
    long long id;
    bool ok;
    int err;
    const char *lock;
    size_t lock_len;
};

static int parse_resp(const char *l, size_t n, struct resp *r)
{
    if (n >= 9 && memcmp(l, "{\"event\":", 9) == 0) {
        return -1;
    }
    r->id = -1;
    find_int(l, n, "\"id\":", &r->id);
    r->ok = memmem(l, n, "\"ok\":true", 9) != NULL;
    r->err = -1;
    r->lock = NULL;
    r->lock_len = 0;
    if (r->ok) {
        find_str(l, n, "\"lock\":", &r->lock, &r->lock_len);
    } else {
        const char *s;
        size_t sl;
        r->err = find_str(l, n, "\"code\":", &s, &sl) ? err_index(s, sl)
                                                       : ERR_OTHER;
    }
    return 0;
}

/* ---- run bookkeeping ------------------------------------------------------ */

static void run_record_err(int e)
{
    if (R.phase == PH_MEASURE && e >= 0 && (size_t)e < N_ERR) {
        R.errs[e]++;
    }
}

static void run_maybe_finish(void);

static void client_stop(struct client *cl)
{
    if (cl->st != CS_STOPPED) {
        cl->st = CS_STOPPED;
        R.active--;
    }
    run_maybe_finish();
}

static bool run_loading(void)
{
    return R.phase == PH_WARMUP || R.phase == PH_MEASURE;
}

/* ---- daemon clients ------------------------------------------------------- */

/* The request lines are built once per client (they only differ in the
 * token), so the generator spends its CPU on I/O, not on printf. */
static void d_build_lines(struct client *cl)
{
    if (opt.mode == MODE_CONTENDED) {
        cl->acq_len = (size_t)snprintf(
            cl->acq_line, sizeof(cl->acq_line),
            "{\"id\":%d,\"op\":\"acquire\",\"resource\":\"%s\","
            "\"ttl_ms\":%d,\"wait_ms\":%d}\n",
            cl->idx, cl->resource, opt.ttl_ms, opt.wait_ms);
    } else {
        cl->acq_len = (size_t)snprintf(
            cl->acq_line, sizeof(cl->acq_line),
            "{\"id\":%d,\"op\":\"acquire\",\"resource\":\"%s\","
            "\"ttl_ms\":%d}\n",
            cl->idx, cl->resource, opt.ttl_ms);
    }
    cl->rel_len = (size_t)snprintf(
        cl->rel_line, sizeof(cl->rel_line),
        "{\"id\":%d,\"op\":\"release\",\"lock\":\"%0*d\"}\n", cl->idx,
        TOKEN_LEN, 0);
    cl->rel_tok = cl->rel_len - 3 - TOKEN_LEN;
}

static void d_send_acquire(struct client *cl, bool new_cycle)
{
    uint64_t t = now_us();
    if (new_cycle) {
        cl->t_cycle = t;
    }
    cl->t_req = t;
    cl->st = CS_ACQ;
    conn_append(cl->conn, cl->acq_line, cl->acq_len);
}

static void d_send_release(struct client *cl)
{
    memcpy(cl->rel_line + cl->rel_tok, cl->token, TOKEN_LEN);
    cl->t_req = now_us();
    cl->st = CS_REL;
    conn_append(cl->conn, cl->rel_line, cl->rel_len);
}

static void hold_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct client *cl = arg;
    if (opt.inproc) {
        return; /* contended mode is daemon only */
    }
    d_send_release(cl);
    conn_flush(cl->conn);
}

static void d_client_line(struct conn *c, const char *line, size_t len)
{
    struct resp r;
    if (parse_resp(line, len, &r) < 0) {
        R.events++;
        return;
    }
    if (r.id < 0 || r.id >= R.n_clients) {
        fprintf(stderr, "rlbench: answer without a known id: %.*s\n",
                (int)(len > 200 ? 200 : len), line);
        return;
    }
    struct client *cl = &R.clients[r.id];
    (void)c;
    uint64_t t = now_us();
    if (cl->st == CS_ACQ) {
        if (r.ok && r.lock_len == TOKEN_LEN) {
            if (R.phase == PH_MEASURE) {
                samples_add(&R.acq, t - cl->t_req);
                R.acq_ok++;
            }
            memcpy(cl->token, r.lock, TOKEN_LEN);
            cl->token[TOKEN_LEN] = '\0';
            if (opt.hold_ms > 0) {
                cl->st = CS_HOLD;
                struct timeval tv = {opt.hold_ms / 1000,
                                     (opt.hold_ms % 1000) * 1000};
                evtimer_add(cl->hold_ev, &tv);
            } else {
                d_send_release(cl);
            }
            return;
        }
        run_record_err(r.ok ? ERR_OTHER : r.err);
        if (run_loading()) {
            d_send_acquire(cl, true);
        } else {
            client_stop(cl);
        }
        return;
    }
    if (cl->st == CS_REL) {
        if (r.ok) {
            if (R.phase == PH_MEASURE) {
                samples_add(&R.cyc, t - cl->t_cycle);
                R.cycles++;
            }
            R.cycles_all++;
        } else {
            run_record_err(r.err);
        }
        if (run_loading()) {
            d_send_acquire(cl, true);
        } else {
            client_stop(cl);
        }
        return;
    }
    fprintf(stderr, "rlbench: unexpected answer for client %d in state %d\n",
            cl->idx, (int)cl->st);
}

/* ---- in-process Redlock (the limit) ------------------------------------- */

/* Two limits share this code:
 *
 *   minimal (impl "limit"): the cheapest correct Redlock cycle, as an expert
 *     would write it with hiredis: SET key token NX PX ttl to every node,
 *     decided at quorum by redlock.c (validity = ttl - elapsed - drift),
 *     the nodes that may hold a lost attempt's key cleaned up, then one
 *     compare-and-delete EVALSHA (MINIMAL_DEL below) to every node.
 *   scripts (impl "limit-scripts", --limit scripts): the same round with the
 *     daemon's own acquire and release scripts (sidecar/scripts.c), i.e.
 *     the daemon's Redis work without its socket, JSON and bookkeeping.
 *
 * Both classify replies and decide with the daemon's pure Redlock functions
 * (sidecar/redlock.c, linked in, and replyview.h: reply classification,
 * quorum, validity, rollback set, answer), so they cannot drift from the
 * daemon's.
 *
 * The engine knows nothing of who asked: a round (struct iop) is started by
 * i_send_all and ends in the caller's done callback with redlock.c's
 * verdict, after a lost acquisition's rollback went out. Two callers: the
 * bench's in-process clients (--inproc, i_client_done) and the floor
 * sidecar's socket requests (--serve, s_op_done). */

/* The textbook compare-and-delete of the Redlock description: delete the key
 * only if it still holds our token. */
static const char MINIMAL_DEL[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('del', KEYS[1])\n"
    "end\n"
    "return 0\n";

enum limit_kind {
    LIMIT_MINIMAL, /* SET NX PX + compare-and-delete */
    LIMIT_SCRIPTS, /* the daemon's acquire and release scripts */
};

static enum limit_kind limit_kind = LIMIT_MINIMAL;

/* Arguments every round sends, formatted once. */
static char fence_key[96];
static size_t fence_key_len;

struct rnode {
    int idx;
    redisAsyncContext *ac;
    bool up;
    char sha_acq[41]; /* scripts: the daemon's acquire script */
    char sha_rel[41]; /* scripts: the daemon's release script */
    char sha_del[41]; /* minimal: MINIMAL_DEL */
};

static struct rnode nodes[MAX_NODES];
static int n_nodes;
static int nodes_connected;

enum iop_kind {
    IOP_ACQUIRE,
    IOP_RELEASE,
};

/* A key: the prefix (at most 64 bytes, as the daemon's) + "lock:" + a
 * resource of at most 512 bytes. */
#define KEY_CAP 600
#define ID_CAP 40 /* --serve: the longest request id it echoes, + 1 */

struct iop;

/* The end of a round: v is redlock.c's verdict, or NULL when not even a
 * quorum of nodes could be asked (nothing was decided by the nodes). The
 * round is freed after the callback returns; it may start new rounds. */
typedef void iop_done_fn(struct iop *op, const struct redlock_verdict *v);

/* One Redlock round in flight; lives until every node it was sent to has
 * answered. For a release, RL_WON means a quorum deleted the key and
 * RL_LOST_BUSY that too few still held our token. */
struct iop {
    enum iop_kind kind;
    struct redlock_round round;
    int outstanding; /* sent, not yet answered */
    bool decided;
    uint64_t t_req; /* sent: the validity clock starts here */
    uint32_t ttl_ms;
    char ttl[12]; /* ttl_ms in decimal */
    size_t ttl_len;
    char token[TOKEN_LEN + 1];
    char key[KEY_CAP];
    size_t key_len;
    const char *chan; /* scripts release: borrowed: owned by the client */
    size_t chan_len;
    iop_done_fn *done;
    void *owner;     /* the caller's: a bench client or a socket conn */
    char id[ID_CAP]; /* --serve: the request's "id" value, raw JSON */
    size_t id_len;
    struct iop *next_free;
};

static struct iop *iop_free_list;
static long inflight_cmds; /* commands sent to a node, not yet answered */

/* u64_dec: v in decimal at out (room for 20 bytes); returns the length. */
static size_t u64_dec(char *out, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    memcpy(out, tmp + i, sizeof(tmp) - i);
    return sizeof(tmp) - i;
}

/* iop_new: a round of kind on key (copied; at most KEY_CAP bytes) with
 * ttl_ms, ending in done with owner; an acquire gets a fresh token, a
 * release's caller copies its token in. Not sent yet: i_send_all. */
static struct iop *iop_new(enum iop_kind kind, const char *key, size_t key_len,
                           uint32_t ttl_ms, iop_done_fn *done, void *owner)
{
    struct iop *op = iop_free_list;
    if (op != NULL) {
        iop_free_list = op->next_free;
    } else {
        op = xmalloc(sizeof(*op));
    }
    op->kind = kind;
    op->outstanding = 0;
    op->decided = false;
    op->t_req = 0;
    op->ttl_ms = ttl_ms;
    op->ttl_len = u64_dec(op->ttl, ttl_ms);
    memcpy(op->key, key, key_len);
    op->key_len = key_len;
    op->chan = NULL;
    op->chan_len = 0;
    op->done = done;
    op->owner = owner;
    op->id_len = 0;
    if (kind == IOP_ACQUIRE) {
        new_token(op->token);
    }
    return op;
}

static void iop_put(struct iop *op)
{
    op->next_free = iop_free_list;
    iop_free_list = op;
}

/* One RESP command, formatted by hand (no printf: this is the limit). */
struct rbuf {
    char b[2048];
    size_t n;
};

/* Appends kind, the decimal n and CRLF. */
static void rb_header(struct rbuf *r, char kind, size_t n)
{
    r->b[r->n++] = kind;
    r->n += u64_dec(r->b + r->n, n);
    r->b[r->n++] = '\r';
    r->b[r->n++] = '\n';
}

static void rb_bulk(struct rbuf *r, const char *s, size_t n)
{
    rb_header(r, '$', n);
    memcpy(r->b + r->n, s, n);
    r->n += n;
    r->b[r->n++] = '\r';
    r->b[r->n++] = '\n';
}

/* rb_command: argv[0..argc) as one RESP array; the total must fit the
 * 2 KiB buffer (keys are at most KEY_CAP bytes). */
static void rb_command(struct rbuf *r, int argc, const char **argv,
                       const size_t *lens)
{
    r->n = 0;
    rb_header(r, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        rb_bulk(r, argv[i], lens[i]);
    }
}

/* EVALSHA sha numkeys args... */
static void rb_evalsha(struct rbuf *r, const char *sha, int numkeys, int argc,
                       const char **argv, const size_t *lens)
{
    const char *all[8];
    size_t all_lens[8];
    char nk = (char)('0' + numkeys);
    all[0] = "EVALSHA";
    all_lens[0] = 7;
    all[1] = sha;
    all_lens[1] = 40;
    all[2] = &nk;
    all_lens[2] = 1;
    for (int i = 0; i < argc && i < 5; i++) {
        all[3 + i] = argv[i];
        all_lens[3 + i] = lens[i];
    }
    rb_command(r, argc + 3, all, all_lens);
}

/* The compare-and-delete of op's key on one node, for a release or a
 * rollback; cb NULL: nobody waits for the answer. */
static int i_send_delete(struct rnode *nd, const struct iop *op, bool publish,
                         redisCallbackFn *cb, void *privdata)
{
    struct rbuf rb;
    if (limit_kind == LIMIT_MINIMAL) {
        const char *argv[2] = {op->key, op->token};
        size_t lens[2] = {op->key_len, TOKEN_LEN};
        rb_evalsha(&rb, nd->sha_del, 1, 2, argv, lens);
    } else {
        /* The daemon's release script; a rollback publishes nothing. */
        bool pub = publish && op->chan != NULL;
        const char *argv[3] = {op->key, op->token, pub ? op->chan : ""};
        size_t lens[3] = {op->key_len, TOKEN_LEN, pub ? op->chan_len : 0};
        rb_evalsha(&rb, nd->sha_rel, 1, 3, argv, lens);
    }
    return redisAsyncFormattedCommand(nd->ac, cb, privdata, rb.b, rb.n);
}

static void i_rollback_cb(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    (void)r;
    (void)privdata;
    inflight_cmds--;
}

/* Removes a failed acquisition's key on the nodes in set, those that may
 * hold it (redlock.c's verdict). */
static void i_rollback(struct iop *op, uint32_t set)
{
    for (int i = 0; i < n_nodes; i++) {
        if ((set & (1u << i)) && nodes[i].up &&
            i_send_delete(&nodes[i], op, false, i_rollback_cb, NULL) ==
                REDIS_OK) {
            inflight_cmds++;
        }
    }
}

/* A round was decided: redlock.c's verdict, the rollback of a lost
 * acquisition, then the caller's callback. */
static void i_decided(struct iop *op)
{
    struct redlock_verdict v;
    if (op->kind == IOP_ACQUIRE) {
        redlock_acquire_verdict(&op->round, false, &v);
        if (v.answer != RL_ANSWER_OK) {
            i_rollback(op, v.rollback);
        }
    } else {
        redlock_other_verdict(RL_OP_RELEASE, &op->round, &v);
    }
    op->done(op, &v);
}

/* What one node's reply says, by the command that was sent: the daemon's
 * classifiers (the SET NX form is the minimal cycle's own). fence and pttl
 * as redlock_classify_acquire sets them. */
static enum redlock_node_result i_classify(const struct iop *op,
                                           const redisReply *reply,
                                           int64_t *fence, int64_t *pttl)
{
    struct replyview v;
    const struct redlock_reply *r = replyview_of(&v, reply);
    if (op->kind == IOP_RELEASE) {
        return redlock_classify_flag(r);
    }
    return redlock_classify_acquire(
        limit_kind == LIMIT_MINIMAL ? RL_FORM_SET_NX : RL_FORM_SCRIPT, r, fence,
        pttl);
}

static void i_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
    struct iop *op = privdata;
    struct rnode *nd = ac->data;
    op->outstanding--;
    inflight_cmds--;
    int64_t fence = 0, pttl = -1;
    enum redlock_node_result res = i_classify(op, r, &fence, &pttl);
    enum redlock_outcome out =
        redlock_round_answer(&op->round, nd->idx, res, fence, pttl, now_us);
    if (out != RL_UNDECIDED && !op->decided) {
        op->decided = true;
        i_decided(op);
    }
    if (op->decided && op->outstanding == 0) {
        iop_put(op);
    }
}

/* Starts op: its command to every connected node, the validity clock from
 * now; a node that is down or refuses the command counts as failed. When
 * not even a quorum could be asked, op->done gets NULL at once. */
static void i_send_all(struct iop *op)
{
    uint32_t down = 0;
    for (int i = 0; i < n_nodes; i++) {
        if (!nodes[i].up) {
            down |= 1u << i;
        }
    }
    op->t_req = now_us();
    redlock_round_start(&op->round, n_nodes, op->ttl_ms, opt.drift, op->t_req,
                        down);
    for (int i = 0; i < n_nodes; i++) {
        if (down & (1u << i)) {
            continue;
        }
        int rc;
        if (op->kind == IOP_RELEASE) {
            rc = i_send_delete(&nodes[i], op, true, i_reply_cb, op);
        } else {
            struct rbuf rb;
            if (limit_kind == LIMIT_MINIMAL) {
                const char *argv[6] = {"SET", op->key, op->token,
                                       "NX",  "PX",    op->ttl};
                size_t lens[6] = {3, op->key_len, TOKEN_LEN, 2, 2, op->ttl_len};
                rb_command(&rb, 6, argv, lens);
            } else {
                const char *argv[5] = {op->key, fence_key, op->token, op->ttl,
                                       "0"};
                size_t lens[5] = {op->key_len, fence_key_len, TOKEN_LEN,
                                  op->ttl_len, 1};
                rb_evalsha(&rb, nodes[i].sha_acq, 2, 5, argv, lens);
            }
            rc = redisAsyncFormattedCommand(nodes[i].ac, i_reply_cb, op, rb.b,
                                            rb.n);
        }
        if (rc == REDIS_OK) {
            op->outstanding++;
            inflight_cmds++;
        } else {
            redlock_round_answer(&op->round, i, RL_FAILED, 0, -1, now_us);
        }
    }
    if (redlock_round_outcome(&op->round) != RL_UNDECIDED) {
        /* No answer can have come yet: the caller hears it now. */
        op->decided = true;
        op->done(op, NULL);
        if (op->outstanding == 0) {
            iop_put(op);
        }
    }
}

/* ---- the bench's in-process clients -------------------------------------- */

/* The error counter of a failed verdict's answer. */
static int answer_err(enum redlock_answer a)
{
    switch (a) {
    case RL_ANSWER_BUSY:
        return ERR_BUSY_IDX;
    case RL_ANSWER_NOT_HELD:
        return ERR_NOT_HELD_IDX;
    case RL_ANSWER_DONE:
        return ERR_DONE_IDX;
    default:
        return ERR_NO_QUORUM_IDX;
    }
}

static void i_start_acquire(struct client *cl, bool new_cycle);
static void i_start_release(struct client *cl);

/* iop_done_fn of the bench's clients: records the answer, then the
 * client's next request. */
static void i_client_done(struct iop *op, const struct redlock_verdict *v)
{
    struct client *cl = op->owner;
    if (R.clients == NULL) {
        return; /* an answer after its run ended (drain timed out) */
    }
    if (v == NULL) {
        /* Retrying at once would only recurse: this client stops. */
        run_record_err(ERR_NO_QUORUM_IDX);
        fprintf(stderr,
                "rlbench: client %d: fewer than a quorum of nodes "
                "connected; stopping it\n",
                cl->idx);
        client_stop(cl);
        return;
    }
    uint64_t t = now_us();
    if (v->answer == RL_ANSWER_OK) {
        if (op->kind == IOP_ACQUIRE) {
            if (R.phase == PH_MEASURE) {
                samples_add(&R.acq, t - cl->t_req);
                R.acq_ok++;
            }
            memcpy(cl->token, op->token, TOKEN_LEN + 1);
            i_start_release(cl);
            return;
        }
        if (R.phase == PH_MEASURE) {
            samples_add(&R.cyc, t - cl->t_cycle);
            R.cycles++;
        }
        R.cycles_all++;
    } else {
        run_record_err(answer_err(v->answer));
    }
    if (run_loading()) {
        i_start_acquire(cl, true);
    } else {
        client_stop(cl);
    }
}

static void i_start_acquire(struct client *cl, bool new_cycle)
{
    uint64_t t = now_us();
    if (new_cycle) {
        cl->t_cycle = t;
    }
    cl->t_req = t;
    cl->st = CS_ACQ;
    i_send_all(iop_new(IOP_ACQUIRE, cl->key, cl->key_len, (uint32_t)opt.ttl_ms,
                       i_client_done, cl));
}

static void i_start_release(struct client *cl)
{
    cl->t_req = now_us();
    cl->st = CS_REL;
    struct iop *op = iop_new(IOP_RELEASE, cl->key, cl->key_len,
                             (uint32_t)opt.ttl_ms, i_client_done, cl);
    memcpy(op->token, cl->token, TOKEN_LEN + 1);
    op->chan = cl->chan;
    op->chan_len = cl->chan_len;
    i_send_all(op);
}

static void i_connect_cb(const redisAsyncContext *ac, int status)
{
    struct rnode *nd = ac->data;
    if (status != REDIS_OK) {
        die("node %d: connect: %s", nd->idx + 1, ac->errstr);
    }
    nd->up = true;
    nodes_connected++;
    if (nodes_connected == n_nodes) {
        event_base_loopbreak(base);
    }
}

static void i_disconnect_cb(const redisAsyncContext *ac, int status)
{
    struct rnode *nd = ac->data;
    (void)status;
    nd->up = false;
    nd->ac = NULL;
}

/* split_addr: a node address as a unix path (returns true, *path set) or
 * host:port (false; host filled, *port set). unix:// and redis:// prefixes
 * are accepted. */
static bool split_addr(const char *addr, const char **path, char *host,
                       size_t host_cap, int *port)
{
    if (strncmp(addr, "unix://", 7) == 0) {
        addr += 7;
    } else if (strncmp(addr, "redis://", 8) == 0) {
        addr += 8;
    }
    if (strchr(addr, '/') != NULL) {
        *path = addr;
        return true;
    }
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || (size_t)(colon - addr) >= host_cap ||
        atoi(colon + 1) <= 0) {
        die("bad node address %s (unix path or host:port)", addr);
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    *port = atoi(colon + 1);
    return false;
}

static redisContext *sync_connect(const char *addr)
{
    struct timeval tv = {5, 0};
    const char *path;
    char host[256];
    int port;
    if (split_addr(addr, &path, host, sizeof(host), &port)) {
        return redisConnectUnixWithTimeout(path, tv);
    }
    return redisConnectWithTimeout(host, port, tv);
}

static void script_load(redisContext *c, const char *src, char out[41], int idx)
{
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", src);
    if (r == NULL || r->type != REDIS_REPLY_STRING || r->len != 40) {
        die("node %d: SCRIPT LOAD failed: %s", idx + 1,
            r != NULL && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
    }
    memcpy(out, r->str, 40);
    out[40] = '\0';
    freeReplyObject(r);
}

static void inproc_setup(void)
{
    if (opt.n_redis < 1) {
        die("--inproc needs --redis ADDR[,ADDR...]");
    }
    if (opt.n_redis > REDLOCK_MAX_NODES) {
        die("at most %d nodes", REDLOCK_MAX_NODES);
    }
    n_nodes = opt.n_redis;
    fence_key_len =
        (size_t)snprintf(fence_key, sizeof(fence_key), "%sfence", opt.prefix);
    for (int i = 0; i < n_nodes; i++) {
        struct rnode *nd = &nodes[i];
        nd->idx = i;
        redisContext *c = sync_connect(opt.redis[i]);
        if (c == NULL || c->err) {
            die("node %d (%s): %s", i + 1, opt.redis[i],
                c ? c->errstr : "out of memory");
        }
        script_load(c, script_source[SCRIPT_ACQUIRE], nd->sha_acq, i);
        script_load(c, script_source[SCRIPT_RELEASE], nd->sha_rel, i);
        script_load(c, MINIMAL_DEL, nd->sha_del, i);
        redisFree(c);
        const char *path;
        char host[256];
        int port;
        redisAsyncContext *ac;
        if (split_addr(opt.redis[i], &path, host, sizeof(host), &port)) {
            ac = redisAsyncConnectUnix(path);
        } else {
            ac = redisAsyncConnect(host, port);
        }
        if (ac == NULL || ac->err) {
            die("node %d: %s", i + 1, ac ? ac->errstr : "out of memory");
        }
        ac->data = nd;
        nd->ac = ac;
        redisLibeventAttach(ac, base);
        redisAsyncSetConnectCallback(ac, i_connect_cb);
        redisAsyncSetDisconnectCallback(ac, i_disconnect_cb);
    }
    event_base_dispatch(base); /* until every node connected */
}

static void inproc_teardown(void)
{
    for (int i = 0; i < n_nodes; i++) {
        if (nodes[i].ac != NULL) {
            redisAsyncFree(nodes[i].ac);
            nodes[i].ac = NULL;
        }
    }
    while (iop_free_list != NULL) {
        struct iop *op = iop_free_list;
        iop_free_list = op->next_free;
        free(op);
    }
}

/* ---- --serve: the floor sidecar ------------------------------------------ */

/* The cheapest correct sidecar an expert could write, to measure the daemon
 * against: the minimal limit's engine above (SET NX PX on every node,
 * decided at quorum with the validity rule, rollback of a lost attempt,
 * one compare-and-delete EVALSHA on every node) served to other processes
 * over a unix stream socket, in the subset of the daemon's NDJSON protocol
 * that rlbench's cycle mode speaks:
 *
 *   {"id":N,"op":"acquire","resource":"r","ttl_ms":T}
 *     -> {"id":N,"ok":true,"lock":"<token>","resource":"r","validity_ms":V}
 *   {"id":N,"op":"release","lock":"<token>"}  -> {"id":N,"ok":true}
 *   {"id":N,"op":"health"} or "ping"           -> {"id":N,"ok":true}
 *   failures: {"id":N,"ok":false,"error":{"code":"busy","message":".."}}
 *
 * Lean, as the per-connection cost is what it measures: a nonblocking
 * listener; per connection an input buffer in which every complete line of
 * a read is handled at once; answers appended to the connection's output
 * buffer and written at the end of the loop turn (one write per connection
 * per turn, however many answers that turn produced); the fields it needs
 * found with memmem, no JSON library.
 *
 * It is a floor, not a product: it trusts its input (rlbench's own
 * requests: no JSON escapes, no validation beyond finding the fields), and
 * it does not renew, wait, fence, reconnect to a node, retry a release
 * (the token is forgotten once its release is sent), or limit anything.
 * A lock whose owner never releases it stays in its table until its ttl
 * has passed (swept every second) and on the nodes until their ttl. It
 * exits on SIGTERM or SIGINT, or after --serve-max-s seconds, and unlinks
 * its socket. */

/* A lock the floor handed out, found by its token at release. */
struct held {
    struct util_hnode node; /* in S_.held, keyed by token */
    struct held *next_free;
    char token[TOKEN_LEN];
    uint64_t expires_us; /* the lock's ttl has passed by then */
    size_t key_len;
    char key[KEY_CAP];
};

static struct {
    const char *path;
    int lfd;
    struct event *accept_ev, *sig_int, *sig_term, *stop_ev, *sweep_ev;
    struct conn *conns; /* every open connection */
    int n_conns;
    size_t prefix_len; /* of a key, before the resource */
    bool stopping;     /* teardown: rounds still in flight answer nobody */
    struct util_htable held; /* the won locks, by token */
    struct held *free_held;
} S_;

/* held_put: remembers the lock of a won acquisition. */
static void held_put(const struct iop *op)
{
    struct held *h = S_.free_held;
    if (h != NULL) {
        S_.free_held = h->next_free;
    } else {
        h = xmalloc(sizeof(*h));
    }
    memcpy(h->token, op->token, TOKEN_LEN);
    h->expires_us = op->t_req + (uint64_t)op->ttl_ms * 1000u;
    memcpy(h->key, op->key, op->key_len);
    h->key_len = op->key_len;
    util_htable_add(&S_.held, &h->node, h->token, TOKEN_LEN);
}

/* held_take: the lock of token, out of the table (the caller gives it
 * back with held_free), or NULL. */
static struct held *held_take(const char *token)
{
    struct util_hnode *n = util_htable_find(&S_.held, token, TOKEN_LEN);
    if (n == NULL) {
        return NULL;
    }
    util_htable_remove(&S_.held, n);
    return UTIL_CONTAINER_OF(n, struct held, node);
}

static void held_free(struct held *h)
{
    h->next_free = S_.free_held;
    S_.free_held = h;
}

/* Once a second: locks whose ttl has passed leave the table. */
static void s_sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    uint64_t t = now_us();
    struct util_hnode *n = util_htable_first(&S_.held);
    while (n != NULL) {
        struct util_hnode *next = util_htable_next(&S_.held, n);
        struct held *h = UTIL_CONTAINER_OF(n, struct held, node);
        if (h->expires_us <= t) {
            util_htable_remove(&S_.held, n);
            held_free(h);
        }
        n = next;
    }
}

static void s_flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct conn *c = arg;
    c->flush_on = false;
    conn_flush(c);
}

/* Queues bytes for c; they go out at the end of this loop turn, with every
 * other answer the turn produces for c. */
static void s_out(struct conn *c, const char *s, size_t n)
{
    conn_append(c, s, n);
    if (!c->flush_on) {
        c->flush_on = true;
        event_active(c->flush_ev, EV_WRITE, 1);
    }
}

static void s_free_conn(struct conn *c)
{
    if (c->prev_s != NULL) {
        c->prev_s->next_s = c->next_s;
    } else {
        S_.conns = c->next_s;
    }
    if (c->next_s != NULL) {
        c->next_s->prev_s = c->prev_s;
    }
    S_.n_conns--;
    conn_close(c);
}

/* The peer closed (or a write failed): the connection goes once no round
 * of it is in flight. */
static void s_conn_dead(struct conn *c)
{
    c->closing = true;
    if (c->inflight == 0) {
        s_free_conn(c);
    }
}

/* Appends {"id":<id>, (or {) to an answer. */
static size_t s_open(char *b, const char *id, size_t id_len)
{
    if (id_len == 0) {
        b[0] = '{';
        return 1;
    }
    memcpy(b, "{\"id\":", 6);
    memcpy(b + 6, id, id_len);
    b[6 + id_len] = ',';
    return 7 + id_len;
}

static void s_fail(struct conn *c, const char *id, size_t id_len,
                   const char *code, const char *msg)
{
    char b[512];
    size_t n = s_open(b, id, id_len);
    n += (size_t)snprintf(b + n, sizeof(b) - n,
                          "\"ok\":false,\"error\":{\"code\":\"%s\","
                          "\"message\":\"%s\"}}\n",
                          code, msg);
    s_out(c, b, n < sizeof(b) ? n : sizeof(b) - 1);
}

/* iop_done_fn of the floor: the answer to the request's connection. */
static void s_op_done(struct iop *op, const struct redlock_verdict *v)
{
    struct conn *c = op->owner;
    if (S_.stopping) {
        return;
    }
    c->inflight--;
    if (c->closing) {
        /* Nobody to answer; a won lock expires with its ttl. */
        if (c->inflight == 0) {
            s_free_conn(c);
        }
        return;
    }
    if (v == NULL) {
        s_fail(c, op->id, op->id_len, "no_quorum",
               "fewer than a quorum of nodes are connected");
        return;
    }
    switch (v->answer) {
    case RL_ANSWER_OK:
        break;
    case RL_ANSWER_BUSY:
        s_fail(c, op->id, op->id_len, "busy",
               "the resource is held by another owner");
        return;
    case RL_ANSWER_DONE:
        s_fail(c, op->id, op->id_len, "done", "the resource was completed");
        return;
    case RL_ANSWER_NOT_HELD:
        s_fail(c, op->id, op->id_len, "not_held", "the lock is not held");
        return;
    default:
        s_fail(c, op->id, op->id_len, "no_quorum",
               "too few nodes answered in time");
        return;
    }
    char b[KEY_CAP + 160];
    size_t n = s_open(b, op->id, op->id_len);
    if (op->kind == IOP_RELEASE) {
        memcpy(b + n, "\"ok\":true}\n", 11);
        s_out(c, b, n + 11);
        return;
    }
    held_put(op);
    static const char a1[] = "\"ok\":true,\"lock\":\"";
    static const char a2[] = "\",\"resource\":\"";
    static const char a3[] = "\",\"validity_ms\":";
    memcpy(b + n, a1, sizeof(a1) - 1);
    n += sizeof(a1) - 1;
    memcpy(b + n, op->token, TOKEN_LEN);
    n += TOKEN_LEN;
    memcpy(b + n, a2, sizeof(a2) - 1);
    n += sizeof(a2) - 1;
    memcpy(b + n, op->key + S_.prefix_len, op->key_len - S_.prefix_len);
    n += op->key_len - S_.prefix_len;
    memcpy(b + n, a3, sizeof(a3) - 1);
    n += sizeof(a3) - 1;
    n += u64_dec(b + n, v->validity_ms > 0 ? (uint64_t)v->validity_ms : 0);
    b[n++] = '}';
    b[n++] = '\n';
    s_out(c, b, n);
}

/* The raw JSON value of "id" (a number, or a string without escapes). */
static bool s_find_id(const char *l, size_t n, const char **id, size_t *len)
{
    const char *p = memmem(l, n, "\"id\":", 5);
    if (p == NULL) {
        *len = 0;
        return true;
    }
    p += 5;
    const char *end = l + n, *q = p;
    if (q < end && *q == '"') {
        q = memchr(q + 1, '"', (size_t)(end - q - 1));
        if (q == NULL) {
            return false;
        }
        q++;
    } else {
        while (q < end && *q != ',' && *q != '}' && *q != ' ') {
            q++;
        }
    }
    *id = p;
    *len = (size_t)(q - p);
    return *len > 0;
}

/* One request line of a client. */
static void s_line(struct conn *c, const char *l, size_t n)
{
    const char *id = NULL, *s;
    size_t id_len = 0, sl;
    if (c->closing) {
        return;
    }
    if (!s_find_id(l, n, &id, &id_len) || id_len >= ID_CAP) {
        s_fail(c, NULL, 0, "bad_request", "id: a number or a plain string");
        return;
    }
    if (!find_str(l, n, "\"op\":", &s, &sl)) {
        s_fail(c, id, id_len, "bad_request", "op: required");
        return;
    }
    struct iop *op;
    if (sl == 7 && memcmp(s, "acquire", 7) == 0) {
        const char *res;
        size_t rl;
        long long ttl = 30000;
        find_int(l, n, "\"ttl_ms\":", &ttl);
        if (!find_str(l, n, "\"resource\":", &res, &rl) || rl == 0 ||
            rl > 512 || memchr(res, '\\', rl) != NULL) {
            s_fail(c, id, id_len, "bad_request",
                   "resource: 1..512 bytes, no escapes (the floor)");
            return;
        }
        if (ttl < 10 || ttl > 86400000) {
            s_fail(c, id, id_len, "bad_request", "ttl_ms: 10..86400000");
            return;
        }
        if (memmem(l, n, "\"wait_ms\":", 10) != NULL ||
            memmem(l, n, "\"fence\":true", 12) != NULL ||
            memmem(l, n, "\"renew\":true", 12) != NULL ||
            memmem(l, n, "\"permits\":", 10) != NULL) {
            s_fail(c, id, id_len, "bad_request",
                   "the floor does not wait, fence, renew or count permits");
            return;
        }
        char key[KEY_CAP];
        memcpy(key, opt.prefix, S_.prefix_len - 5);
        memcpy(key + S_.prefix_len - 5, "lock:", 5);
        memcpy(key + S_.prefix_len, res, rl);
        op = iop_new(IOP_ACQUIRE, key, S_.prefix_len + rl, (uint32_t)ttl,
                     s_op_done, c);
    } else if (sl == 7 && memcmp(s, "release", 7) == 0) {
        const char *tok;
        size_t tl;
        if (!find_str(l, n, "\"lock\":", &tok, &tl) || tl != TOKEN_LEN) {
            s_fail(c, id, id_len, "bad_request",
                   "lock: must be a 32-character hex token");
            return;
        }
        struct held *h = held_take(tok);
        if (h == NULL) {
            s_fail(c, id, id_len, "not_held", "the lock is not held");
            return;
        }
        op = iop_new(IOP_RELEASE, h->key, h->key_len, (uint32_t)opt.ttl_ms,
                     s_op_done, c);
        memcpy(op->token, h->token, TOKEN_LEN);
        op->token[TOKEN_LEN] = '\0';
        held_free(h);
    } else if ((sl == 6 && memcmp(s, "health", 6) == 0) ||
               (sl == 4 && memcmp(s, "ping", 4) == 0)) {
        char b[64];
        size_t k = s_open(b, id, id_len);
        int up = 0;
        for (int i = 0; i < n_nodes; i++) {
            up += nodes[i].up;
        }
        if (up < redlock_quorum(n_nodes)) {
            s_fail(c, id, id_len, "no_quorum",
                   "fewer than a quorum of nodes are connected");
            return;
        }
        memcpy(b + k, "\"ok\":true}\n", 11);
        s_out(c, b, k + 11);
        return;
    } else {
        s_fail(c, id, id_len, "bad_request",
               "op: the floor serves acquire, release, health and ping");
        return;
    }
    memcpy(op->id, id, id_len);
    op->id_len = id_len;
    c->inflight++;
    i_send_all(op);
}

static void s_accept_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    (void)arg;
    for (;;) {
        int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                fprintf(stderr, "rlbench --serve: accept: %s\n",
                        strerror(errno));
            }
            return;
        }
        struct conn *c = conn_wrap(cfd, S_.n_conns, s_line);
        c->on_dead = s_conn_dead;
        c->flush_ev = event_new(base, -1, 0, s_flush_cb, c);
        c->next_s = S_.conns;
        if (S_.conns != NULL) {
            S_.conns->prev_s = c;
        }
        S_.conns = c;
        S_.n_conns++;
    }
}

static void s_stop_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    event_base_loopbreak(base);
}

/* s_listen: the unix stream socket at path, nonblocking; a stale socket
 * file is replaced, a live one (something answers there) is an error. */
static int s_listen(const char *path)
{
    struct sockaddr_un sa;
    unix_addr(&sa, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        die("--serve: socket: %s", strerror(errno));
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (errno != EADDRINUSE) {
            die("--serve: bind %s: %s", path, strerror(errno));
        }
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 &&
            connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            die("--serve: %s is in use by a live server", path);
        }
        if (probe >= 0) {
            close(probe);
        }
        unlink(path);
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            die("--serve: bind %s: %s", path, strerror(errno));
        }
    }
    if (listen(fd, 4096) != 0) {
        die("--serve: listen %s: %s", path, strerror(errno));
    }
    return fd;
}

/* mode_serve: runs the floor until SIGTERM, SIGINT or max_s seconds. */
static void mode_serve(const char *path, double max_s)
{
    if (limit_kind != LIMIT_MINIMAL) {
        die("--serve runs the minimal limit's engine only");
    }
    size_t plen = strlen(opt.prefix);
    if (plen > 64) {
        die("--prefix: at most 64 bytes");
    }
    S_.prefix_len = plen + 5;
    S_.path = path;
    /* Held locks are at most the clients' (plus the abandoned, until their
     * ttl passes): 4096 chains keep them short. */
    if (util_htable_init(&S_.held, 4096) < 0) {
        die("rlbench --serve: out of memory");
    }
    inproc_setup();
    S_.lfd = s_listen(path);
    S_.accept_ev =
        event_new(base, S_.lfd, EV_READ | EV_PERSIST, s_accept_cb, NULL);
    event_add(S_.accept_ev, NULL);
    S_.sig_int = evsignal_new(base, SIGINT, s_stop_cb, NULL);
    S_.sig_term = evsignal_new(base, SIGTERM, s_stop_cb, NULL);
    event_add(S_.sig_int, NULL);
    event_add(S_.sig_term, NULL);
    S_.stop_ev = evtimer_new(base, s_stop_cb, NULL);
    struct timeval tv = {(time_t)max_s,
                         (suseconds_t)((max_s - floor(max_s)) * 1e6)};
    evtimer_add(S_.stop_ev, &tv);
    S_.sweep_ev = event_new(base, -1, EV_PERSIST, s_sweep_cb, NULL);
    struct timeval sec = {1, 0};
    evtimer_add(S_.sweep_ev, &sec);
    fprintf(stderr,
            "rlbench --serve: the floor sidecar on %s, %d node(s), "
            "at most %.0f s\n",
            path, n_nodes, max_s);
    event_base_dispatch(base);

    /* Teardown in reverse: no new connections, then the clients, then the
     * nodes (inproc_teardown; rounds still in flight are dropped, their
     * locks expire with their ttl). */
    S_.stopping = true;
    event_free(S_.accept_ev);
    close(S_.lfd);
    unlink(path);
    while (S_.conns != NULL) {
        S_.conns->inflight = 0;
        s_free_conn(S_.conns);
    }
    event_free(S_.sig_int);
    event_free(S_.sig_term);
    event_free(S_.stop_ev);
    event_free(S_.sweep_ev);
    struct util_hnode *hn = util_htable_first(&S_.held);
    while (hn != NULL) {
        struct util_hnode *next = util_htable_next(&S_.held, hn);
        free(UTIL_CONTAINER_OF(hn, struct held, node));
        hn = next;
    }
    util_htable_free(&S_.held);
    while (S_.free_held != NULL) {
        struct held *h = S_.free_held;
        S_.free_held = h->next_free;
        free(h);
    }
    fprintf(stderr, "rlbench --serve: stopped\n");
}

/* ---- Redis work per cycle, from the nodes' INFO ------------------------- */

/* Each run's Redis work is counted whole, from idle nodes to idle nodes:
 * CONFIG RESETSTAT and INFO cpu on every node before the run's first
 * request, INFO cpu and INFO commandstats after its last cycle finished and
 * the nodes went idle again (stats_settle), divided by every cycle the run
 * completed (warmup, measured interval and drain). Reading at the edges of
 * the measured interval instead would miss work: a round is answered at
 * quorum, so the slowest nodes may still have a backlog of the cycles
 * already counted (seen here: 3.9 SETs per cycle on five nodes instead of
 * 5). The readings use blocking connections of our own.
 *
 * Commandstats count every command a node ran, the calls a script makes
 * inside it too (and a script's usec includes theirs); the bench's own
 * CONFIG and INFO are left out of the sums. used_cpu_sys + used_cpu_user is
 * the whole redis-server process, so it is the fairer price of the Redis
 * work. */

static redisContext *stat_ctx[MAX_NODES];
static int n_stat;
static bool stats_off; /* --no-redis-stats */
static double stat_cpu0[MAX_NODES];
static bool stat_begun;
static bool stat_settled;

/* stats_open: one blocking connection per --redis node; dies when one
 * cannot be made (the numbers would be wrong without it). */
static void stats_open(void)
{
    if (stats_off) {
        return;
    }
    for (int i = 0; i < opt.n_redis; i++) {
        redisContext *c = sync_connect(opt.redis[i]);
        if (c == NULL || c->err) {
            die("node %d (%s): %s (--no-redis-stats runs without INFO)", i + 1,
                opt.redis[i], c ? c->errstr : "out of memory");
        }
        stat_ctx[n_stat++] = c;
    }
}

static void stats_close(void)
{
    for (int i = 0; i < n_stat; i++) {
        redisFree(stat_ctx[i]);
    }
    n_stat = 0;
}

/* info_field: the number after "name:" in an INFO reply, or -1. */
static double info_field(const char *info, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = info; p != NULL && *p != '\0';) {
        if (strncmp(p, name, nl) == 0 && p[nl] == ':') {
            return strtod(p + nl + 1, NULL);
        }
        p = strchr(p, '\n');
        if (p != NULL) {
            p++;
        }
    }
    return -1;
}

/* node_cpu_s: used_cpu_sys + used_cpu_user of node i, or -1. */
static double node_cpu_s(int i)
{
    redisReply *r = redisCommand(stat_ctx[i], "INFO cpu");
    double v = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        double sys = info_field(r->str, "used_cpu_sys");
        double user = info_field(r->str, "used_cpu_user");
        if (sys >= 0 && user >= 0) {
            v = sys + user;
        }
    }
    if (r != NULL) {
        freeReplyObject(r);
    }
    return v;
}

/* stats_begin: zeroes the nodes' commandstats and reads their CPU. */
static void stats_begin(void)
{
    stat_begun = n_stat > 0;
    for (int i = 0; i < n_stat; i++) {
        redisReply *r = redisCommand(stat_ctx[i], "CONFIG RESETSTAT");
        if (r == NULL || r->type != REDIS_REPLY_STATUS) {
            fprintf(stderr, "rlbench: node %d: CONFIG RESETSTAT failed: %s\n",
                    i + 1,
                    r != NULL && r->type == REDIS_REPLY_ERROR
                        ? r->str
                        : stat_ctx[i]->errstr);
            stat_begun = false;
        }
        if (r != NULL) {
            freeReplyObject(r);
        }
        stat_cpu0[i] = node_cpu_s(i);
        if (stat_cpu0[i] < 0) {
            stat_begun = false;
        }
    }
}

static void work_add_cmd(struct rwork *w, const char *name, size_t len,
                         long long calls)
{
    for (int i = 0; i < w->n_cmd; i++) {
        if (strlen(w->cmd[i].name) == len &&
            memcmp(w->cmd[i].name, name, len) == 0) {
            w->cmd[i].calls += calls;
            return;
        }
    }
    if (w->n_cmd < MAX_CMDS && len < sizeof(w->cmd[0].name)) {
        memcpy(w->cmd[w->n_cmd].name, name, len);
        w->cmd[w->n_cmd].name[len] = '\0';
        w->cmd[w->n_cmd].calls = calls;
        w->n_cmd++;
    }
}

/* Adds the cmdstat_* lines of one INFO commandstats reply to w. */
static void work_parse(struct rwork *w, const char *info)
{
    for (const char *p = info; p != NULL && *p != '\0';) {
        if (strncmp(p, "cmdstat_", 8) == 0) {
            const char *name = p + 8;
            const char *colon = strchr(name, ':');
            const char *calls = colon ? strstr(colon, "calls=") : NULL;
            const char *usec = colon ? strstr(colon, "usec=") : NULL;
            size_t len = colon ? (size_t)(colon - name) : 0;
            bool ours = (len >= 6 && strncmp(name, "config", 6) == 0) ||
                        (len == 4 && strncmp(name, "info", 4) == 0);
            if (calls != NULL && usec != NULL && !ours) {
                long long n = strtoll(calls + 6, NULL, 10);
                w->calls += n;
                w->usec += strtoll(usec + 5, NULL, 10);
                work_add_cmd(w, name, len, n);
            }
        }
        p = strchr(p, '\n');
        if (p != NULL) {
            p++;
        }
    }
}

/* stats_end: the Redis work since stats_begin, summed over the nodes. */
static void stats_end(struct rwork *w)
{
    memset(w, 0, sizeof(*w));
    w->ok = stat_begun;
    w->settled = stat_settled;
    stat_settled = false;
    for (int i = 0; i < n_stat && w->ok; i++) {
        double cpu1 = node_cpu_s(i);
        redisReply *r = redisCommand(stat_ctx[i], "INFO commandstats");
        if (cpu1 < 0 || r == NULL || r->type != REDIS_REPLY_STRING) {
            fprintf(stderr, "rlbench: node %d: INFO failed\n", i + 1);
            w->ok = false;
        } else {
            w->cpu_s += cpu1 - stat_cpu0[i];
            work_parse(w, r->str);
        }
        if (r != NULL) {
            freeReplyObject(r);
        }
    }
    stat_begun = false;
}

/* Total calls of node i (the bench's CONFIG and INFO left out), or -1. */
static long long node_calls(int i)
{
    redisReply *r = redisCommand(stat_ctx[i], "INFO commandstats");
    long long n = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        struct rwork w;
        memset(&w, 0, sizeof(w));
        work_parse(&w, r->str);
        n = w.calls;
    }
    if (r != NULL) {
        freeReplyObject(r);
    }
    return n;
}

#define SETTLE_STABLE 3 /* equal readings in a row */
#define SETTLE_TICK_US 50000
#define SETTLE_MAX_S 10

static struct {
    struct event *ev;
    long long last;
    int stable;
    uint64_t until;
    bool settled;
} settle;

static void settle_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    long long sum = 0;
    for (int i = 0; i < n_stat; i++) {
        long long n = node_calls(i);
        if (n < 0) {
            sum = -1;
            break;
        }
        sum += n;
    }
    if (sum >= 0 && sum == settle.last && inflight_cmds == 0) {
        settle.stable++;
    } else {
        settle.stable = 0;
    }
    settle.last = sum;
    if (settle.stable >= SETTLE_STABLE - 1) {
        settle.settled = true;
        event_base_loopbreak(base);
        return;
    }
    if (now_us() >= settle.until) {
        fprintf(stderr,
                "rlbench: the nodes were still busy %d s after the "
                "run; reading their work anyway\n",
                SETTLE_MAX_S);
        event_base_loopbreak(base);
        return;
    }
    struct timeval tv = {0, SETTLE_TICK_US};
    evtimer_add(settle.ev, &tv);
}

/* stats_settle: runs the event loop (so that queued commands still go out)
 * until the in-process limit has no command unanswered and the nodes' call
 * counts stayed the same over SETTLE_STABLE readings SETTLE_TICK_US apart,
 * or SETTLE_MAX_S passed; the daemon's backlog to its nodes shows only in
 * those counts. */
static void stats_settle(void)
{
    if (!stat_begun) {
        return;
    }
    memset(&settle, 0, sizeof(settle));
    settle.last = -2;
    settle.until = now_us() + SETTLE_MAX_S * 1000000u;
    settle.ev = evtimer_new(base, settle_cb, NULL);
    struct timeval tv = {0, 0};
    evtimer_add(settle.ev, &tv);
    event_base_dispatch(base);
    event_free(settle.ev);
    stat_settled = settle.settled;
}

static int cmd_cmp(const void *a, const void *b)
{
    const struct cmd_count *x = a, *y = b;
    if (x->calls != y->calls) {
        return x->calls > y->calls ? -1 : 1;
    }
    return strcmp(x->name, y->name);
}

/* work_mix: "set:5.00,evalsha:5.00,..." calls per cycle by command, most
 * first; "-" when nothing was counted. */
static void work_mix(struct rwork *w, uint64_t cycles, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    qsort(w->cmd, (size_t)w->n_cmd, sizeof(w->cmd[0]), cmd_cmp);
    for (int i = 0; i < w->n_cmd && cycles > 0 && n + 64 < cap; i++) {
        n += (size_t)snprintf(out + n, cap - n, "%s%s:%.2f", n ? "," : "",
                              w->cmd[i].name,
                              (double)w->cmd[i].calls / (double)cycles);
    }
    if (n == 0) {
        snprintf(out, cap, "-");
    }
}

/* ---- one load run --------------------------------------------------------- */

static const char *mode_name(void)
{
    switch (opt.mode) {
    case MODE_CYCLE:
        return "cycle";
    case MODE_CONTENDED:
        return "contended";
    case MODE_RENEW:
        return "renew";
    case MODE_CONNECTIONS:
        return "connections";
    }
    return "?";
}

static const char *impl_name(void)
{
    if (opt.impl != NULL) {
        return opt.impl;
    }
    if (!opt.inproc) {
        return "daemon";
    }
    return limit_kind == LIMIT_SCRIPTS ? "limit-scripts" : "limit";
}

static void run_end(void)
{
    event_base_loopbreak(base);
}

static void run_maybe_finish(void)
{
    if (R.phase == PH_DRAIN && R.active == 0) {
        run_end();
    }
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    fprintf(stderr, "rlbench: drain timed out with %d client(s) still "
                    "waiting for an answer\n",
            R.active);
    run_end();
}

static void phase_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    if (R.phase == PH_WARMUP) {
        R.phase = PH_MEASURE;
        R.t_measure = now_us();
        cpu_snap(&R.cpu0);
        struct timeval tv = {(time_t)opt.duration,
                             (suseconds_t)((opt.duration -
                                            floor(opt.duration)) *
                                           1e6)};
        evtimer_add(R.phase_ev, &tv);
        return;
    }
    if (R.phase == PH_MEASURE) {
        R.phase = PH_DRAIN;
        R.t_end = now_us();
        cpu_snap(&R.cpu1);
        struct timeval tv = {(time_t)opt.drain,
                             (suseconds_t)((opt.drain - floor(opt.drain)) *
                                           1e6)};
        evtimer_add(R.deadline_ev, &tv);
        /* Clients holding (contended) release now and stop after. */
        run_maybe_finish();
    }
}

static void print_result(int idle)
{
    samples_sort(&R.acq);
    samples_sort(&R.cyc);
    double secs = (double)(R.t_end - R.t_measure) / 1e6;
    double cps = secs > 0 ? (double)R.cycles / secs : 0;
    uint64_t dt = R.cpu1.t_us - R.cpu0.t_us;
    double dcpu = ticks_pct(R.cpu0.daemon_ticks, R.cpu1.daemon_ticks, dt);
    double rcpu = ticks_pct(R.cpu0.redis_ticks, R.cpu1.redis_ticks, dt);
    double bcpu = dt ? (double)(R.cpu1.self_us - R.cpu0.self_us) /
                           (double)dt * 100.0
                     : -1;
    double mcpu = machine_pct(&R.cpu0, &R.cpu1);
    long rss = opt.daemon_pid > 0 && !opt.inproc ? proc_rss_kb(opt.daemon_pid)
                                                 : -1;
    char errs[512];
    size_t el = 0;
    uint64_t nerr = 0;
    errs[0] = '\0';
    for (size_t i = 0; i < N_ERR; i++) {
        if (R.errs[i] > 0) {
            el += (size_t)snprintf(errs + el, sizeof(errs) - el, "%s%s:%" PRIu64,
                                   el ? "," : "", err_codes[i], R.errs[i]);
            nerr += R.errs[i];
        }
    }
    if (opt.inproc) {
        printf("\n== %s %s: %d client(s), %d node(s) in process, %.1f s ==\n",
               mode_name(), impl_name(), R.conc, n_nodes, secs);
    } else {
        printf("\n== %s %s: %d client(s) over %d connection(s), %.1f s ==\n",
               mode_name(), impl_name(), R.conc, R.n_conns, secs);
    }
    printf("  cycles/s        %10.0f   (%" PRIu64 " cycles)\n", cps, R.cycles);
    printf("  acquire  us     p50 %ld  p99 %ld  p99.9 %ld  mean %.0f\n",
           pct(&R.acq, 50), pct(&R.acq, 99), pct(&R.acq, 99.9),
           samples_mean(&R.acq));
    printf("  cycle    us     p50 %ld  p99 %ld  p99.9 %ld\n", pct(&R.cyc, 50),
           pct(&R.cyc, 99), pct(&R.cyc, 99.9));
    printf("  errors          %s\n", nerr ? errs : "none");
    printf("  cpu %%           daemon %.0f  redis(all) %.0f  bench %.0f  "
           "machine %.0f of %ld00\n",
           dcpu, rcpu, bcpu, mcpu, sysconf(_SC_NPROCESSORS_ONLN));
    if (rss >= 0) {
        printf("  daemon rss      %ld kB\n", rss);
    }
    /* Redis work per completed cycle of the whole run, summed over the
     * nodes; -1 unknown. */
    double cyc = (double)R.cycles_all;
    double w_cmds = R.work.ok && cyc > 0 ? (double)R.work.calls / cyc : -1;
    double w_cmd_us = R.work.ok && cyc > 0 ? (double)R.work.usec / cyc : -1;
    double w_cpu_us = R.work.ok && cyc > 0 ? R.work.cpu_s * 1e6 / cyc : -1;
    char mix[1024];
    work_mix(&R.work, R.work.ok ? R.cycles_all : 0, mix, sizeof(mix));
    if (R.work.ok) {
        printf("  redis work      %.2f commands/cycle over %d node(s) (%s), "
               "%.1f us/cycle in commands, %.1f us/cycle redis cpu\n",
               w_cmds, n_stat, mix, w_cmd_us, w_cpu_us);
    }
    printf("RESULT mode=%s impl=%s conc=%d conns=%d nodes=%d secs=%.2f "
           "cycles=%" PRIu64 " cps=%.0f p50_us=%ld p99_us=%ld p999_us=%ld "
           "cyc_p50_us=%ld cyc_p99_us=%ld cyc_p999_us=%ld errors=%" PRIu64
           " errs=%s daemon_cpu=%.1f redis_cpu=%.1f bench_cpu=%.1f "
           "machine_cpu=%.1f rss_kb=%ld idle=%d held=%d stat_nodes=%d "
           "redis_cmds=%lld redis_cmd_us=%lld redis_cpu_us=%.0f "
           "cmds_per_cycle=%.3f cmd_us_per_cycle=%.2f cpu_us_per_cycle=%.2f "
           "cmd_mix=%s work_cycles=%" PRIu64 " settled=%d%s%s\n",
           mode_name(), impl_name(), R.conc, opt.inproc ? 0 : R.n_conns,
           opt.inproc ? n_nodes : opt.n_redis, secs, R.cycles, cps,
           pct(&R.acq, 50), pct(&R.acq, 99), pct(&R.acq, 99.9),
           pct(&R.cyc, 50), pct(&R.cyc, 99), pct(&R.cyc, 99.9), nerr,
           nerr ? errs : "-", dcpu, rcpu, bcpu, mcpu, rss, idle, opt.held,
           R.work.ok ? n_stat : 0, R.work.ok ? R.work.calls : -1,
           R.work.ok ? R.work.usec : -1, R.work.ok ? R.work.cpu_s * 1e6 : -1,
           w_cmds, w_cmd_us, w_cpu_us, mix, R.cycles_all, R.work.settled,
           opt.tag ? " tag=" : "",
           opt.tag ? opt.tag : "");
    fflush(stdout);
}

static void run_load(int conc, int idle)
{
    memset(&R, 0, sizeof(R));
    R.conc = conc;
    R.run_no = ++run_counter;
    R.n_clients = conc;
    R.clients = xcalloc((size_t)conc, sizeof(*R.clients));
    R.phase_ev = evtimer_new(base, phase_cb, NULL);
    R.deadline_ev = evtimer_new(base, deadline_cb, NULL);
    int pid = (int)getpid();

    if (!opt.inproc) {
        R.n_conns = opt.conns > 0 && opt.conns < conc ? opt.conns : conc;
        R.conns = xcalloc((size_t)R.n_conns, sizeof(*R.conns));
        for (int i = 0; i < R.n_conns; i++) {
            R.conns[i] = conn_open(i, d_client_line);
            if (R.conns[i] == NULL) {
                die("could not open connection %d of %d", i + 1, R.n_conns);
            }
        }
    }
    for (int i = 0; i < conc; i++) {
        struct client *cl = &R.clients[i];
        cl->idx = i;
        cl->st = CS_STOPPED;
        if (opt.mode == MODE_CONTENDED) {
            cl->res_len = (size_t)snprintf(cl->resource, sizeof(cl->resource),
                                           "bc:%d:%u:%d", pid, R.run_no,
                                           i % opt.resources);
        } else {
            cl->res_len = (size_t)snprintf(cl->resource, sizeof(cl->resource),
                                           "b%s:%d:%u:%d",
                                           opt.inproc ? "i" : "d", pid,
                                           R.run_no, i);
        }
        cl->key_len = (size_t)snprintf(cl->key, sizeof(cl->key), "%slock:%s",
                                       opt.prefix, cl->resource);
        cl->chan_len = (size_t)snprintf(cl->chan, sizeof(cl->chan),
                                        "%swake:%s", opt.prefix, cl->resource);
        cl->hold_ev = evtimer_new(base, hold_cb, cl);
        if (!opt.inproc) {
            cl->conn = R.conns[i % R.n_conns];
            d_build_lines(cl);
        }
    }

    stats_begin();
    R.t_start = now_us();
    if (opt.warmup > 0) {
        R.phase = PH_WARMUP;
        struct timeval tv = {(time_t)opt.warmup,
                             (suseconds_t)((opt.warmup - floor(opt.warmup)) *
                                           1e6)};
        evtimer_add(R.phase_ev, &tv);
    } else {
        R.phase = PH_WARMUP;
        struct timeval tv = {0, 0};
        evtimer_add(R.phase_ev, &tv);
    }
    R.active = conc;
    for (int i = 0; i < conc; i++) {
        if (opt.inproc) {
            i_start_acquire(&R.clients[i], true);
        } else {
            d_send_acquire(&R.clients[i], true);
        }
    }
    for (int i = 0; i < R.n_conns; i++) {
        conn_flush(R.conns[i]);
    }
    event_base_dispatch(base);
    /* No phase or drain deadline may fire while the nodes settle. */
    event_del(R.phase_ev);
    event_del(R.deadline_ev);
    stats_settle();
    stats_end(&R.work);

    print_result(idle);

    for (int i = 0; i < R.n_conns; i++) {
        conn_close(R.conns[i]);
    }
    for (int i = 0; i < conc; i++) {
        event_free(R.clients[i].hold_ev);
    }
    event_free(R.phase_ev);
    event_free(R.deadline_ev);
    free(R.conns);
    free(R.clients);
    R.clients = NULL;
    R.conns = NULL;
    free(R.acq.v);
    free(R.cyc.v);
    if (opt.inproc) {
        /* Let late node answers of the last rounds come in. */
        struct timeval tv = {0, 100000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    } else {
        /* Give the daemon a moment to process the closes. */
        usleep(200000);
    }
}

/* ---- bulk phases: many locks over a few connections --------------------- */

struct bulk {
    struct conn **conns;
    int n_conns;
    size_t total;          /* requests to send */
    size_t sent, answered;
    size_t ok;
    uint64_t errs[N_ERR];
    uint64_t events;
    char (*tokens)[TOKEN_LEN + 1]; /* per index */
    bool release;          /* this phase releases tokens[] */
    bool renew;
    int ttl_ms;
    const char *res_prefix;
    bool done;
    struct event *deadline;
    struct samples lat;
    uint64_t *t_sent;      /* per index */
    double rate;           /* requests per second, 0: as fast as allowed */
    uint64_t t0;
    size_t allowed;        /* sends allowed so far by the rate */
    struct event *pace;
};

static struct bulk B;

static void bulk_send_more(struct conn *c)
{
    char buf[256];
    size_t limit = B.rate > 0 ? B.allowed : B.total;
    /* Connection k of n sends indices k, k + n, ...: in every phase the
     * same ones, so each lock is released through the session that took
     * it, as a bot would (through another, its owner gets a lost event). */
    while (c->inflight < opt.window && B.sent < limit && c->next < B.total) {
        size_t i = c->next;
        c->next += (size_t)B.n_conns;
        B.sent++;
        int n;
        if (B.release) {
            if (B.tokens[i][0] == '\0') {
                B.answered++;
                continue;
            }
            n = snprintf(buf, sizeof(buf),
                         "{\"id\":%zu,\"op\":\"release\",\"lock\":\"%s\"}\n",
                         i, B.tokens[i]);
        } else if (B.ttl_ms == 0) {
            n = snprintf(buf, sizeof(buf), "{\"id\":%zu,\"op\":\"ping\"}\n", i);
        } else {
            n = snprintf(buf, sizeof(buf),
                         "{\"id\":%zu,\"op\":\"acquire\",\"resource\":\"%s:%zu\","
                         "\"ttl_ms\":%d%s}\n",
                         i, B.res_prefix, i, B.ttl_ms,
                         B.renew ? ",\"renew\":true" : "");
        }
        B.t_sent[i] = now_us();
        conn_append(c, buf, (size_t)n);
        c->inflight++;
    }
    if (B.answered >= B.total && !B.done) {
        B.done = true;
        event_base_loopbreak(base);
    }
}

static void bulk_line(struct conn *c, const char *line, size_t len)
{
    struct resp r;
    if (parse_resp(line, len, &r) < 0) {
        B.events++;
        return;
    }
    if (r.id < 0 || (size_t)r.id >= B.total) {
        return; /* a keep-alive line of an earlier phase */
    }
    size_t i = (size_t)r.id;
    c->inflight--;
    B.answered++;
    samples_add(&B.lat, now_us() - B.t_sent[i]);
    if (r.ok) {
        B.ok++;
        if (!B.release && B.ttl_ms > 0 && r.lock_len == TOKEN_LEN) {
            memcpy(B.tokens[i], r.lock, TOKEN_LEN);
            B.tokens[i][TOKEN_LEN] = '\0';
        } else if (B.release) {
            B.tokens[i][0] = '\0';
        }
    } else if (r.err >= 0 && (size_t)r.err < N_ERR) {
        B.errs[r.err]++;
    }
    bulk_send_more(c);
}

/* The pacing timer: lets rate * elapsed requests out in total. */
static void bulk_pace_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    double el = (double)(now_us() - B.t0) / 1e6;
    size_t allowed = (size_t)(B.rate * el);
    B.allowed = allowed < B.total ? allowed : B.total;
    for (int i = 0; i < B.n_conns && !B.done; i++) {
        bulk_send_more(B.conns[i]);
        conn_flush(B.conns[i]);
    }
    if (B.allowed < B.total && !B.done) {
        struct timeval tv = {0, 10000};
        evtimer_add(B.pace, &tv);
    }
}

static void bulk_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    fprintf(stderr, "rlbench: bulk phase timed out: %zu of %zu answered\n",
            B.answered, B.total);
    B.done = true;
    event_base_loopbreak(base);
}

/* Runs one bulk phase over conns: total acquires (ttl_ms > 0), pings
 * (ttl_ms == 0) or releases (release) with opt.window in flight per
 * connection. Returns seconds taken. */
static double bulk_run(struct conn **conns, int n_conns, size_t total,
                       bool release, bool renew, int ttl_ms,
                       const char *res_prefix, double timeout_s, double rate)
{
    B.conns = conns;
    B.n_conns = n_conns;
    B.total = total;
    B.sent = B.answered = B.ok = 0;
    memset(B.errs, 0, sizeof(B.errs));
    B.release = release;
    B.renew = renew;
    B.ttl_ms = ttl_ms;
    B.res_prefix = res_prefix;
    B.done = false;
    B.lat.n = 0;
    free(B.t_sent);
    B.t_sent = xcalloc(total ? total : 1, sizeof(*B.t_sent));
    uint64_t t0 = now_us();
    B.t0 = t0;
    B.rate = rate;
    B.allowed = 0;
    B.pace = evtimer_new(base, bulk_pace_cb, NULL);
    if (rate > 0) {
        struct timeval ptv = {0, 10000};
        evtimer_add(B.pace, &ptv);
    }
    B.deadline = evtimer_new(base, bulk_deadline_cb, NULL);
    struct timeval tv = {(time_t)timeout_s, 0};
    evtimer_add(B.deadline, &tv);
    for (int i = 0; i < n_conns; i++) {
        conns[i]->on_line = bulk_line;
        conns[i]->inflight = 0;
        conns[i]->next = (size_t)i;
    }
    for (int i = 0; i < n_conns; i++) {
        bulk_send_more(conns[i]);
        conn_flush(conns[i]);
    }
    if (!B.done) {
        event_base_dispatch(base);
    }
    event_free(B.deadline);
    event_free(B.pace);
    B.rate = 0;
    return (double)(now_us() - t0) / 1e6;
}

static void bulk_errors(char *out, size_t cap)
{
    size_t el = 0;
    out[0] = '\0';
    for (size_t i = 0; i < N_ERR; i++) {
        if (B.errs[i] > 0) {
            el += (size_t)snprintf(out + el, cap - el, "%s%s:%" PRIu64,
                                   el ? "," : "", err_codes[i], B.errs[i]);
        }
    }
    if (el == 0) {
        snprintf(out, cap, "-");
    }
}

static void idle_line(struct conn *c, const char *line, size_t len)
{
    (void)c;
    (void)line;
    (void)len;
}

/* ---- /metrics over the same socket --------------------------------------- */

/* metric_value: GET /metrics (blocking) and the value of the sample whose
 * line starts with name (e.g. "redlockd_renewals_total{result=\"ok\"}");
 * -1 when not found. */
static double metric_value(const char *name)
{
    int fd = unix_connect(opt.socket);
    if (fd < 0) {
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    static const char req[] =
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if (write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = xmalloc(cap + 1);
    for (;;) {
        if (len == cap) {
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (nb == NULL) {
                break;
            }
            buf = nb;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r <= 0) {
            break;
        }
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    double v = -1;
    size_t nl = strlen(name);
    for (char *p = buf; p != NULL && *p; p = strchr(p, '\n')) {
        if (*p == '\n') {
            p++;
        }
        if (strncmp(p, name, nl) == 0 && p[nl] == ' ') {
            v = strtod(p + nl + 1, NULL);
            break;
        }
    }
    free(buf);
    return v;
}

/* ---- renew mode ----------------------------------------------------------- */

struct renew_sampler {
    struct event *ev;
    long long last_ticks;
    uint64_t last_t;
    double cpu_max;
    long rss_max;
    int n;
    uint64_t until;
    double cpu[4096]; /* per-second samples */
    long rss[4096];
};

static struct renew_sampler S;

static void sample_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    uint64_t t = now_us();
    long long ticks = proc_cpu_ticks(opt.daemon_pid);
    double p = ticks_pct(S.last_ticks, ticks, t - S.last_t);
    long rss = proc_rss_kb(opt.daemon_pid);
    if (p > S.cpu_max) {
        S.cpu_max = p;
    }
    if (rss > S.rss_max) {
        S.rss_max = rss;
    }
    if (S.n < 4096) {
        S.cpu[S.n] = p;
        S.rss[S.n] = rss;
    }
    S.n++;
    fprintf(stderr, "  t=%4.0fs daemon cpu %5.1f%%  rss %ld kB  lost %" PRIu64
                    "\n",
            (double)S.n, p, rss, B.events);
    printf("SAMPLE t=%d cpu=%.1f rss_kb=%ld lost_events=%" PRIu64 "%s%s\n",
           S.n, p, rss, B.events, opt.tag ? " tag=" : "",
           opt.tag ? opt.tag : "");
    S.last_ticks = ticks;
    S.last_t = t;
    if (t >= S.until) {
        event_base_loopbreak(base);
        return;
    }
    struct timeval tv = {1, 0};
    evtimer_add(S.ev, &tv);
}

static void mode_renew(void)
{
    if (opt.daemon_pid <= 0) {
        die("--mode renew needs --daemon-pid");
    }
    int nc = opt.conns > 0 ? opt.conns : 4;
    size_t k = (size_t)opt.locks;
    struct conn **conns = xcalloc((size_t)nc, sizeof(*conns));
    for (int i = 0; i < nc; i++) {
        conns[i] = conn_open(i, bulk_line);
        if (conns[i] == NULL) {
            die("connect failed");
        }
    }
    long rss0 = proc_rss_kb(opt.daemon_pid);
    B.tokens = xcalloc(k, sizeof(*B.tokens));
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "rn:%d", (int)getpid());
    fprintf(stderr, "rlbench: renew: acquiring %zu renewing locks (ttl %d ms) "
                    "over %d connection(s)\n",
            k, opt.ttl_ms, nc);
    double rate = opt.ramp > 0 ? (double)k / opt.ramp : 0;
    double acq_s = bulk_run(conns, nc, k, false, true, opt.ttl_ms, prefix,
                            300 + opt.ramp, rate);
    size_t acquired = B.ok;
    char acq_errs[256];
    bulk_errors(acq_errs, sizeof(acq_errs));
    samples_sort(&B.lat);
    long acq_p50 = pct(&B.lat, 50), acq_p99 = pct(&B.lat, 99);
    long rss_held0 = proc_rss_kb(opt.daemon_pid);
    double renew0 = metric_value("redlockd_renewals_total{result=\"ok\"}");
    double renewf0 = metric_value(
        "redlockd_renewals_total{result=\"failed\"}");
    double lost0 = metric_value("redlockd_locks_lost_total");
    fprintf(stderr, "rlbench: renew: %zu acquired in %.1f s; holding for "
                    "%.0f s\n",
            acquired, acq_s, opt.duration);

    /* Hold: sample once a second. Events (lost) still count. */
    for (int i = 0; i < nc; i++) {
        conns[i]->on_line = bulk_line;
    }
    B.events = 0;
    B.total = 0; /* answers of no phase are ignored */
    memset(&S, 0, sizeof(S));
    S.ev = evtimer_new(base, sample_cb, NULL);
    uint64_t t0 = now_us();
    long long ticks0 = proc_cpu_ticks(opt.daemon_pid);
    S.last_ticks = ticks0;
    S.last_t = t0;
    S.until = t0 + (uint64_t)(opt.duration * 1e6);
    S.rss_max = rss_held0;
    struct timeval tv = {1, 0};
    evtimer_add(S.ev, &tv);
    event_base_dispatch(base);
    event_free(S.ev);
    uint64_t t1 = now_us();
    long long ticks1 = proc_cpu_ticks(opt.daemon_pid);
    double cpu = ticks_pct(ticks0, ticks1, t1 - t0);
    long rss_end = proc_rss_kb(opt.daemon_pid);
    double renew1 = metric_value("redlockd_renewals_total{result=\"ok\"}");
    double renewf1 = metric_value(
        "redlockd_renewals_total{result=\"failed\"}");
    double lost1 = metric_value("redlockd_locks_lost_total");
    uint64_t lost_events = B.events;
    /* Medians of the per-second samples: the steady state, apart from
     * spikes that the averages and maxima show. */
    int ns = S.n < 4096 ? S.n : 4096;
    struct samples cs = {0}, rs = {0};
    for (int i = 0; i < ns; i++) {
        samples_add(&cs, (uint64_t)(S.cpu[i] * 10.0 + 0.5));
        samples_add(&rs, (uint64_t)S.rss[i]);
    }
    samples_sort(&cs);
    samples_sort(&rs);
    double cpu_p50 = cs.n ? (double)pct(&cs, 50) / 10.0 : -1;
    long rss_p50 = rs.n ? pct(&rs, 50) : -1;
    free(cs.v);
    free(rs.v);

    fprintf(stderr, "rlbench: renew: releasing\n");
    double rel_s = bulk_run(conns, nc, k, true, false, 0, prefix, 300, 0);
    char rel_errs[256];
    bulk_errors(rel_errs, sizeof(rel_errs));
    size_t released = B.ok;
    uint64_t lost_events_all = lost_events + B.events;
    double lost_all = metric_value("redlockd_locks_lost_total");
    for (int i = 0; i < nc; i++) {
        conn_close(conns[i]);
    }
    free(conns);
    free(B.tokens);
    B.tokens = NULL;
    double secs = (double)(t1 - t0) / 1e6;
    double renew_rate = renew1 >= 0 && renew0 >= 0 ? (renew1 - renew0) / secs
                                                   : -1;
    long rss_held = S.rss_max > rss_end ? S.rss_max : rss_end;
    double per_lock = acquired
                          ? (double)(rss_held - rss0) * 1024.0 /
                                (double)acquired
                          : 0;
    printf("\n== renew daemon: %zu renewing locks, ttl %d ms, %d "
           "connection(s), held %.0f s ==\n",
           k, opt.ttl_ms, nc, secs);
    printf("  acquired        %zu in %.1f s (%.0f/s, p50 %ld us, p99 %ld us)"
           " errors %s\n",
           acquired, acq_s, acq_s > 0 ? (double)acquired / acq_s : 0, acq_p50,
           acq_p99, acq_errs);
    printf("  daemon rss      before %ld kB, held %ld kB (%.0f bytes/lock)\n",
           rss0, rss_held, per_lock);
    printf("  daemon cpu      %.1f%% of one core on average, median %.1f%%, "
           "max %.1f%% over 1 s\n",
           cpu, cpu_p50, S.cpu_max);
    printf("  daemon rss      median %ld kB over the hold\n", rss_p50);
    printf("  renewals        %.0f ok (%.0f/s), %.0f failed, %.0f lost, "
           "%" PRIu64 " lost events\n",
           renew1 - renew0, renew_rate, renewf1 - renewf0, lost1 - lost0,
           lost_events);
    printf("  released        %zu in %.1f s, errors %s; %.0f locks lost by "
           "the end of the release phase\n",
           released, rel_s, rel_errs, lost_all - lost0);
    printf("RESULT mode=renew impl=daemon locks=%zu acquired=%zu ttl_ms=%d "
           "conns=%d ramp_s=%.0f secs=%.1f acquire_s=%.2f rss_base_kb=%ld "
           "rss_held_kb=%ld "
           "bytes_per_lock=%.0f cpu_pct=%.1f cpu_p50_pct=%.1f "
           "cpu_max_pct=%.1f rss_p50_kb=%ld renew_ok=%.0f "
           "renew_per_s=%.0f renew_failed=%.0f lost=%.0f lost_events=%" PRIu64
           " released=%zu release_s=%.2f lost_total=%.0f lost_events_total=%"
           PRIu64 " acq_errs=%s rel_errs=%s%s%s\n",
           k, acquired, opt.ttl_ms, nc, opt.ramp, secs, acq_s, rss0, rss_held,
           per_lock,
           cpu, cpu_p50, S.cpu_max, rss_p50, renew1 - renew0, renew_rate,
           renewf1 - renewf0, lost1 - lost0, lost_events, released, rel_s,
           lost_all - lost0, lost_events_all, acq_errs, rel_errs,
           opt.tag ? " tag=" : "", opt.tag ? opt.tag : "");
    fflush(stdout);
}

/* ---- held locks and idle connections ------------------------------------ */

static struct conn **held_conns;
static int n_held_conns;
static char (*held_tokens)[TOKEN_LEN + 1];

static void held_acquire(void)
{
    n_held_conns = 1;
    held_conns = xcalloc(1, sizeof(*held_conns));
    held_conns[0] = conn_open(0, bulk_line);
    if (held_conns[0] == NULL) {
        die("connect failed");
    }
    B.tokens = xcalloc((size_t)opt.held, sizeof(*B.tokens));
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "bh:%d", (int)getpid());
    long rss0 = opt.daemon_pid > 0 ? proc_rss_kb(opt.daemon_pid) : -1;
    double s = bulk_run(held_conns, 1, (size_t)opt.held, false, false,
                        opt.held_ttl_ms, prefix, 300, 0);
    long rss1 = opt.daemon_pid > 0 ? proc_rss_kb(opt.daemon_pid) : -1;
    char errs[256];
    bulk_errors(errs, sizeof(errs));
    held_tokens = B.tokens;
    B.tokens = NULL;
    printf("held: %zu of %d locks acquired in %.1f s (errors %s); daemon rss "
           "%ld -> %ld kB\n",
           B.ok, opt.held, s, errs, rss0, rss1);
    fflush(stdout);
}

static void held_release(void)
{
    B.tokens = held_tokens;
    bulk_run(held_conns, 1, (size_t)opt.held, true, false, 0, "", 300, 0);
    conn_close(held_conns[0]);
    free(held_conns);
    free(held_tokens);
    B.tokens = NULL;
}

static struct conn **idle_conns;

static void idle_open(void)
{
    long rss0 = opt.daemon_pid > 0 ? proc_rss_kb(opt.daemon_pid) : -1;
    idle_conns = xcalloc((size_t)opt.idle, sizeof(*idle_conns));
    uint64_t t0 = now_us();
    for (int i = 0; i < opt.idle; i++) {
        idle_conns[i] = conn_open(i, bulk_line);
        if (idle_conns[i] == NULL) {
            die("idle connection %d of %d failed", i + 1, opt.idle);
        }
    }
    /* One ping each, so every connection has its framing decided and its
     * buffers allocated like a real NDJSON client's. */
    int saved = opt.window;
    opt.window = 1;
    /* A ping per connection: total = idle, one in flight per connection. */
    B.tokens = NULL;
    bulk_run(idle_conns, opt.idle, (size_t)opt.idle, false, false, 0, "",
             120, 0);
    opt.window = saved;
    for (int i = 0; i < opt.idle; i++) {
        idle_conns[i]->on_line = idle_line;
    }
    double s = (double)(now_us() - t0) / 1e6;
    usleep(200000);
    long rss1 = opt.daemon_pid > 0 ? proc_rss_kb(opt.daemon_pid) : -1;
    double per = opt.idle > 0 && rss0 >= 0
                     ? (double)(rss1 - rss0) * 1024.0 / opt.idle
                     : -1;
    printf("\n== connections: %d idle NDJSON connection(s) opened in %.1f s "
           "(%zu pings answered) ==\n",
           opt.idle, s, B.ok);
    printf("  daemon rss      %ld -> %ld kB (%.0f bytes per connection)\n",
           rss0, rss1, per);
    printf("RESULT mode=idle impl=daemon idle=%d pings=%zu rss_base_kb=%ld "
           "rss_idle_kb=%ld bytes_per_conn=%.0f%s%s\n",
           opt.idle, B.ok, rss0, rss1, per, opt.tag ? " tag=" : "",
           opt.tag ? opt.tag : "");
    fflush(stdout);
}

static void idle_close(void)
{
    for (int i = 0; i < opt.idle; i++) {
        conn_close(idle_conns[i]);
    }
    free(idle_conns);
}

/* ---- readiness ------------------------------------------------------------ */

/* wait_ready: polls health on the socket until a quorum of nodes is up;
 * returns 0, or 1 after secs seconds. */
static int wait_ready(double secs)
{
    uint64_t until = now_us() + (uint64_t)(secs * 1e6);
    do {
        int fd = unix_connect(opt.socket);
        if (fd >= 0) {
            int fl = fcntl(fd, F_GETFL);
            fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
            struct timeval tv = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
            static const char req[] = "{\"id\":1,\"op\":\"health\"}\n";
            char buf[4096];
            ssize_t n = -1;
            if (write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1)) {
                n = read(fd, buf, sizeof(buf) - 1);
            }
            close(fd);
            if (n > 0) {
                buf[n] = '\0';
                if (strstr(buf, "\"ok\":true") != NULL) {
                    return 0;
                }
            }
        }
        usleep(50000);
    } while (now_us() < until);
    fprintf(stderr, "rlbench: %s not ready after %.0f s\n", opt.socket, secs);
    return 1;
}

/* ---- main ----------------------------------------------------------------- */

static void usage(void)
{
    fputs(
        "usage: rlbench [options]\n"
        "  --socket PATH        the daemon's unix socket\n"
        "  --mode M             cycle | contended | renew | connections\n"
        "  --concurrency LIST   clients per run, e.g. 1,16,64,256\n"
        "  --duration S         measured seconds per run (10)\n"
        "  --warmup S           unmeasured seconds before each run (2)\n"
        "  --drain S            bound on finishing in-flight cycles (5)\n"
        "  --daemon-pid PID     sample the daemon's CPU and RSS\n"
        "  --redis-pids LIST    sample these redis-servers' CPU (summed)\n"
        "  --inproc             the in-process limit (no daemon)\n"
        "  --redis LIST         node addresses: unix paths or host:port,\n"
        "                       comma separated or repeated; --inproc runs\n"
        "                       on them, every cycle run reads their INFO\n"
        "  --conns N            share N connections among the clients\n"
        "                       (pipelined); default one per client\n"
        "  --resources R        contended: resources shared (4)\n"
        "  --wait-ms N          contended: wait_ms of each acquire (1000)\n"
        "  --hold-ms N          contended: hold each lock N ms (0)\n"
        "  --ttl-ms N           lock ttl (10000; renew mode: 30000)\n"
        "  --locks K            renew: renewing locks to hold (100000)\n"
        "  --window N           renew/held: in flight per connection (256)\n"
        "  --ramp S             renew: spread the acquisitions over S s\n"
        "                       (0: as fast as the window allows)\n"
        "  --idle N             connections: idle connections (1000)\n"
        "  --held K             hold K locks during the cycle runs\n"
        "  --impl NAME          label in RESULT lines\n"
        "  --tag TEXT           extra tag in RESULT lines\n"
        "  --prefix STR         key prefix of the daemon (redlock:)\n"
        "  --token getrandom|uuid  --inproc token source (getrandom)\n"
        "  --limit minimal|scripts  --inproc: the cheapest correct cycle\n"
        "                       (SET NX PX, compare-and-delete; default) or\n"
        "                       the daemon's own Lua scripts\n"
        "  --serve PATH         the floor sidecar: serve the minimal limit's\n"
        "                       engine on the --redis nodes over a unix\n"
        "                       socket at PATH (acquire, release, health in\n"
        "                       the daemon's NDJSON), for rlbench --socket\n"
        "  --serve-max-s S      --serve: exit after S seconds (600)\n"
        "  --no-redis-stats     no CONFIG RESETSTAT / INFO on the --redis\n"
        "                       nodes (by default, cycle and contended runs\n"
        "                       report Redis commands and CPU per cycle)\n"
        "  --wait-ready S       poll health until a quorum is up (exit 0),\n"
        "                       or give up after S seconds (exit 1)\n",
        stderr);
    exit(2);
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    char *copy = strdup(s);
    char *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t != NULL && n < max;
         t = strtok_r(NULL, ",", &save)) {
        int v = atoi(t);
        if (v <= 0) {
            die("bad list entry '%s'", t);
        }
        out[n++] = v;
    }
    free(copy);
    return n;
}

static void add_redis(const char *s)
{
    char *copy = strdup(s);
    char *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        if (opt.n_redis >= MAX_NODES) {
            die("at most %d nodes", MAX_NODES);
        }
        opt.redis[opt.n_redis++] = strdup(t);
    }
    free(copy);
}

int main(int argc, char **argv)
{
    bool ttl_given = false;
    double ready_secs = 0;
    const char *serve_path = NULL;
    double serve_max_s = 600;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                                \
    do {                                                                       \
        if (v == NULL) {                                                       \
            die("%s needs a value", a);                                        \
        }                                                                      \
        i++;                                                                   \
    } while (0)
        if (strcmp(a, "--socket") == 0) {
            NEEDV();
            opt.socket = v;
        } else if (strcmp(a, "--mode") == 0) {
            NEEDV();
            if (strcmp(v, "cycle") == 0) {
                opt.mode = MODE_CYCLE;
            } else if (strcmp(v, "contended") == 0) {
                opt.mode = MODE_CONTENDED;
            } else if (strcmp(v, "renew") == 0) {
                opt.mode = MODE_RENEW;
            } else if (strcmp(v, "connections") == 0) {
                opt.mode = MODE_CONNECTIONS;
            } else {
                die("unknown mode %s", v);
            }
        } else if (strcmp(a, "--concurrency") == 0 || strcmp(a, "-c") == 0) {
            NEEDV();
            opt.n_conc = parse_list(v, opt.conc, MAX_CONC);
        } else if (strcmp(a, "--duration") == 0) {
            NEEDV();
            opt.duration = atof(v);
        } else if (strcmp(a, "--warmup") == 0) {
            NEEDV();
            opt.warmup = atof(v);
        } else if (strcmp(a, "--drain") == 0) {
            NEEDV();
            opt.drain = atof(v);
        } else if (strcmp(a, "--daemon-pid") == 0) {
            NEEDV();
            opt.daemon_pid = atoi(v);
        } else if (strcmp(a, "--redis-pids") == 0) {
            NEEDV();
            opt.n_redis_pids = parse_list(v, opt.redis_pids, MAX_PIDS);
        } else if (strcmp(a, "--inproc") == 0) {
            opt.inproc = true;
        } else if (strcmp(a, "--redis") == 0) {
            NEEDV();
            add_redis(v);
        } else if (strcmp(a, "--conns") == 0) {
            NEEDV();
            opt.conns = atoi(v);
        } else if (strcmp(a, "--resources") == 0) {
            NEEDV();
            opt.resources = atoi(v);
        } else if (strcmp(a, "--wait-ms") == 0) {
            NEEDV();
            opt.wait_ms = atoi(v);
        } else if (strcmp(a, "--hold-ms") == 0) {
            NEEDV();
            opt.hold_ms = atoi(v);
        } else if (strcmp(a, "--ttl-ms") == 0) {
            NEEDV();
            opt.ttl_ms = atoi(v);
            ttl_given = true;
        } else if (strcmp(a, "--locks") == 0) {
            NEEDV();
            opt.locks = atoi(v);
        } else if (strcmp(a, "--window") == 0) {
            NEEDV();
            opt.window = atoi(v);
        } else if (strcmp(a, "--idle") == 0) {
            NEEDV();
            opt.idle = atoi(v);
        } else if (strcmp(a, "--ramp") == 0) {
            NEEDV();
            opt.ramp = atof(v);
        } else if (strcmp(a, "--held") == 0) {
            NEEDV();
            opt.held = atoi(v);
        } else if (strcmp(a, "--impl") == 0) {
            NEEDV();
            opt.impl = v;
        } else if (strcmp(a, "--tag") == 0) {
            NEEDV();
            opt.tag = v;
        } else if (strcmp(a, "--wait-ready") == 0) {
            NEEDV();
            ready_secs = atof(v);
        } else if (strcmp(a, "--token") == 0) {
            NEEDV();
            token_uuid = strcmp(v, "uuid") == 0;
        } else if (strcmp(a, "--limit") == 0) {
            NEEDV();
            if (strcmp(v, "minimal") == 0) {
                limit_kind = LIMIT_MINIMAL;
            } else if (strcmp(v, "scripts") == 0) {
                limit_kind = LIMIT_SCRIPTS;
            } else {
                die("--limit minimal|scripts, not %s", v);
            }
        } else if (strcmp(a, "--serve") == 0) {
            NEEDV();
            serve_path = v;
        } else if (strcmp(a, "--serve-max-s") == 0) {
            NEEDV();
            serve_max_s = atof(v);
        } else if (strcmp(a, "--no-redis-stats") == 0) {
            stats_off = true;
        } else if (strcmp(a, "--prefix") == 0) {
            NEEDV();
            opt.prefix = v;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
        } else {
            fprintf(stderr, "rlbench: unknown option %s\n", a);
            usage();
        }
#undef NEEDV
    }
    if (ready_secs > 0) {
        if (opt.socket == NULL) {
            die("--wait-ready needs --socket");
        }
        return wait_ready(ready_secs);
    }
    if (serve_path != NULL) {
        if (opt.n_redis < 1) {
            die("--serve needs --redis ADDR[,ADDR...]: the Redis nodes it "
                "takes locks on");
        }
        if (opt.inproc || opt.socket != NULL) {
            die("--serve is a mode of its own: no --inproc, no --socket");
        }
        if (!(serve_max_s > 0)) {
            die("--serve-max-s: a positive number of seconds");
        }
        signal(SIGPIPE, SIG_IGN);
        base = event_base_new();
        if (base == NULL) {
            die("cannot create the event loop");
        }
        mode_serve(serve_path, serve_max_s);
        inproc_teardown();
        event_base_free(base);
        return 0;
    }
    if (opt.n_conc == 0) {
        opt.conc[0] = 64;
        opt.n_conc = 1;
    }
    if (opt.mode == MODE_RENEW && !ttl_given) {
        opt.ttl_ms = 30000;
    }
    if (opt.mode == MODE_CONNECTIONS && opt.idle == 0) {
        opt.idle = 1000;
    }
    if (opt.resources < 1 || opt.window < 1 || opt.ttl_ms < 10 ||
        opt.duration <= 0 || opt.warmup < 0 || opt.drain <= 0) {
        die("bad option value");
    }
    if (!opt.inproc && opt.socket == NULL) {
        die("--socket PATH is required (or --inproc --redis ...)");
    }
    if (opt.inproc && opt.mode != MODE_CYCLE) {
        die("--inproc runs the cycle mode only");
    }
    signal(SIGPIPE, SIG_IGN);

    /* Many clients need many descriptors. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    base = event_base_new();
    if (base == NULL) {
        die("cannot create the event loop");
    }
    if (opt.inproc) {
        inproc_setup();
    }
    if (opt.mode == MODE_CYCLE || opt.mode == MODE_CONTENDED ||
        opt.mode == MODE_CONNECTIONS) {
        stats_open();
    }
    if (opt.mode == MODE_RENEW) {
        mode_renew();
    } else {
        if (opt.mode == MODE_CONNECTIONS) {
            idle_open();
        }
        if (opt.held > 0 && !opt.inproc) {
            held_acquire();
        }
        for (int i = 0; i < opt.n_conc; i++) {
            run_load(opt.conc[i], opt.mode == MODE_CONNECTIONS ? opt.idle : 0);
        }
        if (opt.held > 0 && !opt.inproc) {
            held_release();
        }
        if (opt.mode == MODE_CONNECTIONS) {
            idle_close();
        }
    }
    stats_close();
    if (opt.inproc) {
        inproc_teardown();
    }
    free(B.t_sent);
    free(B.lat.v);
    event_base_free(base);
    return 0;
}
