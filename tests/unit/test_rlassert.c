/* test_rlassert.c: RL_ASSERT costs its condition once and nothing else when
 * it holds; when it fails, the process logs "assertion failed:
 * FILE:LINE: COND" at error level on stderr and dies of SIGABRT, whatever
 * NDEBUG says (it is defined for this file). A failure runs in a child, so
 * that the abort is observed rather than suffered. */
#define NDEBUG 1

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"
#include "rlassert.h"

static void test_holds_once(void **state)
{
    (void)state;
    int n = 0;
    RL_ASSERT(++n == 1);
    assert_int_equal(n, 1);
    RL_ASSERT(n > 0 && n < 2);
    assert_int_equal(n, 1);
}

/* Runs RL_ASSERT(value == 2) in a child whose stderr is a pipe; returns
 * the child's wait status and what it wrote in out. */
static int fail_in_child(int value, char *out, size_t cap)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        signal(SIGABRT, SIG_DFL);
        RL_ASSERT(value == 2);
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t n;
    while (got < cap - 1 && (n = read(fds[0], out + got, cap - 1 - got)) > 0) {
        got += (size_t)n;
    }
    out[got] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void test_failure_logs_and_aborts(void **state)
{
    (void)state;
    log_init(LOG_ERROR, LOG_FORMAT_TEXT);
    char out[1024];
    int status = fail_in_child(3, out, sizeof(out));
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    char want[256];
    snprintf(want, sizeof(want),
             "ERROR redlockd: assertion failed: %s:", __FILE__);
    const char *at = strstr(out, want);
    assert_non_null(at);
    /* then the line of the RL_ASSERT in fail_in_child, and its text */
    int line = 0;
    int end = 0;
    assert_int_equal(
        sscanf(at + strlen(want), "%d: value == 2\n%n", &line, &end), 1);
    assert_true(line > 0 && line < __LINE__);
    assert_true(end > 0);
}

static void test_holding_child_exits(void **state)
{
    (void)state;
    char out[1024];
    int status = fail_in_child(2, out, sizeof(out));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_string_equal(out, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_holds_once),
        cmocka_unit_test(test_failure_logs_and_aborts),
        cmocka_unit_test(test_holding_child_exits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
