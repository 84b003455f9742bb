/* delifeq.c: a Redis module for the tests alone. It gives a server that
 * lacks one (this machine's Redis 7.0) the compare-and-delete command of a
 * newer server, so that the daemon's native release runs against a real
 * redis-server: DELIFEQ key value (Valkey 9.0), or, when loaded with the
 * argument DELEX, DELEX key IFEQ value (Redis 8.4). Either answers 1 when
 * the key held value and was deleted, 0 when it did not, and WRONGTYPE for
 * a key that is no string, as the servers do.
 *
 * No redismodule.h is installed here, so the few API functions it calls
 * are declared from the module ABI: the server hands RedisModule_OnLoad a
 * context whose first word is the GetApi function, which looks each one up
 * by name (what redismodule.h's RedisModule_Init does).
 *
 *   --loadmodule delifeq.so          DELIFEQ
 *   --loadmodule delifeq.so DELEX    DELEX ... IFEQ */
#include <stddef.h>
#include <string.h>
#include <strings.h>

#define RM_OK 0
#define RM_ERR 1
#define RM_APIVER_1 1
#define RM_READ (1 << 0)
#define RM_WRITE (1 << 1)
#define RM_KEYTYPE_EMPTY 0
#define RM_KEYTYPE_STRING 1

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleKey RedisModuleKey;
typedef int (*cmd_fn)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

static int (*get_api)(const char *name, void *out);
static void (*set_module_attribs)(RedisModuleCtx *ctx, const char *name,
                                  int ver, int apiver);
static int (*create_command)(RedisModuleCtx *ctx, const char *name, cmd_fn fn,
                             const char *flags, int first, int last, int step);
static RedisModuleKey *(*open_key)(RedisModuleCtx *ctx, RedisModuleString *k,
                                   int mode);
static void (*close_key)(RedisModuleKey *key);
static int (*key_type)(RedisModuleKey *key);
static char *(*string_dma)(RedisModuleKey *key, size_t *len, int mode);
static int (*delete_key)(RedisModuleKey *key);
static const char *(*string_ptr_len)(const RedisModuleString *s, size_t *len);
static int (*reply_long_long)(RedisModuleCtx *ctx, long long v);
static int (*reply_error)(RedisModuleCtx *ctx, const char *err);
static int (*wrong_arity)(RedisModuleCtx *ctx);
static int (*replicate_verbatim)(RedisModuleCtx *ctx);

/* Deletes argv[1] when it holds want; the reply is the command's. */
static int del_if_equal(RedisModuleCtx *ctx, RedisModuleString *keyname,
                        RedisModuleString *want)
{
    RedisModuleKey *key = open_key(ctx, keyname, RM_READ | RM_WRITE);
    int type = key_type(key);
    if (type != RM_KEYTYPE_EMPTY && type != RM_KEYTYPE_STRING) {
        close_key(key);
        return reply_error(ctx, "WRONGTYPE Operation against a key holding "
                                "the wrong kind of value");
    }
    long long deleted = 0;
    if (type == RM_KEYTYPE_STRING) {
        size_t have_len, want_len;
        const char *have = string_dma(key, &have_len, RM_READ);
        const char *w = string_ptr_len(want, &want_len);
        if (have_len == want_len && memcmp(have, w, want_len) == 0) {
            delete_key(key);
            deleted = 1;
        }
    }
    close_key(key);
    if (deleted) {
        replicate_verbatim(ctx);
    }
    return reply_long_long(ctx, deleted);
}

static int delifeq_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc != 3) {
        return wrong_arity(ctx);
    }
    return del_if_equal(ctx, argv[1], argv[2]);
}

static int delex_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc != 4) {
        return wrong_arity(ctx);
    }
    size_t len;
    const char *cond = string_ptr_len(argv[2], &len);
    if (len != 4 || strncasecmp(cond, "IFEQ", 4) != 0) {
        return reply_error(ctx, "ERR syntax error");
    }
    return del_if_equal(ctx, argv[1], argv[3]);
}

#define API(name, var) (get_api("RedisModule_" name, (void *)&(var)) == RM_OK)

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    get_api = (int (*)(const char *, void *))((void **)ctx)[0];
    if (!API("SetModuleAttribs", set_module_attribs) ||
        !API("CreateCommand", create_command) || !API("OpenKey", open_key) ||
        !API("CloseKey", close_key) || !API("KeyType", key_type) ||
        !API("StringDMA", string_dma) || !API("DeleteKey", delete_key) ||
        !API("StringPtrLen", string_ptr_len) ||
        !API("ReplyWithLongLong", reply_long_long) ||
        !API("ReplyWithError", reply_error) ||
        !API("WrongArity", wrong_arity) ||
        !API("ReplicateVerbatim", replicate_verbatim)) {
        return RM_ERR;
    }
    set_module_attribs(ctx, "delifeq", 1, RM_APIVER_1);
    size_t len = 0;
    const char *arg = argc > 0 ? string_ptr_len(argv[0], &len) : "";
    if (len == 5 && strncasecmp(arg, "DELEX", 5) == 0) {
        return create_command(ctx, "delex", delex_cmd, "write fast", 1, 1, 1);
    }
    return create_command(ctx, "delifeq", delifeq_cmd, "write fast", 1, 1, 1);
}
