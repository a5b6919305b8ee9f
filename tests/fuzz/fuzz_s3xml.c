/*
 * fuzz_s3xml.c - S3 response bodies (ListObjectsV2 pages, <Error> documents, the answers to
 * Create- and CompleteMultipartUpload) through s3xml.c.
 *
 * The input is one response body, handed over as (pointer, length) exactly as io.c would, so
 * a read past its end is caught. Every input goes through s3xml_parse_list(),
 * s3xml_parse_error(), s3xml_parse_initiate(), s3xml_parse_complete() and, as a
 * NUL-terminated string, s3xml_parse_time(). What is checked, beyond "no crash, no leak, no
 * UB":
 *
 *   - every callback gets a non-empty key and an etag, both NUL-terminated within the 64 KiB
 *     that s3xml.c promises to cap values at; a prefix entry has size 0, no mtime, etag "";
 *   - the result is 0, -EIO, -ENOMEM or the callback's own value, nothing else;
 *   - a page that fails has reported no entry at all (entries only after the page checked);
 *   - *ret_token is written only on success, and then is NULL or a non-empty string;
 *   - an error document that parses has a non-empty code, and code and msg are NUL-terminated
 *     inside the caller's buffers (the bytes after them are left alone);
 *   - an UploadId is written only on success, and is then a non-empty string; a Complete
 *     answer's ETag and code stay inside the caller's buffers, the ETag non-empty on
 *     success.
 *
 * To cover the callback stopping the walk, inputs whose length is a multiple of 5 make the
 * callback return -ECANCELED on its second call.
 */
#include <errno.h>
#include <stdbool.h>

#include "s3xml.h"
#include "fuzz.h"

#define VALUE_MAX (64 * 1024) /* s3xml.c's TEXT_MAX: no value it reports is longer */

struct seen {
	unsigned n; /* callbacks so far */
	bool stop;  /* return -ECANCELED on the second call */
};

static int on_entry(void *arg, const char *key, size_t keylen, bool is_prefix, uint64_t size,
		    int64_t mtime, const char *etag)
{
	struct seen *s = arg;

	FUZZ_CHECK(key);
	FUZZ_CHECK(etag);
	FUZZ_CHECK(keylen > 0 && keylen <= VALUE_MAX);
	FUZZ_CHECK(key[keylen] == '\0' && strlen(key) <= keylen); /* a decoded NUL may cut it */
	FUZZ_CHECK(strnlen(etag, VALUE_MAX + 1) <= VALUE_MAX);
	if (is_prefix) {
		FUZZ_CHECK(size == 0);
		FUZZ_CHECK(mtime == INT64_MIN);
		FUZZ_CHECK(etag[0] == '\0');
	}
	s->n++;
	return s->stop && s->n == 2 ? -ECANCELED : 0;
}

static void fuzz_list(const char *body, size_t len)
{
	static char sentinel;
	struct seen s = {.stop = len % 5 == 0};
	char *token = &sentinel;
	int r;

	r = s3xml_parse_list(body, len, on_entry, &s, &token);
	FUZZ_CHECK(r == 0 || r == -EIO || r == -ENOMEM || r == -ECANCELED);
	if (r == -ECANCELED)
		FUZZ_CHECK(s.stop && s.n == 2);
	if (r == -EIO || r == -ENOMEM)
		FUZZ_CHECK(s.n == 0);
	if (r < 0) {
		FUZZ_CHECK(token == &sentinel);
		return;
	}
	FUZZ_CHECK(token != &sentinel);
	if (token)
		FUZZ_CHECK(token[0] != '\0' && strnlen(token, VALUE_MAX + 1) <= VALUE_MAX);
	free(token);
}

static void fuzz_error(const char *body, size_t len)
{
	/* Small buffers, so truncation is exercised; a guard after each must stay intact. */
	char code[16 + 8], msg[48 + 8];
	int r;

	memset(code, 'G', sizeof(code));
	memset(msg, 'G', sizeof(msg));
	r = s3xml_parse_error(body, len, code, 16, msg, 48);
	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ENOMEM);
	for (size_t i = 16; i < sizeof(code); i++)
		FUZZ_CHECK(code[i] == 'G');
	for (size_t i = 48; i < sizeof(msg); i++)
		FUZZ_CHECK(msg[i] == 'G');
	if (r == 0) {
		FUZZ_CHECK(memchr(code, '\0', 16));
		FUZZ_CHECK(memchr(msg, '\0', 48));
		FUZZ_CHECK(code[0] != '\0');
	}
}

static void fuzz_multipart(const char *body, size_t len)
{
	static char sentinel;
	char *id = &sentinel, etag[24 + 8], code[16 + 8];
	int r = s3xml_parse_initiate(body, len, &id);

	FUZZ_CHECK(r == 0 || r == -EIO || r == -ENOMEM);
	FUZZ_CHECK((r == 0) == (id != &sentinel));
	if (r == 0) {
		FUZZ_CHECK(id[0] != '\0' && strnlen(id, VALUE_MAX + 1) <= VALUE_MAX);
		free(id);
	}
	memset(etag, 'G', sizeof(etag));
	memset(code, 'G', sizeof(code));
	r = s3xml_parse_complete(body, len, etag, 24, code, 16);
	FUZZ_CHECK(r == 0 || r == -EIO || r == -ENOMEM);
	for (size_t i = 24; i < sizeof(etag); i++)
		FUZZ_CHECK(etag[i] == 'G');
	for (size_t i = 16; i < sizeof(code); i++)
		FUZZ_CHECK(code[i] == 'G');
	FUZZ_CHECK(memchr(code, '\0', 16));
	if (r == 0)
		FUZZ_CHECK(memchr(etag, '\0', 24) && etag[0] != '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s;
	int64_t t;

	fuzz_list((const char *)data, size);
	fuzz_error((const char *)data, size);
	fuzz_multipart((const char *)data, size);

	s = fuzz_strndup(data, size);
	(void)s3xml_parse_time(s, &t);
	free(s);
	return 0;
}
