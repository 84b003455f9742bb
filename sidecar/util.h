/* util.h: small helpers more than one module needs: the daemon's clock, a
 * hash table keyed by byte strings, hex digits, and a value made safe to
 * quote in a one-line message.
 *
 * The clock is CLOCK_BOOTTIME, not CLOCK_MONOTONIC: both are immune to
 * wall-clock steps, but CLOCK_MONOTONIC stops while the machine is
 * suspended (a laptop lid, a VM paused or live-migrated with its clock
 * frozen) and the keys in Redis keep expiring meanwhile. A lock's validity
 * measured on a clock that stood still would outlast the key.
 * CLOCK_BOOTTIME keeps counting through a suspend; where it does not
 * exist, CLOCK_MONOTONIC. */
#ifndef REDLOCKD_UTIL_H
#define REDLOCKD_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* util_now_us: microseconds on that clock (since boot); never decreases. */
uint64_t util_now_us(void);

/* util_hex_value: the value of hex digit c (0-9, a-f, A-F), or -1. */
int util_hex_value(unsigned char c);

/* util_hex_lower_value: the value of lowercase hex digit c (0-9, a-f), or
 * -1 for every other byte, upper case too: tokens and cursors have one
 * spelling. Inline over a table because a token lookup decodes 32. */
extern const unsigned char util_hex_lower_table[256];
static inline int util_hex_lower_value(unsigned char c)
{
    return (int)util_hex_lower_table[c] - 1;
}

/* util_hex_digit: the lowercase hex digit of v's low four bits. */
char util_hex_digit(unsigned v);

/* util_hex_encode: in[0..n) as 2n lowercase hex digits in out, then a NUL
 * (out holds 2n + 1 bytes). */
void util_hex_encode(const unsigned char *in, size_t n, char *out);

/* util_show: s made safe to quote in a one-line message, in out (outlen
 * bytes, at least 5; UTIL_SHOW_MAX + 4 holds the longest): at most
 * UTIL_SHOW_MAX bytes of s, "..." marking a cut, control characters as
 * '?'. Returns out. */
#define UTIL_SHOW_MAX 80
const char *util_show(const char *s, char *out, size_t outlen);

/* util_dec_u64: the decimal digits of v into buf (room for 20), no NUL;
 * returns their count. snprintf cost ~700 instructions per acquire for
 * the ttl argument. */
size_t util_dec_u64(char *buf, uint64_t v);

/* util_script_error: the error a script call met, from a node's error
 * reply s[0..len): Redis before 7.0 wraps it as "ERR Error running script
 * (call to f_<sha>): @user_script:<line>: <error>", which a cut message
 * would lose; later servers put the error first and are returned whole,
 * as is any other text. Sets *out_len to the length of what it returns,
 * a pointer into s. */
const char *util_script_error(const char *s, size_t len, size_t *out_len);

/* util_fnv1a: the 64-bit FNV-1a hash of s[0..len). */
uint64_t util_fnv1a(const char *s, size_t len);

/* ---- hash table --------------------------------------------------------
 *
 * Chained, with a fixed number of buckets (a power of two) chosen at init.
 * Intrusive: the caller embeds a struct util_hnode in its own object, which
 * it allocates and frees itself; the table only links the nodes. The key
 * bytes are borrowed from the object and must not change while it is in
 * the table. UTIL_CONTAINER_OF gets the object back from its node. */

struct util_hnode {
    const char *key; /* borrowed: owned by the object that embeds this */
    size_t key_len;
    size_t hash;             /* util_fnv1a(key) */
    struct util_hnode *next; /* the bucket's chain */
};

struct util_htable {
    struct util_hnode **buckets; /* owned: the chains' heads */
    size_t mask;                 /* buckets - 1 */
    size_t count;                /* nodes in the table */
};

#define UTIL_CONTAINER_OF(ptr, type, member)                                   \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* util_htable_init: an empty table of n_buckets (a power of two) chains.
 * Returns 0, or -1 out of memory (t is then safe to free). */
int util_htable_init(struct util_htable *t, size_t n_buckets);

/* util_htable_free: frees the buckets, not the objects still linked (walk
 * them first with util_htable_first/next); safe on a zeroed table. */
void util_htable_free(struct util_htable *t);

/* util_htable_find: the node whose key is key[0..len), or NULL. */
struct util_hnode *util_htable_find(const struct util_htable *t,
                                    const char *key, size_t len);

/* util_htable_add: links n under key[0..len) (borrowed, see above); the
 * key must not be in the table yet. */
void util_htable_add(struct util_htable *t, struct util_hnode *n,
                     const char *key, size_t len);

/* util_htable_remove: unlinks n, which must be in t. */
void util_htable_remove(struct util_htable *t, struct util_hnode *n);

/* util_htable_first / util_htable_next: every node once, in no particular
 * order; NULL at the end. Take the next node before removing (or freeing)
 * the current one; removing any other node ends the walk's validity. */
struct util_hnode *util_htable_first(const struct util_htable *t);
struct util_hnode *util_htable_next(const struct util_htable *t,
                                    const struct util_hnode *n);

/* util_is_space: whether c is whitespace between requests, NDJSON or HTTP
 * (space, tab, CR, LF). */
bool util_is_space(unsigned char c);

#endif
