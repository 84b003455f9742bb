/* test_missing.c: what a node's error says the daemon lacks (missing.c),
 * on the texts of Redis 6.0, 7.0 and 8.0 and Valkey 8: a command renamed
 * away (either quoting), one a script calls, an ACL refusing a command or
 * a key, and errors that are none of these. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "missing.h"

static void expect(const char *err, enum missing_kind kind, const char *name)
{
    char got[16];
    memset(got, 'x', sizeof(got));
    assert_int_equal(missing_of(err, got, sizeof(got)), kind);
    assert_string_equal(got, name);
}

static void test_unknown_command(void **state)
{
    (void)state;
    expect("ERR unknown command 'EVALSHA', with args beginning with: "
           "'8e62' '2' ",
           MISSING_COMMAND, "EVALSHA");
    expect("ERR unknown command `SCRIPT`, with args beginning with: "
           "`LOAD`, ",
           MISSING_COMMAND, "SCRIPT");
    expect("ERR unknown command 'info', with args beginning with: "
           "'server' ",
           MISSING_COMMAND, "INFO");
}

static void test_unknown_from_a_script(void **state)
{
    (void)state;
    expect("ERR Unknown Redis command called from script script: 8906, "
           "on @user_script:3.",
           MISSING_COMMAND, "");
    expect("ERR Unknown command called from script script: 8906, on "
           "@user_script:3.",
           MISSING_COMMAND, "");
    expect("ERR Error running script (call to f_8906): @user_script:3: "
           "@user_script: 3: Unknown Redis command called from Lua script ",
           MISSING_COMMAND, "");
}

static void test_acl(void **state)
{
    (void)state;
    expect("NOPERM User redlockd has no permissions to run the 'evalsha' "
           "command",
           MISSING_PERMISSION, "EVALSHA");
    expect("NOPERM this user has no permissions to run the 'script|load' "
           "command or its subcommand",
           MISSING_PERMISSION, "SCRIPT|LOAD");
    expect("ERR The user executing the script can't run this command or "
           "subcommand script: 8906, on @user_script:3.",
           MISSING_PERMISSION, "");
    expect("NOPERM No permissions to access a key", MISSING_KEY, "");
    expect("NOPERM this user has no permissions to access one of the keys "
           "used as arguments",
           MISSING_KEY, "");
    expect("ERR The user executing the script can't access at least one of "
           "the keys mentioned in the command script: 8906",
           MISSING_KEY, "");
}

static void test_other_errors(void **state)
{
    (void)state;
    expect("OOM command not allowed when used memory > 'maxmemory'.",
           MISSING_NONE, "");
    expect("NOSCRIPT No matching script. Please use EVAL.", MISSING_NONE, "");
    expect("WRONGTYPE Operation against a key holding the wrong kind of "
           "value",
           MISSING_NONE, "");
    expect(NULL, MISSING_NONE, "");
}

static void test_name_cut_to_its_buffer(void **state)
{
    (void)state;
    char got[4];
    assert_int_equal(
        missing_of("ERR unknown command 'EVALSHA', with", got, sizeof(got)),
        MISSING_COMMAND);
    assert_string_equal(got, "EVA");
    assert_string_equal(missing_text(MISSING_COMMAND),
                        "is renamed away or disabled here");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_command),
        cmocka_unit_test(test_unknown_from_a_script),
        cmocka_unit_test(test_acl),
        cmocka_unit_test(test_other_errors),
        cmocka_unit_test(test_name_cut_to_its_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
