/* test_proto.c: unit tests of proto.c, the decoding half of the contract
 * (test_proto_encode.c has the encoding half). First every shared vector
 * in proto/vectors/ (requests.json and responses.json, which the client
 * libraries read too), one cmocka test per vector; then hand-written tests
 * of field limits, UTF-8, escaping, ids and cursors that go both ways, op
 * names and the field table, each member walked through both decoders.
 *
 * The vectors are read from $VECTORS_DIR, or when it is unset from
 * proto/vectors or ../proto/vectors relative to the working directory. */
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

#include "proto.h"

#define TOKEN "0123456789abcdef0123456789abcdef"
#define ERRLEN 64 /* the smallest err buffer proto_decode promises to fill */

/* ---- helpers ------------------------------------------------------------ */

/* decode: proto_decode from an exact-size heap copy of text[0..len), so
 * AddressSanitizer catches any read past the end. */
static int decode(const char *text, size_t len, enum proto_op op,
                  struct request *req, char *err, size_t errlen)
{
    char *copy = malloc(len > 0 ? len : 1);
    int rc;

    assert_non_null(copy);
    memcpy(copy, text, len);
    rc = proto_decode(copy, len, op, req, err, errlen);
    /* Every decode in these tests also checks that the fast path and the
     * full decoder agree. */
    struct request full;
    char err_full[PROTO_MSG_MAX];
    int rc_full = proto_decode_full(copy, len, op, &full, err_full,
                                    errlen < sizeof(err_full)
                                        ? errlen
                                        : sizeof(err_full));
    assert_int_equal(rc, rc_full);
    if (rc == 0) {
        assert_memory_equal(req, &full, sizeof(full));
    } else if (err != NULL) {
        assert_string_equal(err, err_full);
    }
    free(copy);
    return rc;
}

static int decode_str(const char *text, enum proto_op op, struct request *req,
                      char *err)
{
    return decode(text, strlen(text), op, req, err, ERRLEN);
}

/* expect_error: text fails to decode (NDJSON) with exactly message. */
static void expect_error(const char *text, const char *message)
{
    struct request req;
    char err[ERRLEN];

    assert_int_equal(decode_str(text, OP_NONE, &req, err), -1);
    assert_string_equal(err, message);
}

static void expect_ok(const char *text, struct request *req)
{
    char err[ERRLEN] = "";

    if (decode_str(text, OP_NONE, req, err) != 0) {
        fail_msg("decode failed: %s: %s", text, err);
    }
}

static enum proto_op op_by_name(const char *name)
{
    for (int op = OP_ACQUIRE; op <= OP_INSPECT; op++) {
        if (strcmp(proto_op_name((enum proto_op)op), name) == 0) {
            return (enum proto_op)op;
        }
    }
    fail_msg("unknown op in vector: %s", name);
    return OP_NONE;
}

static enum proto_err err_by_code(const char *code)
{
    for (int e = ERR_BAD_REQUEST; e < ERR__COUNT; e++) {
        if (strcmp(proto_err_code((enum proto_err)e), code) == 0) {
            return (enum proto_err)e;
        }
    }
    fail_msg("unknown error code in vector: %s", code);
    return ERR_INTERNAL;
}

/* ---- vectors ------------------------------------------------------------ */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0;
    size_t n = 0;

    if (f == NULL) {
        return NULL;
    }
    for (;;) {
        if (n == cap) {
            char *p;
            cap = cap ? cap * 2 : 65536;
            p = realloc(buf, cap + 1);
            if (p == NULL) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = p;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0) {
            break;
        }
        n += got;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* load_vectors: the array in <dir>/<file>: $VECTORS_DIR when set (and
 * nothing else, so a wrong setting is not papered over), else the first
 * of proto/vectors and ../proto/vectors that has it. */
static cJSON *load_vectors(const char *file)
{
    const char *env = getenv("VECTORS_DIR");
    const char *dirs[] = {env, env ? NULL : "proto/vectors",
                          env ? NULL : "../proto/vectors"};

    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        char path[4096];
        size_t len = 0;
        char *text;
        cJSON *arr;

        if (dirs[i] == NULL) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", dirs[i], file);
        text = read_file(path, &len);
        if (text == NULL) {
            continue;
        }
        arr = cJSON_ParseWithLength(text, len);
        free(text);
        if (!cJSON_IsArray(arr)) {
            fprintf(stderr, "%s: not a JSON array\n", path);
            cJSON_Delete(arr);
            return NULL;
        }
        return arr;
    }
    fprintf(stderr, "%s: not found (set VECTORS_DIR)\n", file);
    return NULL;
}

static const char *vec_str(const cJSON *obj, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);

    return cJSON_IsString(j) ? j->valuestring : NULL;
}

static int hex_nibble(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    fail_msg("bad hex digit '%c' in input_hex", c);
    return 0;
}

/* vector_input: the raw request bytes, from "input" or "input_hex";
 * malloc'd, *len set. */
static char *vector_input(const cJSON *v, size_t *len)
{
    const char *text = vec_str(v, "input");
    const char *hex = vec_str(v, "input_hex");
    char *buf;

    if (text != NULL) {
        *len = strlen(text);
        buf = malloc(*len + 1);
        assert_non_null(buf);
        memcpy(buf, text, *len + 1);
        return buf;
    }
    assert_non_null(hex);
    assert_int_equal(strlen(hex) % 2, 0);
    *len = strlen(hex) / 2;
    buf = malloc(*len + 1);
    assert_non_null(buf);
    for (size_t i = 0; i < *len; i++) {
        buf[i] =
            (char)(hex_nibble(hex[2 * i]) << 4 | hex_nibble(hex[2 * i + 1]));
    }
    return buf;
}

/* check_request: every key of want against the decoded req; an unknown key
 * fails, so the vectors cannot drift from struct request unnoticed. */
static void check_request(const cJSON *want, const struct request *req)
{
    const cJSON *f;

    cJSON_ArrayForEach(f, want)
    {
        const char *k = f->string;

        if (strcmp(k, "op") == 0) {
            assert_true(cJSON_IsString(f));
            assert_int_equal(req->op, op_by_name(f->valuestring));
        } else if (strcmp(k, "id") == 0) {
            if (cJSON_IsNull(f)) {
                assert_int_equal(req->id_len, 0);
            } else {
                assert_true(cJSON_IsString(f));
                assert_string_equal(req->id, f->valuestring);
                assert_int_equal(req->id_len, strlen(f->valuestring));
            }
        } else if (strcmp(k, "resource") == 0) {
            if (cJSON_IsNull(f)) {
                assert_int_equal(req->resource_len, 0);
            } else {
                assert_true(cJSON_IsString(f));
                assert_int_equal(req->resource_len, strlen(f->valuestring));
                assert_string_equal(req->resource, f->valuestring);
            }
        } else if (strcmp(k, "lock") == 0) {
            if (cJSON_IsNull(f)) {
                assert_false(req->has_lock);
            } else {
                assert_true(req->has_lock);
                assert_string_equal(req->lock, f->valuestring);
            }
        } else if (strcmp(k, "ttl_ms") == 0) {
            assert_int_equal(req->ttl_ms, (uint64_t)f->valuedouble);
        } else if (strcmp(k, "has_ttl") == 0) {
            assert_int_equal(req->has_ttl, cJSON_IsTrue(f));
        } else if (strcmp(k, "wait_ms") == 0) {
            assert_int_equal(req->wait_ms, (uint64_t)f->valuedouble);
        } else if (strcmp(k, "renew") == 0) {
            assert_int_equal(req->renew, cJSON_IsTrue(f));
        } else if (strcmp(k, "fence") == 0) {
            assert_int_equal(req->fence, cJSON_IsTrue(f));
        } else if (strcmp(k, "keep_ms") == 0) {
            assert_int_equal(req->keep_ms, (uint64_t)f->valuedouble);
        } else if (strcmp(k, "renew_max_ms") == 0) {
            assert_int_equal(req->renew_max_ms, (uint64_t)f->valuedouble);
        } else if (strcmp(k, "permits") == 0) {
            assert_int_equal(req->permits, (uint64_t)f->valuedouble);
        } else if (strcmp(k, "permit") == 0) {
            if (cJSON_IsNull(f)) {
                assert_false(req->has_permit);
            } else {
                assert_true(req->has_permit);
                assert_int_equal(req->permit, (uint64_t)f->valuedouble);
            }
        } else if (strcmp(k, "prefix") == 0) {
            assert_true(cJSON_IsString(f));
            assert_int_equal(req->prefix_len, strlen(f->valuestring));
            assert_memory_equal(req->prefix, f->valuestring, req->prefix_len);
        } else if (strcmp(k, "limit") == 0) {
            assert_int_equal(req->limit, (uint64_t)f->valuedouble);
        } else if (strcmp(k, "cursor") == 0) {
            uint64_t want = 0;
            if (!cJSON_IsNull(f)) {
                want = strtoull(f->valuestring, NULL, 16);
            }
            assert_true(req->cursor == want);
        } else {
            fail_msg("unknown key in expect.request: %s", k);
        }
    }
}

static void test_request_vector(void **state)
{
    const cJSON *v = *state;
    const cJSON *expect = cJSON_GetObjectItemCaseSensitive(v, "expect");
    const cJSON *opj = cJSON_GetObjectItemCaseSensitive(v, "op");
    enum proto_op op = OP_NONE;
    struct request req;
    char err[ERRLEN] = "";
    size_t len = 0;
    char *input = vector_input(v, &len);
    int rc;

    assert_non_null(expect);
    if (cJSON_IsString(opj)) {
        op = op_by_name(opj->valuestring);
    } else {
        assert_true(cJSON_IsNull(opj));
    }
    rc = decode(input, len, op, &req, err, sizeof(err));
    free(input);

    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(expect, "ok"))) {
        if (rc != 0) {
            fail_msg("expected success, got: %s", err);
        }
        check_request(cJSON_GetObjectItemCaseSensitive(expect, "request"),
                      &req);
        return;
    }

    const char *code = vec_str(expect, "code");
    const char *message = vec_str(expect, "message");
    const cJSON *field = cJSON_GetObjectItemCaseSensitive(expect, "field");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(expect, "id");
    const cJSON *prefix =
        cJSON_GetObjectItemCaseSensitive(expect, "message_prefix");

    bool not_json =
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(expect, "not_json"));

    /* Input that is not JSON at all has its own return, so that the
     * NDJSON server closes the connection after answering. */
    assert_int_equal(rc, not_json ? PROTO_NOT_JSON : -1);
    assert_non_null(code);
    /* Decoding only ever fails as bad_request. */
    assert_string_equal(code, "bad_request");
    if (cJSON_IsString(field)) {
        assert_non_null(strstr(err, field->valuestring));
    } else {
        assert_true(cJSON_IsNull(field));
    }
    if (message != NULL) {
        assert_string_equal(err, message);
    }
    if (prefix != NULL &&
        strncmp(err, prefix->valuestring, strlen(prefix->valuestring)) != 0) {
        fail_msg("\"%s\" does not start with \"%s\"", err, prefix->valuestring);
    }
    /* Every failure says something, exactly or by its prefix. */
    assert_true(message != NULL || cJSON_IsString(prefix));
    if (cJSON_IsString(id)) {
        assert_string_equal(req.id, id->valuestring);
        assert_int_equal(req.id_len, strlen(id->valuestring));
    } else if (id != NULL) {
        assert_int_equal(req.id_len, 0);
    }
}

static const char *null_or_str(const cJSON *obj, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);

    if (j == NULL || cJSON_IsNull(j)) {
        return NULL;
    }
    assert_true(cJSON_IsString(j));
    return j->valuestring;
}

static int64_t vec_int(const cJSON *obj, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);

    assert_true(cJSON_IsNumber(j));
    return (int64_t)j->valuedouble;
}

/* encode_vector_response: kind "response". int64 values beyond 2^53 are
 * read from the expected text's own digits when the double is inexact. */
static size_t encode_vector_response(const cJSON *r, char *out, size_t cap)
{
    const cJSON *fence = cJSON_GetObjectItemCaseSensitive(r, "fence");
    const char *error = null_or_str(r, "error");
    struct response rsp = {0};

    rsp.id = null_or_str(r, "id");
    rsp.id_len = rsp.id != NULL ? strlen(rsp.id) : 0;
    rsp.err = error != NULL ? err_by_code(error) : ERR_NONE;
    rsp.message = null_or_str(r, "message");
    rsp.lock = null_or_str(r, "lock");
    rsp.resource = null_or_str(r, "resource");
    rsp.resource_len = rsp.resource != NULL ? strlen(rsp.resource) : 0;
    rsp.validity_ms = vec_int(r, "validity_ms");
    if (cJSON_IsNumber(fence)) {
        rsp.has_fence = true;
        /* (int64_t)9.2233720368547758e18 overflows: clamp to the max. */
        rsp.fence = fence->valuedouble >= 9.2e18 ? INT64_MAX
                                                 : (int64_t)fence->valuedouble;
    }
    return proto_encode_response(&rsp, out, cap);
}

static void test_response_vector(void **state)
{
    const cJSON *v = *state;
    const char *kind = vec_str(v, "kind");
    const char *expect = vec_str(v, "expect");
    const cJSON *body;
    char out[PROTO_RESPONSE_MAX];
    size_t n = 0;

    assert_non_null(kind);
    assert_non_null(expect);
    body = cJSON_GetObjectItemCaseSensitive(v, kind);
    assert_non_null(body);
    /* The expected text is itself valid JSON. */
    cJSON *parsed = cJSON_Parse(expect);
    assert_non_null(parsed);
    cJSON_Delete(parsed);

    if (strcmp(kind, "response") == 0) {
        n = encode_vector_response(body, out, sizeof(out));
        assert_int_not_equal(n, 0);
        assert_string_equal(out, expect);
    } else if (strcmp(kind, "event") == 0) {
        const char *res = null_or_str(body, "resource");
        n = proto_encode_event(vec_str(body, "event"),
                               null_or_str(body, "lock"), res,
                               res != NULL ? strlen(res) : 0, out, sizeof(out));
        assert_int_not_equal(n, 0);
        assert_string_equal(out, expect);
    } else if (strcmp(kind, "health") == 0) {
        const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(body, "nodes");
        int count = cJSON_GetArraySize(nodes);
        struct proto_node_health nh[16];
        const char *id = null_or_str(body, "id");
        const cJSON *nd;
        size_t len = 0;
        int i = 0;

        assert_in_range(count, 0, 16);
        cJSON_ArrayForEach(nd, nodes)
        {
            nh[i].addr = null_or_str(nd, "addr");
            nh[i].up = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(nd, "up"));
            nh[i].state = null_or_str(nd, "state");
            nh[i].last_error = null_or_str(nd, "last_error");
            nh[i].rtt_ms =
                cJSON_GetObjectItemCaseSensitive(nd, "rtt_ms")->valuedouble;
            nh[i].quarantined = cJSON_IsTrue(
                cJSON_GetObjectItemCaseSensitive(nd, "quarantined"));
            nh[i].tls = null_or_str(nd, "tls");
            nh[i].eviction = null_or_str(nd, "eviction");
            nh[i].refusing = null_or_str(nd, "refusing");
            nh[i].not_counted = null_or_str(nd, "not_counted");
            i++;
        }
        char *json = proto_encode_health(
            id, id != NULL ? strlen(id) : 0,
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "ok")),
            (int)vec_int(body, "quorum"), nh, count, &len);
        assert_non_null(json);
        assert_string_equal(json, expect);
        assert_int_equal(len, strlen(expect));
        free(json);
        return;
    } else {
        fail_msg("unknown kind %s", kind);
    }
    assert_int_equal(n, strlen(expect));
}

/* run_vectors: one cmocka test per element of <file>, named by the
 * vector. Returns the number of failures, or -1 when the file is
 * missing or malformed. */
static int run_vectors(const char *file, CMUnitTestFunction fn, int min)
{
    cJSON *arr = load_vectors(file);
    struct CMUnitTest *tests;
    const cJSON *v;
    int n = 0;
    int rc;

    if (arr == NULL) {
        return -1;
    }
    tests = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof(*tests));
    if (tests == NULL) {
        cJSON_Delete(arr);
        return -1;
    }
    cJSON_ArrayForEach(v, arr)
    {
        const char *name = vec_str(v, "name");
        if (name == NULL) {
            fprintf(stderr, "%s: vector %d has no name\n", file, n);
            free(tests);
            cJSON_Delete(arr);
            return -1;
        }
        /* Names are unique, so a failure points at one vector. */
        for (int i = 0; i < n; i++) {
            if (strcmp(tests[i].name, name) == 0) {
                fprintf(stderr, "%s: duplicate vector %s\n", file, name);
                free(tests);
                cJSON_Delete(arr);
                return -1;
            }
        }
        tests[n].name = name;
        tests[n].test_func = fn;
        tests[n].initial_state = (void *)v;
        n++;
    }
    if (n < min) {
        fprintf(stderr, "%s: %d vectors, expected at least %d\n", file, n, min);
        free(tests);
        cJSON_Delete(arr);
        return -1;
    }
    rc = _cmocka_run_group_tests(file, tests, (size_t)n, NULL, NULL);
    free(tests);
    cJSON_Delete(arr);
    return rc;
}

/* ---- both halves ------------------------------------------------------- */

/* Property: for any bytes without NUL, escaping and parsing back with
 * cJSON gives the bytes again whenever they were valid UTF-8. */
static void test_escape_roundtrip_random(void **state)
{
    uint32_t seed = 12345;
    char in[64];
    char out[64 * 6 + 3];

    (void)state;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = 1 + iter % 40;
        size_t n;
        cJSON *j;

        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            /* Bias to ASCII, with some controls and high bytes. */
            unsigned r = (seed >> 16) & 0xff;
            in[i] = (char)(r % 3 == 0 ? 0x20 + r % 95 : r);
            if (in[i] == 0) {
                in[i] = 'z';
            }
        }
        out[0] = '"';
        n = proto_json_escape(in, len, out + 1, sizeof(out) - 3);
        assert_int_not_equal(n, 0);
        out[n + 1] = '"';
        out[n + 2] = '\0';
        j = cJSON_Parse(out);
        assert_non_null(j);
        assert_true(cJSON_IsString(j));
        /* Valid input comes back as is; invalid as U+FFFD, still a
         * valid resource-free string. */
        if (proto_validate_resource(in, len, NULL, 0) == 0) {
            assert_int_equal(strlen(j->valuestring), len);
            assert_memory_equal(j->valuestring, in, len);
        }
        cJSON_Delete(j);
    }
}

/* A decoded id goes back out as the same JSON value. */
static void test_encode_id_roundtrip_from_decode(void **state)
{
    const char *lines[] = {
        "{\"op\":\"ping\",\"id\":\"a\\\"b\\\\c\\u0001\\u00e9\"}",
        "{\"op\":\"ping\",\"id\":123}",
        "{\"op\":\"ping\",\"id\":null}",
        "{\"op\":\"ping\",\"id\":\"\xf0\x9f\x94\x92\"}",
    };
    struct request req;
    char out[PROTO_RESPONSE_MAX];

    (void)state;
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        cJSON *in = cJSON_Parse(lines[i]);
        cJSON *back;
        struct response rsp = {0};

        expect_ok(lines[i], &req);
        rsp.id = req.id;
        rsp.id_len = req.id_len;
        assert_int_not_equal(proto_encode_response(&rsp, out, sizeof(out)), 0);
        back = cJSON_Parse(out);
        assert_non_null(back);
        assert_true(cJSON_Compare(cJSON_GetObjectItem(in, "id"),
                                  cJSON_GetObjectItem(back, "id"), true));
        cJSON_Delete(in);
        cJSON_Delete(back);
    }
}

/* ---- tables ------------------------------------------------------------- */

static void test_op_names(void **state)
{
    (void)state;
    assert_null(proto_op_name(OP_NONE));
    assert_string_equal(proto_op_name(OP_ACQUIRE), "acquire");
    assert_string_equal(proto_op_name(OP_RELEASE), "release");
    assert_string_equal(proto_op_name(OP_EXTEND), "extend");
    assert_string_equal(proto_op_name(OP_COMPLETE), "complete");
    assert_string_equal(proto_op_name(OP_PING), "ping");
    assert_string_equal(proto_op_name(OP_HEALTH), "health");
    assert_string_equal(proto_op_name(OP_METRICS), "metrics");
    assert_null(proto_op_name((enum proto_op)100));
}

/* ---- validation --------------------------------------------------------- */

static void test_token_shape(void **state)
{
    char t[PROTO_TOKEN_LEN + 2] = TOKEN;

    (void)state;
    assert_int_equal(proto_validate_token(TOKEN, 32), 0);
    assert_int_equal(proto_validate_token(TOKEN, 31), -1);
    assert_int_equal(proto_validate_token(TOKEN "0", 33), -1);
    assert_int_equal(proto_validate_token(NULL, 32), -1);
    assert_int_equal(proto_validate_token("", 0), -1);
    for (int c = 0; c < 256; c++) {
        bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');

        t[7] = (char)c;
        assert_int_equal(proto_validate_token(t, 32), ok ? 0 : -1);
    }
}

/* ref_utf8_ok: a reference decoder for one sequence of n bytes: whether it
 * is the shortest encoding of a scalar value (not a surrogate). */
static bool ref_utf8_ok(const unsigned char *b, size_t n)
{
    uint32_t cp;

    if (n == 1) {
        return b[0] < 0x80;
    }
    if (n == 2 && (b[0] & 0xe0) == 0xc0) {
        cp = (uint32_t)(b[0] & 0x1f) << 6;
    } else if (n == 3 && (b[0] & 0xf0) == 0xe0) {
        cp = (uint32_t)(b[0] & 0x0f) << 12;
    } else if (n == 4 && (b[0] & 0xf8) == 0xf0) {
        cp = (uint32_t)(b[0] & 0x07) << 18;
    } else {
        return false;
    }
    for (size_t i = 1; i < n; i++) {
        if ((b[i] & 0xc0) != 0x80) {
            return false;
        }
        cp |= (uint32_t)(b[i] & 0x3f) << (6 * (n - 1 - i));
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) ||
        (n == 4 && cp < 0x10000)) {
        return false;
    }
    return cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
}

static bool ref_is_control(const unsigned char *b, size_t n)
{
    return (n == 1 && (b[0] < 0x20 || b[0] == 0x7f)) ||
           (n == 2 && b[0] == 0xc2 && b[1] < 0xa0);
}

/* Every 1-, 2- and 3-byte input, and every 4-byte lead with each second
 * byte, against the reference. */
static void test_resource_utf8_exhaustive(void **state)
{
    unsigned char b[4];
    char err[ERRLEN];

    (void)state;
    for (unsigned x = 0; x < 256; x++) {
        b[0] = (unsigned char)x;
        bool ok = ref_utf8_ok(b, 1) && !ref_is_control(b, 1);
        assert_int_equal(
            proto_validate_resource((char *)b, 1, err, sizeof(err)),
            ok ? 0 : -1);
        for (unsigned y = 0; y < 256; y++) {
            b[1] = (unsigned char)y;
            bool ok2 = (ref_utf8_ok(b, 2) && !ref_is_control(b, 2)) ||
                       (ref_utf8_ok(b, 1) && ref_utf8_ok(b + 1, 1) &&
                        !ref_is_control(b, 1) && !ref_is_control(b + 1, 1));
            assert_int_equal(proto_validate_resource((char *)b, 2, NULL, 0),
                             ok2 ? 0 : -1);
        }
    }
    /* Three-byte leads, all continuations. */
    for (unsigned x = 0xe0; x < 0xf0; x++) {
        for (unsigned y = 0; y < 256; y++) {
            for (unsigned z = 0; z < 256; z++) {
                b[0] = (unsigned char)x;
                b[1] = (unsigned char)y;
                b[2] = (unsigned char)z;
                bool ok = ref_utf8_ok(b, 3);
                assert_int_equal(proto_validate_resource((char *)b, 3, NULL, 0),
                                 ok ? 0 : -1);
            }
        }
    }
    /* Four-byte leads (and the invalid F5..FF) with every second byte. */
    for (unsigned x = 0xf0; x < 0x100; x++) {
        for (unsigned y = 0; y < 256; y++) {
            b[0] = (unsigned char)x;
            b[1] = (unsigned char)y;
            b[2] = 0x80;
            b[3] = 0xbf;
            bool ok = ref_utf8_ok(b, 4);
            assert_int_equal(proto_validate_resource((char *)b, 4, NULL, 0),
                             ok ? 0 : -1);
        }
    }
}

static void test_resource_messages(void **state)
{
    char err[ERRLEN];
    char big[PROTO_RESOURCE_MAX + 1];

    (void)state;
    memset(big, 'x', sizeof(big));
    assert_int_equal(proto_validate_resource(big, 512, err, sizeof(err)), 0);
    assert_int_equal(proto_validate_resource(big, 513, err, sizeof(err)), -1);
    assert_string_equal(err, "resource: must be 1..512 bytes");
    assert_int_equal(proto_validate_resource(NULL, 0, err, sizeof(err)), -1);
    assert_string_equal(err, "resource: must be 1..512 bytes");
    assert_int_equal(proto_validate_resource("a\x7f", 2, err, sizeof(err)), -1);
    assert_string_equal(err, "resource: must not contain control characters");
    assert_int_equal(proto_validate_resource("\xc2\x9f", 2, err, sizeof(err)),
                     -1);
    assert_string_equal(err, "resource: must not contain control characters");
    assert_int_equal(proto_validate_resource("\xc2\xa0", 2, err, sizeof(err)),
                     0);
    assert_int_equal(
        proto_validate_resource("\xe0\x80\xaf", 3, err, sizeof(err)), -1);
    assert_string_equal(err, "resource: must be valid UTF-8");
    /* A short err buffer is still NUL-terminated. */
    assert_int_equal(proto_validate_resource(big, 513, err, 8), -1);
    assert_string_equal(err, "resourc");
    assert_int_equal(proto_validate_resource(big, 513, NULL, 0), -1);
}

/* ---- decoding by hand --------------------------------------------------- */

/* acquire_with: a request with one extra member "name":value. */
static int acquire_with(const char *name, const char *value,
                        struct request *req, char *err)
{
    char line[256];

    snprintf(line, sizeof(line),
             "{\"op\":\"acquire\",\"resource\":\"r\",\"%s\":%s}", name, value);
    return decode_str(line, OP_NONE, req, err);
}

/* check_range: value min-1 refused, min and max accepted, max+1 refused,
 * and the message names the field. */
static void check_range(const char *name, long long min, long long max)
{
    struct request req;
    char err[ERRLEN];
    char v[32];
    long long edges[4] = {min - 1, min, max, max + 1};

    for (int i = 0; i < 4; i++) {
        snprintf(v, sizeof(v), "%lld", edges[i]);
        int rc = acquire_with(name, v, &req, err);
        if (i == 1 || i == 2) {
            if (rc != 0) {
                fail_msg("%s=%s refused: %s", name, v, err);
            }
        } else {
            assert_int_equal(rc, -1);
            assert_non_null(strstr(err, name));
            assert_non_null(strstr(err, "must be an integer in"));
        }
    }
}

static void test_decode_field_limits(void **state)
{
    struct request req;
    char err[ERRLEN];

    (void)state;
    check_range("ttl_ms", PROTO_TTL_MIN, PROTO_TTL_MAX);
    check_range("wait_ms", 0, PROTO_WAIT_MAX);
    check_range("keep_ms", PROTO_KEEP_MIN, (long long)PROTO_KEEP_MAX);
    check_range("renew_max_ms", 0, (long long)PROTO_RENEW_MAX_MAX);

    assert_int_equal(acquire_with("ttl_ms", "86400000", &req, err), 0);
    assert_int_equal(req.ttl_ms, 86400000);
    assert_true(req.has_ttl);
    assert_int_equal(acquire_with("keep_ms", "2592000000", &req, err), 0);
    assert_int_equal(req.keep_ms, 2592000000ULL);
    assert_int_equal(acquire_with("renew_max_ms", "2592000000", &req, err), 0);
    assert_int_equal(req.renew_max_ms, 2592000000ULL);

    /* Every wait_ms value is representable; sample the range densely. */
    for (long w = 0; w <= PROTO_WAIT_MAX; w += 997) {
        char v[16];
        snprintf(v, sizeof(v), "%ld", w);
        assert_int_equal(acquire_with("wait_ms", v, &req, err), 0);
        assert_int_equal(req.wait_ms, w);
    }

    /* Types: only integral numbers. */
    const char *bad[] = {
        "1.5",       "\"100\"", "true",  "false",  "null",
        "[]",        "{}",      "1e400", "-1e400", "9007199254740993",
        "100.000001"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(acquire_with("ttl_ms", bad[i], &req, err), -1);
        assert_string_equal(err, "ttl_ms: must be an integer in 10..86400000");
    }
    assert_int_equal(acquire_with("ttl_ms", "1.0e2", &req, err), 0);
    assert_int_equal(req.ttl_ms, 100);
    assert_int_equal(acquire_with("ttl_ms", "1000e-2", &req, err), 0);
    assert_int_equal(req.ttl_ms, 10);

    /* Booleans: only true and false. */
    const char *notbool[] = {"1", "0", "\"true\"", "null", "[]"};
    for (size_t i = 0; i < sizeof(notbool) / sizeof(notbool[0]); i++) {
        assert_int_equal(acquire_with("fence", notbool[i], &req, err), -1);
        assert_string_equal(err, "fence: must be true or false");
        assert_int_equal(acquire_with("renew", notbool[i], &req, err), -1);
        assert_string_equal(err, "renew: must be true or false");
    }
}

static void test_decode_resource_length(void **state)
{
    char line[PROTO_RESOURCE_MAX * 6 + 64];
    struct request req;
    char err[ERRLEN];

    (void)state;
    for (size_t n = 510; n <= 514; n++) {
        int k =
            snprintf(line, sizeof(line), "{\"op\":\"acquire\",\"resource\":\"");
        memset(line + k, 'x', n);
        snprintf(line + k + n, sizeof(line) - k - n, "\"}");
        int rc = decode_str(line, OP_NONE, &req, err);
        if (n <= PROTO_RESOURCE_MAX) {
            assert_int_equal(rc, 0);
            assert_int_equal(req.resource_len, n);
            assert_int_equal(req.resource[n], '\0');
        } else {
            assert_int_equal(rc, -1);
            assert_string_equal(err, "resource: must be 1..512 bytes");
        }
    }
    /* The limit is on decoded bytes: 128 four-byte escapes pairs = 512. */
    int k = snprintf(line, sizeof(line), "{\"op\":\"acquire\",\"resource\":\"");
    for (int i = 0; i < 128; i++) {
        k += snprintf(line + k, sizeof(line) - k, "\\ud83d\\udd12");
    }
    snprintf(line + k, sizeof(line) - k, "\"}");
    expect_ok(line, &req);
    assert_int_equal(req.resource_len, 512);
}

static void test_decode_every_control_char(void **state)
{
    char line[128];
    struct request req;
    char err[ERRLEN];

    (void)state;
    /* As \u escapes: all of C0, DEL and C1 refused, U+00A0 accepted. */
    for (unsigned c = 0; c <= 0xa0; c++) {
        if (c >= 0x20 && c < 0x7f) {
            continue;
        }
        snprintf(line, sizeof(line),
                 "{\"op\":\"acquire\",\"resource\":\"x\\u%04xy\"}", c);
        int rc = decode_str(line, OP_NONE, &req, err);
        if (c == 0xa0) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, -1);
            assert_string_equal(
                err, "resource: must not contain control characters");
        }
    }
    /* Raw C0 bytes inside a string are not JSON at all. */
    for (unsigned c = 0; c < 0x20; c++) {
        char raw[] = "{\"op\":\"acquire\",\"resource\":\"x?y\"}";
        *strchr(raw, '?') = (char)c;
        assert_int_equal(
            decode(raw, sizeof(raw) - 1, OP_NONE, &req, err, sizeof(err)),
            PROTO_NOT_JSON);
        assert_string_equal(
            err, "invalid JSON: control character in string at byte 29");
    }
}

static void test_decode_nul_bytes(void **state)
{
    struct request req;
    char err[ERRLEN];
    static const char after[] = "{\"op\":\"ping\"}\0junk";
    static const char inside[] = "{\"op\":\"ping\",\"id\":\"a\0b\"}";

    (void)state;
    /* A NUL after the object is trailing data, not an end of input. */
    assert_int_equal(
        decode(after, sizeof(after) - 1, OP_NONE, &req, err, sizeof(err)),
        PROTO_NOT_JSON);
    assert_string_equal(err, "invalid JSON: trailing data at byte 13");
    assert_int_equal(
        decode(inside, sizeof(inside) - 1, OP_NONE, &req, err, sizeof(err)),
        PROTO_NOT_JSON);
    assert_non_null(strstr(err, "control character"));
    /* Only the given length is read. */
    assert_int_equal(decode(after, 13, OP_NONE, &req, err, sizeof(err)), 0);
    assert_int_equal(req.op, OP_PING);
}

static void test_decode_resets_request(void **state)
{
    struct request req;
    char err[ERRLEN];

    (void)state;
    expect_ok("{\"op\":\"acquire\",\"resource\":\"r\",\"ttl_ms\":100,"
              "\"fence\":true,\"id\":1}",
              &req);
    expect_ok("{\"op\":\"ping\"}", &req);
    assert_int_equal(req.ttl_ms, PROTO_TTL_DEFAULT);
    assert_false(req.has_ttl);
    assert_false(req.fence);
    assert_int_equal(req.id_len, 0);
    assert_int_equal(req.resource_len, 0);
    assert_int_equal(req.keep_ms, PROTO_KEEP_DEFAULT);

    /* On error: op is known when it was read, NONE otherwise. */
    assert_int_equal(
        decode_str("{\"op\":\"extend\",\"ttl_ms\":1}", OP_NONE, &req, err), -1);
    assert_int_equal(req.op, OP_EXTEND);
    assert_int_equal(
        decode_str("{\"ttl_ms\":1,\"op\":\"extend\"}", OP_NONE, &req, err), -1);
    assert_int_equal(req.op, OP_NONE);
}

static void test_decode_id_echo(void **state)
{
    struct request req;
    char err[ERRLEN];
    char line[1024];

    (void)state;
    /* The id is kept for every error it did not cause. */
    assert_int_equal(
        decode_str("{\"bogus\":1,\"id\":\"z\"}", OP_NONE, &req, err), -1);
    assert_string_equal(err, "unknown field 'bogus'");
    assert_string_equal(req.id, "\"z\"");
    assert_int_equal(decode_str("[1]", OP_NONE, &req, err), -1);
    assert_int_equal(req.id_len, 0);
    assert_int_equal(
        decode_str("{\"id\":7,\"op\":\"ping\"} x", OP_NONE, &req, err),
        PROTO_NOT_JSON);
    assert_int_equal(req.id_len, 0); /* not readable: bad JSON */

    /* PROTO_ID_MAX bytes exactly, as a number and as a string. */
    memset(line, 0, sizeof(line));
    int k = snprintf(line, sizeof(line), "{\"op\":\"ping\",\"id\":");
    memset(line + k, '1', PROTO_ID_MAX);
    strcat(line, "}");
    expect_ok(line, &req);
    assert_int_equal(req.id_len, PROTO_ID_MAX);
    line[k] = '2';
    line[k + PROTO_ID_MAX] = '1';
    line[k + PROTO_ID_MAX + 1] = '}';
    expect_error(line, "id: too long (max 256 bytes of JSON)");

    /* A string whose escaped form grows past the limit. */
    k = snprintf(line, sizeof(line), "{\"op\":\"ping\",\"id\":\"");
    for (int i = 0; i < 50; i++) {
        k += snprintf(line + k, sizeof(line) - k, "\\n");
    }
    snprintf(line + k, sizeof(line) - k, "\"}");
    expect_ok(line, &req);
    assert_int_equal(req.id_len, 102);
    k = snprintf(line, sizeof(line), "{\"op\":\"ping\",\"id\":\"");
    for (int i = 0; i < 43; i++) {
        k += snprintf(line + k, sizeof(line) - k, "\\u0001");
    }
    snprintf(line + k, sizeof(line) - k, "\"}");
    expect_error(line, "id: too long (max 256 bytes of JSON)");
}

/* More members than the decoder describes without malloc. */
static void test_decode_many_members(void **state)
{
    char line[2048];
    struct request req;
    char err[ERRLEN];
    int k = snprintf(line, sizeof(line), "{\"op\":\"ping\"");

    (void)state;
    for (int i = 0; i < 40; i++) {
        k += snprintf(line + k, sizeof(line) - k, ",\"f%d\":%d", i, i);
    }
    snprintf(line + k, sizeof(line) - k, ",\"id\":-0.5e1}");
    assert_int_equal(decode_str(line, OP_NONE, &req, err), -1);
    assert_string_equal(err, "unknown field 'f0'");
    assert_string_equal(req.id, "-0.5e1");

    /* All ten fields at once, in reverse order. */
    expect_ok("{\"renew_max_ms\":5,\"keep_ms\":6,\"fence\":true,"
              "\"renew\":true,\"wait_ms\":7,\"ttl_ms\":80,\"lock\":\"" TOKEN
              "\",\"resource\":\"r\",\"id\":\"i\",\"op\":\"acquire\"}",
              &req);
    assert_int_equal(req.op, OP_ACQUIRE);
    assert_int_equal(req.renew_max_ms, 5);
    assert_int_equal(req.keep_ms, 6);
    assert_true(req.fence && req.renew && req.has_lock && req.has_ttl);
    assert_int_equal(req.wait_ms, 7);
    assert_int_equal(req.ttl_ms, 80);
}

static void test_decode_deep_nesting(void **state)
{
    size_t depth = 100000;
    size_t len = depth * 2 + 32;
    char *line = malloc(len);
    struct request req;
    char err[ERRLEN];
    size_t k;

    (void)state;
    assert_non_null(line);
    k = (size_t)snprintf(line, len, "{\"op\":\"ping\",\"x\":");
    memset(line + k, '[', depth);
    k += depth;
    memset(line + k, ']', depth);
    k += depth;
    line[k++] = '}';
    assert_int_equal(decode(line, k, OP_NONE, &req, err, sizeof(err)),
                     PROTO_NOT_JSON);
    assert_non_null(strstr(err, "invalid JSON"));
    free(line);
}

/* Only input that is not JSON gets PROTO_NOT_JSON; JSON that is merely
 * wrong (even not an object) is one bad request among others. */
static void test_decode_not_json_split(void **state)
{
    static const char *not_json[] = {
        "{",
        "{\"op\":\"ping\"",
        "{\"op\":\"ping\"}}",
        "nul",
        "{\"op\":01}",
        "{\"op\":\"\\x\"}",
        "\x01{}",
        "{}\x01",
        "{\"op\"\x02:\"ping\"}",
        "\xef\xbb\xbf{}",
        "{\"a\":\"\\ud800\"}",
        "{\"a\":\"\\u12\"}",
    };
    static const char *json_but_bad[] = {
        "[]",
        "42",
        "\"ping\"",
        "null",
        "{}",
        "{\"op\":\"x\"}",
        "{\"op\":\"ping\",\"op\":\"ping\"}",
        "{\"a\":\"\\u0000\"}",
    };
    struct request req;
    char err[ERRLEN];

    (void)state;
    for (size_t i = 0; i < sizeof(not_json) / sizeof(not_json[0]); i++) {
        if (decode_str(not_json[i], OP_NONE, &req, err) != PROTO_NOT_JSON) {
            fail_msg("not PROTO_NOT_JSON: %s (%s)", not_json[i], err);
        }
        assert_non_null(strstr(err, "invalid JSON"));
        /* The same for an HTTP body. */
        assert_int_equal(decode_str(not_json[i], OP_ACQUIRE, &req, err),
                         PROTO_NOT_JSON);
    }
    for (size_t i = 0; i < sizeof(json_but_bad) / sizeof(json_but_bad[0]);
         i++) {
        if (decode_str(json_but_bad[i], OP_NONE, &req, err) != -1) {
            fail_msg("not -1: %s (%s)", json_but_bad[i], err);
        }
    }
    assert_int_equal(decode_str("", OP_NONE, &req, err), -1);
}

static void test_decode_short_err_buffer(void **state)
{
    struct request req;
    char err[8];

    (void)state;
    assert_int_equal(
        decode("{\"op\":\"nope\"}", 13, OP_NONE, &req, err, sizeof(err)), -1);
    assert_string_equal(err, "op: unk");
    assert_int_equal(decode("{}", 2, OP_NONE, &req, NULL, 0), -1);
}

/* Mutations of valid lines must never crash, and whatever is accepted
 * must satisfy every field rule. */
static void test_decode_mutation_fuzz(void **state)
{
    static const char *seeds[] = {
        "{\"op\":\"acquire\",\"id\":\"x\",\"resource\":\"a\\u00e9b\","
        "\"ttl_ms\":1000,\"wait_ms\":5,\"fence\":true}",
        "{\"op\":\"extend\",\"lock\":\"" TOKEN "\",\"ttl_ms\":3e3}",
        "{\"op\":\"complete\",\"lock\":\"" TOKEN "\",\"keep_ms\":1,"
        "\"id\":[1,{\"a\":null}]}",
    };
    static const char alphabet[] = "{}[]\":,\\u0aAe.-+ \x00\x7f\xc3\xa9\xff";
    uint32_t seed = 99;
    char buf[512];

    (void)state;
    for (int iter = 0; iter < 30000; iter++) {
        const char *s = seeds[iter % 3];
        size_t len = strlen(s);
        struct request req;
        char err[ERRLEN];

        memcpy(buf, s, len);
        for (int m = 0; m < 1 + iter % 4; m++) {
            seed = seed * 1664525u + 1013904223u;
            size_t pos = (seed >> 8) % len;
            char c = alphabet[(seed >> 20) % (sizeof(alphabet) - 1)];
            switch ((seed >> 28) % 3) {
            case 0: /* replace */
                buf[pos] = c;
                break;
            case 1: /* delete */
                memmove(buf + pos, buf + pos + 1, len - pos - 1);
                len--;
                break;
            default: /* insert */
                if (len + 1 < sizeof(buf)) {
                    memmove(buf + pos + 1, buf + pos, len - pos);
                    buf[pos] = c;
                    len++;
                }
                break;
            }
        }
        if (decode(buf, len, OP_NONE, &req, err, sizeof(err)) == 0) {
            assert_true(req.op >= OP_ACQUIRE && req.op <= OP_HEALTH);
            assert_true(req.ttl_ms >= PROTO_TTL_MIN &&
                        req.ttl_ms <= PROTO_TTL_MAX);
            assert_true(req.wait_ms <= PROTO_WAIT_MAX);
            if (req.resource_len > 0) {
                assert_int_equal(proto_validate_resource(
                                     req.resource, req.resource_len, NULL, 0),
                                 0);
            }
            if (req.has_lock) {
                assert_int_equal(proto_validate_token(req.lock, 32), 0);
            }
        } else {
            assert_true(strlen(err) > 0);
        }
        if (req.id_len > 0) {
            /* Whatever id is kept is valid JSON text. */
            char js[PROTO_ID_MAX + 16];
            snprintf(js, sizeof(js), "[%s]", req.id);
            cJSON *j = cJSON_Parse(js);
            assert_non_null(j);
            cJSON_Delete(j);
        }
    }
}

/* A locks cursor goes out as hex and comes back as the same number; zero,
 * uppercase, too long and junk are refused. */
static void test_cursor_round_trip(void **state)
{
    (void)state;
    static const uint64_t vals[] = {
        1, 15, 16, 255, 0x123456789abcdefULL, UINT64_MAX};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        char s[PROTO_CURSOR_MAX + 1];
        size_t n = proto_cursor_encode(vals[i], s);
        assert_int_equal(n, strlen(s));
        uint64_t v = 0;
        assert_int_equal(proto_cursor_decode(s, n, &v), 0);
        assert_true(v == vals[i]);
    }
    static const char *const bad[] = {
        "", "0", "000", "A", "1g", "-1", "10000000000000000"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 7;
        assert_int_equal(proto_cursor_decode(bad[i], strlen(bad[i]), &v), -1);
        assert_true(v == 7);
    }
}

/* ---- the field table ---------------------------------------------------- */

/* What each member answers one past a bound and for a wrong type, written
 * out by hand as the contract words it, so that a change to the table that
 * changes an answer fails here. */
static const struct {
    const char *name;
    const char *past;  /* one past a bound; NULL: the member has none */
    const char *wrong; /* a value of the wrong type */
} field_answers[] = {
    {"op", NULL, "op: must be a string"},
    {"id", "id: too long (max 256 bytes of JSON)", "id: must be a JSON scalar"},
    {"resource", "resource: must be 1..512 bytes",
     "resource: must be a string"},
    {"lock", "lock: must be a 32-character hex token",
     "lock: must be a 32-character hex token"},
    {"ttl_ms", "ttl_ms: must be an integer in 10..86400000",
     "ttl_ms: must be an integer in 10..86400000"},
    {"wait_ms", "wait_ms: must be an integer in 0..300000",
     "wait_ms: must be an integer in 0..300000"},
    {"renew", "renew: only available over NDJSON",
     "renew: must be true or false"},
    {"fence", NULL, "fence: must be true or false"},
    {"keep_ms", "keep_ms: must be an integer in 1..2592000000",
     "keep_ms: must be an integer in 1..2592000000"},
    {"renew_max_ms", "renew_max_ms: must be an integer in 0..2592000000",
     "renew_max_ms: must be an integer in 0..2592000000"},
    {"prefix", "prefix: at most 512 bytes of UTF-8, no control characters",
     "prefix: must be a string without control characters"},
    {"limit", "limit: must be an integer in 1..1000",
     "limit: must be an integer in 1..1000"},
    {"cursor", "cursor: must be the \"next\" of an earlier answer",
     "cursor: must be the \"next\" of an earlier answer"},
    {"permits", "permits: must be an integer in 2..1024",
     "permits: must be an integer in 2..1024"},
    {"permit", "permit: must be an integer in 0..1023",
     "permit: must be an integer in 0..1023"},
};

#define FIELD_ANSWERS (sizeof(field_answers) / sizeof(field_answers[0]))

static size_t field_answer(const char *name)
{
    for (size_t i = 0; i < FIELD_ANSWERS; i++) {
        if (strcmp(field_answers[i].name, name) == 0) {
            return i;
        }
    }
    fail_msg("no answers written down for field '%s'", name);
    return 0;
}

/* both_decoders: member name = value (JSON text) in an acquire, through
 * the fast path (proto_decode) and through the cJSON decoder alone
 * (proto_decode_full), each from an exact-size heap copy; they must give
 * the same return, the same message and, on success, the same request.
 * op is the route's op (OP_ACQUIRE: over HTTP, with no "op" member) or
 * OP_NONE. Returns the return code; the message goes to err. */
static int both_decoders(const char *name, const char *value, enum proto_op op,
                         struct request *req, char err[PROTO_MSG_MAX])
{
    char line[2048];
    struct request full;
    char err_full[PROTO_MSG_MAX] = "";
    const char *head = op == OP_NONE ? "{\"op\":\"acquire\"," : "{";
    int n;

    if (strcmp(name, "resource") == 0) {
        n = snprintf(line, sizeof(line), "%s\"resource\":%s}", head, value);
    } else if (strcmp(name, "op") == 0) {
        n = snprintf(line, sizeof(line), "{\"op\":%s,\"resource\":\"r\"}",
                     value);
    } else {
        n = snprintf(line, sizeof(line), "%s\"resource\":\"r\",\"%s\":%s}",
                     head, name, value);
    }
    assert_true(n > 0 && (size_t)n < sizeof(line));

    char *copy = malloc((size_t)n);
    assert_non_null(copy);
    memcpy(copy, line, (size_t)n);
    err[0] = '\0';
    int rc = proto_decode(copy, (size_t)n, op, req, err, PROTO_MSG_MAX);
    int rc_full =
        proto_decode_full(copy, (size_t)n, op, &full, err_full, PROTO_MSG_MAX);
    free(copy);
    if (rc != rc_full) {
        fail_msg("%s: fast path %d, full decoder %d", line, rc, rc_full);
    }
    if (rc == 0) {
        assert_memory_equal(req, &full, sizeof(full));
    } else {
        assert_string_equal(err, err_full);
    }
    return rc;
}

static void expect_field_ok(const char *name, const char *value,
                            enum proto_op op, struct request *req)
{
    char err[PROTO_MSG_MAX];

    if (both_decoders(name, value, op, req, err) != 0) {
        fail_msg("%s=%s refused: %s", name, value, err);
    }
}

static void expect_field_error(const char *name, const char *value,
                               enum proto_op op, const char *message)
{
    struct request req;
    char err[PROTO_MSG_MAX];

    if (both_decoders(name, value, op, &req, err) != -1) {
        fail_msg("%s=%s accepted, expected \"%s\"", name, value, message);
    }
    assert_string_equal(err, message);
}

/* stored_uint: the integer member fd of req, read where the table says. */
static uint64_t stored_uint(const struct proto_field *fd,
                            const struct request *req)
{
    const char *at = (const char *)req + fd->off;

    if (fd->size == sizeof(uint32_t)) {
        uint32_t x;
        memcpy(&x, at, sizeof(x));
        return x;
    }
    uint64_t x;
    assert_int_equal(fd->size, sizeof(x));
    memcpy(&x, at, sizeof(x));
    return x;
}

static bool stored_flag(size_t off, const struct request *req)
{
    bool b;

    memcpy(&b, (const char *)req + off, sizeof(b));
    return b;
}

/* quoted: a JSON string of n copies of c, or of a JSON text of n bytes
 * when whole (the quotes count). */
static const char *quoted(char *buf, size_t cap, char c, size_t n, bool whole)
{
    size_t body = whole ? n - 2 : n;

    assert_true(body + 3 <= cap);
    buf[0] = '"';
    memset(buf + 1, c, body);
    buf[body + 1] = '"';
    buf[body + 2] = '\0';
    return buf;
}

/* Every member of the table at its bounds, one past them and with a wrong
 * type, through both decoders: each bound and each message is written in
 * the table once, and the two decoders answer alike. */
static void test_field_table_bounds(void **state)
{
    char v[1024];
    struct request req;

    (void)state;
    assert_int_equal(proto_fields_count, FIELD_ANSWERS);
    for (size_t f = 0; f < proto_fields_count; f++) {
        const struct proto_field *fd = &proto_fields[f];
        size_t a = field_answer(fd->name);
        const char *past = field_answers[a].past;
        const char *wrong = field_answers[a].wrong;
        uint64_t edges[2] = {fd->min, fd->max};

        switch (fd->type) {
        case PROTO_FT_OP:
            expect_field_ok(fd->name, "\"ping\"", OP_NONE, &req);
            assert_int_equal(req.op, OP_PING);
            expect_field_error(fd->name, "1", OP_NONE, wrong);
            expect_field_error(fd->name, "[\"ping\"]", OP_NONE, wrong);
            break;
        case PROTO_FT_ID:
            expect_field_ok(fd->name, quoted(v, sizeof(v), 'i', fd->max, true),
                            OP_NONE, &req);
            assert_int_equal(req.id_len, fd->max);
            expect_field_error(fd->name,
                               quoted(v, sizeof(v), 'i', fd->max + 1, true),
                               OP_NONE, past);
            expect_field_error(fd->name, "[]", OP_NONE, wrong);
            expect_field_error(fd->name, "{}", OP_NONE, wrong);
            break;
        case PROTO_FT_UINT:
            for (int e = 0; e < 2; e++) {
                snprintf(v, sizeof(v), "%llu", (unsigned long long)edges[e]);
                expect_field_ok(fd->name, v, OP_NONE, &req);
                assert_true(stored_uint(fd, &req) == edges[e]);
                if (fd->has_off != 0) {
                    assert_true(stored_flag(fd->has_off, &req));
                }
            }
            if (fd->min > 0) {
                snprintf(v, sizeof(v), "%llu", (unsigned long long)fd->min - 1);
                expect_field_error(fd->name, v, OP_NONE, past);
            }
            snprintf(v, sizeof(v), "%llu", (unsigned long long)fd->max + 1);
            expect_field_error(fd->name, v, OP_NONE, past);
            expect_field_error(fd->name, "-1", OP_NONE, past);
            snprintf(v, sizeof(v), "\"%llu\"", (unsigned long long)fd->min);
            expect_field_error(fd->name, v, OP_NONE, wrong);
            expect_field_error(fd->name, "true", OP_NONE, wrong);
            expect_field_error(fd->name, "null", OP_NONE, wrong);
            break;
        case PROTO_FT_BOOL:
            expect_field_ok(fd->name, "true", OP_NONE, &req);
            assert_true(stored_flag(fd->off, &req));
            expect_field_ok(fd->name, "false", OP_ACQUIRE, &req);
            assert_false(stored_flag(fd->off, &req));
            if (fd->ndjson_only) {
                expect_field_error(fd->name, "true", OP_ACQUIRE, past);
            } else {
                expect_field_ok(fd->name, "true", OP_ACQUIRE, &req);
                assert_null(past);
            }
            expect_field_error(fd->name, "1", OP_NONE, wrong);
            expect_field_error(fd->name, "\"true\"", OP_NONE, wrong);
            expect_field_error(fd->name, "null", OP_NONE, wrong);
            break;
        case PROTO_FT_TEXT:
        case PROTO_FT_TOKEN:
        case PROTO_FT_CURSOR: {
            /* 'a' is a resource, a token digit and a cursor digit. */
            for (int e = 0; e < 2; e++) {
                quoted(v, sizeof(v), 'a', (size_t)edges[e], false);
                expect_field_ok(fd->name, v, OP_NONE, &req);
                if (fd->len_off != 0) {
                    size_t n;
                    memcpy(&n, (const char *)&req + fd->len_off, sizeof(n));
                    assert_int_equal(n, edges[e]);
                }
                if (fd->has_off != 0) {
                    assert_true(stored_flag(fd->has_off, &req));
                }
            }
            if (fd->min > 0) {
                expect_field_error(
                    fd->name,
                    quoted(v, sizeof(v), 'a', (size_t)fd->min - 1, false),
                    OP_NONE, past);
            }
            expect_field_error(
                fd->name, quoted(v, sizeof(v), 'a', (size_t)fd->max + 1, false),
                OP_NONE, past);
            expect_field_error(fd->name, "1", OP_NONE, wrong);
            expect_field_error(fd->name, "[\"a\"]", OP_NONE, wrong);
            break;
        }
        default:
            fail_msg("field '%s' has no test for its type", fd->name);
        }
    }
}

/* The table itself: names unique, bounds in order, every value fits where
 * it is stored. */
static void test_field_table_shape(void **state)
{
    (void)state;
    for (size_t f = 0; f < proto_fields_count; f++) {
        const struct proto_field *fd = &proto_fields[f];

        assert_true(fd->min <= fd->max);
        assert_true(fd->off + fd->size <= sizeof(struct request));
        for (size_t g = 0; g < f; g++) {
            assert_string_not_equal(fd->name, proto_fields[g].name);
        }
        switch (fd->type) {
        case PROTO_FT_UINT:
            assert_true(fd->size == sizeof(uint32_t) ||
                        fd->size == sizeof(uint64_t));
            if (fd->size == sizeof(uint32_t)) {
                assert_true(fd->max <= UINT32_MAX);
            }
            break;
        case PROTO_FT_ID:
        case PROTO_FT_TEXT:
        case PROTO_FT_TOKEN:
            assert_true(fd->max < fd->size); /* and its NUL */
            break;
        case PROTO_FT_CURSOR:
            assert_int_equal(fd->size, sizeof(uint64_t));
            assert_non_null(fd->bad_type);
            assert_non_null(fd->bad_value);
            break;
        default:
            break;
        }
    }
}

/* A member is found by its exact name only, and an integer member's
 * refusal names it with its bounds, the text both decoders give. */
static void test_field_named_and_uint_fail(void **state)
{
    char err[ERRLEN];
    char want[ERRLEN];

    (void)state;
    for (size_t f = 0; f < proto_fields_count; f++) {
        assert_ptr_equal(proto_field_named(proto_fields[f].name),
                         &proto_fields[f]);
    }
    assert_null(proto_field_named("Limit"));
    assert_null(proto_field_named("limi"));
    assert_null(proto_field_named(""));
    assert_null(proto_field_named(NULL));

    const struct proto_field *fd = proto_field_named("ttl_ms");
    assert_non_null(fd);
    assert_int_equal(proto_field_uint_fail(fd, err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "ttl_ms: must be an integer in %d..%d",
             PROTO_TTL_MIN, PROTO_TTL_MAX);
    assert_string_equal(err, want);
    expect_error("{\"op\":\"acquire\",\"resource\":\"r\",\"ttl_ms\":9}", want);
    assert_int_equal(proto_field_uint_fail(fd, NULL, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape_roundtrip_random),
        cmocka_unit_test(test_encode_id_roundtrip_from_decode),
        cmocka_unit_test(test_op_names),
        cmocka_unit_test(test_token_shape),
        cmocka_unit_test(test_resource_utf8_exhaustive),
        cmocka_unit_test(test_resource_messages),
        cmocka_unit_test(test_decode_field_limits),
        cmocka_unit_test(test_decode_resource_length),
        cmocka_unit_test(test_decode_every_control_char),
        cmocka_unit_test(test_decode_nul_bytes),
        cmocka_unit_test(test_decode_resets_request),
        cmocka_unit_test(test_decode_id_echo),
        cmocka_unit_test(test_decode_many_members),
        cmocka_unit_test(test_decode_deep_nesting),
        cmocka_unit_test(test_decode_not_json_split),
        cmocka_unit_test(test_decode_short_err_buffer),
        cmocka_unit_test(test_decode_mutation_fuzz),
        cmocka_unit_test(test_cursor_round_trip),
        cmocka_unit_test(test_field_table_shape),
        cmocka_unit_test(test_field_table_bounds),
        cmocka_unit_test(test_field_named_and_uint_fail),
    };
    int failed = cmocka_run_group_tests_name("proto", tests, NULL, NULL);
    int rv;

    rv = run_vectors("requests.json", test_request_vector, 60);
    failed += rv < 0 ? 1 : rv;
    rv = run_vectors("responses.json", test_response_vector, 20);
    failed += rv < 0 ? 1 : rv;
    return failed == 0 ? 0 : 1;
}
