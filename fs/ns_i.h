/*
 * ns_i.h - the namespace's insides, shared by its files only (ns.c, nslist.c, nsop.c,
 * nswrite.c; nothing else includes it): the structs of ns.c's data layout, and the helpers
 * one of those files lends the others. ns.c's essay says what each thing is for and the
 * locking rule (ns->lock); ns.h is what the rest of tierfs sees.
 */
#ifndef TIERFS_NS_I_H
#define TIERFS_NS_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "ns.h"

#define ROOT_INO 1

/*
 * A listing: entries in one array, their names and ETags in one string pool (32 bytes per
 * entry plus the strings, instead of a malloc'd name and a 128-byte ETag each). An ETag that
 * is a quoted MD5 in lowercase hex (S3's for an object of one PUT) is kept as its 16 bytes
 * (LE_MD5) instead of 35 characters, and given back character for character.
 *
 *     e[] ─ {name, etag: offsets in pool; size, mtime, perm, flags}   sorted by name, unique
 *     pool ─ "\0name1\0\"etag1\"\0name2\0<16 bytes>..."   (offset 0 is the empty string)
 *
 * Reference counted: the directory holds one, each open handle one. A listing with other
 * holders is never changed but in place of equal size (an ETag no longer than the old one);
 * anything else copies it first (copy on write), so handles read it without a lock.
 */
#define LE_DIR 1
#define LE_META 2
#define LE_PERM 4
#define LE_MD5 8

struct lent {
	uint32_t name;       /* offset in pool */
	uint32_t etag;       /* offset in pool, 0 for "" */
	uint64_t size;
	int64_t mtime;
	uint32_t mtime_ns;   /* bk_meta's fraction of mtime */
	uint16_t perm;       /* with LE_PERM: the store's permission bits */
	uint8_t flags;       /* LE_* */
};

struct ns_listing {
	unsigned refs;       /* atomic: the directory's and every open handle's */
	size_t n, cap;
	struct lent *e;      /* sorted by name, unique (once published) */
	char *pool;
	size_t plen, pcap;
	uint64_t time_ns;    /* when it was started: nothing older is in it; ns->lock */
	bool stale;          /* an object in it changed: list again at the next use; ns->lock */
};

/*
 * The names the store said do not exist in one directory (its negative cache), made at the
 * first. Every name found missing less than negative_ttl ago is kept, up to NEG_MAX of them:
 * a process polling many missing names in one directory (consumers waiting for the next
 * segment of each partition) costs one HEAD per name and negative_ttl, not one per lookup as
 * when the cache held 64 and they pushed each other out. An expired entry is worth nothing:
 * each new entry sweeps them out, and the array goes when it is empty. So a directory nobody
 * polls costs a pointer, and one polled costs about 50 bytes per name polled per negative_ttl
 * (at most NEG_MAX, about 50 KiB; the oldest goes first beyond it).
 */
#define NEG_MAX 1024
struct neg {
	char *name;
	uint64_t time_ns;    /* when the store said so */
};

struct negs {
	uint32_t n, cap;
	struct neg e[];
};

struct lfetch;

/*
 * A change made through the mount (write.c) to one name of a directory: an object written, a
 * directory made, a name removed. A listing that started before it may not show it, so each
 * listing published is corrected by the overlays younger than its start (ns_ov_apply); an
 * overlay goes once a listing started after it is published, which shows it (the store had
 * it when the change was made), but a directory made on a store without directories (S3)
 * stays until something is written under it or it is removed.
 */
struct ov {
	struct ov *next;
	uint64_t time_ns;    /* when the change was made */
	bool gone;           /* the name was removed; else it is there: */
	bool is_dir;         /* a directory made (m unused), or a file written (m) */
	bool sticky;         /* a directory no listing of this store will ever show */
	struct bk_meta m;
	char name[];
};

/* What only a directory has (ns->lock). */
struct dirst {
	struct ns_listing *list; /* the last good listing (one ref), NULL until one arrived */
	struct lfetch *inflight; /* the listing being fetched, NULL if none (single flight) */
	bool fail_logged;        /* a failed refresh was reported; cleared by a success */
	uint32_t lazy;           /* file nodes in it whose version is the listing's (fstate) */
	uint32_t kids;           /* nodes whose up is this one: it is freed after them */
	struct negs *negs;       /* names found missing, NULL if none */
	struct ov *ov;           /* changes made through the mount a listing may not show yet */
	struct timespec changed; /* when a name in it was last made or removed through the mount
				  * (its mtime and ctime, if after the mount started), 0 never */
};

/*
 * What a file node has once it holds a version of its own: opened, found by a stat / HEAD, or
 * its listing entry gone (ns->lock). A node made from a listing entry has none ("lazy"): its
 * size, mtime, ETag and permission bits are the ones its directory's listing has for its name
 * now, so an `ls -l` of a big prefix costs a node per name and nothing more.
 */
struct reval;
struct fstate {
	struct fobj *cur;    /* current known version (one ref), never NULL */
	uint64_t meta_ns;    /* when cur was last confirmed with an ETag */
	struct cache_oid last_open_id; /* cur->id at the previous open */
	struct reval *reval; /* the store asked about cur, not answered yet; NULL if none */
	uint32_t nopen;      /* files open on this inode (ns_open - ns_release) */
	bool opened;         /* last_open_id is set */
	bool stale;          /* cur is known to be changed (a read found it, or a revalidation
			      * with files open): the next open waits for the store */
	bool attr_changed;   /* cur changed in place behind the kernel, which still has the old
			      * attributes: the next open has it drop them */
	bool writing;        /* being written through the mount (write.c): cur is a stand-in,
			      * wsize and wmtime what stat shows, and it cannot be opened for
			      * reading until the store has it */
	uint64_t wsize;      /* writing: bytes written so far */
	struct timespec wmtime; /* writing: when the last were */
};

/*
 * A node: 46 bytes and its name, in one allocation (72 usable bytes for a 24-byte name, at any
 * depth), because `ls -l` of a big prefix makes one per name. Its path is the names up to the
 * root (ns_node_path), asked for only when the store is. Fields only open files need are in
 * struct fstate; a directory's in struct dirst.
 */
struct node {
	uint64_t ino;
	struct node *up;     /* the directory it is in (counted in its kids); NULL for the root */
	struct node *next_ino, *next_name; /* hash chains */
	union {
		struct fstate *f; /* files: NULL while lazy (the version is the listing's) */
		struct dirst *dir; /* directories, never NULL */
	};
	/* kernel references; saturates at UINT32_MAX, and then the node is never freed (it
	 * would take 4 billion lookups of one inode without a forget) */
	uint32_t nlookup;
	unsigned perm : 9;   /* with have_perm: the store's permission bits (last listing or
			      * stat); modes never exceed them */
	unsigned have_perm : 1;
	unsigned is_dir : 1;
	unsigned unlinked : 1; /* no longer in by_name (replaced by another node of the name) */
	unsigned gone : 1;   /* a directory the kernel forgot, out of the tables, kept until its
			      * last child goes (their paths go through its name) */
	char name[];         /* last segment of the path, "" for the root */
};

/*
 * The listing of a directory the kernel forgot (ns->forgotten). The kernel forgets the inode
 * of a directory nobody holds open whenever it reclaims dentries; when the name is looked up
 * again the new node takes its listing back from here, so the last good listing outlives the
 * inode (a refresh that fails while the store is down still answers from it) and a fresh one
 * is not listed again. Most recently forgotten first; at most FORGOTTEN_MAX listings and
 * FORGOTTEN_BYTES together, the oldest going first, but the newest is always kept (it was in
 * memory a moment ago anyway).
 */
#define FORGOTTEN_MAX 64
#define FORGOTTEN_BYTES (32u << 20)
struct forgotten {
	struct forgotten *next;
	struct ns_listing *list; /* one ref */
	size_t bytes;            /* what the listing takes (malloc_usable_size) */
	bool fail_logged;        /* its failed refresh was reported already */
	char path[];
};

struct ns {
	struct ns_cfg cfg;
	pthread_mutex_t lock;
	struct node **by_ino, **by_name; /* nbuckets each */
	size_t nbuckets, count;
	uint64_t next_ino;
	char *store;         /* cfg.store, owned */
	struct timespec started; /* mount time: the directories' times */
	struct forgotten *forgotten; /* listings of forgotten directories, newest first */
	size_t nforgotten, forgotten_bytes;
	/* Is the store answering? (atomics, no lock: see store_stalled) */
	uint32_t reqs;       /* listings and stats asked of the store and not answered */
	uint64_t progress_ns; /* the store's last sign of life for them (an answer, a listing
			       * entry), or when reqs left 0 */
};

/* The wall clock, to the nanosecond, for the times stat shows of what the mount changed:
 * time(2) reads a coarse clock that can still show the last second after a process's
 * clock_gettime shows the next, and so a change made just after it looks as old as the mount. */
static inline struct timespec ns_wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts;
}

static inline bool ns_ts_after(struct timespec a, struct timespec b)
{
	return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec);
}

/* Now, by the mount's clock (cfg.now_ns). */
static inline uint64_t clock_ns(struct ns *ns)
{
	return ns->cfg.now_ns(ns->cfg.clock_arg);
}

/* ns.c */
uint64_t ns_pino(const struct node *n);
struct node *ns_parent_of(const struct node *n);
char *ns_node_path(const struct node *n);
struct node *ns_find_ino(struct ns *ns, uint64_t ino);
struct node *ns_find_name(struct ns *ns, const struct node *p, const char *name);
void ns_link_node(struct ns *ns, struct node *n);
void ns_unlink_name(struct ns *ns, struct node *n);
void ns_unlink_ino(struct ns *ns, struct node *n);
size_t ns_node_size(size_t len);
struct fobj *ns_fobj_new(struct ns *ns, const struct node *n, const struct bk_meta *m);
uint32_t ns_nopen(const struct node *n);
bool ns_is_lazy(const struct node *n);
int ns_set_version(struct ns *ns, struct node *n, const struct bk_meta *m, bool confirmed,
		   uint64_t when);
int ns_materialize(struct ns *ns, struct node *n);
void ns_keep_dropped(struct ns *ns, struct node *p, const struct ns_listing *old,
		     const struct ns_listing *new);
void ns_node_release(struct node *n);
bool ns_changes(const struct node *n, const struct bk_meta *m);
void ns_listing_note(struct ns *ns, const struct node *n, const struct bk_meta *m);
void ns_drop_unused(struct ns *ns, struct node *n);
void ns_fill_stat(struct ns *ns, const struct node *n, struct stat *st);
char *ns_child_path(const struct node *parent, const char *name);
struct node *ns_node_new(struct ns *ns, struct node *parent, const char *name, bool is_dir);
struct node *ns_entry_node(struct ns *ns, struct node *p, const char *name, bool is_dir,
			   const struct bk_meta *m);
int ns_entry_link(struct ns *ns, struct node *p, const char *name, struct node *n,
		  bool is_dir, const struct bk_meta *m, bool confirmed, bool listed,
		  struct stat *st);

/* nslist.c */
struct ns_listing *ns_listing_new(void);
void ns_listing_get(struct ns_listing *l);
void ns_listing_put(struct ns_listing *l);
void ns_forgotten_free(struct forgotten *f);
const char *ns_lname(const struct ns_listing *l, const struct lent *e);
int ns_pool_put(struct ns_listing *l, const void *s, size_t n, uint32_t *ret);
bool ns_etag_md5(const char *etag, unsigned char ret[16]);
size_t ns_etag_bytes(const struct ns_listing *l, const struct lent *e);
void ns_lent_meta(const struct ns_listing *l, const struct lent *e, struct bk_meta *m);
int ns_listing_append(struct ns_listing *l, const char *name, bool is_dir,
		      const struct bk_meta *m);
void ns_listing_seal(struct ns_listing *l);
struct lent *ns_find_pos(struct ns_listing *l, const char *name, size_t *ret_pos);
struct lent *ns_find_entry(struct ns_listing *l, const char *name);
struct ns_listing *ns_listing_own(struct dirst *d);
struct lent *ns_listing_insert(struct dirst *d, const char *name, bool is_dir,
			       const struct bk_meta *m);
bool ns_fresh(struct ns *ns, uint64_t t, uint64_t now);
bool ns_listing_fresh(struct ns *ns, const struct dirst *d);
void ns_negs_free(struct negs *g);
struct dirst *ns_dirst_new(void);
bool ns_neg_fresh(struct ns *ns, struct dirst *d, const char *name, uint64_t now);
void ns_neg_add(struct ns *ns, struct dirst *d, const char *name, uint64_t now);
void ns_neg_del(struct dirst *d, const char *name);

/* nswrite.c */
void ns_ov_apply(struct dirst *d);

#endif
