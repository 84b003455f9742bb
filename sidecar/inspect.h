/* inspect.h: who holds what: this daemon's locks, page by page, and what the
 * nodes say of one resource.
 *
 * Called by ops for the locks and inspect operations; answers through
 * call_done() like every operation. Tokens are capabilities: neither
 * answer ever carries one. */
#ifndef REDLOCKD_INSPECT_H
#define REDLOCKD_INSPECT_H

#include <stddef.h>

struct call;
struct cluster;
struct config;
struct lock_name;
struct lock_table;

/* The number of calls waiting for name (a lock; a slot: its semaphore) in
 * this daemon. */
typedef size_t inspect_waiters_fn(const struct lock_name *name, void *priv);

/* inspect_locks: answers call (op locks) at once with one page of the
 * locks in t: prefix, limit and cursor from the request. */
void inspect_locks(struct lock_table *t, inspect_waiters_fn *waiters,
                   void *priv, struct call *call);

/* inspect_resource: asks every usable node, read-only and in one round,
 * what it holds for the call's resource, and answers once all have
 * answered or timed out. t is borrowed and must outlive the answer (it is
 * only read, to tell whether this daemon holds the resource); *inflight is
 * raised until then (shutdown waits for it). Returns 0, or -1 when out of
 * memory (the call is not answered). */
int inspect_resource(struct cluster *c, const struct config *cfg,
                     struct lock_table *t, inspect_waiters_fn *waiters,
                     void *priv, struct call *call, int *inflight);

#endif
