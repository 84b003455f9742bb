/* locks.c: the table of locks held through this daemon.
 *
 * A chained hash on the token finds a lock in O(1); a binary min-heap on
 * each lock's next deadline (renewal due, or validity end) lets one timer
 * serve every lock; a doubly-linked list per owner releases a session's
 * locks when its connection closes. */
#include "locks.h"

#include <stdlib.h>
#include <string.h>

#include <sys/random.h>
#include <sys/types.h>

#include <uuid/uuid.h>

struct lock_table {
    struct lock **buckets;
    size_t n_buckets; /* power of two */
    size_t count;
    struct lock **heap; /* min-heap on heap_due[] */
    uint64_t *heap_due;
    size_t heap_len, heap_cap;
};

#define HEAP_NONE ((size_t)-1)

static size_t token_hash(const char *token)
{
    /* Tokens are uniformly random hex: the first 16 chars make a fine
     * hash without mixing. */
    size_t h = 0;
    for (int i = 0; i < 16; i++) {
        char ch = token[i];
        unsigned v = (unsigned)(ch <= '9' ? ch - '0' : ch - 'a' + 10);
        h = (h << 4) | (v & 0xfu);
    }
    return h;
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
            free(l->resource);
            free(l);
            l = next;
        }
    }
    free(t->buckets);
    free(t->heap);
    free(t->heap_due);
    free(t);
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
            size_t h = token_hash(l->token) & (nb - 1);
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

static void heap_swap(struct lock_table *t, size_t a, size_t b)
{
    struct lock *la = t->heap[a];
    uint64_t da = t->heap_due[a];
    t->heap[a] = t->heap[b];
    t->heap_due[a] = t->heap_due[b];
    t->heap[b] = la;
    t->heap_due[b] = da;
    t->heap[a]->heap_idx = a;
    t->heap[b]->heap_idx = b;
}

static void heap_up(struct lock_table *t, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (t->heap_due[p] <= t->heap_due[i]) {
            break;
        }
        heap_swap(t, p, i);
        i = p;
    }
}

static void heap_down(struct lock_table *t, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < t->heap_len && t->heap_due[l] < t->heap_due[m]) {
            m = l;
        }
        if (r < t->heap_len && t->heap_due[r] < t->heap_due[m]) {
            m = r;
        }
        if (m == i) {
            break;
        }
        heap_swap(t, m, i);
        i = m;
    }
}

static void heap_remove(struct lock_table *t, struct lock *l)
{
    size_t i = l->heap_idx;
    if (i == HEAP_NONE) {
        return;
    }
    size_t last = t->heap_len - 1;
    if (i != last) {
        heap_swap(t, i, last);
    }
    t->heap_len--;
    l->heap_idx = HEAP_NONE;
    if (i < t->heap_len) {
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
    size_t cap = t->heap_cap ? t->heap_cap * 2 : 256;
    struct lock **h = realloc(t->heap, cap * sizeof(*h));
    if (h == NULL) {
        return -1;
    }
    t->heap = h;
    uint64_t *d = realloc(t->heap_due, cap * sizeof(*d));
    if (d == NULL) {
        return -1; /* the larger heap stays; heap_cap says what both hold */
    }
    t->heap_due = d;
    t->heap_cap = cap;
    return 0;
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
    l->heap_idx = i;
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
                       const char *resource, size_t resource_len,
                       struct lock_owner *owner, uint32_t ttl_ms,
                       uint64_t valid_until_us)
{
    if (heap_reserve(t) != 0) {
        return NULL;
    }
    struct lock *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        return NULL;
    }
    l->resource = malloc(resource_len + 1);
    if (l->resource == NULL) {
        free(l);
        return NULL;
    }
    memcpy(l->resource, resource, resource_len);
    l->resource[resource_len] = '\0';
    l->resource_len = resource_len;
    memcpy(l->token, token, PROTO_TOKEN_LEN);
    l->token[PROTO_TOKEN_LEN] = '\0';
    l->ttl_ms = ttl_ms;
    l->valid_until_us = valid_until_us;
    l->heap_idx = HEAP_NONE;
    if (t->count >= t->n_buckets) {
        table_grow(t);
    }
    size_t h = token_hash(l->token) & (t->n_buckets - 1);
    l->tok_next = t->buckets[h];
    t->buckets[h] = l;
    t->count++;
    l->owner = owner;
    if (owner != NULL) {
        l->own_next = owner->head;
        if (owner->head != NULL) {
            owner->head->own_prev = l;
        }
        owner->head = l;
        owner->count++;
    }
    return l;
}

struct lock *locks_find(struct lock_table *t, const char *token)
{
    size_t h = token_hash(token) & (t->n_buckets - 1);
    for (struct lock *l = t->buckets[h]; l != NULL; l = l->tok_next) {
        if (memcmp(l->token, token, PROTO_TOKEN_LEN) == 0) {
            return l;
        }
    }
    return NULL;
}

static void defer_unlink(struct lock *l)
{
    if (!l->deferred) {
        return;
    }
    if (l->defer_prev != NULL) {
        l->defer_prev->defer_next = l->defer_next;
    } else {
        l->owner->defer_head = l->defer_next;
    }
    if (l->defer_next != NULL) {
        l->defer_next->defer_prev = l->defer_prev;
    } else {
        l->owner->defer_tail = l->defer_prev;
    }
    l->defer_prev = l->defer_next = NULL;
    l->deferred = false;
}

void locks_defer(struct lock *l)
{
    if (l->deferred || l->owner == NULL) {
        return;
    }
    l->deferred = true;
    l->defer_next = NULL;
    l->defer_prev = l->owner->defer_tail;
    if (l->owner->defer_tail != NULL) {
        l->owner->defer_tail->defer_next = l;
    } else {
        l->owner->defer_head = l;
    }
    l->owner->defer_tail = l;
}

struct lock *locks_undefer(struct lock_owner *owner)
{
    struct lock *l = owner->defer_head;
    if (l != NULL) {
        defer_unlink(l);
    }
    return l;
}

void locks_remove(struct lock_table *t, struct lock *l)
{
    size_t h = token_hash(l->token) & (t->n_buckets - 1);
    struct lock **pp = &t->buckets[h];
    while (*pp != NULL && *pp != l) {
        pp = &(*pp)->tok_next;
    }
    if (*pp == l) {
        *pp = l->tok_next;
        t->count--;
    }
    if (l->owner != NULL) {
        if (l->own_prev != NULL) {
            l->own_prev->own_next = l->own_next;
        } else {
            l->owner->head = l->own_next;
        }
        if (l->own_next != NULL) {
            l->own_next->own_prev = l->own_prev;
        }
        l->owner->count--;
        defer_unlink(l);
    }
    heap_remove(t, l);
    free(l->resource);
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
    static const char hex[] = "0123456789abcdef";
    unsigned char u[16];
    random_token_bytes(u);
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[u[i] >> 4];
        out[2 * i + 1] = hex[u[i] & 0xf];
    }
    out[PROTO_TOKEN_LEN] = '\0';
}
