/* buf.c: the growable byte buffer of buf.h. Doubling growth from 1 KiB:
 * the texts built here run from a few hundred bytes to a listing of
 * thousands of locks. */
#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_FIRST 1024

int buf_reserve(struct buf *b, size_t n)
{
    if (b->failed) {
        return -1;
    }
    if (n < SIZE_MAX - b->len && b->len + n + 1 <= b->cap) {
        return 0;
    }
    if (n >= SIZE_MAX / 2 - b->len) {
        b->failed = true;
        return -1;
    }
    size_t need = b->len + n + 1;
    size_t cap = b->cap ? b->cap : BUF_FIRST;
    while (cap < need) {
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (p == NULL) {
        b->failed = true;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void buf_put(struct buf *b, const char *s, size_t n)
{
    if (buf_reserve(b, n) != 0) {
        return;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void buf_str(struct buf *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
    /* Formatted in place: most pieces fit what is left, and one that does
     * not is formatted again once the room is there. */
    for (int tries = 0; tries < 2; tries++) {
        if (buf_reserve(b, 0) != 0) {
            return;
        }
        size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->data + b->len, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        if (buf_reserve(b, (size_t)n) != 0) {
            return;
        }
    }
    b->failed = true; /* the text changed length between two tries */
}

bool buf_failed(const struct buf *b)
{
    return b->failed;
}

char *buf_take(struct buf *b, size_t *len)
{
    char *p = NULL;
    if (!b->failed && b->data != NULL) {
        p = b->data;
        if (len != NULL) {
            *len = b->len;
        }
        b->data = NULL;
    }
    buf_free(b);
    return p;
}

void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->failed = false;
}
