/*
 * backend.c - the front of backend/: the one table of schemes (which URL prefix each scheme
 * serves and who sets it up), and the interface calls forwarded to the scheme's operations.
 *
 *   fs/ ──► backend.c ──table──► s3.c, http.c, file.c ──► io.c (the I/O thread)
 *                  │                                   sigv4.c, s3xml.c, creds.c,
 *                  ├──► url.c (each row's URL rules)   jsonidx.c, httphdr.c
 *                  └──► upload.c ──► s3write.c, filewrite.c (writes)
 *
 * Nothing below calls back up into this file: what the schemes share lives in io.c.
 *
 * Every listing, of every scheme, synchronous or not, reaches its caller through one counting
 * wrapper here (struct list_cap), the one place that sees every entry: past BK_LIST_MAX_KEYS
 * entries or BK_LIST_MAX_BYTES of names and ETags (backend.h says why those) the listing is
 * stopped and fails with -EFBIG, with one log line. A scheme only has to stop when its
 * callback says so, which each does already.
 *
 * Locking: none here; see io.c. A listing's counts belong to the thread it runs on.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io.h"
#include "scheme.h"
#include "upload.h"

/* The schemes a URL may start with, compared ignoring case, who sets each up, and what its
 * URLs must look like (url.c). */
static const struct {
	const char *prefix;
	int (*init)(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen);
	int (*url_check)(const char *url, char *err, size_t errlen);
} schemes[] = {
    {"s3://", s3_init, s3_url_check},
    {"http://", http_init, http_url_check},
    {"https://", http_init, http_url_check},
    {"file://", file_init, file_url_check},
};

static int scheme_find(const char *url)
{
	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
		if (strncasecmp(url, schemes[i].prefix, strlen(schemes[i].prefix)) == 0)
			return (int)i;
	return -1;
}

bool backend_scheme_known(const char *url)
{
	return scheme_find(url) >= 0;
}

int backend_url_check(char *url, char *err, size_t errlen)
{
	int i, r = url_scheme(url, err, errlen);

	if (r < 0)
		return r;
	i = scheme_find(url);
	if (i < 0)
		return bk_fail(err, errlen, -EINVAL, "URL %s: unsupported scheme %s", url,
				URL_SCHEMES);
	return schemes[i].url_check(url, err, errlen);
}

/* A listing's bound: @cfg's when set; else @env's, a whole number, which may lower the bound
 * (the integration tests reach it that way) but never raise it; else @def. */
static uint64_t list_bound(uint64_t cfg, const char *env, uint64_t def)
{
	const char *v = getenv(env);
	unsigned long long n;
	char *end;

	if (cfg)
		return cfg;
	if (!v || !*v)
		return def;
	errno = 0;
	n = strtoull(v, &end, 10);
	return !*end && !errno && n > 0 && n < def ? n : def;
}

int backend_new(const struct backend_cfg *cfg, struct backend **ret, char *err, size_t errlen)
{
	static bool curl_ready;
	int i = scheme_find(cfg->url);
	struct backend *b;
	int r;

	if (!curl_ready) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
			snprintf(err, errlen, "libcurl failed to initialise");
			return -EIO;
		}
		curl_ready = true;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->log = cfg->log;
	b->log_arg = cfg->log_arg;
	b->list_max_keys = list_bound(cfg->list_max_keys, "TIERFS_LIST_MAX_KEYS", BK_LIST_MAX_KEYS);
	b->list_max_bytes =
	    list_bound(cfg->list_max_bytes, "TIERFS_LIST_MAX_BYTES", BK_LIST_MAX_BYTES);
	if (i >= 0) {
		r = schemes[i].init(b, cfg, err, errlen);
	} else {
		snprintf(err, errlen,
			 "URL %s: unsupported scheme (use s3://, http://, https:// or file://)",
			 cfg->url);
		r = -EINVAL;
	}
	if (r < 0) {
		free(b);
		return r;
	}
	b->writable = cfg->writable && b->ops->upload_init;
	*ret = b;
	return 0;
}

void backend_free(struct backend *b)
{
	if (!b)
		return;
	backend_stop(b);
	b->ops->free(b);
	io_free(b->io);
	free(b);
}

int backend_start(struct backend *b)
{
	int e = b->io ? io_start(b->io) : 0;

	if (e == 0 && b->ops->start)
		e = b->ops->start(b);
	return e;
}

void backend_stop(struct backend *b)
{
	if (b->ops->stop)
		b->ops->stop(b);
	if (b->io)
		io_stop(b->io);
}

int backend_check(struct backend *b, char *err, size_t errlen)
{
	return b->ops->check(b, err, errlen);
}

int backend_space(struct backend *b, struct statvfs *ret)
{
	return b->ops->space ? b->ops->space(b, ret) : -ENOTSUP;
}

int backend_stat(struct backend *b, const char *path, struct bk_meta *ret)
{
	struct bk_meta m = {0}; /* what a store does not say stays zero */
	struct io_req *r;
	int e;

	if (b->ops->object_req)
		e = (r = b->ops->object_req(b, path)) ? io_head(b->io, r, &m) : -ENOMEM;
	else
		e = b->ops->stat(b, path, &m);

	if (e == 0)
		*ret = m;
	return e;
}

/* ---- a listing's bounds --------------------------------------------------------------------- */

/* A listing on its way to the caller: every entry is counted, repeats included, before the
 * caller's callback sees it. Owned by the listing: on the stack for backend_list, freed by
 * capped_done for backend_list_async. */
struct list_cap {
	struct backend *b;
	bk_list_fn fn;
	bk_done_fn done; /* backend_list_async only */
	void *arg;
	uint64_t keys;   /* entries passed on, and the one that went over */
	uint64_t bytes;  /* their names' and ETags' bytes */
	bool over;       /* a bound was passed: the listing is -EFBIG */
	const char *dir; /* for the log line */
};

/* @b's bounds: 0 in a struct backend made by hand (tests/unit/test_ns.c) is the default. */
static uint64_t max_keys(const struct backend *b)
{
	return b->list_max_keys ? b->list_max_keys : BK_LIST_MAX_KEYS;
}

static uint64_t max_bytes(const struct backend *b)
{
	return b->list_max_bytes ? b->list_max_bytes : BK_LIST_MAX_BYTES;
}

static int capped_entry(void *arg, const char *name, bool is_dir, const struct bk_meta *meta)
{
	struct list_cap *c = arg;

	c->keys++;
	c->bytes += strlen(name) + (meta ? strlen(meta->etag) : 0);
	if (c->keys > max_keys(c->b) || c->bytes > max_bytes(c->b)) {
		c->over = true;
		return -EFBIG;
	}
	return c->fn(c->arg, name, is_dir, meta);
}

/* The listing's end: -EFBIG if it went over, whatever the scheme made of the refusal. */
static int capped_end(struct list_cap *c, int e)
{
	char line[512];

	if (!c->over || !c->b->log)
		return c->over ? -EFBIG : e;
	if (c->keys > max_keys(c->b))
		snprintf(line, sizeof(line), "list /%s: more than %llu entries: refused (EFBIG)",
			 c->dir, (unsigned long long)max_keys(c->b));
	else
		snprintf(line, sizeof(line),
			 "list /%s: more than %llu bytes of names and ETags: refused (EFBIG)", c->dir,
			 (unsigned long long)max_bytes(c->b));
	c->b->log(c->b->log_arg, 0, line);
	return -EFBIG;
}

int backend_list(struct backend *b, const char *dir, bk_list_fn fn, void *arg)
{
	struct list_cap c = {.b = b, .fn = fn, .arg = arg, .dir = dir};

	return capped_end(&c, b->ops->list(b, dir, capped_entry, &c));
}

int backend_read(struct backend *b, const char *path, const char *etag, uint64_t off, uint32_t len,
		 void *dst, enum bk_prio prio, bk_done_fn done, void *arg)
{
	struct io_req *r;

	if (!b->ops->object_req)
		return b->ops->read(b, path, etag, off, len, dst, prio, done, arg);
	r = b->ops->object_req(b, path);
	return r ? io_read(b->io, r, etag, off, len, dst, prio, done, arg) : -ENOMEM;
}

int backend_defer(struct backend *b, uint64_t delay_ns, void (*cb)(void *arg), void *arg)
{
	return io_defer(b->io, delay_ns, cb, arg);
}

void backend_plug(struct backend *b)
{
	if (b->io)
		io_plug(b->io);
}

void backend_unplug(struct backend *b)
{
	if (b->io)
		io_unplug(b->io);
}

void backend_get_stats(struct backend *b, struct bk_stats *ret)
{
	const struct bk_write_stats *w = &b->wst;

	memset(ret, 0, sizeof(*ret));
	if (b->io)
		io_get_stats(b->io, ret);
	ret->uploads_started = __atomic_load_n(&w->started, __ATOMIC_RELAXED);
	ret->uploads_completed = __atomic_load_n(&w->completed, __ATOMIC_RELAXED);
	ret->uploads_failed = __atomic_load_n(&w->failed, __ATOMIC_RELAXED);
	ret->uploads_aborted = __atomic_load_n(&w->aborted, __ATOMIC_RELAXED);
	ret->abort_errors = __atomic_load_n(&w->abort_errors, __ATOMIC_RELAXED);
	ret->parts = __atomic_load_n(&w->parts, __ATOMIC_RELAXED);
	ret->bytes_up = __atomic_load_n(&w->bytes, __ATOMIC_RELAXED);
	ret->upload_retries = __atomic_load_n(&w->retries, __ATOMIC_RELAXED);
	ret->tmp_removed = __atomic_load_n(&w->tmp_removed, __ATOMIC_RELAXED);
}

const char *bk_op_name(enum bk_op op)
{
	static const char *const names[BK_OP_N] = {
	    [BK_OP_GET] = "get",
	    [BK_OP_HEAD] = "head",
	    [BK_OP_LIST] = "list",
	    [BK_OP_PUT] = "put",
	    [BK_OP_POST] = "post",
	    [BK_OP_DELETE] = "delete",
	};

	return op < BK_OP_N ? names[op] : NULL;
}

const char *backend_scheme(const struct backend *b)
{
	return b->scheme;
}
/* ---- asynchronous metadata ----------------------------------------------------------------- */

/* A synchronous metadata call of a scheme that does not wait on the I/O loop (file://, an
 * http manifest), run as a job on the I/O thread. */
struct meta_job {
	struct backend *b;
	bool list;
	bk_stat_done_fn stat_done;
	bk_list_fn fn;
	bk_done_fn list_done;
	void *arg;
	char path[];
};

static void run_meta_job(void *arg)
{
	struct meta_job *j = arg;

	if (j->list) {
		int e = j->b->ops->list(j->b, j->path, j->fn, j->arg);

		j->list_done(j->arg, e);
	} else {
		struct bk_meta m;
		int e = backend_stat(j->b, j->path, &m);

		j->stat_done(j->arg, e, e == 0 ? &m : NULL);
	}
	free(j);
}

static int meta_job(struct backend *b, bool list, const char *path, bk_stat_done_fn stat_done,
		    bk_list_fn fn, bk_done_fn list_done, void *arg)
{
	size_t n = strlen(path);
	struct meta_job *j = malloc(sizeof(*j) + n + 1);
	int e;

	if (!j)
		return -ENOMEM;
	*j = (struct meta_job){.b = b, .list = list, .stat_done = stat_done, .fn = fn,
			       .list_done = list_done, .arg = arg};
	memcpy(j->path, path, n + 1);
	e = io_defer(b->io, 0, run_meta_job, j);
	if (e < 0)
		free(j);
	return e;
}

int backend_stat_async(struct backend *b, const char *path, bk_stat_done_fn done, void *arg)
{
	struct io_req *r;
	int e = -EOPNOTSUPP;

	if (b->ops->object_req)
		e = (r = b->ops->object_req(b, path)) ? io_head_async(b->io, r, done, arg) : -ENOMEM;
	else if (b->ops->stat_async)
		e = b->ops->stat_async(b, path, done, arg);
	if (e == -EOPNOTSUPP)
		e = meta_job(b, false, path, done, NULL, NULL, arg);
	return e;
}

static void capped_done(void *arg, int err)
{
	struct list_cap *c = arg;

	c->done(c->arg, capped_end(c, err));
	free(c);
}

int backend_list_async(struct backend *b, const char *dir, bk_list_fn fn, bk_done_fn done,
		       void *arg)
{
	size_t n = strlen(dir);
	struct list_cap *c = malloc(sizeof(*c) + n + 1);
	int e = -EOPNOTSUPP;

	if (!c)
		return -ENOMEM;
	*c = (struct list_cap){.b = b, .fn = fn, .done = done, .arg = arg};
	memcpy(c + 1, dir, n + 1);
	c->dir = (const char *)(c + 1);
	if (b->ops->list_async)
		e = b->ops->list_async(b, dir, capped_entry, capped_done, c);
	if (e == -EOPNOTSUPP)
		e = meta_job(b, true, dir, NULL, capped_entry, capped_done, c);
	if (e < 0)
		free(c);
	return e;
}

/* ---- writing (the uploads are upload.c's) ------------------------------------------------- */

/* -EROFS, -EINVAL, or 0 if a write at @path may go to the scheme. */
static int write_ok(struct backend *b, const char *path)
{
	if (!b->writable)
		return -EROFS;
	return upload_path_ok(path) ? 0 : -EINVAL;
}

int backend_unlink_async(struct backend *b, const char *path, bk_done_fn done, void *arg)
{
	int e = write_ok(b, path);

	return e ? e : b->ops->unlink(b, path, done, arg);
}

int backend_rename_async(struct backend *b, const char *from, const char *to, bool overwrite,
			 bk_done_fn done, void *arg)
{
	int e = write_ok(b, from);

	if (!e)
		e = write_ok(b, to);
	return e ? e : b->ops->rename(b, from, to, overwrite, done, arg);
}

int backend_mkdir_async(struct backend *b, const char *path, bk_done_fn done, void *arg)
{
	int e = write_ok(b, path);

	return e ? e : b->ops->mkdir(b, path, false, done, arg);
}

int backend_rmdir_async(struct backend *b, const char *path, bk_done_fn done, void *arg)
{
	int e = write_ok(b, path);

	return e ? e : b->ops->mkdir(b, path, true, done, arg);
}
