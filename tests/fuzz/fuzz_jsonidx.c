/*
 * fuzz_jsonidx.c - nginx `autoindex_format json` listings through jsonidx.c.
 *
 * The input is one response body, passed as (pointer, length) with no NUL after it. Checked
 * beyond "no crash, no leak, no UB":
 *
 *   - the result is 0, -EIO, -ENOMEM or the callback's own value;
 *   - every reported name is one path segment: non-empty, no '/', not "." or "..";
 *   - a directory has size 0; a file's size fits in off_t (<= INT64_MAX);
 *   - a listing that fails reported nothing (all entries are checked before the first call).
 *
 * Inputs whose length is a multiple of 7 make the callback stop the walk at its second call.
 */
#include <errno.h>
#include <stdbool.h>

#include "jsonidx.h"
#include "fuzz.h"

struct seen {
	unsigned n; /* callbacks so far */
	bool stop;  /* return -ECANCELED on the second call */
};

static int on_entry(void *arg, const char *name, bool is_dir, uint64_t size, int64_t mtime)
{
	struct seen *s = arg;

	(void)mtime;
	FUZZ_CHECK(name);
	FUZZ_CHECK(name[0] != '\0');
	FUZZ_CHECK(!strchr(name, '/'));
	FUZZ_CHECK(strcmp(name, ".") != 0 && strcmp(name, "..") != 0);
	if (is_dir)
		FUZZ_CHECK(size == 0);
	FUZZ_CHECK(size <= INT64_MAX);
	s->n++;
	return s->stop && s->n == 2 ? -ECANCELED : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct seen s = {.stop = size % 7 == 0};
	int r;

	r = jsonidx_parse((const char *)data, size, on_entry, &s);
	FUZZ_CHECK(r == 0 || r == -EIO || r == -ENOMEM || r == -ECANCELED);
	if (r == -ECANCELED)
		FUZZ_CHECK(s.stop && s.n == 2);
	if (r == -EIO || r == -ENOMEM)
		FUZZ_CHECK(s.n == 0);
	return 0;
}
