/* respbench.c: RESP work per reply and per command, sidecar/resp.c against
 * hiredis's reader and formatter, on the shapes the lock path sees.
 *
 * Replies: each case is parsed one reply per read (resp_parse over the
 * bytes; hiredis: redisReaderFeed of the same bytes, then
 * redisReaderGetReply), which is what a node connection sees under light
 * load, and a burst of 64 fenced acquire answers in one read, which is
 * what it sees under heavy load. hiredis runs twice: with reply-object
 * functions that take resp.c's pooled objects (what the daemon would
 * use), and with its own malloc'd objects.
 *
 * Commands: one SET NX PX GET formatted into a batch buffer that already
 * has room, as node_prepare_commands does (resp.c: sized, then written in
 * place; hiredis: redisFormatCommandArgv and redisFormatSdsCommandArgv,
 * then copied in and the hiredis buffer freed).
 *
 * Each cell is the best of a few repetitions, in ns per operation; allocs
 * counts malloc/calloc/realloc calls per operation (not under ASan, whose
 * allocator this program leaves alone). Not a test: nothing is asserted.
 *
 *   build/tests/bench/respbench [iterations]   (default 200000) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "resp.h"

#define REPS 7
#define BURST 64

/* ---- allocation counting -------------------------------------------------
 */

#if defined(__SANITIZE_ADDRESS__)
#define COUNT_ALLOCS 0
#else
#define COUNT_ALLOCS 1
#endif

static unsigned long long n_allocs;

#if COUNT_ALLOCS
/* glibc's own entry points: every allocation in the process, libhiredis's
 * included, comes through these definitions first. */
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t m);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);

void *malloc(size_t n)
{
    n_allocs++;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    n_allocs++;
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    n_allocs++;
    return __libc_realloc(p, n);
}

void free(void *p)
{
    __libc_free(p);
}
#endif

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- hiredis reply objects from resp.c's pool ------------------------------
 * The same objects and string copies as resp_parse's, so that the
 * comparison is of the parsers alone. */

/* Links r into its parent array, as hiredis's own functions do. */
static void *pool_link(const redisReadTask *task, redisReply *r)
{
    if (r != NULL && task->parent != NULL) {
        redisReply *parent = task->parent->obj;
        parent->element[task->idx] = r;
    }
    return r;
}

static void *pool_string(const redisReadTask *task, char *s, size_t n)
{
    return pool_link(task, resp_reply_string(task->type, s, n));
}

static void *pool_array(const redisReadTask *task, int n)
{
    return pool_link(task, resp_reply_array((size_t)n));
}

static void *pool_integer(const redisReadTask *task, long long v)
{
    redisReply *r = resp_reply_new(REDIS_REPLY_INTEGER);
    if (r != NULL) {
        r->integer = v;
    }
    return pool_link(task, r);
}

static void *pool_nil(const redisReadTask *task)
{
    return pool_link(task, resp_reply_new(REDIS_REPLY_NIL));
}

static void pool_free(void *obj)
{
    resp_reply_free(obj);
}

static redisReplyObjectFunctions pool_fns = {
    pool_string, pool_array, pool_integer, pool_nil, pool_free,
};

/* ---- cases --------------------------------------------------------------- */

struct input {
    const char *name;
    const char *buf;
    size_t len;
    int replies; /* in buf */
};

struct cell {
    double ns;
    double allocs;
};

static void fail(const char *what)
{
    fprintf(stderr, "respbench: %s\n", what);
    exit(1);
}

/* Keeps the faster of best and one run (a0, t0 at its start). */
static void keep_best(struct cell *best, unsigned long long a0, uint64_t t0,
                      long iters)
{
    double ns = (double)(now_ns() - t0) / (double)iters;
    if (ns < best->ns) {
        best->ns = ns;
    }
    best->allocs = (double)(n_allocs - a0) / (double)iters;
}

static void parse_resp(const struct input *in, long iters, struct cell *best)
{
    char err[64];
    unsigned long long a0 = n_allocs;
    uint64_t t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        size_t off = 0;
        for (int k = 0; k < in->replies; k++) {
            size_t used = 0;
            redisReply *r = NULL;
            if (resp_parse(in->buf + off, in->len - off, &used, &r, err,
                           sizeof(err)) != RESP_OK) {
                fail("resp_parse refused a case");
            }
            resp_reply_free(r);
            off += used;
        }
    }
    keep_best(best, a0, t0, iters);
}

/* One reader per node connection: made once, as node.c would. */
static void parse_hiredis(redisReader *rd, const struct input *in, long iters,
                          struct cell *best)
{
    unsigned long long a0 = n_allocs;
    uint64_t t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        if (redisReaderFeed(rd, in->buf, in->len) != REDIS_OK) {
            fail("redisReaderFeed failed");
        }
        for (int k = 0; k < in->replies; k++) {
            void *r = NULL;
            if (redisReaderGetReply(rd, &r) != REDIS_OK || r == NULL) {
                fail(rd->errstr[0] ? rd->errstr : "no reply");
            }
            rd->fn->freeObject(r);
        }
    }
    keep_best(best, a0, t0, iters);
}

/* SET <key> <token> NX PX <ttl> GET, as the native acquire sends it. */
static const char *set_argv[7] = {
    "SET",
    "rl:{orders:42}",
    "0f3c2a9e-6b1d-4c7e-9a58-2d4b7e1f0c63",
    "NX",
    "PX",
    "30000",
    "GET",
};
static size_t set_lens[7];

enum fmt { FMT_RESP, FMT_HIREDIS, FMT_HIREDIS_SDS };

static void format_cmd(enum fmt how, long iters, struct cell *best)
{
    static char batch[4096];
    size_t total = 0;
    {
        unsigned long long a0 = n_allocs;
        uint64_t t0 = now_ns();
        for (long i = 0; i < iters; i++) {
            char *q = batch;
            if (how == FMT_RESP) {
                size_t len = resp_command_len(7, set_lens);
                if (len > sizeof(batch)) {
                    fail("batch too small");
                }
                q = resp_put_command(q, 7, set_argv, set_lens);
            } else if (how == FMT_HIREDIS) {
                char *cmd = NULL;
                int len = redisFormatCommandArgv(&cmd, 7, set_argv, set_lens);
                if (len < 0) {
                    fail("redisFormatCommandArgv failed");
                }
                memcpy(q, cmd, (size_t)len);
                q += len;
                redisFreeCommand(cmd);
            } else {
                sds cmd = NULL;
                long long len =
                    redisFormatSdsCommandArgv(&cmd, 7, set_argv, set_lens);
                if (len < 0) {
                    fail("redisFormatSdsCommandArgv failed");
                }
                memcpy(q, cmd, (size_t)len);
                q += len;
                redisFreeSdsCommand(cmd);
            }
            total += (size_t)(q - batch);
            __asm__ volatile("" : : "r"(batch) : "memory");
        }
        keep_best(best, a0, t0, iters);
    }
    if (total == 0) {
        fail("nothing formatted");
    }
}

static void print_cell(struct cell c)
{
    if (COUNT_ALLOCS) {
        printf(" %8.1f %6.1f |", c.ns, c.allocs);
    } else {
        printf(" %8.1f %6s |", c.ns, "-");
    }
}

#define S(x) x, sizeof(x) - 1

int main(int argc, char **argv)
{
    long iters = argc > 1 ? strtol(argv[1], NULL, 10) : 200000;
    if (iters <= 0 || iters > 100000000) {
        fail("iterations: 1 to 100000000");
    }
    static char batch_reply[BURST * 8];
    static char burst[BURST * 32];
    char *p = batch_reply + sprintf(batch_reply, "*%d\r\n", BURST);
    for (int i = 0; i < BURST; i++) {
        p += sprintf(p, ":%d\r\n", i % 2);
    }
    char *b = burst;
    for (int i = 0; i < BURST; i++) {
        b += sprintf(b, "*2\r\n$-1\r\n:%d\r\n", 1000 + i);
    }
    const struct input inputs[] = {
        {"fenced acquire won: *2 $-1 :n", S("*2\r\n$-1\r\n:1042\r\n"), 1},
        {"fenced acquire busy: *2 $36 :n",
         S("*2\r\n$36\r\n0f3c2a9e-6b1d-4c7e-9a58-2d4b7e1f0c63\r\n:1042\r\n"),
         1},
        {"status +OK", S("+OK\r\n"), 1},
        {"nil $-1", S("$-1\r\n"), 1},
        {"integer :n", S(":1\r\n"), 1},
        {"batch script reply, *64 of :n", batch_reply,
         (size_t)(p - batch_reply), 1},
        {"64 fenced answers in one read", burst, (size_t)(b - burst), BURST},
    };
    for (int i = 0; i < 7; i++) {
        set_lens[i] = strlen(set_argv[i]);
    }
    redisReader *pooled = redisReaderCreateWithFunctions(&pool_fns);
    redisReader *plain = redisReaderCreate();
    if (pooled == NULL || plain == NULL) {
        fail("no memory");
    }

    printf("RESP cost, ns and allocations per operation (best of %d runs of "
           "%ld)\n\n",
           REPS, iters);
    printf("%-34s | %15s | %15s | %15s |\n", "reply", "resp.c",
           "hiredis pooled", "hiredis malloc");
    printf("%-34s | %8s %6s | %8s %6s | %8s %6s |\n", "", "ns", "allocs", "ns",
           "allocs", "ns", "allocs");
    for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
        const struct input *in = &inputs[i];
        long n = in->replies > 1 || in->len > 100 ? iters / 16 : iters;
        if (n < 1) {
            n = 1;
        }
        struct cell a = {1e18, 0}, h = {1e18, 0}, m = {1e18, 0};
        /* Interleaved, so that a noisy neighbour slows all three alike. */
        for (int rep = 0; rep < REPS; rep++) {
            parse_resp(in, n, &a);
            parse_hiredis(pooled, in, n, &h);
            parse_hiredis(plain, in, n, &m);
        }
        printf("%-34s |", in->name);
        print_cell(a);
        print_cell(h);
        print_cell(m);
        printf(" hiredis/resp.c %.2f\n", h.ns / a.ns);
    }

    printf("\n%-34s | %15s | %15s | %15s |\n", "command into a batch buffer",
           "resp.c", "FormatCommand", "FormatSds");
    struct cell fa = {1e18, 0}, fh = {1e18, 0}, fs = {1e18, 0};
    for (int rep = 0; rep < REPS; rep++) {
        format_cmd(FMT_RESP, iters, &fa);
        format_cmd(FMT_HIREDIS, iters, &fh);
        format_cmd(FMT_HIREDIS_SDS, iters, &fs);
    }
    printf("%-34s |", "SET k token NX PX ttl GET");
    print_cell(fa);
    print_cell(fh);
    print_cell(fs);
    printf(" hiredis/resp.c %.2f\n", fh.ns / fa.ns);
    redisReaderFree(pooled);
    redisReaderFree(plain);
    resp_pool_drain();
    return 0;
}
