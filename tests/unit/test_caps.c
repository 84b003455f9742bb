/* test_caps.c: a server's command table read for native forms (caps.c),
 * over replies recorded byte for byte from real servers (replies/, parsed
 * by resp.c as the daemon parses them): COMMAND DOCS SET of Valkey 8.1
 * (SET ... IFEQ), of Redis 7.0 (none), and Redis 6.0's error (no COMMAND
 * DOCS); COMMAND INFO DELIFEQ DELEX of Redis 7.0 alone (two nils) and with
 * the test module (tests/modules/delifeq.c) loaded either way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "caps.h"
#include "resp.h"

/* The recorded reply in REPLIES_DIR/name, parsed whole. */
static redisReply *recorded(const char *name)
{
    const char *dir = getenv("REPLIES_DIR");
    char path[512];
    static char buf[16384];
    snprintf(path, sizeof(path), "%s/%s", dir != NULL ? dir : "replies", name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    assert_true(n > 0 && n < sizeof(buf));
    redisReply *r = NULL;
    size_t used = 0;
    char err[64];
    assert_int_equal(resp_parse(buf, n, &used, &r, err, sizeof(err)), RESP_OK);
    assert_int_equal(used, n); /* one reply, all of the file */
    return r;
}

static unsigned docs(const char *name)
{
    redisReply *r = recorded(name);
    unsigned caps = caps_set_docs(r);
    resp_reply_free(r);
    return caps;
}

static unsigned info(const char *name)
{
    redisReply *r = recorded(name);
    unsigned caps = caps_command_info(r);
    resp_reply_free(r);
    return caps;
}

static void test_set_docs(void **state)
{
    (void)state;
    assert_int_equal(docs("valkey-8.1-command-docs-set.resp"), CAPS_SET_IFEQ);
    assert_int_equal(docs("redis-7.0-command-docs-set.resp"), 0);
    /* -ERR Unknown subcommand: no native form, not a failure */
    assert_int_equal(docs("redis-6.0-command-docs-set.resp"), 0);
}

static void test_command_info(void **state)
{
    (void)state;
    assert_int_equal(info("redis-7.0-command-info-delifeq-delex.resp"), 0);
    assert_int_equal(info("valkey-8.1-command-info-delifeq-delex.resp"), 0);
    assert_int_equal(
        info("redis-7.0-delifeq-module-command-info-delifeq-delex.resp"),
        CAPS_DELIFEQ);
    assert_int_equal(
        info("redis-7.0-delex-module-command-info-delifeq-delex.resp"),
        CAPS_DELEX);
}

/* Shapes no server sent: an error, a token IFEQ only as a value of
 * another name, a token in another case, an empty info entry. */
static void test_other_shapes(void **state)
{
    (void)state;
    static const struct {
        const char *bytes;
        unsigned docs, info;
    } cases[] = {
        {"-NOPERM this user has no permissions to run the 'command|docs' "
         "command\r\n",
         0, 0},
        {"*2\r\n$3\r\nset\r\n*2\r\n$4\r\nname\r\n$4\r\nIFEQ\r\n", 0, 0},
        {"*2\r\n$3\r\nset\r\n*2\r\n$5\r\ntoken\r\n$4\r\nifeq\r\n",
         CAPS_SET_IFEQ, 0},
        {"*2\r\n*0\r\n*1\r\n$5\r\nDELEX\r\n", 0, CAPS_DELEX},
        {":1\r\n", 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        redisReply *r = NULL;
        size_t used;
        char err[64];
        assert_int_equal(resp_parse(cases[i].bytes, strlen(cases[i].bytes),
                                    &used, &r, err, sizeof(err)),
                         RESP_OK);
        assert_int_equal(caps_set_docs(r), cases[i].docs);
        assert_int_equal(caps_command_info(r), cases[i].info);
        resp_reply_free(r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_docs),
        cmocka_unit_test(test_command_info),
        cmocka_unit_test(test_other_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
