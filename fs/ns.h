/*
 * ns.h - the namespace: the inode table and directories built from key prefixes (ns.c).
 *
 * It knows the store (backend.h) and the cache's object names (cache.h), never FUSE: every
 * call answers through a callback or a return value, so tests/unit/test_ns.c drives it with a
 * file:// store and a fake clock.
 */
#ifndef TIERFS_NS_H
#define TIERFS_NS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "backend.h"
#include "cache.h"

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
	uint32_t mtime_ns;        /* bk_meta's fraction of mtime */
	const char *etag;         /* as the store sent it, "" if none; in the same allocation */
	uint64_t trace_obj;       /* the trace's salted hash of path (fs/trace.c), made at this
				   * version's first traced read; atomic, 0 until then */
	uint32_t trace_ver;       /* of id, the same way; atomic, stored before trace_obj */
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
	/* Run @cb(@cb_arg) on the backend's I/O thread after @delay_ns (the mount's env.defer).
	 * @return 0 or -errno. May be NULL: an open then waits for its revalidation's answer,
	 * however long, unless the store seems stalled. */
	int (*defer)(void *clock_arg, uint64_t delay_ns, void (*cb)(void *cb_arg), void *cb_arg);
};

struct ns *ns_new(const struct ns_cfg *cfg);
void ns_free(struct ns *ns);

/*
 * Asynchronous calls. Each runs its completion exactly once: in the caller's thread, before
 * returning, when what ns holds answers it; otherwise on the backend's I/O thread when the
 * store has answered (the caller keeps nothing waiting: a FUSE request is simply parked).
 * Stale-while-revalidate: what ns has seen (a listing, a name in it, a version) answers at
 * once however old, and one refresh goes out behind it; only what it never saw waits for
 * the store (ns.c, "operations that may wait for the store"). Listings are single-flight per
 * directory, revalidations per file: every call that waits for one while it is in flight
 * waits for that one.
 */
/* @stale: the answer came from what ns held past metadata_ttl (its refresh is out), so the
 * kernel should ask again at the next use instead of keeping it for metadata_ttl. */
typedef void (*ns_entry_fn)(void *arg, int err, const struct stat *st, bool stale);
typedef void (*ns_open_fn)(void *arg, int err, struct fobj *o, bool same, bool changed);
struct ns_dir;
typedef void (*ns_dir_fn)(void *arg, int err, struct ns_dir *d);

/* Look @name up in directory @parent; on success the node's lookup count is raised by one.
 * The directory's listing held answers, however old: one older than metadata_ttl is refreshed
 * behind the answer, and a refresh that fails leaves the last good listing in use. Only a
 * directory never listed waits for its first listing. A name missing from the listing is
 * asked of the store (stat / HEAD) unless it was found missing less than negative_ttl ago. A
 * name whose version changed while files are open on its inode gets a new inode: the open
 * files keep the old one, with its page cache.
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
 * Open file @ino and return its current version with a reference (caller puts it). A version
 * without an ETag, or known to have changed, is asked of the store first (the open waits); one
 * older than metadata_ttl (unless immutable) is revalidated, and the open waits for the
 * answer a moment at most (none when the store seems stalled), then takes the version held.
 * *ret_same is true when the version is the one the previous open saw and the store has
 * confirmed it (page cache still good); *ret_changed when the version changed since the
 * kernel last had the inode's attributes (they are old).
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

/* ---- changes made through the mount (write.c) ----------------------------------------------
 *
 * The store learns of a change when write.c's request to it ends; these tell the namespace,
 * so that this mount shows it at once, and a listing that started before it (in flight, or
 * from another mount's point of view) does not undo it (an overlay per directory, applied to
 * every listing published until one started after the change shows it by itself).
 */

/* A file @name being created in @parent: a node of its own (lookup count raised by one) that
 * stat shows with the bytes written so far, and that cannot be opened for reading until the
 * store has it. @return 0 and *ret_st; -EEXIST (the name is known), -ENOENT, -ENOTDIR,
 * -EINVAL (not a name), -ENOMEM. */
int ns_create(struct ns *ns, uint64_t parent, const char *name, struct stat *ret_st);

/* File @ino, opened with O_TRUNC, is being written anew. @return 0; -EBUSY (files are open on
 * it, or it is being written); -ENOENT, -EISDIR, -ENOMEM. */
int ns_truncate(struct ns *ns, uint64_t ino);

/* File @ino being written has @size bytes now (stat shows them, and now as its mtime). */
void ns_set_size(struct ns *ns, uint64_t ino, uint64_t size);

/* Is file @ino being written? */
bool ns_writing(struct ns *ns, uint64_t ino);

/* The store has file @ino's object: @meta its size, mtime and version. The node takes that
 * version (the cache oid of its blocks: *ret_id) and its directory's listing the entry.
 * @return 0 and *ret_id; -ENOENT (the kernel forgot the node meanwhile); -ENOMEM. */
int ns_written(struct ns *ns, uint64_t ino, const struct bk_meta *meta, struct cache_oid *ret_id);

/* The store did not take file @ino's object: its name leads to what the store has again. */
void ns_write_failed(struct ns *ns, uint64_t ino);

/* @name in @parent was removed from the store (unlink, rmdir, rename away): gone from the
 * listing and the name's node (files open on it keep it). *ret_id (may be NULL): the oid of
 * the version the node held, zero if none. @return 0, -ENOENT, -ENOTDIR, -ENOMEM. */
int ns_removed(struct ns *ns, uint64_t parent, const char *name, struct cache_oid *ret_id);

/* @name in @parent was renamed to @newname in @newparent in the store: the old name is gone
 * (*ret_id: the oid of its version, zero if none), the new one shows what it showed (a new
 * node: open files keep the old inode). @return 0, -ENOENT, -ENOTDIR, -ENOMEM. */
int ns_renamed(struct ns *ns, uint64_t parent, const char *name, uint64_t newparent,
	       const char *newname, struct cache_oid *ret_id);

/* @name in @parent changed in the store in a way the mount cannot tell: forgotten, the next
 * lookup asks the store, the next listing is fetched anew. */
void ns_changed(struct ns *ns, uint64_t parent, const char *name);

/* Directory @name made in @parent (the store has it, or, @sticky, the store has no
 * directories and it lives in the mount until something is written under it): a node (lookup
 * count raised by one) with an empty listing. @return 0 and *ret_st; -EEXIST, -ENOENT,
 * -ENOTDIR, -EINVAL, -ENOMEM. */
int ns_mkdir(struct ns *ns, uint64_t parent, const char *name, bool sticky,
	     struct stat *ret_st);

/* Is directory @ino empty, by its listing held? @return 0; -ENOTEMPTY; -EAGAIN (no listing
 * held: open it first); -ENOENT, -ENOTDIR. */
int ns_dir_empty(struct ns *ns, uint64_t ino);

#endif
