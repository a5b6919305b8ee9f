/*
 * scheme.h - what backend.c and the schemes it dispatches to (s3.c, http.c, file.c) share: one
 * set of operations per scheme, and the struct backend they run on.
 */
#ifndef TIERFS_SCHEME_H
#define TIERFS_SCHEME_H

#include <stddef.h>

#include "backend.h"

struct bk_part;
struct io_req;

struct bk_ops {
	int (*check)(struct backend *b, char *err, size_t errlen);
	/* A scheme that speaks HTTP gives the request for an object, and backend.c stats and
	 * reads it through io.c (io_head, io_read, io_head_async): @return a new request, or NULL
	 * (no memory). NULL: the scheme has stat and read of its own (file). */
	struct io_req *(*object_req)(struct backend *b, const char *path);
	int (*stat)(struct backend *b, const char *path, struct bk_meta *ret);
	int (*list)(struct backend *b, const char *dir, bk_list_fn fn, void *arg);
	int (*read)(struct backend *b, const char *path, const char *etag, uint64_t off,
		    uint32_t len, void *dst, enum bk_prio prio, bk_done_fn done, void *arg);
	void (*free)(struct backend *b);
	/* backend_space; NULL: -ENOTSUP */
	int (*space)(struct backend *b, struct statvfs *ret);
	/* asynchronous metadata (backend.h); NULL (with no object_req), or -EOPNOTSUPP from the
	 * call: the synchronous op runs as a job on the I/O thread instead (a local store, a
	 * manifest) */
	int (*stat_async)(struct backend *b, const char *path, bk_stat_done_fn done, void *arg);
	int (*list_async)(struct backend *b, const char *dir, bk_list_fn fn, bk_done_fn done,
			  void *arg);

	/* Optional: after the I/O thread started, and before it stops (file's writer thread). */
	int (*start)(struct backend *b);
	void (*stop)(struct backend *b);

	/* Writing (backend.h, upload.h); all NULL for a read-only scheme (http), which then
	 * answers -EROFS. upload.c has checked the contract before each call. */
	uint64_t min_part;  /* the smallest part_size the store takes */
	uint32_t max_parts; /* the most parts of one object */
	bool hold_first;    /* keep a first part back: one request for an object of one part */
	/* Set u->priv up; no I/O. @return 0 or -errno. */
	int (*upload_init)(struct bk_upload *u);
	/* Take part @p (upload.h says what @step asks). @return 0 (p is the scheme's until
	 * upload_part_end) or -errno (nothing done, p still the caller's). */
	int (*upload_part)(struct bk_upload *u, struct bk_part *p, int step);
	/* The plan has ended with a commit: finish once the parts are done, then upload_end.
	 * @return 0, or -errno (nothing done; the upload is the caller's again). */
	int (*upload_commit)(struct bk_upload *u);
	/* The plan has ended with an abort: undo once the parts are done, then upload_free. */
	void (*upload_abort)(struct bk_upload *u);
	int (*unlink)(struct backend *b, const char *path, bk_done_fn done, void *arg);
	int (*rename)(struct backend *b, const char *from, const char *to, bool overwrite,
		      bk_done_fn done, void *arg);
	/* mkdir, or rmdir with @rm */
	int (*mkdir)(struct backend *b, const char *path, bool rm, bk_done_fn done, void *arg);
};

/* The write counters of struct bk_stats (backend.h says what each counts); relaxed atomics. */
struct bk_write_stats {
	uint64_t started, completed, failed, aborted, abort_errors, parts, bytes, retries,
	    tmp_removed;
};

#define WSTAT_ADD(b, f, v) __atomic_fetch_add(&(b)->wst.f, (v), __ATOMIC_RELAXED)

/* Set up by backend_new and the scheme's init, read-only afterwards: no lock. */
struct backend {
	const struct bk_ops *ops;
	const char *scheme;   /* "s3", "http", "file" */
	struct io *io;        /* the I/O loop: requests for s3 and http, read jobs for file */
	void *priv;           /* the scheme's own state */
	void (*log)(void *log_arg, int level, const char *line); /* cfg->log, may be NULL */
	void *log_arg;
	bool writable;		   /* cfg->writable, and the scheme can write */
	struct bk_write_stats wst; /* relaxed atomics, any thread */
	uint64_t list_max_keys;  /* a listing's bounds (backend.c wraps every listing); 0 in a */
	uint64_t list_max_bytes; /* struct made by hand is BK_LIST_MAX_KEYS, _BYTES */
};

/* Each sets b->ops, b->scheme, b->priv (and b->io when it needs one).
 * @return 0, or -errno with one line in @err. */
int s3_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen);
int http_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen);
int file_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen);

/* ---- url.c: the URL rules of the schemes, for backend_url_check ---------------------------- */

#define URL_SCHEMES "(use s3://, http://, https:// or file://)"

/* "scheme://" is there: lower-case the scheme in place. @return 0 or -EINVAL. */
int url_scheme(char *url, char *err, size_t errlen);
/* A scheme's own rules, on a URL of that scheme. @return 0, -EINVAL, or -EACCES (a password
 * in the authority), with one line in @err. */
int s3_url_check(const char *url, char *err, size_t errlen);
int http_url_check(const char *url, char *err, size_t errlen);
int file_url_check(const char *url, char *err, size_t errlen);

#endif
