/*
 * upload.h - what upload.c (the front of backend_upload_*) shares with the schemes that write
 * (s3write.c, filewrite.c): an upload's common state, one part handed over, and the contract's
 * rules as pure functions (struct upload_plan), which tests/unit/test_upload.c drives against
 * a reference model.
 */
#ifndef TIERFS_UPLOAD_H
#define TIERFS_UPLOAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* ---- the contract, pure: no lock, no I/O (upload.c holds u->lock around every call) ------ */

struct upload_plan {
	uint64_t part_size;	/* every part but the last */
	unsigned max_in_flight; /* parts taken whose done has not run, at most */
	uint32_t max_parts;	/* the store's limit on parts of one object */
	uint32_t nparts;	/* parts taken */
	uint64_t size;		/* bytes taken */
	unsigned in_flight;	/* parts taken whose done has not run */
	bool last_seen;		/* a part shorter than part_size was taken: no more */
	bool ended;		/* commit or abort called */
	int err;		/* the first failure a part's done got, 0 if none */
};

/* What a part taken asks of the scheme (ops->upload_part's @step). */
enum upload_step {
	UPLOAD_SEND = 0,  /* send (write) it now, or as soon as the upload can take it */
	UPLOAD_HOLD = 1,  /* hold_first: the first part, kept back until the next call */
	UPLOAD_START = 2, /* hold_first: the second part: start a multipart upload, send the
			   * held part and this one */
};

/* What a commit asks (upload_plan_commit's value). */
enum upload_finish {
	UPLOAD_COMPLETE = 0, /* finish what was sent (S3 CompleteMultipartUpload; file rename) */
	UPLOAD_SINGLE = 1,   /* hold_first, nothing sent: one request with the held part (or
			      * an empty body) */
};

/*
 * @cfg (NULL: defaults) with every zero replaced by its default, checked against the store's
 * smallest part @min_part. @return 0 and *ret, or -EINVAL.
 */
int upload_plan_cfg(const struct bk_upload_cfg *cfg, uint64_t min_part, struct bk_upload_cfg *ret);

/* A plan for @cfg (as upload_plan_cfg returned it) on a store of at most @max_parts parts. */
void upload_plan_init(struct upload_plan *p, const struct bk_upload_cfg *cfg, uint32_t max_parts);

/*
 * Take a part of @len bytes. @return its step (enum upload_step) with *ret_no (1-based) and
 * *ret_off, or -errno and nothing changed: the first failure seen, -EINVAL (after the end, an
 * empty part, a part larger than part_size, a part after a short one), -EAGAIN (max_in_flight
 * in flight), -EFBIG (past max_parts, or the size would overflow).
 */
int upload_plan_part(struct upload_plan *p, size_t len, bool hold_first, uint32_t *ret_no,
		     uint64_t *ret_off);

/* Give back the part of @len bytes just taken, which the scheme could not take. */
void upload_plan_untake(struct upload_plan *p, size_t len);

/* A part's done ran with @err: one fewer in flight, and the first failure kept. */
void upload_plan_done(struct upload_plan *p, int err);

/* Commit: @return enum upload_finish, or -EINVAL (already ended). Ends the plan. */
int upload_plan_commit(struct upload_plan *p, bool hold_first);

/* Abort: ends the plan. @return 0, or -EINVAL (already ended). */
int upload_plan_abort(struct upload_plan *p);

/* ---- the upload and its parts ------------------------------------------------------------- */

struct bk_upload {
	struct backend *b;
	char *path;		  /* owned; as backend_upload_new got it */
	struct bk_upload_cfg cfg; /* resolved: no zero left */
	pthread_mutex_t lock;	  /* guards plan and the scheme's state in priv */
	struct upload_plan plan;  /* lock */
	bk_commit_fn commit_done; /* lock: set by backend_upload_commit, before the scheme
				   * hears; NULL: an abort (or not ended yet) */
	void *commit_arg;
	bk_done_fn abort_done;	  /* lock: set by backend_upload_abort_then before the scheme
				   * hears; run by upload_end once the abort is over */
	void *abort_arg;
	void *priv; /* the scheme's state (its own rules say what lock guards
		     * what; u->lock by default) */
};

/* One part handed over: the scheme's from ops->upload_part until upload_part_end. */
struct bk_part {
	struct bk_upload *u;
	uint32_t no;	  /* 1-based */
	uint64_t off;	  /* of its first byte in the object */
	const void *data; /* the caller's, valid until done */
	size_t len;
	bk_done_fn done;
	void *arg;
	struct bk_part *next; /* the scheme's list link */
	/* s3: filled by the scheme on the caller's thread */
	unsigned char md5[16]; /* of the bytes: Content-MD5, and the ETag S3 should answer */
};

/* Part @p ended with @err: counted, the plan told, its done called, @p freed. I/O thread;
 * never with u->lock held. */
void upload_part_end(struct bk_part *p, int err);

/* The upload is over, its undoing too if it failed or was aborted (the scheme has freed
 * u->priv): counted; a commit's done called with @err (0: @meta is the new object); @u freed.
 * I/O thread; never with u->lock held. */
void upload_end(struct bk_upload *u, int err, const struct bk_meta *meta);

/* Free @u, counting nothing (backend_upload_new's failure). */
void upload_free(struct bk_upload *u);

/* Can an object or directory be at @path: not empty, no empty, "." or ".." segment, none
 * longer than 255 bytes? (file:// refuses its reserved names too.) */
bool upload_path_ok(const char *path);

/* Is @name (one path segment) one the schemes keep for themselves: ".tierfs-tmp-*"? */
bool upload_reserved_name(const char *name);

#define UPLOAD_TMP_PREFIX ".tierfs-tmp-"

#endif
