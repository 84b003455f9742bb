/* list.h: the one intrusive doubly linked list of the daemon.
 *
 * An object that lives in a list embeds a struct list_node and is found
 * back from it with LIST_ITEM (container_of). A zeroed struct list is an
 * empty list and a zeroed node is in none, so an object made by calloc or
 * taken from a pool needs no init call. Linking costs no allocation; the
 * list never owns what is in it (each user's header says who does).
 *
 * Not circular: head->prev and tail->next are NULL, so a walk stops at
 * NULL and a node's links say whether it is first or last. */
#ifndef REDLOCKD_LIST_H
#define REDLOCKD_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list_node {
    struct list_node *prev, *next;
};

struct list {
    struct list_node *head, *tail;
};

/* The struct `type` whose member `member` is node n (NULL stays NULL). */
#define LIST_ITEM(n, type, member)                                             \
    ((n) != NULL ? (type *)(void *)((char *)(n)-offsetof(type, member))      \
                 : (type *)NULL)

static inline bool list_empty(const struct list *l)
{
    return l->head == NULL;
}

/* list_push_tail: n (in no list) becomes l's last. */
static inline void list_push_tail(struct list *l, struct list_node *n)
{
    n->next = NULL;
    n->prev = l->tail;
    if (l->tail != NULL) {
        l->tail->next = n;
    } else {
        l->head = n;
    }
    l->tail = n;
}

/* list_push_head: n (in no list) becomes l's first. */
static inline void list_push_head(struct list *l, struct list_node *n)
{
    n->prev = NULL;
    n->next = l->head;
    if (l->head != NULL) {
        l->head->prev = n;
    } else {
        l->tail = n;
    }
    l->head = n;
}

/* list_insert_before: n (in no list) goes just before at, which is in l. */
static inline void list_insert_before(struct list *l, struct list_node *at,
                                      struct list_node *n)
{
    n->next = at;
    n->prev = at->prev;
    if (at->prev != NULL) {
        at->prev->next = n;
    } else {
        l->head = n;
    }
    at->prev = n;
}

/* list_unlink: takes n out of l, which it is in; its links are cleared. */
static inline void list_unlink(struct list *l, struct list_node *n)
{
    if (n->prev != NULL) {
        n->prev->next = n->next;
    } else {
        l->head = n->next;
    }
    if (n->next != NULL) {
        n->next->prev = n->prev;
    } else {
        l->tail = n->prev;
    }
    n->prev = n->next = NULL;
}

#endif
