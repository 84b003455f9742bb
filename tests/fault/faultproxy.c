/* faultproxy.c: a TCP proxy on 127.0.0.1 in front of one redis-server, with
 * faults switched at run time: the network nemesis of tests/fault.
 *
 *   client --TCP--> [listen 127.0.0.1:P]  faultproxy  --TCP--> target
 *                        ^
 *                        +-- control: unix socket (--control PATH) and/or
 *                            stdin (--stdin), one text command per line
 *
 * Modes (the current mode applies to every byte read from now on):
 *   pass              forward as is.
 *   delay MS          hold every chunk MS ms, each direction, order kept.
 *   loss P [MS]       "packet loss" as TCP shows it to an application: a
 *                     fraction P of the chunks (0..1) is held MS ms (default
 *                     200: a retransmission timeout), and, TCP being
 *                     in order, everything behind it waits too. Bytes are
 *                     never thrown away: dropping bytes inside a TCP stream
 *                     would corrupt RESP, which no real network does.
 *   drop              black hole: existing connections and new ones
 *                     (accepted) swallow every byte, both ways, for good:
 *                     in-order TCP cannot deliver later bytes after lost
 *                     ones, so a black-holed connection never carries data
 *                     again, even after "pass"; the client must time out
 *                     and reconnect.
 *   reset             RST (SO_LINGER 0) every existing connection, both
 *                     sides, and every new one as soon as it is accepted.
 *   partition         close every connection and stop listening: new
 *                     connects get ECONNREFUSED until the mode changes (the
 *                     port is bound again, same number).
 * Other commands: status, quit. Answers: "ok ..." or "err ..." lines.
 *
 * On start it prints "ready port=N" on stdout (N is the listening port,
 * useful with --listen 127.0.0.1:0). Only loopback addresses are accepted
 * for --listen and --target. SIGTERM/SIGINT/stdin EOF (with --stdin) exit.
 *
 * Build: meson (tests/fault/meson.build) or standalone:
 *   gcc -O2 -Wall -o faultproxy tests/fault/faultproxy.c -levent */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#define QUEUE_CAP (64u << 20)  /* bytes held in one direction: then close */
#define LINE_MAX_CTL 256

enum mode {
    MODE_PASS = 0,  /* forward */
    MODE_DELAY,     /* every chunk waits delay_ms */
    MODE_LOSS,      /* a fraction of chunks waits stall_ms */
    MODE_DROP,      /* black hole */
    MODE_RESET,     /* RST everything */
    MODE_PARTITION, /* closed and refused */
};

static const char *const mode_names[] = {"pass", "delay", "loss",
                                         "drop", "reset", "partition"};

/* One chunk of bytes waiting for its time in one direction. */
struct chunk {
    struct chunk *next;
    uint64_t due_us;
    size_t len;
    unsigned char data[];
};

struct conn;

/* One direction of a connection: bytes from src go to dst. */
struct flow {
    struct conn *conn;         /* borrowed: the owner */
    bool up;                   /* client -> server */
    struct chunk *head, *tail; /* owned: the delay queue, in order */
    size_t queued;
    uint64_t last_due_us;      /* no chunk may overtake an earlier one */
    struct event *timer;       /* owned: due time of the head */
};

/* One proxied connection. */
struct conn {
    struct proxy *p;              /* borrowed */
    struct bufferevent *client;   /* owned */
    struct bufferevent *server;   /* owned; NULL when never connected */
    struct flow up, down;
    bool blackholed;              /* swallows everything, for good */
    struct conn *prev, *next;     /* the proxy's list */
};

struct proxy {
    struct event_base *base;
    struct sockaddr_in listen_addr;
    struct sockaddr_in target;
    struct evconnlistener *listener; /* NULL while partitioned */
    struct evconnlistener *ctl;      /* control socket listener */
    char ctl_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct bufferevent *stdin_bev;
    struct event *relisten_ev;
    struct event *sig_ev[2];
    enum mode mode;
    unsigned delay_ms;
    double loss;
    unsigned stall_ms;
    uint64_t rng;
    struct conn *conns;
    unsigned n_conns;
    uint64_t accepted, refused, resets, bytes_up, bytes_down, swallowed;
    uint64_t stalls;
};

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* rng_next: xorshift64*, returns a double in [0, 1). */
static double rng_next(struct proxy *p)
{
    uint64_t x = p->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    p->rng = x;
    return (double)((x * 2685821657736338717ULL) >> 11) /
           (double)(1ULL << 53);
}

/* ---- connections ------------------------------------------------------ */

static void flow_clear(struct flow *f)
{
    while (f->head != NULL) {
        struct chunk *c = f->head;
        f->head = c->next;
        free(c);
    }
    f->tail = NULL;
    f->queued = 0;
    f->last_due_us = 0;
    if (f->timer != NULL) {
        evtimer_del(f->timer);
    }
}

static void set_linger0(struct bufferevent *bev)
{
    if (bev == NULL) {
        return;
    }
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd >= 0) {
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    }
}

/* conn_free: closes both sides; with rst, both with SO_LINGER 0 (RST). */
static void conn_free(struct conn *c, bool rst)
{
    struct proxy *p = c->p;
    if (rst) {
        set_linger0(c->client);
        set_linger0(c->server);
        p->resets++;
    }
    flow_clear(&c->up);
    flow_clear(&c->down);
    if (c->up.timer != NULL) {
        event_free(c->up.timer);
    }
    if (c->down.timer != NULL) {
        event_free(c->down.timer);
    }
    if (c->client != NULL) {
        bufferevent_free(c->client);
    }
    if (c->server != NULL) {
        bufferevent_free(c->server);
    }
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        p->conns = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    p->n_conns--;
    free(c);
}

static struct bufferevent *flow_dst(struct flow *f)
{
    return f->up ? f->conn->server : f->conn->client;
}

static void flow_count(struct flow *f, size_t n)
{
    if (f->up) {
        f->conn->p->bytes_up += n;
    } else {
        f->conn->p->bytes_down += n;
    }
}

static void flow_arm(struct flow *f)
{
    if (f->head == NULL) {
        return;
    }
    uint64_t now = now_us();
    uint64_t wait = f->head->due_us > now ? f->head->due_us - now : 0;
    struct timeval tv = {(time_t)(wait / 1000000u),
                         (suseconds_t)(wait % 1000000u)};
    evtimer_add(f->timer, &tv);
}

/* The head of a delay queue is due: forward every chunk that is. */
static void flow_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct flow *f = arg;
    uint64_t now = now_us();
    struct bufferevent *dst = flow_dst(f);
    while (f->head != NULL && f->head->due_us <= now) {
        struct chunk *c = f->head;
        f->head = c->next;
        if (f->head == NULL) {
            f->tail = NULL;
        }
        f->queued -= c->len;
        if (dst != NULL && !f->conn->blackholed) {
            bufferevent_write(dst, c->data, c->len);
            flow_count(f, c->len);
        }
        free(c);
    }
    flow_arm(f);
}

/* Bytes arrived from one side: forward, queue or swallow them. */
static void flow_read(struct conn *c, struct flow *f, struct bufferevent *src)
{
    struct proxy *p = c->p;
    struct evbuffer *in = bufferevent_get_input(src);
    size_t n = evbuffer_get_length(in);
    if (n == 0) {
        return;
    }
    if (c->blackholed) {
        evbuffer_drain(in, n);
        p->swallowed += n;
        return;
    }
    uint64_t delay_ms = 0;
    if (p->mode == MODE_DELAY) {
        delay_ms = p->delay_ms;
    } else if (p->mode == MODE_LOSS && rng_next(p) < p->loss) {
        delay_ms = p->stall_ms;
        p->stalls++;
    }
    struct bufferevent *dst = flow_dst(f);
    if (delay_ms == 0 && f->head == NULL && dst != NULL) {
        bufferevent_write_buffer(dst, in);
        flow_count(f, n);
        return;
    }
    if (f->queued + n > QUEUE_CAP) {
        fprintf(stderr, "faultproxy: delay queue over %u bytes; closing\n",
                QUEUE_CAP);
        conn_free(c, false);
        return;
    }
    struct chunk *ch = malloc(sizeof(*ch) + n);
    if (ch == NULL) {
        conn_free(c, false);
        return;
    }
    evbuffer_remove(in, ch->data, n);
    ch->len = n;
    ch->next = NULL;
    uint64_t due = now_us() + delay_ms * 1000u;
    if (due < f->last_due_us) {
        due = f->last_due_us; /* in order, like TCP */
    }
    ch->due_us = f->last_due_us = due;
    if (f->tail != NULL) {
        f->tail->next = ch;
    } else {
        f->head = ch;
    }
    f->tail = ch;
    f->queued += n;
    if (f->head == ch) {
        flow_arm(f);
    }
}

static void client_read_cb(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    flow_read(c, &c->up, bev);
}

static void server_read_cb(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    flow_read(c, &c->down, bev);
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        evutil_socket_t fd = bufferevent_getfd(bev);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        /* One side went away: so does the other (an RST from the server
         * is passed on as an RST). */
        bool rst = (what & BEV_EVENT_ERROR) && EVUTIL_SOCKET_ERROR() ==
                                                   ECONNRESET;
        conn_free(c, rst);
    }
}

static int conn_connect_server(struct conn *c)
{
    struct proxy *p = c->p;
    c->server = bufferevent_socket_new(p->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (c->server == NULL) {
        return -1;
    }
    bufferevent_setcb(c->server, server_read_cb, NULL, conn_event_cb, c);
    if (bufferevent_socket_connect(c->server, (struct sockaddr *)&p->target,
                                   sizeof(p->target)) != 0) {
        return -1;
    }
    bufferevent_enable(c->server, EV_READ | EV_WRITE);
    return 0;
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd,
                      struct sockaddr *sa, int salen, void *arg)
{
    (void)l;
    (void)sa;
    (void)salen;
    struct proxy *p = arg;
    p->accepted++;
    if (p->mode == MODE_RESET || p->mode == MODE_PARTITION) {
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        evutil_closesocket(fd);
        p->resets++;
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        evutil_closesocket(fd);
        return;
    }
    c->p = p;
    c->up.conn = c->down.conn = c;
    c->up.up = true;
    c->next = p->conns;
    if (p->conns != NULL) {
        p->conns->prev = c;
    }
    p->conns = c;
    p->n_conns++;
    c->client = bufferevent_socket_new(p->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->up.timer = evtimer_new(p->base, flow_timer_cb, &c->up);
    c->down.timer = evtimer_new(p->base, flow_timer_cb, &c->down);
    if (c->client == NULL || c->up.timer == NULL || c->down.timer == NULL) {
        if (c->client == NULL) {
            evutil_closesocket(fd);
        }
        conn_free(c, false);
        return;
    }
    bufferevent_setcb(c->client, client_read_cb, NULL, conn_event_cb, c);
    bufferevent_enable(c->client, EV_READ | EV_WRITE);
    if (p->mode == MODE_DROP) {
        c->blackholed = true; /* accepted, never connected: a black hole */
        return;
    }
    if (conn_connect_server(c) != 0) {
        conn_free(c, false);
    }
}

/* ---- listening and modes --------------------------------------------- */

static void accept_error_cb(struct evconnlistener *l, void *arg)
{
    (void)l;
    (void)arg;
    int err = EVUTIL_SOCKET_ERROR();
    fprintf(stderr, "faultproxy: accept: %s\n",
            evutil_socket_error_to_string(err));
}

static int proxy_listen(struct proxy *p)
{
    if (p->listener != NULL) {
        return 0;
    }
    p->listener = evconnlistener_new_bind(
        p->base, accept_cb, p, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
        (struct sockaddr *)&p->listen_addr, sizeof(p->listen_addr));
    if (p->listener == NULL) {
        return -1;
    }
    evconnlistener_set_error_cb(p->listener, accept_error_cb);
    if (p->listen_addr.sin_port == 0) {
        struct sockaddr_in got;
        socklen_t gl = sizeof(got);
        getsockname(evconnlistener_get_fd(p->listener),
                    (struct sockaddr *)&got, &gl);
        p->listen_addr.sin_port = got.sin_port;
    }
    return 0;
}

/* Bind again after a partition; retried every 50 ms if the port is busy. */
static void relisten_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct proxy *p = arg;
    if (p->mode == MODE_PARTITION || p->listener != NULL) {
        return;
    }
    if (proxy_listen(p) != 0) {
        struct timeval tv = {0, 50000};
        evtimer_add(p->relisten_ev, &tv);
    }
}

static void close_all(struct proxy *p, bool rst)
{
    while (p->conns != NULL) {
        conn_free(p->conns, rst);
    }
}

/* proxy_set_mode: applies mode to existing connections too. */
static void proxy_set_mode(struct proxy *p, enum mode m)
{
    enum mode old = p->mode;
    p->mode = m;
    switch (m) {
    case MODE_PASS:
    case MODE_DELAY:
    case MODE_LOSS:
        break;
    case MODE_DROP:
        for (struct conn *c = p->conns; c != NULL; c = c->next) {
            c->blackholed = true;
            flow_clear(&c->up);
            flow_clear(&c->down);
        }
        break;
    case MODE_RESET:
        close_all(p, true);
        break;
    case MODE_PARTITION:
        close_all(p, false);
        if (p->listener != NULL) {
            evconnlistener_free(p->listener);
            p->listener = NULL;
        }
        break;
    }
    if (old == MODE_PARTITION && m != MODE_PARTITION) {
        relisten_cb(-1, 0, p);
    }
}

/* ---- control ---------------------------------------------------------- */

/* ctl_exec: runs one command line; writes the answer line into out. */
static void ctl_exec(struct proxy *p, char *line, char *out, size_t outlen,
                     bool *quit)
{
    char *save = NULL;
    char *cmd = strtok_r(line, " \t\r", &save);
    char *a1 = cmd ? strtok_r(NULL, " \t\r", &save) : NULL;
    char *a2 = a1 ? strtok_r(NULL, " \t\r", &save) : NULL;
    char *end = NULL;
    if (cmd == NULL) {
        snprintf(out, outlen, "err empty command\n");
    } else if (strcmp(cmd, "pass") == 0) {
        proxy_set_mode(p, MODE_PASS);
        snprintf(out, outlen, "ok pass\n");
    } else if (strcmp(cmd, "delay") == 0) {
        long v = a1 ? strtol(a1, &end, 10) : -1;
        if (a1 == NULL || *end != '\0' || v < 0 || v > 600000) {
            snprintf(out, outlen, "err usage: delay MS (0..600000)\n");
            return;
        }
        p->delay_ms = (unsigned)v;
        proxy_set_mode(p, MODE_DELAY);
        snprintf(out, outlen, "ok delay %ld\n", v);
    } else if (strcmp(cmd, "loss") == 0) {
        double f = a1 ? strtod(a1, &end) : -1;
        if (a1 == NULL || *end != '\0' || !(f >= 0 && f <= 1)) {
            snprintf(out, outlen, "err usage: loss FRACTION [STALL_MS]\n");
            return;
        }
        long s = 200;
        if (a2 != NULL) {
            s = strtol(a2, &end, 10);
            if (*end != '\0' || s < 0 || s > 600000) {
                snprintf(out, outlen, "err usage: loss FRACTION [STALL_MS]\n");
                return;
            }
        }
        p->loss = f;
        p->stall_ms = (unsigned)s;
        proxy_set_mode(p, MODE_LOSS);
        snprintf(out, outlen, "ok loss %.3f %ld\n", f, s);
    } else if (strcmp(cmd, "drop") == 0) {
        proxy_set_mode(p, MODE_DROP);
        snprintf(out, outlen, "ok drop\n");
    } else if (strcmp(cmd, "reset") == 0) {
        proxy_set_mode(p, MODE_RESET);
        snprintf(out, outlen, "ok reset\n");
    } else if (strcmp(cmd, "partition") == 0) {
        proxy_set_mode(p, MODE_PARTITION);
        snprintf(out, outlen, "ok partition\n");
    } else if (strcmp(cmd, "status") == 0) {
        snprintf(out, outlen,
                 "ok mode=%s delay_ms=%u loss=%.3f stall_ms=%u port=%u "
                 "listening=%d conns=%u accepted=%llu resets=%llu "
                 "bytes_up=%llu bytes_down=%llu swallowed=%llu "
                 "stalls=%llu\n",
                 mode_names[p->mode], p->delay_ms, p->loss, p->stall_ms,
                 ntohs(p->listen_addr.sin_port), p->listener != NULL,
                 p->n_conns, (unsigned long long)p->accepted,
                 (unsigned long long)p->resets,
                 (unsigned long long)p->bytes_up,
                 (unsigned long long)p->bytes_down,
                 (unsigned long long)p->swallowed,
                 (unsigned long long)p->stalls);
    } else if (strcmp(cmd, "quit") == 0) {
        *quit = true;
        snprintf(out, outlen, "ok quit\n");
    } else {
        snprintf(out, outlen,
                 "err unknown command (pass, delay MS, loss F [MS], drop, "
                 "reset, partition, status, quit)\n");
    }
}

/* Reads complete lines from bev, answers each on reply (bev itself for
 * the control socket, stdout for stdin). */
static void ctl_lines(struct proxy *p, struct bufferevent *bev, bool to_stdout)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    for (int i = 0; i < 1000; i++) {
        size_t n = 0;
        char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_LF);
        if (line == NULL) {
            if (evbuffer_get_length(in) > LINE_MAX_CTL) {
                evbuffer_drain(in, evbuffer_get_length(in));
            }
            return;
        }
        char out[512];
        bool quit = false;
        ctl_exec(p, line, out, sizeof(out), &quit);
        free(line);
        if (to_stdout) {
            fputs(out, stdout);
            fflush(stdout);
        } else {
            bufferevent_write(bev, out, strlen(out));
        }
        if (quit) {
            event_base_loopexit(p->base, NULL);
            return;
        }
    }
}

static void ctl_read_cb(struct bufferevent *bev, void *arg)
{
    ctl_lines(arg, bev, false);
}

static void ctl_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        bufferevent_free(bev);
    }
}

static void ctl_accept_cb(struct evconnlistener *l, evutil_socket_t fd,
                          struct sockaddr *sa, int salen, void *arg)
{
    (void)l;
    (void)sa;
    (void)salen;
    struct proxy *p = arg;
    struct bufferevent *bev = bufferevent_socket_new(p->base, fd,
                                                     BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        evutil_closesocket(fd);
        return;
    }
    bufferevent_setcb(bev, ctl_read_cb, NULL, ctl_event_cb, p);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static void stdin_read_cb(struct bufferevent *bev, void *arg)
{
    ctl_lines(arg, bev, true);
}

static void stdin_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct proxy *p = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        event_base_loopexit(p->base, NULL); /* the controller is gone */
    }
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    event_base_loopexit(((struct proxy *)arg)->base, NULL);
}

/* ---- main --------------------------------------------------------------- */

/* parse_loopback: "127.0.0.1:PORT" (any 127/8 address) into sa. */
static int parse_loopback(const char *s, struct sockaddr_in *sa)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    if (colon == NULL || (size_t)(colon - s) >= sizeof(host)) {
        return -1;
    }
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    if (strcmp(host, "localhost") == 0) {
        strcpy(host, "127.0.0.1");
    }
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 0 || port > 65535) {
        return -1;
    }
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
        return -1;
    }
    /* Loopback only: this tool must never touch another address. */
    if ((ntohl(sa->sin_addr.s_addr) >> 24) != 127) {
        return -1;
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: faultproxy --target 127.0.0.1:PORT [--listen "
            "127.0.0.1:PORT]\n"
            "                  [--control PATH] [--stdin] [--seed N]\n"
            "Control commands (one per line): pass | delay MS | loss F "
            "[STALL_MS] |\n"
            "  drop | reset | partition | status | quit\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"target", required_argument, NULL, 't'},
        {"control", required_argument, NULL, 'c'},
        {"stdin", no_argument, NULL, 'i'},
        {"seed", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct proxy px;
    memset(&px, 0, sizeof(px));
    struct proxy *p = &px;
    const char *listen_s = "127.0.0.1:0", *target_s = NULL, *ctl = NULL;
    bool use_stdin = false;
    uint64_t seed = (uint64_t)now_us() ^ ((uint64_t)getpid() << 32);
    int o;
    while ((o = getopt_long(argc, argv, "l:t:c:is:h", opts, NULL)) != -1) {
        switch (o) {
        case 'l':
            listen_s = optarg;
            break;
        case 't':
            target_s = optarg;
            break;
        case 'c':
            ctl = optarg;
            break;
        case 'i':
            use_stdin = true;
            break;
        case 's':
            seed = strtoull(optarg, NULL, 10);
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (target_s == NULL || parse_loopback(target_s, &p->target) != 0 ||
        parse_loopback(listen_s, &p->listen_addr) != 0) {
        fprintf(stderr, "faultproxy: --target and --listen must be "
                        "127.x.x.x:PORT\n");
        usage(stderr);
        return 2;
    }
    if (ctl == NULL && !use_stdin) {
        fprintf(stderr, "faultproxy: give --control PATH and/or --stdin\n");
        return 2;
    }
    p->rng = seed ? seed : 88172645463325252ULL;
    p->stall_ms = 200;
    signal(SIGPIPE, SIG_IGN);
    p->base = event_base_new();
    if (p->base == NULL) {
        return 1;
    }
    p->relisten_ev = evtimer_new(p->base, relisten_cb, p);
    if (proxy_listen(p) != 0) {
        fprintf(stderr, "faultproxy: cannot listen on %s: %s\n", listen_s,
                strerror(errno));
        return 1;
    }
    if (ctl != NULL) {
        struct sockaddr_un un;
        memset(&un, 0, sizeof(un));
        un.sun_family = AF_UNIX;
        if (strlen(ctl) >= sizeof(un.sun_path)) {
            fprintf(stderr, "faultproxy: control path too long\n");
            return 2;
        }
        strcpy(un.sun_path, ctl);
        strcpy(p->ctl_path, ctl);
        unlink(ctl);
        p->ctl = evconnlistener_new_bind(p->base, ctl_accept_cb, p,
                                         LEV_OPT_CLOSE_ON_FREE, 16,
                                         (struct sockaddr *)&un, sizeof(un));
        if (p->ctl == NULL) {
            fprintf(stderr, "faultproxy: cannot listen on %s: %s\n", ctl,
                    strerror(errno));
            return 1;
        }
    }
    if (use_stdin) {
        evutil_make_socket_nonblocking(0);
        p->stdin_bev = bufferevent_socket_new(p->base, 0, 0);
        bufferevent_setcb(p->stdin_bev, stdin_read_cb, NULL, stdin_event_cb,
                          p);
        bufferevent_enable(p->stdin_bev, EV_READ);
    }
    p->sig_ev[0] = evsignal_new(p->base, SIGTERM, signal_cb, p);
    p->sig_ev[1] = evsignal_new(p->base, SIGINT, signal_cb, p);
    event_add(p->sig_ev[0], NULL);
    event_add(p->sig_ev[1], NULL);

    printf("ready port=%u\n", ntohs(p->listen_addr.sin_port));
    fflush(stdout);
    event_base_dispatch(p->base);

    /* Teardown in reverse order. */
    close_all(p, false);
    if (p->stdin_bev != NULL) {
        bufferevent_free(p->stdin_bev);
    }
    if (p->ctl != NULL) {
        evconnlistener_free(p->ctl);
        unlink(p->ctl_path);
    }
    if (p->listener != NULL) {
        evconnlistener_free(p->listener);
    }
    event_free(p->sig_ev[0]);
    event_free(p->sig_ev[1]);
    event_free(p->relisten_ev);
    event_base_free(p->base);
    return 0;
}
