/* node.c: one Redis node behind one connection of our own.
 *
 * Life of a connection (node_conn.c):
 *
 *   DOWN --reconnect timer--> CONNECTING --socket connected--> handshake
 *     (AUTH, SELECT, INFO, SCRIPT LOAD x n; all with the connect deadline)
 *     --last handshake reply--> UP --drop, stall, error--> DOWN
 *
 * rediss:// nodes (tls.c) run a TLS handshake between "socket connected"
 * and the handshake commands, which wait queued meanwhile, under the same
 * connect deadline; reads and writes then go through the TLS session, and
 * either may wait for the other direction (stream.h's read_wants_write and
 * write_wants_read). A subscriber node (wake.c, opts.push_cb) runs AUTH and
 * PING only and hands "message" pushes to push_cb.
 *
 * Writes (node_io.c): commands are formatted as RESP once (per op, see
 * node_prepare; the encoder is resp.c's) and appended to the node's output
 * buffer; the buffer goes out in one write() at the end of the current
 * event-loop turn (flush_ev is made active, so it runs after every callback
 * already active in this turn). Every request read from every client in one
 * turn therefore reaches each node in one write, and EV_WRITE is armed only
 * while the socket is full. hiredis's async layer did the same with an
 * epoll_ctl pair and a buffer regrown by realloc per batch: a third of the
 * daemon's instructions.
 *
 * Reads (node_io.c): the socket is read into the node's input buffer and resp.c
 * parses the replies (into pooled redisReply objects); commands are kept in a
 * FIFO (cmdq.c) in send order and Redis answers in order, so each reply belongs
 * to the FIFO's head. Every command gets the same timeout, on util_now_us(),
 * the clock cluster.c measures validity on, so deadlines grow along the FIFO:
 * one timer armed for the oldest live command serves them all. A command that
 * times out gets its callback at once (NODE_TIMEOUT) and stays in the FIFO,
 * marked done, until its reply arrives or the connection drops.
 *
 * The node is five files over one private header (node_int.h, which
 * draws their layers); this one is the lowest: state changes and their
 * log lines, the command pool and its deadline timer, node_drop (which
 * ends a connection, fails its FIFO and schedules the reconnect), and the
 * public getters. The socket or TLS transport and the buffers are the
 * node's struct stream (stream.c, below every node file). It calls
 * nothing above it: the callbacks it runs (a command's reply callback,
 * the node's state callback, the reconnect timer) were set from above. */
#include "node.h"
#include "node_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "metrics.h"
#include "redlock.h"
#include "tls.h"
#include "util.h"

/* A node that drops again within this long of its last logged "down" is
 * logged once a second at most, with the number left out since. */
#define DOWN_LOG_US 1000000u

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

void node_set_state(struct node *node, enum node_state state)
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

void node_set_error(struct node *node, const char *fmt, const char *s)
{
    snprintf(node->last_error, sizeof(node->last_error), fmt, s ? s : "");
}

/* A connect attempt failed with msg: it becomes last_error, logged as a
 * warning once per outage (the error changes or was cleared by an up), so a
 * node unreachable from the start is named at the default level. */
void node_attempt_failed(struct node *node, const char *msg)
{
    if (strcmp(msg, node->last_error) != 0) {
        log_warn(node->subject, "%s: %s", node->addr->display, msg);
    } else {
        log_debug(node->subject, "%s: %s", node->addr->display, msg);
    }
    snprintf(node->last_error, sizeof(node->last_error), "%s", msg);
}

void node_prep_free(struct node_prep *p)
{
    if (p->buf != NULL && p->buf != p->inline_buf) {
        free(p->buf);
    }
    p->buf = NULL;
}

struct node_cmd *cmd_get(struct node *node)
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

void cmd_put(struct node *node, struct node_cmd *cmd)
{
    if (cmd->owned_prep != NULL) {
        node_prep_free(cmd->owned_prep);
        free(cmd->owned_prep);
        cmd->owned_prep = NULL;
    }
    cmd->prep = NULL;
    cmdq_put(&node->fifo, &cmd->q);
}

void cmd_timer_arm(struct node *node)
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
void cmd_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct node *node = arg;
    uint64_t now = util_now_us();
    node->cmd_timer_on = false;
    if (stream_tls_handshaking(&node->s)) {
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

/* Input that is not RESP, or too much of it: the stream is lost. */
void node_protocol_error(struct node *node, enum resp_status rc,
                         const char *why)
{
    node_set_error(node, "protocol error: %s",
                   rc == RESP_NOMEM ? "out of memory" : why);
    log_warn(node->subject, "%s: %s", node->addr->display, node->last_error);
    node_drop(node, "protocol error");
}

void node_schedule_reconnect(struct node *node)
{
    uint32_t delay = redlock_backoff_ms(
        node->attempt, (uint32_t)node->opts.backoff_base_ms,
        (uint32_t)node->opts.backoff_cap_ms, (double)random() / RAND_MAX);
    node->attempt++;
    struct timeval tv = {(time_t)(delay / 1000),
                         (suseconds_t)(delay % 1000) * 1000};
    evtimer_add(node->conn_timer, &tv);
}

/* Frees the replies read ahead and not handled (a dropped connection). */
void ahead_discard(struct node *node)
{
    while (node->ahead_next < node->ahead_n) {
        resp_reply_free(node->ahead[node->ahead_next++]);
    }
    node->ahead_n = node->ahead_next = 0;
    node->ahead_ready = false;
}

/* Closes the connection and fails every command in the FIFO with
 * NODE_DISCONNECTED, in send order; schedules the reconnect unless the node
 * is being destroyed. */
void node_drop(struct node *node, const char *why)
{
    if (node->s.phase == STREAM_CLOSED || node->s.phase == STREAM_CLOSING) {
        return;
    }
    log_debug(node->subject, "%s: dropping connection (%s)",
              node->addr->display, why);
    stream_set_phase(&node->s, STREAM_CLOSING);
    node->conn_gen++;
    /* Mark down first: no new command may join a dying connection. */
    if (node->state != NODE_CLOSED) {
        if (node->last_error[0] == '\0') {
            node_set_error(node, "connection closed%s", "");
        }
        evtimer_del(node->conn_timer);
        node_set_state(node, NODE_DOWN);
    }
    /* The input's buffer goes too when a large reply grew it. */
    stream_close(&node->s);
    node->queued_error[0] = '\0';
    node->handshake_failed = true; /* last_error already says why */
    node->hold.off = node->hold.len = 0;
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
    while (cmdq_head(&node->fifo) != NULL) {
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
    if (node->state != NODE_CLOSED) {
        node_schedule_reconnect(node);
    }
}

/* ---- public getters ------------------------------------------------------ */

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
