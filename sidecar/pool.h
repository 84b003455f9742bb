/* pool.h: a bounded free list of same-sized objects, for what the lock
 * path allocates and frees many times a second (calls, cluster ops,
 * batches, node commands, reply objects).
 *
 * pool_put keeps at most `keep` objects and frees the rest, so a burst
 * leaves behind no more than that; pool_get reuses one or mallocs. A kept
 * object's first bytes hold the link to the next, so objects must be at
 * least a pointer in size, and pool_get returns them uninitialised: the
 * caller sets every field it reads. Single-threaded, like the daemon.
 *
 * An object may own resources kept across reuse (an event, a buffer) past
 * its first pointer's bytes; the pool's drop function then frees one
 * object whole, wherever the pool lets one go (over the bound, drained).
 *
 * Ownership: the pool owns the objects on its free list; pool_drain frees
 * them (at teardown, before leak checkers look). An object handed out is
 * the caller's until it is put back or dropped. */
#ifndef REDLOCKD_POOL_H
#define REDLOCKD_POOL_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Frees one object and what it owns; free() when the pool has none. */
typedef void pool_drop_fn(void *o);

struct pool {
    void *free;     /* owned: kept objects, linked through their first bytes */
    pool_drop_fn *drop; /* how an object is freed; NULL: free() */
    size_t size;    /* bytes of one object */
    unsigned count; /* objects on the free list */
    unsigned keep;  /* most objects kept on it */
};

/* pool_init: an empty pool of objects of size bytes (at least a pointer),
 * keeping at most keep of them; drop (or NULL) frees one. */
static inline void pool_init(struct pool *p, size_t size, unsigned keep,
                             pool_drop_fn *drop)
{
    p->free = NULL;
    p->drop = drop;
    p->size = size < sizeof(void *) ? sizeof(void *) : size;
    p->count = 0;
    p->keep = keep;
}

/* pool_get: a kept object, or NULL when none is kept (the caller then
 * makes one: with pool_new, or its own way when it owns more). */
static inline void *pool_get(struct pool *p)
{
    void *o = p->free;
    if (o != NULL) {
        memcpy(&p->free, o, sizeof(void *));
        p->count--;
    }
    return o;
}

/* pool_new: a kept object, or a new one from malloc; NULL when out of
 * memory. For objects that own nothing beyond their bytes. */
static inline void *pool_new(struct pool *p)
{
    void *o = pool_get(p);
    return o != NULL ? o : malloc(p->size);
}

static inline void pool_drop(struct pool *p, void *o)
{
    if (p->drop != NULL) {
        p->drop(o);
    } else {
        free(o);
    }
}

/* pool_put: o (or NULL) kept for reuse, or dropped when the pool already
 * keeps its bound. */
static inline void pool_put(struct pool *p, void *o)
{
    if (o == NULL) {
        return;
    }
    if (p->count >= p->keep) {
        pool_drop(p, o);
        return;
    }
    memcpy(o, &p->free, sizeof(void *));
    p->free = o;
    p->count++;
}

/* pool_drain: frees every kept object; the pool stays usable. */
static inline void pool_drain(struct pool *p)
{
    while (p->free != NULL) {
        void *o = p->free;
        memcpy(&p->free, o, sizeof(void *));
        pool_drop(p, o);
    }
    p->count = 0;
}

#endif
