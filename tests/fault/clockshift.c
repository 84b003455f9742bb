/* clockshift.c: an LD_PRELOAD shim that shifts the wall clock of one process
 * by an offset read from a file: the clock-jump nemesis of tests/fault.
 *
 *   CLOCKSHIFT_FILE=/tmp/x/n1.clock LD_PRELOAD=.../libclockshift.so \
 *       redis-server ...
 *   echo 5000 > /tmp/x/n1.clock     # this node's clock jumps 5 s forward
 *   echo 0 > /tmp/x/n1.clock        # ... and back
 *
 * Shifted: clock_gettime(CLOCK_REALTIME, _COARSE, CLOCK_TAI),
 * gettimeofday(), time(), timespec_get(TIME_UTC). CLOCK_MONOTONIC (and
 * every other clock) is untouched. Redis expires keys by mstime(), which is
 * gettimeofday(): a node whose clock jumps forward by more than a key's
 * remaining TTL drops the key at once.
 *
 * The file holds a signed integer in milliseconds; a missing, empty or
 * unparsable file means 0. It is re-read at most every 10 ms (by the real
 * monotonic clock); between reads every thread uses the cached value.
 *
 * Safe inside any process, including Debian's redis-server with its
 * jemalloc (where libfaketime deadlocks: its lazy dlsym() can reach
 * calloc() while jemalloc is initialising and holds its own lock). This
 * shim never allocates, never takes a lock and never calls dlsym() or
 * dlerror(): the real clock is the kernel's vDSO clock_gettime, found by
 * reading the vDSO's ELF symbol table in memory (getauxval), or, when
 * there is none, the raw clock_gettime system call. That is strictly safer
 * than a lazily resolved dlsym(RTLD_NEXT): there is no resolution step that
 * could allocate or lock at all, from the first call on, in any thread,
 * even in a signal handler. The cache is two relaxed atomics and a
 * try-flag so that only one thread at a time re-reads the file (the others
 * use the cached value meanwhile: nobody waits).
 *
 * Build: meson (tests/fault/meson.build) or standalone:
 *   gcc -O2 -Wall -shared -fPIC -o libclockshift.so tests/fault/clockshift.c
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define REREAD_NS 10000000LL /* 10 ms */

typedef int (*clock_fn)(clockid_t, struct timespec *);

/* 0: not looked up yet; 1: looked up (vdso_clock may still be NULL). */
static atomic_int vdso_state;
static _Atomic(clock_fn) vdso_clock;

static atomic_llong offset_ms;        /* the cached shift */
static atomic_llong next_read_ns;     /* monotonic time of the next read */
static atomic_flag reading = ATOMIC_FLAG_INIT;

/* ---- the real clock ----------------------------------------------------- */

/* vdso_find: the address of symbol name in the vDSO, or NULL. Reads only
 * memory the kernel mapped; calls nothing that could allocate or lock. */
static void *vdso_find(const char *name)
{
    uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (base == 0) {
        return NULL;
    }
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) {
        return NULL;
    }
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(base + eh->e_phoff);
    uintptr_t load = 0;
    const ElfW(Dyn) *dyn = NULL;
    int have_load = 0;
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && !have_load) {
            load = base + ph[i].p_offset - ph[i].p_vaddr;
            have_load = 1;
        } else if (ph[i].p_type == PT_DYNAMIC) {
            dyn = (const ElfW(Dyn) *)(base + ph[i].p_offset);
        }
    }
    if (!have_load || dyn == NULL) {
        return NULL;
    }
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const Elf32_Word *hash = NULL;
    const Elf32_Word *gnu_hash = NULL;
    for (int i = 0; dyn[i].d_tag != DT_NULL && i < 256; i++) {
        uintptr_t ptr = dyn[i].d_un.d_ptr + load;
        switch (dyn[i].d_tag) {
        case DT_SYMTAB:
            symtab = (const ElfW(Sym) *)ptr;
            break;
        case DT_STRTAB:
            strtab = (const char *)ptr;
            break;
        case DT_HASH:
            hash = (const Elf32_Word *)ptr;
            break;
        case DT_GNU_HASH:
            gnu_hash = (const Elf32_Word *)ptr;
            break;
        default:
            break;
        }
    }
    if (symtab == NULL || strtab == NULL) {
        return NULL;
    }
    size_t nsyms = 0;
    if (hash != NULL) {
        nsyms = hash[1]; /* nchain */
    } else if (gnu_hash != NULL) {
        /* The highest symbol index reachable from the buckets, then the
         * end of its chain. */
        Elf32_Word nbuckets = gnu_hash[0], symoffset = gnu_hash[1];
        Elf32_Word bloom_size = gnu_hash[2];
        const ElfW(Addr) *bloom = (const ElfW(Addr) *)(gnu_hash + 4);
        const Elf32_Word *buckets = (const Elf32_Word *)(bloom + bloom_size);
        const Elf32_Word *chain = buckets + nbuckets;
        Elf32_Word last = 0;
        for (Elf32_Word b = 0; b < nbuckets; b++) {
            if (buckets[b] > last) {
                last = buckets[b];
            }
        }
        if (last >= symoffset) {
            for (int guard = 0; guard < 4096; guard++) {
                if (chain[last - symoffset] & 1u) {
                    break;
                }
                last++;
            }
            nsyms = (size_t)last + 1;
        }
    }
    for (size_t i = 0; i < nsyms && i < 4096; i++) {
        const ElfW(Sym) *s = &symtab[i];
        int type = ELF64_ST_TYPE(s->st_info);
        int bind = ELF64_ST_BIND(s->st_info);
        if (s->st_shndx == SHN_UNDEF || (type != STT_FUNC && type != STT_NOTYPE)
            || (bind != STB_GLOBAL && bind != STB_WEAK)) {
            continue;
        }
        if (strcmp(strtab + s->st_name, name) == 0) {
            return (void *)(load + s->st_value);
        }
    }
    return NULL;
}

static clock_fn real_clock_fn(void)
{
    if (atomic_load_explicit(&vdso_state, memory_order_acquire) == 0) {
        /* Idempotent: racing threads find the same address. */
        void *f = vdso_find("__vdso_clock_gettime");
        if (f == NULL) {
            f = vdso_find("__kernel_clock_gettime"); /* arm64, riscv */
        }
        atomic_store_explicit(&vdso_clock, (clock_fn)f, memory_order_relaxed);
        atomic_store_explicit(&vdso_state, 1, memory_order_release);
    }
    return atomic_load_explicit(&vdso_clock, memory_order_relaxed);
}

static int real_clock_gettime(clockid_t id, struct timespec *ts)
{
    clock_fn f = real_clock_fn();
    if (f != NULL) {
        int rc = f(id, ts);
        if (rc == 0 || rc == -1) {
            return rc;
        }
        /* The vDSO returns -errno for clocks it does not serve. */
    }
    return (int)syscall(SYS_clock_gettime, id, ts);
}

/* ---- the offset --------------------------------------------------------- */

static long long parse_ms(const char *s, ssize_t n, int *ok)
{
    ssize_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) {
        i++;
    }
    int neg = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) {
        neg = s[i] == '-';
        i++;
    }
    long long v = 0;
    int digits = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9' && digits < 15) {
        v = v * 10 + (s[i] - '0');
        digits++;
        i++;
    }
    *ok = digits > 0;
    return neg ? -v : v;
}

/* read_offset: the file's value, 0 when there is no file. Plain system
 * calls only (async-signal-safe, no allocation). */
static long long read_offset(void)
{
    const char *path = getenv("CLOCKSHIFT_FILE");
    if (path == NULL || path[0] == '\0') {
        return 0;
    }
    int saved = errno;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return 0;
    }
    char buf[64];
    ssize_t n = syscall(SYS_read, fd, buf, sizeof(buf));
    syscall(SYS_close, fd);
    errno = saved;
    int ok = 0;
    long long v = n > 0 ? parse_ms(buf, n, &ok) : 0;
    if (n > 0 && !ok) {
        /* Being rewritten or garbage: keep the last value. */
        return atomic_load_explicit(&offset_ms, memory_order_relaxed);
    }
    return v;
}

static long long current_offset_ms(void)
{
    struct timespec m;
    if (real_clock_gettime(CLOCK_MONOTONIC, &m) != 0) {
        return atomic_load_explicit(&offset_ms, memory_order_relaxed);
    }
    long long now = (long long)m.tv_sec * 1000000000LL + m.tv_nsec;
    long long next = atomic_load_explicit(&next_read_ns, memory_order_relaxed);
    if (now >= next &&
        !atomic_flag_test_and_set_explicit(&reading, memory_order_acquire)) {
        atomic_store_explicit(&offset_ms, read_offset(), memory_order_relaxed);
        atomic_store_explicit(&next_read_ns, now + REREAD_NS,
                              memory_order_relaxed);
        atomic_flag_clear_explicit(&reading, memory_order_release);
    }
    return atomic_load_explicit(&offset_ms, memory_order_relaxed);
}

static void shift(struct timespec *ts, long long ms)
{
    if (ms == 0) {
        return;
    }
    long long ns = (long long)ts->tv_nsec + (ms % 1000) * 1000000LL;
    long long s = (long long)ts->tv_sec + ms / 1000;
    if (ns >= 1000000000LL) {
        ns -= 1000000000LL;
        s++;
    } else if (ns < 0) {
        ns += 1000000000LL;
        s--;
    }
    ts->tv_sec = (time_t)s;
    ts->tv_nsec = (long)ns;
}

static int shifted_clock(clockid_t id)
{
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE ||
           id == CLOCK_TAI;
}

/* ---- the interposed functions ------------------------------------------- */

EXPORT int clock_gettime(clockid_t id, struct timespec *ts)
{
    int rc = real_clock_gettime(id, ts);
    if (rc == 0 && shifted_clock(id)) {
        shift(ts, current_offset_ms());
    }
    return rc;
}

/* glibc declares gettimeofday's tv nonnull, yet callers passing NULL
 * exist: the checks live here, where the compiler assumes nothing. */
static int shifted_gettimeofday(struct timeval *tv, struct timezone *tz)
{
    struct timespec ts;
    int rc = real_clock_gettime(CLOCK_REALTIME, &ts);
    if (rc != 0) {
        return rc;
    }
    shift(&ts, current_offset_ms());
    if (tv != NULL) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = (suseconds_t)(ts.tv_nsec / 1000);
    }
    if (tz != NULL) {
        tz->tz_minuteswest = 0;
        tz->tz_dsttime = 0;
    }
    return 0;
}

EXPORT int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    return shifted_gettimeofday(tv, tz);
}

EXPORT time_t time(time_t *t)
{
    struct timespec ts;
    if (real_clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    shift(&ts, current_offset_ms());
    if (t != NULL) {
        *t = ts.tv_sec;
    }
    return ts.tv_sec;
}

EXPORT int timespec_get(struct timespec *ts, int base)
{
    if (base != TIME_UTC || clock_gettime(CLOCK_REALTIME, ts) != 0) {
        return 0;
    }
    return base;
}
