/* semaphore.c: the key and channel names of locks and semaphore slots,
 * from their fields, and the permits seen per resource. Pure: no I/O,
 * unit-tested. */
#include "semaphore.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The three bytes that open a semaphore's part of its channel. */
static const char sem_queue_tag[3] = {SEM_MARK, '*', ':'};

/* "<prefix><space>" then, when tag_len > 0, tag[0..tag_len), then the
 * resource of n into out (cap bytes). Returns the length, 0 when it does
 * not fit. */
static size_t name_text(const char *prefix, size_t plen, const char *space,
                        const char *tag, size_t tag_len,
                        const struct lock_name *n, char *out, size_t cap)
{
    size_t slen = strlen(space);
    size_t total = plen + slen + tag_len + n->len;
    if (total > cap) {
        return 0;
    }
    memcpy(out, prefix, plen);
    memcpy(out + plen, space, slen);
    memcpy(out + plen + slen, tag, tag_len);
    memcpy(out + plen + slen + tag_len, n->resource, n->len);
    return total;
}

size_t sem_key(const char *prefix, size_t plen, const struct lock_name *n,
               char *out, size_t cap)
{
    if (n->slot == SEM_NO_SLOT) {
        return name_text(prefix, plen, "lock:", "", 0, n, out, cap);
    }
    if (n->slot < 0) {
        return 0;
    }
    /* "<k>:" without snprintf: a slot's key is built on every round. */
    char tag[16];
    size_t t = sizeof(tag);
    tag[--t] = ':';
    unsigned k = (unsigned)n->slot;
    do {
        tag[--t] = (char)('0' + k % 10);
        k /= 10;
    } while (k > 0);
    return name_text(prefix, plen, "sem:", tag + t, sizeof(tag) - t, n, out,
                     cap);
}

size_t sem_channel(const char *prefix, size_t plen, const struct lock_name *n,
                   char *out, size_t cap)
{
    bool sem = n->slot != SEM_NO_SLOT;
    return name_text(prefix, plen, "wake:", sem_queue_tag,
                     sem ? sizeof(sem_queue_tag) : 0, n, out, cap);
}

void sem_channel_name(const char *s, size_t len, struct lock_name *n)
{
    if (len >= sizeof(sem_queue_tag) &&
        memcmp(s, sem_queue_tag, sizeof(sem_queue_tag)) == 0) {
        n->resource = s + sizeof(sem_queue_tag);
        n->len = len - sizeof(sem_queue_tag);
        n->slot = SEM_QUEUE;
        return;
    }
    n->resource = s;
    n->len = len;
    n->slot = SEM_NO_SLOT;
}

/* ---- permits seen ---------------------------------------------------- */

#define SEM_SEEN_BUCKETS 1024
#define SEM_SEEN_MAX 4096

struct seen {
    struct util_hnode hnode; /* keyed by resource */
    unsigned n;
    bool told;       /* a disagreement was reported */
    char resource[]; /* the key's bytes */
};

struct sem_seen {
    struct util_htable table; /* owned: struct seen by resource */
};

struct sem_seen *sem_seen_create(void)
{
    struct sem_seen *s = calloc(1, sizeof(struct sem_seen));
    if (s != NULL && util_htable_init(&s->table, SEM_SEEN_BUCKETS) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

void sem_seen_destroy(struct sem_seen *s)
{
    if (s == NULL) {
        return;
    }
    struct util_hnode *h = util_htable_first(&s->table);
    while (h != NULL) {
        struct util_hnode *next = util_htable_next(&s->table, h);
        free(UTIL_CONTAINER_OF(h, struct seen, hnode));
        h = next;
    }
    util_htable_free(&s->table);
    free(s);
}

unsigned sem_seen_note(struct sem_seen *s, const char *resource, size_t len,
                       unsigned n)
{
    struct util_hnode *h = util_htable_find(&s->table, resource, len);
    if (h != NULL) {
        struct seen *e = UTIL_CONTAINER_OF(h, struct seen, hnode);
        if (e->n == n || e->told) {
            return 0;
        }
        e->told = true;
        return e->n;
    }
    if (s->table.count >= SEM_SEEN_MAX) {
        return 0;
    }
    struct seen *e = malloc(sizeof(*e) + len);
    if (e == NULL) {
        return 0;
    }
    e->n = n;
    e->told = false;
    memcpy(e->resource, resource, len);
    util_htable_add(&s->table, &e->hnode, e->resource, len);
    return 0;
}
