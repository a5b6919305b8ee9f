/*
 * fs_i.h - declarations shared only inside fs/: the namespace (ns.c), the mount's state
 * (ops.c, control.c, mount.c) and what mount.c asks of ops.c.
 */
#ifndef TIERFS_FS_I_H
#define TIERFS_FS_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <fuse_log.h>

#include "backend.h"
#include "cache.h"
#include "disk.h"
#include "fs.h"

/* ---------------------------------------------------------------------------------------------
 * ns.c: inode table and directories built from key prefixes.
 * ------------------------------------------------------------------------------------------ */

/* One object version as open files see it; the cache's fetch context. Reference counted:
 * every open file and every fetch in flight holds one. Immutable after creation but for the
 * counters. One node (inode) makes it; two nodes may hold the same version in two fobjs. */
struct fobj {
	unsigned refs;            /* atomic */
	struct backend *backend;
	struct cache_oid id;      /* cache_oid_make(store, path, version): the same for the same
				   * version whichever node, mount or process sees it */
	uint64_t serves;          /* read replies with bytes of this version through its node's
				   * inode (atomic): has the page cache been fed from it? */
	uint64_t size;
	int64_t mtime;
	const char *etag;         /* as the store sent it, "" if none; in the same allocation */
	char path[];              /* relative path in the store, then the ETag's bytes */
};

void fobj_get(struct fobj *o);
void fobj_put(struct fobj *o);

struct ns;

struct ns_cfg {
	struct backend *backend;
	const char *store;        /* the store's name without secrets, for object ids (copied) */
	uint64_t metadata_ttl;    /* seconds */
	uint64_t negative_ttl;    /* seconds a store's "no such object" is believed; 0 = never */
	bool immutable;
	uid_t uid;                /* owner of everything */
	gid_t gid;
	mode_t file_mode;         /* permission bits of files, ANDed with the store's if any */
	mode_t dir_mode;          /* permission bits of directories, likewise */
	uint32_t block_size;      /* st_blksize */
	/* Where a listing that failed is reported, once per directory until one succeeds; @kept:
	 * the last good listing is served meanwhile. May be NULL. Called without ns's lock. */
	void (*log)(void *log_arg, const char *dir, int err, bool kept);
	void *log_arg;
	uint64_t (*now_ns)(void *clock_arg); /* monotonic clock, required: the mount's own
					      * (fs_cache_env), or a test's fake one */
	void *clock_arg;
};

struct ns *ns_new(const struct ns_cfg *cfg);
void ns_free(struct ns *ns);

/*
 * Asynchronous calls. Each runs its completion exactly once: in the caller's thread, before
 * returning, when what ns holds answers it; otherwise on the backend's I/O thread when the
 * store has answered (the caller keeps nothing waiting: a FUSE request is simply parked).
 * Listings are single-flight per directory: every call that needs one while it is in flight
 * waits for that one.
 */
typedef void (*ns_entry_fn)(void *arg, int err, const struct stat *st);
typedef void (*ns_open_fn)(void *arg, int err, struct fobj *o, bool same, bool changed);
struct ns_dir;
typedef void (*ns_dir_fn)(void *arg, int err, struct ns_dir *d);

/* Look @name up in directory @parent; on success the node's lookup count is raised by one.
 * The directory's listing is used while younger than metadata_ttl; an older one is refreshed
 * first (the lookup waits for it), and a refresh that fails leaves the last good listing in
 * use. A name missing from the listing is asked of the store (stat / HEAD) unless it was found
 * missing less than negative_ttl ago. A name whose version changed while files are open on its
 * inode gets a new inode: the open files keep the old one, with its page cache.
 * @done gets 0 and the attributes (st_ino set), -ENOENT, -ENOTDIR, or a backend -errno. */
void ns_lookup_async(struct ns *ns, uint64_t parent, const char *name, ns_entry_fn done,
		     void *arg);
/* ns_lookup_async, waiting for the answer (tests and helper threads, never a FUSE worker).
 * @return 0 and *ret_st, or -errno. */
int ns_lookup(struct ns *ns, uint64_t parent, const char *name, struct stat *ret_st);

/* Drop @n lookups of @ino (FUSE forget). */
void ns_forget(struct ns *ns, uint64_t ino, uint64_t n);

/* @return 0 and *ret_st, or -ENOENT (unknown inode). */
int ns_getattr(struct ns *ns, uint64_t ino, struct stat *ret_st);

/*
 * Open file @ino: revalidate its metadata when it is older than metadata_ttl or has no ETag
 * (unless immutable), and return the current version with a reference (caller puts it).
 * *ret_same is true when the version is the one the previous open saw (page cache still good);
 * *ret_changed when this open found a new version (the kernel's attributes are old).
 * Counts the open: every successful ns_open is matched by one ns_release.
 * @return 0, -ENOENT, -EISDIR, a backend -errno, or -ESTALE when the object changed while
 * other files are open on this inode: the name now leads to a new inode (the kernel retries
 * the open with a fresh lookup).
 */
void ns_open_async(struct ns *ns, uint64_t ino, ns_open_fn done, void *arg);
/* ns_open_async, waiting (tests, helper threads). */
int ns_open(struct ns *ns, uint64_t ino, struct fobj **ret, bool *ret_same, bool *ret_changed);

/* A file opened with ns_open was closed. */
void ns_release(struct ns *ns, uint64_t ino);

/*
 * A read of version @old of @ino, through the only file open on the inode, found the object
 * changed, and that file has served no byte yet (@serves is old->serves at its open, and no
 * other file served any since). Ask the store for the current version and make it the
 * inode's, so the file moves to it. @return 0 and a ref on the new version in *ret; -ESTALE
 * if the file cannot move (another file is open on the inode, a byte was served, the store
 * has no newer version); or a backend -errno.
 */
int ns_move(struct ns *ns, uint64_t ino, struct fobj *old, uint64_t serves, struct fobj **ret);

/* Link of an open handle in the mount's list (ops.c), so handles still open when the
 * session ends are freed too. */
struct hlink {
	struct hlink *prev, *next;
};

/* An open directory: the listing it was opened on, frozen (readdir pages are consistent) and
 * shared, not copied: every handle opened on the same listing holds a reference to it. */
struct ns_listing;
struct ns_dir {
	struct hlink link;        /* first: the mount's open directories (ops.c); handles_lock */
	uint64_t ino;             /* the directory */
	uint64_t parent;          /* its parent's inode (itself for the root) */
	struct ns_listing *l;     /* a reference; immutable while shared */
};

/* Open directory @ino. A listing already held is used at once, and refreshed in the
 * background when older than metadata_ttl (stale-while-revalidate); without one, the call
 * waits for the (single-flight) listing. @done gets 0 and a handle (the callee's to put with
 * ns_dir_put), -ENOTDIR, -ENOENT, or a backend -errno. */
void ns_opendir_async(struct ns *ns, uint64_t ino, ns_dir_fn done, void *arg);
/* ns_opendir_async, waiting (tests). @return 0 and *ret, or -errno. */
int ns_opendir(struct ns *ns, uint64_t ino, struct ns_dir **ret);
/* A handle on a fixed list of @n file names (the control directory): never touches a store.
 * @return the handle or NULL (out of memory). */
struct ns_dir *ns_dir_make(uint64_t ino, uint64_t parent, const char *const *names, size_t n);
void ns_dir_put(struct ns_dir *d);
/* Entries of an open directory, sorted by name: how many, and the name of entry @i (and
 * whether it is a directory). */
size_t ns_dir_count(const struct ns_dir *d);
const char *ns_dir_name(const struct ns_dir *d, size_t i, bool *ret_is_dir);
/* Entry @i of @d as a lookup would answer it, for readdirplus, from memory only: by the
 * directory's listing now (which may be newer than the handle's), never the store. On success
 * the node's lookup count is raised by one, as FUSE counts readdirplus entries. @return 0 and
 * *ret_st; -EAGAIN when memory cannot answer (a name without metadata, gone since the handle's
 * listing, a handle not on a directory of ns: give the entry without attributes, and the
 * kernel looks it up); -ENOMEM. */
int ns_dir_lookup(struct ns *ns, const struct ns_dir *d, size_t i, struct stat *ret_st);

/* Is @name in the listing held for directory @parent, from memory only (never the store)?
 * @return 1 yes, 0 no, -EAGAIN no listing held yet, -ENOENT unknown directory. */
int ns_listed(struct ns *ns, uint64_t parent, const char *name);

/* Memory the namespace holds now, in bytes (nodes, listings, versions), and the number of
 * listed keys; for the stats file and the memory measurements. */
void ns_mem(struct ns *ns, uint64_t *ret_bytes, uint64_t *ret_keys);

/* Path of @ino ("" for the root), copied into @buf. @return 0, -ENOENT, -ENAMETOOLONG. */
int ns_path(struct ns *ns, uint64_t ino, char *buf, size_t len);

/* A read of version @id of @ino found the object changed (ESTALE): make the next open and
 * the next lookup in its directory ask the store again, whatever metadata_ttl says. */
void ns_stale(struct ns *ns, uint64_t ino, struct cache_oid id);

/* The current version of file @ino without revalidating (a node that has no version of its
 * own yet gets one made from its listing entry, for the caller alone). @return 0 and a ref,
 * or -errno. */
int ns_peek(struct ns *ns, uint64_t ino, struct fobj **ret);

/* ---------------------------------------------------------------------------------------------
 * ops.c / control.c / mount.c: the mount.
 * ------------------------------------------------------------------------------------------ */

#define FS_MAX_REQUEST (1u << 20) /* largest read the kernel may send: 1 MiB */

/* One (object, cause) key fs_log_once saw lately. */
struct fs_log_slot {
	uint64_t key;             /* hash of object and cause; 0 = free */
	uint64_t last_ns;         /* CLOCK_MONOTONIC of the line last logged for it */
	uint64_t held;            /* lines suppressed since then */
};

#define FS_LOG_SLOTS 64

/* ---------------------------------------------------------------------------------------------
 * shared.c: the shared tier (Redis) and the fleet lagging budget, decorating the cache's fetch.
 * ------------------------------------------------------------------------------------------ */

struct fs_shared;
struct mount;
struct fs_opts;
struct bk_shared_stats;

struct fs_shared_stats {
	uint64_t hits;            /* blocks served from Redis (value checked) */
	uint64_t hit_bytes;       /* their bytes */
	uint64_t misses;          /* Redis had no value */
	uint64_t rejected;        /* values refused by the check (wrong, truncated, foreign) */
	uint64_t unavailable;     /* Redis did not answer in time, or is down, or erred */
	uint64_t store_fetches;   /* blocks fetched from the store through the decorator */
	uint64_t lock_wins;       /* misses that took the block's fetch lock and fetched it */
	uint64_t lock_waits;      /* misses that found another mount fetching, and waited */
	uint64_t lock_wait_hits;  /* ... and were served its value */
	uint64_t lock_gave_up;    /* ... and went to the store after the bound */
	uint64_t fleet_calls;     /* grant scripts called */
	uint64_t fleet_grants;    /* chunks granted */
	uint64_t fleet_waits;     /* calls told to wait */
	uint64_t fleet_errors;    /* calls that failed (Redis down or slow) */
	uint64_t fleet_queued;    /* lagging fetches that waited for fleet tokens */
	uint64_t fleet_fallbacks; /* times the budget fell back to local limits */
	bool fleet_fallback;      /* on local limits only now */
};

/* Connect the mount to the shared tier o->shared (no network until the first fetch).
 * @return 0 and *ret, or -errno with one line in @err. */
int fs_shared_new(struct mount *m, const struct fs_opts *o, struct fs_shared **ret, char *err,
		  size_t errlen);
/* After backend_stop. Accepts NULL. */
void fs_shared_free(struct fs_shared *sh);
/* env->fetch through the shared tier (cache.h's contract: 0 and done later, or -errno). */
int fs_shared_fetch(struct fs_shared *sh, struct fobj *o, uint64_t off, uint32_t len, void *dst,
		    bool lagging, cache_done_fn done, void *done_arg);
void fs_shared_get_stats(struct fs_shared *sh, struct fs_shared_stats *ret,
			 struct bk_shared_stats *ret_redis);

struct mount {
	struct fs_opts *o;        /* settings; the live-changeable ones under opts_lock */
	pthread_mutex_t opts_lock;
	struct backend *b;
	struct fs_shared *sh;     /* the shared tier, or NULL; set before the cache */
	struct cache *c;
	struct disk *disk;        /* the disk tier, or NULL (no cache_dir, or it could not open);
				   * set before the cache */
	bool disk_lagging;        /* lagging blocks are written to disk too (disk_lagging=on) */
	struct ns *ns;
	struct fuse_session *se;
	bool live;                /* mounted and serving: backend failures get logged */
	pthread_mutex_t log_lock;
	struct fs_log_slot log_seen[FS_LOG_SLOTS]; /* recent (object, cause) keys; log_lock */
	double log_tokens;        /* lines any key may still log now (bucket); log_lock */
	uint64_t log_refill_ns;   /* when log_tokens was last refilled; log_lock */
	uint64_t log_suppressed;  /* lines not logged (relaxed atomic): the stats file shows it */
	uint64_t reads;           /* read requests answered (relaxed atomics) */
	uint64_t read_errors;     /* read requests answered with an error */
	uint64_t read_bytes;      /* bytes answered */
	pthread_mutex_t handles_lock;
	struct hlink *fhs;        /* open files: freed at exit if the kernel never releases them */
	struct hlink *dirs;       /* open directories, likewise */
	unsigned invals;          /* helper threads running (moves); log_lock, signals inval_done */
	pthread_cond_t inval_done;
	pthread_mutex_t watch_lock;
	struct read_watch *watches; /* interrupted reads whose reader was not dying; watch_lock */
	unsigned nwatch;          /* their number; watch_lock (read without it, relaxed) */
	bool watch_armed;         /* the watch timer is pending; watch_lock */
};

/* An open file: an object version and its reader's position, or a control file's text. */
struct fh {
	struct hlink link;        /* first: the mount's open files; handles_lock */
	uint64_t ino;             /* 0 for a control file */
	pthread_mutex_t lock;     /* guards obj (after open), moving, serves0 */
	pthread_cond_t moved;     /* signalled when moving turns false */
	struct fobj *obj;         /* NULL for a control file; the version served; lock */
	bool movable;             /* opened with the page cache dropped (keep_cache off) */
	bool moving;              /* a helper is asking the store for the new version; lock */
	uint64_t serves0;         /* obj->serves when obj became this file's; lock */
	struct cache_stream s;
	bool lagging;             /* opened as lagging */
	bool drop_behind;         /* lagging without lagging_page_cache: pages dropped behind */
	uint64_t seen_lo, seen_hi; /* drop_behind: range read and not yet dropped; log_lock */
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

/* Extended attributes: the user.tierfs.* of objects, and live settings on the root; none is
 * listed (listxattr answers an empty list). getxattr follows the FUSE size protocol: @size 0
 * asks for the length. @return the length, or -errno. */
int ctl_getxattr(struct mount *m, uint64_t ino, const char *name, char *buf, size_t size);
/* Change a live setting as the caller @uid (thread @pid, 0 if unknown) of a request.
 * @return 0 or -errno (EPERM not the operator, EINVAL bad value, ENOTSUP unknown name,
 * EROFS elsewhere than the root and the control directory). */
int ctl_setxattr(struct mount *m, uid_t uid, pid_t pid, uint64_t ino, const char *name,
		 const char *value, size_t size);

/*
 * Log one line, unless a line with the same (@obj, @cause) was logged less than
 * FS_LOG_INTERVAL_S ago, or the mount has logged too much lately (a bucket of FS_LOG_BURST
 * lines, refilled at that many per interval); what is held back is counted in
 * m->log_suppressed, and the next line of the key says how many. The line is cut at
 * FS_LOG_LINE_MAX and anything but printable ASCII becomes '?', so neither a caller nor the
 * store's names can forge or flood log lines. @return true if it was logged.
 */
#define FS_LOG_INTERVAL_S 60
#define FS_LOG_BURST	  20
#define FS_LOG_LINE_MAX	  400
bool fs_log_once(struct mount *m, enum fuse_log_level level, const char *obj, const char *cause,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));


/* ---------------------------------------------------------------------------------------------
 * ops.c for mount.c: the operations and what the mount's setup and teardown ask of them.
 * ------------------------------------------------------------------------------------------ */

extern const struct fuse_lowlevel_ops fs_ops;

/* What the cache is given (cache_new): the clocks, fetches of fobj blocks through m->b at the
 * priority of their tier (through the shared tier m->sh first, if any), references on the
 * fobjs, and the disk tier m->disk as its lower tier when there is one. */
struct cache_env fs_cache_env(struct mount *m);

/* The backend's log callback (backend_cfg.log); @arg is the mount. Silent until m->live. */
void fs_backend_log(void *arg, int level, const char *line);

/* Fill the log bucket of a new mount (after log_lock is initialised). */
void fs_log_init(struct mount *m);

/* After the session loop and the I/O thread stopped, before fuse_session_unmount: wait for
 * the helper threads, the last writers of the FUSE device besides them. Unmounting closes the
 * device's fd, and a number closed under a writer may be reused by an unrelated file. */
void fs_ops_quiesce(struct mount *m);

/* After fs_ops_quiesce and the unmount: free the watches and the handles the kernel never
 * released. Before cache_free. */
void fs_ops_drain(struct mount *m);

#endif
