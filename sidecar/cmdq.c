/* cmdq.c: a node's commands in flight, in send order, with their
 * deadlines and a bounded pool of free entries (see cmdq.h). */
#include "cmdq.h"

#include <stdlib.h>

void cmdq_init(struct cmdq *q, size_t entry_size, int pool_max)
{
    q->head = q->tail = q->live = NULL;
    q->len = 0;
    size_t size = entry_size < sizeof(struct cmdq_entry)
                      ? sizeof(struct cmdq_entry)
                      : entry_size;
    pool_init(&q->pool, size, pool_max > 0 ? (unsigned)pool_max : 0, NULL);
}

void cmdq_close(struct cmdq *q)
{
    pool_drain(&q->pool);
    q->pool.keep = 0;
}

struct cmdq_entry *cmdq_get(struct cmdq *q)
{
    struct cmdq_entry *e = pool_new(&q->pool);
    if (e == NULL) {
        return NULL;
    }
    e->prev = e->next = NULL;
    e->deadline_us = 0;
    e->done = false;
    return e;
}

void cmdq_put(struct cmdq *q, struct cmdq_entry *e)
{
    pool_put(&q->pool, e);
}

void cmdq_push(struct cmdq *q, struct cmdq_entry *e)
{
    e->next = NULL;
    e->prev = q->tail;
    if (q->tail != NULL) {
        q->tail->next = e;
    } else {
        q->head = e;
    }
    q->tail = e;
    if (q->live == NULL) {
        q->live = e;
    }
    q->len++;
}

void cmdq_insert_before(struct cmdq *q, struct cmdq_entry *e,
                        struct cmdq_entry *before)
{
    if (before == NULL) {
        cmdq_push(q, e);
        return;
    }
    e->next = before;
    e->prev = before->prev;
    if (before->prev != NULL) {
        before->prev->next = e;
    } else {
        q->head = e;
    }
    before->prev = e;
    q->len++;
}

void cmdq_find_live(struct cmdq *q)
{
    q->live = q->head;
    while (q->live != NULL && q->live->done) {
        q->live = q->live->next;
    }
}

void cmdq_unlink(struct cmdq *q, struct cmdq_entry *e)
{
    if (q->live == e) {
        q->live = e->next;
    }
    if (e->prev != NULL) {
        e->prev->next = e->next;
    } else {
        q->head = e->next;
    }
    if (e->next != NULL) {
        e->next->prev = e->prev;
    } else {
        q->tail = e->prev;
    }
    e->prev = e->next = NULL;
    q->len--;
}

struct cmdq_entry *cmdq_due(struct cmdq *q, uint64_t now)
{
    while (q->live != NULL && q->live->deadline_us <= now) {
        struct cmdq_entry *e = q->live;
        q->live = e->next;
        if (!e->done) {
            e->done = true;
            return e;
        }
    }
    return NULL;
}

bool cmdq_timer_at(const struct cmdq *q, bool armed, uint64_t armed_at,
                   uint64_t *at)
{
    if (q->live == NULL || (armed && armed_at <= q->live->deadline_us)) {
        return false;
    }
    *at = q->live->deadline_us;
    return true;
}
