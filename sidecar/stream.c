/* stream.c: one byte stream over a descriptor, plain or TLS (stream.h):
 * its buffers, its phase, and the reads and writes of both ends. */
#include "stream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rlassert.h"
#include "tls.h"

/* ---- life ---------------------------------------------------------------
 */

void stream_set_phase(struct stream *s, enum stream_phase phase)
{
    RL_ASSERT(stream_phase_allowed(s->phase, phase));
    s->phase = phase;
}

int stream_init(struct stream *s, struct event_base *base,
                event_callback_fn read_cb, event_callback_fn write_cb,
                event_callback_fn flush_cb, void *arg)
{
    *s = (struct stream){.fd = -1, .phase = STREAM_CLOSED};
    /* The socket events get their fd on each attach (event_assign). */
    s->read_ev = event_new(base, -1, EV_READ | EV_PERSIST, read_cb, arg);
    s->write_ev = event_new(base, -1, EV_WRITE | EV_PERSIST, write_cb, arg);
    s->flush_ev = event_new(base, -1, 0, flush_cb, arg);
    if (s->read_ev == NULL || s->write_ev == NULL || s->flush_ev == NULL) {
        return -1;
    }
    return 0;
}

void stream_destroy(struct stream *s)
{
    if (s->phase != STREAM_CLOSED) {
        stream_close(s);
    }
    struct event *evs[] = {s->read_ev, s->write_ev, s->flush_ev};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
        if (evs[i] != NULL) {
            event_free(evs[i]);
        }
    }
    s->read_ev = s->write_ev = s->flush_ev = NULL;
    bytes_free(&s->out);
    bytes_free(&s->in);
}

int stream_attach(struct stream *s, int fd, struct tls_conn *tls,
                  enum stream_phase phase)
{
    RL_ASSERT(s->phase == STREAM_CLOSED && s->fd < 0);
    struct event_base *base = event_get_base(s->read_ev);
    if (event_assign(s->read_ev, base, fd, EV_READ | EV_PERSIST,
                     event_get_callback(s->read_ev),
                     event_get_callback_arg(s->read_ev)) != 0 ||
        event_assign(s->write_ev, base, fd, EV_WRITE | EV_PERSIST,
                     event_get_callback(s->write_ev),
                     event_get_callback_arg(s->write_ev)) != 0) {
        return -1;
    }
    s->fd = fd;
    s->tls = tls;
    stream_set_phase(s, phase);
    return 0;
}

void stream_close(struct stream *s)
{
    event_del(s->read_ev);
    event_del(s->write_ev);
    event_del(s->flush_ev);
    s->reading = s->write_armed = s->flush_pending = false;
    s->read_wants_write = s->write_wants_read = false;
    tls_conn_destroy(s->tls);
    s->tls = NULL;
    if (s->fd >= 0) {
        close(s->fd);
    }
    s->fd = -1;
    bytes_clear(&s->in); /* a large reply's buffer goes with it */
    s->out.off = s->out.len = 0;
    if (s->phase != STREAM_CLOSED) {
        stream_set_phase(s, STREAM_CLOSED);
    }
}

void stream_reading(struct stream *s, bool on)
{
    if (on != s->reading) {
        s->reading = on;
        if (on) {
            event_add(s->read_ev, NULL);
        } else {
            event_del(s->read_ev);
        }
    }
}

void stream_write_arm(struct stream *s, bool on)
{
    if (on && !s->write_armed) {
        event_add(s->write_ev, NULL);
    } else if (!on && s->write_armed) {
        event_del(s->write_ev);
    }
    s->write_armed = on;
}

/* ---- bytes --------------------------------------------------------------
 */

/* stream_send/stream_recv's result for a TLS step that moved n bytes. */
static ssize_t tls_count(enum tls_io rc, size_t n, ssize_t closed)
{
    switch (rc) {
    case TLS_OK:
        return (ssize_t)n;
    case TLS_WANT_READ:
    case TLS_WANT_WRITE:
        return STREAM_WAIT;
    case TLS_CLOSED:
        return closed;
    case TLS_ERROR:
        return STREAM_ERR;
    default:
        abort();
    }
}

ssize_t stream_send(struct stream *s, const char *buf, size_t len, char *err,
                    size_t errlen)
{
    if (s->tls != NULL) {
        size_t n;
        enum tls_io rc = tls_write(s->tls, buf, len, &n, err, errlen);
        s->write_wants_read = rc == TLS_WANT_READ;
        if (rc == TLS_WANT_READ) {
            stream_write_arm(s, false); /* the read event retries it */
        } else if (rc == TLS_ERROR || rc == TLS_CLOSED) {
            /* The server's alert ("certificate required") may wait
             * behind the broken pipe: it says more than EPIPE. */
            char scratch[512], why[160];
            if (tls_read(s->tls, scratch, sizeof(scratch), &n, why,
                         sizeof(why)) == TLS_ERROR &&
                strstr(why, "alert") != NULL) {
                snprintf(err, errlen, "%s", why);
            }
        }
        ssize_t r = tls_count(rc, n, -1);
        return r < 0 ? -1 : r;
    }
    for (;;) {
        ssize_t n = write(s->fd, buf, len);
        if (n > 0) {
            return n;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        }
        int e = n < 0 ? errno : EPIPE;
        snprintf(err, errlen, "write: %s", strerror(e));
        errno = e;
        return -1;
    }
}

ssize_t stream_recv(struct stream *s, char *buf, size_t len, char *err,
                    size_t errlen)
{
    if (s->tls != NULL) {
        size_t n;
        enum tls_io rc = tls_read(s->tls, buf, len, &n, err, errlen);
        s->read_wants_write = rc == TLS_WANT_WRITE;
        if (rc == TLS_WANT_WRITE) {
            stream_write_arm(s, true); /* the write event retries it */
        }
        return tls_count(rc, n, STREAM_EOF);
    }
    ssize_t n;
    do {
        n = read(s->fd, buf, len);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        return n;
    }
    if (n == 0) {
        return STREAM_EOF;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK ? STREAM_WAIT : STREAM_ERR;
}

ssize_t stream_read(struct stream *s, char *err, size_t errlen)
{
    if (bytes_reserve(&s->in, BYTES_MIN) != 0) {
        snprintf(err, errlen, "out of memory");
        errno = ENOMEM;
        return STREAM_ERR;
    }
    ssize_t n = stream_recv(s, s->in.data + s->in.len, bytes_room(&s->in),
                            err, errlen);
    if (n > 0) {
        s->in.len += (size_t)n;
    }
    return n;
}

int stream_flush(struct stream *s, char *err, size_t errlen)
{
    struct bytes *b = &s->out;
    while (b->off < b->len) {
        ssize_t n =
            stream_send(s, b->data + b->off, b->len - b->off, err, errlen);
        if (n > 0) {
            b->off += (size_t)n;
            continue;
        }
        if (n == 0) {
            stream_write_arm(s, stream_write_wanted(true, s->read_wants_write,
                                                    s->write_wants_read));
            return 0;
        }
        return -1;
    }
    /* Let a burst's buffer go; the next write starts small again. */
    bytes_clear(b);
    stream_write_arm(s, stream_write_wanted(false, s->read_wants_write,
                                            s->write_wants_read));
    return 1;
}
