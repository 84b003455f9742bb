/* dev.h: the --dev embedded cluster: five throw-away redis-server children
 * on unix sockets in a private temp dir, removed on exit. */
#ifndef REDLOCKD_DEV_H
#define REDLOCKD_DEV_H

#include <stdbool.h>
#include <stddef.h>

struct config;
struct dev_cluster;

/* dev_start: makes the temp dir, starts n redis-server processes (binary
 * from cfg->redis_server), waits until each accepts connections, and adds
 * their unix:// URIs to cfg. Returns NULL with a clear message in err (for
 * example when redis-server is not installed), also when a stop signal
 * arrived meanwhile (dev_stop_pending()); everything started is gone then.
 * The children start with no signal blocked, whatever the caller blocks. */
struct dev_cluster *dev_start(struct config *cfg, int n, char *err,
                              size_t errlen);

/* dev_stop_pending: whether SIGTERM, SIGINT or SIGHUP is pending (the
 * caller blocks them during start-up); dev_start gives up when one is. */
bool dev_stop_pending(void);

/* dev_print_examples: ready-to-paste socat and curl lines for socket. */
void dev_print_examples(const char *socket_path);

/* dev_stop: terminates the children, waits for them and removes the temp
 * dir. Safe with NULL. */
void dev_stop(struct dev_cluster *d);

#endif
