/* test_config.c: unit tests of config.c (flags, environment, --config file,
 * node URIs) and log.c (line formats, escaping, token tags).
 *
 * Every test starts with the REDLOCKD_* variables unset; files live in a
 * private mkdtemp directory that the group teardown removes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "log.h"

#ifndef REDLOCKD_VERSION
#define REDLOCKD_VERSION "0.0.0"
#endif

#define ERRLEN 512
#define SECRET "s3cret"

static char tmp_dir[] = "/tmp/redlockd-test-config-XXXXXX";
static char tmp_files[64][256];
static int n_tmp_files;

static const char *const env_vars[] = {
    "REDLOCKD_NODES",     "REDLOCKD_SOCKET",     "REDLOCKD_PREFIX",
    "REDLOCKD_LOG_LEVEL", "REDLOCKD_LOG_FORMAT", "REDLOCKD_REDIS_PASSWORD",
};

/* ---- helpers ---------------------------------------------------------- */

static enum config_result load_argv(struct config *cfg, char *err,
                                    const char **args)
{
    int argc = 0;

    while (args[argc] != NULL) {
        argc++;
    }
    return config_load(cfg, argc, (char **)args, err, ERRLEN);
}

/* LOAD(cfg, err, "--flag", "value", ...): config_load on that argv. */
#define LOAD(cfg, err, ...)                                                    \
    load_argv((cfg), (err), (const char *[]){"redlockd", __VA_ARGS__, NULL})

/* EXPECT_ERR(msg, args...): config_load fails with exactly msg. */
#define EXPECT_ERR(msg, ...)                                                   \
    do {                                                                       \
        struct config c_;                                                      \
        char e_[ERRLEN];                                                       \
        assert_int_equal(LOAD(&c_, e_, __VA_ARGS__), CONFIG_ERROR);            \
        assert_string_equal(e_, (msg));                                        \
        config_free(&c_);                                                      \
    } while (0)

/* EXPECT_OK(args...): config_load succeeds. */
#define EXPECT_OK(...)                                                         \
    do {                                                                       \
        struct config c_;                                                      \
        char e_[ERRLEN];                                                       \
        enum config_result r_ = LOAD(&c_, e_, __VA_ARGS__);                    \
        if (r_ != CONFIG_OK) {                                                 \
            fail_msg("unexpected error: %s", e_);                              \
        }                                                                      \
        config_free(&c_);                                                      \
    } while (0)

/* write_file: content in a new file of the temp dir; returns its path,
 * removed by the per-test teardown. */
static const char *write_file(const char *content)
{
    char *path = tmp_files[n_tmp_files++];
    int fd;

    assert_true(n_tmp_files <= 64);
    snprintf(path, sizeof tmp_files[0], "%s/cfg-XXXXXX", tmp_dir);
    fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, strlen(content)),
                     (ssize_t)strlen(content));
    close(fd);
    return path;
}

struct capture {
    int fd;    /* the descriptor being captured, 1 or 2 */
    int saved; /* its original, restored at the end */
    int rd;    /* read end of the pipe */
};

static void capture_start(struct capture *c, int fd)
{
    int p[2];

    fflush(stdout);
    fflush(stderr);
    assert_int_equal(pipe(p), 0);
    c->fd = fd;
    c->saved = dup(fd);
    assert_true(c->saved >= 0);
    assert_true(dup2(p[1], fd) >= 0);
    close(p[1]);
    c->rd = p[0];
}

/* capture_end: restores the descriptor; returns what was written (caller
 * frees). Output must fit in the pipe buffer (64 KiB). */
static char *capture_end(struct capture *c)
{
    size_t len = 0, cap = 65536;
    char *buf = malloc(cap + 1);
    ssize_t r;

    fflush(stdout);
    fflush(stderr);
    dup2(c->saved, c->fd);
    close(c->saved);
    assert_non_null(buf);
    while ((r = read(c->rd, buf + len, cap - len)) > 0) {
        len += (size_t)r;
    }
    close(c->rd);
    buf[len] = '\0';
    return buf;
}

static bool matches(const char *re, const char *s)
{
    regex_t rx;
    bool ok;

    assert_int_equal(regcomp(&rx, re, REG_EXTENDED | REG_NOSUB), 0);
    ok = regexec(&rx, s, 0, NULL, 0) == 0;
    regfree(&rx);
    return ok;
}

static int setup(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++) {
        unsetenv(env_vars[i]);
    }
    n_tmp_files = 0;
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < n_tmp_files; i++) {
        unlink(tmp_files[i]);
    }
    n_tmp_files = 0;
    for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++) {
        unsetenv(env_vars[i]);
    }
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    return mkdtemp(tmp_dir) != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    return rmdir(tmp_dir);
}

/* ---- flags ------------------------------------------------------------ */

static void test_defaults(void **state)
{
    struct config c;
    char err[ERRLEN];

    (void)state;
    assert_int_equal(LOAD(&c, err, "--node", "redis://h"), CONFIG_OK);
    assert_string_equal(err, "");
    assert_int_equal(c.n_nodes, 1);
    assert_string_equal(c.socket_path, "./redlockd.sock");
    assert_string_equal(c.prefix, "redlock:");
    assert_null(c.config_file);
    assert_true(c.drift_factor == 0.01);
    assert_int_equal(c.node_timeout_ms, 250);
    assert_int_equal(c.max_line_bytes, 65536);
    assert_int_equal(c.max_connections, 10240);
    assert_int_equal(c.max_locks, 1000000);
    assert_int_equal(c.max_waiters, 100000);
    assert_int_equal(c.max_inflight, 1024);
    assert_int_equal(c.max_conn_locks, 100000);
    assert_int_equal(c.max_conn_waiters, 1024);
    assert_int_equal(c.socket_mode, 0660);
    assert_int_equal(c.log_level, LOG_INFO);
    assert_int_equal(c.log_format, LOG_FORMAT_TEXT);
    assert_int_equal(c.shutdown_timeout_ms, 2000);
    assert_null(c.metrics_listen);
    assert_false(c.dev);
    assert_string_equal(c.redis_server, "redis-server");
    config_free(&c);
}

struct int_flag {
    const char *flag;
    long long min, max;
    size_t offset;
};

static const struct int_flag int_flags[] = {
    {"--node-timeout-ms", 1, 60000, offsetof(struct config, node_timeout_ms)},
    {"--max-connections", 1, 1000000, offsetof(struct config, max_connections)},
    {"--max-locks", 1, 100000000, offsetof(struct config, max_locks)},
    {"--max-waiters", 1, 10000000, offsetof(struct config, max_waiters)},
    {"--max-inflight", 1, 1000000, offsetof(struct config, max_inflight)},
    {"--max-conn-locks", 1, 100000000, offsetof(struct config, max_conn_locks)},
    {"--max-conn-waiters", 1, 100000000,
     offsetof(struct config, max_conn_waiters)},
    {"--shutdown-timeout-ms", 100, 60000,
     offsetof(struct config, shutdown_timeout_ms)},
};

static void test_int_flags(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof int_flags / sizeof int_flags[0]; i++) {
        const struct int_flag *f = &int_flags[i];
        const long long good[] = {f->min, f->max, (f->min + f->max) / 2};
        const long long bad_num[] = {f->min - 1, f->max + 1, -1};
        const char *bad_text[] = {"abc", "",    "1.5",  " 50",
                                  "+50", "50 ", "0x10", "99999999999999999999"};
        char val[64], want[ERRLEN], eq[96];

        for (size_t k = 0; k < 3; k++) {
            struct config c;
            char err[ERRLEN];

            snprintf(val, sizeof val, "%lld", good[k]);
            assert_int_equal(LOAD(&c, err, "--node", "redis://h", f->flag, val),
                             CONFIG_OK);
            assert_int_equal(*(int *)((char *)&c + f->offset), good[k]);
            config_free(&c);
        }
        for (size_t k = 0; k < 3; k++) {
            snprintf(val, sizeof val, "%lld", bad_num[k]);
            snprintf(want, sizeof want,
                     "%s: must be an integer in %lld..%lld, got '%s'", f->flag,
                     f->min, f->max, val);
            EXPECT_ERR(want, "--node", "redis://h", f->flag, val);
        }
        for (size_t k = 0; k < sizeof bad_text / sizeof bad_text[0]; k++) {
            snprintf(want, sizeof want,
                     "%s: must be an integer in %lld..%lld, got '%s'", f->flag,
                     f->min, f->max, bad_text[k]);
            snprintf(eq, sizeof eq, "%s=%s", f->flag, bad_text[k]);
            EXPECT_ERR(want, "--node", "redis://h", eq);
        }
    }
}

static void test_drift_factor(void **state)
{
    const char *good[] = {"0", "0.5", "0.01", "1e-3", ".25"};
    const double goodv[] = {0, 0.5, 0.01, 0.001, 0.25};
    const char *bad[] = {"abc", "-0.01",   "0.51", "1",   "nan",
                         "inf", "0x0.1p1", "",     "0.1x"};
    char want[ERRLEN];

    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct config c;
        char err[ERRLEN];

        assert_int_equal(
            LOAD(&c, err, "--node", "redis://h", "--drift-factor", good[i]),
            CONFIG_OK);
        assert_true(c.drift_factor == goodv[i]);
        config_free(&c);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(want, sizeof want,
                 "--drift-factor: must be a number in 0..0.5, got '%s'",
                 bad[i]);
        EXPECT_ERR(want, "--node", "redis://h", "--drift-factor", bad[i]);
    }
}

static void test_max_line_bytes(void **state)
{
    const char *good[] = {"1024", "16777216", "64k", "64K", "16m", "1M"};
    const size_t goodv[] = {1024, 16777216, 65536, 65536, 16777216, 1048576};
    const char *bad[] = {"1023", "16777217", "17m",  "1g", "k",
                         "",     "-1",       "1.5k", "0"};
    char want[ERRLEN];

    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct config c;
        char err[ERRLEN];

        assert_int_equal(
            LOAD(&c, err, "--node", "redis://h", "--max-line-bytes", good[i]),
            CONFIG_OK);
        assert_int_equal(c.max_line_bytes, goodv[i]);
        config_free(&c);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(want, sizeof want,
                 "--max-line-bytes: must be a size in 1024..16777216 bytes "
                 "(k, m suffixes allowed), got '%s'",
                 bad[i]);
        EXPECT_ERR(want, "--node", "redis://h", "--max-line-bytes", bad[i]);
    }
}

static void test_socket_mode(void **state)
{
    const char *good[] = {"0660", "660", "0", "0777", "600"};
    const int goodv[] = {0660, 0660, 0, 0777, 0600};
    const char *bad[] = {"0778", "1000", "abc", "", "-1", "07777", "0o660"};
    char want[ERRLEN];

    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct config c;
        char err[ERRLEN];

        assert_int_equal(
            LOAD(&c, err, "--node", "redis://h", "--socket-mode", good[i]),
            CONFIG_OK);
        assert_int_equal(c.socket_mode, goodv[i]);
        config_free(&c);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(want, sizeof want,
                 "--socket-mode: must be an octal mode in 0..0777 such as "
                 "0660, got '%s'",
                 bad[i]);
        EXPECT_ERR(want, "--node", "redis://h", "--socket-mode", bad[i]);
    }
}

static void test_log_flags(void **state)
{
    const char *levels[] = {"error", "warn", "info", "debug"};
    struct config c;
    char err[ERRLEN];

    (void)state;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(
            LOAD(&c, err, "--node", "redis://h", "--log-level", levels[i]),
            CONFIG_OK);
        assert_int_equal(c.log_level, i);
        config_free(&c);
    }
    assert_int_equal(LOAD(&c, err, "--node", "redis://h", "--log-format",
                          "json", "--log-level", "error"),
                     CONFIG_OK);
    assert_int_equal(c.log_format, LOG_FORMAT_JSON);
    config_free(&c);
    EXPECT_ERR("--log-level: must be one of error, warn, info, debug, got "
               "'verbose'",
               "--node", "redis://h", "--log-level", "verbose");
    EXPECT_ERR("--log-format: must be text or json, got 'xml'", "--node",
               "redis://h", "--log-format", "xml");
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
}

static void test_prefix(void **state)
{
    char p64[65], p65[66], want[ERRLEN];
    struct config c;
    char err[ERRLEN];

    (void)state;
    memset(p64, 'a', 64);
    p64[64] = '\0';
    memset(p65, 'a', 65);
    p65[65] = '\0';
    assert_int_equal(LOAD(&c, err, "--node", "redis://h", "--prefix", p64),
                     CONFIG_OK);
    assert_string_equal(c.prefix, p64);
    config_free(&c);
    assert_int_equal(LOAD(&c, err, "--node", "redis://h", "--prefix", "x"),
                     CONFIG_OK);
    assert_string_equal(c.prefix, "x");
    config_free(&c);
    /* A value may start with one '-'; "--" only in the = form. */
    assert_int_equal(LOAD(&c, err, "--node", "redis://h", "--prefix", "-a:"),
                     CONFIG_OK);
    assert_string_equal(c.prefix, "-a:");
    config_free(&c);
    assert_int_equal(LOAD(&c, err, "--node", "redis://h", "--prefix=--a:"),
                     CONFIG_OK);
    assert_string_equal(c.prefix, "--a:");
    config_free(&c);

    snprintf(want, sizeof want,
             "--prefix: must be 1..64 printable ASCII characters without "
             "spaces, got '%s'",
             p65);
    EXPECT_ERR(want, "--node", "redis://h", "--prefix", p65);
    EXPECT_ERR("--prefix: must be 1..64 printable ASCII characters without "
               "spaces, got ''",
               "--node", "redis://h", "--prefix", "");
    EXPECT_ERR("--prefix: must be 1..64 printable ASCII characters without "
               "spaces, got 'a b'",
               "--node", "redis://h", "--prefix", "a b");
    /* Control characters are shown as '?', keeping the error one line. */
    EXPECT_ERR("--prefix: must be 1..64 printable ASCII characters without "
               "spaces, got 'a?b'",
               "--node", "redis://h", "--prefix", "a\nb");
    EXPECT_ERR("--prefix: must be 1..64 printable ASCII characters without "
               "spaces, got 'caf\xc3\xa9'",
               "--node", "redis://h", "--prefix", "caf\xc3\xa9");
}

static void test_socket_path(void **state)
{
    char p107[108], p108[109];
    struct config c;
    char err[ERRLEN];

    (void)state;
    memset(p107, 'a', 107);
    p107[0] = '/';
    p107[107] = '\0';
    memset(p108, 'a', 108);
    p108[0] = '/';
    p108[108] = '\0';
    assert_int_equal(LOAD(&c, err, "--node", "redis://h", "--socket", p107),
                     CONFIG_OK);
    assert_string_equal(c.socket_path, p107);
    config_free(&c);
    assert_int_equal(LOAD(&c, err, "--node", "redis://h", "--socket=/x.sock"),
                     CONFIG_OK);
    assert_string_equal(c.socket_path, "/x.sock");
    config_free(&c);
    assert_int_equal(LOAD(&c, err, "--node", "redis://h", "--socket", p108),
                     CONFIG_ERROR);
    assert_non_null(strstr(err, "--socket: must be a path of 1..107 bytes"));
    config_free(&c);
    EXPECT_ERR("--socket: must be a path of 1..107 bytes, got ''", "--node",
               "redis://h", "--socket", "");
}

static void test_metrics_listen(void **state)
{
    const char *good[] = {"127.0.0.1:9100",
                          "[::1]:9100",
                          "localhost:1",
                          "0.0.0.0:65535",
                          "metrics.example.com:80",
                          "[2001:db8::1]:9100"};
    const char *bad[] = {":9100", "h:0",       "h:65536", "h:x", "::1:9100",
                         "[::1]", "h",         "[zz]:1",  "h:",  "1.2.3.999:1",
                         "h h:1", "[::1]9100", ""};
    char want[ERRLEN];

    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct config c;
        char err[ERRLEN];

        assert_int_equal(
            LOAD(&c, err, "--node", "redis://h", "--metrics-listen", good[i]),
            CONFIG_OK);
        assert_string_equal(c.metrics_listen, good[i]);
        config_free(&c);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(want, sizeof want,
                 "--metrics-listen: must be HOST:PORT with a port in "
                 "1..65535 (IPv6 as [::1]:9100), got '%s'",
                 bad[i]);
        EXPECT_ERR(want, "--node", "redis://h", "--metrics-listen", bad[i]);
    }
}

static void test_dev_and_redis_server(void **state)
{
    struct config c;
    char err[ERRLEN];

    (void)state;
    assert_int_equal(LOAD(&c, err, "--dev"), CONFIG_OK);
    assert_true(c.dev);
    assert_int_equal(c.n_nodes, 0);
    config_free(&c);
    assert_int_equal(
        LOAD(&c, err, "--dev", "--redis-server", "/opt/redis/bin/redis-server"),
        CONFIG_OK);
    assert_string_equal(c.redis_server, "/opt/redis/bin/redis-server");
    config_free(&c);
    EXPECT_ERR("--redis-server: must be a non-empty path, got ''", "--dev",
               "--redis-server=");
    EXPECT_ERR("--dev: takes no value", "--dev=1");
    EXPECT_ERR("--dev starts its own nodes; do not combine it with --node",
               "--dev", "--node", "redis://h");
    EXPECT_ERR("--dev starts its own nodes; do not combine it with --node",
               "--node", "redis://h", "--dev");
}

static void test_equals_form(void **state)
{
    struct config c;
    char err[ERRLEN];

    (void)state;
    assert_int_equal(
        LOAD(&c, err, "--node=redis://h:1", "--socket=/s",
             "--prefix=p:", "--drift-factor=0.2", "--node-timeout-ms=250",
             "--max-line-bytes=2048", "--max-connections=7", "--max-locks=8",
             "--max-waiters=9", "--max-inflight=10", "--max-conn-locks=11",
             "--max-conn-waiters=12", "--socket-mode=0600", "--log-level=warn",
             "--log-format=json", "--shutdown-timeout-ms=100",
             "--metrics-listen=[::1]:9100", "--redis-server=/rs"),
        CONFIG_OK);
    assert_string_equal(c.nodes[0].display, "h:1");
    assert_string_equal(c.socket_path, "/s");
    assert_string_equal(c.prefix, "p:");
    assert_true(c.drift_factor == 0.2);
    assert_int_equal(c.node_timeout_ms, 250);
    assert_int_equal(c.max_line_bytes, 2048);
    assert_int_equal(c.max_connections, 7);
    assert_int_equal(c.max_locks, 8);
    assert_int_equal(c.max_waiters, 9);
    assert_int_equal(c.max_inflight, 10);
    assert_int_equal(c.max_conn_locks, 11);
    assert_int_equal(c.max_conn_waiters, 12);
    assert_int_equal(c.socket_mode, 0600);
    assert_int_equal(c.log_level, LOG_WARN);
    assert_int_equal(c.log_format, LOG_FORMAT_JSON);
    assert_int_equal(c.shutdown_timeout_ms, 100);
    assert_string_equal(c.metrics_listen, "[::1]:9100");
    assert_string_equal(c.redis_server, "/rs");
    config_free(&c);
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
}

static void test_repeated_flags(void **state)
{
    struct config c;
    char err[ERRLEN];

    (void)state;
    assert_int_equal(LOAD(&c, err, "--node", "redis://a:1", "--node",
                          "redis://b:2", "--node=unix:///c.sock", "--socket",
                          "/one", "--socket", "/two"),
                     CONFIG_OK);
    assert_int_equal(c.n_nodes, 3);
    assert_string_equal(c.nodes[0].display, "a:1");
    assert_string_equal(c.nodes[1].display, "b:2");
    assert_string_equal(c.nodes[2].display, "unix:/c.sock");
    /* Other flags: the last one wins. */
    assert_string_equal(c.socket_path, "/two");
    config_free(&c);
}

static void test_argv_errors(void **state)
{
    (void)state;
    EXPECT_ERR("unknown option '--foo' (see --help)", "--node", "redis://h",
               "--foo");
    EXPECT_ERR("unknown option '--foo' (see --help)", "--foo=bar");
    EXPECT_ERR("unknown option '-x' (see --help)", "-x");
    EXPECT_ERR("unknown option '-hV' (see --help)", "-hV");
    EXPECT_ERR("unknown option '--nodes' (see --help)", "--nodes", "redis://h");
    EXPECT_ERR("--socket: needs a value", "--node", "redis://h", "--socket");
    EXPECT_ERR("--socket: needs a value", "--socket", "--node", "redis://h");
    EXPECT_ERR("--node: needs a value", "--node");
    EXPECT_ERR("--config: needs a value", "--config");
    EXPECT_ERR("unexpected argument 'extra' (see --help)", "--node",
               "redis://h", "extra");
    EXPECT_ERR("unexpected argument '-' (see --help)", "-");
    EXPECT_ERR("unexpected argument 'x' (see --help)", "--node", "redis://h",
               "--", "x");
    EXPECT_ERR("--help: takes no value", "--help=1");
    /* A stray URI with a password is shown without it. */
    EXPECT_ERR("unexpected argument 'redis://u:***@h' (see --help)", "--node",
               "redis://h", "redis://u:" SECRET "@h");
    /* A trailing "--" is fine. */
    EXPECT_OK("--node", "redis://h", "--");
}

static void test_help_version(void **state)
{
    static const char *const flags[] = {
        "--node URI",
        "--socket PATH",
        "--socket-mode MODE",
        "--prefix STR",
        "--config FILE",
        "--drift-factor F",
        "--node-timeout-ms N",
        "--max-line-bytes N",
        "--max-connections N",
        "--max-locks N",
        "--max-waiters N",
        "--max-inflight N",
        "--max-conn-locks N",
        "--max-conn-waiters N",
        "--shutdown-timeout-ms N",
        "--log-level LEVEL",
        "--log-format FMT",
        "--metrics-listen HOST:PORT",
        "--dev",
        "--redis-server PATH",
        "-h, --help",
        "-V, --version",
        "REDLOCKD_NODES",
        "REDLOCKD_SOCKET",
        "REDLOCKD_PREFIX",
        "REDLOCKD_LOG_LEVEL",
        "REDLOCKD_LOG_FORMAT",
        "default 0.01",
        "default 100",
        "default 65536",
        "default 10240",
        "default 1000000",
        "default 100000",
        "default 1024",
        "default 0660",
        "default 2000",
        "default ./redlockd.sock",
        "default redlock:",
        "default info",
        "default text",
        "default redis-server",
        "redis://",
        "unix://",
        "\"nodes\"",
    };
    struct capture cap;
    struct config c;
    char err[ERRLEN];
    char *out, *flat;
    size_t n = 0;

    (void)state;
    capture_start(&cap, STDOUT_FILENO);
    /* --help wins over anything after it, even a bad flag. */
    assert_int_equal(LOAD(&c, err, "--help", "--bogus"), CONFIG_EXIT);
    out = capture_end(&cap);
    config_free(&c);
    assert_string_equal(out, config_usage());
    /* Search the text with its line wrapping undone. */
    flat = malloc(strlen(out) + 1);
    assert_non_null(flat);
    for (const char *p = out; *p != '\0'; p++) {
        if (*p == '\n' || *p == ' ') {
            if (n > 0 && flat[n - 1] != ' ') {
                flat[n++] = ' ';
            }
        } else {
            flat[n++] = *p;
        }
    }
    flat[n] = '\0';
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (strstr(flat, flags[i]) == NULL) {
            fail_msg("--help lacks '%s'", flags[i]);
        }
    }
    free(flat);
    for (char *line = out, *nl; *line != '\0'; line = nl + 1) {
        nl = strchr(line, '\n');
        assert_non_null(nl);
        assert_true(nl - line <= 80);
    }
    free(out);

    capture_start(&cap, STDOUT_FILENO);
    assert_int_equal(LOAD(&c, err, "-h"), CONFIG_EXIT);
    free(capture_end(&cap));
    config_free(&c);

    capture_start(&cap, STDOUT_FILENO);
    assert_int_equal(LOAD(&c, err, "--node", "redis://h", "-V"), CONFIG_EXIT);
    out = capture_end(&cap);
    config_free(&c);
    assert_string_equal(out, "redlockd " REDLOCKD_VERSION "\n");
    free(out);

    capture_start(&cap, STDOUT_FILENO);
    assert_int_equal(LOAD(&c, err, "--version"), CONFIG_EXIT);
    out = capture_end(&cap);
    config_free(&c);
    assert_string_equal(out, "redlockd " REDLOCKD_VERSION "\n");
    free(out);

    /* A syntax error before --help is reported; --help does not run a
     * missing config file. */
    EXPECT_ERR("unknown option '--bogus' (see --help)", "--bogus", "--help");
    capture_start(&cap, STDOUT_FILENO);
    assert_int_equal(LOAD(&c, err, "--config", "/nonexistent.json", "-h"),
                     CONFIG_EXIT);
    free(capture_end(&cap));
    config_free(&c);
}

static void test_missing_nodes(void **state)
{
    (void)state;
    EXPECT_ERR("no Redis nodes: give --node URI (or REDLOCKD_NODES, or "
               "--dev)",
               "--socket", "/s");
    {
        struct config c;
        char err[ERRLEN];

        assert_int_equal(load_argv(&c, err, (const char *[]){"redlockd", NULL}),
                         CONFIG_ERROR);
        assert_string_equal(err, "no Redis nodes: give --node URI (or "
                                 "REDLOCKD_NODES, or --dev)");
        config_free(&c);
        assert_int_equal(config_load(&c, 0, NULL, err, sizeof err),
                         CONFIG_ERROR);
        config_free(&c);
    }
}

/* The descriptor budget: one per client connection, the server's reserve,
 * and a fixed number per node on top of the base. */
static void test_fd_need(void **state)
{
    struct config c;
    char err[ERRLEN];

    (void)state;
    assert_int_equal(LOAD(&c, err, "--node", "redis://h1", "--node",
                          "redis://h2", "--node", "redis://h3",
                          "--max-connections", "1000"),
                     CONFIG_OK);
    assert_int_equal(config_fd_need(&c, 0),
                     1000 + 3 * CONFIG_FDS_PER_NODE + CONFIG_FDS_BASE);
    assert_int_equal(config_fd_need(&c, 33),
                     1033 + 3 * CONFIG_FDS_PER_NODE + CONFIG_FDS_BASE);
    config_free(&c);
    /* the largest values do not overflow */
    assert_int_equal(
        LOAD(&c, err, "--node", "redis://h1", "--max-connections", "1000000"),
        CONFIG_OK);
    assert_true(config_fd_need(&c, 50) > 1000000);
    config_free(&c);
}

static void test_node_count(void **state)
{
    const char *argv[2 * CONFIG_MAX_NODES + 4];
    char uris[CONFIG_MAX_NODES + 1][32];
    char env[(CONFIG_MAX_NODES + 1) * 32] = "";
    struct capture cap;
    struct config c;
    char err[ERRLEN];
    char *out;
    int n = 0;

    (void)state;
    argv[n++] = "redlockd";
    for (int i = 0; i <= CONFIG_MAX_NODES; i++) {
        snprintf(uris[i], sizeof uris[i], "redis://h%d:%d", i, 1000 + i);
        strcat(env, i > 0 ? "," : "");
        strcat(env, uris[i]);
    }
    for (int i = 0; i < CONFIG_MAX_NODES; i++) {
        argv[n++] = "--node";
        argv[n++] = uris[i];
    }
    argv[n] = NULL;

    /* 32 nodes load, with the even-count warning. */
    capture_start(&cap, STDERR_FILENO);
    assert_int_equal(load_argv(&c, err, argv), CONFIG_OK);
    out = capture_end(&cap);
    assert_int_equal(c.n_nodes, CONFIG_MAX_NODES);
    assert_string_equal(c.nodes[31].display, "h31:1031");
    assert_non_null(strstr(out, "32 nodes: an even count tolerates no more "
                                "failures than 31; use an odd number"));
    free(out);
    config_free(&c);

    argv[n++] = "--node";
    argv[n++] = uris[CONFIG_MAX_NODES];
    argv[n] = NULL;
    assert_int_equal(load_argv(&c, err, argv), CONFIG_ERROR);
    assert_string_equal(err, "--node: too many nodes (at most 32)");
    config_free(&c);

    setenv("REDLOCKD_NODES", env, 1);
    EXPECT_ERR("REDLOCKD_NODES: node 33: too many nodes (at most 32)",
               "--socket", "/s");
}

static void test_even_warning(void **state)
{
    struct capture cap;
    struct config c;
    char err[ERRLEN];
    char *out;
    cJSON *j;

    (void)state;
    capture_start(&cap, STDERR_FILENO);
    assert_int_equal(
        LOAD(&c, err, "--node", "redis://a", "--node", "redis://b"), CONFIG_OK);
    out = capture_end(&cap);
    config_free(&c);
    assert_true(matches("^[0-9T:.-]+Z WARN  redlockd: 2 nodes: an even count "
                        "tolerates no more failures than 1; use an odd "
                        "number\n$",
                        out));
    free(out);

    /* Odd counts and --dev are quiet. */
    capture_start(&cap, STDERR_FILENO);
    assert_int_equal(LOAD(&c, err, "--node", "redis://a", "--node", "redis://b",
                          "--node", "redis://c"),
                     CONFIG_OK);
    config_free(&c);
    assert_int_equal(LOAD(&c, err, "--dev"), CONFIG_OK);
    config_free(&c);
    out = capture_end(&cap);
    assert_string_equal(out, "");
    free(out);

    /* The warning already uses the configured format and level. */
    capture_start(&cap, STDERR_FILENO);
    assert_int_equal(LOAD(&c, err, "--node", "redis://a", "--node", "redis://b",
                          "--log-format", "json"),
                     CONFIG_OK);
    out = capture_end(&cap);
    config_free(&c);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "level")->valuestring, "warn");
    cJSON_Delete(j);
    free(out);

    capture_start(&cap, STDERR_FILENO);
    assert_int_equal(LOAD(&c, err, "--node", "redis://a", "--node", "redis://b",
                          "--log-level", "error"),
                     CONFIG_OK);
    out = capture_end(&cap);
    config_free(&c);
    assert_string_equal(out, "");
    free(out);
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
}

/* ---- environment ------------------------------------------------------ */

static void test_env_fallbacks(void **state)
{
    struct config c;
    char err[ERRLEN];

    (void)state;
    setenv("REDLOCKD_NODES",
           " redis://a:1 ,redis://:" SECRET "@b:2,"
           "unix:///c.sock?persistent=1",
           1);
    setenv("REDLOCKD_SOCKET", "/run/env.sock", 1);
    setenv("REDLOCKD_PREFIX", "env:", 1);
    setenv("REDLOCKD_LOG_LEVEL", "DEBUG", 1);
    setenv("REDLOCKD_LOG_FORMAT", "json", 1);
    assert_int_equal(LOAD(&c, err, "--max-locks", "5"), CONFIG_OK);
    assert_int_equal(c.n_nodes, 3);
    assert_string_equal(c.nodes[0].display, "a:1");
    assert_string_equal(c.nodes[1].display, "b:2");
    assert_string_equal(c.nodes[1].password, SECRET);
    assert_string_equal(c.nodes[2].display, "unix:/c.sock");
    assert_true(c.nodes[2].persistent);
    assert_string_equal(c.socket_path, "/run/env.sock");
    assert_string_equal(c.prefix, "env:");
    assert_int_equal(c.log_level, LOG_DEBUG);
    assert_int_equal(c.log_format, LOG_FORMAT_JSON);
    assert_int_equal(c.max_locks, 5);
    config_free(&c);
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
}

static void test_env_errors(void **state)
{
    struct config c;
    char err[ERRLEN];

    (void)state;
    setenv("REDLOCKD_NODES", "redis://a:1,redis://h:x", 1);
    EXPECT_ERR("REDLOCKD_NODES: node 2: bad port (not a number) in "
               "'redis://h:***'",
               "--socket", "/s");
    setenv("REDLOCKD_NODES", "redis://a:1,,redis://b:2", 1);
    EXPECT_ERR("REDLOCKD_NODES: node 2: empty URI", "--socket", "/s");
    setenv("REDLOCKD_NODES", "redis://a:1,", 1);
    EXPECT_ERR("REDLOCKD_NODES: node 2: empty URI", "--socket", "/s");
    setenv("REDLOCKD_NODES", "redis://:" SECRET "@h:0", 1);
    assert_int_equal(LOAD(&c, err, "--socket", "/s"), CONFIG_ERROR);
    assert_string_equal(err, "REDLOCKD_NODES: node 1: bad port '0' in "
                             "'redis://:***@h:0'");
    config_free(&c);
    unsetenv("REDLOCKD_NODES");

    setenv("REDLOCKD_SOCKET", "", 1);
    setenv("REDLOCKD_PREFIX", "a b", 1);
    EXPECT_ERR("REDLOCKD_PREFIX: must be 1..64 printable ASCII characters "
               "without spaces, got 'a b'",
               "--node", "redis://h");
    unsetenv("REDLOCKD_PREFIX");
    setenv("REDLOCKD_LOG_LEVEL", "loud", 1);
    EXPECT_ERR("REDLOCKD_LOG_LEVEL: must be one of error, warn, info, debug, "
               "got 'loud'",
               "--node", "redis://h");
    unsetenv("REDLOCKD_LOG_LEVEL");
    setenv("REDLOCKD_LOG_FORMAT", "xml", 1);
    EXPECT_ERR("REDLOCKD_LOG_FORMAT: must be text or json, got 'xml'", "--node",
               "redis://h");
    unsetenv("REDLOCKD_LOG_FORMAT");

    /* A bad env value is reported even when a flag would override it: the
     * operator should know the variable is broken. */
    setenv("REDLOCKD_LOG_LEVEL", "loud", 1);
    EXPECT_ERR("REDLOCKD_LOG_LEVEL: must be one of error, warn, info, debug, "
               "got 'loud'",
               "--node", "redis://h", "--log-level", "info");
}

static void test_env_empty_is_unset(void **state)
{
    struct config c;
    char err[ERRLEN];

    (void)state;
    setenv("REDLOCKD_NODES", "", 1);
    setenv("REDLOCKD_SOCKET", "", 1);
    setenv("REDLOCKD_PREFIX", "", 1);
    assert_int_equal(LOAD(&c, err, "--dev"), CONFIG_OK);
    assert_string_equal(c.socket_path, "./redlockd.sock");
    assert_string_equal(c.prefix, "redlock:");
    config_free(&c);
}

/* ---- precedence and the --config file --------------------------------- */

static void test_precedence(void **state)
{
    const char *path = write_file(
        "{\"nodes\": [\"redis://f1:1\", \"redis://f2:2\", \"redis://f3:3\"],\n"
        " \"socket\": \"/file.sock\", \"prefix\": \"file:\",\n"
        " \"node_timeout_ms\": 300, \"max_locks\": 7}\n");
    struct config c;
    char err[ERRLEN];

    (void)state;
    /* File alone. */
    assert_int_equal(LOAD(&c, err, "--config", path), CONFIG_OK);
    assert_string_equal(c.config_file, path);
    assert_int_equal(c.n_nodes, 3);
    assert_string_equal(c.nodes[2].display, "f3:3");
    assert_string_equal(c.socket_path, "/file.sock");
    assert_string_equal(c.prefix, "file:");
    assert_int_equal(c.node_timeout_ms, 300);
    config_free(&c);

    /* Env over file; flags over both, wherever --config stands in argv. */
    setenv("REDLOCKD_SOCKET", "/env.sock", 1);
    setenv("REDLOCKD_PREFIX", "env:", 1);
    assert_int_equal(LOAD(&c, err, "--prefix", "flag:", "--node-timeout-ms",
                          "400", "--config", path),
                     CONFIG_OK);
    assert_int_equal(c.n_nodes, 3);
    assert_string_equal(c.socket_path, "/env.sock");
    assert_string_equal(c.prefix, "flag:");
    assert_int_equal(c.node_timeout_ms, 400);
    assert_int_equal(c.max_locks, 7);
    config_free(&c);

    /* REDLOCKD_NODES replaces the file's nodes ... */
    setenv("REDLOCKD_NODES", "redis://e1:1", 1);
    assert_int_equal(LOAD(&c, err, "--config", path), CONFIG_OK);
    assert_int_equal(c.n_nodes, 1);
    assert_string_equal(c.nodes[0].display, "e1:1");
    config_free(&c);

    /* ... and any --node replaces both. */
    assert_int_equal(LOAD(&c, err, "--config", path, "--node", "redis://x:1",
                          "--node", "redis://y:2", "--node", "redis://z:3"),
                     CONFIG_OK);
    assert_int_equal(c.n_nodes, 3);
    assert_string_equal(c.nodes[0].display, "x:1");
    assert_string_equal(c.nodes[2].display, "z:3");
    config_free(&c);
}

static void test_file_all_keys(void **state)
{
    const char *path = write_file(
        "{\"nodes\": [\"redis://u:p@h:1/2?persistent=1\"],\n"
        " \"socket\": \"/f.sock\", \"socket_mode\": \"0600\",\n"
        " \"prefix\": \"f:\", \"drift_factor\": 0.2,\n"
        " \"node_timeout_ms\": 50, \"max_line_bytes\": \"128k\",\n"
        " \"max_connections\": 3, \"max_locks\": 4, \"max_waiters\": 5,\n"
        " \"max_inflight\": 6, \"max_conn_locks\": 7,\n"
        " \"max_conn_waiters\": 8,\n"
        " \"shutdown_timeout_ms\": 60000, \"log_level\": \"warn\",\n"
        " \"log_format\": \"json\", \"metrics_listen\": \"[::]:9100\",\n"
        " \"dev\": false, \"redis_server\": \"/usr/bin/rs\"}");
    const char *path2 = write_file("{\"dev\": true, \"max_line_bytes\": 4096,"
                                   " \"metrics_listen\": null,"
                                   " \"prefix\": null, \"nodes\": []}");
    struct config c;
    char err[ERRLEN];

    (void)state;
    assert_int_equal(LOAD(&c, err, "--config", path), CONFIG_OK);
    assert_int_equal(c.n_nodes, 1);
    assert_string_equal(c.nodes[0].display, "h:1/2");
    assert_string_equal(c.nodes[0].user, "u");
    assert_string_equal(c.nodes[0].password, "p");
    assert_true(c.nodes[0].persistent);
    assert_string_equal(c.socket_path, "/f.sock");
    assert_int_equal(c.socket_mode, 0600);
    assert_string_equal(c.prefix, "f:");
    assert_true(c.drift_factor == 0.2);
    assert_int_equal(c.node_timeout_ms, 50);
    assert_int_equal(c.max_line_bytes, 131072);
    assert_int_equal(c.max_connections, 3);
    assert_int_equal(c.max_locks, 4);
    assert_int_equal(c.max_waiters, 5);
    assert_int_equal(c.max_inflight, 6);
    assert_int_equal(c.max_conn_locks, 7);
    assert_int_equal(c.max_conn_waiters, 8);
    assert_int_equal(c.shutdown_timeout_ms, 60000);
    assert_int_equal(c.log_level, LOG_WARN);
    assert_int_equal(c.log_format, LOG_FORMAT_JSON);
    assert_string_equal(c.metrics_listen, "[::]:9100");
    assert_false(c.dev);
    assert_string_equal(c.redis_server, "/usr/bin/rs");
    config_free(&c);

    /* --dev from the file; null restores defaults (or "off"). */
    assert_int_equal(
        LOAD(&c, err, "--config", path2, "--metrics-listen", "h:1"), CONFIG_OK);
    assert_true(c.dev);
    assert_int_equal(c.max_line_bytes, 4096);
    assert_string_equal(c.prefix, "redlock:");
    assert_string_equal(c.metrics_listen, "h:1");
    config_free(&c);
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
}

/* expect_file_err: a file holding content fails with "--config PATH: " and
 * then tail. */
static void expect_file_err(const char *content, const char *tail)
{
    const char *path = write_file(content);
    char want[ERRLEN];

    snprintf(want, sizeof want, "--config %s: %s", path, tail);
    EXPECT_ERR(want, "--config", path);
}

static void test_file_errors(void **state)
{
    struct config c;
    char err[ERRLEN], want[ERRLEN];
    const char *path;

    (void)state;
    expect_file_err("{\"nodez\": []}", "unknown key 'nodez'");
    expect_file_err("{\"nodes\": [\"redis://h\"], \"config\": \"x\"}",
                    "unknown key 'config'");
    expect_file_err("{\"node-timeout-ms\": 1}", "unknown key "
                                                "'node-timeout-ms'");
    expect_file_err("{\"node_timeout_ms\": \"100\"}",
                    "node_timeout_ms: must be an integer in 1..60000, got "
                    "\"100\"");
    expect_file_err("{\"node_timeout_ms\": 1.5}",
                    "node_timeout_ms: must be an integer in 1..60000, got "
                    "1.5");
    expect_file_err("{\"node_timeout_ms\": 60001}",
                    "node_timeout_ms: must be an integer in 1..60000, got "
                    "60001");
    expect_file_err("{\"max_locks\": 1e300}",
                    "max_locks: must be an integer in 1..100000000, got "
                    "1e+300");
    expect_file_err("{\"drift_factor\": true}",
                    "drift_factor: must be a number in 0..0.5, got true");
    expect_file_err("{\"drift_factor\": 0.6}",
                    "drift_factor: must be a number in 0..0.5, got 0.6");
    expect_file_err("{\"socket\": 5}",
                    "socket: must be a path of 1..107 bytes, got 5");
    expect_file_err("{\"socket\": [\"/a\"]}",
                    "socket: must be a path of 1..107 bytes, got [\"/a\"]");
    expect_file_err("{\"socket_mode\": 432}",
                    "socket_mode: must be an octal mode in 0..0777 such as "
                    "0660, got 432");
    expect_file_err("{\"max_line_bytes\": 100}",
                    "max_line_bytes: must be a size in 1024..16777216 bytes "
                    "(k, m suffixes allowed), got 100");
    expect_file_err("{\"dev\": \"yes\"}",
                    "dev: must be true or false, got \"yes\"");
    expect_file_err("{\"log_level\": \"loud\"}",
                    "log_level: must be one of error, warn, info, debug, "
                    "got \"loud\"");
    expect_file_err("{\"log_format\": 1}",
                    "log_format: must be text or json, got 1");
    expect_file_err("{\"nodes\": \"redis://h\"}",
                    "nodes: must be an array of node URIs, got "
                    "\"redis://h\"");
    expect_file_err("{\"nodes\": \"redis://:" SECRET "@h\"}",
                    "nodes: must be an array of node URIs, got "
                    "\"redis://:***@h\"");
    expect_file_err("{\"nodes\": [{\"uri\": \"redis://:" SECRET "@h\"}]}",
                    "nodes: node 1: must be a URI string, got an object");
    expect_file_err("{\"nodes\": [\"redis://h\", 1]}",
                    "nodes: node 2: must be a URI string, got 1");
    expect_file_err("{\"nodes\": [\"redis://h\", \"redis://h:x\"]}",
                    "nodes: node 2: bad port (not a number) in "
                    "'redis://h:***'");
    expect_file_err("{\"nodes\": [\"redis://:" SECRET "@h:0\"]}",
                    "nodes: node 1: bad port '0' in 'redis://:***@h:0'");
    expect_file_err("{\"socket\": \"/a\", \"socket\": \"/b\"}",
                    "key 'socket' given twice");
    expect_file_err("[1, 2]", "must hold a JSON object");
    expect_file_err("\"x\"", "must hold a JSON object");
    expect_file_err("", "not valid JSON (line 1, column 1)");
    /* cJSON places the error at or just after the offending byte. */
    path = write_file("{\n  \"socket\": \"/x\",\n  oops\n}");
    assert_int_equal(LOAD(&c, err, "--config", path), CONFIG_ERROR);
    config_free(&c);
    assert_true(matches(": not valid JSON \\(line 3, column [34]\\)$", err));
    path = write_file("{\"socket\": \"/x\"} trailing");
    assert_int_equal(LOAD(&c, err, "--config", path), CONFIG_ERROR);
    config_free(&c);
    assert_true(matches(": not valid JSON \\(line 1, column 1[89]\\)$", err));

    /* Unreadable: missing, a directory, no permission. */
    EXPECT_ERR("--config /nonexistent/x.json: cannot read: No such file or "
               "directory",
               "--config", "/nonexistent/x.json");
    snprintf(want, sizeof want, "--config %s: cannot read: Is a directory",
             tmp_dir);
    EXPECT_ERR(want, "--config", tmp_dir);
    path = write_file("{}");
    chmod(path, 0);
    if (geteuid() != 0) {
        snprintf(want, sizeof want,
                 "--config %s: cannot read: Permission denied", path);
        EXPECT_ERR(want, "--config", path);
    }

    EXPECT_ERR("--config: given more than once", "--config", "/a", "--config",
               "/b");
    EXPECT_ERR("--config: must be a file path, got ''", "--config=");

    /* The file counts as nodes given, for the --dev check. */
    path = write_file("{\"nodes\": [\"redis://h\"]}");
    assert_int_equal(LOAD(&c, err, "--config", path, "--dev"), CONFIG_ERROR);
    snprintf(want, sizeof want,
             "--dev starts its own nodes; do not combine "
             "it with \"nodes\" in --config %s",
             path);
    assert_string_equal(err, want);
    config_free(&c);
    /* ... unless --node replaced them, which is still a conflict. */
    EXPECT_ERR("--dev starts its own nodes; do not combine it with --node",
               "--config", path, "--dev", "--node", "redis://h");
    setenv("REDLOCKD_NODES", "redis://h", 1);
    EXPECT_ERR("--dev starts its own nodes; do not combine it with "
               "REDLOCKD_NODES",
               "--dev");
}

/* ---- node URIs (the parser itself: test_nodeuri.c) ------------------ */

static void test_uri_flag_errors(void **state)
{
    struct config c;
    char err[ERRLEN];

    (void)state;
    EXPECT_ERR("--node: bad port (not a number) in 'redis://h:***'", "--node",
               "redis://h:x");
    assert_int_equal(LOAD(&c, err, "--node", "redis://a:" SECRET "@h:1",
                          "--node=redis://a:" SECRET "@h:99999"),
                     CONFIG_ERROR);
    assert_string_equal(err, "--node: bad port '99999' in "
                             "'redis://a:***@h:99999'");
    config_free(&c);
}

/* A URI's own password wins; --redis-password-file (first line) or else
 * REDLOCKD_REDIS_PASSWORD fills in the others, an ACL user's (user@) too;
 * a user with no password from anywhere is refused. */
static void test_redis_password(void **state)
{
    const char *pwfile = write_file(SECRET "\nsecond line\n");
    const char *empty = write_file("\n");
    struct config c;
    char err[ERRLEN];

    (void)state;
    assert_int_equal(LOAD(&c, err, "--node", "redis://rl@h:1", "--node",
                          "unix://rl@/tmp/r.sock", "--node", "redis://h:2",
                          "--node", "redis://u:own@h:3",
                          "--redis-password-file", pwfile),
                     CONFIG_OK);
    assert_string_equal(c.nodes[0].user, "rl");
    assert_string_equal(c.nodes[0].password, SECRET);
    assert_string_equal(c.nodes[1].user, "rl");
    assert_string_equal(c.nodes[1].password, SECRET);
    assert_null(c.nodes[2].user);
    assert_string_equal(c.nodes[2].password, SECRET);
    assert_string_equal(c.nodes[3].password, "own");
    config_free(&c);

    setenv("REDLOCKD_REDIS_PASSWORD", "fromenv", 1);
    assert_int_equal(LOAD(&c, err, "--node", "redis://rl@h:1"), CONFIG_OK);
    assert_string_equal(c.nodes[0].user, "rl");
    assert_string_equal(c.nodes[0].password, "fromenv");
    config_free(&c);
    /* The flag wins over the environment (test_password_precedence). */
    assert_int_equal(LOAD(&c, err, "--node", "redis://rl@h:1",
                          "--redis-password-file", pwfile),
                     CONFIG_OK);
    assert_string_equal(c.nodes[0].password, SECRET);
    config_free(&c);
    unsetenv("REDLOCKD_REDIS_PASSWORD");

    EXPECT_ERR("node h:1: a user without a password: give user:password@ "
               "in the URI, --redis-password-file or REDLOCKD_REDIS_PASSWORD",
               "--node", "redis://h:2", "--node", "redis://rl@h:1");
    EXPECT_ERR("the password file (given with --redis-password-file) has an "
               "empty first line",
               "--node", "redis://rl@h:1", "--redis-password-file", empty);
}

/* ---- duplicate nodes -------------------------------------------------- */

/* Two URIs naming the same Redis server would count one server as two
 * votes: refused, whatever the spelling, credentials or db. */
static void test_node_duplicates(void **state)
{
    static const char *const same[][2] = {
        {"unix:///r1.sock", "unix:///r1.sock"},
        {"unix:///a.sock", "unix:///a.sock?db=0"},
        {"unix:///run/a.sock", "unix:///run//./a.sock"},
        {"unix:///a.sock?persistent=1", "unix://:" SECRET "@/a.sock"},
        {"redis://127.0.0.1:6379", "redis://127.0.0.1"},
        {"redis://h/0", "redis://h:6379"},
        {"redis://Host.Example:1", "redis://host.example.:1"},
        {"redis://[::1]:6379", "redis://[0:0::1]"},
        {"redis://:" SECRET "@h:1", "redis://u:other@h:1?persistent=1"},
        /* Another db is another key space on the same failure domain. */
        {"redis://h:1/1", "redis://h:1/2"},
        {"unix:///a.sock?db=1", "unix:///a.sock?db=2"},
    };
    static const char *const different[][2] = {
        {"redis://h:1", "redis://h:2"},
        {"unix:///a.sock", "unix:///b.sock"},
        {"redis://localhost", "redis://127.0.0.1"}, /* no DNS at start-up */
        {"unix:///a.sock", "redis://a.sock"},
    };
    struct config c;
    char err[ERRLEN];

    (void)state;
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        if (LOAD(&c, err, "--node", "redis://other:9", "--node", same[i][0],
                 "--node", same[i][1]) != CONFIG_ERROR) {
            fail_msg("%s and %s: accepted", same[i][0], same[i][1]);
        }
        if (!matches("^--node: node 3 \\(.*\\) is the same Redis server as "
                     "node 2 \\(.*\\)",
                     err)) {
            fail_msg("%s and %s: %s", same[i][0], same[i][1], err);
        }
        assert_null(strstr(err, SECRET));
        config_free(&c);
    }
    for (size_t i = 0; i < sizeof different / sizeof different[0]; i++) {
        if (LOAD(&c, err, "--node", different[i][0], "--node", different[i][1],
                 "--node", "redis://other:9") != CONFIG_OK) {
            fail_msg("%s and %s: %s", different[i][0], different[i][1], err);
        }
        config_free(&c);
    }

    /* The reviewer's cases, word for word. */
    EXPECT_ERR("--node: node 2 (unix:/r1.sock) is the same Redis server as "
               "node 1 (unix:/r1.sock); list each server once",
               "--node", "unix:///r1.sock", "--node", "unix:///r1.sock",
               "--node", "unix:///r1.sock");
    EXPECT_ERR("--node: node 5 (h3:6379) is the same Redis server as node 3 "
               "(h3:6379); list each server once",
               "--node", "redis://h1", "--node", "redis://h2", "--node",
               "redis://h3", "--node", "redis://h4", "--node",
               "redis://h3:6379");
    EXPECT_ERR("--node: node 2 (h:1/2) is the same Redis server as node 1 "
               "(h:1/1); another db is no independent node; list each "
               "server once",
               "--node", "redis://h:1/1", "--node", "redis://h:1/2", "--node",
               "redis://g:1");

    /* The same from the environment and from the file. */
    setenv("REDLOCKD_NODES",
           "redis://a:1,redis://:" SECRET "@b:2,redis://b:2/0", 1);
    EXPECT_ERR("REDLOCKD_NODES: node 3 (b:2) is the same Redis server as "
               "node 2 (b:2); list each server once",
               "--socket", "/s");
    unsetenv("REDLOCKD_NODES");
    char want[ERRLEN];
    const char *path =
        write_file("{\"nodes\": [\"unix:///x.sock\", \"unix:///y.sock\", "
                   "\"unix:///x.sock?db=0\"]}");
    snprintf(want, sizeof want,
             "--config %s: nodes: node 3 (unix:/x.sock) is the same Redis "
             "server as node 1 (unix:/x.sock); list each server once",
             path);
    EXPECT_ERR(want, "--config", path);

    /* config_add_node (dev.c's way in) refuses it too. */
    memset(&c, 0, sizeof c);
    assert_int_equal(config_add_node(&c, "unix:///d.sock", err, sizeof err), 0);
    assert_int_equal(config_add_node(&c, "unix:///d.sock", err, sizeof err),
                     -1);
    assert_int_equal(c.n_nodes, 1);
    assert_null(c.nodes[1].path);
    config_free(&c);
}

/* ---- passwords in URIs without '@' ------------------------------------- */

/* "redis://:pw" and "redis://user:pw" hold no '@', but what follows the
 * authority's ':' is a password unless it is a port (digits): masked on
 * every way in (the parser's own cases: test_nodeuri.c). */
static void test_uri_redact_without_at(void **state)
{
    struct config c;
    char err[ERRLEN];

    (void)state;
    /* Through every way in: flag, environment, file. */
    assert_int_equal(LOAD(&c, err, "--node", "redis://user:" SECRET),
                     CONFIG_ERROR);
    assert_string_equal(err, "--node: bad port (not a number) in "
                             "'redis://user:***'");
    config_free(&c);
    setenv("REDLOCKD_NODES", "redis://a:1,redis://:" SECRET, 1);
    assert_int_equal(LOAD(&c, err, "--socket", "/s"), CONFIG_ERROR);
    assert_string_equal(
        err, "REDLOCKD_NODES: node 2: missing host in 'redis://:***'");
    config_free(&c);
    unsetenv("REDLOCKD_NODES");
    const char *path = write_file("{\"nodes\": [\"redis://u:" SECRET "\"]}");
    assert_int_equal(LOAD(&c, err, "--config", path), CONFIG_ERROR);
    assert_null(strstr(err, SECRET));
    config_free(&c);
    /* A stray positional argument is shown the same way. */
    assert_int_equal(LOAD(&c, err, "--node", "redis://h", "redis://:" SECRET),
                     CONFIG_ERROR);
    assert_string_equal(err, "unexpected argument 'redis://:***' (see --help)");
    config_free(&c);
}

/* ---- the password file ------------------------------------------------ */

/* README: flags over environment over --config FILE. So
 * REDLOCKD_REDIS_PASSWORD beats "redis_password_file" in the file, and
 * --redis-password-file beats REDLOCKD_REDIS_PASSWORD. */
static void test_password_precedence(void **state)
{
    const char *pwfile = write_file("fromfile\n");
    char text[512];
    struct config c;
    char err[ERRLEN];

    (void)state;
    snprintf(text, sizeof text,
             "{\"nodes\": [\"redis://rl@h:1\"], \"redis_password_file\": "
             "\"%s\"}",
             pwfile);
    const char *cfgfile = write_file(text);

    /* The file's setting alone. */
    assert_int_equal(LOAD(&c, err, "--config", cfgfile), CONFIG_OK);
    assert_string_equal(c.nodes[0].password, "fromfile");
    config_free(&c);
    /* The environment over the file's setting. */
    setenv("REDLOCKD_REDIS_PASSWORD", "fromenv", 1);
    assert_int_equal(LOAD(&c, err, "--config", cfgfile), CONFIG_OK);
    assert_string_equal(c.nodes[0].password, "fromenv");
    config_free(&c);
    /* The flag over the environment. */
    assert_int_equal(
        LOAD(&c, err, "--config", cfgfile, "--redis-password-file", pwfile),
        CONFIG_OK);
    assert_string_equal(c.nodes[0].password, "fromfile");
    config_free(&c);
    /* An empty variable counts as unset: the file's setting applies. */
    setenv("REDLOCKD_REDIS_PASSWORD", "", 1);
    assert_int_equal(LOAD(&c, err, "--config", cfgfile), CONFIG_OK);
    assert_string_equal(c.nodes[0].password, "fromfile");
    config_free(&c);
}

/* The whole first line is the password, up to 4096 bytes; a longer one is
 * refused, never cut. */
static void test_password_long_line(void **state)
{
    static char line[4100 + 8];
    struct config c;
    char err[ERRLEN];

    (void)state;
    /* 2000 bytes: more than the old 1023. */
    memset(line, 'p', 2000);
    strcpy(line + 2000, "\nnext\n");
    const char *f2000 = write_file(line);
    assert_int_equal(
        LOAD(&c, err, "--node", "redis://h:1", "--redis-password-file", f2000),
        CONFIG_OK);
    assert_int_equal(strlen(c.nodes[0].password), 2000);
    config_free(&c);

    /* Exactly 4096, with a CRLF and without any line end. */
    memset(line, 'q', 4096);
    strcpy(line + 4096, "\r\n");
    const char *f4096 = write_file(line);
    line[4096] = '\0';
    const char *f4096_bare = write_file(line);
    assert_int_equal(
        LOAD(&c, err, "--node", "redis://h:1", "--redis-password-file", f4096),
        CONFIG_OK);
    assert_int_equal(strlen(c.nodes[0].password), 4096);
    assert_int_equal(c.nodes[0].password[4095], 'q');
    config_free(&c);
    assert_int_equal(LOAD(&c, err, "--node", "redis://h:1",
                          "--redis-password-file", f4096_bare),
                     CONFIG_OK);
    assert_int_equal(strlen(c.nodes[0].password), 4096);
    config_free(&c);

    /* 4097 bytes: refused. */
    memset(line, 'r', 4097);
    strcpy(line + 4097, "\n");
    const char *f4097 = write_file(line);
    EXPECT_ERR("the password file (given with --redis-password-file) has a "
               "first line longer than 4096 bytes",
               "--node", "redis://h:1", "--redis-password-file", f4097);
}

/* A value given as the password file is never echoed: it may be the
 * password itself, pasted in the wrong place. */
static void test_password_file_not_echoed(void **state)
{
    const char *empty = write_file("\n");
    struct config c;
    char err[ERRLEN];

    (void)state;
    EXPECT_ERR("cannot read the password file (given with "
               "--redis-password-file): No such file or directory",
               "--node", "redis://h:1", "--redis-password-file", SECRET);
    EXPECT_ERR("cannot read the password file (given with "
               "--redis-password-file): No such file or directory",
               "--node", "redis://h:1", "--redis-password-file",
               "/nonexistent/" SECRET);
    EXPECT_ERR("cannot read the password file (given with "
               "--redis-password-file): Is a directory",
               "--node", "redis://h:1", "--redis-password-file", "/");
    EXPECT_ERR("the password file (given with --redis-password-file) has an "
               "empty first line",
               "--node", "redis://h:1", "--redis-password-file", empty);
    /* From the --config file as well. */
    const char *cfgfile =
        write_file("{\"nodes\": [\"redis://h:1\"], "
                   "\"redis_password_file\": \"" SECRET "\"}");
    assert_int_equal(LOAD(&c, err, "--config", cfgfile), CONFIG_ERROR);
    assert_null(strstr(err, SECRET));
    config_free(&c);
}

/* ---- ownership -------------------------------------------------------- */

static void test_config_free_safe(void **state)
{
    struct config c;
    char err[ERRLEN];

    (void)state;
    memset(&c, 0, sizeof c);
    config_free(&c);
    config_free(&c);
    config_free(NULL);
    nodeuri_free(NULL);

    /* Partly filled by hand, as dev_start() does. */
    assert_int_equal(
        config_add_node(&c, "redis://:" SECRET "@h:1", err, sizeof err), 0);
    assert_int_equal(config_add_node(&c, "unix:///x.sock", err, sizeof err), 0);
    assert_int_equal(c.n_nodes, 2);
    assert_int_equal(config_add_node(&c, "bogus", err, sizeof err), -1);
    assert_int_equal(c.n_nodes, 2);
    c.prefix = strdup("p:");
    config_free(&c);
    assert_int_equal(c.n_nodes, 0);
    assert_null(c.prefix);
    assert_null(c.nodes[0].password);
    config_free(&c);

    /* After a failed load, and loaded twice into the same struct after a
     * free. */
    assert_int_equal(LOAD(&c, err, "--node", "redis://h", "--metrics-listen",
                          "h:1", "--prefix", "a b"),
                     CONFIG_ERROR);
    config_free(&c);
    config_free(&c);
    assert_int_equal(LOAD(&c, err, "--dev"), CONFIG_OK);
    assert_int_equal(config_add_node(&c, "unix:///d1.sock", err, sizeof err),
                     0);
    config_free(&c);
    config_free(&c);
}

/* ---- log -------------------------------------------------------------- */

static void test_log_parse(void **state)
{
    enum log_level lv = LOG_INFO;
    enum log_format f = LOG_FORMAT_TEXT;

    (void)state;
    assert_int_equal(log_level_parse("error", &lv), 0);
    assert_int_equal(lv, LOG_ERROR);
    assert_int_equal(log_level_parse("warn", &lv), 0);
    assert_int_equal(lv, LOG_WARN);
    assert_int_equal(log_level_parse("Info", &lv), 0);
    assert_int_equal(lv, LOG_INFO);
    assert_int_equal(log_level_parse("DEBUG", &lv), 0);
    assert_int_equal(lv, LOG_DEBUG);
    assert_int_equal(log_level_parse("warning", &lv), -1);
    assert_int_equal(log_level_parse("", &lv), -1);
    assert_int_equal(log_level_parse(NULL, &lv), -1);
    assert_int_equal(lv, LOG_DEBUG);
    assert_int_equal(log_format_parse("json", &f), 0);
    assert_int_equal(f, LOG_FORMAT_JSON);
    assert_int_equal(log_format_parse("TEXT", &f), 0);
    assert_int_equal(f, LOG_FORMAT_TEXT);
    assert_int_equal(log_format_parse("xml", &f), -1);
    assert_int_equal(log_format_parse(NULL, &f), -1);
    assert_int_equal(f, LOG_FORMAT_TEXT);
}

static void test_token_hash(void **state)
{
    const char *token = "0123456789abcdef0123456789abcdef";
    char a[9], b[9], c[9];

    (void)state;
    /* FNV-1a 32-bit reference values. */
    assert_string_equal(log_token_hash("", a), "811c9dc5");
    assert_string_equal(log_token_hash("a", a), "e40c292c");
    assert_string_equal(log_token_hash("foobar", a), "bf9cf968");
    assert_string_equal(log_token_hash(NULL, a), "811c9dc5");

    assert_ptr_equal(log_token_hash(token, a), a);
    log_token_hash(token, b);
    assert_string_equal(a, b);
    assert_int_equal(strlen(a), 8);
    assert_int_equal(strspn(a, "0123456789abcdef"), 8);
    assert_null(strstr(token, a));
    assert_null(strstr(a, token));
    log_token_hash("0123456789abcdef0123456789abcdee", c);
    assert_string_not_equal(a, c);
}

static void test_log_json(void **state)
{
    struct capture cap;
    cJSON *j;
    char *out;

    (void)state;
    log_init(LOG_DEBUG, LOG_FORMAT_JSON);
    capture_start(&cap, STDERR_FILENO);
    log_write(LOG_WARN, "node \"1\"\n",
              "a\"b\\c\nd\te\x01"
              "f \xff g %d",
              42);
    out = capture_end(&cap);
    /* One line, ending in its only newline. */
    assert_int_equal(strchr(out, '\n') - out, (ptrdiff_t)strlen(out) - 1);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "level")->valuestring, "warn");
    assert_string_equal(cJSON_GetObjectItem(j, "subject")->valuestring,
                        "node \"1\"\n");
    assert_string_equal(cJSON_GetObjectItem(j, "msg")->valuestring,
                        "a\"b\\c\nd\te\x01"
                        "f \xef\xbf\xbd g 42");
    assert_true(matches("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
                        "[0-9]{2}\\.[0-9]{3}Z$",
                        cJSON_GetObjectItem(j, "ts")->valuestring));
    cJSON_Delete(j);
    assert_non_null(strstr(out, "\\u0001"));
    assert_true(matches("^\\{\"ts\":\"[^\"]+\",\"level\":\"warn\","
                        "\"subject\":",
                        out));
    free(out);

    /* NULL subject; valid multi-byte UTF-8 passes unescaped. */
    capture_start(&cap, STDERR_FILENO);
    log_error(NULL, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92");
    out = capture_end(&cap);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "level")->valuestring, "error");
    assert_string_equal(cJSON_GetObjectItem(j, "subject")->valuestring,
                        "redlockd");
    assert_string_equal(cJSON_GetObjectItem(j, "msg")->valuestring,
                        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92");
    cJSON_Delete(j);
    free(out);

    /* Overlong, surrogate and truncated sequences become U+FFFD. */
    capture_start(&cap, STDERR_FILENO);
    log_info("x", "\xc0\xaf|\xed\xa0\x80|\xe2\x82");
    out = capture_end(&cap);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "msg")->valuestring,
                        "\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd"
                        "\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd");
    cJSON_Delete(j);
    free(out);
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
}

static void test_log_text(void **state)
{
    struct capture cap;
    char *out;

    (void)state;
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
    capture_start(&cap, STDERR_FILENO);
    log_warn("node 1 unix:/x", "message %s", "here");
    out = capture_end(&cap);
    assert_true(matches("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
                        "[0-9]{2}\\.[0-9]{3}Z WARN  node 1 unix:/x: "
                        "message here\n$",
                        out));
    free(out);

    capture_start(&cap, STDERR_FILENO);
    log_info(NULL, "two\nlines\tand\x1b[31m");
    log_error("c", "x");
    out = capture_end(&cap);
    assert_true(matches("^[^\n]+Z INFO  redlockd: two\\\\nlines\\\\tand"
                        "\\\\x1b\\[31m\n"
                        "[^\n]+Z ERROR c: x\n$",
                        out));
    free(out);
}

static void test_log_levels(void **state)
{
    struct capture cap;
    char *out;

    (void)state;
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
    assert_true(log_enabled(LOG_ERROR));
    assert_true(log_enabled(LOG_INFO));
    assert_false(log_enabled(LOG_DEBUG));
    capture_start(&cap, STDERR_FILENO);
    log_debug("x", "hidden");
    log_init(LOG_ERROR, LOG_FORMAT_TEXT);
    log_warn("x", "hidden");
    log_info("x", "hidden");
    log_error("x", "shown");
    log_init(LOG_DEBUG, LOG_FORMAT_TEXT);
    log_debug("x", "shown too");
    out = capture_end(&cap);
    assert_null(strstr(out, "hidden"));
    assert_non_null(strstr(out, "ERROR x: shown\n"));
    assert_non_null(strstr(out, "DEBUG x: shown too\n"));
    free(out);
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
}

static void test_log_truncation(void **state)
{
    char *big = malloc(10001);
    struct capture cap;
    size_t len;
    cJSON *j;
    char *out;

    (void)state;
    assert_non_null(big);
    memset(big, 'x', 10000);
    big[10000] = '\0';
    log_init(LOG_INFO, LOG_FORMAT_JSON);
    capture_start(&cap, STDERR_FILENO);
    log_info("s", "%s", big);
    out = capture_end(&cap);
    len = strlen(out);
    assert_true(len <= 4096);
    assert_string_equal(out + len - 7, "x...\"}\n");
    j = cJSON_Parse(out);
    assert_non_null(j);
    cJSON_Delete(j);
    free(out);

    /* Cut between escapes, never inside one. */
    memset(big, '"', 3000);
    big[3000] = '\0';
    capture_start(&cap, STDERR_FILENO);
    log_info("s", "%s", big);
    out = capture_end(&cap);
    assert_true(strlen(out) <= 4096);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_true(strlen(cJSON_GetObjectItem(j, "msg")->valuestring) > 1000);
    cJSON_Delete(j);
    free(out);

    log_init(LOG_INFO, LOG_FORMAT_TEXT);
    memset(big, 'y', 10000);
    big[10000] = '\0';
    capture_start(&cap, STDERR_FILENO);
    log_info("s", "%s", big);
    out = capture_end(&cap);
    len = strlen(out);
    assert_true(len <= 4096);
    assert_string_equal(out + len - 5, "y...\n");
    free(out);
    free(big);
}

static void test_log_errno_kept(void **state)
{
    struct capture cap;

    (void)state;
    capture_start(&cap, STDERR_FILENO);
    errno = EACCES;
    log_info("x", "kept");
    assert_int_equal(errno, EACCES);
    errno = ENOENT;
    log_debug("x", "filtered");
    assert_int_equal(errno, ENOENT);
    free(capture_end(&cap));
}

/* Two processes log long lines to one pipe at once; every line must come
 * out whole, which is what one write(2) per line buys. */
static void test_log_lines_atomic(void **state)
{
    enum { WRITERS = 3, LINES = 400 };
    size_t cap = 4 << 20, len = 0;
    char *buf = malloc(cap);
    int p[2], lines = 0;
    pid_t pids[WRITERS];
    ssize_t r;

    (void)state;
    assert_non_null(buf);
    assert_int_equal(pipe(p), 0);
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        assert_true(pids[w] >= 0);
        if (pids[w] == 0) {
            char msg[2001];

            free(buf); /* the child only writes */
            memset(msg, 'a' + w, 2000);
            msg[2000] = '\0';
            close(p[0]);
            dup2(p[1], STDERR_FILENO);
            log_init(LOG_INFO, LOG_FORMAT_JSON);
            for (int i = 0; i < LINES; i++) {
                log_info("writer", "%d %s", i, msg);
            }
            _exit(0);
        }
    }
    close(p[1]);
    while ((r = read(p[0], buf + len, cap - 1 - len)) > 0) {
        len += (size_t)r;
    }
    close(p[0]);
    buf[len] = '\0';
    for (int w = 0; w < WRITERS; w++) {
        int status;

        assert_int_equal(waitpid(pids[w], &status, 0), pids[w]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    for (char *line = buf, *nl; *line != '\0'; line = nl + 1) {
        cJSON *j;

        nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        j = cJSON_Parse(line);
        if (j == NULL) {
            fail_msg("interleaved line: %.60s", line);
        }
        cJSON_Delete(j);
        lines++;
    }
    assert_int_equal(lines, WRITERS * LINES);
    free(buf);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_defaults),
        T(test_int_flags),
        T(test_drift_factor),
        T(test_max_line_bytes),
        T(test_socket_mode),
        T(test_log_flags),
        T(test_prefix),
        T(test_socket_path),
        T(test_metrics_listen),
        T(test_dev_and_redis_server),
        T(test_equals_form),
        T(test_repeated_flags),
        T(test_argv_errors),
        T(test_help_version),
        T(test_missing_nodes),
        T(test_node_count),
        T(test_fd_need),
        T(test_even_warning),
        T(test_env_fallbacks),
        T(test_env_errors),
        T(test_env_empty_is_unset),
        T(test_precedence),
        T(test_file_all_keys),
        T(test_file_errors),
        T(test_uri_flag_errors),
        T(test_config_free_safe),
        T(test_log_parse),
        T(test_token_hash),
        T(test_log_json),
        T(test_log_text),
        T(test_log_levels),
        T(test_log_truncation),
        T(test_log_errno_kept),
        T(test_log_lines_atomic),
        T(test_redis_password),
        T(test_node_duplicates),
        T(test_uri_redact_without_at),
        T(test_password_precedence),
        T(test_password_long_line),
        T(test_password_file_not_echoed),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
