/* proto.h: the wire contract as C types. Pure: bytes in, structs out, and
 * structs in, bytes out. cJSON is used only inside proto.c.
 *
 * A struct request is filled by proto_decode() from one NDJSON line or one
 * HTTP body; it owns no heap memory (all fields are inline arrays), so it can
 * live in a pool and be reset with proto_request_init(). */
#ifndef REDLOCKD_PROTO_H
#define REDLOCKD_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_RESOURCE_MAX 512 /* bytes of UTF-8 */
#define PROTO_TOKEN_LEN 32     /* 128-bit token as lowercase hex */
#define PROTO_ID_MAX 256       /* bytes of the id's JSON text */
#define PROTO_MSG_MAX 256      /* bytes of an error message */

#define PROTO_TTL_MIN 10
#define PROTO_TTL_MAX 86400000
#define PROTO_TTL_DEFAULT 30000
#define PROTO_WAIT_MAX 300000
#define PROTO_KEEP_MIN 1
#define PROTO_KEEP_MAX 2592000000ULL /* 30 days */
#define PROTO_KEEP_DEFAULT 86400000
#define PROTO_RENEW_MAX_MAX 2592000000ULL
#define PROTO_LIMIT_MAX 1000 /* locks: entries per answer */
#define PROTO_LIMIT_DEFAULT 100
#define PROTO_CURSOR_MAX 16 /* locks: hex digits of a cursor */
#define PROTO_PERMITS_MIN 2
#define PROTO_PERMITS_MAX 1024

enum proto_op {
    OP_NONE = 0, /* not set (decode error before "op" was read) */
    OP_ACQUIRE,
    OP_RELEASE,
    OP_EXTEND,
    OP_COMPLETE,
    OP_PING,
    OP_HEALTH,
    OP_METRICS, /* HTTP only: GET /metrics */
    OP_LOCKS,   /* this daemon's locks: GET /v1/locks */
    OP_INSPECT, /* what the nodes say of one resource */
};

enum proto_err {
    ERR_NONE = 0,
    ERR_BAD_REQUEST,   /* 400 */
    ERR_NOT_HELD,      /* 404 */
    ERR_BUSY,          /* 409 */
    ERR_DONE,          /* 409 */
    ERR_TOO_LARGE,     /* 413 */
    ERR_LIMIT,         /* 429 */
    ERR_NO_QUORUM,     /* 503 */
    ERR_SHUTTING_DOWN, /* 503 */
    ERR_INTERNAL,      /* 500 */
    ERR__COUNT
};

/* One decoded request. Fields not given keep the defaults set by
 * proto_request_init(). */
struct request {
    enum proto_op op;
    char id[PROTO_ID_MAX + 1]; /* the id's JSON text, NUL-terminated */
    size_t id_len;             /* 0 when no id was given */
    /* With room for a semaphore's slot name (semaphore.h). */
    char resource[PROTO_RESOURCE_MAX + 8];
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

/* proto_cursor_encode: a locks cursor (nonzero) as lowercase hex plus NUL
 * into out; returns its length. proto_cursor_decode: 1..16 lowercase hex
 * digits, not all zero, into *v; returns 0 or -1. */
size_t proto_cursor_encode(uint64_t v, char out[PROTO_CURSOR_MAX + 1]);
int proto_cursor_decode(const char *s, size_t len, uint64_t *v);

/* proto_validate_token: 32 lowercase hex characters; returns 0 or -1. */
int proto_validate_token(const char *s, size_t len);

/* One response. Borrowed pointers must outlive the encode call only. */
struct response {
    const char *id; /* borrowed: the request's id JSON text, NULL for none */
    size_t id_len;
    enum proto_err err;   /* ERR_NONE for success */
    const char *message;  /* borrowed: error message, NUL-terminated */
    const char *lock;     /* borrowed: token, NULL when none */
    const char *resource; /* borrowed: raw bytes, escaped on output */
    size_t resource_len;
    int64_t validity_ms; /* written when lock != NULL */
    int64_t fence;       /* written when has_fence */
    bool has_fence;
    const char *extra; /* borrowed: more members of a success, as JSON text
                          without the leading comma (locks, inspect) */
    size_t extra_len;
};

/* Output buffer big enough for any response but health: the escaped
 * resource (6 bytes per input byte at worst), id, token and message. */
#define PROTO_RESPONSE_MAX (PROTO_RESOURCE_MAX * 6 + PROTO_ID_MAX * 2 + 1024)

/* proto_encode_response: writes the JSON object (no newline) into out, which
 * holds cap bytes; returns the length written, or 0 if it did not fit. A
 * response with extra members needs PROTO_RESPONSE_MAX + extra_len. */
size_t proto_encode_response(const struct response *rsp, char *out, size_t cap);

/* proto_encode_event: {"event":"<event>","lock":..,"resource":..} into out;
 * returns the length or 0. */
size_t proto_encode_event(const char *event, const char *lock,
                          const char *resource, size_t resource_len, char *out,
                          size_t cap);

/* One node as reported by health. */
struct proto_node_health {
    const char *addr; /* borrowed: display address, no password */
    bool up;
    const char *state;      /* borrowed: "up", "down", "connecting", ... */
    const char *last_error; /* borrowed, NULL when none */
    double rtt_ms;          /* last measured round trip, < 0 when unknown */
    bool quarantined;
    const char *tls; /* borrowed: "verified"/"insecure", NULL: plain */
    const char *eviction; /* borrowed: maxmemory-policy of a node that may
                             evict keys, NULL when it may not */
    const char *refusing; /* borrowed: the last error the node refused a
                             lock command with since it last answered an
                             acquire, NULL when none */
    const char *not_counted; /* borrowed: why an up node's acquires do not
                                count (its data-set mark is not known),
                                NULL when they do */
};

/* proto_encode_health: the health object into a malloc'd string owned by the
 * caller (*len set); ok is whether a quorum is connected. Returns NULL only
 * on allocation failure. */
char *proto_encode_health(const char *id, size_t id_len, bool ok, int quorum,
                          const struct proto_node_health *nodes, int n_nodes,
                          size_t *len);

/* proto_err_code: "bad_request", ...; proto_err_status: the HTTP status. */
const char *proto_err_code(enum proto_err err);
int proto_err_status(enum proto_err err);

/* proto_op_name: "acquire", ...; NULL for OP_NONE. */
const char *proto_op_name(enum proto_op op);

/* proto_json_escape: appends s as a JSON string body (without quotes) into
 * out; returns bytes written or 0 if it did not fit. */
size_t proto_json_escape(const char *s, size_t len, char *out, size_t cap);

#endif
