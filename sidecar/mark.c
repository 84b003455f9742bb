/* mark.c: the data-set mark a GET answered, and what it says (mark.h). */
#include "mark.h"

#include <string.h>

void mark_read(const redisReply *reply, char out[RESTART_MARK_LEN + 1])
{
    size_t n = 0;
    if (reply->type == REDIS_REPLY_STRING) {
        n = reply->len < RESTART_MARK_LEN ? reply->len : RESTART_MARK_LEN;
        memcpy(out, reply->str, n);
    }
    out[n] = '\0';
}

enum mark_verdict mark_verdict(const char *up_mark, const redisReply *reply)
{
    if (reply->type == REDIS_REPLY_ERROR) {
        return MARK_REFUSED;
    }
    if (up_mark[0] == '\0') {
        return MARK_STOOD;
    }
    char mark[RESTART_MARK_LEN + 1];
    mark_read(reply, mark);
    if (strcmp(mark, up_mark) == 0) {
        return MARK_STOOD;
    }
    return mark[0] == '\0' ? MARK_GONE : MARK_CHANGED;
}
