/* node.c: one Redis node behind one connection of our own.
 *
 * Life of a connection:
 *
 *   DOWN --reconnect timer--> CONNECTING --socket connected--> handshake
 *     (AUTH, SELECT, INFO, SCRIPT LOAD x n; all with the connect deadline)
 *     --last handshake reply--> UP --drop, stall, error--> DOWN
 *
 * rediss:// nodes (tls.c) run a TLS handshake between "socket connected"
 * and the handshake commands, which wait queued meanwhile, under the same
 * connect deadline; reads and writes then go through the TLS session, and
 * either may wait for the other direction (read_wants_write and
 * write_wants_read). A subscriber node (wake.c, opts.push_cb) runs AUTH and
 * PING only and hands "message" pushes to push_cb.
 *
 * Writes: commands are formatted as RESP once (per op, see node_prepare;
 * the encoder is resp.c's) and appended to the node's output buffer; the
 * buffer goes out in one write() at the end of the current event-loop turn
 * (flush_ev is made active, so it runs after every callback already active
 * in this turn).
 * Every request read from every client in one turn therefore reaches each
 * node in one write, and EV_WRITE is armed only while the socket is full.
 * hiredis's async layer did the same with an epoll_ctl pair and a buffer
 * regrown by realloc per batch: a third of the daemon's instructions.
 *
 * Reads: the socket is read into the node's input buffer and resp.c parses
 * the replies (into pooled redisReply objects); commands are kept in a FIFO
 * (cmdq.c) in send order and Redis answers in order, so each reply belongs
 * to the FIFO's head. Every command gets the same timeout, on util_now_us(),
 * the clock cluster.c measures validity on, so deadlines grow along the FIFO:
 * one timer armed for the oldest live command serves them all. A command that
 * times out gets its callback at once (NODE_TIMEOUT) and stays in the FIFO,
 * marked done, until its reply arrives or the connection drops. */
#include "node.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "cmdq.h"
#include "config.h"
#include "info.h"
#include "log.h"
#include "metrics.h"
#include "redlock.h"
#include "resolve.h"
#include "restart.h"
#include "resp.h"
#include "scripts.h"
#include "util.h"
#include "tls.h"

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
    bool prefix; /* a plain sequence's command before its last (MULTI,
                    a queued command): its reply is dropped */
    bool guarded; /* an acquire: handled only with a later guard's reply */
    bool guard;   /* a GET of the data-set key that clears those before it */
    int script;  /* enum node_script, or -1 */
    const struct node_prep *prep; /* borrowed: the script command, kept
                                     for an EVAL retry on NOSCRIPT */
    struct node_prep *owned_prep; /* node_script(): ours to free */
    struct node_cmd *rec_next;    /* the NOSCRIPT re-send list */
};
/* cmdq allocates entries of sizeof(struct node_cmd) from their start. */
_Static_assert(offsetof(struct node_cmd, q) == 0, "the entry comes first");

/* The SHA1 of each script as the first node reported it; every node
 * computes the same, so one prepared EVALSHA serves them all. */
static char known_sha[SCRIPT__COUNT][SHA_LEN + 1];

struct node {
    int index;
    const struct node_addr *addr; /* borrowed: owned by the config */
    struct node_options opts;
    struct event_base *base; /* borrowed */
    int fd;                  /* the connection, -1 when none */
    bool connected;          /* connect() has completed on fd */
    bool dropping;           /* node_drop() is failing the FIFO */
    uint64_t conn_gen;       /* bumped on every drop */
    char *ibuf;              /* owned: bytes read, not yet parsed */
    size_t ilen, icap;
    struct event *read_ev;   /* EV_READ|EV_PERSIST on fd */
    struct event *write_ev;  /* EV_WRITE on fd: connect done, or room again */
    struct event *flush_ev;  /* made active to write at the end of a turn */
    bool flush_pending;      /* flush_ev is active */
    bool write_armed;        /* write_ev is added */
    char *obuf;              /* owned: output not yet written */
    size_t olen, ooff, ocap; /* bytes [ooff, olen) are unsent */
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
    bool sha_ok[SCRIPT__COUNT];   /* sha equals known_sha: prepared sends ok */
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
     * commands are held back (their bytes in hbuf, they themselves at the
     * FIFO's tail from held on) until every command written before the
     * first NOSCRIPT has answered; then the NOSCRIPT'd ones go out again
     * in their order, the scripts are reloaded, and the held ones follow. */
    bool rec_active;
    struct node_cmd *rec_last; /* last command written when it began */
    struct node_cmd *rec_head; /* NOSCRIPT'd commands to re-send, in send */
    struct node_cmd *rec_tail; /* order (by rec_next; not in the FIFO) */
    struct node_cmd *held;     /* first held command in the FIFO, or NULL */
    char *hbuf;                /* owned: bytes of the held commands */
    size_t hlen, hcap;
    int reload_failed;      /* SCRIPT LOADs of this reload that failed */
    char reload_error[120]; /* the first one's reason */
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
    /* The data-set guard (see guard_close): guard_due, a guarded command
     * was queued after the last guard (guard_due_held: behind a NOSCRIPT
     * recovery, in hbuf); guard_buf (owned), the guard's
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
    uint32_t version;    /* INFO redis_version, see node_version() */
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
    /* rediss:// only (tls.c): */
    struct tls_conn *tls;  /* owned: rediss:// session on fd, else NULL */
    bool tls_handshaking;  /* TLS handshake before any command goes out */
    bool read_wants_write; /* TLS read waits for a writable socket */
    bool write_wants_read; /* TLS write waits for a readable socket */
};

static void node_connect(struct node *node);
static void node_drop(struct node *node, const char *why);
static void node_resolve_failed(struct node *node, const char *why);
static void node_flush(struct node *node);
static int guard_close(struct node *node);
static int guard_read(struct node *node, size_t *off);
static void ahead_discard(struct node *node);

const char *node_state_name(enum node_state state)
{
    switch (state) {
    case NODE_DOWN:
        return "down";
    case NODE_CONNECTING:
        return "connecting";
    case NODE_UP:
        return "up";
    case NODE_CLOSED:
        return "closed";
    }
    return "unknown";
}

/* A node that drops again within this long of its last logged "down" is
 * logged once a second at most, with the number left out since. */
#define DOWN_LOG_US 1000000u

static void log_down(struct node *node, unsigned long unlogged)
{
    const char *why = node->last_error[0] ? node->last_error : "closed";
    if (unlogged > 0) {
        log_warn(node->subject,
                 "%s: down: %s (%lu more since the last such line)",
                 node->addr->display, why, unlogged);
    } else {
        log_warn(node->subject, "%s: down: %s", node->addr->display, why);
    }
    node->down_unlogged = false;
}

/* Logs the transition old -> state within the limit above. */
static void log_state(struct node *node, enum node_state old,
                      enum node_state state)
{
    if (state == NODE_UP) {
        if (node->down_unlogged) {
            node->down_unlogged = false; /* its down went unlogged too */
            log_debug(node->subject, "%s: up", node->addr->display);
        } else {
            log_info(node->subject, "%s: up", node->addr->display);
        }
    } else if (old == NODE_UP) {
        unsigned long skipped;
        if (log_limit_pass(&node->down_log, util_now_us(), DOWN_LOG_US,
                           &skipped)) {
            log_down(node, skipped);
        } else {
            node->down_unlogged = true;
            log_debug(node->subject, "%s: down: %s", node->addr->display,
                      node->last_error[0] ? node->last_error : "closed");
        }
    }
}

static void node_set_state(struct node *node, enum node_state state)
{
    enum node_state old = node->state;
    bool legal;
    switch (state) {
    case NODE_DOWN: /* a drop, or an attempt that failed (again) */
        legal = old != NODE_CLOSED;
        break;
    case NODE_CONNECTING: /* an attempt: a lookup, then its connect */
        legal = old == NODE_DOWN || old == NODE_CONNECTING;
        break;
    case NODE_UP: /* the handshake of this attempt completed */
        legal = old == NODE_CONNECTING;
        break;
    case NODE_CLOSED:
        legal = true;
        break;
    default:
        abort();
    }
    if (!legal) {
        /* A bug in this file, never a node's doing. */
        log_error(node->subject, "illegal state change %s -> %s",
                  node_state_name(old), node_state_name(state));
        abort();
    }
    if (state == NODE_UP || state == NODE_DOWN) {
        node->first_attempt_over = true; /* also a failure before any socket */
    }
    if (state == NODE_DOWN && old != NODE_UP && node->down_unlogged) {
        /* A reconnect failed: the node stays down, so say it now rather
         * than leave "up" as the log's last word on it. */
        unsigned long n = log_limit_take(&node->down_log, util_now_us());
        log_down(node, n > 0 ? n - 1 : 0);
    }
    if (old == state) {
        return;
    }
    node->state = state;
    bool counted = node->opts.push_cb == NULL; /* not a subscriber */
    if (state == NODE_UP) {
        node->attempt = 0;
        if (node->was_up) {
            node->reconnects++;
        }
        node->was_up = true;
        METRIC_ADD(nodes_up, counted ? 1 : 0);
    } else if (old == NODE_UP) {
        METRIC_ADD(nodes_up, counted ? -1 : 0);
    }
    log_state(node, old, state);
    if (node->state_cb != NULL && state != NODE_CLOSED) {
        node->state_cb(node, state, node->state_priv);
    }
}

static void node_set_error(struct node *node, const char *fmt, const char *s)
{
    snprintf(node->last_error, sizeof(node->last_error), fmt, s ? s : "");
}

/* What a connect attempt that ran out of time says. Which half timed out
 * tells the operator where to look: no connection (address, firewall, a
 * host that is gone) or a server that took it and never answered (paused,
 * overloaded, not Redis). The handshake's command deadline and the connect
 * timer end together, and whichever fires first says the same. */
static const char *connect_timeout_text(const struct node *node)
{
    return node->connected ? "handshake failed: the node accepted the "
                             "connection but did not answer in time"
                           : "connect: timed out";
}

/* A connect attempt failed with msg: it becomes last_error, logged as a
 * warning once per outage (the error changes or was cleared by an up), so a
 * node unreachable from the start is named at the default level. */
static void node_attempt_failed(struct node *node, const char *msg)
{
    if (strcmp(msg, node->last_error) != 0) {
        log_warn(node->subject, "%s: %s", node->addr->display, msg);
    } else {
        log_debug(node->subject, "%s: %s", node->addr->display, msg);
    }
    snprintf(node->last_error, sizeof(node->last_error), "%s", msg);
}

/* ---- command pool and FIFO ------------------------------------------- */

/* The node's command of a queue entry; NULL for NULL. */
static struct node_cmd *cmd_of(struct cmdq_entry *e)
{
    return e != NULL ? CMDQ_ITEM(e, struct node_cmd, q) : NULL;
}

static struct node_cmd *fifo_head(const struct node *node)
{
    return cmd_of(node->fifo.head);
}

static struct node_cmd *cmd_get(struct node *node)
{
    struct node_cmd *cmd = cmd_of(cmdq_get(&node->fifo));
    if (cmd == NULL) {
        return NULL;
    }
    cmd->node = node;
    cmd->cb = NULL;
    cmd->privdata = NULL;
    cmd->prefix = false;
    cmd->guarded = false;
    cmd->guard = false;
    cmd->script = -1;
    cmd->prep = NULL;
    cmd->owned_prep = NULL;
    cmd->rec_next = NULL;
    return cmd;
}

/* The FIFO's head is a guarded command still awaiting its reply. */
static bool head_guarded(const struct node *node)
{
    const struct node_cmd *head = fifo_head(node);
    return head != NULL && head->guarded && !head->q.done;
}

static void cmd_put(struct node *node, struct node_cmd *cmd)
{
    if (cmd->owned_prep != NULL) {
        node_prep_free(cmd->owned_prep);
        free(cmd->owned_prep);
        cmd->owned_prep = NULL;
    }
    cmd->prep = NULL;
    cmdq_put(&node->fifo, &cmd->q);
}

/* Puts cmd into the FIFO just before `before` (at the tail when NULL):
 * the bytes of commands written while a NOSCRIPT recovery ends go out
 * ahead of the held ones, and the FIFO must stay in wire order. Leaves
 * live to rec_close (cmdq_find_live) unless before is NULL. */
static void fifo_insert_before(struct node *node, struct node_cmd *cmd,
                               struct node_cmd *before)
{
    cmdq_insert_before(&node->fifo, &cmd->q,
                       before != NULL ? &before->q : NULL);
}

static void cmd_timer_arm(struct node *node)
{
    /* A timer already armed fires no later than needed; it is left armed
     * when the FIFO empties rather than deleted and re-added for every
     * batch. */
    uint64_t at;
    if (!cmdq_timer_at(&node->fifo, node->cmd_timer_on, node->cmd_timer_at,
                       &at)) {
        return;
    }
    uint64_t now = util_now_us();
    uint64_t wait = at > now ? at - now : 0;
    struct timeval tv = {(time_t)(wait / 1000000u),
                         (suseconds_t)(wait % 1000000u)};
    evtimer_add(node->cmd_timer, &tv);
    node->cmd_timer_on = true;
    node->cmd_timer_at = now + wait;
}

/* The deadline timer: time out every live command past its deadline, and
 * drop the connection when the oldest command has been stuck for stall_ms
 * (a paused or wedged server), so the node shows as down. */
static void cmd_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct node *node = arg;
    uint64_t now = util_now_us();
    node->cmd_timer_on = false;
    if (node->tls_handshaking) {
        /* Only the queued Redis handshake can be due: its deadline is the
         * connect deadline, and none of it went out. */
        node_attempt_failed(node,
                            "TLS handshake: timed out (is this a TLS port?)");
        node_drop(node, "TLS handshake timeout");
        return;
    }
    struct cmdq_entry *due;
    while ((due = cmdq_due(&node->fifo, now)) != NULL) {
        struct node_cmd *cmd = cmd_of(due);
        if (cmd->cb != NULL) {
            cmd->cb(node, NULL, NODE_TIMEOUT, cmd->privdata);
        }
    }
    /* Stalled means no reply at all for stall_ms while commands wait; a
     * deep backlog that is still being answered is slow, not stuck. */
    struct node_cmd *head = fifo_head(node);
    uint64_t since = head != NULL ? head->sent_us : now;
    if (node->last_reply_us > since) {
        since = node->last_reply_us;
    }
    if (head != NULL && node->state == NODE_UP &&
        now - since >= (uint64_t)node->opts.stall_ms * 1000u) {
        node_set_error(node, "no reply for %s", "the stall limit");
        node_drop(node, "stalled");
        return;
    }
    if (node->fifo.live == NULL && head != NULL) {
        /* Only timed-out commands remain: check again for the stall. */
        struct timeval tv = {(time_t)(node->opts.timeout_ms / 1000),
                             (suseconds_t)(node->opts.timeout_ms % 1000) *
                                 1000};
        evtimer_add(node->cmd_timer, &tv);
        node->cmd_timer_on = true;
        node->cmd_timer_at = now + (uint64_t)node->opts.timeout_ms * 1000u;
        return;
    }
    cmd_timer_arm(node);
}

static int node_send_argv(struct node *node, int argc, const char **argv,
                          const size_t *argvlen, node_reply_fn *cb,
                          void *privdata, int timeout_ms);

/* A reload's SCRIPT LOAD failed, why: counted, the first reason kept. A
 * failed load means the next EVALSHA of that script meets NOSCRIPT again,
 * and the node's error text (NOPERM, OOM, ...) is what says why. */
static void reload_note(struct node *node, const char *why)
{
    if (node->reload_failed++ == 0) {
        snprintf(node->reload_error, sizeof(node->reload_error), "%s", why);
    }
}

/* The reload is over: tells its failures, if any, in one line. */
static void reload_tell(struct node *node)
{
    if (node->reload_failed > 0) {
        log_warn(node->subject,
                 "%s: SCRIPT LOAD after NOSCRIPT failed for %d of %d "
                 "scripts (%s)",
                 node->addr->display, node->reload_failed, SCRIPT__COUNT,
                 node->reload_error);
    }
    node->reload_failed = 0;
}

/* privdata: the script's index; the last script's reply ends the reload
 * (replies come in send order). */
static void reload_cb(struct node *node, struct redisReply *reply,
                      enum node_status status, void *privdata)
{
    if (status == NODE_TIMEOUT) {
        reload_note(node, "timed out");
    } else if (status != NODE_REPLY) {
        reload_note(node, "disconnected");
    } else if (reply->type == REDIS_REPLY_ERROR) {
        reload_note(node, reply->str);
    } else if (reply->type != REDIS_REPLY_STRING) {
        reload_note(node, "unexpected reply");
    }
    if ((int)(intptr_t)privdata == SCRIPT__COUNT - 1) {
        reload_tell(node);
    }
}

/* One SCRIPT LOAD per script; the SHA1s are those already known. */
static void scripts_reload(struct node *node)
{
    node->reload_failed = 0;
    for (int i = 0; i < SCRIPT__COUNT; i++) {
        const char *argv[3] = {"SCRIPT", "LOAD", script_source[i]};
        size_t lens[3] = {6, 4, strlen(script_source[i])};
        if (node_send_argv(node, 3, argv, lens, reload_cb, (void *)(intptr_t)i,
                           node->opts.timeout_ms) != 0) {
            reload_note(node, "not sent");
            if (i == SCRIPT__COUNT - 1) {
                reload_tell(node);
            }
        }
    }
}

/* ---- transport: the socket itself, or TLS on it (tls.c) -------------- */

static void write_arm(struct node *node, bool on)
{
    if (on && !node->write_armed) {
        event_add(node->write_ev, NULL);
    } else if (!on && node->write_armed) {
        event_del(node->write_ev);
    }
    node->write_armed = on;
}

/* node_send/node_recv's result for a TLS step that moved n bytes. */
static ssize_t tls_count(enum tls_io rc, size_t n)
{
    if (rc == TLS_OK) {
        return (ssize_t)n;
    }
    return rc == TLS_WANT_READ || rc == TLS_WANT_WRITE ? 0 : -1;
}

/* Sends up to len bytes. Returns the count; 0 when the socket must first
 * become writable (or, under TLS, readable: write_wants_read); -1 on an
 * error, with last_error set. */
static ssize_t node_send(struct node *node, const char *buf, size_t len)
{
    if (node->tls != NULL) {
        size_t n;
        enum tls_io rc = tls_write(node->tls, buf, len, &n, node->last_error,
                                   sizeof(node->last_error));
        node->write_wants_read = rc == TLS_WANT_READ;
        if (rc == TLS_WANT_READ) {
            write_arm(node, false); /* read_cb retries the write */
        } else if (rc == TLS_ERROR || rc == TLS_CLOSED) {
            /* The server's alert ("certificate required") may wait
             * behind the broken pipe: it says more than EPIPE. */
            char scratch[512], why[sizeof(node->last_error)];
            if (tls_read(node->tls, scratch, sizeof(scratch), &n, why,
                         sizeof(why)) == TLS_ERROR &&
                strstr(why, "alert") != NULL) {
                memcpy(node->last_error, why, sizeof(why));
            }
        }
        return tls_count(rc, n);
    }
    for (;;) {
        ssize_t n = write(node->fd, buf, len);
        if (n > 0) {
            return n;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        }
        node_set_error(node, "write: %s", strerror(n < 0 ? errno : EPIPE));
        return -1;
    }
}

/* Reads up to len bytes. Returns the count; 0 when nothing is there yet
 * (under TLS the read may wait for a writable socket: read_wants_write);
 * -1 when the server closed or the connection broke, last_error set. */
static ssize_t node_recv(struct node *node, char *buf, size_t len)
{
    if (node->tls != NULL) {
        size_t n;
        enum tls_io rc = tls_read(node->tls, buf, len, &n, node->last_error,
                                  sizeof(node->last_error));
        node->read_wants_write = rc == TLS_WANT_WRITE;
        if (rc == TLS_WANT_WRITE) {
            write_arm(node, true); /* write_cb retries the read */
        }
        return tls_count(rc, n);
    }
    ssize_t n;
    do {
        n = read(node->fd, buf, len);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        return n;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return 0;
    }
    if (n == 0) {
        node_set_error(node, "connection closed by the server%s", "");
    } else {
        node_set_error(node, "connection lost: %s", strerror(errno));
    }
    return -1;
}

/* One step of the TLS handshake, which runs before the queued Redis
 * handshake commands may go out; a failure is a failed connect. */
static void node_tls_handshake(struct node *node)
{
    char msg[sizeof(node->last_error)];
    enum tls_io rc = tls_handshake(node->tls, msg, sizeof(msg));
    if (rc == TLS_WANT_READ || rc == TLS_WANT_WRITE) {
        write_arm(node, rc == TLS_WANT_WRITE);
        return;
    }
    if (rc != TLS_OK) {
        node_attempt_failed(node, msg);
        node_drop(node, "TLS handshake");
        return;
    }
    node->tls_handshaking = false;
    write_arm(node, false);
    node_flush(node);
}

static void read_cb(evutil_socket_t fd, short what, void *arg);

/* TLS work an event owes before its usual job: a handshake step, or a
 * read or write that waited for this direction. Returns true when the
 * event is used up. */
static bool node_tls_event(struct node *node, short what)
{
    if (node->tls_handshaking) {
        node_tls_handshake(node);
        return true;
    }
    if (what == EV_WRITE && node->read_wants_write) {
        node->read_wants_write = false;
        read_cb(node->fd, EV_READ, node);
        return node->fd < 0; /* else flush as usual */
    }
    if (what == EV_READ && node->write_wants_read) {
        node->write_wants_read = false;
        node_flush(node);
        return node->fd < 0;
    }
    return false;
}

/* ---- output ---------------------------------------------------------- */

/* Grows *buf (of *cap bytes) to hold at least need bytes, doubling from
 * 16 KiB. Returns 0, or -1 (buffer unchanged) when memory ran out. */
static int buf_reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap) {
        return 0;
    }
    size_t c = *cap ? *cap : 16384;
    while (c < need) {
        c *= 2;
    }
    char *nb = realloc(*buf, c);
    if (nb == NULL) {
        return -1;
    }
    *buf = nb;
    *cap = c;
    return 0;
}

/* Appends bytes to the output buffer and makes sure they are written at the
 * end of this loop turn (or when the socket has room again). */
static int out_append(struct node *node, const char *buf, size_t len)
{
    if (node->olen + len > node->ocap) {
        if (node->ooff > 0) {
            /* Unsent bytes move to the front before the buffer grows. */
            memmove(node->obuf, node->obuf + node->ooff,
                    node->olen - node->ooff);
            node->olen -= node->ooff;
            node->ooff = 0;
        }
        if (buf_reserve(&node->obuf, &node->ocap, node->olen + len) != 0) {
            return -1;
        }
    }
    memcpy(node->obuf + node->olen, buf, len);
    node->olen += len;
    if (!node->flush_pending && !node->write_armed) {
        node->flush_pending = true;
        event_active(node->flush_ev, EV_WRITE, 1);
    }
    return 0;
}

/* Writes what the socket takes; arms EV_WRITE for the rest. */
static void node_flush(struct node *node)
{
    if (node->fd < 0 || !node->connected || node->tls_handshaking) {
        return; /* sent once the connect (and TLS handshake) completes */
    }
    if (guard_close(node) != 0) {
        return;
    }
    while (node->ooff < node->olen) {
        ssize_t n =
            node_send(node, node->obuf + node->ooff, node->olen - node->ooff);
        if (n > 0) {
            node->ooff += (size_t)n;
            continue;
        }
        if (n == 0) {
            write_arm(node, !node->write_wants_read);
            return;
        }
        if (node->tls != NULL) {
            /* As a failed read: the server's alert (a TLS 1.3 server
             * refusing our certificate after our handshake ended) may
             * surface on a write; say it where operators look. */
            log_warn(node->subject, "%s: %s", node->addr->display,
                     node->last_error);
        }
        node_drop(node, "write error");
        return;
    }
    node->olen = node->ooff = 0;
    if (node->ocap > 1024 * 1024) {
        /* Let a burst's buffer go; the next write starts small again. */
        free(node->obuf);
        node->obuf = NULL;
        node->ocap = 0;
    }
    write_arm(node, node->read_wants_write);
}

static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct node *node = arg;
    node->flush_pending = false;
    node_flush(node);
}

/* ---- replies ----------------------------------------------------------- */

/* ---- NOSCRIPT recovery ------------------------------------------------ */

/* A server that lost its script cache (SCRIPT FLUSH, a failover to a fresh
 * replica) answers NOSCRIPT to every EVALSHA until the scripts are loaded
 * again; the command did not run. Re-sending it must keep the order of
 * the connection: an acquire that ran after the rollback sent behind it
 * would leave its key for the whole TTL. Redis answers in order, so when
 * the first NOSCRIPT arrives the commands written after it have already
 * run, or will before anything we write now. So:
 *
 *   1. the first NOSCRIPT opens the window; rec_last is the last command
 *      written so far. New commands are held (hbuf; FIFO from held on);
 *   2. each NOSCRIPT'd command of the window joins the re-send list;
 *   3. a script command of the window that did run (another client loaded
 *      the scripts in between) ran before those on the list: an acquire
 *      on the list is not re-sent but answered with the error (it never
 *      ran, so nothing is left behind); a re-sent release, extend or
 *      completion can only find less to do, never create a key;
 *   4. rec_last's answer closes the window: the list goes out as EVAL in
 *      its order, then SCRIPT LOAD, then the held commands. */

static bool reply_is_noscript(const struct node_cmd *cmd,
                              const redisReply *reply)
{
    return cmd->prep != NULL && reply->type == REDIS_REPLY_ERROR &&
           reply->str != NULL && strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

/* Appends bytes of a held command to hbuf. */
static int hold_append(struct node *node, const char *buf, size_t len)
{
    if (buf_reserve(&node->hbuf, &node->hcap, node->hlen + len) != 0) {
        return -1;
    }
    memcpy(node->hbuf + node->hlen, buf, len);
    node->hlen += len;
    return 0;
}

/* Step 3: answers every acquire on the re-send list with the NOSCRIPT
 * error (in send order, ahead of the command that ran). Returns false when
 * a callback dropped the connection. */
static bool rec_fail_acquires(struct node *node)
{
    uint64_t gen = node->conn_gen;
    int failed = 0;
    struct node_cmd **pp = &node->rec_head;
    node->rec_tail = NULL;
    while (*pp != NULL) {
        struct node_cmd *cmd = *pp;
        if (cmd->script != SCRIPT_ACQUIRE) {
            node->rec_tail = cmd;
            pp = &cmd->rec_next;
            continue;
        }
        *pp = cmd->rec_next;
        cmd->rec_next = NULL;
        static char msg[] = "NOSCRIPT not re-sent: a later command ran first";
        redisReply err = {
            .type = REDIS_REPLY_ERROR, .str = msg, .len = sizeof(msg) - 1};
        cmd->q.done = true;
        failed++;
        if (cmd->cb != NULL) {
            cmd->cb(node, &err, NODE_REPLY, cmd->privdata);
        }
        cmd_put(node, cmd);
        if (node->conn_gen != gen) {
            return false; /* node_drop emptied the list */
        }
    }
    if (failed > 0) {
        log_warn(node->subject,
                 "NOSCRIPT: %d acquire(s) failed, not re-sent: a later "
                 "command ran before them (another client reloaded the "
                 "scripts)",
                 failed);
    }
    return true;
}

/* Step 4: re-sends the list as EVAL with the script body, keeping each
 * command's callback and deadline, reloads the scripts, and lets the held
 * commands go. Returns -1 when it dropped the connection. */
static int rec_close(struct node *node, uint64_t now)
{
    node->rec_active = false;
    node->rec_last = NULL;
    while (node->rec_head != NULL) {
        struct node_cmd *cmd = node->rec_head;
        node->rec_head = cmd->rec_next;
        cmd->rec_next = NULL;
        if (node->rec_head == NULL) {
            node->rec_tail = NULL;
        }
        const struct node_prep *pp = cmd->prep;
        const char *src = script_source[cmd->script];
        size_t src_len = strlen(src);
        /* EVAL <source> <numkeys> <argv...>: the source as a bulk string
         * whose header and trailer go around the script text. */
        char head[64];
        char *h = resp_put_header(head, '*', (size_t)pp->argc + 3);
        h = resp_put_bulk(h, "EVAL", 4);
        h = resp_put_header(h, '$', src_len);
        size_t hl = (size_t)(h - head);
        /* The FIFO takes it first: node_drop fails it if a write fails. */
        fifo_insert_before(node, cmd, node->held);
        cmd->sent_us = now;
        if (cmd->guarded) {
            node->guard_due = true; /* its guard answered before it */
        }
        if (out_append(node, head, hl) != 0 ||
            out_append(node, src, src_len) != 0 ||
            out_append(node, "\r\n", 2) != 0 ||
            out_append(node, pp->buf + pp->rest_off, pp->len - pp->rest_off) !=
                0) {
            /* Half a command may be in the buffer: the stream is broken. */
            node_set_error(node, "out of memory%s", "");
            node_drop(node, "out of memory");
            return -1;
        }
    }
    /* The SCRIPT LOADs go before the held commands too (node_enqueue puts
     * them before node->held); their deadline is no later than the first
     * held command's, so deadlines still grow along the FIFO. */
    scripts_reload(node);
    if (node->hlen > 0 && out_append(node, node->hbuf, node->hlen) != 0) {
        node_set_error(node, "out of memory%s", "");
        node_drop(node, "out of memory");
        return -1;
    }
    node->hlen = 0;
    node->held = NULL;
    if (node->guard_due_held) {
        /* The held guarded commands went out: their guard goes next. */
        node->guard_due_held = false;
        node->guard_due = true;
    }
    cmdq_find_live(&node->fifo);
    if (node->hcap > 1024 * 1024) {
        free(node->hbuf);
        node->hbuf = NULL;
        node->hcap = 0;
    }
    cmd_timer_arm(node);
    return 0;
}

/* A prefix's reply: an error is the first the sequence met, kept. */
static void queued_error_keep(struct node *node, const redisReply *reply)
{
    if (reply->type == REDIS_REPLY_ERROR && node->queued_error[0] == '\0') {
        snprintf(node->queued_error, sizeof(node->queued_error), "%s",
                 reply->str);
    }
}

/* The reply a sequence's caller gets: EXEC's "EXECABORT Transaction
 * discarded because of previous errors." names the error that aborted it
 * (an OOM, ...) in the form Redis uses when EXEC itself is refused ("...
 * because of: <error>"), in text (the string of *folded); any other reply
 * as it came. */
static redisReply *queued_error_fold(const struct node *node, redisReply *reply,
                                     redisReply *folded, char *text,
                                     size_t textlen)
{
    if (node->queued_error[0] == '\0' || reply->type != REDIS_REPLY_ERROR ||
        strncmp(reply->str, "EXECABORT", 9) != 0 ||
        strstr(reply->str, "previous errors") == NULL) {
        return reply;
    }
    int n = snprintf(text, textlen,
                     "EXECABORT Transaction discarded because of: %s",
                     node->queued_error);
    *folded = *reply;
    folded->str = text;
    folded->len = n < 0 ? 0 : (size_t)n < textlen ? (size_t)n : textlen - 1;
    return folded;
}

/* One reply, for the FIFO's head. */
static void node_handle_reply(struct node *node, redisReply *reply,
                              uint64_t now)
{
    struct node_cmd *cmd = fifo_head(node);
    uint64_t gen = node->conn_gen;
    bool noscript = reply_is_noscript(cmd, reply);
    if (noscript && !node->rec_active) {
        node->rec_active = true;
        node->rec_last = cmd_of(node->fifo.tail);
        log_warn(node->subject,
                 "NOSCRIPT: the server lost its scripts; re-sending in "
                 "order and reloading them");
    }
    bool window_end = node->rec_active && cmd == node->rec_last;
    cmdq_unlink(&node->fifo, &cmd->q);
    node->rtt_ms = (double)(now - cmd->sent_us) / 1000.0;
    node->last_reply_us = now;
    if (node->opts.push_cb == NULL) { /* not a subscriber */
        metrics_observe_node(node->index, now - cmd->sent_us);
    }
    if (noscript && !cmd->q.done) {
        /* Step 2: it did not run; it goes out again in its place. */
        cmd->rec_next = NULL;
        if (node->rec_tail != NULL) {
            node->rec_tail->rec_next = cmd;
        } else {
            node->rec_head = cmd;
        }
        node->rec_tail = cmd;
    } else {
        /* A timed-out command that met NOSCRIPT never ran, and its caller
         * was told already: nothing to re-send. */
        if (!noscript && node->rec_active && cmd->script >= 0 &&
            node->rec_head != NULL && !rec_fail_acquires(node)) {
            window_end = false;
        }
        if (!cmd->q.done) {
            cmd->q.done = true;
            if (cmd->prefix) {
                queued_error_keep(node, reply);
            } else if (cmd->cb != NULL) {
                char text[sizeof(node->queued_error) + 64];
                redisReply folded;
                cmd->cb(
                    node,
                    queued_error_fold(node, reply, &folded, text, sizeof(text)),
                    NODE_REPLY, cmd->privdata);
            }
        }
        if (!cmd->prefix) {
            node->queued_error[0] = '\0';
        }
        cmd_put(node, cmd);
    }
    if (window_end && node->conn_gen == gen) {
        (void)rec_close(node, now);
    }
}

/* A subscriber's pub/sub message, ["message", channel, payload]: goes to
 * push_cb, not to the FIFO. Returns true when r was one. */
static bool node_push(struct node *node, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING || r->element[0]->len != 7 ||
        memcmp(r->element[0]->str, "message", 7)) {
        return false;
    }
    node->last_reply_us = util_now_us();
    node->opts.push_cb(node, r->element[1]->str, r->element[1]->len,
                       node->state_priv);
    return true;
}

/* Input that is not RESP, or too much of it: the stream is lost. */
static void node_protocol_error(struct node *node, enum resp_status rc,
                                const char *why)
{
    node_set_error(node, "protocol error: %s",
                   rc == RESP_NOMEM ? "out of memory" : why);
    log_warn(node->subject, "%s: %s", node->addr->display, node->last_error);
    node_drop(node, "protocol error");
}

/* Reads what the socket has and runs a callback per complete reply. */
static void read_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct node *node = arg;
    uint64_t gen = node->conn_gen;
    if (node->tls != NULL && node_tls_event(node, EV_READ)) {
        return;
    }
    if (node->icap - node->ilen < 16384) {
        size_t cap = node->icap ? node->icap : 16384;
        while (cap - node->ilen < 16384) {
            cap *= 2;
        }
        char *nb = realloc(node->ibuf, cap);
        if (nb == NULL) {
            node_set_error(node, "out of memory%s", "");
            node_drop(node, "out of memory");
            return;
        }
        node->ibuf = nb;
        node->icap = cap;
    }
    ssize_t n =
        node_recv(node, node->ibuf + node->ilen, node->icap - node->ilen);
    if (n < 0) {
        if (node->tls != NULL) {
            log_warn(node->subject, "%s: %s", node->addr->display,
                     node->last_error);
        }
        node_drop(node, "read");
        return;
    }
    if (n == 0) {
        return;
    }
    node->ilen += (size_t)n;
    /* One clock reading serves the whole batch of replies. */
    uint64_t now = util_now_us();
    size_t off = 0;
    for (;;) {
        redisReply *r = NULL;
        if (node->ahead_ready && node->ahead_next < node->ahead_n) {
            r = node->ahead[node->ahead_next++]; /* read through a guard */
        } else {
            if (node->ahead_ready) {
                ahead_discard(node); /* all handled: resets */
            }
            if (off >= node->ilen) {
                break;
            }
            if (node->ahead_n > 0 || head_guarded(node)) {
                int rc = guard_read(node, &off);
                if (rc < 0) {
                    return; /* dropped, and the input with it */
                }
                if (rc == 0) {
                    break;
                }
                continue;
            }
            size_t used = 0;
            char why[64];
            enum resp_status rc = resp_parse(node->ibuf + off, node->ilen - off,
                                             &used, &r, why, sizeof(why));
            if (rc == RESP_INCOMPLETE) {
                break;
            }
            if (rc == RESP_OK && node->opts.push_cb != NULL &&
                node_push(node, r)) {
                off += used;
                resp_reply_free(r);
                if (node->conn_gen != gen) {
                    return;
                }
                continue;
            }
            if (rc == RESP_OK && node->fifo.head == NULL) {
                resp_reply_free(r);
                snprintf(why, sizeof(why), "a reply nobody asked for");
                rc = RESP_PROTOCOL;
            }
            if (rc != RESP_OK) {
                node_protocol_error(node, rc, why);
                return;
            }
            off += used;
        }
        node_handle_reply(node, r, now);
        resp_reply_free(r);
        if (node->conn_gen != gen) {
            return; /* a callback dropped this connection (and the input) */
        }
    }
    /* Keep only the partial reply, at the front. */
    if (off > 0) {
        memmove(node->ibuf, node->ibuf + off, node->ilen - off);
        node->ilen -= off;
    }
    if (node->tls != NULL && tls_pending(node->tls)) {
        /* Decrypted bytes wait in the session, not on the socket. */
        event_active(node->read_ev, EV_READ, 1);
    }
}

/* Queues the formatted bytes buf[0..len) of n commands (cmds[], callbacks
 * filled by the caller, in wire order): all of them or none. During a
 * NOSCRIPT recovery they are held (hbuf, the FIFO's tail from held on);
 * while the recovery ends (rec_close) they go ahead of the held commands,
 * and no deadline may then pass a held one's. Returns 0, or -1 (out of
 * memory) having returned every cmd to the pool. */
static int node_enqueue(struct node *node, struct node_cmd **cmds, int n,
                        const char *buf, size_t len, int timeout_ms,
                        uint64_t now)
{
    if ((node->rec_active ? hold_append(node, buf, len)
                          : out_append(node, buf, len)) != 0) {
        for (int k = 0; k < n; k++) {
            cmd_put(node, cmds[k]);
        }
        return -1;
    }
    node->last_send_us = now;
    for (int k = 0; k < n; k++) {
        struct node_cmd *cmd = cmds[k];
        cmd->sent_us = now;
        cmd->q.deadline_us = now + (uint64_t)timeout_ms * 1000u;
        if (node->held != NULL && !node->rec_active &&
            node->held->q.deadline_us < cmd->q.deadline_us) {
            cmd->q.deadline_us = node->held->q.deadline_us;
        }
        fifo_insert_before(node, cmd, node->rec_active ? NULL : node->held);
        if (node->rec_active && node->held == NULL) {
            node->held = cmd;
        }
    }
    cmd_timer_arm(node);
    return 0;
}

/* ---- public send API --------------------------------------------------- */

static bool node_accepts(const struct node *node)
{
    return node->state == NODE_UP && node->fd >= 0 &&
           node->fifo.len < node->opts.max_pending;
}

int node_prepare(struct node_prep *p, enum node_script script, int argc,
                 const char **argv, const size_t *argvlen)
{
    return node_prepare_keys(p, script, script_numkeys[script], argc, argv,
                             argvlen);
}

int node_prepare_keys(struct node_prep *p, enum node_script script, int numkeys,
                      int argc, const char **argv, const size_t *argvlen)
{
    p->script = script;
    p->plain = false;
    p->guarded = false;
    p->n_cmds = 1;
    p->argc = argc;
    p->buf = NULL;
    if (known_sha[script][0] == '\0') {
        return -1; /* no node has loaded the scripts yet */
    }
    /* EVALSHA <sha> <numkeys> <argv...> */
    size_t len = resp_header_len((size_t)argc + 3) + resp_bulk_len(7) +
                 resp_bulk_len(SHA_LEN) +
                 resp_bulk_len(resp_digits((unsigned)numkeys)) +
                 resp_bulks_len(argc, argvlen);
    char *buf = len <= sizeof(p->inline_buf) ? p->inline_buf : malloc(len);
    if (buf == NULL) {
        return -1;
    }
    char *q = resp_put_header(buf, '*', (size_t)argc + 3);
    q = resp_put_bulk(q, "EVALSHA", 7);
    q = resp_put_bulk(q, known_sha[script], SHA_LEN);
    p->rest_off = (size_t)(q - buf);
    q = resp_put_bulk_uint(q, (unsigned)numkeys);
    q = resp_put_bulks(q, argc, argv, argvlen);
    p->buf = buf;
    p->len = (size_t)(q - buf);
    return 0;
}

int node_prepare_commands(struct node_prep *p, int n_cmds, const int *argcs,
                          const char **argv, const size_t *argvlen)
{
    p->script = SCRIPT_ACQUIRE; /* unused: plain */
    p->plain = true;
    p->guarded = false;
    p->n_cmds = n_cmds;
    p->argc = 0;
    p->buf = NULL;
    size_t len = 0;
    int a = 0;
    for (int k = 0; k < n_cmds; k++) {
        len += resp_command_len(argcs[k], argvlen + a);
        a += argcs[k];
    }
    char *buf = len <= sizeof(p->inline_buf) ? p->inline_buf : malloc(len);
    if (buf == NULL) {
        return -1;
    }
    char *q = buf;
    a = 0;
    for (int k = 0; k < n_cmds; k++) {
        q = resp_put_command(q, argcs[k], argv + a, argvlen + a);
        a += argcs[k];
    }
    p->buf = buf;
    p->len = (size_t)(q - buf);
    p->rest_off = 0;
    return 0;
}

void node_prep_free(struct node_prep *p)
{
    if (p->buf != NULL && p->buf != p->inline_buf) {
        free(p->buf);
    }
    p->buf = NULL;
}

/* Plain prepared commands: every command of p or none. */
static int node_send_plain(struct node *node, const struct node_prep *p,
                           uint64_t now, node_reply_fn *cb, void *privdata,
                           bool guarded)
{
    struct node_cmd *cmds[8];
    if (p->n_cmds < 1 || p->n_cmds > 8 ||
        node->fifo.len + p->n_cmds > node->opts.max_pending) {
        return -1;
    }
    for (int k = 0; k < p->n_cmds; k++) {
        cmds[k] = cmd_get(node);
        if (cmds[k] == NULL) {
            while (k-- > 0) {
                cmd_put(node, cmds[k]);
            }
            return -1;
        }
    }
    /* Only the last reply is the caller's: the others (MULTI's OK,
     * QUEUED) are read and dropped in order. */
    for (int k = 0; k < p->n_cmds - 1; k++) {
        cmds[k]->prefix = true;
    }
    cmds[p->n_cmds - 1]->cb = cb;
    cmds[p->n_cmds - 1]->privdata = privdata;
    cmds[p->n_cmds - 1]->guarded = guarded;
    return node_enqueue(node, cmds, p->n_cmds, p->buf, p->len,
                        node->opts.timeout_ms, now);
}

int node_send_prepared(struct node *node, const struct node_prep *p,
                       uint64_t now, node_reply_fn *cb, void *privdata)
{
    if (!node_accepts(node) || p->buf == NULL) {
        return -1;
    }
    if (p->guarded && node_unmarked(node) != NULL) {
        return -1; /* a flush of it would go unseen: it does not vote */
    }
    /* Guarded where there is a mark to compare (see guard_close). */
    bool guarded = p->guarded && node->guard_buf != NULL &&
                   node->up.dataset[0] != '\0' && !node->dataset_refused;
    int rc;
    if (p->plain) {
        rc = node_send_plain(node, p, now, cb, privdata, guarded);
    } else if (!node->sha_ok[p->script]) {
        return -1;
    } else {
        struct node_cmd *cmd = cmd_get(node);
        if (cmd == NULL) {
            return -1;
        }
        cmd->cb = cb;
        cmd->privdata = privdata;
        cmd->script = (int)p->script;
        cmd->prep = p;
        cmd->guarded = guarded;
        rc = node_enqueue(node, &cmd, 1, p->buf, p->len, node->opts.timeout_ms,
                          now);
    }
    if (rc == 0 && guarded) {
        /* Held behind a NOSCRIPT recovery, or going out now. */
        if (node->rec_active) {
            node->guard_due_held = true;
        } else {
            node->guard_due = true;
        }
    }
    return rc;
}

int node_script(struct node *node, enum node_script script, int argc,
                const char **argv, const size_t *argvlen, node_reply_fn *cb,
                void *privdata)
{
    if (!node_accepts(node)) {
        return -1;
    }
    struct node_prep *p = malloc(sizeof(*p));
    if (p == NULL || node_prepare(p, script, argc, argv, argvlen) != 0) {
        free(p);
        return -1;
    }
    struct node_cmd *cmd = cmd_get(node);
    if (cmd == NULL) {
        node_prep_free(p);
        free(p);
        return -1;
    }
    cmd->cb = cb;
    cmd->privdata = privdata;
    cmd->script = (int)script;
    cmd->prep = p;
    cmd->owned_prep = p; /* freed with the command */
    return node_enqueue(node, &cmd, 1, p->buf, p->len, node->opts.timeout_ms,
                        util_now_us());
}

static int node_send_argv(struct node *node, int argc, const char **argv,
                          const size_t *argvlen, node_reply_fn *cb,
                          void *privdata, int timeout_ms)
{
    struct node_cmd *cmd = cmd_get(node);
    if (cmd == NULL) {
        return -1;
    }
    cmd->cb = cb;
    cmd->privdata = privdata;
    size_t len = resp_command_len(argc, argvlen);
    char stack[512];
    char *buf = len <= sizeof(stack) ? stack : malloc(len);
    if (buf == NULL) {
        cmd_put(node, cmd);
        return -1;
    }
    char *q = resp_put_command(buf, argc, argv, argvlen);
    int rc = node_enqueue(node, &cmd, 1, buf, (size_t)(q - buf), timeout_ms,
                          util_now_us());
    if (buf != stack) {
        free(buf);
    }
    return rc;
}

int node_command(struct node *node, int argc, const char **argv,
                 const size_t *argvlen, node_reply_fn *cb, void *privdata)
{
    if (!node_accepts(node)) {
        return -1;
    }
    return node_send_argv(node, argc, argv, argvlen, cb, privdata,
                          node->opts.timeout_ms);
}

/* ---- heartbeat ----------------------------------------------------------- */

#define PING_INTERVAL_MS 1000
/* How often an up node's eviction policy (and, for a ?persistent=1 node,
 * its AOF) is read again, so a CONFIG SET on a live node shows without a
 * reconnect. An INFO section costs the node a few microseconds. */
#define CONFIG_CHECK_MS 5000

static void node_check_eviction(struct node *node, const char *info);
static void node_check_persistence(struct node *node, const char *info);
static void node_check_role(struct node *node, const char *info);
static void node_check_replid(struct node *node, const char *info);
static void dataset_check_cb(struct node *node, struct redisReply *reply,
                             enum node_status status, void *privdata);
static void mark_retry(struct node *node);

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
static void config_check_cb(struct node *node, struct redisReply *reply,
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

static void ping_cb(struct node *node, struct redisReply *reply,
                    enum node_status status, void *privdata)
{
    (void)node;
    (void)reply;
    (void)status;
    (void)privdata;
}

/* Every second a lock connection gets INFO replication, and an idle
 * subscriber a PING, so a frozen or half-dead server is noticed (timeouts,
 * then the stall rule) without waiting for traffic, and health shows a
 * fresh round trip; the slower INFO checks go every CONFIG_CHECK_MS. */
static void ping_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct node *node = arg;
    uint64_t now = util_now_us();
    if (node->state == NODE_UP && node->opts.push_cb == NULL) {
        /* Every tick, idle or not: until it shows a node that synced from
         * a master (node_check_replid), the node counts with its lock keys
         * gone. It is the heartbeat too. */
        const char *argv[2] = {"INFO", "replication"};
        size_t lens[2] = {4, 11};
        (void)node_command(node, 2, argv, lens, config_check_cb,
                           (void *)(intptr_t)HANDSHAKE_INFO_REPLICATION);
        /* Likewise for a node emptied under the same run_id and
         * replication id (FLUSHALL, a server swapped behind a proxy). */
        if (node->last.dataset[0] != '\0' && !node->dataset_refused) {
            argv[0] = "GET";
            lens[0] = 3;
            argv[1] = node->opts.dataset_key;
            lens[1] = strlen(node->opts.dataset_key);
            (void)node_command(node, 2, argv, lens, dataset_check_cb, NULL);
        } else if (node_unmarked(node) != NULL && !node->mark_retrying) {
            mark_retry(node); /* its acquires count once it stands */
        }
    } else if (node->state == NODE_UP &&
               now - node->last_send_us >= PING_INTERVAL_MS * 1000u) {
        const char *argv[1] = {"PING"};
        size_t lens[1] = {4};
        (void)node_command(node, 1, argv, lens, ping_cb, NULL);
    }
    if (node->state == NODE_UP && node->opts.push_cb == NULL &&
        now - node->evict_checked_us >= CONFIG_CHECK_MS * 1000u) {
        const char *argv[2] = {"INFO", "memory"};
        size_t lens[2] = {4, 6};
        node->evict_checked_us = now;
        (void)node_command(node, 2, argv, lens, config_check_cb,
                           (void *)(intptr_t)HANDSHAKE_INFO_MEMORY);
        if (node->addr->persistent) {
            argv[1] = "persistence";
            lens[1] = 11;
            (void)node_command(node, 2, argv, lens, config_check_cb,
                               (void *)(intptr_t)HANDSHAKE_INFO_PERSISTENCE);
        }
    }
}

/* ---- connection lifecycle ---------------------------------------------- */

static void node_schedule_reconnect(struct node *node)
{
    uint32_t delay = redlock_backoff_ms(
        node->attempt, (uint32_t)node->opts.backoff_base_ms,
        (uint32_t)node->opts.backoff_cap_ms, (double)random() / RAND_MAX);
    node->attempt++;
    struct timeval tv = {(time_t)(delay / 1000),
                         (suseconds_t)(delay % 1000) * 1000};
    evtimer_add(node->conn_timer, &tv);
}

/* An evicting node can drop a lock key under memory pressure before its
 * ttl: for Redlock that is the node losing the lock, as in a restart
 * without persistence, and a second client may then take it. Every lock
 * key has a ttl, so the volatile-* policies evict them too; only
 * noeviction (writes fail with OOM instead) or no maxmemory are safe.
 * Checked at each handshake and every CONFIG_CHECK_MS while up. */
static void node_check_eviction(struct node *node, const char *info)
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
static void node_check_persistence(struct node *node, const char *info)
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
static void node_check_role(struct node *node, const char *info)
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
static void node_check_replid(struct node *node, const char *info)
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

/* ---- the data-set key ---------------------------------------------------
 * One key per node, <prefix>dataset, holds a random mark that the first
 * daemon to meet the node sets (SET NX) and every daemon reads at each
 * handshake and every second. Only an emptied data set loses it: a new
 * mark means the lock keys were lost too, under a run_id and replication
 * id that did not change (node_emptied). */

/* A refusal of the data-set key's commands: NOPERM (an ACL that does not
 * name the key) is told once; the node goes on without a mark, unguarded.
 * Returns true for it. Any other error (OOM at maxmemory, NOREPLICAS,
 * MISCONF, READONLY, ...) is no reason to go unguarded: it leaves the mark
 * unknown, and a node up without one does not vote (node_unmarked). */
static bool dataset_refused(struct node *node, const char *text)
{
    if (strncmp(text, "NOPERM", 6) != 0) {
        return false;
    }
    if (!node->dataset_warned) {
        node->dataset_warned = true;
        log_warn(node->subject,
                 "%s: the data-set key %s was refused (%.100s): a FLUSHALL "
                 "or FLUSHDB of this node will go unseen; allow the key to "
                 "the daemon's Redis user (docs/operations.md)",
                 node->addr->display, node->opts.dataset_key, text);
    }
    node->dataset_refused = true;
    return true;
}

/* A lock connection with no mark read and no ACL refusal of the key. */
static bool mark_unknown(const struct node *node)
{
    return node->opts.dataset_key != NULL && node->opts.push_cb == NULL &&
           !node->dataset_refused && node->last.dataset[0] == '\0';
}

/* Why the mark is unknown: the refusal, or a key found empty. */
static const char *mark_text(const struct node *node)
{
    return node->mark_why[0] != '\0' ? node->mark_why
                                     : "data-set key: no mark read";
}

/* A SET or GET of the mark (step) refused with text: unless the ACL's
 * NOPERM, it is the reason the mark is unknown, for health and the log. */
static void mark_refused(struct node *node, const char *step, const char *text)
{
    if (!dataset_refused(node, text)) {
        snprintf(node->mark_why, sizeof(node->mark_why),
                 "data-set key: %s refused (%.80s)", step, text);
    }
}

/* Tells, once per spell, that a connection coming up has no mark, and
 * why, and then that one read it again. */
static void mark_tell(struct node *node)
{
    if (mark_unknown(node) && !node->mark_logged) {
        node->mark_logged = true;
        log_warn(node->subject,
                 "%s: no data-set mark (%s): a FLUSHALL of this node would "
                 "go unseen, so its acquires do not count until the mark is "
                 "set; trying again every second",
                 node->addr->display, mark_text(node));
    } else if (!mark_unknown(node) && node->mark_logged) {
        node->mark_logged = false;
        log_info(node->subject,
                 "%s: the data-set mark is read again: its acquires count",
                 node->addr->display);
    }
}

/* A PTTL or PEXPIRE of the mark (step) refused with text: the mark's age
 * is not known, which only the start-up check reads; told once until a
 * PTTL answers again. */
static void date_refused(struct node *node, const char *step, const char *text)
{
    if (node->date_warned || node->dataset_refused) {
        return; /* the ACL refuses the whole key: told already */
    }
    node->date_warned = true;
    log_warn(node->subject,
             "%s: %s of the data-set key %s was refused (%.100s): the mark's "
             "age is not known, so a flush just before this daemon met the "
             "node may go unseen",
             node->addr->display, step, node->opts.dataset_key, text);
}

/* The mark a GET answered into out ("" for none). */
static void dataset_read(const struct redisReply *reply,
                         char out[RESTART_MARK_LEN + 1])
{
    size_t n = 0;
    if (reply->type == REDIS_REPLY_STRING) {
        n = reply->len < RESTART_MARK_LEN ? reply->len : RESTART_MARK_LEN;
        memcpy(out, reply->str, n);
    }
    out[n] = '\0';
}

/* The mark's TTL (RESTART_DATASET_TTL_MS) as a command argument. */
static const char *dataset_ttl_arg(void)
{
    static char ttl[24];
    if (ttl[0] == '\0') {
        snprintf(ttl, sizeof(ttl), "%llu",
                 (unsigned long long)RESTART_DATASET_TTL_MS);
    }
    return ttl;
}

/* The mark in a GET's reply is the one the connection came up with (or
 * cannot be checked: no mark known, or an error, which the check's
 * callback reads). *gone: the reply had no mark at all. */
static bool dataset_same(const struct node *node, const redisReply *reply,
                         bool *gone)
{
    char mark[RESTART_MARK_LEN + 1];
    *gone = false;
    if (reply->type == REDIS_REPLY_ERROR || node->up.dataset[0] == '\0') {
        return true;
    }
    dataset_read(reply, mark);
    *gone = mark[0] == '\0';
    return strcmp(mark, node->up.dataset) == 0;
}

/* The mark gone or changed since the handshake means the node was
 * emptied. As for a new replication id, the connection is dropped, so
 * that the reconnect's handshake (which sets a new mark) quarantines it. */
static void dataset_lost(struct node *node, bool gone)
{
    node_set_error(node, "data-set key %s: the node was emptied",
                   gone ? "gone" : "changed");
    log_warn(node->subject,
             "%s: the data-set key %s is %s (FLUSHALL, FLUSHDB, eviction, "
             "or another server behind the address), so its lock keys are "
             "gone too; reconnecting, to quarantine it as after a restart",
             node->addr->display, node->opts.dataset_key,
             gone ? "gone" : "set anew");
    node_drop(node, "data-set key changed");
}

/* A GET of the mark on a live connection (a guard's, or the check every
 * second) answered the error text: nothing shows that no flush came, so
 * the connection is dropped and the reconnect's handshake reads the mark
 * again. A NOPERM is told once (dataset_refused), and the reconnect goes
 * on unguarded; after any other error it finds no mark and does not vote
 * until it has one (node_unmarked). */
static void dataset_unreadable(struct node *node, const char *text, bool guard)
{
    (void)dataset_refused(node, text);
    node_set_error(node, "data-set key: GET refused (%.100s)", text);
    if (guard) {
        log_warn(node->subject,
                 "%s: the data-set guard was refused (%.100s): this turn's "
                 "acquires do not count on it; reconnecting",
                 node->addr->display, text);
    } else {
        log_warn(node->subject,
                 "%s: the data-set check was refused (%.100s): a flush of "
                 "the node could not be seen; reconnecting",
                 node->addr->display, text);
    }
    node_drop(node,
              guard ? "data-set guard refused" : "data-set check refused");
}

/* The check every second, and each guard's reply (guard_close). A guard
 * read by guard_read was compared there already; comparing again costs
 * one strcmp per turn and covers the guards whose acquires all timed out,
 * which are read as plain replies. */
static void dataset_check_cb(struct node *node, struct redisReply *reply,
                             enum node_status status, void *privdata)
{
    (void)privdata;
    if (status != NODE_REPLY || node->state != NODE_UP) {
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        dataset_unreadable(node, reply->str, false);
        return;
    }
    bool gone;
    if (!dataset_same(node, reply, &gone)) {
        dataset_lost(node, gone);
    }
}

/* A retry of the mark on a connection up without one: SET's reply
 * (privdata NULL), then GET's. A mark that stands now is read as a
 * handshake reads it (its age, a change since the last one, the start-up
 * check), so the connection is dropped and the reconnect counts the node
 * again. */
static void mark_retry_cb(struct node *node, struct redisReply *reply,
                          enum node_status status, void *privdata)
{
    bool get = privdata != NULL;
    if (get) {
        node->mark_retrying = false;
    }
    if (status != NODE_REPLY || node_unmarked(node) == NULL) {
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        mark_refused(node, get ? "GET" : "SET", reply->str);
        log_debug(node->subject, "%s: %s", node->addr->display,
                  mark_text(node));
        return;
    }
    char mark[RESTART_MARK_LEN + 1];
    if (!get) {
        return;
    }
    dataset_read(reply, mark);
    if (mark[0] == '\0') {
        return;
    }
    log_info(node->subject,
             "%s: the data-set key %s is set now; reconnecting, to read it "
             "as a handshake does",
             node->addr->display, node->opts.dataset_key);
    node_set_error(node, "data-set key %s: reconnecting to read it", "set");
    node_drop(node, "data-set key set");
}

/* Sends the retry: SET NX as at the handshake, then GET. */
static void mark_retry(struct node *node)
{
    char mark[RESTART_MARK_LEN + 1];
    node->opts.dataset_mark(mark);
    const char *argv[6] = {"SET", node->opts.dataset_key, mark, "NX",
                           "PX",  dataset_ttl_arg()};
    size_t lens[6];
    for (int i = 0; i < 6; i++) {
        lens[i] = strlen(argv[i]);
    }
    if (node_command(node, 6, argv, lens, mark_retry_cb, NULL) != 0) {
        return; /* overloaded: next second */
    }
    argv[0] = "GET";
    lens[0] = 3;
    node->mark_retrying =
        node_command(node, 2, argv, lens, mark_retry_cb, node) == 0;
}

/* ---- the data-set guard -------------------------------------------------
 * An emptied node grants every acquire, whatever is held elsewhere, and
 * the check every second left it up to a second to vote so. So a turn's
 * write to a node that carries an acquire ends with a GET of the data-set
 * key (the guard), and an acquire's reply is handled only once the reply
 * of the first guard after it is read too and shows the mark this
 * connection came up with. Redis runs a connection's commands in order:
 * the mark still there after the acquire ran means no flush came before
 * it. A mark gone or changed drops the connection before any of those
 * replies is handled, so their acquires count as failed on this node,
 * and the reconnect quarantines it. Redis answers the commands of one
 * read together, so the guard costs the node a GET per turn, not a round
 * trip. Nodes whose mark the ACL refuses (NOPERM) are not guarded: the
 * 1 s check cannot read it either. A node whose mark is unknown for any
 * other reason does not vote at all (node_unmarked). */

/* Queues one guard: right after the guarded commands that go out now
 * (before any held by a NOSCRIPT recovery, which wait for a reply that
 * must not wait for this guard), or after the held ones. Returns 0 or -1
 * (no memory). */
static int guard_queue(struct node *node, bool held)
{
    struct node_cmd *cmd = cmd_get(node);
    if (cmd == NULL) {
        return -1;
    }
    cmd->cb = dataset_check_cb;
    cmd->guard = true;
    /* This write is under way: queuing must not ask for another. */
    bool pending = node->flush_pending;
    node->flush_pending = true;
    int rc = held ? hold_append(node, node->guard_buf, node->guard_len)
                  : out_append(node, node->guard_buf, node->guard_len);
    node->flush_pending = pending;
    if (rc != 0) {
        cmd_put(node, cmd);
        return -1;
    }
    /* The turn's last send time: an earlier clock reading only makes the
     * deadline stricter, and saves one. */
    cmd->sent_us = node->last_send_us;
    cmd->q.deadline_us =
        node->last_send_us + (uint64_t)node->opts.timeout_ms * 1000u;
    if (held) {
        cmdq_push(&node->fifo, &cmd->q);
    } else {
        if (node->held != NULL &&
            node->held->q.deadline_us < cmd->q.deadline_us) {
            cmd->q.deadline_us = node->held->q.deadline_us;
        }
        fifo_insert_before(node, cmd, node->held);
        cmdq_find_live(&node->fifo);
    }
    cmd_timer_arm(node);
    return 0;
}

/* Queues the guards this turn owes, as its write goes out. Returns 0, or
 * -1 when it dropped the connection (no memory: guarded commands must not
 * go out unguarded). */
static int guard_close(struct node *node)
{
    int rc = 0;
    if (node->guard_due) {
        node->guard_due = false;
        rc = guard_queue(node, false);
    }
    if (rc == 0 && node->guard_due_held && node->rec_active) {
        node->guard_due_held = false;
        rc = guard_queue(node, true);
    }
    if (rc != 0) {
        node_set_error(node, "out of memory%s", "");
        node_drop(node, "out of memory");
    }
    return rc;
}

/* Formats the guard's GET once per node (a lock connection with a data-set
 * key). Returns 0 or -1 (no memory). */
static int guard_format(struct node *node)
{
    if (node->opts.dataset_key == NULL || node->opts.push_cb != NULL) {
        return 0;
    }
    const char *argv[2] = {"GET", node->opts.dataset_key};
    size_t lens[2] = {3, strlen(node->opts.dataset_key)};
    node->guard_buf = malloc(resp_command_len(2, lens));
    if (node->guard_buf == NULL) {
        return -1;
    }
    node->guard_len =
        (size_t)(resp_put_command(node->guard_buf, 2, argv, lens) -
                 node->guard_buf);
    return 0;
}

/* Frees the replies read ahead and not handled (a dropped connection). */
static void ahead_discard(struct node *node)
{
    while (node->ahead_next < node->ahead_n) {
        resp_reply_free(node->ahead[node->ahead_next++]);
    }
    node->ahead_n = node->ahead_next = 0;
    node->ahead_ready = false;
}

static void node_protocol_error(struct node *node, enum resp_status rc,
                                const char *why);

/* The FIFO's head is a guarded command: reads its reply and those after
 * it through the first guard's into node->ahead, consuming their bytes
 * (*off). Replies already read ahead are kept: a large turn's replies may
 * take several reads. Returns 1 when they are all there and the mark
 * stood (node->ahead_ready), 0 when more must be read, -1 when the
 * connection was dropped (the mark gone or changed, bad input). */
static int guard_read(struct node *node, size_t *off)
{
    int k = 1;
    const struct node_cmd *g = fifo_head(node);
    while (g != NULL && !g->guard) {
        g = cmd_of(g->q.next);
        k++;
    }
    if (g == NULL) {
        k = 1; /* no guard queued: guard_close never lets this happen */
    }
    if (k > node->ahead_cap) {
        int cap = node->ahead_cap ? node->ahead_cap : 64;
        while (cap < k) {
            cap *= 2;
        }
        redisReply **na = realloc(node->ahead, (size_t)cap * sizeof(*na));
        if (na == NULL) {
            node_set_error(node, "out of memory%s", "");
            node_drop(node, "out of memory");
            return -1;
        }
        node->ahead = na;
        node->ahead_cap = cap;
    }
    while (node->ahead_n < k) {
        size_t used = 0;
        char why[64];
        redisReply *r = NULL;
        enum resp_status rc = resp_parse(node->ibuf + *off, node->ilen - *off,
                                         &used, &r, why, sizeof(why));
        if (rc == RESP_INCOMPLETE) {
            return 0;
        }
        if (rc != RESP_OK) {
            node_protocol_error(node, rc, why);
            return -1;
        }
        node->ahead[node->ahead_n++] = r;
        *off += used;
    }
    if (g == NULL) {
        node->ahead_ready = true;
        return 1;
    }
    const redisReply *gr = node->ahead[k - 1];
    if (gr->type == REDIS_REPLY_ERROR) {
        /* Nothing shows that no flush came before these acquires: they
         * do not count. */
        dataset_unreadable(node, gr->str, true);
        return -1;
    }
    bool gone;
    if (!dataset_same(node, gr, &gone)) {
        dataset_lost(node, gone);
        return -1;
    }
    node->ahead_ready = true;
    return 1;
}

static void handshake_send(struct node *node, int argc, const char **argv,
                           size_t *lens, int tag);

/* A mark without a TTL (set by a daemon before marks were dated) gets
 * one now, so that daemons started later can date it: dated later than it
 * was set, it can only look younger, and a young mark only quarantines.
 * This daemon leaves it undated. */
static void dataset_date(struct node *node)
{
    const char *argv[3] = {"PEXPIRE", node->opts.dataset_key,
                           dataset_ttl_arg()};
    size_t lens[3];
    handshake_send(node, 3, argv, lens, HANDSHAKE_DATASET_DATE);
}

/* A handshake command failed (an error, a timeout, a drop): so does the
 * connection, told once per attempt. */
static void handshake_fail(struct node *node, const redisReply *reply,
                           enum node_status status)
{
    if (node->handshake_failed) {
        return;
    }
    char msg[sizeof(node->last_error)];
    node->handshake_failed = true;
    if (status == NODE_TIMEOUT) {
        snprintf(msg, sizeof(msg), "%s", connect_timeout_text(node));
    } else {
        snprintf(msg, sizeof(msg), "handshake failed: %s",
                 status == NODE_REPLY ? reply->str : "disconnected");
    }
    node_attempt_failed(node, msg);
    node_drop(node, "handshake");
}

/* The mark is a check, not a condition of service: a node whose mark
 * stays unknown comes up but does not vote (node_unmarked); its age only
 * serves the start-up check. */
static void handshake_dataset_refused(struct node *node,
                                      enum handshake_step step,
                                      const char *text)
{
    if (step == HANDSHAKE_DATASET_SET) {
        mark_refused(node, "SET", text);
    } else if (step == HANDSHAKE_DATASET_GET) {
        mark_refused(node, "GET", text);
    } else {
        date_refused(node, step == HANDSHAKE_DATASET_PTTL ? "PTTL" : "PEXPIRE",
                     text);
    }
}

/* The server's run_id: a new one means the node restarted and may have
 * lost every key (restart quarantine, in cluster.c). */
static void handshake_info_server(struct node *node, const char *info)
{
    info_run_id(info, node->last.run_id, sizeof(node->last.run_id));
    node->version = info_version(info);
    uint64_t up_s;
    node->started_us = info_uptime_s(info, &up_s)
                           ? restart_started_us(util_now_us(), up_s)
                           : 0;
}

static void handshake_info_replication(struct node *node, const char *info)
{
    info_replid(info, node->last.replid, sizeof(node->last.replid));
    node_check_role(node, info);
}

static void handshake_dataset_pttl(struct node *node, const redisReply *reply)
{
    if (reply->type != REDIS_REPLY_INTEGER) {
        return;
    }
    node->date_warned = node->date_warned && reply->integer == -1;
    node->dataset_born_us =
        restart_dataset_born_us(util_now_us(), reply->integer);
    if (reply->integer == -1) {
        dataset_date(node);
    }
}

/* Returns -1 when the reply is no SHA1 (the connection is dropped). */
static int handshake_script_load(struct node *node, int script,
                                 const redisReply *reply)
{
    if (reply->type != REDIS_REPLY_STRING || reply->len != SHA_LEN) {
        node->handshake_failed = true;
        node_set_error(node, "SCRIPT LOAD: unexpected reply%s", "");
        node_drop(node, "handshake");
        return -1;
    }
    memcpy(node->sha[script], reply->str, SHA_LEN);
    node->sha[script][SHA_LEN] = '\0';
    if (known_sha[script][0] == '\0') {
        memcpy(known_sha[script], node->sha[script], SHA_LEN + 1);
    }
    node->sha_ok[script] = strcmp(known_sha[script], node->sha[script]) == 0;
    if (!node->sha_ok[script]) {
        log_error(node->subject,
                  "SCRIPT LOAD returned an unexpected SHA1 "
                  "for script %d",
                  script);
    }
    return 0;
}

/* A step's reply that is no error. Returns -1 when it dropped the
 * connection. */
static int handshake_step_done(struct node *node, enum handshake_step step,
                               int script, const redisReply *reply)
{
    const char *info = reply->type == REDIS_REPLY_STRING ? reply->str : "";
    switch (step) {
    case HANDSHAKE_AUTH:
    case HANDSHAKE_PING:
    case HANDSHAKE_SELECT:
    case HANDSHAKE_DATASET_SET:
    case HANDSHAKE_DATASET_DATE:
        break;
    case HANDSHAKE_INFO_SERVER:
        handshake_info_server(node, info);
        break;
    case HANDSHAKE_INFO_MEMORY:
        node_check_eviction(node, info);
        break;
    case HANDSHAKE_INFO_REPLICATION:
        handshake_info_replication(node, info);
        break;
    case HANDSHAKE_INFO_PERSISTENCE:
        node_check_persistence(node, info);
        break;
    case HANDSHAKE_DATASET_GET:
        dataset_read(reply, node->last.dataset);
        break;
    case HANDSHAKE_DATASET_PTTL:
        handshake_dataset_pttl(node, reply);
        break;
    case HANDSHAKE_SCRIPT_LOAD:
        return handshake_script_load(node, script, reply);
    }
    return 0;
}

/* The last handshake reply: the connection is up. */
static void handshake_up(struct node *node)
{
    evtimer_del(node->conn_timer);
    node->last_error[0] = '\0';
    restart_ident_up(&node->prev_up, &node->up, &node->last);
    node->first_marked = !node->mark_seen && node->last.dataset[0] != '\0';
    node->mark_seen = node->mark_seen || node->last.dataset[0] != '\0';
    mark_tell(node);
    node_set_state(node, NODE_UP);
}

/* Handshake replies (privdata: the step): any error fails the connection
 * but a refusal of the data-set key's commands. */
static void handshake_cb(struct node *node, struct redisReply *reply,
                         enum node_status status, void *privdata)
{
    int tag = (int)(intptr_t)privdata;
    enum handshake_step step = tag >= HANDSHAKE_SCRIPT_LOAD
                                   ? HANDSHAKE_SCRIPT_LOAD
                                   : (enum handshake_step)tag;
    if (node->state != NODE_CONNECTING) {
        return;
    }
    bool dataset_step =
        step >= HANDSHAKE_DATASET_SET && step <= HANDSHAKE_DATASET_DATE;
    if (dataset_step && status == NODE_REPLY &&
        reply->type == REDIS_REPLY_ERROR) {
        handshake_dataset_refused(node, step, reply->str);
    } else if (status != NODE_REPLY || reply->type == REDIS_REPLY_ERROR) {
        handshake_fail(node, reply, status);
        return;
    } else if (handshake_step_done(node, step, tag - HANDSHAKE_SCRIPT_LOAD,
                                   reply) != 0) {
        return;
    }
    if (--node->handshake_left == 0) {
        handshake_up(node);
    }
}

/* Queues one handshake command; tag: its step (HANDSHAKE_SCRIPT_LOAD + k
 * for script k). */
static void handshake_send(struct node *node, int argc, const char **argv,
                           size_t *lens, int tag)
{
    for (int i = 0; i < argc; i++) {
        lens[i] = strlen(argv[i]);
    }
    if (node_send_argv(node, argc, argv, lens, handshake_cb,
                       (void *)(intptr_t)tag,
                       node->opts.connect_timeout_ms) == 0) {
        node->handshake_left++;
    } else {
        node->handshake_failed = true;
    }
}

/* Queues the handshake; it goes out as soon as the socket connects. */
static void handshake_start(struct node *node)
{
    const char *argv[6];
    size_t lens[6];
    node->handshake_left = 0;
    node->handshake_failed = false;
    memset(node->sha_ok, 0, sizeof(node->sha_ok));
    if (node->addr->password != NULL) {
        int argc = 0;
        argv[argc++] = "AUTH";
        if (node->addr->user != NULL && node->addr->user[0] != '\0') {
            argv[argc++] = node->addr->user;
        }
        argv[argc++] = node->addr->password;
        handshake_send(node, argc, argv, lens, HANDSHAKE_AUTH);
    }
    if (node->opts.push_cb != NULL) {
        argv[0] = "PING"; /* pub/sub needs no db, INFO or scripts */
        handshake_send(node, 1, argv, lens, HANDSHAKE_PING);
        return;
    }
    if (node->addr->db > 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", node->addr->db);
        argv[0] = "SELECT";
        argv[1] = db;
        handshake_send(node, 2, argv, lens, HANDSHAKE_SELECT);
    }
    argv[0] = "INFO";
    argv[1] = "server";
    handshake_send(node, 2, argv, lens, HANDSHAKE_INFO_SERVER);
    argv[1] = "memory";
    handshake_send(node, 2, argv, lens, HANDSHAKE_INFO_MEMORY);
    argv[1] = "replication";
    handshake_send(node, 2, argv, lens, HANDSHAKE_INFO_REPLICATION);
    if (node->addr->persistent) {
        argv[1] = "persistence";
        handshake_send(node, 2, argv, lens, HANDSHAKE_INFO_PERSISTENCE);
    }
    node->last.dataset[0] = '\0';
    node->dataset_refused = false;
    node->dataset_born_us = 0;
    node->mark_why[0] = '\0';
    node->mark_retrying = false;
    if (node->opts.dataset_key != NULL) {
        /* The TTL never runs out: what is left of it dates the mark. */
        char mark[RESTART_MARK_LEN + 1];
        node->opts.dataset_mark(mark);
        argv[0] = "SET";
        argv[1] = node->opts.dataset_key;
        argv[2] = mark;
        argv[3] = "NX";
        argv[4] = "PX";
        argv[5] = dataset_ttl_arg();
        handshake_send(node, 6, argv, lens, HANDSHAKE_DATASET_SET);
        argv[0] = "GET";
        handshake_send(node, 2, argv, lens, HANDSHAKE_DATASET_GET);
        argv[0] = "PTTL";
        handshake_send(node, 2, argv, lens, HANDSHAKE_DATASET_PTTL);
    }
    node->evict_checked_us = util_now_us();
    for (int s = 0; s < SCRIPT__COUNT; s++) {
        argv[0] = "SCRIPT";
        argv[1] = "LOAD";
        argv[2] = script_source[s];
        handshake_send(node, 3, argv, lens, HANDSHAKE_SCRIPT_LOAD + s);
    }
}

/* EV_WRITE: the connect finished (either way), or the socket has room. */
static void write_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct node *node = arg;
    if (!node->connected) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
            err = errno;
        }
        if (err != 0) {
            char msg[sizeof(node->last_error)];
            snprintf(msg, sizeof(msg), "connect: %s", strerror(err));
            node_attempt_failed(node, msg);
            node_drop(node, "connect failed");
            return;
        }
        node->connected = true;
    }
    if (node->tls != NULL && node_tls_event(node, EV_WRITE)) {
        return;
    }
    node_flush(node);
}

/* Closes the connection and fails every command in the FIFO with
 * NODE_DISCONNECTED, in send order; schedules the reconnect unless the node
 * is being destroyed. */
static void node_drop(struct node *node, const char *why)
{
    if (node->fd < 0 || node->dropping) {
        return;
    }
    log_debug(node->subject, "%s: dropping connection (%s)",
              node->addr->display, why);
    node->dropping = true;
    node->conn_gen++;
    /* Mark down first: no new command may join a dying connection. */
    if (node->state != NODE_CLOSED) {
        if (node->last_error[0] == '\0') {
            node_set_error(node, "connection closed%s", "");
        }
        evtimer_del(node->conn_timer);
        node_set_state(node, NODE_DOWN);
    }
    event_del(node->read_ev);
    event_del(node->write_ev);
    event_del(node->flush_ev);
    node->flush_pending = node->write_armed = false;
    tls_conn_destroy(node->tls);
    node->tls = NULL;
    node->tls_handshaking = false;
    node->read_wants_write = node->write_wants_read = false;
    close(node->fd);
    node->fd = -1;
    node->connected = false;
    node->ilen = 0;
    if (node->icap > 1024 * 1024) {
        free(node->ibuf); /* a large reply's buffer goes with it */
        node->ibuf = NULL;
        node->icap = 0;
    }
    node->olen = node->ooff = 0;
    node->queued_error[0] = '\0';
    node->handshake_failed = true; /* last_error already says why */
    node->hlen = 0;
    node->held = NULL;
    node->rec_active = false;
    node->rec_last = NULL;
    node->guard_due = node->guard_due_held = false;
    ahead_discard(node);
    /* The commands waiting to be re-sent after NOSCRIPT were written
     * before any still in the FIFO: they fail first. */
    while (node->rec_head != NULL) {
        struct node_cmd *cmd = node->rec_head;
        node->rec_head = cmd->rec_next;
        cmd->rec_next = NULL;
        if (!cmd->q.done) {
            cmd->q.done = true;
            if (cmd->cb != NULL) {
                cmd->cb(node, NULL, NODE_DISCONNECTED, cmd->privdata);
            }
        }
        cmd_put(node, cmd);
    }
    node->rec_tail = NULL;
    while (node->fifo.head != NULL) {
        struct node_cmd *cmd = fifo_head(node);
        cmdq_unlink(&node->fifo, &cmd->q);
        if (!cmd->q.done) {
            cmd->q.done = true;
            if (cmd->cb != NULL) {
                cmd->cb(node, NULL, NODE_DISCONNECTED, cmd->privdata);
            }
        }
        cmd_put(node, cmd);
    }
    evtimer_del(node->cmd_timer);
    node->cmd_timer_on = false;
    node->dropping = false;
    if (node->state != NODE_CLOSED) {
        node_schedule_reconnect(node);
    }
}

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct node *node = arg;
    if (node->state == NODE_CONNECTING && node->resolving != NULL) {
        resolve_cancel(node->resolving);
        node->resolving = NULL;
        node_resolve_failed(node, "timed out");
        return;
    }
    if (node->state == NODE_CONNECTING) {
        node_attempt_failed(node, connect_timeout_text(node));
        node_drop(node, "connect timeout");
        return;
    }
    if (node->state == NODE_DOWN) {
        node_connect(node);
    }
}

/* A non-blocking socket connecting to the node: its unix socket, or the
 * first address of ai that takes a socket (ai is NULL for unix); sets
 * *connected when the connect completed at once. Returns the fd, or -1
 * with errno set. */
static int socket_connect(const struct node_addr *a,
                          const struct addrinfo *ai_list, bool *connected)
{
    *connected = false;
    if (a->kind == NODE_ADDR_UNIX) {
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        if (strlen(a->path) >= sizeof(sun.sun_path)) {
            errno = ENAMETOOLONG;
            return -1;
        }
        strcpy(sun.sun_path, a->path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            return -1;
        }
        if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0) {
            *connected = true;
            return fd;
        }
        if (errno == EINPROGRESS) {
            return fd;
        }
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    int fd = -1, e = ECONNREFUSED;
    for (const struct addrinfo *ai = ai_list; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family,
                    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            *connected = true;
            break;
        }
        if (errno == EINPROGRESS) {
            break;
        }
        e = errno;
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        errno = e;
    }
    return fd;
}

/* Arms the connect deadline unless it runs already: one deadline covers
 * the host lookup, the connect and the handshake. */
static void conn_deadline_arm(struct node *node)
{
    if (evtimer_pending(node->conn_timer, NULL)) {
        return;
    }
    struct timeval tv = {(time_t)(node->opts.connect_timeout_ms / 1000),
                         (suseconds_t)(node->opts.connect_timeout_ms % 1000) *
                             1000};
    evtimer_add(node->conn_timer, &tv);
}

/* A connect attempt that failed before any socket: down, retry later. */
static void node_connect_failed(struct node *node)
{
    evtimer_del(node->conn_timer);
    node_set_state(node, NODE_DOWN);
    node_schedule_reconnect(node);
}

/* Connects to the node's unix socket, or to ai (the host's addresses). */
static void node_connect_to(struct node *node, const struct addrinfo *ai)
{
    bool connected;
    int fd = socket_connect(node->addr, ai, &connected);
    if (fd < 0) {
        char msg[sizeof(node->last_error)];
        snprintf(msg, sizeof(msg), "connect: %s", strerror(errno));
        node_attempt_failed(node, msg);
        node_connect_failed(node);
        return;
    }
    if (event_assign(node->read_ev, node->base, fd, EV_READ | EV_PERSIST,
                     read_cb, node) != 0 ||
        event_assign(node->write_ev, node->base, fd, EV_WRITE | EV_PERSIST,
                     write_cb, node) != 0 ||
        event_add(node->read_ev, NULL) != 0) {
        close(fd);
        node_set_error(node, "connect: %s", "out of memory");
        node_connect_failed(node);
        return;
    }
    if (node->addr->tls) {
        /* Never plain text to a rediss:// node: no session, no connect. */
        char msg[sizeof(node->last_error)] = "TLS: no TLS context";
        node->tls = node->opts.tls == NULL
                        ? NULL
                        : tls_conn_create(node->opts.tls, fd, node->addr->host,
                                          msg, sizeof(msg));
        if (node->tls == NULL) {
            close(fd);
            node_attempt_failed(node, msg);
            node_connect_failed(node);
            return;
        }
        node->tls_handshaking = true;
        connected = false; /* write_cb starts the handshake */
    }
    node->fd = fd;
    node->connected = connected;
    node_set_state(node, NODE_CONNECTING);
    conn_deadline_arm(node);
    if (!connected) {
        node->write_armed = true; /* write_cb finishes the connect */
        event_add(node->write_ev, NULL);
    }
    handshake_start(node);
    if (node->handshake_failed) {
        node_set_error(node, "handshake: cannot queue commands%s", "");
        node_drop(node, "handshake");
    }
}

/* A failed or timed-out lookup: the node is down, saying why. */
static void node_resolve_failed(struct node *node, const char *why)
{
    char msg[sizeof(node->last_error)];
    snprintf(msg, sizeof(msg), "resolve %s: %s", node->addr->host, why);
    node_attempt_failed(node, msg);
    node_connect_failed(node);
}

static void resolved_cb(const struct addrinfo *res, const char *err, void *priv)
{
    struct node *node = priv;
    node->resolving = NULL;
    if (res == NULL) {
        node_resolve_failed(node, err);
        return;
    }
    node_connect_to(node, res);
}

/* Starts a connect: a host name is looked up first, off the loop (see
 * resolve.h), under the connect deadline; numeric hosts and unix sockets
 * connect at once. */
static void node_connect(struct node *node)
{
    const struct node_addr *a = node->addr;
    struct addrinfo *ai = NULL;
    if (a->kind == NODE_ADDR_UNIX ||
        resolve_numeric(a->host, a->port, &ai) == 0) {
        node_connect_to(node, ai);
        if (ai != NULL) {
            freeaddrinfo(ai);
        }
        return;
    }
    node->resolving =
        resolve_start(node->base, a->host, a->port, resolved_cb, node);
    if (node->resolving == NULL) {
        node_resolve_failed(node, strerror(errno));
        return;
    }
    node_set_state(node, NODE_CONNECTING);
    conn_deadline_arm(node);
}

struct node *node_create(struct event_base *base, int index,
                         const struct node_addr *addr,
                         const struct node_options *opts,
                         node_state_fn *state_cb, void *state_priv)
{
    struct node *node = calloc(1, sizeof(*node));
    if (node == NULL) {
        return NULL;
    }
    cmdq_init(&node->fifo, sizeof(struct node_cmd), CMD_POOL_MAX);
    node->index = index;
    node->addr = addr;
    node->opts = *opts;
    node->base = base;
    node->state = NODE_DOWN;
    node->state_cb = state_cb;
    node->state_priv = state_priv;
    node->rtt_ms = -1;
    node->fd = -1;
    snprintf(node->subject, sizeof(node->subject), "node %d%s", index + 1,
             opts->push_cb != NULL ? " sub" : "");
    node->conn_timer = evtimer_new(base, conn_timer_cb, node);
    node->cmd_timer = evtimer_new(base, cmd_timer_cb, node);
    node->ping_timer = event_new(base, -1, EV_PERSIST, ping_timer_cb, node);
    /* The socket events get their fd on each connect (event_assign). */
    node->read_ev = event_new(base, -1, EV_READ | EV_PERSIST, read_cb, node);
    node->write_ev = event_new(base, -1, EV_WRITE | EV_PERSIST, write_cb, node);
    node->flush_ev = event_new(base, -1, 0, flush_cb, node);
    if (node->conn_timer == NULL || node->cmd_timer == NULL ||
        node->ping_timer == NULL || node->read_ev == NULL ||
        node->write_ev == NULL || node->flush_ev == NULL ||
        guard_format(node) != 0) {
        node_destroy(node);
        return NULL;
    }
    struct timeval every = {PING_INTERVAL_MS / 1000,
                            (PING_INTERVAL_MS % 1000) * 1000};
    event_add(node->ping_timer, &every);
    node_connect(node);
    return node;
}

void node_destroy(struct node *node)
{
    if (node == NULL) {
        return;
    }
    if (node->state == NODE_UP && node->opts.push_cb == NULL) {
        METRIC_ADD(nodes_up, -1);
    }
    node->state = NODE_CLOSED;
    cmdq_close(&node->fifo); /* the commands node_drop puts back are freed */
    resolve_cancel(node->resolving);
    node->resolving = NULL;
    node_drop(node, "closed"); /* runs every pending callback */
    struct event *evs[] = {node->conn_timer, node->cmd_timer, node->ping_timer,
                           node->read_ev,    node->write_ev,  node->flush_ev};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
        if (evs[i] != NULL) {
            event_free(evs[i]);
        }
    }
    free(node->obuf);
    free(node->ibuf);
    free(node->hbuf);
    free(node->guard_buf);
    free(node->ahead);
    free(node);
}

uint32_t node_version(const struct node *node)
{
    return node->version;
}

const char *node_eviction_policy(const struct node *node)
{
    return node->evict_policy[0] != '\0' ? node->evict_policy : NULL;
}

bool node_is_up(const struct node *node)
{
    return node->state == NODE_UP;
}

enum node_state node_get_state(const struct node *node)
{
    return node->state;
}

int node_index(const struct node *node)
{
    return node->index;
}

const char *node_display(const struct node *node)
{
    return node->addr->display;
}

const char *node_last_error(const struct node *node)
{
    return node->last_error;
}

double node_rtt_ms(const struct node *node)
{
    return node->rtt_ms;
}

const char *node_run_id(const struct node *node)
{
    return node->last.run_id;
}

bool node_restarted(const struct node *node)
{
    return restart_ident_restarted(&node->prev_up, &node->up);
}

bool node_emptied(const struct node *node)
{
    return restart_ident_emptied(&node->prev_up, &node->up);
}

bool node_replaced(const struct node *node)
{
    return restart_ident_replaced(&node->prev_up, &node->up);
}

bool node_first_attempt_pending(const struct node *node)
{
    return !node->first_attempt_over;
}

bool node_first_connection(const struct node *node)
{
    return restart_ident_first(&node->prev_up, &node->up) || node->first_marked;
}

const char *node_unmarked(const struct node *node)
{
    return node->state == NODE_UP && mark_unknown(node) ? mark_text(node)
                                                        : NULL;
}

uint64_t node_started_us(const struct node *node)
{
    return node->started_us;
}

uint64_t node_dataset_born_us(const struct node *node)
{
    return node->dataset_born_us;
}

bool node_is_persistent(const struct node *node)
{
    return node->addr->persistent && !node->aof_off;
}

uint64_t node_reconnects(const struct node *node)
{
    return node->reconnects;
}

const char *node_tls_mode(const struct node *node)
{
    if (!node->addr->tls) {
        return NULL;
    }
    return node->opts.tls != NULL && !tls_ctx_verifies(node->opts.tls)
               ? "insecure"
               : "verified";
}
