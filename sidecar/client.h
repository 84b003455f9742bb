/* client.h: one client connection's life, from the accepted socket to the
 * free: its state, its output, back-pressure, close and linger. It knows
 * nothing of NDJSON or HTTP: it reaches the connection's framing through
 * the struct framing_ops the connection holds (ndjson.h, httpconn.h, and
 * server.c's for a connection whose framing is not known yet).
 *
 * Data flow of one connection:
 *
 *   bytes -> first non-space byte '{' ? NDJSON : HTTP (server.c)
 *   NDJSON: one line -> proto_decode -> struct call -> ops_submit
 *           (pipelined: every complete line is submitted at once; answers go
 *            out as each completes, carrying the request's id)
 *   HTTP:   http_parse -> http_route -> struct call -> ops_submit
 *           (one request at a time, so answers keep request order)
 *   answer -> call_done_cb (server.c, each call's done) -> the framing's
 *             answer -> the stream's output (stream.h) -> socket, written
 *             at the end of the loop turn (flush_ev), one write for every
 *             answer that turn produced, or at once when it is the only
 *             answer that turn can make; EV_WRITE is armed only while the
 *             socket is full
 *
 * Back-pressure: a connection stops being read while it has max_inflight
 * calls outstanding or more than OUT_HIGH bytes unsent, and resumes when
 * the output drains below OUT_LOW. A client that never reads therefore holds
 * at most OUT_HIGH plus one read's worth of replies. A connection whose
 * framing answers one request at a time (HTTP) also stops while a request
 * is answered and --max-line-bytes of pipelined input wait behind it.
 *
 * Ownership: a client is owned by its struct client_env's list from
 * client_new() to client_free(); everything marked owned below is freed
 * with it. Its calls are owned by the env's pool whatever their state: a
 * call lives in its client's in-flight list until answered, then goes
 * back to the pool; when its client closes first it moves to the orphans
 * and goes back when ops answers it. Nothing but client_set_state()
 * writes the state. */
#ifndef REDLOCKD_CLIENT_H
#define REDLOCKD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "call.h"
#include "list.h"
#include "locks.h"
#include "pool.h"
#include "proto.h"
#include "stream.h"

struct event;
struct event_base;
struct config;
struct ops;
struct listener;
struct http_limits;
struct client;

/* A metrics connection must complete a request this soon after it opens
 * or after its last answer; an idle or trickling peer is closed. */
#define METRICS_IDLE_MS 5000

/* Where a connection is in its life. Only client_set_state() writes it,
 * and it aborts on a transition client_state_allowed() refuses:
 *
 *   OPEN     -> DRAINING     the peer shut its writing side
 *   OPEN     -> CLOSING      we close (an error, a line that is not JSON,
 *                            Connection: close, shutdown)
 *   DRAINING -> CLOSING_EOF  we close (all answered, or as above)
 *   CLOSING  -> CLOSING_EOF  the peer's half-close while we flush
 *   CLOSING  -> LINGERING    flushed: our side shut
 *   any but FREED -> FREED   client_free()
 *
 * OPEN and DRAINING are attached: the connection has its calls and its
 * session. Leaving them detaches it, and from then on nothing is read,
 * submitted or written but what is queued already. */
enum client_state {
    CLIENT_OPEN = 0,    /* reading requests and answering them */
    CLIENT_DRAINING,    /* the peer shut its writing side: what it asked
                           is answered, then the connection closes */
    CLIENT_CLOSING,     /* detached, flushing its output; then our side
                           shuts and it lingers, as the peer may still be
                           sending */
    CLIENT_CLOSING_EOF, /* detached, flushing its output; the peer sent
                           its EOF already, so it is freed once flushed */
    CLIENT_LINGERING,   /* our side shut: what comes is discarded until
                           the peer's EOF, LINGER_MS or LINGER_BYTES */
    CLIENT_FREED,       /* client_free() is letting it go */
};

/* client_state_allowed: whether a connection in state from may move to
 * state to (the table above). OPEN is the state a connection starts in
 * and is never reentered. Pure. */
static inline bool client_state_allowed(enum client_state from,
                                        enum client_state to)
{
    switch (to) {
    case CLIENT_DRAINING:
    case CLIENT_CLOSING:
        return from == CLIENT_OPEN;
    case CLIENT_CLOSING_EOF:
        return from == CLIENT_DRAINING || from == CLIENT_CLOSING;
    case CLIENT_LINGERING:
        return from == CLIENT_CLOSING;
    case CLIENT_FREED:
        return from != CLIENT_FREED;
    case CLIENT_OPEN:
    default:
        return false;
    }
}

/* A call as a connection keeps it: what ops sees, and how to answer it. */
struct client_call {
    struct call call;       /* first: handed to ops; its done is the
                               env's call_done */
    struct client_env *env; /* borrowed: NULL once the env is torn down */
    struct client *client;  /* borrowed: NULL once the client closed */
    struct list_node link;  /* the client's in-flight calls, or the
                               env's orphans */
    unsigned framing_flags; /* the framing's own (how to answer) */
};

/* What every connection of one server shares. Owned by the server. */
struct client_env {
    struct event_base *base;               /* borrowed */
    const struct config *cfg;              /* borrowed */
    struct ops *ops;                       /* borrowed */
    struct listener *lst;                  /* borrowed; NULL in teardown */
    const struct http_limits *http_limits; /* borrowed: HTTP's parser */
    void (*call_done)(struct call *call, const struct response *rsp);
    struct list clients;    /* owned: every open connection, by link */
    int n_clients;          /* lock socket: bounded by --max-connections */
    int n_metrics_clients;  /* metrics listener */
    struct pool call_pool;  /* owned: calls kept for reuse */
    struct list orphans;    /* calls in flight whose client closed */
};

/* The call after c in its list, or NULL. */
static inline struct client_call *client_call_next(const struct client_call *c)
{
    return LIST_ITEM(c->link.next, struct client_call, link);
}

/* What the client code asks of a framing: one table per framing, so that
 * the connection's life is written once and each framing says only how it
 * reads, answers, and when it is done. */
struct framing_ops {
    /* Serves what the input buffer holds. */
    void (*input)(struct client *cl);
    /* Bytes read off the socket while the input buffer is empty, served
     * in place; NULL: they are buffered first, then input(). */
    void (*feed)(struct client *cl, const char *buf, size_t n);
    /* The peer shut its writing side: what is owed gets answered, and
     * the connection closes once nothing more is. */
    void (*peer_eof)(struct client *cl);
    /* resume_ev: going on after an answer or a pause (see
     * client_resume_later()). */
    void (*resume)(struct client *cl);
    /* Writes call's answer: json (len bytes, with room for one byte
     * more), its error code, and closing when the connection closes
     * after it (shutdown). */
    void (*answer)(struct client *cl, const struct client_call *call,
                   char *json, size_t len, enum proto_err err, bool closing);
    /* call came back from ops (answered or not) and is unlinked: gives it
     * back (client_call_free()) and goes on with the connection. */
    void (*answered)(struct client *cl, struct client_call *call);
    bool events; /* a session's event lines are written */
};

/* One client connection. The bools below are not phases of its life:
 * each says whether one of its events is armed or one of its input's
 * conditions holds, and any of them may be true in several states. */
struct client {
    struct client_env *env; /* borrowed */
    uint64_t id;
    struct stream s; /* owned: the socket, its input and output */
    const struct framing_ops *fops; /* its framing; static */
    enum client_state state;        /* written by client_set_state() only */
    struct lock_owner session;      /* NDJSON: locks that die with us */
    struct list calls;              /* in-flight calls (the env's pool) */
    int inflight;
    bool read_paused;        /* back-pressure: over a limit, not read */
    bool bom_checked;        /* the stream's first bytes were not a BOM */
    size_t discarded;        /* bytes thrown away while lingering */
    struct event *linger_ev; /* owned: bound on lingering */
    struct event *resume_ev; /* owned: made active to go on reading */
    struct event *idle_ev;   /* owned: metrics only: METRICS_IDLE_MS */
    bool resume_pending;     /* resume_ev is active */
    bool busy;               /* a framing that answers one request at a
                                time (HTTP) has one in flight */
    bool metrics_only;       /* from --metrics-listen: no lock routes */
    unsigned framing_bits;   /* the framing's own conditions */
    struct list_node link; /* the env's clients */
    char subject[32];
};

/* The first of a list of clients or calls, or NULL. */
static inline struct client *client_first(const struct list *clients)
{
    return LIST_ITEM(clients->head, struct client, link);
}

static inline struct client_call *client_call_first(const struct list *calls)
{
    return LIST_ITEM(calls->head, struct client_call, link);
}

/* Whether cl still has its calls and session: reading, answering. */
static inline bool client_attached(const struct client *cl)
{
    return cl->state == CLIENT_OPEN || cl->state == CLIENT_DRAINING;
}

/* client_new: a connection on the accepted fd, linked into env and read
 * from now on, served by fops until it changes; metrics_only for the
 * --metrics-listen port (its idle deadline starts). Returns NULL, with fd
 * closed, when out of memory. */
struct client *client_new(struct client_env *env, int fd, bool metrics_only,
                          uint64_t id, const struct framing_ops *fops);
/* client_free: detaches cl (its calls become orphans, its session locks
 * are released) and frees it and its socket. */
void client_free(struct client *cl);
/* client_set_state: moves cl to state; a transition
 * client_state_allowed() refuses is a bug, never a peer's doing, and
 * aborts. */
void client_set_state(struct client *cl, enum client_state state);
/* client_close_after_flush: detaches cl if attached; closes now if nothing
 * is left to send, else after the flush. May free cl. */
void client_close_after_flush(struct client *cl);
/* client_input: serves the input buffer (the framing's input, or discards
 * it while lingering). May free cl. */
void client_input(struct client *cl);
/* client_input_keep: appends bytes read from the socket to the input
 * buffer. Returns 0, or -1 (out of memory; the connection is closing). */
int client_input_keep(struct client *cl, const char *data, size_t n);
/* client_drain_cut_request: at the peer's half-close, drains the input
 * and returns true when it held more than blanks (spaces, tabs, CRs,
 * LFs), that is a request cut short, owed an answer. */
bool client_drain_cut_request(struct client *cl);
/* client_over_limits: whether cl is over a back-pressure limit. */
bool client_over_limits(struct client *cl);
/* client_pause: stops reading cl until client_maybe_resume(). */
void client_pause(struct client *cl);
/* client_recheck_limits: after answers or reads changed cl's load, stops
 * reading it over the limits, else lets it resume. */
void client_recheck_limits(struct client *cl);
/* client_resume_later: the framing's resume runs from resume_ev, never
 * inside the answer that made it possible. */
void client_resume_later(struct client *cl);
/* client_out: queues bytes for cl; they go out at the end of this loop
 * turn. cl must be attached. */
void client_out(struct client *cl, const void *data, size_t len);
/* client_answer: as client_out, but written at once when it is cl's last
 * answer in flight and nothing is queued. */
void client_answer(struct client *cl, const char *buf, size_t len);
/* client_flush_now: at exit, writes what the socket takes now. */
void client_flush_now(struct client *cl);
/* client_idle_arm: (re)starts a metrics connection's idle deadline. */
void client_idle_arm(struct client *cl);

/* client_call_new: a call from env's pool, in cl's in-flight list; cl
 * must be attached. NULL when out of memory. */
struct client_call *client_call_new(struct client *cl);
/* client_call_unlink: takes call out of cl's in-flight list. */
void client_call_unlink(struct client *cl, struct client_call *call);
/* client_call_free: gives an unlinked call back to its env's pool (or
 * frees it once the env is torn down). */
void client_call_free(struct client_call *call);
/* client_call_orphan_done: an orphan came back from ops: freed. */
void client_call_orphan_done(struct client_call *call);
/* client_env_release: at teardown, after every client is freed: orphans
 * still in ops lose their env (freed when answered), the pool is freed. */
void client_env_release(struct client_env *env);

#endif
