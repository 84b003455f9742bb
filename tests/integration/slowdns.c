/* slowdns.c: an LD_PRELOAD shim for test_resolve.py that makes host name
 * lookups slow, as a loaded DNS server would: getaddrinfo() of a name that
 * ends in ".slow.test" sleeps SLOWDNS_MS milliseconds (default 1000), then
 * answers for 127.0.0.1, or sooner: never past SLOWDNS_UNTIL (AI_NUMERICHOST
 * lookups, which never ask a resolver, fail at once as they would). Every other
 * lookup goes to the real one. Build: cc -shared -fPIC -o slowdns.so slowdns.c
 * -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int gai_fn(const char *, const char *, const struct addrinfo *,
                   struct addrinfo **);

int getaddrinfo(const char *node, const char *service,
                const struct addrinfo *hints, struct addrinfo **res)
{
    gai_fn *real = (gai_fn *)dlsym(RTLD_NEXT, "getaddrinfo");
    static const char suffix[] = ".slow.test";
    size_t n = node != NULL ? strlen(node) : 0;
    size_t m = sizeof(suffix) - 1;
    bool numeric = hints != NULL && (hints->ai_flags & AI_NUMERICHOST);
    if (n > m && strcmp(node + n - m, suffix) == 0 && !numeric) {
        const char *s = getenv("SLOWDNS_MS");
        long ms = s != NULL ? atol(s) : 1000;
        /* SLOWDNS_UNTIL (Unix time, seconds): no lookup sleeps past it, so
         * no thread is left in a lookup once the test is done with them. */
        const char *u = getenv("SLOWDNS_UNTIL");
        if (u != NULL) {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            double left = atof(u) - (double)now.tv_sec - now.tv_nsec / 1e9;
            ms = left <= 0 ? 0 : left * 1000 < ms ? (long)(left * 1000) : ms;
        }
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
        return real("127.0.0.1", service, hints, res);
    }
    return real(node, service, hints, res);
}
