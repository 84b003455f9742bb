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
    RL_FORM_SET_NX,       /* SET key token NX PX ttl: "OK" set, nil held
                             (done or busy alike; rlbench's minimal cycle,
                             never the daemon's) */
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

/* redlock_sem_pttl_min: the PTTL a semaphore waiter backs off on, from the
 * one so far (acc, over the slots tried before) and the next slot's
 * (slot_pttl; each the pttl_min of a round, -1 unknown). The waiter takes
 * whichever slot frees first, so the smallest; a slot of unknown PTTL may
 * free at any moment, so then -1 (the plain back-off). */
int64_t redlock_sem_pttl_min(int64_t acc, int64_t slot_pttl);

/* What one node said of a resource when inspected (read-only). */
enum redlock_peek {
    RL_PEEK_FAILED = 0, /* no answer: timeout, down, error, quarantined */
    RL_PEEK_FREE,       /* no key */
    RL_PEEK_HELD,       /* a holder's token */
    RL_PEEK_DONE,       /* a done mark */
};

/* The state of a resource by the quorum rules of release: a state needs
 * more than n - quorum nodes, so that no quorum can say otherwise. */
enum redlock_state {
    RL_STATE_NO_QUORUM = 0, /* no state has enough nodes */
    RL_STATE_FREE,          /* no quorum can hold it */
    RL_STATE_HELD,          /* no acquisition can win while it lasts */
    RL_STATE_DONE,          /* completed: acquisitions answer done */
};

struct redlock_inspect {
    enum redlock_state state;
    int agree;        /* nodes that said state (for no_quorum: the most that
                         said any one thing) */
    int64_t pttl_min; /* held, done: the smallest PTTL among them, else -1 */
};

/* redlock_inspect_decide: the state from n_nodes answers (peek[i], and
 * pttl[i] in ms for held and done; -1 for a key without expiry). With fewer
 * than 5 nodes two states can both have enough nodes (n = 4: 2 free, 2
 * held); the one more nodes said wins, a tie going to done, then held, so
 * that a resource is never called free while it cannot be acquired. */
void redlock_inspect_decide(int n_nodes, const enum redlock_peek *peek,
                            const int64_t *pttl, struct redlock_inspect *out);

/* redlock_fence_floor: a value every fenced acquisition that starts after
 * these reads answers more than, from the fence counters of n_nodes nodes
 * (counter[i], -1 for a node not read: it may hold as little as 0). A won
 * acquisition answers at least one more than the largest counter of the
 * quorum it won on, and counters only grow; the smallest such largest over
 * every quorum is the quorum-th smallest counter. When every node was read
 * it is also at least every fence already answered: each was written back
 * to a quorum, which holds it on quorum nodes. */
int64_t redlock_fence_floor(int n_nodes, const int64_t *counter);
/* redlock_free_quorum: what an acquisition does once a quorum of nodes set
 * its key, given the done marks seen so far (n_done) and the answers still
 * due (n_pending). A complete that succeeded left marks on a quorum; an
 * acquisition can find a quorum free only where marks were lost (a node
 * restarted or was flushed before its marks were repaired), and one lost
 * mark leaves quorum - 1 of them. So marks on quorum - 1 nodes (at least
 * one) answer done; fewer are a complete that reached only a minority and
 * do not hold the resource back. Until the answers still due cannot reach
 * that many marks, the decision waits for them (or their node timeout). */
enum redlock_free_verdict {
    RL_FREE_GRANT = 0, /* won: no mark, or too few to count */
    RL_FREE_WAIT,      /* a mark was seen: wait for the answers still due */
    RL_FREE_DONE,      /* marks on quorum - 1 nodes: answer done */
};
enum redlock_free_verdict redlock_free_quorum(int n_nodes, int n_done,
                                              int n_pending);

/* How a restarted node's fence counter and done marks are repaired before
 * it counts again (quarantine.c). Reading N - quorum + 1 nodes other than the
 * target that kept their data meets every earlier write-back quorum and
 * every quorum of done marks. A node that is down but was never seen to
 * restart kept its data: it cannot be read now, so the repair waits for
 * it; only when the nodes that lost their data (restarted, not repaired
 * yet) leave too few others is no sound read possible at all. */
enum redlock_repair_plan {
    RL_REPAIR_WAIT = 0,    /* too few sound nodes up now: retry later */
    RL_REPAIR_SOUND,       /* read *read, need answers from *need of them */
    RL_REPAIR_BEST_EFFORT, /* restarts alone left too few sound nodes:
                              read every node up, all must answer */
};

/* redlock_repair_plan: target is the node to repair; lost the nodes that
 * restarted without persistence and are not repaired yet (target's bit is
 * ignored); up the nodes connected now; unmarked those up but not counted
 * (their data-set mark unknown, see node_unmarked). An unmarked node may
 * have been emptied unseen, so it is no sound source: like a node down, it
 * is not taken for lost, and the sound read waits for enough others.
 * Sets *read (the nodes to read) and *need (answers needed); both 0 for
 * RL_REPAIR_WAIT. */
enum redlock_repair_plan redlock_repair_plan(int n_nodes, int target,
                                             uint32_t lost, uint32_t up,
                                             uint32_t unmarked, uint32_t *read,
                                             int *need);

/* The TTLs granted that may still be live, for the restart quarantine: a
 * node that restarts must sit out until every lock it may have held has
 * expired, that is for the largest TTL granted whose lock may still stand.
 * A grant is counted from when its round was sent (the key cannot outlive
 * send time + ttl by the daemon's clock, drift aside, which the validity
 * already took off). Bounded: past REDLOCK_GRANTS_MAX distinct (ttl,
 * expiry) steps, the two shortest merge into one that covers both, so the
 * answer is never below the truth. */
#define REDLOCK_GRANTS_MAX 16
struct redlock_grant {
    uint32_t ttl_ms;
    uint64_t until_us; /* monotonic: the lock cannot stand past this */
};
struct redlock_grants {
    int n;
    struct redlock_grant g[REDLOCK_GRANTS_MAX];
};

/* redlock_grants_add: records a grant of ttl_ms sent at sent_us. */
void redlock_grants_add(struct redlock_grants *gs, uint32_t ttl_ms,
                        uint64_t sent_us, uint64_t now_us);

/* redlock_grants_max_ttl: the largest ttl of a grant that may still stand
 * at now_us; 0 when none. */
uint32_t redlock_grants_max_ttl(const struct redlock_grants *gs,
                                uint64_t now_us);

/* redlock_quarantine_ms: the restart quarantine: fixed_ms when set (> 0),
 * else the largest live TTL granted, but at least floor_ms. */
uint32_t redlock_quarantine_ms(const struct redlock_grants *gs, uint64_t now_us,
                               uint32_t fixed_ms, uint32_t floor_ms);

/* ---- renewal of a lock the daemon keeps alive ---------------------------
 *
 * A renewing lock is valid until valid_until_us. Its renewal is due at
 * next_renew_us; a lost event must reach the owner before the validity
 * ends, whatever is in flight. All times in µs on the monotonic clock. */

/* What the renewal timer does for one lock now. */
enum redlock_renew_action {
    RL_RENEW_WAIT = 0, /* nothing yet: look again at *wake_us */
    RL_RENEW_SEND,     /* send a renewal now */
    RL_RENEW_GIVE_UP,  /* lost: tell the owner now */
};

struct redlock_renew_state {
    uint64_t valid_until_us;  /* end of the validity the owner was told */
    uint32_t ttl_ms;          /* the ttl each renewal asks for */
    uint32_t node_timeout_ms; /* a node's answer comes within this */
    uint64_t next_renew_us;   /* when the next renewal is due */
    uint64_t sent_us;         /* a renewal in flight was sent then; 0: none */
    bool paused;              /* a release or complete in flight: no renewal,
                                 its answer decides */
};

/* redlock_renew_give_up_us: when a renewing lock is given up unless a
 * renewal sent before then succeeded: valid_until_us less one node timeout
 * and the lost event's delivery (20 ms), but never more than a quarter of
 * ttl_ms, so that a short lock is not given up at once. */
uint64_t redlock_renew_give_up_us(uint64_t valid_until_us, uint32_t ttl_ms,
                                  uint32_t node_timeout_ms);

/* redlock_renew_last_us: the last moment a lost event can be sent and still
 * reach the owner before valid_until_us: less the event's delivery margin
 * (20 ms, at most a tenth of ttl_ms). A renewal the timer sends late, after
 * the give-up time, is waited for until then. */
uint64_t redlock_renew_last_us(uint64_t valid_until_us, uint32_t ttl_ms);

/* redlock_renew_next_us: when the renewal after one that ended at now_us is
 * due: the earlier of ttl_ms / 3 (less up to 10% jitter, rand01 in [0,1),
 * so that locks taken together do not renew in the same tick) and half the
 * time left until give_up_us, so that a renewal has time to fail and be
 * tried again before the lock is given up (a large drift factor leaves
 * less validity than ttl / 3). now_us when give_up_us has passed. */
uint64_t redlock_renew_next_us(uint64_t now_us, uint64_t give_up_us,
                               uint32_t ttl_ms, double rand01);

/* redlock_renew_decide: what to do for lock s at now_us. A renewal that is
 * due is sent while the lock is valid, even after the give-up time (a timer
 * that fires late must not lose a lock that a renewal can still keep); one
 * in flight is waited for a node timeout after it was sent, never past the
 * last moment and never given up before the give-up time. A paused lock
 * is given up at the give-up time all the same. For RL_RENEW_WAIT, *wake_us is
 * when to look again; for RL_RENEW_SEND, when to give up on the renewal being
 * sent. */
enum redlock_renew_action
redlock_renew_decide(const struct redlock_renew_state *s, uint64_t now_us,
                     uint64_t *wake_us);

/* redlock_renew_early_us: how long before its due time a renewal may go out
 * with others that are due (one timer wake-up and one batch per node for
 * many locks, instead of one each): a 64th of ttl_ms, at most
 * REDLOCK_RENEW_EARLY_MAX_US. Early is always safe; the give-up is never
 * moved. */
#define REDLOCK_RENEW_EARLY_MAX_US 20000u
uint64_t redlock_renew_early_us(uint32_t ttl_ms);

/* ---- what a round's caller hears, and what cluster.c does next ---------
 *
 * cluster.c sends and receives; every choice between answers, rollbacks,
 * write-backs and deadlines is made here from the round's counts. */

/* The operations a round carries. */
enum redlock_op {
    RL_OP_ACQUIRE = 0, /* SET NX PX (or the acquire script) */
    RL_OP_EXTEND,      /* compare-and-pexpire */
    RL_OP_RELEASE,     /* compare-and-delete */
    RL_OP_COMPLETE,    /* compare-and-set to a done mark */
};

/* The answer the round's caller gets (cluster.c maps it to the wire's
 * error codes). */
enum redlock_answer {
    RL_ANSWER_NONE = 0,  /* nothing yet: undecided, or a fence write-back
                            goes first */
    RL_ANSWER_OK,        /* done as asked */
    RL_ANSWER_BUSY,      /* acquire: held by another token */
    RL_ANSWER_DONE,      /* acquire: the resource was completed */
    RL_ANSWER_NOT_HELD,  /* extend, release, complete: proved without the
                            token on enough nodes that no quorum holds it */
    RL_ANSWER_NO_QUORUM, /* too few answers to know, or too late */
};

/* What to do once a round is decided. */
struct redlock_verdict {
    enum redlock_answer answer;
    bool too_late;           /* NO_QUORUM although a quorum answered: the
                                validity had run out by then */
    bool send_fence;         /* acquire won with a fence: write fence back
                                to every node, and answer only from that
                                round (redlock_fence_verdict) */
    int64_t fence;           /* send_fence: the value to write back, the
                                largest counter the nodes that set the key
                                returned */
    uint32_t rollback;       /* nodes to compare-and-delete the key on, bit
                                i for node i; 0: none */
    int64_t validity_ms;     /* OK: the validity left */
    uint64_t valid_until_us; /* OK: the monotonic end of that validity */
};

/* redlock_op_sets_ttl: whether op sets a lock's TTL (acquire, extend).
 * Release and complete run their rounds with the largest TTL so that the
 * validity never ends them; that is not a TTL granted. */
bool redlock_op_sets_ttl(enum redlock_op op);

/* redlock_round_asks: whether op goes to a node while round r is being
 * sent. quarantined: the node restarted and sits out; it may have lost
 * keys it held, so it must not help an acquisition form a quorum (the
 * others still ask it). Once r is decided only release and complete go
 * on: a key they can delete would otherwise block the resource there
 * until its TTL, while an acquire would only create keys to roll back. */
bool redlock_round_asks(enum redlock_op op, const struct redlock_round *r,
                        bool quarantined);

/* redlock_round_deadline_ms: when, in ms after it was sent, a round of op
 * with ttl_ms can no longer be won because its validity has run out, if
 * that comes before the node timeout (node_timeout_ms), which ends a round
 * anyway; -1 when it does not, or op sets no TTL. 0: at once (a TTL too
 * short for any validity). */
int64_t redlock_round_deadline_ms(enum redlock_op op, uint32_t ttl_ms,
                                  double drift_factor, int node_timeout_ms);

/* redlock_round_expire: the round's deadline passed undecided: the nodes
 * still pending count as failed, one by one until the round is decided
 * (their answers, should they come, are recorded no more), and a round
 * decided that way is marked too_late. Returns the outcome. clock is
 * passed on to redlock_round_answer (a failure never reads it). */
enum redlock_outcome redlock_round_expire(struct redlock_round *r,
                                          redlock_clock_fn *clock);

/* redlock_acquire_verdict: what an acquisition does once its round r is
 * decided (*v all zero, answer NONE, while it is not). Won: answer OK with
 * the round's validity, or with fence send the write-back first. Lost:
 * busy, done or no_quorum (too_late when a quorum came too late), and roll
 * back every node that may hold the key (redlock_rollback_set). */
void redlock_acquire_verdict(const struct redlock_round *r, bool fence,
                             struct redlock_verdict *v);

/* redlock_other_verdict: what an extend, release or complete (op) answers
 * once its round r is decided (answer NONE while it is not). Won: OK with
 * the round's validity. Lost: NOT_HELD needs proof, more than n - quorum
 * nodes known to be without the token (that said not held; for release
 * and complete, also those that applied it); fewer is NO_QUORUM, as the
 * nodes that failed or were not asked may hold it still. A release that
 * deleted the key somewhere and leaves no quorum holding it is OK. Never
 * a rollback. */
void redlock_other_verdict(enum redlock_op op, const struct redlock_round *r,
                           struct redlock_verdict *v);

/* redlock_fence_start: starts fence, the round of the fence write-back
 * after acquisition acq was won: the same nodes, TTL and drift, and the
 * clock started when acq was sent, because the lock's validity runs from
 * then, not from the write-back. */
void redlock_fence_start(struct redlock_round *fence,
                         const struct redlock_round *acq);

/* redlock_fence_verdict: what the acquisition acq answers once its fence
 * write-back round fence is decided (answer NONE while it is not). OK when
 * a quorum raised the counter and validity is left, measured from acq's
 * start at the moment clock says (read only then); else NO_QUORUM, too_late
 * when a quorum answered too late, and every node rolled back (answers
 * that came after acq was won may have set the key anywhere). */
void redlock_fence_verdict(const struct redlock_round *acq,
                           const struct redlock_round *fence,
                           redlock_clock_fn *clock, struct redlock_verdict *v);

/* redlock_ask_holder_pttl: whether a node's answer res to an acquire sent
 * in form is followed by PTTL: the caller wants the holder's PTTL
 * (want_pttl), the answer was busy, the form's reply does not carry it
 * (only the script's does), and the round was not decided before this
 * answer (decided: a late answer, nobody waits for it). */
bool redlock_ask_holder_pttl(enum redlock_acquire_form form,
                             enum redlock_node_result res, bool want_pttl,
                             bool decided);

/* redlock_acquire_form_pick: the form of acquire a node gets: SET NX GET
 * where the server has it (server_version, as 70000 for 7.0.0, at least
 * 7.0), in MULTI with INCR when fence; the script on older servers, when
 * script_only (configured), and for a fenced acquire on a node that
 * refused MULTI/EXEC (multi_refused). */
enum redlock_acquire_form redlock_acquire_form_pick(bool script_only,
                                                    uint32_t server_version,
                                                    bool fence,
                                                    bool multi_refused);

/* redlock_form_refused: whether node's answer r (classified res) to an
 * acquire sent in form shows that the node refuses MULTI/EXEC (an ACL
 * without +multi +exec): then its later fenced acquires use the script.
 * A transaction the node aborted for what it queued (EXECABORT: OOM,
 * READONLY, MISCONF) or an error of the whole node (BUSY, LOADING) says
 * nothing of MULTI/EXEC, and the script would meet the same. */
bool redlock_form_refused(enum redlock_acquire_form form,
                          enum redlock_node_result res,
                          const struct redlock_reply *r);

/* redlock_all_nodes: bit i for each of n_nodes nodes (1..32). */
uint32_t redlock_all_nodes(int n_nodes);

/* redlock_classify_peek: one node's answer r to the inspect script,
 * {value, pttl, fence}: RL_PEEK_FREE (an empty value: no key), RL_PEEK_DONE
 * (a done mark), RL_PEEK_HELD (a holder's token: *value and *value_len
 * point at it, borrowed from r, for the caller to compare with its own),
 * and then *pttl and *fence set from the reply; RL_PEEK_FAILED for any
 * other shape, nothing set. No pointer may be NULL. */
enum redlock_peek redlock_classify_peek(const struct redlock_reply *r,
                                        int64_t *pttl, int64_t *fence,
                                        const char **value, size_t *value_len);

/* redlock_reply_error: the error a node's reply r carries, the reply
 * itself or, for a transaction's EXEC (an array of each command's reply),
 * the first of its elements that is one (a fenced acquire's INCR on a key
 * of the wrong type); NULL when there is none. Borrowed from r. */
const struct redlock_reply *redlock_reply_error(const struct redlock_reply *r);

/* redlock_wake_publishers: the nodes (a bit mask) whose release or complete
 * announces itself on the resource's wake-up channel: n - quorum + 1 of the
 * usable ones, taken in turn from node start % n on, so that any n - quorum
 * of them failing still leaves one to announce, and the PUBLISH work is
 * shared among the nodes. Every usable node when there are fewer. Every
 * waiting daemon listens on every node, so one announcement suffices; the
 * others would cost each node a PUBLISH per key for nothing. */
uint32_t redlock_wake_publishers(uint32_t usable, int n, int quorum,
                                 unsigned start);

/* redlock_renew_failed: what follows a renewal of s that failed at now_us;
 * not_held: a quorum answered that the lock is not held. RL_RENEW_GIVE_UP
 * when not held or past the give-up time; else RL_RENEW_WAIT, with
 * *retry_us when to try again: a quarter of the time left before the
 * give-up, so that several retries fit before it, but at most ttl / 30
 * (10 ms for a ttl under 300 ms) and at least 1 ms (or what is left), so
 * that nodes refusing at once do not draw a storm of retries. */
enum redlock_renew_action
redlock_renew_failed(const struct redlock_renew_state *s, bool not_held,
                     uint64_t now_us, uint64_t *retry_us);

/* redlock_extend_failed_until_us: a lock valid until valid_until_us was
 * extended to ttl_ms at start_us and the extend failed. It may have reached
 * some nodes, which then let the key go at start + ttl: the lock's validity
 * is bounded by start_us plus the validity of ttl_ms (drift_factor taken
 * off, no time spent), never above valid_until_us. */
uint64_t redlock_extend_failed_until_us(uint64_t valid_until_us,
                                        uint32_t ttl_ms, double drift_factor,
                                        uint64_t start_us);

/* redlock_given_up_until_us: until when the key of a lock given up at
 * now_us may still stand on a node, so that the daemon remembers it until
 * then (refuses its token, and finishes its release on each node that
 * missed it). ttl_ms: the longest ttl any command of the lock asked for.
 * A node that missed the release (down, dropped, paused) ran the lock's
 * commands it had by now_us at the latest, so its key lapses within one
 * ttl after that; the commands still waiting in its socket then run
 * together when it runs again, and one that finds the key there sets the
 * ttl once more: two ttls in all, each counted with the drift that the
 * validity takes off (ttl * drift_factor + 2 ms). */
uint64_t redlock_given_up_until_us(uint64_t now_us, uint32_t ttl_ms,
                                   double drift_factor);

/* redlock_handoff_delay_ms: when the next waiter in line tries after the
 * head's acquisition won. held: the head kept the lock (it may have given
 * it straight back: client gone, limit, shutdown); semaphore: it took one
 * slot of several. A mutex held by the head cannot be free before its
 * validity (validity_ms) ends, + 1 ms, unless its release wakes the queue
 * first; a semaphore may have more slots free, and a lock given back is
 * free: at once. Never past the waiter's wait_left_ms. */
uint64_t redlock_handoff_delay_ms(bool held, bool semaphore,
                                  int64_t validity_ms, uint64_t wait_left_ms);

/* ---- an acquire call's next step, once a round of it is answered --------
 *
 * ops.c carries the step out (a round, the table, the queue, the answer);
 * which step it is, and with which delay, is decided here. */

/* What one round of an acquire call came to. */
enum redlock_got {
    RL_GOT_OK = 0,    /* won: the key is set on a quorum */
    RL_GOT_BUSY,      /* held by another token */
    RL_GOT_DONE,      /* completed: its done mark has not expired */
    RL_GOT_NO_QUORUM, /* too few nodes answered in time, or too late */
    RL_GOT_OTHER,     /* any other failure: answered as the round said */
};

/* A semaphore call's walk over its slots in one attempt: each slot busy or
 * done sends it to the next, until one is won or all were tried. */
struct redlock_sem_walk {
    unsigned tried; /* slots tried this attempt; 0: the walk starts */
    unsigned done;  /* of them, completed (kept for the answer's message) */
    int64_t pttl;   /* the PTTL to back off on over them, -1 unknown */
};

/* An acquire call's round, and what the call asked for. */
struct redlock_acquire_in {
    enum redlock_got got; /* the round's result */
    int64_t pttl_min;     /* busy, done: the round's shortest holder PTTL,
                             -1 unknown */
    unsigned permits;     /* a semaphore's permits; 0 for a lock */
    bool fence;           /* the call asked for a fence */
    bool renew;           /* the call asked to be renewed */
    bool session;         /* a session (NDJSON connection) would hold it */
    bool stop;            /* its client left or the daemon stops: no new
                             round, no wait, nobody to hold a lock won */
    bool waiting;         /* its wait_ms has not run out */
};

/* What the call does next. */
enum redlock_acquire_action {
    RL_ACQ_ANSWER = 0, /* answer step.answer: the call is over */
    RL_ACQ_WON,        /* take the lock into the table and answer ok */
    RL_ACQ_GIVE_BACK,  /* won, but nobody will hold it: release it */
    RL_ACQ_NEXT_SLOT,  /* semaphore: try its next slot now */
    RL_ACQ_WAIT,       /* wait in the queue (redlock_wait_delay), answering
                          step.answer once the wait is over */
};

struct redlock_acquire_step {
    enum redlock_acquire_action action;
    enum redlock_got answer; /* ANSWER, WAIT: the result to answer */
    int64_t pttl_min;        /* WAIT: the holder PTTL to back off on */
    bool fence;              /* WON: the table and the answer carry the
                                round's fence */
    bool renew;              /* WON: the daemon renews it for its session */
};

/* redlock_acquire_decide: the step after a round of an acquire call (in),
 * and the semaphore's walk (w) brought up to date. A semaphore slot busy
 * or done goes on to the next slot (unless in->stop) until every permit
 * was tried; then the semaphore is done only when every slot was, else
 * busy, and backs off on the slot that frees first. A won round is taken
 * even after the wait ran out (it started within it), and given back when
 * in->stop. Busy and no_quorum wait while in->waiting and not in->stop;
 * done and other failures are answered at once. w->tried is 0 again after
 * every step but RL_ACQ_NEXT_SLOT. No pointer may be NULL. */
void redlock_acquire_decide(const struct redlock_acquire_in *in,
                            struct redlock_sem_walk *w,
                            struct redlock_acquire_step *step);

/* A call that waits (RL_ACQ_WAIT), once in its queue. polls and rand01 are
 * read only for a head that was not woken (its back-off). */
struct redlock_wait_in {
    bool head;             /* first in its queue: only the head tries */
    bool woken;            /* a release was announced during its round */
    bool polls;            /* no announcement may come (a subscription
                              just made, or no node can announce): the
                              holder's PTTL is not waited for */
    unsigned attempt;      /* rounds tried so far */
    int64_t pttl_min;      /* step.pttl_min */
    uint64_t wait_left_ms; /* what is left of its wait_ms */
    double rand01;         /* in [0, 1), the back-off's jitter */
};

/* redlock_wait_delay: when a waiting call's timer fires. A call behind the
 * head waits for its turn at most until its wait runs out (*delay_ms = the
 * wait left; when it fires, the wait is over). The head tries again at
 * once when woken, else after the back-off, no sooner than the holder's
 * PTTL unless it polls (redlock_retry_delay_ms). Returns false when the
 * head's wait is over (answer step.answer), true when *delay_ms is set. */
bool redlock_wait_delay(const struct redlock_wait_in *in, uint64_t *delay_ms);

#endif
