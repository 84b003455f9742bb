/* test_info.c: reading Redis's INFO text (info.c): fields, the server
 * version that picks the native acquire or the script, the eviction rule
 * that warns of a node that may drop lock keys, and each field a node's
 * handshake and checks read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "info.h"

/* The shape redis-server 7.0 answers INFO server with, cut short. */
static const char SERVER[] =
    "# Server\r\n"
    "redis_version:7.0.15\r\n"
    "redis_git_sha1:00000000\r\n"
    "redis_mode:standalone\r\n"
    "run_id:3f1c8e6a2b9d4c7e8f0a1b2c3d4e5f6a7b8c9d0e\r\n"
    "uptime_in_seconds:12\r\n";

static void test_field(void **state)
{
    (void)state;
    char out[64];
    info_field(SERVER, "run_id", out, sizeof(out));
    assert_string_equal(out, "3f1c8e6a2b9d4c7e8f0a1b2c3d4e5f6a7b8c9d0e");
    info_field(SERVER, "uptime_in_seconds", out, sizeof(out));
    assert_string_equal(out, "12"); /* the last line, its \r\n cut */
    /* a whole name only: not the prefix of a longer one, nor its tail */
    info_field(SERVER, "redis", out, sizeof(out));
    assert_string_equal(out, "");
    info_field(SERVER, "mode", out, sizeof(out));
    assert_string_equal(out, "");
    info_field(SERVER, "redis_mode", out, sizeof(out));
    assert_string_equal(out, "standalone");
    /* absent, empty text, a value cut to the buffer */
    info_field(SERVER, "master_replid", out, sizeof(out));
    assert_string_equal(out, "");
    info_field("", "run_id", out, sizeof(out));
    assert_string_equal(out, "");
    char small[4];
    info_field(SERVER, "redis_mode", small, sizeof(small));
    assert_string_equal(small, "sta");
    /* "\n" alone ends a line too, and no newline at the end */
    info_field("a:1\nb:2", "b", out, sizeof(out));
    assert_string_equal(out, "2");
    info_field("a:1\nb:", "b", out, sizeof(out));
    assert_string_equal(out, "");
}

static uint32_t version_of(const char *v)
{
    char text[96];
    snprintf(text, sizeof(text), "# Server\r\nredis_version:%s\r\n", v);
    return info_version(text);
}

static void test_version(void **state)
{
    (void)state;
    assert_int_equal(info_version(SERVER), 70015);
    assert_int_equal(version_of("7.0.0"), 70000);
    assert_int_equal(version_of("6.2.14"), 60214);
    assert_int_equal(version_of("7.2.4"), 70204);
    assert_int_equal(version_of("2.8.24"), 20824);
    /* a short version: the missing parts are 0 */
    assert_int_equal(version_of("7"), 70000);
    assert_int_equal(version_of("7.2"), 70200);
    /* a part that is no number up to 99 counts as 0, never as more: an
     * overflowing minor must not read as a later major */
    assert_int_equal(version_of("7.100.0"), 70000);
    assert_int_equal(version_of("6.99.100"), 69900);
    assert_int_equal(version_of("7.x"), 70000);
    /* no usable major: unknown, so the script path */
    assert_int_equal(version_of("255.255.255"), 0);
    assert_int_equal(version_of("abc"), 0);
    assert_int_equal(version_of(""), 0);
    assert_int_equal(info_version("# Server\r\nredis_mode:standalone\r\n"), 0);
    assert_int_equal(info_version(""), 0);
    /* only the field itself, not a value that mentions it */
    assert_int_equal(
        info_version("# Server\r\nx:redis_version:9.9.9\r\nredis_version:6.0."
                     "1\r\n"),
        60001);
}

static void test_evicts(void **state)
{
    (void)state;
    assert_false(info_evicts("0", "allkeys-lru")); /* no maxmemory */
    assert_false(info_evicts("", "volatile-lru")); /* field absent */
    assert_false(info_evicts("1048576", "noeviction"));
    assert_false(info_evicts("1048576", ""));
    assert_true(info_evicts("1048576", "allkeys-lru"));
    /* every lock key has a TTL: the volatile-* policies evict them too */
    assert_true(info_evicts("1048576", "volatile-ttl"));
    assert_true(info_evicts("1", "volatile-lru"));
}

static void test_server(void **state)
{
    (void)state;
    char out[48];
    info_run_id(SERVER, out, sizeof(out));
    assert_string_equal(out, "3f1c8e6a2b9d4c7e8f0a1b2c3d4e5f6a7b8c9d0e");
    info_run_id("# Server\r\n", out, sizeof(out));
    assert_string_equal(out, "");
    uint64_t up = 7;
    assert_true(info_uptime_s(SERVER, &up));
    assert_int_equal(up, 12);
    /* absent: untouched; a started server says 0 */
    up = 7;
    assert_false(info_uptime_s("run_id:x\r\n", &up));
    assert_int_equal(up, 7);
    assert_true(info_uptime_s("uptime_in_seconds:0\r\n", &up));
    assert_int_equal(up, 0);
}

/* INFO replication of a primary and of a replica, cut short. */
static const char PRIMARY[] = "# Replication\r\n"
                              "role:master\r\n"
                              "connected_slaves:0\r\n"
                              "master_replid:"
                              "8e4bc1d2a3f5e6d7c8b9a0f1e2d3c4b5a6978877\r\n"
                              "master_repl_offset:0\r\n";
static const char REPLICA[] = "# Replication\r\n"
                              "role:slave\r\n"
                              "master_host:127.0.0.1\r\n"
                              "master_port:6380\r\n"
                              "master_link_status:up\r\n"
                              "master_replid:"
                              "1111111111111111111111111111111111111111\r\n";

static void test_replication(void **state)
{
    (void)state;
    char id[48];
    info_replid(PRIMARY, id, sizeof(id));
    assert_string_equal(id, "8e4bc1d2a3f5e6d7c8b9a0f1e2d3c4b5a6978877");
    info_replid(REPLICA, id, sizeof(id));
    assert_string_equal(id, "1111111111111111111111111111111111111111");
    /* before Redis 4: no replication id */
    info_replid("# Replication\r\nrole:master\r\n", id, sizeof(id));
    assert_string_equal(id, "");
    char master[80] = "stale";
    assert_false(info_master(PRIMARY, master, sizeof(master)));
    assert_string_equal(master, "");
    assert_true(info_master(REPLICA, master, sizeof(master)));
    assert_string_equal(master, "127.0.0.1:6380");
    /* cut to the buffer, never past it */
    char small[8];
    assert_true(info_master(REPLICA, small, sizeof(small)));
    assert_string_equal(small, "127.0.0");
    /* a replica whose master is not named yet */
    assert_true(info_master("role:slave\r\n", master, sizeof(master)));
    assert_string_equal(master, ":");
}

static void test_persistence_memory(void **state)
{
    (void)state;
    assert_true(info_aof_off("# Persistence\r\naof_enabled:0\r\n"));
    assert_false(info_aof_off("# Persistence\r\naof_enabled:1\r\n"));
    assert_false(info_aof_off("# Persistence\r\nloading:0\r\n"));
    char maxmemory[32], policy[32];
    assert_true(info_eviction("maxmemory:1048576\r\n"
                              "maxmemory_human:1.00M\r\n"
                              "maxmemory_policy:allkeys-lru\r\n",
                              maxmemory, sizeof(maxmemory), policy,
                              sizeof(policy)));
    assert_string_equal(maxmemory, "1048576");
    assert_string_equal(policy, "allkeys-lru");
    assert_false(info_eviction("maxmemory:0\r\n"
                               "maxmemory_policy:allkeys-lru\r\n",
                               maxmemory, sizeof(maxmemory), policy,
                               sizeof(policy)));
    assert_string_equal(maxmemory, "0");
    assert_false(info_eviction("", maxmemory, sizeof(maxmemory), policy,
                               sizeof(policy)));
    assert_string_equal(maxmemory, "");
    assert_string_equal(policy, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_field),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_evicts),
        cmocka_unit_test(test_server),
        cmocka_unit_test(test_replication),
        cmocka_unit_test(test_persistence_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
