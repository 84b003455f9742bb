/* proto_encode.h: struct response (and events, health, cursors) to bytes,
 * the output half of the wire contract. Pure. proto.h includes this file,
 * so callers of either half include proto.h alone. */
#ifndef REDLOCKD_PROTO_ENCODE_H
#define REDLOCKD_PROTO_ENCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_wire.h"

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

/* proto_cursor_encode: a locks cursor (nonzero) as lowercase hex plus NUL
 * into out; returns its length (proto_cursor_decode reads it back). */
size_t proto_cursor_encode(uint64_t v, char out[PROTO_CURSOR_MAX + 1]);

/* proto_json_escape: appends s as a JSON string body (without quotes) into
 * out; returns bytes written or 0 if it did not fit. */
size_t proto_json_escape(const char *s, size_t len, char *out, size_t cap);


/* proto_json_quote: s as a quoted JSON string (escaped as above, no NUL)
 * into out; returns its length, or 0 if it did not fit. */
size_t proto_json_quote(const char *s, size_t len, char *out, size_t cap);

#endif
