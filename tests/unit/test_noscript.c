/* test_noscript.c: the NOSCRIPT recovery window's rules (noscript.h):
 * which error is NOSCRIPT's, when a window opens, which replies re-send,
 * which answer the listed acquires first, and which listed commands are
 * answered with the error instead of re-sent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "noscript.h"

static void test_is_error(void **state)
{
    (void)state;
    const char *e = "NOSCRIPT No matching script. Please use EVAL.";
    assert_true(noscript_is_error(e, strlen(e)));
    assert_true(noscript_is_error("NOSCRIPT", 8));
    assert_false(noscript_is_error("NOSCRIP", 7));
    assert_false(noscript_is_error("ERR unknown command", 19));
    assert_false(noscript_is_error("noscript", 8));
    assert_false(noscript_is_error(NULL, 0));
}

static void test_opens(void **state)
{
    (void)state;
    assert_true(noscript_opens(false, true));
    assert_false(noscript_opens(true, true));   /* one window at a time */
    assert_false(noscript_opens(false, false)); /* no NOSCRIPT, no window */
    assert_false(noscript_opens(true, false));
}

static void test_resend_what_did_not_run(void **state)
{
    (void)state;
    struct noscript_reply r = {
        .open = true, .noscript = true, .script = true, .listed = false};
    assert_int_equal(noscript_act(&r), NOSCRIPT_RESEND);
    r.listed = true; /* later ones join the list behind it */
    assert_int_equal(noscript_act(&r), NOSCRIPT_RESEND);
}

static void test_timed_out_noscript_is_answered(void **state)
{
    (void)state;
    /* Its caller was told at the timeout and it never ran: nothing to
     * re-send, and nothing to fail on the list either. */
    struct noscript_reply r = {.open = true,
                               .noscript = true,
                               .done = true,
                               .script = true,
                               .listed = true};
    assert_int_equal(noscript_act(&r), NOSCRIPT_ANSWER);
}

static void test_script_that_ran_fails_listed_first(void **state)
{
    (void)state;
    struct noscript_reply r = {
        .open = true, .noscript = false, .script = true, .listed = true};
    assert_int_equal(noscript_act(&r), NOSCRIPT_FAIL_LISTED);
    /* Even one whose caller timed out: it ran, ahead of the list. */
    r.done = true;
    assert_int_equal(noscript_act(&r), NOSCRIPT_FAIL_LISTED);
}

static void test_plain_answers(void **state)
{
    (void)state;
    /* Outside a window, a plain command in one, or an empty list: the
     * reply is the caller's as usual. */
    struct noscript_reply r = {
        .open = false, .noscript = false, .script = true, .listed = false};
    assert_int_equal(noscript_act(&r), NOSCRIPT_ANSWER);
    r.open = true;
    assert_int_equal(noscript_act(&r), NOSCRIPT_ANSWER); /* list empty */
    r.listed = true;
    r.script = false; /* a plain command ran: it proves nothing */
    assert_int_equal(noscript_act(&r), NOSCRIPT_ANSWER);
}

static void test_refuse_only_acquires(void **state)
{
    (void)state;
    assert_true(noscript_refuse(SCRIPT_ACQUIRE));
    for (int s = 0; s < SCRIPT__COUNT; s++) {
        if (s != SCRIPT_ACQUIRE) {
            assert_false(noscript_refuse(s));
        }
    }
    assert_false(noscript_refuse(-1)); /* not a script command */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_is_error),
        cmocka_unit_test(test_opens),
        cmocka_unit_test(test_resend_what_did_not_run),
        cmocka_unit_test(test_timed_out_noscript_is_answered),
        cmocka_unit_test(test_script_that_ran_fails_listed_first),
        cmocka_unit_test(test_plain_answers),
        cmocka_unit_test(test_refuse_only_acquires),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
