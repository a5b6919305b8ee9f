/*
 * upload.c - the front of backend_upload_*: the contract every scheme relies on, kept in one
 * place, and the counters.
 *
 *   caller ─► backend_upload_part ─► plan (under u->lock) ─► ops->upload_part(step)
 *                                      │ refuse: -EAGAIN, -EINVAL, -EFBIG, a failure seen
 *   I/O thread ◄─ upload_part_end ◄──── the scheme, when the store has the bytes
 *   I/O thread ◄─ upload_end / upload_free ◄─ the scheme, when the object is there or undone
 *
 * The plan (struct upload_plan) is the contract as pure bookkeeping: parts in order, every
 * one but the last exactly part_size, a bounded number in flight, nothing after the end, the
 * first failure remembered and handed back to whoever asks next. It knows one thing about the
 * schemes, hold_first (S3 keeps a first part back so that an object of one part goes up as one
 * PutObject): it then says which part is held and which one starts a multipart upload, and at
 * commit whether anything was sent at all. The schemes do the I/O and call back into
 * upload_part_end and upload_end, on the I/O thread, which count, update the plan and call the
 * caller's done.
 *
 * Locking: u->lock guards the plan (and, by the schemes' choice, their own state of the
 * upload); it is never held while a done runs or a request is submitted by this file.
 * Counters are relaxed atomics in struct backend. Workload: a few calls per part of several
 * MiB; nothing here is hot.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "scheme.h"
#include "upload.h"

int upload_plan_cfg(const struct bk_upload_cfg *cfg, uint64_t min_part, struct bk_upload_cfg *ret)
{
	struct bk_upload_cfg c = cfg ? *cfg : (struct bk_upload_cfg){0};

	if (!c.part_size)
		c.part_size = BK_PART_SIZE_DEFAULT;
	if (!c.max_parts_in_flight)
		c.max_parts_in_flight = BK_IN_FLIGHT_DEFAULT;
	if (c.part_size < (min_part ? min_part : 1) || c.part_size > BK_PART_SIZE_MAX ||
	    c.part_size > SIZE_MAX || c.max_parts_in_flight < 2 ||
	    c.max_parts_in_flight > BK_IN_FLIGHT_MAX ||
	    (c.prio != BK_URGENT && c.prio != BK_BACKGROUND))
		return -EINVAL;
	*ret = c;
	return 0;
}

void upload_plan_init(struct upload_plan *p, const struct bk_upload_cfg *cfg, uint32_t max_parts)
{
	*p = (struct upload_plan){.part_size = cfg->part_size,
				  .max_in_flight = cfg->max_parts_in_flight,
				  .max_parts = max_parts};
}

int upload_plan_part(struct upload_plan *p, size_t len, bool hold_first, uint32_t *ret_no,
		     uint64_t *ret_off)
{
	int step = UPLOAD_SEND;

	if (p->ended || p->last_seen || len == 0 || len > p->part_size)
		return -EINVAL;
	if (p->err)
		return p->err;
	if (p->in_flight >= p->max_in_flight)
		return -EAGAIN;
	if (p->nparts >= p->max_parts || p->size > UINT64_MAX - len)
		return -EFBIG;
	if (hold_first && p->nparts == 0)
		step = UPLOAD_HOLD;
	else if (hold_first && p->nparts == 1)
		step = UPLOAD_START;
	*ret_off = p->size;
	*ret_no = ++p->nparts;
	p->size += len;
	p->in_flight++;
	p->last_seen = len < p->part_size;
	return step;
}

void upload_plan_untake(struct upload_plan *p, size_t len)
{
	p->nparts--;
	p->size -= len;
	p->in_flight--;
	p->last_seen = false; /* a part after a short one is never taken */
}

void upload_plan_done(struct upload_plan *p, int err)
{
	p->in_flight--;
	if (err && !p->err)
		p->err = err;
}

int upload_plan_commit(struct upload_plan *p, bool hold_first)
{
	if (p->ended)
		return -EINVAL;
	p->ended = true;
	return hold_first && p->nparts <= 1 ? UPLOAD_SINGLE : UPLOAD_COMPLETE;
}

int upload_plan_abort(struct upload_plan *p)
{
	if (p->ended)
		return -EINVAL;
	p->ended = true;
	return 0;
}

bool upload_reserved_name(const char *name)
{
	return strncmp(name, UPLOAD_TMP_PREFIX, strlen(UPLOAD_TMP_PREFIX)) == 0;
}

/* ---- the interface ------------------------------------------------------------------------- */

bool backend_writable(const struct backend *b)
{
	return b->writable;
}

bool upload_path_ok(const char *path)
{
	const char *p = path;

	if (!path || !path[0])
		return false;
	for (;;) {
		size_t n = strcspn(p, "/");

		if (n == 0 || n > 255 || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		if (!p[n])
			return true;
		p += n + 1;
	}
}

int backend_upload_new(struct backend *b, const char *path, const struct bk_upload_cfg *cfg,
		       struct bk_upload **ret)
{
	struct bk_upload *u;
	struct bk_upload_cfg c;
	int e;

	if (!b->writable)
		return -EROFS;
	if (!upload_path_ok(path))
		return -EINVAL;
	e = upload_plan_cfg(cfg, b->ops->min_part, &c);
	if (e < 0)
		return e;
	u = calloc(1, sizeof(*u));
	if (!u || !(u->path = strdup(path))) {
		free(u);
		return -ENOMEM;
	}
	u->b = b;
	u->cfg = c;
	pthread_mutex_init(&u->lock, NULL);
	upload_plan_init(&u->plan, &c, b->ops->max_parts);
	e = b->ops->upload_init(u);
	if (e < 0) {
		upload_free(u);
		return e;
	}
	WSTAT_ADD(b, started, 1);
	*ret = u;
	return 0;
}

int backend_upload_part(struct bk_upload *u, const void *data, size_t len, bk_done_fn done,
			void *arg)
{
	struct bk_part *p = calloc(1, sizeof(*p));
	uint32_t no = 0;
	uint64_t off = 0;
	int step, e;

	if (!p)
		return -ENOMEM;
	pthread_mutex_lock(&u->lock);
	step = upload_plan_part(&u->plan, len, u->b->ops->hold_first, &no, &off);
	pthread_mutex_unlock(&u->lock);
	if (step < 0) {
		free(p);
		return step;
	}
	*p = (struct bk_part){
	    .u = u, .no = no, .off = off, .data = data, .len = len, .done = done, .arg = arg};
	e = u->b->ops->upload_part(u, p, step);
	if (e < 0) {
		pthread_mutex_lock(&u->lock);
		upload_plan_untake(&u->plan, len);
		pthread_mutex_unlock(&u->lock);
		free(p);
	}
	return e;
}

int backend_upload_commit(struct bk_upload *u, bk_commit_fn done, void *arg)
{
	int e;

	if (!done)
		return -EINVAL;
	pthread_mutex_lock(&u->lock);
	e = upload_plan_commit(&u->plan, u->b->ops->hold_first);
	if (e >= 0) {
		u->commit_done = done;
		u->commit_arg = arg;
	}
	pthread_mutex_unlock(&u->lock);
	if (e < 0)
		return e;
	e = u->b->ops->upload_commit(u);
	if (e < 0) {
		pthread_mutex_lock(&u->lock);
		u->plan.ended = false;
		u->commit_done = NULL; /* a later abort is an abort */
		pthread_mutex_unlock(&u->lock);
	}
	return e;
}

void backend_upload_abort(struct bk_upload *u)
{
	backend_upload_abort_then(u, NULL, NULL);
}

void backend_upload_abort_then(struct bk_upload *u, bk_done_fn done, void *arg)
{
	int e;

	if (!u) {
		if (done)
			done(arg, 0);
		return;
	}
	pthread_mutex_lock(&u->lock);
	e = upload_plan_abort(&u->plan);
	if (e == 0) {
		u->abort_done = done;
		u->abort_arg = arg;
	}
	pthread_mutex_unlock(&u->lock);
	if (e < 0)
		return; /* committed already: the upload is the backend's, its commit's done runs */
	u->b->ops->upload_abort(u);
}

/* ---- for the schemes ----------------------------------------------------------------------- */

void upload_part_end(struct bk_part *p, int err)
{
	struct bk_upload *u = p->u;

	pthread_mutex_lock(&u->lock);
	upload_plan_done(&u->plan, err);
	pthread_mutex_unlock(&u->lock);
	if (!err) {
		WSTAT_ADD(u->b, parts, 1);
		WSTAT_ADD(u->b, bytes, p->len);
	}
	p->done(p->arg, err);
	free(p);
}

void upload_end(struct bk_upload *u, int err, const struct bk_meta *meta)
{
	if (!u->commit_done) { /* aborted */
		bk_done_fn done = u->abort_done;
		void *arg = u->abort_arg;

		WSTAT_ADD(u->b, aborted, 1);
		upload_free(u);
		if (done)
			done(arg, 0);
		return;
	}
	if (err) {
		WSTAT_ADD(u->b, failed, 1);
		WSTAT_ADD(u->b, aborted, 1);
	} else {
		WSTAT_ADD(u->b, completed, 1);
	}
	u->commit_done(u->commit_arg, err, err ? NULL : meta);
	upload_free(u);
}

void upload_free(struct bk_upload *u)
{
	if (!u)
		return;
	pthread_mutex_destroy(&u->lock);
	free(u->path);
	free(u);
}
