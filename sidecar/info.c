/* info.c: reading the text of Redis's INFO; see info.h. */
#include "info.h"

#include <stdlib.h>
#include <string.h>

void info_field(const char *info, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    out[0] = '\0';
    for (const char *p = info; p != NULL && *p != '\0';) {
        if (strncmp(p, name, nlen) == 0 && p[nlen] == ':') {
            p += nlen + 1;
            size_t n = strcspn(p, "\r\n");
            if (n >= cap) {
                n = cap - 1;
            }
            memcpy(out, p, n);
            out[n] = '\0';
            return;
        }
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
}

uint32_t info_version(const char *info)
{
    char text[32];
    info_field(info, "redis_version", text, sizeof(text));
    const char *p = text;
    unsigned long part[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        char *end;
        part[i] = strtoul(p, &end, 10);
        if (end == p || part[i] > 99) {
            if (i == 0) {
                return 0;
            }
            part[i] = 0; /* "7.x" counts as 7.0, never as a later one */
            break;
        }
        p = end;
        if (*p != '.') {
            break;
        }
        p++;
    }
    return (uint32_t)(part[0] * 10000 + part[1] * 100 + part[2]);
}

bool info_evicts(const char *maxmemory, const char *policy)
{
    return strtoull(maxmemory, NULL, 10) > 0 && policy[0] != '\0' &&
           strcmp(policy, "noeviction") != 0;
}
