/*
 * tracewr.c - writing a trace: a lock-free ring the readers' threads push into, and one thread
 * that drains it into the file, rotating the file when it is full.
 *
 *   reply threads ──trace_push──►  ring: cells[cap], each {seq, struct trace_read}
 *   (FUSE workers,                  enq (atomic, producers)   deq (the drainer's alone)
 *    the I/O thread)                         │
 *                                            ▼ every flush_ms, and at close
 *                                  drain: object table ─► 'O' record the first time an object
 *                                         version is seen in this file, 'R' record per read
 *                                            │  buf (1 MiB), write(2) once half full, once its
 *                                            │  oldest byte waited about a second, and at close
 *                                            ▼
 *                                  FILE ── full (max_size) ──► FILE.keep .. FILE.2 ◄─ FILE.1
 *                                          rotate: each moves one up, the last is deleted, a
 *                                          new FILE starts with the next part and an empty table
 *
 * The ring is Vyukov's bounded queue: a cell is free for the producer whose ticket (enq) equals
 * its seq; it claims it by moving enq on with a compare-and-swap, copies the read in and
 * publishes it by setting seq to ticket + 1, which the drainer waits for. A full ring drops the
 * read and counts it: a reader never waits for the disk, and never takes a lock. The drainer
 * never blocks producers either: it frees a cell by setting seq to its ticket + cap.
 *
 * Safety of the file. The trace is created 0600 with O_EXCL and O_NOFOLLOW, so it is never
 * someone else's file and never where a link points; a file already at its path is moved away
 * (rotated) only if it starts with the trace magic, and a rotated name that holds anything
 * else stops the rotation (the trace stops, with -EEXIST in its stats), so no other file is
 * ever renamed or deleted.
 *
 * Locking: producers touch only enq (atomic) and the cells they claim. w->drain_lock is held
 * by whoever drains (the thread, or trace_writer_flush) and guards deq, the file, the buffer
 * and the object table. w->lock and w->cond only wake the thread for its end. Counters are
 * relaxed atomics.
 *
 * Workload: a few hundred to tens of thousands of reads a second per mount; each push is a
 * compare-and-swap and a 64-byte copy, each drain a few hundred records.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trace.h"
#include "trace_i.h"

#define RING_DEFAULT   16384
#define FLUSH_DEFAULT  50 /* ms */
#define BUF_LEN	       (1024u * 1024)
#define WRITE_AT       (BUF_LEN / 2) /* a drain writes the buffer once it holds this much, */
#define WRITE_AFTER_MS 1000	     /* or once its oldest byte has waited this long */

struct cell {
	uint64_t seq; /* atomic: ticket + 1 once published; ticket + cap once drained */
	struct trace_read r;
};

/* The objects already described in the current file: (object, its record's index). */
struct objtab {
	struct trace_objrec *o; /* open addressing; size 0 marks an empty slot, size + 1 stored */
	uint32_t *ref;
	uint32_t cap; /* a power of two */
	uint32_t n;
};

struct trace_writer {
	struct trace_wcfg cfg; /* as given; path copied */
	char *path;
	struct trace_hdr hdr; /* of the current file; drain_lock */
	struct cell *cells;   /* cfg.ring of them */
	uint64_t mask;	      /* cfg.ring - 1 */
	uint64_t enq;	      /* next ticket; atomic */
	uint64_t deq;	      /* next ticket to drain; drain_lock */

	pthread_mutex_t drain_lock;
	int fd;		   /* the current file, -1 once the trace failed; drain_lock */
	uint64_t size;	   /* its bytes; drain_lock */
	uint8_t *buf;	   /* encoded, not yet written; drain_lock */
	size_t used;	   /* drain_lock */
	unsigned held;	   /* drains the buffer has been held through unwritten; drain_lock */
	struct objtab tab; /* drain_lock */

	pthread_mutex_t lock; /* guards stop; with cond, wakes the thread */
	pthread_cond_t cond;
	bool stop;
	bool started; /* the thread runs (only the opener's thread reads it) */
	pthread_t thread;

	uint64_t records, dropped, bytes, rotations; /* atomic */
	int error;				     /* drain_lock */
};

#define ADD(w, f, v) __atomic_fetch_add(&(w)->f, (v), __ATOMIC_RELAXED)

/* ---- the object table ----------------------------------------------------------------------- */

static uint32_t obj_slot(const struct objtab *t, const struct trace_objrec *o)
{
	uint64_t h = (o->obj ^ o->ver * 0x9e3779b97f4a7c15ULL ^ o->size) * 0xbf58476d1ce4e5b9ULL;

	return (uint32_t)(h >> 32) & (t->cap - 1);
}

static bool obj_same(const struct trace_objrec *a, const struct trace_objrec *b)
{
	return a->obj == b->obj && a->ver == b->ver && a->size == b->size && a->mtime == b->mtime;
}

static int obj_grow(struct objtab *t)
{
	struct objtab g = {.cap = t->cap ? 2 * t->cap : 1024};

	g.o = calloc(g.cap, sizeof(*g.o));
	g.ref = calloc(g.cap, sizeof(*g.ref));
	if (!g.o || !g.ref) {
		free(g.o);
		free(g.ref);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < t->cap; i++) {
		if (!t->o[i].size)
			continue;
		uint32_t s = obj_slot(&g, &t->o[i]);

		while (g.o[s].size)
			s = (s + 1) & (g.cap - 1);
		g.o[s] = t->o[i];
		g.ref[s] = t->ref[i];
	}
	g.n = t->n;
	free(t->o);
	free(t->ref);
	*t = g;
	return 0;
}

/* The index of @o's record in the current file; *ret_new when it must be written now.
 * @return 0 or -ENOMEM. */
static int obj_ref(struct objtab *t, const struct trace_objrec *o, uint32_t *ret, bool *ret_new)
{
	struct trace_objrec k = *o;
	uint32_t s;

	k.size++; /* 0 marks an empty slot */
	if ((t->n + 1) * 2 > t->cap && obj_grow(t) < 0)
		return -ENOMEM;
	for (s = obj_slot(t, &k); t->o[s].size; s = (s + 1) & (t->cap - 1)) {
		if (obj_same(&t->o[s], &k)) {
			*ret = t->ref[s];
			*ret_new = false;
			return 0;
		}
	}
	t->o[s] = k;
	t->ref[s] = t->n;
	*ret = t->n++;
	*ret_new = true;
	return 0;
}

static void obj_clear(struct objtab *t)
{
	if (t->cap)
		memset(t->o, 0, t->cap * sizeof(*t->o));
	t->n = 0;
}

/* ---- the file ------------------------------------------------------------------------------- */

/* Does @path hold a trace (a regular file whose first bytes are the magic)? Links are not
 * followed, and a FIFO put there does not block the open. */
static bool is_trace(const char *path)
{
	char magic[8];
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	bool yes;

	if (fd < 0)
		return false;
	yes = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	      read(fd, magic, sizeof(magic)) == (ssize_t)sizeof(magic) &&
	      memcmp(magic, TRACE_MAGIC, sizeof(magic)) == 0;
	close(fd);
	return yes;
}

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* Move path.k to path.k+1 for k = keep-1 .. 1, path to path.1, and delete what falls off.
 * Only traces are moved or deleted. @return 0 or -errno (-EEXIST: something else is there). */
static int rotate_names(const struct trace_writer *w)
{
	size_t n = strlen(w->path) + 16;
	char from[n], to[n];

	snprintf(to, n, "%s.%u", w->path, w->cfg.keep);
	if (w->cfg.keep && exists(to) && (!is_trace(to) || unlink(to) < 0))
		return -EEXIST;
	for (unsigned k = w->cfg.keep; k > 1; k--) {
		snprintf(from, n, "%s.%u", w->path, k - 1);
		snprintf(to, n, "%s.%u", w->path, k);
		if (exists(from) && (!is_trace(from) || rename(from, to) < 0))
			return -EEXIST;
	}
	if (!exists(w->path))
		return 0;
	if (!is_trace(w->path))
		return -EEXIST;
	if (!w->cfg.keep)
		return unlink(w->path) < 0 ? -errno : 0;
	snprintf(to, n, "%s.1", w->path);
	return rename(w->path, to) < 0 ? -errno : 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Create a new file at w->path with header part w->hdr.part (drain_lock held, or opening).
 * @return 0 or -errno. */
static int new_file(struct trace_writer *w)
{
	uint8_t h[TRACE_HDR_LEN];
	int r = rotate_names(w);

	if (r < 0)
		return r;
	w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (w->fd < 0)
		return -errno;
	trace_put_hdr(h, &w->hdr);
	r = write_all(w->fd, h, sizeof(h));
	w->size = sizeof(h);
	ADD(w, bytes, sizeof(h));
	obj_clear(&w->tab);
	return r;
}

/* Write the buffer out (drain_lock held). A failure stops the trace. */
static int put_buf(struct trace_writer *w)
{
	int r = w->fd >= 0 ? write_all(w->fd, w->buf, w->used) : -EBADF;

	if (r == 0) {
		w->size += w->used;
		ADD(w, bytes, w->used);
	}
	w->used = 0;
	w->held = 0;
	return r;
}

/* Mark the current file complete: its header's flags byte, written last, once every record
 * is (drain_lock held, or closing). A reader of a file without it knows it reads a trace
 * its mount is still writing, or one whose mount died. */
static int mark_complete(struct trace_writer *w)
{
	const uint8_t f = TRACE_HDR_COMPLETE;

	if (w->fd < 0)
		return -EBADF;
	return pwrite(w->fd, &f, 1, TRACE_HDR_FLAGS) == 1 ? 0 : -errno;
}

/* The file is full: write what is buffered, start the next part (drain_lock held). */
static int rotate(struct trace_writer *w)
{
	int r = put_buf(w);

	if (r == 0)
		r = mark_complete(w);
	close(w->fd);
	w->fd = -1;
	if (r < 0)
		return r;
	w->hdr.part++;
	ADD(w, rotations, 1);
	return new_file(w);
}

/* ---- draining ------------------------------------------------------------------------------- */

/* Stop the trace for good after @err (drain_lock held). */
static void fail(struct trace_writer *w, int err)
{
	if (!w->error)
		w->error = err;
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
}

/* Encode @r into the buffer, its object first if the file has not described it (drain_lock
 * held). @return 0 or -errno. */
static int encode(struct trace_writer *w, const struct trace_read *r)
{
	struct trace_objrec o = {r->obj, r->ver, r->size, r->mtime};
	uint32_t ref;
	bool fresh;
	int e;

	if (w->used + TRACE_OBJ_LEN + TRACE_READ_LEN > BUF_LEN && (e = put_buf(w)) < 0)
		return e;
	if (w->size + w->used + TRACE_OBJ_LEN + TRACE_READ_LEN > w->cfg.max_size &&
	    (e = rotate(w)) < 0)
		return e;
	if ((e = obj_ref(&w->tab, &o, &ref, &fresh)) < 0)
		return e;
	if (fresh) {
		trace_put_obj(w->buf + w->used, &o);
		w->used += TRACE_OBJ_LEN;
	}
	trace_put_read(w->buf + w->used, r, ref);
	w->used += TRACE_READ_LEN;
	return 0;
}

/*
 * Drain the ring into the buffer; write the buffer out if @all, or once it is half full, or
 * once it has been held through a second's drains. With a write(2) per drain (20 a second),
 * 4 KiB random reads of a cached object ran at 0.87x-0.96x of an untraced mount's rate
 * (bench/trace_ab.py), and the first experiments pointed at the writes; a later profile with
 * the mounts pinned found most of the trace's own cost in per-read hashes instead (fs/trace.c
 * now makes them once; docs/performance.md). Fewer, larger writes leave a
 * live trace up to about a second (or half a MiB) behind, and a mount that dies loses that
 * much more of its trace's tail.
 */
static int drain(struct trace_writer *w, bool all)
{
	int r = 0;

	pthread_mutex_lock(&w->drain_lock);
	for (;;) {
		struct cell *c = &w->cells[w->deq & w->mask];

		if (__atomic_load_n(&c->seq, __ATOMIC_ACQUIRE) != w->deq + 1)
			break; /* empty, or the next cell is still being filled */
		if (w->fd >= 0 && (r = encode(w, &c->r)) < 0)
			fail(w, r);
		if (w->fd >= 0)
			ADD(w, records, 1);
		else
			ADD(w, dropped, 1);
		__atomic_store_n(&c->seq, w->deq + w->mask + 1, __ATOMIC_RELEASE);
		w->deq++;
	}
	if (w->fd >= 0 && w->used &&
	    (all || w->used >= WRITE_AT || ++w->held * w->cfg.flush_ms >= WRITE_AFTER_MS) &&
	    (r = put_buf(w)) < 0)
		fail(w, r);
	r = w->error;
	pthread_mutex_unlock(&w->drain_lock);
	return r;
}

int trace_writer_flush(struct trace_writer *w)
{
	return drain(w, true);
}

int trace_writer_drain(struct trace_writer *w)
{
	return drain(w, false);
}

bool trace_push(struct trace_writer *w, const struct trace_read *r)
{
	uint64_t pos = __atomic_load_n(&w->enq, __ATOMIC_RELAXED);

	for (;;) {
		struct cell *c = &w->cells[pos & w->mask];
		int64_t dif = (int64_t)(__atomic_load_n(&c->seq, __ATOMIC_ACQUIRE) - pos);

		if (dif == 0) {
			if (__atomic_compare_exchange_n(&w->enq, &pos, pos + 1, true,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
				c->r = *r;
				__atomic_store_n(&c->seq, pos + 1, __ATOMIC_RELEASE);
				return true;
			}
		} else if (dif < 0) {
			ADD(w, dropped, 1); /* full */
			return false;
		} else {
			pos = __atomic_load_n(&w->enq, __ATOMIC_RELAXED);
		}
	}
}

static void *drainer(void *arg)
{
	struct trace_writer *w = arg;
	bool stop = false;

	while (!stop) {
		struct timespec ts;

		drain(w, false);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)w->cfg.flush_ms * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_mutex_lock(&w->lock);
		if (!w->stop)
			pthread_cond_timedwait(&w->cond, &w->lock, &ts);
		stop = w->stop;
		pthread_mutex_unlock(&w->lock);
	}
	return NULL;
}

/* ---- life ----------------------------------------------------------------------------------- */

static int check_cfg(const struct trace_wcfg *cfg)
{
	unsigned ring = cfg->ring ? cfg->ring : RING_DEFAULT;

	if (!cfg->path || !cfg->path[0] || (ring & (ring - 1)) || ring < 2)
		return -EINVAL;
	if (cfg->max_size < TRACE_HDR_LEN + 16 * (TRACE_OBJ_LEN + TRACE_READ_LEN))
		return -EINVAL;
	return 0;
}

/* A random trace id and, unless given, salt. @return 0 or -errno. */
static int pick_ids(struct trace_writer *w, const uint8_t *salt)
{
	uint8_t rnd[8 + TRACE_SALT_LEN];

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return -EIO;
	memcpy(&w->hdr.id, rnd, 8);
	memcpy(w->hdr.salt, salt ? salt : rnd + 8, TRACE_SALT_LEN);
	return 0;
}

int trace_writer_open(const struct trace_wcfg *cfg, struct trace_writer **ret)
{
	struct trace_writer *w;
	int r = check_cfg(cfg);

	if (r < 0)
		return r;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->cfg = *cfg;
	w->cfg.ring = cfg->ring ? cfg->ring : RING_DEFAULT;
	w->cfg.flush_ms = cfg->flush_ms ? cfg->flush_ms : FLUSH_DEFAULT;
	w->fd = -1;
	w->mask = w->cfg.ring - 1;
	pthread_mutex_init(&w->drain_lock, NULL);
	pthread_mutex_init(&w->lock, NULL);
	{
		/* the drainer's naps: a wall clock stepped back is no delay */
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&w->cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	w->path = strdup(cfg->path);
	w->cells = calloc(w->cfg.ring, sizeof(*w->cells));
	w->buf = malloc(BUF_LEN);
	if (!w->path || !w->cells || !w->buf) {
		r = -ENOMEM;
		goto fail;
	}
	for (uint64_t i = 0; i <= w->mask; i++)
		w->cells[i].seq = i;
	w->hdr.block_size = cfg->block_size;
	w->hdr.start_wall_ns = cfg->start_wall_ns;
	if ((r = pick_ids(w, cfg->salt)) < 0 || (r = new_file(w)) < 0)
		goto fail;
	*ret = w;
	return 0;
fail:
	trace_writer_close(w);
	return r;
}

int trace_writer_start(struct trace_writer *w)
{
	int r = pthread_create(&w->thread, NULL, drainer, w);

	if (r != 0)
		return -r;
	w->started = true;
	return 0;
}

const uint8_t *trace_writer_salt(const struct trace_writer *w)
{
	return w->hdr.salt;
}

void trace_writer_stats(struct trace_writer *w, struct trace_wstats *ret)
{
	ret->records = __atomic_load_n(&w->records, __ATOMIC_RELAXED);
	ret->dropped = __atomic_load_n(&w->dropped, __ATOMIC_RELAXED);
	ret->bytes = __atomic_load_n(&w->bytes, __ATOMIC_RELAXED);
	ret->rotations = __atomic_load_n(&w->rotations, __ATOMIC_RELAXED);
	pthread_mutex_lock(&w->drain_lock);
	ret->error = w->error;
	pthread_mutex_unlock(&w->drain_lock);
}

void trace_writer_close(struct trace_writer *w)
{
	if (!w)
		return;
	if (w->started) {
		pthread_mutex_lock(&w->lock);
		w->stop = true;
		pthread_cond_signal(&w->cond);
		pthread_mutex_unlock(&w->lock);
		pthread_join(w->thread, NULL);
	}
	if (w->cells && w->buf)
		trace_writer_flush(w);
	if (w->fd >= 0 && !w->error)
		mark_complete(w);
	if (w->fd >= 0)
		close(w->fd);
	pthread_mutex_destroy(&w->drain_lock);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	free(w->tab.o);
	free(w->tab.ref);
	free(w->cells);
	free(w->buf);
	free(w->path);
	free(w);
}
