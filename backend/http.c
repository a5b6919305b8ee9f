/*
 * http.c - http(s)://base/: objects served by a plain web server.
 *
 * The namespace comes from the server's JSON directory index (nginx `autoindex on;
 * autoindex_format json;`), one GET per directory, or from a manifest file of relative paths
 * (-o manifest=FILE) when the server has no index. Sizes and mtimes come from the index; the
 * ETag, which the index lacks, from a HEAD when a file is opened. Reads are ranged GETs with
 * If-Match, through the shared I/O loop.
 *
 *   base  = "https://cdn.example.test/segments/"      (always one trailing slash)
 *   path  = "2024/seg 01.log"  ──►  base + "2024/seg%2001.log"
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonidx.h"
#include "io.h"
#include "scheme.h"

struct http {
	char *base;	 /* URL of the root, with a trailing slash */
	char **manifest; /* relative paths, or NULL when the index is used */
	size_t nmanifest;
};

static void http_free(struct backend *b)
{
	struct http *h = b->priv;

	if (!h)
		return;
	for (size_t i = 0; i < h->nmanifest; i++)
		free(h->manifest[i]);
	free(h->manifest);
	free(h->base);
	free(h);
}

/* RFC 3986's unreserved characters, and the '/' between path segments: kept as they are. */
static bool url_keep(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~' || c == '/';
}

/*
 * A path ("a/b c") as URL path segments ("a/b%20c"): every byte but those url_keep() names
 * percent-encoded, upper-case hex. @return a malloc'd string, or NULL if out of memory.
 */
static char *url_path(const char *path)
{
	static const char digits[] = "0123456789ABCDEF";
	size_t n = 0;
	char *ret, *o;

	for (const unsigned char *p = (const unsigned char *)path; *p; p++)
		n += url_keep(*p) ? 1 : 3;
	ret = malloc(n + 1);
	if (!ret)
		return NULL;
	o = ret;
	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		if (url_keep(*p)) {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = digits[*p >> 4];
			*o++ = digits[*p & 15];
		}
	}
	*o = '\0';
	return ret;
}

static struct io_req *new_req(struct http *h, const char *path, bool dir)
{
	struct io_req *r = io_req_new();
	char *enc = url_path(path);

	if (!r || !enc)
		goto fail;
	if (asprintf(&r->url, "%s%s%s", h->base, enc, dir && path[0] ? "/" : "") < 0) {
		r->url = NULL;
		goto fail;
	}
	free(enc);
	return r;
fail:
	free(enc);
	io_req_free(r);
	return NULL;
}

struct idx_ctx {
	bk_list_fn fn;
	void *arg;
};

static int on_index_entry(void *arg, const char *name, bool is_dir, uint64_t size, int64_t mtime)
{
	struct idx_ctx *ic = arg;
	struct bk_meta m = {.size = size, .mtime = mtime};

	if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return 0;
	return ic->fn(ic->arg, name, is_dir, is_dir ? NULL : &m);
}

/* The manifest's entries under @dir. A directory is named once per run of paths beneath it
 * (a sorted manifest names each once): every entry counts towards the listing's bounds
 * (backend.c), and a million paths in one subdirectory are one entry of its parent. */
static int list_manifest(struct http *h, const char *dir, bk_list_fn fn, void *arg)
{
	size_t dl = strlen(dir);
	char last[1024] = ""; /* the directory named last */

	for (size_t i = 0; i < h->nmanifest; i++) {
		const char *p = h->manifest[i], *slash;
		char name[1024];
		int e;

		if (dl) {
			if (strncmp(p, dir, dl) != 0 || p[dl] != '/')
				continue;
			p += dl + 1;
		}
		slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (!n || n >= sizeof(name))
			continue;
		memcpy(name, p, n);
		name[n] = '\0';
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		if (slash && strcmp(name, last) == 0)
			continue;
		if (slash)
			memcpy(last, name, n + 1);
		e = fn(arg, name, slash != NULL, NULL);
		if (e < 0)
			return e;
	}
	return 0;
}

static int http_list(struct backend *b, const char *dir, bk_list_fn fn, void *arg)
{
	struct http *h = b->priv;
	struct idx_ctx ic = {fn, arg};
	struct io_req *r;
	int e;

	if (h->manifest)
		return list_manifest(h, dir, fn, arg);
	r = new_req(h, dir, true);
	if (!r)
		return -ENOMEM;
	e = io_run(b->io, r);
	if (e == 0)
		e = jsonidx_parse(r->body ? r->body : "", r->body_len, on_index_entry, &ic);
	io_req_free(r);
	return e;
}

static struct io_req *http_object_req(struct backend *b, const char *path)
{
	return new_req(b->priv, path, false);
}

static int ignore(void *arg, const char *name, bool is_dir, uint64_t size, int64_t mtime)
{
	return 0;
}

static int http_check(struct backend *b, char *err, size_t errlen)
{
	struct http *h = b->priv;
	struct io_req *r;
	int e;

	if (h->manifest && h->nmanifest == 0)
		return 0;
	r = h->manifest ? new_req(h, h->manifest[0], false) : new_req(h, "", true);
	if (!r)
		return -ENOMEM;
	r->head = h->manifest != NULL;
	e = io_run(b->io, r);
	if (e == 0 && !h->manifest &&
	    jsonidx_parse(r->body ? r->body : "", r->body_len, ignore, NULL) < 0) {
		snprintf(err, errlen,
			 "%s does not serve a JSON directory index (nginx: autoindex on; "
			 "autoindex_format json;): give -o manifest=FILE instead",
			 h->base);
		e = -EPROTO;
	} else if (e < 0 && !r->status) {
		snprintf(err, errlen, "cannot reach %s: %s", h->base,
			 r->errmsg[0] ? r->errmsg : strerror(-e));
	} else if (e < 0) {
		snprintf(err, errlen, "%s answered HTTP %ld", r->url, r->status);
	}
	io_req_free(r);
	return e;
}

struct list_async {
	struct idx_ctx ic;
	bk_done_fn done;
	void *arg;
};

static void index_done(struct io_req *r)
{
	struct list_async *la = r->arg;
	int e = r->err;

	if (e == 0)
		e = jsonidx_parse(r->body ? r->body : "", r->body_len, on_index_entry, &la->ic);
	io_req_free(r);
	la->done(la->arg, e);
	free(la);
}

/* One GET of the directory's index; a manifest is listed by a job (backend.c). */
static int http_list_async(struct backend *b, const char *dir, bk_list_fn fn, bk_done_fn done,
			   void *arg)
{
	struct http *h = b->priv;
	struct list_async *la;
	struct io_req *r;
	int e;

	if (h->manifest)
		return -EOPNOTSUPP;
	la = malloc(sizeof(*la));
	r = la ? new_req(h, dir, true) : NULL;
	if (!r) {
		free(la);
		return -ENOMEM;
	}
	*la = (struct list_async){.ic = {fn, arg}, .done = done, .arg = arg};
	r->done = index_done;
	r->arg = la;
	e = io_submit(b->io, r);
	if (e < 0) {
		free(la);
		io_req_free(r);
	}
	return e;
}

static const struct bk_ops http_ops = {
    .check = http_check,
    .object_req = http_object_req,
    .list = http_list,
    .free = http_free,
    .list_async = http_list_async,
};

static int load_manifest(struct http *h, const char *file, char *err, size_t errlen)
{
	FILE *f = fopen(file, "re");
	char *line = NULL;
	size_t cap = 0, alloc = 0;
	ssize_t n;
	int e = 0;

	if (!f) {
		e = -errno;
		snprintf(err, errlen, "manifest %s: %s", file, strerror(-e));
		return e;
	}
	h->manifest = calloc(1, sizeof(char *));
	if (!h->manifest) {
		fclose(f);
		return -ENOMEM;
	}
	while ((n = getline(&line, &cap, f)) >= 0) {
		char *p = line, *end = line + n;

		while (end > p && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' '))
			*--end = '\0';
		while (*p == ' ' || *p == '/')
			p++;
		if (!*p || *p == '#')
			continue;
		if (h->nmanifest == alloc) {
			size_t na = alloc ? alloc * 2 : 64;
			char **m = realloc(h->manifest, na * sizeof(char *));

			if (!m) {
				e = -ENOMEM;
				break;
			}
			h->manifest = m;
			alloc = na;
		}
		if (!(h->manifest[h->nmanifest] = strdup(p))) {
			e = -ENOMEM;
			break;
		}
		h->nmanifest++;
	}
	free(line);
	fclose(f);
	return e;
}

int http_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen)
{
	struct http *h = calloc(1, sizeof(*h));
	const char *host = strstr(cfg->url, "://") + 3;
	struct io_cfg ioc;
	size_t n = strlen(cfg->url);
	int e = -ENOMEM;

	if (!h)
		return -ENOMEM;
	b->priv = h;
	b->ops = &http_ops;
	b->scheme = "http";
	if (!*host || *host == '/' || strchr(cfg->url, '?') || strchr(cfg->url, '#')) {
		snprintf(err, errlen, "URL %s: expected http(s)://host[:port]/path/", cfg->url);
		e = -EINVAL;
		goto fail;
	}
	if (asprintf(&h->base, "%s%s", cfg->url, cfg->url[n - 1] == '/' ? "" : "/") < 0) {
		h->base = NULL;
		goto fail;
	}
	if (cfg->manifest && (e = load_manifest(h, cfg->manifest, err, errlen)) < 0)
		goto fail;
	ioc = io_cfg_from(cfg);
	b->io = io_new(&ioc);
	if (!b->io) {
		e = -ENOMEM;
		goto fail;
	}
	return 0;
fail:
	http_free(b);
	b->priv = NULL;
	return e;
}
