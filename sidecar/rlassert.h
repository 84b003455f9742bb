/* rlassert.h: RL_ASSERT, for what redlockd's own logic guarantees.
 *
 * An assertion states an invariant that no input can break (a client's
 * bytes, a node's reply, a signal): only a bug in redlockd can. On failure
 * it logs "assertion failed: FILE:LINE: COND" at error level and aborts,
 * so that the core dump holds the state that broke it, rather than running
 * on into a use after free or a second holder of a lock.
 *
 * It is on in every build, production included, like Redis's serverAssert,
 * and NDEBUG does not turn it off: the check is one branch the compiler is
 * told is taken, with the failure path out of line; and a lock daemon that
 * stops is safe (the locks it granted expire at their TTL), where one
 * running on a broken state is not.
 *
 * Never assert on what a peer sends: bad input gets an error answer. */
#ifndef REDLOCKD_RLASSERT_H
#define REDLOCKD_RLASSERT_H

#include "log.h"

#define RL_ASSERT(cond)                                                        \
    (__builtin_expect(!!(cond), 1)                                             \
         ? (void)0                                                             \
         : log_assert_fail(__FILE__, __LINE__, #cond))

#endif
