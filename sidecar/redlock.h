/* redlock.h: the Redlock decisions, pure. No sockets and no clock of its
 * own: callers pass node results, monotonic timestamps and a clock function
 * in, and get decisions out.
 *
 * One struct redlock_round tracks a multi-node operation (acquire, extend,
 * release, complete, fence write-back) from the moment it was sent to all
 * nodes until every node has answered or timed out. */
#ifndef REDLOCKD_REDLOCK_H
#define REDLOCKD_REDLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REDLOCK_MAX_NODES 32

/* What one node said about one operation. */
enum redlock_node_result {
    RL_PENDING = 0, /* sent, no answer yet */
    RL_OK,          /* set / extended / deleted: this node counts */
    RL_BUSY,        /* held by another token (acquire), or not held (others) */
    RL_DONE,        /* the resource carries a done mark (acquire) */
    RL_FAILED,      /* timeout, disconnect, error: unknown whether applied */
    RL_SKIPPED,     /* never sent: node down or quarantined */
};

/* A node's reply as the classifiers below see it: cluster.c fills it from
 * the parsed RESP reply, so that this file needs no Redis client. */
enum redlock_reply_kind {
    RLR_NIL = 0, /* null bulk or null array */
    RLR_STRING,  /* bulk or status string: str, len */
    RLR_INTEGER, /* integer */
    RLR_ERROR,   /* error reply: str, len */
    RLR_ARRAY,   /* elem[0..n_elem) */
    RLR_OTHER,   /* anything else: never expected */
};

struct redlock_reply {
    enum redlock_reply_kind kind;
    const char *str; /* borrowed: STRING, ERROR; not NUL-terminated */
    size_t len;
    long long integer;
    const struct redlock_reply *elem; /* borrowed: ARRAY elements */
    size_t n_elem;
};

/* The forms an acquire takes on a node (cluster.c picks one per node from
 * its server version and the configuration). */
enum redlock_acquire_form {
    RL_FORM_SCRIPT = 0,   /* the acquire script: {1, fence} set, {0, pttl}
                             held, {2, pttl} done mark */
    RL_FORM_SET_GET,      /* SET key token NX PX ttl GET (Redis >= 7.0):
                             nil set, "done:..." done mark, else held */
    RL_FORM_SET_GET_INCR, /* MULTI, that SET, INCR fence, EXEC: an array
                             of the SET's reply and the counter */
};

/* redlock_classify_acquire: what node's reply r to an acquire sent in
 * form means: RL_OK (set; *fence = the node's counter when the form
 * carries one), RL_BUSY (held by another token; *pttl = its PTTL when the
 * form carries one, else left alone), RL_DONE (a done mark: kept apart
 * from busy, since done is decided differently), or RL_FAILED (an error
 * or a reply of the wrong shape: unknown whether the SET applied, so the
 * node is rolled back). fence and pttl must not be NULL. */
enum redlock_node_result redlock_classify_acquire(enum redlock_acquire_form form,
                                                  const struct redlock_reply *r,
                                                  int64_t *fence, int64_t *pttl);

/* redlock_classify_flag: a compare-and-act script's reply: 1 RL_OK
 * (applied), 0 RL_BUSY (not held), anything else RL_FAILED. */
enum redlock_node_result redlock_classify_flag(const struct redlock_reply *r);

/* The outcome of a round, once certain. */
enum redlock_outcome {
    RL_UNDECIDED = 0, /* keep waiting for answers */
    RL_WON,           /* quorum reached within validity */
    RL_LOST_BUSY,     /* enough nodes answered, too few were free */
    RL_LOST_DONE,     /* a node reported a done mark */
    RL_LOST_NOQUORUM, /* too few nodes answered in time, or validity <= 0 */
};

struct redlock_round {
    int n_nodes;
    int quorum;        /* n_nodes / 2 + 1 */
    uint64_t start_us; /* monotonic time the round was sent */
    uint32_t ttl_ms;
    double drift_factor;
    enum redlock_node_result result[REDLOCK_MAX_NODES];
    int n_ok, n_busy, n_done, n_failed, n_pending;
    int64_t fence_max; /* max fence among RL_OK answers, 0 if none */
    int64_t pttl_min;  /* min holder PTTL among busy answers, -1 none */
    enum redlock_outcome outcome; /* sticky once decided */
    int64_t validity_ms;          /* for RL_WON: validity at the decision */
    uint64_t decided_us; /* for RL_WON: the clock reading validity_ms was
                            measured at, so valid until decided_us +
                            validity_ms; 0 otherwise */
    bool too_late;       /* lost although a quorum answered: no validity
                            was left by then */
};

/* redlock_quorum: n / 2 + 1 for n >= 1. */
int redlock_quorum(int n_nodes);

/* redlock_validity_ms: ttl - elapsed - (ttl * drift + 2 ms), rounded down;
 * may be <= 0, meaning the lock cannot be trusted. */
int64_t redlock_validity_ms(uint32_t ttl_ms, double drift_factor,
                            uint64_t elapsed_us);

/* redlock_round_start: every node RL_PENDING; nodes marked in skipped (a
 * bitmask, bit i for node i) start RL_SKIPPED. The round may already be
 * decided (all skipped): check redlock_round_outcome(). */
void redlock_round_start(struct redlock_round *r, int n_nodes, uint32_t ttl_ms,
                         double drift_factor, uint64_t now_us,
                         uint32_t skipped);

/* Returns the monotonic time in µs. */
typedef uint64_t redlock_clock_fn(void);

/* redlock_round_answer: records node's answer (fence/pttl only meaningful
 * for RL_OK/RL_BUSY, pass 0/-1 otherwise) and returns the outcome, which is
 * RL_UNDECIDED until certain. After a decision, answers are still recorded
 * (for the rollback set) but the outcome does not change. clock is called
 * at most once, by the answer that completes a quorum: validity is measured
 * at that moment, and no other answer needs the time (a clock reading per
 * node reply was a visible share of the daemon's CPU). clock must not be
 * NULL. */
enum redlock_outcome redlock_round_answer(struct redlock_round *r, int node,
                                          enum redlock_node_result res,
                                          int64_t fence, int64_t pttl,
                                          redlock_clock_fn *clock);

/* redlock_round_holder_pttl: records a holder's PTTL learnt after its busy
 * answer (a second command), so that the retry delay can use it; pttl < 0
 * (no key or no expiry any more) is ignored. */
void redlock_round_holder_pttl(struct redlock_round *r, int64_t pttl);

/* redlock_round_outcome: the current outcome without a new answer. */
enum redlock_outcome redlock_round_outcome(const struct redlock_round *r);

/* redlock_rollback_set: bitmask of nodes whose key must be removed after a
 * failed acquisition: every node that was sent the SET and did not answer
 * busy or done (answered ok, failed, or still pending). */
uint32_t redlock_rollback_set(const struct redlock_round *r);

/* redlock_ok_set: bitmask of nodes that answered RL_OK. */
uint32_t redlock_ok_set(const struct redlock_round *r);

/* redlock_backoff_ms: capped exponential back-off with full jitter: a value
 * in [base*2^attempt / 2, base*2^attempt], capped at cap_ms; rand01 in [0,1)
 * is supplied by the caller so the function stays pure. */
uint32_t redlock_backoff_ms(unsigned attempt, uint32_t base_ms, uint32_t cap_ms,
                            double rand01);

/* redlock_retry_delay_ms: when to retry a busy acquisition: the back-off,
 * but never sooner than the holder's shortest remaining PTTL seen (when
 * known and below the back-off cap), and never past the remaining wait;
 * returns 0 when the wait is over. */
uint32_t redlock_retry_delay_ms(unsigned attempt, int64_t pttl_min,
                                uint64_t wait_left_ms, double rand01);

#endif
