/*
 * trace.c - the mount's side of the read trace (trace=FILE): every read it answers becomes
 * one record, handed to the trace's writer (trace/), which writes it from a thread of its own.
 *
 *   op_read: start_ns ─► cache_read ─► ... ─► reply_read_logged ─► fs_trace_read ─► trace_push
 *                                       (inside the cache's reply: cache_reply_served says
 *                                        which tier served it, and what was fetched for it)
 *
 *   fs_main: fs_trace_open (the file, before mounting: a bad path fails the mount with one
 *            line) ─► daemonize ─► fs_trace_start (the writer's thread: a fork keeps only its
 *            caller's) ─► serve ─► teardown: fs_trace_close (after every reply is out)
 *
 * The record names the object by salted hashes only (trace.h): of its key, of its version's
 * id (the cache's oid, which names the version whichever the store), and of the file handle
 * it was read through (so a replay keeps each reader's readahead stream apart; a handle's
 * address may be reused by the next open, so its first read is flagged: a new stream). The salt is
 * random per trace, or the first 16 bytes of trace_salt=FILE, so that the traces of a
 * fleet's mounts name one object alike and a replay of them shares it in the fleet's tier.
 *
 * Cost on the reader's path: a clock reading and a push into a lock-free ring, only on a
 * mount with trace= (the others test one pointer). The hashes are made once: of the key and
 * version at a version's first traced read (kept in its fobj, which the read holds), of the
 * handle at the handle's (kept in its fh, and taken when the read comes: once the reply is
 * out, the kernel may release the handle), and the tier's code is looked up by name once per
 * tier. Each is one value for as long as it is kept, so threads that race to make it store
 * the same one. Made at every read, they were most of the trace's cost (docs/performance.md).
 *
 * Locking: none of its own; the writer's ring takes pushes from any thread. Workload: one
 * call per read answered.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs_i.h"
#include "trace.h"

#define CODE_AT_MAX 16

struct fs_trace {
	struct trace_writer *w;
	uint8_t salt[TRACE_SALT_LEN]; /* constant: the writer's */
	uint64_t start_mono;	      /* CLOCK_MONOTONIC at the start; t_ns counts from it */
	uint8_t code_at[CODE_AT_MAX]; /* trace tier code + 1 of cache_served.at, 0 not yet known;
				       * atomic (each is one value for the mount's life) */
};

static uint64_t wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The first TRACE_SALT_LEN bytes of @path into @ret. @return 0 or -errno, with a line. */
static int read_salt(const char *path, uint8_t *ret)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, ret, TRACE_SALT_LEN);
	int r = n == TRACE_SALT_LEN ? 0 : n < 0 ? -errno : -EINVAL;

	if (fd >= 0)
		close(fd);
	if (r < 0)
		fprintf(stderr, "tierfs: trace_salt=%s: %s\n", path,
			r == -EINVAL ? "needs at least 16 bytes" : strerror(-r));
	return r;
}

int fs_trace_open(struct mount *m)
{
	const struct fs_opts *o = m->o;
	struct fs_trace *t = calloc(1, sizeof(*t));
	uint8_t salt[TRACE_SALT_LEN];
	struct trace_wcfg wc = {
	    .path = o->trace,
	    .max_size = o->trace_size,
	    .keep = (unsigned)o->trace_files,
	    .block_size = (uint32_t)o->block_size,
	    .start_wall_ns = wall_ns(),
	};
	int r;

	if (!t)
		return -ENOMEM;
	if (o->trace_salt && (r = read_salt(o->trace_salt, salt)) < 0)
		goto fail;
	wc.salt = o->trace_salt ? salt : NULL;
	t->start_mono = fs_now_ns();
	r = trace_writer_open(&wc, &t->w);
	if (r < 0) {
		fprintf(stderr, "tierfs: trace=%s: %s\n", o->trace,
			r == -EEXIST ? "something that is not a tierfs trace is there"
				     : strerror(-r));
		goto fail;
	}
	memcpy(t->salt, trace_writer_salt(t->w), TRACE_SALT_LEN);
	m->trace = t;
	return 0;
fail:
	free(t);
	return r;
}

int fs_trace_start(struct mount *m)
{
	int r = m->trace ? trace_writer_start(m->trace->w) : 0;

	if (r < 0)
		fuse_log(FUSE_LOG_ERR, "tierfs: cannot start the trace's writer: %s\n",
			 strerror(-r));
	return r;
}

/* The trace's code of the tier that served @sv. */
static uint8_t tier_code(struct fs_trace *t, const struct cache_served *sv)
{
	uint8_t c;

	if (!sv)
		return TRACE_NONE;
	if (sv->at >= CODE_AT_MAX)
		return trace_tier_code(sv->from);
	c = __atomic_load_n(&t->code_at[sv->at], __ATOMIC_RELAXED);
	if (c)
		return (uint8_t)(c - 1);
	c = trace_tier_code(sv->from);
	__atomic_store_n(&t->code_at[sv->at], (uint8_t)(c + 1), __ATOMIC_RELAXED);
	return c;
}

uint32_t fs_trace_stream(struct mount *m, struct fh *fh)
{
	uint32_t stream = __atomic_load_n(&fh->trace_stream, __ATOMIC_RELAXED);

	if (!stream) {
		stream = (uint32_t)trace_hash(m->trace->salt, &fh, sizeof(fh));
		__atomic_store_n(&fh->trace_stream, stream, __ATOMIC_RELAXED);
	}
	return stream;
}

void fs_trace_read(struct mount *m, struct fobj *o, uint32_t stream, uint64_t off, size_t len,
		   uint64_t t0, bool first, int err)
{
	struct fs_trace *t = m->trace;
	const struct cache_served *sv = cache_reply_served();
	uint64_t now = fs_now_ns(), lat = (now - t0) / 1000;
	uint64_t obj = __atomic_load_n(&o->trace_obj, __ATOMIC_ACQUIRE);
	uint32_t ver;

	if (obj) {
		ver = __atomic_load_n(&o->trace_ver, __ATOMIC_RELAXED);
	} else {
		obj = trace_hash(t->salt, o->path, strlen(o->path));
		ver = (uint32_t)trace_hash(t->salt, &o->id, sizeof(o->id));
		__atomic_store_n(&o->trace_ver, ver, __ATOMIC_RELAXED);
		__atomic_store_n(&o->trace_obj, obj, __ATOMIC_RELEASE);
	}
	struct trace_read r = {
	    .t_ns = t0 - t->start_mono,
	    .obj = obj,
	    .ver = ver,
	    .stream = stream,
	    .off = off,
	    .len = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len,
	    .lat_us = lat > TRACE_LAT_MAX ? TRACE_LAT_MAX : (uint32_t)lat,
	    .size = o->size,
	    .mtime = o->mtime,
	    .fetched = !sv			     ? 0
		       : sv->fetched > TRACE_LAT_MAX ? TRACE_LAT_MAX
						     : (uint32_t)sv->fetched,
	    .tier = tier_code(t, sv),
	    .flags = (err ? TRACE_F_ERROR : 0) | (first ? TRACE_F_OPEN : 0),
	};

	trace_push(t->w, &r);
}

void fs_trace_stats(struct mount *m, uint64_t *ret_records, uint64_t *ret_dropped)
{
	struct trace_wstats ws = {0};

	if (m->trace)
		trace_writer_stats(m->trace->w, &ws);
	*ret_records = ws.records;
	*ret_dropped = ws.dropped;
}

void fs_trace_close(struct mount *m)
{
	struct trace_wstats ws;
	int r;

	if (!m->trace)
		return;
	r = trace_writer_flush(m->trace->w);
	trace_writer_stats(m->trace->w, &ws);
	if (r < 0)
		fuse_log(FUSE_LOG_ERR, "tierfs: trace=%s stopped: %s\n", m->o->trace, strerror(-r));
	fuse_log(FUSE_LOG_INFO, "tierfs: trace=%s: %llu reads recorded, %llu dropped\n",
		 m->o->trace, (unsigned long long)ws.records, (unsigned long long)ws.dropped);
	trace_writer_close(m->trace->w);
	free(m->trace);
	m->trace = NULL;
}
