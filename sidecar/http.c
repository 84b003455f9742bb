/* http.c: the HTTP/1.1 request reader, router and response head writer.
 *
 * Pure: no I/O, no allocation, no state kept between calls. http_parse()
 * re-reads the whole buffered input each time, line by line:
 *
 *   [CRLF...] request-line CRLF *(header CRLF) CRLF [body of Content-Length]
 *
 * Each complete line is checked as it is met, and the unfinished last line
 * only for what more bytes cannot repair (a bad method, a target already
 * over HTTP_PATH_MAX, a head already over max_head_bytes). So a request fed
 * one byte at a time fails at the same line, with the same status, as the
 * same bytes given at once. Bare LF is accepted for CRLF; a CR anywhere else
 * is refused like any other control character. */
#include "http.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

#define HTTP_DEFAULT_HEAD_BYTES 8192
#define HTTP_DEFAULT_HEADERS 64

/* What the header lines said, gathered until the blank line ends the head. */
struct head_state {
    int minor;              /* HTTP/1.<minor>: 0 or 1 */
    int n_headers;          /* header lines seen so far */
    bool has_length;        /* a Content-Length was seen */
    uint64_t length;        /* its value, saturated at UINT64_MAX */
    const char *len_digits; /* its digits without leading zeros */
    size_t len_ndigits;     /* so duplicates compare exactly */
    bool has_te;            /* Transfer-Encoding: refused with 411 */
    bool conn_close;        /* Connection: close */
    bool conn_keep_alive;   /* Connection: keep-alive (for HTTP/1.0) */
    bool expect_continue;   /* Expect: 100-continue */
    bool expect_unknown;    /* any other expectation: 417 */
};

/* http_limits_default: see http.h. */
void http_limits_default(struct http_limits *lim, size_t max_body_bytes)
{
    lim->max_head_bytes = HTTP_DEFAULT_HEAD_BYTES;
    lim->max_headers = HTTP_DEFAULT_HEADERS;
    lim->max_body_bytes = max_body_bytes;
}

static enum http_parse_result fail(struct http_request *out, int status,
                                   const char *message)
{
    out->error_status = status;
    out->error_message = message;
    return HTTP_ERROR;
}

/* tchar of RFC 9110 5.6.2: the characters of a method or a field name. */
static bool is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
        (c >= 'A' && c <= 'Z')) {
        return true;
    }
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool is_ctl(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

/* pct_decode: decodes the %XX escapes of src[0..n) into dst, which holds at
 * least n + 1 bytes, and NUL-terminates it. '+' stays '+'. Returns the
 * decoded length; -1 on a truncated or non-hex escape; -2 on %00 (which
 * would cut a C string short) and, when no_ctl, on any decoded control
 * character, so the message can say what is wrong as the JSON one does. */
static long pct_decode(const char *src, size_t n, char *dst, bool no_ctl)
{
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '%') {
            if (n - i < 3) {
                return -1;
            }
            int hi = util_hex_value((unsigned char)src[i + 1]);
            int lo = util_hex_value((unsigned char)src[i + 2]);
            if (hi < 0 || lo < 0) {
                return -1;
            }
            c = (unsigned char)(hi * 16 + lo);
            if (c == '\0') {
                return -2;
            }
            i += 2;
        }
        if (no_ctl && is_ctl(c)) {
            return -2;
        }
        dst[o++] = (char)c;
    }
    dst[o] = '\0';
    return (long)o;
}

/* Compares s[0..n) with the NUL-terminated lit, ignoring ASCII case. */
static bool token_eq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(s, lit, n) == 0;
}

/* Scans the method token at the start of a request line s[0..n). Returns 0
 * with *sp the index of the SP after it, 1 when the line ends before any SP
 * (the caller decides whether that is "more to come" or an error), or 400
 * with *msg set. */
static int scan_method(const char *s, size_t n, size_t *sp, const char **msg)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            if (i == 0) {
                *msg = "bad request line";
                return 400;
            }
            *sp = i;
            return 0;
        }
        if (!is_tchar((unsigned char)s[i])) {
            *msg = "bad method";
            return 400;
        }
    }
    return 1;
}

/* check_partial_request_line: what an unfinished request line s[0..n) can
 * already be blamed for. A trailing CR may be the first half of CRLF, so it
 * is not judged yet. Returns 0 or an HTTP status with *msg set. */
static int check_partial_request_line(const char *s, size_t n, const char **msg)
{
    size_t sp;

    if (n > 0 && s[n - 1] == '\r') {
        n--;
    }
    int rc = scan_method(s, n, &sp, msg);
    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    const char *t = s + sp + 1;
    const char *end = memchr(t, ' ', n - sp - 1);
    size_t tlen = end != NULL ? (size_t)(end - t) : n - sp - 1;
    if (tlen > HTTP_PATH_MAX) {
        *msg = "request-target too long";
        return 414;
    }
    return 0;
}

/* parse_target: splits a request-target t[0..n) (no SP, at most
 * HTTP_PATH_MAX bytes) into the decoded path and the raw query. Accepts
 * origin-form ("/a?b"), absolute-form ("http://host/a?b", whose authority is
 * dropped: the socket is the authority) and "*". Returns 0 or 400. */
static int parse_target(const char *t, size_t n, struct http_request *out,
                        const char **msg)
{
    for (size_t i = 0; i < n; i++) {
        if (is_ctl((unsigned char)t[i])) {
            *msg = "bad character in request-target";
            return 400;
        }
    }
    if (n >= 7 && (strncasecmp(t, "http://", 7) == 0 ||
                   (n >= 8 && strncasecmp(t, "https://", 8) == 0))) {
        size_t skip = t[4] == ':' ? 7 : 8;
        size_t i = skip;
        while (i < n && t[i] != '/' && t[i] != '?') {
            i++;
        }
        t += i;
        n -= i;
        if (n == 0 || t[0] == '?') {
            /* "http://host" and "http://host?q" mean the path "/". */
            out->path[0] = '/';
            out->path[1] = '\0';
            memcpy(out->query, n > 0 ? t + 1 : "", n > 0 ? n - 1 : 0);
            out->query[n > 0 ? n - 1 : 0] = '\0';
            return 0;
        }
    } else if (n == 1 && t[0] == '*') {
        memcpy(out->path, "*", 2);
        return 0;
    } else if (n == 0 || t[0] != '/') {
        *msg = "bad request-target";
        return 400;
    }

    const char *q = memchr(t, '?', n);
    size_t plen = q != NULL ? (size_t)(q - t) : n;
    long dlen = pct_decode(t, plen, out->path, true);
    if (dlen < 0) {
        *msg = dlen == -2 ? "path: must not contain control characters"
                          : "bad percent-encoding in path";
        return 400;
    }
    if (q != NULL) {
        size_t qlen = n - plen - 1;
        memcpy(out->query, q + 1, qlen);
        out->query[qlen] = '\0';
    }
    return 0;
}

/* parse_request_line: method SP request-target SP HTTP/1.x, CR already
 * stripped. Returns 0 or an HTTP status with *msg set; the order of checks
 * matches check_partial_request_line(). */
static int parse_request_line(const char *s, size_t n, struct http_request *out,
                              struct head_state *st, const char **msg)
{
    size_t sp;

    int rc = scan_method(s, n, &sp, msg);
    if (rc == 1) {
        *msg = "bad request line";
        return 400;
    }
    if (rc != 0) {
        return rc;
    }
    const char *t = s + sp + 1;
    const char *end = memchr(t, ' ', n - sp - 1);
    size_t tlen = end != NULL ? (size_t)(end - t) : n - sp - 1;
    if (tlen > HTTP_PATH_MAX) {
        *msg = "request-target too long";
        return 414;
    }
    if (end == NULL || tlen == 0) {
        *msg = "bad request line";
        return 400;
    }

    /* Exactly "HTTP/" DIGIT "." DIGIT: anything else is not HTTP/1.x
     * syntax at all (400); a well-formed other version is 505. */
    const char *v = end + 1;
    size_t vlen = n - (size_t)(v - s);
    if (vlen != 8 || memcmp(v, "HTTP/", 5) != 0 || v[6] != '.' || v[5] < '0' ||
        v[5] > '9' || v[7] < '0' || v[7] > '9') {
        *msg = "bad HTTP version";
        return 400;
    }
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1')) {
        *msg = "HTTP version not supported";
        return 505;
    }
    st->minor = v[7] - '0';

    /* Methods are case-sensitive: "get" is some other method. */
    if (sp == 3 && memcmp(s, "GET", 3) == 0) {
        out->method = HTTP_GET;
    } else if (sp == 4 && memcmp(s, "POST", 4) == 0) {
        out->method = HTTP_POST;
    } else if (sp == 6 && memcmp(s, "DELETE", 6) == 0) {
        out->method = HTTP_DELETE;
    } else if (sp == 4 && memcmp(s, "HEAD", 4) == 0) {
        out->method = HTTP_HEAD;
    } else {
        out->method = HTTP_OTHER;
    }
    return parse_target(t, tlen, out, msg);
}

/* on_content_length: digits only; repeats must carry the same number. */
static int on_content_length(const char *v, size_t n, struct head_state *st,
                             const char **msg)
{
    if (n == 0) {
        *msg = "bad Content-Length";
        return 400;
    }
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') {
            *msg = "bad Content-Length";
            return 400;
        }
    }
    while (n > 1 && v[0] == '0') {
        v++;
        n--;
    }
    if (st->has_length) {
        if (n != st->len_ndigits || memcmp(v, st->len_digits, n) != 0) {
            *msg = "conflicting Content-Length";
            return 400;
        }
        return 0;
    }
    uint64_t value = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(v[i] - '0');
        if (value > (UINT64_MAX - d) / 10) {
            value = UINT64_MAX; /* more than anyone allows: 413 later */
            break;
        }
        value = value * 10 + d;
    }
    st->has_length = true;
    st->length = value;
    st->len_digits = v;
    st->len_ndigits = n;
    return 0;
}

/* for_each_element: calls fn on each trimmed, non-empty element of a
 * comma-separated field value. */
static void for_each_element(const char *v, size_t n, struct head_state *st,
                             void (*fn)(const char *, size_t,
                                        struct head_state *))
{
    size_t i = 0;

    while (i < n) {
        size_t start = i;
        while (i < n && v[i] != ',') {
            i++;
        }
        size_t end = i;
        while (start < end && (v[start] == ' ' || v[start] == '\t')) {
            start++;
        }
        while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t')) {
            end--;
        }
        if (end > start) {
            fn(v + start, end - start, st);
        }
        i++; /* past the comma */
    }
}

static void connection_option(const char *s, size_t n, struct head_state *st)
{
    if (token_eq(s, n, "close")) {
        st->conn_close = true;
    } else if (token_eq(s, n, "keep-alive")) {
        st->conn_keep_alive = true;
    }
}

static void expectation(const char *s, size_t n, struct head_state *st)
{
    if (token_eq(s, n, "100-continue")) {
        st->expect_continue = true;
    } else {
        st->expect_unknown = true;
    }
}

/* parse_header_line: "name: value" with the CR stripped. Returns 0 or an
 * HTTP status with *msg set. */
static int parse_header_line(const char *s, size_t n,
                             const struct http_limits *lim,
                             struct head_state *st, const char **msg)
{
    if (++st->n_headers > lim->max_headers) {
        *msg = "too many header fields";
        return 431;
    }
    if (s[0] == ' ' || s[0] == '\t') {
        *msg = "obs-fold (line folding) not allowed";
        return 400;
    }
    size_t colon = 0;
    while (colon < n && s[colon] != ':') {
        /* No whitespace before the colon (RFC 9112 5.1): a classic way to
         * make two parsers see two different headers. */
        if (!is_tchar((unsigned char)s[colon])) {
            *msg = "bad header field name";
            return 400;
        }
        colon++;
    }
    if (colon == 0 || colon == n) {
        *msg = "bad header field";
        return 400;
    }
    const char *v = s + colon + 1;
    size_t vlen = n - colon - 1;
    while (vlen > 0 && (v[0] == ' ' || v[0] == '\t')) {
        v++;
        vlen--;
    }
    while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t')) {
        vlen--;
    }
    for (size_t i = 0; i < vlen; i++) {
        unsigned char c = (unsigned char)v[i];
        if (is_ctl(c) && c != '\t') {
            *msg = "bad header field value";
            return 400;
        }
    }

    if (token_eq(s, colon, "Content-Length")) {
        return on_content_length(v, vlen, st, msg);
    }
    if (token_eq(s, colon, "Transfer-Encoding")) {
        st->has_te = true;
    } else if (token_eq(s, colon, "Connection")) {
        for_each_element(v, vlen, st, connection_option);
    } else if (token_eq(s, colon, "Expect") && st->minor == 1) {
        /* An HTTP/1.0 client cannot wait for 100: RFC 9110 10.1.1 says to
         * ignore the expectation. */
        for_each_element(v, vlen, st, expectation);
    }
    return 0;
}

/* http_parse: see http.h. Reads lines up to the blank line that ends the
 * head, never looking past max_head_bytes for it, then waits for
 * Content-Length bytes of body. lim must not be NULL. */
enum http_parse_result http_parse(const char *buf, size_t len,
                                  const struct http_limits *lim,
                                  struct http_request *out)
{
    struct head_state st;
    size_t scan_end = len < lim->max_head_bytes ? len : lim->max_head_bytes;
    size_t pos = 0;
    size_t head_len = 0;
    bool have_request_line = false;
    const char *msg = NULL;
    int rc;

    memset(&st, 0, sizeof(st));
    out->method = HTTP_OTHER;
    out->path[0] = '\0';
    out->query[0] = '\0';
    out->body = NULL;
    out->body_len = 0;
    out->keep_alive = false;
    out->head_done = false;
    out->expect_continue = false;
    out->has_length = false;
    out->consumed = 0;
    out->error_status = 0;
    out->error_message = NULL;
    if (len == 0) {
        return HTTP_INCOMPLETE; /* buf may be NULL then */
    }

    while (head_len == 0) {
        const char *lf = memchr(buf + pos, '\n', scan_end - pos);
        if (lf == NULL) {
            /* Judge the unfinished line on the bytes a byte-at-a-time
             * reader would have seen before hitting the head limit. */
            if (!have_request_line) {
                rc =
                    check_partial_request_line(buf + pos, scan_end - pos, &msg);
                if (rc != 0) {
                    return fail(out, rc, msg);
                }
            }
            if (len > lim->max_head_bytes) {
                return fail(out, 431, "request head too large");
            }
            return HTTP_INCOMPLETE;
        }
        size_t eol = (size_t)(lf - buf);
        const char *line = buf + pos;
        size_t n = eol - pos;
        if (n > 0 && line[n - 1] == '\r') {
            n--;
        }
        pos = eol + 1;

        if (!have_request_line) {
            if (n == 0) {
                /* RFC 9112 2.2: ignore empty lines before the request
                 * line (some clients send CRLF after a POST body). */
                continue;
            }
            rc = parse_request_line(line, n, out, &st, &msg);
            have_request_line = true;
        } else if (n == 0) {
            head_len = pos;
            rc = 0;
        } else {
            rc = parse_header_line(line, n, lim, &st, &msg);
        }
        if (rc != 0) {
            return fail(out, rc, msg);
        }
    }

    if (st.has_te) {
        return fail(out, 411,
                    "Transfer-Encoding is not supported: send the body "
                    "with a Content-Length alone");
    }
    if (st.expect_unknown) {
        return fail(out, 417, "unsupported expectation");
    }
    if (st.has_length &&
        (st.length > lim->max_body_bytes || st.length > SIZE_MAX - head_len)) {
        return fail(out, 413, "body too large");
    }

    size_t body_len = st.has_length ? (size_t)st.length : 0;
    out->head_done = true;
    out->has_length = st.has_length;
    out->keep_alive =
        st.minor == 1 ? !st.conn_close : st.conn_keep_alive && !st.conn_close;
    if (len - head_len < body_len) {
        /* The client may be holding the body back until we say 100. */
        out->expect_continue = st.expect_continue;
        return HTTP_INCOMPLETE;
    }
    out->body = buf + head_len;
    out->body_len = body_len;
    out->consumed = head_len + body_len;
    return HTTP_COMPLETE;
}

/* One route of the contract. */
struct route {
    enum proto_op op;
    enum http_method method; /* the method served (GET routes take HEAD) */
    const char *allow;       /* the Allow header for 405 */
    const char *lock;        /* borrowed: the {lock} segment, or NULL */
    size_t lock_len;
};

/* route_match: the route for a decoded path, or false for 404. */
static bool route_match(const char *path, struct route *r)
{
    static const char locks[] = "/v1/locks";
    const size_t locks_len = sizeof(locks) - 1;

    memset(r, 0, sizeof(*r));
    if (strcmp(path, "/v1/ping") == 0 || strcmp(path, "/v1/health") == 0 ||
        strcmp(path, "/metrics") == 0) {
        r->op = path[1] == 'm'   ? OP_METRICS
                : path[4] == 'p' ? OP_PING
                                 : OP_HEALTH;
        r->method = HTTP_GET;
        r->allow = "GET, HEAD";
        return true;
    }
    if (strncmp(path, locks, locks_len) != 0) {
        return false;
    }
    const char *rest = path + locks_len;
    if (rest[0] == '\0') {
        r->op = OP_ACQUIRE;
        r->method = HTTP_POST;
        r->allow = "GET, HEAD, POST";
        return true;
    }
    if (rest[0] != '/' || rest[1] == '\0' || rest[1] == '/') {
        return false;
    }
    r->lock = rest + 1;
    const char *slash = strchr(r->lock, '/');
    if (slash == NULL) {
        r->lock_len = strlen(r->lock);
        r->op = OP_RELEASE;
        r->method = HTTP_DELETE;
        r->allow = "DELETE, GET, HEAD";
        return true;
    }
    r->lock_len = (size_t)(slash - r->lock);
    if (strcmp(slash, "/extend") == 0) {
        r->op = OP_EXTEND;
    } else if (strcmp(slash, "/complete") == 0) {
        r->op = OP_COMPLETE;
    } else {
        return false;
    }
    r->method = HTTP_POST;
    r->allow = "GET, HEAD, POST";
    return true;
}

/* query_next: the next "key=value" pair of a raw query from *pos: key and
 * raw value into k/v (lengths kn/vn; no '=' gives an empty value). Returns
 * false at the end. Empty pairs ("a&&b") are skipped. */
static bool query_next(const char *q, size_t *pos, const char **k, size_t *kn,
                       const char **v, size_t *vn)
{
    size_t n = strlen(q);
    while (*pos < n) {
        size_t start = *pos;
        while (*pos < n && q[*pos] != '&') {
            (*pos)++;
        }
        const char *p = q + start;
        size_t plen = *pos - start;
        if (*pos < n) {
            (*pos)++; /* past the '&' */
        }
        if (plen == 0) {
            continue;
        }
        const char *eq = memchr(p, '=', plen);
        *k = p;
        *kn = eq != NULL ? (size_t)(eq - p) : plen;
        *v = eq != NULL ? eq + 1 : p + plen;
        *vn = eq != NULL ? plen - *kn - 1 : 0;
        return true;
    }
    return false;
}

/* dec_digits: how many decimal digits v has, so that a number longer than
 * a member's greatest value is refused before it is read. */
static size_t dec_digits(uint64_t v)
{
    size_t n = 1;

    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* query_param: one parameter of GET /v1/locks (prefix, limit, cursor) or
 * GET /v1/locks/{resource} (fence) into req, by the same rules as the JSON
 * members. seen collects the names given, so a repeat is refused. Returns 0
 * or 400 with a message in err. */
static int query_param(const char *k, size_t kn, const char *v, size_t vn,
                       unsigned *seen, struct request *req, char *err,
                       size_t errlen)
{
    static const char *const names[] = {"prefix", "limit", "cursor", "fence"};
    char value[HTTP_PATH_MAX + 1];
    int which = -1;
    for (int i = 0; i < 4; i++) {
        if (kn == strlen(names[i]) && memcmp(k, names[i], kn) == 0) {
            which = i;
        }
    }
    if (which < 0 || (req->op == OP_INSPECT) != (which == 3)) {
        snprintf(err, errlen, "%.*s: unknown query parameter",
                 (int)(kn < 64 ? kn : 64), k);
        return 400;
    }
    if (*seen & (1u << which)) {
        snprintf(err, errlen, "%s: given twice in the query", names[which]);
        return 400;
    }
    *seen |= 1u << which;
    long dlen = pct_decode(v, vn, value, true);
    if (dlen < 0) {
        snprintf(err, errlen, "%s: %s", names[which],
                 dlen == -2 ? "must not contain control characters"
                            : "bad percent-encoding");
        return 400;
    }
    switch (which) {
    case 0:
        if (dlen > 0 &&
            proto_validate_resource(value, (size_t)dlen, NULL, 0) != 0) {
            snprintf(err, errlen,
                     "prefix: at most %d bytes of UTF-8, no control "
                     "characters",
                     PROTO_RESOURCE_MAX);
            return 400;
        }
        memcpy(req->prefix, value, (size_t)dlen + 1);
        req->prefix_len = (size_t)dlen;
        return 0;
    case 1: {
        const struct proto_field *fd = proto_field_named("limit");
        char *end = NULL;
        unsigned long x = dlen > 0 && (size_t)dlen <= dec_digits(fd->max) &&
                                  value[0] != '0' && value[0] != '+' &&
                                  value[0] != '-'
                              ? strtoul(value, &end, 10)
                              : 0;
        if (end == NULL || *end != '\0' || x < fd->min || x > fd->max) {
            proto_field_uint_fail(fd, err, errlen);
            return 400;
        }
        req->limit = (uint32_t)x;
        return 0;
    }
    case 2:
        if (proto_cursor_decode(value, (size_t)dlen, &req->cursor) != 0) {
            snprintf(err, errlen,
                     "cursor: must be the \"next\" of an earlier answer");
            return 400;
        }
        return 0;
    default:
        if (strcmp(value, "true") != 0 && strcmp(value, "false") != 0) {
            snprintf(err, errlen, "fence: must be true or false");
            return 400;
        }
        req->fence = value[0] == 't';
        return 0;
    }
}

/* get_locks_route: GET (or HEAD) /v1/locks lists this daemon's locks, and
 * GET /v1/locks/{resource} inspects one resource: everything after the
 * slash is the resource, so a resource may hold '/' (sent as is or %2F).
 * Returns 0 with req filled, or 400 with a message in err. */
static int get_locks_route(const struct http_request *hreq, struct request *req,
                           char *err, size_t errlen)
{
    const char *rest = hreq->path + sizeof("/v1/locks") - 1;
    if (rest[0] == '\0') {
        req->op = OP_LOCKS;
    } else {
        size_t n = strlen(rest + 1);
        if (proto_validate_resource(rest + 1, n, err, errlen) != 0) {
            return 400;
        }
        memcpy(req->resource, rest + 1, n + 1);
        req->resource_len = n;
        req->op = OP_INSPECT;
    }
    size_t pos = 0;
    unsigned seen = 0;
    const char *k, *v;
    size_t kn, vn;
    while (query_next(hreq->query, &pos, &k, &kn, &v, &vn)) {
        int rc = query_param(k, kn, v, vn, &seen, req, err, errlen);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* http_route_allow: see http.h. */
const char *http_route_allow(const char *path)
{
    struct route r;

    return route_match(path, &r) ? r.allow : NULL;
}

/* Whether a body is only JSON whitespace, i.e. absent for our purposes. */
static bool body_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') {
            return false;
        }
    }
    return true;
}

/* query_permit: a permit= value (raw[0..rawn), %XX-decoded), decimal as a
 * JSON integer (no sign, no leading zero), in the bounds proto_fields gives
 * permit and refused with its message, into req. Returns 0 or 400. */
static int query_permit(const char *raw, size_t rawn, struct request *req,
                        char *err, size_t errlen)
{
    const struct proto_field *fd = proto_field_named("permit");
    char v[HTTP_PATH_MAX + 1];
    long n = rawn <= HTTP_PATH_MAX ? pct_decode(raw, rawn, v, true) : -1;
    size_t vn = n > 0 ? (size_t)n : 0;
    uint64_t x = 0;
    bool ok = vn > 0 && vn <= dec_digits(fd->max) && (vn == 1 || v[0] != '0');
    for (size_t i = 0; ok && i < vn; i++) {
        ok = v[i] >= '0' && v[i] <= '9';
        x = x * 10 + (unsigned)(v[i] - '0');
    }
    if (!ok || x < fd->min || x > fd->max) {
        proto_field_uint_fail(fd, err, errlen);
        return 400;
    }
    if (req->has_permit && req->permit != x) {
        snprintf(err, errlen, "permit: body and query disagree");
        return 400;
    }
    req->permit = (uint32_t)x;
    req->has_permit = true;
    return 0;
}

/* query_lock_members: applies "resource=" and "permit=" from a lock route's raw
 * query. Only %XX escapes are decoded ('+' is a plus: resources may contain
 * one). A member in both body and query must be the same. Returns 0 or
 * 400. */
static int query_lock_members(const char *q, struct request *req, char *err,
                              size_t errlen)
{
    char value[HTTP_PATH_MAX + 1];
    bool seen = false;
    bool seen_permit = false;
    size_t i = 0;
    size_t n = strlen(q);

    while (i < n) {
        size_t start = i;
        while (i < n && q[i] != '&') {
            i++;
        }
        const char *p = q + start;
        size_t plen = i - start;
        i++; /* past the '&' */
        if (plen == 0) {
            continue;
        }
        const char *eq = memchr(p, '=', plen);
        size_t klen = eq != NULL ? (size_t)(eq - p) : plen;
        size_t vlen = eq != NULL ? plen - klen - 1 : 0;
        if (klen == 6 && memcmp(p, "permit", 6) == 0) {
            if (seen_permit) {
                snprintf(err, errlen, "permit: given twice in the query");
                return 400;
            }
            seen_permit = true;
            int rc =
                query_permit(eq != NULL ? eq + 1 : "", vlen, req, err, errlen);
            if (rc != 0) {
                return rc;
            }
            continue;
        }
        if (klen != 8 || memcmp(p, "resource", 8) != 0) {
            snprintf(err, errlen, "%.*s: unknown query parameter",
                     (int)(klen < 64 ? klen : 64), p);
            return 400;
        }
        if (seen) {
            snprintf(err, errlen, "resource: given twice in the query");
            return 400;
        }
        seen = true;
        long dlen = pct_decode(eq != NULL ? eq + 1 : "", vlen, value, false);
        if (dlen < 0) {
            snprintf(err, errlen, "resource: %s",
                     dlen == -2 ? "must not contain control characters"
                                : "bad percent-encoding");
            return 400;
        }
        if (proto_validate_resource(value, (size_t)dlen, err, errlen) != 0) {
            return 400;
        }
        if (req->resource_len > 0) {
            if (req->resource_len != (size_t)dlen ||
                memcmp(req->resource, value, (size_t)dlen) != 0) {
                snprintf(err, errlen, "resource: body and query disagree");
                return 400;
            }
            continue;
        }
        memcpy(req->resource, value, (size_t)dlen + 1);
        req->resource_len = (size_t)dlen;
    }
    return 0;
}

/* http_route: see http.h. err must hold at least 64 bytes (proto_decode's
 * minimum). Checks run 404, 405, then the path's token, then acquire's
 * refusal of any query, then the body, then a lock route's query, so the
 * message names the first thing wrong. */
int http_route(const struct http_request *hreq, struct request *req, char *err,
               size_t errlen)
{
    struct route r;

    proto_request_init(req);
    if ((hreq->method == HTTP_GET || hreq->method == HTTP_HEAD) &&
        strncmp(hreq->path, "/v1/locks", 9) == 0 &&
        (hreq->path[9] == '\0' ||
         (hreq->path[9] == '/' && hreq->path[10] != '\0'))) {
        return get_locks_route(hreq, req, err, errlen);
    }
    if (!route_match(hreq->path, &r)) {
        snprintf(err, errlen, "no route for %s", hreq->path);
        return 404;
    }
    if (hreq->method != r.method &&
        !(r.method == HTTP_GET && hreq->method == HTTP_HEAD)) {
        snprintf(err, errlen, "method not allowed; allowed: %s", r.allow);
        return 405;
    }
    if (r.lock != NULL && proto_validate_token(r.lock, r.lock_len) != 0) {
        snprintf(err, errlen, "lock: must be a 32-character hex token");
        return 400;
    }
    if (r.method == HTTP_GET) {
        /* ping, health, metrics: nothing to read; a body is ignored. */
        req->op = r.op;
        return 0;
    }

    /* Acquire reads its fields from the body only; a "?ttl_ms=" that was
     * silently dropped would hold the lock for the default TTL. Said before
     * the body is read, so a body that lacks the field the query carried
     * ("?resource=x" with "{}") is not told "resource: required". */
    if (r.lock == NULL && hreq->query[0] != '\0') {
        snprintf(err, errlen,
                 "query parameters are not read on POST /v1/locks; "
                 "send the fields in the JSON body");
        return 400;
    }

    /* No body is an empty object: acquire then says what it lacks, and a
     * lock route needs nothing more than its path. */
    const char *body = hreq->body;
    size_t body_len = hreq->body_len;
    if (body == NULL || body_blank(body, body_len)) {
        body = "{}";
        body_len = 2;
    }
    if (proto_decode(body, body_len, r.op, req, err, errlen) != 0) {
        return 400;
    }
    req->op = r.op;
    if (req->renew) {
        /* A renewed lock lives as long as its connection; HTTP requests
         * have no such connection to tie it to. proto_decode refuses it
         * for an implied op already; this keeps the route's promise
         * whatever the decoder does. */
        snprintf(err, errlen,
                 "renew: not available over HTTP; use extend or an NDJSON "
                 "session");
        return 400;
    }
    if (r.lock == NULL) {
        return 0;
    }
    if (req->has_lock && memcmp(req->lock, r.lock, PROTO_TOKEN_LEN) != 0) {
        snprintf(err, errlen, "lock: does not match the path");
        return 400;
    }
    int rc = query_lock_members(hreq->query, req, err, errlen);
    if (rc != 0) {
        return rc;
    }
    memcpy(req->lock, r.lock, PROTO_TOKEN_LEN);
    req->lock[PROTO_TOKEN_LEN] = '\0';
    req->has_lock = true;
    return 0;
}

/* http_status_text: see http.h; "Unknown" for a status not listed. */
const char *http_status_text(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 417:
        return "Expectation Failed";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

/* http_format_head: see http.h. A 1xx response is the status line alone
 * (RFC 9110 15.2: no content, no Content-Length). content_type may be NULL
 * to leave the header out. out is NUL-terminated when it fits. */
size_t http_format_head(int status, const char *content_type, size_t body_len,
                        bool keep_alive, const char *allow, char *out,
                        size_t cap)
{
    int n;

    if (status >= 100 && status < 200) {
        n = snprintf(out, cap, "HTTP/1.1 %d %s\r\n\r\n", status,
                     http_status_text(status));
    } else {
        n = snprintf(out, cap,
                     "HTTP/1.1 %d %s\r\n"
                     "%s%s%s"
                     "Content-Length: %zu\r\n"
                     "%s"
                     "%s%s%s"
                     "\r\n",
                     status, http_status_text(status),
                     content_type != NULL ? "Content-Type: " : "",
                     content_type != NULL ? content_type : "",
                     content_type != NULL ? "\r\n" : "", body_len,
                     keep_alive ? "Connection: keep-alive\r\n"
                                : "Connection: close\r\n",
                     allow != NULL ? "Allow: " : "", allow != NULL ? allow : "",
                     allow != NULL ? "\r\n" : "");
    }
    if (n < 0 || (size_t)n >= cap) {
        return 0;
    }
    return (size_t)n;
}
