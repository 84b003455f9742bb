/* test_utf8.c: unit tests of utf8.h, what both halves of the contract ask
 * of UTF-8: one sequence's length (every lead byte, every malformed form),
 * a whole string's validity, and a clip that never splits a sequence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "utf8.h"

static size_t len_of(const char *s)
{
    return utf8_len((const unsigned char *)s, strlen(s));
}

static void test_len_well_formed(void **state)
{
    (void)state;
    assert_int_equal(len_of("a"), 1);
    assert_int_equal(len_of("\x7f"), 1);
    assert_int_equal(len_of("\xc2\x80"), 2);         /* U+0080 */
    assert_int_equal(len_of("\xdf\xbf"), 2);         /* U+07FF */
    assert_int_equal(len_of("\xe0\xa0\x80"), 3);     /* U+0800 */
    assert_int_equal(len_of("\xed\x9f\xbf"), 3);     /* U+D7FF */
    assert_int_equal(len_of("\xee\x80\x80"), 3);     /* U+E000 */
    assert_int_equal(len_of("\xef\xbf\xbf"), 3);     /* U+FFFF */
    assert_int_equal(len_of("\xf0\x90\x80\x80"), 4); /* U+10000 */
    assert_int_equal(len_of("\xf4\x8f\xbf\xbf"), 4); /* U+10FFFF */
    /* Only the first sequence counts. */
    assert_int_equal(len_of("\xc3\xa9z"), 2);
}

static void test_len_malformed(void **state)
{
    (void)state;
    assert_int_equal(len_of("\x80"), 0); /* stray continuation */
    assert_int_equal(len_of("\xbf"), 0);
    assert_int_equal(len_of("\xc0\x80"), 0);         /* overlong NUL */
    assert_int_equal(len_of("\xc1\xbf"), 0);         /* overlong */
    assert_int_equal(len_of("\xe0\x9f\xbf"), 0);     /* overlong */
    assert_int_equal(len_of("\xed\xa0\x80"), 0);     /* surrogate */
    assert_int_equal(len_of("\xf0\x8f\xbf\xbf"), 0); /* overlong */
    assert_int_equal(len_of("\xf4\x90\x80\x80"), 0); /* above U+10FFFF */
    assert_int_equal(len_of("\xf5\x80\x80\x80"), 0);
    assert_int_equal(len_of("\xff"), 0);
    assert_int_equal(len_of("\xc3z"), 0); /* not a continuation */
    /* Cut short by the end of the input, not by a NUL. */
    assert_int_equal(utf8_len((const unsigned char *)"\xc3\xa9", 1), 0);
    assert_int_equal(utf8_len((const unsigned char *)"\xe2\x82\xac", 2), 0);
    assert_int_equal(utf8_len((const unsigned char *)"\xf0\x9f\x94\x92", 3), 0);
}

static void test_valid(void **state)
{
    (void)state;
    assert_true(utf8_valid("", 0));
    assert_true(utf8_valid("orders:42", 9));
    assert_true(utf8_valid("a\0b", 3)); /* NUL is a character here */
    assert_true(utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x94\x92", 9));
    assert_false(utf8_valid("ab\x80", 3));
    assert_false(utf8_valid("\xe2\x82\xac", 2));
    assert_false(utf8_valid("\xed\xa0\x80", 3));
}

static void test_clip(void **state)
{
    const char *s = "a\xc3\xa9\xe2\x82\xac"; /* a, e-acute, euro: 6 bytes */

    (void)state;
    assert_int_equal(utf8_clip(s, 6, 6), 6);
    assert_int_equal(utf8_clip(s, 6, 10), 6);
    assert_int_equal(utf8_clip(s, 6, 5), 3);
    assert_int_equal(utf8_clip(s, 6, 4), 3);
    assert_int_equal(utf8_clip(s, 6, 3), 3);
    assert_int_equal(utf8_clip(s, 6, 2), 1);
    assert_int_equal(utf8_clip(s, 6, 1), 1);
    assert_int_equal(utf8_clip(s, 6, 0), 0);
    assert_int_equal(utf8_clip("abc", 3, 2), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_len_well_formed),
        cmocka_unit_test(test_len_malformed),
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_clip),
    };

    return cmocka_run_group_tests_name("utf8", tests, NULL, NULL);
}
