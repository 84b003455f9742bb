/* resp.h: parsing Redis (RESP2) replies into hiredis's redisReply shape.
 *
 * node.c reads each node's socket into a buffer of its own and parses the
 * replies here; callers keep consuming struct redisReply as before (the
 * type, from hiredis.h, is all that is used of hiredis's reader). Reply
 * objects come from a free list: an acquire answer is three objects, and at
 * tens of thousands of rounds a second malloc/free per object showed in
 * every profile. Single-threaded, like the rest of the daemon. */
#ifndef REDLOCKD_RESP_H
#define REDLOCKD_RESP_H

#include <stddef.h>

struct redisReply;

enum resp_status {
    RESP_OK = 0,         /* one reply parsed */
    RESP_INCOMPLETE = 1, /* the buffer ends inside the first reply */
    RESP_PROTOCOL = -1,  /* not RESP (or over a limit): drop the connection */
    RESP_NOMEM = -2,     /* out of memory */
};

/* Limits: deeper nesting or larger items are protocol errors. */
#define RESP_MAX_DEPTH 8
#define RESP_MAX_ELEMENTS (1 << 20)
#define RESP_MAX_BULK (64u * 1024 * 1024)

/* resp_parse: the first reply in buf[0..len). On RESP_OK, *out owns the
 * reply (free it with resp_reply_free) and *used is its size in bytes; on
 * RESP_INCOMPLETE nothing is allocated (parse again with more bytes); on
 * RESP_PROTOCOL err says why. */
enum resp_status resp_parse(const char *buf, size_t len, size_t *used,
                            struct redisReply **out, char *err, size_t errlen);

/* resp_reply_free: r and everything under it; NULL is fine. */
void resp_reply_free(struct redisReply *r);

/* resp_pool_drain: frees the cached objects (at exit, for leak checkers). */
void resp_pool_drain(void);

#endif
