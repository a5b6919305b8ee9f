/*
 * device.c - the mount's reads and writes of /dev/fuse, and the one thing they change.
 *
 * Lookups and readdir of one directory run in parallel in the kernel only when the filesystem
 * answers FUSE_INIT with FUSE_PARALLEL_DIROPS. Without it the kernel holds a mutex of the
 * directory's inode across every LOOKUP and READDIR it sends (fuse_lock_inode), waiting for it
 * uninterruptibly: one lookup parked on a hung store then holds every other lookup of that
 * directory, `ls` of it, and (in the root) the control directory's name behind it, and no
 * signal but the end of the mount frees them. libfuse 3.14.0 takes FUSE_CAP_PARALLEL_DIROPS
 * in conn->want (it is even on by default) but never puts the flag in its INIT reply (fixed
 * upstream in 3.17.1, "Pass FUSE_PARALLEL_DIROPS to kernel"). So the device is read and
 * written through fuse_session_custom_io, with plain read(2) and writev(2), and the INIT reply
 * gets the flag when the kernel offered it:
 *
 *     kernel ── FUSE_INIT (unique u, flags) ──► dev_read: note u and whether the flag was
 *                                               offered (struct fs_device)
 *     libfuse do_init ── reply u ──► dev_writev: the reply's fuse_init_out.flags |=
 *                                    FUSE_PARALLEL_DIROPS, on a copy of its bytes; every
 *                                    later write goes through untouched
 *
 * Everything tierfs answers from a directory is safe in parallel: ns.c takes its own lock.
 * Splice stays off, as it was: libfuse splices only with a write_buf operation, which tierfs
 * does not have.
 *
 * Locking: the kernel sends nothing but INIT until INIT is answered, so the INIT request and
 * its reply are read and written before any other request; the first other request read
 * ends the watch (`done`). The fields are atomics so that every worker's read of /dev/fuse
 * sees them without a lock.
 *
 * Workload: one compare per request and per reply once the session runs.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <linux/fuse.h>

#include <fuse_lowlevel.h>

#include "fs_fuse.h"

static ssize_t dev_read(int fd, void *buf, size_t len, void *userdata)
{
	struct fs_device *d = &((struct mount *)userdata)->dev;
	ssize_t r = read(fd, buf, len);
	const struct fuse_in_header *in = buf;
	const struct fuse_init_in *init = (const void *)(in + 1);

	if (r < (ssize_t)sizeof(*in) || __atomic_load_n(&d->done, __ATOMIC_ACQUIRE))
		return r;
	if (in->opcode != FUSE_INIT) {
		/* the kernel sends nothing else before INIT is answered: the INIT is over */
		__atomic_store_n(&d->done, true, __ATOMIC_RELEASE);
		return r;
	}
	if (r < (ssize_t)(sizeof(*in) + offsetof(struct fuse_init_in, flags) + sizeof(init->flags)))
		return r;
	__atomic_store_n(&d->offered, (init->flags & FUSE_PARALLEL_DIROPS) != 0, __ATOMIC_RELAXED);
	__atomic_store_n(&d->init_unique, in->unique, __ATOMIC_RELEASE);
	return r;
}

/* The INIT reply, with FUSE_PARALLEL_DIROPS added, written from a copy (libfuse's own bytes are
 * left as they are). @return what writev returns. */
static ssize_t write_init(int fd, const struct iovec *iov)
{
	struct fuse_init_out out;
	struct iovec v[2] = {iov[0], {.iov_base = &out, .iov_len = iov[1].iov_len}};

	memcpy(&out, iov[1].iov_base, iov[1].iov_len);
	out.flags |= FUSE_PARALLEL_DIROPS;
	return writev(fd, v, 2);
}

static ssize_t dev_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct fs_device *d = &((struct mount *)userdata)->dev;
	const struct fuse_out_header *out = iov[0].iov_base;

	if (__atomic_load_n(&d->done, __ATOMIC_ACQUIRE) || count != 2 ||
	    iov[0].iov_len != sizeof(*out) || out->error ||
	    out->unique != __atomic_load_n(&d->init_unique, __ATOMIC_ACQUIRE) ||
	    !__atomic_load_n(&d->offered, __ATOMIC_RELAXED) ||
	    iov[1].iov_len < offsetof(struct fuse_init_out, flags) + sizeof(uint32_t) ||
	    iov[1].iov_len > sizeof(struct fuse_init_out))
		return writev(fd, iov, count);
	return write_init(fd, iov);
}

int fs_device_attach(struct mount *m)
{
	static const struct fuse_custom_io io = {.read = dev_read, .writev = dev_writev};
	int fd = fuse_session_fd(m->se);

	if (fd < 0)
		return -EBADF;
	return fuse_session_custom_io(m->se, &io, fd);
}
