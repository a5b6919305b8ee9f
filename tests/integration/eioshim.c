/*
 * eioshim.c - an LD_PRELOAD shim that makes the disk tier's segment files return EIO, for
 * test_disk.py (this kernel has no device-mapper, so no dm-error or dm-flakey target), and the
 * file:// store's upload temporary files, for test_upload_backend.py.
 *
 * The file named by $TIERFS_EIO_CTL says what fails, read at every call so a test can change
 * it while the mount runs: a line with "read" fails pread64/preadv64, one with "write" fails
 * pwritev64, on files named seg-*.tfs only (the fd's path, from /proc/self/fd); a line with
 * "upload-pwrite" fails pwrite64, one with "upload-fsync" fsync, on files named
 * .tierfs-tmp-* only. Everything else, and every call while the file is empty or missing,
 * goes to libc. Not for production: a readlink and a small read per call.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

/* Does the control file ask @what ("read", "write") to fail? */
static bool wanted(const char *what)
{
	const char *ctl = getenv("TIERFS_EIO_CTL");
	char buf[64];
	ssize_t n;
	int fd;

	if (!ctl)
		return false;
	fd = open(ctl, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return strstr(buf, what) != NULL;
}

/* The last segment of @fd's path, into @buf. */
static const char *base_of(int fd, char *buf, size_t size)
{
	char link[64];
	const char *base;
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, buf, size - 1);
	if (n <= 0)
		return "";
	buf[n] = '\0';
	base = strrchr(buf, '/');
	return base ? base + 1 : buf;
}

static bool is_segment(int fd)
{
	char path[4096];
	const char *base = base_of(fd, path, sizeof(path));
	size_t n = strlen(base);

	return !strncmp(base, "seg-", 4) && n > 4 && !strcmp(base + n - 4, ".tfs");
}

static bool is_upload_tmp(int fd)
{
	char path[4096];

	return !strncmp(base_of(fd, path, sizeof(path)), ".tierfs-tmp-", 12);
}

static bool fail(int fd, const char *what)
{
	if (!wanted(what) || !is_segment(fd))
		return false;
	errno = EIO;
	return true;
}

static bool fail_upload(int fd, const char *what)
{
	if (!wanted(what) || !is_upload_tmp(fd))
		return false;
	errno = EIO;
	return true;
}

ssize_t pread64(int fd, void *buf, size_t len, off_t off)
{
	static ssize_t (*real)(int, void *, size_t, off_t);

	if (!real)
		real = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread64");
	if (fail(fd, "read"))
		return -1;
	return real(fd, buf, len, off);
}

ssize_t preadv64(int fd, const struct iovec *iov, int n, off_t off)
{
	static ssize_t (*real)(int, const struct iovec *, int, off_t);

	if (!real)
		real = (ssize_t (*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT,
										  "preadv64");
	if (fail(fd, "read"))
		return -1;
	return real(fd, iov, n, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int n, off_t off)
{
	static ssize_t (*real)(int, const struct iovec *, int, off_t);

	if (!real)
		real = (ssize_t (*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT,
										  "pwritev64");
	if (fail(fd, "write"))
		return -1;
	return real(fd, iov, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
{
	static ssize_t (*real)(int, const void *, size_t, off_t);

	if (!real)
		real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
	if (fail_upload(fd, "upload-pwrite"))
		return -1;
	return real(fd, buf, len, off);
}

int fsync(int fd)
{
	static int (*real)(int);

	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	if (fail_upload(fd, "upload-fsync"))
		return -1;
	return real(fd);
}
