/* nodeuri.h: one Redis node's address, parsed from its URI.
 *
 *   redis://[[user]:password@ | user@]host[:port][/db][?persistent=1]
 *   rediss://...                  the same over TLS (the --tls-* settings)
 *   unix://[[user]:password@ | user@]/absolute/path.sock[?db=N][&persistent=1]
 *
 * Pure: no I/O, no name lookups; config.c lists the nodes, node.c
 * connects to them. */
#ifndef REDLOCKD_NODEURI_H
#define REDLOCKD_NODEURI_H

#include <stdbool.h>
#include <stddef.h>

enum node_addr_kind {
    NODE_ADDR_TCP = 0,  /* redis://host:port */
    NODE_ADDR_UNIX = 1, /* unix:///path/redis.sock */
};

/* One Redis node as configured. Owned by whoever parsed it (struct config
 * for the daemon's nodes); all strings are heap copies freed by
 * nodeuri_free() (config_free() for the config's). */
struct node_addr {
    enum node_addr_kind kind;
    char *host;        /* TCP only; IPv6 literals without brackets */
    int port;          /* TCP only, 1..65535 */
    char *path;        /* UNIX only */
    char *user;        /* ACL user for AUTH, NULL for none */
    char *password;    /* NULL for none; never logged or shown */
    int db;            /* SELECT db when > 0; 0 means no SELECT */
    bool persistent;   /* ?persistent=1: node keeps data across restarts */
    bool tls;          /* rediss://: TLS, verified as the --tls-* say */
    char display[300]; /* "host:port" or "unix:/path", never a password */
};

/* nodeuri_parse: parses uri into out (zeroed first; its strings are heap
 * copies owned by out, freed by nodeuri_free). Host: a name, IPv4 or
 * [IPv6]; port: 6379 when left out; db 0..1000000 (SELECT only when > 0);
 * user and password percent-decoded; with user@ alone the password comes
 * from elsewhere (config.c: --redis-password-file); persistent 1/0/true/
 * false. Returns 0, or -1 with one line in err that shows the URI with its
 * password as "***" (out is then empty). err may be NULL when errlen is 0;
 * a short err is cut. */
int nodeuri_parse(const char *uri, struct node_addr *out, char *err,
                  size_t errlen);

/* nodeuri_free: frees addr's strings (wiping the password first) and
 * zeroes it; safe to call again, on a zeroed addr and on NULL. */
void nodeuri_free(struct node_addr *addr);

/* nodeuri_redact: uri as an error message may quote it, in out (outlen
 * bytes, at least UTIL_SHOW_MAX + 4): the password as "***", control
 * characters as '?', cut at UTIL_SHOW_MAX bytes. Works on any string, a
 * URI or not (a stray argument may hold a password too). Returns out. */
const char *nodeuri_redact(const char *uri, char *out, size_t outlen);

/* nodeuri_same_server: a and b reach the same Redis server, whatever their
 * db, credentials or ?persistent: IP literals compared as addresses, names
 * without case or a final '.', unix paths with "//" and "/./" collapsed. No
 * DNS: "localhost" and "127.0.0.1" differ. */
bool nodeuri_same_server(const struct node_addr *a, const struct node_addr *b);

/* nodeuri_valid_hostport: s is "host:port" or "[v6]:port", the host and
 * port as in a node URI (for --metrics-listen). */
bool nodeuri_valid_hostport(const char *s);

#endif
