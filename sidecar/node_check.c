/* node_check.c: what INFO tells of a node up, read at each handshake and
 * again by the heartbeat (node_conn.c's ping timer): the eviction policy,
 * the AOF of a ?persistent=1 node, a master it replicates, and a
 * replication id that changed under the connection. The fields are
 * info.c's to read; here is what each means for the node, told once, or
 * the drop that makes the reconnect quarantine it. */
#include "node.h"
#include "node_int.h"

#include <stdio.h>
#include <string.h>

#include "info.h"
#include "util.h"

/* A refused check is told at most once per INFO_LOG_US per node. */
#define INFO_LOG_US 60000000u

/* A check's INFO section (tag, a HANDSHAKE_INFO_* step) answered text
 * instead of
 * the section: an ACL that stopped allowing INFO on a live connection, or
 * a server that refuses it. Told once per spell (until that section
 * answers again), within the node's limit. The replication id is how a
 * node that synced from a master is seen, so without it the node must not
 * count: the connection is dropped, and a handshake that INFO refuses
 * fails, as it always did. The other two checks only warn (eviction) or
 * are read again at the next handshake (persistence): the last reading
 * stands. */
static void info_refused(struct node *node, int tag, const char *text)
{
    bool repl = tag == HANDSHAKE_INFO_REPLICATION;
    const char *section = repl                           ? "replication"
                          : tag == HANDSHAKE_INFO_MEMORY ? "memory"
                                                         : "persistence";
    unsigned bit = 1u << (unsigned)tag;
    unsigned long skipped;
    if (!(node->info_refused & bit) &&
        log_limit_pass(&node->info_log, util_now_us(), INFO_LOG_US, &skipped)) {
        char more[64] = "";
        if (skipped > 0) {
            snprintf(more, sizeof(more),
                     " (%lu more since the last such "
                     "line)",
                     skipped);
        }
        log_warn(node->subject, "%s: INFO %s was refused (%.100s): %s%s",
                 node->addr->display, section, text,
                 repl ? "a sync from a master would go unseen; reconnecting"
                 : tag == HANDSHAKE_INFO_MEMORY
                     ? "the eviction check cannot run"
                     : "the appendonly check cannot run",
                 more);
    }
    node->info_refused |= bit;
    if (repl) {
        node_set_error(node, "INFO replication refused (%.100s)", text);
        node_drop(node, "INFO replication refused");
    }
}

/* privdata: the INFO section's HANDSHAKE_INFO_* step. A timeout is the
 * stall rule's; an answer that is not the section is info_refused's. */
void config_check_cb(struct node *node, struct redisReply *reply,
                     enum node_status status, void *privdata)
{
    int tag = (int)(intptr_t)privdata;
    if (status != NODE_REPLY || node->state != NODE_UP) {
        return;
    }
    if (reply->type != REDIS_REPLY_STRING) {
        info_refused(node, tag,
                     reply->type == REDIS_REPLY_ERROR ? reply->str
                                                      : "not a string");
        return;
    }
    node->info_refused &= ~(1u << (unsigned)tag);
    switch (tag) {
    case HANDSHAKE_INFO_PERSISTENCE:
        node_check_persistence(node, reply->str);
        break;
    case HANDSHAKE_INFO_MEMORY:
        node_check_eviction(node, reply->str);
        break;
    default:
        node_check_role(node, reply->str);
        node_check_replid(node, reply->str);
        break;
    }
}

/* An evicting node can drop a lock key under memory pressure before its
 * ttl: for Redlock that is the node losing the lock, as in a restart
 * without persistence, and a second client may then take it. Every lock
 * key has a ttl, so the volatile-* policies evict them too; only
 * noeviction (writes fail with OOM instead) or no maxmemory are safe.
 * Checked at each handshake and every CONFIG_CHECK_MS while up. */
void node_check_eviction(struct node *node, const char *info)
{
    char maxmemory[32], policy[sizeof(node->evict_policy)];
    if (!info_eviction(info, maxmemory, sizeof(maxmemory), policy,
                       sizeof(policy))) {
        node->evict_policy[0] = '\0';
        node->warned_policy[0] = '\0';
        return;
    }
    memcpy(node->evict_policy, policy, sizeof(policy));
    if (strcmp(node->warned_policy, policy) != 0) {
        memcpy(node->warned_policy, policy, sizeof(policy));
        log_warn(node->subject,
                 "%s: maxmemory-policy %s with maxmemory %s: the node may "
                 "evict lock keys before their ttl, and a second client "
                 "may then take a held lock; set maxmemory-policy "
                 "noeviction",
                 node->addr->display, policy, maxmemory);
    }
}

/* ?persistent=1 turns the restart quarantine off for a node, which is
 * safe only while it writes every key to its AOF (appendfsync always, which
 * INFO does not show). A node that says appendonly is off loses its keys
 * in a restart: it is quarantined like any node without persistence. */
void node_check_persistence(struct node *node, const char *info)
{
    bool off = info_aof_off(info);
    if (off && !node->aof_off) {
        log_warn(node->subject,
                 "%s: marked ?persistent=1 but appendonly is off: a "
                 "restart would lose its lock keys, so it is quarantined "
                 "after a restart like a node without persistence; turn "
                 "on appendonly with appendfsync always, or drop "
                 "?persistent=1",
                 node->addr->display);
    }
    node->aof_off = off;
}

/* A replica is no independent lock node: its keys follow its master's,
 * and it refuses lock writes unless replica-read-only is off (then what it
 * takes is lost at its next sync). Warned once per master. */
void node_check_role(struct node *node, const char *info)
{
    if (!info_master(info, node->master, sizeof(node->master))) {
        node->warned_master[0] = '\0';
        return;
    }
    if (strcmp(node->warned_master, node->master) != 0) {
        memcpy(node->warned_master, node->master, sizeof(node->master));
        log_warn(node->subject,
                 "%s: is a replica of %s: a lock node must be a primary of "
                 "its own; a replica refuses lock writes, or loses them at "
                 "its next sync if replica-read-only is off, and its keys "
                 "are replaced by its master's",
                 node->addr->display, node->master);
    }
}

/* While up: a new master_replid on the same connection means the server
 * synced from a master since its handshake (turned replica, perhaps
 * promoted again): its keys, the lock keys among them, were replaced by
 * the master's, with the same run_id. The connection is dropped, so that
 * the reconnect's handshake sees it (node_replaced) and the node sits out
 * the quarantine of a restart. */
void node_check_replid(struct node *node, const char *info)
{
    char replid[sizeof(node->last.replid)];
    info_replid(info, replid, sizeof(replid));
    if (node->state != NODE_UP || replid[0] == '\0' ||
        node->up.replid[0] == '\0' || strcmp(replid, node->up.replid) == 0) {
        return;
    }
    node_set_error(node,
                   "replication id changed: the node synced from a "
                   "master%s",
                   "");
    log_warn(node->subject,
             "%s: replication id changed: it synced from a master since it "
             "came up, so its lock keys were replaced; reconnecting, to "
             "quarantine it as after a restart",
             node->addr->display);
    node_drop(node, "replication id changed");
}
