/* utf8.h: what both halves of the wire contract ask of UTF-8 (the decoder
 * refuses malformed text, the encoder replaces it), inline so that neither
 * half includes the other. Pure. */
#ifndef REDLOCKD_UTF8_H
#define REDLOCKD_UTF8_H

#include <stdbool.h>
#include <stddef.h>

static inline bool is_cont(unsigned char c)
{
    return (c & 0xc0) == 0x80;
}

/* utf8_len: the length (1..4) of the well-formed UTF-8 sequence at u, which
 * holds n >= 1 bytes, or 0 when it is malformed: a stray continuation byte,
 * an overlong form, a surrogate, a code point above U+10FFFF or a sequence
 * cut short. */
static inline size_t utf8_len(const unsigned char *u, size_t n)
{
    unsigned char c = u[0];

    if (c < 0x80) {
        return 1;
    }
    if (c < 0xc2) { /* continuation byte, or C0/C1: overlong */
        return 0;
    }
    if (c < 0xe0) {
        return n >= 2 && is_cont(u[1]) ? 2 : 0;
    }
    if (c < 0xf0) {
        if (n < 3 || !is_cont(u[1]) || !is_cont(u[2])) {
            return 0;
        }
        if ((c == 0xe0 && u[1] < 0xa0) || (c == 0xed && u[1] >= 0xa0)) {
            return 0; /* overlong, or a UTF-16 surrogate */
        }
        return 3;
    }
    if (c < 0xf5) {
        if (n < 4 || !is_cont(u[1]) || !is_cont(u[2]) || !is_cont(u[3])) {
            return 0;
        }
        if ((c == 0xf0 && u[1] < 0x90) || (c == 0xf4 && u[1] >= 0x90)) {
            return 0; /* overlong, or above U+10FFFF */
        }
        return 4;
    }
    return 0;
}

static inline bool utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;

    while (i < n) {
        size_t k = utf8_len(u + i, n - i);
        if (k == 0) {
            return false;
        }
        i += k;
    }
    return true;
}

/* utf8_clip: the largest length <= max that does not split a sequence of
 * s[0..n). */
static inline size_t utf8_clip(const char *s, size_t n, size_t max)
{
    const unsigned char *u = (const unsigned char *)s;

    if (n <= max) {
        return n;
    }
    while (max > 0 && is_cont(u[max])) {
        max--;
    }
    return max;
}

#endif
