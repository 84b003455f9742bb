/* proto_encode.c: the wire contract's output half, struct response (and
 * events, health, cursors) to bytes. Pure: no I/O, no state but constant
 * tables. Kept apart from proto.c, the input half, because the two share
 * nothing but UTF-8 (utf8.h) and the contract's names (proto_wire.h); the
 * names keep proto.h's proto_ prefix so that callers see one contract.
 *
 * Encoding appends by hand into the caller's buffer: no allocation and no
 * printf, except proto_encode_health, which is not on the hot path. */
#include "proto_encode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"
#include "util.h"

/* ---- output buffer ---------------------------------------------------- */

struct out {
    char *p;
    size_t len;
    size_t cap;
    bool full; /* something did not fit: the result is void */
};

static void out_mem(struct out *o, const char *s, size_t n)
{
    if (o->full || n > o->cap - o->len) {
        o->full = true;
        return;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

/* out_lit: a string literal only (the "" s "" refuses anything else). */
#define out_lit(o, s) out_mem((o), "" s "", sizeof(s) - 1)

static void out_str(struct out *o, const char *s)
{
    out_mem(o, s, strlen(s));
}

static void out_i64(struct out *o, int64_t v)
{
    char buf[24];
    size_t i = sizeof(buf);
    /* Negate in unsigned arithmetic so INT64_MIN does not overflow. */
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

    do {
        buf[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0) {
        buf[--i] = '-';
    }
    out_mem(o, buf + i, sizeof(buf) - i);
}

/* out_esc: s[0..n) as the body of a JSON string. Quote, backslash and the
 * C0 controls are escaped; well-formed UTF-8 passes through untouched; each
 * byte of a malformed sequence becomes \ufffd so the output stays valid. */
static void out_esc(struct out *o, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t start = 0;
    size_t i = 0;

    while (i < n) {
        unsigned char c = u[i];
        char e[6];
        size_t elen = 2;

        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0x80) {
            size_t k = utf8_len(u + i, n - i);
            if (k > 0) {
                i += k;
                continue;
            }
        }
        out_mem(o, s + start, i - start);
        e[0] = '\\';
        switch (c) {
        case '"':
        case '\\':
            e[1] = (char)c;
            break;
        case '\b':
            e[1] = 'b';
            break;
        case '\f':
            e[1] = 'f';
            break;
        case '\n':
            e[1] = 'n';
            break;
        case '\r':
            e[1] = 'r';
            break;
        case '\t':
            e[1] = 't';
            break;
        default:
            if (c >= 0x80) {
                memcpy(e, "\\ufffd", 6);
            } else {
                memcpy(e, "\\u00", 4);
                e[4] = util_hex_digit(c >> 4);
                e[5] = util_hex_digit(c);
            }
            elen = 6;
            break;
        }
        out_mem(o, e, elen);
        i++;
        start = i;
    }
    out_mem(o, s + start, n - start);
}

/* out_qesc: s[0..n) as a quoted JSON string. */
static void out_qesc(struct out *o, const char *s, size_t n)
{
    out_lit(o, "\"");
    out_esc(o, s, n);
    out_lit(o, "\"");
}

/* out_end: NUL-terminates; returns the length, or 0 if anything (the NUL
 * included) did not fit. */
static size_t out_end(struct out *o)
{
    if (o->full || o->len >= o->cap) {
        return 0;
    }
    o->p[o->len] = '\0';
    return o->len;
}

/* ---- tables ----------------------------------------------------------- */

static const struct {
    const char *code;
    int status;
    const char *message; /* when the caller gives none */
} err_table[ERR__COUNT] = {
    [ERR_NONE] = {"ok", 200, "ok"},
    [ERR_BAD_REQUEST] = {"bad_request", 400, "bad request"},
    [ERR_NOT_HELD] = {"not_held", 404, "lock not held"},
    [ERR_BUSY] = {"busy", 409, "resource is locked by another owner"},
    [ERR_DONE] = {"done", 409, "resource is marked done"},
    [ERR_TOO_LARGE] = {"too_large", 413, "request too large"},
    [ERR_LIMIT] = {"limit", 429, "limit reached"},
    [ERR_NO_QUORUM] = {"no_quorum", 503, "no quorum of nodes answered"},
    [ERR_SHUTTING_DOWN] = {"shutting_down", 503, "daemon is shutting down"},
    [ERR_INTERNAL] = {"internal", 500, "internal error"},
};

/*
 * proto_err_code: the wire name of err ("bad_request", ...), "ok" for
 * ERR_NONE and "internal" for a value out of range.
 */
const char *proto_err_code(enum proto_err err)
{
    if ((unsigned)err >= ERR__COUNT) {
        return err_table[ERR_INTERNAL].code;
    }
    return err_table[err].code;
}

/*
 * proto_err_status: the HTTP status for err; 200 for ERR_NONE, 500 for a
 * value out of range.
 */
int proto_err_status(enum proto_err err)
{
    if ((unsigned)err >= ERR__COUNT) {
        return err_table[ERR_INTERNAL].status;
    }
    return err_table[err].status;
}

/*
 * proto_cursor_encode: v as lowercase hex without leading zeros, NUL-
 * terminated; returns the number of digits.
 */
size_t proto_cursor_encode(uint64_t v, char out[PROTO_CURSOR_MAX + 1])
{
    char tmp[PROTO_CURSOR_MAX];
    size_t n = 0;

    do {
        tmp[n++] = util_hex_digit((unsigned)(v & 0xfu));
        v >>= 4;
    } while (v != 0);
    for (size_t i = 0; i < n; i++) {
        out[i] = tmp[n - 1 - i];
    }
    out[n] = '\0';
    return n;
}

/* ---- encoding --------------------------------------------------------- */

/*
 * proto_json_escape: appends s[0..len) as the body of a JSON string (no
 * quotes, no NUL) to out, which holds cap bytes. Quote, backslash and C0
 * controls are escaped, well-formed UTF-8 is copied, and each byte of a
 * malformed sequence becomes \ufffd. Returns the bytes written, or 0 when
 * they did not fit (an empty s also gives 0).
 */
size_t proto_json_escape(const char *s, size_t len, char *out, size_t cap)
{
    struct out o = {out, 0, cap, false};

    out_esc(&o, s, len);
    return o.full ? 0 : o.len;
}

/*
 * proto_json_quote: s[0..len) as a quoted JSON string, escaped as
 * proto_json_escape does, to out (cap bytes, no NUL). Returns its length,
 * or 0 when it did not fit; what fitted before that may have been written.
 */
size_t proto_json_quote(const char *s, size_t len, char *out, size_t cap)
{
    struct out o = {out, 0, cap, false};

    out_qesc(&o, s, len);
    return o.full ? 0 : o.len;
}

/* msg_clip: the longest prefix of s[0..n) that out_esc turns into at most
 * max bytes of string value: a malformed byte (a client's bytes quoted in a
 * message, or a character cut by the caller's snprintf) counts as the three
 * of the U+FFFD it becomes, and a well-formed character is never split. */
static size_t msg_clip(const char *s, size_t n, size_t max)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    size_t value = 0;

    while (i < n) {
        size_t k = u[i] < 0x80 ? 1 : utf8_len(u + i, n - i);
        size_t w = k > 0 ? k : 3;
        if (value + w > max) {
            break;
        }
        value += w;
        i += k > 0 ? k : 1;
    }
    return i;
}

/* out_message: the error message, at most PROTO_MSG_MAX bytes of it once
 * decoded, as the contract says, so that any response fits in
 * PROTO_RESPONSE_MAX. */
static void out_message(struct out *o, enum proto_err err, const char *msg)
{
    size_t n = 0;

    if (msg == NULL || msg[0] == '\0') {
        msg = err_table[err].message;
    }
    while (n <= PROTO_MSG_MAX && msg[n] != '\0') {
        n++;
    }
    out_esc(o, msg, msg_clip(msg, n, PROTO_MSG_MAX));
}

/*
 * proto_encode_response: rsp as one JSON object into out (cap bytes),
 * NUL-terminated, no newline:
 *   {"id":..,"ok":true,"lock":..,"resource":..,"validity_ms":N,"fence":N}
 *   {"id":..,"ok":false,"error":{"code":..,"message":..}}
 * "id" only when id_len > 0; lock, resource (when non-empty) and
 * validity_ms only when lock != NULL; fence only when has_fence. A missing
 * message gets the code's default; a longer one is cut at PROTO_MSG_MAX
 * bytes. Returns the length, or 0 when it (and its NUL) did not fit.
 */
size_t proto_encode_response(const struct response *rsp, char *out, size_t cap)
{
    struct out o = {out, 0, cap, false};
    enum proto_err err = rsp->err;

    out_lit(&o, "{");
    if (rsp->id != NULL && rsp->id_len > 0) {
        out_lit(&o, "\"id\":");
        out_mem(&o, rsp->id, rsp->id_len);
        out_lit(&o, ",");
    }
    if (err == ERR_NONE) {
        out_lit(&o, "\"ok\":true");
        if (rsp->lock != NULL) {
            out_lit(&o, ",\"lock\":");
            out_qesc(&o, rsp->lock, strlen(rsp->lock));
            if (rsp->resource != NULL && rsp->resource_len > 0) {
                out_lit(&o, ",\"resource\":");
                out_qesc(&o, rsp->resource, rsp->resource_len);
            }
            out_lit(&o, ",\"validity_ms\":");
            out_i64(&o, rsp->validity_ms);
        }
        if (rsp->has_fence) {
            out_lit(&o, ",\"fence\":");
            out_i64(&o, rsp->fence);
        }
        if (rsp->extra != NULL && rsp->extra_len > 0) {
            out_lit(&o, ",");
            out_mem(&o, rsp->extra, rsp->extra_len);
        }
    } else {
        if ((unsigned)err >= ERR__COUNT) {
            err = ERR_INTERNAL;
        }
        out_lit(&o, "\"ok\":false,\"error\":{\"code\":\"");
        out_str(&o, err_table[err].code);
        out_lit(&o, "\",\"message\":\"");
        out_message(&o, err, rsp->message);
        out_lit(&o, "\"}");
    }
    out_lit(&o, "}");
    return out_end(&o);
}

/*
 * proto_encode_event: {"event":..,"lock":..,"resource":..} into out (cap
 * bytes), NUL-terminated; lock is left out when NULL, resource when NULL
 * or empty. Returns the length, or 0 when it did not fit or event is NULL.
 */
size_t proto_encode_event(const char *event, const char *lock,
                          const char *resource, size_t resource_len, char *out,
                          size_t cap)
{
    struct out o = {out, 0, cap, false};

    if (event == NULL) {
        return 0;
    }
    out_lit(&o, "{\"event\":");
    out_qesc(&o, event, strlen(event));
    if (lock != NULL) {
        out_lit(&o, ",\"lock\":");
        out_qesc(&o, lock, strlen(lock));
    }
    if (resource != NULL && resource_len > 0) {
        out_lit(&o, ",\"resource\":");
        out_qesc(&o, resource, resource_len);
    }
    out_lit(&o, "}");
    return out_end(&o);
}

/* esc_bound: bytes s can take once quoted and escaped (NULL: "null"). */
static size_t esc_bound(const char *s)
{
    return s == NULL ? 4 : strlen(s) * 6 + 2;
}

/*
 * proto_encode_health: the health object as a malloc'd, NUL-terminated
 * string owned by the caller, its length in *len (when len != NULL):
 *   {"id":..,"ok":true,"quorum":Q,"nodes":[{"addr":..,"up":..,"state":..,
 *    "last_error":..|null,"rtt_ms":N|null,"quarantined":..[,"tls":..]
 *    [,"eviction":..][,"refusing":..][,"not_counted":..]},..]}
 * When ok is false, "error":{"code":"no_quorum","message":..} follows
 * "ok", so generic clients see the usual failure shape. A NULL state is
 * written as "up" or "down". Returns NULL only when malloc fails.
 */
char *proto_encode_health(const char *id, size_t id_len, bool ok, int quorum,
                          const struct proto_node_health *nodes, int n_nodes,
                          size_t *len)
{
    struct out o = {NULL, 0, 256, false};
    int n_usable = 0;
    char num[128];

    if (nodes == NULL || n_nodes < 0) {
        n_nodes = 0;
    }
    if (id == NULL) {
        id_len = 0;
    }
    o.cap += id_len;
    for (int i = 0; i < n_nodes; i++) {
        o.cap += 200 + esc_bound(nodes[i].addr) + esc_bound(nodes[i].state) +
                 esc_bound(nodes[i].last_error) + esc_bound(nodes[i].eviction) +
                 esc_bound(nodes[i].refusing) + esc_bound(nodes[i].not_counted);
        /* A quarantined node is up but does not count towards quorum, nor
         * one whose data-set mark is not known. */
        n_usable +=
            nodes[i].up && !nodes[i].quarantined && nodes[i].not_counted == NULL
                ? 1
                : 0;
    }
    o.p = malloc(o.cap);
    if (o.p == NULL) {
        return NULL;
    }

    out_lit(&o, "{");
    if (id_len > 0) {
        out_lit(&o, "\"id\":");
        out_mem(&o, id, id_len);
        out_lit(&o, ",");
    }
    if (ok) {
        out_lit(&o, "\"ok\":true");
    } else {
        int n = snprintf(num, sizeof(num),
                         "%d of %d nodes usable (up, not quarantined), "
                         "quorum is %d",
                         n_usable, n_nodes, quorum);
        out_lit(&o, "\"ok\":false,\"error\":{\"code\":\"no_quorum\","
                    "\"message\":\"");
        out_mem(&o, num, n > 0 && (size_t)n < sizeof(num) ? (size_t)n : 0);
        out_lit(&o, "\"}");
    }
    out_lit(&o, ",\"quorum\":");
    out_i64(&o, quorum);
    out_lit(&o, ",\"nodes\":[");
    for (int i = 0; i < n_nodes; i++) {
        const struct proto_node_health *nd = &nodes[i];
        const char *addr = nd->addr != NULL ? nd->addr : "";
        const char *state = nd->state;
        double rtt = nd->rtt_ms;

        if (state == NULL) {
            state = nd->up ? "up" : "down";
        }
        out_str(&o, i == 0 ? "{\"addr\":" : ",{\"addr\":");
        out_qesc(&o, addr, strlen(addr));
        out_str(&o, nd->up ? ",\"up\":true" : ",\"up\":false");
        out_lit(&o, ",\"state\":");
        out_qesc(&o, state, strlen(state));
        out_lit(&o, ",\"last_error\":");
        if (nd->last_error != NULL) {
            out_qesc(&o, nd->last_error, strlen(nd->last_error));
        } else {
            out_lit(&o, "null");
        }
        out_lit(&o, ",\"rtt_ms\":");
        /* Unknown (< 0), NaN and absurd values have no JSON number. */
        if (rtt >= 0 && rtt < 1e12) {
            int n = snprintf(num, sizeof(num), "%.3f", rtt);
            out_mem(&o, num, n > 0 && (size_t)n < sizeof(num) ? (size_t)n : 0);
        } else {
            out_lit(&o, "null");
        }
        out_str(&o, nd->quarantined ? ",\"quarantined\":true"
                                    : ",\"quarantined\":false");
        if (nd->tls != NULL) {
            out_lit(&o, ",\"tls\":");
            out_qesc(&o, nd->tls, strlen(nd->tls));
        }
        if (nd->eviction != NULL) {
            out_lit(&o, ",\"eviction\":");
            out_qesc(&o, nd->eviction, strlen(nd->eviction));
        }
        if (nd->refusing != NULL) {
            out_lit(&o, ",\"refusing\":");
            out_qesc(&o, nd->refusing, strlen(nd->refusing));
        }
        if (nd->not_counted != NULL) {
            out_lit(&o, ",\"not_counted\":");
            out_qesc(&o, nd->not_counted, strlen(nd->not_counted));
        }
        out_lit(&o, "}");
    }
    out_lit(&o, "]}");
    if (out_end(&o) == 0) {
        /* The bound above is generous; this would be a bug. */
        free(o.p);
        return NULL;
    }
    if (len != NULL) {
        *len = o.len;
    }
    return o.p;
}
