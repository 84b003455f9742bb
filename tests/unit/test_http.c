/* test_http.c: unit tests of the HTTP/1.1 reader, router and head writer
 * (sidecar/http.c), linked with proto.c and util.c only. Every request is
 * also fed one byte at a time from an exact-size heap copy, so a read past
 * the bytes given shows up under ASan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http.h"

#define MAX_BODY 65536
#define TOKEN "0123456789abcdef0123456789abcdef"
#define TOKEN2 "fedcba9876543210fedcba9876543210"

static struct http_limits lim_default(void)
{
    struct http_limits lim;

    http_limits_default(&lim, MAX_BODY);
    return lim;
}

/* Parses buf[0..len) from an exact-size heap copy. */
static enum http_parse_result parse_copy(const char *buf, size_t len,
                                         const struct http_limits *lim,
                                         struct http_request *out, char **copy)
{
    *copy = malloc(len > 0 ? len : 1);
    assert_non_null(*copy);
    memcpy(*copy, buf, len);
    return http_parse(*copy, len, lim, out);
}

static enum http_parse_result parse_str(const char *s, struct http_request *out)
{
    struct http_limits lim = lim_default();

    return http_parse(s, strlen(s), &lim, out);
}

/* Asserts that every proper prefix of a complete request is INCOMPLETE and
 * that the whole gives the same request as parsing it at once. */
static void assert_bytewise_same(const char *buf, size_t len,
                                 const struct http_limits *lim)
{
    struct http_request whole, part;
    char *copy;

    assert_int_equal(http_parse(buf, len, lim, &whole), HTTP_COMPLETE);
    for (size_t i = 0; i < len; i++) {
        enum http_parse_result rc = parse_copy(buf, i, lim, &part, &copy);
        if (rc != HTTP_INCOMPLETE) {
            print_error("prefix %zu of %zu: %d (%d %s)\n", i, len, rc,
                        part.error_status, part.error_message);
        }
        assert_int_equal(rc, HTTP_INCOMPLETE);
        free(copy);
    }
    assert_int_equal(parse_copy(buf, len, lim, &part, &copy), HTTP_COMPLETE);
    assert_int_equal(part.method, whole.method);
    assert_string_equal(part.path, whole.path);
    assert_string_equal(part.query, whole.query);
    assert_int_equal(part.body_len, whole.body_len);
    assert_int_equal(part.body - copy, whole.body - buf);
    assert_memory_equal(part.body, whole.body, whole.body_len);
    assert_int_equal(part.keep_alive, whole.keep_alive);
    assert_int_equal(part.has_length, whole.has_length);
    assert_int_equal(part.consumed, whole.consumed);
    assert_int_equal(part.consumed, len);
    assert_false(part.expect_continue);
    assert_true(part.head_done);
    free(copy);
}

/* Asserts that a bad request fails with status, both at once and when fed
 * byte by byte (where it may fail early, but never otherwise). */
static void assert_error_bytewise(const char *buf, size_t len,
                                  const struct http_limits *lim, int status)
{
    struct http_request out;
    char *copy;

    assert_int_equal(http_parse(buf, len, lim, &out), HTTP_ERROR);
    if (out.error_status != status) {
        print_error("%.*s: got %d (%s)\n", (int)(len < 80 ? len : 80), buf,
                    out.error_status, out.error_message);
    }
    assert_int_equal(out.error_status, status);
    assert_non_null(out.error_message);
    const char *whole_msg = out.error_message;
    for (size_t i = 1; i <= len; i++) {
        enum http_parse_result rc = parse_copy(buf, i, lim, &out, &copy);
        free(copy);
        if (rc == HTTP_INCOMPLETE) {
            continue;
        }
        assert_int_equal(rc, HTTP_ERROR);
        assert_int_equal(out.error_status, status);
        assert_string_equal(out.error_message, whole_msg);
        return;
    }
    fail_msg("never failed when fed byte by byte");
}

static void expect_error(const char *raw, int status)
{
    struct http_limits lim = lim_default();

    assert_error_bytewise(raw, strlen(raw), &lim, status);
}

/* ---- http_parse: well-formed requests ---- */

static const char *const valid_requests[] = {
    "GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n",
    "GET /v1/ping HTTP/1.1\n\n",
    "GET /v1/ping HTTP/1.1\r\nHost: x\n\r\n",
    "POST /v1/locks HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
    "application/json\r\nContent-Length: 16\r\n\r\n{\"resource\":\"a\"}",
    "POST /v1/locks HTTP/1.1\r\n\r\n",
    "POST /v1/locks HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    "DELETE /v1/locks/" TOKEN "?resource=a%20b HTTP/1.1\r\n\r\n",
    "GET /v1/health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    "GET http://localhost/metrics?x=1 HTTP/1.1\r\n\r\n",
    "\r\n\r\nGET /v1/ping HTTP/1.1\r\n\r\n",
    "GET /v1/%70ing HTTP/1.1\r\nX-Empty:\r\nX-Ows: \t v \t\r\n\r\n",
    "PUT /v1/locks HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
    "POST /v1/locks HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: "
    "2\r\n\r\n{}",
    "GET /v1/ping HTTP/1.1\r\nX-Obs-Text: caf\xc3\xa9\r\n\r\n",
};

static void test_valid_bytewise(void **state)
{
    struct http_limits lim = lim_default();

    (void)state;
    for (size_t i = 0; i < sizeof(valid_requests) / sizeof(*valid_requests);
         i++) {
        assert_bytewise_same(valid_requests[i], strlen(valid_requests[i]),
                             &lim);
    }
}

static void test_basic_fields(void **state)
{
    struct http_request r;
    const char *raw = "POST /v1/locks HTTP/1.1\r\nContent-Length: 4\r\n"
                      "\r\nbodyEXTRA";

    (void)state;
    assert_int_equal(parse_str(raw, &r), HTTP_COMPLETE);
    assert_int_equal(r.method, HTTP_POST);
    assert_string_equal(r.path, "/v1/locks");
    assert_string_equal(r.query, "");
    assert_int_equal(r.body_len, 4);
    assert_memory_equal(r.body, "body", 4);
    assert_ptr_equal(r.body, raw + strlen(raw) - 9);
    assert_int_equal(r.consumed, strlen(raw) - 5);
    assert_true(r.keep_alive);
    assert_true(r.has_length);
    assert_true(r.head_done);
    assert_false(r.expect_continue);
}

static void test_methods(void **state)
{
    struct http_request r;

    (void)state;
    assert_int_equal(parse_str("GET / HTTP/1.1\r\n\r\n", &r), HTTP_COMPLETE);
    assert_int_equal(r.method, HTTP_GET);
    assert_int_equal(parse_str("HEAD / HTTP/1.1\r\n\r\n", &r), HTTP_COMPLETE);
    assert_int_equal(r.method, HTTP_HEAD);
    assert_int_equal(parse_str("DELETE / HTTP/1.1\r\n\r\n", &r), HTTP_COMPLETE);
    assert_int_equal(r.method, HTTP_DELETE);
    /* Valid tokens we do not serve: parsed, routed to 405. */
    assert_int_equal(parse_str("PATCH / HTTP/1.1\r\n\r\n", &r), HTTP_COMPLETE);
    assert_int_equal(r.method, HTTP_OTHER);
    assert_int_equal(parse_str("get / HTTP/1.1\r\n\r\n", &r), HTTP_COMPLETE);
    assert_int_equal(r.method, HTTP_OTHER);
    assert_int_equal(parse_str("GETS / HTTP/1.1\r\n\r\n", &r), HTTP_COMPLETE);
    assert_int_equal(r.method, HTTP_OTHER);
    assert_int_equal(parse_str("OPTIONS * HTTP/1.1\r\n\r\n", &r),
                     HTTP_COMPLETE);
    assert_string_equal(r.path, "*");
}

/* ---- http_parse: malformed requests ---- */

struct error_case {
    const char *raw;
    int status;
};

static const struct error_case error_cases[] = {
    /* request line */
    {"G@T / HTTP/1.1\r\n\r\n", 400},
    {" GET / HTTP/1.1\r\n\r\n", 400},
    {"GET  / HTTP/1.1\r\n\r\n", 400},
    {"GET / HTTP/1.1 \r\n\r\n", 400},
    {"GET /\r\n\r\n", 400},
    {"GET\r\n\r\n", 400},
    {"GET / http/1.1\r\n\r\n", 400},
    {"GET / HTTP/1\r\n\r\n", 400},
    {"GET / HTTP/1.10\r\n\r\n", 400},
    {"GET / HTTP/x.1\r\n\r\n", 400},
    {"GET / HTTP/1.2\r\n\r\n", 505},
    {"GET / HTTP/2.0\r\n\r\n", 505},
    {"GET / HTTP/0.9\r\n\r\n", 505},
    {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505},
    {"GET v1/ping HTTP/1.1\r\n\r\n", 400},
    {"GET /a\tb HTTP/1.1\r\n\r\n", 400},
    {"GET /a\rb HTTP/1.1\r\n\r\n", 400},
    {"GET / HTTP/1.1\r\r\n\r\n", 400},
    /* percent-decoding */
    {"GET /v1/%00ping HTTP/1.1\r\n\r\n", 400},
    {"GET /v1/%zzping HTTP/1.1\r\n\r\n", 400},
    {"GET /v1/ping%4 HTTP/1.1\r\n\r\n", 400},
    {"GET /v1/ping% HTTP/1.1\r\n\r\n", 400},
    {"GET /v1/%0aping HTTP/1.1\r\n\r\n", 400},
    /* header lines */
    {"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400},
    {"GET / HTTP/1.1\r\n\tHost: x\r\n\r\n", 400},
    {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400},
    {"GET / HTTP/1.1\r\n: x\r\n\r\n", 400},
    {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
    {"GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", 400},
    {"GET / HTTP/1.1\r\nX-A: a\x7f\r\n\r\n", 400},
    {"GET / HTTP/1.1\r\nX(A): a\r\n\r\n", 400},
    /* Content-Length */
    {"POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400},
    {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
    {"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", 400},
    {"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400},
    {"POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", 400},
    {"POST / HTTP/1.1\r\nContent-Length: 1,1\r\n\r\n", 400},
    {"POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400},
    {"POST / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 3\r\n\r\nab",
     400},
    {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999999\r\n"
     "\r\n",
     413},
    {"POST / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n", 413},
    {"POST / HTTP/1.1\r\nContent-Length: 65537\r\n\r\n", 413},
    /* Transfer-Encoding, Expect */
    {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411},
    {"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n"
     "\r\n",
     411},
    {"POST / HTTP/1.1\r\ntransfer-encoding: identity\r\n\r\n", 411},
    {"POST / HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n", 417},
    {"POST / HTTP/1.1\r\nExpect: 100-continue, x\r\n\r\n", 417},
};

static void test_error_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(error_cases) / sizeof(*error_cases); i++) {
        expect_error(error_cases[i].raw, error_cases[i].status);
    }
}

static void test_transfer_encoding_message(void **state)
{
    struct http_request r;

    (void)state;
    assert_int_equal(parse_str("POST /v1/locks HTTP/1.1\r\nTransfer-Encoding:"
                               " chunked\r\n\r\n",
                               &r),
                     HTTP_ERROR);
    assert_int_equal(r.error_status, 411);
    assert_string_equal(r.error_message,
                        "Transfer-Encoding is not supported: send the body "
                        "with a Content-Length alone");
    /* beside a Content-Length too: the same refusal, the same words */
    assert_int_equal(parse_str("POST /v1/locks HTTP/1.1\r\nContent-Length: "
                               "2\r\nTransfer-Encoding: identity\r\n\r\n{}",
                               &r),
                     HTTP_ERROR);
    assert_int_equal(r.error_status, 411);
    assert_string_equal(r.error_message,
                        "Transfer-Encoding is not supported: send the body "
                        "with a Content-Length alone");
}

/* ---- http_parse: limits ---- */

/* Builds "GET / HTTP/1.1\r\n" + headers padded so the head is exactly
 * head_len bytes. */
static char *head_of_size(size_t head_len)
{
    const char *start = "GET / HTTP/1.1\r\nX-Pad: ";
    char *buf = malloc(head_len + 1);
    size_t fixed = strlen(start) + 4; /* value, CRLF, CRLF */

    assert_non_null(buf);
    assert_true(head_len > fixed);
    memcpy(buf, start, strlen(start));
    memset(buf + strlen(start), 'a', head_len - fixed);
    memcpy(buf + head_len - 4, "\r\n\r\n", 5);
    return buf;
}

static void test_head_size_limit(void **state)
{
    struct http_limits lim = lim_default();
    struct http_request r;
    char *buf;

    (void)state;
    buf = head_of_size(8192);
    assert_int_equal(http_parse(buf, 8192, &lim, &r), HTTP_COMPLETE);
    assert_int_equal(r.consumed, 8192);
    free(buf);

    buf = head_of_size(8193);
    assert_error_bytewise(buf, 8193, &lim, 431);
    free(buf);

    /* An endless head without a blank line is refused once over the
     * limit, not waited for. */
    buf = head_of_size(20000);
    assert_int_equal(http_parse(buf, 8192, &lim, &r), HTTP_INCOMPLETE);
    assert_int_equal(http_parse(buf, 8193, &lim, &r), HTTP_ERROR);
    assert_int_equal(r.error_status, 431);
    free(buf);

    /* So are empty lines before the request line. */
    buf = malloc(9000);
    assert_non_null(buf);
    memset(buf, '\n', 9000);
    assert_int_equal(http_parse(buf, 9000, &lim, &r), HTTP_ERROR);
    assert_int_equal(r.error_status, 431);
    free(buf);

    /* A smaller configured limit applies too. */
    lim.max_head_bytes = 32;
    assert_int_equal(
        http_parse("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", 35, &lim, &r),
        HTTP_ERROR);
    assert_int_equal(r.error_status, 431);
}

static void test_header_count_limit(void **state)
{
    struct http_limits lim = lim_default();
    struct http_request r;
    char buf[4096];
    size_t n;

    (void)state;
    n = (size_t)snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 64; i++) {
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "X-%d: v\r\n", i);
    }
    memcpy(buf + n, "\r\n", 3);
    assert_int_equal(http_parse(buf, n + 2, &lim, &r), HTTP_COMPLETE);

    n += (size_t)snprintf(buf + n, sizeof(buf) - n, "X-64: v\r\n\r\n");
    assert_error_bytewise(buf, n, &lim, 431);

    lim.max_headers = 1;
    assert_int_equal(http_parse("GET / HTTP/1.1\r\nA: 1\r\n\r\n", 25, &lim, &r),
                     HTTP_COMPLETE);
    assert_int_equal(
        http_parse("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", 31, &lim, &r),
        HTTP_ERROR);
    assert_int_equal(r.error_status, 431);
}

static void test_target_length(void **state)
{
    struct http_limits lim = lim_default();
    struct http_request r;
    char buf[HTTP_PATH_MAX + 64];
    size_t n;

    (void)state;
    /* Exactly HTTP_PATH_MAX bytes of target is fine. */
    memcpy(buf, "GET /", 5);
    memset(buf + 5, 'a', HTTP_PATH_MAX - 1);
    n = 5 + HTTP_PATH_MAX - 1;
    n += (size_t)snprintf(buf + n, sizeof(buf) - n, " HTTP/1.1\r\n\r\n");
    assert_int_equal(http_parse(buf, n, &lim, &r), HTTP_COMPLETE);
    assert_int_equal(strlen(r.path), HTTP_PATH_MAX);

    /* One more is 414, known before the line ends. */
    memset(buf + 5, 'a', HTTP_PATH_MAX);
    n = 5 + HTTP_PATH_MAX;
    n += (size_t)snprintf(buf + n, sizeof(buf) - n, " HTTP/1.1\r\n\r\n");
    assert_error_bytewise(buf, n, &lim, 414);
    assert_int_equal(http_parse(buf, 5 + HTTP_PATH_MAX, &lim, &r), HTTP_ERROR);
    assert_int_equal(r.error_status, 414);

    /* The query counts: the whole target is bounded. */
    memcpy(buf, "GET /?", 6);
    memset(buf + 6, 'q', HTTP_PATH_MAX);
    n = 6 + HTTP_PATH_MAX;
    n += (size_t)snprintf(buf + n, sizeof(buf) - n, " HTTP/1.1\r\n\r\n");
    assert_error_bytewise(buf, n, &lim, 414);
}

/* ---- http_parse: Content-Length ---- */

static void test_content_length(void **state)
{
    struct http_limits lim = lim_default();
    struct http_request r;
    char *big;
    size_t n;

    (void)state;
    /* Repeated with the same value (even spelled with leading zeros). */
    assert_int_equal(parse_str("POST / HTTP/1.1\r\nContent-Length: 2\r\n"
                               "Content-Length: 002\r\n\r\nab",
                               &r),
                     HTTP_COMPLETE);
    assert_int_equal(r.body_len, 2);
    assert_int_equal(parse_str("POST / HTTP/1.1\r\nContent-Length: 000\r\n"
                               "\r\n",
                               &r),
                     HTTP_COMPLETE);
    assert_int_equal(r.body_len, 0);
    assert_true(r.has_length);
    /* A differing repeat is refused even when the first was huge. */
    expect_error("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999"
                 "\r\nContent-Length: 99999999999999999998\r\n\r\n",
                 400);
    /* Without a length a POST has an empty body. */
    assert_int_equal(parse_str("POST / HTTP/1.1\r\n\r\nGET", &r),
                     HTTP_COMPLETE);
    assert_int_equal(r.body_len, 0);
    assert_false(r.has_length);
    assert_int_equal(r.consumed, 19);

    /* Exactly the limit is fine; one more is 413 at once, not after the
     * body arrives. */
    n = (size_t)MAX_BODY + 64;
    big = malloc(n);
    assert_non_null(big);
    int h = snprintf(big, 64, "POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n",
                     MAX_BODY);
    memset(big + h, 'x', MAX_BODY);
    assert_int_equal(http_parse(big, (size_t)h + MAX_BODY, &lim, &r),
                     HTTP_COMPLETE);
    assert_int_equal(r.body_len, MAX_BODY);
    assert_int_equal(http_parse(big, (size_t)h + MAX_BODY - 1, &lim, &r),
                     HTTP_INCOMPLETE);
    assert_true(r.head_done);
    free(big);
    expect_error("POST / HTTP/1.1\r\nContent-Length: 65537\r\n\r\n", 413);

    lim.max_body_bytes = 0;
    assert_int_equal(http_parse("POST / HTTP/1.1\r\nContent-Length: 1\r\n"
                                "\r\nx",
                                39, &lim, &r),
                     HTTP_ERROR);
    assert_int_equal(r.error_status, 413);
}

/* ---- http_parse: Expect ---- */

static void test_expect_continue(void **state)
{
    struct http_request r;
    const char *raw = "POST /v1/locks HTTP/1.1\r\nExpect: 100-Continue\r\n"
                      "Content-Length: 16\r\n\r\n{\"resource\":\"a\"}";
    size_t head = strlen(raw) - 16;
    struct http_limits lim = lim_default();

    (void)state;
    /* Head not done yet: nothing to answer. */
    assert_int_equal(http_parse(raw, head - 1, &lim, &r), HTTP_INCOMPLETE);
    assert_false(r.head_done);
    assert_false(r.expect_continue);
    /* Head done, body missing or partial: the caller sends 100. */
    assert_int_equal(http_parse(raw, head, &lim, &r), HTTP_INCOMPLETE);
    assert_true(r.head_done);
    assert_true(r.expect_continue);
    assert_int_equal(http_parse(raw, head + 5, &lim, &r), HTTP_INCOMPLETE);
    assert_true(r.expect_continue);
    /* Body here: a whole request, nothing left to continue. */
    assert_int_equal(http_parse(raw, strlen(raw), &lim, &r), HTTP_COMPLETE);
    assert_false(r.expect_continue);
    assert_int_equal(r.body_len, 16);

    /* Without Expect, head_done alone tells the head was read. */
    assert_int_equal(
        parse_str("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", &r),
        HTTP_INCOMPLETE);
    assert_true(r.head_done);
    assert_false(r.expect_continue);
    /* Nothing to wait for with an empty body. */
    assert_int_equal(parse_str("POST / HTTP/1.1\r\nExpect: 100-continue\r\n"
                               "Content-Length: 0\r\n\r\n",
                               &r),
                     HTTP_COMPLETE);
    assert_false(r.expect_continue);
    /* HTTP/1.0 clients cannot expect: ignored, even unknown ones. */
    assert_int_equal(parse_str("POST / HTTP/1.0\r\nExpect: 100-continue\r\n"
                               "Content-Length: 2\r\n\r\n",
                               &r),
                     HTTP_INCOMPLETE);
    assert_true(r.head_done);
    assert_false(r.expect_continue);
    assert_int_equal(parse_str("GET / HTTP/1.0\r\nExpect: x\r\n\r\n", &r),
                     HTTP_COMPLETE);
}

/* ---- http_parse: Connection ---- */

static bool keep_alive_of(const char *raw)
{
    struct http_request r;

    assert_int_equal(parse_str(raw, &r), HTTP_COMPLETE);
    return r.keep_alive;
}

static void test_keep_alive(void **state)
{
    (void)state;
    assert_true(keep_alive_of("GET / HTTP/1.1\r\n\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.1\r\nConnection: close\r\n\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.1\r\nconnection: CLOSE\r\n\r\n"));
    assert_true(keep_alive_of("GET / HTTP/1.1\r\nConnection: keep-alive\r\n"
                              "\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.1\r\nConnection: keep-alive, "
                               "close\r\n\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.1\r\nConnection: upgrade\r\n"
                               "Connection:close \r\n\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.0\r\n\r\n"));
    assert_true(keep_alive_of("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n"
                              "\r\n"));
    assert_true(keep_alive_of("GET / HTTP/1.0\r\nConnection: x ,keep-alive"
                              "\r\n\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.0\r\nConnection: keep-alive\r\n"
                               "Connection: close\r\n\r\n"));
    /* "closed" is not "close". */
    assert_true(keep_alive_of("GET / HTTP/1.1\r\nConnection: closed\r\n"
                              "\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.0\r\nX-Connection: "
                               "keep-alive\r\n\r\n"));
}

/* ---- http_parse: target forms and percent-decoding ---- */

static void test_percent_decoding(void **state)
{
    struct http_request r;

    (void)state;
    assert_int_equal(parse_str("GET /v1/%70%49ng HTTP/1.1\r\n\r\n", &r),
                     HTTP_COMPLETE);
    assert_string_equal(r.path, "/v1/pIng");
    assert_int_equal(parse_str("GET /a%2Fb%2fc+d%20 HTTP/1.1\r\n\r\n", &r),
                     HTTP_COMPLETE);
    assert_string_equal(r.path, "/a/b/c+d ");
    assert_int_equal(parse_str("GET /caf%C3%A9 HTTP/1.1\r\n\r\n", &r),
                     HTTP_COMPLETE);
    assert_string_equal(r.path, "/caf\xc3\xa9");
    /* The query stays raw, escapes and all. */
    assert_int_equal(parse_str("GET /x?resource=a%20b+c&y=%zz HTTP/1.1\r\n"
                               "\r\n",
                               &r),
                     HTTP_COMPLETE);
    assert_string_equal(r.path, "/x");
    assert_string_equal(r.query, "resource=a%20b+c&y=%zz");
    assert_int_equal(parse_str("GET /x? HTTP/1.1\r\n\r\n", &r), HTTP_COMPLETE);
    assert_string_equal(r.query, "");
    assert_int_equal(parse_str("GET /x?a?b HTTP/1.1\r\n\r\n", &r),
                     HTTP_COMPLETE);
    assert_string_equal(r.query, "a?b");
    /* Absolute-form: the authority is dropped. */
    assert_int_equal(parse_str("GET HTTP://localhost:80/v1/ping?q HTTP/1.1"
                               "\r\n\r\n",
                               &r),
                     HTTP_COMPLETE);
    assert_string_equal(r.path, "/v1/ping");
    assert_string_equal(r.query, "q");
    assert_int_equal(parse_str("GET https://h HTTP/1.1\r\n\r\n", &r),
                     HTTP_COMPLETE);
    assert_string_equal(r.path, "/");
    assert_int_equal(parse_str("GET http://h?z=1 HTTP/1.1\r\n\r\n", &r),
                     HTTP_COMPLETE);
    assert_string_equal(r.path, "/");
    assert_string_equal(r.query, "z=1");
}

/* ---- http_parse: pipelining ---- */

static void test_pipelined(void **state)
{
    struct http_limits lim = lim_default();
    struct http_request r;
    const char *reqs[] = {
        "POST /v1/locks HTTP/1.1\r\nContent-Length: 16\r\n\r\n"
        "{\"resource\":\"a\"}",
        "GET /v1/ping HTTP/1.1\n\n",
        "DELETE /v1/locks/" TOKEN " HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
    };
    const char *paths[] = {"/v1/locks", "/v1/ping", "/v1/locks/" TOKEN};
    size_t body_lens[] = {16, 0, 2};
    char buf[512];
    size_t total = 0;

    (void)state;
    for (int i = 0; i < 3; i++) {
        memcpy(buf + total, reqs[i], strlen(reqs[i]));
        total += strlen(reqs[i]);
    }

    /* Two, then three, in one buffer; then three with the last cut off. */
    for (int count = 2; count <= 3; count++) {
        size_t len = strlen(reqs[0]) + strlen(reqs[1]) +
                     (count == 3 ? strlen(reqs[2]) : 0);
        size_t off = 0;
        for (int i = 0; i < count; i++) {
            assert_int_equal(http_parse(buf + off, len - off, &lim, &r),
                             HTTP_COMPLETE);
            assert_string_equal(r.path, paths[i]);
            assert_int_equal(r.body_len, body_lens[i]);
            assert_int_equal(r.consumed, strlen(reqs[i]));
            off += r.consumed;
        }
        assert_int_equal(off, len);
        assert_int_equal(http_parse(buf + off, 0, &lim, &r), HTTP_INCOMPLETE);
    }
    size_t off = strlen(reqs[0]) + strlen(reqs[1]);
    assert_int_equal(http_parse(buf + off, total - off - 1, &lim, &r),
                     HTTP_INCOMPLETE);
    assert_true(r.head_done);

    /* A stray CRLF after a body belongs to the next request. */
    const char *two = "POST /v1/locks HTTP/1.1\r\nContent-Length: 2\r\n\r\n"
                      "{}\r\nGET /v1/ping HTTP/1.1\r\n\r\n";
    assert_int_equal(parse_str(two, &r), HTTP_COMPLETE);
    size_t first = r.consumed;
    assert_int_equal(parse_str(two + first, &r), HTTP_COMPLETE);
    assert_string_equal(r.path, "/v1/ping");
    assert_int_equal(first + r.consumed, strlen(two));
}

/* ---- http_route ---- */

/* Parses raw (which must be complete) and routes it. */
static int route(const char *raw, struct request *req, char *err, size_t errlen)
{
    struct http_request h;

    err[0] = '\0';
    assert_int_equal(parse_str(raw, &h), HTTP_COMPLETE);
    return http_route(&h, req, err, errlen);
}

static void test_route_table(void **state)
{
    static const struct {
        const char *raw;
        int status;
        enum proto_op op;
    } cases[] = {
        {"POST /v1/locks HTTP/1.1\r\nContent-Length: 16\r\n\r\n"
         "{\"resource\":\"a\"}",
         0, OP_ACQUIRE},
        {"DELETE /v1/locks/" TOKEN " HTTP/1.1\r\n\r\n", 0, OP_RELEASE},
        {"POST /v1/locks/" TOKEN "/extend HTTP/1.1\r\n\r\n", 0, OP_EXTEND},
        {"POST /v1/locks/" TOKEN "/complete HTTP/1.1\r\n\r\n", 0, OP_COMPLETE},
        {"GET /v1/ping HTTP/1.1\r\n\r\n", 0, OP_PING},
        {"HEAD /v1/ping HTTP/1.1\r\n\r\n", 0, OP_PING},
        {"GET /v1/health HTTP/1.1\r\n\r\n", 0, OP_HEALTH},
        {"HEAD /v1/health HTTP/1.1\r\n\r\n", 0, OP_HEALTH},
        {"GET /metrics HTTP/1.1\r\n\r\n", 0, OP_METRICS},
        {"HEAD /metrics HTTP/1.1\r\n\r\n", 0, OP_METRICS},
        {"GET /v1/%70ing HTTP/1.1\r\n\r\n", 0, OP_PING},
        {"GET /v1/ping?x=1 HTTP/1.1\r\n\r\n", 0, OP_PING},
        /* GET lists this daemon's locks or inspects a resource: after
         * "/v1/locks/" comes a resource, slashes and all */
        {"GET /v1/locks HTTP/1.1\r\n\r\n", 0, OP_LOCKS},
        {"HEAD /v1/locks HTTP/1.1\r\n\r\n", 0, OP_LOCKS},
        {"GET /v1/locks?prefix=a&limit=5 HTTP/1.1\r\n\r\n", 0, OP_LOCKS},
        {"GET /v1/locks/" TOKEN " HTTP/1.1\r\n\r\n", 0, OP_INSPECT},
        {"GET /v1/locks/" TOKEN "/complete HTTP/1.1\r\n\r\n", 0, OP_INSPECT},
        {"GET /v1/locks/nope HTTP/1.1\r\n\r\n", 0, OP_INSPECT},
        {"GET /v1/locks/a%2Fb?fence=true HTTP/1.1\r\n\r\n", 0, OP_INSPECT},
        /* wrong method on a known path */
        {"PUT /v1/locks HTTP/1.1\r\n\r\n", 405, OP_NONE},
        {"POST /v1/locks/" TOKEN " HTTP/1.1\r\n\r\n", 405, OP_NONE},
        {"DELETE /v1/locks/" TOKEN "/extend HTTP/1.1\r\n\r\n", 405, OP_NONE},
        {"POST /v1/ping HTTP/1.1\r\n\r\n", 405, OP_NONE},
        {"DELETE /v1/health HTTP/1.1\r\n\r\n", 405, OP_NONE},
        {"PATCH /metrics HTTP/1.1\r\n\r\n", 405, OP_NONE},
        /* wrong method and a bad token: 405 first */
        {"PUT /v1/locks/nope HTTP/1.1\r\n\r\n", 405, OP_NONE},
        /* bad query parameters of the GET routes */
        {"GET /v1/locks?limit=0 HTTP/1.1\r\n\r\n", 400, OP_NONE},
        {"GET /v1/locks?limit=1001 HTTP/1.1\r\n\r\n", 400, OP_NONE},
        {"GET /v1/locks?limit=01 HTTP/1.1\r\n\r\n", 400, OP_NONE},
        {"GET /v1/locks?cursor=0 HTTP/1.1\r\n\r\n", 400, OP_NONE},
        {"GET /v1/locks?cursor=XY HTTP/1.1\r\n\r\n", 400, OP_NONE},
        {"GET /v1/locks?fence=true HTTP/1.1\r\n\r\n", 400, OP_NONE},
        {"GET /v1/locks?prefix=a&prefix=b HTTP/1.1\r\n\r\n", 400, OP_NONE},
        {"GET /v1/locks?prefix=%01 HTTP/1.1\r\n\r\n", 400, OP_NONE},
        {"GET /v1/locks/a?limit=3 HTTP/1.1\r\n\r\n", 400, OP_NONE},
        {"GET /v1/locks/a?fence=yes HTTP/1.1\r\n\r\n", 400, OP_NONE},
        /* unknown paths */
        {"GET / HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"GET /v1 HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"GET /v1/ping/ HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"GET /V1/ping HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"GET /v1/pingx HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"GET /metrics/ HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"POST /v1/locks/ HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"POST /v1/locksmith HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"DELETE /v1/locks//extend HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"POST /v1/locks/" TOKEN "/renew HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"POST /v1/locks/" TOKEN "/extend/ HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"POST /v1/locks/" TOKEN "/x/extend HTTP/1.1\r\n\r\n", 404, OP_NONE},
        {"OPTIONS * HTTP/1.1\r\n\r\n", 404, OP_NONE},
    };
    struct request req;
    char err[PROTO_MSG_MAX];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        int rc = route(cases[i].raw, &req, err, sizeof(err));
        if (rc != cases[i].status) {
            print_error("%s: got %d (%s)\n", cases[i].raw, rc, err);
        }
        assert_int_equal(rc, cases[i].status);
        if (rc == 0) {
            assert_int_equal(req.op, cases[i].op);
        } else {
            assert_true(strlen(err) > 0);
        }
    }
}

static void test_route_messages(void **state)
{
    struct request req;
    char err[PROTO_MSG_MAX];

    (void)state;
    assert_int_equal(
        route("GET /nope/%41 HTTP/1.1\r\n\r\n", &req, err, sizeof(err)), 404);
    assert_string_equal(err, "no route for /nope/A");
    assert_int_equal(
        route("PUT /v1/locks HTTP/1.1\r\n\r\n", &req, err, sizeof(err)), 405);
    assert_non_null(strstr(err, "POST"));
    /* Acquire's query is refused before its body says what it lacks. */
    assert_int_equal(route("POST /v1/locks?resource=a HTTP/1.1\r\n"
                           "Content-Length: 2\r\n\r\n{}",
                           &req, err, sizeof(err)),
                     400);
    assert_non_null(strstr(err, "query parameters are not read"));
    /* A long path is cut to fit err, not overflowed. */
    char small[16];
    assert_int_equal(route("GET /a-very-long-path-indeed HTTP/1.1\r\n\r\n",
                           &req, small, sizeof(small)),
                     404);
    assert_int_equal(strlen(small), sizeof(small) - 1);
}

static void test_route_allow(void **state)
{
    (void)state;
    assert_string_equal(http_route_allow("/v1/locks"), "GET, HEAD, POST");
    assert_string_equal(http_route_allow("/v1/locks/" TOKEN),
                        "DELETE, GET, HEAD");
    assert_string_equal(http_route_allow("/v1/locks/xyz"), "DELETE, GET, HEAD");
    assert_string_equal(http_route_allow("/v1/locks/" TOKEN "/extend"),
                        "GET, HEAD, POST");
    assert_string_equal(http_route_allow("/v1/locks/" TOKEN "/complete"),
                        "GET, HEAD, POST");
    assert_string_equal(http_route_allow("/v1/ping"), "GET, HEAD");
    assert_string_equal(http_route_allow("/v1/health"), "GET, HEAD");
    assert_string_equal(http_route_allow("/metrics"), "GET, HEAD");
    assert_null(http_route_allow("/"));
    assert_null(http_route_allow(""));
    assert_null(http_route_allow("/v1/locks/"));
    assert_null(http_route_allow("/v1/locks/" TOKEN "/other"));
}

/* The GET routes read their fields from the path and the query. */
static void test_route_get_locks(void **state)
{
    struct request req;
    char err[PROTO_MSG_MAX];

    (void)state;
    assert_int_equal(route("GET /v1/locks?prefix=tg%3Aupdate%3A&limit=7"
                           "&cursor=1f HTTP/1.1\r\n\r\n",
                           &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_LOCKS);
    assert_int_equal(req.prefix_len, 10);
    assert_string_equal(req.prefix, "tg:update:");
    assert_int_equal(req.limit, 7);
    assert_int_equal(req.cursor, 0x1f);
    assert_int_equal(
        route("GET /v1/locks HTTP/1.1\r\n\r\n", &req, err, sizeof(err)), 0);
    assert_int_equal(req.limit, PROTO_LIMIT_DEFAULT);
    assert_int_equal(req.cursor, 0);
    assert_int_equal(req.prefix_len, 0);
    assert_int_equal(route("GET /v1/locks/orders%2F42/x?fence=true "
                           "HTTP/1.1\r\n\r\n",
                           &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_INSPECT);
    assert_string_equal(req.resource, "orders/42/x");
    assert_true(req.fence);
    assert_int_equal(route("GET /v1/locks?limit=1000&bogus HTTP/1.1\r\n\r\n",
                           &req, err, sizeof(err)),
                     400);
    assert_string_equal(err, "bogus: unknown query parameter");
}

/* The longest targets a valid request can have: a resource of
 * PROTO_RESOURCE_MAX bytes, every byte percent-encoded (curl and the client
 * libraries encode all non-ASCII), in the path of an inspect, in the query
 * of a release or in a locks prefix with every other parameter at its
 * longest. Each must route, not be refused 414. */
static void test_target_fits_longest_resource(void **state)
{
    char enc[3 * PROTO_RESOURCE_MAX + 1];
    static const char *const formats[] = {
        "GET /v1/locks/%s?fence=false HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/" TOKEN "?resource=%s HTTP/1.1\r\n\r\n",
        "POST /v1/locks/" TOKEN "/complete?resource=%s HTTP/1.1\r\n\r\n",
        "GET /v1/locks?prefix=%s&limit=1000&cursor=ffffffffffffffff "
        "HTTP/1.1\r\n\r\n",
        "GET http://localhost/v1/locks/%s?fence=false HTTP/1.1\r\n\r\n",
    };
    char raw[sizeof(enc) + 256];
    struct request req;
    char err[PROTO_MSG_MAX];

    (void)state;
    for (size_t i = 0; i < PROTO_RESOURCE_MAX / 2; i++) {
        memcpy(enc + 6 * i, "%C3%A9", 6); /* U+00E9, two bytes */
    }
    enc[3 * PROTO_RESOURCE_MAX] = '\0';
    for (size_t k = 0; k < sizeof(formats) / sizeof(formats[0]); k++) {
        snprintf(raw, sizeof(raw), formats[k], enc);
        assert_int_equal(route(raw, &req, err, sizeof(err)), 0);
        size_t got = req.op == OP_LOCKS ? req.prefix_len : req.resource_len;
        assert_int_equal(got, PROTO_RESOURCE_MAX);
    }
}

/* A control character sent percent-encoded is refused with the message the
 * same character gets in JSON, not as a bad encoding (which it is not). */
static void test_control_character_messages(void **state)
{
    static const struct {
        const char *raw;
        const char *message;
    } cases[] = {
        {"GET /v1/locks/a%1Fb HTTP/1.1\r\n\r\n",
         "path: must not contain control characters"},
        {"GET /v1/locks/a%00b HTTP/1.1\r\n\r\n",
         "path: must not contain control characters"},
        {"GET /v1/locks/a%7F HTTP/1.1\r\n\r\n",
         "path: must not contain control characters"},
        {"GET /v1/locks/a%zz HTTP/1.1\r\n\r\n", "bad percent-encoding in path"},
        {"DELETE /v1/locks/" TOKEN "?resource=a%00 HTTP/1.1\r\n\r\n",
         "resource: must not contain control characters"},
        {"DELETE /v1/locks/" TOKEN "?resource=a%0a HTTP/1.1\r\n\r\n",
         "resource: must not contain control characters"},
        {"DELETE /v1/locks/" TOKEN "?resource=a%0 HTTP/1.1\r\n\r\n",
         "resource: bad percent-encoding"},
        {"GET /v1/locks?prefix=a%00 HTTP/1.1\r\n\r\n",
         "prefix: must not contain control characters"},
        {"GET /v1/locks?prefix=a%1f HTTP/1.1\r\n\r\n",
         "prefix: must not contain control characters"},
        {"GET /v1/locks?prefix=a%g1 HTTP/1.1\r\n\r\n",
         "prefix: bad percent-encoding"},
    };
    struct http_limits lim = lim_default();
    struct request req;
    char err[PROTO_MSG_MAX];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct http_request h;
        const char *got = err;
        int rc;
        err[0] = '\0';
        if (http_parse(cases[i].raw, strlen(cases[i].raw), &lim, &h) ==
            HTTP_ERROR) {
            rc = h.error_status;
            got = h.error_message;
        } else {
            rc = http_route(&h, &req, err, sizeof(err));
        }
        assert_int_equal(rc, 400);
        assert_string_equal(got, cases[i].message);
    }
}

static void test_route_lock_token(void **state)
{
    static const char *const bad[] = {
        "DELETE /v1/locks/0123456789ABCDEF0123456789ABCDEF HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/0123456789abcdef0123456789abcde HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/0123456789abcdef0123456789abcdef0 HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/0123456789abcdef0123456789abcdeg HTTP/1.1\r\n\r\n",
        "POST /v1/locks/xyz/extend HTTP/1.1\r\n\r\n",
        "POST /v1/locks/%20/complete HTTP/1.1\r\n\r\n",
    };
    struct request req;
    char err[PROTO_MSG_MAX];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        assert_int_equal(route(bad[i], &req, err, sizeof(err)), 400);
        assert_string_equal(err, "lock: must be a 32-character hex token");
    }

    /* A good token, percent-encoded or not, lands in req->lock. */
    assert_int_equal(route("POST /v1/locks/%30123456789abcdef0123456789abcdef"
                           "/extend HTTP/1.1\r\n\r\n",
                           &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_EXTEND);
    assert_true(req.has_lock);
    assert_string_equal(req.lock, TOKEN);
    assert_int_equal(req.resource_len, 0);
    assert_false(req.renew);
    assert_int_equal(req.ttl_ms, PROTO_TTL_DEFAULT);
}

/* Routes "<line> HTTP/1.1" with body and its Content-Length. */
static int route_body(const char *line, const char *body, struct request *req,
                      char *err, size_t errlen)
{
    char raw[2048];

    snprintf(raw, sizeof(raw), "%s HTTP/1.1\r\nContent-Length: %zu\r\n\r\n%s",
             line, strlen(body), body);
    return route(raw, req, err, errlen);
}

static void test_route_body(void **state)
{
    struct request req;
    char err[PROTO_MSG_MAX];

    (void)state;
    /* Acquire decodes its body with the implied op. */
    assert_int_equal(route_body("POST /v1/locks",
                                "{\"resource\":\"tg:update:1\","
                                "\"ttl_ms\":5000}",
                                &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_ACQUIRE);
    assert_string_equal(req.resource, "tg:update:1");
    assert_int_equal(req.resource_len, 11);
    assert_int_equal(req.ttl_ms, 5000);
    assert_false(req.has_lock);

    /* An empty (or blank) acquire body is a missing resource. */
    assert_int_equal(
        route("POST /v1/locks HTTP/1.1\r\n\r\n", &req, err, sizeof(err)), 400);
    assert_non_null(strstr(err, "resource"));
    assert_int_equal(
        route_body("POST /v1/locks", " \r\n", &req, err, sizeof(err)), 400);
    assert_non_null(strstr(err, "resource"));

    /* Bad JSON, and JSON that is not an object. */
    assert_int_equal(route_body("POST /v1/locks", "{", &req, err, sizeof(err)),
                     400);
    assert_true(strlen(err) > 0);
    assert_int_equal(route_body("POST /v1/locks/" TOKEN "/extend", "[]", &req,
                                err, sizeof(err)),
                     400);
    assert_true(strlen(err) > 0);

    /* A body whose op disagrees with the route. */
    assert_int_equal(route_body("POST /v1/locks",
                                "{\"op\":\"release\",\"resource\":\"a\"}", &req,
                                err, sizeof(err)),
                     400);
    assert_true(strlen(err) > 0);
    assert_int_equal(route_body("POST /v1/locks/" TOKEN "/extend",
                                "{\"op\":\"complete\"}", &req, err,
                                sizeof(err)),
                     400);
    assert_true(strlen(err) > 0);
    /* One that agrees is fine. */
    assert_int_equal(route_body("POST /v1/locks/" TOKEN "/extend",
                                "{\"op\":\"extend\"}", &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_EXTEND);

    /* A lock route's body: fields taken, the path's token kept. */
    assert_int_equal(route_body("POST /v1/locks/" TOKEN "/extend",
                                "{\"ttl_ms\":9000,\"resource\":\"r\"}", &req,
                                err, sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_EXTEND);
    assert_int_equal(req.ttl_ms, 9000);
    assert_true(req.has_ttl);
    assert_string_equal(req.resource, "r");
    assert_true(req.has_lock);
    assert_string_equal(req.lock, TOKEN);

    /* A "lock" in the body must be the path's. */
    assert_int_equal(route_body("DELETE /v1/locks/" TOKEN,
                                "{\"lock\":\"" TOKEN "\"}", &req, err,
                                sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_RELEASE);
    assert_string_equal(req.lock, TOKEN);
    assert_int_equal(route_body("DELETE /v1/locks/" TOKEN,
                                "{\"lock\":\"" TOKEN2 "\"}", &req, err,
                                sizeof(err)),
                     400);
    assert_string_equal(err, "lock: does not match the path");

    /* GET routes ignore a body. */
    assert_int_equal(route_body("GET /v1/ping", "{{{", &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_PING);
}

static void test_route_renew_refused(void **state)
{
    struct request req;
    char err[PROTO_MSG_MAX];

    (void)state;
    assert_int_equal(route_body("POST /v1/locks",
                                "{\"resource\":\"a\",\"renew\":true}", &req,
                                err, sizeof(err)),
                     400);
    /* proto_decode refuses it for any implied op with its own wording;
     * http_route refuses it too should the decoder let it through. */
    assert_memory_equal(err, "renew: ", 7);
    assert_int_equal(route_body("POST /v1/locks/" TOKEN "/extend",
                                "{\"renew\":true}", &req, err, sizeof(err)),
                     400);
    assert_memory_equal(err, "renew: ", 7);
    assert_int_equal(route_body("POST /v1/locks",
                                "{\"resource\":\"a\",\"renew\":false}", &req,
                                err, sizeof(err)),
                     0);
    assert_false(req.renew);
}

/* A permit of a semaphore, for a release, extend or complete through a
 * daemon that did not take it: as in the body, with the same range. */
static void test_route_query_permit(void **state)
{
    struct request req;
    char err[PROTO_MSG_MAX];

    (void)state;
    assert_int_equal(route("DELETE /v1/locks/" TOKEN "?resource=api&permit=2"
                           " HTTP/1.1\r\n\r\n",
                           &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_RELEASE);
    assert_string_equal(req.resource, "api");
    assert_true(req.has_permit);
    assert_int_equal(req.permit, 2);
    assert_int_equal(route("POST /v1/locks/" TOKEN "/complete?permit=0&"
                           "resource=api HTTP/1.1\r\n\r\n",
                           &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_COMPLETE);
    assert_true(req.has_permit);
    assert_int_equal(req.permit, 0);
    assert_int_equal(route("POST /v1/locks/" TOKEN "/extend?resource=api&"
                           "permit=1023 HTTP/1.1\r\n\r\n",
                           &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.permit, 1023);
    assert_int_equal(route("DELETE /v1/locks/" TOKEN "?permit=%31 HTTP/1.1"
                           "\r\n\r\n",
                           &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.permit, 1);
    /* no permit: none */
    assert_int_equal(route("DELETE /v1/locks/" TOKEN "?resource=api HTTP/1.1"
                           "\r\n\r\n",
                           &req, err, sizeof(err)),
                     0);
    assert_false(req.has_permit);

    /* body and query: the same, or refused */
    assert_int_equal(route_body("POST /v1/locks/" TOKEN "/extend?permit=3",
                                "{\"permit\":3}", &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.permit, 3);
    assert_int_equal(route_body("POST /v1/locks/" TOKEN "/extend?permit=3",
                                "{\"permit\":4}", &req, err, sizeof(err)),
                     400);
    assert_string_equal(err, "permit: body and query disagree");

    static const char *const bad[] = {
        "1024", "-1", "+1",  "01", "00",    "1.0",  "1e2",
        "",     "x",  "%00", "%2", "99999", "1%20",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        char line[160];
        snprintf(line, sizeof(line),
                 "DELETE /v1/locks/" TOKEN "?permit=%s HTTP/1.1\r\n\r\n",
                 bad[i]);
        int rc = route(line, &req, err, sizeof(err));
        if (rc != 400) {
            print_error("permit=%s: got %d\n", bad[i], rc);
        }
        assert_int_equal(rc, 400);
        assert_string_equal(err, "permit: must be an integer in 0..1023");
    }
    assert_int_equal(route("DELETE /v1/locks/" TOKEN "?permit HTTP/1.1\r\n"
                           "\r\n",
                           &req, err, sizeof(err)),
                     400);
    assert_string_equal(err, "permit: must be an integer in 0..1023");
    assert_int_equal(route("DELETE /v1/locks/" TOKEN "?permit=1&permit=1 "
                           "HTTP/1.1\r\n\r\n",
                           &req, err, sizeof(err)),
                     400);
    assert_string_equal(err, "permit: given twice in the query");
}

static void test_route_query_resource(void **state)
{
    struct request req;
    char err[PROTO_MSG_MAX];

    (void)state;
    assert_int_equal(route("DELETE /v1/locks/" TOKEN "?resource=tg%3Aupdate"
                           "%3A1%20x+y HTTP/1.1\r\n\r\n",
                           &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_RELEASE);
    assert_string_equal(req.resource, "tg:update:1 x+y");
    assert_int_equal(req.resource_len, 15);
    assert_string_equal(req.lock, TOKEN);
    assert_true(req.has_lock);

    /* UTF-8, and empty parameters around it. */
    assert_int_equal(route("POST /v1/locks/" TOKEN "/complete?&resource="
                           "caf%C3%A9& HTTP/1.1\r\n\r\n",
                           &req, err, sizeof(err)),
                     0);
    assert_int_equal(req.op, OP_COMPLETE);
    assert_string_equal(req.resource, "caf\xc3\xa9");

    /* The body and the query may both name it, if they agree. */
    assert_int_equal(route_body("POST /v1/locks/" TOKEN "/extend?resource=a",
                                "{\"resource\":\"a\"}", &req, err, sizeof(err)),
                     0);
    assert_string_equal(req.resource, "a");
    assert_int_equal(route_body("POST /v1/locks/" TOKEN "/extend?resource=b",
                                "{\"resource\":\"a\"}", &req, err, sizeof(err)),
                     400);
    assert_string_equal(err, "resource: body and query disagree");

    static const char *const bad[] = {
        "DELETE /v1/locks/" TOKEN "?resource=%00 HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/" TOKEN "?resource=a%2 HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/" TOKEN "?resource=a%g0 HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/" TOKEN "?resource= HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/" TOKEN "?resource HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/" TOKEN "?resource=%0a HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/" TOKEN "?resource=%C3 HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/" TOKEN "?resource=a&resource=a HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/" TOKEN "?resourse=a HTTP/1.1\r\n\r\n",
        "DELETE /v1/locks/" TOKEN "?ttl_ms=5 HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        int rc = route(bad[i], &req, err, sizeof(err));
        if (rc != 400) {
            print_error("%s: got %d\n", bad[i], rc);
        }
        assert_int_equal(rc, 400);
        assert_true(strlen(err) > 0);
    }
    assert_int_equal(route("DELETE /v1/locks/" TOKEN "?ttl_ms=5 HTTP/1.1\r\n"
                           "\r\n",
                           &req, err, sizeof(err)),
                     400);
    assert_string_equal(err, "ttl_ms: unknown query parameter");

    /* Acquire takes its fields from the body alone: a query is refused,
     * not dropped (an empty one, a bare '?', is no query). */
    assert_int_equal(route_body("POST /v1/locks?ttl_ms=5",
                                "{\"resource\":\"a\"}", &req, err, sizeof(err)),
                     400);
    assert_string_equal(err, "query parameters are not read on POST "
                             "/v1/locks; send the fields in the JSON body");
    assert_int_equal(
        route_body("POST /v1/locks?resource=a", "", &req, err, sizeof(err)),
        400);
    assert_int_equal(route_body("POST /v1/locks?", "{\"resource\":\"a\"}", &req,
                                err, sizeof(err)),
                     0);

    /* 512 bytes of resource fit; 513 are refused by the validator. */
    char raw[1400];
    size_t n = (size_t)snprintf(raw, sizeof(raw),
                                "DELETE /v1/locks/" TOKEN "?resource=");
    memset(raw + n, 'r', 513);
    n += 513;
    snprintf(raw + n, sizeof(raw) - n, " HTTP/1.1\r\n\r\n");
    assert_int_equal(route(raw, &req, err, sizeof(err)), 400);
    snprintf(raw + n - 1, sizeof(raw) - n + 1, " HTTP/1.1\r\n\r\n");
    assert_int_equal(route(raw, &req, err, sizeof(err)), 0);
    assert_int_equal(req.resource_len, 512);
}

/* ---- http_format_head, http_status_text ---- */

static void test_format_head(void **state)
{
    char out[256];
    size_t n;

    (void)state;
    n = http_format_head(200, "application/json", 42, true, NULL, out,
                         sizeof(out));
    assert_string_equal(out, "HTTP/1.1 200 OK\r\n"
                             "Content-Type: application/json\r\n"
                             "Content-Length: 42\r\n"
                             "Connection: keep-alive\r\n\r\n");
    assert_int_equal(n, strlen(out));

    n = http_format_head(405, "application/json", 7, false, "GET, HEAD", out,
                         sizeof(out));
    assert_string_equal(out, "HTTP/1.1 405 Method Not Allowed\r\n"
                             "Content-Type: application/json\r\n"
                             "Content-Length: 7\r\n"
                             "Connection: close\r\n"
                             "Allow: GET, HEAD\r\n\r\n");
    assert_int_equal(n, strlen(out));

    n = http_format_head(503, NULL, 0, true, NULL, out, sizeof(out));
    assert_string_equal(out, "HTTP/1.1 503 Service Unavailable\r\n"
                             "Content-Length: 0\r\n"
                             "Connection: keep-alive\r\n\r\n");
    assert_int_equal(n, strlen(out));

    n = http_format_head(100, "x", 5, false, NULL, out, sizeof(out));
    assert_string_equal(out, "HTTP/1.1 100 Continue\r\n\r\n");
    assert_int_equal(n, 25);

    /* Too small: 0, never a cut head. */
    const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
                     "Connection: keep-alive\r\n\r\n";
    assert_int_equal(
        http_format_head(200, NULL, 0, true, NULL, out, strlen(ok)), 0);
    assert_int_equal(
        http_format_head(200, NULL, 0, true, NULL, out, strlen(ok) + 1),
        strlen(ok));
    assert_int_equal(http_format_head(200, NULL, 0, true, NULL, out, 0), 0);
}

static void test_status_text(void **state)
{
    static const struct {
        int status;
        const char *text;
    } cases[] = {
        {100, "Continue"},
        {200, "OK"},
        {400, "Bad Request"},
        {404, "Not Found"},
        {405, "Method Not Allowed"},
        {409, "Conflict"},
        {411, "Length Required"},
        {413, "Content Too Large"},
        {414, "URI Too Long"},
        {417, "Expectation Failed"},
        {429, "Too Many Requests"},
        {431, "Request Header Fields Too Large"},
        {500, "Internal Server Error"},
        {501, "Not Implemented"},
        {503, "Service Unavailable"},
        {505, "HTTP Version Not Supported"},
        {299, "Unknown"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        assert_string_equal(http_status_text(cases[i].status), cases[i].text);
    }
}

static void test_limits_default(void **state)
{
    struct http_limits lim;

    (void)state;
    http_limits_default(&lim, 12345);
    assert_int_equal(lim.max_head_bytes, 8192);
    assert_int_equal(lim.max_headers, 64);
    assert_int_equal(lim.max_body_bytes, 12345);
}

/* The query's limit and permit take their bounds and their message from
 * the member's entry in proto_fields: each is walked one below its least
 * value, at both ends and one past its greatest, and a refusal reads as
 * the JSON decoder's for the same member. */
static void test_query_bounds_from_table(void **state)
{
    static const struct {
        const char *name;
        const char *line; /* a request line with %llu for the value */
    } params[] = {
        {"limit", "GET /v1/locks?limit=%llu HTTP/1.1\r\n\r\n"},
        {"permit", "DELETE /v1/locks/" TOKEN "?permit=%llu HTTP/1.1\r\n\r\n"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(params) / sizeof(*params); i++) {
        const struct proto_field *fd = proto_field_named(params[i].name);
        char want[PROTO_MSG_MAX];
        char json[64];
        struct request jreq;

        assert_non_null(fd);
        assert_int_equal(fd->type, PROTO_FT_UINT);
        assert_int_equal(proto_field_uint_fail(fd, want, sizeof(want)), -1);
        snprintf(json, sizeof(json), "{\"op\":\"ping\",\"%s\":%llu}", fd->name,
                 (unsigned long long)fd->max + 1);
        char jerr[PROTO_MSG_MAX];
        assert_int_equal(proto_decode(json, strlen(json), OP_NONE, &jreq, jerr,
                                      sizeof(jerr)),
                         -1);
        assert_string_equal(jerr, want);

        const struct {
            unsigned long long v;
            bool ok;
            bool given; /* min - 1 is only a value when min > 0 */
        } steps[] = {
            {fd->min - 1, false, fd->min > 0},
            {fd->min, true, true},
            {fd->max, true, true},
            {fd->max + 1, false, true},
        };
        for (size_t k = 0; k < sizeof(steps) / sizeof(*steps); k++) {
            char line[160];
            char err[PROTO_MSG_MAX];
            struct request req;
            uint64_t got = 0;

            if (!steps[k].given) {
                continue;
            }
            snprintf(line, sizeof(line), params[i].line, steps[k].v);
            int rc = route(line, &req, err, sizeof(err));
            if (!steps[k].ok) {
                assert_int_equal(rc, 400);
                assert_string_equal(err, want);
                continue;
            }
            assert_int_equal(rc, 0);
            if (fd->size == sizeof(uint32_t)) {
                uint32_t x;
                memcpy(&x, (const char *)&req + fd->off, sizeof(x));
                got = x;
            } else {
                memcpy(&got, (const char *)&req + fd->off, sizeof(got));
            }
            assert_int_equal(got, steps[k].v);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_bytewise),
        cmocka_unit_test(test_basic_fields),
        cmocka_unit_test(test_methods),
        cmocka_unit_test(test_error_table),
        cmocka_unit_test(test_transfer_encoding_message),
        cmocka_unit_test(test_head_size_limit),
        cmocka_unit_test(test_header_count_limit),
        cmocka_unit_test(test_target_length),
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_expect_continue),
        cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_percent_decoding),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_route_table),
        cmocka_unit_test(test_route_messages),
        cmocka_unit_test(test_route_allow),
        cmocka_unit_test(test_route_get_locks),
        cmocka_unit_test(test_target_fits_longest_resource),
        cmocka_unit_test(test_control_character_messages),
        cmocka_unit_test(test_route_lock_token),
        cmocka_unit_test(test_route_body),
        cmocka_unit_test(test_route_renew_refused),
        cmocka_unit_test(test_route_query_resource),
        cmocka_unit_test(test_route_query_permit),
        cmocka_unit_test(test_query_bounds_from_table),
        cmocka_unit_test(test_format_head),
        cmocka_unit_test(test_status_text),
        cmocka_unit_test(test_limits_default),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
