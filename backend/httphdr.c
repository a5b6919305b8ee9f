/*
 * httphdr.c - the few response header values the range reader acts on: Content-Range,
 * Content-Length and dates (Last-Modified, Date).
 *
 * Values arrive as (pointer, length) slices of curl's header buffer, not NUL-terminated. A
 * value is trusted only if it parses completely:
 *
 *     [OWS] bytes SP first "-" last "/" (total | "*") [OWS]    Content-Range (RFC 9110 14.4)
 *     [OWS] 1*DIGIT [OWS]                                      Content-Length
 *
 * OWS (spaces and tabs) is allowed only around the whole value; no sign, no inner blanks, no
 * trailing junk, and every number must fit in 64 bits (18446744073709551616 is refused, not
 * wrapped). A range must be sane on its face: first <= last < total. An unknown total ("*") is
 * reported as UINT64_MAX, and last < UINT64_MAX still holds, so last - first + 1 never wraps.
 * The unit is matched case-insensitively, as RFC 9110 says. The unsatisfied form, "bytes *"
 * then "/1234" (sent with 416), is refused: there is no range in it.
 *
 * Dates go to curl_getdate(), which knows RFC 1123, RFC 850 and asctime forms, after a copy
 * into a bounded stack buffer (64 bytes; longer is -EINVAL) to give it the NUL it needs. curl
 * is the lenient one here (it skips words it does not know), which is acceptable for a
 * timestamp that only feeds st_mtime. No state, no locks, no allocation.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "httphdr.h"

#define DATE_MAX 64

static bool ows(char c)
{
	return c == ' ' || c == '\t';
}

/* Narrow [*@v, *@v + *@len) to the value without surrounding OWS. */
static void strip(const char **v, size_t *len)
{
	while (*len > 0 && ows(**v)) {
		(*v)++;
		(*len)--;
	}
	while (*len > 0 && ows((*v)[*len - 1]))
		(*len)--;
}

/* Parse 1*DIGIT at *@p (before @end), advancing *@p. @return 0 or -EINVAL (none, overflow). */
static int number(const char **p, const char *end, uint64_t *ret)
{
	uint64_t v = 0;
	const char *s = *p;

	if (s == end || *s < '0' || *s > '9')
		return -EINVAL;
	for (; s < end && *s >= '0' && *s <= '9'; s++) {
		unsigned d = (unsigned)(*s - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	*p = s;
	*ret = v;
	return 0;
}

int httphdr_content_range(const char *v, size_t len, uint64_t *ret_first, uint64_t *ret_last,
			  uint64_t *ret_total)
{
	uint64_t first, last, total;
	const char *p, *end;

	if (!v)
		return -EINVAL;
	strip(&v, &len);
	p = v;
	end = v + len;
	if (len < 6 || strncasecmp(p, "bytes ", 6) != 0)
		return -EINVAL;
	p += 6;
	if (number(&p, end, &first) < 0 || p == end || *p++ != '-' || number(&p, end, &last) < 0 ||
	    p == end || *p++ != '/')
		return -EINVAL;
	if (p < end && *p == '*') {
		p++;
		total = UINT64_MAX;
	} else if (number(&p, end, &total) < 0) {
		return -EINVAL;
	}
	if (p != end || first > last || last >= total)
		return -EINVAL;
	*ret_first = first;
	*ret_last = last;
	*ret_total = total;
	return 0;
}

int httphdr_content_length(const char *v, size_t len, uint64_t *ret)
{
	uint64_t n;
	const char *p;

	if (!v)
		return -EINVAL;
	strip(&v, &len);
	p = v;
	if (number(&p, v + len, &n) < 0 || p != v + len)
		return -EINVAL;
	*ret = n;
	return 0;
}

int httphdr_date(const char *v, size_t len, int64_t *ret)
{
	char buf[DATE_MAX];
	time_t t;

	if (!v)
		return -EINVAL;
	strip(&v, &len);
	if (len == 0 || len >= sizeof(buf) || memchr(v, '\0', len))
		return -EINVAL;
	memcpy(buf, v, len);
	buf[len] = '\0';
	t = curl_getdate(buf, NULL);
	if (t == (time_t)-1)
		return -EINVAL;
	*ret = (int64_t)t;
	return 0;
}
