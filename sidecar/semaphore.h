/* semaphore.h: what a lock operation acts on, as fields, and the names it
 * has on the nodes; pure.
 *
 * An acquire with "permits": N takes one of N slot locks, each a full
 * Redlock mutex. Inside the daemon a lock or a slot is a struct lock_name:
 * the resource as the client named it and the slot's index, set where the
 * request is decoded or the slot chosen, never parsed back from a string.
 * On the nodes a slot's key is "<prefix>sem:<k>:<resource>", apart from
 * every "<prefix>lock:<resource>" key, and all slots of a semaphore
 * announce their release on one channel, "<prefix>wake:\x01*:<resource>",
 * which its wait queue watches: no resource can start with a control
 * character, so that channel never meets a lock's
 * "<prefix>wake:<resource>". Daemons of every version share these names on
 * the same nodes: they stay byte for byte. */
#ifndef REDLOCKD_SEMAPHORE_H
#define REDLOCKD_SEMAPHORE_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "proto_wire.h"

/* Opens the part of a semaphore's channel after "<prefix>wake:". */
#define SEM_MARK '\x01'

/* The longest of "lock:", "sem:<k>:" (k < 10000) and "wake:\x01*:": a key
 * or channel takes at most the prefix, this and the resource. */
#define SEM_NAME_EXTRA 9
_Static_assert(PROTO_PERMITS_MAX <= 10000, "a slot has at most 4 digits");

/* lock_name.slot of a lock that is no semaphore's. */
#define SEM_NO_SLOT (-1)
/* lock_name.slot of a semaphore as a whole: its wait queue and channel. */
#define SEM_QUEUE (-2)

/* A lock, one slot of a semaphore, or a semaphore's queue. */
struct lock_name {
    const char *resource; /* borrowed: the resource as the client named it */
    size_t len;
    int slot; /* 0..permits-1: that slot; SEM_NO_SLOT, SEM_QUEUE */
};

/* sem_name_equal: whether a and b name the same lock, slot or queue. */
static inline bool sem_name_equal(const struct lock_name *a,
                                  const struct lock_name *b)
{
    return a->slot == b->slot && a->len == b->len &&
           memcmp(a->resource, b->resource, a->len) == 0;
}

/* sem_queue_of: the wait queue n belongs to: a lock's own, or for a slot
 * (or the queue itself) its semaphore's, which all its slots share. */
static inline struct lock_name sem_queue_of(const struct lock_name *n)
{
    struct lock_name q = *n;
    if (q.slot != SEM_NO_SLOT) {
        q.slot = SEM_QUEUE;
    }
    return q;
}

/* sem_key: n's key, "<prefix>lock:<resource>" for a lock or
 * "<prefix>sem:<k>:<resource>" for slot k, into out (cap bytes, not
 * NUL-terminated); prefix is plen bytes. Returns its length, 0 for a queue
 * (it has no key) or when it does not fit. */
size_t sem_key(const char *prefix, size_t plen, const struct lock_name *n,
               char *out, size_t cap);

/* sem_channel: the channel n's releases are announced on (and its queue
 * watches), "<prefix>wake:<resource>" for a lock and
 * "<prefix>wake:\x01*:<resource>" for a slot or a semaphore's queue, into
 * out (cap bytes, not NUL-terminated). Returns its length, 0 when it does
 * not fit. */
size_t sem_channel(const char *prefix, size_t plen, const struct lock_name *n,
                   char *out, size_t cap);

/* sem_channel_name: what a channel names, from its part after
 * "<prefix>wake:", s[0..len): a semaphore's queue for "\x01*:<resource>",
 * else a lock. *n borrows s. */
void sem_channel_name(const char *s, size_t len, struct lock_name *n);

/* The permits seen per resource in this daemon, to say once that callers
 * disagree. Bounded: past SEM_SEEN_MAX resources nothing more is kept. */
struct sem_seen;
struct sem_seen *sem_seen_create(void);
void sem_seen_destroy(struct sem_seen *s);

/* sem_seen_note: records n for resource. Returns the other count when this
 * is the first time a different one is seen for it (say it once), else 0. */
unsigned sem_seen_note(struct sem_seen *s, const char *resource, size_t len,
                       unsigned n);

#endif
