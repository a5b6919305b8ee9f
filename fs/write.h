/*
 * write.h - files written through the mount (write.c): each one a new object of the store,
 * whole or not at all, whose blocks fill the cache's tiers on the way.
 */
#ifndef TIERFS_WRITE_H
#define TIERFS_WRITE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct fs_opts;
struct fuse_req; /* fuse_req_t: FUSE's header stays in the files that answer requests */
struct mount;
struct wfile;
struct wpool;

struct wpool_stats {
	uint64_t completed;    /* objects the store acknowledged */
	uint64_t failed;       /* objects the store did not take: nothing left under the name */
	uint64_t write_waits;  /* times a file's writes waited for a buffer */
	uint64_t flushes_kept; /* closes that did not commit: another process's copy, or a dup */
	uint64_t release_commits; /* objects committed by the last close of a process other than
				   * their writer (release): no close() waited for them */
	uint64_t release_failed; /* ... of which the store took nothing (logged) */
	uint64_t buffer_bytes; /* bytes of write buffers taken now */
	uint64_t buffer_limit; /* write_buffer */
};

/* The mount's write buffers: write_buffer bytes in parts of part_size (rounded up to whole
 * blocks, at least the store's minimum part), write_parts parts in flight per file.
 * @return 0 and *ret, or -ENOMEM. */
int wpool_new(const struct fs_opts *o, struct wpool **ret);
void wpool_free(struct wpool *p);
void wpool_get_stats(struct wpool *p, struct wpool_stats *ret);

/* Start writing the new object of file @ino (created, or opened with O_TRUNC: @overwrite,
 * it may replace the object the store has), opened by thread group @owner (its writer; <= 0
 * unknown). @return 0 and *ret (the handle's), -EROFS, -ENOMEM, -ENAMETOOLONG, ... */
int wfile_new(struct mount *m, uint64_t ino, bool overwrite, pid_t owner, struct wfile **ret);

/* A write of @size bytes at @off: answered at once, or when a buffer frees (parked). */
void wfile_write(struct fuse_req *req, struct wfile *w, const char *buf, size_t size, off_t off);

/* fsync: the object is committed, @req answered when the store has it, or with its error. */
void wfile_commit(struct fuse_req *req, struct wfile *w);

/* A FLUSH (a close(2) of some descriptor of the file) from thread @pid: the writer's last
 * close commits like fsync; another process's close (a forked child's copy) and a close of a
 * dup while the writer holds another descriptor answer 0 at once and commit nothing (write.c,
 * flush_rule; docs/semantics.md). */
void wfile_flush(struct fuse_req *req, struct wfile *w, pid_t pid);

/* The handle is closed (its last reference went): committed if it was not, errors logged
 * and counted (release_failed), and freed once the store has answered. */
void wfile_release(struct wfile *w);

/* Bytes written to @w so far. */
uint64_t wfile_size(struct wfile *w);

#endif
