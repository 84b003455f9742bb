/* semaphore.c: slot, queue, key and channel names of semaphores, and the
 * permits seen per resource. Pure: no I/O, unit-tested. */
#include "semaphore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    struct seen *next;
    unsigned n;
    bool told; /* a disagreement was reported */
    size_t len;
    char resource[]; /* len bytes */
};

struct sem_seen {
    struct seen *buckets[SEM_SEEN_BUCKETS];
    size_t count;
};

struct sem_seen *sem_seen_create(void)
{
    return calloc(1, sizeof(struct sem_seen));
}

void sem_seen_destroy(struct sem_seen *s)
{
    if (s == NULL) {
        return;
    }
    for (size_t b = 0; b < SEM_SEEN_BUCKETS; b++) {
        struct seen *e = s->buckets[b];
        while (e != NULL) {
            struct seen *next = e->next;
            free(e);
            e = next;
        }
    }
    free(s);
}

static size_t seen_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return (size_t)(h % SEM_SEEN_BUCKETS);
}

unsigned sem_seen_note(struct sem_seen *s, const char *resource, size_t len,
                       unsigned n)
{
    struct seen **pp = &s->buckets[seen_hash(resource, len)];
    for (struct seen *e = *pp; e != NULL; e = e->next) {
        if (e->len == len && memcmp(e->resource, resource, len) == 0) {
            if (e->n == n || e->told) {
                return 0;
            }
            e->told = true;
            return e->n;
        }
    }
    if (s->count >= SEM_SEEN_MAX) {
        return 0;
    }
    struct seen *e = malloc(sizeof(*e) + len);
    if (e == NULL) {
        return 0;
    }
    e->n = n;
    e->told = false;
    e->len = len;
    memcpy(e->resource, resource, len);
    e->next = *pp;
    *pp = e;
    s->count++;
    return 0;
}
