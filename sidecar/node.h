/* node.h: one Redis node behind one non-blocking connection.
 *
 * The node connects, authenticates, selects its db, loads the Lua scripts and
 * only then counts as up. Every command carries a deadline (hiredis 0.14 has
 * none): commands complete in send order and share one timeout, so one timer
 * per node, armed for the oldest command, is enough. A node whose oldest
 * command is stuck for long is disconnected and reconnected with capped,
 * jittered exponential back-off; it is down the moment its connection drops,
 * and node_*send() on a node that is not up fails at once.
 *
 * Contract, as in hiredis: a send that returned 0 calls its callback exactly
 * once, with the reply (valid only inside the callback), or NULL and a
 * status saying why. */
#ifndef REDLOCKD_NODE_H
#define REDLOCKD_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scripts.h"

struct event_base;
struct redisReply;
struct node_addr;
struct node;
struct tls_ctx;

enum node_state {
    NODE_DOWN = 0,       /* no connection; a reconnect timer is pending */
    NODE_CONNECTING = 1, /* host lookup, socket connecting or handshake */
    NODE_UP = 2,         /* ready: scripts loaded, commands accepted */
    NODE_CLOSED = 3,     /* node_destroy() called; nothing more happens */
};

enum node_status {
    NODE_REPLY = 0,        /* reply is set (it may be a Redis error reply) */
    NODE_TIMEOUT = 1,      /* no reply within the node timeout */
    NODE_DISCONNECTED = 2, /* the connection dropped before the reply */
};

typedef void node_reply_fn(struct node *node, struct redisReply *reply,
                           enum node_status status, void *privdata);

/* Called on every state change (metrics, health, waking waiters). */
typedef void node_state_fn(struct node *node, enum node_state state,
                           void *privdata);

/* A pub/sub message on a subscriber node: the channel (valid only inside
 * the call); the payload is not passed on. */
typedef void node_push_fn(struct node *node, const char *channel, size_t len,
                          void *privdata);

struct node_options {
    int timeout_ms;         /* per-command deadline */
    int connect_timeout_ms; /* connect + handshake deadline */
    int stall_ms;           /* disconnect when a command is stuck this long */
    int backoff_base_ms;    /* first reconnect delay */
    int backoff_cap_ms;     /* largest reconnect delay */
    int max_pending;        /* commands in flight before sends fail */
    struct tls_ctx *tls;    /* borrowed: for rediss:// nodes, else NULL */
    /* Set for a pub/sub subscriber connection (wake.c): its handshake is
     * AUTH and PING only, "message" pushes go to push_cb instead of the
     * command FIFO (with node_create's state_priv), and it counts in no
     * node metric. */
    node_push_fn *push_cb;
    /* Lock connections: the key that marks the node's data set
     * (<prefix>dataset, borrowed), and what makes a new mark for it (32
     * random hex digits and a NUL). NULL: no mark is kept. */
    const char *dataset_key;
    void (*dataset_mark)(char out[33]);
};

/* node_create: a node for addr (borrowed: owned by the config, must outlive
 * the node), index is its position 0..n-1. Starts connecting at once. Returns
 * NULL on allocation failure. */
struct node *node_create(struct event_base *base, int index,
                         const struct node_addr *addr,
                         const struct node_options *opts,
                         node_state_fn *state_cb, void *state_priv);

/* node_destroy: disconnects; every pending callback runs (with
 * NODE_DISCONNECTED) before this returns. */
void node_destroy(struct node *node);

/* node_script: EVALSHA script with argv (keys then args, as the script
 * table says); on NOSCRIPT it is sent again as EVAL in its original place
 * on the connection (later commands wait; an acquire that a later command
 * overtook gets the NOSCRIPT error instead, see node.c). Returns 0 (cb
 * will run once) or -1 (node not up or overloaded; cb will not run). */
int node_script(struct node *node, enum node_script script, int argc,
                const char **argv, const size_t *argvlen, node_reply_fn *cb,
                void *privdata);

/* A script command formatted once and sent to many nodes (the EVALSHA
 * text is the same for all: a script's SHA1 does not depend on the node).
 * Owned by the caller; it must outlive the callbacks of every send. */
struct node_prep {
    enum node_script script; /* unless plain */
    bool plain;              /* plain commands, no script (no EVAL retry) */
    /* An acquire, whose win rests on the node's keys: its reply is handled
     * only after a later check of the node's data-set key (node.c, the
     * data-set guard). The prepare functions clear it; the caller sets it. */
    bool guarded;
    int n_cmds;              /* commands in buf (plain: a transaction may
                                take several; a script: 1) */
    int argc;
    char *buf; /* the whole EVALSHA command (inline_buf or heap) */
    size_t len;
    size_t rest_off; /* numkeys and arguments start here (EVAL retry) */
    char inline_buf[768];
};

/* node_prepare: formats script with argv into p. Returns 0, or -1 when no
 * node has loaded the scripts yet (so none is up) or memory ran out.
 * node_prep_free releases a heap buffer; safe after a failed prepare. */
int node_prepare(struct node_prep *p, enum node_script script, int argc,
                 const char **argv, const size_t *argvlen);
void node_prep_free(struct node_prep *p);

/* node_prepare_keys: node_prepare with numkeys given, for the scripts
 * that take any number of keys (argv: the keys, then the arguments). */
int node_prepare_keys(struct node_prep *p, enum node_script script,
                      int numkeys, int argc, const char **argv,
                      const size_t *argvlen);

/* node_prepare_commands: formats n_cmds plain commands into p, back to
 * back: command k has argcs[k] arguments, taken in turn from argv and
 * argvlen. Sent with node_send_prepared, they go out together or not at
 * all (a MULTI is never left open on the connection), and the callback
 * runs once, with the last command's reply. Returns 0 or -1 (no memory). */
int node_prepare_commands(struct node_prep *p, int n_cmds, const int *argcs,
                          const char **argv, const size_t *argvlen);

/* node_send_prepared: node_script for a prepared command; p is borrowed
 * until cb has run. now_us is the caller's clock reading in
 * microseconds (util_now_us()), taken before the call and shared by the
 * sends of one operation: the command's deadline counts from it, so an
 * earlier reading only makes the deadline stricter. (Under KVM a clock
 * reading was 8% of the daemon's CPU samples, one per node command.) */
int node_send_prepared(struct node *node, const struct node_prep *p,
                       uint64_t now_us, node_reply_fn *cb, void *privdata);

/* node_command: any other command; same contract as node_script. */
int node_command(struct node *node, int argc, const char **argv,
                 const size_t *argvlen, node_reply_fn *cb, void *privdata);

/* node_version: the server's INFO redis_version at the last handshake as
 * major * 10000 + minor * 100 + patch (7.0.15 is 70015); 0 unknown. */
uint32_t node_version(const struct node *node);

/* node_caps: the native compare-and-set and compare-and-delete commands
 * (enum caps_flag, caps.h) the server's command table listed at the last
 * handshake; 0 for none or unknown. */
unsigned node_caps(const struct node *node);

/* node_caps_refused: the node refused a native command of flag (an ACL
 * without it: NOPERM, reason the refusal's text): its connection uses the
 * script instead from now on, told once by a warning. */
void node_caps_refused(struct node *node, unsigned flag, const char *reason);

/* node_eviction_policy: the node's maxmemory-policy when its last check
 * (each handshake, then every 5 s while up) found that it may evict keys (a
 * maxmemory set and a policy other than noeviction), NULL when it may not or it
 * is not known. */
const char *node_eviction_policy(const struct node *node);

bool node_is_up(const struct node *node);
enum node_state node_get_state(const struct node *node);
int node_index(const struct node *node);
const char *node_display(const struct node *node); /* no password */
const char *node_state_name(enum node_state state);
const char *node_last_error(const struct node *node); /* "" when none */
double node_rtt_ms(const struct node *node);          /* < 0 unknown */
uint64_t node_reconnects(const struct node *node);

/* node_tls_mode: "verified" or "insecure" (--tls-insecure-skip-verify)
 * for a rediss:// node, NULL for a plain one. */
const char *node_tls_mode(const struct node *node);

/* node_run_id: the server's INFO run_id, "" before the first handshake.
 * node_restarted: the connection that last came up found a different
 * run_id than the one up before it (checked when the node comes up);
 * handshakes that failed in between do not count. */
const char *node_run_id(const struct node *node);
bool node_restarted(const struct node *node);

/* node_replaced: the connection that last came up found the run_id of the
 * one up before it but another replication id (INFO master_replid): the
 * server synced from a master in between, and its keys were replaced by
 * the master's. As a restart, and persistence does not keep them. */
bool node_replaced(const struct node *node);

/* node_emptied: the connection that last came up found another mark in
 * the node's data-set key (node_options.dataset_key) than the one up
 * before it: the key was gone (FLUSHALL, FLUSHDB, a restart that kept no
 * keys, another server behind the address) or set anew after that, so
 * the lock keys went with it, whatever the node persists. */
bool node_emptied(const struct node *node);

/* node_is_persistent: marked ?persistent=1, and its last check (each
 * handshake, then every 5 s while up) did not find its AOF off. */
bool node_is_persistent(const struct node *node);

/* node_started_us: when the server started, on the monotonic clock,
 * estimated from INFO uptime_in_seconds at the last handshake; 0 unknown. */
uint64_t node_started_us(const struct node *node);

/* node_dataset_born_us: when the node's data-set mark was set, on the
 * monotonic clock, from its PTTL at the last handshake (a flush empties
 * the node and a new mark follows); 0 not known (a mark without the TTL,
 * or refused). */
uint64_t node_dataset_born_us(const struct node *node);

/* node_first_attempt_pending: the first connection attempt since
 * node_create has neither come up nor failed yet. */
bool node_first_attempt_pending(const struct node *node);

/* node_first_connection: the connection that last came up is the first
 * of this node that came up in this daemon, or the first that read its
 * data-set mark (those before it had none to date). */
bool node_first_connection(const struct node *node);

/* node_unmarked: why an up lock connection's data-set mark is not known
 * ("data-set key: SET refused (OOM ...)"), NULL when it is known, not kept,
 * refused by the ACL (NOPERM: the node goes on unguarded) or the node is
 * not up. Such a node does not vote: node_send_prepared refuses its
 * guarded sends (acquires), since nothing would show a flush of it; the
 * mark is tried again every second, and once it stands the connection is
 * made again to read it as a handshake does. */
const char *node_unmarked(const struct node *node);

#endif
