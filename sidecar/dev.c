/* dev.c: the --dev embedded cluster for first runs and demos: n throw-away
 * redis-server children on unix sockets in a private temp dir. The children
 * die with the daemon (PR_SET_PDEATHSIG) even if it is killed outright. */
#include "dev.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

#define DEV_MAX 7

struct dev_cluster {
    char dir[64];
    pid_t pids[DEV_MAX];
    int n;
};

/* Finds prog on PATH (or checks it when it has a slash). */
static int find_program(const char *prog)
{
    if (strchr(prog, '/') != NULL) {
        return access(prog, X_OK);
    }
    const char *path = getenv("PATH");
    if (path == NULL) {
        path = "/usr/local/bin:/usr/bin:/bin";
    }
    char buf[4096];
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        if (len > 0 && len + strlen(prog) + 2 < sizeof(buf)) {
            memcpy(buf, path, len);
            buf[len] = '/';
            strcpy(buf + len + 1, prog);
            if (access(buf, X_OK) == 0) {
                return 0;
            }
        }
        path += len + (colon ? 1 : 0);
    }
    return -1;
}

/* Whether the node's socket answers a PING with +PONG. */
static int node_answers(const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    struct timeval tv = {0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int ok = -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        write(fd, "PING\r\n", 6) == 6) {
        char buf[16];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n >= 5 && memcmp(buf, "+PONG", 5) == 0) {
            ok = 0;
        }
    }
    close(fd);
    return ok;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
                continue;
            }
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

struct dev_cluster *dev_start(struct config *cfg, int n, char *err,
                              size_t errlen)
{
    if (n < 1 || n > DEV_MAX) {
        snprintf(err, errlen, "--dev: %d nodes (1..%d)", n, DEV_MAX);
        return NULL;
    }
    const char *prog = cfg->redis_server ? cfg->redis_server : "redis-server";
    if (find_program(prog) != 0) {
        snprintf(err, errlen,
                 "--dev needs %s, which was not found: install it "
                 "(apt-get install -y redis-server) or pass --redis-server "
                 "PATH",
                 prog);
        return NULL;
    }
    struct dev_cluster *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* The dir ends up in unix:// URIs: only an absolute, short TMPDIR
     * without URI syntax in it is taken; anything else means /tmp. */
    const char *tmp = getenv("TMPDIR");
    bool tmp_ok = tmp != NULL && tmp[0] == '/' && strlen(tmp) < 40 &&
                  strpbrk(tmp, "?#@%") == NULL;
    if (tmp != NULL && tmp[0] != '\0' && !tmp_ok) {
        log_info(NULL, "--dev: TMPDIR is not an absolute path usable in a "
                       "unix:// URI; using /tmp");
    }
    snprintf(d->dir, sizeof(d->dir), "%s/redlockd-dev-XXXXXX",
             tmp_ok ? tmp : "/tmp");
    if (mkdtemp(d->dir) == NULL) {
        snprintf(err, errlen, "--dev: mkdtemp: %s", strerror(errno));
        free(d);
        return NULL;
    }
    pid_t parent = getpid();
    for (int i = 0; i < n; i++) {
        char sock[128], logf[128];
        snprintf(sock, sizeof(sock), "%s/node%d.sock", d->dir, i + 1);
        snprintf(logf, sizeof(logf), "%s/node%d.log", d->dir, i + 1);
        pid_t pid = fork();
        if (pid < 0) {
            snprintf(err, errlen, "--dev: fork: %s", strerror(errno));
            dev_stop(d);
            return NULL;
        }
        if (pid == 0) {
            /* The node must not outlive the daemon, however it ends; and a
             * Ctrl-C in the terminal is for the daemon alone, which still
             * needs the nodes to release its locks. */
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) {
                _exit(1);
            }
            /* The daemon blocks its stop signals during start-up; the node
             * must still stop on dev_stop()'s SIGTERM. */
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, NULL);
            execlp(prog, prog, "--port", "0", "--unixsocket", sock,
                   "--unixsocketperm", "700", "--save", "", "--appendonly",
                   "no", "--dir", d->dir, "--logfile", logf, "--daemonize",
                   "no", (char *)NULL);
            _exit(127);
        }
        d->pids[d->n++] = pid;
    }
    /* Wait (bounded) until every node answers. */
    for (int i = 0; i < n; i++) {
        char sock[128];
        snprintf(sock, sizeof(sock), "%s/node%d.sock", d->dir, i + 1);
        int ok = -1;
        for (int tries = 0; tries < 500 && ok != 0; tries++) {
            if (dev_stop_pending()) {
                snprintf(err, errlen,
                         "--dev: stopped by a signal while "
                         "the nodes were starting");
                dev_stop(d);
                return NULL;
            }
            ok = node_answers(sock);
            if (ok != 0) {
                int status;
                if (waitpid(d->pids[i], &status, WNOHANG) == d->pids[i]) {
                    d->pids[i] = 0;
                    break;
                }
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        if (ok != 0) {
            snprintf(err, errlen,
                     "--dev: redis-server %d did not start (see its log "
                     "in %s)",
                     i + 1, d->dir);
            dev_stop(d);
            return NULL;
        }
        char uri[160];
        snprintf(uri, sizeof(uri), "unix://%s", sock);
        if (config_add_node(cfg, uri, err, errlen) != 0) {
            dev_stop(d);
            return NULL;
        }
    }
    log_info(NULL, "--dev: %d redis-server nodes in %s", n, d->dir);
    return d;
}

bool dev_stop_pending(void)
{
    sigset_t pending;
    if (sigpending(&pending) != 0) {
        return false;
    }
    return sigismember(&pending, SIGTERM) == 1 ||
           sigismember(&pending, SIGINT) == 1 ||
           sigismember(&pending, SIGHUP) == 1;
}

void dev_print_examples(const char *socket_path)
{
    const char *s = socket_path;
    printf("\nredlockd --dev is ready on %s. Try, from another terminal:\n\n"
           "  printf '{\"op\":\"ping\"}\\n' | socat - UNIX-CONNECT:%s\n"
           "  printf '{\"op\":\"acquire\",\"resource\":\"demo\",\"ttl_ms\":"
           "10000}\\n' | socat - UNIX-CONNECT:%s\n"
           "  socat - UNIX-CONNECT:%s      # then type NDJSON lines\n"
           "  curl --unix-socket %s http://localhost/v1/health\n"
           "  curl --unix-socket %s -X POST http://localhost/v1/locks "
           "-d '{\"resource\":\"demo\",\"ttl_ms\":10000}'\n"
           "  curl --unix-socket %s http://localhost/metrics\n\n"
           "Ctrl-C stops the daemon and removes the nodes.\n\n",
           s, s, s, s, s, s, s);
    fflush(stdout);
}

void dev_stop(struct dev_cluster *d)
{
    if (d == NULL) {
        return;
    }
    for (int i = 0; i < d->n; i++) {
        if (d->pids[i] > 0) {
            kill(d->pids[i], SIGTERM);
            /* A node stopped (SIGSTOP, a debugger) acts on it only once
             * continued. */
            kill(d->pids[i], SIGCONT);
        }
    }
    /* Bounded wait, then SIGKILL. */
    for (int i = 0; i < d->n; i++) {
        if (d->pids[i] <= 0) {
            continue;
        }
        int status;
        int waited = 0;
        for (int t = 0; t < 300; t++) {
            pid_t r = waitpid(d->pids[i], &status, WNOHANG);
            if (r == d->pids[i] || (r < 0 && errno == ECHILD)) {
                waited = 1;
                break;
            }
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (!waited) {
            kill(d->pids[i], SIGKILL);
            waitpid(d->pids[i], &status, 0);
        }
    }
    remove_dir(d->dir);
    free(d);
}
