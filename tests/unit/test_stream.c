/* test_stream.c: the pure parts of stream.h (its buffers are buf.h's,
 * test_buf.c): which phase may follow which; when EV_WRITE is
 * wanted after a flush; when an append asks for a flush. The socket and
 * TLS halves are the integration tests' (test_backpressure, test_tls,
 * ...). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stream.h"

#define N_PHASES (STREAM_CLOSING + 1)

/* The table atop enum stream_phase, written out again: [from][to]. */
static const bool allowed[N_PHASES][N_PHASES] = {
    [STREAM_CLOSED] = {[STREAM_CONNECTING] = true, [STREAM_OPEN] = true},
    [STREAM_CONNECTING] = {[STREAM_TLS_HANDSHAKE] = true,
                           [STREAM_OPEN] = true,
                           [STREAM_CLOSING] = true,
                           [STREAM_CLOSED] = true},
    [STREAM_TLS_HANDSHAKE] =
        {[STREAM_OPEN] = true, [STREAM_CLOSING] = true, [STREAM_CLOSED] = true},
    [STREAM_OPEN] = {[STREAM_CLOSING] = true, [STREAM_CLOSED] = true},
    [STREAM_CLOSING] = {[STREAM_CLOSED] = true},
};

static void test_phase_pairs(void **state)
{
    (void)state;
    for (int from = 0; from < N_PHASES; from++) {
        for (int to = 0; to < N_PHASES; to++) {
            bool got = stream_phase_allowed((enum stream_phase)from,
                                            (enum stream_phase)to);
            if (got != allowed[from][to]) {
                fail_msg("%d -> %d: got %d", from, to, (int)got);
            }
        }
    }
    /* A value outside the enum is never a target. */
    assert_false(stream_phase_allowed(STREAM_OPEN, (enum stream_phase)99));
}

static void test_phase_closed_is_reentered_only_by_close(void **state)
{
    (void)state;
    for (int from = 0; from < N_PHASES; from++) {
        assert_int_equal(
            stream_phase_allowed((enum stream_phase)from, STREAM_CLOSED),
            from != STREAM_CLOSED);
    }
}

static void test_write_wanted(void **state)
{
    (void)state;
    /* Bytes left: EV_WRITE, unless the TLS write waits for a read. */
    assert_true(stream_write_wanted(true, false, false));
    assert_true(stream_write_wanted(true, true, false));
    assert_false(stream_write_wanted(true, false, true));
    assert_false(stream_write_wanted(true, true, true));
    /* All out: only a TLS read waiting for a writable socket wants it. */
    assert_false(stream_write_wanted(false, false, false));
    assert_true(stream_write_wanted(false, true, false));
    assert_false(stream_write_wanted(false, false, true));
    assert_true(stream_write_wanted(false, true, true));
}

static void test_out_idle(void **state)
{
    (void)state;
    struct stream s = {.fd = -1};
    assert_true(stream_out_idle(&s));
    s.flush_pending = true;
    assert_false(stream_out_idle(&s));
    s.flush_pending = false;
    s.write_armed = true;
    assert_false(stream_out_idle(&s));
    s.write_armed = false;
    assert_int_equal(bytes_append(&s.out, "ab", 2), 0);
    assert_false(stream_out_idle(&s));
    bytes_consume(&s.out, 2);
    assert_true(stream_out_idle(&s));
    /* Connected and handshaking by phase and session. */
    s.phase = STREAM_CONNECTING;
    assert_false(stream_connected(&s));
    assert_false(stream_tls_handshaking(&s));
    s.tls = (struct tls_conn *)&s; /* never dereferenced */
    assert_true(stream_tls_handshaking(&s));
    s.phase = STREAM_TLS_HANDSHAKE;
    assert_true(stream_connected(&s));
    assert_true(stream_tls_handshaking(&s));
    s.phase = STREAM_OPEN;
    assert_true(stream_connected(&s));
    assert_false(stream_tls_handshaking(&s));
    s.phase = STREAM_CLOSING;
    assert_false(stream_connected(&s));
    bytes_free(&s.out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_phase_pairs),
        cmocka_unit_test(test_phase_closed_is_reentered_only_by_close),
        cmocka_unit_test(test_write_wanted),
        cmocka_unit_test(test_out_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
