/* fuzz_http.c: libFuzzer target for the HTTP reader and router. Reads every
 * pipelined request in the input the way httpconn.c does, routes each one and
 * formats its answer head, checking the reader's promises as it goes.
 *
 *   clang -g -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Isidecar \
 *       sidecar/http.c sidecar/proto.c sidecar/proto_encode.c sidecar/util.c \
 *       tests/fuzz/fuzz_http.c -lcjson -o fuzz_http && \
 *       ./fuzz_http tests/fuzz/corpus_http */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The reader must stay inside the input: a copy of exactly size bytes lets
 * ASan see any read past the end. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct http_limits lim;
    struct http_request hreq;
    struct request req;
    char err[PROTO_MSG_MAX];
    char head[512];
    char *buf = malloc(size > 0 ? size : 1);
    size_t off = 0;

    if (buf == NULL) {
        return 0;
    }
    memcpy(buf, data, size);
    /* A small body limit so that 413 is reachable too. */
    http_limits_default(&lim, 4096);

    for (;;) {
        enum http_parse_result rc =
            http_parse(buf + off, size - off, &lim, &hreq);
        if (rc == HTTP_ERROR) {
            if (hreq.error_status < 400 || hreq.error_message == NULL) {
                abort();
            }
            http_format_head(hreq.error_status, "application/json", 0, false,
                             NULL, head, sizeof(head));
            break;
        }
        if (rc == HTTP_INCOMPLETE) {
            if (hreq.expect_continue && !hreq.head_done) {
                abort();
            }
            break;
        }
        /* COMPLETE: one whole request, body inside it, progress made. */
        if (hreq.consumed == 0 || hreq.consumed > size - off ||
            hreq.body == NULL || hreq.body < buf + off ||
            hreq.body + hreq.body_len != buf + off + hreq.consumed ||
            strlen(hreq.path) > HTTP_PATH_MAX ||
            strlen(hreq.query) > HTTP_PATH_MAX) {
            abort();
        }
        int status = http_route(&hreq, &req, err, sizeof(err));
        if (status != 0 && (status < 400 || err[0] == '\0')) {
            abort();
        }
        const char *allow = status == 405 ? http_route_allow(hreq.path) : NULL;
        if (status == 405 && allow == NULL) {
            abort();
        }
        http_format_head(status == 0 ? 200 : status, "application/json", 0,
                         hreq.keep_alive, allow, head, sizeof(head));
        off += hreq.consumed;
    }
    free(buf);
    return 0;
}
