/*
 * backend.c - the scheme-independent half of the backend: picks the implementation from the
 * URL, forwards the interface calls, and holds what s3:// and http(s):// share (range reads
 * through the I/O loop, URL path encoding).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend_i.h"

int backend_new(const struct backend_cfg *cfg, struct backend **ret, char *err, size_t errlen)
{
	static bool curl_ready;
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
	b->timeout_s = cfg->timeout_s;
	b->log = cfg->log;
	b->log_arg = cfg->log_arg;
	if (strncasecmp(cfg->url, "s3://", 5) == 0)
		r = s3_init(b, cfg, err, errlen);
	else if (strncasecmp(cfg->url, "http://", 7) == 0 ||
		 strncasecmp(cfg->url, "https://", 8) == 0)
		r = http_init(b, cfg, err, errlen);
	else if (strncasecmp(cfg->url, "file://", 7) == 0)
		r = file_init(b, cfg, err, errlen);
	else {
		snprintf(err, errlen,
			 "URL %s: unsupported scheme (use s3://, http://, https:// or file://)",
			 cfg->url);
		r = -EINVAL;
	}
	if (r < 0) {
		free(b);
		return r;
	}
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
	return b->io ? io_start(b->io) : 0;
}

void backend_stop(struct backend *b)
{
	if (b->io)
		io_stop(b->io);
}

int backend_check(struct backend *b, char *err, size_t errlen)
{
	return b->ops->check(b, err, errlen);
}

int backend_stat(struct backend *b, const char *path, struct bk_meta *ret)
{
	struct bk_meta m = {0}; /* what a store does not say stays zero */
	int e = b->ops->stat(b, path, &m);

	if (e == 0)
		*ret = m;
	return e;
}

int backend_list(struct backend *b, const char *dir, bk_list_fn fn, void *arg)
{
	return b->ops->list(b, dir, fn, arg);
}

int backend_read(struct backend *b, const char *path, const char *etag, uint64_t off, uint32_t len,
		 void *dst, bool lagging, bk_done_fn done, void *arg)
{
	return b->ops->read(b, path, etag, off, len, dst, lagging, done, arg);
}

int backend_defer(struct backend *b, uint64_t delay_ns, void (*cb)(void *arg), void *arg)
{
	return io_defer(b->io, delay_ns, cb, arg);
}

void backend_get_stats(struct backend *b, struct bk_stats *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (b->io)
		io_get_stats(b->io, ret);
}

const char *backend_scheme(const struct backend *b)
{
	return b->scheme;
}

struct io_cfg backend_io_cfg(const struct backend_cfg *cfg)
{
	return (struct io_cfg){
	    .max_conns = cfg->max_conns,
	    .timeout_s = cfg->timeout_s,
	    .retries = cfg->retries,
	    .ca_file = cfg->ca_file,
	    .insecure = cfg->insecure,
	    .log = cfg->log,
	    .log_arg = cfg->log_arg,
	};
}

struct read_ctx {
	bk_done_fn done;
	void *arg;
};

static void read_done(struct io_req *r)
{
	struct read_ctx *rc = r->arg;
	int err = r->err;

	io_req_free(r);
	rc->done(rc->arg, err);
	free(rc);
}

int backend_io_read(struct backend *b, struct io_req *r, const char *etag, uint64_t off,
		    uint32_t len, void *dst, bool lagging, bk_done_fn done, void *arg)
{
	struct read_ctx *rc = malloc(sizeof(*rc));
	int e;

	if (!rc) {
		io_req_free(r);
		return -ENOMEM;
	}
	rc->done = done;
	rc->arg = arg;
	r->off = off;
	r->len = len;
	r->dst = dst;
	r->etag = etag && etag[0] ? strdup(etag) : NULL;
	r->lagging = lagging;
	r->done = read_done;
	r->arg = rc;
	if (etag && etag[0] && (e = io_req_header(r, "If-Match", etag)) < 0)
		goto fail;
	e = io_submit(b->io, r);
	if (e == 0)
		return 0;
fail:
	free(rc);
	io_req_free(r);
	return e;
}

char *backend_url_path(const char *path)
{
	return sigv4_uri_encode(path, true);
}

int backend_io_head(struct backend *b, struct io_req *r, struct bk_meta *ret)
{
	int e;

	r->head = true;
	e = io_run(b->io, r);
	if (e == 0) {
		ret->size = r->length == UINT64_MAX ? 0 : r->length;
		ret->mtime = r->mtime;
		snprintf(ret->etag, sizeof(ret->etag), "%s", r->etag_got);
	}
	io_req_free(r);
	return e;
}

/* ---- asynchronous metadata ----------------------------------------------------------------- */

struct head_ctx {
	bk_stat_done_fn done;
	void *arg;
};

static void head_done(struct io_req *r)
{
	struct head_ctx *hc = r->arg;
	struct bk_meta m = {0};
	int e = r->err;

	if (e == 0) {
		m.size = r->length == UINT64_MAX ? 0 : r->length;
		m.mtime = r->mtime;
		snprintf(m.etag, sizeof(m.etag), "%s", r->etag_got);
	}
	io_req_free(r);
	hc->done(hc->arg, e, e == 0 ? &m : NULL);
	free(hc);
}

int backend_io_head_async(struct backend *b, struct io_req *r, bk_stat_done_fn done, void *arg)
{
	struct head_ctx *hc = malloc(sizeof(*hc));
	int e;

	if (!hc) {
		io_req_free(r);
		return -ENOMEM;
	}
	hc->done = done;
	hc->arg = arg;
	r->head = true;
	r->done = head_done;
	r->arg = hc;
	e = io_submit(b->io, r);
	if (e < 0) {
		free(hc);
		io_req_free(r);
	}
	return e;
}

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
	int e = -EOPNOTSUPP;

	if (b->ops->stat_async)
		e = b->ops->stat_async(b, path, done, arg);
	if (e == -EOPNOTSUPP)
		e = meta_job(b, false, path, done, NULL, NULL, arg);
	return e;
}

int backend_list_async(struct backend *b, const char *dir, bk_list_fn fn, bk_done_fn done,
		       void *arg)
{
	int e = -EOPNOTSUPP;

	if (b->ops->list_async)
		e = b->ops->list_async(b, dir, fn, done, arg);
	if (e == -EOPNOTSUPP)
		e = meta_job(b, true, dir, NULL, fn, done, arg);
	return e;
}
