/* proto_wire.h: the names the wire contract gives, shared by its input half
 * (proto.h) and its output half (proto_encode.h): bounds, ops and error
 * codes. Declarations only. */
#ifndef REDLOCKD_PROTO_WIRE_H
#define REDLOCKD_PROTO_WIRE_H

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

#endif
