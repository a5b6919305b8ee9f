/*
 * url.c - what a store URL must look like, scheme by scheme. backend_url_check (backend.c)
 * finds the URL's row in the table of schemes and runs the row's check from here, before
 * anything is set up; option parsing asks it, so a wrong URL is a command-line error.
 *
 *     s3://BUCKET[/PREFIX]        a bucket name                  s3_url_check
 *     http(s)://HOST[/PATH]       a host                         http_url_check
 *     file:///ABSOLUTE/PATH       an absolute path, no host      file_url_check
 *     every scheme                no user:password@ in the authority (-EACCES: the caller
 *                                 says where credentials go instead)
 *
 *     "s3://user:pw@bucket/prefix/x"
 *      └┬─┘  └──────┬──────┘└───┬───┘
 *     scheme    authority       path      authority: after "://", up to '/', '?' or '#'
 *
 * A message is one line naming the URL; the URL has no control character by then (the caller
 * refuses those first). Locking: none, no state. Workload: once per mount.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "scheme.h"

int bk_vfail(char *err, size_t errlen, int r, const char *fmt, va_list ap)
{
	if (!err || !errlen)
		return r;
	vsnprintf(err, errlen, fmt, ap);
	for (char *p = err; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return r;
}

int bk_fail(char *err, size_t errlen, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	r = bk_vfail(err, errlen, r, fmt, ap);
	va_end(ap);
	return r;
}

int url_scheme(char *url, char *err, size_t errlen)
{
	const char *sep = strstr(url, "://");

	if (!sep || sep == url)
		return bk_fail(err, errlen, -EINVAL, "URL %s: no scheme %s", url, URL_SCHEMES);
	for (char *p = url; *p != ':'; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	return 0;
}

/* The authority of @url (after "://") and its length. @return 0, or -EACCES when it carries
 * a password (user:password@host). */
static int authority(const char *url, const char **ret_a, size_t *ret_n, char *err, size_t errlen)
{
	const char *a = strstr(url, "://") + 3;
	size_t n = strcspn(a, "/?#");
	const char *at = memchr(a, '@', n);

	if (at && memchr(a, ':', (size_t)(at - a)))
		return bk_fail(err, errlen, -EACCES, "URL: a password in the URL");
	*ret_a = a;
	*ret_n = n;
	return 0;
}

int s3_url_check(const char *url, char *err, size_t errlen)
{
	const char *a;
	size_t n;
	int r = authority(url, &a, &n, err, errlen);

	if (r == 0 && !n)
		r = bk_fail(err, errlen, -EINVAL,
			     "URL %s: no bucket name (use s3://BUCKET or s3://BUCKET/PREFIX)", url);
	return r;
}

int http_url_check(const char *url, char *err, size_t errlen)
{
	const char *a;
	size_t n;
	int r = authority(url, &a, &n, err, errlen);

	if (r == 0 && !n)
		r = bk_fail(err, errlen, -EINVAL, "URL %s: no host name", url);
	return r;
}

int file_url_check(const char *url, char *err, size_t errlen)
{
	const char *a;
	size_t n;
	int r = authority(url, &a, &n, err, errlen);

	if (r == 0 && a[0] != '/')
		r = bk_fail(err, errlen, -EINVAL, "URL %s: use file:///ABSOLUTE/PATH", url);
	return r;
}
