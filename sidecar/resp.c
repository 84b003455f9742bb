/* resp.c: RESP2 commands encoded; replies parsed into pooled redisReply
 * objects.
 *
 * The parser is all-or-nothing per reply: it either builds the whole first
 * reply or reports RESP_INCOMPLETE having freed whatever it had built, so
 * the caller only has to keep unparsed bytes. Replies on a node connection
 * are small (an integer, or an array of two), and the rare large one (INFO)
 * is re-parsed at most once per read, so no parser state survives between
 * calls. */
#include "resp.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "pool.h"

/* ---- pooled reply objects ------------------------------------------------ */

#define REPLY_INLINE                                                           \
    2 /* element vector kept in the object for small arrays                    \
       */
#define REPLY_POOL_MAX 8192

/* One reply object. Owned by the caller of resp_parse until
 * resp_reply_free, then by the pool. */
struct pooled_reply {
    redisReply r; /* first: cast from redisReply * */
    redisReply *inl[REPLY_INLINE];
};

static struct pool reply_pool = {
    .size = sizeof(struct pooled_reply),
    .keep = REPLY_POOL_MAX,
};

redisReply *resp_reply_new(int type)
{
    struct pooled_reply *p = pool_new(&reply_pool);
    if (p == NULL) {
        return NULL;
    }
    memset(&p->r, 0, sizeof(p->r));
    p->r.type = type;
    return &p->r;
}

redisReply *resp_reply_string(int type, const char *s, size_t n)
{
    char *copy = malloc(n + 1);
    if (copy == NULL) {
        return NULL;
    }
    memcpy(copy, s, n);
    copy[n] = '\0';
    redisReply *r = resp_reply_new(type);
    if (r == NULL) {
        free(copy);
        return NULL;
    }
    r->str = copy;
    r->len = n;
    return r;
}

redisReply *resp_reply_array(size_t n)
{
    redisReply *r = resp_reply_new(REDIS_REPLY_ARRAY);
    if (r == NULL) {
        return NULL;
    }
    struct pooled_reply *p = (struct pooled_reply *)r;
    if (n > 0) {
        if (n <= REPLY_INLINE) {
            p->inl[0] = p->inl[1] = NULL;
            r->element = p->inl;
        } else {
            r->element = calloc(n, sizeof(redisReply *));
            if (r->element == NULL) {
                resp_reply_free(r);
                return NULL;
            }
        }
    }
    r->elements = n;
    return r;
}

void resp_reply_free(redisReply *r)
{
    if (r == NULL) {
        return;
    }
    struct pooled_reply *p = (struct pooled_reply *)r;
    if (r->type == REDIS_REPLY_ARRAY && r->element != NULL) {
        for (size_t i = 0; i < r->elements; i++) {
            resp_reply_free(r->element[i]);
        }
        if (r->element != p->inl) {
            free(r->element);
        }
    } else if (r->str != NULL) {
        free(r->str);
    }
    pool_put(&reply_pool, p);
}

void resp_pool_drain(void)
{
    pool_drain(&reply_pool);
}

/* ---- parser ----------------------------------------------------------------
 */

struct parser {
    const char *buf;
    size_t len;
    size_t pos; /* next byte to parse */
    char *err;
    size_t errlen;
};

static enum resp_status protocol_error(struct parser *p, const char *why)
{
    if (p->err != NULL && p->errlen > 0) {
        size_t n = strlen(why);
        if (n >= p->errlen) {
            n = p->errlen - 1;
        }
        memcpy(p->err, why, n);
        p->err[n] = '\0';
    }
    return RESP_PROTOCOL;
}

/* The header line at p->pos: its text after the type byte is s[0..n), and
 * *next is the position after its CRLF. */
static enum resp_status header_line(struct parser *p, const char **s, size_t *n,
                                    size_t *next)
{
    const char *start = p->buf + p->pos + 1;
    size_t avail = p->len - p->pos - 1;
    const char *cr = memchr(start, '\r', avail);
    if (cr == NULL) {
        return avail > RESP_MAX_BULK ? protocol_error(p, "line too long")
                                     : RESP_INCOMPLETE;
    }
    if ((size_t)(cr - p->buf) + 1 >= p->len) {
        return RESP_INCOMPLETE;
    }
    if (cr[1] != '\n') {
        return protocol_error(p, "CR without LF");
    }
    *s = start;
    *n = (size_t)(cr - start);
    *next = (size_t)(cr - p->buf) + 2;
    return RESP_OK;
}

/* The number after the type byte, up to its CRLF, read in one pass: the
 * hot replies are all numbers (":1", "*2") and need no line search. */
static enum resp_status number_line(struct parser *p, long long *out,
                                    size_t *next, const char *what)
{
    const char *b = p->buf;
    size_t i = p->pos + 1;
    bool neg = i < p->len && b[i] == '-';
    if (neg) {
        i++;
    }
    size_t start = i;
    uint64_t v = 0;
    while (i < p->len && b[i] >= '0' && b[i] <= '9') {
        if (i - start == 19) {
            return protocol_error(p, what);
        }
        v = v * 10 + (uint64_t)(b[i] - '0');
        i++;
    }
    if (i >= p->len) {
        return RESP_INCOMPLETE;
    }
    if (b[i] != '\r' || i == start ||
        v > (uint64_t)INT64_MAX + (neg ? 1u : 0u)) {
        return protocol_error(p, what);
    }
    if (i + 1 >= p->len) {
        return RESP_INCOMPLETE;
    }
    if (b[i + 1] != '\n') {
        return protocol_error(p, "CR without LF");
    }
    *out = neg ? (long long)(0 - v) : (long long)v;
    *next = i + 2;
    return RESP_OK;
}

static enum resp_status string_reply(int type, const char *s, size_t n,
                                     redisReply **out)
{
    *out = resp_reply_string(type, s, n);
    return *out != NULL ? RESP_OK : RESP_NOMEM;
}

static enum resp_status parse_array(struct parser *p, long long count,
                                    int depth, redisReply **out);

static enum resp_status parse_item(struct parser *p, int depth,
                                   redisReply **out)
{
    if (p->pos >= p->len) {
        return RESP_INCOMPLETE;
    }
    char type = p->buf[p->pos];
    const char *s;
    size_t n, next;
    long long v;
    enum resp_status rc;
    switch (type) {
    case '+':
    case '-':
        rc = header_line(p, &s, &n, &next);
        if (rc != RESP_OK) {
            return rc;
        }
        rc = string_reply(type == '+' ? REDIS_REPLY_STATUS : REDIS_REPLY_ERROR,
                          s, n, out);
        if (rc == RESP_OK) {
            p->pos = next;
        }
        return rc;
    case ':':
        rc = number_line(p, &v, &next, "bad integer");
        if (rc != RESP_OK) {
            return rc;
        }
        *out = resp_reply_new(REDIS_REPLY_INTEGER);
        if (*out == NULL) {
            return RESP_NOMEM;
        }
        (*out)->integer = v;
        p->pos = next;
        return RESP_OK;
    case '$':
        rc = number_line(p, &v, &next, "bad bulk length");
        if (rc != RESP_OK) {
            return rc;
        }
        if (v < -1 || v > (long long)RESP_MAX_BULK) {
            return protocol_error(p, "bad bulk length");
        }
        if (v == -1) {
            *out = resp_reply_new(REDIS_REPLY_NIL);
            if (*out == NULL) {
                return RESP_NOMEM;
            }
            p->pos = next;
            return RESP_OK;
        }
        if (p->len - next < (size_t)v + 2) {
            return RESP_INCOMPLETE;
        }
        if (p->buf[next + (size_t)v] != '\r' ||
            p->buf[next + (size_t)v + 1] != '\n') {
            return protocol_error(p, "bulk string without CRLF");
        }
        rc = string_reply(REDIS_REPLY_STRING, p->buf + next, (size_t)v, out);
        if (rc == RESP_OK) {
            p->pos = next + (size_t)v + 2;
        }
        return rc;
    case '*':
        rc = number_line(p, &v, &next, "bad array length");
        if (rc != RESP_OK) {
            return rc;
        }
        if (v < -1 || v > RESP_MAX_ELEMENTS) {
            return protocol_error(p, "bad array length");
        }
        p->pos = next;
        if (v == -1) {
            *out = resp_reply_new(REDIS_REPLY_NIL);
            return *out != NULL ? RESP_OK : RESP_NOMEM;
        }
        if (depth >= RESP_MAX_DEPTH) {
            return protocol_error(p, "arrays nested too deep");
        }
        return parse_array(p, v, depth, out);
    default:
        return protocol_error(p, "unknown reply type");
    }
}

static enum resp_status parse_array(struct parser *p, long long count,
                                    int depth, redisReply **out)
{
    redisReply *r = resp_reply_array((size_t)count);
    if (r == NULL) {
        return RESP_NOMEM;
    }
    for (size_t i = 0; i < r->elements; i++) {
        enum resp_status rc = parse_item(p, depth + 1, &r->element[i]);
        if (rc != RESP_OK) {
            resp_reply_free(r); /* unparsed elements are still NULL */
            return rc;
        }
    }
    *out = r;
    return RESP_OK;
}

enum resp_status resp_parse(const char *buf, size_t len, size_t *used,
                            redisReply **out, char *err, size_t errlen)
{
    struct parser p = {buf, len, 0, err, errlen};
    redisReply *r = NULL;
    enum resp_status rc = parse_item(&p, 0, &r);
    if (rc == RESP_OK) {
        *out = r;
        *used = p.pos;
    }
    return rc;
}

/* ---- encoding ------------------------------------------------------------ */

size_t resp_digits(uint64_t n)
{
    size_t d = 1;
    while (n >= 10) {
        n /= 10;
        d++;
    }
    return d;
}

size_t resp_header_len(size_t n)
{
    return 3 + resp_digits(n); /* <kind><n>\r\n */
}

size_t resp_bulk_len(size_t n)
{
    return 5 + resp_digits(n) + n; /* $<n>\r\n<bytes>\r\n */
}

size_t resp_bulks_len(int argc, const size_t *argvlen)
{
    size_t len = 0;
    for (int i = 0; i < argc; i++) {
        len += resp_bulk_len(argvlen[i]);
    }
    return len;
}

size_t resp_command_len(int argc, const size_t *argvlen)
{
    return resp_header_len((size_t)argc) + resp_bulks_len(argc, argvlen);
}

/* Writes v's d decimal digits at p (d from resp_digits). */
static char *put_digits(char *p, uint64_t v, size_t d)
{
    for (size_t i = d; i > 0; i--) {
        p[i - 1] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + d;
}

char *resp_put_header(char *p, char kind, size_t n)
{
    *p++ = kind;
    p = put_digits(p, n, resp_digits(n));
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

char *resp_put_bulk(char *p, const char *s, size_t n)
{
    p = resp_put_header(p, '$', n);
    memcpy(p, s, n);
    p += n;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

char *resp_put_bulk_uint(char *p, uint64_t v)
{
    size_t d = resp_digits(v);
    p = resp_put_header(p, '$', d);
    p = put_digits(p, v, d);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

char *resp_put_bulks(char *p, int argc, const char **argv,
                     const size_t *argvlen)
{
    for (int i = 0; i < argc; i++) {
        p = resp_put_bulk(p, argv[i], argvlen[i]);
    }
    return p;
}

char *resp_put_command(char *p, int argc, const char **argv,
                       const size_t *argvlen)
{
    p = resp_put_header(p, '*', (size_t)argc);
    return resp_put_bulks(p, argc, argv, argvlen);
}
