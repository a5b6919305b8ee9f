/*
 * test_resp.c - backend/resp.c: the scanner counts the replies hiredis parses, cut anywhere;
 * refuses each bound (a bulk string over max_bulk before its body, a reply over max_reply, an
 * array too long or too deep, a line too long), what hiredis would not parse, and replies
 * nobody asked for; and stays refused. Checked against hiredis's own reader as the reference
 * model, on random streams of replies within the bounds.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "resp.h"

#define MAX 1000u

static int scan(const char *s, uint64_t max)
{
	struct bk_resp r;

	bk_resp_init(&r, max);
	return bk_resp_scan(&r, s, strlen(s));
}

/* Each piece of @s scanned alone, one byte at a time: the same total as all at once. */
static int scan_bytes(const char *s, size_t n, uint64_t max)
{
	struct bk_resp r;
	int total = 0;

	bk_resp_init(&r, max);
	for (size_t i = 0; i < n; i++) {
		int k = bk_resp_scan(&r, s + i, 1);

		if (k < 0)
			return k;
		total += k;
	}
	return total;
}

static void replies(void **state)
{
	static const struct {
		const char *s;
		int n;
	} ok[] = {
		{"+OK\r\n", 1}, {"-ERR no\r\n", 1}, {":42\r\n", 1},
		{":-9223372036854775808\r\n", 1},
		{":9223372036854775807\r\n", 1}, {":0\r\n", 1}, {"$-1\r\n", 1}, {"*-1\r\n", 1},
		{"*0\r\n", 1}, {"$0\r\n\r\n", 1}, {"$5\r\nhello\r\n", 1}, {"$2\r\n\r\n\r\n", 1},
		{"$3\r\nabcXY", 1}, /* hiredis skips the two bytes after a body unread */
		{"*2\r\n:1\r\n:0\r\n", 1}, {"*2\r\n*1\r\n:1\r\n$-1\r\n", 1},
		{"+a\rb\r\n", 1}, /* a lone CR is part of a line */
		{"+OK\r\n$-1\r\n:1\r\n", 3}, {"", 0}, {"$5\r\nhel", 0}, {"*2\r\n:1\r\n", 0},
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(scan(ok[i].s, MAX), ok[i].n);
		assert_int_equal(scan_bytes(ok[i].s, strlen(ok[i].s), MAX), ok[i].n);
	}
}

static void refusals(void **state)
{
	static const struct {
		const char *s;
		int err;
	} bad[] = {
		{"x", -EPROTO}, {"\r\n", -EPROTO}, {"$01\r\n", -EPROTO}, {"$-0\r\n", -EPROTO},
		{"$+1\r\n", -EPROTO}, {"$-2\r\n", -EPROTO}, {"$\r\n", -EPROTO}, {"$-\r\n", -EPROTO},
		{"$1 \r\n", -EPROTO}, {":1\r\r\n", -EPROTO}, {":9223372036854775808\r\n", -EPROTO},
		{":-9223372036854775809\r\n", -EPROTO}, {":18446744073709551616\r\n", -EPROTO},
		{"*-2\r\n", -EPROTO}, {"*x\r\n", -EPROTO},
		{"$1001\r\n", -EMSGSIZE}, {"$4000000000\r\n", -EMSGSIZE},
		{"*17\r\n", -E2BIG}, {"*2147483647\r\n", -E2BIG}, {"*50000000\r\n", -E2BIG},
		{"*1\r\n*1\r\n*1\r\n", -E2BIG}, {"*1\r\n*1\r\n*0\r\n", -E2BIG},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(scan(bad[i].s, MAX), bad[i].err);
		assert_int_equal(scan_bytes(bad[i].s, strlen(bad[i].s), MAX), bad[i].err);
	}
}

/* A whole reply of several values is bounded too: its strings together at most max_bulk and
 * a line. */
static void reply_bound(void **state)
{
	const unsigned max = 5000, v = 4700; /* 2 v > max and a line (4099) */
	char *s = malloc(3 * max);
	struct bk_resp r;
	size_t n;

	assert_non_null(s);
	n = (size_t)snprintf(s, 64, "*2\r\n$%u\r\n", v);
	memset(s + n, 'a', v);
	n += v;
	n += (size_t)snprintf(s + n, 64, "\r\n$%u\r\n", v);
	bk_resp_init(&r, max);
	assert_int_equal(bk_resp_scan(&r, s, n), -EMSGSIZE); /* before the second body */
	/* but one value of max_bulk exactly is a reply */
	n = (size_t)snprintf(s, 64, "$%u\r\n", max);
	memset(s + n, 'b', max);
	memcpy(s + n + max, "\r\n", 2);
	assert_int_equal(scan_bytes(s, n + max + 2, max), 1);
	free(s);
}

static void long_lines(void **state)
{
	char *s = malloc(BK_RESP_LINE_MAX + 8);
	struct bk_resp r;

	assert_non_null(s);
	s[0] = '-';
	memset(s + 1, 'e', BK_RESP_LINE_MAX);
	memcpy(s + 1 + BK_RESP_LINE_MAX, "\r\n", 2);
	bk_resp_init(&r, 1u << 20);
	assert_int_equal(bk_resp_scan(&r, s, BK_RESP_LINE_MAX + 3), 1);
	s[1 + BK_RESP_LINE_MAX] = 'e'; /* one more byte of line */
	bk_resp_init(&r, 1u << 20);
	assert_int_equal(bk_resp_scan(&r, s, BK_RESP_LINE_MAX + 2), -EMSGSIZE);
	/* and a line that never ends is refused as it grows, not when it ends */
	bk_resp_init(&r, 1u << 20);
	assert_int_equal(bk_resp_scan(&r, "-", 1), 0);
	for (int i = 0; i < 8; i++)
		if (bk_resp_scan(&r, s + 1, BK_RESP_LINE_MAX / 2) < 0)
			break;
	assert_int_equal(r.err, -EMSGSIZE);
	free(s);
}

static void sticky(void **state)
{
	struct bk_resp r;

	bk_resp_init(&r, MAX);
	assert_int_equal(bk_resp_scan(&r, "$9999\r\n", 7), -EMSGSIZE);
	assert_int_equal(bk_resp_scan(&r, "+OK\r\n", 5), -EMSGSIZE);
}

/* Feed @s to a reader through bk_resp_feed in pieces of @cut, @owed replies asked: @return
 * the replies hiredis gave, or the refusal. */
static int feed(const char *s, size_t n, size_t cut, unsigned owed, uint64_t max)
{
	redisReplyObjectFunctions fns;
	redisReader *rd = redisReaderCreate();
	struct bk_resp r;
	int got = 0, counted = 0, k = 0;
	void *reply;

	assert_non_null(rd);
	assert_int_equal(bk_resp_functions(&fns), 0);
	rd->fn = &fns;
	bk_resp_init(&r, max);
	for (size_t off = 0; off < n && k >= 0; off += cut) {
		size_t m = n - off < cut ? n - off : cut;
		sds b = sdsMakeRoomFor(rd->buf, m);

		assert_non_null(b);
		rd->buf = b;
		memcpy(b + sdslen(b), s + off, m);
		k = bk_resp_feed(&r, rd, m, owed - (unsigned)counted);
		if (k < 0)
			break;
		counted += k;
		while (redisReaderGetReply(rd, &reply) == REDIS_OK && reply) {
			freeReplyObject(reply);
			got++;
		}
		assert_int_equal(rd->err, 0);
		assert_int_equal(got, counted);
	}
	redisReaderFree(rd);
	return k < 0 ? k : got;
}

static void owed(void **state)
{
	const char *s = "+OK\r\n:1\r\n$-1\r\n";

	assert_int_equal(feed(s, strlen(s), 1, 3, MAX), 3);
	assert_int_equal(feed(s, strlen(s), 100, 3, MAX), 3);
	assert_int_equal(feed(s, strlen(s), 100, 2, MAX), -EPROTO); /* one nobody asked for */
	assert_int_equal(feed(s, strlen(s), 1, 2, MAX), -EPROTO);
	assert_int_equal(feed("$2000\r\n", 7, 3, 1, MAX), -EMSGSIZE);
}

/* The reference model: random streams of replies within the bounds, cut at random, counted
 * by the scanner as hiredis parses them; the same streams with one byte changed are refused or
 * still parse without error. */
static size_t gen(char *out, size_t cap, unsigned depth, unsigned *seed)
{
	unsigned t = (unsigned)rand_r(seed) % (depth < BK_RESP_DEPTH_MAX ? 6 : 5);
	size_t n = 0;

	switch (t) {
	case 0:
		return (size_t)snprintf(out, cap, "+OK %u\r\n", (unsigned)rand_r(seed));
	case 1:
		return (size_t)snprintf(out, cap, ":%d\r\n", rand_r(seed) - RAND_MAX / 2);
	case 2:
		return (size_t)snprintf(out, cap, "$-1\r\n");
	case 3: {
		unsigned len = (unsigned)rand_r(seed) % 40;

		n = (size_t)snprintf(out, cap, "$%u\r\n", len);
		for (unsigned i = 0; i < len; i++)
			out[n++] = (char)rand_r(seed);
		out[n++] = '\r';
		out[n++] = '\n';
		return n;
	}
	case 4:
		return (size_t)snprintf(out, cap, "-ERR %u\r\n", (unsigned)rand_r(seed));
	default: {
		unsigned k = (unsigned)rand_r(seed) % (BK_RESP_ELEMS_MAX + 1);

		n = (size_t)snprintf(out, cap, "*%u\r\n", k);
		for (unsigned i = 0; i < k; i++)
			n += gen(out + n, cap - n, depth + 1, seed);
		return n;
	}
	}
}

static void model(void **state)
{
	char *s = malloc(1 << 20);
	unsigned seed = 28;

	assert_non_null(s);
	for (int round = 0; round < 300; round++) {
		size_t n = 0;
		unsigned count = (unsigned)rand_r(&seed) % 20;

		for (unsigned i = 0; i < count; i++)
			n += gen(s + n, (1 << 20) - n, 0, &seed);
		assert_int_equal(feed(s, n, (size_t)rand_r(&seed) % 50 + 1, count, 1u << 20),
				 (int)count);
		if (n) { /* a changed byte: refused, or parsed without error (feed checks) */
			s[(size_t)rand_r(&seed) % n] ^= (char)(1u << (rand_r(&seed) % 8));
			(void)feed(s, n, (size_t)rand_r(&seed) % 50 + 1, UINT_MAX, 1u << 20);
		}
	}
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(replies),
		cmocka_unit_test(refusals),
		cmocka_unit_test(reply_bound),
		cmocka_unit_test(long_lines),
		cmocka_unit_test(sticky),
		cmocka_unit_test(owed),
		cmocka_unit_test(model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
