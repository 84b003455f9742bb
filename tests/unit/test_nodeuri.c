/* test_nodeuri.c: the node URI parser (sidecar/nodeuri.c): every form a
 * node may be written in, every refusal with its whole message, no
 * password in any message, and which URIs name the same server. Linked
 * with util.c only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "nodeuri.h"
#include "util.h"

#define ERRLEN 512
#define SECRET "s3cret"

struct uri_case {
    const char *uri;
    enum node_addr_kind kind;
    const char *host; /* or the path for unix */
    int port;
    const char *user;
    const char *password;
    int db;
    bool persistent;
    const char *display;
};

static const struct uri_case good_uris[] = {
    {"rediss://alice:" SECRET "@redis.example.com:6380/2", NODE_ADDR_TCP,
     "redis.example.com", 6380, "alice", SECRET, 2, false,
     "redis.example.com:6380/2"},
    {"REDISS://[::1]", NODE_ADDR_TCP, "::1", 6379, NULL, NULL, 0, false,
     "[::1]:6379"},
    {"redis://127.0.0.1:6379", NODE_ADDR_TCP, "127.0.0.1", 6379, NULL, NULL, 0,
     false, "127.0.0.1:6379"},
    {"redis://localhost", NODE_ADDR_TCP, "localhost", 6379, NULL, NULL, 0,
     false, "localhost:6379"},
    {"redis://h:1", NODE_ADDR_TCP, "h", 1, NULL, NULL, 0, false, "h:1"},
    {"redis://h:65535", NODE_ADDR_TCP, "h", 65535, NULL, NULL, 0, false,
     "h:65535"},
    {"redis://my-host_1.example.com:6380", NODE_ADDR_TCP,
     "my-host_1.example.com", 6380, NULL, NULL, 0, false,
     "my-host_1.example.com:6380"},
    {"redis://[::1]:7000", NODE_ADDR_TCP, "::1", 7000, NULL, NULL, 0, false,
     "[::1]:7000"},
    {"redis://[2001:db8::1]", NODE_ADDR_TCP, "2001:db8::1", 6379, NULL, NULL, 0,
     false, "[2001:db8::1]:6379"},
    {"redis://alice:" SECRET "@h:1", NODE_ADDR_TCP, "h", 1, "alice", SECRET, 0,
     false, "h:1"},
    {"redis://:" SECRET "@h:1", NODE_ADDR_TCP, "h", 1, NULL, SECRET, 0, false,
     "h:1"},
    {"redis://alice@h:1", NODE_ADDR_TCP, "h", 1, "alice", NULL, 0, false,
     "h:1"},
    {"unix://alice@/tmp/r.sock", NODE_ADDR_UNIX, "/tmp/r.sock", 0, "alice",
     NULL, 0, false, "unix:/tmp/r.sock"},
    {"redis://al%69ce:p%40ss%3Aw%2F@h", NODE_ADDR_TCP, "h", 6379, "alice",
     "p@ss:w/", 0, false, "h:6379"},
    {"redis://:p@ss/w?rd@[::1]:2", NODE_ADDR_TCP, "::1", 2, NULL, "p@ss/w?rd",
     0, false, "[::1]:2"},
    {"redis://:a:b@h", NODE_ADDR_TCP, "h", 6379, NULL, "a:b", 0, false,
     "h:6379"},
    {"redis://h:1/0", NODE_ADDR_TCP, "h", 1, NULL, NULL, 0, false, "h:1"},
    {"redis://h:1/", NODE_ADDR_TCP, "h", 1, NULL, NULL, 0, false, "h:1"},
    {"redis://h:1/15", NODE_ADDR_TCP, "h", 1, NULL, NULL, 15, false, "h:1/15"},
    {"redis://u:" SECRET "@h/1000000", NODE_ADDR_TCP, "h", 6379, "u", SECRET,
     1000000, false, "h:6379/1000000"},
    {"redis://h:1?persistent=1", NODE_ADDR_TCP, "h", 1, NULL, NULL, 0, true,
     "h:1"},
    {"redis://h:1/2?persistent=true", NODE_ADDR_TCP, "h", 1, NULL, NULL, 2,
     true, "h:1/2"},
    {"redis://h?persistent=0", NODE_ADDR_TCP, "h", 6379, NULL, NULL, 0, false,
     "h:6379"},
    {"REDIS://H:1", NODE_ADDR_TCP, "H", 1, NULL, NULL, 0, false, "H:1"},
    {"unix:///tmp/r.sock", NODE_ADDR_UNIX, "/tmp/r.sock", 0, NULL, NULL, 0,
     false, "unix:/tmp/r.sock"},
    {"unix:///tmp/r.sock?db=2&persistent=1", NODE_ADDR_UNIX, "/tmp/r.sock", 0,
     NULL, NULL, 2, true, "unix:/tmp/r.sock/2"},
    {"unix:///tmp/r.sock?persistent=1", NODE_ADDR_UNIX, "/tmp/r.sock", 0, NULL,
     NULL, 0, true, "unix:/tmp/r.sock"},
    {"unix://:" SECRET "@/tmp/r.sock", NODE_ADDR_UNIX, "/tmp/r.sock", 0, NULL,
     SECRET, 0, false, "unix:/tmp/r.sock"},
    {"unix://alice:" SECRET "@/tmp/r.sock?db=1", NODE_ADDR_UNIX, "/tmp/r.sock",
     0, "alice", SECRET, 1, false, "unix:/tmp/r.sock/1"},
};

static void assert_str_or_null(const char *got, const char *want)
{
    if (want == NULL) {
        assert_null(got);
    } else {
        assert_non_null(got);
        assert_string_equal(got, want);
    }
}

static void test_uri_good(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof good_uris / sizeof good_uris[0]; i++) {
        const struct uri_case *t = &good_uris[i];
        struct node_addr a;
        char err[ERRLEN];

        if (nodeuri_parse(t->uri, &a, err, sizeof err) != 0) {
            fail_msg("%s: %s", t->uri, err);
        }
        assert_int_equal(a.kind, t->kind);
        if (t->kind == NODE_ADDR_TCP) {
            assert_str_or_null(a.host, t->host);
            assert_null(a.path);
            assert_int_equal(a.port, t->port);
        } else {
            assert_str_or_null(a.path, t->host);
            assert_null(a.host);
        }
        assert_str_or_null(a.user, t->user);
        assert_str_or_null(a.password, t->password);
        assert_int_equal(a.db, t->db);
        assert_int_equal(a.persistent, t->persistent);
        assert_int_equal(a.tls, strncasecmp(t->uri, "rediss://", 9) == 0);
        assert_string_equal(a.display, t->display);
        /* The display never names the user or shows the password. */
        assert_null(strstr(a.display, SECRET));
        assert_null(strstr(a.display, "alice"));
        if (t->kind == NODE_ADDR_TCP) {
            assert_null(strchr(a.display, '@'));
        }
        nodeuri_free(&a);
        nodeuri_free(&a);
    }
}

struct bad_uri {
    const char *uri;
    const char *err; /* the whole message */
};

static const struct bad_uri bad_uris[] = {
    {"rediss://", "missing host in 'rediss://'"},
    {"rediss://u:" SECRET "@h:0", "bad port '0' in 'rediss://u:***@h:0'"},
    {"http://:" SECRET "@h:1",
     "'http://:***@h:1' is not a node URI (redis://host:port or "
     "unix:///path/redis.sock)"},
    {"u:" SECRET "@redis://h", "'u:***@redis://h' is not a node URI (redis://"
                               "host:port or unix:///path/redis.sock)"},
    {"h:6379", "'h:6379' is not a node URI (redis://host:port or "
               "unix:///path/redis.sock)"},
    {"", "'' is not a node URI (redis://host:port or "
         "unix:///path/redis.sock)"},
    {"redis://", "missing host in 'redis://'"},
    {"redis://:6379", "missing host in 'redis://:6379'"},
    {"redis://:" SECRET "@:6379", "missing host in 'redis://:***@:6379'"},
    {"redis://u:" SECRET "@h:0", "bad port '0' in 'redis://u:***@h:0'"},
    {"redis://h:65536", "bad port '65536' in 'redis://h:65536'"},
    /* A non-numeric port may be a password ("redis://user:pw"). */
    {"redis://h:abc", "bad port (not a number) in 'redis://h:***'"},
    {"redis://h:", "bad port '' in 'redis://h:'"},
    {"redis://h:-1", "bad port (not a number) in 'redis://h:***'"},
    {"redis://h:0006379", "bad port '0006379' in 'redis://h:0006379'"},
    {"redis://::1:6379",
     "IPv6 addresses go in brackets ([::1]:6379) in 'redis://:***'"},
    {"redis://[::1", "bad IPv6 address in 'redis://[:***'"},
    {"redis://[zz::1]:1", "bad IPv6 address in 'redis://[zz::1]:1'"},
    {"redis://[::1]x", "bad IPv6 address in 'redis://[::1]x'"},
    {"redis://[::1]:0", "bad port '0' in 'redis://[::1]:0'"},
    {"redis://h h:1", "bad host 'h h' in 'redis://h h:1'"},
    {"redis://1.2.3.999", "bad host '1.2.3.999' in 'redis://1.2.3.999'"},
    {"redis://h:1/x", "bad db 'x' in 'redis://h:1/x'"},
    {"redis://h:1/-1", "bad db '-1' in 'redis://h:1/-1'"},
    {"redis://h:1/1000001", "bad db '1000001' in 'redis://h:1/1000001'"},
    {"redis://h:1/2/3", "bad db '2/3' in 'redis://h:1/2/3'"},
    {"redis://h:1?db=2", "unknown parameter 'db' in 'redis://h:1?db=2'"},
    {"redis://h:1?foo=1", "unknown parameter 'foo' in 'redis://h:1?foo=1'"},
    {"redis://h:1?persistent=yes",
     "bad persistent 'yes' (1 or 0) in 'redis://h:1?persistent=yes'"},
    {"redis://@h:1", "credentials must be user@, user:password@ or "
                     ":password@ in 'redis://***@h:1'"},
    {"redis://u%zz@h", "bad %-escape in user in 'redis://***@h'"},
    {"redis://u:@h:1", "empty password in 'redis://u:***@h:1'"},
    {"redis://:" SECRET "%zz@h",
     "bad %-escape in password in 'redis://:***@h'"},
    {"redis://:" SECRET "%00@h",
     "bad %-escape in password in 'redis://:***@h'"},
    {"redis://:" SECRET "%4@h", "bad %-escape in password in 'redis://:***@h'"},
    {"redis://u%zz:" SECRET "@h",
     "bad %-escape in user in 'redis://u%zz:***@h'"},
    {"unix://tmp/r.sock",
     "socket path must be absolute (unix:///path) in 'unix://tmp/r.sock'"},
    {"unix://:" SECRET "@tmp/r.sock",
     "socket path must be absolute (unix:///path) in "
     "'unix://:***@tmp/r.sock'"},
    {"unix://", "missing socket path in 'unix://'"},
    {"unix:///run/a@b/r.sock",
     "'@' in a socket path is not supported (credentials go first: "
     "unix://:password@/path) in 'unix://***@b/r.sock'"},
    {"unix:///:" SECRET "@/tmp/r.sock",
     "'@' in a socket path is not supported (credentials go first: "
     "unix://:password@/path) in 'unix:///:***@/tmp/r.sock'"},
    {"unix://:" SECRET "@/run/a@b/r.sock",
     "socket path must be absolute (unix:///path) in "
     "'unix://:***@b/r.sock'"},
    {"unix://:" SECRET "@", "missing socket path in 'unix://:***@'"},
    {":" SECRET "://@h", "':***@h' is not a node URI (redis://host:port or "
                         "unix:///path/redis.sock)"},
    {"unix:///tmp/r.sock?db=x", "bad db 'x' in 'unix:///tmp/r.sock?db=x'"},
    {"unix:///tmp/r.sock?persistent=2",
     "bad persistent '2' (1 or 0) in 'unix:///tmp/r.sock?persistent=2'"},
    {"unix:///tmp/r.sock?user=x",
     "unknown parameter 'user' in 'unix:///tmp/r.sock?user=x'"},
};

static void test_uri_bad(void **state)
{
    char long_path[160] = "unix:///";
    struct node_addr a;
    char err[ERRLEN];

    (void)state;
    for (size_t i = 0; i < sizeof bad_uris / sizeof bad_uris[0]; i++) {
        const struct bad_uri *t = &bad_uris[i];

        if (nodeuri_parse(t->uri, &a, err, sizeof err) != -1) {
            fail_msg("%s: accepted", t->uri);
        }
        assert_string_equal(err, t->err);
        assert_null(strstr(err, SECRET));
        /* Nothing is left allocated in a refused address. */
        assert_null(a.host);
        assert_null(a.path);
        assert_null(a.user);
        assert_null(a.password);
        nodeuri_free(&a);
    }
    memset(long_path + 8, 'a', 120);
    long_path[128] = '\0';
    assert_int_equal(nodeuri_parse(long_path, &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "socket path longer than 107 bytes"));
    assert_int_equal(nodeuri_parse(NULL, &a, err, sizeof err), -1);
    /* A tiny or absent err buffer is fine. */
    assert_int_equal(nodeuri_parse("redis://h:0", &a, err, 8), -1);
    assert_int_equal(strlen(err), 7);
    assert_int_equal(nodeuri_parse("redis://h:0", &a, NULL, 0), -1);
}

/* "redis://:pw" and "redis://user:pw" hold no '@', but what follows the
 * authority's ':' is a password unless it is a port (digits). */
static void test_uri_redact_without_at(void **state)
{
    static const struct bad_uri cases[] = {
        {"redis://:" SECRET, "missing host in 'redis://:***'"},
        {"redis://user:" SECRET,
         "bad port (not a number) in 'redis://user:***'"},
        {"redis://user:" SECRET "/2?persistent=1",
         "bad port (not a number) in 'redis://user:***'"},
        {"redis://[::1]:" SECRET,
         "bad port (not a number) in 'redis://[::1]:***'"},
        {"unix://:" SECRET,
         "socket path must be absolute (unix:///path) in 'unix://:***'"},
        {"unix://user:" SECRET "/r.sock",
         "socket path must be absolute (unix:///path) in 'unix://user:***'"},
        {"http://user:" SECRET, "'http://user:***' is not a node URI "
                                "(redis://host:port or "
                                "unix:///path/redis.sock)"},
        {"user:" SECRET, "'user:***' is not a node URI (redis://host:port or "
                         "unix:///path/redis.sock)"},
        /* A port is digits and stays. */
        {"redis://h:99999", "bad port '99999' in 'redis://h:99999'"},
        {"redis://h:1/x", "bad db 'x' in 'redis://h:1/x'"},
    };
    struct node_addr a;
    char err[ERRLEN];

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (nodeuri_parse(cases[i].uri, &a, err, sizeof err) != -1) {
            fail_msg("%s: accepted", cases[i].uri);
        }
        assert_null(strstr(err, SECRET));
        assert_string_equal(err, cases[i].err);
        nodeuri_free(&a);
    }
}

/* nodeuri_redact on its own: what config.c quotes from a stray argument
 * or a bad "nodes" entry, URI or not. */
static void test_redact(void **state)
{
    static const char *const cases[][2] = {
        {"redis://u:" SECRET "@h:1/2", "redis://u:***@h:1/2"},
        {"redis://" SECRET "@h", "redis://***@h"},
        {"rediss://:" SECRET "@[::1]:7", "rediss://:***@[::1]:7"},
        {"unix://:" SECRET "@/tmp/r.sock", "unix://:***@/tmp/r.sock"},
        {"redis://h:6379/2", "redis://h:6379/2"},
        {"redis://[::1]:6379", "redis://[::1]:6379"},
        {"plain words", "plain words"},
        {"", ""},
        {"bell\a and tab\t", "bell? and tab?"},
    };
    char out[UTIL_SHOW_MAX + 4];

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_ptr_equal(nodeuri_redact(cases[i][0], out, sizeof out), out);
        assert_string_equal(out, cases[i][1]);
    }
    /* Cut at UTIL_SHOW_MAX bytes, with "..." after. */
    char long_uri[200];
    memset(long_uri, 'h', sizeof long_uri - 1);
    memcpy(long_uri, "redis://", 8);
    long_uri[sizeof long_uri - 1] = '\0';
    nodeuri_redact(long_uri, out, sizeof out);
    assert_int_equal(strlen(out), UTIL_SHOW_MAX + 3);
    assert_string_equal(out + UTIL_SHOW_MAX, "...");
}

/* db numbers are read as strtoll read them: "-0" is 0, leading zeros are
 * fine, more than 12 characters never are. */
static void test_db_edges(void **state)
{
    static const struct {
        const char *uri;
        int db;
    } good[] = {
        {"redis://h/-0", 0},
        {"redis://h/007", 7},
        {"redis://h/000000000001", 1},
        {"unix:///r.sock?db=-0", 0},
        {"unix:///r.sock?db=0001000000", 1000000},
    };
    static const char *const bad[] = {
        "redis://h/0000000000001",
        "redis://h/-",
        "redis://h/+1",
        "redis://h/ 1",
        "redis://h/1 ",
        "unix:///r.sock?db=",
        "unix:///r.sock?db=-1",
        "unix:///r.sock?db=1e3",
    };
    struct node_addr a;
    char err[ERRLEN];

    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (nodeuri_parse(good[i].uri, &a, err, sizeof err) != 0) {
            fail_msg("%s: %s", good[i].uri, err);
        }
        assert_int_equal(a.db, good[i].db);
        nodeuri_free(&a);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (nodeuri_parse(bad[i], &a, err, sizeof err) != -1) {
            fail_msg("%s: accepted as db %d", bad[i], a.db);
        }
        if (strncmp(err, "bad db '", 8) != 0) {
            fail_msg("%s: %s", bad[i], err);
        }
    }
}

/* Which URIs reach one server: whatever the spelling, credentials, db or
 * ?persistent; no DNS. */
static void test_same_server(void **state)
{
    static const char *const same[][2] = {
        {"unix:///r1.sock", "unix:///r1.sock"},
        {"unix:///a.sock", "unix:///a.sock?db=2"},
        {"unix:///run/a.sock", "unix:///run//./a.sock"},
        {"unix:///run/a.sock/", "unix:///run/a.sock"},
        {"unix:///a.sock?persistent=1", "unix://:" SECRET "@/a.sock"},
        {"redis://127.0.0.1:6379", "redis://127.0.0.1"},
        {"redis://h/0", "redis://h:6379"},
        {"redis://Host.Example:1", "redis://host.example.:1"},
        {"redis://[::1]:6379", "redis://[0:0::1]"},
        {"redis://[::ffff:1.2.3.4]", "redis://[::FFFF:1.2.3.4]"},
        {"redis://:" SECRET "@h:1", "rediss://u:other@h:1?persistent=1"},
        {"redis://h:1/1", "redis://h:1/2"},
    };
    static const char *const different[][2] = {
        {"redis://h:1", "redis://h:2"},
        {"unix:///a.sock", "unix:///b.sock"},
        {"unix:///run/a.sock", "unix:///run/../run/a.sock"},
        {"redis://localhost", "redis://127.0.0.1"},
        {"redis://127.0.0.1", "redis://[::ffff:127.0.0.1]"},
        {"unix:///a.sock", "redis://a.sock"},
        {"redis://h.", "redis://h.."},
    };
    struct node_addr a, b;
    char err[ERRLEN];

    (void)state;
    for (int k = 0; k < 2; k++) {
        const char *const(*pairs)[2] = k == 0 ? same : different;
        size_t n = k == 0 ? sizeof same / sizeof same[0]
                          : sizeof different / sizeof different[0];

        for (size_t i = 0; i < n; i++) {
            if (nodeuri_parse(pairs[i][0], &a, err, sizeof err) != 0 ||
                nodeuri_parse(pairs[i][1], &b, err, sizeof err) != 0) {
                fail_msg("%s or %s: %s", pairs[i][0], pairs[i][1], err);
            }
            if (nodeuri_same_server(&a, &b) != (k == 0) ||
                nodeuri_same_server(&b, &a) != (k == 0)) {
                fail_msg("%s and %s: %s", pairs[i][0], pairs[i][1],
                         k == 0 ? "not the same" : "the same");
            }
            nodeuri_free(&a);
            nodeuri_free(&b);
        }
    }
}

/* --metrics-listen's "host:port": a node URI's host and port rules. */
static void test_valid_hostport(void **state)
{
    static const char *const good[] = {
        "127.0.0.1:9121", "localhost:1",      "my-host_1.example.com:65535",
        "[::1]:9121",     "[2001:db8::1]:80",
    };
    static const char *const bad[] = {
        "",          "127.0.0.1", "h:",          "h:0",   "h:65536",
        "h:0009121", ":1",        "::1:9121",    "[::1]", "[::1]:",
        "[zz::1]:1", "[::1]x:1",  "1.2.3.999:1", "h h:1", "h:1:2",
        "h:+1",      "h:1x",
    };

    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (!nodeuri_valid_hostport(good[i])) {
            fail_msg("'%s': refused", good[i]);
        }
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (nodeuri_valid_hostport(bad[i])) {
            fail_msg("'%s': accepted", bad[i]);
        }
    }
}

static void test_free_safe(void **state)
{
    struct node_addr a;
    char err[ERRLEN];

    (void)state;
    nodeuri_free(NULL);
    memset(&a, 0, sizeof a);
    nodeuri_free(&a);
    assert_int_equal(
        nodeuri_parse("redis://u:" SECRET "@h:1", &a, err, sizeof err), 0);
    nodeuri_free(&a);
    assert_null(a.password);
    assert_null(a.host);
    nodeuri_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uri_good),
        cmocka_unit_test(test_uri_bad),
        cmocka_unit_test(test_uri_redact_without_at),
        cmocka_unit_test(test_redact),
        cmocka_unit_test(test_db_edges),
        cmocka_unit_test(test_same_server),
        cmocka_unit_test(test_valid_hostport),
        cmocka_unit_test(test_free_safe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
