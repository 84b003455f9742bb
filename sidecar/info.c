/* info.c: reading the text of Redis's INFO; see info.h. */
#include "info.h"

#include <stdio.h>
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

void info_run_id(const char *info, char *out, size_t cap)
{
    info_field(info, "run_id", out, cap);
}

bool info_uptime_s(const char *info, uint64_t *uptime_s)
{
    char up[24];
    info_field(info, "uptime_in_seconds", up, sizeof(up));
    if (up[0] == '\0') {
        return false;
    }
    *uptime_s = strtoull(up, NULL, 10);
    return true;
}

void info_replid(const char *info, char *out, size_t cap)
{
    info_field(info, "master_replid", out, cap);
}

bool info_master(const char *info, char *out, size_t cap)
{
    char role[16], host[48], port[16];
    info_field(info, "role", role, sizeof(role));
    if (strcmp(role, "slave") != 0) {
        out[0] = '\0';
        return false;
    }
    info_field(info, "master_host", host, sizeof(host));
    info_field(info, "master_port", port, sizeof(port));
    snprintf(out, cap, "%s:%s", host, port);
    return true;
}

bool info_aof_off(const char *info)
{
    char aof[8];
    info_field(info, "aof_enabled", aof, sizeof(aof));
    return strcmp(aof, "0") == 0;
}

bool info_eviction(const char *info, char *maxmemory, size_t mcap, char *policy,
                   size_t pcap)
{
    info_field(info, "maxmemory", maxmemory, mcap);
    info_field(info, "maxmemory_policy", policy, pcap);
    return info_evicts(maxmemory, policy);
}
