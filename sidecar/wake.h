/* wake.h: cross-daemon wake-ups for waiters.
 *
 * The release and complete scripts PUBLISH on <prefix>wake:<resource> (a
 * semaphore's slot: on its semaphore's channel, sem_channel). While this
 * daemon has waiters, it keeps one subscriber connection per node and
 * subscribes to the channels of the locks and semaphores it waits for, so a
 * waiter learns of a release in another daemon within milliseconds instead of
 * after a back-off. With no waiters left, the subscriber connections are
 * closed. */
#ifndef REDLOCKD_WAKE_H
#define REDLOCKD_WAKE_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct config;
struct lock_name;
struct wake;

/* Called for every release or completion announced on a watched channel,
 * with what it names (a lock, or a semaphore's queue; borrowed for the
 * call); several nodes announce the same event, so expect repeats. */
typedef void wake_fn(const struct lock_name *name, void *priv);

/* wake_create: nothing connects until the first wake_watch(). cfg is
 * borrowed and must outlive the wake. */
struct wake *wake_create(struct event_base *base, const struct config *cfg,
                         wake_fn *cb, void *priv);
void wake_destroy(struct wake *w);

/* wake_watch / wake_unwatch: start or stop listening on name's channel (a
 * lock's, or a semaphore queue's); returns 0 or -1 (out of memory: the
 * waiter falls back to its back-off). */
int wake_watch(struct wake *w, const struct lock_name *name);
void wake_unwatch(struct wake *w, const struct lock_name *name);

/* wake_possible: some node can carry wake-ups (false only when every
 * node is rediss:// and no TLS context could be made for the
 * subscribers); when false, a waiter must poll. */
bool wake_possible(const struct wake *w);

#endif
