/* caps.c: a server's command table read for native forms; see caps.h. */
#include "caps.h"

#include <stdbool.h>
#include <stddef.h>
#include <strings.h>

#include <hiredis/hiredis.h>

/* The docs' nesting: SET, its doc map, arguments, a oneof block, its
 * arguments; a little room beyond, and a bound on a hostile reply. */
#define CAPS_DEPTH 8

static bool is_text(const redisReply *r, const char *s)
{
    size_t n = 0;
    while (s[n] != '\0') {
        n++;
    }
    return (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
           r->len == n && strncasecmp(r->str, s, n) == 0;
}

/* Whether some map of r (RESP2: a flat array of names and values) holds
 * the pair "token", tok, at any depth up to depth. */
static bool has_token(const redisReply *r, const char *tok, int depth)
{
    if (r->type != REDIS_REPLY_ARRAY || depth == 0) {
        return false;
    }
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (i + 1 < r->elements && is_text(e, "token") &&
            is_text(r->element[i + 1], tok)) {
            return true;
        }
        if (has_token(e, tok, depth - 1)) {
            return true;
        }
    }
    return false;
}

unsigned caps_set_docs(const struct redisReply *r)
{
    return has_token(r, "IFEQ", CAPS_DEPTH) ? CAPS_SET_IFEQ : 0;
}

unsigned caps_command_info(const struct redisReply *r)
{
    unsigned caps = 0;
    if (r->type != REDIS_REPLY_ARRAY) {
        return 0;
    }
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements == 0) {
            continue; /* nil: the server has no such command */
        }
        if (is_text(e->element[0], "delifeq")) {
            caps |= CAPS_DELIFEQ;
        } else if (is_text(e->element[0], "delex")) {
            caps |= CAPS_DELEX;
        }
    }
    return caps;
}
