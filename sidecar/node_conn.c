/* node_conn.c: a node's connection from the top (node_int.h has the
 * layers): the connect attempt (host lookup, socket, TLS), the handshake
 * (an enum handshake_step, a function per step's reply), the heartbeat
 * timer and the mark's retry, and node_create / node_destroy. The files
 * below it are reached by call; they reach back only through the event
 * and reply callbacks set here. */
#include "node.h"
#include "node_int.h"

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

#include "caps.h"
#include "cmdq.h"
#include "config.h"
#include "info.h"
#include "mark.h"
#include "missing.h"
#include "log.h"
#include "metrics.h"
#include "redlock.h"
#include "resolve.h"
#include "restart.h"
#include "resp.h"
#include "scripts.h"
#include "util.h"
#include "tls.h"

static void node_connect(struct node *node);
static void node_resolve_failed(struct node *node, const char *why);

/* What a connect attempt that ran out of time says. Which half timed out
 * tells the operator where to look: no connection (address, firewall, a
 * host that is gone) or a server that took it and never answered (paused,
 * overloaded, not Redis). The handshake's command deadline and the connect
 * timer end together, and whichever fires first says the same. */
static const char *connect_timeout_text(const struct node *node)
{
    return stream_connected(&node->s)
               ? "handshake failed: the node accepted the "
                 "connection but did not answer in time"
               : "connect: timed out";
}

/* ---- heartbeat ----------------------------------------------------------- */

#define PING_INTERVAL_MS 1000
/* How often an up node's eviction policy (and, for a ?persistent=1 node,
 * its AOF) is read again, so a CONFIG SET on a live node shows without a
 * reconnect. An INFO section costs the node a few microseconds. */
#define CONFIG_CHECK_MS 5000

static void mark_retry(struct node *node);

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
    mark_read(reply, mark);
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

/* ---- handshake --------------------------------------------------------- */

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
    char name[32];
    enum missing_kind kind = status == NODE_REPLY
                                 ? missing_of(reply->str, name, sizeof(name))
                                 : MISSING_NONE;
    node->handshake_failed = true;
    if (status == NODE_TIMEOUT) {
        snprintf(msg, sizeof(msg), "%s", connect_timeout_text(node));
    } else if (kind != MISSING_NONE) {
        /* The command first: the error may be long enough to be cut. */
        snprintf(msg, sizeof(msg), "handshake failed: %s %s: %s",
                 name[0] != '\0' ? name : "a command", missing_text(kind),
                 reply->str);
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
    node->sha_ok[script] = node_sha_learn(node, script);
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
        mark_read(reply, node->last.dataset);
        break;
    case HANDSHAKE_DATASET_PTTL:
        handshake_dataset_pttl(node, reply);
        break;
    case HANDSHAKE_COMMAND_DOCS:
        node->caps |= caps_set_docs(reply);
        break;
    case HANDSHAKE_COMMAND_INFO:
        node->caps |= caps_command_info(reply);
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
 * but a refusal of the data-set key's commands, and the command table's
 * (a server before 7.0 has no COMMAND DOCS, an ACL may refuse COMMAND):
 * then the node has no native form and runs the scripts. */
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
    bool caps_step =
        step == HANDSHAKE_COMMAND_DOCS || step == HANDSHAKE_COMMAND_INFO;
    bool refused = status == NODE_REPLY && reply->type == REDIS_REPLY_ERROR;
    if (dataset_step && refused) {
        handshake_dataset_refused(node, step, reply->str);
    } else if (caps_step && refused) {
        log_debug(node->subject, "%s: no native forms from %s: %s",
                  node->addr->display,
                  step == HANDSHAKE_COMMAND_DOCS ? "COMMAND DOCS"
                                                 : "COMMAND INFO",
                  reply->str);
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
    node->script_missing_told = false;
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
    /* The native extend and release (caps.h), by what the command table
     * lists: the version cannot tell them (Valkey 8.1 says 7.2.4). */
    node->caps = 0;
    argv[0] = "COMMAND";
    argv[1] = "DOCS";
    argv[2] = "SET";
    handshake_send(node, 3, argv, lens, HANDSHAKE_COMMAND_DOCS);
    argv[1] = "INFO";
    argv[2] = "DELIFEQ";
    argv[3] = "DELEX";
    handshake_send(node, 4, argv, lens, HANDSHAKE_COMMAND_INFO);
    for (int s = 0; s < SCRIPT__COUNT; s++) {
        argv[0] = "SCRIPT";
        argv[1] = "LOAD";
        argv[2] = script_source[s];
        handshake_send(node, 3, argv, lens, HANDSHAKE_SCRIPT_LOAD + s);
    }
}

/* ---- connect ----------------------------------------------------------- */

/* EV_WRITE: the connect finished (either way), or the socket has room. */
static void write_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct node *node = arg;
    if (node->s.phase == STREAM_CONNECTING) {
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
        stream_set_phase(&node->s, node->s.tls != NULL ? STREAM_TLS_HANDSHAKE
                                                       : STREAM_OPEN);
    }
    if (node->s.tls != NULL && node_tls_event(node, EV_WRITE)) {
        return;
    }
    node_flush(node);
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
    struct tls_conn *tls = NULL;
    if (node->addr->tls) {
        /* Never plain text to a rediss:// node: no session, no connect. */
        char msg[sizeof(node->last_error)] = "TLS: no TLS context";
        tls = node->opts.tls == NULL
                  ? NULL
                  : tls_conn_create(node->opts.tls, fd, node->addr->host, msg,
                                    sizeof(msg));
        if (tls == NULL) {
            close(fd);
            node_attempt_failed(node, msg);
            node_connect_failed(node);
            return;
        }
        connected = false; /* write_cb starts the handshake */
    }
    if (stream_attach(&node->s, fd, tls,
                      connected ? STREAM_OPEN : STREAM_CONNECTING) != 0) {
        tls_conn_destroy(tls);
        close(fd);
        node_set_error(node, "connect: %s", "out of memory");
        node_connect_failed(node);
        return;
    }
    stream_reading(&node->s, true);
    node_set_state(node, NODE_CONNECTING);
    conn_deadline_arm(node);
    if (!connected) {
        stream_write_arm(&node->s, true); /* write_cb finishes the connect */
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

unsigned node_caps(const struct node *node)
{
    return node->caps;
}

void node_caps_refused(struct node *node, unsigned flag, const char *reason)
{
    if ((node->caps & flag) == 0) {
        return;
    }
    node->caps &= ~flag;
    log_warn(node->subject,
             "%s: native command refused (%s); this connection uses the "
             "script instead",
             node->addr->display, reason);
}

/* ---- create and destroy ------------------------------------------------ */

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
    snprintf(node->subject, sizeof(node->subject), "node %d%s", index + 1,
             opts->push_cb != NULL ? " sub" : "");
    node->conn_timer = evtimer_new(base, conn_timer_cb, node);
    node->cmd_timer = evtimer_new(base, cmd_timer_cb, node);
    node->ping_timer = event_new(base, -1, EV_PERSIST, ping_timer_cb, node);
    if (stream_init(&node->s, base, read_cb, write_cb, flush_cb, node) != 0 ||
        node->conn_timer == NULL || node->cmd_timer == NULL ||
        node->ping_timer == NULL || guard_format(node) != 0) {
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
    stream_destroy(&node->s);
    struct event *evs[] = {node->conn_timer, node->cmd_timer, node->ping_timer};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
        if (evs[i] != NULL) {
            event_free(evs[i]);
        }
    }
    bytes_free(&node->hold);
    free(node->guard_buf);
    free(node->ahead);
    free(node);
}
