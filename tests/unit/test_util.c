/* test_util.c: the daemon's clock reads CLOCK_BOOTTIME (which, unlike
 * CLOCK_MONOTONIC, keeps counting through a suspend) and never goes back.
 * On a machine that was never suspended the two clocks agree, so the
 * bracket below tells them apart only where they differ. Then hex digits,
 * FNV-1a against its published vectors, whitespace, a script's error out
 * of Redis 6.0's wrapper, and the hash table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "util.h"

static uint64_t read_us(clockid_t id)
{
    struct timespec ts;
    assert_int_equal(clock_gettime(id, &ts), 0);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void test_reads_boottime(void **state)
{
    (void)state;
#ifdef CLOCK_BOOTTIME
    for (int i = 0; i < 100; i++) {
        uint64_t before = read_us(CLOCK_BOOTTIME);
        uint64_t now = util_now_us();
        uint64_t after = read_us(CLOCK_BOOTTIME);
        assert_true(before <= now);
        assert_true(now <= after);
    }
#else
    skip();
#endif
}

static void test_never_decreases(void **state)
{
    (void)state;
    uint64_t last = util_now_us();
    assert_true(last > 0);
    for (int i = 0; i < 10000; i++) {
        uint64_t now = util_now_us();
        assert_true(now >= last);
        last = now;
    }
    /* It advances: 2 ms of sleep show as at least 2000 µs. */
    struct timespec ms2 = {0, 2000000};
    nanosleep(&ms2, NULL);
    assert_true(util_now_us() - last >= 2000u);
}

static void test_hex_value(void **state)
{
    (void)state;
    static const char digits[] = "0123456789abcdef";
    for (int v = 0; v < 16; v++) {
        assert_int_equal(util_hex_value((unsigned char)digits[v]), v);
        if (v >= 10) {
            assert_int_equal(util_hex_value((unsigned char)(digits[v] - 32)),
                             v);
        }
    }
    int ok = 0;
    for (int c = 0; c < 256; c++) {
        int v = util_hex_value((unsigned char)c);
        assert_true(v >= -1 && v < 16);
        ok += v >= 0;
    }
    assert_int_equal(ok, 22); /* nothing else: not 'g', ' ', NUL, 0xff */
}

/* Whitespace between requests is exactly space, tab, CR and LF: not a
 * vertical tab, form feed, NUL or a UTF-8 byte. */
static void test_is_space(void **state)
{
    (void)state;
    int n = 0;
    for (int c = 0; c < 256; c++) {
        bool sp = util_is_space((unsigned char)c);
        n += sp;
        if (sp) {
            assert_true(c == ' ' || c == '\t' || c == '\r' || c == '\n');
        }
    }
    assert_int_equal(n, 4);
}

/* The lowercase reading agrees with util_hex_value on 0-9 and a-f, and
 * refuses every other byte: upper case, 'g', NUL, 0xff. */
static void test_hex_lower_value(void **state)
{
    (void)state;
    int ok = 0;
    for (int c = 0; c < 256; c++) {
        int v = util_hex_lower_value((unsigned char)c);
        int lower = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        if (lower) {
            assert_int_equal(v, util_hex_value((unsigned char)c));
            ok++;
        } else {
            assert_int_equal(v, -1);
        }
    }
    assert_int_equal(ok, 16);
    assert_int_equal(util_hex_lower_value('f'), 15);
    assert_int_equal(util_hex_lower_value('F'), -1);
}

/* Every byte value spells as its two lowercase digits, and decodes back;
 * the encoder writes 2n digits and a NUL, and nothing past them. */
static void test_hex_encode(void **state)
{
    (void)state;
    for (unsigned v = 0; v < 16; v++) {
        assert_int_equal(util_hex_digit(v), "0123456789abcdef"[v]);
        assert_int_equal(util_hex_digit(v + 0x30u), "0123456789abcdef"[v]);
    }
    unsigned char all[256];
    for (int i = 0; i < 256; i++) {
        all[i] = (unsigned char)i;
    }
    char out[2 * 256 + 2];
    memset(out, '#', sizeof(out));
    util_hex_encode(all, sizeof(all), out);
    assert_int_equal(out[2 * 256], '\0');
    assert_int_equal(out[2 * 256 + 1], '#');
    for (int i = 0; i < 256; i++) {
        int hi = util_hex_value((unsigned char)out[2 * i]);
        int lo = util_hex_value((unsigned char)out[2 * i + 1]);
        assert_int_equal(hi * 16 + lo, i);
        assert_false(out[2 * i] >= 'A' && out[2 * i] <= 'F');
        assert_false(out[2 * i + 1] >= 'A' && out[2 * i + 1] <= 'F');
    }
    assert_memory_equal(out + 2 * 0xab, "abacad", 6); /* 0xab, 0xac, 0xad */
    memset(out, '#', sizeof(out));
    util_hex_encode(all, 0, out);
    assert_int_equal(out[0], '\0');
    assert_int_equal(out[1], '#');
}

/* The FNV-1a 64-bit test vectors (the empty string is the offset basis). */
static void test_dec_u64(void **state)
{
    (void)state;
    char buf[24];
    memset(buf, 'x', sizeof(buf));
    assert_int_equal(util_dec_u64(buf, 0), 1);
    assert_memory_equal(buf, "0x", 2); /* no NUL written */
    assert_int_equal(util_dec_u64(buf, 7), 1);
    assert_memory_equal(buf, "7", 1);
    assert_int_equal(util_dec_u64(buf, 30000), 5);
    assert_memory_equal(buf, "30000", 5);
    assert_int_equal(util_dec_u64(buf, 2147483647u), 10);
    assert_memory_equal(buf, "2147483647", 10);
    assert_int_equal(util_dec_u64(buf, UINT64_MAX), 20);
    assert_memory_equal(buf, "18446744073709551615", 20);
}

static void test_fnv1a(void **state)
{
    (void)state;
    assert_true(util_fnv1a("", 0) == 0xcbf29ce484222325ULL);
    assert_true(util_fnv1a("a", 1) == 0xaf63dc4c8601ec8cULL);
    assert_true(util_fnv1a("foobar", 6) == 0x85944171f73967e8ULL);
    /* Bytes, not a C string: an embedded NUL counts. */
    assert_true(util_fnv1a("a\0b", 3) != util_fnv1a("a", 1));
}

/* An object with its node embedded, the way ops.c and wake.c keep theirs. */
struct item {
    int tag;
    struct util_hnode hnode;
    char key[16];
    bool seen;
};

#define N_ITEMS 200

static struct item *item_of(struct util_hnode *n)
{
    return n != NULL ? UTIL_CONTAINER_OF(n, struct item, hnode) : NULL;
}

static size_t walk_count(struct util_htable *t, struct item *items)
{
    for (int i = 0; i < N_ITEMS; i++) {
        items[i].seen = false;
    }
    size_t n = 0;
    for (struct util_hnode *h = util_htable_first(t); h != NULL;
         h = util_htable_next(t, h)) {
        struct item *it = item_of(h);
        assert_false(it->seen); /* each once */
        it->seen = true;
        n++;
    }
    return n;
}

static void check_script_error(const char *in, const char *want)
{
    size_t n = 0;
    const char *got = util_script_error(in, strlen(in), &n);
    assert_true(got >= in && got + n == in + strlen(in));
    assert_int_equal(n, strlen(want));
    assert_memory_equal(got, want, n);
}

/* Redis 6.0's wrapped script error gives up the error inside it; Redis
 * 7.0's form, other errors and malformed wrappers stay whole. */
static void test_script_error(void **state)
{
    (void)state;
    check_script_error(
        "ERR Error running script (call to "
        "f_71b72a8e84f4d4d7d79deb0fddfbb763632dd789): @user_script:1: "
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "WRONGTYPE Operation against a key holding the wrong kind of value");
    check_script_error("ERR Error running script (call to f_ab): "
                       "@user_script:12: NOPERM this user has no permissions",
                       "NOPERM this user has no permissions");
    check_script_error("WRONGTYPE Operation against a key holding the wrong "
                       "kind of value script: f_ab, on @user_script:1.",
                       "WRONGTYPE Operation against a key holding the wrong "
                       "kind of value script: f_ab, on @user_script:1.");
    check_script_error("ERR Error running script (call to f_ab): "
                       "@user_script:1",
                       "ERR Error running script (call to f_ab): "
                       "@user_script:1");
    check_script_error("ERR Error running script", "ERR Error running script");
    check_script_error("NOSCRIPT No matching script",
                       "NOSCRIPT No matching script");
    check_script_error("", "");
}

static void test_htable(void **state)
{
    (void)state;
    struct util_htable t;
    /* Few buckets for many keys: long chains, every path walked. */
    assert_int_equal(util_htable_init(&t, 8), 0);
    assert_null(util_htable_first(&t));
    assert_null(util_htable_find(&t, "x", 1));
    struct item *items = calloc(N_ITEMS, sizeof(*items));
    assert_non_null(items);
    for (int i = 0; i < N_ITEMS; i++) {
        items[i].tag = i;
        int len = snprintf(items[i].key, sizeof(items[i].key), "res:%d", i);
        util_htable_add(&t, &items[i].hnode, items[i].key, (size_t)len);
    }
    assert_int_equal(t.count, N_ITEMS);
    assert_int_equal(walk_count(&t, items), N_ITEMS);
    for (int i = 0; i < N_ITEMS; i++) {
        char k[16];
        int len = snprintf(k, sizeof(k), "res:%d", i);
        struct item *it = item_of(util_htable_find(&t, k, (size_t)len));
        assert_non_null(it);
        assert_int_equal(it->tag, i);
    }
    /* A key is its bytes and its length: a prefix is another key. */
    assert_null(util_htable_find(&t, "res:1", 4));
    assert_null(util_htable_find(&t, "res:1x", 6));
    /* Keys that share a chain keep their order of arrival in it. */
    struct util_htable one;
    assert_int_equal(util_htable_init(&one, 1), 0);
    struct item a = {.key = "a"}, b = {.key = "b"}, c = {.key = "c"};
    util_htable_add(&one, &a.hnode, a.key, 1);
    util_htable_add(&one, &b.hnode, b.key, 1);
    util_htable_add(&one, &c.hnode, c.key, 1);
    assert_ptr_equal(util_htable_first(&one), &a.hnode);
    assert_ptr_equal(util_htable_next(&one, &a.hnode), &b.hnode);
    util_htable_remove(&one, &b.hnode); /* from the middle of a chain */
    assert_ptr_equal(util_htable_next(&one, &a.hnode), &c.hnode);
    assert_null(util_htable_next(&one, &c.hnode));
    util_htable_free(&one);

    /* Remove every third during a walk, taking next first. */
    struct util_hnode *h = util_htable_first(&t);
    while (h != NULL) {
        struct util_hnode *next = util_htable_next(&t, h);
        if (item_of(h)->tag % 3 == 0) {
            util_htable_remove(&t, h);
        }
        h = next;
    }
    size_t left = N_ITEMS - (N_ITEMS + 2) / 3;
    assert_int_equal(t.count, left);
    assert_int_equal(walk_count(&t, items), left);
    for (int i = 0; i < N_ITEMS; i++) {
        char k[16];
        int len = snprintf(k, sizeof(k), "res:%d", i);
        struct util_hnode *found = util_htable_find(&t, k, (size_t)len);
        if (i % 3 == 0) {
            assert_null(found);
        } else {
            assert_ptr_equal(found, &items[i].hnode);
        }
    }
    /* Removed keys can come back. */
    util_htable_add(&t, &items[0].hnode, items[0].key, strlen(items[0].key));
    assert_ptr_equal(util_htable_find(&t, "res:0", 5), &items[0].hnode);
    assert_int_equal(t.count, left + 1);
    util_htable_free(&t);
    util_htable_free(&t); /* twice is safe */
    free(items);

    /* A zeroed table (an init that never ran) walks as empty and frees. */
    struct util_htable z;
    memset(&z, 0, sizeof(z));
    assert_null(util_htable_first(&z));
    util_htable_free(&z);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_boottime),
        cmocka_unit_test(test_never_decreases),
        cmocka_unit_test(test_hex_value),
        cmocka_unit_test(test_is_space),
        cmocka_unit_test(test_hex_lower_value),
        cmocka_unit_test(test_hex_encode),
        cmocka_unit_test(test_dec_u64),
        cmocka_unit_test(test_fnv1a),
        cmocka_unit_test(test_script_error),
        cmocka_unit_test(test_htable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
