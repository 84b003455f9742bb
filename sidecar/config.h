/* config.h: every setting of redlockd, declared once in config.c's table.
 *
 * Precedence: command-line flags over environment over --config FILE over
 * defaults. config_load() validates everything; the daemon never starts with
 * a value it would later have to refuse. */
#ifndef REDLOCKD_CONFIG_H
#define REDLOCKD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "nodeuri.h"

#define CONFIG_MAX_NODES 32

/* All settings. Owned by the caller of config_load(); config_free() releases
 * every string and the node array. */
struct config {
    struct node_addr nodes[CONFIG_MAX_NODES];
    int n_nodes;
    char *socket_path;     /* default "./redlockd.sock" */
    char *prefix;          /* key prefix, default "redlock:" */
    char *config_file;     /* --config, NULL when none */
    double drift_factor;   /* default 0.01, range 0..0.5 */
    int node_timeout_ms;   /* per-command deadline on a node, default 250 */
    size_t max_line_bytes; /* NDJSON line / HTTP body limit, default 65536 */
    int max_connections;   /* client connections, default 10240 */
    int max_locks;         /* locks held by this daemon, default 1000000 */
    int max_waiters;       /* waiting acquires in this daemon, default 100000 */
    int max_inflight;      /* requests in flight per connection, default 1024 */
    int max_conn_locks;    /* locks held per connection, default 100000 */
    int max_conn_waiters;  /* waiting acquires per connection, default 1024 */
    int socket_mode;       /* permission bits of the socket, default 0660 */
    enum log_level log_level;   /* default LOG_INFO */
    enum log_format log_format; /* default LOG_FORMAT_TEXT */
    int shutdown_timeout_ms;    /* bound on releasing locks at exit, 2000 */
    char *metrics_listen;      /* "host:port" TCP for /metrics, NULL when off */
    bool dev;                  /* --dev: embedded 5-node cluster */
    char *redis_server;        /* --dev: redis-server binary, "redis-server" */
    char *redis_password_file; /* password for nodes whose URI has none */
    char *allow_uid;           /* "1000,1001": peers allowed (SO_PEERCRED) */
    char *allow_gid;           /* "100": peer groups allowed */
    unsigned allow_uids[16];
    int n_allow_uids; /* 0: any uid */
    unsigned allow_gids[16];
    int n_allow_gids;            /* 0: any gid */
    int quarantine_ms;           /* restart quarantine; 0: the largest TTL seen,
                                    at least the default TTL */
    bool unsafe_no_quarantine;   /* testing only: count restarted nodes */
    bool unsafe_no_fence_repair; /* testing only: no counter repair */
    bool acquire_script;         /* testing: the script path on any Redis */
    char *tls_ca_file;           /* CAs trusted for rediss://, NULL: system */
    char *tls_server_name;       /* name checked and sent (SNI), NULL: host */
    char *tls_cert_file;         /* client certificate chain (mutual TLS) */
    char *tls_key_file;          /* its private key; mode 0600 or stricter */
    bool tls_insecure_skip_verify; /* unsafe: no certificate checks */
};

enum config_result {
    CONFIG_OK = 0,    /* run the daemon */
    CONFIG_EXIT = 1,  /* --help or --version printed: exit 0 */
    CONFIG_ERROR = 2, /* err holds one line naming the bad value: exit 2 */
};

/* config_load: fills cfg from defaults, then the JSON file named by --config
 * (if any), then the environment (REDLOCKD_NODES, REDLOCKD_SOCKET,
 * REDLOCKD_PREFIX, REDLOCKD_LOG_LEVEL, REDLOCKD_LOG_FORMAT,
 * REDLOCKD_REDIS_PASSWORD, which drops the file's redis_password_file),
 * then the flags in argv. Prints --help/--version
 * text to stdout. On CONFIG_ERROR, err holds a message such as "--drift-factor:
 * must be a number in 0..0.5, got 'x'". The caller must config_free() cfg in
 * every case. */
enum config_result config_load(struct config *cfg, int argc, char **argv,
                               char *err, size_t errlen);

/* config_add_node: appends a parsed URI to cfg; -1 with err for a bad URI,
 * when full, or when it names a server already listed (same host and port,
 * or same socket path, whatever the db): one server must not count as two
 * Redlock votes. */
int config_add_node(struct config *cfg, const char *uri, char *err,
                    size_t errlen);

/* config_connect_timeout_ms: deadline of a connect and its handshake to a
 * node, derived from the command deadline: 10 node timeouts, at least 1 s. */
int config_connect_timeout_ms(const struct config *cfg);

/* Descriptors the daemon holds per node at most: its command connection and
 * its pub/sub wake-up connection, each with a host lookup's pipe and the
 * resolver's socket while it reconnects. */
#define CONFIG_FDS_PER_NODE 8
/* And besides: stdin/stdout/stderr, the event loop's epoll and signal
 * descriptors, and a few held briefly (TLS files, --dev's children). */
#define CONFIG_FDS_BASE 16

/* config_fd_need: descriptors the daemon may need at once with cfg: one per
 * client connection up to cfg->max_connections, server_fds for what the
 * server holds besides (server_fd_reserve()), and its own per node and
 * fixed ones. An upper bound, compared with RLIMIT_NOFILE at start. */
long config_fd_need(const struct config *cfg, int server_fds);

void config_free(struct config *cfg);

/* config_usage: the --help text. */
const char *config_usage(void);

#endif
