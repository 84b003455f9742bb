/* noscript.h: the rules of a node's NOSCRIPT recovery window, pure (no
 * I/O, no node); node_io.c carries the bytes and the lists.
 *
 * A server that lost its scripts answers NOSCRIPT to every EVALSHA, and
 * the command did not run. Redis answers in order, so the first NOSCRIPT
 * opens a window that ends with the answer of the last command written
 * before it; within it each reply is one of three cases below, and when it
 * ends the re-send list goes out in its order, then SCRIPT LOAD, then the
 * commands held while it was open.
 *
 * Inline: node_io.c asks for every reply, and the answer is a few tests. */
#ifndef REDLOCKD_NOSCRIPT_H
#define REDLOCKD_NOSCRIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "scripts.h"

/* What a reply means for its command and the re-send list. */
enum noscript_act {
    NOSCRIPT_ANSWER, /* the caller gets the reply (unless told already) */
    NOSCRIPT_RESEND, /* it did not run: it joins the re-send list */
    /* A script command of the window that ran (another client reloaded
     * the scripts): the acquires on the list ran after it if re-sent, so
     * they are answered with the error first (noscript_refuse), then it. */
    NOSCRIPT_FAIL_LISTED,
};

/* The reply and its command, as the window sees them. */
struct noscript_reply {
    bool open;     /* a window is open (this reply may have opened it) */
    bool noscript; /* a script command's NOSCRIPT error */
    bool done;     /* its caller was answered already (a timeout) */
    bool script;   /* the command runs a script */
    bool listed;   /* the re-send list is not empty */
};

/* noscript_is_error: the error text (len bytes and a NUL, or NULL for
 * none) is NOSCRIPT's. */
static inline bool noscript_is_error(const char *str, size_t len)
{
    return str != NULL && len >= 8 && strncmp(str, "NOSCRIPT", 8) == 0;
}

/* noscript_opens: the reply opens a window: a NOSCRIPT while none is. */
static inline bool noscript_opens(bool open, bool noscript)
{
    return noscript && !open;
}

/* noscript_act: what the reply r means (above). A timed-out command that
 * met NOSCRIPT never ran, and its caller was told: it is answered (to
 * nobody), not re-sent. */
static inline enum noscript_act noscript_act(const struct noscript_reply *r)
{
    if (r->noscript && !r->done) {
        return NOSCRIPT_RESEND;
    }
    if (!r->noscript && r->open && r->script && r->listed) {
        return NOSCRIPT_FAIL_LISTED;
    }
    return NOSCRIPT_ANSWER;
}

/* noscript_refuse: a listed command of enum node_script script is answered
 * with the error rather than re-sent once a later command ran: only an
 * acquire, which would take its key after the rollback meant for it; a
 * re-sent release, extend or completion can only find less to do. */
static inline bool noscript_refuse(int script)
{
    return script == SCRIPT_ACQUIRE;
}

#endif
