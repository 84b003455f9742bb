/* proto.c: the wire contract's input half, bytes to struct request (the
 * output half is proto_encode.c). Pure: no I/O, no state but constant
 * tables.
 *
 * Decoding takes the grammar and the unescaping of strings from cJSON, plus
 * one strict lexical pass of our own (scan_*) over what cJSON 1.7.15 lets
 * through: "\u0000" and malformed \u escapes (which cJSON turns into a NUL
 * that silently cuts the decoded string short: "a\u0000b" would lock "a"),
 * raw control characters inside strings, and numbers such as 01 or 1. that
 * JSON does not allow. That pass also keeps each top-level member's raw
 * text, so a numeric id is echoed byte for byte (cJSON would round 2^64).
 * cJSON reports errors through a global, so decoding is for one thread. */
#include "proto.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "utf8.h"
#include "util.h"

#define NAME_CLIP 32 /* bytes of a client-chosen name quoted in a message */
#define MEMBERS_INLINE 16 /* top-level members described without malloc */
#define INT_EXACT_MAX 9007199254740992.0 /* 2^53: doubles stay exact */

/* ---- tables ----------------------------------------------------------- */

static const char *const op_names[] = {
    [OP_NONE] = NULL,           [OP_ACQUIRE] = "acquire",
    [OP_RELEASE] = "release",   [OP_EXTEND] = "extend",
    [OP_COMPLETE] = "complete", [OP_PING] = "ping",
    [OP_HEALTH] = "health",     [OP_METRICS] = "metrics",
    [OP_LOCKS] = "locks",       [OP_INSPECT] = "inspect",
};

#define OP__COUNT (sizeof(op_names) / sizeof(op_names[0]))

/*
 * proto_op_name: the wire name of op; NULL for OP_NONE or out of range.
 */
const char *proto_op_name(enum proto_op op)
{
    if ((unsigned)op >= OP__COUNT) {
        return NULL;
    }
    return op_names[op];
}

/* ---- validation ------------------------------------------------------- */

/* fail: formats a message into err (when there is one); returns -1. */
static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/*
 * proto_cursor_decode: s[0..len) as 1..16 lowercase hex digits with a
 * nonzero value into *v. Returns 0, or -1 (then *v is unchanged).
 */
int proto_cursor_decode(const char *s, size_t len, uint64_t *v)
{
    uint64_t x = 0;

    if (len == 0 || len > PROTO_CURSOR_MAX) {
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        int d = util_hex_lower_value((unsigned char)s[i]);
        if (d < 0) {
            return -1;
        }
        x = (x << 4) | (unsigned)d;
    }
    if (x == 0) {
        return -1;
    }
    *v = x;
    return 0;
}

/*
 * proto_validate_token: whether s[0..len) is PROTO_TOKEN_LEN lowercase hex
 * characters. Returns 0 or -1.
 */
int proto_validate_token(const char *s, size_t len)
{
    if (s == NULL || len != PROTO_TOKEN_LEN) {
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        if (util_hex_lower_value((unsigned char)s[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

/* ---- strict lexical pass ---------------------------------------------- */

/* One member of the top-level object, in document order, matching the
 * order of cJSON's children. */
struct member {
    const char *key; /* raw key text between the quotes */
    size_t key_len;
    const char *val; /* raw text of a scalar value; NULL for {} and [] */
    size_t val_len;
    bool key_nul; /* the key holds \u0000: cJSON's copy is cut short */
    bool val_nul; /* the string value holds \u0000: likewise */
};

struct scan {
    struct member *m; /* room for cap members */
    size_t cap;
    size_t n;      /* members seen */
    size_t err_at; /* on failure: byte offset */
    const char *err_what;
};

/* scan_fail: records where and what; returns 0, never a valid end. */
static size_t scan_fail(struct scan *sc, size_t at, const char *what)
{
    sc->err_at = at;
    sc->err_what = what;
    return 0;
}

/* scan_string: d[i] is an opening quote. Returns the index just past the
 * closing quote, or 0 on error; sets *nul when an escape decodes to NUL. */
static size_t scan_string(struct scan *sc, const char *d, size_t len, size_t i,
                          bool *nul)
{
    const unsigned char *u = (const unsigned char *)d;

    for (i++; i < len; i++) {
        unsigned char c = u[i];
        unsigned v = 0;

        if (c == '"') {
            return i + 1;
        }
        if (c < 0x20) {
            return scan_fail(sc, i, "control character in string");
        }
        if (c != '\\') {
            continue;
        }
        if (i + 1 >= len) {
            break;
        }
        switch (u[i + 1]) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
            i++;
            break;
        case 'u':
            if (len - i < 6) {
                return scan_fail(sc, i, "bad \\u escape");
            }
            for (size_t k = 2; k < 6; k++) {
                int h = util_hex_value(u[i + k]);
                if (h < 0) {
                    return scan_fail(sc, i, "bad \\u escape");
                }
                v = (v << 4) | (unsigned)h;
            }
            if (v == 0) {
                *nul = true;
            }
            i += 5;
            break;
        default:
            return scan_fail(sc, i, "bad escape");
        }
    }
    return scan_fail(sc, len, "unterminated string");
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* scan_number: RFC 8259 number grammar from d[i]; returns its end, or 0. */
static size_t scan_number(struct scan *sc, const char *d, size_t len, size_t i)
{
    const unsigned char *u = (const unsigned char *)d;
    size_t start = i;

    if (u[i] == '-') {
        i++;
    }
    if (i < len && u[i] == '0') {
        i++;
    } else if (i < len && is_digit(u[i])) {
        while (i < len && is_digit(u[i])) {
            i++;
        }
    } else {
        return scan_fail(sc, start, "bad number");
    }
    if (i < len && u[i] == '.') {
        if (++i >= len || !is_digit(u[i])) {
            return scan_fail(sc, start, "bad number");
        }
        while (i < len && is_digit(u[i])) {
            i++;
        }
    }
    if (i < len && (u[i] == 'e' || u[i] == 'E')) {
        i++;
        if (i < len && (u[i] == '+' || u[i] == '-')) {
            i++;
        }
        if (i >= len || !is_digit(u[i])) {
            return scan_fail(sc, start, "bad number");
        }
        while (i < len && is_digit(u[i])) {
            i++;
        }
    }
    if (i < len && (is_digit(u[i]) || u[i] == '.' || u[i] == 'e' ||
                    u[i] == 'E' || u[i] == '+' || u[i] == '-')) {
        return scan_fail(sc, start, "bad number"); /* e.g. 01 */
    }
    return i;
}

/* scan_json: the strict pass over d[0..len), text cJSON has accepted as one
 * object. Fills sc->m with the top-level members. Returns 0 or -1. */
static int scan_json(struct scan *sc, const char *d, size_t len)
{
    const unsigned char *u = (const unsigned char *)d;
    struct member *cur = NULL;
    size_t depth = 0;
    bool want_key = false; /* at depth 1, the next string is a key */
    size_t i = 0;

    while (i < len) {
        unsigned char c = u[i];
        size_t end;
        bool nul = false;

        switch (c) {
        case ' ':
        case '\t':
        case '\n':
        case '\r':
        case ':':
            i++;
            continue;
        case ',':
            want_key = depth == 1;
            i++;
            continue;
        case '{':
        case '[':
            if (depth == 1 && cur != NULL) {
                cur->val = NULL;
            }
            depth++;
            want_key = depth == 1 && c == '{';
            i++;
            continue;
        case '}':
        case ']':
            if (depth == 0) {
                scan_fail(sc, i, "unbalanced");
                return -1;
            }
            depth--;
            i++;
            continue;
        case '"':
            end = scan_string(sc, d, len, i, &nul);
            if (end == 0) {
                return -1;
            }
            if (depth == 1 && want_key) {
                cur = sc->n < sc->cap ? &sc->m[sc->n] : NULL;
                sc->n++;
                if (cur != NULL) {
                    memset(cur, 0, sizeof(*cur));
                    cur->key = d + i + 1;
                    cur->key_len = end - i - 2;
                    cur->key_nul = nul;
                }
                want_key = false;
            } else if (depth == 1 && cur != NULL) {
                cur->val = d + i;
                cur->val_len = end - i;
                cur->val_nul = nul;
            }
            i = end;
            continue;
        default:
            break;
        }
        if (c == '-' || is_digit(c)) {
            end = scan_number(sc, d, len, i);
            if (end == 0) {
                return -1;
            }
        } else if (c >= 'a' && c <= 'z') {
            end = i;
            while (end < len && u[end] >= 'a' && u[end] <= 'z') {
                end++;
            }
        } else {
            scan_fail(sc, i, "unexpected byte");
            return -1;
        }
        if (depth == 1 && cur != NULL) {
            cur->val = d + i;
            cur->val_len = end - i;
        }
        i = end;
    }
    return 0;
}

/* ---- decoding --------------------------------------------------------- */

enum field {
    F_OP,
    F_ID,
    F_RESOURCE,
    F_LOCK,
    F_TTL,
    F_WAIT,
    F_RENEW,
    F_FENCE,
    F_KEEP,
    F_RENEW_MAX,
    F_PREFIX,
    F_LIMIT,
    F_CURSOR,
    F_PERMITS,
    F_PERMIT,
    F__COUNT
};

/* Members seen so far are bits of an unsigned. */
_Static_assert(F__COUNT <= 32, "too many fields for the seen mask");
/* An offset of 0 in the table means none: it must be op's. */
_Static_assert(offsetof(struct request, op) == 0, "op must come first");

#define XSTR(x) #x
#define STR(x) XSTR(x)
/* AT: where a member's value goes; LEN, HAS: its length and its flag. */
#define AT(f)                                                                  \
    .off = offsetof(struct request, f), .size = sizeof(((struct request *)0)->f)
#define LEN(f) .len_off = offsetof(struct request, f)
#define HAS(f) .has_off = offsetof(struct request, f)
/* A prefix is a resource's beginning: any bad one gets the one answer. */
#define PREFIX_BAD_VALUE                                                       \
    "at most " STR(PROTO_RESOURCE_MAX) " bytes of UTF-8, "                     \
                                       "no control characters"

/* The order is the fast path's lookup order: common members first. */
const struct proto_field proto_fields[F__COUNT] = {
    [F_OP] = {"op", PROTO_FT_OP, 0, 0, NULL, NULL, false, AT(op)},
    [F_ID] = {"id", PROTO_FT_ID, 0, PROTO_ID_MAX, NULL, NULL, false, AT(id),
              LEN(id_len)},
    [F_RESOURCE] = {"resource", PROTO_FT_TEXT, 1, PROTO_RESOURCE_MAX, NULL,
                    NULL, false, AT(resource), LEN(resource_len)},
    [F_LOCK] = {"lock", PROTO_FT_TOKEN, PROTO_TOKEN_LEN, PROTO_TOKEN_LEN, NULL,
                NULL, false, AT(lock), HAS(has_lock)},
    [F_TTL] = {"ttl_ms", PROTO_FT_UINT, PROTO_TTL_MIN, PROTO_TTL_MAX, NULL,
               NULL, false, AT(ttl_ms), HAS(has_ttl)},
    [F_WAIT] = {"wait_ms", PROTO_FT_UINT, 0, PROTO_WAIT_MAX, NULL, NULL, false,
                AT(wait_ms)},
    /* Renewal lives as long as an NDJSON connection; an HTTP lock would
     * silently expire, so say so instead. */
    [F_RENEW] = {"renew", PROTO_FT_BOOL, 0, 1, NULL, NULL, true, AT(renew)},
    [F_FENCE] = {"fence", PROTO_FT_BOOL, 0, 1, NULL, NULL, false, AT(fence)},
    [F_KEEP] = {"keep_ms", PROTO_FT_UINT, PROTO_KEEP_MIN, PROTO_KEEP_MAX, NULL,
                NULL, false, AT(keep_ms)},
    [F_RENEW_MAX] = {"renew_max_ms", PROTO_FT_UINT, 0, PROTO_RENEW_MAX_MAX,
                     NULL, NULL, false, AT(renew_max_ms)},
    [F_PREFIX] = {"prefix", PROTO_FT_TEXT, 0, PROTO_RESOURCE_MAX,
                  "must be a string without control characters",
                  PREFIX_BAD_VALUE, false, AT(prefix), LEN(prefix_len)},
    [F_LIMIT] = {"limit", PROTO_FT_UINT, 1, PROTO_LIMIT_MAX, NULL, NULL, false,
                 AT(limit)},
    [F_CURSOR] = {"cursor", PROTO_FT_CURSOR, 1, PROTO_CURSOR_MAX,
                  "must be the \"next\" of an earlier answer",
                  "must be the \"next\" of an earlier answer", false,
                  AT(cursor)},
    [F_PERMITS] = {"permits", PROTO_FT_UINT, PROTO_PERMITS_MIN,
                   PROTO_PERMITS_MAX, NULL, NULL, false, AT(permits)},
    [F_PERMIT] = {"permit", PROTO_FT_UINT, 0, PROTO_PERMITS_MAX - 1, NULL, NULL,
                  false, AT(permit), HAS(has_permit)},
};

const size_t proto_fields_count = F__COUNT;

#undef AT
#undef LEN
#undef HAS
#undef PREFIX_BAD_VALUE

/* name_is: whether s[0..n) is the NUL-terminated name lit. */
static bool name_is(const char *s, size_t n, const char *lit)
{
    /* The first byte rules out almost every candidate name at once. */
    if (n == 0 || s[0] != lit[0]) {
        return false;
    }
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* field_from_name: the index in proto_fields of the member named s[0..n),
 * or -1; a strcmp-like pass over at most F__COUNT names, most of them
 * refused by their first byte. */
static int field_from_name(const char *s, size_t n)
{
    for (int f = 0; f < F__COUNT; f++) {
        if (name_is(s, n, proto_fields[f].name)) {
            return f;
        }
    }
    return -1;
}

/* op_from_name: the op a request may name in "op" (s[0..n)); metrics is
 * HTTP only (GET /metrics) and so not one of them. */
static enum proto_op op_from_name(const char *s, size_t n)
{
    for (unsigned i = OP_ACQUIRE; i < OP__COUNT; i++) {
        if (i != OP_METRICS && name_is(s, n, op_names[i])) {
            return (enum proto_op)i;
        }
    }
    return OP_NONE;
}

/* clip_name: a client-chosen name for a message: at most NAME_CLIP bytes
 * cut on a UTF-8 boundary, "..." when cut. buf holds NAME_CLIP + 4. */
static const char *clip_name(const char *s, size_t n, char *buf)
{
    size_t k = utf8_clip(s, n, NAME_CLIP);

    memcpy(buf, s, k);
    if (k < n) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

/* member_name: the decoded name of m (c is its cJSON item), or its raw text
 * when it holds a NUL that cut cJSON's copy short. */
static const char *member_name(const struct member *m, const cJSON *c,
                               char *buf)
{
    if (m->key_nul) {
        return clip_name(m->key, m->key_len, buf);
    }
    return clip_name(c->string, strlen(c->string), buf);
}

/* A member's value as either decoder read it: what field_set judges. */
enum value_kind {
    V_STRING,
    V_NUMBER,
    V_TRUE,
    V_FALSE,
    V_NULL,
    V_NESTED, /* an object or an array */
};

struct value {
    enum value_kind kind;
    const char *s; /* V_STRING: the decoded bytes, not NUL-terminated */
    size_t n;
    bool nul;        /* V_STRING: it held \u0000 (s stops before it) */
    double d;        /* V_NUMBER */
    const char *raw; /* the text as sent, a string with its quotes */
    size_t raw_len;
};

/* value_of: c, the cJSON item of member m, as a value. */
static struct value value_of(const cJSON *c, const struct member *m)
{
    struct value v = {V_NESTED, NULL, 0, false, 0, m->val, m->val_len};

    if (cJSON_IsString(c)) {
        v.kind = V_STRING;
        v.s = c->valuestring;
        v.n = strlen(c->valuestring);
        v.nul = m->val_nul;
    } else if (cJSON_IsNumber(c)) {
        v.kind = V_NUMBER;
        v.d = c->valuedouble;
    } else if (cJSON_IsTrue(c)) {
        v.kind = V_TRUE;
    } else if (cJSON_IsFalse(c)) {
        v.kind = V_FALSE;
    } else if (cJSON_IsNull(c)) {
        v.kind = V_NULL;
    }
    return v;
}

/* field_fail: "<name>: <text>" into err; returns -1. */
static int field_fail(const struct proto_field *fd, const char *text, char *err,
                      size_t errlen)
{
    return fail(err, errlen, "%s: %s", fd->name, text);
}

/*
 * proto_field_named: the member of proto_fields whose name is name, or
 * NULL when there is none (or name is NULL).
 */
const struct proto_field *proto_field_named(const char *name)
{
    if (name == NULL) {
        return NULL;
    }
    for (size_t f = 0; f < F__COUNT; f++) {
        if (strcmp(proto_fields[f].name, name) == 0) {
            return &proto_fields[f];
        }
    }
    return NULL;
}

/*
 * proto_field_uint_fail: fd's answer to a value that is not an integer in
 * fd->min..fd->max, into err (skipped when err is NULL or errlen 0), the
 * same text over JSON and in an HTTP query. Returns -1.
 */
int proto_field_uint_fail(const struct proto_field *fd, char *err,
                          size_t errlen)
{
    return fail(err, errlen, "%s: must be an integer in %llu..%llu", fd->name,
                (unsigned long long)fd->min, (unsigned long long)fd->max);
}

/* text_check: s[0..len) against fd's bounds as a PROTO_FT_TEXT: fd->min..
 * fd->max bytes of well-formed UTF-8 without control characters (C0, DEL
 * and the C1 range U+0080..U+009F). Returns 0, or -1 with fd->bad_value
 * in err, or when that is NULL the reason. */
static int text_check(const struct proto_field *fd, const char *s, size_t len,
                      char *err, size_t errlen)
{
    const unsigned char *u = (const unsigned char *)s;
    const char *why = NULL;
    size_t i = 0;

    if (len < fd->min || len > fd->max) {
        if (fd->bad_value != NULL) {
            return field_fail(fd, fd->bad_value, err, errlen);
        }
        return fail(err, errlen, "%s: must be %llu..%llu bytes", fd->name,
                    (unsigned long long)fd->min, (unsigned long long)fd->max);
    }
    while (i < len && why == NULL) {
        if (u[i] >= 0x20 && u[i] < 0x7f) {
            i++; /* printable ASCII, the usual resource name */
            continue;
        }
        size_t k = utf8_len(u + i, len - i);

        if (k == 0) {
            why = "must be valid UTF-8";
        } else if ((k == 1 && (u[i] < 0x20 || u[i] == 0x7f)) ||
                   (k == 2 && u[i] == 0xc2 && u[i + 1] < 0xa0)) {
            why = "must not contain control characters";
        }
        i += k;
    }
    if (why == NULL) {
        return 0;
    }
    return field_fail(fd, fd->bad_value != NULL ? fd->bad_value : why, err,
                      errlen);
}

/*
 * proto_validate_resource: s[0..len) must be 1..PROTO_RESOURCE_MAX bytes of
 * well-formed UTF-8 without control characters (C0, DEL and the C1 range
 * U+0080..U+009F): the bounds of the "resource" member. Returns 0, or -1
 * with a message that names "resource" in err (which may be NULL).
 */
int proto_validate_resource(const char *s, size_t len, char *err, size_t errlen)
{
    return text_check(&proto_fields[F_RESOURCE], s, len, err, errlen);
}

/* uint_of: d, when integral and in min..max (both <= 2^53, where doubles
 * stay exact), into *u. Returns 0 or -1. */
static int uint_of(double d, uint64_t min, uint64_t max, uint64_t *u)
{
    /* The comparisons also refuse NaN and the infinities. */
    if (d >= (double)min && d <= (double)max && d <= INT_EXACT_MAX) {
        uint64_t x = (uint64_t)d;
        if ((double)x == d) {
            *u = x;
            return 0;
        }
    }
    return -1;
}

/* set_op: "op" names an op, the route's when there is one. */
static int set_op(const struct proto_field *fd, const struct value *v,
                  enum proto_op op, struct request *req, char *err,
                  size_t errlen)
{
    char name[NAME_CLIP + 4];
    enum proto_op named;

    if (v->kind != V_STRING) {
        return field_fail(fd, "must be a string", err, errlen);
    }
    named = v->nul ? OP_NONE : op_from_name(v->s, v->n);
    if (named == OP_NONE) {
        /* cJSON's copy stops at a \u0000: quote the raw text instead. */
        const char *s = v->nul ? v->raw + 1 : v->s;
        size_t n = v->nul ? v->raw_len - 2 : v->n;

        if (!v->nul && name_is(s, n, "metrics")) {
            return fail(err, errlen,
                        "%s: unknown operation 'metrics' (HTTP only: "
                        "GET /metrics)",
                        fd->name);
        }
        return fail(err, errlen, "%s: unknown operation '%s'", fd->name,
                    clip_name(s, n, name));
    }
    if (op != OP_NONE && named != op) {
        return fail(err, errlen, "%s: '%s' does not match the route (%s)",
                    fd->name, op_names[named], proto_op_name(op));
    }
    req->op = named;
    return 0;
}

/* set_id: the id's compact JSON text, at most fd->max bytes, into req->id.
 * Strings are decoded and escaped again (one canonical form), numbers are
 * copied as sent. */
static int set_id(const struct proto_field *fd, const struct value *v,
                  struct request *req, char *err, size_t errlen)
{
    const char *lit = NULL;
    size_t n = 0;

    req->id_len = 0;
    req->id[0] = '\0';
    switch (v->kind) {
    case V_STRING:
        if (v->nul) {
            return field_fail(fd, "must not contain \\u0000", err, errlen);
        }
        if (!utf8_valid(v->s, v->n)) {
            return field_fail(fd, "must be valid UTF-8", err, errlen);
        }
        n = proto_json_quote(v->s, v->n, req->id, fd->max);
        break;
    case V_NUMBER:
        if (v->raw == NULL) {
            return field_fail(fd, "must be a JSON scalar", err, errlen);
        }
        if (v->raw_len <= fd->max) {
            memcpy(req->id, v->raw, v->raw_len);
            n = v->raw_len;
        }
        break;
    case V_TRUE:
        lit = "true";
        break;
    case V_FALSE:
        lit = "false";
        break;
    case V_NULL:
        lit = "null";
        break;
    default:
        return field_fail(fd, "must be a JSON scalar", err, errlen);
    }
    if (lit != NULL && strlen(lit) <= fd->max) {
        n = strlen(lit);
        memcpy(req->id, lit, n);
    }
    if (n == 0) {
        return fail(err, errlen, "%s: too long (max %llu bytes of JSON)",
                    fd->name, (unsigned long long)fd->max);
    }
    req->id[n] = '\0';
    req->id_len = n;
    return 0;
}

/* field_set: v, the value of member fd, judged against fd's bounds and
 * stored where fd says. op is the op implied by the HTTP route, OP_NONE
 * over NDJSON. Returns 0, or -1 with the member's message in err (which
 * may be NULL: the fast path only asks whether it may decide). */
static int field_set(const struct proto_field *fd, const struct value *v,
                     enum proto_op op, struct request *req, char *err,
                     size_t errlen)
{
    char *at = (char *)req + fd->off;
    uint64_t u = 0;
    bool b;

    switch (fd->type) {
    case PROTO_FT_OP:
        return set_op(fd, v, op, req, err, errlen);
    case PROTO_FT_ID:
        return set_id(fd, v, req, err, errlen);
    case PROTO_FT_UINT:
        if (v->kind != V_NUMBER || uint_of(v->d, fd->min, fd->max, &u) < 0) {
            return proto_field_uint_fail(fd, err, errlen);
        }
        if (fd->size == sizeof(uint32_t)) {
            uint32_t x = (uint32_t)u;
            memcpy(at, &x, sizeof(x));
        } else {
            memcpy(at, &u, sizeof(u));
        }
        break;
    case PROTO_FT_BOOL:
        if (v->kind != V_TRUE && v->kind != V_FALSE) {
            return field_fail(fd, "must be true or false", err, errlen);
        }
        b = v->kind == V_TRUE;
        if (b && fd->ndjson_only && op != OP_NONE) {
            return field_fail(fd, "only available over NDJSON", err, errlen);
        }
        memcpy(at, &b, sizeof(b));
        break;
    case PROTO_FT_TEXT:
        if (v->kind != V_STRING || v->nul) {
            const char *text = fd->bad_type;
            if (text == NULL) {
                text = v->kind != V_STRING
                           ? "must be a string"
                           : "must not contain control characters";
            }
            return field_fail(fd, text, err, errlen);
        }
        if (text_check(fd, v->s, v->n, err, errlen) < 0) {
            return -1;
        }
        memcpy(at, v->s, v->n);
        at[v->n] = '\0';
        memcpy((char *)req + fd->len_off, &v->n, sizeof(v->n));
        break;
    case PROTO_FT_TOKEN:
        if (v->kind != V_STRING || v->nul || v->n != fd->max ||
            proto_validate_token(v->s, v->n) < 0) {
            return fail(err, errlen, "%s: must be a %llu-character hex token",
                        fd->name, (unsigned long long)fd->max);
        }
        memcpy(at, v->s, v->n);
        at[v->n] = '\0';
        break;
    case PROTO_FT_CURSOR:
        if (v->kind != V_STRING || v->nul) {
            return field_fail(fd, fd->bad_type, err, errlen);
        }
        if (v->n < fd->min || v->n > fd->max ||
            proto_cursor_decode(v->s, v->n, &u) < 0) {
            return field_fail(fd, fd->bad_value, err, errlen);
        }
        memcpy(at, &u, sizeof(u));
        break;
    default:
        return fail(err, errlen, "internal: field %s", fd->name);
    }
    if (fd->has_off != 0) {
        b = true;
        memcpy((char *)req + fd->has_off, &b, sizeof(b));
    }
    return 0;
}

/* decode_object: every member of root (mem[i] describes its i-th child).
 * The id goes first, so that an error found on any member can echo it;
 * then members in document order, the first bad one reported. */
static int decode_object(const cJSON *root, const struct member *mem,
                         enum proto_op op, struct request *req, char *err,
                         size_t errlen)
{
    const struct proto_field *id_fd = &proto_fields[F_ID];
    const cJSON *c;
    const cJSON *id = NULL;
    const struct member *id_m = NULL;
    unsigned ids = 0;
    unsigned seen = 0;
    char name[NAME_CLIP + 4];
    size_t i;

    for (c = root->child, i = 0; c != NULL; c = c->next, i++) {
        if (!mem[i].key_nul && strcmp(c->string, id_fd->name) == 0) {
            id = c;
            id_m = &mem[i];
            ids++;
        }
    }
    if (ids == 1) {
        struct value v = value_of(id, id_m);
        /* An unreadable id is reported in document order below. */
        (void)set_id(id_fd, &v, req, NULL, 0);
    }

    for (c = root->child, i = 0; c != NULL; c = c->next, i++) {
        const struct member *m = &mem[i];
        int f = m->key_nul ? -1 : field_from_name(c->string, strlen(c->string));
        struct value v;

        if (f < 0) {
            return fail(err, errlen, "unknown field '%s'",
                        member_name(m, c, name));
        }
        if (seen & (1u << f)) {
            return fail(err, errlen, "duplicate field '%s'",
                        proto_fields[f].name);
        }
        seen |= 1u << f;
        v = value_of(c, m);
        if (f == F_ID) {
            /* Filled ahead; decoded again only to report why not. Two
             * ids are ambiguous: neither is echoed. */
            if (ids == 1 && req->id_len == 0 &&
                set_id(id_fd, &v, req, err, errlen) < 0) {
                return -1;
            }
            continue;
        }
        if (field_set(&proto_fields[f], &v, op, req, err, errlen) < 0) {
            return -1;
        }
    }
    return 0;
}

/* check_required: what each op cannot do without. Over HTTP the lock comes
 * from the path, so only NDJSON needs it in the object. */
static int check_required(enum proto_op op, struct request *req, char *err,
                          size_t errlen)
{
    switch (req->op) {
    case OP_NONE:
        return fail(err, errlen, "op: required");
    case OP_ACQUIRE:
        if (req->resource_len == 0) {
            return fail(err, errlen, "resource: required");
        }
        return 0;
    case OP_INSPECT:
        if (req->resource_len == 0) {
            return fail(err, errlen, "resource: required");
        }
        return 0;
    case OP_RELEASE:
    case OP_EXTEND:
    case OP_COMPLETE:
        if (op == OP_NONE && !req->has_lock) {
            return fail(err, errlen, "lock: required");
        }
        return 0;
    default:
        return 0;
    }
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/*
 * proto_request_init: resets every field of req to its default.
 */
void proto_request_init(struct request *req)
{
    memset(req, 0, sizeof(*req));
    req->op = OP_NONE;
    req->ttl_ms = PROTO_TTL_DEFAULT;
    req->keep_ms = PROTO_KEEP_DEFAULT;
    req->limit = PROTO_LIMIT_DEFAULT;
}

/* ---- fast path ---------------------------------------------------------- */

/* The common request is a flat object of plain strings, small integers and
 * booleans. decode_fast() reads such a line in one pass with no allocation
 * and gives up (returns 0) on anything else: escapes, nesting, fractions,
 * signs, an unknown or repeated member, a value out of range, a type that
 * does not fit. The full path below then decides, so every refusal and its
 * message come from one place. Each member is judged and stored by the
 * same field_set() over proto_fields as in the full path, so the fast path
 * only ever accepts what the full path accepts, with the same result (the
 * fuzz target checks it). */

struct fast_str {
    const char *p;
    size_t n;
};

static size_t fast_ws(const char *d, size_t len, size_t i)
{
    while (i < len && is_ws(d[i])) {
        i++;
    }
    return i;
}

/* A string without escapes or control bytes; returns the index past the
 * closing quote, or 0. */
static size_t fast_string(const char *d, size_t len, size_t i,
                          struct fast_str *out)
{
    if (i >= len || d[i] != '"') {
        return 0;
    }
    size_t start = ++i;
    for (; i < len; i++) {
        unsigned char c = (unsigned char)d[i];
        if (c == '"') {
            out->p = d + start;
            out->n = i - start;
            return i + 1;
        }
        if (c == '\\' || c < 0x20) {
            return 0;
        }
    }
    return 0;
}

/* 1 decoded, 0 leave it to the full path. Each member costs a pass over
 * the field names (most refused by their first byte) and one field_set,
 * the same judge the full path uses, told to write no message. */
static int decode_fast(const char *d, size_t len, enum proto_op op,
                       struct request *req, char *err, size_t errlen)
{
    unsigned seen = 0;
    size_t i = fast_ws(d, len, 0);
    if (i >= len || d[i] != '{') {
        return 0;
    }
    i = fast_ws(d, len, i + 1);
    if (i < len && d[i] == '}') {
        i++;
        goto done;
    }
    for (;;) {
        struct fast_str key, str;
        struct value v = {V_NULL, NULL, 0, false, 0, NULL, 0};
        i = fast_string(d, len, i, &key);
        if (i == 0) {
            return 0;
        }
        int f = field_from_name(key.p, key.n);
        if (f < 0 || (seen & (1u << f))) {
            return 0;
        }
        seen |= 1u << f;
        i = fast_ws(d, len, i);
        if (i >= len || d[i] != ':') {
            return 0;
        }
        i = fast_ws(d, len, i + 1);
        if (i >= len) {
            return 0;
        }
        unsigned char c = (unsigned char)d[i];
        v.raw = d + i;
        if (c == '"') {
            i = fast_string(d, len, i, &str);
            if (i == 0) {
                return 0;
            }
            v.kind = V_STRING;
            v.s = str.p;
            v.n = str.n;
        } else if (c >= '0' && c <= '9') {
            size_t start = i;
            uint64_t u = 0;
            /* 15 digits stay below 2^53: the double is exact. */
            while (i < len && d[i] >= '0' && d[i] <= '9' && i - start < 15) {
                u = u * 10 + (uint64_t)(d[i] - '0');
                i++;
            }
            if ((i - start > 1 && d[start] == '0') ||
                (i < len && ((d[i] >= '0' && d[i] <= '9') || d[i] == '.' ||
                             d[i] == 'e' || d[i] == 'E'))) {
                return 0;
            }
            v.kind = V_NUMBER;
            v.d = (double)u;
        } else if (c == 't' || c == 'f' || c == 'n') {
            const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
            size_t n = strlen(lit);
            if (len - i < n || memcmp(d + i, lit, n) != 0) {
                return 0;
            }
            i += n;
            v.kind = c == 't' ? V_TRUE : c == 'f' ? V_FALSE : V_NULL;
        } else {
            return 0;
        }
        v.raw_len = (size_t)(d + i - v.raw);
        if (field_set(&proto_fields[f], &v, op, req, NULL, 0) < 0) {
            return 0;
        }
        i = fast_ws(d, len, i);
        if (i < len && d[i] == ',') {
            i = fast_ws(d, len, i + 1);
            continue;
        }
        if (i < len && d[i] == '}') {
            i++;
            break;
        }
        return 0;
    }
done:
    if (fast_ws(d, len, i) != len) {
        return 0;
    }
    if (check_required(op, req, err, errlen) != 0) {
        return 0;
    }
    return 1;
}

/*
 * proto_decode: one request object data[0..len) (need not be NUL-terminated)
 * into req, which is reset first. op is the op implied by an HTTP route, or
 * OP_NONE for an NDJSON line. For an implied op an empty or all-whitespace
 * body counts as {}, and renew is refused (it needs a connection). Errors
 * are reported for the first bad member in document order, then for what
 * the op requires. Returns 0; PROTO_NOT_JSON (-2) when data is not strict
 * JSON; or -1 for anything else wrong; both with a message in err that
 * names the field when there is one. On error only req->op (when read) and
 * req->id (when readable) are meaningful.
 */
int proto_decode(const char *data, size_t len, enum proto_op op,
                 struct request *req, char *err, size_t errlen)
{
    proto_request_init(req);
    req->op = op;
    if (decode_fast(data, len, op, req, err, errlen) == 1) {
        return 0;
    }
    return proto_decode_full(data, len, op, req, err, errlen);
}

int proto_decode_full(const char *data, size_t len, enum proto_op op,
                      struct request *req, char *err, size_t errlen)
{
    struct member inline_mem[MEMBERS_INLINE];
    struct scan sc = {inline_mem, MEMBERS_INLINE, 0, 0, NULL};
    const char *end = NULL;
    cJSON *root = NULL;
    const cJSON *c;
    size_t count = 0;
    size_t i = 0;
    int rc = -1;

    proto_request_init(req);
    req->op = op;
    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    while (i < len && is_ws(data[i])) {
        i++;
    }
    if (i == len) {
        if (op == OP_NONE) {
            return fail(err, errlen, "empty request");
        }
        return check_required(op, req, err, errlen);
    }

    root = cJSON_ParseWithLengthOpts(data, len, &end, 0);
    if (root == NULL) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at != NULL && at >= data && at <= data + len
                         ? (size_t)(at - data)
                         : len;
        fail(err, errlen, "invalid JSON at byte %zu", off);
        return PROTO_NOT_JSON;
    }
    for (i = (size_t)(end - data); i < len; i++) {
        if (!is_ws(data[i])) {
            fail(err, errlen, "invalid JSON: trailing data at byte %zu", i);
            rc = PROTO_NOT_JSON;
            goto error;
        }
    }
    if (!cJSON_IsObject(root)) {
        fail(err, errlen, "request must be a JSON object");
        goto error;
    }

    for (c = root->child; c != NULL; c = c->next) {
        count++;
    }
    if (count > MEMBERS_INLINE) {
        sc.m = malloc(count * sizeof(*sc.m));
        if (sc.m == NULL) {
            fail(err, errlen, "out of memory");
            goto error;
        }
        sc.cap = count;
    }
    if (scan_json(&sc, data, (size_t)(end - data)) < 0) {
        fail(err, errlen, "invalid JSON: %s at byte %zu", sc.err_what,
             sc.err_at);
        rc = PROTO_NOT_JSON;
        goto error;
    }
    if (sc.n != count) {
        fail(err, errlen, "invalid JSON: %zu members, expected %zu", sc.n,
             count);
        rc = PROTO_NOT_JSON;
        goto error;
    }
    if (decode_object(root, sc.m, op, req, err, errlen) < 0) {
        goto error;
    }
    rc = check_required(op, req, err, errlen);

error:
    if (sc.m != inline_mem) {
        free(sc.m);
    }
    cJSON_Delete(root);
    return rc;
}
