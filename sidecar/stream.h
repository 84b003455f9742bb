/* stream.h: one byte stream over a connected (or connecting) non-blocking
 * descriptor, plain or TLS (tls.h): what both ends of the daemon, a client
 * connection (client.c) and a node's connection (node.c), keep under their
 * own protocol.
 *
 *   output: bytes are appended, and written once at the end of the loop
 *           turn (flush_ev made active) or at once by the owner; EV_WRITE
 *           is armed only while bytes are left that the socket did not
 *           take, which saves the epoll_ctl pair a write event costs per
 *           answer
 *   input:  bytes read are appended at the end; the owner parses them
 *           where they lie (stream_in_data) and consumes what it used
 *   phase:  where the connection is (enum stream_phase), written only by
 *           stream_set_phase()
 *
 * Ownership: the stream owns its buffers, its three events and, while
 * attached, its descriptor and TLS session (stream_close ends both); the
 * owner owns the stream (embedded in struct client or struct node) and
 * its callbacks, which stream_init hands to the events. Errors fill the
 * caller's err buffer; nothing here logs. */
#ifndef REDLOCKD_STREAM_H
#define REDLOCKD_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/types.h>

#include <event2/event.h>

#include "buf.h"

struct tls_conn;

/* Where a stream is. Only stream_set_phase() writes it, and it aborts on
 * a transition stream_phase_allowed() refuses:
 *
 *   CLOSED        -> CONNECTING     connect() is under way
 *   CLOSED        -> OPEN           accepted, or connected at once
 *   CONNECTING    -> TLS_HANDSHAKE  connected; a TLS session starts
 *   CONNECTING    -> OPEN           connected (or, TLS, the handshake done
 *                                   before the connect was seen)
 *   TLS_HANDSHAKE -> OPEN           the TLS handshake completed
 *   any but CLOSED, CLOSING -> CLOSING  the owner tears the connection down
 *   any but CLOSED -> CLOSED         stream_close()
 */
enum stream_phase {
    STREAM_CLOSED = 0,    /* no descriptor */
    STREAM_CONNECTING,    /* connect() in progress: EV_WRITE says when it
                             is done; a TLS session waits to start */
    STREAM_TLS_HANDSHAKE, /* connected; TLS handshake steps run and no
                             byte of ours goes out before they end */
    STREAM_OPEN,          /* bytes flow both ways */
    STREAM_CLOSING,       /* being torn down (the owner fails what was in
                             flight): nothing is read or written; next is
                             CLOSED */
};

/* stream_phase_allowed: whether a stream in phase from may move to phase
 * to (the table above). Pure. */
static inline bool stream_phase_allowed(enum stream_phase from,
                                        enum stream_phase to)
{
    switch (to) {
    case STREAM_CONNECTING:
        return from == STREAM_CLOSED;
    case STREAM_TLS_HANDSHAKE:
        return from == STREAM_CONNECTING;
    case STREAM_OPEN:
        return from == STREAM_CLOSED || from == STREAM_CONNECTING ||
               from == STREAM_TLS_HANDSHAKE;
    case STREAM_CLOSING:
        return from != STREAM_CLOSED && from != STREAM_CLOSING;
    case STREAM_CLOSED:
        return from != STREAM_CLOSED;
    default:
        return false;
    }
}

/* stream_write_wanted: whether EV_WRITE is to be armed after a flush
 * attempt. left: bytes the socket did not take; read_wants_write: a TLS
 * read waits for a writable socket; write_wants_read: the TLS write that
 * stopped waits for a readable one (the read event retries it). Pure. */
static inline bool stream_write_wanted(bool left, bool read_wants_write,
                                       bool write_wants_read)
{
    return left ? !write_wants_read : read_wants_write;
}

/* One stream. Embedded in its owner; every field is the stream's own. */
struct stream {
    int fd;                  /* the descriptor, -1 when none */
    enum stream_phase phase; /* written by stream_set_phase() only */
    struct tls_conn *tls;    /* owned: the TLS session on fd, or NULL */
    struct bytes out;   /* bytes not yet written */
    struct bytes in;    /* bytes read, not yet consumed */
    struct event *read_ev;   /* EV_READ|EV_PERSIST on fd */
    struct event *write_ev;  /* EV_WRITE|EV_PERSIST on fd */
    struct event *flush_ev;  /* made active to write at the end of a turn */
    bool reading;            /* read_ev is added */
    bool write_armed;        /* write_ev is added */
    bool flush_pending;      /* flush_ev is active */
    bool read_wants_write;   /* TLS: a read waits for a writable socket */
    bool write_wants_read;   /* TLS: a write waits for a readable socket */
};

/* Results of stream_recv and stream_read besides a count. */
#define STREAM_WAIT 0   /* nothing there yet */
#define STREAM_EOF (-1) /* the peer closed */
#define STREAM_ERR (-2) /* the connection broke (errno, or err under TLS) */

/* stream_init: a closed stream on base whose events call read_cb,
 * write_cb and flush_cb with arg (the owner). Returns 0, or -1 when out
 * of memory (stream_destroy then frees what was made). */
int stream_init(struct stream *s, struct event_base *base,
                event_callback_fn read_cb, event_callback_fn write_cb,
                event_callback_fn flush_cb, void *arg);

/* stream_destroy: closes s if open and frees its events and buffers. */
void stream_destroy(struct stream *s);

/* stream_attach: s takes fd (and tls, which may be NULL) and enters
 * phase (CONNECTING or OPEN); no event is added yet. Returns 0, or -1
 * when the events could not take fd (fd and tls stay the caller's). */
int stream_attach(struct stream *s, int fd, struct tls_conn *tls,
                  enum stream_phase phase);

/* stream_close: ends the session and the descriptor and every event;
 * the buffers are emptied (bytes_clear). s is CLOSED after. */
void stream_close(struct stream *s);

/* stream_set_phase: moves s to phase; a transition stream_phase_allowed()
 * refuses is a bug and aborts. */
void stream_set_phase(struct stream *s, enum stream_phase phase);

/* stream_connected: the descriptor's connect has completed. */
static inline bool stream_connected(const struct stream *s)
{
    return s->phase == STREAM_TLS_HANDSHAKE || s->phase == STREAM_OPEN;
}

/* stream_tls_handshaking: a TLS session has yet to complete its handshake
 * (it may be waiting for the connect): no byte of ours may go out. */
static inline bool stream_tls_handshaking(const struct stream *s)
{
    return s->tls != NULL &&
           (s->phase == STREAM_CONNECTING || s->phase == STREAM_TLS_HANDSHAKE);
}

/* stream_reading: adds (on) or deletes read_ev. */
void stream_reading(struct stream *s, bool on);

/* stream_write_arm: adds (on) or deletes write_ev. */
void stream_write_arm(struct stream *s, bool on);

/* stream_out_idle: nothing is queued and no write is due: a write now is
 * the only one this turn could make. */
static inline bool stream_out_idle(const struct stream *s)
{
    return !s->flush_pending && !s->write_armed &&
           bytes_used(&s->out) == 0;
}

/* stream_flush_later: makes flush_ev active unless a flush is due already
 * (this turn, or when the socket has room). */
static inline void stream_flush_later(struct stream *s)
{
    if (!s->flush_pending && !s->write_armed) {
        s->flush_pending = true;
        event_active(s->flush_ev, EV_WRITE, 1);
    }
}

/* stream_out_append: queues p[0, len), written at the end of this loop
 * turn (or when the socket has room again). Returns 0, or -1 (nothing
 * queued) when memory ran out. */
static inline int stream_out_append(struct stream *s, const void *p, size_t len)
{
    if (bytes_append(&s->out, p, len) != 0) {
        return -1;
    }
    stream_flush_later(s);
    return 0;
}

/* stream_send: one write of up to len bytes of buf (plain: one write(),
 * retried on EINTR). Returns the count; 0 when the socket must first
 * become writable (or, under TLS, readable: write_wants_read, and write_ev
 * deleted, as the read event retries it); -1 on an error, with err
 * filled. */
ssize_t stream_send(struct stream *s, const char *buf, size_t len, char *err,
                    size_t errlen);

/* stream_recv: one read of up to len bytes into buf. Returns the count,
 * STREAM_WAIT (under TLS the read may wait for a writable socket:
 * read_wants_write, and write_ev added), STREAM_EOF or STREAM_ERR; under
 * TLS either fills err, a plain socket leaves errno set. */
ssize_t stream_recv(struct stream *s, char *buf, size_t len, char *err,
                    size_t errlen);

/* stream_read: stream_recv into the input buffer's end, with room made
 * for BYTES_MIN bytes first. Returns as stream_recv, or STREAM_ERR
 * with err "out of memory" and errno ENOMEM. */
ssize_t stream_read(struct stream *s, char *err, size_t errlen);

/* stream_in_data / stream_in_len: the input not yet consumed. */
static inline const char *stream_in_data(const struct stream *s)
{
    return s->in.data + s->in.off;
}

static inline size_t stream_in_len(const struct stream *s)
{
    return bytes_used(&s->in);
}

/* stream_flush: writes the output until it is out or the socket is
 * full; EV_WRITE is then armed by stream_write_wanted. Returns 1 when
 * everything went out (the buffer is emptied, and freed past
 * BYTES_KEEP), 0 when bytes are left, -1 on an error (err filled). */
int stream_flush(struct stream *s, char *err, size_t errlen);

#endif
