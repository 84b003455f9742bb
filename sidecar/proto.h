/* proto.h: the wire contract as C types. Pure: bytes in, structs out here
 * (proto.c), and structs in, bytes out in proto_encode.h, which this file
 * includes. cJSON is used only inside proto.c.
 *
 * A struct request is filled by proto_decode() from one NDJSON line or one
 * HTTP body; it owns no heap memory (all fields are inline arrays), so it can
 * live in a pool and be reset with proto_request_init(). */
#ifndef REDLOCKD_PROTO_H
#define REDLOCKD_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_encode.h"
#include "proto_wire.h"

/* One decoded request. Fields not given keep the defaults set by
 * proto_request_init(). */
struct request {
    enum proto_op op;
    char id[PROTO_ID_MAX + 1]; /* the id's JSON text, NUL-terminated */
    size_t id_len;             /* 0 when no id was given */
    char resource[PROTO_RESOURCE_MAX + 1];
    size_t resource_len; /* 0 when not given */
    char lock[PROTO_TOKEN_LEN + 1];
    bool has_lock;
    uint32_t ttl_ms;       /* default PROTO_TTL_DEFAULT */
    uint32_t wait_ms;      /* default 0 */
    bool renew;            /* NDJSON only */
    bool fence;            /* return a fencing token */
    uint64_t keep_ms;      /* complete: life of the done mark */
    uint64_t renew_max_ms; /* 0: renew until released */
    bool has_ttl;          /* ttl_ms was given (extend uses the lock's ttl) */
    char prefix[PROTO_RESOURCE_MAX + 1]; /* locks: resource prefix filter */
    size_t prefix_len;                   /* 0: every resource */
    uint32_t limit;   /* locks: default PROTO_LIMIT_DEFAULT */
    uint64_t cursor;  /* locks: resume after; 0 = start */
    uint32_t permits; /* acquire: a semaphore of this many; 0 = a lock */
    uint32_t permit;  /* release, extend, complete: the slot, has_permit */
    bool has_permit;
};

/* How a request member is read, each with what its bounds mean. */
enum proto_field_type {
    PROTO_FT_OP,     /* a string naming an op (proto_op_name) */
    PROTO_FT_ID,     /* any JSON scalar: at most max bytes of JSON text */
    PROTO_FT_UINT,   /* an integral number in min..max */
    PROTO_FT_BOOL,   /* true or false */
    PROTO_FT_TEXT,   /* min..max bytes of UTF-8, no control characters */
    PROTO_FT_TOKEN,  /* max lowercase hex digits (proto_validate_token) */
    PROTO_FT_CURSOR, /* min..max lowercase hex digits, not all zero */
};

/* One member a request may carry: its bounds and its messages are written
 * here once, and both decoders (the fast path and the full one) read them.
 * A message is "<name>: <text>"; a text left NULL is made from the type
 * and the bounds ("must be an integer in 10..86400000"). An offset of 0
 * names nothing: offset 0 is op's, never a length or a flag. */
struct proto_field {
    const char *name;           /* the member's name on the wire */
    enum proto_field_type type; /* how the value is read */
    uint64_t min;               /* least value, or fewest bytes */
    uint64_t max;               /* greatest value, or most bytes */
    const char *bad_type;       /* text for a wrong type, or a \u0000 */
    const char *bad_value;      /* text for any value out of bounds */
    bool ndjson_only;           /* true is refused on an HTTP route (renew) */
    size_t off;                 /* where the value goes in struct request */
    size_t size;                /* its size there */
    size_t len_off;             /* where its length (a size_t) goes, or 0 */
    size_t has_off;             /* a bool set when it is given, or 0 */
};

/* Every member a request may carry, proto_fields_count of them. */
extern const struct proto_field proto_fields[];
extern const size_t proto_fields_count;

/* proto_field_named: the member of proto_fields named name, NULL for none. */
const struct proto_field *proto_field_named(const char *name);

/* proto_field_uint_fail: what a PROTO_FT_UINT member answers to anything
 * but an integer in its bounds, "<name>: must be an integer in <min>..<max>",
 * into err (when there is one); returns -1. */
int proto_field_uint_fail(const struct proto_field *fd, char *err,
                          size_t errlen);

/* proto_request_init: resets req to the defaults above. */
void proto_request_init(struct request *req);

/* proto_decode: parses one JSON object (an NDJSON line without its newline,
 * or an HTTP body) into req. When op is OP_NONE the object must carry "op";
 * otherwise op is implied (HTTP routes) and an "op" member, if present, must
 * agree. Unknown members, wrong types and out-of-range values are refused.
 * Returns 0, or -1 with a message naming the field in err (errlen >= 64);
 * req->id is filled even on error whenever the id itself was readable, so the
 * error can carry it. */
int proto_decode(const char *data, size_t len, enum proto_op op,
                 struct request *req, char *err, size_t errlen);

/* What proto_decode returns instead of -1 when the input is not JSON at all
 * (a syntax error, or bytes after the object): over NDJSON the stream
 * cannot be trusted past such a line, so the server answers and closes. */
#define PROTO_NOT_JSON (-2)

/* proto_decode_full: proto_decode without its fast path for plain flat
 * objects; the same results by contract. For tests and the fuzz target,
 * which check that the two agree. */
int proto_decode_full(const char *data, size_t len, enum proto_op op,
                      struct request *req, char *err, size_t errlen);

/* proto_validate_resource: 1..512 bytes of valid UTF-8 without control
 * characters; returns 0 or -1 with a reason in err. */
int proto_validate_resource(const char *s, size_t len, char *err,
                            size_t errlen);

/* proto_cursor_decode: 1..16 lowercase hex digits, not all zero (what
 * proto_cursor_encode writes), into *v; returns 0 or -1. */
int proto_cursor_decode(const char *s, size_t len, uint64_t *v);

/* proto_validate_token: 32 lowercase hex characters; returns 0 or -1. */
int proto_validate_token(const char *s, size_t len);

/* proto_op_name: "acquire", ...; NULL for OP_NONE. */
const char *proto_op_name(enum proto_op op);

#endif
