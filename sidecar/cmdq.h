/* cmdq.h: a node's commands in flight, in send order, with their
 * deadlines (no I/O, no clock of its own). Redis answers in order, so a
 * reply belongs to the queue's head; every command gets its deadline when
 * it is queued and deadlines only grow along the queue, so one timer armed
 * for the oldest live command serves them all (cmdq_timer_at says when),
 * and cmdq_due hands out, in order, the commands whose deadline has
 * passed.
 *
 * Ownership: an entry taken with cmdq_get is the caller's, whether it is
 * in the queue or on a list of the caller's (the queue only links it),
 * until the caller gives it back with cmdq_put, exactly once, unlinked
 * from the queue; the entries so given back are the queue's, in its pool.
 * The pool keeps at most pool_max of them (enough for a busy node, not a
 * leak after a burst) and frees the rest; cmdq_close frees the pool, and
 * entries put back after it are freed at once. An entry is the first
 * member of the caller's struct (entry_size bytes): the caller reaches
 * its own fields with CMDQ_ITEM, and no command costs a second
 * allocation.
 *
 * A timed-out command (done) stays queued until its reply arrives or the
 * caller empties the queue: its reply still comes, in its place. live is
 * the first command not timed out yet. */
#ifndef REDLOCKD_CMDQ_H
#define REDLOCKD_CMDQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "list.h"
#include "pool.h"

struct cmdq_entry {
    struct list_node link; /* the queue */
    uint64_t deadline_us;  /* no earlier than the previous one's */
    bool done; /* timed out, or answered: its caller was told */
};

struct cmdq {
    struct list order;       /* the entries, in send order */
    struct cmdq_entry *live; /* first command not yet timed out */
    int len;                 /* entries in the queue */
    /* owned: free entries of the caller's size, at most pool_max kept;
     * it keeps none after cmdq_close */
    struct pool pool;
};

/* The caller's struct `type` whose member `member` is entry e. */
#define CMDQ_ITEM(e, type, member)                                             \
    ((type *)(void *)((char *)(e)-offsetof(type, member)))

/* The entry after e in the queue, the queue's first and last (NULL when
 * there is none). */
static inline struct cmdq_entry *cmdq_next(const struct cmdq_entry *e)
{
    return LIST_ITEM(e->link.next, struct cmdq_entry, link);
}

static inline struct cmdq_entry *cmdq_head(const struct cmdq *q)
{
    return LIST_ITEM(q->order.head, struct cmdq_entry, link);
}

static inline struct cmdq_entry *cmdq_tail(const struct cmdq *q)
{
    return LIST_ITEM(q->order.tail, struct cmdq_entry, link);
}

/* cmdq_init: an empty queue q whose entries are entry_size bytes (the
 * caller's struct, a struct cmdq_entry first) and whose pool keeps up to
 * pool_max of them. */
void cmdq_init(struct cmdq *q, size_t entry_size, int pool_max);

/* cmdq_close: frees q's pool; entries put back later are freed at once.
 * Entries still queued or lent out stay the caller's to put back. */
void cmdq_close(struct cmdq *q);

/* cmdq_get: an entry from q's pool, or a new one: unlinked, not done, the
 * rest of the caller's struct as it was left (the caller sets it).
 * Returns NULL when out of memory. */
struct cmdq_entry *cmdq_get(struct cmdq *q);

/* cmdq_put: gives e (not in the queue) back to q's pool, or frees it when
 * the pool is full or closed. */
void cmdq_put(struct cmdq *q, struct cmdq_entry *e);

/* cmdq_push: appends e at the queue's tail; it is live if nothing after a
 * timed-out command was. Its deadline must be no earlier than the tail's. */
void cmdq_push(struct cmdq *q, struct cmdq_entry *e);

/* cmdq_insert_before: puts e into the queue just before `before` (at the
 * tail when NULL, as cmdq_push), to keep the queue in wire order when
 * bytes go out ahead of some already queued. live is left as it was
 * unless before is NULL: the caller calls cmdq_find_live once it is done
 * inserting. e's deadline must be no later than before's. */
void cmdq_insert_before(struct cmdq *q, struct cmdq_entry *e,
                        struct cmdq_entry *before);

/* cmdq_find_live: sets live to the first entry not done, from the head. */
void cmdq_find_live(struct cmdq *q);

/* cmdq_unlink: takes e (queued) out of the queue; live moves past it. */
void cmdq_unlink(struct cmdq *q, struct cmdq_entry *e);

/* cmdq_due: the next live command whose deadline is at or before now,
 * marked done (it stays queued) with live moved past it; NULL when there
 * is none. Called until NULL, it hands out every command due at now, in
 * order; the caller may queue or unlink entries in between. */
struct cmdq_entry *cmdq_due(struct cmdq *q, uint64_t now);

/* cmdq_timer_at: whether the deadline timer must be armed for the live
 * command, given whether one is armed (armed) to fire at armed_at: true,
 * with *at the live command's deadline, when none is armed or the armed
 * one fires later; false when nothing is live, or the armed timer fires
 * early enough (deadlines only grow along the queue). */
bool cmdq_timer_at(const struct cmdq *q, bool armed, uint64_t armed_at,
                   uint64_t *at);

#endif
