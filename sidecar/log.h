/* log.h: leveled logging to stderr as text or JSON lines.
 *
 * Every message names its subject through a prefix ("node 2", "client 17");
 * passwords are never passed here, and lock tokens only through
 * log_token_hash(). */
#ifndef REDLOCKD_LOG_H
#define REDLOCKD_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum log_level {
    LOG_ERROR = 0, /* something failed and an operator should look */
    LOG_WARN = 1,  /* degraded but handled: node down, client rejected */
    LOG_INFO = 2,  /* lifecycle: start, node up, shutdown */
    LOG_DEBUG = 3, /* per-request detail, off by default */
};

enum log_format {
    LOG_FORMAT_TEXT = 0, /* "2026-11-30T00:00:00.000Z WARN node 1: down: ..." */
    LOG_FORMAT_JSON = 1, /* {"ts":..,"level":..,"subject":..,"msg":..} */
};

/* log_init: sets the threshold and format; may be called again at any time. */
void log_init(enum log_level level, enum log_format format);

/* log_level_parse: "error|warn|info|debug" into *out; returns 0 or -1. */
int log_level_parse(const char *s, enum log_level *out);

/* log_format_parse: "text|json" into *out; returns 0 or -1. */
int log_format_parse(const char *s, enum log_format *out);

/* log_enabled: whether a message at this level would be written, so callers
 * can skip building expensive arguments. */
int log_enabled(enum log_level level);

/* log_write: one line at level, subject may be NULL ("redlockd"). */
void log_write(enum log_level level, const char *subject, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* log_token_hash: a short, stable, non-reversible tag for a lock token
 * (8 hex chars) written into out (at least 9 bytes); returns out. */
char *log_token_hash(const char *token, char *out);

/* A limit on one repeating kind of line (a node's refusals, its drops),
 * owned by whatever repeats: at most one line per interval, counting the
 * ones left out so that the next line can say how many. Zeroed: no line
 * yet. */
struct log_limit {
    uint64_t logged_us;     /* when a line last went out, 0 never */
    unsigned long unlogged; /* lines left out since */
};

/* log_limit_pass: whether a line may go out at now_us (a monotonic
 * reading); if so *skipped is how many were left out since the last one
 * and the interval starts again, else one more is counted as left out. */
bool log_limit_pass(struct log_limit *l, uint64_t now_us, uint64_t interval_us,
                    unsigned long *skipped);

/* log_limit_take: a line goes out at now_us whatever the interval (one
 * already counted as left out): returns the count and starts again. */
unsigned long log_limit_take(struct log_limit *l, uint64_t now_us);

/* log_assert_fail: a failed RL_ASSERT (rlassert.h) at file:line, cond its
 * text: logs "assertion failed: file:line: cond" at error level and
 * aborts. Never returns. */
__attribute__((cold, noreturn)) void log_assert_fail(const char *file, int line,
                                                     const char *cond);

#define log_error(subj, ...) log_write(LOG_ERROR, (subj), __VA_ARGS__)
#define log_warn(subj, ...) log_write(LOG_WARN, (subj), __VA_ARGS__)
#define log_info(subj, ...) log_write(LOG_INFO, (subj), __VA_ARGS__)
#define log_debug(subj, ...)                                                   \
    do {                                                                       \
        if (log_enabled(LOG_DEBUG)) {                                          \
            log_write(LOG_DEBUG, (subj), __VA_ARGS__);                         \
        }                                                                      \
    } while (0)

#endif
