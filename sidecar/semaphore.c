/* semaphore.c: slot, queue, key and channel names of semaphores, and the
 * permits seen per resource. Pure: no I/O, unit-tested. */
#include "semaphore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

size_t sem_slot_name(const char *resource, size_t len, unsigned k, char *out)
{
    int n = snprintf(out, SEM_NAME_MAX + 1, "%c%u:", SEM_MARK, k);
    memcpy(out + n, resource, len);
    out[(size_t)n + len] = '\0';
    return (size_t)n + len;
}

size_t sem_queue_name(const char *resource, size_t len, char *out)
{
    out[0] = SEM_MARK;
    out[1] = '*';
    out[2] = ':';
    memcpy(out + 3, resource, len);
    out[3 + len] = '\0';
    return 3 + len;
}

bool sem_parse(const char *name, size_t len, const char **resource,
               size_t *rlen, int *k)
{
    if (len < 3 || name[0] != SEM_MARK) {
        return false;
    }
    const char *colon = memchr(name, ':', len);
    if (colon == NULL || colon == name + 1) {
        return false;
    }
    if (colon == name + 2 && name[1] == '*') {
        *k = -1;
    } else {
        int v = 0;
        for (const char *p = name + 1; p < colon; p++) {
            if (*p < '0' || *p > '9' || colon - name > 5) {
                return false;
            }
            v = v * 10 + (*p - '0');
        }
        *k = v;
    }
    *resource = colon + 1;
    *rlen = len - (size_t)(colon + 1 - name);
    return true;
}

/* "<prefix><space>" and, for slot name[0..len), "<k>:<resource>" (keep_slot)
 * or its queue name "\x01*:<resource>", into out (cap bytes). Returns the
 * length, 0 when name is no slot or it did not fit. */
static size_t slot_text(const char *prefix, const char *space, bool keep_slot,
                        const char *name, size_t len, char *out, size_t cap)
{
    const char *r;
    size_t rlen;
    int k;
    if (!sem_parse(name, len, &r, &rlen, &k) || k < 0) {
        return 0;
    }
    int n = keep_slot ? snprintf(out, cap, "%s%s%d:", prefix, space, k)
                      : snprintf(out, cap, "%s%s%c*:", prefix, space, SEM_MARK);
    if (n < 0 || (size_t)n + rlen >= cap) {
        return 0;
    }
    memcpy(out + n, r, rlen);
    return (size_t)n + rlen;
}

size_t sem_key(const char *prefix, const char *name, size_t len, char *out,
               size_t cap)
{
    return slot_text(prefix, "sem:", true, name, len, out, cap);
}

size_t sem_channel(const char *prefix, const char *name, size_t len, char *out,
                   size_t cap)
{
    return slot_text(prefix, "wake:", false, name, len, out, cap);
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
