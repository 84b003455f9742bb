/* redlockctl.c: the command-line client of redlockd.
 *
 * `redlockctl lock RESOURCE -- CMD [ARG]...` holds a lock while CMD runs,
 * like flock(1), `etcdctl lock` or `consul lock`:
 *
 *   connect --> acquire, renew:true --> fork/exec CMD --> wait --> release
 *      |               |                       |                     |
 *   unreachable:    busy, done, ...:     signals to redlockctl   exit with
 *   exit 69         exit 1               go on to CMD            CMD's status
 *
 *   While CMD runs, a "lost" event or the end of the connection means the
 *   lock is gone: SIGTERM to CMD, SIGKILL --kill-after ms later, exit 75.
 *
 * The daemon extends a renew:true lock every ttl/3 for as long as the NDJSON
 * connection stays open, and releases it when the connection closes, so the
 * connection is the lease: redlockctl keeps it open exactly while CMD runs.
 *
 * The script commands (acquire, release, extend, complete, health, ping,
 * metrics) send one HTTP/1.1 request over the same unix socket and print the
 * JSON answer. They use HTTP because a lock taken on an NDJSON connection is
 * released as soon as that connection closes, that is when redlockctl exits;
 * HTTP locks are not tied to a connection.
 *
 * Plain POSIX: one unix socket, poll(2) with deadlines, a self-pipe for
 * signals. cJSON builds the requests and parses the answers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* SOCK_CLOEXEC, MSG_NOSIGNAL, SI_KERNEL; meson sets it */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#ifndef REDLOCKD_VERSION
#define REDLOCKD_VERSION "unknown"
#endif

/* Exit statuses; sysexits.h numbers where one fits. */
enum {
    RC_OK = 0,            /* success (lock: CMD's own status instead) */
    RC_FAIL = 1,          /* the daemon answered with an error */
    RC_USAGE = 2,         /* bad command line, or bad_request from the daemon */
    RC_UNAVAILABLE = 69,  /* EX_UNAVAILABLE: no usable answer from redlockd */
    RC_OSERR = 71,        /* EX_OSERR: fork, pipe, out of memory */
    RC_LOST = 75,         /* EX_TEMPFAIL: the lock was lost while CMD ran */
    RC_CANNOT_EXEC = 126, /* CMD exists but could not be run */
    RC_NOT_FOUND = 127,   /* CMD was not found */
};

#define TOKEN_LEN 32                   /* lowercase hex characters */
#define RESOURCE_MAX 512               /* bytes, as the daemon allows */
#define RESPONSE_MAX (4 * 1024 * 1024) /* largest answer we read */
#define DEFAULT_SOCKET "./redlockd.sock"
#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_KILL_AFTER_MS 10000
#define RELEASE_TIMEOUT_MS 5000 /* cap on waiting for the final release */
#define ERR_LEN 512

/* The daemon's largest wait_ms: lock waits longer in rounds of at most this. */
#define WAIT_ROUND_MS 300000
#define WAIT_MAX_MS 9007199254740991LL /* 2^53 - 1: a JSON-safe integer */
#define ID_ACQUIRE 1 /* NDJSON request ids on the lock's connection */
#define ID_RELEASE 2

/* ---- command line -------------------------------------------------------- */

enum opt_id {
    OPT_SOCKET,     /* -s, --socket PATH */
    OPT_TIMEOUT,    /* --timeout MS */
    OPT_QUIET,      /* -q, --quiet */
    OPT_HELP,       /* -h, --help */
    OPT_VERSION,    /* -V, --version */
    OPT_TTL,        /* --ttl MS */
    OPT_WAIT,       /* --wait MS */
    OPT_FENCE,      /* --fence */
    OPT_KEEP,       /* --keep MS */
    OPT_KILL_AFTER, /* --kill-after MS */
    OPT_PERMITS,    /* --permits N */
};

#define BIT(id) (1u << (id))
#define GLOBAL_OPTS                                                            \
    (BIT(OPT_SOCKET) | BIT(OPT_TIMEOUT) | BIT(OPT_QUIET) | BIT(OPT_HELP) |     \
     BIT(OPT_VERSION))

struct opt_def {
    const char *name; /* long name, without the leading "--" */
    char short_name;  /* 0 = none */
    enum opt_id id;
    bool has_arg;     /* takes a value (every value is an integer but one) */
    int64_t min, max; /* range of an integer value */
};

static const struct opt_def opt_defs[] = {
    {"socket", 's', OPT_SOCKET, true, 0, 0},
    {"timeout", 0, OPT_TIMEOUT, true, 1, 3600000},
    {"quiet", 'q', OPT_QUIET, false, 0, 0},
    {"help", 'h', OPT_HELP, false, 0, 0},
    {"version", 'V', OPT_VERSION, false, 0, 0},
    {"ttl", 0, OPT_TTL, true, 10, 86400000},
    {"wait", 0, OPT_WAIT, true, 0, WAIT_MAX_MS},
    {"fence", 0, OPT_FENCE, false, 0, 0},
    {"keep", 0, OPT_KEEP, true, 1, 2592000000LL},
    {"kill-after", 0, OPT_KILL_AFTER, true, 0, 86400000},
    {"permits", 0, OPT_PERMITS, true, 2, 1024},
};

#define N_OPT_DEFS (sizeof(opt_defs) / sizeof(opt_defs[0]))

struct opts {
    const char *socket;    /* --socket, $REDLOCKD_SOCKET or the default */
    int64_t timeout_ms;    /* --timeout: budget of one request (+ --wait) */
    int64_t ttl_ms;        /* --ttl; -1 = not given: the daemon's default */
    int64_t wait_ms;       /* --wait; -1 = not given (0) */
    int64_t keep_ms;       /* --keep; -1 = not given: the daemon's default */
    int64_t kill_after_ms; /* --kill-after */
    int64_t permits;       /* --permits; -1 = not given: a lock */
    bool fence;            /* --fence */
    bool quiet;            /* --quiet */
    const char *pos[2];    /* positional arguments, borrowed from argv */
    int npos;
    char **cmd; /* lock: the command after "--", borrowed from argv */
};

struct command {
    const char *name;
    unsigned opts; /* options allowed besides the global ones */
    int min_pos;   /* positional arguments */
    int max_pos;
    bool token_first; /* the first positional is a lock token */
    const char *args; /* synopsis of the arguments, for usage errors */
    int (*run)(const struct command *cmd, struct opts *o);
};

static int cmd_lock(const struct command *cmd, struct opts *o);
static int cmd_acquire(const struct command *cmd, struct opts *o);
static int cmd_token_op(const struct command *cmd, struct opts *o);
static int cmd_simple(const struct command *cmd, struct opts *o);
static int cmd_status(const struct command *cmd, struct opts *o);
static int cmd_locks(const struct command *cmd, struct opts *o);

static const struct command commands[] = {
    {"lock",
     BIT(OPT_TTL) | BIT(OPT_WAIT) | BIT(OPT_FENCE) | BIT(OPT_KILL_AFTER) |
         BIT(OPT_PERMITS),
     1, 1, false,
     "[--ttl MS] [--wait MS] [--fence] [--permits N] [--kill-after MS] "
     "RESOURCE -- CMD [ARG]...",
     cmd_lock},
    {"acquire",
     BIT(OPT_TTL) | BIT(OPT_WAIT) | BIT(OPT_FENCE) | BIT(OPT_PERMITS), 1, 1,
     false, "[--ttl MS] [--wait MS] [--fence] [--permits N] RESOURCE",
     cmd_acquire},
    {"release", 0, 1, 2, true, "TOKEN [RESOURCE]", cmd_token_op},
    {"extend", BIT(OPT_TTL), 1, 2, true, "[--ttl MS] TOKEN [RESOURCE]",
     cmd_token_op},
    {"complete", BIT(OPT_KEEP), 1, 2, true, "[--keep MS] TOKEN [RESOURCE]",
     cmd_token_op},
    {"status", BIT(OPT_FENCE), 1, 1, false, "[--fence] RESOURCE", cmd_status},
    {"locks", 0, 0, 1, false, "[PREFIX]", cmd_locks},
    {"health", 0, 0, 0, false, "", cmd_simple},
    {"ping", 0, 0, 0, false, "", cmd_simple},
    {"metrics", 0, 0, 0, false, "", cmd_simple},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static const char help_text[] =
    "Usage: redlockctl [OPTION]... COMMAND [ARG]...\n"
    "\n"
    "Client of redlockd, the Redlock daemon, over its unix socket.\n"
    "\n"
    "Commands:\n"
    "  lock [--ttl MS] [--wait MS] [--fence] [--kill-after MS]\n"
    "       RESOURCE -- CMD [ARG]...\n"
    "      Hold a lock on RESOURCE while CMD runs, then release it, and exit\n"
    "      with CMD's status (128+N if CMD died of signal N). The daemon\n"
    "      renews the lock every ttl/3 while redlockctl runs. CMD inherits\n"
    "      stdin, stdout and stderr, and gets REDLOCK_TOKEN, "
    "REDLOCK_RESOURCE\n"
    "      and (with --fence) REDLOCK_FENCE in its environment (with\n"
    "      --permits, one of N permits, and REDLOCK_PERMIT). SIGINT,\n"
    "      SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to "
    "CMD.\n"
    "      If the lock is lost (the daemon could not renew it, or the\n"
    "      connection to the daemon dropped), CMD gets SIGTERM, then SIGKILL\n"
    "      --kill-after MS later (default 10000; 0: SIGKILL at once), and\n"
    "      redlockctl exits 75.\n"
    "  acquire [--ttl MS] [--wait MS] [--fence] RESOURCE\n"
    "      Take a lock that outlives redlockctl: it is taken over HTTP, is\n"
    "      not tied to a connection and is not renewed, so it lasts until\n"
    "      release, complete or its ttl. Prints the answer; with --quiet\n"
    "      only the token (\"TOKEN FENCE\" with --fence).\n"
    "  release TOKEN [RESOURCE]\n"
    "      Give a lock back.\n"
    "  extend [--ttl MS] TOKEN [RESOURCE]\n"
    "      Push a lock's expiry out to ttl from now (default: the ttl it was\n"
    "      taken with).\n"
    "  complete [--keep MS] TOKEN [RESOURCE]\n"
    "      Mark RESOURCE done for MS (default 1 day) and drop the lock; until\n"
    "      the mark expires every acquire of RESOURCE answers \"done\".\n"
    "  status [--fence] RESOURCE\n"
    "      What the nodes say of RESOURCE: free, held or done (-q: just\n"
    "      that), PTTL, whether this daemon holds it. Never a token.\n"
    "  locks [PREFIX]  This daemon's locks, one JSON object a line.\n"
    "  health    Per-node state; exits 1 when a quorum is not connected.\n"
    "  ping      Is the daemon alive?\n"
    "  metrics   Prometheus metrics, as text.\n"
    "\n"
    "Script commands print the daemon's JSON answer on stdout, success or\n"
    "not. Give RESOURCE to release, extend or complete a lock taken through\n"
    "another daemon.\n"
    "\n"
    "Options (before or after COMMAND):\n"
    "  -s, --socket PATH    the daemon's socket (default $REDLOCKD_SOCKET, "
    "else\n"
    "                       ./redlockd.sock)\n"
    "      --ttl MS         lock time to live, 10..86400000 (daemon "
    "default\n"
    "                       30000)\n"
    "      --wait MS        while RESOURCE is busy, keep trying this long\n"
    "                       (default 0: busy at once); lock: any length, "
    "in\n"
    "                       rounds of 300000 (standbys stay in line);\n"
    "                       acquire: 0..300000\n"
    "      --fence          also get a fencing token\n"
    "      --permits N      lock, acquire: one of N permits, 2..1024\n"
    "      --keep MS        complete: life of the done mark, 1..2592000000\n"
    "      --kill-after MS  lock: SIGKILL this long after SIGTERM, "
    "0..86400000\n"
    "      --timeout MS     give up on a silent daemon after MS (plus "
    "--wait),\n"
    "                       1..3600000 (default 10000)\n"
    "  -q, --quiet          print no JSON (acquire prints the token)\n"
    "  -h, --help           print this help\n"
    "  -V, --version        print the version\n"
    "\n"
    "Exit status:\n"
    "  0        success (lock: CMD's own status)\n"
    "  1        the daemon answered with an error (busy, done, not_held,\n"
    "           no_quorum, ...); health: no quorum\n"
    "  2        usage error, or a value the daemon refused (bad_request)\n"
    "  69       redlockd unreachable, silent, or not speaking its protocol\n"
    "  71       local system error (fork, pipe, memory)\n"
    "  75       lock: the lock was lost while CMD ran; CMD was terminated\n"
    "  126/127  lock: CMD could not be run / was not found\n"
    "\n"
    "Examples:\n"
    "  redlockctl lock --ttl 10000 --wait 60000 nightly-backup -- "
    "./backup.sh\n"
    "  tok=$(redlockctl -q acquire --ttl 60000 orders:42) && work &&\n"
    "      redlockctl -q release \"$tok\" orders:42\n";

/* Prints "redlockctl: <message>" and a pointer to --help on stderr.
 * Returns -1, for `return usage_error(...)`. */
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("redlockctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see 'redlockctl --help')\n", stderr);
    return -1;
}

/* Parses an integer option value s of option def into *out. Returns 0, or -1
 * after a usage error. */
static int parse_int(const struct opt_def *def, const char *s, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (s[0] == '\0' || s[0] == '-' || s[0] == '+' || *end != '\0' ||
        errno != 0 || v < def->min || v > def->max) {
        return usage_error("--%s: '%s' is not an integer in "
                           "%" PRId64 "..%" PRId64 " (milliseconds)",
                           def->name, s, def->min, def->max);
    }
    *out = v;
    return 0;
}

/* Looks an option up by long name (name_len bytes of name) or, when name is
 * NULL, by short letter. Returns its definition or NULL. */
static const struct opt_def *opt_find(const char *name, size_t name_len,
                                      char letter)
{
    for (size_t i = 0; i < N_OPT_DEFS; i++) {
        const struct opt_def *d = &opt_defs[i];
        if (name == NULL) {
            if (d->short_name != 0 && d->short_name == letter) {
                return d;
            }
        } else if (strlen(d->name) == name_len &&
                   memcmp(d->name, name, name_len) == 0) {
            return d;
        }
    }
    return NULL;
}

/* Applies option def with value val (NULL for a flag) to o. Returns 0, 1
 * when --help or --version printed what they print, -1 on a usage error. */
static int opt_apply(const struct opt_def *def, const char *val, struct opts *o)
{
    switch (def->id) {
    case OPT_SOCKET:
        if (val[0] == '\0') {
            return usage_error("--socket: the path is empty");
        }
        o->socket = val;
        return 0;
    case OPT_TIMEOUT:
        return parse_int(def, val, &o->timeout_ms);
    case OPT_QUIET:
        o->quiet = true;
        return 0;
    case OPT_HELP:
        fputs(help_text, stdout);
        return 1;
    case OPT_VERSION:
        printf("redlockctl %s\n", REDLOCKD_VERSION);
        return 1;
    case OPT_TTL:
        return parse_int(def, val, &o->ttl_ms);
    case OPT_WAIT:
        return parse_int(def, val, &o->wait_ms);
    case OPT_FENCE:
        o->fence = true;
        return 0;
    case OPT_KEEP:
        return parse_int(def, val, &o->keep_ms);
    case OPT_KILL_AFTER:
        return parse_int(def, val, &o->kill_after_ms);
    case OPT_PERMITS:
        return parse_int(def, val, &o->permits);
    default:
        abort();
    }
}

/* Parses one option argv[*i] (and its value, which may be argv[*i + 1]) for
 * command cmd (NULL: before the command). Returns as opt_apply. */
static int parse_option(int argc, char **argv, int *i,
                        const struct command *cmd, struct opts *o)
{
    const char *arg = argv[*i];
    const char *val = NULL;
    const struct opt_def *def;
    if (arg[1] == '-') {
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t name_len = eq != NULL ? (size_t)(eq - name) : strlen(name);
        def = opt_find(name, name_len, 0);
        if (def == NULL) {
            return usage_error("unknown option '--%.*s'", (int)name_len, name);
        }
        if (eq != NULL) {
            if (!def->has_arg) {
                return usage_error("--%s takes no value", def->name);
            }
            val = eq + 1;
        }
    } else {
        def = arg[2] == '\0' ? opt_find(NULL, 0, arg[1]) : NULL;
        if (def == NULL) {
            return usage_error("unknown option '%s'", arg);
        }
    }
    if (def->has_arg && val == NULL) {
        if (*i + 1 >= argc) {
            return usage_error("--%s needs a value", def->name);
        }
        *i += 1;
        val = argv[*i];
    }
    if ((GLOBAL_OPTS & BIT(def->id)) == 0) {
        if (cmd == NULL) {
            return usage_error("--%s goes after the command", def->name);
        }
        if ((cmd->opts & BIT(def->id)) == 0) {
            return usage_error("%s does not take --%s", cmd->name, def->name);
        }
    }
    return opt_apply(def, val, o);
}

/* Checks that s is a lock token: 32 lowercase hex characters. */
static bool token_valid(const char *s)
{
    size_t n = strlen(s);
    if (n != TOKEN_LEN) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
            return false;
        }
    }
    return true;
}

/* Checks the positional arguments of cmd in o. Returns 0 or -1 after a usage
 * error. */
static int check_positionals(const struct command *cmd, const struct opts *o)
{
    if (o->npos < cmd->min_pos) {
        if (cmd->token_first && o->npos == 0) {
            return usage_error("%s: missing TOKEN (redlockctl %s %s)",
                               cmd->name, cmd->name, cmd->args);
        }
        return usage_error("%s: missing RESOURCE (redlockctl %s %s)", cmd->name,
                           cmd->name, cmd->args);
    }
    for (int k = 0; k < o->npos; k++) {
        const char *p = o->pos[k];
        if (cmd->token_first && k == 0) {
            if (!token_valid(p)) {
                return usage_error("%s: TOKEN must be the 32 lowercase hex "
                                   "characters acquire printed, not '%.64s'",
                                   cmd->name, p);
            }
            continue;
        }
        size_t n = strlen(p);
        if (n == 0 || n > RESOURCE_MAX) {
            return usage_error("%s: RESOURCE must be 1..%d bytes", cmd->name,
                               RESOURCE_MAX);
        }
    }
    if (cmd->run == cmd_lock && o->cmd == NULL) {
        return usage_error("lock: missing '--' and the command to run "
                           "(redlockctl lock %s)",
                           cmd->args);
    }
    if (cmd->run == cmd_lock && o->cmd[0] == NULL) {
        return usage_error("lock: missing the command after '--'");
    }
    if (cmd->run == cmd_acquire && o->wait_ms > WAIT_ROUND_MS) {
        /* One HTTP request is one wait in the daemon; lock waits longer. */
        return usage_error("acquire: --wait: at most %d (lock waits longer)",
                           WAIT_ROUND_MS);
    }
    return 0;
}

/* Parses the whole command line into o and *cmdp. Returns 0 to run the
 * command, 1 when --help or --version was served, -1 on a usage error. */
static int parse_args(int argc, char **argv, struct opts *o,
                      const struct command **cmdp)
{
    const struct command *cmd = NULL;
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0 && cmd != NULL && cmd->run == cmd_lock) {
            o->cmd = &argv[i + 1]; /* the rest is CMD, options and all */
            break;
        }
        if (!options_done && strcmp(arg, "--") == 0) {
            options_done = true; /* e.g. a RESOURCE that starts with '-' */
            continue;
        }
        if (!options_done && arg[0] == '-' && arg[1] != '\0') {
            int rc = parse_option(argc, argv, &i, cmd, o);
            if (rc != 0) {
                return rc;
            }
            continue;
        }
        if (cmd == NULL) {
            for (size_t k = 0; k < N_COMMANDS; k++) {
                if (strcmp(arg, commands[k].name) == 0) {
                    cmd = &commands[k];
                }
            }
            if (cmd == NULL) {
                return usage_error("unknown command '%.64s'", arg);
            }
            continue;
        }
        if (o->npos >= cmd->max_pos) {
            if (cmd->run == cmd_lock) {
                return usage_error("lock: unexpected '%.64s': put '--' "
                                   "between RESOURCE and the command",
                                   arg);
            }
            return usage_error("%s: unexpected argument '%.64s' "
                               "(redlockctl %s %s)",
                               cmd->name, arg, cmd->name, cmd->args);
        }
        o->pos[o->npos++] = arg;
    }
    if (cmd == NULL) {
        return usage_error("missing command");
    }
    *cmdp = cmd;
    return check_positionals(cmd, o);
}

/* ---- time and the unix socket -------------------------------------------- */

/* Milliseconds on the monotonic clock. */
static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The poll(2) timeout until deadline (ms, monotonic); -1 waits forever. */
static int poll_timeout(int64_t deadline)
{
    if (deadline < 0) {
        return -1;
    }
    int64_t left = deadline - now_ms();
    if (left <= 0) {
        return 0;
    }
    return left > INT32_MAX ? INT32_MAX : (int)left;
}

struct conn {
    int fd;           /* the unix socket; -1 when closed */
    const char *path; /* borrowed: the socket path, for messages */
    char *buf;        /* received bytes not consumed yet */
    size_t len;       /* bytes in buf */
    size_t cap;       /* size of buf */
};

/* Closes c's socket (if open) and frees its buffer. */
static void conn_close(struct conn *c)
{
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    free(c->buf);
    c->buf = NULL;
    c->len = 0;
    c->cap = 0;
}

/* Connects c to the unix socket at path before deadline. Returns 0, or -1
 * with err filled in. */
static int conn_open(struct conn *c, const char *path, int64_t deadline,
                     char *err, size_t errlen)
{
    struct sockaddr_un sa;
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->path = path;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errlen, "socket path too long (%zu bytes at most): %s",
                 sizeof(sa.sun_path) - 1, path);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (c->fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        goto error;
    }
    /* EAGAIN: the listen backlog is full; try again until the deadline. */
    for (int tries = 0; tries < 100000; tries++) {
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            return 0;
        }
        if (errno == EAGAIN && poll_timeout(deadline) > 0) {
            poll(NULL, 0, 5);
            continue;
        }
        if (errno == EINPROGRESS || errno == EINTR) {
            struct pollfd p = {c->fd, POLLOUT, 0};
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            int n = poll(&p, 1, poll_timeout(deadline));
            if (n == 0) {
                errno = ETIMEDOUT;
            } else if (n > 0 && getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr,
                                           &sl) == 0) {
                if (soerr == 0) {
                    return 0;
                }
                errno = soerr;
            }
        }
        break;
    }
    snprintf(err, errlen,
             "cannot connect to redlockd at %s: %s (is it running? "
             "see --socket and REDLOCKD_SOCKET)",
             path, strerror(errno));
error:
    conn_close(c);
    return -1;
}

/* Sends len bytes of data on c before deadline. Returns 0, or -1 with err
 * filled in. */
static int conn_send(struct conn *c, const char *data, size_t len,
                     int64_t deadline, char *err, size_t errlen)
{
    size_t off = 0;
    for (int rounds = 0; off < len && rounds < 1000000; rounds++) {
        ssize_t n = send(c->fd, data + off, len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            struct pollfd p = {c->fd, POLLOUT, 0};
            if (poll(&p, 1, poll_timeout(deadline)) == 0) {
                snprintf(err, errlen,
                         "redlockd at %s did not take the "
                         "request in time",
                         c->path);
                return -1;
            }
            continue;
        }
        snprintf(err, errlen, "sending to redlockd at %s: %s", c->path,
                 strerror(errno));
        return -1;
    }
    if (off < len) {
        snprintf(err, errlen, "sending to redlockd at %s: stalled", c->path);
        return -1;
    }
    return 0;
}

/* Reads what is available on c (non-blocking) into its buffer. Returns the
 * number of bytes read, 0 at end of stream, -2 when nothing is available
 * yet, -1 on an error or an answer over RESPONSE_MAX (err filled in). */
static ssize_t conn_recv(struct conn *c, char *err, size_t errlen)
{
    if (c->cap - c->len < 4096) {
        size_t cap = c->cap == 0 ? 8192 : c->cap * 2;
        if (cap > RESPONSE_MAX + 1) {
            snprintf(err, errlen, "answer from redlockd over %d bytes",
                     RESPONSE_MAX);
            return -1;
        }
        char *buf = realloc(c->buf, cap);
        if (buf == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        c->buf = buf;
        c->cap = cap;
    }
    ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return -2;
    }
    if (n < 0) {
        snprintf(err, errlen, "reading from redlockd at %s: %s", c->path,
                 strerror(errno));
        return -1;
    }
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    return n;
}

/* Takes the first complete line out of c's buffer. Returns it (malloc'd,
 * without the newline; the caller frees it) or NULL when there is none. */
static char *conn_take_line(struct conn *c)
{
    char *nl = c->len > 0 ? memchr(c->buf, '\n', c->len) : NULL;
    if (nl == NULL) {
        return NULL;
    }
    size_t n = (size_t)(nl - c->buf);
    char *line = malloc(n + 1);
    if (line == NULL) {
        return NULL;
    }
    memcpy(line, c->buf, n);
    line[n] = '\0';
    c->len -= n + 1;
    memmove(c->buf, nl + 1, c->len);
    c->buf[c->len] = '\0';
    return line;
}

/* ---- answers ------------------------------------------------------------- */

/* The string member name of object j, or NULL. */
static const char *json_str(const cJSON *j, const char *name)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, name);
    return cJSON_IsString(m) ? m->valuestring : NULL;
}

/* The first byte at or after p that is not JSON whitespace (or end). */
static const char *json_skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) {
        p++;
    }
    return p;
}

/* Skips the JSON string that starts at p (a '"'). Returns the byte after
 * its closing quote, or NULL when it does not end before end. */
static const char *json_skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\') {
            p++; /* the escaped byte cannot close the string */
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

/* Skips the JSON value that starts at p. Returns the byte after it, or NULL
 * when it does not end before end. */
static const char *json_skip_value(const char *p, const char *end)
{
    if (p < end && *p == '"') {
        return json_skip_string(p, end);
    }
    if (p < end && (*p == '{' || *p == '[')) {
        int depth = 0;
        while (p < end) {
            if (*p == '"') {
                if ((p = json_skip_string(p, end)) == NULL) {
                    return NULL;
                }
                continue;
            }
            if (*p == '{' || *p == '[') {
                depth++;
            } else if ((*p == '}' || *p == ']') && --depth == 0) {
                return p + 1;
            }
            p++;
        }
        return NULL;
    }
    const char *start = p;
    while (p < end && strchr(",}] \t\r\n", *p) == NULL) {
        p++;
    }
    return p > start ? p : NULL;
}

/* Writes the fence member of the JSON object text[0..len) to out (outlen
 * bytes) as decimal digits. cJSON holds numbers as doubles, which round
 * fences above 2^53, so the digits come from the text itself. Returns 0, or
 * -1 when there is no fence that is an integer in 0..UINT64_MAX. */
static int json_fence(const char *text, size_t len, char *out, size_t outlen)
{
    const char *end = text + len;
    const char *p = json_skip_ws(text, end);
    if (p >= end || *p != '{') {
        return -1;
    }
    p++;
    /* Every member takes at least 4 bytes ("":0), so len bounds the loop. */
    for (size_t k = 0; k < len; k++) {
        p = json_skip_ws(p, end);
        if (p >= end || *p != '"') {
            return -1;
        }
        const char *key = p + 1;
        if ((p = json_skip_string(p, end)) == NULL) {
            return -1;
        }
        size_t key_len = (size_t)(p - 1 - key);
        p = json_skip_ws(p, end);
        if (p >= end || *p != ':') {
            return -1;
        }
        const char *val = json_skip_ws(p + 1, end);
        if ((p = json_skip_value(val, end)) == NULL) {
            return -1;
        }
        if (key_len == 5 && memcmp(key, "fence", 5) == 0) {
            char digits[24];
            size_t n = (size_t)(p - val);
            if (n >= sizeof(digits)) {
                return -1;
            }
            for (size_t i = 0; i < n; i++) {
                if (val[i] < '0' || val[i] > '9') {
                    return -1; /* a sign, a fraction or an exponent */
                }
            }
            memcpy(digits, val, n);
            digits[n] = '\0';
            errno = 0;
            unsigned long long v = strtoull(digits, NULL, 10);
            if (errno != 0) {
                return -1; /* over UINT64_MAX */
            }
            int w = snprintf(out, outlen, "%llu", v);
            return w > 0 && (size_t)w < outlen ? 0 : -1;
        }
        p = json_skip_ws(p, end);
        if (p >= end || *p != ',') {
            return -1;
        }
        p++;
    }
    return -1;
}

/* Reports the failure answer j of operation what on resource (may be NULL)
 * on stderr. Returns the exit status: RC_USAGE for bad_request, else
 * RC_FAIL. */
static int report_error(const char *what, const char *resource, const cJSON *j)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    const char *code = json_str(e, "code");
    const char *msg = json_str(e, "message");
    if (code == NULL) {
        code = "error";
    }
    if (msg == NULL) {
        msg = "(no message)";
    }
    /* Some messages repeat the code ("not_held: unknown token"). */
    size_t clen = strlen(code);
    if (strncmp(msg, code, clen) == 0 && msg[clen] == ':' &&
        msg[clen + 1] == ' ') {
        msg += clen + 2;
    }
    if (resource != NULL && strcmp(code, "busy") == 0) {
        fprintf(stderr, "redlockctl: %s is busy\n", resource);
    } else if (resource != NULL && strcmp(code, "done") == 0) {
        fprintf(stderr, "redlockctl: %s is done: %s\n", resource, msg);
    } else {
        fprintf(stderr, "redlockctl: %s: %s: %s\n", what, code, msg);
    }
    return strcmp(code, "bad_request") == 0 ? RC_USAGE : RC_FAIL;
}

/* ---- HTTP, for the script commands --------------------------------------- */

struct http_reply {
    int status;       /* HTTP status code */
    char *raw;        /* the whole response (owned) */
    const char *body; /* into raw */
    size_t body_len;
};

/* Finds header name (case-insensitive) in the head [head, end) of an HTTP
 * response. Returns a pointer to its value or NULL. */
static const char *http_header(const char *head, const char *end,
                               const char *name)
{
    size_t nlen = strlen(name);
    const char *p = strstr(head, "\r\n");
    for (int lines = 0; p != NULL && p < end && lines < 1000; lines++) {
        p += 2;
        if ((size_t)(end - p) > nlen && strncasecmp(p, name, nlen) == 0 &&
            p[nlen] == ':') {
            p += nlen + 1;
            while (*p == ' ' || *p == '\t') {
                p++;
            }
            return p;
        }
        p = strstr(p, "\r\n");
    }
    return NULL;
}

/* Sends one HTTP/1.1 request (method, target, optional JSON body) to the
 * daemon at o->socket and reads the answer into r before deadline. Returns
 * 0, or -1 with err filled in. */
static int http_call(const struct opts *o, const char *method,
                     const char *target, const char *body, int64_t deadline,
                     struct http_reply *r, char *err, size_t errlen)
{
    struct conn c;
    char *req = NULL;
    size_t head_len = 0; /* bytes of status line and headers; 0: not yet */
    long long clen = -1;
    size_t blen = body != NULL ? strlen(body) : 0;
    memset(r, 0, sizeof(*r));
    if (conn_open(&c, o->socket, deadline, err, errlen) != 0) {
        return -1;
    }
    size_t cap = strlen(method) + strlen(target) + blen + 256;
    req = malloc(cap);
    if (req == NULL) {
        snprintf(err, errlen, "out of memory");
        goto error;
    }
    int n = snprintf(req, cap,
                     "%s %s HTTP/1.1\r\nHost: localhost\r\n"
                     "User-Agent: redlockctl/%s\r\nConnection: close\r\n"
                     "%sContent-Length: %zu\r\n\r\n%s",
                     method, target, REDLOCKD_VERSION,
                     blen > 0 ? "Content-Type: application/json\r\n" : "", blen,
                     body != NULL ? body : "");
    if (n < 0 || (size_t)n >= cap ||
        conn_send(&c, req, (size_t)n, deadline, err, errlen) != 0) {
        if (n < 0 || (size_t)n >= cap) {
            snprintf(err, errlen, "request too large");
        }
        goto error;
    }
    /* Read until the body is complete (Content-Length) or the end. */
    for (int rounds = 0; rounds < 100000; rounds++) {
        if (head_len == 0 && c.len > 0) {
            char *p = strstr(c.buf, "\r\n\r\n");
            if (p != NULL) {
                head_len = (size_t)(p - c.buf) + 4;
                const char *cl = http_header(c.buf, p + 2, "Content-Length");
                clen = cl != NULL ? strtoll(cl, NULL, 10) : -1;
            }
        }
        if (head_len != 0 && clen >= 0 && c.len - head_len >= (size_t)clen) {
            break;
        }
        struct pollfd p = {c.fd, POLLIN, 0};
        int pn = poll(&p, 1, poll_timeout(deadline));
        if (pn < 0 && errno == EINTR) {
            continue;
        }
        if (pn == 0) {
            snprintf(err, errlen,
                     "redlockd at %s did not answer within "
                     "the timeout",
                     o->socket);
            goto error;
        }
        ssize_t got = conn_recv(&c, err, errlen);
        if (got == 0) {
            break;
        }
        if (got == -1) {
            goto error;
        }
    }
    if (c.len < 12 || strncmp(c.buf, "HTTP/1.", 7) != 0 || head_len == 0) {
        snprintf(err, errlen,
                 c.len == 0 ? "redlockd at %s closed the connection "
                              "without answering"
                            : "redlockd at %s sent a malformed answer",
                 o->socket);
        goto error;
    }
    r->status = atoi(c.buf + 9);
    r->body = c.buf + head_len;
    r->body_len = c.len - head_len;
    if (clen >= 0 && (size_t)clen < r->body_len) {
        r->body_len = (size_t)clen;
    } else if (clen >= 0 && (size_t)clen > r->body_len) {
        snprintf(err, errlen,
                 "redlockd at %s closed the connection in the "
                 "middle of its answer",
                 o->socket);
        goto error;
    }
    r->raw = c.buf;
    c.buf = NULL;
    conn_close(&c);
    free(req);
    return 0;
error:
    conn_close(&c);
    free(req);
    return -1;
}

/* Runs one JSON request over HTTP for script command what: prints the
 * answer (or, quiet, the token of an acquire), reports failures. Returns the
 * exit status. resource may be NULL. */
static int http_json_op(const struct opts *o, const char *what,
                        const char *resource, const char *method,
                        const char *target, const cJSON *body, int64_t extra_ms)
{
    char err[ERR_LEN];
    struct http_reply r;
    char *text = NULL;
    cJSON *j = NULL;
    int rc = RC_UNAVAILABLE;
    if (body != NULL && (text = cJSON_PrintUnformatted(body)) == NULL) {
        fprintf(stderr, "redlockctl: out of memory\n");
        return RC_OSERR;
    }
    int64_t deadline = now_ms() + o->timeout_ms + extra_ms;
    if (http_call(o, method, target, text, deadline, &r, err, sizeof(err)) !=
        0) {
        fprintf(stderr, "redlockctl: %s: %s\n", what, err);
        goto error;
    }
    j = cJSON_ParseWithLength(r.body, r.body_len);
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(j, "ok");
    if (!cJSON_IsObject(j) || !cJSON_IsBool(ok)) {
        fprintf(stderr,
                "redlockctl: %s: unexpected answer from redlockd "
                "(HTTP %d): %.*s\n",
                what, r.status, (int)(r.body_len > 200 ? 200 : r.body_len),
                r.body);
        goto error;
    }
    if (!o->quiet) {
        fwrite(r.body, 1, r.body_len, stdout);
        if (r.body_len == 0 || r.body[r.body_len - 1] != '\n') {
            fputc('\n', stdout);
        }
    }
    if (!cJSON_IsTrue(ok)) {
        rc = report_error(what, resource, j);
        goto error;
    }
    rc = RC_OK;
    if (o->quiet && strcmp(what, "acquire") == 0) {
        const char *tok = json_str(j, "lock");
        const cJSON *fence = cJSON_GetObjectItemCaseSensitive(j, "fence");
        char digits[32];
        if (tok == NULL) {
            fprintf(stderr, "redlockctl: acquire: no lock in the answer\n");
            rc = RC_UNAVAILABLE;
        } else if (cJSON_IsNumber(fence) &&
                   json_fence(r.body, r.body_len, digits, sizeof(digits)) !=
                       0) {
            fprintf(stderr, "redlockctl: acquire: the fence in the answer "
                            "is not a whole number\n");
            rc = RC_UNAVAILABLE;
        } else if (cJSON_IsNumber(fence)) {
            printf("%s %s\n", tok, digits);
        } else {
            printf("%s\n", tok);
        }
    }
error:
    if (fflush(stdout) != 0 && rc == RC_OK) {
        fprintf(stderr, "redlockctl: writing the answer: %s\n",
                strerror(errno));
        rc = RC_OSERR;
    }
    cJSON_Delete(j);
    free(text);
    free(r.raw);
    return rc;
}

/* acquire RESOURCE: POST /v1/locks. */
static int cmd_acquire(const struct command *cmd, struct opts *o)
{
    cJSON *body = cJSON_CreateObject();
    int rc = RC_OSERR;
    if (body == NULL ||
        cJSON_AddStringToObject(body, "resource", o->pos[0]) == NULL ||
        (o->ttl_ms >= 0 &&
         cJSON_AddNumberToObject(body, "ttl_ms", (double)o->ttl_ms) == NULL) ||
        (o->wait_ms >= 0 && cJSON_AddNumberToObject(
                                body, "wait_ms", (double)o->wait_ms) == NULL) ||
        (o->fence && cJSON_AddTrueToObject(body, "fence") == NULL) ||
        (o->permits > 0 && cJSON_AddNumberToObject(
                               body, "permits", (double)o->permits) == NULL)) {
        fprintf(stderr, "redlockctl: out of memory\n");
        goto error;
    }
    rc = http_json_op(o, cmd->name, o->pos[0], "POST", "/v1/locks", body,
                      o->wait_ms > 0 ? o->wait_ms : 0);
error:
    cJSON_Delete(body);
    return rc;
}

/* release, extend or complete TOKEN [RESOURCE]. */
static int cmd_token_op(const struct command *cmd, struct opts *o)
{
    char target[128];
    const char *method = "POST";
    const char *resource = o->npos > 1 ? o->pos[1] : NULL;
    cJSON *body = cJSON_CreateObject();
    int rc = RC_OSERR;
    bool oom = body == NULL;
    if (strcmp(cmd->name, "release") == 0) {
        method = "DELETE";
        snprintf(target, sizeof(target), "/v1/locks/%s", o->pos[0]);
    } else {
        snprintf(target, sizeof(target), "/v1/locks/%s/%s", o->pos[0],
                 cmd->name);
    }
    if (!oom && resource != NULL) {
        oom = cJSON_AddStringToObject(body, "resource", resource) == NULL;
    }
    if (!oom && o->ttl_ms >= 0) {
        oom =
            cJSON_AddNumberToObject(body, "ttl_ms", (double)o->ttl_ms) == NULL;
    }
    if (!oom && o->keep_ms >= 0) {
        oom = cJSON_AddNumberToObject(body, "keep_ms", (double)o->keep_ms) ==
              NULL;
    }
    if (oom) {
        fprintf(stderr, "redlockctl: out of memory\n");
        goto error;
    }
    rc = http_json_op(o, cmd->name, NULL, method, target,
                      cJSON_GetArraySize(body) > 0 ? body : NULL, 0);
error:
    cJSON_Delete(body);
    return rc;
}

/* Appends s, percent-encoded but for RFC 3986's unreserved characters, to
 * out (cap bytes, NUL-terminated). Returns 0, or -1 when it did not fit. */
static int pct_append(char *out, size_t cap, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(out);
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                     (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' ||
                     ch == '_' || ch == '~';
        if (n + 4 > cap) {
            return -1;
        }
        if (plain) {
            out[n++] = (char)ch;
        } else {
            out[n++] = '%';
            out[n++] = hex[ch >> 4];
            out[n++] = hex[ch & 15];
        }
    }
    out[n] = '\0';
    return 0;
}

/* status RESOURCE: GET /v1/locks/{resource}. */
static int cmd_status(const struct command *cmd, struct opts *o)
{
    char target[RESOURCE_MAX * 3 + 64] = "/v1/locks/";
    (void)cmd;
    if (pct_append(target, sizeof(target), o->pos[0]) != 0) {
        return usage_error("status: RESOURCE too long");
    }
    if (o->fence) {
        strcat(target, "?fence=true");
    }
    if (!o->quiet) {
        return http_json_op(o, "status", o->pos[0], "GET", target, NULL, 0);
    }
    char err[ERR_LEN];
    struct http_reply r;
    if (http_call(o, "GET", target, NULL, now_ms() + o->timeout_ms, &r, err,
                  sizeof(err)) != 0) {
        fprintf(stderr, "redlockctl: status: %s\n", err);
        return RC_UNAVAILABLE;
    }
    cJSON *j = cJSON_ParseWithLength(r.body, r.body_len);
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(j, "ok");
    const char *state = json_str(j, "state");
    int rc = RC_OK;
    if (!cJSON_IsBool(ok)) {
        fprintf(stderr, "redlockctl: status: unexpected answer (HTTP %d)\n",
                r.status);
        rc = RC_UNAVAILABLE;
    } else if (!cJSON_IsTrue(ok)) {
        rc = report_error("status", o->pos[0], j);
    } else if (state == NULL) {
        fprintf(stderr, "redlockctl: status: no state in the answer\n");
        rc = RC_UNAVAILABLE;
    } else {
        printf("%s\n", state);
    }
    cJSON_Delete(j);
    free(r.raw);
    if (fflush(stdout) != 0 && rc == RC_OK) {
        fprintf(stderr, "redlockctl: status: %s\n", strerror(errno));
        rc = RC_OSERR;
    }
    return rc;
}

/* locks [PREFIX]: every page of GET /v1/locks, one lock a line. */
static int cmd_locks(const struct command *cmd, struct opts *o)
{
    char cursor[32] = "";
    int rc = RC_OK;
    (void)cmd;
    for (;;) {
        char target[RESOURCE_MAX * 3 + 128] = "/v1/locks?limit=1000";
        if (o->npos > 0) {
            strcat(target, "&prefix=");
            if (pct_append(target, sizeof(target), o->pos[0]) != 0) {
                return usage_error("locks: PREFIX too long");
            }
        }
        if (cursor[0] != '\0') {
            strcat(target, "&cursor=");
            strcat(target, cursor);
        }
        char err[ERR_LEN];
        struct http_reply r;
        if (http_call(o, "GET", target, NULL, now_ms() + o->timeout_ms, &r, err,
                      sizeof(err)) != 0) {
            fprintf(stderr, "redlockctl: locks: %s\n", err);
            return RC_UNAVAILABLE;
        }
        cJSON *j = cJSON_ParseWithLength(r.body, r.body_len);
        const cJSON *ok = cJSON_GetObjectItemCaseSensitive(j, "ok");
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "locks");
        const char *next = json_str(j, "next");
        if (cJSON_IsFalse(ok)) {
            rc = report_error("locks", NULL, j);
        } else if (!cJSON_IsTrue(ok) || !cJSON_IsArray(list) ||
                   (next != NULL && strlen(next) >= sizeof(cursor))) {
            fprintf(stderr, "redlockctl: locks: unexpected answer (HTTP %d)\n",
                    r.status);
            rc = RC_UNAVAILABLE;
        } else {
            const cJSON *e;
            cJSON_ArrayForEach(e, list)
            {
                char *line = cJSON_PrintUnformatted(e);
                if (line == NULL) {
                    fprintf(stderr, "redlockctl: out of memory\n");
                    rc = RC_OSERR;
                    break;
                }
                if (!o->quiet) {
                    printf("%s\n", line);
                }
                free(line);
            }
            snprintf(cursor, sizeof(cursor), "%s", next != NULL ? next : "");
        }
        cJSON_Delete(j);
        free(r.raw);
        if (rc != RC_OK || cursor[0] == '\0') {
            break;
        }
    }
    if (fflush(stdout) != 0 && rc == RC_OK) {
        fprintf(stderr, "redlockctl: locks: %s\n", strerror(errno));
        rc = RC_OSERR;
    }
    return rc;
}

/* health, ping, metrics: one GET. */
static int cmd_simple(const struct command *cmd, struct opts *o)
{
    char err[ERR_LEN];
    struct http_reply r;
    if (strcmp(cmd->name, "health") == 0) {
        return http_json_op(o, "health", NULL, "GET", "/v1/health", NULL, 0);
    }
    if (strcmp(cmd->name, "ping") == 0) {
        return http_json_op(o, "ping", NULL, "GET", "/v1/ping", NULL, 0);
    }
    if (http_call(o, "GET", "/metrics", NULL, now_ms() + o->timeout_ms, &r, err,
                  sizeof(err)) != 0) {
        fprintf(stderr, "redlockctl: metrics: %s\n", err);
        return RC_UNAVAILABLE;
    }
    int rc = r.status == 200 ? RC_OK : RC_FAIL;
    if (rc != RC_OK) {
        fprintf(stderr, "redlockctl: metrics: HTTP %d: %.*s\n", r.status,
                (int)(r.body_len > 200 ? 200 : r.body_len), r.body);
    } else if (!o->quiet) {
        fwrite(r.body, 1, r.body_len, stdout);
    }
    free(r.raw);
    if (fflush(stdout) != 0 && rc == RC_OK) {
        fprintf(stderr, "redlockctl: metrics: %s\n", strerror(errno));
        rc = RC_OSERR;
    }
    return rc;
}

/* ---- signals ------------------------------------------------------------- */

/* Signals passed on to CMD; during the acquisition they stop redlockctl. */
static const int forwarded[] = {SIGINT,  SIGTERM, SIGHUP,
                                SIGQUIT, SIGUSR1, SIGUSR2};
#define N_FORWARDED (sizeof(forwarded) / sizeof(forwarded[0]))
#define SIG_FROM_KERNEL 0x80 /* flag on a self-pipe byte: sent by the tty */

static int sig_pipe[2] = {-1, -1};              /* self-pipe: signal bytes */
static struct sigaction saved_act[N_FORWARDED]; /* restored in CMD */
static struct sigaction saved_chld;

/* Signal handler: writes the signal number to the self-pipe, flagged when
 * the kernel sent it (a terminal's ^C or ^\ reaches CMD's process group,
 * which is ours, by itself, so it must not be sent twice). */
static void signal_cb(int sig, siginfo_t *info, void *uctx)
{
    (void)uctx;
    int saved_errno = errno;
    unsigned char b = (unsigned char)sig;
#ifdef SI_KERNEL
    if (info != NULL && info->si_code == SI_KERNEL) {
        b |= SIG_FROM_KERNEL;
    }
#else
    (void)info;
#endif
    ssize_t n = write(sig_pipe[1], &b, 1);
    (void)n; /* a full pipe already holds a wake-up */
    errno = saved_errno;
}

/* Installs the handlers of the forwarded signals and SIGCHLD. Returns 0, or
 * -1 after a message on stderr. */
static int signals_install(void)
{
    struct sigaction sa;
    if (pipe(sig_pipe) != 0) {
        goto error;
    }
    for (int k = 0; k < 2; k++) {
        int fl = fcntl(sig_pipe[k], F_GETFL);
        if (fl < 0 || fcntl(sig_pipe[k], F_SETFL, fl | O_NONBLOCK) != 0 ||
            fcntl(sig_pipe[k], F_SETFD, FD_CLOEXEC) != 0) {
            goto error;
        }
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = signal_cb;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t k = 0; k < N_FORWARDED; k++) {
        if (sigaction(forwarded[k], &sa, &saved_act[k]) != 0) {
            goto error;
        }
    }
    sa.sa_flags |= SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &sa, &saved_chld) != 0) {
        goto error;
    }
    return 0;
error:
    fprintf(stderr, "redlockctl: signal setup: %s\n", strerror(errno));
    return -1;
}

/* Takes the next signal byte from the self-pipe. Returns it, or -1 when the
 * pipe is empty. */
static int signal_next(void)
{
    unsigned char b;
    ssize_t n = read(sig_pipe[0], &b, 1);
    return n == 1 ? (int)b : -1;
}

/* ---- lock: hold a lock while a command runs ------------------------------ */

struct runner {
    const struct opts *o; /* borrowed */
    const char *resource; /* borrowed: from argv */
    struct conn conn;     /* the NDJSON session that holds the lock */
    char token[TOKEN_LEN + 1];
    char fence[32]; /* the fencing token as text; "" when not asked */
    char permit[8]; /* --permits: which permit, as text; "" for a lock */
    pid_t child;    /* CMD; 0 before it starts */
    int status;     /* CMD's wait status once child_done */
    bool child_done;
    bool lost;       /* the lock was lost while CMD ran */
    int64_t kill_at; /* when CMD gets SIGKILL; -1 = not scheduled */
};

/* Sends one NDJSON request (object req) on r's connection. Returns 0, or -1
 * with err filled in. */
static int runner_send(struct runner *r, const cJSON *req, int64_t deadline,
                       char *err, size_t errlen)
{
    char *text = cJSON_PrintUnformatted(req);
    if (text == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (line == NULL) {
        free(text);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    int rc = conn_send(&r->conn, line, n + 1, deadline, err, errlen);
    free(line);
    return rc;
}

/* Whether line (parsed as j) is a lost event for r's lock. */
static bool is_lost_event(const struct runner *r, const cJSON *j)
{
    const char *ev = json_str(j, "event");
    const char *tok = json_str(j, "lock");
    return ev != NULL && strcmp(ev, "lost") == 0 &&
           (tok == NULL || r->token[0] == '\0' || strcmp(tok, r->token) == 0);
}

/* Waits for the answer with id on r's connection until deadline, reading
 * signals meanwhile. Lines that are not the answer are ignored, except that
 * a lost event for the lock sets *lost_seen (when not NULL). Returns the
 * parsed answer (the caller deletes it) and, when textp is not NULL, its
 * text in *textp (the caller frees it); or NULL: *sig is then the signal
 * that interrupted (0 when none) and err says what went wrong. */
static cJSON *runner_answer(struct runner *r, int id, int64_t deadline,
                            bool *lost_seen, char **textp, int *sig, char *err,
                            size_t errlen)
{
    *sig = 0;
    for (int rounds = 0; rounds < 1000000; rounds++) {
        char *line = conn_take_line(&r->conn);
        if (line != NULL) {
            cJSON *j = cJSON_Parse(line);
            const cJSON *jid = cJSON_GetObjectItemCaseSensitive(j, "id");
            /* An error without an id is the daemon refusing what it could
             * not read (a connection over --max-connections, a line too
             * large); it closes next, so it is the answer. */
            bool refused =
                jid == NULL &&
                cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "ok"));
            if (refused || (cJSON_IsNumber(jid) && jid->valuedouble == id)) {
                if (textp != NULL) {
                    *textp = line;
                } else {
                    free(line);
                }
                return j;
            }
            free(line);
            if (lost_seen != NULL && is_lost_event(r, j)) {
                *lost_seen = true;
            }
            cJSON_Delete(j);
            continue;
        }
        struct pollfd p[2] = {{sig_pipe[0], POLLIN, 0},
                              {r->conn.fd, POLLIN, 0}};
        int n = poll(p, 2, poll_timeout(deadline));
        if (n < 0 && errno != EINTR) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return NULL;
        }
        if (n == 0) {
            snprintf(err, errlen,
                     "redlockd at %s did not answer within the "
                     "timeout",
                     r->conn.path);
            return NULL;
        }
        for (int k = 0, s; k < 64 && (s = signal_next()) >= 0; k++) {
            s &= ~SIG_FROM_KERNEL;
            if (s != SIGCHLD) {
                *sig = s;
            }
        }
        if (*sig != 0) {
            snprintf(err, errlen, "interrupted by signal %d", *sig);
            return NULL;
        }
        if (p[1].revents != 0) {
            ssize_t got = conn_recv(&r->conn, err, errlen);
            if (got == 0) {
                snprintf(err, errlen,
                         "redlockd at %s closed the connection "
                         "before answering",
                         r->conn.path);
                return NULL;
            }
            if (got == -1) {
                return NULL;
            }
        }
    }
    snprintf(err, errlen, "too many lines from redlockd");
    return NULL;
}

/* The longest round of a lock's wait: WAIT_ROUND_MS, or a shorter one from
 * $REDLOCKCTL_WAIT_ROUND_MS (1..WAIT_ROUND_MS), which lets a test see
 * several rounds without waiting five minutes for each. */
static int64_t wait_round_ms(void)
{
    const char *env = getenv("REDLOCKCTL_WAIT_ROUND_MS");
    char *end = NULL;
    long long v = env != NULL ? strtoll(env, &end, 10) : 0;
    if (env == NULL || end == env || *end != '\0' || v < 1 ||
        v > WAIT_ROUND_MS) {
        return WAIT_ROUND_MS;
    }
    return v;
}

/* Connects and takes the lock with renew:true. Returns 0 when it is held,
 * else the exit status (after a message on stderr). */
static int runner_acquire(struct runner *r)
{
    const struct opts *o = r->o;
    char err[ERR_LEN];
    int sig = 0;
    cJSON *rsp = NULL;
    char *text = NULL; /* rsp as received: the exact fence */
    int rc = RC_OSERR;
    cJSON *req = NULL;
    /* The daemon waits at most WAIT_ROUND_MS per request: a longer --wait
     * is a series of rounds on the same connection, each a fresh place at
     * the end of the daemon's line, until the lock is ours, the wait is
     * over, or something other than busy comes back. */
    int64_t wait_end = now_ms() + (o->wait_ms > 0 ? o->wait_ms : 0);
    int64_t round_max = wait_round_ms();
    bool first = true;
again:;
    int64_t left = wait_end - now_ms();
    int64_t round = left < 0 ? 0 : left > round_max ? round_max : left;
    int64_t deadline = now_ms() + o->timeout_ms + round;
    rc = RC_OSERR;
    req = cJSON_CreateObject();
    if (req == NULL || cJSON_AddStringToObject(req, "op", "acquire") == NULL ||
        cJSON_AddNumberToObject(req, "id", ID_ACQUIRE) == NULL ||
        cJSON_AddStringToObject(req, "resource", r->resource) == NULL ||
        (o->ttl_ms >= 0 &&
         cJSON_AddNumberToObject(req, "ttl_ms", (double)o->ttl_ms) == NULL) ||
        (o->wait_ms >= 0 &&
         cJSON_AddNumberToObject(req, "wait_ms", (double)round) == NULL) ||
        cJSON_AddTrueToObject(req, "renew") == NULL ||
        (o->fence && cJSON_AddTrueToObject(req, "fence") == NULL) ||
        (o->permits > 0 &&
         cJSON_AddNumberToObject(req, "permits", (double)o->permits) == NULL)) {
        fprintf(stderr, "redlockctl: out of memory\n");
        goto error;
    }
    rc = RC_UNAVAILABLE;
    if ((first &&
         conn_open(&r->conn, o->socket, deadline, err, sizeof(err)) != 0) ||
        runner_send(r, req, deadline, err, sizeof(err)) != 0) {
        fprintf(stderr, "redlockctl: %s\n", err);
        goto error;
    }
    first = false;
    rsp = runner_answer(r, ID_ACQUIRE, deadline, NULL, &text, &sig, err,
                        sizeof(err));
    if (rsp != NULL && wait_end - now_ms() > 0 &&
        cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(rsp, "ok"))) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(rsp, "error");
        const char *code = json_str(e, "code");
        if (code != NULL && strcmp(code, "busy") == 0) {
            /* A round ran out and there is wait left: queue again. */
            free(text);
            text = NULL;
            cJSON_Delete(rsp);
            rsp = NULL;
            cJSON_Delete(req);
            req = NULL;
            goto again;
        }
    }
    if (rsp == NULL) {
        if (sig != 0) {
            fprintf(stderr,
                    "redlockctl: interrupted (signal %d) while "
                    "acquiring %s\n",
                    sig, r->resource);
            rc = 128 + sig;
        } else {
            fprintf(stderr, "redlockctl: lock %s: %s\n", r->resource, err);
        }
        goto error;
    }
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(rsp, "ok");
    if (!cJSON_IsBool(ok)) {
        fprintf(stderr,
                "redlockctl: lock %s: unexpected answer from "
                "redlockd\n",
                r->resource);
        goto error;
    }
    if (!cJSON_IsTrue(ok)) {
        rc = report_error("lock", r->resource, rsp);
        goto error;
    }
    const char *tok = json_str(rsp, "lock");
    const cJSON *fence = cJSON_GetObjectItemCaseSensitive(rsp, "fence");
    if (tok == NULL || !token_valid(tok) ||
        (o->fence && !cJSON_IsNumber(fence))) {
        fprintf(stderr,
                "redlockctl: lock %s: unexpected answer from "
                "redlockd (no %s)\n",
                r->resource,
                tok == NULL || !token_valid(tok) ? "token" : "fence");
        goto error;
    }
    if (o->fence &&
        json_fence(text, strlen(text), r->fence, sizeof(r->fence)) != 0) {
        fprintf(stderr,
                "redlockctl: lock %s: unexpected answer from redlockd "
                "(the fence is not a whole number)\n",
                r->resource);
        goto error;
    }
    memcpy(r->token, tok, TOKEN_LEN + 1);
    const cJSON *permit = cJSON_GetObjectItemCaseSensitive(rsp, "permit");
    if (cJSON_IsNumber(permit)) {
        snprintf(r->permit, sizeof(r->permit), "%d", permit->valueint);
    }
    free(text);
    cJSON_Delete(rsp);
    cJSON_Delete(req);
    return 0;
error:
    conn_close(&r->conn);
    free(text);
    cJSON_Delete(rsp);
    cJSON_Delete(req);
    return rc;
}

/* Starts CMD (o->cmd) with the lock's environment. Returns 0, or -1 after a
 * message on stderr. */
static int runner_spawn(struct runner *r)
{
    sigset_t all;
    sigset_t old;
    if (setenv("REDLOCK_TOKEN", r->token, 1) != 0 ||
        setenv("REDLOCK_RESOURCE", r->resource, 1) != 0 ||
        (r->fence[0] != '\0' ? setenv("REDLOCK_FENCE", r->fence, 1)
                             : unsetenv("REDLOCK_FENCE")) != 0 ||
        (r->permit[0] != '\0' ? setenv("REDLOCK_PERMIT", r->permit, 1)
                              : unsetenv("REDLOCK_PERMIT")) != 0) {
        fprintf(stderr, "redlockctl: setenv: %s\n", strerror(errno));
        return -1;
    }
    /* No handler may run in the child before it restores the defaults. */
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) {
        for (size_t k = 0; k < N_FORWARDED; k++) {
            sigaction(forwarded[k], &saved_act[k], NULL);
        }
        sigaction(SIGCHLD, &saved_chld, NULL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp(r->o->cmd[0], r->o->cmd);
        int e = errno;
        fprintf(stderr, "redlockctl: cannot run '%s': %s\n", r->o->cmd[0],
                strerror(e));
        _exit(e == ENOENT || e == ENOTDIR ? RC_NOT_FOUND : RC_CANNOT_EXEC);
    }
    int fork_errno = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        fprintf(stderr, "redlockctl: fork: %s\n", strerror(fork_errno));
        return -1;
    }
    r->child = pid;
    return 0;
}

/* The lock is gone (why says how): stop listening and terminate CMD. */
static void runner_lost(struct runner *r, const char *why)
{
    if (r->lost || r->child_done) {
        return;
    }
    r->lost = true;
    conn_close(&r->conn);
    if (r->o->kill_after_ms == 0) {
        fprintf(stderr,
                "redlockctl: lock on %s lost: %s; killing %s (pid "
                "%ld)\n",
                r->resource, why, r->o->cmd[0], (long)r->child);
        kill(r->child, SIGKILL);
        return;
    }
    fprintf(stderr,
            "redlockctl: lock on %s lost: %s; sending SIGTERM to %s "
            "(pid %ld)\n",
            r->resource, why, r->o->cmd[0], (long)r->child);
    kill(r->child, SIGTERM);
    r->kill_at = now_ms() + r->o->kill_after_ms;
}

/* Acts on the complete lines in r's buffer, without reading: a lost event
 * for the lock means the lock is gone. */
static void runner_lines(struct runner *r)
{
    /* Each line takes at least its newline out of the bounded buffer. */
    for (int k = 0; k <= RESPONSE_MAX && r->conn.fd >= 0; k++) {
        char *line = conn_take_line(&r->conn);
        if (line == NULL) {
            return;
        }
        cJSON *j = cJSON_Parse(line);
        free(line);
        bool lost = is_lost_event(r, j);
        cJSON_Delete(j);
        if (lost) {
            runner_lost(r, "redlockd could not renew it in time");
            return;
        }
    }
}

/* Reads what the daemon sent while CMD runs: a lost event for the lock, or
 * the end of the connection, means the lock is gone. */
static void runner_read(struct runner *r)
{
    char err[ERR_LEN];
    ssize_t got = conn_recv(&r->conn, err, sizeof(err));
    if (got == -2) {
        return;
    }
    if (got <= 0) {
        runner_lost(r, got == 0 ? "the connection to redlockd closed" : err);
        return;
    }
    runner_lines(r);
}

/* Collects CMD's status if it has ended. */
static void runner_reap(struct runner *r)
{
    int status;
    pid_t p = waitpid(r->child, &status, WNOHANG);
    if (p == r->child) {
        r->status = status;
        r->child_done = true;
    }
}

/* Waits for CMD to end: forwards signals, watches the lock, escalates to
 * SIGKILL after a loss. Returns 0, or -1 after a message on stderr. */
static int runner_wait(struct runner *r)
{
    /* Not bounded in count: CMD runs as long as it runs (like wait(2)). */
    for (;;) {
        /* Lines may already wait in the buffer (a lost event read along with
         * the acquire answer): no new bytes would wake poll() for them. */
        runner_lines(r);
        struct pollfd p[2] = {{sig_pipe[0], POLLIN, 0},
                              {r->conn.fd, POLLIN, 0}};
        int n = poll(p, 2, poll_timeout(r->kill_at));
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "redlockctl: poll: %s\n", strerror(errno));
            return -1;
        }
        /* The lock first: a loss must not hide behind CMD's exit. */
        if (r->conn.fd >= 0 && p[1].revents != 0) {
            runner_read(r);
        }
        for (int k = 0, s; k < 64 && (s = signal_next()) >= 0; k++) {
            int sig = s & ~SIG_FROM_KERNEL;
            if (sig != SIGCHLD && (s & SIG_FROM_KERNEL) == 0 && r->child > 0 &&
                !r->child_done) {
                kill(r->child, sig);
            }
        }
        runner_reap(r);
        if (r->child_done) {
            return 0;
        }
        if (r->kill_at >= 0 && now_ms() >= r->kill_at) {
            fprintf(stderr,
                    "redlockctl: %s (pid %ld) still running %" PRId64
                    " ms after SIGTERM; sending SIGKILL\n",
                    r->o->cmd[0], (long)r->child, r->o->kill_after_ms);
            kill(r->child, SIGKILL);
            r->kill_at = -1;
        }
    }
}

/* CMD has ended with the lock held: release it and close the session (which
 * would release it too). Warns when the daemon no longer held it. */
static void runner_release(struct runner *r)
{
    char err[ERR_LEN];
    bool lost_seen = false;
    int sig = 0;
    int64_t t = r->o->timeout_ms < RELEASE_TIMEOUT_MS ? r->o->timeout_ms
                                                      : RELEASE_TIMEOUT_MS;
    int64_t deadline = now_ms() + t;
    cJSON *rsp = NULL;
    cJSON *req = cJSON_CreateObject();
    if (req == NULL || cJSON_AddStringToObject(req, "op", "release") == NULL ||
        cJSON_AddNumberToObject(req, "id", ID_RELEASE) == NULL ||
        cJSON_AddStringToObject(req, "lock", r->token) == NULL ||
        runner_send(r, req, deadline, err, sizeof(err)) != 0) {
        goto done; /* closing the session releases the lock */
    }
    rsp = runner_answer(r, ID_RELEASE, deadline, &lost_seen, NULL, &sig, err,
                        sizeof(err));
    if (lost_seen) {
        fprintf(stderr,
                "redlockctl: warning: lock on %s was lost before %s "
                "was seen to end\n",
                r->resource, r->o->cmd[0]);
    } else if (rsp != NULL &&
               !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rsp, "ok"))) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(rsp, "error");
        const char *code = json_str(e, "code");
        const char *msg = json_str(e, "message");
        fprintf(stderr, "redlockctl: warning: release of %s: %s: %s\n",
                r->resource, code != NULL ? code : "error",
                msg != NULL ? msg : "(no message)");
    }
done:
    cJSON_Delete(rsp);
    cJSON_Delete(req);
    conn_close(&r->conn);
}

/* lock RESOURCE -- CMD [ARG]...: see the top of the file. */
static int cmd_lock(const struct command *cmd, struct opts *o)
{
    (void)cmd;
    struct runner r;
    memset(&r, 0, sizeof(r));
    r.o = o;
    r.resource = o->pos[0];
    r.conn.fd = -1;
    r.kill_at = -1;
    if (signals_install() != 0) {
        return RC_OSERR;
    }
    int rc = runner_acquire(&r);
    if (rc != 0) {
        return rc;
    }
    if (runner_spawn(&r) != 0) {
        conn_close(&r.conn);
        return RC_OSERR;
    }
    if (runner_wait(&r) != 0) {
        /* Cannot watch the lock: stop CMD rather than run it unguarded. */
        kill(r.child, SIGKILL);
        waitpid(r.child, NULL, 0);
        conn_close(&r.conn);
        return RC_OSERR;
    }
    if (r.lost) {
        return RC_LOST;
    }
    runner_release(&r);
    if (WIFSIGNALED(r.status)) {
        return 128 + WTERMSIG(r.status);
    }
    return WIFEXITED(r.status) ? WEXITSTATUS(r.status) : RC_OSERR;
}

/* Parses the command line and runs the command. Returns the exit status
 * (see RC_* and --help). */
int main(int argc, char **argv)
{
    const struct command *cmd = NULL;
    struct opts o;
    memset(&o, 0, sizeof(o));
    o.timeout_ms = DEFAULT_TIMEOUT_MS;
    o.ttl_ms = -1;
    o.wait_ms = -1;
    o.keep_ms = -1;
    o.kill_after_ms = DEFAULT_KILL_AFTER_MS;
    o.permits = -1;
    const char *env = getenv("REDLOCKD_SOCKET");
    o.socket = env != NULL && env[0] != '\0' ? env : DEFAULT_SOCKET;
    int rc = parse_args(argc, argv, &o, &cmd);
    if (rc != 0) {
        return rc > 0 ? RC_OK : RC_USAGE;
    }
    struct sockaddr_un sa;
    if (strlen(o.socket) >= sizeof(sa.sun_path)) {
        usage_error("--socket: path longer than %zu bytes",
                    sizeof(sa.sun_path) - 1);
        return RC_USAGE;
    }
    return cmd->run(cmd, &o);
}
