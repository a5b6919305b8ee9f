/*
 * write.c - files written through the mount: a new object, written from offset 0 to the end,
 * becomes an object of the store when it is closed (or fsynced), whole or not at all, and its
 * blocks fill the cache's tiers on the way (docs/design.md, the write path; invariant 9).
 *
 *   create / open O_TRUNC ─► struct wfile: an upload (backend_upload_new), a provisional oid
 *   write(off == size) ─► copy into the part being filled ─► a part full: backend_upload_part
 *                                 the store has it (part_done) ─► its blocks: cache_put
 *                                                                 (hot tier, provisional oid)
 *   the writer's last close / fsync / release ─► the last part, backend_upload_commit ─► done:
 *        ok: ns_written (the version the store named), cache_rekey(provisional → real oid),
 *            cache_publish (the disk and fleet tiers get the blocks), close() returns 0
 *        failed: ns_write_failed, cache_drop(provisional), close() returns the error
 *
 * Buffers. A part (part_size bytes, a whole number of blocks) is filled in a buffer taken from
 * the mount's pool of write_buffer bytes, and given back when the store has acknowledged it.
 * A write that finds the pool empty is parked with a copy of its bytes (the kernel's buffer is
 * the request's, valid only during op_write), and answered when a part done frees a buffer:
 * write() waits, no thread does. A file holds at most max_parts + 1 buffers (the parts in
 * flight and the one being filled), so one writer cannot take the whole pool from the others.
 * The copies of parked writes are outside the pool: one write (at most 1 MiB, the largest
 * request the kernel sends) per writing thread.
 *
 * A buffer given back is kept for the next part (wpool.spare), never freed before the mount
 * ends: parts are taken on FUSE threads and given back on the I/O thread, and malloc, once a
 * freed 8 MiB buffer has raised its mmap threshold, kept the freed ones in each thread's arena,
 * up to 26 MiB an arena: the process's peak RSS in 4 concurrent writes went 60 MiB past the
 * pool's bound. The pool never holds more than write_buffer bytes, taken or spare.
 *
 * Blocks. part_size is a multiple of block_size, so a block never spans two buffers: once the
 * store has a part (part_done, on the I/O thread), its blocks are copied into the hot tier
 * under the provisional oid, and renamed in place (cache_rekey) once the store names the
 * version: every part's done runs before the commit's. The copy is off the write's path: a
 * write request costs one copy (request to part), and the hot tier's copy, whose first touch
 * of the arena also zeroes its pages, overlaps the next requests on another CPU. Nobody can read it
 * before (nothing else knows the provisional oid). A hot tier that cannot take a block (every
 * segment pinned) costs a later reader one fetch, nothing else.
 *
 * Order. The kernel sends one file's writes in the writer's order; a write that does not start
 * where the last ended (a seek, a pwrite elsewhere, two threads racing on one fd) is refused
 * with EINVAL, as mountpoint-s3 does. So is a write after the object was committed (the writer's
 * last close, or fsync): the object is whole and closed for writing.
 *
 * Who commits. FLUSH comes at every close(2) of every descriptor (dups, a forked child's
 * copies), RELEASE once at the last. The object is committed at the close of its writer, the
 * thread group that opened it (owner), when it holds no other descriptor of the file:
 * flush_rule asks /proc (procfd.c). Another process's close, and the writer's close of a dup,
 * answer 0 at once. A writer that wrote nothing itself and whose children hold the file leaves
 * the commit to RELEASE, as does anything else that never reached the writer's last close;
 * no close() waits for a release's commit, so its failure is logged and counted (at_release).
 * Where /proc cannot tell, a flush commits once a byte was written (the rule before).
 *
 * Locking: w->lock guards a file's state; the pool has its own lock (wpool.lock), taken alone
 * or inside w->lock, never the other way round. FUSE replies and backend calls are made with
 * no lock held where they can call back (backend_upload_part's done never runs inside it; the
 * commit's done runs on the I/O thread). A wfile is freed when it was released and its upload
 * has ended (refs). Workload: a broker uploads a few segments at once (64 MiB to 1 GiB, 8 KiB
 * to 1 MiB writes); the pool bounds what they hold in memory together.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>

#include <fuse_lowlevel.h>

#include "fs_fuse.h"
#include "write.h"

/* One part's bytes. */
struct wbuf {
	struct wbuf *next;   /* a file's full parts waiting to be handed over (w->lock), or
			      * wpool.spare (wpool.lock) */
	struct wfile *w;
	uint64_t off;        /* its first byte's offset in the file */
	size_t len;          /* bytes in it */
	char data[];         /* wpool.part_size */
};

/* A write waiting for a buffer, with a copy of its bytes. */
struct parked {
	struct parked *next; /* w->parked, in order */
	fuse_req_t req;
	size_t total;        /* the write's size: its reply */
	size_t len;          /* bytes not taken yet, at data */
	char data[];
};

/* A flush or fsync waiting for the commit. */
struct waiter {
	struct waiter *next;
	fuse_req_t req;
};

enum wstate {
	W_OPEN,       /* taking writes */
	W_COMMITTING, /* the last part handed over, the commit asked for */
	W_DONE,       /* the store answered the commit (w->result) */
};

struct wfile {
	struct mount *m;
	uint64_t ino;
	pthread_mutex_t lock;
	unsigned refs;           /* the handle's and the upload's; lock */
	struct bk_upload *u;     /* until the commit's done; lock */
	char *path;              /* in the store */
	struct cache_oid prov;   /* the provisional oid of its blocks */
	uint64_t size;           /* bytes taken; lock */
	uint64_t end;            /* where the next write must start: size and the parked bytes;
				  * lock */
	struct wbuf *cur;        /* the part being filled, NULL when none; lock */
	struct wbuf *full, **full_tail; /* parts full, not handed over yet (backend busy); lock */
	unsigned nbufs;          /* buffers it holds (cur, full, in flight); lock */
	unsigned inflight;       /* parts handed over, not done; lock */
	int err;                 /* the first failure: the upload is lost; lock */
	enum wstate state;       /* lock */
	int result;              /* W_DONE: 0 or -errno; lock */
	struct parked *parked, **parked_tail; /* writes waiting for a buffer; lock */
	struct waiter *waiters;  /* flushes and fsyncs waiting for the commit; lock */
	bool want_commit;        /* a flush, fsync or release came while writes were parked;
				  * lock */
	bool commit_sent;        /* backend_upload_commit (or abort) called; lock */
	bool at_release;         /* the commit was the release's: no close waits for it; lock */
	pid_t owner;             /* the opener's thread group (its writer), <= 0 unknown; set
				  * at creation */
	bool owner_wrote;        /* a write came from the writer's thread group (atomic) */
	pid_t seen_tid;          /* the last writing thread found outside it (atomic) */
	struct wfile *pnext;     /* wpool.hungry: files with parked writes; wpool.lock */
	bool hungry;             /* in wpool.hungry; wpool.lock */
};

/* The mount's write buffers. */
struct wpool {
	pthread_mutex_t lock;
	uint64_t part_size;      /* a whole number of blocks, >= the store's minimum part */
	unsigned max_parts;      /* parts in flight per file */
	uint64_t limit, used;    /* bytes of buffers allowed, and taken; lock */
	struct wbuf *spare;      /* buffers given back, for the next take (.next); lock */
	struct wfile *hungry;    /* files whose parked writes wait for a buffer; lock */
	struct wpool_stats st;   /* lock */
};

/* ---- the pool ---------------------------------------------------------------------------------- */

int wpool_new(const struct fs_opts *o, struct wpool **ret)
{
	struct wpool *p = calloc(1, sizeof(*p));
	uint64_t bs = o->block_size, part = o->part_size;

	if (!p)
		return -ENOMEM;
	if (part < BK_PART_SIZE_MIN)
		part = BK_PART_SIZE_MIN;
	p->part_size = (part + bs - 1) / bs * bs; /* whole blocks */
	p->max_parts = (unsigned)o->write_parts;
	p->limit = o->write_buffer;
	pthread_mutex_init(&p->lock, NULL);
	*ret = p;
	return 0;
}

void wpool_free(struct wpool *p)
{
	if (!p)
		return;
	while (p->spare) {
		struct wbuf *b = p->spare;

		p->spare = b->next;
		free(b);
	}
	pthread_mutex_destroy(&p->lock);
	free(p);
}

void wpool_get_stats(struct wpool *p, struct wpool_stats *ret)
{
	pthread_mutex_lock(&p->lock);
	*ret = p->st;
	ret->buffer_bytes = p->used;
	ret->buffer_limit = p->limit;
	pthread_mutex_unlock(&p->lock);
}

#define HUGE_PAGE (2u << 20)

/* A new buffer of @size bytes, in huge pages where the kernel allows (a hint): its first
 * touch, a write's copy on the FUSE thread, then faults 2 MiB at a time, not 4 KiB. @return
 * it, or NULL. */
static struct wbuf *buf_alloc(size_t size)
{
	void *b;

	if (posix_memalign(&b, HUGE_PAGE, size) != 0)
		return NULL;
#ifdef MADV_HUGEPAGE
	madvise(b, size / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE);
#endif
	return b;
}

/* A buffer for @w if the pool and its share allow (w->lock held). @return it or NULL. */
static struct wbuf *buf_take(struct wfile *w)
{
	struct wpool *p = w->m->wpool;
	struct wbuf *b = NULL;

	if (w->nbufs >= p->max_parts + 1)
		return NULL;
	pthread_mutex_lock(&p->lock);
	if (p->used + p->part_size <= p->limit || p->used == 0) {
		p->used += p->part_size;
		b = p->spare;
		if (b) {
			p->spare = b->next;
		} else {
			pthread_mutex_unlock(&p->lock);
			b = buf_alloc(sizeof(*b) + p->part_size);
			pthread_mutex_lock(&p->lock);
			if (!b)
				p->used -= p->part_size;
		}
	}
	pthread_mutex_unlock(&p->lock);
	if (b) {
		*b = (struct wbuf){.w = w};
		w->nbufs++;
	}
	return b;
}

/* Give @b back (w->lock held). @return true if files wait for a buffer. */
static bool buf_give(struct wfile *w, struct wbuf *b)
{
	struct wpool *p = w->m->wpool;
	bool hungry;

	w->nbufs--;
	pthread_mutex_lock(&p->lock);
	b->next = p->spare;
	p->spare = b;
	p->used -= p->part_size;
	hungry = p->hungry != NULL;
	pthread_mutex_unlock(&p->lock);
	return hungry;
}

static void hungry_add(struct wfile *w)
{
	struct wpool *p = w->m->wpool;

	pthread_mutex_lock(&p->lock);
	if (!w->hungry) {
		w->hungry = true;
		w->pnext = p->hungry;
		p->hungry = w;
		w->refs++; /* w->lock is held by the caller */
		p->st.write_waits++;
	}
	pthread_mutex_unlock(&p->lock);
}

/* ---- a file's life ----------------------------------------------------------------------------- */

static void wfile_put(struct wfile *w)
{
	bool last;

	pthread_mutex_lock(&w->lock);
	last = --w->refs == 0;
	pthread_mutex_unlock(&w->lock);
	if (!last)
		return;
	pthread_mutex_destroy(&w->lock);
	free(w->path);
	free(w);
}

int wfile_new(struct mount *m, uint64_t ino, bool overwrite, pid_t owner, struct wfile **ret)
{
	struct bk_upload_cfg uc = {.part_size = m->wpool->part_size,
				   .max_parts_in_flight = m->wpool->max_parts,
				   .overwrite = overwrite,
				   .prio = BK_URGENT};
	struct wfile *w = calloc(1, sizeof(*w));
	char path[4096], v[64];
	uint64_t rnd[2] = {0};
	int r;

	if (!w)
		return -ENOMEM;
	r = ns_path(m->ns, ino, path, sizeof(path));
	if (r == 0 && !(w->path = strdup(path)))
		r = -ENOMEM;
	if (r == 0)
		r = backend_upload_new(m->b, w->path, &uc, &w->u);
	if (r < 0) {
		free(w->path);
		free(w);
		return r;
	}
	/* the provisional version: nobody else can name it */
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd[0] ^= (uint64_t)(uintptr_t)w;
	snprintf(v, sizeof(v), "tierfs-writing:%016llx%016llx", (unsigned long long)rnd[0],
		 (unsigned long long)rnd[1]);
	w->prov = cache_oid_make("tierfs-written", path, v);
	w->m = m;
	w->ino = ino;
	w->owner = owner;
	w->refs = 2; /* the handle, the upload */
	w->full_tail = &w->full;
	w->parked_tail = &w->parked;
	pthread_mutex_init(&w->lock, NULL);
	*ret = w;
	return 0;
}

static int reply_code(int r)
{
	/* what a writer can act on keeps its name; the rest is an I/O error */
	switch (r) {
	case 0:
		return 0;
	case -ENOSPC:
	case -EDQUOT:
	case -EEXIST:
	case -ENAMETOOLONG:
	case -EFBIG:
	case -EINVAL:
	case -EROFS:
	case -EACCES:
		return -r;
	default:
		return EIO;
	}
}

static void part_done(void *arg, int err);
static void commit_done(void *arg, int err, const struct bk_meta *meta);

/* Hand @w's full parts to the backend while it takes them (w->lock held): what it refuses
 * for now (-EAGAIN: max_parts in flight) goes when a part is done. */
static void send_full(struct wfile *w)
{
	while (w->full) {
		struct wbuf *b = w->full;
		int r = backend_upload_part(w->u, b->data, b->len, part_done, b);

		if (r == -EAGAIN)
			return;
		w->full = b->next;
		if (!w->full)
			w->full_tail = &w->full;
		b->next = NULL;
		if (r < 0) {
			if (!w->err)
				w->err = r;
			buf_give(w, b);
			continue;
		}
		w->inflight++;
		w->refs++; /* part_done drops it */
	}
}

struct replies;

/* Ask the store to make the object (w->lock held; every part handed over). A file that
 * failed already, or whose commit the backend refused, is undone instead: nothing appears,
 * and the file ends with its error once the undoing is over (aborted), so that close()
 * returns when nothing of it is left, temporary file included. The abort itself is asked
 * for once w->lock is dropped (replies_send): it may end at once, and aborted takes the lock. */
static void commit_send(struct wfile *w, struct replies *rs);

/* The part being filled is full, or the file ends: it goes on the list to hand over. */
static void part_close(struct wfile *w)
{
	struct wbuf *b = w->cur;

	w->cur = NULL;
	if (!b->len) {
		buf_give(w, b);
		return;
	}
	*w->full_tail = b;
	w->full_tail = &b->next;
}

/* Copy the blocks of part @b (the last one short if the file ends there) into the hot tier,
 * under the provisional oid. The part is the caller's: handed over and acknowledged, not
 * given back yet; no lock needed (nobody else reads or names it). */
static void cache_part(struct wfile *w, const struct wbuf *b)
{
	uint32_t bs = cache_block_size(w->m->c);

	for (size_t done = 0; done < b->len; done += bs) {
		size_t n = b->len - done < bs ? b->len - done : bs;
		struct cache_key k = {w->prov, (b->off + done) / bs};

		cache_put(w->m->c, k, b->data + done, (uint32_t)n);
	}
}

/*
 * Take @len bytes at @data as the next bytes of @w (w->lock held): into the part being
 * filled, blocks to the hot tier, full parts to the store. @return how many it took: less than
 * @len when no buffer is free (the rest waits).
 */
static size_t take(struct wfile *w, const char *data, size_t len)
{
	uint64_t psize = w->m->wpool->part_size;
	size_t done = 0;

	while (done < len) {
		size_t n;

		if (!w->cur) {
			if (!(w->cur = buf_take(w)))
				break;
			w->cur->off = w->size;
		}
		n = psize - w->cur->len < len - done ? psize - w->cur->len : len - done;
		memcpy(w->cur->data + w->cur->len, data + done, n);
		w->cur->len += n;
		w->size += n;
		done += n;
		if (w->cur->len == psize) {
			part_close(w);
			send_full(w);
		}
	}
	return done;
}

/* Replies to send once w->lock is dropped: writes taken at last, and flushes or fsyncs whose
 * commit ended. */
struct replies {
	struct parked *writes;   /* each answered with its total, or err */
	int werr;                /* errno for the writes, 0: taken */
	struct waiter *waiters;  /* each answered with cerr */
	int cerr;
	struct wfile *abort;     /* a file whose upload is to be undone (commit_send) */
	struct bk_upload *abort_u; /* ... that upload */
};

static void aborted(void *arg, int err);

static void replies_send(struct replies *rs)
{
	while (rs->writes) {
		struct parked *p = rs->writes;

		rs->writes = p->next;
		if (rs->werr)
			fuse_reply_err(p->req, rs->werr);
		else
			fuse_reply_write(p->req, p->total);
		free(p);
	}
	while (rs->waiters) {
		struct waiter *q = rs->waiters;

		rs->waiters = q->next;
		fuse_reply_err(q->req, rs->cerr);
		free(q);
	}
	if (rs->abort) {
		struct wfile *w = rs->abort;

		rs->abort = NULL;
		backend_upload_abort_then(rs->abort_u, aborted, w);
	}
}

static void commit_send(struct wfile *w, struct replies *rs)
{
	int r = w->err;

	if (r == 0 && (r = backend_upload_commit(w->u, commit_done, w)) == 0)
		return;
	w->err = r;
	rs->abort = w;
	rs->abort_u = w->u;
	w->u = NULL;
}

static void commit_locked(struct wfile *w, struct replies *rs);

/*
 * The store answered the commit (w->lock held): with the object (@err 0, @meta), the name gets
 * its version in the namespace and the blocks written become that version's in the cache (and
 * go on to the disk and fleet tiers); otherwise the name goes, and so do the blocks. Every
 * flush and fsync waiting is answered (into @rs).
 */
static void finish_locked(struct wfile *w, int err, const struct bk_meta *meta,
			  struct replies *rs)
{
	struct mount *m = w->m;
	struct cache_oid id;

	if (err == 0)
		err = ns_written(m->ns, w->ino, meta, &id);
	if (err == 0) {
		cache_rekey(m->c, w->prov, id);
		cache_publish(m->c, &(struct cache_obj){.id = id, .size = meta->size,
							 .mtime = meta->mtime});
	} else {
		ns_write_failed(m->ns, w->ino);
		cache_drop(m->c, w->prov);
		fs_log_once(&m->log, FUSE_LOG_ERR, w->path, strerror(-err),
			    "write %s: the store did not take it (%s): nothing was left under "
			    "its name%s", w->path, strerror(-err),
			    w->at_release ? " (committed at the last close of another process "
					    "than its writer: no close() returned the error)" : "");
	}
	pthread_mutex_lock(&m->wpool->lock);
	if (err == 0)
		m->wpool->st.completed++;
	else
		m->wpool->st.failed++;
	if (w->at_release) {
		m->wpool->st.release_commits++;
		if (err)
			m->wpool->st.release_failed++;
	}
	pthread_mutex_unlock(&m->wpool->lock);
	w->state = W_DONE;
	w->result = err;
	w->u = NULL;
	rs->waiters = w->waiters;
	rs->cerr = reply_code(err);
	w->waiters = NULL;
}

/* Take parked writes in order while buffers last (w->lock held); the ones taken whole are
 * answered (into @rs). A file that wants its commit gets it once the last is taken. */
static void pump(struct wfile *w, struct replies *rs)
{
	struct parked **tail = &rs->writes;

	while (*tail)
		tail = &(*tail)->next;
	while (w->parked) {
		struct parked *p = w->parked;
		size_t n = w->err ? 0 : take(w, p->data, p->len);

		if (!w->err && n < p->len) {
			memmove(p->data, p->data + n, p->len - n);
			p->len -= n;
			hungry_add(w);
			return;
		}
		w->parked = p->next;
		if (!w->parked)
			w->parked_tail = &w->parked;
		/* a failed file fails every write parked on it */
		p->next = NULL;
		rs->werr = w->err ? reply_code(w->err) : 0;
		*tail = p;
		tail = &p->next;
	}
	if (!w->parked && w->want_commit && w->state == W_OPEN)
		commit_locked(w, rs);
}

/* Serve files whose parked writes wait for a buffer: one was given back. No lock held. */
static void wake_hungry(struct wpool *p)
{
	struct wfile *list, *w;

	pthread_mutex_lock(&p->lock);
	list = p->hungry;
	p->hungry = NULL;
	for (w = list; w; w = w->pnext)
		w->hungry = false;
	pthread_mutex_unlock(&p->lock);
	while ((w = list)) {
		struct replies rs = {0};

		list = w->pnext;
		pthread_mutex_lock(&w->lock);
		pump(w, &rs);
		pthread_mutex_unlock(&w->lock);
		replies_send(&rs);
		wfile_put(w); /* hungry_add's */
	}
}

/* The file ends here: its last block to the hot tier, its last part to the store, then the
 * commit once every part is handed over (w->lock held, no write parked). A flush or fsync
 * waiting for it is answered by commit_done, or here when there is nothing to commit. */
static void commit_locked(struct wfile *w, struct replies *rs)
{
	w->state = W_COMMITTING;
	if (w->cur)
		part_close(w);
	send_full(w);
	if (w->full || w->commit_sent)
		return; /* part_done sends the rest, then commits */
	w->commit_sent = true;
	commit_send(w, rs);
}

static void commit_done(void *arg, int err, const struct bk_meta *meta)
{
	struct wfile *w = arg;
	struct replies rs = {0};

	pthread_mutex_lock(&w->lock);
	finish_locked(w, err, meta, &rs);
	pthread_mutex_unlock(&w->lock);
	replies_send(&rs);
	wfile_put(w); /* the upload's */
}

/* The upload of a file that failed is undone (commit_send): it ends with its error. */
static void aborted(void *arg, int err)
{
	struct wfile *w = arg;
	struct replies rs = {0};

	(void)err; /* the abort's own outcome: nothing is left either way (abort_errors) */
	pthread_mutex_lock(&w->lock);
	finish_locked(w, w->err, NULL, &rs);
	pthread_mutex_unlock(&w->lock);
	replies_send(&rs);
	wfile_put(w); /* the upload's */
}

/* The store has a part (or failed it): its buffer goes back, the next part goes, and once the
 * last has been handed over a committing file commits. I/O thread, no lock held. */
static void part_done(void *arg, int err)
{
	struct wbuf *b = arg;
	struct wfile *w = b->w;
	struct replies rs = {0};
	bool hungry;

	if (!err)
		cache_part(w, b); /* before the commit's done, which renames its blocks */
	pthread_mutex_lock(&w->lock);
	w->inflight--;
	if (err && !w->err)
		w->err = err;
	hungry = buf_give(w, b);
	if (w->u)
		send_full(w);
	if (w->state == W_COMMITTING && !w->full && !w->commit_sent) {
		w->commit_sent = true;
		commit_send(w, &rs);
	}
	pthread_mutex_unlock(&w->lock);
	replies_send(&rs);
	if (hungry)
		wake_hungry(w->m->wpool);
	wfile_put(w); /* send_full's */
}

/* ---- what the FUSE operations call ----------------------------------------------------------- */

/* Note whether thread @tid, writing, is the writer's (until the writer's first write: /proc is
 * read once per other writing thread in a row, never after). */
static void note_writer(struct wfile *w, pid_t tid)
{
	pid_t tgid;

	if (w->owner <= 0 || __atomic_load_n(&w->owner_wrote, __ATOMIC_RELAXED) ||
	    tid == __atomic_load_n(&w->seen_tid, __ATOMIC_RELAXED))
		return;
	tgid = tid == w->owner ? tid : fs_proc_tgid(tid);
	if (tgid == w->owner)
		__atomic_store_n(&w->owner_wrote, true, __ATOMIC_RELAXED);
	else
		__atomic_store_n(&w->seen_tid, tid, __ATOMIC_RELAXED);
}

void wfile_write(fuse_req_t req, struct wfile *w, const char *buf, size_t size, off_t off)
{
	struct replies rs = {0};
	struct parked *p = NULL;
	int err = 0;
	size_t n = 0;

	note_writer(w, fuse_req_ctx(req)->pid);
	pthread_mutex_lock(&w->lock);
	if (w->state != W_OPEN || w->want_commit)
		err = EINVAL; /* the object was committed: it is whole */
	else if (off < 0 || (uint64_t)off != w->end)
		err = EINVAL; /* not sequential */
	else if (w->err)
		err = reply_code(w->err);
	else if (!w->parked)
		n = take(w, buf, size);
	if (!err && n < size && !(p = malloc(sizeof(*p) + size - n)))
		err = ENOMEM;
	if (!err) {
		w->end += size;
		if (n < size) {
			*p = (struct parked){.req = req, .total = size, .len = size - n};
			memcpy(p->data, buf + n, size - n);
			*w->parked_tail = p;
			w->parked_tail = &p->next;
			hungry_add(w); /* a part done serves it */
			req = NULL;
		}
		ns_set_size(w->m->ns, w->ino, w->size);
	}
	pthread_mutex_unlock(&w->lock);
	if (err)
		fuse_reply_err(req, err);
	else if (req)
		fuse_reply_write(req, size);
	replies_send(&rs);
}

/* fsync, the writer's close, or a release (@req NULL): the object is committed (once), and the
 * caller answered when the store has it. @zero_waits: a file with no byte written yet is left
 * open (the answer is 0 at once): a flush whose closer cannot be told apart from a dup's. */
static void commit_req(fuse_req_t req, struct wfile *w, bool zero_waits)
{
	struct replies rs = {0};
	struct waiter *q = req ? malloc(sizeof(*q)) : NULL;
	int err = -1;

	pthread_mutex_lock(&w->lock);
	if (zero_waits && w->state == W_OPEN && w->end == 0) {
		err = 0;
	} else if (w->state == W_DONE) {
		err = reply_code(w->result);
	} else if (req && !q) {
		err = ENOMEM;
	} else {
		if (q) {
			q->req = req;
			q->next = w->waiters;
			w->waiters = q;
			q = NULL;
		}
		if (!req && w->state == W_OPEN)
			w->at_release = true;
		if (w->state == W_OPEN && w->parked)
			w->want_commit = true; /* pump commits once they are taken */
		else if (w->state == W_OPEN)
			commit_locked(w, &rs);
	}
	pthread_mutex_unlock(&w->lock);
	free(q);
	replies_send(&rs);
	if (req && err >= 0)
		fuse_reply_err(req, err);
}

void wfile_commit(fuse_req_t req, struct wfile *w)
{
	commit_req(req, w, false);
}

enum flush_rule {
	FLUSH_COMMIT, /* the writer's last close: commit, answer when the store has it */
	FLUSH_KEEP,   /* another process's close, or the writer keeps another descriptor */
	FLUSH_BYTES,  /* the closer is unknown: commit once a byte was written */
};

/* What a FLUSH from thread @pid does to @w (no lock held: it reads /proc, procfd.c). The
 * writer is the thread group that opened the file; a child that inherited the descriptor
 * (a shell's command, subprocess, make) closes its copy without committing, and so does the
 * writer closing a dup while it holds another descriptor of the file (the shell's `exec 3>f`,
 * `cmd >&3`, `exec 3>&-`, and its `>`: open, dup2 onto 1, close). A writer that closes its
 * last descriptor without having written a byte itself while its children hold the file
 * (subprocess.Popen with stdout=open(...): the child may have written already) leaves the
 * commit to the last close (release). */
static enum flush_rule flush_rule(struct wfile *w, pid_t pid)
{
	pid_t tgid = pid == w->owner ? pid : fs_proc_tgid(pid);
	int held;

	if (w->owner <= 0 || tgid < 0)
		return FLUSH_BYTES;
	if (tgid != w->owner)
		return FLUSH_KEEP;
	held = fs_proc_holds(tgid, w->ino, w->path);
	if (held < 0) /* unreadable, or too many descriptors to read (-E2BIG, a large JVM) */
		return FLUSH_BYTES;
	if (held == 0 && !__atomic_load_n(&w->owner_wrote, __ATOMIC_RELAXED))
		held = fs_proc_children_hold(tgid, w->ino, w->path) == 1;
	return held ? FLUSH_KEEP : FLUSH_COMMIT;
}

void wfile_flush(fuse_req_t req, struct wfile *w, pid_t pid)
{
	enum flush_rule rule = flush_rule(w, pid);

	if (rule == FLUSH_KEEP) {
		pthread_mutex_lock(&w->m->wpool->lock);
		w->m->wpool->st.flushes_kept++;
		pthread_mutex_unlock(&w->m->wpool->lock);
		fuse_reply_err(req, 0);
		return;
	}
	commit_req(req, w, rule == FLUSH_BYTES);
}

void wfile_release(struct wfile *w)
{
	commit_req(NULL, w, false); /* the last close (a child's, a killed writer's): commit */
	wfile_put(w);
}

uint64_t wfile_size(struct wfile *w)
{
	uint64_t n;

	pthread_mutex_lock(&w->lock);
	n = w->size;
	pthread_mutex_unlock(&w->lock);
	return n;
}
