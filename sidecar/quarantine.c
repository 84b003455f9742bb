/* quarantine.c: the restart quarantine of the nodes and the repair that
 * ends it; see quarantine.h.
 *
 *   node up, new run_id, not persistent     (or, at start-up, started
 *     |                                       clearly after the others)
 *   quarantined: skipped by acquisitions, timer armed for the period;
 *     |  at once, the repair's reads and copies from the nodes up (early:
 *     |  ends nothing, keeps the marks of a rolling restart)
 *     |  timer; node down: back-off and again
 *   repair: GET the fence counter and SCAN the keys of enough nodes that
 *     |  kept their data (redlock_repair_plan); each page's done marks are
 *     |  read on its source and copied to the target (restart_page_step);
 *     |  then raise the target's counter to the max
 *   counts again                (any failure: back-off, repair afresh) */
#include "quarantine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "config.h"
#include "log.h"
#include "proto.h"
#include "redlock.h"
#include "restart.h"
#include "util.h"

/* One source of a repair: a node that kept its data, whose fence counter
 * is read and whose done marks are copied to the target one SCAN page at
 * a time: SCAN, then the read of the page's keys, then the copy, one at a
 * time, so a source has one page in hand. */
struct repair_src {
    struct repair *r;
    int node;
    bool counter_read; /* its counter is in r->max */
    bool scan_over;    /* its SCAN came back to cursor 0, marks copied */
    bool failed;       /* a command failed: it does not count */
    char cursor[24];   /* the next SCAN cursor; "" before the first */
    char run_id[48];   /* the server read: a cursor means nothing to another */
    size_t page_keys;  /* keys of the page being read */
    /* The read's and the copy's commands, which node.c borrows until
     * their callbacks ran (a NOSCRIPT re-sends them). */
    struct node_prep read_prep;
    struct node_prep copy_prep;
};

/* One repair of a restarted node before it counts again: copy the done
 * marks and read the fence counter from enough sound nodes, then raise the
 * node's counter to their maximum. Owned by its node callbacks; freed when
 * the last one has run. */
struct repair {
    struct quarantine *q;
    int target;      /* the restarted node */
    int generation;  /* stale rounds are ignored */
    int outstanding; /* node callbacks still due */
    struct restart_reads reads;
    int64_t max;
    uint64_t marks; /* done marks set on the target */
    bool over;      /* raising, failed or done: send no further step */
    bool early;     /* the copy at the quarantine's start: ends nothing */
    struct repair_src src[REDLOCK_MAX_NODES];
};

/* The timer argument of one node. */
struct qarg {
    struct quarantine *q;
    int i;
};

struct quarantine {
    const struct config *cfg;   /* borrowed */
    struct node *const *nodes;  /* borrowed: the cluster's */
    const int64_t *fence_floor; /* borrowed: the cluster's */
    int n;
    int quorum;
    bool closing; /* quarantine_stop: send nothing, arm nothing */
    bool quarantined[REDLOCK_MAX_NODES];
    struct event *timer[REDLOCK_MAX_NODES]; /* owned: quarantine, retries */
    struct qarg qargs[REDLOCK_MAX_NODES];
    int repair_generation[REDLOCK_MAX_NODES];
    bool first_seen_checked[REDLOCK_MAX_NODES]; /* start-up check done */
    bool settled; /* every node's first connection came up or failed */
    int repair_attempt[REDLOCK_MAX_NODES];      /* retries: the back-off */
    bool repair_waiting[REDLOCK_MAX_NODES];     /* no sound read yet
                                                   (logged) */
    char fence_key[80];
    size_t fence_key_len;
    char scan_match[RESTART_SCAN_MATCH_SIZE]; /* lock and slot keys */
    struct redlock_grants grants; /* live TTLs granted: the period */
};

/* ---- the period ------------------------------------------------------- */

/* The restart quarantine now: --quarantine-ms, or the largest TTL granted
 * whose lock may still stand (at least the default TTL). */
static uint32_t quarantine_period_ms(const struct quarantine *q)
{
    return redlock_quarantine_ms(&q->grants, util_now_us(),
                                 (uint32_t)q->cfg->quarantine_ms,
                                 PROTO_TTL_DEFAULT);
}

void quarantine_note_grant(struct quarantine *q, uint32_t ttl_ms,
                           uint64_t sent_us, uint64_t now_us)
{
    redlock_grants_add(&q->grants, ttl_ms, sent_us, now_us);
}

/* The two dates of a node's keys that the start-up check compares, each
 * with the same date of the other nodes (0: not compared): its start,
 * unless it persists, and its data-set mark's birth (node_dataset_born_us:
 * a flush empties a running node, persistent or not). A cluster whose
 * marks this daemon set itself has marks of one age, and its starts still
 * tell a restart. */
static uint64_t start_date_us(const struct node *nd)
{
    return node_is_persistent(nd) ? 0 : node_started_us(nd);
}

/* A node young enough that a node still on its first handshake could
 * show it restarted (restart_start_unsettled): it waits for that answer,
 * or that attempt's failure, rather than let young nodes form a quorum in
 * the milliseconds before an older node is seen. */
static bool start_unsettled(const struct quarantine *q, const struct node *nd)
{
    if (q->cfg->unsafe_no_quarantine || nd == NULL || !node_is_up(nd)) {
        return false;
    }
    uint64_t now = util_now_us();
    uint32_t period = quarantine_period_ms(q);
    return restart_start_unsettled(start_date_us(nd), now, period) ||
           restart_start_unsettled(node_dataset_born_us(nd), now, period);
}

bool quarantine_active(const struct quarantine *q, int i)
{
    return i >= 0 && i < q->n &&
           (q->quarantined[i] ||
            (!q->settled && start_unsettled(q, q->nodes[i])));
}

static void timer_arm_ms(struct quarantine *q, int i, uint64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(q->timer[i], &tv);
}

/* ---- the repair ------------------------------------------------------- */

static void repair_start(struct quarantine *q, int target, bool early);

static void repair_finish(struct repair *r, int64_t value)
{
    struct quarantine *q = r->q;
    if (r->early) {
        log_info(NULL,
                 "node %d: copied at once from %d node(s): %llu done "
                 "mark(s), fence counter >= %lld; repaired again when its "
                 "quarantine ends",
                 r->target + 1, r->reads.complete, (unsigned long long)r->marks,
                 (long long)value);
        return;
    }
    q->quarantined[r->target] = false;
    q->repair_attempt[r->target] = 0;
    log_info(NULL,
             "node %d: repaired from %d node(s): %llu done mark(s) "
             "copied, fence counter >= %lld; counts toward quorums again",
             r->target + 1, r->reads.complete, (unsigned long long)r->marks,
             (long long)value);
}

/* Tries the repair again after a capped, jittered back-off, on the
 * quarantine timer. */
static void repair_retry_later(struct quarantine *q, int target)
{
    if (q->closing) {
        return; /* the timer may be freed already */
    }
    uint32_t ms = redlock_backoff_ms((unsigned)q->repair_attempt[target]++, 250,
                                     5000, (double)random() / RAND_MAX);
    timer_arm_ms(q, target, ms);
}

static void repair_release(struct repair *r)
{
    if (r->outstanding == 0) {
        for (int i = 0; i < REDLOCK_MAX_NODES; i++) {
            node_prep_free(&r->src[i].read_prep);
            node_prep_free(&r->src[i].copy_prep);
        }
        free(r);
    }
}

/* Whether r may still act: not finished or failed, not superseded by a new
 * restart of its target, not shutting down. */
static bool repair_live(const struct repair *r)
{
    return !r->over && !r->q->closing &&
           r->generation == r->q->repair_generation[r->target];
}

/* Every failure of r ends here. The repair is tried again, but a failed
 * early copy is only logged: it must not rearm the quarantine's timer,
 * which would end the period sooner, and the repair at the end reads
 * afresh anyway. */
static void repair_fail(struct repair *r, const char *why)
{
    r->over = true;
    if (r->early) {
        log_info(NULL,
                 "node %d: the copy at once failed (%s); left to the "
                 "repair at the end of its quarantine",
                 r->target + 1, why);
        return;
    }
    log_warn(NULL, "node %d: repair: %s; retrying", r->target + 1, why);
    repair_retry_later(r->q, r->target);
}

/* What a failed reply says for a log line: the node's error text, or
 * what went missing. */
static const char *repair_reply_why(enum node_status status,
                                    const struct redisReply *reply,
                                    const char *otherwise)
{
    if (status != NODE_REPLY) {
        return "no answer";
    }
    if (reply->type != REDIS_REPLY_ERROR) {
        return otherwise;
    }
    size_t len; /* not needed: the text ends where the reply's does */
    return util_script_error(reply->str, reply->len, &len);
}

static void repair_raise_cb(struct node *node, struct redisReply *reply,
                            enum node_status status, void *privdata)
{
    (void)node;
    struct repair *r = privdata;
    struct quarantine *q = r->q;
    r->outstanding--;
    if (!q->closing && r->generation == q->repair_generation[r->target]) {
        if (status == NODE_REPLY && reply->type == REDIS_REPLY_INTEGER &&
            restart_raised(reply->integer, r->max)) {
            repair_finish(r, reply->integer);
        } else {
            char why[160];
            snprintf(why, sizeof(why), "the fence counter was not raised (%s)",
                     repair_reply_why(status, reply, "unexpected reply"));
            repair_fail(r, why);
        }
    }
    repair_release(r);
}

/* Enough sources read in full: raise the target's counter. */
static void repair_raise(struct repair *r)
{
    struct quarantine *q = r->q;
    r->over = true;
    char val[24];
    int vl = snprintf(val, sizeof(val), "%lld", (long long)r->max);
    const char *argv[2] = {q->fence_key, val};
    size_t lens[2] = {q->fence_key_len, (size_t)vl};
    if (node_script(q->nodes[r->target], SCRIPT_FENCE_REPAIR, 2, argv, lens,
                    repair_raise_cb, r) == 0) {
        r->outstanding++;
    } else {
        repair_fail(r, "raising the fence counter not sent");
    }
}

static void repair_src_failed(struct repair_src *s)
{
    struct repair *r = s->r;
    if (s->failed) {
        return;
    }
    s->failed = true;
    if (restart_reads_failed(&r->reads) == RESTART_FAIL) {
        char why[96];
        snprintf(why, sizeof(why),
                 "node %d could not be read (%d of %d "
                 "needed left)",
                 s->node + 1, r->reads.complete + r->reads.running,
                 r->reads.need);
        repair_fail(r, why);
    }
}

static void repair_src_check(struct repair_src *s)
{
    struct repair *r = s->r;
    if (s->failed || !s->counter_read || !s->scan_over) {
        return;
    }
    if (restart_reads_done(&r->reads) == RESTART_RAISE) {
        repair_raise(r);
    }
}

static void repair_scan_cb(struct node *node, struct redisReply *reply,
                           enum node_status status, void *privdata);

/* The next SCAN step on s, or s is read in full. */
static void repair_scan_next(struct repair_src *s)
{
    struct repair *r = s->r;
    struct quarantine *q = r->q;
    const char *cursor = restart_scan_cursor(s->cursor);
    if (cursor == NULL) {
        s->scan_over = true;
        repair_src_check(s);
        return;
    }
    /* A source that restarted since the repair began is another server:
     * the cursor is not its, and the marks the old one held past it are
     * gone, so it was not read in full. */
    if (strcmp(node_run_id(q->nodes[s->node]), s->run_id) != 0) {
        log_warn(NULL,
                 "node %d: restarted while node %d was being repaired "
                 "from it",
                 s->node + 1, r->target + 1);
        repair_src_failed(s);
        return;
    }
    const char *argv[6] = {"SCAN",        cursor,  "MATCH",
                           q->scan_match, "COUNT", RESTART_SCAN_COUNT};
    size_t lens[6] = {4, strlen(cursor),
                      5, strlen(q->scan_match),
                      5, sizeof(RESTART_SCAN_COUNT) - 1};
    if (node_command(q->nodes[s->node], 6, argv, lens, repair_scan_cb, s) ==
        0) {
        r->outstanding++;
    } else {
        repair_src_failed(s);
    }
}

static void repair_copy_cb(struct node *node, struct redisReply *reply,
                           enum node_status status, void *privdata)
{
    (void)node;
    struct repair_src *s = privdata;
    struct repair *r = s->r;
    r->outstanding--;
    node_prep_free(&s->copy_prep);
    if (repair_live(r) && !s->failed) {
        if (status == NODE_REPLY && reply->type == REDIS_REPLY_INTEGER) {
            r->marks += (uint64_t)reply->integer;
            repair_scan_next(s);
        } else {
            repair_fail(r, status == NODE_REPLY
                               ? repair_reply_why(status, reply,
                                                  "unexpected reply")
                               : "copying done marks got no answer");
        }
    }
    repair_release(r);
}

/* The n strings of elems as a command's arguments into *argv and *lens
 * (malloc'd, freed by the caller; NULL when n is 0). Returns 0, -1 when an
 * element is not a string, or -2 when memory ran out. */
static int reply_strings(struct redisReply **elems, size_t n,
                         const char ***argv, size_t **lens)
{
    *argv = n > 0 ? malloc(n * sizeof(**argv)) : NULL;
    *lens = n > 0 ? malloc(n * sizeof(**lens)) : NULL;
    if (n > 0 && (*argv == NULL || *lens == NULL)) {
        return -2;
    }
    for (size_t i = 0; i < n; i++) {
        if (elems[i]->type != REDIS_REPLY_STRING) {
            return -1;
        }
        (*argv)[i] = elems[i]->str;
        (*lens)[i] = elems[i]->len;
    }
    return 0;
}

/* Sends script on node with the n arguments of argv, the first numkeys
 * of them its KEYS, formatted into p (which must outlive the callback).
 * Returns 0 (cb will run once, and counts as outstanding) or -1. */
static int repair_send_keys(struct node *node, struct node_prep *p,
                            enum node_script script, size_t numkeys, size_t n,
                            const char **argv, const size_t *lens,
                            node_reply_fn *cb, struct repair_src *s)
{
    node_prep_free(p);
    if (node_prepare_keys(p, script, (int)numkeys, (int)n, argv, lens) != 0) {
        return -1;
    }
    if (node_send_prepared(node, p, util_now_us(), cb, s) != 0) {
        node_prep_free(p);
        return -1;
    }
    s->r->outstanding++;
    return 0;
}

/* A page's SCAN or read that failed, got as reply_strings answered (-2:
 * out of memory): said, and s is not read in full. */
static void repair_page_failed(struct repair_src *s, int got,
                               enum node_status status,
                               const struct redisReply *reply)
{
    log_warn(NULL, "node %d: done-mark scan: %s", s->node + 1,
             got == -2 ? "out of memory"
                       : repair_reply_why(status, reply, "unexpected reply"));
    repair_src_failed(s);
}

/* The done marks a page's read found: copied to the target, then the next
 * SCAN step. */
static void repair_read_cb(struct node *node, struct redisReply *reply,
                           enum node_status status, void *privdata)
{
    (void)node;
    struct repair_src *s = privdata;
    struct repair *r = s->r;
    r->outstanding--;
    node_prep_free(&s->read_prep);
    if (!repair_live(r) || s->failed) {
        repair_release(r);
        return;
    }
    long marks = status == NODE_REPLY && reply->type == REDIS_REPLY_ARRAY
                     ? restart_read_marks(reply->elements, s->page_keys)
                     : -1;
    const char **argv = NULL;
    size_t *lens = NULL;
    int got = marks < 0 ? -1
                        : reply_strings(reply->element, reply->elements, &argv,
                                        &lens);
    if (got != 0) {
        repair_page_failed(s, got, status, reply);
    } else if (restart_read_step(marks) == RESTART_STEP_SCAN) {
        repair_scan_next(s);
    } else if (repair_send_keys(r->q->nodes[r->target], &s->copy_prep,
                                SCRIPT_DONE_COPY, (size_t)marks,
                                reply->elements, argv, lens, repair_copy_cb,
                                s) != 0) {
        repair_fail(r, "copying done marks not sent");
    }
    free(argv);
    free(lens);
    repair_release(r);
}

/* A SCAN page of s: its keys read for done marks on s, or the next step
 * when it has none. */
static void repair_scan_cb(struct node *node, struct redisReply *reply,
                           enum node_status status, void *privdata)
{
    struct repair_src *s = privdata;
    struct repair *r = s->r;
    r->outstanding--;
    if (!repair_live(r) || s->failed) {
        repair_release(r);
        return;
    }
    bool shaped = status == NODE_REPLY && reply->type == REDIS_REPLY_ARRAY &&
                  reply->elements == 2 &&
                  reply->element[0]->type == REDIS_REPLY_STRING &&
                  reply->element[0]->len < sizeof(s->cursor) &&
                  reply->element[1]->type == REDIS_REPLY_ARRAY;
    const char **argv = NULL;
    size_t *lens = NULL;
    int got = !shaped
                  ? -1
                  : reply_strings(reply->element[1]->element,
                                  reply->element[1]->elements, &argv, &lens);
    if (got != 0) {
        repair_page_failed(s, got, status, reply);
    } else {
        const struct redisReply *page = reply->element[1];
        memcpy(s->cursor, reply->element[0]->str, reply->element[0]->len);
        s->cursor[reply->element[0]->len] = '\0';
        s->page_keys = page->elements;
        if (restart_page_step(page->elements) == RESTART_STEP_SCAN) {
            repair_scan_next(s);
        } else if (repair_send_keys(node, &s->read_prep, SCRIPT_DONE_READ,
                                    page->elements, page->elements, argv, lens,
                                    repair_read_cb, s) != 0) {
            repair_src_failed(s);
        }
    }
    free(argv);
    free(lens);
    repair_release(r);
}

static void repair_counter_cb(struct node *node, struct redisReply *reply,
                              enum node_status status, void *privdata)
{
    struct repair_src *s = privdata;
    struct repair *r = s->r;
    r->outstanding--;
    if (repair_live(r) && !s->failed) {
        if (status == NODE_REPLY && (reply->type == REDIS_REPLY_NIL ||
                                     reply->type == REDIS_REPLY_STRING)) {
            int64_t v = reply->type == REDIS_REPLY_STRING
                            ? strtoll(reply->str, NULL, 10)
                            : 0;
            if (v > r->max) {
                r->max = v;
            }
            s->counter_read = true;
            repair_src_check(s);
        } else {
            log_warn(NULL, "node %d: fence counter read: %s",
                     node_index(node) + 1,
                     repair_reply_why(status, reply, "unexpected reply"));
            repair_src_failed(s);
        }
    }
    repair_release(r);
}

/* The repair of target: at the end of its quarantine, what makes it count
 * again; early, the same reads and copies at the quarantine's start, which
 * end nothing. The early copy is why a rolling restart keeps its marks:
 * each node restarted in turn holds them again long before the next goes
 * down, so the best-effort repair a later restart forces still finds them.
 * Copies only add marks that stood on a node, with their PTTL, and the
 * counter only rises, so an early copy from any node up is safe. */
static void repair_start(struct quarantine *q, int target, bool early)
{
    if (early && q->cfg->unsafe_no_fence_repair) {
        return;
    }
    if (q->cfg->unsafe_no_fence_repair) {
        q->quarantined[target] = false;
        log_warn(NULL,
                 "node %d: counts again WITHOUT fence or done-mark repair "
                 "(--unsafe-no-fence-repair)",
                 target + 1);
        return;
    }
    uint32_t lost = 0, up = 0, unmarked = 0;
    for (int i = 0; i < q->n; i++) {
        lost |= q->quarantined[i] ? 1u << i : 0;
        up |= node_is_up(q->nodes[i]) ? 1u << i : 0;
        unmarked |= node_unmarked(q->nodes[i]) != NULL ? 1u << i : 0;
    }
    uint32_t read;
    int need;
    enum redlock_repair_plan plan =
        redlock_repair_plan(q->n, target, lost, up, unmarked, &read, &need);
    if (early && plan == RL_REPAIR_WAIT) {
        return; /* repair_waiting would end the period at a node's return */
    }
    if (plan == RL_REPAIR_WAIT) {
        if (!q->repair_waiting[target]) {
            q->repair_waiting[target] = true;
            log_warn(NULL,
                     "node %d: too few nodes that kept their data are up "
                     "to repair it from (%d needed; a node down but never "
                     "seen to restart still holds what it must read): it "
                     "stays quarantined until enough are back",
                     target + 1, q->n - q->quorum + 1);
        }
        repair_retry_later(q, target);
        return;
    }
    if (!early) {
        q->repair_waiting[target] = false;
    }
    if (plan == RL_REPAIR_BEST_EFFORT && !early) {
        log_error(NULL,
                  "node %d: more nodes restarted without persistence "
                  "than a quorum can spare: no sound read exists; "
                  "repairing from every node up; fences may repeat and "
                  "done marks may be lost",
                  target + 1);
    }
    struct repair *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        log_error(NULL, "node %d: repair: out of memory%s", target + 1,
                  early ? "" : "; tried again later");
        if (!early) {
            repair_retry_later(q, target);
        }
        return;
    }
    r->q = q;
    r->target = target;
    r->early = early;
    r->generation = ++q->repair_generation[target];
    r->outstanding = 1;       /* held while sending */
    r->max = *q->fence_floor; /* a floor we know of ourselves */
    r->reads.need = need;
    for (int i = 0; i < q->n; i++) {
        if (!(read & (1u << i))) {
            continue;
        }
        struct repair_src *s = &r->src[i];
        s->r = r;
        s->node = i;
        snprintf(s->run_id, sizeof(s->run_id), "%s", node_run_id(q->nodes[i]));
        const char *argv[2] = {"GET", q->fence_key};
        size_t lens[2] = {3, q->fence_key_len};
        if (node_command(q->nodes[i], 2, argv, lens, repair_counter_cb, s) !=
            0) {
            s->failed = true;
            continue;
        }
        r->outstanding++;
        r->reads.running++;
    }
    /* Scan steps after every counter read is out: a synchronous failure
     * inside one must not see sources not started yet. */
    for (int i = 0; i < q->n && repair_live(r); i++) {
        struct repair_src *s = &r->src[i];
        if ((read & (1u << i)) && !s->failed) {
            repair_scan_next(s);
        }
    }
    if (repair_live(r)) {
        switch (restart_reads_start(&r->reads)) {
        case RESTART_RAISE:
            repair_raise(r);
            break;
        case RESTART_FAIL:
            repair_fail(r, "too few nodes to read could be asked");
            break;
        case RESTART_READING:
            break;
        }
    }
    r->outstanding--;
    repair_release(r);
}

/* ---- the quarantine --------------------------------------------------- */

static void quarantine_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct qarg *qa = arg;
    struct quarantine *q = qa->q;
    int i = qa->i;
    if (!q->quarantined[i]) {
        return;
    }
    if (!node_is_up(q->nodes[i])) {
        repair_retry_later(q, i);
        return;
    }
    repair_start(q, i, false);
}

/* How a node lost its keys, for the log. */
enum key_loss {
    LOSS_RESTART,  /* a new run_id, no persistence */
    LOSS_REPLACED, /* a sync from a master (node_replaced) */
    LOSS_EMPTIED,  /* its data-set mark gone or set anew (node_emptied) */
};

static void quarantine_begin(struct quarantine *q, int i, enum key_loss how)
{
    uint32_t period = quarantine_period_ms(q);
    q->quarantined[i] = true;
    q->repair_generation[i]++;
    q->repair_attempt[i] = 0;
    q->repair_waiting[i] = false;
    switch (how) {
    case LOSS_REPLACED:
        log_warn(NULL,
                 "node %d: its keys were replaced by a master's (new "
                 "replication id): quarantined for %u ms, then its done "
                 "marks and fence counter are repaired",
                 i + 1, period);
        break;
    case LOSS_EMPTIED:
        log_warn(NULL,
                 "node %d: its keys are gone (its data-set key was emptied: "
                 "FLUSHALL, FLUSHDB, a restart that kept no keys, or another "
                 "server behind its address): quarantined for %u ms, then "
                 "its done marks and fence counter are repaired",
                 i + 1, period);
        break;
    case LOSS_RESTART:
        log_warn(NULL,
                 "node %d: restarted (new run_id) without persistence: "
                 "quarantined for %u ms, then its done marks and fence "
                 "counter are repaired",
                 i + 1, period);
        break;
    }
    timer_arm_ms(q, i, period);
    if (node_is_up(q->nodes[i])) {
        repair_start(q, i, true);
    }
}

/* The start-up check (restart.h, RESTART_START_SKEW_US): a node seen first
 * after its restart, or after it was emptied (its data-set mark younger
 * than the others'), is quarantined for the rest of the period.
 * Re-checked whenever a node comes up, since the older node may connect
 * second. */
static void check_fresh_starts(struct quarantine *q)
{
    if (q->cfg->unsafe_no_quarantine) {
        return;
    }
    uint64_t started[REDLOCK_MAX_NODES];
    uint64_t born[REDLOCK_MAX_NODES];
    for (int j = 0; j < q->n; j++) {
        bool up = node_is_up(q->nodes[j]);
        started[j] = up ? start_date_us(q->nodes[j]) : 0;
        born[j] = up ? node_dataset_born_us(q->nodes[j]) : 0;
    }
    uint64_t oldest_start = restart_oldest_us(started, q->n);
    uint64_t oldest_born = restart_oldest_us(born, q->n);
    uint64_t now = util_now_us();
    uint32_t period = quarantine_period_ms(q);
    for (int i = 0; i < q->n; i++) {
        struct node *nd = q->nodes[i];
        uint64_t start_left_ms = 0;
        uint64_t born_left_ms = 0;
        if (q->first_seen_checked[i] || !node_is_up(nd) ||
            !node_first_connection(nd) || q->quarantined[i]) {
            continue;
        }
        bool late_start =
            started[i] != 0 && restart_fresh_start(started[i], oldest_start,
                                                   now, period, &start_left_ms);
        bool late_born =
            born[i] != 0 && restart_fresh_start(born[i], oldest_born, now,
                                                period, &born_left_ms);
        if (!late_start && !late_born) {
            continue;
        }
        q->first_seen_checked[i] = true;
        q->quarantined[i] = true;
        q->repair_generation[i]++;
        uint64_t left_ms =
            start_left_ms > born_left_ms ? start_left_ms : born_left_ms;
        if (late_start) {
            log_warn(
                NULL,
                "node %d: started %llu s after another node and "
                "has no persistence: it may have lost locks; "
                "quarantined for %llu ms",
                i + 1,
                (unsigned long long)((started[i] - oldest_start) / 1000000u),
                (unsigned long long)left_ms);
        } else {
            log_warn(NULL,
                     "node %d: its data-set key was set %llu s after "
                     "another node's (it was emptied, or is new to the "
                     "cluster): it may have lost locks; quarantined for "
                     "%llu ms",
                     i + 1,
                     (unsigned long long)((born[i] - oldest_born) / 1000000u),
                     (unsigned long long)left_ms);
        }
        timer_arm_ms(q, i, left_ms);
    }
}

/* Settled: the young nodes count from now on. Said once when a node
 * failed its first connection, since they were not compared with it. */
static void start_gate_settle(struct quarantine *q)
{
    /* "N, " at most per node: the lists always fit */
    char young[REDLOCK_MAX_NODES * 4 + 1] = "";
    char silent[REDLOCK_MAX_NODES * 4 + 1] = "";
    size_t yl = 0;
    size_t sl = 0;
    for (int j = 0; j < q->n; j++) {
        struct node *nd = q->nodes[j];
        if (!node_is_up(nd)) {
            sl += (size_t)snprintf(silent + sl, sizeof(silent) - sl, "%s%d",
                                   sl > 0 ? ", " : "", j + 1);
        } else if (!q->quarantined[j] && start_unsettled(q, nd)) {
            yl += (size_t)snprintf(young + yl, sizeof(young) - yl, "%s%d",
                                   yl > 0 ? ", " : "", j + 1);
        }
    }
    q->settled = true;
    if (yl > 0 && sl > 0) {
        log_warn(NULL,
                 "node(s) %s did not answer their first connection: "
                 "node(s) %s, whose keys are recent (a start without "
                 "persistence, or a new data-set key), count without being "
                 "compared with them",
                 silent, young);
    } else {
        log_debug(NULL, "every node answered or failed its first "
                        "connection: the start-up check is settled");
    }
}

/* The start-up gate settles once no node is on its first attempt: from
 * then on check_fresh_starts has seen every start time the nodes that
 * answer will show. A node whose first connection failed before the loop
 * ran changed no state, so it is read here, on the next node's change. */
static void start_gate_update(struct quarantine *q, struct node *node)
{
    if (q->settled) {
        return;
    }
    int pending = 0;
    for (int j = 0; j < q->n; j++) {
        /* NULL: not created yet (a state change inside node_create) */
        if (q->nodes[j] == NULL || node_first_attempt_pending(q->nodes[j])) {
            pending++;
        }
    }
    if (pending == 0) {
        start_gate_settle(q);
    } else if (!q->quarantined[node_index(node)] && start_unsettled(q, node)) {
        log_debug(NULL,
                  "node %d: started, or its data-set key set, within the "
                  "quarantine period: it counts once %d node(s) still "
                  "connecting answer or fail",
                  node_index(node) + 1, pending);
    }
}

void quarantine_node_cb(struct node *node, enum node_state state, void *priv)
{
    struct quarantine *q = priv;
    int i = node_index(node);
    if (state == NODE_DOWN) {
        start_gate_update(q, node);
    }
    if (state != NODE_UP) {
        return;
    }
    if (!node_restarted(node)) {
        check_fresh_starts(q);
    }
    start_gate_update(q, node);
    /* A node back may be what a waiting repair needs: try it now. */
    for (int j = 0; j < q->n; j++) {
        if (q->repair_waiting[j] && q->quarantined[j] && j != i) {
            timer_arm_ms(q, j, 0);
        }
    }
    /* Keys replaced by a master's, or emptied, are lost whatever the node
     * persists. */
    bool replaced = node_replaced(node);
    bool emptied = node_emptied(node);
    bool restarted = node_restarted(node);
    enum key_loss how = replaced ? LOSS_REPLACED
                        : emptied && !(restarted && !node_is_persistent(node))
                            ? LOSS_EMPTIED
                            : LOSS_RESTART;
    switch (restart_action(restarted || replaced || emptied,
                           node_is_persistent(node) && !replaced && !emptied,
                           q->cfg->unsafe_no_quarantine,
                           q->cfg->unsafe_no_fence_repair)) {
    case RESTART_NONE:
        break;
    case RESTART_QUARANTINE:
        quarantine_begin(q, i, how);
        break;
    case RESTART_REPAIR_NOW:
    case RESTART_COUNT_NOW:
        log_warn(NULL,
                 "node %d: %s; counted at once "
                 "(--unsafe-no-quarantine)",
                 i + 1,
                 how == LOSS_REPLACED  ? "keys replaced by a master's"
                 : how == LOSS_EMPTIED ? "keys emptied"
                                       : "restarted");
        if (!q->cfg->unsafe_no_fence_repair) {
            q->quarantined[i] = true; /* only until the repair */
            repair_start(q, i, false);
        }
        break;
    }
}

/* ---- life cycle ------------------------------------------------------- */

struct quarantine *quarantine_create(struct event_base *base,
                                     const struct config *cfg,
                                     struct node *const *nodes, int n,
                                     const int64_t *fence_floor)
{
    struct quarantine *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        return NULL;
    }
    q->cfg = cfg;
    q->nodes = nodes;
    q->fence_floor = fence_floor;
    q->n = n;
    q->quorum = redlock_quorum(n);
    int fl =
        snprintf(q->fence_key, sizeof(q->fence_key), "%sfence", cfg->prefix);
    q->fence_key_len = (size_t)fl;
    restart_scan_match(cfg->prefix, q->scan_match, sizeof(q->scan_match));
    for (int i = 0; i < n; i++) {
        q->qargs[i].q = q;
        q->qargs[i].i = i;
        q->timer[i] = evtimer_new(base, quarantine_timer_cb, &q->qargs[i]);
        if (q->timer[i] == NULL) {
            quarantine_destroy(q);
            return NULL;
        }
    }
    return q;
}

void quarantine_stop(struct quarantine *q)
{
    if (q != NULL) {
        q->closing = true;
    }
}

void quarantine_destroy(struct quarantine *q)
{
    if (q == NULL) {
        return;
    }
    for (int i = 0; i < q->n; i++) {
        if (q->timer[i] != NULL) {
            event_free(q->timer[i]);
        }
    }
    free(q);
}
