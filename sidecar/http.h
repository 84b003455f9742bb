/* http.h: a pure HTTP/1.1 request reader and response head writer.
 *
 * No I/O: the server hands http_parse() everything it has buffered for a
 * connection and the reader says whether a whole request is there. Parsing is
 * restartable (the reader keeps no state between calls), so requests split
 * across reads, one byte at a time, or pipelined several to a read all work.
 * Header bytes are bounded, so re-parsing a partial head costs little. */
#ifndef REDLOCKD_HTTP_H
#define REDLOCKD_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "proto.h"

/* The request-target, path and query together: room for a resource of
 * PROTO_RESOURCE_MAX bytes with every byte percent-encoded (clients encode
 * all non-ASCII), plus the rest of the longest route and an absolute-form
 * authority. */
#define HTTP_PATH_MAX (3 * PROTO_RESOURCE_MAX + 512)

enum http_method {
    HTTP_OTHER = 0, /* any method we do not serve: 405 */
    HTTP_GET,
    HTTP_POST,
    HTTP_DELETE,
    HTTP_HEAD,
};

enum http_parse_result {
    HTTP_INCOMPLETE = 0, /* need more bytes; see head_done/expect_continue */
    HTTP_COMPLETE = 1,   /* a whole request: out is filled, see consumed */
    HTTP_ERROR = -1,     /* answer out->error_status and close */
};

struct http_limits {
    size_t max_head_bytes; /* request line + headers, default 8192 -> 431 */
    int max_headers;       /* header count, default 64 -> 431 */
    size_t max_body_bytes; /* Content-Length above this -> 413 */
};

/* One parsed request. body and the path point into the caller's buffer and
 * are valid until that buffer is consumed. */
struct http_request {
    enum http_method method;
    char path[HTTP_PATH_MAX + 1];  /* percent-decoded path, NUL-terminated */
    char query[HTTP_PATH_MAX + 1]; /* raw query string without '?', or "" */
    const char *body;              /* borrowed: into the input buffer */
    size_t body_len;
    bool keep_alive;      /* HTTP/1.1 default on; "Connection: close" off */
    bool head_done;       /* the head was fully read (even if INCOMPLETE) */
    bool expect_continue; /* head_done, body not all here, and the client
                             sent "Expect: 100-continue": answer 100 once */
    bool has_length;      /* a Content-Length header was present */
    size_t consumed;      /* bytes of this request, head and body */
    int error_status;     /* on HTTP_ERROR: 400, 411, 413, 414, 417, 431, 505 */
    const char *error_message; /* on HTTP_ERROR: static text */
};

/* http_limits_default: fills lim with the defaults above; max_body_bytes
 * from the daemon's --max-line-bytes. */
void http_limits_default(struct http_limits *lim, size_t max_body_bytes);

/* http_parse: reads at most one request from buf[0..len). Chunked transfer
 * encoding is refused with 411 (we need a length); a POST without a body is
 * accepted as an empty body. */
enum http_parse_result http_parse(const char *buf, size_t len,
                                  const struct http_limits *lim,
                                  struct http_request *out);

/* http_route: maps a parsed request onto the contract's routes, filling req
 * (defaults first, then the JSON body via proto_decode, then the lock token
 * from the path and ?resource= from the query). Returns 0, or the HTTP status
 * to answer (404 unknown path, 405 wrong method, 400 bad body or field) with
 * a message in err, which holds at least 64 bytes. */
int http_route(const struct http_request *hreq, struct request *req, char *err,
               size_t errlen);

/* http_route_allow: the methods a known path serves, for the Allow header
 * of a 405 ("POST", "DELETE" or "GET, HEAD"); NULL for a path with no
 * route. path is the decoded path of a parsed request. */
const char *http_route_allow(const char *path);

/* http_format_head: the status line and headers of a response with a body of
 * body_len bytes; returns the length written or 0 if it did not fit. allow
 * is the Allow header value for 405, else NULL. The Connection header says
 * keep-alive or close either way: an HTTP/1.0 client (ab -k) takes a
 * response without it for one that ends at the close. */
size_t http_format_head(int status, const char *content_type, size_t body_len,
                        bool keep_alive, const char *allow, char *out,
                        size_t cap);

/* http_status_text: "OK", "Not Found", ... */
const char *http_status_text(int status);

#endif
