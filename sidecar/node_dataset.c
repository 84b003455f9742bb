/* node_dataset.c: the data-set key and the guard built on it.
 *
 * One key per node, <prefix>dataset, holds a random mark that the first
 * daemon to meet the node sets (SET NX) and every daemon reads at each
 * handshake and every second. Only an emptied data set loses it: a new
 * mark means the lock keys were lost too, under a run_id and replication
 * id that did not change (node_emptied).
 *
 * The guard: an emptied node grants every acquire, whatever is held
 * elsewhere, and the check every second left it up to a second to vote so.
 * So a turn's write to a node that carries an acquire ends with a GET of
 * the data-set key (the guard), and an acquire's reply is handled only
 * once the reply of the first guard after it is read too and shows the
 * mark this connection came up with. Redis runs a connection's commands in
 * order: the mark still there after the acquire ran means no flush came
 * before it. A mark gone or changed drops the connection before any of
 * those replies is handled, so their acquires count as failed on this
 * node, and the reconnect quarantines it. Redis answers the commands of
 * one read together, so the guard costs the node a GET per turn, not a
 * round trip. Nodes whose mark the ACL refuses (NOPERM) are not guarded:
 * the 1 s check cannot read it either. A node whose mark is unknown for
 * any other reason does not vote at all (node_unmarked).
 *
 * node_io.c queues the guard as a turn's write goes out (guard_close) and
 * reads the replies through it (guard_read); node_conn.c's handshake and
 * heartbeat send the mark's commands and hand their replies here. */
#include "node.h"
#include "node_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mark.h"

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
const char *mark_text(const struct node *node)
{
    return node->mark_why[0] != '\0' ? node->mark_why
                                     : "data-set key: no mark read";
}

/* A SET or GET of the mark (step) refused with text: unless the ACL's
 * NOPERM, it is the reason the mark is unknown, for health and the log. */
void mark_refused(struct node *node, const char *step, const char *text)
{
    if (!dataset_refused(node, text)) {
        snprintf(node->mark_why, sizeof(node->mark_why),
                 "data-set key: %s refused (%.80s)", step, text);
    }
}

/* Tells, once per spell, that a connection coming up has no mark, and
 * why, and then that one read it again. */
void mark_tell(struct node *node)
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
void date_refused(struct node *node, const char *step, const char *text)
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

/* The mark's TTL (RESTART_DATASET_TTL_MS) as a command argument. */
const char *dataset_ttl_arg(void)
{
    static char ttl[24];
    if (ttl[0] == '\0') {
        snprintf(ttl, sizeof(ttl), "%llu",
                 (unsigned long long)RESTART_DATASET_TTL_MS);
    }
    return ttl;
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

/* Acts on what a GET of the mark on a live connection answered (mark.c's
 * verdict): the connection is dropped unless the mark stood. guard: the
 * reply is a guard's. Returns true when the mark stood. */
static bool dataset_judge(struct node *node, const redisReply *reply,
                          bool guard)
{
    enum mark_verdict v = mark_verdict(node->up.dataset, reply);
    switch (v) {
    case MARK_STOOD:
        return true;
    case MARK_REFUSED:
        dataset_unreadable(node, reply->str, guard);
        break;
    case MARK_GONE:
    case MARK_CHANGED:
        dataset_lost(node, v == MARK_GONE);
        break;
    }
    return false;
}

/* The check every second, and each guard's reply (guard_close). A guard
 * read by guard_read was compared there already; comparing again costs
 * one strcmp per turn and covers the guards whose acquires all timed out,
 * which are read as plain replies. */
void dataset_check_cb(struct node *node, struct redisReply *reply,
                      enum node_status status, void *privdata)
{
    (void)privdata;
    if (status != NODE_REPLY || node->state != NODE_UP) {
        return;
    }
    (void)dataset_judge(node, reply, false);
}

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
    int rc = held ? hold_append(node, node->guard_buf, node->guard_len)
                  : bytes_append(&node->s.out, node->guard_buf,
                                      node->guard_len);
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
int guard_close(struct node *node)
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
int guard_format(struct node *node)
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

/* The FIFO's head is a guarded command: reads its reply and those after
 * it through the first guard's into node->ahead, consuming their bytes
 * (*off). Replies already read ahead are kept: a large turn's replies may
 * take several reads. Returns 1 when they are all there and the mark
 * stood (node->ahead_ready), 0 when more must be read, -1 when the
 * connection was dropped (the mark gone or changed, bad input). */
int guard_read(struct node *node, size_t *off)
{
    int k = 1;
    const struct node_cmd *g = fifo_head(node);
    while (g != NULL && !g->guard) {
        g = cmd_of(cmdq_next(&g->q));
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
        enum resp_status rc = resp_parse(stream_in_data(&node->s) + *off,
                                         stream_in_len(&node->s) - *off, &used,
                                         &r, why, sizeof(why));
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
    /* A mark gone or changed, or refused (then nothing shows that no flush
     * came before these acquires): they do not count. */
    if (!dataset_judge(node, node->ahead[k - 1], true)) {
        return -1;
    }
    node->ahead_ready = true;
    return 1;
}

const char *node_unmarked(const struct node *node)
{
    return node->state == NODE_UP && mark_unknown(node) ? mark_text(node)
                                                        : NULL;
}
