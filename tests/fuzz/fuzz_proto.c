/* fuzz_proto.c: libFuzzer target for NDJSON request decoding and response
 * encoding. Every input is decoded as an NDJSON line and as the body of
 * each HTTP route; whatever decodes must satisfy the struct request
 * invariants, the echoed id must re-encode into a response that fits, and
 * the fast path must give exactly what the full decoder gives.
 *
 *   clang -g -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Isidecar \
 *       sidecar/proto.c sidecar/proto_encode.c sidecar/util.c \
 *       tests/fuzz/fuzz_proto.c -lcjson \
 *       -o fuzz_proto && ./fuzz_proto tests/fuzz/corpus_proto */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct request *req, int rc)
{
    if (rc != 0) {
        if (req->id_len > PROTO_ID_MAX) {
            abort();
        }
        return;
    }
    if (req->op == OP_ACQUIRE &&
        (req->resource_len == 0 || req->resource_len > PROTO_RESOURCE_MAX ||
         proto_validate_resource(req->resource, req->resource_len, NULL,
                                 0) != 0)) {
        abort();
    }
    if (req->ttl_ms < PROTO_TTL_MIN || req->ttl_ms > PROTO_TTL_MAX ||
        req->wait_ms > PROTO_WAIT_MAX) {
        abort();
    }
    if (req->has_lock &&
        proto_validate_token(req->lock, strlen(req->lock)) != 0) {
        abort();
    }
    /* The answer to any accepted request must encode. */
    char out[PROTO_RESPONSE_MAX];
    struct response rsp = {0};
    rsp.id = req->id_len ? req->id : NULL;
    rsp.id_len = req->id_len;
    rsp.lock = req->has_lock ? req->lock : "0123456789abcdef0123456789abcdef";
    rsp.resource = req->resource;
    rsp.resource_len = req->resource_len;
    rsp.validity_ms = req->ttl_ms;
    if (proto_encode_response(&rsp, out, sizeof(out)) == 0) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy lets ASan catch any read past the end. */
    char *buf = malloc(size > 0 ? size : 1);
    if (buf == NULL) {
        return 0;
    }
    memcpy(buf, data, size);
    static const enum proto_op ops[] = {OP_NONE,   OP_ACQUIRE, OP_RELEASE,
                                        OP_EXTEND, OP_COMPLETE};
    char err[PROTO_MSG_MAX];
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        struct request req, full;
        char err_full[PROTO_MSG_MAX];
        int rc = proto_decode(buf, size, ops[i], &req, err, sizeof(err));
        if (rc != 0 && err[0] == '\0') {
            abort(); /* every refusal says why */
        }
        check(&req, rc);
        /* The fast path must agree with the full one, byte for byte. */
        int rc_full = proto_decode_full(buf, size, ops[i], &full, err_full,
                                        sizeof(err_full));
        if (rc != rc_full) {
            abort();
        }
        if (rc == 0 ? memcmp(&req, &full, sizeof(req)) != 0
                    : strcmp(err, err_full) != 0 ||
                          req.id_len != full.id_len ||
                          memcmp(req.id, full.id, req.id_len) != 0) {
            abort();
        }
    }
    free(buf);
    return 0;
}
