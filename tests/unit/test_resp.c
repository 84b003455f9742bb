/* test_resp.c: the RESP2 reply parser and command encoder
 * (sidecar/resp.c); the encoder is held to hiredis's own formatter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "resp.h"

/* Parses exactly one reply that must span all of s. */
static redisReply *parse_one(const char *s)
{
    size_t len = strlen(s), used = 0;
    redisReply *r = NULL;
    char err[64] = "";
    assert_int_equal(resp_parse(s, len, &used, &r, err, sizeof(err)), RESP_OK);
    assert_int_equal(used, len);
    assert_non_null(r);
    return r;
}

static void expect_protocol(const char *s, size_t len)
{
    size_t used = 0;
    redisReply *r = NULL;
    char err[64] = "";
    assert_int_equal(resp_parse(s, len, &used, &r, err, sizeof(err)),
                     RESP_PROTOCOL);
    assert_null(r);
    assert_true(err[0] != '\0');
}

static void test_integers(void **state)
{
    (void)state;
    redisReply *r = parse_one(":42\r\n");
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 42);
    resp_reply_free(r);
    r = parse_one(":-7\r\n");
    assert_int_equal(r->integer, -7);
    resp_reply_free(r);
    r = parse_one(":9223372036854775807\r\n");
    assert_true(r->integer == INT64_MAX);
    resp_reply_free(r);
    r = parse_one(":-9223372036854775808\r\n");
    assert_true(r->integer == INT64_MIN);
    resp_reply_free(r);
    expect_protocol(":9223372036854775808\r\n", 22);
    expect_protocol(":\r\n", 3);
    expect_protocol(":-\r\n", 4);
    expect_protocol(":1x\r\n", 5);
    expect_protocol(": 1\r\n", 5);
    expect_protocol(":12345678901234567890\r\n", 23);
}

static void test_status_and_error(void **state)
{
    (void)state;
    redisReply *r = parse_one("+OK\r\n");
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    assert_string_equal(r->str, "OK");
    assert_int_equal(r->len, 2);
    resp_reply_free(r);
    r = parse_one("-NOSCRIPT No matching script\r\n");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_string_equal(r->str, "NOSCRIPT No matching script");
    resp_reply_free(r);
    r = parse_one("+\r\n");
    assert_int_equal(r->len, 0);
    assert_string_equal(r->str, "");
    resp_reply_free(r);
}

static void test_bulk(void **state)
{
    (void)state;
    redisReply *r = parse_one("$5\r\nhello\r\n");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, 5);
    assert_string_equal(r->str, "hello");
    resp_reply_free(r);
    r = parse_one("$0\r\n\r\n");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, 0);
    resp_reply_free(r);
    r = parse_one("$4\r\na\r\nb\r\n"); /* CRLF inside the payload */
    assert_int_equal(r->len, 4);
    assert_memory_equal(r->str, "a\r\nb", 4);
    resp_reply_free(r);
    {
        static const char nul[] = "$3\r\na\0b\r\n"; /* binary-safe */
        size_t used = 0;
        char err[64];
        assert_int_equal(
            resp_parse(nul, sizeof(nul) - 1, &used, &r, err, sizeof(err)),
            RESP_OK);
        assert_int_equal(used, sizeof(nul) - 1);
        assert_int_equal(r->len, 3);
        assert_memory_equal(r->str, "a\0b", 3);
        resp_reply_free(r);
    }
    r = parse_one("$-1\r\n");
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    resp_reply_free(r);
    expect_protocol("$-2\r\n", 5);
    expect_protocol("$x\r\n", 4);
    expect_protocol("$1\r\nab\r\n", 8); /* payload longer than said */
    expect_protocol("$99999999999\r\n", 14);
}

static void test_arrays(void **state)
{
    (void)state;
    redisReply *r = parse_one("*2\r\n:1\r\n:17\r\n"); /* an acquire answer */
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_int_equal(r->element[0]->integer, 1);
    assert_int_equal(r->element[1]->integer, 17);
    resp_reply_free(r);
    r = parse_one("*3\r\n+a\r\n$1\r\nb\r\n:3\r\n"); /* vector on the heap */
    assert_int_equal(r->elements, 3);
    assert_string_equal(r->element[0]->str, "a");
    assert_string_equal(r->element[1]->str, "b");
    assert_int_equal(r->element[2]->integer, 3);
    resp_reply_free(r);
    r = parse_one("*0\r\n");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 0);
    resp_reply_free(r);
    r = parse_one("*-1\r\n");
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    resp_reply_free(r);
    r = parse_one("*2\r\n*1\r\n-ERR x\r\n$-1\r\n");
    assert_int_equal(r->element[0]->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[0]->element[0]->type, REDIS_REPLY_ERROR);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_NIL);
    resp_reply_free(r);
    expect_protocol("*-2\r\n", 5);
    expect_protocol("*2000000\r\n", 10);
    expect_protocol("*2\r\n:1\r\n!x\r\n",
                    12); /* a bad element frees the rest */
}

static void test_depth_limit(void **state)
{
    (void)state;
    char buf[256];
    size_t n = 0;
    for (int i = 0; i < RESP_MAX_DEPTH; i++) {
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "*1\r\n");
    }
    n += (size_t)snprintf(buf + n, sizeof(buf) - n, ":1\r\n");
    redisReply *r = parse_one(buf); /* RESP_MAX_DEPTH levels: fine */
    resp_reply_free(r);
    char deeper[260] = "*1\r\n";
    strcat(deeper, buf);
    expect_protocol(deeper, strlen(deeper));
}

/* The size limits are decided on the header alone, before any of the
 * bytes it announces has arrived: nothing is buffered or allocated for a
 * length over them (hiredis 0.14's reader does both, CONTRIBUTING.md). */
static void test_limits_from_the_header(void **state)
{
    (void)state;
    char buf[64];
    size_t used = 0;
    redisReply *r = NULL;
    char err[64] = "";
    int n = snprintf(buf, sizeof(buf), "$%u\r\n", RESP_MAX_BULK);
    assert_int_equal(resp_parse(buf, (size_t)n, &used, &r, err, sizeof(err)),
                     RESP_INCOMPLETE); /* at the limit: wait for it */
    assert_null(r);
    n = snprintf(buf, sizeof(buf), "$%u\r\n", RESP_MAX_BULK + 1);
    expect_protocol(buf, (size_t)n);
    n = snprintf(buf, sizeof(buf), "*%d\r\n", RESP_MAX_ELEMENTS);
    assert_int_equal(resp_parse(buf, (size_t)n, &used, &r, err, sizeof(err)),
                     RESP_INCOMPLETE);
    assert_null(r);
    n = snprintf(buf, sizeof(buf), "*%d\r\n", RESP_MAX_ELEMENTS + 1);
    expect_protocol(buf, (size_t)n);
    expect_protocol("$3\r\nabcXY", 9); /* no CRLF after the bytes */
}

/* The pooled objects a reader builds replies from: what resp_parse
 * returns, and what resp_reply_free takes back, partly filled arrays
 * included (a reader that fails mid-array frees what it has). */
static void test_reply_objects(void **state)
{
    (void)state;
    redisReply *r = resp_reply_new(REDIS_REPLY_INTEGER);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 0);
    assert_null(r->str);
    assert_null(r->element);
    resp_reply_free(r);

    static const char bytes[] = "a\0b";
    r = resp_reply_string(REDIS_REPLY_STRING, bytes, 3);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, 3);
    assert_memory_equal(r->str, "a\0b", 3);
    assert_int_equal(r->str[3], '\0');
    assert_ptr_not_equal(r->str, bytes);
    resp_reply_free(r);
    r = resp_reply_string(REDIS_REPLY_STATUS, "OK", 0);
    assert_string_equal(r->str, "");
    resp_reply_free(r);

    r = resp_reply_array(0);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 0);
    resp_reply_free(r);
    for (size_t n = 1; n <= 5; n++) { /* in the object, then on the heap */
        r = resp_reply_array(n);
        assert_non_null(r);
        assert_int_equal(r->elements, n);
        for (size_t i = 0; i < n; i++) {
            assert_null(r->element[i]);
        }
        r->element[0] = resp_reply_new(REDIS_REPLY_NIL); /* the rest NULL */
        resp_reply_free(r);
    }

    /* The same objects resp_parse hands out: one freed comes back. */
    r = resp_reply_new(REDIS_REPLY_NIL);
    resp_reply_free(r);
    redisReply *again = parse_one(":5\r\n");
    assert_ptr_equal(again, r);
    assert_int_equal(again->integer, 5);
    resp_reply_free(again);
}

static void test_unknown_type_and_bad_lines(void **state)
{
    (void)state;
    expect_protocol("!5\r\nhello\r\n", 11);
    expect_protocol(":1\rx", 4); /* CR without LF */
    expect_protocol("\r\n", 2);
}

/* Every split point of a stream of replies: the prefix is incomplete (and
 * allocates nothing that leaks: ASan and valgrind watch), and parsing in
 * order yields every reply with the right sizes. */
static void test_incomplete_at_every_split(void **state)
{
    (void)state;
    static const char stream[] = "*2\r\n:1\r\n:42\r\n"
                                 "+OK\r\n"
                                 "$11\r\nrun_id:abcd\r\n"
                                 "*3\r\n$-1\r\n*1\r\n:5\r\n-ERR no\r\n"
                                 ":0\r\n";
    static const size_t sizes[] = {13, 5, 18, 26, 4};
    size_t total = sizeof(stream) - 1;
    size_t off = 0;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        for (size_t cut = 0; cut < sizes[k]; cut++) {
            size_t used = 99;
            redisReply *r = NULL;
            char err[64];
            assert_int_equal(
                resp_parse(stream + off, cut, &used, &r, err, sizeof(err)),
                RESP_INCOMPLETE);
            assert_null(r);
        }
        size_t used = 0;
        redisReply *r = NULL;
        char err[64];
        assert_int_equal(
            resp_parse(stream + off, total - off, &used, &r, err, sizeof(err)),
            RESP_OK);
        assert_int_equal(used, sizes[k]);
        resp_reply_free(r);
        off += used;
    }
    assert_int_equal(off, total);
}

static void test_free_null(void **state)
{
    (void)state;
    resp_reply_free(NULL);
}

/* ---- encoding ---------------------------------------------------------- */

static void test_digits(void **state)
{
    (void)state;
    static const struct {
        uint64_t n;
        size_t d;
    } cases[] = {
        {0, 1},   {9, 1},      {10, 2},      {99, 2},
        {100, 3}, {999999, 6}, {1000000, 7}, {UINT64_MAX, 20},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(resp_digits(cases[i].n), cases[i].d);
    }
    assert_int_equal(resp_header_len(3), 4);  /* *3\r\n */
    assert_int_equal(resp_header_len(10), 5); /* *10\r\n */
    assert_int_equal(resp_bulk_len(0), 6);    /* $0\r\n\r\n */
    assert_int_equal(resp_bulk_len(10), 5 + 2 + 10);
}

/* Encodes into a buffer of exactly the size announced (ASan sees a byte
 * too many) and checks the bytes. */
static void expect_command(int argc, const char **argv, const size_t *lens,
                           const char *want, size_t want_len)
{
    size_t len = resp_command_len(argc, lens);
    assert_int_equal(len, want_len);
    char *buf = malloc(len > 0 ? len : 1);
    assert_non_null(buf);
    char *end = resp_put_command(buf, argc, argv, lens);
    assert_int_equal((size_t)(end - buf), len);
    assert_memory_equal(buf, want, len);
    free(buf);
}

static void test_encode_vectors(void **state)
{
    (void)state;
    const char *set[] = {"SET", "k", "v"};
    size_t set_l[] = {3, 1, 1};
    static const char set_want[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
    expect_command(3, set, set_l, set_want, sizeof(set_want) - 1);

    /* An empty argument, and bytes RESP must carry as they are. */
    const char *bin[] = {"", "a\r\n\0b"};
    size_t bin_l[] = {0, 5};
    static const char bin_want[] = "*2\r\n$0\r\n\r\n$5\r\na\r\n\0b\r\n";
    expect_command(2, bin, bin_l, bin_want, sizeof(bin_want) - 1);

    /* No arguments at all is an empty array. */
    expect_command(0, NULL, NULL, "*0\r\n", 4);

    /* Numbers as bulk strings, the way numkeys goes out. */
    static const struct {
        uint64_t v;
        const char *want;
    } nums[] = {
        {0, "$1\r\n0\r\n"},
        {7, "$1\r\n7\r\n"},
        {64, "$2\r\n64\r\n"},
        {100, "$3\r\n100\r\n"},
        {UINT64_MAX, "$20\r\n18446744073709551615\r\n"},
    };
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        char buf[32];
        size_t len = resp_bulk_len(resp_digits(nums[i].v));
        char *end = resp_put_bulk_uint(buf, nums[i].v);
        assert_int_equal((size_t)(end - buf), len);
        assert_int_equal(len, strlen(nums[i].want));
        assert_memory_equal(buf, nums[i].want, len);
    }

    /* Pieces put together make the same bytes as the whole. */
    char buf[64];
    char *q = resp_put_header(buf, '*', 3);
    q = resp_put_bulk(q, "SET", 3);
    q = resp_put_bulks(q, 2, set + 1, set_l + 1);
    assert_int_equal((size_t)(q - buf), sizeof(set_want) - 1);
    assert_memory_equal(buf, set_want, sizeof(set_want) - 1);
    assert_int_equal(resp_bulks_len(2, set_l + 1), 14);
}

/* Random commands, byte for byte what hiredis's formatter writes, and
 * read back by the parser as the same array. */
static void test_encode_matches_hiredis(void **state)
{
    (void)state;
    static const size_t sizes[] = {0,   1,   9,   10,   11,  99,
                                   100, 101, 999, 1000, 4096};
    unsigned seed = 12345;
    static char pool[4096];
    for (size_t i = 0; i < sizeof(pool); i++) {
        seed = seed * 1103515245u + 12345u;
        pool[i] = (char)(seed >> 16);
    }
    for (int round = 0; round < 500; round++) {
        const char *argv[24];
        size_t lens[24];
        seed = seed * 1103515245u + 12345u;
        int argc = 1 + (int)((seed >> 16) % 24);
        for (int i = 0; i < argc; i++) {
            seed = seed * 1103515245u + 12345u;
            lens[i] = sizes[(seed >> 16) % (sizeof(sizes) / sizeof(sizes[0]))];
            argv[i] = pool + (seed >> 8) % (sizeof(pool) - lens[i] + 1);
        }
        char *want = NULL;
        long long want_len = redisFormatCommandArgv(&want, argc, argv, lens);
        assert_true(want_len > 0);
        size_t len = resp_command_len(argc, lens);
        assert_int_equal(len, (size_t)want_len);
        char *buf = malloc(len);
        assert_non_null(buf);
        assert_ptr_equal(resp_put_command(buf, argc, argv, lens), buf + len);
        assert_memory_equal(buf, want, len);
        redisFreeCommand(want);

        size_t used = 0;
        redisReply *r = NULL;
        char err[64];
        assert_int_equal(resp_parse(buf, len, &used, &r, err, sizeof(err)),
                         RESP_OK);
        assert_int_equal(used, len);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, (size_t)argc);
        for (int i = 0; i < argc; i++) {
            assert_int_equal(r->element[i]->len, lens[i]);
            assert_memory_equal(r->element[i]->str, argv[i], lens[i]);
        }
        resp_reply_free(r);
        free(buf);
    }
}

static int teardown(void **state)
{
    (void)state;
    resp_pool_drain();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_status_and_error),
        cmocka_unit_test(test_bulk),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_limits_from_the_header),
        cmocka_unit_test(test_reply_objects),
        cmocka_unit_test(test_unknown_type_and_bad_lines),
        cmocka_unit_test(test_incomplete_at_every_split),
        cmocka_unit_test(test_free_null),
        cmocka_unit_test(test_digits),
        cmocka_unit_test(test_encode_vectors),
        cmocka_unit_test(test_encode_matches_hiredis),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
