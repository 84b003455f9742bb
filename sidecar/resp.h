/* resp.h: RESP2, the Redis wire format: commands encoded, replies parsed
 * into hiredis's redisReply shape.
 *
 * Encoding sizes first, then writes into a buffer of exactly that size in
 * one pass, with no bounds checks and no printf: it runs for every argument
 * of every command. node.c formats each command once this way and sends
 * the same bytes to every node.
 *
 * node.c reads each node's socket into a buffer of its own and parses the
 * replies here; callers keep consuming struct redisReply as before (the
 * type, from hiredis.h, is all that is used of hiredis's reader). Reply
 * objects come from a free list: an acquire answer is three objects, and at
 * tens of thousands of rounds a second malloc/free per object showed in
 * every profile. Single-threaded, like the rest of the daemon.
 *
 * hiredis's own reader and formatter were measured against these
 * (tests/bench/respbench.c; numbers in CONTRIBUTING.md, "RESP"): its
 * reader, even building these pooled objects, costs 1.1 to 4 times as
 * much per reply, copies every read into a buffer of its own, and in
 * 0.14 neither bounds a bulk string (a huge length is buffered until it
 * arrives) nor checks the CRLF after one; its formatter allocates a
 * buffer per command, to be copied into the batch, at about ten times
 * the cost. */
#ifndef REDLOCKD_RESP_H
#define REDLOCKD_RESP_H

#include <stddef.h>
#include <stdint.h>

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

/* resp_reply_new: a pooled reply object of type (REDIS_REPLY_*), all
 * else zero; resp_reply_string: one of type (a string, status or error)
 * holding a NUL-terminated copy of s[0..n); resp_reply_array: an array of
 * n elements, all NULL until the caller fills them. Each returns NULL when
 * out of memory; free with resp_reply_free. The parser builds its replies
 * with these; so can another reader that wants the pool. */
struct redisReply *resp_reply_new(int type);
struct redisReply *resp_reply_string(int type, const char *s, size_t n);
struct redisReply *resp_reply_array(size_t n);

/* resp_reply_free: r and everything under it (NULL elements included);
 * NULL is fine. */
void resp_reply_free(struct redisReply *r);

/* resp_pool_drain: frees the cached objects (at exit, for leak checkers). */
void resp_pool_drain(void);

/* ---- encoding --------------------------------------------------------- */

/* resp_digits: decimal digits of n (1 for 0). */
size_t resp_digits(uint64_t n);

/* resp_header_len: bytes of "*<n>\r\n" (or "$<n>\r\n"). */
size_t resp_header_len(size_t n);

/* resp_bulk_len: bytes of a bulk string of n bytes, "$<n>\r\n...\r\n". */
size_t resp_bulk_len(size_t n);

/* resp_bulks_len: bytes of argc bulk strings of argvlen[i] bytes each. */
size_t resp_bulks_len(int argc, const size_t *argvlen);

/* resp_command_len: bytes of a whole command, an array of argc bulks. */
size_t resp_command_len(int argc, const size_t *argvlen);

/* resp_put_*: write at p, which has room for what the matching *_len
 * said, and return the end of what they wrote.
 * resp_put_header: "<kind><n>\r\n", kind '*' for an array of n items.
 * resp_put_bulk: s[0..n) as a bulk string.
 * resp_put_bulk_uint: v's decimal text as a bulk string (sized by
 * resp_bulk_len(resp_digits(v))).
 * resp_put_bulks: argv[0..argc) as bulk strings.
 * resp_put_command: argv[0..argc) as one command. */
char *resp_put_header(char *p, char kind, size_t n);
char *resp_put_bulk(char *p, const char *s, size_t n);
char *resp_put_bulk_uint(char *p, uint64_t v);
char *resp_put_bulks(char *p, int argc, const char **argv,
                     const size_t *argvlen);
char *resp_put_command(char *p, int argc, const char **argv,
                       const size_t *argvlen);

#endif
