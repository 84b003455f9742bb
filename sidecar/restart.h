/* restart.h: pure rules of a node restart (no I/O): whether a node that
 * came up must sit out, for how long a node seen only after its restart
 * still must, how the reads of a repair add up, and the bounds of one
 * SCAN step of the done-mark copy and what follows each page of it, and
 * what tells one server's run and data from the last (a node's identity,
 * compared across the connections that came up). quarantine.c carries
 * them out; the quarantine period itself is redlock_quarantine_ms
 * (redlock.c). */
#ifndef REDLOCKD_RESTART_H
#define REDLOCKD_RESTART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RESTART_ID_LEN 48   /* room for a run_id or a replication id */
#define RESTART_MARK_LEN 32 /* a data-set mark, at most */

/* What one handshake read of a node; each "" when not known. */
struct node_ident {
    char run_id[RESTART_ID_LEN]; /* INFO server run_id */
    /* INFO replication's master_replid: it changes when the server syncs
     * from a master (its keys replaced by the master's) or a replica is
     * promoted, never for a primary left alone; "" before Redis 4. */
    char replid[RESTART_ID_LEN];
    /* The mark in the data-set key: "" when no key is kept, it was
     * refused, or it is not a string. */
    char dataset[RESTART_MARK_LEN + 1];
};

/* restart_ident_up: a connection came up with what its handshake read
 * (last): the identity up so far becomes the previous one (*prev) and
 * last's becomes the one up (*up). A mark not read this time leaves the
 * one known in *up: no change to see. */
void restart_ident_up(struct node_ident *prev, struct node_ident *up,
                      const struct node_ident *last);

/* restart_ident_restarted: whether the connection up (up) reached another
 * server run than the one up before it (prev): both run_ids known and
 * different. */
bool restart_ident_restarted(const struct node_ident *prev,
                             const struct node_ident *up);

/* restart_ident_emptied: whether the data-set mark changed between the
 * connection up before (prev) and the one up now (up), both known: the
 * keys were flushed, whatever the run_id says. */
bool restart_ident_emptied(const struct node_ident *prev,
                           const struct node_ident *up);

/* restart_ident_replaced: whether the same server run (no restart) came
 * back with another replication id, both known: its keys were replaced
 * by a master's, or it was promoted. */
bool restart_ident_replaced(const struct node_ident *prev,
                            const struct node_ident *up);

/* restart_ident_first: whether the connection up is the first to have
 * reported a run_id (none up before it did). */
bool restart_ident_first(const struct node_ident *prev,
                         const struct node_ident *up);

/* What to do with a node that came up with a different run_id. */
enum restart_action {
    RESTART_NONE = 0,   /* same server, or it kept its data */
    RESTART_QUARANTINE, /* sit out the quarantine, then the repair */
    RESTART_REPAIR_NOW, /* --unsafe-no-quarantine: repair at once */
    RESTART_COUNT_NOW,  /* both unsafe flags: counts at once */
};

/* restart_action: restarted (the run_id changed) of a node that is
 * persistent or not, under the two --unsafe-* flags. */
enum restart_action restart_action(bool restarted, bool persistent,
                                   bool no_quarantine, bool no_fence_repair);

/* A daemon that starts after a node restarted has no earlier run_id to
 * compare: a node that started more than RESTART_START_SKEW_US after the
 * oldest node up (a cluster started together is not suspect) is taken for
 * one that restarted under it. */
#define RESTART_START_SKEW_US 3000000u

/* restart_started_us: the latest server start, on the daemon's clock at
 * now_us, that an INFO uptime_in_seconds of uptime_s allows. Redis counts
 * uptime as the difference of two whole seconds of wall time, so a server
 * up 0.1 s may say 1: the start lies within (now - uptime - 1 s,
 * now - uptime + 1 s). The latest keeps a quarantine counted from it from
 * ending while a lock granted before the restart may stand. Never 0 (that
 * is "not known") and never after now_us. */
uint64_t restart_started_us(uint64_t now_us, uint64_t uptime_s);

/* The data-set mark's TTL (node.c sets it with the mark): so long that
 * it never runs out, so that what is left of it tells, on the node's own
 * clock, how long ago the mark was set. */
#define RESTART_DATASET_TTL_MS 3153600000000ull /* 100 years */

/* restart_dataset_born_us: when a node's data-set mark was set, on the
 * daemon's clock at now_us, from its PTTL (pttl_ms < 0: no TTL, a mark of
 * an older daemon, or no key: 0, not known). A TTL above the mark's own
 * (set by hand) dates it now. Never 0 when known, never after now_us. */
uint64_t restart_dataset_born_us(uint64_t now_us, long long pttl_ms);

/* restart_oldest_us: the earliest of n server start times (µs on the
 * daemon's clock; 0 for a node down or not known), 0 when none. */
uint64_t restart_oldest_us(const uint64_t *started_us, int n);

/* restart_fresh_start: whether a node that started at started_us (not 0),
 * with oldest_us the oldest start up, is still inside the quarantine of
 * quarantine_ms at now_us; if so sets *left_ms to what remains of it
 * (rounded down, may be 0). */
bool restart_fresh_start(uint64_t started_us, uint64_t oldest_us,
                         uint64_t now_us, uint32_t quarantine_ms,
                         uint64_t *left_ms);

/* restart_start_unsettled: whether a node that started at started_us (0:
 * not known) is young enough, at now_us, that a node still to answer its
 * first handshake could show it started after it (restart_fresh_start);
 * until every node has answered or failed once, such a node does not
 * count. A node up longer than the quarantine is never fresh. */
bool restart_start_unsettled(uint64_t started_us, uint64_t now_us,
                             uint32_t quarantine_ms);

/* The reads of one repair: each source node is read in full (its fence
 * counter and every SCAN step) or fails; the target's counter is raised
 * once `need` of them are read in full. */
struct restart_reads {
    int need;     /* sources to read in full before raising */
    int complete; /* sources read in full */
    int running;  /* sources neither complete nor failed */
};

enum restart_verdict {
    RESTART_READING = 0, /* wait for the sources still running */
    RESTART_RAISE,       /* enough read: raise the target's counter */
    RESTART_FAIL,        /* too few can still complete: retry later */
};

/* restart_reads_start: the verdict once every source asked is running
 * (those that could not be asked are not counted). */
enum restart_verdict restart_reads_start(const struct restart_reads *r);

/* restart_reads_done / restart_reads_failed: one running source was read
 * in full / failed; the verdict after it. */
enum restart_verdict restart_reads_done(struct restart_reads *r);
enum restart_verdict restart_reads_failed(struct restart_reads *r);

/* restart_raised: whether the target's counter, as the repair script
 * answered it, covers max, the largest fence read: then the node counts
 * again. */
bool restart_raised(int64_t counter, int64_t max);

/* Keys per SCAN step: the node's work per call stays bounded, and so does
 * the copy that follows it. */
#define RESTART_SCAN_COUNT "256"

/* restart_scan_cursor: the cursor to send for a source's next SCAN step,
 * given the one its last step answered ("" before the first step): "0" to
 * begin, NULL when the scan came back to cursor 0 (the source is read in
 * full). */
const char *restart_scan_cursor(const char *cursor);

/* What restart_scan_match puts after the prefix: done marks stand on lock
 * keys (<prefix>lock:<resource>) and on semaphores' slot keys
 * (<prefix>sem:<k>:<resource>, a completed permit); one glob matches both
 * and neither <prefix>fence nor <prefix>dataset. */
#define RESTART_SCAN_SUFFIX "[ls][oe][cm]*"
/* A buffer for any prefix of up to 64 bytes, every one escaped. */
#define RESTART_SCAN_MATCH_SIZE (2 * 64 + sizeof(RESTART_SCAN_SUFFIX))

/* restart_scan_match: the SCAN MATCH pattern <prefix>RESTART_SCAN_SUFFIX
 * into buf of size bytes, the prefix's glob characters escaped; the prefix
 * is cut short rather than overflow (size > sizeof(RESTART_SCAN_SUFFIX)). */
void restart_scan_match(const char *prefix, char *buf, size_t size);

/* A page of the done-mark copy: each SCAN step, a plain command, answers
 * a page of keys; they go, as KEYS, to one SCRIPT_DONE_READ on the source,
 * and the marks it answers, as KEYS and ARGV, to one SCRIPT_DONE_COPY on
 * the target. No script reads a key it was not given. */
enum restart_step {
    RESTART_STEP_SCAN = 0, /* the source's next SCAN step (or it is over) */
    RESTART_STEP_READ,     /* read the page's keys on the source */
    RESTART_STEP_COPY,     /* copy the marks read to the target */
};

/* restart_page_step: what follows a SCAN page of keys keys: a page with
 * none sends no read. */
enum restart_step restart_page_step(size_t keys);

/* restart_read_marks: the done marks in a SCRIPT_DONE_READ answer of
 * elements entries to a read of keys keys ({key..., mark, pttl, ...}:
 * three entries a mark, never more marks than keys read), or -1 when it
 * is not of that shape. */
long restart_read_marks(size_t elements, size_t keys);

/* restart_read_step: what follows a read that answered marks done marks
 * (restart_read_marks, not -1): a read with none sends no copy. */
enum restart_step restart_read_step(long marks);

#endif
