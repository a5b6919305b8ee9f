/*
 * scheme.h - what backend.c and the schemes it dispatches to (s3.c, http.c, file.c) share: one
 * set of operations per scheme, and the struct backend they run on.
 */
#ifndef TIERFS_SCHEME_H
#define TIERFS_SCHEME_H

#include <stddef.h>

#include "backend.h"

struct bk_ops {
	int (*check)(struct backend *b, char *err, size_t errlen);
	int (*stat)(struct backend *b, const char *path, struct bk_meta *ret);
	int (*list)(struct backend *b, const char *dir, bk_list_fn fn, void *arg);
	int (*read)(struct backend *b, const char *path, const char *etag, uint64_t off,
		    uint32_t len, void *dst, enum bk_prio prio, bk_done_fn done, void *arg);
	void (*free)(struct backend *b);
	/* asynchronous metadata (backend.h); NULL, or -EOPNOTSUPP from the call: the
	 * synchronous op runs as a job on the I/O thread instead (a local store, a manifest) */
	int (*stat_async)(struct backend *b, const char *path, bk_stat_done_fn done, void *arg);
	int (*list_async)(struct backend *b, const char *dir, bk_list_fn fn, bk_done_fn done,
			  void *arg);
};

/* Set up by backend_new and the scheme's init, read-only afterwards: no lock. */
struct backend {
	const struct bk_ops *ops;
	const char *scheme;   /* "s3", "http", "file" */
	struct io *io;        /* the I/O loop: requests for s3 and http, read jobs for file */
	void *priv;           /* the scheme's own state */
	void (*log)(void *log_arg, int level, const char *line); /* cfg->log, may be NULL */
	void *log_arg;
	uint64_t list_max_keys;  /* a listing's bounds (backend.c wraps every listing); 0 in a */
	uint64_t list_max_bytes; /* struct made by hand is BK_LIST_MAX_KEYS, _BYTES */
};

/* Each sets b->ops, b->scheme, b->priv (and b->io when it needs one).
 * @return 0, or -errno with one line in @err. */
int s3_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen);
int http_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen);
int file_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen);

#endif
