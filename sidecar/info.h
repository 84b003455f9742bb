/* info.h: reading the text of Redis's INFO (no I/O). node.c asks each
 * node for INFO sections at its handshake and while it is up; the fields
 * it reads, the server version, and the eviction rule are pure functions
 * of that text, here, so that they are unit-tested apart from sockets. */
#ifndef REDLOCKD_INFO_H
#define REDLOCKD_INFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* info_field: the value of the "name:value" line of info into out[0..cap)
 * (cap >= 1), cut at cap - 1 bytes; "" when the line is absent. name must
 * match a whole field name at the start of a line. */
void info_field(const char *info, const char *name, char *out, size_t cap);

/* info_version: "redis_version:7.0.15" as 70015 (major * 10000 + minor *
 * 100 + patch); 0 when the field is absent or its major is not a number
 * up to 99 (an unstable build's 255.255.255), which callers take for an
 * old server. A minor or patch that is missing or above 99 counts as 0. */
uint32_t info_version(const char *info);

/* info_evicts: whether INFO memory's maxmemory and maxmemory_policy let
 * the server evict keys that have a TTL, lock keys among them: a
 * maxmemory above 0 and any policy but noeviction. */
bool info_evicts(const char *maxmemory, const char *policy);

#endif
