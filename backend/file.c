/*
 * file.c - file:///dir: a local directory as the object store.
 *
 * The quickest way to try tierfs, and the demo's default. Objects are the regular files under
 * the directory; their ETag is made from what identifies the file's bytes,
 * "dev-inode-size-mtime_ns" in hex, stable across processes and mounts. Reads run as jobs on
 * the backend's I/O thread (pread from the page cache is fast, and it keeps FUSE workers off
 * the disk), and check the ETag first, so a file replaced under an open handle gives -ESTALE,
 * never a mix.
 *
 * Confinement. The store's contents are untrusted input: anyone who can write into the
 * directory may plant `shadow -> /etc/shadow`, `up -> ../..` or a FIFO, and the mount (often
 * root with allow_other) must not serve them to other users. So:
 *
 *     rootfd ── O_PATH|O_DIRECTORY on the root, opened once, held for the mount's life
 *       │
 *       └─ every path ── openat2(rootfd, path, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
 *                        an absolute symlink, a ".." or a symlink leading out of the root,
 *                        and /proc magic links fail (EXDEV, ELOOP), shown as ENOENT
 *
 *   - A symlink whose target stays beneath the root and is a regular file is followed: it
 *     lists and reads as that file. Every other symlink (out of the root, absolute, to a
 *     directory, dangling) is hidden. Symlinked directories are hidden so that a loop such as
 *     `a -> .` cannot make find or rsync walk forever.
 *   - A followed link is never more readable than its target through the store's own
 *     directories: its bits are the target's ANDed, class by class, with the search (x) bits
 *     of every directory beneath the root that resolving it looks a name up in (link_mask).
 *     `pub/l -> ../private/f`, with private/ 0700 and f 0644:
 *
 *         pub/ 0755 (lets 0777 through) ── l ── .. ──► private/ 0700 (lets 0700) ──► f 0644
 *         l shows 0644 & 0777 & 0700 = 0600: only the mount's uid reads it, as through private/
 *
 *     The root is left out: the mount shows it with dir_mode alone, and every reader passes
 *     it. openat2 stays the authority on where a link leads; the walk by hand, which follows
 *     links itself (at most 40) and never climbs above the root, must reach the same inode,
 *     or the link is hidden.
 *   - stat and listings never leave the root either: entries are fstatat()ed with
 *     AT_SYMLINK_NOFOLLOW relative to a directory fd opened beneath the root, and a symlink
 *     is resolved with openat2(O_PATH) from the root like any other path.
 *   - Only regular files are ever opened for reading. A path is first opened O_PATH (which
 *     opens nothing: a FIFO does not block, a device's driver is not called) and fstat()ed;
 *     only a regular file is then opened O_RDONLY|O_NONBLOCK|O_NOCTTY, and the fd must be
 *     the same inode. FIFOs, sockets and devices are neither listed nor opened.
 *   - Kernels without openat2 (before 5.6, ENOSYS at mount) walk the path one component at
 *     a time with O_NOFOLLOW instead: just as race-free, but no symlink is followed at all.
 *     TIERFS_FILE_NO_OPENAT2=1 in the environment forces this walk (for tests).
 *
 * Each entry also carries the store's permission bits (bk_meta.perm): fs/ never shows a mode
 * wider than them.
 *
 * Writes (filewrite.c) go through a temporary file beside the name, ".tierfs-tmp-*": such
 * names are neither listed, nor found by stat, nor opened here, so no reader ever sees an
 * object before it is whole.
 *
 * Locking: none; the struct is read-only after file_init (its writer has its own lock).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "file_i.h"
#include "io.h"
#include "scheme.h"

struct job {
	struct backend *b;
	char *path;
	char etag[BK_ETAG_MAX];
	uint64_t off;
	uint32_t len;
	void *dst;
	bk_done_fn done;
	void *arg;
};

static void file_free(struct backend *b)
{
	struct file *f = b->priv;

	if (!f)
		return;
	file_write_free(f);
	if (f->rootfd >= 0)
		close(f->rootfd);
	free(f->root);
	free(f);
}

void file_meta_from_stat(const struct stat *st, struct bk_meta *m)
{
	memset(m, 0, sizeof(*m));
	m->size = (uint64_t)st->st_size;
	m->mtime = st->st_mtim.tv_sec;
	m->mtime_ns = (uint32_t)st->st_mtim.tv_nsec;
	/* the version: what identifies this file's bytes, stable across processes and
	 * mounts (tierfs keys cached blocks by it): device, inode, size, mtime in ns */
	snprintf(m->etag, sizeof(m->etag), "\"%llx-%llx-%llx-%llx\"",
		 (unsigned long long)st->st_dev, (unsigned long long)st->st_ino,
		 (unsigned long long)st->st_size,
		 (unsigned long long)st->st_mtim.tv_sec * 1000000000ULL +
		     (unsigned long long)st->st_mtim.tv_nsec);
	m->have_perm = true;
	m->perm = st->st_mode & 0777;
}

static const char *rel(const char *path)
{
	return path[0] ? path : ".";
}

/* An attempt to leave the root, or a link loop: to the caller, nothing is there. */
static int hide(int e)
{
	return e == -EXDEV || e == -ELOOP ? -ENOENT : e;
}

static int sys_openat2(int dirfd, const char *path, int flags, unsigned long long resolve)
{
	/* openat2 refuses O_NOCTTY (and any flag but O_DIRECTORY, O_NOFOLLOW) with O_PATH */
	struct open_how how = {
	    .flags = (unsigned long long)(flags | O_CLOEXEC | (flags & O_PATH ? 0 : O_NOCTTY)),
	    .resolve = resolve,
	};

	return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

/* Without openat2: each component opened with O_NOFOLLOW from the one before, so neither a
 * symlink nor ".." can lead out. @return an fd or -errno. */
static int walk_open(const struct file *f, const char *path, int flags)
{
	const char *p = path;
	int cur = f->rootfd, fd;

	flags |= flags & O_PATH ? 0 : O_NOCTTY;
	if (!path[0]) {
		fd = openat(f->rootfd, ".", flags | O_CLOEXEC);
		return fd < 0 ? -errno : fd;
	}
	for (;;) {
		size_t n = strcspn(p, "/");
		char name[256];
		bool last = p[n] == '\0';

		if (n == 0 || n >= sizeof(name) || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.')) {
			fd = -ENOENT;
			break;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		fd = openat(cur, name,
			    (last ? flags : O_PATH | O_DIRECTORY) | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			fd = -errno;
		if (cur != f->rootfd)
			close(cur);
		if (fd < 0 || last)
			break;
		cur = fd;
		p += n + 1;
	}
	return hide(fd);
}

int file_open_beneath(const struct file *f, const char *path, int flags)
{
	int fd;

	if (f->walk)
		return walk_open(f, path, flags);
	fd = sys_openat2(f->rootfd, rel(path), flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
	return fd < 0 ? hide(-errno) : fd;
}

int file_open_dir(const struct file *f, const char *path)
{
	int fd, flags = O_RDONLY | O_DIRECTORY;

	if (f->walk)
		return walk_open(f, path, flags);
	fd = sys_openat2(f->rootfd, rel(path), flags,
			 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
	return fd < 0 ? hide(-errno) : fd;
}

/* Is the last segment of @path a temporary file's name (filewrite.c), never shown? */
static bool temporary(const char *path)
{
	const char *slash = strrchr(path, '/');

	return upload_reserved_name(slash ? slash + 1 : path);
}

/* What @path is, resolved beneath the root (a followed symlink gives its target). Opens
 * nothing but an O_PATH fd. @return 0 or -errno. */
static int stat_beneath(const struct file *f, const char *path, struct stat *ret)
{
	int fd = file_open_beneath(f, path, O_PATH);
	int e = 0;

	if (fd < 0)
		return fd;
	if (fstat(fd, ret) < 0)
		e = -errno;
	close(fd);
	return e;
}

/* Open regular file @path for reading, and only a regular file. @return an fd and *ret_st,
 * -ENOENT (not there, or not a regular file), -ESTALE (replaced between the two opens). */
static int open_regular(const struct file *f, const char *path, struct stat *ret_st)
{
	struct stat ps, st;
	int e, fd;

	if (temporary(path))
		return -ENOENT;
	e = stat_beneath(f, path, &ps);
	if (e < 0)
		return e;
	if (!S_ISREG(ps.st_mode))
		return S_ISDIR(ps.st_mode) ? -EISDIR : -ENOENT;
	fd = file_open_beneath(f, path, O_RDONLY | O_NONBLOCK);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		e = -errno;
		close(fd);
		return e;
	}
	if (!S_ISREG(st.st_mode) || st.st_dev != ps.st_dev || st.st_ino != ps.st_ino) {
		close(fd);
		return -ESTALE;
	}
	*ret_st = st;
	return fd;
}

/* ---- what a link may show -------------------------------------------------------------- */

/* The bits of each class (owner, group, other) that a directory lets through: all of the
 * class's bits if the class may search it (x), none otherwise. Opening a file by name needs
 * search permission on every directory on the way, never read permission. */
static uint32_t search_mask(mode_t dir)
{
	return (dir & S_IXUSR ? 0700u : 0) | (dir & S_IXGRP ? 0070u : 0) |
	       (dir & S_IXOTH ? 0007u : 0);
}

/* A path being resolved by hand (link_mask): the directory reached so far and what is left. */
struct reach {
	int dfd;             /* that directory: f->rootfd, or an O_PATH fd of our own */
	mode_t dmode;        /* its mode (unused for the root) */
	char dir[PATH_MAX];  /* its path from the root, "" for the root, with no link in it */
	char todo[PATH_MAX]; /* what is left to resolve, '/'-separated */
	int hops;            /* links followed so far */
};

/* Stand in directory @fd (ours now, closed on failure). @return 0 or -errno. */
static int reach_enter(const struct file *f, struct reach *r, int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode)) {
		close(fd);
		return -ENOENT;
	}
	if (r->dfd != f->rootfd)
		close(r->dfd);
	r->dfd = fd;
	r->dmode = st.st_mode;
	return 0;
}

/* Step up to the parent directory, never above the root (-EXDEV). It is opened again from
 * the root by r->dir, which holds no link. @return 0 or -errno. */
static int reach_up(const struct file *f, struct reach *r)
{
	char *slash = strrchr(r->dir, '/');
	int fd;

	if (!r->dir[0])
		return -EXDEV;
	*(slash ? slash : r->dir) = '\0';
	if (!r->dir[0]) {
		if (r->dfd != f->rootfd)
			close(r->dfd);
		r->dfd = f->rootfd;
		return 0;
	}
	fd = walk_open(f, r->dir, O_PATH | O_DIRECTORY);
	return fd < 0 ? fd : reach_enter(f, r, fd);
}

/* @name, in the directory reached, is a link: what is left becomes its target, then @rest.
 * An absolute target leaves the root (-EXDEV); more than 40 links is a loop (-ELOOP). */
static int reach_link(struct reach *r, const char *name, const char *rest)
{
	char target[PATH_MAX], todo[PATH_MAX];
	ssize_t n;

	if (++r->hops > 40)
		return -ELOOP;
	n = readlinkat(r->dfd, name, target, sizeof(target) - 1);
	if (n <= 0)
		return n < 0 ? -errno : -ENOENT;
	target[n] = '\0';
	if (target[0] == '/')
		return -EXDEV;
	if ((size_t)snprintf(todo, sizeof(todo), "%s%s%s", target, rest[0] ? "/" : "", rest) >=
	    sizeof(todo))
		return -ENAMETOOLONG;
	memcpy(r->todo, todo, sizeof(todo));
	return 0;
}

/* Look @name up in the directory reached (@rest is what follows it), as the kernel's path
 * walk does, and AND *@mask with that directory's search bits. @return 1 and *ret_st when
 * @name was the last component and not a link, 0 to go on, or -errno. */
static int reach_step(const struct file *f, struct reach *r, const char *name, const char *rest,
		      uint32_t *mask, struct stat *ret_st)
{
	struct stat st;
	int e = 0, fd;

	if (r->dir[0])
		*mask &= search_mask(r->dmode);
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
		if (!rest[0])
			return -EISDIR;
		e = name[1] ? reach_up(f, r) : 0;
	} else if (fstatat(r->dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		return -errno;
	} else if (S_ISLNK(st.st_mode)) {
		return reach_link(r, name, rest);
	} else if (!rest[0]) {
		*ret_st = st;
		return 1;
	} else if (!S_ISDIR(st.st_mode)) {
		return -ENOTDIR;
	} else if (strlen(r->dir) + 1 + strlen(name) >= sizeof(r->dir)) {
		return -ENAMETOOLONG;
	} else if ((fd = openat(r->dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		return -errno;
	} else if ((e = reach_enter(f, r, fd)) == 0) {
		if (r->dir[0])
			strcat(r->dir, "/");
		strcat(r->dir, name);
	}
	if (e == 0)
		memmove(r->todo, rest, strlen(rest) + 1);
	return e;
}

/*
 * The link @path resolved, by openat2, to the regular file @st. Resolve it again by hand,
 * component by component and link by link, ANDing the search bits (search_mask) of every
 * directory beneath the root in which a name is looked up: the directory of the link, those
 * its target passes through (".." included) and the target's own. The root is left out, as
 * the mount shows it with dir_mode alone. The bits the link may show are the target's ANDed
 * with that mask, so a link is never more readable than its target through the store's
 * directories (a file in a 0700 directory gives a link 0600 at most).
 * @return 0 and *ret_mask, or -ENOENT (the hand walk failed, or found another inode: the
 * store changed in between; the link is hidden until the next look).
 */
static int link_mask(const struct file *f, const char *path, const struct stat *st,
		     uint32_t *ret_mask)
{
	struct reach *r = malloc(sizeof(*r));
	struct stat got = {0};
	uint32_t mask = 0777;
	int e = 0;

	if (!r)
		return -ENOMEM;
	*r = (struct reach){.dfd = f->rootfd};
	if ((size_t)snprintf(r->todo, sizeof(r->todo), "%s", path) >= sizeof(r->todo))
		e = -ENAMETOOLONG;
	while (e == 0) {
		char name[NAME_MAX + 1];
		const char *p = r->todo + strspn(r->todo, "/"), *rest;
		size_t n = strcspn(p, "/");

		rest = p + n + strspn(p + n, "/");
		if (n == 0 || n > NAME_MAX) {
			e = -ENOENT;
			break;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		e = reach_step(f, r, name, rest, &mask, &got);
	}
	if (r->dfd != f->rootfd)
		close(r->dfd);
	free(r);
	if (e != 1 || got.st_dev != st->st_dev || got.st_ino != st->st_ino)
		return -ENOENT;
	*ret_mask = mask;
	return 0;
}

/* Resolve the link @path beneath the root: only a regular file counts. @return 0, *ret_st
 * (the target) and *ret_mask (what link_mask lets it show), or -errno. */
static int stat_link(const struct file *f, const char *path, struct stat *ret_st,
		     uint32_t *ret_mask)
{
	struct stat st;
	int e = stat_beneath(f, path, &st);

	if (e == 0 && !S_ISREG(st.st_mode))
		e = -ENOENT;
	if (e == 0)
		e = link_mask(f, path, &st, ret_mask);
	if (e == 0)
		*ret_st = st;
	return e;
}

/* ---- the operations --------------------------------------------------------------------- */

/* What a lookup by name sees, by the listing's rule (list_one): a symlink counts only when
 * its target is a regular file beneath the root, with the bits link_mask lets it show; one to
 * a directory stays hidden, so a name asked for directly never brings back what the listing
 * hides. */
static int file_stat(struct backend *b, const char *path, struct bk_meta *ret)
{
	struct file *f = b->priv;
	struct stat st;
	uint32_t mask = 0777;
	int e, fd;

	if (temporary(path))
		return -ENOENT;
	fd = file_open_beneath(f, path, O_PATH | O_NOFOLLOW);
	if (fd < 0)
		return fd;
	e = fstat(fd, &st) < 0 ? -errno : 0;
	close(fd);
	if (e == 0 && S_ISLNK(st.st_mode))
		e = stat_link(f, path, &st, &mask);
	if (e < 0)
		return e;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode))
		return -ENOENT; /* a FIFO, socket or device: never served */
	file_meta_from_stat(&st, ret);
	ret->perm &= mask;
	return 0;
}

/* One directory entry: a regular file, a directory, or a symlink to a regular file beneath
 * the root. @return what fn returned, or 0 for an entry that is skipped. */
static int list_one(struct file *f, int dfd, const char *dir, const char *name, bk_list_fn fn,
		    void *arg)
{
	struct stat st;
	struct bk_meta m;
	uint32_t mask = 0777;

	if (upload_reserved_name(name))
		return 0; /* an upload's temporary file */
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0; /* vanished */
	if (S_ISLNK(st.st_mode)) {
		char *path;
		int e;

		if (asprintf(&path, "%s%s%s", dir, dir[0] ? "/" : "", name) < 0)
			return -ENOMEM;
		e = stat_link(f, path, &st, &mask);
		free(path);
		if (e == -ENOMEM)
			return e;
		if (e < 0)
			return 0; /* out of the root, dangling, or not a regular file: hidden */
	}
	file_meta_from_stat(&st, &m);
	m.perm &= mask;
	if (S_ISDIR(st.st_mode)) {
		m.size = 0;
		m.etag[0] = '\0';
		return fn(arg, name, true, &m);
	}
	if (S_ISREG(st.st_mode))
		return fn(arg, name, false, &m);
	return 0; /* FIFO, socket, device */
}

static int file_list(struct backend *b, const char *dir, bk_list_fn fn, void *arg)
{
	struct file *f = b->priv;
	int fd = file_open_beneath(f, dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK);
	struct dirent *de;
	DIR *d;
	int e = 0;

	if (fd < 0)
		return fd;
	d = fdopendir(fd);
	if (!d) {
		e = -errno;
		close(fd);
		return e;
	}
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		e = list_one(f, dirfd(d), dir, de->d_name, fn, arg);
		if (e < 0)
			break;
	}
	closedir(d);
	return e;
}

static void run_job(void *arg)
{
	struct job *j = arg;
	struct file *f = j->b->priv;
	struct stat st;
	struct bk_meta m;
	uint32_t got = 0;
	int e = 0;
	uint64_t t0 = io_now_ns(j->b->io);
	int fd = open_regular(f, j->path, &st);

	if (fd < 0) {
		e = fd;
		goto out;
	}
	file_meta_from_stat(&st, &m);
	if (j->etag[0] && strcmp(j->etag, m.etag) != 0) {
		e = -ESTALE;
		goto out;
	}
	while (got < j->len) {
		ssize_t n = pread(fd, (char *)j->dst + got, j->len - got, (off_t)(j->off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			e = -errno;
			break;
		}
		if (n == 0) {
			e = -ESTALE; /* shorter than the version we know */
			break;
		}
		got += (uint32_t)n;
	}
out:
	if (fd >= 0)
		close(fd);
	io_account(j->b->io, e ? 0 : j->len, e != 0, t0);
	if (e && e != -ENOENT && j->b->log) {
		char line[512];

		snprintf(line, sizeof(line), "read %s/%s: %s", f->root, j->path, strerror(-e));
		j->b->log(j->b->log_arg, 1, line);
	}
	j->done(j->arg, e);
	free(j->path);
	free(j);
}

static int file_read(struct backend *b, const char *path, const char *etag, uint64_t off,
		     uint32_t len, void *dst, enum bk_prio prio, bk_done_fn done, void *arg)
{
	struct job *j = calloc(1, sizeof(*j));
	int e;

	if (!j || !(j->path = strdup(rel(path)))) {
		free(j);
		return -ENOMEM;
	}
	j->b = b;
	snprintf(j->etag, sizeof(j->etag), "%s", etag ? etag : "");
	j->off = off;
	j->len = len;
	j->dst = dst;
	j->done = done;
	j->arg = arg;
	e = io_defer(b->io, 0, run_job, j);
	if (e < 0) {
		free(j->path);
		free(j);
	}
	return e;
}

static int file_check(struct backend *b, char *err, size_t errlen)
{
	struct file *f = b->priv;
	int fd = file_open_beneath(f, "", O_RDONLY | O_DIRECTORY);

	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", f->root, strerror(-fd));
		return fd;
	}
	close(fd);
	return 0;
}

static int file_space(struct backend *b, struct statvfs *ret)
{
	struct file *f = b->priv;

	return fstatvfs(f->rootfd, ret) < 0 ? -errno : 0;
}

static const struct bk_ops file_ops = {
    .check = file_check,
    .stat = file_stat,
    .list = file_list,
    .read = file_read,
    .free = file_free,
    .space = file_space,
    .start = file_write_start,
    .stop = file_write_stop,
    .min_part = 1,
    .max_parts = UINT32_MAX,
    .hold_first = false,
    .upload_init = file_upload_init,
    .upload_part = file_upload_part,
    .upload_commit = file_upload_commit,
    .upload_abort = file_upload_abort,
    .unlink = file_unlink,
    .rename = file_rename,
    .mkdir = file_mkdir,
};

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int file_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen)
{
	struct file *f = calloc(1, sizeof(*f));
	const char *p = cfg->url + 7;
	struct io_cfg ioc;
	size_t n = 0;
	int e;

	if (!f)
		return -ENOMEM;
	f->rootfd = -1;
	b->priv = f;
	b->ops = &file_ops;
	b->scheme = "file";
	if (strncmp(p, "localhost/", 10) == 0)
		p += 9;
	if (*p != '/') {
		snprintf(err, errlen, "URL %s: expected file:///absolute/path", cfg->url);
		e = -EINVAL;
		goto fail;
	}
	f->root = malloc(strlen(p) + 1);
	if (!f->root) {
		e = -ENOMEM;
		goto fail;
	}
	for (; *p; p++) {
		if (*p == '%' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
			f->root[n++] = (char)(hexval(p[1]) * 16 + hexval(p[2]));
			p += 2;
		} else {
			f->root[n++] = *p;
		}
	}
	while (n > 1 && f->root[n - 1] == '/')
		n--;
	f->root[n] = '\0';
	f->rootfd = open(f->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (f->rootfd < 0) {
		e = -errno;
		snprintf(err, errlen, "%s: %s", f->root, strerror(-e));
		goto fail;
	}
	/* ask the kernel once whether it has openat2 */
	e = sys_openat2(f->rootfd, ".", O_PATH, RESOLVE_BENEATH);
	if (e >= 0)
		close(e);
	f->walk = (e < 0 && errno == ENOSYS) || (getenv("TIERFS_FILE_NO_OPENAT2") &&
						 !strcmp(getenv("TIERFS_FILE_NO_OPENAT2"), "1"));
	ioc = io_cfg_from(cfg);
	b->io = io_new(&ioc);
	if (!b->io) {
		e = -ENOMEM;
		goto fail;
	}
	return 0;
fail:
	file_free(b);
	b->priv = NULL;
	return e;
}
