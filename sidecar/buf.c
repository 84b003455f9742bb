/* buf.c: the byte buffer and the text of buf.h. Growth doubles from
 * BYTES_MIN: a stream's reads take that much room at a time, and the texts
 * built here run from a few hundred bytes to a listing of thousands of
 * locks. */
#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int bytes_make_room(struct bytes *b, size_t n)
{
    if (b->off > 0 && b->cap - b->len < n) {
        /* Live bytes move to the front before the buffer grows. */
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->cap - b->len >= n) {
        return 0;
    }
    if (n > SIZE_MAX / 4 - b->len) {
        return -1; /* no doubling reaches it */
    }
    size_t c = b->cap ? b->cap : BYTES_MIN;
    while (c - b->len < n) {
        c *= 2;
    }
    char *nb = realloc(b->data, c);
    if (nb == NULL) {
        return -1;
    }
    b->data = nb;
    b->cap = c;
    return 0;
}

void bytes_clear(struct bytes *b)
{
    b->off = b->len = 0;
    if (b->cap > BYTES_KEEP) {
        bytes_free(b);
    }
}

void bytes_free(struct bytes *b)
{
    free(b->data);
    *b = (struct bytes){0};
}

int buf_reserve(struct buf *t, size_t n)
{
    if (t->failed) {
        return -1;
    }
    if (n >= SIZE_MAX / 4 || bytes_reserve(&t->b, n + 1) != 0) {
        t->failed = true;
        return -1;
    }
    return 0;
}

void buf_put(struct buf *t, const char *s, size_t n)
{
    if (buf_reserve(t, n) != 0) {
        return;
    }
    memcpy(t->b.data + t->b.len, s, n);
    t->b.len += n;
    t->b.data[t->b.len] = '\0';
}

void buf_str(struct buf *t, const char *s)
{
    buf_put(t, s, strlen(s));
}

void buf_printf(struct buf *t, const char *fmt, ...)
{
    /* Formatted in place: most pieces fit what is left, and one that does
     * not is formatted again once the room is there. */
    for (int tries = 0; tries < 2; tries++) {
        if (buf_reserve(t, 0) != 0) {
            return;
        }
        size_t room = bytes_room(&t->b);
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->b.data + t->b.len, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)n < room) {
            t->b.len += (size_t)n;
            return;
        }
        if (buf_reserve(t, (size_t)n) != 0) {
            return;
        }
    }
    t->failed = true; /* the text changed length between two tries */
}

bool buf_failed(const struct buf *t)
{
    return t->failed;
}

char *buf_take(struct buf *t, size_t *len)
{
    char *p = NULL;
    if (!t->failed && t->b.data != NULL) {
        p = t->b.data;
        if (len != NULL) {
            *len = t->b.len;
        }
        t->b.data = NULL;
    }
    buf_free(t);
    return p;
}

void buf_free(struct buf *t)
{
    bytes_free(&t->b);
    t->failed = false;
}
