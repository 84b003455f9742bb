/* resolve.h: node host names to addresses, off the event loop.
 *
 * getaddrinfo() blocks for as long as the resolver takes: seconds when a
 * DNS server is slow or gone (CoreDNS under load), and the daemon has one
 * thread, so every renewal would wait for it. A lookup runs here on a
 * short-lived thread of its own with the system's getaddrinfo (same
 * /etc/hosts, nsswitch and resolv.conf rules as before), and its answer
 * comes back through the event loop. Numeric addresses never leave the
 * caller (resolve_numeric). The caller bounds the wait (its connect
 * deadline) and cancels; a cancelled thread's late answer is dropped. */
#ifndef REDLOCKD_RESOLVE_H
#define REDLOCKD_RESOLVE_H

struct addrinfo;
struct event_base;
struct resolve;

/* Runs once on the loop: res is the address list (owned by the lookup,
 * valid only inside the callback), or NULL and err says why ("Name or
 * service not known"). The lookup is freed when the callback returns. */
typedef void resolve_fn(const struct addrinfo *res, const char *err,
                        void *priv);

/* resolve_numeric: when host is an IPv4 or IPv6 literal, *res gets its
 * address with port (free it with freeaddrinfo) and 0 is returned; -1
 * when host is a name. Never blocks. */
int resolve_numeric(const char *host, int port, struct addrinfo **res);

/* resolve_start: looks host:port up (TCP, any family) on a thread; cb runs
 * on base's loop once, unless resolve_cancel() came first. Returns NULL,
 * with errno set, when no thread or memory is available, or when too many
 * lookups are in flight (EAGAIN). */
struct resolve *resolve_start(struct event_base *base, const char *host,
                              int port, resolve_fn *cb, void *priv);

/* resolve_cancel: the callback will not run. Not from inside it. */
void resolve_cancel(struct resolve *r);

#endif
