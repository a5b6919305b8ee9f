/*
 * abortshim.c - an LD_PRELOAD shim for test_faults.py: a read of /dev/fuse that fails with
 * ENODEV (the mount went away) fails with ECONNABORTED instead.
 *
 * That is what the kernel answers a worker whose read took a request off the device while the
 * unmount was tearing the connection down (fuse_abort_conn disconnects the processing queue
 * before the input queue; seen after a lazy unmount, when closing the last file queues a
 * RELEASE as the superblock goes). The race is rare; the shim makes its outcome certain, so a
 * test can check that tierfs still counts the unmount as a clean end. Only the failing read
 * pays for the readlink; every other call goes straight to libc.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static bool is_fuse_dev(int fd)
{
	char link[64], path[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return false;
	path[n] = '\0';
	return !strcmp(path, "/dev/fuse");
}

ssize_t read(int fd, void *buf, size_t len)
{
	static ssize_t (*real)(int, void *, size_t);
	ssize_t n;

	if (!real)
		real = (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
	n = real(fd, buf, len);
	if (n < 0 && errno == ENODEV && is_fuse_dev(fd))
		errno = ECONNABORTED;
	return n;
}
