/* fuzz_resp.c: libFuzzer target for the RESP reply parser (sidecar/resp.c),
 * which reads whatever a Redis node (or something posing as one) sends.
 * Parses every reply in the input the way node.c does, and checks that a
 * prefix of a parsed reply is always reported incomplete, never as a reply
 * or an error.
 *
 *   clang -g -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Isidecar \
 *       sidecar/resp.c tests/fuzz/fuzz_resp.c -o fuzz_resp \
 *       && ./fuzz_resp tests/fuzz/corpus_resp */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Checks the shape promises of a parsed reply. */
static void check_reply(const redisReply *r, int depth)
{
    if (depth > RESP_MAX_DEPTH + 1) {
        abort();
    }
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        if (r->str == NULL || r->str[r->len] != '\0') {
            abort();
        }
        break;
    case REDIS_REPLY_ARRAY:
        for (size_t i = 0; i < r->elements; i++) {
            if (r->element[i] == NULL) {
                abort();
            }
            check_reply(r->element[i], depth + 1);
        }
        break;
    case REDIS_REPLY_INTEGER:
    case REDIS_REPLY_NIL:
        break;
    default:
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy so that ASan sees any read past the end. */
    char *buf = malloc(size > 0 ? size : 1);
    if (buf == NULL) {
        return 0;
    }
    memcpy(buf, data, size);
    size_t off = 0;
    while (off < size) {
        redisReply *r = NULL;
        size_t used = 0;
        char err[64];
        enum resp_status rc =
            resp_parse(buf + off, size - off, &used, &r, err, sizeof(err));
        if (rc != RESP_OK) {
            if (r != NULL) {
                abort();
            }
            break;
        }
        if (used == 0 || used > size - off) {
            abort();
        }
        check_reply(r, 0);
        resp_reply_free(r);
        /* Every proper prefix of this reply is incomplete. */
        for (size_t cut = 0; cut < used; cut += 1 + used / 16) {
            redisReply *q = NULL;
            size_t u2 = 0;
            if (resp_parse(buf + off, cut, &u2, &q, err, sizeof(err)) !=
                    RESP_INCOMPLETE ||
                q != NULL) {
                abort();
            }
        }
        off += used;
    }
    free(buf);
    return 0;
}
