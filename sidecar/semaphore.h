/* semaphore.h: names for the slots of a semaphore, pure.
 *
 * An acquire with "permits": N takes one of N slot locks, each a full
 * Redlock mutex. Inside the daemon a slot is named "\x01<k>:<resource>":
 * no resource can start with a control character, so a slot never meets a
 * resource's name. On the nodes its key is "<prefix>sem:<k>:<resource>",
 * apart from every "<prefix>lock:" key, and all slots of a semaphore
 * announce their release on one channel, "<prefix>wake:\x01*:<resource>",
 * which is also the name of the semaphore's wait queue. */
#ifndef REDLOCKD_SEMAPHORE_H
#define REDLOCKD_SEMAPHORE_H

#include <stdbool.h>
#include <stddef.h>

#include "proto.h"

#define SEM_MARK '\x01'
#define SEM_PERMITS_MIN 2
#define SEM_PERMITS_MAX 1024
/* A slot or queue name: the mark, up to 4 digits, ':' and the resource. */
#define SEM_NAME_MAX (PROTO_RESOURCE_MAX + 6)

/* sem_slot_name: slot k of resource[0..len) into out (SEM_NAME_MAX + 1
 * bytes, NUL-terminated); returns its length. */
size_t sem_slot_name(const char *resource, size_t len, unsigned k, char *out);

/* sem_queue_name: the semaphore's queue (and channel) name "\x01*:<r>". */
size_t sem_queue_name(const char *resource, size_t len, char *out);

/* sem_parse: whether name[0..len) is a slot or queue name; if so *resource
 * and *rlen point at its resource within name, and *k is its slot (-1 for
 * a queue name). */
bool sem_parse(const char *name, size_t len, const char **resource,
               size_t *rlen, int *k);

/* sem_key: "<prefix>sem:<k>:<resource>" for a slot name into out (cap
 * bytes); returns the length, 0 when name is no slot or it did not fit. */
size_t sem_key(const char *prefix, const char *name, size_t len, char *out,
               size_t cap);

/* sem_channel: "<prefix>wake:" and the queue name of a slot name into out;
 * returns the length, 0 when name is no slot or it did not fit. */
size_t sem_channel(const char *prefix, const char *name, size_t len, char *out,
                   size_t cap);

/* The permits seen per resource in this daemon, to say once that callers
 * disagree. Bounded: past SEM_SEEN_MAX resources nothing more is kept. */
struct sem_seen;
struct sem_seen *sem_seen_create(void);
void sem_seen_destroy(struct sem_seen *s);

/* sem_seen_note: records n for resource. Returns the other count when this
 * is the first time a different one is seen for it (say it once), else 0. */
unsigned sem_seen_note(struct sem_seen *s, const char *resource, size_t len,
                       unsigned n);

#endif
