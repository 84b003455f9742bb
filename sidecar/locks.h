/* locks.h: the table of locks held through this daemon.
 *
 * Locks are found by token (release, extend, complete) and grouped by owning
 * connection (session release on close). A struct lock is owned by the
 * table: locks_add() allocates it (with its resource, in one block),
 * locks_remove() frees it. The table also
 * keeps locks in the order they were added, for listing by pages
 * (locks_scan). */
#ifndef REDLOCKD_LOCKS_H
#define REDLOCKD_LOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "list.h"
#include "proto.h"
#include "semaphore.h"

struct lock_table;
struct lock_owner;

/* Sends the owner's connection an unsolicited event line (json[0..len), no
 * newline), such as a lost event. */
typedef void lock_owner_event_fn(struct lock_owner *owner, const char *json,
                                 size_t len);

/* Closes the owner's connection at shutdown: its calls in flight are
 * answered shutting_down, what is queued for it is written, and its session
 * locks are released (ops_client_closed) before this returns; the owner may
 * be freed by then. */
typedef void lock_owner_close_fn(struct lock_owner *owner);

/* The session side of a connection: embedded in the server's connection, it
 * heads the list of locks that die with the connection. Ops and the lock
 * table hold it as an opaque handle; they reach the connection only through
 * the callbacks the server set. */
struct lock_owner {
    /* borrowed: locks are owned by the table. The list's tail from
     * defer_head on (NULL: none) are the locks whose renewal waits for this
     * connection's budget, oldest first (locks_defer), so that waiting
     * costs a lock no links of its own. struct lock by own_link. */
    struct list locks;
    struct lock *defer_head;
    size_t count;
    size_t waiters;  /* ops: this connection's calls in a wait queue */
    size_t renewing; /* ops: renewals in flight for its locks */
    /* server: set at accept; ops reaches the connection only so */
    lock_owner_event_fn *event_cb;
    lock_owner_close_fn *close_cb;
    uint64_t conn_id; /* server: the connection's id, for listings */
    bool has_cred;    /* server: pid/uid/gid read by SO_PEERCRED */
    int pid;
    unsigned uid, gid;
};

/* One held lock. 100k renewing locks is a load the bench keeps, so the
 * layout is packed: the 8-byte fields first, then the 4-byte ones, the
 * 2-byte resource length, permits and slot, then the token's 16 bytes
 * (not its 32 hex digits) and the flags, and the resource inline at the
 * end (one allocation per lock, sized to its resource), and after it the
 * fence, only when there is one (locks_fence). */
struct lock {
    struct lock_owner *owner; /* borrowed: owning NDJSON session, or NULL */
    struct lock *tok_next;    /* table: token hash chain */
    struct list_node own_link; /* owner's list */
    uint64_t valid_until_us; /* monotonic end of validity */
    uint64_t next_renew_us;  /* when the next renewal is due */
    uint64_t renew_sent_us;  /* a renewal in flight was sent then; 0: none */
    uint64_t seq;            /* table: order of addition, from 1; the cursor */
    uint64_t added_us;       /* ops: monotonic time the acquisition answered */
    uint32_t ttl_ms;
    uint32_t ending;       /* releases and completes in flight: renewal
                              waits, their answer decides */
    uint32_t heap_idx;     /* table: position in the deadline heap */
    uint32_t order_idx;    /* table: position in the addition order */
    uint32_t renew_max_ms; /* ops: renewed until added_us + this; 0: no cap */
    uint32_t ttl_sent_max_ms; /* the longest ttl its acquire, renewals and
                                 extends asked for: how long a node may
                                 keep it after a give-up */
    uint16_t resource_len;    /* at most PROTO_RESOURCE_MAX */
    uint16_t permits;         /* ops: a semaphore's slot (of permits), or 0 */
    int16_t slot;             /* its slot, or SEM_NO_SLOT (locks_name) */
    unsigned char token_raw[PROTO_TOKEN_LEN / 2]; /* locks_token_hex() */
    bool renew : 1;     /* renewed by the daemon (NDJSON only) */
    bool deferred : 1;  /* in its owner's list's deferred tail */
    bool has_fence : 1; /* acquired with fence (locks_fence) */
    bool retrying : 1;  /* renew: its last renewal failed, the retry waits
                           for its own time (never sent early) */
    char resource[];    /* NUL-terminated, part of this allocation */
};

_Static_assert(PROTO_PERMITS_MAX <= UINT16_MAX,
               "a lock's permits are kept in 16 bits");
_Static_assert(PROTO_PERMITS_MAX <= INT16_MAX,
               "a lock's slot is kept in 16 bits");
_Static_assert(PROTO_RESOURCE_MAX <= UINT16_MAX,
               "a lock's resource length is kept in 16 bits");

struct lock_table *locks_create(void);

/* locks_destroy: frees every lock still in the table. */
void locks_destroy(struct lock_table *t);

/* locks_add: a new lock under token (PROTO_TOKEN_LEN lowercase hex, as
 * locks_new_token makes) on name (a lock or a slot; its resource is
 * copied); owner may be NULL; fence: the fencing token it was acquired
 * with, or NULL. Returns NULL on allocation failure, a token of another
 * shape, or a name that is no lock or slot of one. */
struct lock *locks_add(struct lock_table *t, const char *token,
                       const struct lock_name *name, struct lock_owner *owner,
                       uint32_t ttl_ms, uint64_t valid_until_us,
                       const int64_t *fence);

/* locks_name: what l is a lock on; it borrows l's resource. */
static inline struct lock_name locks_name(const struct lock *l)
{
    return (struct lock_name){l->resource, l->resource_len, l->slot};
}

/* locks_fence: l's fencing token into *fence; false when it has none. */
bool locks_fence(const struct lock *l, int64_t *fence);

/* locks_owner_first: owner's first lock (the newest not deferred), or
 * NULL; locks_owner_next: the one after l in its owner's list, or NULL. */
static inline struct lock *locks_owner_first(const struct lock_owner *owner)
{
    return LIST_ITEM(owner->locks.head, struct lock, own_link);
}

static inline struct lock *locks_owner_next(const struct lock *l)
{
    return LIST_ITEM(l->own_link.next, struct lock, own_link);
}

/* locks_find: the lock whose token is the hex string token, or NULL. */
struct lock *locks_find(struct lock_table *t, const char *token);

/* locks_token_hex: l's token as PROTO_TOKEN_LEN lowercase hex digits plus
 * NUL into out. */
void locks_token_hex(const struct lock *l, char out[PROTO_TOKEN_LEN + 1]);

/* locks_remove: unlinks the lock from the table and its owner's list and
 * frees it. */
void locks_remove(struct lock_table *t, struct lock *l);

/* locks_set_deadline: the lock's next event time (renewal or expiry) for
 * locks_next_due(); keeps the heap ordered. */
void locks_set_deadline(struct lock_table *t, struct lock *l, uint64_t due_us);

/* locks_peek_due: the lock with the earliest deadline, or NULL. */
struct lock *locks_peek_due(struct lock_table *t, uint64_t *due_us);

size_t locks_count(const struct lock_table *t);

/* locks_scan: one page of the locks in the order they were added, after
 * the lock numbered after (0: from the start), whose resource (a slot's:
 * its semaphore's) begins with prefix[0..prefix_len). At most out_max locks go
 * to out (borrowed: valid until the table changes), and at most visit_max
 * entries are looked at, so a page costs bounded time whatever the table holds.
 * *next is the number to resume after, or 0 when the scan reached the end.
 * Returns the number of locks written. */
size_t locks_scan(const struct lock_table *t, uint64_t after,
                  const char *prefix, size_t prefix_len, size_t visit_max,
                  struct lock **out, size_t out_max, uint64_t *next);
/* locks_defer: queues l (which has an owner) at the tail of its owner's
 * deferred locks, unless it is there already. */
void locks_defer(struct lock *l);

/* locks_undefer: takes the oldest lock out of owner's deferred locks and
 * returns it, or NULL when there is none. */
struct lock *locks_undefer(struct lock_owner *owner);

/* locks_new_token: 128 random bits (getrandom, else libuuid) as 32 hex chars
 * plus NUL into out. */
void locks_new_token(char out[PROTO_TOKEN_LEN + 1]);

#endif
