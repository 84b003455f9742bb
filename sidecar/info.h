/* info.h: reading the text of Redis's INFO (no I/O). node.c asks each
 * node for INFO sections at its handshake and while it is up; every field
 * it reads, the server version, and the eviction rule are pure functions
 * of that text, here, so that they are unit-tested apart from sockets and
 * node.c names no INFO field. */
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

/* info_run_id: INFO server's run_id (a new one: the server restarted)
 * into out[0..cap), cut as info_field does; "" when absent. */
void info_run_id(const char *info, char *out, size_t cap);

/* info_uptime_s: INFO server's uptime_in_seconds into *uptime_s; false,
 * *uptime_s untouched, when the field is absent. */
bool info_uptime_s(const char *info, uint64_t *uptime_s);

/* info_replid: INFO replication's master_replid into out[0..cap), cut as
 * info_field does; "" when absent (before Redis 4). */
void info_replid(const char *info, char *out, size_t cap);

/* info_master: whether INFO replication says the server is a replica
 * (role:slave): then "host:port" of its master into out[0..cap) (host
 * cut at 47 bytes, port at 15); otherwise false and out "". */
bool info_master(const char *info, char *out, size_t cap);

/* info_aof_off: whether INFO persistence says appendonly is off
 * (aof_enabled:0); false when the field is absent. */
bool info_aof_off(const char *info);

/* info_eviction: INFO memory's maxmemory into maxmemory[0..mcap) and
 * maxmemory_policy into policy[0..pcap) (each "" when absent), and
 * whether they let the server evict lock keys (info_evicts). */
bool info_eviction(const char *info, char *maxmemory, size_t mcap, char *policy,
                   size_t pcap);

#endif
