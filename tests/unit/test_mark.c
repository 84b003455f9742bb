/* test_mark.c: the data-set mark a GET answered (mark.c): read from a
 * string, nil or anything else, cut at RESTART_MARK_LEN; and the verdict
 * on a live connection: refused, stood, gone or changed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "mark.h"

static redisReply str_reply(const char *s)
{
    redisReply r = {.type = REDIS_REPLY_STRING};
    r.str = (char *)s;
    r.len = strlen(s);
    return r;
}

static void test_read_string(void **state)
{
    (void)state;
    redisReply r = str_reply("a1b2");
    char out[RESTART_MARK_LEN + 1];
    memset(out, 'x', sizeof(out));
    mark_read(&r, out);
    assert_string_equal(out, "a1b2");
}

static void test_read_nil_and_others(void **state)
{
    (void)state;
    char out[RESTART_MARK_LEN + 1];
    redisReply nil = {.type = REDIS_REPLY_NIL};
    memset(out, 'x', sizeof(out));
    mark_read(&nil, out);
    assert_string_equal(out, "");
    redisReply num = {.type = REDIS_REPLY_INTEGER, .integer = 7};
    memset(out, 'x', sizeof(out));
    mark_read(&num, out);
    assert_string_equal(out, "");
    static char st[] = "OK";
    redisReply status = {.type = REDIS_REPLY_STATUS, .str = st, .len = 2};
    mark_read(&status, out);
    assert_string_equal(out, "");
}

static void test_read_cut_at_mark_len(void **state)
{
    (void)state;
    char longer[RESTART_MARK_LEN + 9];
    memset(longer, 'm', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    redisReply r = str_reply(longer);
    char out[RESTART_MARK_LEN + 1];
    mark_read(&r, out);
    assert_int_equal(strlen(out), RESTART_MARK_LEN);
    assert_memory_equal(out, longer, RESTART_MARK_LEN);
}

static void test_verdict_error_is_refused(void **state)
{
    (void)state;
    static char e[] = "NOPERM this user has no permissions";
    redisReply err = {.type = REDIS_REPLY_ERROR, .str = e, .len = strlen(e)};
    assert_int_equal(mark_verdict("m1", &err), MARK_REFUSED);
    /* Whatever the connection came up with. */
    assert_int_equal(mark_verdict("", &err), MARK_REFUSED);
}

static void test_verdict_stood(void **state)
{
    (void)state;
    redisReply r = str_reply("m1");
    assert_int_equal(mark_verdict("m1", &r), MARK_STOOD);
}

static void test_verdict_no_mark_to_compare(void **state)
{
    (void)state;
    redisReply r = str_reply("m2");
    redisReply nil = {.type = REDIS_REPLY_NIL};
    assert_int_equal(mark_verdict("", &r), MARK_STOOD);
    assert_int_equal(mark_verdict("", &nil), MARK_STOOD);
}

static void test_verdict_gone(void **state)
{
    (void)state;
    redisReply nil = {.type = REDIS_REPLY_NIL};
    redisReply empty = str_reply("");
    assert_int_equal(mark_verdict("m1", &nil), MARK_GONE);
    assert_int_equal(mark_verdict("m1", &empty), MARK_GONE);
}

static void test_verdict_changed(void **state)
{
    (void)state;
    redisReply r = str_reply("m2");
    assert_int_equal(mark_verdict("m1", &r), MARK_CHANGED);
    /* A prefix of the mark is another mark. */
    redisReply part = str_reply("m");
    assert_int_equal(mark_verdict("m1", &part), MARK_CHANGED);
}

static void test_verdict_long_reply_compared_cut(void **state)
{
    (void)state;
    /* The connection's mark was read cut at RESTART_MARK_LEN too: a reply
     * that only runs on past it still shows the same mark. */
    char up[RESTART_MARK_LEN + 1];
    memset(up, 'k', RESTART_MARK_LEN);
    up[RESTART_MARK_LEN] = '\0';
    char longer[RESTART_MARK_LEN + 4];
    memcpy(longer, up, RESTART_MARK_LEN);
    memcpy(longer + RESTART_MARK_LEN, "zzz", 4);
    redisReply r = str_reply(longer);
    assert_int_equal(mark_verdict(up, &r), MARK_STOOD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_string),
        cmocka_unit_test(test_read_nil_and_others),
        cmocka_unit_test(test_read_cut_at_mark_len),
        cmocka_unit_test(test_verdict_error_is_refused),
        cmocka_unit_test(test_verdict_stood),
        cmocka_unit_test(test_verdict_no_mark_to_compare),
        cmocka_unit_test(test_verdict_gone),
        cmocka_unit_test(test_verdict_changed),
        cmocka_unit_test(test_verdict_long_reply_compared_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
