/* test_buf.c: the byte buffer appends, consumes, moves its live bytes to
 * the front before it grows, doubles, and lets a burst's memory go; the
 * text on it keeps every byte put, in order, across
 * growth; printf pieces of any length land whole; a failure is sticky and
 * voids the text; take hands the text over and leaves the buffer empty. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"

static void test_puts_in_order_across_growth(void **state)
{
    (void)state;
    struct buf b = {0};
    char want[10000];
    size_t n = 0;
    for (int i = 0; i < 1000; i++) {
        char piece[16];
        int k = snprintf(piece, sizeof(piece), "%d,", i);
        buf_put(&b, piece, (size_t)k);
        memcpy(want + n, piece, (size_t)k);
        n += (size_t)k;
    }
    assert_false(buf_failed(&b));
    assert_int_equal(b.b.len, n);
    assert_true(b.b.cap > b.b.len);
    assert_memory_equal(b.b.data, want, n);
    assert_int_equal(b.b.data[b.b.len], '\0');
    buf_free(&b);
    assert_null(b.b.data);
    assert_int_equal(b.b.len, 0);
}

static void test_str_and_empty_put(void **state)
{
    (void)state;
    struct buf b = {0};
    buf_put(&b, "", 0);
    assert_non_null(b.b.data); /* an empty text is still a text */
    assert_string_equal(b.b.data, "");
    buf_str(&b, "abc");
    buf_str(&b, "def");
    assert_string_equal(b.b.data, "abcdef");
    buf_free(&b);
}

static void test_printf_short_and_long(void **state)
{
    (void)state;
    struct buf b = {0};
    buf_printf(&b, "[%d:%s]", 42, "x");
    assert_string_equal(b.b.data, "[42:x]");
    /* Longer than the first allocation and than what is left of it. */
    char *big = malloc(5000);
    assert_non_null(big);
    memset(big, 'y', 4999);
    big[4999] = '\0';
    buf_printf(&b, "<%s>", big);
    assert_false(buf_failed(&b));
    assert_int_equal(b.b.len, 6 + 5001);
    assert_memory_equal(b.b.data, "[42:x]<y", 8);
    assert_int_equal(b.b.data[b.b.len - 1], '>');
    assert_int_equal(b.b.data[b.b.len], '\0');
    free(big);
    buf_free(&b);
}

static void test_failure_is_sticky(void **state)
{
    (void)state;
    struct buf b = {0};
    buf_str(&b, "kept");
    /* A size no allocator can give fails without touching the text. */
    assert_int_equal(buf_reserve(&b, SIZE_MAX - 8), -1);
    assert_true(buf_failed(&b));
    buf_str(&b, "more");
    buf_printf(&b, "%d", 1);
    assert_int_equal(b.b.len, 4);
    assert_int_equal(buf_reserve(&b, 1), -1);
    size_t len = 99;
    assert_null(buf_take(&b, &len));
    assert_int_equal(len, 99); /* untouched: there is no text */
    assert_false(buf_failed(&b)); /* empty again, usable */
    buf_str(&b, "new");
    assert_string_equal(b.b.data, "new");
    buf_free(&b);
}

static void test_take_hands_the_text_over(void **state)
{
    (void)state;
    struct buf b = {0};
    size_t len = 0;
    assert_null(buf_take(&b, &len)); /* nothing put: no text */
    buf_printf(&b, "%s=%u", "n", 7u);
    char *t = buf_take(&b, &len);
    assert_non_null(t);
    assert_int_equal(len, 3);
    assert_string_equal(t, "n=7");
    assert_null(b.b.data);
    assert_int_equal(b.b.len, 0);
    assert_int_equal(b.b.cap, 0);
    free(t);
}

static void test_append_consume(void **state)
{
    (void)state;
    struct bytes b = {0};
    assert_int_equal(bytes_used(&b), 0);
    assert_int_equal(bytes_append(&b, "hello ", 6), 0);
    assert_int_equal(bytes_append(&b, "world", 5), 0);
    assert_int_equal(b.cap, BYTES_MIN);
    assert_int_equal(bytes_used(&b), 11);
    assert_memory_equal(b.data + b.off, "hello world", 11);
    bytes_consume(&b, 6);
    assert_int_equal(bytes_used(&b), 5);
    assert_memory_equal(b.data + b.off, "world", 5);
    /* Emptied: back to the front, the memory kept. */
    bytes_consume(&b, 5);
    assert_int_equal(b.off, 0);
    assert_int_equal(b.len, 0);
    assert_non_null(b.data);
    /* Nothing appended is no allocation. */
    struct bytes e = {0};
    assert_int_equal(bytes_append(&e, NULL, 0), 0);
    assert_null(e.data);
    bytes_free(&b);
    assert_null(b.data);
    assert_int_equal(b.cap, 0);
}

static void test_compaction_before_growth(void **state)
{
    (void)state;
    struct bytes b = {0};
    char chunk[BYTES_MIN];
    memset(chunk, 'a', sizeof(chunk));
    assert_int_equal(bytes_append(&b, chunk, BYTES_MIN - 10), 0);
    bytes_consume(&b, BYTES_MIN - 20); /* 10 live bytes left */
    memset(b.data + b.off, 'b', 10);
    /* 100 bytes do not fit at the end, but do once the live ones move to
     * the front: no growth. */
    assert_int_equal(bytes_append(&b, chunk, 100), 0);
    assert_int_equal(b.cap, BYTES_MIN);
    assert_int_equal(b.off, 0);
    assert_int_equal(bytes_used(&b), 110);
    assert_memory_equal(b.data, "bbbbbbbbbb", 10);
    bytes_free(&b);
}

static void test_growth_doubles(void **state)
{
    (void)state;
    struct bytes b = {0};
    size_t n = 3 * BYTES_MIN + 1;
    char *big = malloc(n);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++) {
        big[i] = (char)(i % 251);
    }
    assert_int_equal(bytes_append(&b, big, 7), 0);
    assert_int_equal(bytes_append(&b, big, n), 0);
    assert_int_equal(b.cap, 4 * BYTES_MIN);
    assert_memory_equal(b.data + 7, big, n);
    /* Room already there: bytes_reserve leaves the buffer alone. */
    char *before = b.data;
    assert_int_equal(bytes_reserve(&b, bytes_room(&b)), 0);
    assert_ptr_equal(b.data, before);
    free(big);
    bytes_free(&b);
}

static void test_clear_keeps_small_frees_large(void **state)
{
    (void)state;
    struct bytes b = {0};
    assert_int_equal(bytes_append(&b, "x", 1), 0);
    bytes_clear(&b);
    assert_int_equal(bytes_used(&b), 0);
    assert_non_null(b.data); /* small: kept for the next bytes */
    assert_int_equal(bytes_make_room(&b, BYTES_KEEP + 1), 0);
    assert_true(b.cap > BYTES_KEEP);
    bytes_clear(&b);
    assert_null(b.data); /* a burst's buffer goes */
    assert_int_equal(b.cap, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_consume),
        cmocka_unit_test(test_compaction_before_growth),
        cmocka_unit_test(test_growth_doubles),
        cmocka_unit_test(test_clear_keeps_small_frees_large),
        cmocka_unit_test(test_puts_in_order_across_growth),
        cmocka_unit_test(test_str_and_empty_put),
        cmocka_unit_test(test_printf_short_and_long),
        cmocka_unit_test(test_failure_is_sticky),
        cmocka_unit_test(test_take_hands_the_text_over),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
