/*
 * jsonidx.c - directory listings from nginx's `autoindex on; autoindex_format json;`.
 *
 * nginx answers a directory URL with one JSON array, an object per entry:
 *
 *     [
 *     { "name":"a b.log", "type":"file", "mtime":"Wed, 22 Nov 2023 10:00:00 GMT", "size":1234 },
 *     { "name":"sub", "type":"directory", "mtime":"Wed, 22 Nov 2023 10:00:00 GMT" },
 *     { "name":"fifo", "type":"other", "mtime":"Wed, 22 Nov 2023 10:00:00 GMT" }
 *     ]
 *
 * Names are raw file names (bytes, usually UTF-8) with '"', '\' and control characters JSON
 * escaped; nginx follows symlinks, so they show up as "file" or "directory". Entries of any
 * other type are skipped. A document that is not such an array, an entry without a string
 * name and type, a name that is not one path segment (empty, ".", "..", a '/' or a NUL in
 * it), a file whose "size" is not an integer in 0..INT64_MAX (file sizes are off_t), or an
 * "mtime" that is not an HTTP date makes the whole listing -EIO: a half-understood listing
 * would show the user a directory that is not there. All entries are checked before the first
 * callback, so a refused listing has reported nothing.
 *
 * The body is parsed in one piece with json-c in strict mode, from (pointer, length), never
 * relying on a NUL after it; anything but white space after the array is an error. Nothing is
 * kept between calls; the json-c tree is freed before return. Workload: one parse per
 * directory listing, a few hundred entries.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include <json-c/json.h>

#include "httphdr.h"
#include "jsonidx.h"

/* @return true if the json string @o is one path segment. */
static bool segment_ok(json_object *o)
{
	const char *s = json_object_get_string(o);
	size_t n = (size_t)json_object_get_string_len(o);

	if (!s || n == 0 || strlen(s) != n || memchr(s, '/', n))
		return false;
	return strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Check one entry and, if @fn is not NULL, report it. @return 0, -EIO or the callback's
 * value. */
static int entry(json_object *e, jsonidx_fn fn, void *arg)
{
	json_object *name, *type, *size, *mtime;
	const char *t;
	uint64_t sz = 0;
	int64_t when = INT64_MIN;
	bool is_dir;

	if (!json_object_is_type(e, json_type_object) ||
	    !json_object_object_get_ex(e, "name", &name) ||
	    !json_object_is_type(name, json_type_string) ||
	    !json_object_object_get_ex(e, "type", &type) ||
	    !json_object_is_type(type, json_type_string))
		return -EIO;
	t = json_object_get_string(type);
	if (strcmp(t, "file") == 0)
		is_dir = false;
	else if (strcmp(t, "directory") == 0)
		is_dir = true;
	else
		return 0;
	if (!segment_ok(name))
		return -EIO;
	if (!is_dir) {
		if (!json_object_object_get_ex(e, "size", &size) ||
		    !json_object_is_type(size, json_type_int) || json_object_get_int64(size) < 0)
			return -EIO;
		/* json-c clamps a number past UINT64_MAX to UINT64_MAX; refusing everything
		 * above INT64_MAX refuses those too. */
		sz = json_object_get_uint64(size);
		if (sz > INT64_MAX)
			return -EIO;
	}
	if (json_object_object_get_ex(e, "mtime", &mtime)) {
		if (!json_object_is_type(mtime, json_type_string) ||
		    httphdr_date(json_object_get_string(mtime),
				 (size_t)json_object_get_string_len(mtime), &when) < 0)
			return -EIO;
	}
	return fn ? fn(arg, json_object_get_string(name), is_dir, sz, when) : 0;
}

int jsonidx_parse(const char *body, size_t len, jsonidx_fn fn, void *arg)
{
	struct json_tokener *tok;
	json_object *root = NULL;
	size_t end, i, n;
	int r = -EIO;

	if (!fn)
		return -EINVAL;
	if (!body || len == 0 || len > INT_MAX)
		return -EIO;
	tok = json_tokener_new();
	if (!tok)
		return -ENOMEM;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	root = json_tokener_parse_ex(tok, body, (int)len);
	if (!root || json_tokener_get_error(tok) != json_tokener_success ||
	    !json_object_is_type(root, json_type_array))
		goto out;
	for (end = json_tokener_get_parse_end(tok); end < len; end++)
		if (!strchr(" \t\r\n", body[end]) || body[end] == '\0')
			goto out;
	/* Check every entry first, so a listing that is -EIO has reported nothing. */
	n = json_object_array_length(root);
	for (i = 0; i < n; i++)
		if (entry(json_object_array_get_idx(root, i), NULL, NULL) < 0)
			goto out;
	r = 0;
	for (i = 0; i < n && r == 0; i++)
		r = entry(json_object_array_get_idx(root, i), fn, arg);
out:
	json_object_put(root);
	json_tokener_free(tok);
	return r;
}
