/* renew.h: renewals, expiry and lost events of the locks in the table.
 *
 * One timer serves every lock through the table's deadline heap: renewals
 * that are due (the daemon keeps an NDJSON session's renew locks alive),
 * the give-up of a lock no renewal could keep (a lost event to its owner,
 * a release to the nodes), and the removal of locks whose validity ended.
 * When, and whether to give up, is decided by redlock_renew_*(); this file
 * carries those decisions out.
 *
 * Every lock leaves the table through renew_drop(), which reports the
 * resource up through the freed callback (ops wakes its waiters there), so
 * a lock lost inside a renewal's answer starts no new work under it. The
 * table, the cluster and the configuration are borrowed and must outlive
 * the struct renew. */
#ifndef REDLOCKD_RENEW_H
#define REDLOCKD_RENEW_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"

struct cluster;
struct config;
struct event_base;
struct lock;
struct lock_name;
struct lock_table;
struct renew;

/* A lock on name (a lock or a slot) left the table (released, completed,
 * lost or expired): it may be free here. name's resource is a copy, valid
 * during the call. */
typedef void renew_freed_fn(const struct lock_name *name, void *arg);

struct renew *renew_create(struct event_base *base, const struct config *cfg,
                           struct lock_table *locks, struct cluster *cluster,
                           renew_freed_fn *freed_cb, void *arg);

/* renew_destroy: stops the timer. Renewals still in flight must have been
 * answered (cluster_destroy answers them). */
void renew_destroy(struct renew *r);

/* renew_schedule: l has a new validity (acquired, renewed, extended): its
 * next renewal, or its expiry, is scheduled from now_us. */
void renew_schedule(struct renew *r, struct lock *l, uint64_t now_us);

/* renew_ending_ended: one of l's releases or completes in flight (counted
 * in l->ending, which pauses its renewal) ended without dropping it: once
 * none is left, its renewal goes on, at once if one fell due meanwhile,
 * and a lock whose validity ran short is given up by the timer. */
void renew_ending_ended(struct renew *r, struct lock *l);

/* renew_extend_failed: an extend of l to ttl_ms sent at start_us failed; it
 * may have shortened the key on some nodes, so l's validity is bounded
 * (redlock_extend_failed_until_us) and a renewing l renews at once. */
void renew_extend_failed(struct renew *r, struct lock *l, uint32_t ttl_ms,
                         uint64_t start_us);

/* renew_tell_lost: sends l's owner, if it is an NDJSON session, the lost
 * event (through its event_cb). */
void renew_tell_lost(const struct lock *l);

/* renew_release_everywhere: l's release on every node, given up by this
 * daemon (cluster_give_up): the nodes up now get it at once, the others
 * when they come back, for as long as l's key may stand on one
 * (redlock_given_up_until_us of the longest ttl l asked for), and until
 * then extend, complete and release refuse its token. cb may be NULL.
 * Returns cluster_give_up's result. */
int renew_release_everywhere(struct renew *r, const struct lock *l,
                             cluster_done_fn *cb, void *priv);

/* renew_drop: l leaves the table (its release, if any, already queued on
 * every node); freed_cb is told of its resource. */
void renew_drop(struct renew *r, struct lock *l);

#endif
