/* node_io.c: commands in and out of a node's connection (node_int.h has
 * the layers). Writes: each command is formatted as RESP once and appended
 * to the output buffer, which goes out in one write() at the end of the
 * loop turn (node_flush, from flush_ev), with the turn's data-set guard
 * (node_dataset.c) behind it. Reads: read_cb parses the replies where they
 * lie in the input buffer and runs each command's callback in FIFO order,
 * through the guard's read-ahead while a guarded command heads the FIFO.
 * A server that lost its scripts is recovered here (NOSCRIPT recovery),
 * keeping the connection's order. The public send API (node.h) is here. */
#include "node.h"
#include "node_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "metrics.h"
#include "missing.h"
#include "noscript.h"
#include "tls.h"
#include "util.h"

/* The SHA1 of each script as the first node reported it; every node
 * computes the same, so one prepared EVALSHA serves them all. */
static char known_sha[SCRIPT__COUNT][SHA_LEN + 1];

/* Takes the SHA1 that SCRIPT LOAD gave this node (node->sha[script]) for
 * the one every node computes, unless a node gave one before. Returns
 * whether this node's is that one: only then may prepared sends use it. */
bool node_sha_learn(struct node *node, int script)
{
    if (known_sha[script][0] == '\0') {
        memcpy(known_sha[script], node->sha[script], SHA_LEN + 1);
    }
    return strcmp(known_sha[script], node->sha[script]) == 0;
}

/* ---- transport: the TLS handshake and the events it owes ------------- */

/* One step of the TLS handshake, which runs before the queued Redis
 * handshake commands may go out; a failure is a failed connect. */
static void node_tls_handshake(struct node *node)
{
    char msg[sizeof(node->last_error)];
    enum tls_io rc = tls_handshake(node->s.tls, msg, sizeof(msg));
    if (rc == TLS_WANT_READ || rc == TLS_WANT_WRITE) {
        stream_write_arm(&node->s, rc == TLS_WANT_WRITE);
        return;
    }
    if (rc != TLS_OK) {
        node_attempt_failed(node, msg);
        node_drop(node, "TLS handshake");
        return;
    }
    stream_set_phase(&node->s, STREAM_OPEN);
    stream_write_arm(&node->s, false);
    node_flush(node);
}

/* TLS work an event owes before its usual job: a handshake step, or a
 * read or write that waited for this direction. Returns true when the
 * event is used up. */
bool node_tls_event(struct node *node, short what)
{
    struct stream *s = &node->s;
    if (stream_tls_handshaking(s)) {
        node_tls_handshake(node);
        return true;
    }
    if (what == EV_WRITE && s->read_wants_write) {
        s->read_wants_write = false;
        read_cb(s->fd, EV_READ, node);
        return s->fd < 0; /* else flush as usual */
    }
    if (what == EV_READ && s->write_wants_read) {
        s->write_wants_read = false;
        node_flush(node);
        return s->fd < 0;
    }
    return false;
}

/* ---- output ---------------------------------------------------------- */

/* Writes what the socket takes; arms EV_WRITE for the rest. */
void node_flush(struct node *node)
{
    if (!stream_connected(&node->s) || stream_tls_handshaking(&node->s)) {
        return; /* sent once the connect (and TLS handshake) completes */
    }
    if (guard_close(node) != 0) {
        return;
    }
    if (stream_flush(&node->s, node->last_error, sizeof(node->last_error)) <
        0) {
        if (node->s.tls != NULL) {
            /* As a failed read: the server's alert (a TLS 1.3 server
             * refusing our certificate after our handshake ended) may
             * surface on a write; say it where operators look. */
            log_warn(node->subject, "%s: %s", node->addr->display,
                     node->last_error);
        }
        node_drop(node, "write error");
    }
}

void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct node *node = arg;
    node->s.flush_pending = false;
    node_flush(node);
}

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
 *      written so far. New commands are held (hold; FIFO from held on);
 *   2. each NOSCRIPT'd command of the window joins the re-send list;
 *   3. a script command of the window that did run (another client loaded
 *      the scripts in between) ran before those on the list: an acquire
 *      on the list is not re-sent but answered with the error (it never
 *      ran, so nothing is left behind); a re-sent release, extend or
 *      completion can only find less to do, never create a key;
 *   4. rec_last's answer closes the window: the list goes out as EVAL in
 *      its order, then SCRIPT LOAD, then the held commands.
 *
 * Which case a reply is, and which listed commands step 3 answers, are
 * noscript.h's rules; here are the lists and the bytes. */

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

static bool reply_is_noscript(const struct node_cmd *cmd,
                              const redisReply *reply)
{
    return cmd->prep != NULL && reply->type == REDIS_REPLY_ERROR &&
           noscript_is_error(reply->str, reply->len);
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
        if (!noscript_refuse(cmd->script)) {
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
    if (bytes_used(&node->hold) > 0 &&
        out_append(node, node->hold.data + node->hold.off,
                   bytes_used(&node->hold)) != 0) {
        node_set_error(node, "out of memory%s", "");
        node_drop(node, "out of memory");
        return -1;
    }
    node->held = NULL;
    if (node->guard_due_held) {
        /* The held guarded commands went out: their guard goes next. */
        node->guard_due_held = false;
        node->guard_due = true;
    }
    cmdq_find_live(&node->fifo);
    bytes_clear(&node->hold);
    cmd_timer_arm(node);
    return 0;
}

/* ---- replies ----------------------------------------------------------- */

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

/* A script's reply: a refusal for something the daemon needs (EVALSHA
 * renamed away, scripting off, an ACL) is told once a connection, as a
 * rename or an ACL stays until someone changes the server; the caller's
 * own line (cluster.c) says only which operation failed. */
static void script_missing_check(struct node *node, const redisReply *reply)
{
    if (reply->type != REDIS_REPLY_ERROR) {
        return;
    }
    char name[32];
    enum missing_kind kind = missing_of(reply->str, name, sizeof(name));
    if (kind == MISSING_NONE || node->script_missing_told) {
        return;
    }
    node->script_missing_told = true;
    log_warn(node->subject,
             "%s: scripts refused: %s %s (%s); this node's releases, "
             "extends and script acquires fail, and its lock keys live out "
             "their ttl, until EVAL, EVALSHA, SCRIPT and what the scripts "
             "call are allowed (see \"Known limits\" in "
             "docs/operations.md)",
             node->addr->display, name[0] != '\0' ? name : "a command",
             missing_text(kind), reply->str);
}

/* One reply, for the FIFO's head. */
static void node_handle_reply(struct node *node, redisReply *reply,
                              uint64_t now)
{
    struct node_cmd *cmd = fifo_head(node);
    uint64_t gen = node->conn_gen;
    bool noscript = reply_is_noscript(cmd, reply);
    if (noscript_opens(node->rec_active, noscript)) {
        node->rec_active = true;
        node->rec_last = cmd_of(cmdq_tail(&node->fifo));
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
    struct noscript_reply nr = {.open = node->rec_active,
                                .noscript = noscript,
                                .done = cmd->q.done,
                                .script = cmd->script >= 0,
                                .listed = node->rec_head != NULL};
    enum noscript_act act = noscript_act(&nr);
    if (act == NOSCRIPT_RESEND) {
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
        if (act == NOSCRIPT_FAIL_LISTED && !rec_fail_acquires(node)) {
            window_end = false;
        }
        if (cmd->script >= 0 && !noscript) {
            script_missing_check(node, reply);
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

/* Reads what the socket has and runs a callback per complete reply. */
void read_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct node *node = arg;
    uint64_t gen = node->conn_gen;
    if (node->s.tls != NULL && node_tls_event(node, EV_READ)) {
        return;
    }
    ssize_t n =
        stream_read(&node->s, node->last_error, sizeof(node->last_error));
    if (n < 0) {
        if (node->s.tls != NULL) {
            log_warn(node->subject, "%s: %s", node->addr->display,
                     node->last_error);
        } else if (n == STREAM_EOF) {
            node_set_error(node, "connection closed by the server%s", "");
        } else if (errno == ENOMEM) {
            node_drop(node, "out of memory");
            return;
        } else {
            node_set_error(node, "connection lost: %s", strerror(errno));
        }
        node_drop(node, "read");
        return;
    }
    if (n == 0) {
        return;
    }
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
            if (off >= stream_in_len(&node->s)) {
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
            enum resp_status rc = resp_parse(stream_in_data(&node->s) + off,
                                             stream_in_len(&node->s) - off,
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
            if (rc == RESP_OK && cmdq_head(&node->fifo) == NULL) {
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
    /* Only the partial reply is kept (moved to the front when the next
     * read needs the room). */
    bytes_consume(&node->s.in, off);
    if (node->s.tls != NULL && tls_pending(node->s.tls)) {
        /* Decrypted bytes wait in the session, not on the socket. */
        event_active(node->s.read_ev, EV_READ, 1);
    }
}

/* ---- public send API --------------------------------------------------- */

/* Queues the formatted bytes buf[0..len) of n commands (cmds[], callbacks
 * filled by the caller, in wire order): all of them or none. During a
 * NOSCRIPT recovery they are held (hold, the FIFO's tail from held on);
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

static bool node_accepts(const struct node *node)
{
    return node->state == NODE_UP && node->s.fd >= 0 &&
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

int node_send_argv(struct node *node, int argc, const char **argv,
                   const size_t *argvlen, node_reply_fn *cb, void *privdata,
                   int timeout_ms)
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
