/*
 * fs_i.h - declarations shared only inside fs/: the namespace (ns.c) and the mount's state
 * (ops.c, control.c).
 */
#ifndef TIERFS_FS_I_H
#define TIERFS_FS_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "backend.h"
#include "cache.h"
#include "fs.h"

/* ---------------------------------------------------------------------------------------------
 * ns.c: inode table and directories built from key prefixes.
 * ------------------------------------------------------------------------------------------ */

/* One object version as open files see it; the cache's fetch context. Reference counted:
 * every open file and every fetch in flight holds one. Immutable after creation. */
struct fobj {
	unsigned refs;            /* atomic */
	struct backend *backend;
	uint64_t id;              /* cache object id: new for every version */
	uint64_t size;
	int64_t mtime;
	char etag[BK_ETAG_MAX];
	char path[];              /* relative path in the store */
};

void fobj_get(struct fobj *o);
void fobj_put(struct fobj *o);

struct ns;

struct ns_cfg {
	struct backend *backend;
	uint64_t metadata_ttl;    /* seconds */
	bool immutable;
	uid_t uid;
	gid_t gid;
	uint32_t block_size;      /* st_blksize */
};

struct ns *ns_new(const struct ns_cfg *cfg);
void ns_free(struct ns *ns);

/* Look @name up in directory @parent; on success the node's lookup count is raised by one.
 * @return 0 and *ret_st (st_ino set), -ENOENT, -ENOTDIR, or a backend -errno. */
int ns_lookup(struct ns *ns, uint64_t parent, const char *name, struct stat *ret_st);

/* Drop @n lookups of @ino (FUSE forget). */
void ns_forget(struct ns *ns, uint64_t ino, uint64_t n);

/* @return 0 and *ret_st, or -ENOENT (unknown inode). */
int ns_getattr(struct ns *ns, uint64_t ino, struct stat *ret_st);

/*
 * Open file @ino: revalidate its metadata when it is older than metadata_ttl or has no ETag
 * (unless immutable), and return the current version with a reference (caller puts it).
 * *ret_same is true when the version is the one the previous open saw (page cache still good).
 * @return 0, -ENOENT, -EISDIR, or a backend -errno.
 */
int ns_open(struct ns *ns, uint64_t ino, struct fobj **ret, bool *ret_same);

/* A directory listing frozen at opendir, so readdir pages are consistent. */
struct ns_dirent {
	char *name;
	bool is_dir;
};
struct ns_dir {
	unsigned refs;            /* atomic */
	uint64_t ino;             /* the directory */
	uint64_t parent;          /* its parent's inode (itself for the root) */
	size_t n;
	struct ns_dirent e[];     /* sorted by name, unique */
};

/* @return 0 and a referenced *ret, -ENOTDIR, -ENOENT, or a backend -errno. */
int ns_opendir(struct ns *ns, uint64_t ino, struct ns_dir **ret);
void ns_dir_put(struct ns_dir *d);

/* Path of @ino ("" for the root), copied into @buf. @return 0, -ENOENT, -ENAMETOOLONG. */
int ns_path(struct ns *ns, uint64_t ino, char *buf, size_t len);

/* The current version of file @ino without revalidating. @return 0 and a ref, or -errno. */
int ns_peek(struct ns *ns, uint64_t ino, struct fobj **ret);

#endif
