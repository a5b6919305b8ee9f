/*
 * ops.c - the FUSE low-level operations (the mount's setup and teardown are in mount.c).
 *
 *   kernel ─► fuse worker ─► op_read ─► cache_read ──hit──► reply_read (same thread)
 *                                          └─miss─► parked; the backend's I/O thread
 *                                                   completes the fetch ─► reply_read
 *   kernel ─► fuse worker ─► op_lookup / op_open / op_opendir ─► ns_*_async ──held──► reply
 *                                          └─needs the store─► parked; the I/O thread replies
 *
 * Changing the store (create, write, unlink, mkdir, rmdir, rename) is change.c's and write.c's:
 * a mount without allow_write, allow_overwrite and allow_delete is read-only in the kernel,
 * and the operator steers it through the control socket (ctlsock.c). mknod, symlink, link
 * and removexattr answer EROFS (EPERM on a writable mount): objects have none of them;
 * setxattr on a file answers ENOTSUP on a writable mount (control.c).
 *
 * Page cache: a file opened as hot keeps the kernel's page cache across opens while its
 * version is unchanged (keep_cache). A file opened as lagging goes through the page cache too
 * (so MAP_SHARED works: kernel 6.18 refuses shared maps of direct_io files, and libfuse 3.14
 * cannot ask for FUSE_DIRECT_IO_ALLOW_MMAP), but a replay must not fill the kernel with pages
 * that push out the tail's. So its pages are dropped behind the reader:
 *
 *     file  |.......[=========== seen ===========]..........|
 *                    ^ seen_lo            off ^   ^ off+size
 *     once seen spans more than 3 x DROP_KEEP:  [dropped      ][ kept: DROP_KEEP either side ]
 *
 * each handle records the range it has read (seen_lo..seen_hi); when it grows past
 * 3 x DROP_KEEP, everything further than DROP_KEEP from the newest read is invalidated
 * (fuse_lowlevel_notify_inval_inode), and at release the rest. DROP_KEEP covers the kernel's
 * readahead (at most two 1 MiB windows ahead of the reader), so pages are not dropped before
 * they are used. The kernel may wait, inside the notification, for pages whose reads tierfs has
 * not answered yet, so notifications run on a thread of their own (inval_thread), never in a
 * FUSE worker or the I/O thread. A lagging open also drops what earlier opens left (no
 * keep_cache). lagging_page_cache turns dropping off: lagging pages then stay like hot ones.
 * An inode never serves two versions to files open at once (ns.c): a changed object gets a
 * new inode, so files open on the old one keep a consistent old view.
 *
 * Moving to a new version: a read that finds the object changed (-ESTALE from the store) on a
 * file that has served nothing yet, opened with the page cache dropped and alone on its inode,
 * is not failed: a helper thread asks the store for the new version (ns_move), makes it the
 * file's, has the kernel forget the inode's attributes (so the new size is seen) and reads
 * again. While it works (fh->moving) no other read of that file is answered from the old
 * version: those replies are turned into the same retry.
 *
 * Errors after mounting reach the reader as an errno and are logged once per object and cause
 * per minute (fs_log_once), with a bound on all lines together.
 *
 * Interrupts. A reader killed while its read waits (for the limiter, a slow store) must go
 * at once, but a reader that merely caught a signal must get its bytes, never EINTR from a
 * regular file. The kernel sends FUSE_INTERRUPT once per request, at the first signal; a
 * SIGKILL after that sends nothing. So an interrupted read whose reader is not dying is
 * watched: while any are, a timer on the I/O thread looks every WATCH_PERIOD at their
 * readers and cancels (EINTR) the read of one that is dying or gone. Watches are keyed by
 * the cache's ticket, never by the request, which may be answered and freed meanwhile; the
 * answer removes its watch, after fuse_req_interrupt_func(NULL) has fenced off a callback
 * still running.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "fs_fuse.h"
#include "metrics.h"

#define DROP_KEEP   (4u << 20) /* lagging pages kept either side of the newest read */
#define MAX_BACKGROUND 1024    /* outstanding readahead requests the kernel may send */
#define WATCH_PERIOD_NS (200 * 1000000ULL) /* how often interrupted readers are looked at */
#define CTL_GRACE_NS (50 * 1000000ULL) /* the control directory's name waits for the root's
					  * first listing until the mount is this old, at most */

static struct mount *M(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static struct cache_obj cobj(const struct fobj *o)
{
	return (struct cache_obj){.id = o->id, .size = o->size, .mtime = o->mtime, .ctx = (void *)o};
}

/*
 * A read answered with an error. The store's failures were logged by the backend already,
 * with what a reader's errno cannot say (the URL, the status, the two ETags), once per object
 * and cause: a second line here would double each. Only what the backends leave unlogged
 * (ENOENT: an object that went away, which for a lookup is no failure) and failures of
 * tierfs itself (ENOMEM, EINVAL) are logged here.
 */
static void log_read_error(struct mount *m, const struct fobj *o, int err)
{
	if (err != -ENOENT && err != -ENOMEM && err != -EINVAL)
		return;
	fs_log_once(&m->log, FUSE_LOG_ERR, o->path, strerror(-err), "read %s: %s", o->path,
		    strerror(-err));
}

/* ---- operations ------------------------------------------------------------------------------ */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	/* Let the kernel send 1 MiB reads: max_write also sets max_pages (libfuse derives it),
	 * which bounds reads too; the bdi read_ahead_kb is raised after mounting. */
	conn->max_write = FS_MAX_REQUEST;
	conn->max_readahead = FS_MAX_REQUEST;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	/* Readahead through the page cache is sent as background requests, of which the kernel
	 * lets only max_background (12 by default) be outstanding; the rest wait in its queue,
	 * and above congestion_threshold it stops reading ahead. Lagging readahead parked behind
	 * the limiter would fill those slots and leave the tail's readahead queued behind it, so
	 * allow far more than the cache ever parks (the kernel caps it for non-root mounts). */
	conn->max_background = MAX_BACKGROUND;
	conn->congestion_threshold = MAX_BACKGROUND * 3 / 4;
	/* An O_DIRECT read of a file that uses the page cache (every object file: lagging ones
	 * too, for MAP_SHARED) is sent, with async DIO, as background requests that the reader
	 * waits for uninterruptibly: a reader parked behind the limiter could not be killed, and
	 * no FUSE_INTERRUPT would ever reach us. Without it, each piece is a request of the
	 * reader's own, which the kernel interrupts and tierfs cancels when the reader dies. */
	conn->want &= ~FUSE_CAP_ASYNC_DIO;
	/* Without it the kernel sends one lookup or readdir per directory at a time, holding a
	 * mutex of the directory that no signal frees, so a lookup parked on the store would hold
	 * back every other lookup and `ls` in its directory (.tierfs included). libfuse 3.14.0
	 * drops the flag from its reply: device.c adds it. */
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
}

/* The answer to a lookup, in the worker or later on the I/O thread. One from metadata past
 * metadata_ttl (@stale: its refresh is out) is not kept by the kernel, so the next use asks
 * again and gets the refresh's answer, instead of the stale one for another metadata_ttl. */
static void reply_entry(void *arg, int r, const struct stat *st, bool stale)
{
	fuse_req_t req = arg;
	struct mount *m = M(req);
	struct fuse_entry_param e = {0};

	if (r == -ENOENT) {
		/* No negative entry in the kernel: the namespace already believes the store's
		 * "missing" for negative_ttl from when the store said it, and a kernel entry of
		 * its own would add up to another negative_ttl before a new object shows (a
		 * repeated lookup of a missing name costs a round trip to tierfs, no store call). */
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (r < 0) {
		fuse_reply_err(req, fs_reply_errno(r));
		return;
	}
	e.attr = *st;
	e.ino = e.attr.st_ino;
	e.attr_timeout = stale ? 0 : fs_ttl(m);
	e.entry_timeout = stale ? 0 : fs_ttl(m);
	fuse_reply_entry(req, &e);
}

/* An entry the kernel must look up again at its next use (the control directory before the
 * root's first listing). */
static void reply_entry_uncached(fuse_req_t req, const struct stat *st)
{
	struct fuse_entry_param e = {0};

	e.attr = *st;
	e.ino = e.attr.st_ino;
	fuse_reply_entry(req, &e);
}

/* Answer a lookup of the control directory's name in the root: a real object of that name
 * wins when the root's listing names it; before the root's first listing, the control
 * directory, for this lookup only. */
static void reply_ctl_dir(fuse_req_t req)
{
	struct mount *m = M(req);
	int listed = ns_listed(m->ns, 1, m->o->control_dir);
	struct stat st;
	int r;

	if (listed == 1) {
		ns_lookup_async(m->ns, 1, m->o->control_dir, reply_entry, req);
		return;
	}
	r = ctl_lookup(m, 1, m->o->control_dir, &st);
	if (r == 0 && listed == -EAGAIN)
		reply_entry_uncached(req, &st);
	else
		reply_entry(req, r, r == 0 ? &st : NULL, false);
}

static void ctl_grace_done(void *arg)
{
	reply_ctl_dir(arg);
}

/* How much longer a lookup of the control directory's name may wait for the root's first
 * listing: what is left of CTL_GRACE_NS since the mount started it, 0 once it is over. */
static uint64_t ctl_grace_left(const struct mount *m)
{
	uint64_t now = fs_now_ns(), end = m->mounted_ns + CTL_GRACE_NS;

	return now < end ? end - now : 0;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mount *m = M(req);
	struct stat st;

	if (strlen(name) > NAME_MAX) {
		/* statfs says namelen 255: every operation on a name goes through here first */
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	/* The control directory and its files never wait for the store: a real object of the
	 * same name wins if the root's listing held (whatever its age) names it. Before the
	 * root's first listing (started at mount) a lookup in the mount's first CTL_GRACE_NS
	 * waits for it until then, so that a mount whose store answers at once shows a real
	 * object of the name from the start; any later one answers at once, with the control
	 * directory, without the kernel keeping the entry (a real object of its name wins once
	 * the listing is there). A store that hangs from the start held every such lookup for
	 * `timeout` x attempts, and then CTL_GRACE_NS each. */
	if (parent == 1 && strcmp(name, m->o->control_dir) == 0) {
		int listed = ns_listed(m->ns, 1, name);
		uint64_t left = listed == -EAGAIN ? ctl_grace_left(m) : 0;

		if (left && backend_defer(m->b, left, ctl_grace_done, req) == 0)
			return;
		reply_ctl_dir(req);
		return;
	}
	if (parent == CTL_DIR_INO) {
		int r = ctl_lookup(m, parent, name, &st);

		reply_entry(req, r, r == 0 ? &st : NULL, false);
		return;
	}
	/* answered here when ns holds the answer, else parked until the store's */
	ns_lookup_async(m->ns, parent, name, reply_entry, req);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	ns_forget(M(req)->ns, ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		ns_forget(M(req)->ns, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int r = ctl_is(ino) ? ctl_getattr(M(req), ino, &st) : ns_getattr(M(req)->ns, ino, &st);

	if (r < 0)
		fuse_reply_err(req, fs_reply_errno(r));
	else
		fuse_reply_attr(req, &st, fs_ttl(M(req)));
}


/* A control file: its text is taken now and served from memory, bypassing the page cache. */
static void open_control(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fh *fh = fs_fh_new();
	int r;

	if (!fh) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	r = ctl_read_all(M(req), ino, &fh->text, &fh->text_len);
	if (r < 0) {
		fs_fh_free_untracked(fh);
		fuse_reply_err(req, fs_reply_errno(r));
		return;
	}
	fi->direct_io = 1;
	fi->fh = (uint64_t)(uintptr_t)fh;
	fs_fh_track(M(req), fh);
	if (fuse_reply_open(req, fi) == -ENOENT)
		fs_fh_free(M(req), fh);
}

/* An open waiting for ns_open_async: the request and a copy of its file info. */
struct open_req {
	fuse_req_t req;
	fuse_ino_t ino;
	struct fuse_file_info fi;
};

static void open_done(void *arg, int r, struct fobj *o, bool same, bool changed);

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct open_req *orq;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_APPEND))) {
		fs_op_open_write(req, ino, fi); /* change.c: EROFS on a read-only mount */
		return;
	}
	if (ctl_is(ino)) {
		open_control(req, ino, fi);
		return;
	}
	if (ns_writing(M(req)->ns, ino)) {
		fuse_reply_err(req, EBUSY); /* being written here: whole once it is closed */
		return;
	}
	orq = malloc(sizeof(*orq));
	if (!orq) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	*orq = (struct open_req){.req = req, .ino = ino, .fi = *fi};
	/* revalidation (a HEAD) parks the open: it is answered on the I/O thread */
	ns_open_async(M(req)->ns, ino, open_done, orq);
}

/* The rest of an open, once ns has the version: in the worker, or on the I/O thread. */
static void open_done(void *arg, int r, struct fobj *o, bool same, bool changed)
{
	struct open_req *orq = arg;
	fuse_req_t req = orq->req;
	fuse_ino_t ino = orq->ino;
	struct fuse_file_info *fi = &orq->fi;
	struct mount *m = M(req);
	struct fh *fh;

	if (r < 0) {
		fuse_reply_err(req, fs_reply_errno(r));
		free(orq);
		return;
	}
	/* The kernel still has the old size from the lookup and would stop reading there: have
	 * it ask again. Attributes only (offset -1): no page is locked here, nothing to wait on. */
	if (changed)
		fuse_lowlevel_notify_inval_inode(m->se, ino, -1, 0);
	fh = fs_fh_new();
	if (!fh) {
		fobj_put(o);
		ns_release(m->ns, ino);
		fuse_reply_err(req, ENOMEM);
		free(orq);
		return;
	}
	fh->obj = o;
	fh->ino = ino;
	struct cache_obj co = cobj(o);
	fh->lagging = cache_route(m->c, &co) == CACHE_LAG;
	fh->drop_behind = fh->lagging && !m->o->lagging_page_cache;
	fi->keep_cache = same && !fh->drop_behind;
	/* with the page cache dropped, every byte this file gets comes through op_read */
	fh->movable = !fi->keep_cache;
	fh->serves0 = __atomic_load_n(&o->serves, __ATOMIC_ACQUIRE);
	fi->fh = (uint64_t)(uintptr_t)fh;
	fs_fh_track(m, fh);
	if (fuse_reply_open(req, fi) == -ENOENT)
		fs_fh_free(m, fh); /* the opener was interrupted: no release will come */
	free(orq);
}

static void reply_read(void *arg, const struct cache_iov *iov, int n, int err)
{
	fuse_req_t req = arg;
	struct iovec stack[64] = {{0}}, *v = n > 64 ? malloc((size_t)n * sizeof(*v)) : stack;

	if (err || n == 0 || !v) {
		if (err || !v)
			fuse_reply_err(req, err ? fs_reply_errno(err) : ENOMEM);
		else
			fuse_reply_buf(req, NULL, 0);
		return;
	}
	for (int i = 0; i < n; i++) {
		v[i].iov_base = (void *)iov[i].base;
		v[i].iov_len = iov[i].len;
	}
	fuse_reply_iov(req, v, n);
	if (v != stack)
		free(v);
}

/* The reply callback needs the object to log an error, and the file and request to read
 * again after a move; wrap the request. */
struct read_req {
	fuse_req_t req;
	struct mount *m;
	struct fobj *o;           /* the version this read was made of (a ref) */
	fuse_ino_t ino;
	struct fh *fh;            /* valid until the reply: the kernel releases no file it reads */
	uint64_t off;
	size_t size;
	uint64_t ticket;          /* the cache's name for the read, for cancelling it */
	uint64_t start_ns;        /* when it came (fs_metrics_read, fs_trace_read) */
	bool first;               /* the first read through its handle (trace= only) */
	uint32_t stream;          /* the trace's name of the handle (trace= only): fh may be
				   * released once the reply is out, and the trace comes after */
};

/* Run @fn(@arg) on a detached thread of its own, counted in m->invals so that the mount's end
 * waits for it. @return 0 or -errno. */
static int helper(struct mount *m, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	pthread_t t;
	int r;

	pthread_mutex_lock(&m->inval_lock);
	m->invals++;
	pthread_mutex_unlock(&m->inval_lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		pthread_mutex_lock(&m->inval_lock);
		if (--m->invals == 0)
			pthread_cond_broadcast(&m->inval_done);
		pthread_mutex_unlock(&m->inval_lock);
	}
	return -r;
}

static void helper_done(struct mount *m)
{
	pthread_mutex_lock(&m->inval_lock);
	if (--m->invals == 0)
		pthread_cond_broadcast(&m->inval_done);
	pthread_mutex_unlock(&m->inval_lock);
}

/* An interrupted read whose reader was alive and not dying at the time. */
struct read_watch {
	struct read_watch *next; /* m->watches; watch_lock */
	uint64_t ticket;
	pid_t tid;               /* the reading thread */
};

static void watch_forget(struct mount *m, uint64_t ticket);

struct inval {
	struct mount *m;
	fuse_ino_t ino;
	off_t off, len; /* the pages to drop; 0, 0: all of them */
};

static void *inval_thread(void *arg)
{
	struct inval *iv = arg;
	struct mount *m = iv->m;

	fuse_lowlevel_notify_inval_inode(m->se, iv->ino, iv->off, iv->len);
	free(iv);
	helper_done(m);
	return NULL;
}

/*
 * Have the kernel drop @ino's cached attributes and the pages of [off, off + len) (0, 0: all).
 * The kernel may wait for pages whose reads the I/O thread is about to answer, so this runs on
 * a thread of its own (helper), never on the I/O thread or a FUSE worker. Best effort.
 */
static void inval_pages(struct mount *m, fuse_ino_t ino, off_t off, off_t len)
{
	struct inval *iv = malloc(sizeof(*iv));

	if (!iv)
		return;
	iv->m = m;
	iv->ino = ino;
	iv->off = off;
	iv->len = len;
	if (helper(m, inval_thread, iv) < 0)
		free(iv);
}

/*
 * The object behind @ino changed under a file that cannot move: make the next open and lookup
 * ask the store again. The inode's pages are left alone: they hold only the old version (ns.c
 * never gives an inode a second version while files are open on it), and the files open on it
 * may go on reading them; newer opens get a new inode.
 */
static void object_changed(struct mount *m, fuse_ino_t ino, const struct fobj *o)
{
	ns_stale(m->ns, ino, o->id);
}

static void reply_read_logged(void *arg, const struct cache_iov *iov, int n, int err);
static void *move_thread(void *arg);

/* Read again for @rr, with @o (a ref, taken over). */
static void read_again(struct read_req *rr, struct fobj *o)
{
	struct cache_obj co = cobj(o);
	struct fobj *hold = o;

	fobj_put(rr->o);
	rr->o = o;
	fobj_get(hold);
	cache_read(rr->m->c, &co, &rr->fh->s, rr->off, rr->size, rr->ticket, reply_read_logged,
		   rr);
	fobj_put(hold);
}

/* Answer @rr with an error and free it. */
static void fail_read(struct read_req *rr, int err)
{
	__atomic_fetch_add(&rr->m->reads, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&rr->m->read_errors, 1, __ATOMIC_RELAXED);
	log_read_error(rr->m, rr->o, err);
	if (err == -ESTALE)
		object_changed(rr->m, rr->ino, rr->o);
	fuse_reply_err(rr->req, fs_reply_errno(err));
	fobj_put(rr->o);
	free(rr);
}

/* A helper thread: move @rr's file to the object's new version, or wait for the move another
 * read of the file started, then read again; or fail the read with ESTALE. */
static void *move_thread(void *arg)
{
	struct read_req *rr = arg;
	struct mount *m = rr->m;
	struct fh *fh = rr->fh;
	struct fobj *now = NULL, *old;
	uint64_t serves;
	int r;

	pthread_mutex_lock(&fh->lock);
	while (fh->moving)
		pthread_cond_wait(&fh->moved, &fh->lock);
	if (fh->obj != rr->o) {
		now = fh->obj; /* moved already: read the new version */
		fobj_get(now);
		pthread_mutex_unlock(&fh->lock);
		read_again(rr, now);
		goto out;
	}
	if (!fh->movable || __atomic_load_n(&fh->obj->serves, __ATOMIC_ACQUIRE) != fh->serves0) {
		pthread_mutex_unlock(&fh->lock);
		fail_read(rr, -ESTALE);
		goto out;
	}
	fh->moving = true;
	old = fh->obj;
	serves = fh->serves0;
	pthread_mutex_unlock(&fh->lock);

	r = ns_move(m->ns, rr->ino, old, serves, &now);
	if (r == 0) {
		/* the kernel still has the old size: have it ask again before the reply lands,
		 * without touching pages (the locked ones of this very read would deadlock) */
		fuse_lowlevel_notify_inval_inode(m->se, rr->ino, -1, 0);
	}
	pthread_mutex_lock(&fh->lock);
	if (r == 0) {
		fh->obj = now;
		fh->serves0 = __atomic_load_n(&now->serves, __ATOMIC_ACQUIRE);
		fobj_get(now);
	}
	fh->moving = false;
	pthread_cond_broadcast(&fh->moved);
	pthread_mutex_unlock(&fh->lock);
	if (r == 0) {
		fobj_put(old); /* the file's reference to the old version */
		read_again(rr, now);
	} else {
		fail_read(rr, r == -ESTALE ? -ESTALE : r);
	}
out:
	helper_done(m);
	return NULL;
}

/* A drop_behind handle reads [off, off + size): note it, and drop what lies further than
 * DROP_KEEP from it once the range read so far spans more than 3 x DROP_KEEP. */
static void drop_behind(struct mount *m, fuse_ino_t ino, struct fh *fh, uint64_t off,
			uint64_t size)
{
	uint64_t keep_lo = off > DROP_KEEP ? off - DROP_KEEP : 0, keep_hi = off + size + DROP_KEEP;
	uint64_t lo, hi;
	bool below = false, above = false;

	pthread_mutex_lock(&m->inval_lock);
	if (fh->seen_hi == fh->seen_lo) {
		fh->seen_lo = off;
		fh->seen_hi = off + size;
	} else {
		fh->seen_lo = off < fh->seen_lo ? off : fh->seen_lo;
		fh->seen_hi = off + size > fh->seen_hi ? off + size : fh->seen_hi;
	}
	lo = fh->seen_lo;
	hi = fh->seen_hi;
	if (hi - lo > 3 * (uint64_t)DROP_KEEP) {
		below = lo < keep_lo;
		above = hi > keep_hi;
		fh->seen_lo = below ? keep_lo : lo;
		fh->seen_hi = above ? keep_hi : hi;
	}
	pthread_mutex_unlock(&m->inval_lock);
	if (below)
		inval_pages(m, ino, (off_t)lo, (off_t)(keep_lo - lo));
	if (above)
		inval_pages(m, ino, (off_t)keep_hi, (off_t)(hi - keep_hi));
}

static void reply_read_logged(void *arg, const struct cache_iov *iov, int n, int err)
{
	struct read_req *rr = arg;
	struct fh *fh = rr->fh;
	bool retry = false;

	/* Bytes of a version the file is leaving, or an ESTALE a move may cure, go to the mover
	 * instead of the kernel. Otherwise count the serve before the reply: ns_move relies on
	 * seeing it. */
	pthread_mutex_lock(&fh->lock);
	if (fh->moving || fh->obj != rr->o)
		retry = err == 0 || err == -ESTALE;
	else if (err == -ESTALE)
		retry = fh->movable &&
			__atomic_load_n(&rr->o->serves, __ATOMIC_ACQUIRE) == fh->serves0;
	else if (!err && n)
		__atomic_fetch_add(&rr->o->serves, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_unlock(&fh->lock);
	if (retry && helper(rr->m, move_thread, rr) == 0)
		return;

	/* waits for an on_interrupt still running on another thread, and stops later ones:
	 * after it, the watch list holds this read's watch, if it ever will */
	fuse_req_interrupt_func(rr->req, NULL, NULL);
	if (__atomic_load_n(&rr->m->nwatch, __ATOMIC_RELAXED))
		watch_forget(rr->m, rr->ticket);
	__atomic_fetch_add(&rr->m->reads, 1, __ATOMIC_RELAXED);
	if (err) {
		__atomic_fetch_add(&rr->m->read_errors, 1, __ATOMIC_RELAXED);
		log_read_error(rr->m, rr->o, err);
		if (err == -ESTALE)
			object_changed(rr->m, rr->ino, rr->o);
	} else {
		size_t total = 0;

		for (int i = 0; i < n; i++)
			total += iov[i].len;
		__atomic_fetch_add(&rr->m->read_bytes, total, __ATOMIC_RELAXED);
		if (n)
			fs_metrics_read(rr->m, rr->start_ns);
	}
	reply_read(rr->req, iov, n, err);
	/* after the answer, off the reader's wait; still inside the cache's reply */
	if (rr->m->trace)
		fs_trace_read(rr->m, rr->o, rr->stream, rr->off, rr->size, rr->start_ns, rr->first,
			      err);
	fobj_put(rr->o);
	free(rr);
}

/*
 * Is thread @tid being killed? The kernel interrupts a waiting request for any signal, but
 * a reader stopped and continued, or one whose handler returns, must not see EINTR from a
 * regular file; only a dying one must be let go. A fatal signal shows as SIGKILL pending on
 * every thread of the process (/proc/TID/status, SigPnd or ShdPnd).
 */
static bool being_killed(pid_t tid)
{
	char path[64], line[256];
	bool dying = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return true; /* gone already */
	while (fgets(line, sizeof(line), f)) {
		unsigned long long mask;

		if ((sscanf(line, "SigPnd: %llx", &mask) == 1 ||
		     sscanf(line, "ShdPnd: %llx", &mask) == 1) &&
		    (mask & (1ULL << (SIGKILL - 1))))
			dying = true;
	}
	fclose(f);
	return dying;
}

static void watch_forget(struct mount *m, uint64_t ticket)
{
	pthread_mutex_lock(&m->watch_lock);
	for (struct read_watch **pp = &m->watches, *w; (w = *pp);) {
		if (w->ticket == ticket) {
			*pp = w->next;
			free(w);
			__atomic_store_n(&m->nwatch, m->nwatch - 1, __ATOMIC_RELAXED);
		} else {
			pp = &w->next;
		}
	}
	pthread_mutex_unlock(&m->watch_lock);
}

/* Cancel the watched reads whose reader is dying or gone (I/O thread, no lock held). The
 * cancel answers the read, whose reply forgets the watch; a read not yet parked in the cache
 * (the interrupt came first) is not found, and the next scan tries again. */
static void watch_scan(struct mount *m)
{
	struct read_watch *snap;
	size_t n = 0;

	pthread_mutex_lock(&m->watch_lock);
	snap = m->nwatch ? malloc(m->nwatch * sizeof(*snap)) : NULL;
	for (struct read_watch *w = m->watches; w && snap; w = w->next)
		snap[n++] = *w;
	pthread_mutex_unlock(&m->watch_lock);
	for (size_t i = 0; i < n; i++)
		if (being_killed(snap[i].tid))
			cache_cancel(m->c, snap[i].ticket);
	free(snap);
}

static void watch_fire(void *arg);

/* Arm the periodic scan unless it is armed (watch_lock held). */
static void watch_arm(struct mount *m)
{
	if (!m->watch_armed && backend_defer(m->b, WATCH_PERIOD_NS, watch_fire, m) == 0)
		m->watch_armed = true;
}

/* The periodic scan: runs while any read is watched, and stops when none is. */
static void watch_fire(void *arg)
{
	struct mount *m = arg;

	watch_scan(m);
	pthread_mutex_lock(&m->watch_lock);
	m->watch_armed = false;
	if (m->watches)
		watch_arm(m);
	pthread_mutex_unlock(&m->watch_lock);
}

/* A scan now, for a reader that was dying when its interrupt came. */
static void watch_now(void *arg)
{
	watch_scan(arg);
}

/* Called by libfuse with the request's lock held, maybe from inside fuse_req_interrupt_func:
 * answering here could free the request under that lock, so the I/O thread does it. Every
 * interrupted read is watched until it is answered; a dying reader's is cancelled at once. */
static void on_interrupt(fuse_req_t req, void *data)
{
	struct mount *m = M(req);
	struct read_watch *w = malloc(sizeof(*w));
	pid_t tid = fuse_req_ctx(req)->pid;

	if (!w)
		return;
	w->ticket = (uint64_t)(uintptr_t)data;
	w->tid = tid;
	pthread_mutex_lock(&m->watch_lock);
	w->next = m->watches;
	m->watches = w;
	__atomic_store_n(&m->nwatch, m->nwatch + 1, __ATOMIC_RELAXED);
	watch_arm(m);
	pthread_mutex_unlock(&m->watch_lock);
	if (being_killed(tid))
		backend_defer(m->b, 0, watch_now, m);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct mount *m = M(req);
	struct fh *fh = (struct fh *)(uintptr_t)fi->fh;
	struct read_req *rr;

	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (!fh->ino) { /* a control file (fh->obj may be changing under a move) */
		size_t n = (uint64_t)off >= fh->text_len ? 0 : fh->text_len - (size_t)off;

		fuse_reply_buf(req, n ? fh->text + off : NULL, n < size ? n : size);
		return;
	}
	rr = malloc(sizeof(*rr));
	if (!rr) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	rr->req = req;
	rr->m = m;
	rr->ino = ino;
	rr->fh = fh;
	rr->off = (uint64_t)off;
	rr->size = size;
	rr->start_ns = fs_now_ns();
	rr->first = m->trace && __atomic_load_n(&fh->s.next_off, __ATOMIC_RELAXED) == 0;
	rr->stream = m->trace ? fs_trace_stream(m, fh) : 0;
	pthread_mutex_lock(&fh->lock);
	rr->o = fh->obj; /* a move may change it: take the version under the lock */
	fobj_get(rr->o);
	pthread_mutex_unlock(&fh->lock);
	struct cache_obj co = cobj(rr->o);
	/* A reader killed while its read waits (for the limiter, a slow store) must not stay a
	 * zombie until the data comes: after the kernel's interrupt the read is watched, and
	 * cancelled once its reader is dying (other signals leave it alone). */
	uint64_t ticket = cache_ticket(m->c);
	rr->ticket = ticket;
	fuse_req_interrupt_func(req, on_interrupt, (void *)(uintptr_t)ticket);
	/* once the reply is out the file may be released (fh freed) while cache_read still
	 * runs: the object stays held until it returns */
	struct fobj *hold = rr->o;

	if (fh->drop_behind)
		drop_behind(m, ino, fh, (uint64_t)off, size);
	fobj_get(hold);
	cache_read(m->c, &co, &fh->s, (uint64_t)off, size, ticket, reply_read_logged, rr);
	fobj_put(hold);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mount *m = M(req);
	struct fh *fh = (struct fh *)(uintptr_t)fi->fh;
	uint64_t lo, hi;

	/* the last of a lagging handle's pages (no other reference to this file remains, maps
	 * included, so nobody is reading through it) */
	if (fh->drop_behind) {
		pthread_mutex_lock(&m->inval_lock);
		lo = fh->seen_lo;
		hi = fh->seen_hi;
		pthread_mutex_unlock(&m->inval_lock);
		if (hi > lo)
			inval_pages(m, ino, (off_t)lo, (off_t)(hi - lo));
	}
	fs_fh_free(m, fh);
	fuse_reply_err(req, 0);
}

static int control_dir(struct ns_dir **ret)
{
	const char *names[2];
	size_t n = 0;
	uint64_t ino;

	while (n < 2 && (names[n] = ctl_dirent(n, &ino)))
		n++;
	*ret = ns_dir_make(CTL_DIR_INO, 1, names, n);
	return *ret ? 0 : -ENOMEM;
}

/* The answer to an opendir, in the worker or later on the I/O thread. */
static void reply_opendir(void *arg, int r, struct ns_dir *d)
{
	struct open_req *orq = arg;
	fuse_req_t req = orq->req;
	struct fuse_file_info *fi = &orq->fi;

	if (r < 0) {
		fuse_reply_err(req, fs_reply_errno(r));
		free(orq);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	fi->cache_readdir = 0;
	fs_dir_track(M(req), d);
	if (fuse_reply_open(req, fi) == -ENOENT)
		fs_dir_free(M(req), d);
	free(orq);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct open_req *orq = malloc(sizeof(*orq));
	struct ns_dir *d;

	if (!orq) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	*orq = (struct open_req){.req = req, .ino = ino, .fi = *fi};
	if (ino == CTL_DIR_INO) {
		int r = control_dir(&d);

		reply_opendir(orq, r, r == 0 ? d : NULL);
		return;
	}
	/* a listing held is served at once (and refreshed in the background when old); the
	 * first listing of a directory parks the opendir until it arrives */
	ns_opendir_async(M(req)->ns, ino, reply_opendir, orq);
}

/*
 * One page of an open directory: entries from @off on, as many as fit in @size bytes. Offsets:
 * 0 ".", 1 "..", 2 + i for entry i; each entry carries the offset of the next. With @plus
 * (readdirplus, which the kernel uses for `ls -l` and the first page of any listing), each
 * entry also carries what a lookup would answer, from memory (ns_dir_lookup), so a stat of
 * every name costs no round trip of its own; a name memory cannot answer goes without (inode
 * 0), and the kernel looks it up. "." and ".." never carry attributes: the kernel would not
 * count them as lookups.
 */
static void dir_page(fuse_req_t req, size_t size, off_t off, struct fuse_file_info *fi,
		     bool plus)
{
	struct mount *m = M(req);
	struct ns_dir *d = (struct ns_dir *)(uintptr_t)fi->fh;
	size_t count = ns_dir_count(d);
	char *buf = malloc(size);
	size_t used = 0;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (size_t i = (size_t)off; i < count + 2; i++) {
		struct fuse_entry_param e = {0};
		const char *name;
		bool is_dir;
		size_t n;

		if (i == 0) {
			name = ".";
			e.attr.st_ino = d->ino;
			e.attr.st_mode = S_IFDIR;
		} else if (i == 1) {
			name = "..";
			e.attr.st_ino = d->parent;
			e.attr.st_mode = S_IFDIR;
		} else {
			name = ns_dir_name(d, i - 2, &is_dir);
			/* the real inode is made at lookup; d_ino only needs to be non-zero */
			e.attr.st_ino = (ino_t)(i + 2);
			e.attr.st_mode = is_dir ? S_IFDIR : S_IFREG;
		}
		if (!plus) {
			n = fuse_add_direntry(req, buf + used, size - used, name, &e.attr,
					      (off_t)(i + 1));
			if (n > size - used)
				break;
			used += n;
			continue;
		}
		/* the lookup count may only be raised for an entry that is sent */
		if (fuse_add_direntry_plus(req, NULL, 0, name, NULL, 0) > size - used)
			break;
		if (i >= 2 && ns_dir_lookup(m->ns, d, i - 2, &e.attr) == 0) {
			e.ino = e.attr.st_ino;
			e.attr_timeout = fs_ttl(m);
			e.entry_timeout = fs_ttl(m);
		}
		used += fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
					       (off_t)(i + 1));
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	dir_page(req, size, off, fi, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	dir_page(req, size, off, fi, true);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fs_dir_free(M(req), (struct ns_dir *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/* What df shows. A read-only mount: its caches' size, none of it free (as a read-only
 * filesystem says). A writable one: the room of a file:// store's filesystem, or, for an object
 * store, whose API tells no capacity, 1 PiB free (as s3fs does): 0 free made programs that
 * check for room refuse to write, and "disk full" alerts fire on a healthy mount. */
static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	const uint64_t unbounded = 1ULL << 50, files = 1ULL << 32;
	struct mount *m = M(req);
	struct statvfs sv = {0}, st;
	uint64_t bs = m->o->block_size;

	sv.f_bsize = bs;
	sv.f_frsize = bs;
	sv.f_namemax = 255;
	sv.f_flag = (m->writable ? 0 : ST_RDONLY) | ST_NOSUID | ST_NODEV;
	if (!m->writable) {
		sv.f_blocks = (m->o->hot_size + (m->o->lagging ? m->o->lagging_size : 0)) / bs;
	} else if (backend_space(m->b, &st) == 0 && st.f_frsize) {
		sv.f_blocks = (fsblkcnt_t)((unsigned __int128)st.f_blocks * st.f_frsize / bs);
		sv.f_bfree = (fsblkcnt_t)((unsigned __int128)st.f_bfree * st.f_frsize / bs);
		sv.f_bavail = (fsblkcnt_t)((unsigned __int128)st.f_bavail * st.f_frsize / bs);
		sv.f_files = st.f_files;
		sv.f_ffree = st.f_ffree;
		sv.f_favail = st.f_favail;
	} else {
		sv.f_blocks = sv.f_bfree = sv.f_bavail = unbounded / bs;
		sv.f_files = sv.f_ffree = sv.f_favail = files;
	}
	fuse_reply_statfs(req, &sv);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	char *buf = size ? malloc(size) : NULL;
	int r;

	if (size && !buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	r = ctl_getxattr(M(req), ino, name, buf, size);
	if (r < 0)
		fuse_reply_err(req, fs_reply_errno(r));
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)r);
	else
		fuse_reply_buf(req, buf, (size_t)r);
	free(buf);
}

/* An empty list, everywhere: see control.c (cp -a would copy user.tierfs.* otherwise). */
static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, 0);
	else
		fuse_reply_buf(req, NULL, 0);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	fuse_reply_err(req, M(req)->writable ? EPERM : EROFS);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, M(req)->writable ? EPERM : EROFS);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	fuse_reply_err(req, M(req)->writable ? EPERM : EROFS);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	fuse_reply_err(req, -ctl_setxattr(M(req), ctx->uid, ctx->pid, ino, name, value, size));
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, M(req)->writable ? EPERM : EROFS);
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = fs_op_setattr,
	.mknod = op_mknod,
	.mkdir = fs_op_mkdir,
	.unlink = fs_op_unlink,
	.rmdir = fs_op_rmdir,
	.symlink = op_symlink,
	.rename = fs_op_rename,
	.link = op_link,
	.open = op_open,
	.read = op_read,
	.write = fs_op_write,
	.flush = fs_op_flush,
	.fsync = fs_op_fsync,
	.release = op_release,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.statfs = op_statfs,
	.setxattr = op_setxattr,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.removexattr = op_removexattr,
	.create = fs_op_create,
};

/* ---- what is left when the session ends -------------------------------------------------------- */

void fs_ops_quiesce(struct mount *m)
{
	pthread_mutex_lock(&m->inval_lock);
	while (m->invals)
		pthread_cond_wait(&m->inval_done, &m->inval_lock);
	pthread_mutex_unlock(&m->inval_lock);
}

void fs_ops_drain(struct mount *m)
{
	fs_ops_quiesce(m); /* no helper starts after the loop; this only checks */
	/* watches of reads the kernel gave up on (a dead connection answers nothing) */
	while (m->watches) {
		struct read_watch *w = m->watches;

		m->watches = w->next;
		free(w);
	}
	/* the link is the first member of both */
	while (m->fhs)
		fs_fh_free(m, (struct fh *)m->fhs);
	while (m->dirs)
		fs_dir_free(m, (struct ns_dir *)m->dirs);
}
