/* httpconn.h: the HTTP/1.1 framing of a client connection (http.c parses
 * and formats): one request answered at a time, so answers keep request
 * order, the rest pipelined behind it held to --max-line-bytes; on the
 * metrics listener only /metrics and /v1/health. Reached through its
 * struct framing_ops only (client.h). */
#ifndef REDLOCKD_HTTPCONN_H
#define REDLOCKD_HTTPCONN_H

#include "client.h"

extern const struct framing_ops httpconn_framing;

#endif
