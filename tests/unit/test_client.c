/* test_client.c: a connection's life moves only along the transitions
 * enum client_state lists (client_state_allowed), OPEN is never reentered,
 * FREED is left never, and only OPEN and DRAINING are attached. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "client.h"

#define N_STATES (CLIENT_FREED + 1)

/* The table atop enum client_state, written out again: [from][to]. */
static const bool allowed[N_STATES][N_STATES] = {
    [CLIENT_OPEN] = {[CLIENT_DRAINING] = true,
                     [CLIENT_CLOSING] = true,
                     [CLIENT_FREED] = true},
    [CLIENT_DRAINING] = {[CLIENT_CLOSING_EOF] = true, [CLIENT_FREED] = true},
    [CLIENT_CLOSING] = {[CLIENT_CLOSING_EOF] = true,
                        [CLIENT_LINGERING] = true,
                        [CLIENT_FREED] = true},
    [CLIENT_CLOSING_EOF] = {[CLIENT_FREED] = true},
    [CLIENT_LINGERING] = {[CLIENT_FREED] = true},
    [CLIENT_FREED] = {0},
};

static void test_every_pair(void **state)
{
    (void)state;
    for (int from = 0; from < N_STATES; from++) {
        for (int to = 0; to < N_STATES; to++) {
            bool got = client_state_allowed((enum client_state)from,
                                            (enum client_state)to);
            if (got != allowed[from][to]) {
                fail_msg("%d -> %d: got %d", from, to, (int)got);
            }
        }
    }
}

static void test_open_never_reentered(void **state)
{
    (void)state;
    for (int from = 0; from < N_STATES; from++) {
        assert_false(
            client_state_allowed((enum client_state)from, CLIENT_OPEN));
    }
}

static void test_freed_is_final(void **state)
{
    (void)state;
    for (int to = 0; to < N_STATES; to++) {
        assert_false(client_state_allowed(CLIENT_FREED, (enum client_state)to));
    }
    assert_true(client_state_allowed(CLIENT_LINGERING, CLIENT_FREED));
}

/* A state outside the enum is refused, whichever side it is on. */
static void test_out_of_range(void **state)
{
    (void)state;
    enum client_state bad = (enum client_state)(N_STATES + 3);
    assert_false(client_state_allowed(CLIENT_OPEN, bad));
    assert_false(client_state_allowed(bad, CLIENT_CLOSING));
    assert_false(client_state_allowed(bad, CLIENT_LINGERING));
}

/* The half-close paths end where the peer's EOF is known: the states that
 * leave OPEN after an EOF can reach CLOSING_EOF, and only CLOSING can
 * linger. */
static void test_eof_and_linger_paths(void **state)
{
    (void)state;
    assert_true(client_state_allowed(CLIENT_OPEN, CLIENT_DRAINING));
    assert_true(client_state_allowed(CLIENT_DRAINING, CLIENT_CLOSING_EOF));
    assert_false(client_state_allowed(CLIENT_DRAINING, CLIENT_CLOSING));
    assert_false(client_state_allowed(CLIENT_DRAINING, CLIENT_LINGERING));
    assert_false(client_state_allowed(CLIENT_CLOSING_EOF, CLIENT_LINGERING));
    assert_true(client_state_allowed(CLIENT_CLOSING, CLIENT_LINGERING));
}

static void test_attached(void **state)
{
    (void)state;
    struct client cl = {0};
    for (int s = 0; s < N_STATES; s++) {
        cl.state = (enum client_state)s;
        assert_int_equal(client_attached(&cl),
                         s == CLIENT_OPEN || s == CLIENT_DRAINING);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_pair),
        cmocka_unit_test(test_open_never_reentered),
        cmocka_unit_test(test_freed_is_final),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_eof_and_linger_paths),
        cmocka_unit_test(test_attached),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
