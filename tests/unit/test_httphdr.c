/*
 * test_httphdr.c - Content-Range, Content-Length and date values through httphdr.c.
 *
 * Every value is handed over as an exactly-sized heap copy without a terminating NUL, as curl's
 * header callback would, so a read past the end is caught under ASan and valgrind. Failures must
 * leave the out-parameters alone.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "httphdr.h"

static char *copy(const char *s, size_t len)
{
	char *p = malloc(len ? len : 1);

	assert_non_null(p);
	memcpy(p, s, len);
	return p;
}

static int range_n(const char *s, size_t len, uint64_t *f, uint64_t *l, uint64_t *t)
{
	char *p = copy(s, len);
	int r = httphdr_content_range(p, len, f, l, t);

	free(p);
	return r;
}

static void range_ok(const char *s, uint64_t first, uint64_t last, uint64_t total)
{
	uint64_t f = 1, l = 2, t = 3;

	if (range_n(s, strlen(s), &f, &l, &t) != 0)
		fail_msg("refused Content-Range '%s'", s);
	assert_true(f == first);
	assert_true(l == last);
	assert_true(t == total);
}

static void range_bad(const char *s)
{
	uint64_t f = 1, l = 2, t = 3;

	if (range_n(s, strlen(s), &f, &l, &t) != -EINVAL)
		fail_msg("accepted Content-Range '%s'", s);
	assert_true(f == 1 && l == 2 && t == 3);
}

static void test_content_range(void **state)
{
	static const char *const bad[] = {
	    "",
	    "   ",
	    "bytes",
	    "bytes ",
	    "bytes 5-4/10",  /* first > last */
	    "bytes 0-10/10", /* last == total */
	    "bytes 0-11/10", /* last > total */
	    "bytes 0-0/0",
	    "bytes */1234",    /* unsatisfied form (416): no range */
	    "bytes=0-99/1234", /* the request form */
	    "bytes 0-99",
	    "bytes 0-99/",
	    "bytes 0-/100",
	    "bytes -99/100",
	    "bytes -1-99/100",
	    "bytes +0-99/100",
	    "bytes 0-+99/100",
	    "bytes 0-99/+100",
	    "bytes 0-99/-100",
	    "bytes 0 -99/100",
	    "bytes 0- 99/100",
	    "bytes 0-99 /100",
	    "bytes 0-99/ 100",
	    "bytes  0-99/100",
	    "bytes\t0-99/100",
	    "bytes0-99/100",
	    "bytes 0-99/100x",
	    "bytes 0-99/100 x",
	    "bytes 0-99/100/100",
	    "bytes 0-99/100,bytes 0-99/100",
	    "bytes 0-99/*x",
	    "bytes 0-99/**",
	    "bytes 0x1-2/3",
	    "bytes 1.0-2/3",
	    "items 0-1/2",
	    "byte 0-1/2",
	    "bytes 0-18446744073709551616/*", /* overflow */
	    "bytes 18446744073709551616-1/2",
	    "bytes 0-1/18446744073709551616",
	    "bytes 0-1/99999999999999999999999",
	    "bytes 0-18446744073709551615/*", /* last would be the "unknown" marker */
	    "bytes 0-99/1234\r",
	    "\rbytes 0-99/1234",
	};

	(void)state;
	range_ok("bytes 0-0/1", 0, 0, 1);
	range_ok("bytes 0-99/1234", 0, 99, 1234);
	range_ok("bytes 1134-1233/1234", 1134, 1233, 1234); /* last == total - 1 */
	range_ok("bytes 1233-1233/1234", 1233, 1233, 1234);
	range_ok("bytes 0-99/*", 0, 99, UINT64_MAX);
	range_ok("  bytes 0-99/1234\t ", 0, 99, 1234);
	range_ok("\tbytes 0-99/*  ", 0, 99, UINT64_MAX);
	range_ok("Bytes 0-99/1234", 0, 99, 1234); /* range units are case-insensitive */
	range_ok("bytes 000-099/01234", 0, 99, 1234);
	range_ok("bytes 0-18446744073709551614/18446744073709551615", 0, UINT64_MAX - 1,
		 UINT64_MAX);
	range_ok("bytes 18446744073709551614-18446744073709551614/*", UINT64_MAX - 1,
		 UINT64_MAX - 1, UINT64_MAX);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		range_bad(bad[i]);
}

static void test_content_range_length(void **state)
{
	static const char s[] = "bytes 0-99/1234garbage";
	uint64_t f = 1, l = 2, t = 3;

	(void)state;
	/* The length ends the value, whatever follows in memory. */
	assert_int_equal(range_n(s, strlen("bytes 0-99/1234"), &f, &l, &t), 0);
	assert_true(f == 0 && l == 99 && t == 1234);
	assert_int_equal(range_n(s, strlen("bytes 0-99/123"), &f, &l, &t), 0);
	assert_true(t == 123);
	assert_int_equal(range_n(s, strlen("bytes 0-99/12"), &f, &l, &t), -EINVAL);
	assert_int_equal(range_n(s, strlen("bytes 0-99/"), &f, &l, &t), -EINVAL);
	assert_int_equal(range_n("bytes 0-99/1234\0", 16, &f, &l, &t), -EINVAL);
	assert_int_equal(range_n("bytes 0-99/1234", 0, &f, &l, &t), -EINVAL);
	assert_int_equal(httphdr_content_range(NULL, 0, &f, &l, &t), -EINVAL);
}

static int length_n(const char *s, size_t len, uint64_t *ret)
{
	char *p = copy(s, len);
	int r = httphdr_content_length(p, len, ret);

	free(p);
	return r;
}

static void test_content_length(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
	    {"0", 0},	  {"1234", 1234}, {" 1234 ", 1234},
	    {"\t5\t", 5}, {"007", 7},	  {"18446744073709551615", UINT64_MAX},
	};
	static const char *const bad[] = {
	    "",
	    " ",
	    "-1",
	    "+1",
	    "-0",
	    "1 2",
	    "1,1",
	    "12a",
	    "0x10",
	    "1.0",
	    "1e3",
	    "18446744073709551616",
	    "99999999999999999999",
	    "\r1",
	    "1\r\n",
	};
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 42;
		assert_int_equal(length_n(good[i].s, strlen(good[i].s), &v), 0);
		assert_true(v == good[i].v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 42;
		if (length_n(bad[i], strlen(bad[i]), &v) != -EINVAL)
			fail_msg("accepted Content-Length '%s'", bad[i]);
		assert_true(v == 42);
	}
	assert_int_equal(length_n("12abc", 2, &v), 0);
	assert_true(v == 12);
	assert_int_equal(length_n("1\0", 2, &v), -EINVAL);
	assert_int_equal(httphdr_content_length(NULL, 0, &v), -EINVAL);
}

static int date_n(const char *s, size_t len, int64_t *ret)
{
	char *p = copy(s, len);
	int r = httphdr_date(p, len, ret);

	free(p);
	return r;
}

static void test_date(void **state)
{
	static const char *const same[] = {
	    "Sun, 06 Nov 1994 08:49:37 GMT",  /* RFC 1123 */
	    "Sunday, 06-Nov-94 08:49:37 GMT", /* RFC 850 */
	    "Sun Nov  6 08:49:37 1994",	      /* asctime */
	    "  Sun, 06 Nov 1994 08:49:37 GMT\t",
	};
	static const char *const bad[] = {
	    "",
	    "   ",
	    "hello",
	    "2023",
	    "Sun, 06 Nov 1994 08:49:37 GMT                                       padding",
	};
	static const char longer[] = "Wed, 22 Nov 2023 10:00:00 GMT0000000";
	int64_t t;

	(void)state;
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		t = 0;
		if (date_n(same[i], strlen(same[i]), &t) != 0)
			fail_msg("refused date '%s'", same[i]);
		assert_int_equal(t, 784111777);
	}
	assert_int_equal(date_n("Thu, 01 Jan 1970 00:00:00 GMT", 29, &t), 0);
	assert_int_equal(t, 0);
	assert_int_equal(date_n("Thu, 29 Feb 2024 12:00:00 GMT", 29, &t), 0);
	assert_int_equal(t, 1709208000);
	/* Not NUL-terminated: only @len bytes count. */
	assert_int_equal(date_n(longer, 29, &t), 0);
	assert_int_equal(t, 1700647200);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		t = 42;
		if (date_n(bad[i], strlen(bad[i]), &t) != -EINVAL)
			fail_msg("accepted date '%s'", bad[i]);
		assert_int_equal(t, 42);
	}
	/* An embedded NUL would hide the rest from curl: refused. */
	assert_int_equal(date_n("Sun, 06 Nov 1994 08:49:37 GMT\0junk", 34, &t), -EINVAL);
	assert_int_equal(httphdr_date(NULL, 0, &t), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_content_range),
	    cmocka_unit_test(test_content_range_length),
	    cmocka_unit_test(test_content_length),
	    cmocka_unit_test(test_date),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
