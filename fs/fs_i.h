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

/* Link of an open handle in the mount's list (ops.c), so handles still open when the
 * session ends are freed too. */
struct hlink {
	struct hlink *prev, *next;
};

/* A directory listing frozen at opendir, so readdir pages are consistent. */
struct ns_dirent {
	char *name;
	bool is_dir;
};
struct ns_dir {
	struct hlink link;        /* first: the mount's open directories (ops.c); handles_lock */
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

/* A read of version @id of @ino found the object changed (ESTALE): make the next open and
 * the next lookup in its directory ask the store again, whatever metadata_ttl says. */
void ns_stale(struct ns *ns, uint64_t ino, uint64_t id);

/* The current version of file @ino without revalidating. @return 0 and a ref, or -errno. */
int ns_peek(struct ns *ns, uint64_t ino, struct fobj **ret);

/* ---------------------------------------------------------------------------------------------
 * ops.c / control.c: the mount.
 * ------------------------------------------------------------------------------------------ */

struct mount {
	struct fs_opts *o;        /* settings; the live-changeable ones under opts_lock */
	pthread_mutex_t opts_lock;
	struct backend *b;
	struct cache *c;
	struct ns *ns;
	struct fuse_session *se;
	bool live;                /* mounted and serving: backend failures get logged */
	pthread_mutex_t log_lock;
	uint64_t logged_id;       /* last (object, error) logged, to log each once; log_lock */
	int logged_err;
	uint64_t reads;           /* read requests answered (relaxed atomics) */
	uint64_t read_errors;     /* read requests answered with an error */
	uint64_t read_bytes;      /* bytes answered */
	pthread_mutex_t handles_lock;
	struct hlink *fhs;        /* open files: freed at exit if the kernel never releases them */
	struct hlink *dirs;       /* open directories, likewise */
	unsigned invals;          /* invalidation threads running; log_lock, signals inval_done */
	pthread_cond_t inval_done;
	pthread_mutex_t watch_lock;
	struct read_watch *watches; /* interrupted reads whose reader was not dying; watch_lock */
	unsigned nwatch;          /* their number; watch_lock (read without it, relaxed) */
	bool watch_armed;         /* the watch timer is pending; watch_lock */
};

/* An open file: an object version and its reader's position, or a control file's text. */
struct fh {
	struct hlink link;        /* first: the mount's open files; handles_lock */
	struct fobj *obj;         /* NULL for a control file */
	struct cache_stream s;
	bool lagging;             /* opened as lagging (direct_io) */
	char *text;               /* control file contents, snapshot at open */
	size_t text_len;
};

/* Inodes of the control surface: far above anything ns.c hands out. */
#define CTL_DIR_INO    (UINT64_MAX - 16)
#define CTL_STATS_INO  (CTL_DIR_INO + 1)
#define CTL_CONFIG_INO (CTL_DIR_INO + 2)

static inline bool ctl_is(uint64_t ino)
{
	return ino >= CTL_DIR_INO && ino <= CTL_CONFIG_INO;
}

/* lookup in the control directory, or of the control directory itself (parent root).
 * @return 0 and *ret_st, or -ENOENT. */
int ctl_lookup(struct mount *m, uint64_t parent, const char *name, struct stat *ret_st);
int ctl_getattr(struct mount *m, uint64_t ino, struct stat *ret_st);
/* Snapshot the text of a control file. @return 0 and malloc'd *ret (caller frees). */
int ctl_read_all(struct mount *m, uint64_t ino, char **ret, size_t *ret_len);
/* Entries of the control directory: name of entry @i, or NULL past the end. */
const char *ctl_dirent(size_t i, uint64_t *ret_ino);

/* Extended attributes: the user.tierfs.* of objects, and live settings on the root.
 * getxattr/listxattr follow the FUSE size protocol: @size 0 asks for the length.
 * @return the length, or -errno. */
int ctl_getxattr(struct mount *m, uint64_t ino, const char *name, char *buf, size_t size);
int ctl_listxattr(struct mount *m, uint64_t ino, char *buf, size_t size);
/* @return 0 or -errno (EINVAL bad value, ENOTSUP unknown name, EROFS elsewhere). */
int ctl_setxattr(struct mount *m, uint64_t ino, const char *name, const char *value,
		 size_t size);

#endif
