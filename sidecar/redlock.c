/* redlock.c: the Redlock decisions, kept free of I/O so they can be tested
 * with plain numbers.
 *
 * An acquisition, as cluster.c drives it:
 *
 *   t0 = now ---- SET NX PX ----> node 0..N-1   (all at once, one round)
 *        <------- ok / busy / done / failed -----
 *   each answer -> redlock_round_answer():
 *     ok >= quorum             -> validity = ttl - (now-t0) - (ttl*drift+2)
 *                                 > 0 ? WON : LOST_NOQUORUM
 *                                 (a done mark seen first: see
 *                                 redlock_free_quorum)
 *     ok + pending < quorum    -> LOST_{DONE,BUSY,NOQUORUM}  (certain now;
 *                                 done needs marks on > n - quorum nodes)
 *   LOST: rollback every node that got the SET and did not say busy/done,
 *         including nodes still pending (the delete queues behind the SET).
 *   decided -> redlock_acquire_verdict(): the answer, the rollback set, or
 *         the fence write-back first (its own round: redlock_fence_verdict)
 *   no decision by the validity's end -> redlock_round_expire()
 *   the acquire call (ops.c) -> redlock_acquire_decide(): won, the next
 *         semaphore slot, wait (redlock_wait_delay) or answer
 */
#include "redlock.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

int redlock_quorum(int n_nodes)
{
    return n_nodes / 2 + 1;
}

int64_t redlock_validity_ms(uint32_t ttl_ms, double drift_factor,
                            uint64_t elapsed_us)
{
    /* Drift is rounded up so that fractions of a millisecond never add to
     * the validity; elapsed is rounded up for the same reason. */
    int64_t drift_ms = (int64_t)ceil((double)ttl_ms * drift_factor) + 2;
    int64_t elapsed_ms = (int64_t)((elapsed_us + 999) / 1000);
    return (int64_t)ttl_ms - elapsed_ms - drift_ms;
}

/* Whether the done marks seen prove the resource done: on more than
 * n - quorum nodes, so no acquisition can win until they expire. Fewer may
 * be a complete that reached only a minority while its lock still stands
 * (busy: waiters wait on) or was released since. */
static bool round_done_proved(const struct redlock_round *r)
{
    return r->n_done > r->n_nodes - r->quorum;
}

/* The failure code once success is impossible. Busy needs evidence that the
 * resource is held and that enough nodes were reachable for the attempt to
 * have been meaningful; otherwise the honest answer is no_quorum. */
static enum redlock_outcome round_loss(const struct redlock_round *r)
{
    if (round_done_proved(r)) {
        return RL_LOST_DONE;
    }
    int held = r->n_busy + r->n_done;
    int reachable = r->n_ok + held + r->n_pending;
    if (held > 0 && reachable >= r->quorum) {
        return RL_LOST_BUSY;
    }
    return RL_LOST_NOQUORUM;
}

/* Decides once the answers so far make the outcome certain. clock is read
 * only on reaching a quorum; redlock_round_start passes NULL, which is safe
 * because no answer has been recorded then (n_ok is 0, quorum at least 1). */
static enum redlock_outcome round_decide(struct redlock_round *r,
                                         redlock_clock_fn *clock)
{
    if (r->outcome != RL_UNDECIDED) {
        return r->outcome;
    }
    if (r->n_ok >= r->quorum) {
        enum redlock_free_verdict fv =
            redlock_free_quorum(r->n_nodes, r->n_done, r->n_pending);
        if (fv == RL_FREE_WAIT) {
            return RL_UNDECIDED;
        }
        if (fv == RL_FREE_DONE) {
            r->outcome = RL_LOST_DONE;
            return r->outcome;
        }
        uint64_t now_us = clock();
        int64_t v = redlock_validity_ms(r->ttl_ms, r->drift_factor,
                                        now_us - r->start_us);
        if (v > 0) {
            r->validity_ms = v;
            r->decided_us = now_us;
            r->outcome = RL_WON;
        } else {
            r->outcome = RL_LOST_NOQUORUM;
            r->too_late = true;
        }
    } else if (r->n_ok + r->n_pending < r->quorum) {
        if (r->n_done > 0 && !round_done_proved(r) &&
            r->n_done + r->n_pending > r->n_nodes - r->quorum) {
            /* Lost for sure, but done or busy: the answers still due
             * tell (within the node timeout). */
            return RL_UNDECIDED;
        }
        r->outcome = round_loss(r);
    }
    return r->outcome;
}

void redlock_round_start(struct redlock_round *r, int n_nodes, uint32_t ttl_ms,
                         double drift_factor, uint64_t now_us, uint32_t skipped)
{
    r->n_nodes = n_nodes;
    r->quorum = redlock_quorum(n_nodes);
    r->start_us = now_us;
    r->ttl_ms = ttl_ms;
    r->drift_factor = drift_factor;
    r->n_ok = r->n_busy = r->n_done = r->n_failed = r->n_pending = 0;
    r->fence_max = 0;
    r->pttl_min = -1;
    r->outcome = RL_UNDECIDED;
    r->validity_ms = 0;
    r->decided_us = 0;
    r->too_late = false;
    for (int i = 0; i < n_nodes; i++) {
        if (skipped & (1u << i)) {
            r->result[i] = RL_SKIPPED;
            r->n_failed++;
        } else {
            r->result[i] = RL_PENDING;
            r->n_pending++;
        }
    }
    (void)round_decide(r, NULL);
}

enum redlock_outcome redlock_round_answer(struct redlock_round *r, int node,
                                          enum redlock_node_result res,
                                          int64_t fence, int64_t pttl,
                                          redlock_clock_fn *clock)
{
    if (node >= 0 && node < r->n_nodes && r->result[node] == RL_PENDING &&
        res != RL_PENDING) {
        r->result[node] = res;
        r->n_pending--;
        switch (res) {
        case RL_OK:
            r->n_ok++;
            if (fence > r->fence_max) {
                r->fence_max = fence;
            }
            break;
        case RL_BUSY:
            r->n_busy++;
            if (pttl >= 0 && (r->pttl_min < 0 || pttl < r->pttl_min)) {
                r->pttl_min = pttl;
            }
            break;
        case RL_DONE:
            r->n_done++;
            break;
        case RL_FAILED:
        case RL_SKIPPED:
        case RL_PENDING:
            r->n_failed++;
            break;
        }
    }
    return round_decide(r, clock);
}

enum redlock_outcome redlock_round_outcome(const struct redlock_round *r)
{
    return r->outcome;
}

uint32_t redlock_rollback_set(const struct redlock_round *r)
{
    uint32_t set = 0;
    for (int i = 0; i < r->n_nodes; i++) {
        enum redlock_node_result res = r->result[i];
        if (res == RL_OK || res == RL_PENDING || res == RL_FAILED) {
            set |= 1u << i;
        }
    }
    return set;
}

uint32_t redlock_ok_set(const struct redlock_round *r)
{
    uint32_t set = 0;
    for (int i = 0; i < r->n_nodes; i++) {
        if (r->result[i] == RL_OK) {
            set |= 1u << i;
        }
    }
    return set;
}

uint32_t redlock_backoff_ms(unsigned attempt, uint32_t base_ms, uint32_t cap_ms,
                            double rand01)
{
    uint64_t ceiling = base_ms;
    for (unsigned i = 0; i < attempt && ceiling < cap_ms; i++) {
        ceiling *= 2;
    }
    if (ceiling > cap_ms) {
        ceiling = cap_ms;
    }
    if (rand01 < 0) {
        rand01 = 0;
    } else if (rand01 >= 1) {
        rand01 = 0.999999;
    }
    /* Half fixed, half jitter: spreads contenders without ever retrying
     * immediately. */
    uint64_t half = ceiling / 2;
    uint64_t v = half + (uint64_t)((double)(ceiling - half) * rand01);
    return v == 0 ? 1 : (uint32_t)v;
}

#define RETRY_BASE_MS 5
#define RETRY_CAP_MS 500

uint32_t redlock_retry_delay_ms(unsigned attempt, int64_t pttl_min,
                                uint64_t wait_left_ms, double rand01)
{
    if (wait_left_ms == 0) {
        return 0;
    }
    uint64_t d =
        redlock_backoff_ms(attempt, RETRY_BASE_MS, RETRY_CAP_MS, rand01);
    /* The holder's key cannot expire before its PTTL; an early release is
     * announced (pub/sub), so polling sooner buys nothing. */
    if (pttl_min >= 0 && (uint64_t)pttl_min + 1 > d) {
        d = (uint64_t)pttl_min + 1;
    }
    if (d > wait_left_ms) {
        d = wait_left_ms;
    }
    return (uint32_t)d;
}

int64_t redlock_sem_pttl_min(int64_t acc, int64_t slot_pttl)
{
    if (acc < 0 || slot_pttl < 0) {
        return -1;
    }
    return slot_pttl < acc ? slot_pttl : acc;
}

void redlock_inspect_decide(int n_nodes, const enum redlock_peek *peek,
                            const int64_t *pttl, struct redlock_inspect *out)
{
    int count[4] = {0, 0, 0, 0};
    int64_t pmin[4] = {-1, -1, -1, -1};
    for (int i = 0; i < n_nodes; i++) {
        enum redlock_peek p = peek[i];
        if (p < RL_PEEK_FAILED || p > RL_PEEK_DONE) {
            p = RL_PEEK_FAILED;
        }
        count[p]++;
        if ((p == RL_PEEK_HELD || p == RL_PEEK_DONE) && pttl[i] >= 0 &&
            (pmin[p] < 0 || pttl[i] < pmin[p])) {
            pmin[p] = pttl[i];
        }
    }
    /* In order of preference on a tie: done, held, free. */
    static const enum redlock_peek order[3] = {RL_PEEK_DONE, RL_PEEK_HELD,
                                               RL_PEEK_FREE};
    static const enum redlock_state as_state[4] = {
        [RL_PEEK_FREE] = RL_STATE_FREE,
        [RL_PEEK_HELD] = RL_STATE_HELD,
        [RL_PEEK_DONE] = RL_STATE_DONE,
    };
    int need = n_nodes - redlock_quorum(n_nodes) + 1;
    out->state = RL_STATE_NO_QUORUM;
    out->agree = 0;
    out->pttl_min = -1;
    for (int k = 0; k < 3; k++) {
        enum redlock_peek p = order[k];
        if (count[p] > out->agree) {
            out->agree = count[p];
            out->state = count[p] >= need ? as_state[p] : RL_STATE_NO_QUORUM;
            out->pttl_min = out->state != RL_STATE_NO_QUORUM ? pmin[p] : -1;
        }
    }
}

int64_t redlock_fence_floor(int n_nodes, const int64_t *counter)
{
    if (n_nodes <= 0 || n_nodes > REDLOCK_MAX_NODES) {
        return 0;
    }
    int64_t v[REDLOCK_MAX_NODES];
    for (int i = 0; i < n_nodes; i++) {
        v[i] = counter[i] > 0 ? counter[i] : 0;
    }
    /* Insertion sort: at most REDLOCK_MAX_NODES values. */
    for (int i = 1; i < n_nodes; i++) {
        int64_t x = v[i];
        int j = i;
        for (; j > 0 && v[j - 1] > x; j--) {
            v[j] = v[j - 1];
        }
        v[j] = x;
    }
    return v[redlock_quorum(n_nodes) - 1];
}

void redlock_round_holder_pttl(struct redlock_round *r, int64_t pttl)
{
    if (pttl >= 0 && (r->pttl_min < 0 || pttl < r->pttl_min)) {
        r->pttl_min = pttl;
    }
}

/* The value a SET ... GET found: a done mark, or another holder's token. */
static enum redlock_node_result classify_old_value(const struct redlock_reply *v)
{
    if (v->kind == RLR_NIL) {
        return RL_OK;
    }
    if (v->kind != RLR_STRING) {
        return RL_FAILED;
    }
    return v->len >= 5 && memcmp(v->str, "done:", 5) == 0 ? RL_DONE : RL_BUSY;
}

enum redlock_node_result redlock_classify_acquire(enum redlock_acquire_form form,
                                                  const struct redlock_reply *r,
                                                  int64_t *fence, int64_t *pttl)
{
    switch (form) {
    case RL_FORM_SCRIPT:
        if (r->kind != RLR_ARRAY || r->n_elem != 2 ||
            r->elem[0].kind != RLR_INTEGER || r->elem[1].kind != RLR_INTEGER) {
            return RL_FAILED;
        }
        switch (r->elem[0].integer) {
        case 1:
            *fence = r->elem[1].integer;
            return RL_OK;
        case 0:
            *pttl = r->elem[1].integer;
            return RL_BUSY;
        case 2:
            *pttl = r->elem[1].integer;
            return RL_DONE;
        default:
            return RL_FAILED;
        }
    case RL_FORM_SET_GET:
        return classify_old_value(r);
    case RL_FORM_SET_NX:
        if (r->kind == RLR_NIL) {
            return RL_BUSY;
        }
        return r->kind == RLR_STRING && r->len == 2 &&
                       memcmp(r->str, "OK", 2) == 0
                   ? RL_OK
                   : RL_FAILED;
    case RL_FORM_SET_GET_INCR: {
        /* EXEC answers nil when the transaction was aborted (WATCH: never
         * used here) and an error when it could not run at all. */
        if (r->kind != RLR_ARRAY || r->n_elem != 2 ||
            r->elem[1].kind != RLR_INTEGER) {
            return RL_FAILED;
        }
        enum redlock_node_result res = classify_old_value(&r->elem[0]);
        if (res == RL_OK) {
            *fence = r->elem[1].integer;
        }
        return res;
    }
    }
    return RL_FAILED;
}

enum redlock_node_result redlock_classify_flag(const struct redlock_reply *r)
{
    if (r->kind != RLR_INTEGER) {
        return RL_FAILED;
    }
    return r->integer == 1 ? RL_OK : r->integer == 0 ? RL_BUSY : RL_FAILED;
}

enum redlock_free_verdict redlock_free_quorum(int n_nodes, int n_done,
                                              int n_pending)
{
    if (n_done <= 0) {
        return RL_FREE_GRANT;
    }
    int q = redlock_quorum(n_nodes);
    int enough = q - 1 > 1 ? q - 1 : 1;
    if (n_done >= enough) {
        return RL_FREE_DONE;
    }
    if (n_done + n_pending >= enough) {
        return RL_FREE_WAIT;
    }
    return RL_FREE_GRANT;
}

static int bits_set(uint32_t v)
{
    int n = 0;
    while (v != 0) {
        v &= v - 1u;
        n++;
    }
    return n;
}

enum redlock_repair_plan redlock_repair_plan(int n_nodes, int target,
                                             uint32_t lost, uint32_t up,
                                             uint32_t unmarked, uint32_t *read,
                                             int *need)
{
    uint32_t all = n_nodes >= 32 ? UINT32_MAX : (1u << n_nodes) - 1u;
    uint32_t others = all & ~(1u << target);
    uint32_t sound = others & ~lost;
    int want = n_nodes - redlock_quorum(n_nodes) + 1;
    *read = 0;
    *need = 0;
    if (bits_set(sound) >= want) {
        /* Down is not lost: a sound node that is down now still holds
         * what the read must see. Nor is unmarked, but what it answers
         * may come from an emptied data set: it is not read. */
        uint32_t readable = sound & up & ~unmarked;
        if (bits_set(readable) < want) {
            return RL_REPAIR_WAIT;
        }
        *read = readable;
        *need = want;
        return RL_REPAIR_SOUND;
    }
    if (others != 0 && (others & up) == 0) {
        return RL_REPAIR_WAIT;
    }
    *read = others & up;
    *need = bits_set(*read);
    return RL_REPAIR_BEST_EFFORT;
}

/* Whether grant a stands at least as long, and is at least as long, as a
 * grant of ttl_ms standing until until_us: then the latter adds nothing. */
static bool grant_covers(const struct redlock_grant *a, uint32_t ttl_ms,
                         uint64_t until_us)
{
    return a->ttl_ms >= ttl_ms && a->until_us >= until_us;
}

void redlock_grants_add(struct redlock_grants *gs, uint32_t ttl_ms,
                        uint64_t sent_us, uint64_t now_us)
{
    uint64_t until = sent_us + (uint64_t)ttl_ms * 1000u;
    if (until <= now_us) {
        return;
    }
    /* Drop what has expired and what the new grant covers. */
    bool covered = false;
    int k = 0;
    for (int i = 0; i < gs->n; i++) {
        struct redlock_grant e = gs->g[i];
        if (e.until_us <= now_us ||
            (e.ttl_ms <= ttl_ms && e.until_us <= until)) {
            continue;
        }
        covered = covered || grant_covers(&e, ttl_ms, until);
        gs->g[k++] = e;
    }
    gs->n = k;
    if (covered) {
        return;
    }
    if (gs->n == REDLOCK_GRANTS_MAX) {
        /* Full: merge the two shortest TTLs into one as long as the
         * longer and standing as late as the later. */
        int a = 0, b = 1;
        if (gs->g[b].ttl_ms < gs->g[a].ttl_ms) {
            a = 1;
            b = 0;
        }
        for (int i = 2; i < gs->n; i++) {
            if (gs->g[i].ttl_ms < gs->g[a].ttl_ms) {
                b = a;
                a = i;
            } else if (gs->g[i].ttl_ms < gs->g[b].ttl_ms) {
                b = i;
            }
        }
        struct redlock_grant *m = &gs->g[a];
        m->ttl_ms = gs->g[b].ttl_ms;
        if (gs->g[b].until_us > m->until_us) {
            m->until_us = gs->g[b].until_us;
        }
        gs->g[b] = gs->g[gs->n - 1];
        gs->n--;
        if (a == gs->n) {
            m = &gs->g[b]; /* it was the last one: moved */
        }
        if (grant_covers(m, ttl_ms, until)) {
            return;
        }
        if (ttl_ms >= m->ttl_ms && until >= m->until_us) {
            m->ttl_ms = ttl_ms;
            m->until_us = until;
            return;
        }
    }
    gs->g[gs->n].ttl_ms = ttl_ms;
    gs->g[gs->n].until_us = until;
    gs->n++;
}

uint32_t redlock_grants_max_ttl(const struct redlock_grants *gs,
                                uint64_t now_us)
{
    uint32_t max = 0;
    for (int i = 0; i < gs->n; i++) {
        if (gs->g[i].until_us > now_us && gs->g[i].ttl_ms > max) {
            max = gs->g[i].ttl_ms;
        }
    }
    return max;
}

uint32_t redlock_quarantine_ms(const struct redlock_grants *gs, uint64_t now_us,
                               uint32_t fixed_ms, uint32_t floor_ms)
{
    if (fixed_ms > 0) {
        return fixed_ms;
    }
    uint32_t q = redlock_grants_max_ttl(gs, now_us);
    return q > floor_ms ? q : floor_ms;
}

/* ---- renewal ----------------------------------------------------------- */

/* The lost event's own delivery: a write to a local socket and the owner's
 * reading of it. */
#define RENEW_EVENT_MARGIN_US 20000u

static uint64_t sub_floor(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

uint64_t redlock_renew_give_up_us(uint64_t valid_until_us, uint32_t ttl_ms,
                                  uint32_t node_timeout_ms)
{
    uint64_t guard = (uint64_t)node_timeout_ms * 1000u + RENEW_EVENT_MARGIN_US;
    uint64_t quarter = (uint64_t)ttl_ms * 1000u / 4u;
    return sub_floor(valid_until_us, guard < quarter ? guard : quarter);
}

uint64_t redlock_renew_last_us(uint64_t valid_until_us, uint32_t ttl_ms)
{
    uint64_t tenth = (uint64_t)ttl_ms * 1000u / 10u;
    uint64_t margin =
        RENEW_EVENT_MARGIN_US < tenth ? RENEW_EVENT_MARGIN_US : tenth;
    return sub_floor(valid_until_us, margin);
}

uint64_t redlock_renew_next_us(uint64_t now_us, uint64_t give_up_us,
                               uint32_t ttl_ms, double rand01)
{
    if (rand01 < 0) {
        rand01 = 0;
    } else if (rand01 >= 1) {
        rand01 = 0.999999;
    }
    uint64_t period = (uint64_t)ttl_ms * 1000u / 3u;
    period -= (uint64_t)((double)(period / 10u) * rand01);
    uint64_t half = sub_floor(give_up_us, now_us) / 2u;
    return now_us + (period < half ? period : half);
}

enum redlock_renew_action
redlock_renew_decide(const struct redlock_renew_state *s, uint64_t now_us,
                     uint64_t *wake_us)
{
    uint64_t give_up = redlock_renew_give_up_us(s->valid_until_us, s->ttl_ms,
                                                s->node_timeout_ms);
    /* give_up <= last: the guard is never below the event's margin. */
    uint64_t last = redlock_renew_last_us(s->valid_until_us, s->ttl_ms);
    if (s->sent_us != 0) {
        /* A renewal answers within a node timeout: it is waited for that
         * long, but never past the last moment; one sent on time has
         * answered by the give-up time. */
        uint64_t deadline = s->sent_us + (uint64_t)s->node_timeout_ms * 1000u;
        if (deadline > last) {
            deadline = last;
        }
        if (deadline < give_up) {
            deadline = give_up;
        }
        if (now_us >= deadline) {
            return RL_RENEW_GIVE_UP;
        }
        *wake_us = deadline;
        return RL_RENEW_WAIT;
    }
    if (s->paused) {
        if (now_us >= give_up) {
            return RL_RENEW_GIVE_UP;
        }
        *wake_us = give_up;
        return RL_RENEW_WAIT;
    }
    if (now_us >= last) {
        return RL_RENEW_GIVE_UP;
    }
    if (now_us >= s->next_renew_us) {
        struct redlock_renew_state sent = *s;
        sent.sent_us = now_us;
        return redlock_renew_decide(&sent, now_us, wake_us) == RL_RENEW_WAIT
                   ? RL_RENEW_SEND
                   : RL_RENEW_GIVE_UP;
    }
    *wake_us = s->next_renew_us < last ? s->next_renew_us : last;
    return RL_RENEW_WAIT;
}

uint64_t redlock_renew_early_us(uint32_t ttl_ms)
{
    uint64_t early = (uint64_t)ttl_ms * 1000u / 64u;
    return early < REDLOCK_RENEW_EARLY_MAX_US ? early
                                              : REDLOCK_RENEW_EARLY_MAX_US;
}

/* ---- verdicts ----------------------------------------------------------- */

bool redlock_op_sets_ttl(enum redlock_op op)
{
    return op == RL_OP_ACQUIRE || op == RL_OP_EXTEND;
}

bool redlock_round_asks(enum redlock_op op, const struct redlock_round *r,
                        bool quarantined)
{
    if (op == RL_OP_ACQUIRE && quarantined) {
        return false;
    }
    return r->outcome == RL_UNDECIDED || op == RL_OP_RELEASE ||
           op == RL_OP_COMPLETE;
}

int64_t redlock_round_deadline_ms(enum redlock_op op, uint32_t ttl_ms,
                                  double drift_factor, int node_timeout_ms)
{
    if (!redlock_op_sets_ttl(op)) {
        return -1;
    }
    int64_t v = redlock_validity_ms(ttl_ms, drift_factor, 0);
    if (v >= node_timeout_ms) {
        return -1;
    }
    return v > 0 ? v : 0;
}

enum redlock_outcome redlock_round_expire(struct redlock_round *r,
                                          redlock_clock_fn *clock)
{
    enum redlock_outcome out = r->outcome;
    for (int i = 0; i < r->n_nodes && out == RL_UNDECIDED; i++) {
        if (r->result[i] == RL_PENDING) {
            out = redlock_round_answer(r, i, RL_FAILED, 0, -1, clock);
            if (out != RL_UNDECIDED) {
                r->too_late = true;
            }
        }
    }
    return out;
}

/* The validity a won round r measured, as a verdict's OK. */
static void verdict_valid(struct redlock_verdict *v,
                          const struct redlock_round *r)
{
    v->answer = RL_ANSWER_OK;
    v->validity_ms = r->validity_ms;
    v->valid_until_us = r->decided_us + (uint64_t)r->validity_ms * 1000u;
}

void redlock_acquire_verdict(const struct redlock_round *r, bool fence,
                             struct redlock_verdict *v)
{
    memset(v, 0, sizeof(*v));
    switch (r->outcome) {
    case RL_UNDECIDED:
        return;
    case RL_WON:
        if (fence) {
            v->send_fence = true;
            v->fence = r->fence_max;
        } else {
            verdict_valid(v, r);
        }
        return;
    case RL_LOST_BUSY:
        v->answer = RL_ANSWER_BUSY;
        break;
    case RL_LOST_DONE:
        v->answer = RL_ANSWER_DONE;
        break;
    case RL_LOST_NOQUORUM:
        v->answer = RL_ANSWER_NO_QUORUM;
        v->too_late = r->too_late;
        break;
    }
    v->rollback = redlock_rollback_set(r);
}

/* Whether r's answers prove that no quorum can still hold the token: more
 * than n - quorum nodes are known to be without it. */
static bool round_proves_gone(enum redlock_op op, const struct redlock_round *r)
{
    int without = r->n_busy;
    if (op == RL_OP_RELEASE || op == RL_OP_COMPLETE) {
        without += r->n_ok; /* applied: the token is gone there too */
    }
    return without > r->n_nodes - r->quorum;
}

void redlock_other_verdict(enum redlock_op op, const struct redlock_round *r,
                           struct redlock_verdict *v)
{
    memset(v, 0, sizeof(*v));
    if (r->outcome == RL_UNDECIDED) {
        return;
    }
    if (r->outcome == RL_WON) {
        verdict_valid(v, r);
    } else if (!round_proves_gone(op, r)) {
        /* The lock may still stand on a quorum (its validity, for a
         * renewal, stands too) and a retry may succeed. */
        v->answer = RL_ANSWER_NO_QUORUM;
        v->too_late = r->too_late;
    } else if (op == RL_OP_RELEASE && r->n_ok > 0) {
        /* Deleted where it still was, and no quorum holds it now: what
         * the caller asked. */
        v->answer = RL_ANSWER_OK;
    } else {
        v->answer = RL_ANSWER_NOT_HELD;
    }
}

void redlock_fence_start(struct redlock_round *fence,
                         const struct redlock_round *acq)
{
    redlock_round_start(fence, acq->n_nodes, acq->ttl_ms, acq->drift_factor,
                        acq->start_us, 0);
}

void redlock_fence_verdict(const struct redlock_round *acq,
                           const struct redlock_round *fence,
                           redlock_clock_fn *clock, struct redlock_verdict *v)
{
    memset(v, 0, sizeof(*v));
    if (fence->outcome == RL_UNDECIDED) {
        return;
    }
    if (fence->outcome == RL_WON) {
        uint64_t now = clock();
        int64_t left = redlock_validity_ms(acq->ttl_ms, acq->drift_factor,
                                           now - acq->start_us);
        if (left > 0) {
            v->answer = RL_ANSWER_OK;
            v->validity_ms = left;
            v->valid_until_us = now + (uint64_t)left * 1000u;
            return;
        }
    }
    v->answer = RL_ANSWER_NO_QUORUM;
    v->too_late = fence->outcome == RL_WON || fence->too_late;
    v->rollback = redlock_all_nodes(acq->n_nodes);
}

bool redlock_ask_holder_pttl(enum redlock_acquire_form form,
                             enum redlock_node_result res, bool want_pttl,
                             bool decided)
{
    return want_pttl && res == RL_BUSY && !decided && form != RL_FORM_SCRIPT;
}

enum redlock_acquire_form redlock_acquire_form_pick(bool script_only,
                                                    uint32_t server_version,
                                                    bool fence,
                                                    bool multi_refused)
{
    if (script_only || server_version < 70000) {
        return RL_FORM_SCRIPT;
    }
    if (!fence) {
        return RL_FORM_SET_GET;
    }
    return multi_refused ? RL_FORM_SCRIPT : RL_FORM_SET_GET_INCR;
}

/* Whether text[0..len) contains needle. */
static bool reply_has(const char *text, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t k = 0; k + n <= len; k++) {
        if (memcmp(text + k, needle, n) == 0) {
            return true;
        }
    }
    return false;
}

bool redlock_form_refused(enum redlock_acquire_form form,
                          enum redlock_node_result res,
                          const struct redlock_reply *r)
{
    if (form != RL_FORM_SET_GET_INCR || res != RL_FAILED || r == NULL ||
        r->kind != RLR_ERROR) {
        return false;
    }
    /* EXEC's answer (the last): "ERR EXEC without MULTI" when MULTI was
     * refused (the SET then ran alone; the node is rolled back like any
     * failure), and an ACL's NOPERM for the 'exec' or 'multi' command,
     * bare or as "EXECABORT ... because of: NOPERM ...". */
    return reply_has(r->str, r->len, "EXEC without MULTI") ||
           (reply_has(r->str, r->len, "NOPERM") &&
            (reply_has(r->str, r->len, "'exec'") ||
             reply_has(r->str, r->len, "'multi'")));
}

const struct redlock_reply *redlock_reply_error(const struct redlock_reply *r)
{
    if (r == NULL) {
        return NULL;
    }
    if (r->kind == RLR_ERROR) {
        return r;
    }
    if (r->kind == RLR_ARRAY) {
        for (size_t k = 0; k < r->n_elem; k++) {
            if (r->elem[k].kind == RLR_ERROR) {
                return &r->elem[k];
            }
        }
    }
    return NULL;
}

uint32_t redlock_all_nodes(int n_nodes)
{
    return n_nodes >= 32 ? UINT32_MAX : (1u << n_nodes) - 1u;
}

enum redlock_peek redlock_classify_peek(const struct redlock_reply *r,
                                        int64_t *pttl, int64_t *fence,
                                        const char **value, size_t *value_len)
{
    if (r->kind != RLR_ARRAY || r->n_elem != 3 ||
        r->elem[0].kind != RLR_STRING || r->elem[1].kind != RLR_INTEGER ||
        r->elem[2].kind != RLR_INTEGER) {
        return RL_PEEK_FAILED;
    }
    const struct redlock_reply *v = &r->elem[0];
    *pttl = r->elem[1].integer;
    *fence = r->elem[2].integer;
    if (v->len == 0) {
        return RL_PEEK_FREE;
    }
    /* "done:" and the completing token; a bare "done:" is no mark. */
    if (v->len > 5 && memcmp(v->str, "done:", 5) == 0) {
        return RL_PEEK_DONE;
    }
    *value = v->str;
    *value_len = v->len;
    return RL_PEEK_HELD;
}

uint32_t redlock_wake_publishers(uint32_t usable, int n, int quorum,
                                 unsigned start)
{
    if (n <= 0 || n > REDLOCK_MAX_NODES) {
        return 0;
    }
    int want = n - quorum + 1;
    uint32_t out = 0;
    for (int k = 0; k < n && want > 0; k++) {
        int i = (int)((start + (unsigned)k) % (unsigned)n);
        if (usable & (1u << i)) {
            out |= 1u << i;
            want--;
        }
    }
    return out;
}

/* A failed renewal is tried again after a quarter of the time left before
 * the give-up, but at most a thirtieth of the ttl later (and never less
 * than RENEW_RETRY_CAP_MIN_US on): nodes that refuse at once (MISCONF,
 * READONLY, BUSY) must not draw a retry every 10 ms from every lock, a
 * storm on the sound nodes too. Never sooner than RENEW_RETRY_MIN_US
 * either, so that the last stretch is not a burst. */
#define RENEW_RETRY_CAP_MIN_US 10000u
#define RENEW_RETRY_MIN_US 1000u

enum redlock_renew_action
redlock_renew_failed(const struct redlock_renew_state *s, bool not_held,
                     uint64_t now_us, uint64_t *retry_us)
{
    uint64_t give_up = redlock_renew_give_up_us(s->valid_until_us, s->ttl_ms,
                                                s->node_timeout_ms);
    if (not_held || now_us >= give_up) {
        return RL_RENEW_GIVE_UP;
    }
    uint64_t left = give_up - now_us;
    uint64_t cap = (uint64_t)s->ttl_ms * 1000u / 30u;
    if (cap < RENEW_RETRY_CAP_MIN_US) {
        cap = RENEW_RETRY_CAP_MIN_US;
    }
    uint64_t again = left / 4u < cap ? left / 4u : cap;
    if (again < RENEW_RETRY_MIN_US) {
        again = left < RENEW_RETRY_MIN_US ? left : RENEW_RETRY_MIN_US;
    }
    *retry_us = now_us + again;
    return RL_RENEW_WAIT;
}

uint64_t redlock_extend_failed_until_us(uint64_t valid_until_us,
                                        uint32_t ttl_ms, double drift_factor,
                                        uint64_t start_us)
{
    int64_t v = redlock_validity_ms(ttl_ms, drift_factor, 0);
    uint64_t bound = start_us + (uint64_t)(v > 0 ? v : 0) * 1000u;
    return bound < valid_until_us ? bound : valid_until_us;
}

uint64_t redlock_given_up_until_us(uint64_t now_us, uint32_t ttl_ms,
                                   double drift_factor)
{
    /* The drift the validity takes off, added here instead: how long one
     * ttl on a node's clock may last on ours. */
    uint64_t span_ms =
        (uint64_t)ttl_ms + (uint64_t)ceil((double)ttl_ms * drift_factor) + 2u;
    return now_us + 2u * span_ms * 1000u;
}

uint64_t redlock_handoff_delay_ms(bool held, bool semaphore,
                                  int64_t validity_ms, uint64_t wait_left_ms)
{
    uint64_t d =
        held && !semaphore && validity_ms >= 0 ? (uint64_t)validity_ms + 1 : 0;
    return d < wait_left_ms ? d : wait_left_ms;
}

void redlock_acquire_decide(const struct redlock_acquire_in *in,
                            struct redlock_sem_walk *w,
                            struct redlock_acquire_step *step)
{
    enum redlock_got got = in->got;
    int64_t pttl = in->pttl_min;
    memset(step, 0, sizeof(*step));
    if (in->permits > 0 && (got == RL_GOT_BUSY || got == RL_GOT_DONE)) {
        w->done += got == RL_GOT_DONE;
        w->pttl = w->tried == 0 ? pttl : redlock_sem_pttl_min(w->pttl, pttl);
        if (++w->tried < in->permits && !in->stop) {
            /* That slot is taken or completed; another may be free. */
            step->action = RL_ACQ_NEXT_SLOT;
            return;
        }
        /* A completed permit is one the semaphore lacks until its done mark
         * expires, not the end of the semaphore: done only when all are,
         * so the answer does not hang on the slot a round starts from. */
        got = w->done == in->permits ? RL_GOT_DONE : RL_GOT_BUSY;
        /* The back-off waits for the first slot to free, not the last
         * tried. */
        pttl = w->pttl;
    }
    w->tried = 0;
    if (got == RL_GOT_OK) {
        step->action = in->stop ? RL_ACQ_GIVE_BACK : RL_ACQ_WON;
        step->fence = in->fence;
        step->renew = in->renew && in->session;
        return;
    }
    step->answer = got;
    step->pttl_min = pttl;
    /* Done and other failures do not pass while waiting; busy and
     * no_quorum may. */
    bool may_pass = got == RL_GOT_BUSY || got == RL_GOT_NO_QUORUM;
    step->action =
        may_pass && in->waiting && !in->stop ? RL_ACQ_WAIT : RL_ACQ_ANSWER;
}

bool redlock_wait_delay(const struct redlock_wait_in *in, uint64_t *delay_ms)
{
    if (!in->head) {
        *delay_ms = in->wait_left_ms;
        return true;
    }
    if (in->wait_left_ms == 0) {
        return false;
    }
    *delay_ms =
        in->woken
            ? 0
            : redlock_retry_delay_ms(in->attempt, in->polls ? -1 : in->pttl_min,
                                     in->wait_left_ms, in->rand01);
    return true;
}
