/* locks.c: the table of locks held through this daemon.
 *
 * A chained hash on the token finds a lock in O(1); a 4-ary min-heap on
 * each lock's next deadline (renewal due, or validity end) lets one timer
 * serve every lock; a doubly-linked list per owner releases a session's
 * locks when its connection closes. */
#include "locks.h"

#include <stdlib.h>
#include <string.h>

#include <sys/random.h>
#include <sys/types.h>

#include <uuid/uuid.h>

#include "rlassert.h"
#include "util.h"

struct lock_table {
    struct lock **buckets;
    size_t n_buckets; /* power of two */
    size_t count;
    struct lock **heap; /* min-heap on heap_due[] */
    uint64_t *heap_due;
    size_t heap_len, heap_cap;
    /* Every lock in the order it was added, for listing. An entry is a
     * lock's address, or, once the lock is removed, its number shifted
     * left with the low bit set (addresses are even): the array stays
     * sorted by number for a binary search without a second array of
     * numbers, and compaction drops the removed entries once they are
     * half. */
    uint64_t *order;
    size_t order_len, order_cap, order_dead;
    uint64_t next_seq;
};

#define HEAP_NONE UINT32_MAX

#define TOKEN_RAW_LEN (PROTO_TOKEN_LEN / 2)

/* The 16 bytes a token's lowercase hex spells. Returns 0, or -1 for
 * anything else, upper case too: the nodes compare the hex, so no other
 * spelling may find a lock. */
static int token_decode(const char *hex, unsigned char out[TOKEN_RAW_LEN])
{
    for (int i = 0; i < TOKEN_RAW_LEN; i++) {
        int h = util_hex_lower_value((unsigned char)hex[2 * i]);
        int l = util_hex_lower_value((unsigned char)hex[2 * i + 1]);
        if (h < 0 || l < 0) {
            return -1;
        }
        out[i] = (unsigned char)(h << 4 | l);
    }
    return 0;
}

static size_t token_hash(const unsigned char raw[TOKEN_RAW_LEN])
{
    /* Tokens are uniformly random: their first bytes make a fine hash
     * without mixing. */
    size_t h;
    memcpy(&h, raw, sizeof(h));
    return h;
}

void locks_token_hex(const struct lock *l, char out[PROTO_TOKEN_LEN + 1])
{
    util_hex_encode(l->token_raw, TOKEN_RAW_LEN, out);
}

struct lock_table *locks_create(void)
{
    struct lock_table *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return NULL;
    }
    t->n_buckets = 1024;
    t->buckets = calloc(t->n_buckets, sizeof(*t->buckets));
    if (t->buckets == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

void locks_destroy(struct lock_table *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < t->n_buckets; i++) {
        struct lock *l = t->buckets[i];
        while (l != NULL) {
            struct lock *next = l->tok_next;
            free(l);
            l = next;
        }
    }
    free(t->buckets);
    free(t->heap);
    free(t->heap_due);
    free(t->order);
    free(t);
}

/* Doubles a pair of parallel arrays (locks and numbers) of *cap entries.
 * Returns 0 or -1; on failure the first may have grown, and *cap still says
 * what both hold. */
static int grow_pair(struct lock ***locks, uint64_t **vals, size_t *cap)
{
    size_t n = *cap ? *cap * 2 : 256;
    struct lock **l = realloc(*locks, n * sizeof(*l));
    if (l == NULL) {
        return -1;
    }
    *locks = l;
    uint64_t *v = realloc(*vals, n * sizeof(*v));
    if (v == NULL) {
        return -1;
    }
    *vals = v;
    *cap = n;
    return 0;
}

/* ---- addition order ------------------------------------------------------ */

static uint64_t order_entry(const struct lock *l)
{
    return (uint64_t)(uintptr_t)l;
}

/* The lock at position i, or NULL when it was removed. */
static struct lock *order_lock(const struct lock_table *t, size_t i)
{
    uint64_t e = t->order[i];
    return (e & 1u) ? NULL : (struct lock *)(uintptr_t)e;
}

static uint64_t order_seq(const struct lock_table *t, size_t i)
{
    uint64_t e = t->order[i];
    return (e & 1u) ? e >> 1 : order_lock(t, i)->seq;
}

/* Drops the removed entries, keeping the order. */
static void order_compact(struct lock_table *t)
{
    size_t k = 0;
    for (size_t i = 0; i < t->order_len; i++) {
        struct lock *l = order_lock(t, i);
        if (l != NULL) {
            t->order[k] = t->order[i];
            l->order_idx = (uint32_t)k;
            k++;
        }
    }
    t->order_len = k;
    t->order_dead = 0;
}

/* Room for one more entry. Returns 0 or -1. */
static int order_reserve(struct lock_table *t)
{
    if (t->order_len < t->order_cap) {
        return 0;
    }
    if (t->order_dead > t->order_len / 4) {
        order_compact(t);
        return 0;
    }
    size_t n = t->order_cap ? t->order_cap * 2 : 256;
    uint64_t *o = realloc(t->order, n * sizeof(*o));
    if (o == NULL) {
        return -1;
    }
    t->order = o;
    t->order_cap = n;
    return 0;
}

static void order_remove(struct lock_table *t, struct lock *l)
{
    t->order[l->order_idx] = (l->seq << 1) | 1u;
    t->order_dead++;
    if (t->order_dead > 1024 && t->order_dead * 2 > t->order_len) {
        order_compact(t);
    }
}

size_t locks_scan(const struct lock_table *t, uint64_t after,
                  const char *prefix, size_t prefix_len, size_t visit_max,
                  struct lock **out, size_t out_max, uint64_t *next)
{
    /* The first entry numbered above after. */
    size_t lo = 0, hi = t->order_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (order_seq(t, mid) <= after) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    size_t i = lo, found = 0, visited = 0;
    while (i < t->order_len && visited < visit_max && found < out_max) {
        struct lock *l = order_lock(t, i++);
        visited++;
        if (l != NULL && l->resource_len >= prefix_len &&
            memcmp(l->resource, prefix, prefix_len) == 0) {
            out[found++] = l;
        }
    }
    *next = i < t->order_len && i > 0 ? order_seq(t, i - 1) : 0;
    return found;
}

static void table_grow(struct lock_table *t)
{
    size_t nb = t->n_buckets * 2;
    struct lock **b = calloc(nb, sizeof(*b));
    if (b == NULL) {
        return; /* keep the longer chains; still correct */
    }
    for (size_t i = 0; i < t->n_buckets; i++) {
        struct lock *l = t->buckets[i];
        while (l != NULL) {
            struct lock *next = l->tok_next;
            size_t h = token_hash(l->token_raw) & (nb - 1);
            l->tok_next = b[h];
            b[h] = l;
            l = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->n_buckets = nb;
}

/* ---- deadline heap ------------------------------------------------------ */

/* Four children a node: half the levels of a binary heap, and a level's
 * children share a cache line of heap_due[]. Each level a lock moves
 * writes its heap_idx, a cache miss with 100,000 locks: a renewal moves
 * its lock down the heap at every send (perf: heap_down was a fifth of
 * the daemon's time holding 100,000 renewing locks, binary). */
#define HEAP_ARITY 4

static void heap_place(struct lock_table *t, size_t i, struct lock *l,
                       uint64_t due_us)
{
    t->heap[i] = l;
    t->heap_due[i] = due_us;
    l->heap_idx = (uint32_t)i;
}

/* The entry at i moves up past every parent due later; the parents move
 * down into the hole it leaves. */
static void heap_up(struct lock_table *t, size_t i)
{
    struct lock *l = t->heap[i];
    uint64_t due = t->heap_due[i];
    while (i > 0) {
        size_t p = (i - 1) / HEAP_ARITY;
        if (t->heap_due[p] <= due) {
            break;
        }
        heap_place(t, i, t->heap[p], t->heap_due[p]);
        i = p;
    }
    heap_place(t, i, l, due);
}

/* The entry at i moves down while a child is due earlier; the earliest
 * child moves up into the hole. */
static void heap_down(struct lock_table *t, size_t i)
{
    struct lock *l = t->heap[i];
    uint64_t due = t->heap_due[i];
    for (;;) {
        size_t c = HEAP_ARITY * i + 1;
        if (c >= t->heap_len) {
            break;
        }
        size_t end =
            t->heap_len - c > HEAP_ARITY ? c + HEAP_ARITY : t->heap_len;
        size_t m = c;
        for (size_t j = c + 1; j < end; j++) {
            if (t->heap_due[j] < t->heap_due[m]) {
                m = j;
            }
        }
        if (t->heap_due[m] >= due) {
            break;
        }
        heap_place(t, i, t->heap[m], t->heap_due[m]);
        i = m;
    }
    heap_place(t, i, l, due);
}

static void heap_remove(struct lock_table *t, struct lock *l)
{
    if (l->heap_idx == HEAP_NONE) {
        return;
    }
    size_t i = l->heap_idx;
    size_t last = --t->heap_len;
    l->heap_idx = HEAP_NONE;
    if (i != last) {
        heap_place(t, i, t->heap[last], t->heap_due[last]);
        heap_down(t, i);
        heap_up(t, i);
    }
}

/* Room in the heap for every lock in the table and one more: locks_add
 * makes it, so that locks_set_deadline never has to allocate (a lock it
 * could not schedule would never be renewed nor expire). Returns 0 or -1. */
static int heap_reserve(struct lock_table *t)
{
    if (t->count < t->heap_cap) {
        return 0;
    }
    return grow_pair(&t->heap, &t->heap_due, &t->heap_cap);
}

void locks_set_deadline(struct lock_table *t, struct lock *l, uint64_t due_us)
{
    if (l->heap_idx != HEAP_NONE) {
        size_t i = l->heap_idx;
        t->heap_due[i] = due_us;
        heap_down(t, i);
        heap_up(t, l->heap_idx);
        return;
    }
    /* heap_len <= count - 1 < heap_cap: locks_add reserved the room. */
    size_t i = t->heap_len++;
    t->heap[i] = l;
    t->heap_due[i] = due_us;
    l->heap_idx = (uint32_t)i;
    heap_up(t, i);
}

struct lock *locks_peek_due(struct lock_table *t, uint64_t *due_us)
{
    if (t->heap_len == 0) {
        return NULL;
    }
    *due_us = t->heap_due[0];
    return t->heap[0];
}

/* ---- table -------------------------------------------------------------- */

struct lock *locks_add(struct lock_table *t, const char *token,
                       const struct lock_name *name, struct lock_owner *owner,
                       uint32_t ttl_ms, uint64_t valid_until_us,
                       const int64_t *fence)
{
    unsigned char raw[TOKEN_RAW_LEN];
    const char *resource = name->resource;
    size_t resource_len = name->len;
    if (token_decode(token, raw) != 0 || resource_len > UINT16_MAX - 1 ||
        name->slot < SEM_NO_SLOT || name->slot > INT16_MAX) {
        return NULL;
    }
    if (heap_reserve(t) != 0 || order_reserve(t) != 0) {
        return NULL;
    }
    /* The resource lives in the lock's own block, from its offset: the
     * struct's tail padding is not wasted. */
    size_t size = offsetof(struct lock, resource) + resource_len + 1 +
                  (fence != NULL ? sizeof(*fence) : 0);
    struct lock *l = calloc(1, size < sizeof(*l) ? sizeof(*l) : size);
    if (l == NULL) {
        return NULL;
    }
    memcpy(l->resource, resource, resource_len);
    l->resource[resource_len] = '\0';
    l->resource_len = (uint16_t)resource_len;
    l->slot = (int16_t)name->slot;
    if (fence != NULL) {
        l->has_fence = true;
        memcpy(l->resource + resource_len + 1, fence, sizeof(*fence));
    }
    memcpy(l->token_raw, raw, TOKEN_RAW_LEN);
    l->ttl_ms = ttl_ms;
    l->ttl_sent_max_ms = ttl_ms;
    l->valid_until_us = valid_until_us;
    l->heap_idx = HEAP_NONE;
    l->seq = ++t->next_seq;
    l->order_idx = (uint32_t)t->order_len;
    t->order[t->order_len++] = order_entry(l);
    if (t->count >= t->n_buckets) {
        table_grow(t);
    }
    size_t h = token_hash(l->token_raw) & (t->n_buckets - 1);
    l->tok_next = t->buckets[h];
    t->buckets[h] = l;
    t->count++;
    l->owner = owner;
    if (owner != NULL) {
        /* At the head: before the deferred tail, if any. */
        list_push_head(&owner->locks, &l->own_link);
        owner->count++;
    }
    return l;
}

bool locks_fence(const struct lock *l, int64_t *fence)
{
    if (!l->has_fence) {
        return false;
    }
    memcpy(fence, l->resource + l->resource_len + 1, sizeof(*fence));
    return true;
}

struct lock *locks_find(struct lock_table *t, const char *token)
{
    unsigned char raw[TOKEN_RAW_LEN];
    if (token == NULL || strnlen(token, PROTO_TOKEN_LEN) < PROTO_TOKEN_LEN ||
        token_decode(token, raw) != 0) {
        return NULL;
    }
    size_t h = token_hash(raw) & (t->n_buckets - 1);
    for (struct lock *l = t->buckets[h]; l != NULL; l = l->tok_next) {
        if (memcmp(l->token_raw, raw, TOKEN_RAW_LEN) == 0) {
            return l;
        }
    }
    return NULL;
}

/* Takes l out of its owner's list, moving the start of the deferred tail
 * past it when it is the first deferred. */
static void owner_unlink(struct lock *l)
{
    struct lock_owner *o = l->owner;
    if (o->defer_head == l) {
        o->defer_head = locks_owner_next(l);
    }
    list_unlink(&o->locks, &l->own_link);
}

void locks_defer(struct lock *l)
{
    if (l->deferred || l->owner == NULL) {
        return;
    }
    struct lock_owner *o = l->owner;
    owner_unlink(l);
    list_push_tail(&o->locks, &l->own_link);
    if (o->defer_head == NULL) {
        o->defer_head = l;
    }
    l->deferred = true;
}

struct lock *locks_undefer(struct lock_owner *owner)
{
    /* The oldest deferred lock stays where it is: the deferred tail now
     * starts after it. */
    struct lock *l = owner->defer_head;
    if (l != NULL) {
        owner->defer_head = locks_owner_next(l);
        l->deferred = false;
    }
    return l;
}

void locks_remove(struct lock_table *t, struct lock *l)
{
    size_t h = token_hash(l->token_raw) & (t->n_buckets - 1);
    struct lock **pp = &t->buckets[h];
    while (*pp != NULL && *pp != l) {
        pp = &(*pp)->tok_next;
    }
    /* A lock is in its bucket from locks_add() until here, and comes here
     * once (it is freed below). */
    RL_ASSERT(*pp == l && t->count > 0);
    *pp = l->tok_next;
    t->count--;
    if (l->owner != NULL) {
        RL_ASSERT(l->owner->count > 0);
        owner_unlink(l);
        l->owner->count--;
    }
    heap_remove(t, l);
    order_remove(t, l);
    free(l);
}

size_t locks_count(const struct lock_table *t)
{
    return t->count;
}

/* 16 random bytes from a pool the kernel's CSPRNG refills, one getrandom(2)
 * call per 256 tokens. libuuid reads the same generator but then reseeds
 * libc's random() on every call (srandom), which made token generation a
 * tenth of the daemon's instructions under load; it remains the fallback
 * where getrandom is unavailable. */
static void random_token_bytes(unsigned char out[16])
{
    static unsigned char pool[4096];
    static size_t left;
    if (left < 16) {
        size_t got = 0;
        while (got < sizeof(pool)) {
            ssize_t n = getrandom(pool + got, sizeof(pool) - got, 0);
            if (n <= 0) {
                break;
            }
            got += (size_t)n;
        }
        if (got < sizeof(pool)) {
            left = 0;
            uuid_t a, b;
            uuid_generate_random(a);
            uuid_generate_random(b);
            /* 122 random bits from a, the 6 fixed ones refilled from b */
            a[6] = (unsigned char)((a[6] & 0x0f) | (b[0] & 0xf0));
            a[8] = (unsigned char)((a[8] & 0x3f) | (b[1] & 0xc0));
            memcpy(out, a, 16);
            return;
        }
        left = sizeof(pool);
    }
    left -= 16;
    memcpy(out, pool + left, 16);
    memset(pool + left, 0, 16); /* a used token leaves no copy behind */
}

void locks_new_token(char out[PROTO_TOKEN_LEN + 1])
{
    unsigned char u[TOKEN_RAW_LEN];
    random_token_bytes(u);
    util_hex_encode(u, TOKEN_RAW_LEN, out);
}
