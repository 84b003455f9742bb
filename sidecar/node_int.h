/* node_int.h: struct node and what the node files share, private to them:
 * only node.c, node_io.c, node_dataset.c, node_check.c and node_conn.c
 * include it (every other file sees node.h only).
 *
 * The files are layered, each calling only those below it; a call back up
 * goes through a callback pointer set when the node or the command is
 * made (an event's callback, a command's reply callback):
 *
 *   node_conn.c     connect, handshake, heartbeat timer, mark retry,
 *                   node_create and node_destroy
 *   node_io.c       the send API, the flush at the end of a turn, the read
 *                   path, NOSCRIPT recovery
 *   node_dataset.c  the data-set key's mark, and the guard with its
 *                   read-ahead
 *   node_check.c    the INFO checks of a node up
 *   node.c          state changes and their log, the command pool and its
 *                   deadlines, node_drop, the public getters
 *
 * Below them all, stream.c carries the bytes: the socket or TLS session,
 * the output written at the end of a turn, the input, the phase.
 *
 * A file that finds the connection lost calls node_drop (node.c), which
 * fails the FIFO and schedules the reconnect by timer: nothing below
 * node_conn.c calls up into it.
 *
 * Each of those files includes node.h first and this header after it:
 * this one does not include node.h itself, so that the private part
 * hangs below the public one and never points back up at it. */
#ifndef REDLOCKD_NODE_INT_H
#define REDLOCKD_NODE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <event2/util.h>
#include <hiredis/hiredis.h>

#include "cmdq.h"
#include "log.h"
#include "nodeuri.h"
#include "restart.h"
#include "resp.h"
#include "scripts.h"
#include "stream.h"

/* The commands of a handshake, in the order they go out; each one's
 * privdata in handshake_cb is its step, and SCRIPT LOAD of script k is
 * HANDSHAKE_SCRIPT_LOAD + k. The INFO steps tag the checks of a node up
 * too (config_check_cb). */
enum handshake_step {
    HANDSHAKE_AUTH,             /* AUTH [user] password */
    HANDSHAKE_PING,             /* a subscriber's PING: all it runs */
    HANDSHAKE_SELECT,           /* SELECT db */
    HANDSHAKE_INFO_SERVER,      /* INFO server: run_id, version, uptime */
    HANDSHAKE_INFO_MEMORY,      /* INFO memory: the eviction check */
    HANDSHAKE_INFO_REPLICATION, /* INFO replication: replid, role */
    HANDSHAKE_INFO_PERSISTENCE, /* INFO persistence (?persistent=1) */
    HANDSHAKE_DATASET_SET,      /* SET dataset_key mark NX PX ttl */
    HANDSHAKE_DATASET_GET,      /* GET dataset_key */
    HANDSHAKE_DATASET_PTTL,     /* PTTL dataset_key: the mark's age */
    HANDSHAKE_DATASET_DATE,     /* PEXPIRE dataset_key: an undated mark */
    HANDSHAKE_COMMAND_DOCS,     /* COMMAND DOCS SET: SET ... IFEQ (caps.h) */
    HANDSHAKE_COMMAND_INFO,     /* COMMAND INFO DELIFEQ DELEX (caps.h) */
    HANDSHAKE_SCRIPT_LOAD,      /* SCRIPT LOAD of script 0, and on */
};
#define SHA_LEN 40
#define CMD_POOL_MAX 4096 /* free commands kept: a busy node, not a leak */

/* One command in flight. Owned by its node's queue (cmdq.h): taken from
 * its pool on send, returned there once its reply has been handled (or the
 * connection dropped). q.done: the user callback already ran (timeout). */
struct node_cmd {
    struct cmdq_entry q; /* first: the FIFO's link and the deadline */
    struct node *node;   /* borrowed: the node it was sent on */
    node_reply_fn *cb;   /* NULL for internal handshake commands */
    void *privdata;
    uint64_t sent_us;
    bool prefix;  /* a plain sequence's command before its last (MULTI,
                     a queued command): its reply is dropped */
    bool guarded; /* an acquire: handled only with a later guard's reply */
    bool guard;   /* a GET of the data-set key that clears those before it */
    int script;   /* enum node_script, or -1 */
    const struct node_prep *prep; /* borrowed: the script command, kept
                                     for an EVAL retry on NOSCRIPT */
    struct node_prep *owned_prep; /* node_script(): ours to free */
    struct node_cmd *rec_next;    /* the NOSCRIPT re-send list */
};
/* cmdq allocates entries of sizeof(struct node_cmd) from their start. */
_Static_assert(offsetof(struct node_cmd, q) == 0, "the entry comes first");

struct node {
    int index;
    const struct node_addr *addr; /* borrowed: owned by the config */
    struct node_options opts;
    struct event_base *base; /* borrowed */
    /* The connection (stream.h): its socket and TLS session, phase
     * (CONNECTING, TLS_HANDSHAKE, OPEN; CLOSING while node_drop() fails
     * the FIFO), the output written at the end of a turn and the input
     * read_cb parses; write_ev is the connect's completion too. */
    struct stream s;
    uint64_t conn_gen; /* bumped on every drop */
    enum node_state state;
    node_state_fn *state_cb;
    void *state_priv;
    struct event *conn_timer;  /* reconnect delay / connect deadline */
    struct resolve *resolving; /* owned: the host lookup in flight */
    struct event *cmd_timer;   /* deadline of the oldest live command */
    bool cmd_timer_on;         /* cmd_timer is added ... */
    uint64_t cmd_timer_at;     /* ... to fire at this time */
    struct event *ping_timer;  /* heartbeat while idle */
    uint64_t last_send_us;     /* when a command was last written */
    uint64_t last_reply_us;    /* when a reply last arrived */
    unsigned attempt;          /* failed connects in a row */
    int handshake_left;        /* replies still expected before UP */
    bool handshake_failed;
    char sha[SCRIPT__COUNT][SHA_LEN + 1];
    bool sha_ok[SCRIPT__COUNT]; /* sha equals known_sha: prepared sends ok */
    struct cmdq fifo; /* of struct node_cmd: commands sent, in order */
    char last_error[160];
    /* The first error a plain sequence's prefix got (a command refused
     * while queued in MULTI: OOM, ...), for the sequence's last reply:
     * EXEC then says only "previous errors". Cleared at that reply. */
    char queued_error[120];
    double rtt_ms;
    uint64_t reconnects;
    bool was_up; /* has been up at least once */
    /* Down lines within DOWN_LOG_US of the last one are held back (a
     * CLIENT KILL loop must not flood the log): counted, and the current
     * spell's line comes late if a reconnect then fails. */
    struct log_limit down_log;
    bool down_unlogged;      /* this down spell was not logged (nor its up) */
    bool first_attempt_over; /* the first connect came up or failed */
    /* NOSCRIPT recovery (see node_handle_reply): while rec_active, new
     * commands are held back (their bytes in hold, they themselves at the
     * FIFO's tail from held on) until every command written before the
     * first NOSCRIPT has answered; then the NOSCRIPT'd ones go out again
     * in their order, the scripts are reloaded, and the held ones follow. */
    bool rec_active;
    struct node_cmd *rec_last; /* last command written when it began */
    struct node_cmd *rec_head; /* NOSCRIPT'd commands to re-send, in send */
    struct node_cmd *rec_tail; /* order (by rec_next; not in the FIFO) */
    struct node_cmd *held;     /* first held command in the FIFO, or NULL */
    struct bytes hold;    /* bytes of the held commands */
    int reload_failed;         /* SCRIPT LOADs of this reload that failed */
    char reload_error[120];    /* the first one's reason */
    /* What the last handshake read (restart.h), and what the connection
     * that last came up and the one up before it had read. Only
     * handshakes that reach NODE_UP count: one that fails after INFO (a
     * node still loading its RDB answers INFO, then refuses SCRIPT LOAD)
     * must not make the next handshake look like the same server, or a
     * restarted node would skip its quarantine. dataset_refused: the ACL
     * refused the data-set key's commands on this connection (no check
     * until the next handshake tries again); dataset_warned: that was
     * told (once per node). */
    struct node_ident last, up, prev_up;
    bool dataset_refused;
    bool dataset_warned;
    /* A lock connection up with no mark read and no ACL refusal: nothing
     * would show a flush of it, so its acquires do not count
     * (node_unmarked) and the mark is tried again every second. mark_why:
     * the refusal that left it unknown, for health and the log;
     * mark_logged: this spell (from the first such connection to one that
     * reads the mark) was told; mark_retrying: a retry is in flight.
     * mark_seen: a connection that read the mark came up in this daemon;
     * first_marked: the one up now is the first (node_first_connection).
     * date_warned: a refused PTTL or PEXPIRE was told (once per node). */
    char mark_why[120];
    bool mark_logged;
    bool mark_retrying;
    bool mark_seen;
    bool first_marked;
    bool date_warned;
    /* When the mark was set, monotonic, from its PTTL at the last
     * handshake (restart_dataset_born_us); 0 not known. */
    uint64_t dataset_born_us;
    /* A script refused for something the daemon needs (missing.h) was
     * told on this connection. */
    bool script_missing_told;
    /* The data-set guard (see guard_close): guard_due, a guarded command
     * was queued after the last guard (guard_due_held: behind a NOSCRIPT
     * recovery, in hold); guard_buf (owned), the guard's
     * GET, formatted once; ahead (owned, with the replies in it), the
     * replies read toward a guard's, handled from ahead_next on once
     * the guard's is in. */
    bool guard_due;
    bool guard_due_held;
    char *guard_buf;
    size_t guard_len;
    struct redisReply **ahead;
    int ahead_n, ahead_next, ahead_cap;
    bool ahead_ready; /* ahead runs through a guard whose mark stood */
    /* "host:port" of its master while INFO replication says role:slave,
     * else ""; warned_master is what the last warning named. */
    char master[80];
    char warned_master[80];
    uint32_t version; /* INFO redis_version, see node_version() */
    unsigned caps;    /* enum caps_flag read at the last handshake */
    /* INFO memory's maxmemory_policy when the node may evict keys (a
     * maxmemory is set and the policy is not noeviction), "" when not or
     * not known: see node_eviction_policy(). warned_policy is what the last
     * warning named, so a flapping connection does not repeat it. */
    char evict_policy[32];
    char warned_policy[32];
    uint64_t evict_checked_us; /* when INFO memory last went out */
    /* The periodic INFO sections refused now (bit 1 << step of each
     * HANDSHAKE_INFO_* step), each told once per spell, within info_log. */
    unsigned info_refused;
    struct log_limit info_log;
    /* A ?persistent=1 node whose INFO persistence says aof_enabled:0: it
     * loses its keys in a restart, so it is not taken for persistent. */
    bool aof_off;
    uint64_t started_us; /* server start, monotonic: the latest INFO
                            uptime allows (restart_started_us), 0 unknown */
    char subject[48];    /* "node 2" for log lines */
};

/* The node's command of a queue entry; NULL for NULL. */
static inline struct node_cmd *cmd_of(struct cmdq_entry *e)
{
    return e != NULL ? CMDQ_ITEM(e, struct node_cmd, q) : NULL;
}

static inline struct node_cmd *fifo_head(const struct node *node)
{
    return cmd_of(cmdq_head(&node->fifo));
}

/* The FIFO's head is a guarded command still awaiting its reply. */
static inline bool head_guarded(const struct node *node)
{
    const struct node_cmd *head = fifo_head(node);
    return head != NULL && head->guarded && !head->q.done;
}

/* Puts cmd into the FIFO just before `before` (at the tail when NULL):
 * the bytes of commands written while a NOSCRIPT recovery ends go out
 * ahead of the held ones, and the FIFO must stay in wire order. Leaves
 * live to rec_close (cmdq_find_live) unless before is NULL. */
static inline void fifo_insert_before(struct node *node, struct node_cmd *cmd,
                                      struct node_cmd *before)
{
    cmdq_insert_before(&node->fifo, &cmd->q,
                       before != NULL ? &before->q : NULL);
}

/* Appends bytes to the output buffer, written at the end of this loop
 * turn (or when the socket has room again). Returns 0 or -1 (no memory). */
static inline int out_append(struct node *node, const char *buf, size_t len)
{
    return stream_out_append(&node->s, buf, len);
}

/* Appends bytes of a held command (NOSCRIPT recovery) to hold. */
static inline int hold_append(struct node *node, const char *buf, size_t len)
{
    return bytes_append(&node->hold, buf, len);
}

/* ---- node.c ------------------------------------------------------------ */

void node_set_state(struct node *node, enum node_state state);
void node_set_error(struct node *node, const char *fmt, const char *s);
void node_attempt_failed(struct node *node, const char *msg);
struct node_cmd *cmd_get(struct node *node);
void cmd_put(struct node *node, struct node_cmd *cmd);
void cmd_timer_arm(struct node *node);
void cmd_timer_cb(evutil_socket_t fd, short what, void *arg);
void node_protocol_error(struct node *node, enum resp_status rc,
                         const char *why);
void node_schedule_reconnect(struct node *node);
void ahead_discard(struct node *node);
void node_drop(struct node *node, const char *why);

/* ---- node_check.c ------------------------------------------------------ */

void config_check_cb(struct node *node, struct redisReply *reply,
                     enum node_status status, void *privdata);
void node_check_eviction(struct node *node, const char *info);
void node_check_persistence(struct node *node, const char *info);
void node_check_role(struct node *node, const char *info);
void node_check_replid(struct node *node, const char *info);

/* ---- node_dataset.c ---------------------------------------------------- */

const char *mark_text(const struct node *node);
void mark_refused(struct node *node, const char *step, const char *text);
void mark_tell(struct node *node);
void date_refused(struct node *node, const char *step, const char *text);
const char *dataset_ttl_arg(void);
void dataset_check_cb(struct node *node, struct redisReply *reply,
                      enum node_status status, void *privdata);
int guard_close(struct node *node);
int guard_format(struct node *node);
int guard_read(struct node *node, size_t *off);

/* ---- node_io.c --------------------------------------------------------- */

bool node_tls_event(struct node *node, short what);
void node_flush(struct node *node);
void flush_cb(evutil_socket_t fd, short what, void *arg);
void read_cb(evutil_socket_t fd, short what, void *arg);
int node_send_argv(struct node *node, int argc, const char **argv,
                   const size_t *argvlen, node_reply_fn *cb, void *privdata,
                   int timeout_ms);
bool node_sha_learn(struct node *node, int script);

#endif
