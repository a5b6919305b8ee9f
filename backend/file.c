/*
 * file.c - file:///dir: a local directory as the object store.
 *
 * The quickest way to try tierfs, and the demo's default. Objects are the regular files under
 * the directory (symbolic links followed); their ETag is made from what identifies the file's
 * bytes, "dev-inode-size-mtime_ns" in hex. Reads run as jobs on the backend's I/O
 * thread (pread from the page cache is fast, and it keeps FUSE workers off the disk), and
 * check the ETag first, so a file replaced under an open handle gives -ESTALE, never a mix.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend_i.h"

struct file {
	char *root; /* absolute directory, no trailing slash */
	int dirfd;  /* open on root */
};

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
	if (f->dirfd >= 0)
		close(f->dirfd);
	free(f->root);
	free(f);
}

static void meta_from_stat(const struct stat *st, struct bk_meta *m)
{
	m->size = (uint64_t)st->st_size;
	m->mtime = st->st_mtim.tv_sec;
	/* the version: what identifies this file's bytes, stable across processes and
	 * mounts (tierfs keys cached blocks by it): device, inode, size, mtime in ns */
	snprintf(m->etag, sizeof(m->etag), "\"%llx-%llx-%llx-%llx\"",
		 (unsigned long long)st->st_dev, (unsigned long long)st->st_ino,
		 (unsigned long long)st->st_size,
		 (unsigned long long)st->st_mtim.tv_sec * 1000000000ULL +
		     (unsigned long long)st->st_mtim.tv_nsec);
}

static const char *rel(const char *path)
{
	return path[0] ? path : ".";
}

static int file_stat(struct backend *b, const char *path, struct bk_meta *ret)
{
	struct file *f = b->priv;
	struct stat st;

	if (fstatat(f->dirfd, rel(path), &st, 0) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode))
		return -ENOENT;
	meta_from_stat(&st, ret);
	return 0;
}

static int file_list(struct backend *b, const char *dir, bk_list_fn fn, void *arg)
{
	struct file *f = b->priv;
	int fd = openat(f->dirfd, rel(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *de;
	DIR *d;
	int e = 0;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		e = -errno;
		close(fd);
		return e;
	}
	while ((de = readdir(d))) {
		struct stat st;
		struct bk_meta m;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, 0) < 0)
			continue; /* vanished, or a dangling link */
		if (S_ISDIR(st.st_mode)) {
			e = fn(arg, de->d_name, true, NULL);
		} else if (S_ISREG(st.st_mode)) {
			meta_from_stat(&st, &m);
			e = fn(arg, de->d_name, false, &m);
		}
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
	int fd = openat(f->dirfd, j->path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		e = -errno;
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		e = -errno;
		goto out;
	}
	meta_from_stat(&st, &m);
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
	io_account(j->b->io, e ? 0 : j->len, e != 0);
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
		     uint32_t len, void *dst, bool lagging, bk_done_fn done, void *arg)
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
	DIR *d = opendir(f->root);

	if (!d) {
		int e = -errno;

		snprintf(err, errlen, "%s: %s", f->root, strerror(-e));
		return e;
	}
	closedir(d);
	return 0;
}

static const struct bk_ops file_ops = {
    .check = file_check,
    .stat = file_stat,
    .list = file_list,
    .read = file_read,
    .free = file_free,
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
	f->dirfd = -1;
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
	f->dirfd = open(f->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (f->dirfd < 0) {
		e = -errno;
		snprintf(err, errlen, "%s: %s", f->root, strerror(-e));
		goto fail;
	}
	ioc = backend_io_cfg(cfg);
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
