/*
 * test_jsonidx.c - nginx `autoindex_format json` listings through jsonidx_parse().
 *
 * tests/unit/data/nginx-autoindex.json is real output of nginx 1.22.1 (Debian nginx-light,
 * `autoindex on; autoindex_format json;`) for a directory holding a fifo, symlinks, and names
 * with spaces, UTF-8, '"', '\' and a tab; nginx-autoindex-empty.json is its answer for an empty
 * directory. nginx ends lines with CRLF. Bodies are handed over in exactly-sized heap buffers
 * without a NUL, so a read past the end shows up under ASan and valgrind.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "jsonidx.h"

#define MAXE 32

struct got {
	struct {
		char name[256];
		bool is_dir;
		uint64_t size;
		int64_t mtime;
	} e[MAXE];
	int n;
	int stop_after; /* return -ECANCELED after this many calls; 0 = never */
};

static int collect(void *arg, const char *name, bool is_dir, uint64_t size, int64_t mtime)
{
	struct got *g = arg;

	assert_true(g->n < MAXE);
	assert_true(strlen(name) < sizeof(g->e[0].name));
	strcpy(g->e[g->n].name, name);
	g->e[g->n].is_dir = is_dir;
	g->e[g->n].size = size;
	g->e[g->n].mtime = mtime;
	g->n++;
	return g->stop_after && g->n >= g->stop_after ? -ECANCELED : 0;
}

/* Parse @len bytes of @body from an exactly-sized copy. */
static int parse_n(const char *body, size_t len, struct got *g)
{
	char *copy = malloc(len ? len : 1);
	int r;

	assert_non_null(copy);
	memcpy(copy, body, len);
	g->n = 0;
	r = jsonidx_parse(copy, len, collect, g);
	free(copy);
	return r;
}

static int parse(const char *body, struct got *g)
{
	return parse_n(body, strlen(body), g);
}

static void expect_eio(const char *body)
{
	struct got g = {0};

	if (parse(body, &g) != -EIO)
		fail_msg("accepted: %s", body);
	assert_int_equal(g.n, 0); /* a refused listing reports nothing */
}

static char *slurp(const char *rel, size_t *ret_len)
{
	const char *src = getenv("TIERFS_SRCDIR");
	char path[PATH_MAX];
	char *buf;
	long n;
	FILE *f;

	assert_non_null(src);
	snprintf(path, sizeof(path), "%s/tests/unit/data/%s", src, rel);
	f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*ret_len = (size_t)n;
	return buf;
}

#define NOV22 1700647200 /* Wed, 22 Nov 2023 10:00:00 GMT */
#define FEB29 1709208000 /* Thu, 29 Feb 2024 12:00:00 GMT */
#define Y2K_1 946684799	 /* Fri, 31 Dec 1999 23:59:59 GMT */

static void test_nginx_sample(void **state)
{
	static const struct {
		const char *name;
		bool is_dir;
		uint64_t size;
		int64_t mtime;
	} want[] = {
	    {"d\xc3\xafr \xc3\xb8", true, 0, FEB29},
	    {"link-to-sub", true, 0, NOV22},
	    {"sub", true, 0, NOV22},
	    {"a b.log", false, 6, NOV22},
	    {"amp&lt;%20.txt", false, 28, FEB29},
	    {"back\\slash", false, 1, FEB29},
	    {"big.bin", false, 5000000, FEB29},
	    {"empty", false, 0, Y2K_1},
	    /* "fifo" is type "other": skipped */
	    {"link-to-plain", false, 1234, NOV22},
	    {"plain.txt", false, 1234, NOV22},
	    {"quote\"s.txt", false, 1, FEB29},
	    {"tab\there", false, 1, FEB29},
	    {"\xc3\xbcn\xc3\xaf \xe2\x82\xac.log", false, 1, FEB29},
	};
	struct got g = {0};
	size_t len;
	char *body = slurp("nginx-autoindex.json", &len);

	(void)state;
	assert_int_equal(parse_n(body, len, &g), 0);
	assert_int_equal(g.n, sizeof(want) / sizeof(want[0]));
	for (int i = 0; i < g.n; i++) {
		assert_string_equal(g.e[i].name, want[i].name);
		assert_int_equal(g.e[i].is_dir, want[i].is_dir);
		assert_int_equal(g.e[i].size, want[i].size);
		assert_int_equal(g.e[i].mtime, want[i].mtime);
	}

	/* Every strict prefix is an incomplete document. */
	for (size_t n = 0; n < len; n++)
		assert_int_equal(parse_n(body, n, &g), -EIO);
	free(body);

	body = slurp("nginx-autoindex-empty.json", &len);
	assert_int_equal(parse_n(body, len, &g), 0);
	assert_int_equal(g.n, 0);
	free(body);
}

static void test_names(void **state)
{
	struct got g = {0};

	(void)state;
	assert_int_equal(
	    parse("[{\"name\":\"caf\\u00e9 \\\"q\\\" back\\\\slash\",\"type\":\"file\","
		  "\"size\":1},"
		  "{\"name\":\"\\ud83d\\ude00 emoji\",\"type\":\"directory\"},"
		  "{\"name\":\"raw \xe6\x97\xa5\xe5\xbf\x97\",\"type\":\"file\",\"size\":2},"
		  "{\"name\":\"\\u002e\\u002e\\u002e\",\"type\":\"file\",\"size\":3},"
		  "{\"name\":\" lead and trail \",\"type\":\"file\",\"size\":4}]",
		  &g),
	    0);
	assert_int_equal(g.n, 5);
	assert_string_equal(g.e[0].name, "caf\xc3\xa9 \"q\" back\\slash");
	assert_string_equal(g.e[1].name, "\xf0\x9f\x98\x80 emoji");
	assert_true(g.e[1].is_dir);
	assert_int_equal(g.e[1].size, 0);
	assert_int_equal(g.e[1].mtime, INT64_MIN);
	assert_string_equal(g.e[2].name, "raw \xe6\x97\xa5\xe5\xbf\x97");
	assert_string_equal(g.e[3].name, "...");
	assert_string_equal(g.e[4].name, " lead and trail ");

	/* Not one path segment. */
	expect_eio("[{\"name\":\"\",\"type\":\"file\",\"size\":1}]");
	expect_eio("[{\"name\":\".\",\"type\":\"directory\"}]");
	expect_eio("[{\"name\":\"..\",\"type\":\"directory\"}]");
	expect_eio("[{\"name\":\"a/b\",\"type\":\"file\",\"size\":1}]");
	expect_eio("[{\"name\":\"a\\u0000b\",\"type\":\"file\",\"size\":1}]");
	expect_eio("[{\"name\":\"\\/etc\",\"type\":\"directory\"}]");
}

static void test_empty(void **state)
{
	struct got g = {0};

	(void)state;
	assert_int_equal(parse("[]", &g), 0);
	assert_int_equal(parse(" \r\n[\r\n]\r\n", &g), 0);
	assert_int_equal(g.n, 0);
}

static void test_not_an_array(void **state)
{
	(void)state;
	expect_eio("{}");
	expect_eio("{\"name\":\"a\",\"type\":\"file\",\"size\":1}");
	expect_eio("\"a string\"");
	expect_eio("1");
	expect_eio("null");
	expect_eio("true");
}

static void test_garbage(void **state)
{
	struct got g = {0};

	(void)state;
	expect_eio("");
	expect_eio("   ");
	expect_eio("[");
	expect_eio("[{]");
	expect_eio("[{\"name\":\"a\",");
	expect_eio("<html><body><h1>Index of /</h1></body></html>");
	expect_eio("[] x");
	expect_eio("[]]");
	expect_eio("[][]");
	expect_eio("[1,]");
	expect_eio("[nan]");
	expect_eio("\xff\xfe[]");
	/* The length is the end: a NUL inside is data, not a terminator. */
	assert_int_equal(parse_n("[]\0garbage", 10, &g), -EIO);
	assert_int_equal(parse_n("[]\0", 3, &g), -EIO);
	assert_int_equal(parse_n("[]garbage", 2, &g), 0);
}

static void test_bad_entries(void **state)
{
	(void)state;
	expect_eio("[1]");
	expect_eio("[null]");
	expect_eio("[[]]");
	expect_eio("[{\"type\":\"file\",\"size\":1}]");
	expect_eio("[{\"name\":7,\"type\":\"file\",\"size\":1}]");
	expect_eio("[{\"name\":null,\"type\":\"file\",\"size\":1}]");
	expect_eio("[{\"name\":\"a\",\"size\":1}]");
	expect_eio("[{\"name\":\"a\",\"type\":1,\"size\":1}]");
	/* A good entry before a bad one does not make the listing good. */
	expect_eio("[{\"name\":\"ok\",\"type\":\"directory\"},{\"name\":\"a\",\"type\":\"file\"}]");
}

static void test_sizes(void **state)
{
	struct got g = {0};

	(void)state;
	assert_int_equal(parse("[{\"name\":\"a\",\"type\":\"file\",\"size\":9223372036854775807},"
			       "{\"name\":\"b\",\"type\":\"file\",\"size\":0},"
			       "{\"name\":\"d\",\"type\":\"directory\",\"size\":4096}]",
			       &g),
			 0);
	assert_int_equal(g.n, 3);
	assert_true(g.e[0].size == INT64_MAX);
	assert_int_equal(g.e[1].size, 0);
	assert_int_equal(g.e[2].size, 0); /* directories report 0 */

	expect_eio("[{\"name\":\"a\",\"type\":\"file\"}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":-1}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":-9223372036854775808}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":1.5}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":1.0}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":1e3}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":\"12\"}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":null}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":true}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":9223372036854775808}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":18446744073709551615}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":18446744073709551616}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":99999999999999999999999}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":012}]");
}

static void test_mtime(void **state)
{
	struct got g = {0};

	(void)state;
	assert_int_equal(parse("[{\"name\":\"a\",\"type\":\"file\",\"size\":1,"
			       "\"mtime\":\"Wed, 22 Nov 2023 10:00:00 GMT\"},"
			       "{\"name\":\"b\",\"type\":\"file\",\"size\":1}]",
			       &g),
			 0);
	assert_int_equal(g.e[0].mtime, NOV22);
	assert_int_equal(g.e[1].mtime, INT64_MIN);
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":1,\"mtime\":1700647200}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":1,\"mtime\":\"yesterday\"}]");
	expect_eio("[{\"name\":\"a\",\"type\":\"file\",\"size\":1,\"mtime\":\"\"}]");
}

static void test_other_types_skipped(void **state)
{
	struct got g = {0};

	(void)state;
	assert_int_equal(parse("[{\"name\":\"fifo\",\"type\":\"other\",\"mtime\":\"x\"},"
			       "{\"name\":\"l\",\"type\":\"symlink\"},"
			       "{\"name\":\"../../etc\",\"type\":\"whatever\",\"size\":-5},"
			       "{\"name\":\"f\",\"type\":\"file\",\"size\":3},"
			       "{\"name\":\"F\",\"type\":\"FILE\",\"size\":3}]",
			       &g),
			 0);
	assert_int_equal(g.n, 1);
	assert_string_equal(g.e[0].name, "f");
}

static void test_callback_stops(void **state)
{
	struct got g = {.stop_after = 2};

	(void)state;
	assert_int_equal(parse("[{\"name\":\"a\",\"type\":\"directory\"},"
			       "{\"name\":\"b\",\"type\":\"directory\"},"
			       "{\"name\":\"c\",\"type\":\"directory\"}]",
			       &g),
			 -ECANCELED);
	assert_int_equal(g.n, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_nginx_sample),
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_empty),
	    cmocka_unit_test(test_not_an_array),
	    cmocka_unit_test(test_garbage),
	    cmocka_unit_test(test_bad_entries),
	    cmocka_unit_test(test_sizes),
	    cmocka_unit_test(test_mtime),
	    cmocka_unit_test(test_other_types_skipped),
	    cmocka_unit_test(test_callback_stops),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
