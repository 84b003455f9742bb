/* nodeuri.c: node URIs parsed into struct node_addr (see nodeuri.h).
 *
 * The grammar, in the order a URI is read:
 *
 *   scheme   redis:// | rediss:// | unix://      (any case)
 *   userinfo up to the LAST '@': [user][:password], percent-decoded
 *   rest     host[:port][/db][?query]             (TCP)
 *            /absolute/path[?query]               (unix)
 *   query    persistent=1|0|true|false, and db=N for unix only
 *
 * Error text never carries a password: every message quotes the URI as
 * nodeuri_redact() shows it, with the password as "***". */
#include "nodeuri.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#include "util.h"

#define DEFAULT_REDIS_PORT 6379
#define NODE_DB_MAX 1000000
#define HOST_MAX 253 /* longest DNS name */
#define SHOWN_MAX UTIL_SHOW_MAX

/* Longest unix socket path: sun_path holds it and its NUL. */
#define UNIX_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* ---- host, port, db ----------------------------------------------------- */

/* parse_port: "1".."65535", digits only. */
static int parse_port(const char *s, size_t n)
{
    int port = 0;

    if (n == 0 || n > 5) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) {
            return -1;
        }
        port = port * 10 + (s[i] - '0');
    }
    return port >= 1 && port <= 65535 ? port : -1;
}

/* parse_db: a db number, "0".."1000000" (n bytes, at most 12), as strtoll
 * reads it: digits, or "-0". Returns it, or -1. */
static int parse_db(const char *s, size_t n)
{
    size_t i = n > 0 && s[0] == '-' ? 1 : 0;
    long long db = 0;

    if (n > 12 || i == n) {
        return -1;
    }
    for (; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) {
            return -1;
        }
        db = db * 10 + (s[i] - '0');
    }
    if (s[0] == '-' && db != 0) {
        return -1;
    }
    return db <= NODE_DB_MAX ? (int)db : -1;
}

/* valid_host: a DNS name (letters, digits, '-', '_', '.') or an IPv4
 * address; IPv6 is handled by the callers, inside brackets. */
static bool valid_host(const char *s, size_t n)
{
    char buf[HOST_MAX + 1];
    struct in_addr a4;
    bool only_digits_dots = true;

    if (n == 0 || n > HOST_MAX) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (!isalnum(c) && c != '-' && c != '_' && c != '.') {
            return false;
        }
        if (!isdigit(c) && c != '.') {
            only_digits_dots = false;
        }
    }
    if (only_digits_dots) {
        /* Looks like IPv4, so must be IPv4: "1.2.3.999" is a typo. */
        memcpy(buf, s, n);
        buf[n] = '\0';
        return inet_pton(AF_INET, buf, &a4) == 1;
    }
    return true;
}

/* valid_ipv6: s (n bytes, without brackets) is an IPv6 literal. */
static bool valid_ipv6(const char *s, size_t n)
{
    char buf[64];
    struct in6_addr a6;

    if (n == 0 || n >= sizeof buf) {
        return false;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    return inet_pton(AF_INET6, buf, &a6) == 1;
}

/* nodeuri_valid_hostport: "host:port" or "[v6]:port", with a URI's rules
 * for the host and the port. */
bool nodeuri_valid_hostport(const char *s)
{
    const char *colon;

    if (s[0] == '[') {
        const char *close = strchr(s, ']');

        if (close == NULL || close[1] != ':' ||
            !valid_ipv6(s + 1, (size_t)(close - s - 1))) {
            return false;
        }
        colon = close + 1;
    } else {
        colon = strchr(s, ':');
        if (colon == NULL || strchr(colon + 1, ':') != NULL ||
            !valid_host(s, (size_t)(colon - s))) {
            return false;
        }
    }
    return parse_port(colon + 1, strlen(colon + 1)) > 0;
}

/* ---- node URIs -------------------------------------------------------- */

/* nodeuri_redact: uri for an error message: the password (everything after the
 * first ':' of the userinfo; all of the userinfo when it has no ':')
 * replaced by "***", and made safe by util_show(). The userinfo ends at the
 * last
 * '@', the same rule nodeuri_parse() parses by, so the two cannot
 * disagree about where a password is. Without an '@', "redis://:pw" and
 * "redis://user:pw" still carry one: whatever follows the authority's ':'
 * is masked to the end unless it is all digits (a port), since a password
 * may hold '/' or '?'. */
const char *nodeuri_redact(const char *uri, char *out, size_t outlen)
{
    size_t scheme = strspn(uri, "abcdefghijklmnopqrstuvwxyz"
                                "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-");
    /* Only a real scheme counts: in "u:pw@redis://h" or ":pw://@h" the
     * "://" belongs to the credentials. */
    const char *rest =
        strncmp(uri + scheme, "://", 3) == 0 ? uri + scheme + 3 : uri;
    const char *at = strrchr(rest, '@');
    const char *colon;
    char buf[1024];

    if (at == NULL) {
        size_t alen = strcspn(rest, "/?");
        const char *close = rest[0] == '[' ? memchr(rest, ']', alen) : NULL;
        /* In "[v6]:port" the colons inside the brackets are the host's. */
        const char *from = close != NULL ? close : rest;

        colon = memchr(from, ':', alen - (size_t)(from - rest));
        if (colon == NULL) {
            return util_show(uri, out, outlen);
        }
        size_t after = alen - (size_t)(colon + 1 - rest);
        if (strspn(colon + 1, "0123456789") >= after) {
            return util_show(uri, out, outlen);
        }
        snprintf(buf, sizeof buf, "%.*s:***", (int)(colon - uri), uri);
        return util_show(buf, out, outlen);
    }
    colon = memchr(rest, ':', (size_t)(at - rest));
    if (colon != NULL) {
        snprintf(buf, sizeof buf, "%.*s:***%s", (int)(colon - uri), uri, at);
    } else {
        snprintf(buf, sizeof buf, "%.*s***%s", (int)(rest - uri), uri, at);
    }
    return util_show(buf, out, outlen);
}

/* pct_decode: n bytes of s with %XX decoded, as a new string in *out.
 * Returns 0, -1 for a bad or NUL-producing escape, -2 out of memory. */
static int pct_decode(const char *s, size_t n, char **out)
{
    char *d = malloc(n + 1);
    size_t j = 0;

    if (d == NULL) {
        return -2;
    }
    for (size_t i = 0; i < n; i++) {
        int hi, lo;

        if (s[i] != '%') {
            d[j++] = s[i];
            continue;
        }
        if (i + 2 >= n) {
            goto error;
        }
        hi = util_hex_value((unsigned char)s[i + 1]);
        lo = util_hex_value((unsigned char)s[i + 2]);
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            goto error;
        }
        d[j++] = (char)(hi * 16 + lo);
        i += 2;
    }
    d[j] = '\0';
    *out = d;
    return 0;

error:
    /* What was decoded so far may be part of a password. */
    explicit_bzero(d, j);
    free(d);
    return -1;
}

/* uri_query: applies "k=v&k=v" (n bytes) to out. db= is taken only for unix
 * URIs, whose path leaves no room for "/db". */
static int uri_query(const char *q, size_t n, bool is_unix,
                     struct node_addr *out, const char *shown, char *err,
                     size_t errlen)
{
    const char *end = q + n;

    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *pend = amp != NULL ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(pend - q));
        size_t klen = (size_t)((eq != NULL ? eq : pend) - q);
        const char *v = eq != NULL ? eq + 1 : pend;
        size_t vlen = (size_t)(pend - v);
        char sv[SHOWN_MAX + 4], tmp[SHOWN_MAX + 1];

        snprintf(tmp, sizeof tmp, "%.*s", (int)vlen, v);
        if (klen == 10 && memcmp(q, "persistent", 10) == 0) {
            if ((vlen == 1 && v[0] == '1') ||
                (vlen == 4 && memcmp(v, "true", 4) == 0)) {
                out->persistent = true;
            } else if ((vlen == 1 && v[0] == '0') ||
                       (vlen == 5 && memcmp(v, "false", 5) == 0)) {
                out->persistent = false;
            } else {
                snprintf(err, errlen, "bad persistent '%s' (1 or 0) in '%s'",
                         util_show(tmp, sv, sizeof sv), shown);
                return -1;
            }
        } else if (is_unix && klen == 2 && memcmp(q, "db", 2) == 0) {
            int db = parse_db(v, vlen);

            if (db < 0) {
                snprintf(err, errlen, "bad db '%s' in '%s'",
                         util_show(tmp, sv, sizeof sv), shown);
                return -1;
            }
            out->db = db;
        } else {
            snprintf(tmp, sizeof tmp, "%.*s", (int)klen, q);
            snprintf(err, errlen, "unknown parameter '%s' in '%s'",
                     util_show(tmp, sv, sizeof sv), shown);
            return -1;
        }
        q = amp != NULL ? amp + 1 : end;
    }
    return 0;
}

/* uri_decode_part: percent-decodes s[0..n) into *dst, naming what (user,
 * password) in the error. */
static int uri_decode_part(const char *s, size_t n, char **dst,
                           const char *what, const char *shown, char *err,
                           size_t errlen)
{
    int rc = pct_decode(s, n, dst);
    if (rc != 0) {
        if (rc == -2) {
            snprintf(err, errlen, "out of memory");
        } else {
            snprintf(err, errlen, "bad %%-escape in %s in '%s'", what, shown);
        }
        return -1;
    }
    return 0;
}

/* uri_userinfo: "user:password" (n bytes) into out->user (NULL when empty)
 * and out->password, both percent-decoded. A bare "user" (an ACL user whose
 * password comes from --redis-password-file or REDLOCKD_REDIS_PASSWORD)
 * leaves out->password NULL; config_load() insists that one is given. */
static int uri_userinfo(const char *s, size_t n, struct node_addr *out,
                        const char *shown, char *err, size_t errlen)
{
    const char *colon = memchr(s, ':', n);
    size_t ulen, plen;

    if (colon == NULL) {
        if (n == 0) {
            snprintf(err, errlen,
                     "credentials must be user@, user:password@ or "
                     ":password@ in '%s'",
                     shown);
            return -1;
        }
        return uri_decode_part(s, n, &out->user, "user", shown, err, errlen);
    }
    ulen = (size_t)(colon - s);
    plen = n - ulen - 1;
    if (plen == 0) {
        snprintf(err, errlen, "empty password in '%s'", shown);
        return -1;
    }
    if (ulen > 0 &&
        uri_decode_part(s, ulen, &out->user, "user", shown, err, errlen) != 0) {
        return -1;
    }
    return uri_decode_part(colon + 1, plen, &out->password, "password", shown,
                           err, errlen);
}

/* uri_tcp: "host[:port][/db][?query]" (the part after the userinfo). */
static int uri_tcp(const char *s, struct node_addr *out, const char *shown,
                   char *err, size_t errlen)
{
    const char *q = strchr(s, '?');
    const char *end = q != NULL ? q : s + strlen(s);
    const char *slash = memchr(s, '/', (size_t)(end - s));
    const char *auth_end = slash != NULL ? slash : end;
    const char *host = s, *host_end, *port = NULL;
    char sv[SHOWN_MAX + 4], tmp[SHOWN_MAX + 1];

    if (s[0] == '[') {
        const char *close = memchr(s, ']', (size_t)(auth_end - s));

        if (close == NULL || !valid_ipv6(s + 1, (size_t)(close - s - 1))) {
            snprintf(err, errlen, "bad IPv6 address in '%s'", shown);
            return -1;
        }
        host = s + 1;
        host_end = close;
        if (close + 1 < auth_end) {
            if (close[1] != ':') {
                snprintf(err, errlen, "bad IPv6 address in '%s'", shown);
                return -1;
            }
            port = close + 2;
        }
    } else {
        const char *colon = memchr(s, ':', (size_t)(auth_end - s));

        if (colon != NULL &&
            memchr(colon + 1, ':', (size_t)(auth_end - colon - 1)) != NULL) {
            snprintf(err, errlen,
                     "IPv6 addresses go in brackets ([::1]:6379) in '%s'",
                     shown);
            return -1;
        }
        host_end = colon != NULL ? colon : auth_end;
        port = colon != NULL ? colon + 1 : NULL;
        if (host_end == host) {
            snprintf(err, errlen, "missing host in '%s'", shown);
            return -1;
        }
        if (!valid_host(host, (size_t)(host_end - host))) {
            snprintf(tmp, sizeof tmp, "%.*s", (int)(host_end - host), host);
            snprintf(err, errlen, "bad host '%s' in '%s'",
                     util_show(tmp, sv, sizeof sv), shown);
            return -1;
        }
    }
    out->port = DEFAULT_REDIS_PORT;
    if (port != NULL) {
        size_t plen = (size_t)(auth_end - port);

        out->port = parse_port(port, plen);
        if (out->port < 0 && strspn(port, "0123456789") < plen) {
            /* "redis://user:pw" lands here: never quote a non-number. */
            snprintf(err, errlen, "bad port (not a number) in '%s'", shown);
            return -1;
        }
        if (out->port < 0) {
            snprintf(tmp, sizeof tmp, "%.*s", (int)plen, port);
            snprintf(err, errlen, "bad port '%s' in '%s'",
                     util_show(tmp, sv, sizeof sv), shown);
            return -1;
        }
    }
    if (slash != NULL && slash + 1 < end) {
        int db = parse_db(slash + 1, (size_t)(end - slash - 1));

        if (db < 0) {
            snprintf(tmp, sizeof tmp, "%.*s", (int)(end - slash - 1),
                     slash + 1);
            snprintf(err, errlen, "bad db '%s' in '%s'",
                     util_show(tmp, sv, sizeof sv), shown);
            return -1;
        }
        out->db = db;
    }
    out->host = strndup(host, (size_t)(host_end - host));
    if (out->host == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (q != NULL &&
        uri_query(q + 1, strlen(q + 1), false, out, shown, err, errlen)) {
        return -1;
    }
    return 0;
}

/* uri_unix: "/absolute/path[?query]" (the part after the userinfo). */
static int uri_unix(const char *s, struct node_addr *out, const char *shown,
                    char *err, size_t errlen)
{
    const char *q = strchr(s, '?');
    size_t n = q != NULL ? (size_t)(q - s) : strlen(s);

    if (n == 0) {
        snprintf(err, errlen, "missing socket path in '%s'", shown);
        return -1;
    }
    if (s[0] != '/') {
        snprintf(err, errlen,
                 "socket path must be absolute (unix:///path) in '%s'", shown);
        return -1;
    }
    if (n > UNIX_PATH_MAX) {
        snprintf(err, errlen, "socket path longer than %zu bytes in '%s'",
                 UNIX_PATH_MAX, shown);
        return -1;
    }
    out->path = strndup(s, n);
    if (out->path == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (q != NULL &&
        uri_query(q + 1, strlen(q + 1), true, out, shown, err, errlen)) {
        return -1;
    }
    return 0;
}

/* nodeuri_parse: parses uri into out (zeroed first; its strings are
 * heap copies, freed by nodeuri_free):
 *   redis://[[user]:password@ | user@]host[:port][/db][?persistent=1]
 *     host a name, IPv4 or [IPv6]; port defaults to 6379; db 0..1000000
 *     (SELECT only when > 0); user and password are percent-decoded; with
 *     user@ alone the password comes from --redis-password-file;
 *   rediss://...: the same over TLS (see the --tls-* settings);
 *   unix:///absolute/path.sock[?db=N][&persistent=1]
 *     also unix://[user]:password@/path.sock and unix://user@/path.sock.
 * persistent is 1/0/true/false. Returns 0, or -1 with one line in err that
 * shows the URI with its password as "***"; out is then empty. */
int nodeuri_parse(const char *uri, struct node_addr *out, char *err,
                  size_t errlen)
{
    char shown[SHOWN_MAX + 4];
    const char *rest, *at;
    bool is_unix;
    int rc;

    memset(out, 0, sizeof *out);
    if (uri == NULL) {
        snprintf(err, errlen, "missing node URI");
        return -1;
    }
    nodeuri_redact(uri, shown, sizeof shown);
    if (strncasecmp(uri, "redis://", 8) == 0) {
        is_unix = false;
        rest = uri + 8;
    } else if (strncasecmp(uri, "unix://", 7) == 0) {
        is_unix = true;
        rest = uri + 7;
    } else if (strncasecmp(uri, "rediss://", 9) == 0) {
        is_unix = false;
        rest = uri + 9;
        out->tls = true;
    } else {
        snprintf(err, errlen,
                 "'%s' is not a node URI (redis://host:port or "
                 "unix:///path/redis.sock)",
                 shown);
        return -1;
    }
    out->kind = is_unix ? NODE_ADDR_UNIX : NODE_ADDR_TCP;
    /* The userinfo ends at the last '@': an unencoded '@', '/' or '?' in a
     * password still lands in the password, and nothing after it can be
     * taken for one. So a unix path cannot hold an '@'. */
    at = strrchr(rest, '@');
    if (at != NULL && is_unix && rest[0] == '/') {
        snprintf(err, errlen,
                 "'@' in a socket path is not supported (credentials go "
                 "first: unix://:password@/path) in '%s'",
                 shown);
        return -1;
    }
    if (at != NULL) {
        if (uri_userinfo(rest, (size_t)(at - rest), out, shown, err, errlen) !=
            0) {
            nodeuri_free(out);
            return -1;
        }
        rest = at + 1;
    }
    rc = is_unix ? uri_unix(rest, out, shown, err, errlen)
                 : uri_tcp(rest, out, shown, err, errlen);
    if (rc != 0) {
        nodeuri_free(out);
        return -1;
    }
    out->tls = strncasecmp(uri, "rediss://", 9) == 0;
    if (is_unix) {
        snprintf(out->display, sizeof out->display, "unix:%s", out->path);
    } else if (strchr(out->host, ':') != NULL) {
        snprintf(out->display, sizeof out->display, "[%s]:%d", out->host,
                 out->port);
    } else {
        snprintf(out->display, sizeof out->display, "%s:%d", out->host,
                 out->port);
    }
    if (out->db > 0) {
        size_t len = strlen(out->display);

        snprintf(out->display + len, sizeof out->display - len, "/%d", out->db);
    }
    return 0;
}

/* nodeuri_free: frees addr's strings (wiping the password first) and
 * zeroes it; safe to call again and on a zeroed addr. */
void nodeuri_free(struct node_addr *addr)
{
    if (addr == NULL) {
        return;
    }
    if (addr->password != NULL) {
        explicit_bzero(addr->password, strlen(addr->password));
    }
    free(addr->host);
    free(addr->path);
    free(addr->user);
    free(addr->password);
    memset(addr, 0, sizeof *addr);
}

/* host_same: a and b name the same host as written: IP literals compared
 * as addresses ("::1" and "0:0::1"), names without case and a final '.'.
 * No DNS: "localhost" and "127.0.0.1" differ. */
static bool host_same(const char *a, const char *b)
{
    unsigned char aa[sizeof(struct in6_addr)], ba[sizeof(struct in6_addr)];
    size_t an = strlen(a), bn = strlen(b);

    if (inet_pton(AF_INET6, a, aa) == 1 && inet_pton(AF_INET6, b, ba) == 1) {
        return memcmp(aa, ba, sizeof(struct in6_addr)) == 0;
    }
    if (inet_pton(AF_INET, a, aa) == 1 && inet_pton(AF_INET, b, ba) == 1) {
        return memcmp(aa, ba, sizeof(struct in_addr)) == 0;
    }
    an -= an > 1 && a[an - 1] == '.';
    bn -= bn > 1 && b[bn - 1] == '.';
    return an == bn && strncasecmp(a, b, an) == 0;
}

/* path_next: the next component of a unix path at *p (n bytes into *len),
 * skipping empty and "." ones; false at the end. */
static bool path_next(const char **p, size_t *len)
{
    for (;;) {
        *p += strspn(*p, "/");
        *len = strcspn(*p, "/");
        if (*len == 0) {
            return false;
        }
        if (*len != 1 || (*p)[0] != '.') {
            return true;
        }
        *p += 1;
    }
}

/* path_same: a and b are the same absolute path once "//" and "/./" are
 * collapsed. ".." and symlinks are left alone: resolving them needs the
 * file system, and a node's socket may not exist yet. */
static bool path_same(const char *a, const char *b)
{
    size_t al, bl;

    for (;;) {
        bool more_a = path_next(&a, &al);
        bool more_b = path_next(&b, &bl);

        if (!more_a || !more_b) {
            return more_a == more_b;
        }
        if (al != bl || memcmp(a, b, al) != 0) {
            return false;
        }
        a += al;
        b += bl;
    }
}

/* nodeuri_same_server: a and b reach the same Redis server, whatever their
 * db, credentials or ?persistent. */
bool nodeuri_same_server(const struct node_addr *a, const struct node_addr *b)
{
    if (a->kind != b->kind) {
        return false;
    }
    if (a->kind == NODE_ADDR_UNIX) {
        return path_same(a->path, b->path);
    }
    return a->port == b->port && host_same(a->host, b->host);
}
