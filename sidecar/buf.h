/* buf.h: the daemon's one growable byte buffer, and the text built on it.
 *
 * struct bytes is the buffer: live bytes between an offset and a length,
 * appended at the end and consumed from the front, moved to the front
 * before it grows, doubling. Both ends' streams (stream.h) keep their
 * input and output in one; the appends of the lock path are inline.
 *
 * struct buf is a text in one (listings, inspections, the metrics page),
 * whose failure is sticky: once memory runs out (or a formatted piece is
 * too long), every later put is a no-op and buf_failed() says so, so a
 * caller writes a whole text and checks once at the end instead of after
 * each piece. The text is always NUL-terminated once anything was put.
 *
 * Ownership: each owns its data; bytes_free() and buf_free() release it,
 * buf_take() hands a text to the caller. Zeroed, either is empty. */
#ifndef REDLOCKD_BUF_H
#define REDLOCKD_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* A buffer starts at this size when it first needs room, and doubles. */
#define BYTES_MIN 16384
/* A buffer bigger than this (a burst, a large reply) is let go once it is
 * empty, rather than kept for the connection's life. */
#define BYTES_KEEP (1024 * 1024)

/* Bytes [off, len) of data[0, cap) are live: a stream's unsent output or
 * input not yet consumed, or a text being built (off stays 0). A zeroed
 * buffer is empty and owns nothing. */
struct bytes {
    char *data; /* owned */
    size_t off, len, cap;
};

/* bytes_used: the live bytes of b. */
static inline size_t bytes_used(const struct bytes *b)
{
    return b->len - b->off;
}

/* bytes_room: room at b's end, past its live bytes. */
static inline size_t bytes_room(const struct bytes *b)
{
    return b->cap - b->len;
}

/* bytes_make_room: room for n more bytes at b's end: the live bytes
 * move to the front when the end is short, then the buffer doubles (from
 * BYTES_MIN) until they fit. Returns 0, or -1 (b unchanged but for
 * the move) when memory ran out, or n cannot be had at all. */
int bytes_make_room(struct bytes *b, size_t n);

/* bytes_reserve: bytes_make_room, inline when the end has the
 * room already (every append of the lock path). */
static inline int bytes_reserve(struct bytes *b, size_t n)
{
    return bytes_room(b) >= n ? 0 : bytes_make_room(b, n);
}

/* bytes_append: copies p[0, n) after b's live bytes. Returns 0, or
 * -1 (b's live bytes unchanged) when memory ran out. Inline: it is every
 * command's and every answer's copy into its output. */
static inline int bytes_append(struct bytes *b, const void *p,
                                    size_t n)
{
    if (bytes_reserve(b, n) != 0) {
        return -1;
    }
    if (n > 0) {
        memcpy(b->data + b->len, p, n);
        b->len += n;
    }
    return 0;
}

/* bytes_consume: drops the first n live bytes (n at most
 * bytes_used); an emptied buffer starts again at its front. */
static inline void bytes_consume(struct bytes *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len) {
        b->off = b->len = 0;
    }
}

/* bytes_clear: empties b, and frees it past BYTES_KEEP. */
void bytes_clear(struct bytes *b);

/* bytes_free: frees b's memory; b is empty after. */
void bytes_free(struct bytes *b);

struct buf {
    struct bytes b; /* the text, b.off always 0; NULL data until a put */
    bool failed;    /* a put did not fit memory: the text is void */
};

/* buf_data, buf_len: the text so far (NULL before the first put) and its
 * length without the NUL. */
static inline const char *buf_data(const struct buf *t)
{
    return t->b.data;
}

static inline size_t buf_len(const struct buf *t)
{
    return t->b.len;
}

/* buf_reserve: room for n more bytes and the NUL. Returns 0, or -1 (and the
 * text is failed) when out of memory. */
int buf_reserve(struct buf *t, size_t n);

/* buf_put: s[0..n) appended. */
void buf_put(struct buf *t, const char *s, size_t n);

/* buf_str: the NUL-terminated s appended. */
void buf_str(struct buf *t, const char *s);

/* buf_printf: printf's output appended, however long. */
__attribute__((format(printf, 2, 3))) void buf_printf(struct buf *t,
                                                      const char *fmt, ...);

/* buf_fail: marks the text void (a piece the caller could not make). */
static inline void buf_fail(struct buf *t)
{
    t->failed = true;
}

/* buf_failed: whether a put failed since the text was empty. */
bool buf_failed(const struct buf *t);

/* buf_take: the text (NUL-terminated, *len its length when len is not
 * NULL), now the caller's to free; NULL when the text failed or nothing
 * was put. The text is empty again either way. */
char *buf_take(struct buf *t, size_t *len);

/* buf_free: releases the text; it is empty again. */
void buf_free(struct buf *t);

#endif
