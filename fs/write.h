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
 * it may replace the object the store has). @return 0 and *ret (the handle's), -EROFS,
 * -ENOMEM, -ENAMETOOLONG, ... */
int wfile_new(struct mount *m, uint64_t ino, bool overwrite, struct wfile **ret);

/* A write of @size bytes at @off: answered at once, or when a buffer frees (parked). */
void wfile_write(struct fuse_req *req, struct wfile *w, const char *buf, size_t size, off_t off);

/* flush (@flush), fsync (@req answered when the store has the object, or with its error), or
 * the commit of a release (@req NULL). A flush before any byte was written commits nothing. */
void wfile_commit(struct fuse_req *req, struct wfile *w, bool flush);

/* The handle is closed: committed if it was not, and freed once the store has answered. */
void wfile_release(struct wfile *w);

/* Bytes written to @w so far. */
uint64_t wfile_size(struct wfile *w);

#endif
