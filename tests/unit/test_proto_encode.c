/* test_proto_encode.c: unit tests of proto_encode.c, the encoding half of
 * the contract: escaping, responses, events, health and the error table.
 * The shared response vectors run in test_proto.c, beside the request
 * vectors that use the same loader. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proto_encode.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

/* ---- escaping ----------------------------------------------------------- */

static void expect_escape(const char *in, size_t len, const char *want)
{
    char out[256];
    size_t n = proto_json_escape(in, len, out, sizeof(out));

    assert_int_equal(n, strlen(want));
    assert_memory_equal(out, want, n);
}

static void test_escape_specials(void **state)
{
    (void)state;
    expect_escape("a\"b", 3, "a\\\"b");
    expect_escape("a\\b", 3, "a\\\\b");
    expect_escape("/", 1, "/");
    expect_escape("\b\f\n\r\t", 5, "\\b\\f\\n\\r\\t");
    expect_escape("\x00", 1, "\\u0000");
    expect_escape("\x01\x1f", 2, "\\u0001\\u001f");
    expect_escape("\x0b", 1, "\\u000b");
    expect_escape("a\x7f", 2, "a\x7f"); /* DEL needs no escape in JSON */
    expect_escape("plain text 123", 14, "plain text 123");
}

static void test_escape_all_control_bytes(void **state)
{
    (void)state;
    for (int c = 0; c < 0x20; c++) {
        char in[1] = {(char)c};
        char out[16];
        size_t n = proto_json_escape(in, 1, out, sizeof(out));

        assert_true(n == 2 || n == 6);
        assert_int_equal(out[0], '\\');
        if (n == 6) {
            char want[7];
            snprintf(want, sizeof(want), "\\u%04x", c);
            assert_memory_equal(out, want, 6);
        }
    }
}

static void test_escape_utf8_passthrough(void **state)
{
    const char *s = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x94\x92\xc2\x85"
                    "\xf4\x8f\xbf\xbf";

    (void)state;
    /* é € 🔒, C1 NEL (valid UTF-8, legal raw in JSON), U+10FFFF. */
    expect_escape(s, strlen(s), s);
}

static void test_escape_invalid_utf8_replaced(void **state)
{
    (void)state;
    expect_escape("\xff", 1, "\\ufffd");
    expect_escape("a\x80z", 3, "a\\ufffdz");
    expect_escape("\xc0\xaf", 2, "\\ufffd\\ufffd");            /* overlong */
    expect_escape("\xed\xa0\x80", 3, "\\ufffd\\ufffd\\ufffd"); /* U+D800 */
    expect_escape("\xe2\x82", 2, "\\ufffd\\ufffd");            /* cut short */
    expect_escape("\xf4\x90\x80\x80", 4,
                  "\\ufffd\\ufffd\\ufffd\\ufffd"); /* > U+10FFFF */
}

static void test_escape_capacity(void **state)
{
    char out[16];

    (void)state;
    assert_int_equal(proto_json_escape("", 0, out, sizeof(out)), 0);
    assert_int_equal(proto_json_escape("abc", 3, out, 3), 3);
    assert_int_equal(proto_json_escape("abc", 3, out, 2), 0);
    assert_int_equal(proto_json_escape("a\n", 2, out, 3), 3);
    assert_int_equal(proto_json_escape("a\n", 2, out, 2), 0);
    assert_int_equal(proto_json_escape("\x01", 1, out, 6), 6);
    assert_int_equal(proto_json_escape("\x01", 1, out, 5), 0);
    assert_int_equal(proto_json_escape("\xc3\xa9", 2, out, 1), 0);
}

/* ---- encoding ----------------------------------------------------------- */

static void test_encode_success_shapes(void **state)
{
    struct response rsp = {0};
    char out[PROTO_RESPONSE_MAX];
    size_t n;

    (void)state;
    n = proto_encode_response(&rsp, out, sizeof(out));
    assert_string_equal(out, "{\"ok\":true}");
    assert_int_equal(n, strlen(out));

    rsp.lock = TOKEN;
    rsp.resource = "r";
    rsp.resource_len = 1;
    rsp.validity_ms = -5; /* encoded as given; the caller decides */
    proto_encode_response(&rsp, out, sizeof(out));
    assert_string_equal(out, "{\"ok\":true,\"lock\":\"" TOKEN
                             "\",\"resource\":\"r\",\"validity_ms\":-5}");

    rsp.resource_len = 0; /* an empty resource is left out */
    rsp.validity_ms = INT64_MAX;
    rsp.has_fence = true;
    rsp.fence = INT64_MIN;
    proto_encode_response(&rsp, out, sizeof(out));
    assert_string_equal(out, "{\"ok\":true,\"lock\":\"" TOKEN
                             "\",\"validity_ms\":9223372036854775807,"
                             "\"fence\":-9223372036854775808}");

    rsp.id = "7";
    rsp.id_len = 0; /* id_len rules: 0 means no id */
    rsp.lock = NULL;
    rsp.has_fence = false;
    proto_encode_response(&rsp, out, sizeof(out));
    assert_string_equal(out, "{\"ok\":true}");
}

static void test_encode_id_kinds(void **state)
{
    const char *ids[] = {"\"s\"",
                         "0",
                         "-1.5e3",
                         "true",
                         "false",
                         "null",
                         "18446744073709551617"};
    char out[128];
    char want[128];

    (void)state;
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        struct response rsp = {.id = ids[i], .id_len = strlen(ids[i])};

        proto_encode_response(&rsp, out, sizeof(out));
        snprintf(want, sizeof(want), "{\"id\":%s,\"ok\":true}", ids[i]);
        assert_string_equal(out, want);
    }
}

static void test_encode_error_every_code(void **state)
{
    char out[PROTO_RESPONSE_MAX];
    char want[256];

    (void)state;
    for (int e = ERR_BAD_REQUEST; e < ERR__COUNT; e++) {
        struct response rsp = {
            .err = (enum proto_err)e, .message = "m", .id = "1", .id_len = 1};

        proto_encode_response(&rsp, out, sizeof(out));
        snprintf(want, sizeof(want),
                 "{\"id\":1,\"ok\":false,\"error\":{\"code\":\"%s\","
                 "\"message\":\"m\"}}",
                 proto_err_code((enum proto_err)e));
        assert_string_equal(out, want);

        /* Without a message, the code's default, never empty. */
        rsp.message = "";
        proto_encode_response(&rsp, out, sizeof(out));
        assert_null(strstr(out, "\"message\":\"\""));
    }

    struct response bad = {.err = (enum proto_err)99, .message = "x"};
    proto_encode_response(&bad, out, sizeof(out));
    assert_string_equal(out, "{\"ok\":false,\"error\":{\"code\":"
                             "\"internal\",\"message\":\"x\"}}");
}

static void test_encode_message_clipped(void **state)
{
    char msg[PROTO_MSG_MAX + 100];
    char out[PROTO_RESPONSE_MAX];
    struct response rsp = {.err = ERR_BAD_REQUEST, .message = msg};
    cJSON *j;
    const char *m;

    (void)state;
    /* 'a' then two-byte é from PROTO_MSG_MAX - 1 on: the cut at 256 would
     * split one, so it must back off to 255 bytes. */
    memset(msg, 'a', sizeof(msg));
    for (size_t i = PROTO_MSG_MAX - 1; i + 1 < sizeof(msg) - 1; i += 2) {
        msg[i] = '\xc3';
        msg[i + 1] = '\xa9';
    }
    msg[sizeof(msg) - 1] = '\0';
    assert_int_not_equal(proto_encode_response(&rsp, out, sizeof(out)), 0);
    j = cJSON_Parse(out);
    assert_non_null(j);
    m = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message")
            ->valuestring;
    assert_int_equal(strlen(m), PROTO_MSG_MAX - 1);
    assert_null(strstr(out, "ufffd"));
    cJSON_Delete(j);
}

/* The message's limit holds for the value a client decodes: bytes the
 * encoder replaces by U+FFFD (three bytes each) count as such. */
static void test_encode_message_clipped_after_replacement(void **state)
{
    char msg[PROTO_MSG_MAX + 100];
    char out[PROTO_RESPONSE_MAX];
    struct response rsp = {.err = ERR_BAD_REQUEST, .message = msg};

    (void)state;
    for (int k = 0; k < 2; k++) {
        if (k == 0) { /* a caller's snprintf cut a character in half */
            memset(msg, 'a', PROTO_MSG_MAX - 2);
            msg[PROTO_MSG_MAX - 2] = '\xc3';
            msg[PROTO_MSG_MAX - 1] = '\0';
        } else { /* a client's bytes quoted, none of them UTF-8 */
            memset(msg, '\xff', sizeof(msg) - 1);
            msg[sizeof(msg) - 1] = '\0';
        }
        assert_int_not_equal(proto_encode_response(&rsp, out, sizeof(out)), 0);
        cJSON *j = cJSON_Parse(out);
        assert_non_null(j);
        const char *m =
            cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message")
                ->valuestring;
        assert_true(strlen(m) > 0);
        assert_true(strlen(m) <= PROTO_MSG_MAX);
        cJSON_Delete(j);
    }
}

static void test_encode_raw_bytes_escaped(void **state)
{
    const char res[] = {'a', '\0', 'b', '\xff'};
    struct response rsp = {.lock = TOKEN,
                           .resource = res,
                           .resource_len = sizeof(res),
                           .validity_ms = 1};
    char out[PROTO_RESPONSE_MAX];

    (void)state;
    proto_encode_response(&rsp, out, sizeof(out));
    assert_string_equal(out, "{\"ok\":true,\"lock\":\"" TOKEN
                             "\",\"resource\":\"a\\u0000b\\ufffd\","
                             "\"validity_ms\":1}");
}

/* Every capacity below the length (plus NUL) fails cleanly, never
 * writing past cap; the exact capacity succeeds. */
static void test_encode_capacity(void **state)
{
    struct response rsp = {.id = "\"x\"",
                           .id_len = 3,
                           .lock = TOKEN,
                           .resource = "q\"\n\xc3\xa9",
                           .resource_len = 5,
                           .validity_ms = 123,
                           .has_fence = true,
                           .fence = 42};
    char ref[PROTO_RESPONSE_MAX];
    size_t len = proto_encode_response(&rsp, ref, sizeof(ref));

    (void)state;
    assert_int_not_equal(len, 0);
    for (size_t cap = 0; cap <= len + 1; cap++) {
        char *out = malloc(cap > 0 ? cap : 1);
        size_t n;

        assert_non_null(out);
        n = proto_encode_response(&rsp, out, cap);
        if (cap <= len) {
            assert_int_equal(n, 0);
        } else {
            assert_int_equal(n, len);
            assert_string_equal(out, ref);
        }
        n = proto_encode_event("lost", TOKEN, "r", 1, out, cap);
        assert_true(n == 0 || n < cap);
        free(out);
    }
}

/* The worst case of each field at once fits PROTO_RESPONSE_MAX. */
static void test_encode_worst_case_fits(void **state)
{
    char res[PROTO_RESOURCE_MAX];
    char id[PROTO_ID_MAX];
    char msg[4096];
    char out[PROTO_RESPONSE_MAX];
    struct response rsp = {0};

    (void)state;
    memset(res, 0x01, sizeof(res));
    memset(id, '9', sizeof(id));
    memset(msg, 0x01, sizeof(msg) - 1);
    msg[sizeof(msg) - 1] = '\0';
    rsp.id = id;
    rsp.id_len = sizeof(id);
    rsp.lock = TOKEN;
    rsp.resource = res;
    rsp.resource_len = sizeof(res);
    rsp.validity_ms = INT64_MIN;
    rsp.has_fence = true;
    rsp.fence = INT64_MIN;
    assert_int_not_equal(proto_encode_response(&rsp, out, sizeof(out)), 0);
    rsp.err = ERR_BAD_REQUEST;
    rsp.message = msg;
    assert_int_not_equal(proto_encode_response(&rsp, out, sizeof(out)), 0);
    assert_int_not_equal(
        proto_encode_event("lost", TOKEN, res, sizeof(res), out, sizeof(out)),
        0);
}

static void test_encode_event(void **state)
{
    char out[256];
    size_t n;

    (void)state;
    n = proto_encode_event("lost", TOKEN, "a\"b", 3, out, sizeof(out));
    assert_string_equal(out, "{\"event\":\"lost\",\"lock\":\"" TOKEN
                             "\",\"resource\":\"a\\\"b\"}");
    assert_int_equal(n, strlen(out));
    proto_encode_event("lost", NULL, NULL, 0, out, sizeof(out));
    assert_string_equal(out, "{\"event\":\"lost\"}");
    assert_int_equal(proto_encode_event(NULL, TOKEN, "r", 1, out, sizeof(out)),
                     0);
}

/* ---- health ------------------------------------------------------------- */

static void test_health_shapes(void **state)
{
    struct proto_node_health nodes[2] = {
        {.addr = "10.0.0.1:6379", .up = true, .state = "up", .rtt_ms = 1},
        {.addr = "ctl\x01",
         .up = false,
         .state = NULL,
         .last_error = "NOAUTH \"x\"",
         .rtt_ms = -1,
         .quarantined = true},
    };
    size_t len = 0;
    char *json;
    cJSON *j;

    (void)state;
    json = proto_encode_health("42", 2, true, 2, nodes, 2, &len);
    assert_non_null(json);
    assert_int_equal(len, strlen(json));
    assert_string_equal(
        json, "{\"id\":42,\"ok\":true,\"quorum\":2,\"nodes\":["
              "{\"addr\":\"10.0.0.1:6379\",\"up\":true,\"state\":\"up\","
              "\"last_error\":null,\"rtt_ms\":1.000,\"quarantined\":false},"
              "{\"addr\":\"ctl\\u0001\",\"up\":false,\"state\":\"down\","
              "\"last_error\":\"NOAUTH \\\"x\\\"\",\"rtt_ms\":null,"
              "\"quarantined\":true}]}");
    free(json);

    /* NaN and infinity have no JSON form. */
    nodes[0].rtt_ms = NAN;
    nodes[1].rtt_ms = INFINITY;
    json = proto_encode_health(NULL, 0, false, 2, nodes, 2, NULL);
    assert_non_null(json);
    j = cJSON_Parse(json);
    assert_non_null(j);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(j, "ok")));
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "code")
            ->valuestring,
        "no_quorum");
    assert_null(strstr(json, "nan"));
    assert_null(strstr(json, "inf"));
    cJSON_Delete(j);
    free(json);

    json = proto_encode_health(NULL, 0, true, 1, NULL, 3, &len);
    assert_string_equal(json, "{\"ok\":true,\"quorum\":1,\"nodes\":[]}");
    free(json);

    /* A rediss:// node says how its certificate is checked. */
    nodes[0].rtt_ms = 2;
    nodes[0].tls = "insecure";
    json = proto_encode_health(NULL, 0, true, 1, nodes, 1, &len);
    assert_string_equal(
        json, "{\"ok\":true,\"quorum\":1,\"nodes\":["
              "{\"addr\":\"10.0.0.1:6379\",\"up\":true,\"state\":\"up\","
              "\"last_error\":null,\"rtt_ms\":2.000,\"quarantined\":false,"
              "\"tls\":\"insecure\"}]}");
    free(json);

    /* A node that may evict lock keys names its policy, after tls; one
     * that refused its last lock command says with what, last. */
    nodes[0].eviction = "allkeys-lru";
    nodes[0].refusing = "OOM \"x\"";
    json = proto_encode_health(NULL, 0, true, 1, nodes, 1, &len);
    assert_string_equal(
        json, "{\"ok\":true,\"quorum\":1,\"nodes\":["
              "{\"addr\":\"10.0.0.1:6379\",\"up\":true,\"state\":\"up\","
              "\"last_error\":null,\"rtt_ms\":2.000,\"quarantined\":false,"
              "\"tls\":\"insecure\",\"eviction\":\"allkeys-lru\","
              "\"refusing\":\"OOM \\\"x\\\"\"}]}");
    free(json);

    /* An up node whose acquires do not count says why, and is not
     * usable: with it alone no quorum is there. */
    nodes[0].tls = nodes[0].eviction = nodes[0].refusing = NULL;
    nodes[0].not_counted = "data-set key: SET refused (OOM)";
    json = proto_encode_health(NULL, 0, false, 1, nodes, 1, &len);
    assert_string_equal(
        json, "{\"ok\":false,\"error\":{\"code\":\"no_quorum\",\"message\":"
              "\"0 of 1 nodes usable (up, not quarantined), quorum is 1\"},"
              "\"quorum\":1,\"nodes\":["
              "{\"addr\":\"10.0.0.1:6379\",\"up\":true,\"state\":\"up\","
              "\"last_error\":null,\"rtt_ms\":2.000,\"quarantined\":false,"
              "\"not_counted\":\"data-set key: SET refused (OOM)\"}]}");
    free(json);
}

static void test_health_many_long_nodes(void **state)
{
    struct proto_node_health nodes[64];
    char addr[300];
    size_t len = 0;
    char *json;
    cJSON *j;

    (void)state;
    memset(addr, '\x02', sizeof(addr) - 1); /* 6 bytes each escaped */
    addr[sizeof(addr) - 1] = '\0';
    for (int i = 0; i < 64; i++) {
        nodes[i] = (struct proto_node_health){.addr = addr,
                                              .up = i % 2,
                                              .state = addr,
                                              .last_error = addr,
                                              .eviction = addr,
                                              .refusing = addr,
                                              .rtt_ms = 123456789.123,
                                              .quarantined = false};
    }
    json = proto_encode_health("\"x\"", 3, true, 33, nodes, 64, &len);
    assert_non_null(json);
    j = cJSON_Parse(json);
    assert_non_null(j);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodes")), 64);
    cJSON_Delete(j);
    free(json);
}

/* ---- tables ------------------------------------------------------------- */

static void test_err_table(void **state)
{
    static const struct {
        enum proto_err err;
        const char *code;
        int status;
    } want[] = {
        {ERR_NONE, "ok", 200},
        {ERR_BAD_REQUEST, "bad_request", 400},
        {ERR_NOT_HELD, "not_held", 404},
        {ERR_BUSY, "busy", 409},
        {ERR_DONE, "done", 409},
        {ERR_TOO_LARGE, "too_large", 413},
        {ERR_LIMIT, "limit", 429},
        {ERR_NO_QUORUM, "no_quorum", 503},
        {ERR_SHUTTING_DOWN, "shutting_down", 503},
        {ERR_INTERNAL, "internal", 500},
    };

    (void)state;
    assert_int_equal(sizeof(want) / sizeof(want[0]), ERR__COUNT);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_string_equal(proto_err_code(want[i].err), want[i].code);
        assert_int_equal(proto_err_status(want[i].err), want[i].status);
    }
    assert_string_equal(proto_err_code(ERR__COUNT), "internal");
    assert_int_equal(proto_err_status((enum proto_err) - 1), 500);
}

/* A quoted string is the escaped body between quotes; it fits in exactly
 * its length (no NUL), and one byte less writes no length. */
static void test_json_quote(void **state)
{
    char out[64];
    char body[64];
    size_t n;
    size_t b;

    (void)state;
    n = proto_json_quote("a\"b\x01\xff", 5, out, sizeof(out));
    b = proto_json_escape("a\"b\x01\xff", 5, body, sizeof(body));
    assert_int_equal(n, b + 2);
    assert_int_equal(out[0], '"');
    assert_memory_equal(out + 1, body, b);
    assert_int_equal(out[n - 1], '"');
    assert_int_equal(proto_json_quote("a\"b\x01\xff", 5, out, n), n);
    assert_int_equal(proto_json_quote("a\"b\x01\xff", 5, out, n - 1), 0);
    assert_int_equal(proto_json_quote("", 0, out, sizeof(out)), 2);
    assert_memory_equal(out, "\"\"", 2);
    assert_int_equal(proto_json_quote("", 0, out, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape_specials),
        cmocka_unit_test(test_escape_all_control_bytes),
        cmocka_unit_test(test_escape_utf8_passthrough),
        cmocka_unit_test(test_escape_invalid_utf8_replaced),
        cmocka_unit_test(test_escape_capacity),
        cmocka_unit_test(test_encode_success_shapes),
        cmocka_unit_test(test_encode_id_kinds),
        cmocka_unit_test(test_encode_error_every_code),
        cmocka_unit_test(test_encode_message_clipped),
        cmocka_unit_test(test_encode_message_clipped_after_replacement),
        cmocka_unit_test(test_encode_raw_bytes_escaped),
        cmocka_unit_test(test_encode_capacity),
        cmocka_unit_test(test_encode_worst_case_fits),
        cmocka_unit_test(test_encode_event),
        cmocka_unit_test(test_health_shapes),
        cmocka_unit_test(test_health_many_long_nodes),
        cmocka_unit_test(test_err_table),
        cmocka_unit_test(test_json_quote),
    };

    return cmocka_run_group_tests_name("proto_encode", tests, NULL, NULL);
}
