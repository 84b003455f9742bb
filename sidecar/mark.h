/* mark.h: what a GET of a node's data-set key says about the node, pure
 * (no I/O, no node). The mark is the random value the first daemon to meet
 * the node set in the key; the one a connection came up with still there
 * means no flush came since (node_dataset.c, which acts on the verdict:
 * the guard's reply and the check every second are both judged here). */
#ifndef REDLOCKD_MARK_H
#define REDLOCKD_MARK_H

#include <hiredis/hiredis.h>

#include "restart.h"

enum mark_verdict {
    MARK_STOOD,   /* the connection's mark, or it came up with none */
    MARK_REFUSED, /* an error instead: nothing shows that no flush came */
    MARK_GONE,    /* no mark at all: the node was emptied */
    MARK_CHANGED, /* another mark: emptied, and marked again since */
};

/* mark_read: the mark a GET answered (reply), into out: "" for a nil or
 * any reply that is no string, else its first RESTART_MARK_LEN bytes. */
void mark_read(const redisReply *reply, char out[RESTART_MARK_LEN + 1]);

/* mark_verdict: what reply, a GET of the key on a connection that came up
 * with up_mark ("" when it read none), says. An error is MARK_REFUSED
 * whatever up_mark is; a connection with no mark has nothing to compare,
 * so any other reply is MARK_STOOD for it. */
enum mark_verdict mark_verdict(const char *up_mark, const redisReply *reply);

#endif
