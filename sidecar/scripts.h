/* scripts.h: the Lua scripts every Redis node runs for redlockd, and the
 * number of KEYS each takes. Plain constant data, so that the in-process
 * benchmark limit (tests/bench/rlbench.c) runs the daemon's very scripts
 * rather than a copy that could drift. */
#ifndef REDLOCKD_SCRIPTS_H
#define REDLOCKD_SCRIPTS_H

/* Replies:
 *   acquire:     {1, fence}   set (fence 0 unless asked)
 *                {0, pttl}    held by another token
 *                {2, pttl}    done mark present
 *   release, extend, complete, fence raise: 1 applied, 0 not held.
 *   fence repair: the counter after raising it to at least ARGV[1].
 *   done read, done copy (restart repair): the done marks among the keys
 *   of one SCAN page of a sound node, with their PTTLs (as strings); the
 *   copy sets each on the target where its key is missing (or lengthens
 *   an equal mark) and answers how many it set. The keys come from a SCAN
 *   the daemon sends as a plain command, and are KEYS of both. */
enum node_script {
    SCRIPT_ACQUIRE = 0,  /* KEYS lock, fence; ARGV token, ttl, fence?1:0 */
    SCRIPT_RELEASE,      /* KEYS lock; ARGV token, channel -> 1/0 */
    SCRIPT_EXTEND,       /* KEYS lock; ARGV token, ttl -> 1/0 */
    SCRIPT_COMPLETE,     /* KEYS lock; ARGV token, keep_ms, channel -> 1/0 */
    SCRIPT_FENCE_RAISE,  /* KEYS lock, fence; ARGV token, value -> 1/0 */
    SCRIPT_FENCE_REPAIR, /* KEYS fence; ARGV value -> counter after */
    /* The compare-and-acts above over n keys in one call (the per-call
     * cost of a script is most of a single-key one's): KEYS k1..kn; ARGV
     * per key, in key order: action ("r" release, "e" extend, "c"
     * complete), token, number (ttl for e, keep_ms for c), channel ("":
     * no publish). Answers an array of n replies, each 1 or 0 as the
     * single-key script would, or the text of the error that key met
     * (the other keys are unaffected). */
    SCRIPT_BATCH,
    /* SCRIPT_BATCH when every key is a release (or rollback): KEYS
     * k1..kn; ARGV t1..tn, then, on a node that announces, channels
     * c1..cn ("": none). Same answers. */
    SCRIPT_BATCH_RELEASE,
    /* SCRIPT_BATCH when every key is an extend: KEYS k1..kn; ARGV
     * t1..tn, ttl1..ttln. Same answers. */
    SCRIPT_BATCH_EXTEND,
    SCRIPT_DONE_READ, /* KEYS k1..kn -> {key1..keym, mark1, pttl1,
                         ..., markm, pttlm}: m marks */
    SCRIPT_DONE_COPY, /* KEYS k1..km; ARGV mark1, pttl1, ...
                         -> marks set */
    SCRIPT__COUNT
};

/* Indexed by enum node_script; static storage, never freed. The batch
 * and done-mark scripts take any number of keys: their script_numkeys is
 * 0 and the caller gives the count (node_prepare_keys). */
extern const char *const script_source[SCRIPT__COUNT];
extern const int script_numkeys[SCRIPT__COUNT];

#endif
