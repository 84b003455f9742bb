/* missing.h: what a node's error says the daemon lacks there, pure (no
 * I/O, no node): a command renamed away or disabled (rename-command, a
 * service that turns scripting off), a command the node's ACL user may
 * not run, or a key or channel outside its patterns. node_conn.c names it
 * in a failed handshake, node_io.c in a refused script. */
#ifndef REDLOCKD_MISSING_H
#define REDLOCKD_MISSING_H

#include <stddef.h>

enum missing_kind {
    MISSING_NONE,       /* some other error */
    MISSING_COMMAND,    /* no such command: renamed away or disabled */
    MISSING_PERMISSION, /* the ACL user may not run the command */
    MISSING_KEY,        /* a key or channel outside the ACL user's rules */
};

/* missing_of: the kind of err (a node's error text, any server from Redis
 * 6.0 on, Valkey included), with the command it names in name (upper
 * case, at most len - 1 bytes): "" when the error names none (a command
 * called from a script, a key). */
enum missing_kind missing_of(const char *err, char *name, size_t len);

/* missing_text: what a kind means, to follow the command's name in a log
 * line ("is renamed away or disabled here"). */
const char *missing_text(enum missing_kind kind);

#endif
