/* cmdq.c: a node's commands in flight, in send order, with their
 * deadlines and a bounded pool of free entries (see cmdq.h). */
#include "cmdq.h"

#include <stdlib.h>

void cmdq_init(struct cmdq *q, size_t entry_size, int pool_max)
{
    q->order = (struct list){NULL, NULL};
    q->live = NULL;
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
    e->link = (struct list_node){NULL, NULL};
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
    list_push_tail(&q->order, &e->link);
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
    list_insert_before(&q->order, &before->link, &e->link);
    q->len++;
}

void cmdq_find_live(struct cmdq *q)
{
    q->live = cmdq_head(q);
    while (q->live != NULL && q->live->done) {
        q->live = cmdq_next(q->live);
    }
}

void cmdq_unlink(struct cmdq *q, struct cmdq_entry *e)
{
    if (q->live == e) {
        q->live = cmdq_next(e);
    }
    list_unlink(&q->order, &e->link);
    q->len--;
}

struct cmdq_entry *cmdq_due(struct cmdq *q, uint64_t now)
{
    while (q->live != NULL && q->live->deadline_us <= now) {
        struct cmdq_entry *e = q->live;
        q->live = cmdq_next(e);
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
