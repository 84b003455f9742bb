/* givenup.h: the records of locks given up, and the deletes the nodes owe.
 *
 * A lock this daemon gave up (or released, or failed to acquire, while
 * nodes missed the delete) is remembered by token: the token is refused
 * (givenup_refuses), and the compare-and-delete is owed to every node that
 * has not confirmed it (deleted, or never had it). A node down, dropped or
 * paused may run the renewals (or the SET) waiting in its socket when it
 * runs again, and would keep the key, held by nobody, for a ttl; when it
 * comes up (givenup_node_up) it is sent the deletes it owes, in steps,
 * through the givenup_send_fn the caller gave. A record is kept until its
 * bound, past which no node can hold the key, or until no node owes it.
 * The decisions are inline below, pure, and unit-tested. */
#ifndef REDLOCKD_GIVENUP_H
#define REDLOCKD_GIVENUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "redlock.h"
#include "semaphore.h"

struct config;
struct event_base;
struct givenup;
struct node;

/* givenup_send_fn: sends node the compare-and-delete of token on name (a
 * lock or a slot, borrowed for the call) again, on its own (no
 * announcement, no round), whose answer comes back through
 * givenup_answered and givenup_resent. Returns 0 when sent, else nonzero
 * (still owed: sent at the next come-back). */
typedef int givenup_send_fn(void *priv, int node, const struct lock_name *name,
                            const char *token);

/* givenup_create: no records yet, for n nodes (borrowed: nodes, an array
 * the caller fills and keeps, NULL slots allowed) on base; cfg (borrowed)
 * bounds the records (max_locks). send and priv send the deletes again.
 * Returns NULL when out of memory. */
struct givenup *givenup_create(struct event_base *base,
                               const struct config *cfg,
                               struct node *const *nodes, int n,
                               givenup_send_fn *send, void *priv);

/* givenup_add: remembers token on name (its resource copied) as given up
 * until until_us, owed by the nodes in owed (and by those a record of the
 * same token still named). Returns 0, or -1 out of memory (not
 * remembered). */
int givenup_add(struct givenup *gu, const struct lock_name *name,
                const char *token, uint64_t until_us, uint32_t owed);

/* givenup_answered: node i answered res to the delete of given-up token:
 * deleted, or not held there, it owes it no more; anything else (timeout,
 * drop, error) is sent again when the node next comes up. */
void givenup_answered(struct givenup *gu, const char *token, int i,
                      enum redlock_node_result res);

/* givenup_resent: a delete givenup_send_fn sent was answered: a step
 * waiting for room goes on. */
void givenup_resent(struct givenup *gu);

/* givenup_node_up: node i came up: it is sent the deletes it owes. */
void givenup_node_up(struct givenup *gu, int i);

/* givenup_refuses: whether token (PROTO_TOKEN_LEN hex) names a lock given
 * up and not past its bound, on name as givenup_names reads it. */
bool givenup_refuses(const struct givenup *gu, const char *token,
                     const struct lock_name *name);

/* givenup_stop: from now on nothing is sent and no timer armed: the nodes
 * are closing and run their callbacks. */
void givenup_stop(struct givenup *gu);

/* givenup_destroy: frees gu and its records, once no node callback can
 * run any more. */
void givenup_destroy(struct givenup *gu);

/* ---- pure decisions --------------------------------------------------- */

/* givenup_owed_after: the nodes that still owe a record's delete (owed)
 * after node i answered res to it: an answer that proves the key gone
 * there (deleted: RL_OK, not held: RL_BUSY) clears its bit; anything else
 * keeps it. The record goes when none is left. */
static inline uint32_t givenup_owed_after(uint32_t owed, int i,
                                          enum redlock_node_result res)
{
    if (res != RL_OK && res != RL_BUSY) {
        return owed;
    }
    return owed & ~(1u << i);
}

/* givenup_bound: the bound of a record added behind one of bound tail_us
 * (0: none), asked for until_us: records stay oldest first with bounds
 * that never decrease, so one timer at the oldest's serves them all. */
static inline uint64_t givenup_bound(uint64_t tail_us, uint64_t until_us)
{
    return tail_us > until_us ? tail_us : until_us;
}

/* givenup_due: whether node i is sent again a record owed by owed and
 * bounded by until_us, at now_us: it owes it, and a key may still stand. */
static inline bool givenup_due(uint32_t owed, int i, uint64_t until_us,
                               uint64_t now_us)
{
    return (owed & (1u << i)) != 0 && until_us > now_us;
}

/* givenup_names: whether a record of rec answers for asked: any when
 * asked names no resource (len 0), the same lock or slot, or a semaphore's
 * permit asked for by its semaphore's resource, without "permit". */
static inline bool givenup_names(const struct lock_name *rec,
                                 const struct lock_name *asked)
{
    if (asked->len == 0 || sem_name_equal(rec, asked)) {
        return true;
    }
    return rec->slot >= 0 && asked->slot == SEM_NO_SLOT &&
           rec->len == asked->len &&
           memcmp(rec->resource, asked->resource, rec->len) == 0;
}

#endif
