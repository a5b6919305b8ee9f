/*
 * filewrite.c - writing to file:///dir: uploads through a hidden temporary file, unlink,
 * rename, mkdir and rmdir, on a writer thread of their own.
 *
 * An upload never shows a partial object under its name, even across a crash:
 *
 *   dir/.tierfs-tmp-<random>   created O_EXCL 0600 beside the name, flock()ed while we write
 *      │ pwrite part by part (each at its offset)
 *      │ commit: fchmod 0644, fsync
 *      ▼
 *   dir/name                   renameat2(RENAME_NOREPLACE unless overwrite; link(2) where the
 *                              filesystem lacks it), then fsync(dir): the name is durable
 *
 * The temporary name is one the read path never lists, stats or opens (file.c). Every path is
 * resolved beneath the root through file_open_dir, which follows no symlink at all, and every
 * call is relative to that directory's fd (openat, renameat2, unlinkat, mkdirat), so a symlink
 * planted in the store cannot send a write out of the root or onto another file.
 *
 * Leftovers. A process killed while writing leaves its temporary file behind. When the mount
 * writes, backend_start queues a walk of the tree (the writer's first job) that removes every
 * regular file named .tierfs-tmp-* owned by our user whose flock() it can take: a writer alive
 * in another process holds its lock from the moment it made the file (and checks, once locked,
 * that the name is still its file), so a second mount of the same directory never removes the
 * first one's uploads. The walk opens each directory with O_NOFOLLOW and costs one readdir per
 * directory of the store.
 *
 * Threads. fsync and the writes of big parts can take long (dirty page throttling, a slow
 * disk, NFS), and the I/O thread serves every read of the mount; so the work runs on one
 * writer thread, in the order it was asked, and each job's completion (the caller's done) is
 * then handed to the I/O thread, as the backend promises, through a FIFO drained by one
 * io_defer at a time, so completions keep their order too:
 *
 *   caller ──job──► queue ──► writer thread: work() ──► done list ──io_defer──► I/O thread:
 *                                                                               complete()
 *
 * A part's bytes go to the page cache when it is written; only the commit's fsync makes them
 * durable, which is what close() waits for. ENOSPC, EIO and the like come back as they are.
 * If the directory's fsync fails after the rename, the name may not survive a crash: the new
 * file is taken away again and the commit fails, so the caller never counts on it (with
 * overwrite, the object it replaced is gone by then too; the error says so).
 *
 * Locking: w->lock guards the two queues and the flags; an upload's struct fup belongs to the
 * writer thread (its jobs run one at a time, in order). Workload: one job per part of several
 * MiB, a few per object, and metadata calls.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_i.h"
#include "io.h"
#include "scheme.h"

#define WALK_DEPTH_MAX 64   /* the leftover walk goes no deeper */
#define OBJECT_MODE    0644 /* a new object's permission bits */
#define DIR_MODE       0755

struct wjob;
typedef void (*wjob_fn)(struct wjob *j);

/* A job: work() on the writer thread, then complete() on the I/O thread, which frees it. */
struct wjob {
	wjob_fn work;
	wjob_fn complete;
	struct backend *b;
	struct wjob *next;
	int err;	 /* work's result */
	bk_done_fn done; /* metadata jobs: the caller's */
	void *arg;
};

struct fwriter {
	pthread_t thread;
	bool running; /* owner's thread: file_write_start / stop */
	pthread_mutex_t lock;
	pthread_cond_t cond;	    /* a job was queued, or stopping */
	struct wjob *head, *tail;   /* lock: jobs to run */
	struct wjob *dhead, *dtail; /* lock: jobs run, their completions due */
	bool draining;		    /* lock: a drain is deferred on the I/O loop */
	bool stopping;		    /* lock */
};

/* An upload's state; the writer thread's alone. */
struct fup {
	int dfd;	  /* the directory the object goes in, -1 until the first job */
	int fd;		  /* the temporary file, -1 until the first job */
	char tmp[64];	  /* its name in dfd */
	const char *name; /* the last segment of u->path */
	char *dir;	  /* the rest: "" for the root, owned */
	int err;	  /* the first failure of a job of this upload */
};

/* ---- the writer thread --------------------------------------------------------------------- */

/* On the I/O thread: complete every job run so far, in order, one at a time from the list,
 * so that one queued by a completion (an abort from inside a done) comes after the others. */
static void drain(void *arg)
{
	struct fwriter *w = arg;

	for (;;) {
		struct wjob *j;

		pthread_mutex_lock(&w->lock);
		j = w->dhead;
		if (j) {
			w->dhead = j->next;
			if (!w->dhead)
				w->dtail = NULL;
		} else {
			w->draining = false;
		}
		pthread_mutex_unlock(&w->lock);
		if (!j)
			return;
		j->complete(j);
	}
}

/* Job @j has run: its completion goes to the I/O thread (or, the loop stopped, runs here). */
static void completed(struct fwriter *w, struct wjob *j)
{
	bool defer;

	j->next = NULL;
	pthread_mutex_lock(&w->lock);
	if (w->dtail)
		w->dtail->next = j;
	else
		w->dhead = j;
	w->dtail = j;
	defer = !w->draining;
	w->draining = true;
	pthread_mutex_unlock(&w->lock);
	if (defer && io_defer(j->b->io, 0, drain, w) < 0)
		drain(w);
}

static void *writer(void *arg)
{
	struct fwriter *w = arg;

	for (;;) {
		struct wjob *j;

		pthread_mutex_lock(&w->lock);
		while (!w->head && !w->stopping)
			pthread_cond_wait(&w->cond, &w->lock);
		j = w->head;
		if (j) {
			w->head = j->next;
			if (!w->head)
				w->tail = NULL;
		}
		pthread_mutex_unlock(&w->lock);
		if (!j)
			return NULL; /* stopping, and every job queued before has run */
		j->work(j);
		completed(w, j);
	}
}

/* Queue @j. @return 0, or -ESHUTDOWN (not writing, or stopped: @j not queued). */
static int queue(struct backend *b, struct wjob *j)
{
	struct fwriter *w = ((struct file *)b->priv)->w;
	int e = 0;

	j->b = b;
	j->next = NULL;
	if (!w)
		return -ESHUTDOWN;
	pthread_mutex_lock(&w->lock);
	if (w->stopping || !w->running) {
		e = -ESHUTDOWN;
	} else {
		if (w->tail)
			w->tail->next = j;
		else
			w->head = j;
		w->tail = j;
		pthread_cond_signal(&w->cond);
	}
	pthread_mutex_unlock(&w->lock);
	return e;
}

/* ---- leftovers ----------------------------------------------------------------------------- */

/* Remove temporary file @name in @dfd if it is a regular file of ours that no live writer
 * holds. @return 1 if removed, else 0. */
static int remove_leftover(int dfd, const char *name)
{
	struct stat st, now;
	int removed = 0;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	    flock(fd, LOCK_EX | LOCK_NB) == 0 &&
	    fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st.st_dev &&
	    now.st_ino == st.st_ino && unlinkat(dfd, name, 0) == 0)
		removed = 1;
	close(fd); /* and its lock */
	return removed;
}

/* Walk directory @dfd (closed here) and those below it, @depth deep. @return files removed. */
static uint64_t walk_leftovers(int dfd, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	uint64_t n = 0;

	if (!d) {
		close(dfd);
		return 0;
	}
	while ((de = readdir(d))) {
		const char *name = de->d_name;

		if (!strcmp(name, ".") || !strcmp(name, ".."))
			continue;
		if (upload_reserved_name(name)) {
			n += (uint64_t)remove_leftover(dirfd(d), name);
		} else if ((de->d_type == DT_DIR || de->d_type == DT_UNKNOWN) &&
			   depth < WALK_DEPTH_MAX) {
			int sub =
			    openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub >= 0)
				n += walk_leftovers(sub, depth + 1);
		}
	}
	closedir(d);
	return n;
}

static void cleanup_work(struct wjob *j)
{
	struct file *f = j->b->priv;
	int dfd = file_open_dir(f, "");

	if (dfd >= 0)
		WSTAT_ADD(j->b, tmp_removed, walk_leftovers(dfd, 0));
}

static void free_job(struct wjob *j)
{
	free(j);
}

/* ---- start, stop --------------------------------------------------------------------------- */

int file_write_start(struct backend *b)
{
	struct file *f = b->priv;
	struct wjob *j;
	int e;

	if (!b->writable || (f->w && f->w->running))
		return 0;
	if (!f->w) {
		f->w = calloc(1, sizeof(*f->w));
		if (!f->w)
			return -ENOMEM;
		pthread_mutex_init(&f->w->lock, NULL);
		pthread_cond_init(&f->w->cond, NULL);
	}
	f->w->stopping = false;
	e = pthread_create(&f->w->thread, NULL, writer, f->w);
	if (e)
		return -e;
	f->w->running = true;
	j = calloc(1, sizeof(*j));
	if (!j)
		return 0; /* leftovers stay until the next start */
	j->work = cleanup_work;
	j->complete = free_job;
	if (queue(b, j) < 0)
		free(j);
	return 0;
}

void file_write_stop(struct backend *b)
{
	struct fwriter *w = ((struct file *)b->priv)->w;

	if (!w || !w->running)
		return;
	pthread_mutex_lock(&w->lock);
	w->stopping = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	w->running = false;
}

void file_write_free(struct file *f)
{
	if (!f->w)
		return;
	pthread_mutex_destroy(&f->w->lock);
	pthread_cond_destroy(&f->w->cond);
	free(f->w);
	f->w = NULL;
}

/* ---- paths --------------------------------------------------------------------------------- */

/* Split @path into its directory (malloc'd, "" for the root) and its last segment, which must
 * not be a temporary file's name. @return 0 or -errno. */
static int split(const char *path, char **ret_dir, const char **ret_name)
{
	const char *slash = strrchr(path, '/');
	const char *name = slash ? slash + 1 : path;
	char *dir;

	if (!name[0] || upload_reserved_name(name))
		return -EINVAL;
	dir = slash ? strndup(path, (size_t)(slash - path)) : strdup("");
	if (!dir)
		return -ENOMEM;
	*ret_dir = dir;
	*ret_name = name;
	return 0;
}

/* Open the directory @path goes in, and point *ret_name at its last segment. @return the
 * directory's fd or -errno. */
static int open_parent(struct file *f, const char *path, const char **ret_name)
{
	char *dir;
	int e = split(path, &dir, ret_name);

	if (e < 0)
		return e;
	e = file_open_dir(f, dir);
	free(dir);
	return e;
}

static int fsync_fd(int fd)
{
	return fsync(fd) < 0 ? -errno : 0;
}

/* ---- uploads ------------------------------------------------------------------------------- */

/* A job of one upload: a part, its commit or its abort. */
struct ujob {
	struct wjob j; /* first: the writer sees a wjob */
	struct bk_upload *u;
	struct bk_part *p;   /* part jobs */
	struct bk_meta meta; /* commit: the new object */
};

/* Create the temporary file beside the name and lock it: dir/.tierfs-tmp-<16 hex>. Another
 * mount's leftover walk may have taken it between create and lock (then it is gone, and we
 * try another name). @return 0 or -errno. */
static int make_tmp(struct fup *fu)
{
	for (int tries = 0; tries < 16; tries++) {
		unsigned char rnd[8];
		struct stat a, b;
		int fd;

		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return -EIO;
		snprintf(fu->tmp, sizeof(fu->tmp), "%s%02x%02x%02x%02x%02x%02x%02x%02x",
			 UPLOAD_TMP_PREFIX, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6],
			 rnd[7]);
		fd = openat(fu->dfd, fu->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			    0600);
		if (fd < 0 && errno == EEXIST)
			continue;
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX) == 0 && fstat(fd, &a) == 0 &&
		    fstatat(fu->dfd, fu->tmp, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
		    a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
			fu->fd = fd;
			return 0;
		}
		close(fd);
	}
	return -EIO;
}

/* The directory and the temporary file, opened by the upload's first job. @return 0 or
 * -errno. */
static int ensure_tmp(struct file *f, struct fup *fu)
{
	if (fu->fd >= 0)
		return 0;
	if (fu->dfd < 0) {
		fu->dfd = file_open_dir(f, fu->dir);
		if (fu->dfd < 0) {
			int e = fu->dfd;

			fu->dfd = -1;
			return e;
		}
	}
	return make_tmp(fu);
}

static int write_all(int fd, const char *data, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, data, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		data += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Remove the temporary file (if any) and close what is open. */
static void discard(struct fup *fu)
{
	if (fu->fd >= 0) {
		unlinkat(fu->dfd, fu->tmp, 0);
		close(fu->fd);
		fu->fd = -1;
	}
}

static void fup_free(struct fup *fu)
{
	if (fu->fd >= 0)
		close(fu->fd);
	if (fu->dfd >= 0)
		close(fu->dfd);
	free(fu->dir);
	free(fu);
}

int file_upload_init(struct bk_upload *u)
{
	struct fup *fu = calloc(1, sizeof(*fu));
	int e;

	if (!fu)
		return -ENOMEM;
	fu->dfd = fu->fd = -1;
	e = split(u->path, &fu->dir, &fu->name);
	if (e < 0) {
		free(fu);
		return e;
	}
	u->priv = fu;
	return 0;
}

static void part_work(struct wjob *j)
{
	struct ujob *uj = (struct ujob *)j;
	struct fup *fu = uj->u->priv;

	if (!fu->err)
		fu->err = ensure_tmp(j->b->priv, fu);
	if (!fu->err)
		fu->err = write_all(fu->fd, uj->p->data, uj->p->len, uj->p->off);
	j->err = fu->err;
}

static void part_complete(struct wjob *j)
{
	struct ujob *uj = (struct ujob *)j;

	upload_part_end(uj->p, j->err);
	free(uj);
}

static struct ujob *ujob_new(struct bk_upload *u, wjob_fn work, wjob_fn complete)
{
	struct ujob *uj = calloc(1, sizeof(*uj));

	if (uj) {
		uj->u = u;
		uj->j.work = work;
		uj->j.complete = complete;
	}
	return uj;
}

int file_upload_part(struct bk_upload *u, struct bk_part *p, int step)
{
	struct ujob *uj = ujob_new(u, part_work, part_complete);
	int e;

	if (!uj)
		return -ENOMEM;
	uj->p = p;
	e = queue(u->b, &uj->j);
	if (e < 0)
		free(uj);
	return e;
}

/* Give the temporary file its name: without replacing anything there unless @overwrite.
 * @return 0 or -errno (-EEXIST: the name is taken). */
static int place(struct fup *fu, bool overwrite)
{
	if (renameat2(fu->dfd, fu->tmp, fu->dfd, fu->name, overwrite ? 0 : RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL || overwrite)
		return -errno;
	/* a filesystem without RENAME_NOREPLACE: link(2) refuses an existing name too */
	if (linkat(fu->dfd, fu->tmp, fu->dfd, fu->name, 0) < 0)
		return -errno;
	unlinkat(fu->dfd, fu->tmp, 0); /* else a second name, removed at the next start */
	return 0;
}

/* The name was placed but its directory could not be made durable: take it away again if it
 * is still ours, so that no error leaves an object behind. */
static void unplace(struct fup *fu)
{
	struct stat a, b;

	if (fstat(fu->fd, &a) == 0 && fstatat(fu->dfd, fu->name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		unlinkat(fu->dfd, fu->name, 0);
}

static void commit_work(struct wjob *j)
{
	struct ujob *uj = (struct ujob *)j;
	struct fup *fu = uj->u->priv;
	struct stat st;
	int e = fu->err;

	if (!e)
		e = ensure_tmp(j->b->priv, fu); /* an empty object has had no part */
	if (!e && fchmod(fu->fd, OBJECT_MODE) < 0)
		e = -errno;
	if (!e)
		e = fsync_fd(fu->fd);
	if (e) {
		discard(fu);
		j->err = e;
		return;
	}
	e = place(fu, uj->u->cfg.overwrite);
	if (e) {
		discard(fu);
		j->err = e;
		return;
	}
	e = fsync_fd(fu->dfd);
	if (!e && fstat(fu->fd, &st) < 0)
		e = -errno;
	if (e)
		unplace(fu);
	else
		file_meta_from_stat(&st, &uj->meta);
	j->err = e;
}

static void commit_complete(struct wjob *j)
{
	struct ujob *uj = (struct ujob *)j;

	fup_free(uj->u->priv);
	uj->u->priv = NULL;
	upload_end(uj->u, j->err, &uj->meta);
	free(uj);
}

int file_upload_commit(struct bk_upload *u)
{
	struct ujob *uj = ujob_new(u, commit_work, commit_complete);
	int e;

	if (!uj)
		return -ENOMEM;
	e = queue(u->b, &uj->j);
	if (e < 0)
		free(uj);
	return e;
}

static void abort_work(struct wjob *j)
{
	discard(((struct ujob *)j)->u->priv);
}

static void abort_complete(struct wjob *j)
{
	struct ujob *uj = (struct ujob *)j;

	fup_free(uj->u->priv);
	uj->u->priv = NULL;
	upload_end(uj->u, -ECANCELED, NULL);
	free(uj);
}

void file_upload_abort(struct bk_upload *u)
{
	struct fwriter *w = ((struct file *)u->b->priv)->w;
	struct ujob *uj = ujob_new(u, abort_work, abort_complete);

	if (!uj)
		return; /* the upload leaks; its temporary file goes at the next start */
	uj->j.b = u->b;
	if (queue(u->b, &uj->j) == 0)
		return;
	/* The writer has stopped, so every job of this upload has run: undo it here, and let
	 * the completion follow those still due on the I/O thread. */
	abort_work(&uj->j);
	if (w)
		completed(w, &uj->j);
	else
		abort_complete(&uj->j);
}

/* ---- unlink, rename, directories ------------------------------------------------------------ */

enum meta_kind { M_UNLINK, M_RENAME, M_MKDIR, M_RMDIR };

struct mjob {
	struct wjob j; /* first */
	enum meta_kind kind;
	bool overwrite;
	char *from, *to; /* owned; to for M_RENAME only */
};

static int unlink_one(struct file *f, const char *path, enum meta_kind kind)
{
	const char *name;
	int e, dfd = open_parent(f, path, &name);

	if (dfd < 0)
		return dfd;
	if (kind == M_MKDIR)
		e = mkdirat(dfd, name, DIR_MODE) < 0 ? -errno : 0;
	else
		e = unlinkat(dfd, name, kind == M_RMDIR ? AT_REMOVEDIR : 0) < 0 ? -errno : 0;
	if (!e)
		e = fsync_fd(dfd);
	close(dfd);
	return e;
}

static int rename_one(struct file *f, const char *from, const char *to, bool overwrite)
{
	const char *a, *b;
	int e, fa = open_parent(f, from, &a), fb = fa < 0 ? fa : open_parent(f, to, &b);

	if (fa < 0 || fb < 0) {
		e = fa < 0 ? fa : fb;
		goto out;
	}
	e = renameat2(fa, a, fb, b, overwrite ? 0 : RENAME_NOREPLACE) < 0 ? -errno : 0;
	if (e == -EINVAL && !overwrite) {
		/* no RENAME_NOREPLACE here: link(2) refuses an existing name (files only) */
		e = linkat(fa, a, fb, b, 0) < 0 ? -errno : 0;
		if (!e && unlinkat(fa, a, 0) < 0)
			e = -errno;
	}
	if (!e)
		e = fsync_fd(fb);
	if (!e)
		e = fsync_fd(fa);
out:
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	return e;
}

static void meta_work(struct wjob *j)
{
	struct mjob *m = (struct mjob *)j;

	if (m->kind == M_RENAME)
		j->err = rename_one(j->b->priv, m->from, m->to, m->overwrite);
	else
		j->err = unlink_one(j->b->priv, m->from, m->kind);
}

static void meta_complete(struct wjob *j)
{
	struct mjob *m = (struct mjob *)j;

	j->done(j->arg, j->err);
	free(m->from);
	free(m->to);
	free(m);
}

static int meta_queue(struct backend *b, enum meta_kind kind, const char *from, const char *to,
		      bool overwrite, bk_done_fn done, void *arg)
{
	struct mjob *m = calloc(1, sizeof(*m));
	int e = -ENOMEM;

	if (!m || !(m->from = strdup(from)) || (to && !(m->to = strdup(to))))
		goto fail;
	m->j.work = meta_work;
	m->j.complete = meta_complete;
	m->j.done = done;
	m->j.arg = arg;
	m->kind = kind;
	m->overwrite = overwrite;
	e = queue(b, &m->j);
	if (e == 0)
		return 0;
fail:
	if (m) {
		free(m->from);
		free(m->to);
	}
	free(m);
	return e;
}

int file_unlink(struct backend *b, const char *path, bk_done_fn done, void *arg)
{
	return meta_queue(b, M_UNLINK, path, NULL, false, done, arg);
}

int file_rename(struct backend *b, const char *from, const char *to, bool overwrite,
		bk_done_fn done, void *arg)
{
	return meta_queue(b, M_RENAME, from, to, overwrite, done, arg);
}

int file_mkdir(struct backend *b, const char *path, bool rm, bk_done_fn done, void *arg)
{
	return meta_queue(b, rm ? M_RMDIR : M_MKDIR, path, NULL, false, done, arg);
}
