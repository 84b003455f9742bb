/* util.c: the daemon's clock, hex digits, quoting, and a string-keyed hash
 * table (see util.h). */
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t util_now_us(void)
{
    struct timespec ts;
#ifdef CLOCK_BOOTTIME
    if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0)
#endif
    {
        clock_gettime(CLOCK_MONOTONIC, &ts);
    }
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int util_hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* A digit's value plus one, so that every other byte is 0. */
const unsigned char util_hex_lower_table[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,
    ['6'] = 7,  ['7'] = 8,  ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12,
    ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
};

char util_hex_digit(unsigned v)
{
    return "0123456789abcdef"[v & 0xfu];
}

void util_hex_encode(const unsigned char *in, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = util_hex_digit(in[i] >> 4);
        out[2 * i + 1] = util_hex_digit(in[i]);
    }
    out[2 * n] = '\0';
}

const char *util_show(const char *s, char *out, size_t outlen)
{
    size_t n = 0;
    size_t cap = outlen - 4; /* room for "..." and the NUL */

    if (cap > UTIL_SHOW_MAX) {
        cap = UTIL_SHOW_MAX;
    }
    for (; s[n] != '\0' && n < cap; n++) {
        unsigned char c = (unsigned char)s[n];

        out[n] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (s[n] != '\0') {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
    return out;
}

size_t util_dec_u64(char *buf, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    for (size_t i = 0; i < n; i++) {
        buf[i] = tmp[n - 1 - i];
    }
    return n;
}

const char *util_script_error(const char *s, size_t len, size_t *out_len)
{
    static const char wrap[] = "ERR Error running script";
    static const char at[] = "@user_script:";
    const size_t wlen = sizeof(wrap) - 1;
    const size_t alen = sizeof(at) - 1;

    *out_len = len;
    if (len < wlen || memcmp(s, wrap, wlen) != 0) {
        return s;
    }
    for (size_t i = wlen; i + alen <= len; i++) {
        if (memcmp(s + i, at, alen) != 0) {
            continue;
        }
        size_t j = i + alen;
        while (j < len && s[j] >= '0' && s[j] <= '9') {
            j++;
        }
        if (j + 1 < len && s[j] == ':' && s[j + 1] == ' ') {
            *out_len = len - (j + 2);
            return s + j + 2;
        }
        return s;
    }
    return s;
}

uint64_t util_fnv1a(const char *s, size_t len)
{
    /* The published 64-bit offset basis and prime (test_util.c checks
     * the published vectors). */
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* ---- hash table -------------------------------------------------------- */

int util_htable_init(struct util_htable *t, size_t n_buckets)
{
    t->buckets = calloc(n_buckets, sizeof(*t->buckets));
    t->mask = n_buckets - 1;
    t->count = 0;
    return t->buckets != NULL ? 0 : -1;
}

void util_htable_free(struct util_htable *t)
{
    free(t->buckets);
    t->buckets = NULL;
    t->count = 0;
}

struct util_hnode *util_htable_find(const struct util_htable *t,
                                    const char *key, size_t len)
{
    size_t h = (size_t)util_fnv1a(key, len);
    struct util_hnode *n = t->buckets[h & t->mask];
    while (n != NULL && (n->hash != h || n->key_len != len ||
                         memcmp(n->key, key, len) != 0)) {
        n = n->next;
    }
    return n;
}

void util_htable_add(struct util_htable *t, struct util_hnode *n,
                     const char *key, size_t len)
{
    n->key = key;
    n->key_len = len;
    n->hash = (size_t)util_fnv1a(key, len);
    n->next = NULL;
    /* At the chain's end: a walk meets keys in the order they came. */
    struct util_hnode **pp = &t->buckets[n->hash & t->mask];
    while (*pp != NULL) {
        pp = &(*pp)->next;
    }
    *pp = n;
    t->count++;
}

void util_htable_remove(struct util_htable *t, struct util_hnode *n)
{
    struct util_hnode **pp = &t->buckets[n->hash & t->mask];
    while (*pp != n) {
        pp = &(*pp)->next;
    }
    *pp = n->next;
    n->next = NULL;
    t->count--;
}

/* The first node in bucket b or a later one. */
static struct util_hnode *first_from(const struct util_htable *t, size_t b)
{
    if (t->buckets == NULL) {
        return NULL;
    }
    for (; b <= t->mask; b++) {
        if (t->buckets[b] != NULL) {
            return t->buckets[b];
        }
    }
    return NULL;
}

struct util_hnode *util_htable_first(const struct util_htable *t)
{
    return first_from(t, 0);
}

struct util_hnode *util_htable_next(const struct util_htable *t,
                                    const struct util_hnode *n)
{
    if (n->next != NULL) {
        return n->next;
    }
    return first_from(t, (n->hash & t->mask) + 1);
}

bool util_is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}
