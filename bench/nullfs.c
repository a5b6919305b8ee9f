/*
 * nullfs - the FUSE ceiling for scripts/bench: a read-only filesystem that serves bytes from
 * memory, mounted with the same flags as tierfs, so that "tierfs / nullfs" is the fraction of
 * what FUSE itself allows that tierfs reaches.
 *
 *   nullfs MOUNTPOINT NAME=SIZE [NAME=SIZE ...] [-f] [-s] [-o FUSE options]
 *
 * Every file is a view of one arena (as large as the largest file, filled with a pattern and
 * faulted in at start, as tierfs faults in its cache): a read is answered with fuse_reply_buf
 * pointing into it, one copy from memory into the kernel, as tierfs answers a cache hit.
 *
 * The same flags as tierfs (fs/ops.c): FUSE low level, the multi-threaded loop with up to 16
 * workers, max_write and max_readahead of 1 MiB in init (max_write sets max_pages, which bounds
 * reads), FUSE_CAP_ASYNC_READ, read_ahead_kb of the mount's bdi raised to 1024 after mounting
 * (device number from /proc/self/mountinfo), and keep_cache: the objects never change, so the
 * page cache is kept across opens (tierfs keeps it while an object's version is unchanged).
 * O_DIRECT opens work as on tierfs (the kernel sends reads straight through).
 *
 * With -w DIR it is also the write ceiling: a file created at the root is a file of DIR, and
 * each write request is one pwrite() of the request's buffer into it (libfuse has already
 * copied it from the kernel, as it has for tierfs); the opener's close (FLUSH) fsyncs it, and
 * RELEASE closes it. That is what a local file with fsync costs, plus what FUSE costs: tierfs's
 * file:// write path does the same work (a temporary file, fsync, a rename) with its own
 * copies and bookkeeping on top. Written files are listed by lookup and getattr, not readdir.
 */
#define FUSE_USE_VERSION 314
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"

#define MAX_REQUEST (1u << 20)
#define MAX_FILES 256

struct nfile {
	char *name;
	uint64_t size;
};

static struct nfile files[MAX_FILES];
static size_t nfiles;
static unsigned char *arena;

/* -w DIR: files written through the mount, inodes WINO0 + slot; names guarded by wlock */
#define WINO0 (MAX_FILES + 2)
static int wdir = -1;
static char *wnames[MAX_FILES];
static pthread_mutex_t wlock = PTHREAD_MUTEX_INITIALIZER;

/* The slot of written file @name, made if @make. @return its inode, or 0. */
static fuse_ino_t wslot(const char *name, bool make)
{
	fuse_ino_t ino = 0;

	pthread_mutex_lock(&wlock);
	for (size_t i = 0; i < MAX_FILES && !ino; i++)
		if (wnames[i] && strcmp(wnames[i], name) == 0)
			ino = WINO0 + i;
	for (size_t i = 0; i < MAX_FILES && !ino && make; i++)
		if (!wnames[i] && (wnames[i] = strdup(name)))
			ino = WINO0 + i;
	pthread_mutex_unlock(&wlock);
	return ino;
}

/* The attributes of written inode @ino. @return 0 or -errno. */
static int wstat(fuse_ino_t ino, struct stat *st)
{
	const char *name = ino >= WINO0 && ino - WINO0 < MAX_FILES ? wnames[ino - WINO0] : NULL;

	if (!name || fstatat(wdir, name, st, 0) < 0)
		return -ENOENT;
	st->st_ino = ino;
	return 0;
}

/* inode 1 is the root, file i is inode i + 2 */
static struct nfile *file_of(fuse_ino_t ino)
{
	return ino >= 2 && ino - 2 < nfiles ? &files[ino - 2] : NULL;
}

static void fill_stat(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = getuid();
	st->st_gid = getgid();
	if (ino == 1) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)file_of(ino)->size;
		st->st_blocks = (blkcnt_t)((file_of(ino)->size + 511) / 512);
	}
	st->st_blksize = 4 << 20;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	conn->max_write = MAX_REQUEST;
	conn->max_readahead = MAX_REQUEST;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = {0};

	e.attr_timeout = 60;
	e.entry_timeout = 60;
	if (parent == 1) {
		for (size_t i = 0; i < nfiles; i++) {
			if (strcmp(files[i].name, name) == 0) {
				e.ino = i + 2;
				fill_stat(e.ino, &e.attr);
				fuse_reply_entry(req, &e);
				return;
			}
		}
	}
	if (parent == 1 && wdir >= 0 && (e.ino = wslot(name, false)) && wstat(e.ino, &e.attr) == 0) {
		e.attr_timeout = e.entry_timeout = 0; /* it grows while written */
		fuse_reply_entry(req, &e);
		return;
	}
	e.ino = 0; /* negative entry */
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	if (ino >= WINO0) {
		if (wstat(ino, &st) < 0)
			fuse_reply_err(req, ENOENT);
		else
			fuse_reply_attr(req, &st, 0);
		return;
	}
	if (ino != 1 && !file_of(ino)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill_stat(ino, &st);
	fuse_reply_attr(req, &st, 60);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino >= WINO0) { /* a written file opened again: for writing from 0 only */
		int fd = -1;

		pthread_mutex_lock(&wlock);
		if (wnames[ino - WINO0])
			fd = openat(wdir, wnames[ino - WINO0],
				    (fi->flags & (O_ACCMODE | O_TRUNC)) | O_CLOEXEC);
		pthread_mutex_unlock(&wlock);
		if (fd < 0) {
			fuse_reply_err(req, errno);
			return;
		}
		fi->fh = (uint64_t)fd;
		fuse_reply_open(req, fi);
		return;
	}
	if (!file_of(ino)) {
		fuse_reply_err(req, ino == 1 ? EISDIR : ENOENT);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fi->keep_cache = 1; /* never changes: what tierfs does for an unchanged version */
	fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct nfile *f = file_of(ino);
	uint64_t n;

	if (!f || off < 0) {
		fuse_reply_err(req, f ? EINVAL : ENOENT);
		return;
	}
	n = (uint64_t)off >= f->size ? 0 : f->size - (uint64_t)off;
	if (n > size)
		n = size;
	fuse_reply_buf(req, n ? (const char *)arena + off : NULL, n);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino >= WINO0)
		close((int)fi->fh);
	fuse_reply_err(req, 0);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct fuse_entry_param e = {0};
	int fd;

	if (parent != 1 || wdir < 0) {
		fuse_reply_err(req, EROFS);
		return;
	}
	e.ino = wslot(name, true);
	fd = e.ino ? openat(wdir, name, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644) : -1;
	if (fd < 0 || wstat(e.ino, &e.attr) < 0) {
		if (fd >= 0)
			close(fd);
		fuse_reply_err(req, e.ino ? EIO : ENOSPC);
		return;
	}
	fi->fh = (uint64_t)fd;
	fuse_reply_create(req, &e, fi);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	ssize_t n = ino >= WINO0 ? pwrite((int)fi->fh, buf, size, off) : -1;

	if (n < 0)
		fuse_reply_err(req, ino >= WINO0 ? errno : EBADF);
	else
		fuse_reply_write(req, (size_t)n);
}

/* The opener's close, as tierfs commits there: durable before close() returns. */
static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, ino >= WINO0 && fsync((int)fi->fh) < 0 ? errno : 0);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, parent == 1 && wdir >= 0 && wslot(name, false) &&
				    unlinkat(wdir, name, 0) == 0
			    ? 0
			    : ENOENT);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	char *buf;
	size_t used = 0;

	if (ino != 1) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (size_t i = (size_t)off; i < nfiles + 2; i++) {
		struct stat st = {0};
		const char *name = i == 0 ? "." : i == 1 ? ".." : files[i - 2].name;
		size_t n;

		st.st_ino = i < 2 ? 1 : i;
		st.st_mode = i < 2 ? S_IFDIR : S_IFREG;
		n = fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)(i + 1));
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv = {0};

	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_namemax = 255;
	sv.f_flag = wdir >= 0 ? 0 : ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.open = op_open,
	.read = op_read,
	.release = op_release,
	.create = op_create,
	.write = op_write,
	.flush = op_flush,
	.unlink = op_unlink,
	.readdir = op_readdir,
	.statfs = op_statfs,
};


static int parse_size(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'K': case 'k': v <<= 10; end++; break;
	case 'M': case 'm': v <<= 20; end++; break;
	case 'G': case 'g': v <<= 30; end++; break;
	default: break;
	}
	if (end == s || *end)
		return -1;
	*ret = v;
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: nullfs MOUNTPOINT NAME=SIZE [NAME=SIZE ...] [-w DIR] [-f] [-s] "
			"[-o OPTS]\n");
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	const char *mnt = NULL, *fuse_opts = NULL;
	char mntabs[PATH_MAX];
	bool fg = false, single = false;
	uint64_t max = 0;
	struct fuse_session *se;
	struct fuse_loop_config *lc = NULL;
	int r = 1;

	for (int i = 1; i < argc; i++) {
		char *eq;

		if (strcmp(argv[i], "-f") == 0) {
			fg = true;
		} else if (strcmp(argv[i], "-s") == 0) {
			single = true;
		} else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
			fuse_opts = argv[++i];
		} else if (strcmp(argv[i], "-w") == 0 && i + 1 < argc) {
			wdir = open(argv[++i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (wdir < 0) {
				perror(argv[i]);
				return 1;
			}
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			usage();
			return 0;
		} else if (!mnt) {
			mnt = argv[i];
		} else if ((eq = strchr(argv[i], '=')) && nfiles < MAX_FILES) {
			*eq = '\0';
			files[nfiles].name = argv[i];
			if (!*argv[i] || strchr(argv[i], '/') || parse_size(eq + 1, &files[nfiles].size)) {
				usage();
				return 2;
			}
			if (files[nfiles].size > max)
				max = files[nfiles].size;
			nfiles++;
		} else {
			usage();
			return 2;
		}
	}
	if (!mnt || !nfiles) {
		usage();
		return 2;
	}
	if (!realpath(mnt, mntabs)) {
		perror(mnt);
		return 1;
	}
	/* the arena: a pattern, faulted in now (as tierfs faults in its cache at mount) */
	arena = mmap(NULL, max ? max : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		     0);
	if (arena == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	madvise(arena, max, MADV_HUGEPAGE);
	for (uint64_t i = 0; i < max; i += 8) {
		uint64_t v = i * 0x9E3779B97F4A7C15ull;

		memcpy(arena + i, &v, max - i < 8 ? max - i : 8);
	}

	if (fuse_opt_add_arg(&args, "nullfs") < 0 || fuse_opt_add_arg(&args, "-o") < 0 ||
	    fuse_opt_add_arg(&args, "fsname=nullfs,subtype=nullfs") < 0 ||
	    (fuse_opts && (fuse_opt_add_arg(&args, "-o") < 0 ||
			   fuse_opt_add_arg(&args, fuse_opts) < 0)))
		return 1;
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se)
		return 1;
	if (fuse_set_signal_handlers(se) < 0)
		goto destroy;
	if (fuse_session_mount(se, mntabs) < 0)
		goto handlers;
	/* the very code tierfs uses, so both mounts get the same kernel requests */
	if (fs_tune_readahead(mntabs, MAX_REQUEST / 1024) < 0)
		fprintf(stderr, "nullfs: cannot raise read_ahead_kb (not root?)\n");
	if (fuse_daemonize(fg) < 0)
		goto unmount;
	if (single) {
		r = fuse_session_loop(se);
	} else {
		lc = fuse_loop_cfg_create();
		if (!lc)
			goto unmount;
		fuse_loop_cfg_set_max_threads(lc, 16);
		r = fuse_session_loop_mt(se, lc);
		fuse_loop_cfg_destroy(lc);
	}
	r = r < 0 ? 1 : 0;
unmount:
	fuse_session_unmount(se);
handlers:
	fuse_remove_signal_handlers(se);
destroy:
	fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	return r;
}
