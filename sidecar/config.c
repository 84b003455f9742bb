/* config.c: every setting of redlockd, declared once in options[].
 *
 * Each row names a setting's flag, its key in the --config JSON object, its
 * environment variable (if any), its type and range, where it lands in
 * struct config, its default and its --help line. Everything else here
 * (defaults, the file, the environment, the flags, --help) walks that table,
 * so a new setting is one new row.
 *
 * config_load() order, later wins:
 *   defaults -> --config FILE -> environment -> flags
 * argv is read twice: first for syntax, --help/--version and --config (the
 * file must be applied before the flags it yields to), then to apply. The
 * node list is replaced, not merged: REDLOCKD_NODES replaces the file's
 * "nodes", and any --node replaces both. Each node's URI is parsed by
 * nodeuri.c; this file keeps the list (no server twice).
 *
 * Error text never carries a password: URIs are shown with it as "***".
 *
 * Why one file of this size: about a tenth of it is options[] itself, and
 * every other part (the file, the environment, argv, --help) is a walker
 * over that table and its private types. Splitting the walkers out would
 * make the table and struct option_def a header other files read, which is
 * the coupling the table exists to avoid; what is not a walker (node URIs,
 * their validation) is already nodeuri.c. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nodeuri.h"
#include "util.h"

#ifndef REDLOCKD_VERSION
#define REDLOCKD_VERSION "0.0.0"
#endif

#define PREFIX_MAX 64
#define CONFIG_FILE_MAX (1 << 20) /* a settings file, not a data set */
#define SHOWN_MAX UTIL_SHOW_MAX   /* bytes of a bad value quoted in errors */
#define PASSWORD_MAX 4096 /* longest first line of --redis-password-file */

/* Longest unix socket path: sun_path holds it and its NUL. */
#define UNIX_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

enum opt_type {
    OPT_NODES,      /* node URIs: --node repeats, JSON array, env a,b,c */
    OPT_STRING,     /* char *, optionally checked by opt->check */
    OPT_INT,        /* int in min..max */
    OPT_DOUBLE,     /* double in min..max */
    OPT_SIZE,       /* size_t bytes in min..max; k and m suffixes */
    OPT_MODE,       /* int permission bits, octal, at most 0777 */
    OPT_LOG_LEVEL,  /* enum log_level */
    OPT_LOG_FORMAT, /* enum log_format */
    OPT_BOOL,       /* bool; a flag without a value sets it */
    OPT_CONFIG,     /* --config: read in the first pass over argv */
    OPT_HELP,       /* -h, --help */
    OPT_VERSION,    /* -V, --version */
};

typedef bool string_check_fn(const char *s);

struct option_def {
    const char *name;       /* long flag without "--" */
    char short_name;        /* 'h' for -h, or 0 */
    const char *key;        /* key in the --config object, NULL: flag only */
    const char *env;        /* environment variable, NULL: none */
    enum opt_type type;     /* how the value is parsed and stored */
    size_t offset;          /* target in struct config (FIELD) */
    const char *def;        /* default in flag syntax, NULL: none */
    double min, max;        /* OPT_INT, OPT_DOUBLE, OPT_SIZE */
    string_check_fn *check; /* OPT_STRING: value rules beyond non-NULL */
    const char *expect;     /* OPT_STRING: "must be ..." when check fails */
    const char *metavar;    /* value name in --help, NULL: no value */
    const char *help;       /* --help text; range/default/env are added */
};

/* FIELD: offset of a struct config member, refusing at compile time a row
 * whose type does not match the member's. */
#define FIELD(member, type)                                                    \
    (offsetof(struct config, member) +                                         \
     0 * sizeof(_Generic(((struct config *)0)->member, type : 1)))

static bool check_socket(const char *s);
static bool check_prefix(const char *s);
static bool check_nonempty(const char *s);
static bool check_id_list(const char *s);

/* The settings. Adding --redis-password-file, say, is one row:
 *   {"redis-password-file", 0, "redis_password_file", NULL, OPT_STRING,
 *    FIELD(redis_password_file, char *), NULL, 0, 0, check_nonempty,
 *    "a file path", "FILE", "read Redis passwords from FILE"},
 * plus the char * member in struct config. Columns: flag, short flag, JSON
 * key, env var, type, target, default, min, max, check, expect, metavar,
 * help. */
static const struct option_def options[] = {
    {"node", 0, "nodes", "REDLOCKD_NODES", OPT_NODES, 0, NULL, 0, 0, NULL, NULL,
     "URI",
     "a Redis node; repeat for each node (use an odd number: 5 independent "
     "nodes in production; each server once, whatever its db); "
     "REDLOCKD_NODES takes a comma separated list"},
    {"socket", 0, "socket", "REDLOCKD_SOCKET", OPT_STRING,
     FIELD(socket_path, char *), "./redlockd.sock", 0, 0, check_socket,
     "a path of 1..107 bytes", "PATH", "unix socket to serve clients on"},
    {"socket-mode", 0, "socket_mode", NULL, OPT_MODE, FIELD(socket_mode, int),
     "0660", 0, 0777, NULL, NULL, "MODE",
     "permission bits of the socket, in octal"},
    {"prefix", 0, "prefix", "REDLOCKD_PREFIX", OPT_STRING,
     FIELD(prefix, char *), "redlock:", 0, 0, check_prefix,
     "1..64 printable ASCII characters without spaces", "STR",
     "prefix of every key written to Redis"},
    {"config", 0, NULL, NULL, OPT_CONFIG, FIELD(config_file, char *), NULL, 0,
     0, check_nonempty, "a file path", "FILE",
     "read settings from a JSON object in FILE (keys below); the "
     "environment and flags override it"},
    {"drift-factor", 0, "drift_factor", NULL, OPT_DOUBLE,
     FIELD(drift_factor, double), "0.01", 0, 0.5, NULL, NULL, "F",
     "clock drift allowed for, as a fraction of the lock TTL"},
    {"node-timeout-ms", 0, "node_timeout_ms", NULL, OPT_INT,
     FIELD(node_timeout_ms, int), "250", 1, 60000, NULL, NULL, "N",
     "deadline of one command on one node, in ms"},
    {"max-line-bytes", 0, "max_line_bytes", NULL, OPT_SIZE,
     FIELD(max_line_bytes, size_t), "65536", 1024, 16777216, NULL, NULL, "N",
     "largest NDJSON request line or HTTP body, in bytes; k and m "
     "suffixes allowed"},
    {"max-connections", 0, "max_connections", NULL, OPT_INT,
     FIELD(max_connections, int), "10240", 1, 1000000, NULL, NULL, "N",
     "client connections served at once"},
    {"max-locks", 0, "max_locks", NULL, OPT_INT, FIELD(max_locks, int),
     "1000000", 1, 100000000, NULL, NULL, "N",
     "locks held through this daemon"},
    {"max-waiters", 0, "max_waiters", NULL, OPT_INT, FIELD(max_waiters, int),
     "100000", 1, 10000000, NULL, NULL, "N",
     "acquires waiting (wait_ms) in this daemon"},
    {"max-inflight", 0, "max_inflight", NULL, OPT_INT, FIELD(max_inflight, int),
     "1024", 1, 1000000, NULL, NULL, "N",
     "requests in flight on one connection"},
    {"max-conn-locks", 0, "max_conn_locks", NULL, OPT_INT,
     FIELD(max_conn_locks, int), "100000", 1, 100000000, NULL, NULL, "N",
     "locks held by one connection"},
    {"max-conn-waiters", 0, "max_conn_waiters", NULL, OPT_INT,
     FIELD(max_conn_waiters, int), "1024", 1, 100000000, NULL, NULL, "N",
     "acquires waiting (wait_ms) from one connection; the default equals "
     "that of --max-inflight, which bounds them already: lower it so that "
     "one connection cannot take most of --max-waiters"},
    {"shutdown-timeout-ms", 0, "shutdown_timeout_ms", NULL, OPT_INT,
     FIELD(shutdown_timeout_ms, int), "2000", 100, 60000, NULL, NULL, "N",
     "time allowed at exit for releasing held locks, in ms"},
    {"log-level", 0, "log_level", "REDLOCKD_LOG_LEVEL", OPT_LOG_LEVEL,
     FIELD(log_level, enum log_level), "info", 0, 0, NULL, NULL, "LEVEL",
     "error, warn, info or debug"},
    {"log-format", 0, "log_format", "REDLOCKD_LOG_FORMAT", OPT_LOG_FORMAT,
     FIELD(log_format, enum log_format), "text", 0, 0, NULL, NULL, "FMT",
     "text or json lines on stderr"},
    {"metrics-listen", 0, "metrics_listen", NULL, OPT_STRING,
     FIELD(metrics_listen, char *), NULL, 0, 0, nodeuri_valid_hostport,
     "HOST:PORT with a port in 1..65535 (IPv6 as [::1]:9100)", "HOST:PORT",
     "also serve GET /metrics and GET /v1/health over TCP on HOST:PORT "
     "(off by default)"},
    {"dev", 0, "dev", NULL, OPT_BOOL, FIELD(dev, bool), NULL, 0, 0, NULL, NULL,
     NULL,
     "start 5 throw-away redis-server children on unix sockets in a temp "
     "dir and use them (a first run, demos); not with --node"},
    {"redis-server", 0, "redis_server", NULL, OPT_STRING,
     FIELD(redis_server, char *), "redis-server", 0, 0, check_nonempty,
     "a non-empty path", "PATH", "redis-server binary that --dev runs"},
    {"redis-password-file", 0, "redis_password_file", NULL, OPT_STRING,
     FIELD(redis_password_file, char *), NULL, 0, 0, check_nonempty,
     "a file path", "FILE",
     "Redis password for every node whose URI carries none, read from the "
     "first line of FILE (at most 4096 bytes), so it never shows in argv; "
     "env REDLOCKD_REDIS_PASSWORD holds the password itself and overrides "
     "this key in --config FILE, not this flag"},
    {"allow-uid", 0, "allow_uid", NULL, OPT_STRING, FIELD(allow_uid, char *),
     NULL, 0, 0, check_id_list, "a comma separated list of numeric ids",
     "UID[,UID]",
     "only peers running as one of these uids may connect (SO_PEERCRED); "
     "root is not implied"},
    {"allow-gid", 0, "allow_gid", NULL, OPT_STRING, FIELD(allow_gid, char *),
     NULL, 0, 0, check_id_list, "a comma separated list of numeric ids",
     "GID[,GID]",
     "only peers whose primary gid is one of these may connect; with "
     "--allow-uid, either match suffices"},
    {"quarantine-ms", 0, "quarantine_ms", NULL, OPT_INT,
     FIELD(quarantine_ms, int), "0", 0, 86400000, NULL, NULL, "N",
     "a node that lost its keys counts toward no quorum for N ms: one seen "
     "to restart (new run_id) without persistence (no ?persistent=1, or its "
     "AOF off), emptied (its data-set mark gone or new) or synced from a "
     "master (new replication id); 0 means the largest TTL granted whose "
     "lock may still stand, at least 30000"},
    {"unsafe-no-quarantine", 0, "unsafe_no_quarantine", NULL, OPT_BOOL,
     FIELD(unsafe_no_quarantine, bool), NULL, 0, 0, NULL, NULL, NULL,
     "testing only: count restarted nodes at once (shows what the "
     "quarantine prevents)"},
    {"unsafe-no-fence-repair", 0, "unsafe_no_fence_repair", NULL, OPT_BOOL,
     FIELD(unsafe_no_fence_repair, bool), NULL, 0, 0, NULL, NULL, NULL,
     "testing only: do not repair a restarted node's fence counter and "
     "done marks"},
    {"acquire-script", 0, "acquire_script", NULL, OPT_BOOL,
     FIELD(acquire_script, bool), NULL, 0, 0, NULL, NULL, NULL,
     "testing: acquire through the Lua script, as for Redis older than "
     "7.0, even where SET NX GET is there (the tests run both paths)"},
    {"tls-ca-file", 0, "tls_ca_file", "REDLOCKD_TLS_CA_FILE", OPT_STRING,
     FIELD(tls_ca_file, char *), NULL, 0, 0, check_nonempty, "a file path",
     "FILE",
     "PEM bundle of the CAs that rediss:// nodes' certificates must chain "
     "to (default: the system CA store)"},
    {"tls-server-name", 0, "tls_server_name", "REDLOCKD_TLS_SERVER_NAME",
     OPT_STRING, FIELD(tls_server_name, char *), NULL, 0, 0, check_nonempty,
     "a host name", "NAME",
     "name that rediss:// nodes' certificates must carry, also sent as SNI "
     "(default: each URI's host)"},
    {"tls-cert-file", 0, "tls_cert_file", "REDLOCKD_TLS_CERT_FILE", OPT_STRING,
     FIELD(tls_cert_file, char *), NULL, 0, 0, check_nonempty, "a file path",
     "FILE",
     "PEM client certificate (chain) for mutual TLS; needs --tls-key-file"},
    {"tls-key-file", 0, "tls_key_file", "REDLOCKD_TLS_KEY_FILE", OPT_STRING,
     FIELD(tls_key_file, char *), NULL, 0, 0, check_nonempty, "a file path",
     "FILE",
     "PEM private key of --tls-cert-file; refused when others may read it, "
     "or its group and root does not own it"},
    {"tls-insecure-skip-verify", 0, "tls_insecure_skip_verify", NULL, OPT_BOOL,
     FIELD(tls_insecure_skip_verify, bool), NULL, 0, 0, NULL, NULL, NULL,
     "unsafe: accept any certificate from rediss:// nodes (encryption "
     "without authentication: anyone on the path can pose as a node); "
     "warned at start and shown in /v1/health"},
    {"help", 'h', NULL, NULL, OPT_HELP, 0, NULL, 0, 0, NULL, NULL, NULL,
     "print this help and exit"},
    {"version", 'V', NULL, NULL, OPT_VERSION, 0, NULL, 0, 0, NULL, NULL, NULL,
     "print the version and exit"},
};

#define N_OPTIONS (sizeof options / sizeof options[0])

/* Where the node list came from, for the --dev conflict message. */
enum node_source {
    NODES_NONE = 0,
    NODES_FILE,
    NODES_ENV,
    NODES_FLAGS,
};

/* ---- small helpers ---------------------------------------------------- */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* parse_ll: a decimal integer, optionally negative, with nothing around it
 * (strtoll alone would take leading spaces and a '+'). */
static int parse_ll(const char *s, long long *out)
{
    const char *p = s[0] == '-' ? s + 1 : s;
    char *end;

    if (!isdigit((unsigned char)*p)) {
        return -1;
    }
    for (const char *q = p; *q != '\0'; q++) {
        if (!isdigit((unsigned char)*q)) {
            return -1;
        }
    }
    errno = 0;
    *out = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0') {
        return -1;
    }
    return 0;
}

/* parse_num: a finite decimal number; refuses hex floats, "inf", "nan" and
 * surrounding spaces, which strtod would accept. */
static int parse_num(const char *s, double *out)
{
    char *end;

    if (s[0] == '\0' || strspn(s, "0123456789.eE+-") != strlen(s)) {
        return -1;
    }
    errno = 0;
    *out = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(*out)) {
        return -1;
    }
    return 0;
}

/* ---- string checks ---------------------------------------------------- */

static bool check_nonempty(const char *s)
{
    return s[0] != '\0';
}

static bool check_socket(const char *s)
{
    size_t n = strlen(s);

    return n >= 1 && n <= UNIX_PATH_MAX;
}

static bool check_prefix(const char *s)
{
    size_t n = strlen(s);

    if (n < 1 || n > PREFIX_MAX) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < 0x21 || s[i] > 0x7e) {
            return false;
        }
    }
    return true;
}

/* "1000" or "1000,1001": at most 16 numeric ids. */
static bool check_id_list(const char *s)
{
    int n = 0;
    while (*s) {
        if (!isdigit((unsigned char)*s)) {
            return false;
        }
        char *end;
        errno = 0;
        unsigned long v = strtoul(s, &end, 10);
        if (errno != 0 || v > 4294967294UL || ++n > 16) {
            return false;
        }
        s = end;
        if (*s == ',') {
            s++;
            if (*s == '\0') {
                return false;
            }
        } else if (*s != '\0') {
            return false;
        }
    }
    return n > 0;
}

static int parse_id_list(const char *s, unsigned *out)
{
    int n = 0;
    while (s != NULL && *s && n < 16) {
        char *end;
        out[n++] = (unsigned)strtoul(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* read_password: the first line of path (without its "\n" or "\r\n") as a
 * new string in *out. Errors never name path: it may be the password
 * itself, pasted where a path was expected. Returns 0 or -1 with err. */
static int read_password(const char *path, char **out, char *err, size_t errlen)
{
    static const char *const what =
        "the password file (given with --redis-password-file)";
    char line[PASSWORD_MAX + 2]; /* one more byte, and a '\r' */
    size_t n = 0;
    bool too_long = false;
    int c, rc = -1;
    FILE *f = fopen(path, "re");

    if (f == NULL) {
        set_err(err, errlen, "cannot read %s: %s", what, strerror(errno));
        return -1;
    }
    while ((c = getc(f)) != EOF && c != '\n') {
        if (n == sizeof line - 1) {
            too_long = true;
            break;
        }
        line[n++] = (char)c;
    }
    line[n] = '\0';
    if (ferror(f)) {
        set_err(err, errlen, "cannot read %s: %s", what, strerror(errno));
        goto error;
    }
    if (n > 0 && line[n - 1] == '\r') {
        line[--n] = '\0';
    }
    if (too_long || n > PASSWORD_MAX) {
        set_err(err, errlen, "%s has a first line longer than %d bytes", what,
                PASSWORD_MAX);
        goto error;
    }
    if (n == 0) {
        set_err(err, errlen, "%s has an empty first line", what);
        goto error;
    }
    if (strlen(line) != n) {
        /* strdup would cut the password at the NUL. */
        set_err(err, errlen, "%s has a NUL byte in its first line", what);
        goto error;
    }
    *out = strdup(line);
    if (*out == NULL) {
        set_err(err, errlen, "out of memory");
        goto error;
    }
    rc = 0;

error:
    explicit_bzero(line, sizeof line);
    fclose(f);
    return rc;
}

/* apply_redis_password: the Redis password from --redis-password-file (or
 * "redis_password_file" in --config, which load_env() drops when
 * REDLOCKD_REDIS_PASSWORD is set) or else REDLOCKD_REDIS_PASSWORD, given to
 * every node whose URI has none. Returns 0 or -1 with err. */
static int apply_redis_password(struct config *cfg, char *err, size_t errlen)
{
    char *pw = NULL;
    if (cfg->redis_password_file != NULL) {
        if (read_password(cfg->redis_password_file, &pw, err, errlen) != 0) {
            return -1;
        }
    } else {
        const char *env = getenv("REDLOCKD_REDIS_PASSWORD");
        if (env != NULL && env[0] != '\0') {
            pw = strdup(env);
        }
    }
    if (pw == NULL) {
        /* A user named in a URI needs a password from somewhere. */
        for (int i = 0; i < cfg->n_nodes; i++) {
            if (cfg->nodes[i].user != NULL && cfg->nodes[i].password == NULL) {
                set_err(err, errlen,
                        "node %s: a user without a password: give "
                        "user:password@ in the URI, --redis-password-file "
                        "or REDLOCKD_REDIS_PASSWORD",
                        cfg->nodes[i].display);
                return -1;
            }
        }
        return 0;
    }
    int rc = 0;
    for (int i = 0; i < cfg->n_nodes; i++) {
        if (cfg->nodes[i].password == NULL) {
            cfg->nodes[i].password = strdup(pw);
            if (cfg->nodes[i].password == NULL) {
                set_err(err, errlen, "out of memory");
                rc = -1;
                break;
            }
        }
    }
    memset(pw, 0, strlen(pw));
    free(pw);
    return rc;
}

/* nodes_add: parses uri and appends it to cfg->nodes. Returns 0; -1 with
 * err for a bad URI or a full list; -2 with err naming both positions when
 * it names a server already listed (the caller need not add one). */
static int nodes_add(struct config *cfg, const char *uri, char *err,
                     size_t errlen)
{
    struct node_addr *addr;

    if (cfg->n_nodes < 0) {
        cfg->n_nodes = 0;
    }
    if (cfg->n_nodes >= CONFIG_MAX_NODES) {
        set_err(err, errlen, "too many nodes (at most %d)", CONFIG_MAX_NODES);
        return -1;
    }
    addr = &cfg->nodes[cfg->n_nodes];
    if (nodeuri_parse(uri, addr, err, errlen) != 0) {
        return -1;
    }
    /* One server listed twice is counted as two votes: a quorum that is
     * not a majority of servers, and SET NX that fails on the alias. A
     * second db is the same failure domain, so it is refused too. */
    for (int i = 0; i < cfg->n_nodes; i++) {
        const struct node_addr *prev = &cfg->nodes[i];

        if (nodeuri_same_server(prev, addr)) {
            set_err(err, errlen,
                    "node %d (%s) is the same Redis server as node %d "
                    "(%s)%s; list each server once",
                    cfg->n_nodes + 1, addr->display, i + 1, prev->display,
                    prev->db != addr->db ? "; another db is no independent node"
                                         : "");
            nodeuri_free(addr);
            return -2;
        }
    }
    cfg->n_nodes++;
    return 0;
}

/* config_add_node: parses uri and appends it to cfg->nodes. Returns 0, or
 * -1 with err (bad URI, CONFIG_MAX_NODES already, or the same server as a
 * node already listed). */
int config_add_node(struct config *cfg, const char *uri, char *err,
                    size_t errlen)
{
    return nodes_add(cfg, uri, err, errlen) == 0 ? 0 : -1;
}

static void nodes_clear(struct config *cfg)
{
    for (int i = 0; i < CONFIG_MAX_NODES; i++) {
        nodeuri_free(&cfg->nodes[i]);
    }
    cfg->n_nodes = 0;
}

/* ---- applying one value ----------------------------------------------- */

/* opt_expect: what a valid value of o looks like, for "must be ...". */
static const char *opt_expect(const struct option_def *o, char *buf, size_t n)
{
    switch (o->type) {
    case OPT_INT:
        snprintf(buf, n, "an integer in %.0f..%.0f", o->min, o->max);
        break;
    case OPT_DOUBLE:
        snprintf(buf, n, "a number in %g..%g", o->min, o->max);
        break;
    case OPT_SIZE:
        snprintf(buf, n, "a size in %.0f..%.0f bytes (k, m suffixes allowed)",
                 o->min, o->max);
        break;
    case OPT_MODE:
        snprintf(buf, n, "an octal mode in 0..0777 such as 0660");
        break;
    case OPT_LOG_LEVEL:
        snprintf(buf, n, "one of error, warn, info, debug");
        break;
    case OPT_LOG_FORMAT:
        snprintf(buf, n, "text or json");
        break;
    case OPT_BOOL:
        snprintf(buf, n, "true or false");
        break;
    case OPT_NODES:
        snprintf(buf, n, "an array of node URIs");
        break;
    default:
        snprintf(buf, n, "%s", o->expect != NULL ? o->expect : "a string");
        break;
    }
    return buf;
}

/* parse_size: digits with an optional k/K (KiB) or m/M (MiB) suffix. */
static int parse_size(const char *s, unsigned long long *out)
{
    char digits[24];
    size_t n = strlen(s);
    unsigned long long mult = 1;
    long long v;

    if (n > 0 && (s[n - 1] == 'k' || s[n - 1] == 'K')) {
        mult = 1024;
        n--;
    } else if (n > 0 && (s[n - 1] == 'm' || s[n - 1] == 'M')) {
        mult = 1024 * 1024;
        n--;
    }
    if (n == 0 || n >= sizeof digits || s[0] == '-') {
        return -1;
    }
    memcpy(digits, s, n);
    digits[n] = '\0';
    if (parse_ll(digits, &v) != 0 || (unsigned long long)v > (1ULL << 40)) {
        return -1;
    }
    *out = (unsigned long long)v * mult;
    return 0;
}

/* parse_mode: 1..4 octal digits, at most 0777. */
static int parse_mode(const char *s, int *out)
{
    size_t n = strlen(s);
    int v = 0;

    if (n == 0 || n > 4) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '7') {
            return -1;
        }
        v = v * 8 + (s[i] - '0');
    }
    if (v > 0777) {
        return -1;
    }
    *out = v;
    return 0;
}

/* opt_set_text: sets o from its text form s (flag, environment, default, or
 * a JSON string). Returns 0, -1 when s is not valid for o, -2 out of
 * memory. Leaves the old value in place on failure. */
static int opt_set_text(struct config *cfg, const struct option_def *o,
                        const char *s)
{
    char *target = (char *)cfg + o->offset;

    switch (o->type) {
    case OPT_STRING:
    case OPT_CONFIG: {
        char *copy;

        if (o->check != NULL && !o->check(s)) {
            return -1;
        }
        copy = strdup(s);
        if (copy == NULL) {
            return -2;
        }
        free(*(char **)target);
        *(char **)target = copy;
        return 0;
    }
    case OPT_INT: {
        long long v;

        if (parse_ll(s, &v) != 0 || v < o->min || v > o->max) {
            return -1;
        }
        *(int *)target = (int)v;
        return 0;
    }
    case OPT_DOUBLE: {
        double v;

        if (parse_num(s, &v) != 0 || v < o->min || v > o->max) {
            return -1;
        }
        *(double *)target = v;
        return 0;
    }
    case OPT_SIZE: {
        unsigned long long v;

        if (parse_size(s, &v) != 0 || v < o->min || v > o->max) {
            return -1;
        }
        *(size_t *)target = (size_t)v;
        return 0;
    }
    case OPT_MODE:
        return parse_mode(s, (int *)target);
    case OPT_LOG_LEVEL:
        return log_level_parse(s, (enum log_level *)target);
    case OPT_LOG_FORMAT:
        return log_format_parse(s, (enum log_format *)target);
    case OPT_BOOL:
        if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0) {
            *(bool *)target = true;
        } else if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0) {
            *(bool *)target = false;
        } else {
            return -1;
        }
        return 0;
    default:
        return -1;
    }
}

/* opt_reset: o back to its default (a JSON null). */
static int opt_reset(struct config *cfg, const struct option_def *o)
{
    if (o->type == OPT_NODES) {
        nodes_clear(cfg);
        return 0;
    }
    if (o->def != NULL) {
        return opt_set_text(cfg, o, o->def);
    }
    if (o->type == OPT_STRING) {
        char **target = (char **)((char *)cfg + o->offset);

        free(*target);
        *target = NULL;
    } else if (o->type == OPT_BOOL) {
        *(bool *)((char *)cfg + o->offset) = false;
    }
    return 0;
}

/* report_text: the error for o refusing text value s, from where. */
static void report_text(const struct option_def *o, const char *where,
                        const char *s, int rc, char *err, size_t errlen)
{
    char expect[128], sv[SHOWN_MAX + 4];

    if (rc == -2) {
        set_err(err, errlen, "%s: out of memory", where);
        return;
    }
    set_err(err, errlen, "%s: must be %s, got '%s'", where,
            opt_expect(o, expect, sizeof expect), util_show(s, sv, sizeof sv));
}

/* add_nodes_list: a comma separated URI list (REDLOCKD_NODES) replacing the
 * node list; spaces around each URI are ignored. */
static int add_nodes_list(struct config *cfg, const char *list,
                          const char *where, char *err, size_t errlen)
{
    char *copy = strdup(list);
    char *p = copy;
    char why[512];
    int i = 1;
    int rc = 0;

    if (copy == NULL) {
        set_err(err, errlen, "%s: out of memory", where);
        return -1;
    }
    nodes_clear(cfg);
    for (;; i++) {
        char *comma = strchr(p, ',');
        char *end;

        if (comma != NULL) {
            *comma = '\0';
        }
        p += strspn(p, " \t");
        end = p + strlen(p);
        while (end > p && (end[-1] == ' ' || end[-1] == '\t')) {
            *--end = '\0';
        }
        if (*p == '\0') {
            set_err(err, errlen, "%s: node %d: empty URI", where, i);
            rc = -1;
            break;
        }
        rc = nodes_add(cfg, p, why, sizeof why);
        if (rc != 0) {
            /* A repeat names both positions itself. */
            if (rc == -2) {
                set_err(err, errlen, "%s: %s", where, why);
            } else {
                set_err(err, errlen, "%s: node %d: %s", where, i, why);
            }
            rc = -1;
            break;
        }
        if (comma == NULL) {
            break;
        }
        p = comma + 1;
    }
    /* The list may hold passwords: wipe our copy. */
    explicit_bzero(copy, strlen(list));
    free(copy);
    return rc;
}

/* ---- the --config file ------------------------------------------------ */

static const struct option_def *find_key(const char *key)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        if (options[i].key != NULL && strcmp(options[i].key, key) == 0) {
            return &options[i];
        }
    }
    return NULL;
}

/* json_shown: item as compact JSON for "got ...", made safe by util_show(). */
static const char *json_shown(const cJSON *item, char *out, size_t outlen)
{
    char *text = cJSON_PrintUnformatted(item);

    if (text == NULL) {
        snprintf(out, outlen, "(unprintable)");
        return out;
    }
    util_show(text, out, outlen);
    free(text);
    return out;
}

/* json_shown_node: like json_shown, for values where a node URI (and its
 * password) was expected: strings are redacted, containers only named. */
static const char *json_shown_node(const cJSON *item, char *out, size_t outlen)
{
    char tmp[SHOWN_MAX + 4];

    if (cJSON_IsString(item)) {
        snprintf(out, outlen, "\"%s\"",
                 nodeuri_redact(item->valuestring, tmp, sizeof tmp));
    } else if (cJSON_IsObject(item)) {
        snprintf(out, outlen, "an object");
    } else if (cJSON_IsArray(item)) {
        snprintf(out, outlen, "an array");
    } else {
        json_shown(item, out, outlen);
    }
    return out;
}

/* apply_json_nodes: the "nodes" array, replacing the node list. */
static int apply_json_nodes(struct config *cfg, const cJSON *item,
                            const char *where, char *err, size_t errlen)
{
    char why[512];
    int i = 1;

    nodes_clear(cfg);
    for (const cJSON *n = item->child; n != NULL; n = n->next, i++) {
        if (!cJSON_IsString(n)) {
            char sv[SHOWN_MAX + 4];

            set_err(err, errlen, "%s: node %d: must be a URI string, got %s",
                    where, i, json_shown_node(n, sv, sizeof sv));
            return -1;
        }
        int rc = nodes_add(cfg, n->valuestring, why, sizeof why);

        if (rc == -2) {
            set_err(err, errlen, "%s: %s", where, why);
            return -1;
        }
        if (rc != 0) {
            set_err(err, errlen, "%s: node %d: %s", where, i, why);
            return -1;
        }
    }
    return 0;
}

/* apply_json: one key of the file. JSON types must match: numbers for
 * numeric settings, strings for text (and for modes, whose octal digits a
 * JSON number would misread as decimal), true/false for --dev, an array of
 * strings for nodes; null restores the default. */
static int apply_json(struct config *cfg, const struct option_def *o,
                      const cJSON *item, const char *where, char *err,
                      size_t errlen)
{
    char expect[128], sv[SHOWN_MAX + 4];
    char *target = (char *)cfg + o->offset;
    int rc = -1;

    if (cJSON_IsNull(item)) {
        rc = opt_reset(cfg, o);
    } else if (o->type == OPT_NODES) {
        if (cJSON_IsArray(item)) {
            return apply_json_nodes(cfg, item, where, err, errlen);
        }
    } else if (cJSON_IsString(item)) {
        if (o->type == OPT_STRING || o->type == OPT_MODE ||
            o->type == OPT_SIZE || o->type == OPT_LOG_LEVEL ||
            o->type == OPT_LOG_FORMAT) {
            rc = opt_set_text(cfg, o, item->valuestring);
        }
    } else if (cJSON_IsNumber(item)) {
        double v = item->valuedouble;
        /* Integral without floor(), so config.c needs no libm. */
        bool whole = v > -1e18 && v < 1e18 && v == (double)(long long)v;

        if (o->type == OPT_DOUBLE && v >= o->min && v <= o->max) {
            *(double *)target = v;
            rc = 0;
        } else if (o->type == OPT_INT && whole && v >= o->min && v <= o->max) {
            *(int *)target = (int)v;
            rc = 0;
        } else if (o->type == OPT_SIZE && whole && v >= o->min && v <= o->max) {
            *(size_t *)target = (size_t)v;
            rc = 0;
        }
    } else if (cJSON_IsBool(item)) {
        if (o->type == OPT_BOOL) {
            *(bool *)target = cJSON_IsTrue(item);
            rc = 0;
        }
    }
    if (rc == -2) {
        set_err(err, errlen, "%s: out of memory", where);
    } else if (rc != 0) {
        set_err(err, errlen, "%s: must be %s, got %s", where,
                opt_expect(o, expect, sizeof expect),
                o->type == OPT_NODES ? json_shown_node(item, sv, sizeof sv)
                                     : json_shown(item, sv, sizeof sv));
    }
    return rc == 0 ? 0 : -1;
}

/* read_file: path's whole content, NUL-terminated, into *out. Returns 0 or
 * -1 with errno set (EFBIG when over CONFIG_FILE_MAX). */
static int read_file(const char *path, char **out, size_t *outlen)
{
    struct stat st;
    char *buf = NULL;
    size_t len = 0, cap = 4096;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int saved;

    if (fd < 0) {
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        goto error;
    }
    if (S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        goto error;
    }
    buf = malloc(cap);
    if (buf == NULL) {
        goto error;
    }
    for (;;) {
        ssize_t r;

        if (len + 1 >= cap) {
            char *nbuf;

            if (cap > CONFIG_FILE_MAX) {
                errno = EFBIG;
                goto error;
            }
            nbuf = realloc(buf, cap * 2);
            if (nbuf == NULL) {
                goto error;
            }
            buf = nbuf;
            cap *= 2;
        }
        r = read(fd, buf + len, cap - len - 1);
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            goto error;
        }
        if (r == 0) {
            break;
        }
        len += (size_t)r;
    }
    if (len > CONFIG_FILE_MAX) {
        errno = EFBIG;
        goto error;
    }
    buf[len] = '\0';
    close(fd);
    *out = buf;
    *outlen = len;
    return 0;

error:
    saved = errno;
    free(buf);
    close(fd);
    errno = saved;
    return -1;
}

/* load_file: applies the JSON object in path to cfg. Every error starts
 * "--config PATH: ". */
static int load_file(struct config *cfg, const char *path,
                     enum node_source *nodes_from, char *err, size_t errlen)
{
    char shown_path[SHOWN_MAX + 4], sv[SHOWN_MAX + 4];
    char where[2 * SHOWN_MAX + 32];
    const char *parse_end = NULL;
    cJSON *root = NULL;
    char *buf = NULL;
    size_t len;
    int rc = -1;

    util_show(path, shown_path, sizeof shown_path);
    if (read_file(path, &buf, &len) != 0) {
        set_err(err, errlen, "--config %s: cannot read: %s", shown_path,
                errno == EFBIG ? "larger than 1 MiB" : strerror(errno));
        return -1;
    }
    if (strlen(buf) != len) {
        set_err(err, errlen,
                "--config %s: not valid JSON (contains a NUL "
                "byte)",
                shown_path);
        goto error;
    }
    root = cJSON_ParseWithOpts(buf, &parse_end, 1);
    if (root == NULL) {
        int line = 1, col = 1;

        for (const char *p = buf;
             parse_end != NULL && p < parse_end && *p != '\0'; p++) {
            if (*p == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        set_err(err, errlen, "--config %s: not valid JSON (line %d, column %d)",
                shown_path, line, col);
        goto error;
    }
    if (!cJSON_IsObject(root)) {
        set_err(err, errlen, "--config %s: must hold a JSON object",
                shown_path);
        goto error;
    }
    for (const cJSON *item = root->child; item != NULL; item = item->next) {
        const struct option_def *o = find_key(item->string);

        if (o == NULL) {
            set_err(err, errlen, "--config %s: unknown key '%s'", shown_path,
                    util_show(item->string, sv, sizeof sv));
            goto error;
        }
        for (const cJSON *prev = root->child; prev != item; prev = prev->next) {
            if (strcmp(prev->string, item->string) == 0) {
                set_err(err, errlen, "--config %s: key '%s' given twice",
                        shown_path, o->key);
                goto error;
            }
        }
        snprintf(where, sizeof where, "--config %s: %s", shown_path, o->key);
        if (apply_json(cfg, o, item, where, err, errlen) != 0) {
            goto error;
        }
        if (o->type == OPT_NODES) {
            *nodes_from = NODES_FILE;
        }
    }
    rc = 0;

error:
    cJSON_Delete(root);
    if (buf != NULL) {
        /* The file may hold passwords in node URIs. */
        explicit_bzero(buf, len);
        free(buf);
    }
    return rc;
}

/* ---- environment ------------------------------------------------------ */

/* load_env: every row's environment variable that is set and not empty
 * (an empty variable counts as unset, so VAR= disables it). */
static int load_env(struct config *cfg, enum node_source *nodes_from, char *err,
                    size_t errlen)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const struct option_def *o = &options[i];
        const char *v = o->env != NULL ? getenv(o->env) : NULL;
        int rc;

        if (v == NULL || v[0] == '\0') {
            continue;
        }
        if (o->type == OPT_NODES) {
            if (add_nodes_list(cfg, v, o->env, err, errlen) != 0) {
                return -1;
            }
            *nodes_from = NODES_ENV;
            continue;
        }
        rc = opt_set_text(cfg, o, v);
        if (rc != 0) {
            report_text(o, o->env, v, rc, err, errlen);
            return -1;
        }
    }
    /* REDLOCKD_REDIS_PASSWORD is the password, not a file, so it has no row
     * of its own; it still overrides the --config file's
     * "redis_password_file" (flags are applied after this). */
    const char *pw = getenv("REDLOCKD_REDIS_PASSWORD");
    if (pw != NULL && pw[0] != '\0') {
        free(cfg->redis_password_file);
        cfg->redis_password_file = NULL;
    }
    return 0;
}

/* ---- argv ------------------------------------------------------------- */

struct arg {
    const struct option_def *opt;
    const char *value; /* NULL for options that take none */
};

static bool takes_value(const struct option_def *o)
{
    return o->metavar != NULL;
}

/* next_arg: the option at argv[*i] into a, advancing *i past it and its
 * value. "--name value" and "--name=value" both work; a separate value may
 * not start with "--", so a forgotten value is reported rather than the
 * next flag swallowed (write --prefix=--x for such a value). Returns 1 for
 * an option, 0 at the end of argv, -1 with err. */
static int next_arg(int argc, char **argv, int *i, struct arg *a, char *err,
                    size_t errlen)
{
    char sv[SHOWN_MAX + 4];
    const char *s, *name, *eq;
    size_t nlen;

    if (*i >= argc) {
        return 0;
    }
    s = argv[*i];
    if (strcmp(s, "--") == 0) {
        /* Nothing after "--" can be an option, and we take no operands. */
        if (*i + 1 < argc) {
            set_err(err, errlen, "unexpected argument '%s' (see --help)",
                    nodeuri_redact(argv[*i + 1], sv, sizeof sv));
            return -1;
        }
        *i = argc;
        return 0;
    }
    if (s[0] != '-' || s[1] == '\0') {
        set_err(err, errlen, "unexpected argument '%s' (see --help)",
                nodeuri_redact(s, sv, sizeof sv));
        return -1;
    }
    a->opt = NULL;
    a->value = NULL;
    if (s[1] != '-') {
        for (size_t k = 0; k < N_OPTIONS && s[2] == '\0'; k++) {
            if (options[k].short_name != 0 && options[k].short_name == s[1]) {
                a->opt = &options[k];
            }
        }
        if (a->opt == NULL) {
            set_err(err, errlen, "unknown option '%s' (see --help)",
                    util_show(s, sv, sizeof sv));
            return -1;
        }
        (*i)++;
        return 1;
    }
    name = s + 2;
    eq = strchr(name, '=');
    nlen = eq != NULL ? (size_t)(eq - name) : strlen(name);
    for (size_t k = 0; k < N_OPTIONS; k++) {
        if (strlen(options[k].name) == nlen &&
            memcmp(options[k].name, name, nlen) == 0) {
            a->opt = &options[k];
            break;
        }
    }
    if (a->opt == NULL) {
        char tmp[SHOWN_MAX + 1];

        snprintf(tmp, sizeof tmp, "%.*s", (int)(nlen + 2), s);
        set_err(err, errlen, "unknown option '%s' (see --help)",
                util_show(tmp, sv, sizeof sv));
        return -1;
    }
    if (!takes_value(a->opt)) {
        if (eq != NULL) {
            set_err(err, errlen, "--%s: takes no value", a->opt->name);
            return -1;
        }
        (*i)++;
        return 1;
    }
    if (eq != NULL) {
        a->value = eq + 1;
        (*i)++;
        return 1;
    }
    if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0) {
        set_err(err, errlen, "--%s: needs a value", a->opt->name);
        return -1;
    }
    a->value = argv[*i + 1];
    *i += 2;
    return 1;
}

/* scan_args: the first pass: syntax, --help and --version (acted on at
 * once), and the --config file name. Returns a config_result. */
static enum config_result scan_args(struct config *cfg, int argc, char **argv,
                                    char *err, size_t errlen)
{
    bool have_config = false;
    struct arg a;
    int i = 1;
    int rc;

    while ((rc = next_arg(argc, argv, &i, &a, err, errlen)) == 1) {
        if (a.opt->type == OPT_HELP) {
            fputs(config_usage(), stdout);
            fflush(stdout);
            return CONFIG_EXIT;
        }
        if (a.opt->type == OPT_VERSION) {
            printf("redlockd %s\n", REDLOCKD_VERSION);
            fflush(stdout);
            return CONFIG_EXIT;
        }
        if (a.opt->type == OPT_CONFIG) {
            if (have_config) {
                set_err(err, errlen, "--config: given more than once");
                return CONFIG_ERROR;
            }
            have_config = true;
            rc = opt_set_text(cfg, a.opt, a.value);
            if (rc != 0) {
                report_text(a.opt, "--config", a.value, rc, err, errlen);
                return CONFIG_ERROR;
            }
        }
    }
    return rc < 0 ? CONFIG_ERROR : CONFIG_OK;
}

/* apply_args: the second pass: every flag but --config, in order. */
static int apply_args(struct config *cfg, int argc, char **argv,
                      enum node_source *nodes_from, char *err, size_t errlen)
{
    char where[64], why[512];
    struct arg a;
    int i = 1;
    int rc;

    while ((rc = next_arg(argc, argv, &i, &a, err, errlen)) == 1) {
        const struct option_def *o = a.opt;

        snprintf(where, sizeof where, "--%s", o->name);
        if (o->type == OPT_CONFIG) {
            continue;
        }
        if (o->type == OPT_BOOL) {
            *(bool *)((char *)cfg + o->offset) = true;
            continue;
        }
        if (o->type == OPT_NODES) {
            if (*nodes_from != NODES_FLAGS) {
                /* The first --node drops the env/file list. */
                nodes_clear(cfg);
                *nodes_from = NODES_FLAGS;
            }
            if (config_add_node(cfg, a.value, why, sizeof why) != 0) {
                set_err(err, errlen, "%s: %s", where, why);
                return -1;
            }
            continue;
        }
        rc = opt_set_text(cfg, o, a.value);
        if (rc != 0) {
            report_text(o, where, a.value, rc, err, errlen);
            return -1;
        }
    }
    return rc;
}

/* check_tls: the --tls-* settings make sense together, and the private
 * key is not readable by others, nor by its group unless root owns it (the
 * rule of PostgreSQL's ssl_key_file: a Kubernetes secret mounted with
 * fsGroup is root's and group-readable): a key others can read lets them
 * pose as this daemon to every node. */
static int check_tls(const struct config *cfg, char *err, size_t errlen)
{
    char sv[SHOWN_MAX + 4];
    struct stat st;

    if ((cfg->tls_cert_file == NULL) != (cfg->tls_key_file == NULL)) {
        set_err(err, errlen,
                "--tls-cert-file and --tls-key-file go together (mutual "
                "TLS needs both)");
        return -1;
    }
    if (cfg->tls_key_file == NULL) {
        return 0;
    }
    if (stat(cfg->tls_key_file, &st) != 0) {
        set_err(err, errlen, "--tls-key-file %s: %s",
                util_show(cfg->tls_key_file, sv, sizeof sv), strerror(errno));
        return -1;
    }
    if ((st.st_mode & (st.st_uid == 0 ? 037 : 077)) != 0) {
        set_err(err, errlen,
                "--tls-key-file %s: readable by group or others (mode "
                "%04o); chmod 600 it (640 when root owns it)",
                util_show(cfg->tls_key_file, sv, sizeof sv),
                (unsigned)(st.st_mode & 07777));
        return -1;
    }
    return 0;
}

/* config_load: see config.h. cfg is overwritten (not freed) first, so it
 * may hold garbage on entry; on success the log is set to cfg's level and
 * format, and an even node count draws a warning. */
enum config_result config_load(struct config *cfg, int argc, char **argv,
                               char *err, size_t errlen)
{
    enum node_source nodes_from = NODES_NONE;
    enum config_result res;

    memset(cfg, 0, sizeof *cfg);
    set_err(err, errlen, "%s", "");
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const struct option_def *o = &options[i];
        int rc = o->def != NULL ? opt_set_text(cfg, o, o->def) : 0;

        if (rc != 0) {
            report_text(o, "default", o->def, rc, err, errlen);
            return CONFIG_ERROR;
        }
    }
    res = scan_args(cfg, argc, argv, err, errlen);
    if (res != CONFIG_OK) {
        return res;
    }
    if (cfg->config_file != NULL &&
        load_file(cfg, cfg->config_file, &nodes_from, err, errlen) != 0) {
        return CONFIG_ERROR;
    }
    if (load_env(cfg, &nodes_from, err, errlen) != 0 ||
        apply_args(cfg, argc, argv, &nodes_from, err, errlen) != 0) {
        return CONFIG_ERROR;
    }
    if (cfg->dev && cfg->n_nodes > 0) {
        char sv[SHOWN_MAX + 4];

        if (nodes_from == NODES_ENV) {
            set_err(err, errlen,
                    "--dev starts its own nodes; do not combine "
                    "it with REDLOCKD_NODES");
        } else if (nodes_from == NODES_FILE) {
            set_err(err, errlen,
                    "--dev starts its own nodes; do not combine "
                    "it with \"nodes\" in --config %s",
                    util_show(cfg->config_file, sv, sizeof sv));
        } else {
            set_err(err, errlen,
                    "--dev starts its own nodes; do not combine "
                    "it with --node");
        }
        return CONFIG_ERROR;
    }
    if (!cfg->dev && cfg->n_nodes == 0) {
        set_err(err, errlen,
                "no Redis nodes: give --node URI (or "
                "REDLOCKD_NODES, or --dev)");
        return CONFIG_ERROR;
    }
    if (apply_redis_password(cfg, err, errlen) != 0) {
        return CONFIG_ERROR;
    }
    if (check_tls(cfg, err, errlen) != 0) {
        return CONFIG_ERROR;
    }
    cfg->n_allow_uids = parse_id_list(cfg->allow_uid, cfg->allow_uids);
    cfg->n_allow_gids = parse_id_list(cfg->allow_gid, cfg->allow_gids);
    log_init(cfg->log_level, cfg->log_format);
    if (!cfg->dev && cfg->n_nodes % 2 == 0) {
        log_warn(NULL,
                 "%d nodes: an even count tolerates no more failures "
                 "than %d; use an odd number",
                 cfg->n_nodes, cfg->n_nodes - 1);
    }
    if (cfg->tls_insecure_skip_verify) {
        log_warn(NULL, "--tls-insecure-skip-verify: rediss:// certificates "
                       "are NOT checked; anyone on the network path can "
                       "pose as a node (unsafe)");
    }
    return CONFIG_OK;
}

/* config_connect_timeout_ms: the deadline of a connect and its handshake,
 * ten command deadlines and never under 1 s. */
int config_connect_timeout_ms(const struct config *cfg)
{
    return cfg->node_timeout_ms * 10 < 1000 ? 1000 : cfg->node_timeout_ms * 10;
}

long config_fd_need(const struct config *cfg, int server_fds)
{
    return (long)cfg->max_connections + server_fds +
           (long)cfg->n_nodes * CONFIG_FDS_PER_NODE + CONFIG_FDS_BASE;
}

/* config_free: frees every string and node of cfg and zeroes those fields;
 * safe on a zeroed or partly loaded cfg and when called twice. */
void config_free(struct config *cfg)
{
    if (cfg == NULL) {
        return;
    }
    nodes_clear(cfg);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const struct option_def *o = &options[i];

        if (o->type == OPT_STRING || o->type == OPT_CONFIG) {
            char **target = (char **)((char *)cfg + o->offset);

            free(*target);
            *target = NULL;
        }
    }
}

/* ---- --help ----------------------------------------------------------- */

#define USAGE_COL 28   /* where option descriptions start */
#define USAGE_WIDTH 79 /* last column used */

struct usage {
    char buf[12288];
    size_t len;
};

static void usage_puts(struct usage *u, const char *s)
{
    size_t n = strlen(s);

    if (u->len + n < sizeof u->buf) {
        memcpy(u->buf + u->len, s, n);
        u->len += n;
        u->buf[u->len] = '\0';
    }
}

/* usage_wrap: text word-wrapped from column col (the cursor's column) to
 * USAGE_WIDTH, continuation lines indented to USAGE_COL. */
static void usage_wrap(struct usage *u, const char *text, size_t col)
{
    const char *p = text;

    while (*p != '\0') {
        size_t w = strcspn(p, " ");
        char word[256];

        if (col > USAGE_COL && col + 1 + w > USAGE_WIDTH) {
            usage_puts(u, "\n");
            for (col = 0; col < USAGE_COL; col++) {
                usage_puts(u, " ");
            }
        } else if (col > USAGE_COL) {
            usage_puts(u, " ");
            col++;
        }
        snprintf(word, sizeof word, "%.*s", (int)w, p);
        usage_puts(u, word);
        col += w;
        p += w;
        p += strspn(p, " ");
    }
    usage_puts(u, "\n");
}

static void usage_option(struct usage *u, const struct option_def *o)
{
    char head[96], text[768], part[160];
    size_t col;

    if (o->short_name != 0) {
        snprintf(head, sizeof head, "  -%c, --%s", o->short_name, o->name);
    } else {
        snprintf(head, sizeof head, "      --%s%s%s", o->name,
                 o->metavar != NULL ? " " : "",
                 o->metavar != NULL ? o->metavar : "");
    }
    usage_puts(u, head);
    col = strlen(head);
    if (col + 2 > USAGE_COL) {
        usage_puts(u, "\n");
        col = 0;
    }
    for (; col < USAGE_COL; col++) {
        usage_puts(u, " ");
    }
    snprintf(text, sizeof text, "%s", o->help);
    part[0] = '\0';
    if (o->type == OPT_INT || o->type == OPT_SIZE) {
        snprintf(part, sizeof part, "%.0f..%.0f", o->min, o->max);
    } else if (o->type == OPT_DOUBLE) {
        snprintf(part, sizeof part, "%g..%g", o->min, o->max);
    }
    if (o->def != NULL) {
        size_t n = strlen(part);

        snprintf(part + n, sizeof part - n, "%sdefault %s", n > 0 ? ", " : "",
                 o->def);
    }
    if (o->env != NULL) {
        size_t n = strlen(part);

        snprintf(part + n, sizeof part - n, "%senv %s", n > 0 ? "; " : "",
                 o->env);
    }
    if (part[0] != '\0') {
        size_t n = strlen(text);

        snprintf(text + n, sizeof text - n, " (%s)", part);
    }
    usage_wrap(u, text, col);
}

/* config_usage: the --help text, built from options[] on first use. */
const char *config_usage(void)
{
    static struct usage u;

    if (u.len > 0) {
        return u.buf;
    }
    usage_puts(&u, "Usage: redlockd --node URI [--node URI]... [OPTION]...\n"
                   "       redlockd --dev [OPTION]...\n"
                   "\n"
                   "Redlock distributed locks over N independent Redis nodes "
                   "(quorum N/2+1),\n"
                   "served on a unix socket as NDJSON or HTTP/1.1.\n"
                   "\n"
                   "Options (flags override environment variables, which "
                   "override --config FILE):\n");
    for (size_t i = 0; i < N_OPTIONS; i++) {
        usage_option(&u, &options[i]);
    }
    usage_puts(
        &u, "\n"
            "Node URIs:\n"
            "  redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?persistent=1]\n"
            "      HOST is a name, an IPv4 address or [IPv6]; PORT "
            "defaults to 6379; DB > 0\n"
            "      is SELECTed; USER and PASSWORD are percent-decoded; "
            "\":PASSWORD@\" alone\n"
            "      sends AUTH PASSWORD.\n"
            "  rediss://...: the same over TLS, the certificate checked "
            "against the CAs and\n"
            "      name of the --tls-* options (default: system CAs, the "
            "URI's HOST).\n"
            "  unix:///ABSOLUTE/PATH.sock[?db=DB][&persistent=1]\n"
            "      also unix://[USER]:PASSWORD@/ABSOLUTE/PATH.sock (no '@' in "
            "the path)\n"
            "  persistent=1 marks a node that keeps its data across "
            "restarts. List each\n"
            "  server once: two URIs for one server (another db too) "
            "are refused.\n"
            "  Passwords never appear in logs, errors or /v1/health; flags are "
            "visible in ps,\n"
            "  so give URIs with passwords through REDLOCKD_NODES or "
            "--config FILE.\n"
            "\n"
            "Config file: a JSON object; each key is the flag's name "
            "with '_' for '-'\n"
            "(\"node_timeout_ms\": 200), except \"nodes\", an array of "
            "URIs, and \"socket_mode\",\n"
            "an octal string (\"0660\"). Unknown keys are errors; null "
            "restores a default.\n"
            "An empty environment variable counts as unset. --node "
            "replaces REDLOCKD_NODES,\n"
            "which replaces the file's \"nodes\".\n"
            "\n"
            "Exit status: 0 after a clean shutdown (SIGTERM, SIGINT, or "
            "SIGHUP, which\n"
            "stops too: there is no reload), 2 for a bad flag, URI or config "
            "file.\n"
            "SIGUSR1 and SIGUSR2 are logged and ignored.\n");
    return u.buf;
}
