/* buf.h: a growable byte buffer, the one the daemon builds its longer
 * texts in (listings, inspections, the metrics page).
 *
 * A failure is sticky: once memory runs out (or a formatted piece is too
 * long), every later put is a no-op and buf_failed() says so, so a caller
 * writes a whole text and checks once at the end instead of after each
 * piece. The text is always NUL-terminated once anything was put.
 *
 * Ownership: the buffer owns data; buf_free() releases it, buf_take() hands
 * it to the caller. A zeroed struct buf is an empty buffer. */
#ifndef REDLOCKD_BUF_H
#define REDLOCKD_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct buf {
    char *data;  /* owned; NULL until the first put */
    size_t len;  /* bytes in data, not counting the NUL */
    size_t cap;  /* bytes allocated */
    bool failed; /* a put did not fit memory: the text is void */
};

/* buf_reserve: room for n more bytes and the NUL. Returns 0, or -1 (and the
 * buffer is failed) when out of memory. */
int buf_reserve(struct buf *b, size_t n);

/* buf_put: s[0..n) appended. */
void buf_put(struct buf *b, const char *s, size_t n);

/* buf_str: the NUL-terminated s appended. */
void buf_str(struct buf *b, const char *s);

/* buf_printf: printf's output appended, however long. */
__attribute__((format(printf, 2, 3))) void buf_printf(struct buf *b,
                                                      const char *fmt, ...);

/* buf_failed: whether a put failed since the buffer was empty. */
bool buf_failed(const struct buf *b);

/* buf_take: the text (NUL-terminated, *len its length when len is not
 * NULL), now the caller's to free; NULL when the buffer failed or nothing
 * was put. The buffer is empty again either way. */
char *buf_take(struct buf *b, size_t *len);

/* buf_free: releases the text; the buffer is empty again. */
void buf_free(struct buf *b);

#endif
