/* locks.h: the table of locks held through this daemon.
 *
 * Locks are found by token (release, extend, complete) and grouped by owning
 * connection (session release on close). A struct lock is owned by the
 * table: locks_add() allocates it, locks_remove() frees it. */
#ifndef REDLOCKD_LOCKS_H
#define REDLOCKD_LOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

struct lock_table;
struct client;

/* The session side of a connection: embedded in struct client, it heads the
 * list of locks that die with the connection. */
struct lock_owner {
    struct lock *head; /* borrowed: locks are owned by the table */
    size_t count;
    size_t waiters;  /* ops: this connection's calls in a wait queue */
    size_t renewing; /* ops: renewals in flight for its locks */
    struct lock *defer_head, *defer_tail; /* borrowed: locks whose renewal
                                             waits for this connection's
                                             budget, oldest first */
    struct client *client; /* borrowed: the connection that embeds this */
};

struct lock {
    char token[PROTO_TOKEN_LEN + 1];
    char *resource; /* owned: heap copy, NUL-terminated */
    size_t resource_len;
    struct lock_owner *owner; /* borrowed: owning NDJSON session, or NULL */
    uint64_t valid_until_us;  /* monotonic end of validity */
    uint32_t ttl_ms;
    bool renew;              /* renewed by the daemon (NDJSON only) */
    uint64_t renew_until_us; /* 0: no cap (renew_max_ms) */
    uint64_t next_renew_us;  /* when the next renewal is due */
    uint64_t renew_sent_us;  /* a renewal in flight was sent then; 0: none */
    unsigned ending;         /* releases and completes in flight: renewal
                                waits, their answer decides */
    bool deferred;           /* in its owner's defer list */
    struct lock *defer_prev, *defer_next;
    struct lock *tok_next; /* table: token hash chain */
    struct lock *own_prev; /* owner's list */
    struct lock *own_next;
    size_t heap_idx; /* table: position in the deadline heap */
};

struct lock_table *locks_create(void);

/* locks_destroy: frees every lock still in the table. */
void locks_destroy(struct lock_table *t);

/* locks_add: a new lock; owner may be NULL. Returns NULL on allocation
 * failure. */
struct lock *locks_add(struct lock_table *t, const char *token,
                       const char *resource, size_t resource_len,
                       struct lock_owner *owner, uint32_t ttl_ms,
                       uint64_t valid_until_us);

struct lock *locks_find(struct lock_table *t, const char *token);

/* locks_remove: unlinks the lock from the table and its owner (and the
 * owner's defer list) and frees it. */
void locks_remove(struct lock_table *t, struct lock *l);

/* locks_set_deadline: the lock's next event time (renewal or expiry) for
 * locks_next_due(); keeps the heap ordered. */
void locks_set_deadline(struct lock_table *t, struct lock *l, uint64_t due_us);

/* locks_peek_due: the lock with the earliest deadline, or NULL. */
struct lock *locks_peek_due(struct lock_table *t, uint64_t *due_us);

size_t locks_count(const struct lock_table *t);

/* locks_defer: queues l (which has an owner) at the tail of its owner's
 * defer list, unless it is there already. */
void locks_defer(struct lock *l);

/* locks_undefer: takes the oldest lock out of owner's defer list and
 * returns it, or NULL when the list is empty. */
struct lock *locks_undefer(struct lock_owner *owner);

/* locks_new_token: 128 random bits (getrandom, else libuuid) as 32 hex chars
 * plus NUL into out. */
void locks_new_token(char out[PROTO_TOKEN_LEN + 1]);

#endif
