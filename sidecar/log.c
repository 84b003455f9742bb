/* log.c: leveled log lines to stderr, as text or JSON, one write(2) each.
 *
 * A line is built whole in a stack buffer no larger than PIPE_BUF and handed
 * to the kernel in a single write, so lines from several processes (the
 * --dev children share our stderr) or writers never interleave. Messages
 * may carry client data (resource names), so control characters are escaped
 * in both formats: a message can never forge a second line. */
#include "log.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* PIPE_BUF is the largest write a pipe keeps atomic; stay within it. */
#if defined(PIPE_BUF) && PIPE_BUF < 4096
#define LOG_LINE_MAX PIPE_BUF
#else
#define LOG_LINE_MAX 4096
#endif

/* Room kept back while appending the message for the truncation marker and
 * the line's tail ("..." + "\"}" + "\n"). */
#define LOG_TAIL_RESERVE 16

static enum log_level log_threshold = LOG_INFO;
static enum log_format log_fmt = LOG_FORMAT_TEXT;

static const char *const level_text[] = {"ERROR", "WARN", "INFO", "DEBUG"};
static const char *const level_json[] = {"error", "warn", "info", "debug"};

/* A line under construction. Appends are all-or-nothing per unit (one
 * character or one escape), so a full buffer never holds half an escape. */
struct line {
    char buf[LOG_LINE_MAX];
    size_t len;
    size_t limit; /* appends stop here; raised for the tail */
    bool full;    /* an append did not fit: the message was cut */
};

static void line_put(struct line *l, const char *s, size_t n)
{
    if (l->full || l->len + n > l->limit) {
        l->full = true;
        return;
    }
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void line_puts(struct line *l, const char *s)
{
    line_put(l, s, strlen(s));
}

/* utf8_seq_len: length of the valid UTF-8 sequence at s (at most n bytes),
 * or 0 when the bytes there are not valid UTF-8 (overlong forms,
 * surrogates and code points above U+10FFFF included). */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;

    if (c < 0x80) {
        return 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len) {
        return 0;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            return 0;
        }
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
        return 0;
    }
    return len;
}

/* put_json_string: s as the body of a JSON string: quotes, backslashes and
 * control characters escaped, invalid UTF-8 replaced by U+FFFD so the line
 * always parses. */
static void put_json_string(struct line *l, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str);
    char esc[8];

    for (size_t i = 0; i < n && !l->full;) {
        unsigned char c = s[i];
        size_t len;

        switch (c) {
        case '"':
            line_puts(l, "\\\"");
            i++;
            continue;
        case '\\':
            line_puts(l, "\\\\");
            i++;
            continue;
        case '\n':
            line_puts(l, "\\n");
            i++;
            continue;
        case '\r':
            line_puts(l, "\\r");
            i++;
            continue;
        case '\t':
            line_puts(l, "\\t");
            i++;
            continue;
        default:
            break;
        }
        if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            line_puts(l, esc);
            i++;
            continue;
        }
        len = utf8_seq_len(s + i, n - i);
        if (len == 0) {
            line_puts(l, "\\ufffd");
            i++;
            continue;
        }
        line_put(l, (const char *)s + i, len);
        i += len;
    }
}

/* put_text: s for a text line: control characters become \n, \t, \r or
 * \xHH so the message stays on its line; other bytes pass unchanged. */
static void put_text(struct line *l, const char *str)
{
    char esc[8];

    for (const unsigned char *s = (const unsigned char *)str;
         *s != '\0' && !l->full; s++) {
        if (*s == '\n') {
            line_puts(l, "\\n");
        } else if (*s == '\r') {
            line_puts(l, "\\r");
        } else if (*s == '\t') {
            line_puts(l, "\\t");
        } else if (*s < 0x20 || *s == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", *s);
            line_puts(l, esc);
        } else {
            line_put(l, (const char *)s, 1);
        }
    }
}

/* format_time: the current UTC time as 2026-11-30T00:46:59.123Z. */
static void format_time(char *out, size_t outlen)
{
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L);
}

/* write_all: the line in one write(2); retries only what the kernel did not
 * take (which for stderr on a pipe or terminal does not happen at this
 * size) or after a signal. Errors are dropped: there is nowhere to log
 * them. */
static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, p, n);

        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

/* log_init: sets the threshold (level) and the line format (format). */
void log_init(enum log_level level, enum log_format format)
{
    if (level < LOG_ERROR) {
        level = LOG_ERROR;
    } else if (level > LOG_DEBUG) {
        level = LOG_DEBUG;
    }
    log_threshold = level;
    log_fmt = format == LOG_FORMAT_JSON ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT;
}

/* log_level_parse: s ("error", "warn", "info" or "debug", in any case, so
 * REDLOCKD_LOG_LEVEL=DEBUG works) into *out. Returns 0, or -1 leaving *out
 * unchanged. */
int log_level_parse(const char *s, enum log_level *out)
{
    if (s == NULL) {
        return -1;
    }
    for (int i = LOG_ERROR; i <= LOG_DEBUG; i++) {
        if (strcasecmp(s, level_json[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

/* log_format_parse: s ("text" or "json", any case) into *out. Returns 0, or
 * -1 leaving *out unchanged. */
int log_format_parse(const char *s, enum log_format *out)
{
    if (s == NULL) {
        return -1;
    }
    if (strcasecmp(s, "text") == 0) {
        *out = LOG_FORMAT_TEXT;
        return 0;
    }
    if (strcasecmp(s, "json") == 0) {
        *out = LOG_FORMAT_JSON;
        return 0;
    }
    return -1;
}

/* log_enabled: nonzero when a message at level would be written. */
int log_enabled(enum log_level level)
{
    return level <= log_threshold;
}

/* log_write: formats fmt into one line at level for subject (NULL for the
 * daemon itself) and writes it to stderr. Messages too long for one atomic
 * write are cut and end in "...". errno is preserved, so a caller may log
 * and then still report errno. */
void log_write(enum log_level level, const char *subject, const char *fmt, ...)
{
    int saved_errno = errno;
    char msg[LOG_LINE_MAX];
    char ts[64];
    struct line l;
    va_list ap;
    int n;

    if (level < LOG_ERROR || level > LOG_DEBUG || !log_enabled(level)) {
        errno = saved_errno;
        return;
    }
    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) {
        snprintf(msg, sizeof msg, "(unformattable message)");
    }
    if (subject == NULL) {
        subject = "redlockd";
    }
    format_time(ts, sizeof ts);

    l.len = 0;
    l.full = false;
    l.limit = sizeof l.buf - LOG_TAIL_RESERVE;
    if (log_fmt == LOG_FORMAT_JSON) {
        line_puts(&l, "{\"ts\":\"");
        line_puts(&l, ts);
        line_puts(&l, "\",\"level\":\"");
        line_puts(&l, level_json[level]);
        line_puts(&l, "\",\"subject\":\"");
        put_json_string(&l, subject);
        line_puts(&l, "\",\"msg\":\"");
        put_json_string(&l, msg);
    } else {
        char head[96];

        /* Level padded to five so messages line up: "WARN  node 1: ..". */
        snprintf(head, sizeof head, "%s %-5s ", ts, level_text[level]);
        line_puts(&l, head);
        put_text(&l, subject);
        line_puts(&l, ": ");
        put_text(&l, msg);
    }
    /* The tail always fits: the reserve was kept back for it. */
    l.limit = sizeof l.buf;
    if (l.full || (n >= 0 && (size_t)n >= sizeof msg)) {
        l.full = false;
        line_puts(&l, "...");
    }
    line_puts(&l, log_fmt == LOG_FORMAT_JSON ? "\"}\n" : "\n");
    write_all(l.buf, l.len);
    errno = saved_errno;
}

/* log_token_hash: FNV-1a (32 bits) of token as 8 lowercase hex characters
 * and a NUL in out (at least 9 bytes); returns out. The tag lets an
 * operator follow one lock through the log; 32 bits of a 128-bit random
 * token give nothing back that could be used to release it. */
char *log_token_hash(const char *token, char *out)
{
    uint32_t h = 2166136261u;

    if (token != NULL) {
        for (const unsigned char *p = (const unsigned char *)token; *p != '\0';
             p++) {
            h ^= *p;
            h *= 16777619u;
        }
    }
    snprintf(out, 9, "%08x", (unsigned)h);
    return out;
}

unsigned long log_limit_take(struct log_limit *l, uint64_t now_us)
{
    unsigned long n = l->unlogged;
    l->logged_us = now_us;
    l->unlogged = 0;
    return n;
}

bool log_limit_pass(struct log_limit *l, uint64_t now_us, uint64_t interval_us,
                    unsigned long *skipped)
{
    if (l->logged_us != 0 && now_us - l->logged_us < interval_us) {
        l->unlogged++;
        return false;
    }
    *skipped = log_limit_take(l, now_us);
    return true;
}

void log_assert_fail(const char *file, int line, const char *cond)
{
    log_write(LOG_ERROR, NULL, "assertion failed: %s:%d: %s", file, line, cond);
    abort();
}
