/*
 * fuzz_httphdr.c - HTTP header values (Content-Range, Content-Length, dates) through
 * httphdr.c.
 *
 * The input is one header value as curl hands it over: a (pointer, length) slice with no NUL
 * after it, so reading one byte too far is caught. Each input goes to all three parsers.
 * Checked beyond "no crash, no UB":
 *
 *   - results are 0 or -EINVAL, and out-parameters are written only on success;
 *   - a Content-Range that parses is sane: first <= last < total, so last - first + 1 never
 *     wraps; and printed back in canonical form it parses to the same three numbers;
 *   - a Content-Length that parses is only digits inside optional blanks, and printed back
 *     it parses to the same number;
 *   - a value with a NUL inside is never a valid date.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>

#include "httphdr.h"
#include "fuzz.h"

#define POISON UINT64_C(0xdeadbeefdeadbeef)

static bool ows(char c)
{
	return c == ' ' || c == '\t';
}

static void fuzz_range(const char *v, size_t len)
{
	uint64_t first = POISON, last = POISON, total = POISON, f2, l2, t2;
	char buf[96];
	int r, n;

	r = httphdr_content_range(v, len, &first, &last, &total);
	FUZZ_CHECK(r == 0 || r == -EINVAL);
	if (r < 0) {
		FUZZ_CHECK(first == POISON && last == POISON && total == POISON);
		return;
	}
	FUZZ_CHECK(first <= last);
	FUZZ_CHECK(last < total);
	FUZZ_CHECK(last - first + 1 != 0);

	if (total == UINT64_MAX)
		n = snprintf(buf, sizeof(buf), "bytes %" PRIu64 "-%" PRIu64 "/*", first, last);
	else
		n = snprintf(buf, sizeof(buf), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, first,
			     last, total);
	FUZZ_CHECK(n > 0 && (size_t)n < sizeof(buf));
	r = httphdr_content_range(buf, (size_t)n, &f2, &l2, &t2);
	/* "/18446744073709551615" is a total that parses, and the same value as "*". */
	FUZZ_CHECK(r == 0 && f2 == first && l2 == last && t2 == total);
}

static void fuzz_length(const char *v, size_t len)
{
	uint64_t n = POISON, n2;
	char buf[32];
	size_t i = 0, end = len;
	int r, k;

	r = httphdr_content_length(v, len, &n);
	FUZZ_CHECK(r == 0 || r == -EINVAL);
	if (r < 0) {
		FUZZ_CHECK(n == POISON);
		return;
	}
	while (i < end && ows(v[i]))
		i++;
	while (end > i && ows(v[end - 1]))
		end--;
	FUZZ_CHECK(i < end);
	for (size_t j = i; j < end; j++)
		FUZZ_CHECK(v[j] >= '0' && v[j] <= '9');

	k = snprintf(buf, sizeof(buf), "%" PRIu64, n);
	FUZZ_CHECK(k > 0 && (size_t)k < sizeof(buf));
	r = httphdr_content_length(buf, (size_t)k, &n2);
	FUZZ_CHECK(r == 0 && n2 == n);
	/* The digits, leading zeros aside, are the number printed back. */
	while (end - i > 1 && v[i] == '0')
		i++;
	FUZZ_CHECK(end - i == (size_t)k && memcmp(v + i, buf, (size_t)k) == 0);
}

static void fuzz_date(const char *v, size_t len)
{
	int64_t t = INT64_MIN;
	int r;

	r = httphdr_date(v, len, &t);
	FUZZ_CHECK(r == 0 || r == -EINVAL);
	if (r < 0)
		FUZZ_CHECK(t == INT64_MIN);
	if (r == 0)
		FUZZ_CHECK(!memchr(v, '\0', len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *v = (const char *)data;

	fuzz_range(v, size);
	fuzz_length(v, size);
	fuzz_date(v, size);
	return 0;
}
