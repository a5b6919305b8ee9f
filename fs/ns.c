/*
 * ns.c - the namespace: inodes for the keys of the store, directories from key prefixes.
 *
 * An object store has keys, not directories. A directory here is a key prefix ending in '/';
 * its entries are what the backend lists one level below it. Each node is found two ways:
 *
 *     by_ino[ino]            ──► node ◄── by_name[(parent ino, name)]
 *                                 │  up ──► the node of its directory (the path is the names
 *                                 │         up to the root)
 *            file: f ──► NULL while lazy: size, mtime, ETag are the directory's listing's
 *                        struct fstate once opened: cur ──► struct fobj (path, size, mtime,
 *                        ETag, cache oid), refcounted; nopen, the previous open's version
 *            dir:  dir ──► list ──► the last good listing (shared with open handles)
 *                          inflight ──► the listing being fetched, and the ops waiting for it
 *                          negs ──► names the store said do not exist, and when (those
 *                                   of the last negative_ttl, at most NEG_MAX)
 *
 * Identity. A version's cache oid is a hash of (store, path, ETag) (cache/key.c), so the same
 * version gets the same oid whatever node holds it: forgetting an inode and looking the name up
 * again finds every cached block. A new version is a new oid; its old blocks are never served
 * for it and age out of the cache.
 *
 * Versions and inodes. The kernel's page cache belongs to an inode and is shared by every file
 * open on it, so one inode must never serve two versions to files that are open at once:
 *   - a node with no open file takes a new version in place (the next open drops the pages:
 *     keep_cache is off when the version is not the one the previous open saw);
 *   - a node with open files keeps its version; a lookup that sees a new one makes a new node
 *     (new inode) for the name, and an open that sees one fails -ESTALE, which makes the
 *     kernel look the name up again (LOOKUP_REVAL) and find the new node;
 *   - the one exception is ns_move: the only open file, which has served nothing, moves to the
 *     new version with its inode (a fresh open after an append must not fail).
 *
 * Lazy versions. `ls -l` of a big prefix makes a node per name (readdirplus), so a node made
 * from a listing entry holds no version: it answers with its directory's listing entry for its
 * name (a binary search), and with nothing open it follows that entry to a new version in
 * place, as the rule above says. It gets a version of its own (struct fstate and a fobj) when
 * it is opened (as confirmed as the listing is: an older one is revalidated), when the store
 * was asked about the name (stat / HEAD), and before its entry goes: a refresh that drops the
 * name or makes it a prefix (keep_dropped), or its directory's node being forgotten
 * (keep_children). Once it has one it keeps it until forgotten. A node is 46 bytes and its
 * name in one allocation, whatever the depth: 72 usable bytes for a 24-byte name, with the
 * listing's 73 (S3's ETags) and the tables' 16-21 about 166 bytes per key looked up (test_ns
 * measures it).
 * A node's path is built from the names up to the root when the store is asked. A directory
 * the kernel forgets while it still knows some of its files (it evicts a directory's inode,
 * which holds no pages, before its files', which hold their page cache) stays, inode and all,
 * until the last of them goes (dirst.kids): looked up again it is the same inode, so are its
 * files, and their cached pages are used again. A directory dropped with children left
 * otherwise (its name changed type) waits for them out of the tables (node.gone).
 *
 * Attributes: every node is owned by the mount's uid and gid, with file_mode or dir_mode; where
 * the store has permission bits of its own (file://), the last listing's or stat's bits are
 * kept in the node (a lazy one's in the listing) and ANDed in, so the mount never shows a
 * wider mode than the store.
 *
 * Freshness (stale-while-revalidate, docs/design.md invariant 11): a listing is fresh for
 * metadata_ttl seconds; past that it still answers lookups and opendirs at once, and one
 * refresh goes out behind them. A name missing from it is asked of the store (stat / HEAD),
 * after the refresh if the listing is old: found, it joins the listing; missing, the answer is
 * kept for negative_ttl. A file's version is revalidated (HEAD) at open when it is older than
 * metadata_ttl (a lazy node's is as old as its listing) or has no ETag, unless the mount is
 * immutable; the open waits for it a moment at most (REVAL_WAIT_NS, none while the store
 * seems stalled), then takes the version held. Only what was never seen waits for the store:
 * a directory never listed, a name never listed, a version without ETag, and one known to have
 * changed. A refresh that fails leaves the last good listing in place (reported once through
 * cfg.log); only a directory never listed fails its callers. A directory the kernel forgets with no
 * child left leaves its listing behind (struct forgotten, the last FORGOTTEN_MAX of them), and
 * the next node of its path takes it back: a forgotten inode loses neither the last good
 * listing nor a fresh one.
 *
 * No caller waits: lookup, open and opendir are ops run in steps (see "operations that may
 * wait for the store"). What ns holds is answered in the caller's thread; what needs the store
 * parks the op on an asynchronous stat, on the directory's listing in flight, or on the
 * file's revalidation in flight, and the backend's I/O thread (or the revalidation's timer,
 * cfg.defer) runs the next step. Listings are single-flight per directory and revalidations
 * per file: every op that waits for one while it is in flight waits for that one, and no op
 * that memory answers joins any. Open directory handles share the listing they were opened
 * on (reference counted, copy on write).
 *
 * Locking: ns->lock guards the tables, every node and every listing's place in its directory,
 * and the revalidations in flight (struct reval). It is never held across a request: a step
 * drops it before submitting, and the completion takes it again and finds the node by inode
 * number (it may have been forgotten meanwhile). Whether the store answers at all (ns->reqs,
 * ns->progress_ns) is kept with atomics, outside the lock.
 * A listing being fetched belongs to its fetch alone until it is published under the lock; a
 * published listing shared with handles is immutable but for ETags rewritten in place.
 *
 * Workload: brokers look up a few hundred segment files and open them repeatedly; operators
 * list directories of thousands to millions of keys (`ls -l`: a node per name, no version).
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
 * listing published is corrected by the overlays younger than its start (ov_apply); an
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
	int64_t changed;         /* when a name in it was last made or removed through the mount
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
	int64_t wmtime;      /* writing: when the last were */
};

/*
 * A node: 46 bytes and its name, in one allocation (72 usable bytes for a 24-byte name, at any
 * depth), because `ls -l` of a big prefix makes one per name. Its path is the names up to the
 * root (node_path), asked for only when the store is. Fields only open files need are in
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
	time_t started;      /* mount time: the directories' times */
	struct forgotten *forgotten; /* listings of forgotten directories, newest first */
	size_t nforgotten, forgotten_bytes;
	/* Is the store answering? (atomics, no lock: see store_stalled) */
	uint32_t reqs;       /* listings and stats asked of the store and not answered */
	uint64_t progress_ns; /* the store's last sign of life for them (an answer, a listing
			       * entry), or when reqs left 0 */
};

static uint64_t clock_ns(struct ns *ns)
{
	return ns->cfg.now_ns(ns->cfg.clock_arg);
}

static size_t msize(const void *p)
{
	return p ? malloc_usable_size((void *)p) : 0;
}

void fobj_get(struct fobj *o)
{
	__atomic_fetch_add(&o->refs, 1, __ATOMIC_RELAXED);
}

void fobj_put(struct fobj *o)
{
	if (o && __atomic_sub_fetch(&o->refs, 1, __ATOMIC_ACQ_REL) == 0)
		free(o);
}

static size_t hash_ino(uint64_t ino, size_t nb)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ULL) >> 17) & (nb - 1);
}

static size_t hash_name(uint64_t parent, const char *name, size_t nb)
{
	uint64_t h = 1469598103934665603ULL ^ parent;

	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 1099511628211ULL;
	return (size_t)(h ^ (h >> 29)) & (nb - 1);
}

/* The inode of @n's directory (the root's is itself). */
static uint64_t pino(const struct node *n)
{
	return n->up ? n->up->ino : ROOT_INO;
}

/* @n's directory, or NULL when the kernel forgot it (or @n is the root). */
static struct node *parent_of(const struct node *n)
{
	return n->up && !n->up->gone ? n->up : NULL;
}

/* @n's path in the store ("" for the root): its names up to the root, joined by '/'.
 * @return malloc'd or NULL. */
static char *node_path(const struct node *n)
{
	size_t len = 0, end;
	char *p;

	for (const struct node *a = n; a->up; a = a->up)
		len += strlen(a->name) + 1;
	if (!(p = malloc(len ? len : 1)))
		return NULL;
	end = len ? len - 1 : 0;
	p[end] = '\0';
	for (const struct node *a = n; a->up; a = a->up) {
		size_t l = strlen(a->name);

		end -= l;
		memcpy(p + end, a->name, l);
		if (end)
			p[--end] = '/';
	}
	return p;
}

static struct node *find_ino(struct ns *ns, uint64_t ino)
{
	for (struct node *n = ns->by_ino[hash_ino(ino, ns->nbuckets)]; n; n = n->next_ino)
		if (n->ino == ino)
			return n;
	return NULL;
}

/* The node named @name in directory @p. Comparing pointers is safe: a directory is freed only
 * after its last child. */
static struct node *find_name(struct ns *ns, const struct node *p, const char *name)
{
	for (struct node *n = ns->by_name[hash_name(p->ino, name, ns->nbuckets)]; n;
	     n = n->next_name)
		if (n->up == p && strcmp(n->name, name) == 0)
			return n;
	return NULL;
}

static void link_node(struct ns *ns, struct node *n)
{
	size_t hi = hash_ino(n->ino, ns->nbuckets);
	size_t hn = hash_name(pino(n), n->name, ns->nbuckets);

	n->next_ino = ns->by_ino[hi];
	ns->by_ino[hi] = n;
	if (n->ino != ROOT_INO) {
		n->next_name = ns->by_name[hn];
		ns->by_name[hn] = n;
	}
}

static void unlink_name(struct ns *ns, struct node *n)
{
	struct node **pp = &ns->by_name[hash_name(pino(n), n->name, ns->nbuckets)];

	if (n->unlinked || n->ino == ROOT_INO)
		return;
	while (*pp && *pp != n)
		pp = &(*pp)->next_name;
	if (*pp)
		*pp = n->next_name;
	n->unlinked = true;
}

static void unlink_ino(struct ns *ns, struct node *n)
{
	struct node **pp = &ns->by_ino[hash_ino(n->ino, ns->nbuckets)];

	while (*pp && *pp != n)
		pp = &(*pp)->next_ino;
	if (*pp)
		*pp = n->next_ino;
}

/* Double the tables when they get crowded (the lock is held). */
static void grow(struct ns *ns)
{
	size_t nb = ns->nbuckets * 2;
	struct node **bi = calloc(nb, sizeof(*bi)), **bn = calloc(nb, sizeof(*bn));
	struct node **old_ino = ns->by_ino;
	size_t old_nb = ns->nbuckets;

	if (!bi || !bn) {
		free(bi);
		free(bn);
		return; /* longer chains, still correct */
	}
	free(ns->by_name);
	ns->by_ino = bi;
	ns->by_name = bn;
	ns->nbuckets = nb;
	for (size_t i = 0; i < old_nb; i++) {
		for (struct node *n = old_ino[i], *next; n; n = next) {
			bool was_unlinked = n->unlinked;

			next = n->next_ino;
			n->unlinked = false;
			link_node(ns, n);
			if (was_unlinked)
				unlink_name(ns, n);
		}
	}
	free(old_ino);
}

/* ---- listings ------------------------------------------------------------------------------ */

static struct ns_listing *listing_new(void)
{
	struct ns_listing *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->pool = malloc(64);
	if (!l->pool) {
		free(l);
		return NULL;
	}
	l->refs = 1;
	l->pcap = 64;
	l->pool[0] = '\0';
	l->plen = 1;
	return l;
}

static void listing_get(struct ns_listing *l)
{
	__atomic_fetch_add(&l->refs, 1, __ATOMIC_RELAXED);
}

static void listing_put(struct ns_listing *l)
{
	if (!l || __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	free(l->e);
	free(l->pool);
	free(l);
}

static void forgotten_free(struct forgotten *f)
{
	listing_put(f->list);
	free(f);
}

static const char *lname(const struct ns_listing *l, const struct lent *e)
{
	return l->pool + e->name;
}

/* Copy @n bytes at @s into the pool. @return 0 and their offset, or -ENOMEM, -EFBIG. */
static int pool_put(struct ns_listing *l, const void *s, size_t n, uint32_t *ret)
{
	if (l->plen + n > UINT32_MAX)
		return -EFBIG;
	if (l->plen + n > l->pcap) {
		size_t cap = l->pcap * 2;
		char *p;

		while (cap < l->plen + n)
			cap *= 2;
		p = realloc(l->pool, cap);
		if (!p)
			return -ENOMEM;
		l->pool = p;
		l->pcap = cap;
	}
	memcpy(l->pool + l->plen, s, n);
	*ret = (uint32_t)l->plen;
	l->plen += n;
	return 0;
}

/* Copy string @s into the pool. @return 0 and its offset (0 for ""), or -ENOMEM, -EFBIG. */
static int pool_add(struct ns_listing *l, const char *s, uint32_t *ret)
{
	if (!s[0]) {
		*ret = 0;
		return 0;
	}
	return pool_put(l, s, strlen(s) + 1, ret);
}

/* Is @etag a quoted MD5 in lowercase hex ("<32 digits>")? Then its 16 bytes are in @ret. */
static bool etag_md5(const char *etag, unsigned char ret[16])
{
	if (strlen(etag) != 34 || etag[0] != '"' || etag[33] != '"')
		return false;
	for (int i = 0; i < 32; i++) {
		char c = etag[1 + i];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;

		if (v < 0)
			return false;
		if (i & 1)
			ret[i / 2] |= (unsigned char)v;
		else
			ret[i / 2] = (unsigned char)(v << 4);
	}
	return true;
}

/* Put @etag in the pool, 16 bytes for a quoted MD5 (*ret_md5). @return as pool_put. */
static int pool_etag(struct ns_listing *l, const char *etag, uint32_t *ret, bool *ret_md5)
{
	unsigned char md5[16];

	*ret_md5 = etag_md5(etag, md5);
	return *ret_md5 ? pool_put(l, md5, 16, ret) : pool_add(l, etag, ret);
}

/* Bytes entry @e's ETag takes in the pool (0 for none). */
static size_t etag_bytes(const struct ns_listing *l, const struct lent *e)
{
	if (e->flags & LE_MD5)
		return 16;
	return e->etag ? strlen(l->pool + e->etag) + 1 : 0;
}

static void lent_meta(const struct ns_listing *l, const struct lent *e, struct bk_meta *m)
{
	memset(m, 0, sizeof(*m));
	m->size = e->size;
	m->mtime = e->mtime;
	m->mtime_ns = e->mtime_ns;
	if (e->flags & LE_MD5) {
		const unsigned char *b = (const unsigned char *)l->pool + e->etag;
		static const char hex[] = "0123456789abcdef";

		m->etag[0] = '"';
		for (int i = 0; i < 16; i++) {
			m->etag[1 + 2 * i] = hex[b[i] >> 4];
			m->etag[2 + 2 * i] = hex[b[i] & 15];
		}
		m->etag[33] = '"'; /* and the NUL of the memset */
	} else {
		snprintf(m->etag, sizeof(m->etag), "%s", l->pool + e->etag);
	}
	m->have_perm = (e->flags & LE_PERM) != 0;
	m->perm = e->perm;
}

/* Add an entry at the end (unsorted). @return 0 or -ENOMEM. */
static int listing_append(struct ns_listing *l, const char *name, bool is_dir,
			  const struct bk_meta *m)
{
	struct lent *e;
	int r;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;

		e = realloc(l->e, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		l->e = e;
		l->cap = cap;
	}
	e = &l->e[l->n];
	memset(e, 0, sizeof(*e));
	if ((r = pool_add(l, name, &e->name)) < 0)
		return r;
	e->flags = is_dir ? LE_DIR : 0;
	if (m && !is_dir) {
		bool md5;

		e->flags |= LE_META;
		e->size = m->size;
		e->mtime = m->mtime;
		e->mtime_ns = m->mtime_ns;
		if ((r = pool_etag(l, m->etag, &e->etag, &md5)) < 0)
			return r;
		if (md5)
			e->flags |= LE_MD5;
	}
	if (m && m->have_perm) {
		e->flags |= LE_PERM;
		e->perm = (uint16_t)(m->perm & 0777);
	}
	l->n++;
	return 0;
}

static int cmp_lent(const void *a, const void *b, void *arg)
{
	const struct lent *x = a, *y = b;
	const struct ns_listing *l = arg;
	int c = strcmp(lname(l, x), lname(l, y));

	if (c)
		return c;
	/* directories first among equal names */
	return (int)(y->flags & LE_DIR) - (int)(x->flags & LE_DIR);
}

/* Sort, keep one entry per name (pages may repeat a prefix; a key "a" and a prefix "a/" make
 * the directory win, as a file cannot hold children), and give back the slack. */
static void listing_seal(struct ns_listing *l)
{
	size_t w = 0;

	if (l->n)
		qsort_r(l->e, l->n, sizeof(*l->e), cmp_lent, l);
	for (size_t i = 0; i < l->n; i++) {
		if (w && strcmp(lname(l, &l->e[w - 1]), lname(l, &l->e[i])) == 0)
			continue;
		l->e[w++] = l->e[i];
	}
	l->n = w;
	if (l->n && l->n < l->cap) {
		struct lent *e = realloc(l->e, l->n * sizeof(*e));

		if (e) {
			l->e = e;
			l->cap = l->n;
		}
	}
	if (l->plen < l->pcap) {
		char *p = realloc(l->pool, l->plen);

		if (p) {
			l->pool = p;
			l->pcap = l->plen;
		}
	}
}

/* Binary search: the entry named @name, or NULL; *ret_pos is where it is or would go. */
static struct lent *find_pos(struct ns_listing *l, const char *name, size_t *ret_pos)
{
	size_t lo = 0, hi = l->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(lname(l, &l->e[mid]), name);

		if (c == 0) {
			*ret_pos = mid;
			return &l->e[mid];
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*ret_pos = lo;
	return NULL;
}

static struct lent *find_entry(struct ns_listing *l, const char *name)
{
	size_t pos;

	return find_pos(l, name, &pos);
}

/* Make @d's listing one that only @d holds, copying it if open handles share it (lock held).
 * @return it, or NULL if out of memory. */
static struct ns_listing *listing_own(struct dirst *d)
{
	struct ns_listing *l = d->list, *c;

	if (__atomic_load_n(&l->refs, __ATOMIC_ACQUIRE) == 1)
		return l; /* only handles opened under the lock could add one */
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->e = malloc((l->n ? l->n : 1) * sizeof(*c->e));
	c->pool = malloc(l->plen);
	if (!c->e || !c->pool) {
		free(c->e);
		free(c->pool);
		free(c);
		return NULL;
	}
	memcpy(c->e, l->e, l->n * sizeof(*c->e));
	memcpy(c->pool, l->pool, l->plen);
	c->refs = 1;
	c->n = c->cap = l->n;
	c->plen = c->pcap = l->plen;
	c->time_ns = l->time_ns;
	c->stale = l->stale;
	d->list = c;
	listing_put(l);
	return c;
}

/* Add @name to @d's listing, keeping it sorted (it is not in it; lock held).
 * @return the entry or NULL (out of memory). */
static struct lent *listing_insert(struct dirst *d, const char *name, bool is_dir,
				   const struct bk_meta *m)
{
	struct ns_listing *l = listing_own(d);
	struct lent e;
	size_t pos;

	if (!l || find_pos(l, name, &pos) || listing_append(l, name, is_dir, m) < 0)
		return NULL;
	e = l->e[l->n - 1];
	memmove(&l->e[pos + 1], &l->e[pos], (l->n - 1 - pos) * sizeof(e));
	l->e[pos] = e;
	return &l->e[pos];
}

static bool fresh(struct ns *ns, uint64_t t, uint64_t now)
{
	return now - t < ns->cfg.metadata_ttl * 1000000000ULL;
}

/* May @d's listing answer without asking the store (lock held)? */
static bool listing_fresh(struct ns *ns, const struct dirst *d)
{
	return d->list && (ns->cfg.immutable ||
			   (!d->list->stale && fresh(ns, d->list->time_ns, clock_ns(ns))));
}

static void negs_free(struct negs *g)
{
	for (uint32_t i = 0; g && i < g->n; i++)
		free(g->e[i].name);
	free(g);
}

static struct dirst *dirst_new(void)
{
	return calloc(1, sizeof(struct dirst));
}

/* Bytes of a node with a name of @len bytes: the name starts in the struct's tail padding
 * (never less than the struct, so the whole struct is always inside the allocation). */
static size_t node_size(size_t len)
{
	size_t n = offsetof(struct node, name) + len + 1;

	return n < sizeof(struct node) ? sizeof(struct node) : n;
}

/* Free @n and what it owns (not its place in the tables, nor its directory's count of it:
 * see node_drop). */
static void node_free(struct node *n)
{
	if (n->is_dir && n->dir) {
		/* a listing in flight finds the node gone and frees itself */
		listing_put(n->dir->list);
		negs_free(n->dir->negs);
		while (n->dir->ov) {
			struct ov *o = n->dir->ov;

			n->dir->ov = o->next;
			free(o);
		}
		free(n->dir);
	} else if (!n->is_dir && n->f) {
		fobj_put(n->f->cur);
		free(n->f);
	}
	free(n);
}

struct ns *ns_new(const struct ns_cfg *cfg)
{
	struct ns *ns = calloc(1, sizeof(*ns));
	struct node *root;

	if (!ns)
		return NULL;
	ns->cfg = *cfg;
	ns->store = strdup(cfg->store ? cfg->store : "");
	ns->started = time(NULL);
	ns->nbuckets = 1024;
	ns->by_ino = calloc(ns->nbuckets, sizeof(struct node *));
	ns->by_name = calloc(ns->nbuckets, sizeof(struct node *));
	root = calloc(1, node_size(0)); /* name "" */
	if (!ns->by_ino || !ns->by_name || !root || !ns->store)
		goto fail;
	root->ino = ROOT_INO;
	root->is_dir = true;
	root->nlookup = 1;
	root->dir = dirst_new();
	if (!root->dir)
		goto fail;
	pthread_mutex_init(&ns->lock, NULL);
	ns->next_ino = ROOT_INO + 1;
	link_node(ns, root);
	ns->count = 1;
	return ns;
fail:
	if (root)
		node_free(root);
	free(ns->by_ino);
	free(ns->by_name);
	free(ns->store);
	free(ns);
	return NULL;
}

void ns_free(struct ns *ns)
{
	struct node *gone = NULL;

	if (!ns)
		return;
	/* directories the kernel forgot are out of the tables: found through their children
	 * (before any is freed), each once, when its last child counts off */
	for (size_t i = 0; i < ns->nbuckets; i++)
		for (struct node *n = ns->by_ino[i]; n; n = n->next_ino)
			for (struct node *g = n->up; g && g->gone && !--g->dir->kids; g = g->up) {
				g->next_ino = gone;
				gone = g;
			}
	for (size_t i = 0; i < ns->nbuckets; i++)
		for (struct node *n = ns->by_ino[i], *next; n; n = next) {
			next = n->next_ino;
			node_free(n);
		}
	for (struct node *next; gone; gone = next) {
		next = gone->next_ino;
		node_free(gone);
	}
	for (struct forgotten *f = ns->forgotten, *next; f; f = next) {
		next = f->next;
		forgotten_free(f);
	}
	free(ns->by_ino);
	free(ns->by_name);
	free(ns->store);
	pthread_mutex_destroy(&ns->lock);
	free(ns);
}

/* ---- versions ------------------------------------------------------------------------------ */

static bool same_version(const struct fobj *o, const struct bk_meta *m)
{
	if (o->size != m->size || o->mtime != m->mtime)
		return false;
	/* an index without ETags (nginx JSON) cannot contradict the ETag a HEAD gave */
	return !m->etag[0] || strcmp(o->etag, m->etag) == 0;
}

/* The oid of version @m of @path: by its ETag, or by size and mtime for a store without. */
static struct cache_oid version_oid(struct ns *ns, const char *path, const struct bk_meta *m)
{
	char v[64];

	if (m->etag[0])
		return cache_oid_make(ns->store, path, m->etag);
	snprintf(v, sizeof(v), "size=%llu mtime=%lld", (unsigned long long)m->size,
		 (long long)m->mtime);
	return cache_oid_make(ns->store, path, v);
}

/* A new version @m of file @n, with one reference. @return it or NULL (out of memory). */
static struct fobj *fobj_new(struct ns *ns, const struct node *n, const struct bk_meta *m)
{
	char *path = node_path(n);
	size_t plen = path ? strlen(path) : 0, elen = strnlen(m->etag, BK_ETAG_MAX - 1);
	struct fobj *o = path ? malloc(sizeof(*o) + plen + 1 + elen + 1) : NULL;
	char *etag;

	if (!o) {
		free(path);
		return NULL;
	}
	o->refs = 1;
	o->backend = ns->cfg.backend;
	o->serves = 0;
	o->size = m->size;
	o->mtime = m->mtime;
	o->mtime_ns = m->mtime_ns;
	memcpy(o->path, path, plen + 1);
	etag = o->path + plen + 1;
	memcpy(etag, m->etag, elen);
	etag[elen] = '\0';
	o->etag = etag;
	o->id = version_oid(ns, path, m);
	free(path);
	return o;
}

/* Remember the store's permission bits for @n, when it has any (lock held). */
static void take_perm(struct node *n, const struct bk_meta *m)
{
	n->have_perm = m->have_perm;
	n->perm = m->perm & 0777;
}

/* Files open on @n's inode. */
static uint32_t nopen(const struct node *n)
{
	return !n->is_dir && n->f ? n->f->nopen : 0;
}

static bool is_lazy(const struct node *n)
{
	return !n->is_dir && !n->f;
}

/* Lazy node @n is lazy no more, or goes: its directory counts one less (lock held). */
static void lazy_gone(const struct node *n)
{
	struct node *p = parent_of(n);

	if (p && p->is_dir && p->dir->lazy)
		p->dir->lazy--;
}

/* The version of lazy node @n: its directory's listing entry for its name, a file with
 * metadata (lock held). @return the entry and its listing in *ret_l, or NULL when there is
 * none (out of memory kept the node from taking its own version when the entry went). */
static struct lent *lazy_entry(const struct node *n, struct ns_listing **ret_l)
{
	struct node *p = parent_of(n);
	struct ns_listing *l = p ? p->dir->list : NULL;
	struct lent *e = l ? find_entry(l, n->name) : NULL;

	if (!e || (e->flags & (LE_DIR | LE_META)) != LE_META)
		return NULL;
	*ret_l = l;
	return e;
}

/* Make @m the node's current version (lock held); a lazy node gets a version of its own here.
 * @confirmed: @m came from the store at @when (a listing or a HEAD), so with an ETag the
 * version counts as confirmed then (unless it was confirmed later already). @return 0 or
 * -ENOMEM. */
static int set_version(struct ns *ns, struct node *n, const struct bk_meta *m, bool confirmed,
		       uint64_t when)
{
	struct fstate *f = n->f;
	bool made = false;

	if (!f) {
		if (!(f = calloc(1, sizeof(*f))))
			return -ENOMEM;
		made = true;
	}
	if (!f->cur || !same_version(f->cur, m) || (!f->cur->etag[0] && m->etag[0])) {
		struct fobj *o = fobj_new(ns, n, m);

		if (!o) {
			if (made)
				free(f);
			return -ENOMEM;
		}
		fobj_put(f->cur);
		f->cur = o;
	}
	if (made) {
		lazy_gone(n);
		n->f = f;
	}
	take_perm(n, m);
	if (confirmed && m->etag[0] && when >= f->meta_ns) {
		f->meta_ns = when;
		f->stale = false;
	}
	return 0;
}

/* Give lazy node @n the version of listing entry @e of @l as its own (lock held): as confirmed
 * as the listing is. @return 0 or -ENOMEM. */
static int keep_entry(struct ns *ns, struct node *n, const struct ns_listing *l,
		      const struct lent *e)
{
	struct bk_meta m;
	int r;

	lent_meta(l, e, &m);
	r = set_version(ns, n, &m, true, l->time_ns);
	if (r == 0 && l->stale)
		n->f->stale = true;
	return r;
}

/* Give lazy node @n the version its listing entry has now as its own (lock held).
 * @return 0, -ENOMEM, or -ENOENT (no entry: see lazy_entry). */
static int materialize(struct ns *ns, struct node *n)
{
	struct ns_listing *l;
	struct lent *e;

	if (!is_lazy(n))
		return 0;
	if (!(e = lazy_entry(n, &l)))
		return -ENOENT;
	return keep_entry(ns, n, l, e);
}

/* Directory @p's listing @old is about to be replaced by @new (lock held): its lazy nodes whose
 * name @new has not as a file with metadata take their version from @old, so a name that went
 * keeps the attributes it had (as a node with a version of its own does). Both are sorted:
 * one pass over each. */
static void keep_dropped(struct ns *ns, struct node *p, const struct ns_listing *old,
			 const struct ns_listing *new)
{
	size_t j = 0;

	for (size_t i = 0; i < old->n && p->dir->lazy; i++) {
		const struct lent *e = &old->e[i];
		const char *name = lname(old, e);
		struct node *c;
		int cmp = 1;

		if ((e->flags & (LE_DIR | LE_META)) != LE_META)
			continue;
		while (j < new->n && (cmp = strcmp(lname(new, &new->e[j]), name)) < 0)
			j++;
		if (j < new->n && cmp == 0 && (new->e[j].flags & (LE_DIR | LE_META)) == LE_META)
			continue;
		c = find_name(ns, p, name);
		if (c && is_lazy(c))
			keep_entry(ns, c, old, e); /* out of memory: lazy_entry says so */
	}
}

/* Directory @p goes: its lazy nodes take their version from its listing (lock held). The
 * kernel forgets a directory after its children as a rule, so this rarely finds any. */
static void keep_children(struct ns *ns, struct node *p)
{
	struct ns_listing *l = p->dir->list;

	for (size_t i = 0; l && i < l->n && p->dir->lazy; i++) {
		const struct lent *e = &l->e[i];
		struct node *c;

		if ((e->flags & (LE_DIR | LE_META)) != LE_META)
			continue;
		c = find_name(ns, p, lname(l, e));
		if (c && is_lazy(c))
			keep_entry(ns, c, l, e);
	}
}

/* Free @n; then its directory, if the kernel forgot it and it waited for its last child. */
static void node_release(struct node *n)
{
	while (n) {
		struct node *up = n->up;

		node_free(n);
		if (!up || --up->dir->kids || !up->gone)
			return;
		n = up;
	}
}

/* Directory @n goes: keep its listing for the next node of its path (lock held). Out of
 * memory: it goes with the node. */
static void forgotten_keep(struct ns *ns, struct node *n)
{
	struct ns_listing *l = n->dir->list;
	char *path;
	struct forgotten *f, **pp;
	size_t keep = 0, bytes = 0;

	if (!l || !(path = node_path(n)))
		return;
	f = malloc(sizeof(*f) + strlen(path) + 1);
	if (!f) {
		free(path);
		return;
	}
	strcpy(f->path, path);
	free(path);
	f->list = l;
	f->bytes = msize(l) + msize(l->e) + msize(l->pool);
	f->fail_logged = n->dir->fail_logged;
	n->dir->list = NULL;
	f->next = ns->forgotten;
	ns->forgotten = f;
	ns->nforgotten++;
	ns->forgotten_bytes += f->bytes;
	/* the newest always stays; older ones while both bounds hold */
	for (pp = &ns->forgotten; *pp; pp = &(*pp)->next) {
		if (keep && (keep == FORGOTTEN_MAX || bytes + (*pp)->bytes > FORGOTTEN_BYTES))
			break;
		keep++;
		bytes += (*pp)->bytes;
	}
	while (*pp) {
		f = *pp;
		*pp = f->next;
		ns->nforgotten--;
		ns->forgotten_bytes -= f->bytes;
		forgotten_free(f);
	}
}

/* New directory node @n takes the listing its path had when the kernel forgot it, if kept
 * (lock held). */
static void forgotten_take(struct ns *ns, struct node *n)
{
	struct forgotten *f, **pp;
	char *path;

	if (!ns->forgotten || !(path = node_path(n)))
		return;
	for (pp = &ns->forgotten; *pp && strcmp((*pp)->path, path) != 0; pp = &(*pp)->next)
		;
	free(path);
	if (!(f = *pp))
		return;
	*pp = f->next;
	ns->nforgotten--;
	ns->forgotten_bytes -= f->bytes;
	n->dir->list = f->list;
	n->dir->fail_logged = f->fail_logged;
	f->list = NULL;
	forgotten_free(f);
}

/* Take @n out of the tables and free it (lock held). */
static void node_drop(struct ns *ns, struct node *n)
{
	if (n->is_dir && n->dir->lazy)
		keep_children(ns, n);
	if (n->is_dir)
		forgotten_keep(ns, n);
	if (is_lazy(n))
		lazy_gone(n);
	unlink_name(ns, n);
	unlink_ino(ns, n);
	ns->count--;
	if (n->is_dir && n->dir->kids) {
		/* its children's paths go through its name: kept until the last goes */
		n->gone = true;
		listing_put(n->dir->list);
		n->dir->list = NULL;
		return;
	}
	struct node *up = n->up && !n->up->gone ? n->up : NULL;

	node_release(n);
	/* a directory the kernel forgot, kept for its children (ns_forget): the last one went */
	if (up && up->ino != ROOT_INO && !up->nlookup && !up->dir->kids)
		node_drop(ns, up);
}

/* Would @m replace the bytes of @n's current version (not merely add an ETag)? Only a node
 * with a version of its own has one to replace: a lazy node follows its listing entry. */
static bool changes(const struct node *n, const struct bk_meta *m)
{
	return !n->is_dir && n->f && !same_version(n->f->cur, m);
}

/* Record in the parent's listing what the store just said of @n's name (lock held), so a
 * lookup does not bring back an older version. Best effort: where open handles share the
 * listing and the new ETag does not fit in the old one's place, the listing is copied, or
 * if that fails marked stale. */
static void listing_note(struct ns *ns, const struct node *n, const struct bk_meta *m)
{
	struct node *p = parent_of(n);
	struct ns_listing *l = p ? p->dir->list : NULL;
	struct lent *e = l ? find_entry(l, n->name) : NULL;
	unsigned char md5b[16];
	bool md5 = etag_md5(m->etag, md5b);
	size_t need = md5 ? 16 : m->etag[0] ? strlen(m->etag) + 1 : 0;

	if (!e || (e->flags & LE_DIR))
		return;
	if (need > etag_bytes(l, e)) {
		uint32_t off;

		l = listing_own(p->dir);
		e = l ? find_entry(l, n->name) : NULL;
		if (!e || pool_put(l, md5 ? (const void *)md5b : m->etag, need, &off) < 0) {
			p->dir->list->stale = true;
			return;
		}
		e->etag = off;
	} else if (need) {
		/* in the old one's place: handles never read ETags */
		memcpy(l->pool + e->etag, md5 ? (const void *)md5b : m->etag, need);
	} else {
		e->etag = 0;
	}
	e->flags = (uint8_t)((e->flags & ~LE_MD5) | (md5 ? LE_MD5 : 0) | LE_META);
	e->size = m->size;
	e->mtime = m->mtime;
	e->mtime_ns = m->mtime_ns;
}

/* Ask the store about @n's path (lock held on entry and exit, dropped for the request;
 * helper threads only). @return what backend_stat returns. */
static int stat_unlocked(struct ns *ns, const struct node *n, struct bk_meta *ret)
{
	char *copy = node_path(n);
	int e;

	if (!copy)
		return -ENOMEM;
	pthread_mutex_unlock(&ns->lock);
	e = backend_stat(ns->cfg.backend, copy, ret);
	free(copy);
	pthread_mutex_lock(&ns->lock);
	return e;
}

/* Free @n if nothing refers to it: a node made by a lookup that then failed (lock held). */
static void drop_unused(struct ns *ns, struct node *n)
{
	if (!n || n->ino == ROOT_INO || n->nlookup || nopen(n))
		return;
	node_drop(ns, n);
}

/* Ownership and modes are the mount's (uid, gid, file_mode, dir_mode); where the store has
 * permission bits of its own (file://) the mode is ANDed with them, so a file is never more
 * readable, writable or searchable through the mount than it is in the store. A lazy node's
 * size, time and bits are its listing entry's. */
static void fill_stat(struct ns *ns, const struct node *n, struct stat *st)
{
	mode_t mode = n->is_dir ? ns->cfg.dir_mode : ns->cfg.file_mode;
	bool have_perm = n->have_perm;
	unsigned perm = n->perm;
	uint64_t size = 0;
	int64_t mtime = INT64_MIN;
	uint32_t mtime_ns = 0;

	if (!n->is_dir && n->f && n->f->writing) {
		size = n->f->wsize;
		mtime = n->f->wmtime;
	} else if (!n->is_dir && n->f) {
		size = n->f->cur->size;
		mtime = n->f->cur->mtime;
		mtime_ns = n->f->cur->mtime_ns;
	} else if (!n->is_dir) {
		struct ns_listing *l;
		const struct lent *e = lazy_entry(n, &l);

		if (e) {
			size = e->size;
			mtime = e->mtime;
			mtime_ns = e->mtime_ns;
			have_perm = (e->flags & LE_PERM) != 0;
			perm = e->perm;
		}
	}
	if (have_perm)
		mode &= perm;
	memset(st, 0, sizeof(*st));
	st->st_ino = n->ino;
	st->st_uid = ns->cfg.uid;
	st->st_gid = ns->cfg.gid;
	st->st_blksize = ns->cfg.block_size;
	if (n->is_dir) {
		/* a prefix has no time of its own: show when the mount started, or when a name in
		 * it was last made or removed through the mount (POSIX's parent times) */
		st->st_mode = S_IFDIR | mode;
		st->st_nlink = 2;
		st->st_mtime = st->st_ctime = st->st_atime = ns->started;
		if (n->dir && n->dir->changed > ns->started)
			st->st_mtime = st->st_ctime = n->dir->changed;
		return;
	}
	st->st_mode = S_IFREG | mode;
	st->st_nlink = 1;
	st->st_size = (off_t)size;
	st->st_blocks = (blkcnt_t)((size + 511) / 512);
	if (mtime != INT64_MIN) {
		st->st_mtime = st->st_ctime = st->st_atime = (time_t)mtime;
		st->st_mtim.tv_nsec = st->st_ctim.tv_nsec = st->st_atim.tv_nsec = mtime_ns;
	}
}

/* "parent/name", or "name" in the root. @return malloc'd or NULL. */
static char *child_path(const struct node *parent, const char *name)
{
	char *pp = node_path(parent), *p;

	if (!pp)
		return NULL;
	if (!pp[0]) {
		free(pp);
		return strdup(name);
	}
	if (asprintf(&p, "%s/%s", pp, name) < 0)
		p = NULL;
	free(pp);
	return p;
}

/* A new node for @name in @parent, its name inline; a file starts lazy. */
static struct node *node_new(struct ns *ns, struct node *parent, const char *name, bool is_dir)
{
	size_t nl = strlen(name);
	struct node *n = calloc(1, node_size(nl));

	if (!n)
		return NULL;
	n->ino = ns->next_ino++;
	n->up = parent;
	n->is_dir = is_dir;
	memcpy(n->name, name, nl + 1);
	if (is_dir && !(n->dir = dirst_new())) {
		free(n);
		return NULL;
	}
	if (is_dir)
		forgotten_take(ns, n);
	parent->dir->kids++;
	if (!is_dir)
		parent->dir->lazy++;
	if (ns->count >= ns->nbuckets)
		grow(ns);
	link_node(ns, n);
	ns->count++;
	return n;
}

/*
 * The node a listing entry of @name in @p names now (lock held), or NULL when it needs a new
 * one: none yet; the key changed type; or files are open on the node's version and @m (the
 * entry's metadata, NULL if it has none) is another, and the open files keep the old inode
 * with its page cache.
 */
static struct node *entry_node(struct ns *ns, struct node *p, const char *name, bool is_dir,
			       const struct bk_meta *m)
{
	struct node *n = find_name(ns, p, name);

	if (n && n->is_dir != is_dir) {
		/* the key changed type: a new inode; the old one keeps what it had (taken when
		 * the listing changed: keep_dropped) */
		materialize(ns, n);
		unlink_name(ns, n);
		n = NULL;
	}
	if (n && !is_dir && m && nopen(n) && changes(n, m)) {
		unlink_name(ns, n); /* files are open on the old version: a new inode */
		n = NULL;
	}
	return n;
}

/*
 * Answer a lookup of @name in @p with node @n (from entry_node; NULL: make it) and what the
 * store said of it, @m (NULL if nothing: a directory without permission bits; a file always
 * has it here). @confirmed as set_version takes it. @listed: @m is @p's listing entry for the
 * name, so a file node without a version of its own stays so (lazy) and follows the entry,
 * and is confirmed when the listing was started, not now (a listing served stale must not
 * make a version look freshly confirmed: open would not ask the store again). Else @m came
 * from the store just now. Raises the lookup count and fills @st. @return 0 or -ENOMEM (a
 * node made here is dropped again).
 */
static int entry_link(struct ns *ns, struct node *p, const char *name, struct node *n,
		      bool is_dir, const struct bk_meta *m, bool confirmed, bool listed,
		      struct stat *st)
{
	bool made = false;
	int e = 0;

	if (!n) {
		if (!(n = node_new(ns, p, name, is_dir)))
			return -ENOMEM;
		made = true;
	}
	if (is_dir && m && m->have_perm)
		take_perm(n, m);
	if (!is_dir && m && !(listed && is_lazy(n)))
		e = set_version(ns, n, m, confirmed,
				listed ? p->dir->list->time_ns : clock_ns(ns));
	if (e == 0) {
		if (n->nlookup < UINT32_MAX)
			n->nlookup++;
		fill_stat(ns, n, st);
	} else if (made) {
		drop_unused(ns, n);
	}
	return e;
}

/* ---- names missing from a listing ---------------------------------------------------------- */

/* Did the store say @name is missing from directory @d less than negative_ttl ago? */
static bool neg_fresh(struct ns *ns, struct dirst *d, const char *name, uint64_t now)
{
	for (uint32_t i = 0; d->negs && i < d->negs->n; i++) {
		struct neg *g = &d->negs->e[i];

		if (strcmp(g->name, name) == 0)
			return now - g->time_ns < ns->cfg.negative_ttl * 1000000000ULL;
	}
	return false;
}

/* Remove entry @i of @d's negative cache, keeping the order (oldest first); the array goes
 * with its last entry. */
static void neg_remove(struct dirst *d, uint32_t i)
{
	struct negs *g = d->negs;

	free(g->e[i].name);
	memmove(&g->e[i], &g->e[i + 1], (--g->n - i) * sizeof(g->e[0]));
	if (!g->n) {
		free(g);
		d->negs = NULL;
	}
}

/* Remember that @name is missing from @d. Entries are in the order they came (oldest first):
 * the expired ones and the same name's go, and when NEG_MAX fresh ones remain, the oldest.
 * Out of memory: not remembered (the next lookup asks). */
static void neg_add(struct ns *ns, struct dirst *d, const char *name, uint64_t now)
{
	uint64_t ttl = ns->cfg.negative_ttl * 1000000000ULL;
	struct negs *g = d->negs;
	uint32_t w = 0;
	char *copy;

	for (uint32_t i = 0; g && i < g->n; i++) {
		if (now - g->e[i].time_ns >= ttl || strcmp(g->e[i].name, name) == 0)
			free(g->e[i].name);
		else
			g->e[w++] = g->e[i];
	}
	if (g && !(g->n = w)) {
		free(g);
		d->negs = g = NULL;
	}
	if (!ttl || !(copy = strdup(name)))
		return;
	if (g && g->n == NEG_MAX) {
		neg_remove(d, 0);
	} else if (!g || g->n == g->cap) {
		uint32_t cap = g ? g->cap * 2 : 4;
		struct negs *ng = realloc(g, sizeof(*g) + cap * sizeof(g->e[0]));

		if (!ng) {
			free(copy);
			return;
		}
		if (!g)
			ng->n = 0;
		ng->cap = cap;
		d->negs = ng;
	}
	g = d->negs;
	g->e[g->n++] = (struct neg){.name = copy, .time_ns = now};
}

static void neg_del(struct dirst *d, const char *name)
{
	for (uint32_t i = 0; d->negs && i < d->negs->n; i++) {
		if (strcmp(d->negs->e[i].name, name) == 0) {
			neg_remove(d, i);
			return;
		}
	}
}

/* ---- operations that may wait for the store ------------------------------------------------ */

/*
 * Every lookup, open and opendir is an op that runs in steps. A step runs under ns->lock and
 * either answers, or says what it needs from the store: a listing (the op joins the
 * directory's fetch in flight, or starts it), one stat, or the revalidation of a node's
 * version (joined, or started). The request goes out after the lock is dropped, and its
 * completion runs the op's next step on the I/O thread. A step starts from what ns holds
 * then, never from what it held before the wait. A step may also start a request nobody waits
 * for (a refresh behind a stale answer).
 *
 *   run ─► step ──answer──► done(arg, ...)
 *            ├─ STEP_LIST ──► waiters of dir->inflight ─── list_done ──► run (each waiter)
 *            ├─ STEP_STAT ──► backend_stat_async ───────── stat_done ──► run
 *            └─ STEP_REVAL ─► waiters of f->reval ─┬────── reval_done ─► run (each waiter)
 *                                                  └ REVAL_WAIT_NS ─ reval_timer ─► run (each
 *                                                    waiter that may take a stale version)
 *
 * What waits (stale-while-revalidate, docs/design.md invariant 11): only what memory cannot answer.
 *   - lookup: a directory never listed waits for its first listing; a name missing from the
 *     listing held, unless found missing less than negative_ttl ago, waits for the refresh
 *     when the listing is older than metadata_ttl (the name may be a new prefix, which no HEAD
 *     finds), then is asked of the store (stat / HEAD); so is a file a manifest names without
 *     metadata, when the store was never asked about it. Everything else answers from memory
 *     at once: a name in a listing older than metadata_ttl, with one refresh behind it (single
 *     flight: the names that wait for it join it, no known name does); a manifest's file's
 *     version, with one revalidation behind it.
 *   - opendir: likewise, a listing held answers at once.
 *   - open: a version never confirmed with an ETag, or known to have changed (ns_stale, or a
 *     revalidation that found a new one while files were open), waits for the store. One
 *     merely older than metadata_ttl is revalidated (one HEAD per node at a time): the open
 *     waits for the answer REVAL_WAIT_NS at most, then takes the version held while the HEAD
 *     finishes behind it; not at all when the store seems stalled (store_stalled) or the
 *     node's HEAD has been out longer than that. A store that answers so keeps open's promise
 *     (an open after metadata_ttl reads a changed object's new version), and one that hangs
 *     costs an open of a known file nothing (or REVAL_WAIT_NS, once per node and timeout).
 * A refresh or revalidation that fails leaves what is held in use.
 */
enum { OP_LOOKUP, OP_OPEN, OP_OPENDIR };
enum { STAT_NONE, STAT_ASK, STAT_META };
#define STEP_LIST 1
#define STEP_STAT 2
#define STEP_REVAL 3

/* How long an open waits, at most, for the revalidation of a version older than metadata_ttl;
 * and how long the store may leave the namespace's requests without a sign of life before it
 * counts as stalled. Short enough not to be a wait to a reader; long enough for a store that
 * answers at all, even on a loaded machine. */
#define REVAL_WAIT_NS (100 * 1000000ULL)

struct nsop {
	struct ns *ns;
	int kind;                /* OP_* */
	uint64_t ino;            /* lookup: the directory; open, opendir: the node */
	union {
		ns_entry_fn entry;
		ns_open_fn open;
		ns_dir_fn dir;
	} done;
	void *arg;
	struct nsop *next;       /* waiters of one listing or revalidation (ns->lock) */
	bool waited;             /* a listing this op waited for has ended ... */
	int list_err;            /* ... with this */
	int stat;                /* STAT_*: what the store was asked */
	bool have_stat;          /* ... and it answered: */
	int stat_err;
	struct bk_meta m;
	bool strict;             /* open: waits for its revalidation's answer, however long */
	bool reval_done;         /* open: the revalidation it waited for has answered ... */
	int reval_err;           /* ... with this (reval_apply's), or -EAGAIN: not in time */
	/* the answer */
	struct stat st;
	bool stale;              /* lookup: from metadata past metadata_ttl (ns_entry_fn) */
	struct fobj *o;
	bool same, changed;
	struct ns_dir *d;
	char name[];             /* lookup: the name */
};

/* A listing in flight (single flight per directory: dirst.inflight). */
struct lfetch {
	struct ns *ns;
	uint64_t ino;            /* the directory */
	uint64_t started;        /* clock at the start: the listing's time */
	struct ns_listing *l;    /* being filled on the I/O thread, no lock */
	int err;                 /* the collector's failure */
	struct nsop *waiters;    /* ns->lock */
	char path[];
};

/* A node's version being confirmed with the store (single flight per node: fstate.reval). The
 * answer is applied to the node whoever waits (reval_apply); then every waiting open goes on.
 * Opens that may take a stale version go on without it at REVAL_WAIT_NS (reval_timer). */
struct reval {
	struct ns *ns;
	uint64_t ino;            /* the node */
	unsigned refs;           /* the HEAD's and the timer's; ns->lock */
	bool expired;            /* REVAL_WAIT_NS passed without an answer; ns->lock */
	struct nsop *waiters;    /* opens waiting for it, newest first; ns->lock */
	char path[];
};

/* What a step asks of the store, sent by run once ns->lock is dropped. */
struct sub {
	struct lfetch *lf;       /* a listing to start (the op may wait for it, or not) */
	struct reval *rv;        /* a revalidation to start (likewise) */
	char *path;              /* STEP_STAT: the path to stat (malloc'd) */
};

static void run(struct nsop *op);

/*
 * Is the store answering? ns counts its requests in flight (reqs) and the last sign of life
 * for them (progress_ns: an answer other than a timeout, a listing entry, or the moment reqs
 * left 0). With requests out and no sign of life for REVAL_WAIT_NS, the store counts as
 * stalled, and opens take the version held at once instead of each waiting REVAL_WAIT_NS for
 * its own HEAD. A hint, kept with atomics and no lock.
 */
static void req_sent(struct ns *ns)
{
	if (__atomic_fetch_add(&ns->reqs, 1, __ATOMIC_ACQ_REL) == 0)
		__atomic_store_n(&ns->progress_ns, clock_ns(ns), __ATOMIC_RELEASE);
}

static void store_alive(struct ns *ns)
{
	__atomic_store_n(&ns->progress_ns, clock_ns(ns), __ATOMIC_RELEASE);
}

static void req_done(struct ns *ns, int err)
{
	if (err != -ETIMEDOUT)
		store_alive(ns);
	__atomic_fetch_sub(&ns->reqs, 1, __ATOMIC_ACQ_REL);
}

static bool store_stalled(struct ns *ns, uint64_t now)
{
	uint64_t p = __atomic_load_n(&ns->progress_ns, __ATOMIC_ACQUIRE);

	return __atomic_load_n(&ns->reqs, __ATOMIC_ACQUIRE) && now > p && now - p >= REVAL_WAIT_NS;
}

/* Join @n's listing in flight, or start one (lock held); @op (NULL: a refresh in the
 * background) waits for it. @return 0 and in *ret_lf a new fetch to submit once unlocked
 * (NULL when joined), or -ENOMEM. */
static int start_listing(struct ns *ns, struct node *n, struct nsop *op, struct lfetch **ret_lf)
{
	struct lfetch *lf = n->dir->inflight;

	if (!lf) {
		char *path = node_path(n);

		lf = path ? calloc(1, sizeof(*lf) + strlen(path) + 1) : NULL;
		if (!lf || !(lf->l = listing_new())) {
			free(lf);
			free(path);
			return -ENOMEM;
		}
		strcpy(lf->path, path);
		free(path);
		lf->ns = ns;
		lf->ino = n->ino;
		lf->started = clock_ns(ns); /* a change after this may be missing from it */
		n->dir->inflight = lf;
		*ret_lf = lf;
	}
	if (op) {
		op->next = lf->waiters;
		lf->waiters = op;
	}
	return 0;
}

/* One entry of a listing in flight (I/O thread, no lock: the listing is the fetch's own). */
static int on_entry(void *arg, const char *name, bool is_dir, const struct bk_meta *meta)
{
	struct lfetch *lf = arg;
	int e;

	store_alive(lf->ns);
	if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
	    strlen(name) > 255)
		return 0; /* not a possible file name: skipped */
	e = listing_append(lf->l, name, is_dir, meta);
	if (e < 0)
		lf->err = e;
	return e;
}

static void ov_apply(struct dirst *d);

/* Reverse a list of waiters (newest first) into the order they came in. */
static struct nsop *first_come(struct nsop *w)
{
	struct nsop *rev = NULL;

	while (w) {
		struct nsop *next = w->next;

		w->next = rev;
		rev = w;
		w = next;
	}
	return rev;
}

/* The listing ended: publish it, or keep the last good one; then every waiter goes on. */
static void list_done(void *arg, int err)
{
	struct lfetch *lf = arg;
	struct ns *ns = lf->ns;
	struct ns_listing *l = lf->l;
	struct nsop *w;
	bool log = false, kept = false;
	struct node *n;

	req_done(ns, err);
	if (err == 0 && lf->err)
		err = lf->err;
	if (err == 0) {
		listing_seal(l); /* no lock: sorting 100k names takes a while */
		l->time_ns = lf->started;
	}
	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, lf->ino);
	if (n && n->dir && n->dir->inflight == lf) {
		n->dir->inflight = NULL;
		if (err == 0) {
			if (n->dir->list && n->dir->lazy)
				keep_dropped(ns, n, n->dir->list, l);
			listing_put(n->dir->list); /* open handles keep theirs */
			n->dir->list = l;
			l = NULL;
			ov_apply(n->dir);
			n->dir->fail_logged = false;
		} else if (!n->dir->fail_logged) {
			n->dir->fail_logged = true;
			log = true;
			kept = n->dir->list != NULL;
		}
	}
	w = first_come(lf->waiters);
	lf->waiters = NULL;
	pthread_mutex_unlock(&ns->lock);
	listing_put(l);
	if (log && ns->cfg.log)
		ns->cfg.log(ns->cfg.log_arg, lf->path, err, kept);
	free(lf);
	while (w) {
		struct nsop *next = w->next;

		w->waited = true;
		w->list_err = err;
		run(w);
		w = next;
	}
}

static void submit_listing(struct ns *ns, struct lfetch *lf)
{
	int e;

	req_sent(ns);
	e = backend_list_async(ns->cfg.backend, lf->path, on_entry, list_done, lf);
	if (e < 0)
		list_done(lf, e);
}

static void stat_done(void *arg, int err, const struct bk_meta *meta)
{
	struct nsop *op = arg;

	req_done(op->ns, err);
	op->have_stat = true;
	op->stat_err = err;
	if (err == 0 && meta)
		op->m = *meta;
	run(op);
}

/* ---- revalidation of a node's version ---- */

static void reval_done(void *arg, int err, const struct bk_meta *meta);
static void reval_timer(void *arg);

/* Start confirming @n's version with the store (lock held): n->f->reval, sent by run once the
 * lock is dropped (*ret). @return 0 or -ENOMEM. */
static int reval_start(struct ns *ns, struct node *n, struct reval **ret)
{
	char *path = node_path(n);
	struct reval *rv = path ? calloc(1, sizeof(*rv) + strlen(path) + 1) : NULL;

	if (!rv) {
		free(path);
		return -ENOMEM;
	}
	strcpy(rv->path, path);
	free(path);
	rv->ns = ns;
	rv->ino = n->ino;
	rv->refs = ns->cfg.defer ? 2 : 1; /* the HEAD's, and the timer's */
	n->f->reval = rv;
	*ret = rv;
	return 0;
}

/* Drop a reference to @rv (lock held). */
static void reval_put(struct reval *rv)
{
	if (--rv->refs == 0)
		free(rv);
}

/* Send @rv's HEAD and arm its timer (no lock held). Once sent, @rv belongs to them. */
static void reval_send(struct ns *ns, struct reval *rv)
{
	int e;

	if (ns->cfg.defer &&
	    ns->cfg.defer(ns->cfg.clock_arg, REVAL_WAIT_NS, reval_timer, rv) < 0) {
		/* no timer (the loop is stopping): waiters wait for the answer */
		pthread_mutex_lock(&ns->lock);
		reval_put(rv);
		pthread_mutex_unlock(&ns->lock);
	}
	req_sent(ns);
	e = backend_stat_async(ns->cfg.backend, rv->path, reval_done, rv);
	if (e < 0)
		reval_done(rv, e, NULL);
}

/*
 * What the store said of @n's version (@err, @m), applied whoever waits (lock held).
 * @return 0: the version held is the store's (taken in place when no file is open on the
 * inode, and then the kernel's attributes are old: attr_changed); -ESTALE: a new version
 * while files are open, so the name gets a new inode, and this one is marked stale (an open
 * of it asks again); -ENOENT, -ENOTDIR, -EISDIR: gone (stale too); else the request's failure,
 * and what is held stays in use.
 */
static int reval_apply(struct ns *ns, struct node *n, int err, const struct bk_meta *m)
{
	bool changed;
	int e;

	if (err == -ENOENT || err == -ENOTDIR || err == -EISDIR)
		n->f->stale = true;
	if (err < 0)
		return err;
	listing_note(ns, n, m);
	if (n->f->nopen && changes(n, m)) {
		unlink_name(ns, n);
		n->f->stale = true;
		return -ESTALE;
	}
	changed = changes(n, m); /* before set_version, which may free the old one */
	e = set_version(ns, n, m, true, clock_ns(ns));
	if (e == 0 && changed)
		n->f->attr_changed = true;
	return e;
}

/* Run each of the opens @w (in order) with their revalidation's outcome @err. */
static void wake(struct nsop *w, int err)
{
	while (w) {
		struct nsop *next = w->next;

		w->reval_done = true;
		w->reval_err = err;
		run(w);
		w = next;
	}
}

/* The store answered a revalidation (I/O thread): apply it, then every open waiting goes on. */
static void reval_done(void *arg, int err, const struct bk_meta *meta)
{
	struct reval *rv = arg;
	struct ns *ns = rv->ns;
	struct nsop *w;
	struct node *n;

	req_done(ns, err);
	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, rv->ino);
	if (n && !n->is_dir && n->f && n->f->reval == rv) {
		n->f->reval = NULL;
		err = reval_apply(ns, n, err, meta);
	}
	w = first_come(rv->waiters);
	rv->waiters = NULL;
	reval_put(rv);
	pthread_mutex_unlock(&ns->lock);
	wake(w, err);
}

/* REVAL_WAIT_NS after a revalidation started (I/O thread): the opens that may take the version
 * held stop waiting for it; the strict ones wait on. */
static void reval_timer(void *arg)
{
	struct reval *rv = arg;
	struct ns *ns = rv->ns;
	struct nsop *w, *go = NULL, **pp = &rv->waiters;

	pthread_mutex_lock(&ns->lock);
	rv->expired = true;
	while ((w = *pp)) {
		if (w->strict) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		w->next = go; /* newest first in, so oldest first out */
		go = w;
	}
	reval_put(rv);
	pthread_mutex_unlock(&ns->lock);
	wake(go, -EAGAIN);
}

/* ---- the steps ---- */

/* @name is not in @p's listing and the store said something of it (op->stat_err, op->m):
 * remember a "missing" for negative_ttl, or add the name to the listing. @return the entry,
 * or NULL with *ret_err. */
static struct lent *ask_apply(struct ns *ns, struct node *p, struct nsop *op, int *ret_err)
{
	struct dirst *d = p->dir;
	struct lent *ent;
	int e = op->stat_err;

	if (e == -ENOENT || e == -ENOTDIR) {
		neg_add(ns, d, op->name, clock_ns(ns));
		*ret_err = -ENOENT;
		return NULL;
	}
	if (e < 0 && e != -EISDIR) {
		*ret_err = e;
		return NULL;
	}
	neg_del(d, op->name);
	if (!d->list) {
		*ret_err = -ENOENT;
		return NULL;
	}
	ent = find_entry(d->list, op->name); /* listed meanwhile */
	if (!ent)
		ent = listing_insert(d, op->name, e == -EISDIR, e == -EISDIR ? NULL : &op->m);
	if (!ent)
		*ret_err = -ENOMEM;
	return ent;
}

/* The listing a lookup in @p answers from (lock held): the one held, however old (an old one
 * is refreshed behind the answer, single flight); a directory never listed waits for its
 * first. @return 0 (p->dir->list is there), STEP_LIST, or -errno. */
static int lookup_listing(struct ns *ns, struct node *p, struct nsop *op, struct sub *sub)
{
	int e;

	if (p->dir->list) {
		if (!listing_fresh(ns, p->dir))
			start_listing(ns, p, NULL, &sub->lf); /* out of memory: the next tries */
		return 0;
	}
	if (op->waited)
		return op->list_err ? op->list_err : -EIO;
	e = start_listing(ns, p, op, &sub->lf);
	return e < 0 ? e : STEP_LIST;
}

/* The metadata of @n's own version (lock held). */
static void own_meta(const struct node *n, struct bk_meta *m)
{
	memset(m, 0, sizeof(*m));
	m->size = n->f->cur->size;
	m->mtime = n->f->cur->mtime;
	snprintf(m->etag, sizeof(m->etag), "%s", n->f->cur->etag);
	m->have_perm = n->have_perm;
	m->perm = n->perm;
}

/*
 * A file the listing names without metadata (a manifest), node @n (NULL: none yet): what the
 * store says of it, asked now (the lookup waits) when the node has no version of its own;
 * else the node's, however old, with one revalidation behind it when older than
 * metadata_ttl. @return 0 with *m (*ret_asked: the store said it just now), STEP_STAT, or
 * -errno.
 */
static int lookup_meta(struct ns *ns, struct node *p, struct nsop *op, struct node *n,
		       struct bk_meta *m, bool *ret_asked, struct sub *sub)
{
	if (op->stat == STAT_META && op->have_stat) {
		if (op->stat_err < 0)
			return op->stat_err;
		*m = op->m;
		*ret_asked = true;
		if (n && nopen(n) && changes(n, m)) {
			unlink_name(ns, n); /* rare: the next lookup makes a new inode */
			return -ESTALE;
		}
		return 0;
	}
	if (n && n->f) {
		op->stale = !ns->cfg.immutable && !fresh(ns, n->f->meta_ns, clock_ns(ns));
		if (op->stale && !n->f->reval)
			reval_start(ns, n, &sub->rv); /* out of memory: the next lookup tries */
		own_meta(n, m);
		*ret_asked = false;
		return 0;
	}
	sub->path = n ? node_path(n) : child_path(p, op->name);
	op->stat = STAT_META;
	op->have_stat = false;
	return sub->path ? STEP_STAT : -ENOMEM;
}

static int step_lookup(struct ns *ns, struct nsop *op, struct sub *sub)
{
	struct node *p = find_ino(ns, op->ino), *n;
	struct lent *ent;
	struct bk_meta m;
	bool is_dir, have_meta, have_perm, listed = true, asked = false;
	int e = 0;

	if (!p)
		return -ENOENT;
	if (!p->is_dir)
		return -ENOTDIR;
	/* a file being written through the mount is in no listing yet: its node answers */
	n = find_name(ns, p, op->name);
	if (n && !n->is_dir && n->f && n->f->writing) {
		if (n->nlookup < UINT32_MAX)
			n->nlookup++;
		fill_stat(ns, n, &op->st);
		return 0;
	}
	if (op->stat == STAT_ASK && op->have_stat) {
		op->stat = STAT_NONE;
		op->have_stat = false;
		ent = ask_apply(ns, p, op, &e);
		if (!ent)
			return e;
		listed = false; /* the store was just asked: a version of its own */
		asked = true;
	} else {
		if ((e = lookup_listing(ns, p, op, sub)) != 0)
			return e;
		ent = find_entry(p->dir->list, op->name);
		if (!ent) {
			/* negative_ttl=0: nothing is believed, every lookup asks */
			if (neg_fresh(ns, p->dir, op->name, clock_ns(ns)))
				return -ENOENT;
			/* a name never seen may be in the refresh (a new prefix, which no HEAD
			 * finds): it waits for that, then asks */
			if (!op->waited && !listing_fresh(ns, p->dir)) {
				e = start_listing(ns, p, op, &sub->lf);
				return e < 0 ? e : STEP_LIST;
			}
			sub->path = child_path(p, op->name);
			op->stat = STAT_ASK;
			return sub->path ? STEP_STAT : -ENOMEM;
		}
	}
	is_dir = ent->flags & LE_DIR;
	have_meta = ent->flags & LE_META;
	have_perm = ent->flags & LE_PERM;
	lent_meta(p->dir->list, ent, &m);
	n = entry_node(ns, p, op->name, is_dir, have_meta ? &m : NULL);
	if (!is_dir && !have_meta) {
		if ((e = lookup_meta(ns, p, op, n, &m, &asked, sub)) != 0)
			return e;
		have_meta = true;
		listed = false;
	}
	/* a version from a listing is as confirmed as the listing (entry_link) */
	if (listed)
		op->stale = !listing_fresh(ns, p->dir);
	return entry_link(ns, p, op->name, n, is_dir, (is_dir ? have_perm : have_meta) ? &m : NULL,
			  listed ? listing_fresh(ns, p->dir) : asked, listed, &op->st);
}

/* Open of @n, whose version needs the store's word (lock held): wait for the node's
 * revalidation, joined or started (STEP_REVAL); or, when the version held may be served stale
 * (it is not known to be wrong) and the store seems stalled or the node's revalidation is out
 * longer than REVAL_WAIT_NS, make sure one is out and answer now (0). @return 0, STEP_REVAL or
 * -ENOMEM. */
static int open_reval(struct ns *ns, struct node *n, struct nsop *op, struct sub *sub)
{
	struct reval *rv = n->f->reval;
	int e;

	op->strict = n->f->stale || !n->f->cur->etag[0];
	if (!op->strict && ((rv && rv->expired) || store_stalled(ns, clock_ns(ns)))) {
		if (!rv)
			reval_start(ns, n, &sub->rv); /* out of memory: the next open tries */
		return 0;
	}
	if (!rv && (e = reval_start(ns, n, &sub->rv)) < 0)
		return e;
	rv = n->f->reval;
	op->next = rv->waiters;
	rv->waiters = op;
	return STEP_REVAL;
}

static int step_open(struct ns *ns, struct nsop *op, struct sub *sub)
{
	struct node *n = find_ino(ns, op->ino);
	struct fstate *f;
	int e;

	if (!n)
		return -ENOENT;
	if (n->is_dir)
		return -EISDIR;
	/* an open needs a version of its own: a lazy node takes its listing entry's, as
	 * confirmed as the listing is (an older one is revalidated below) */
	if (is_lazy(n) && (e = materialize(ns, n)) < 0)
		return e == -ENOENT ? -ESTALE : e;
	f = n->f;
	if (f->writing)
		return -EBUSY; /* whole once it is closed (ops.c checks first; this closes the race) */
	if (op->reval_done) {
		/* the store's answer is applied (reval_apply); a failed or late one leaves the
		 * version held, served unless known wrong */
		op->reval_done = false;
		e = op->reval_err;
		if (e == -ESTALE || e == -ENOENT || e == -ENOTDIR || e == -EISDIR ||
		    (e < 0 && op->strict))
			return e;
	} else if (f->stale || !f->cur->etag[0] ||
		   (!ns->cfg.immutable && !fresh(ns, f->meta_ns, clock_ns(ns)))) {
		if ((e = open_reval(ns, n, op, sub)) != 0)
			return e;
	}
	fobj_get(f->cur);
	op->o = f->cur;
	/* a version the store has not confirmed (its HEAD still out) drops the inode's pages:
	 * if it changed, the first read that reaches the store moves to the new one (ops.c) */
	op->same = f->opened && cache_oid_eq(f->last_open_id, f->cur->id) && !f->reval;
	op->changed = f->attr_changed;
	f->attr_changed = false;
	f->last_open_id = f->cur->id;
	f->opened = true;
	f->nopen++;
	return 0;
}

static int step_opendir(struct ns *ns, struct nsop *op, struct sub *sub)
{
	struct node *n = find_ino(ns, op->ino);
	struct ns_dir *h;
	int e;

	if (!n)
		return -ENOENT;
	if (!n->is_dir)
		return -ENOTDIR;
	if (!n->dir->list) {
		if (op->waited)
			return op->list_err ? op->list_err : -EIO;
		e = start_listing(ns, n, op, &sub->lf);
		return e < 0 ? e : STEP_LIST;
	}
	/* stale-while-revalidate: this handle gets what is held, the next one the refresh */
	if (!listing_fresh(ns, n->dir))
		start_listing(ns, n, NULL, &sub->lf); /* out of memory: the next opendir tries */
	h = malloc(sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->ino = n->ino;
	h->parent = pino(n);
	h->l = n->dir->list;
	listing_get(h->l);
	op->d = h;
	return 0;
}

static void finish(struct nsop *op, int r)
{
	switch (op->kind) {
	case OP_LOOKUP:
		op->done.entry(op->arg, r, r == 0 ? &op->st : NULL, r == 0 && op->stale);
		break;
	case OP_OPEN:
		op->done.open(op->arg, r, r == 0 ? op->o : NULL, op->same, op->changed);
		break;
	default:
		op->done.dir(op->arg, r, r == 0 ? op->d : NULL);
		break;
	}
	free(op);
}

/* Run @op's steps until it answers or waits (no lock held). Once it waits, @op belongs to the
 * completion that will run it: it is not touched here again. */
static void run(struct nsop *op)
{
	struct ns *ns = op->ns;

	for (;;) {
		struct sub sub = {0};
		int r, e;

		pthread_mutex_lock(&ns->lock);
		if (op->kind == OP_LOOKUP)
			r = step_lookup(ns, op, &sub);
		else if (op->kind == OP_OPEN)
			r = step_open(ns, op, &sub);
		else
			r = step_opendir(ns, op, &sub);
		pthread_mutex_unlock(&ns->lock);
		/* what the step asked for goes out; a request the op waits for may run it (and
		 * free it) before returning */
		if (sub.lf)
			submit_listing(ns, sub.lf);
		if (sub.rv)
			reval_send(ns, sub.rv);
		if (r == STEP_LIST || r == STEP_REVAL)
			return;
		if (r != STEP_STAT) {
			finish(op, r);
			return;
		}
		op->have_stat = false;
		req_sent(ns);
		e = backend_stat_async(ns->cfg.backend, sub.path, stat_done, op);
		free(sub.path);
		if (e == 0)
			return;
		req_done(ns, e);
		op->have_stat = true;
		op->stat_err = e;
	}
}

static struct nsop *op_new(struct ns *ns, int kind, uint64_t ino, const char *name, void *arg)
{
	size_t n = name ? strlen(name) : 0;
	struct nsop *op = calloc(1, sizeof(*op) + n + 1);

	if (!op)
		return NULL;
	op->ns = ns;
	op->kind = kind;
	op->ino = ino;
	op->arg = arg;
	if (name)
		memcpy(op->name, name, n + 1);
	return op;
}

void ns_lookup_async(struct ns *ns, uint64_t parent, const char *name, ns_entry_fn done,
		     void *arg)
{
	struct nsop *op = op_new(ns, OP_LOOKUP, parent, name, arg);

	if (!op) {
		done(arg, -ENOMEM, NULL, false);
		return;
	}
	op->done.entry = done;
	run(op);
}

void ns_open_async(struct ns *ns, uint64_t ino, ns_open_fn done, void *arg)
{
	struct nsop *op = op_new(ns, OP_OPEN, ino, NULL, arg);

	if (!op) {
		done(arg, -ENOMEM, NULL, false, false);
		return;
	}
	op->done.open = done;
	run(op);
}

void ns_opendir_async(struct ns *ns, uint64_t ino, ns_dir_fn done, void *arg)
{
	struct nsop *op = op_new(ns, OP_OPENDIR, ino, NULL, arg);

	if (!op) {
		done(arg, -ENOMEM, NULL);
		return;
	}
	op->done.dir = done;
	run(op);
}

/* ---- the same, waiting --------------------------------------------------------------------- */

struct wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int err;
	struct stat st;
	struct fobj *o;
	bool same, changed;
	struct ns_dir *d;
};

static void wait_init(struct wait *w)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
}

static int wait_end(struct wait *w)
{
	pthread_mutex_lock(&w->lock);
	while (!w->done)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	return w->err;
}

static void wait_signal(struct wait *w, int err)
{
	pthread_mutex_lock(&w->lock);
	w->err = err;
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static void waited_entry(void *arg, int err, const struct stat *st, bool stale)
{
	(void)stale;
	struct wait *w = arg;

	if (st)
		w->st = *st;
	wait_signal(w, err);
}

static void waited_open(void *arg, int err, struct fobj *o, bool same, bool changed)
{
	struct wait *w = arg;

	w->o = o;
	w->same = same;
	w->changed = changed;
	wait_signal(w, err);
}

static void waited_dir(void *arg, int err, struct ns_dir *d)
{
	struct wait *w = arg;

	w->d = d;
	wait_signal(w, err);
}

int ns_lookup(struct ns *ns, uint64_t parent, const char *name, struct stat *ret_st)
{
	struct wait w;
	int e;

	wait_init(&w);
	ns_lookup_async(ns, parent, name, waited_entry, &w);
	e = wait_end(&w);
	if (e == 0)
		*ret_st = w.st;
	return e;
}

int ns_open(struct ns *ns, uint64_t ino, struct fobj **ret, bool *ret_same, bool *ret_changed)
{
	struct wait w;
	int e;

	*ret_changed = false;
	wait_init(&w);
	ns_open_async(ns, ino, waited_open, &w);
	e = wait_end(&w);
	if (e == 0) {
		*ret = w.o;
		*ret_same = w.same;
		*ret_changed = w.changed;
	}
	return e;
}

int ns_opendir(struct ns *ns, uint64_t ino, struct ns_dir **ret)
{
	struct wait w;
	int e;

	wait_init(&w);
	ns_opendir_async(ns, ino, waited_dir, &w);
	e = wait_end(&w);
	if (e == 0)
		*ret = w.d;
	return e;
}

/* ---- answered from what ns holds ----------------------------------------------------------- */

void ns_forget(struct ns *ns, uint64_t ino, uint64_t count)
{
	struct node *n;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (n && ino != ROOT_INO && n->nlookup != UINT32_MAX) { /* saturated: kept */
		n->nlookup = count >= n->nlookup ? 0 : n->nlookup - (uint32_t)count;
		/* A directory whose children the kernel still knows stays, inode and all, until
		 * the last of them goes (node_drop): the kernel forgets an unused directory's inode
		 * while its files' inodes, which hold their page cache, live on without dentries.
		 * Looked up again under a new inode, the directory would give its files new inodes
		 * too, and their cached pages would never be used again (test_mmap's tail, under
		 * memory pressure: 64 MiB resident before the replay, 0 after). */
		if (!n->nlookup && !(n->is_dir && n->dir->kids))
			node_drop(ns, n);
	}
	pthread_mutex_unlock(&ns->lock);
}

int ns_getattr(struct ns *ns, uint64_t ino, struct stat *ret_st)
{
	struct node *n;
	int e = 0;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (n)
		fill_stat(ns, n, ret_st);
	else
		e = -ENOENT;
	pthread_mutex_unlock(&ns->lock);
	return e;
}

void ns_release(struct ns *ns, uint64_t ino)
{
	struct node *n;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (n && nopen(n))
		n->f->nopen--;
	pthread_mutex_unlock(&ns->lock);
}

int ns_move(struct ns *ns, uint64_t ino, struct fobj *old, uint64_t serves, struct fobj **ret)
{
	struct node *n;
	struct bk_meta m;
	int e;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (!n || n->is_dir || !n->f) { /* an open file's node has a version of its own */
		e = -ESTALE;
		goto out;
	}
	e = stat_unlocked(ns, n, &m);
	n = find_ino(ns, ino);
	if (!n)
		e = -ESTALE;
	if (e < 0)
		goto out;
	listing_note(ns, n, &m);
	if (same_version(old, &m) && (!m.etag[0] || strcmp(old->etag, m.etag) == 0)) {
		e = -ESTALE; /* the store has nothing newer */
		goto out;
	}
	/* Only the moving file may be open on the inode, and nobody may have fed the page cache
	 * from the old version since it opened (a file that closed since included): the serves
	 * counter is raised before each reply, and a release takes ns->lock after it. */
	if (n->f->cur != old || n->f->nopen != 1 ||
	    __atomic_load_n(&old->serves, __ATOMIC_ACQUIRE) != serves) {
		if (n->f->nopen)
			unlink_name(ns, n); /* open files keep the old version: new inode */
		n->f->stale = true;
		e = -ESTALE;
		goto out;
	}
	e = set_version(ns, n, &m, true, clock_ns(ns));
	if (e < 0)
		goto out;
	n->f->last_open_id = n->f->cur->id;
	fobj_get(n->f->cur);
	*ret = n->f->cur;
out:
	pthread_mutex_unlock(&ns->lock);
	return e;
}

void ns_stale(struct ns *ns, uint64_t ino, struct cache_oid id)
{
	struct node *n, *p;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (n && !n->is_dir && n->f && cache_oid_eq(n->f->cur->id, id)) {
		n->f->stale = true;
		p = parent_of(n);
		if (p && p->dir->list)
			p->dir->list->stale = true;
	}
	pthread_mutex_unlock(&ns->lock);
}

int ns_peek(struct ns *ns, uint64_t ino, struct fobj **ret)
{
	struct node *n;
	int e = 0;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (!n)
		e = -ENOENT;
	else if (n->is_dir)
		e = -EISDIR;
	else if (n->f) {
		fobj_get(n->f->cur);
		*ret = n->f->cur;
	} else {
		/* lazy: a version made for the caller alone, the node stays as it is */
		struct ns_listing *l;
		struct lent *ent = lazy_entry(n, &l);
		struct bk_meta m;

		if (ent) {
			lent_meta(l, ent, &m);
			*ret = fobj_new(ns, n, &m);
		}
		e = !ent ? -ENODATA : *ret ? 0 : -ENOMEM;
	}
	pthread_mutex_unlock(&ns->lock);
	return e;
}

struct ns_dir *ns_dir_make(uint64_t ino, uint64_t parent, const char *const *names, size_t n)
{
	struct ns_dir *d = malloc(sizeof(*d));
	struct ns_listing *l = listing_new();

	if (!d || !l)
		goto fail;
	for (size_t i = 0; i < n; i++)
		if (listing_append(l, names[i], false, NULL) < 0)
			goto fail;
	listing_seal(l);
	d->ino = ino;
	d->parent = parent;
	d->l = l;
	return d;
fail:
	listing_put(l);
	free(d);
	return NULL;
}

void ns_dir_put(struct ns_dir *d)
{
	if (!d)
		return;
	listing_put(d->l);
	free(d);
}

size_t ns_dir_count(const struct ns_dir *d)
{
	return d->l->n;
}

const char *ns_dir_name(const struct ns_dir *d, size_t i, bool *ret_is_dir)
{
	*ret_is_dir = (d->l->e[i].flags & LE_DIR) != 0;
	return lname(d->l, &d->l->e[i]);
}

int ns_dir_lookup(struct ns *ns, const struct ns_dir *d, size_t i, struct stat *ret_st)
{
	bool is_dir;
	const char *name = ns_dir_name(d, i, &is_dir);
	struct node *p;
	struct lent *ent;
	struct bk_meta m;
	int e = -EAGAIN;

	if (!name)
		return -EAGAIN;
	pthread_mutex_lock(&ns->lock);
	p = find_ino(ns, d->ino);
	/* the directory's listing now, which may be newer than the handle's */
	ent = p && p->is_dir && p->dir->list ? find_entry(p->dir->list, name) : NULL;
	if (ent && ((ent->flags & LE_DIR) || (ent->flags & LE_META))) {
		bool dir = ent->flags & LE_DIR;

		lent_meta(p->dir->list, ent, &m);
		e = entry_link(ns, p, name, entry_node(ns, p, name, dir, &m), dir,
			       !dir || (ent->flags & LE_PERM) ? &m : NULL,
			       listing_fresh(ns, p->dir), true, ret_st);
	}
	pthread_mutex_unlock(&ns->lock);
	return e;
}

int ns_path(struct ns *ns, uint64_t ino, char *buf, size_t len)
{
	struct node *n;
	char *path = NULL;
	int e = 0;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (!n)
		e = -ENOENT;
	else if (!(path = node_path(n)))
		e = -ENOMEM;
	else if (strlen(path) >= len)
		e = -ENAMETOOLONG;
	else
		strcpy(buf, path);
	pthread_mutex_unlock(&ns->lock);
	free(path);
	return e;
}

int ns_listed(struct ns *ns, uint64_t parent, const char *name)
{
	struct node *p;
	int e;

	pthread_mutex_lock(&ns->lock);
	p = find_ino(ns, parent);
	if (!p || !p->dir)
		e = -ENOENT;
	else if (!p->dir->list)
		e = -EAGAIN;
	else
		e = find_entry(p->dir->list, name) != NULL;
	pthread_mutex_unlock(&ns->lock);
	return e;
}

/* What malloc really gave (malloc_usable_size), not sizeof. Directories the kernel forgot that
 * wait for their last child are out of the tables and not counted (a few at most). */
void ns_mem(struct ns *ns, uint64_t *ret_bytes, uint64_t *ret_keys)
{
	uint64_t bytes = sizeof(*ns), keys = 0;

	pthread_mutex_lock(&ns->lock);
	bytes += msize(ns->by_ino) + msize(ns->by_name) + msize(ns->store);
	for (struct forgotten *f = ns->forgotten; f; f = f->next)
		bytes += msize(f) + f->bytes;
	for (size_t i = 0; i < ns->nbuckets; i++) {
		for (struct node *n = ns->by_ino[i]; n; n = n->next_ino) {
			bytes += msize(n);
			if (!n->is_dir) {
				if (n->f)
					bytes += msize(n->f) + msize(n->f->cur);
				continue;
			}
			bytes += msize(n->dir);
			for (uint32_t j = 0; n->dir->negs && j < n->dir->negs->n; j++)
				bytes += msize(n->dir->negs->e[j].name);
			bytes += msize(n->dir->negs);
			if (n->dir->list) {
				bytes += msize(n->dir->list) + msize(n->dir->list->e) +
					 msize(n->dir->list->pool);
				keys += n->dir->list->n;
			}
		}
	}
	pthread_mutex_unlock(&ns->lock);
	*ret_bytes = bytes;
	*ret_keys = keys;
}

/* ---- changes made through the mount (write.c) ----------------------------------------------- */

/* Take @name out of @d's listing, if it is there (lock held). */
static void listing_remove(struct dirst *d, const char *name)
{
	struct ns_listing *l = d->list;
	size_t pos;

	if (!l || !find_pos(l, name, &pos) || !(l = listing_own(d)) || !find_pos(l, name, &pos))
		return;
	memmove(&l->e[pos], &l->e[pos + 1], (l->n - pos - 1) * sizeof(l->e[0]));
	l->n--;
}

/* Make @d's listing show overlay @o (lock held). Out of memory: the listing is marked stale,
 * and the next use lists again. */
static void ov_show(struct dirst *d, const struct ov *o)
{
	struct lent *e;

	if (!d->list)
		return;
	e = find_entry(d->list, o->name);
	/* a directory's entry stays as it is; a file's is replaced by what was written */
	if (e && !o->gone && o->is_dir && (e->flags & LE_DIR))
		return;
	if (e)
		listing_remove(d, o->name);
	if (!o->gone && !listing_insert(d, o->name, o->is_dir, o->is_dir ? NULL : &o->m))
		d->list->stale = true;
}

/* A listing was just published in @d: the changes made since it started are put in it, and
 * the ones it shows by itself go (lock held). */
static void ov_apply(struct dirst *d)
{
	struct ov **pp = &d->ov;

	while (*pp) {
		struct ov *o = *pp;

		if (o->time_ns < d->list->time_ns && !o->sticky) {
			*pp = o->next; /* the store had it when this listing started */
			free(o);
			continue;
		}
		ov_show(d, o);
		pp = &o->next;
	}
}

/* Record change @o in @d (lock held): the listing shows it now, and so will any listing in
 * flight. An older overlay of the name is replaced. @return 0 or -ENOMEM. */
static int ov_add(struct ns *ns, struct dirst *d, const char *name, bool gone, bool is_dir,
		  bool sticky, const struct bk_meta *m)
{
	struct ov *o = calloc(1, sizeof(*o) + strlen(name) + 1), **pp;

	if (!o)
		return -ENOMEM;
	for (pp = &d->ov; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->name, name) == 0) {
			struct ov *old = *pp;

			*pp = old->next;
			free(old);
			break;
		}
	}
	o->time_ns = clock_ns(ns);
	o->gone = gone;
	o->is_dir = is_dir;
	o->sticky = sticky;
	if (m)
		o->m = *m;
	strcpy(o->name, name);
	o->next = d->ov;
	d->ov = o;
	d->changed = time(NULL);
	ov_show(d, o);
	if (!gone)
		neg_del(d, name);
	return 0;
}

/* Directory @parent, for a change to @name in it (lock held). @return it or NULL with
 * *ret_err. */
static struct node *change_dir(struct ns *ns, uint64_t parent, const char *name, int *ret_err)
{
	struct node *p = find_ino(ns, parent);

	*ret_err = !p ? -ENOENT : !p->is_dir ? -ENOTDIR : 0;
	if (!*ret_err && (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 ||
			  strcmp(name, "..") == 0))
		*ret_err = -EINVAL;
	if (!*ret_err && strlen(name) > 255)
		*ret_err = -ENAMETOOLONG; /* statfs's namelen */
	return *ret_err ? NULL : p;
}

int ns_create(struct ns *ns, uint64_t parent, const char *name, struct stat *ret_st)
{
	struct bk_meta m = {.mtime = time(NULL)};
	struct node *p, *n;
	int r;

	pthread_mutex_lock(&ns->lock);
	p = change_dir(ns, parent, name, &r);
	if (p && (find_name(ns, p, name) || (p->dir->list && find_entry(p->dir->list, name))))
		r = -EEXIST;
	if (r == 0 && !(n = node_new(ns, p, name, false)))
		r = -ENOMEM;
	if (r == 0 && (r = set_version(ns, n, &m, false, 0)) < 0)
		drop_unused(ns, n);
	if (r == 0) {
		n->f->writing = true;
		n->f->wmtime = m.mtime;
		n->nlookup++;
		neg_del(p->dir, name);
		p->dir->changed = m.mtime;
		fill_stat(ns, n, ret_st);
	}
	pthread_mutex_unlock(&ns->lock);
	return r;
}

int ns_truncate(struct ns *ns, uint64_t ino)
{
	struct node *n;
	int r = 0;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (!n || n->unlinked)
		r = -ENOENT;
	else if (n->is_dir)
		r = -EISDIR;
	else if (nopen(n) || (n->f && n->f->writing))
		r = -EBUSY; /* read, or written, through another handle */
	else if (!n->f)
		r = materialize(ns, n);
	if (r == 0) {
		n->f->writing = true;
		n->f->wsize = 0;
		n->f->wmtime = time(NULL);
		n->f->reval = NULL; /* what the store says of the old version no longer applies */
	}
	pthread_mutex_unlock(&ns->lock);
	return r;
}

void ns_set_size(struct ns *ns, uint64_t ino, uint64_t size)
{
	struct node *n;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (n && !n->is_dir && n->f && n->f->writing) {
		n->f->wsize = size;
		n->f->wmtime = time(NULL);
	}
	pthread_mutex_unlock(&ns->lock);
}

bool ns_writing(struct ns *ns, uint64_t ino)
{
	struct node *n;
	bool w;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	w = n && !n->is_dir && n->f && n->f->writing;
	pthread_mutex_unlock(&ns->lock);
	return w;
}

int ns_written(struct ns *ns, uint64_t ino, const struct bk_meta *meta, struct cache_oid *ret_id)
{
	struct node *n, *p;
	int r;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (!n || n->is_dir || !n->f) {
		pthread_mutex_unlock(&ns->lock);
		return -ENOENT; /* forgotten while written: the store has it all the same */
	}
	n->f->writing = false;
	n->f->reval = NULL; /* an answer sent before the commit would undo it */
	r = set_version(ns, n, meta, true, clock_ns(ns));
	if (r == 0) {
		*ret_id = n->f->cur->id;
		n->f->opened = false; /* the next open drops the pages of the writes */
	}
	p = parent_of(n);
	if (r == 0 && p && !n->unlinked)
		r = ov_add(ns, p->dir, n->name, false, false, false, meta);
	/* a directory made on S3 has something under it now: its name stays without help */
	for (struct node *d = p; r == 0 && d && parent_of(d); d = parent_of(d))
		for (struct ov *o = parent_of(d)->dir->ov; o; o = o->next)
			if (o->sticky && strcmp(o->name, d->name) == 0)
				o->sticky = false;
	pthread_mutex_unlock(&ns->lock);
	return r;
}

void ns_write_failed(struct ns *ns, uint64_t ino)
{
	struct node *n;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (n && !n->is_dir && n->f) {
		n->f->writing = false;
		/* the name leads to the store again: what it has (nothing, or the old object) */
		n->f->stale = true;
		if (n->f->wsize || !n->f->cur->etag[0])
			unlink_name(ns, n);
		if (parent_of(n) && parent_of(n)->dir->list)
			parent_of(n)->dir->list->stale = true;
	}
	pthread_mutex_unlock(&ns->lock);
}

int ns_removed(struct ns *ns, uint64_t parent, const char *name, struct cache_oid *ret_id)
{
	struct node *p, *n;
	int r;

	pthread_mutex_lock(&ns->lock);
	p = change_dir(ns, parent, name, &r);
	n = p ? find_name(ns, p, name) : NULL;
	if (r == 0 && ret_id)
		*ret_id = n && !n->is_dir && n->f ? n->f->cur->id : (struct cache_oid){0, 0};
	if (n)
		unlink_name(ns, n); /* open files keep their inode and version */
	if (r == 0)
		r = ov_add(ns, p->dir, name, true, false, false, NULL);
	pthread_mutex_unlock(&ns->lock);
	return r;
}

int ns_mkdir(struct ns *ns, uint64_t parent, const char *name, bool sticky, struct stat *ret_st)
{
	struct node *p, *n = NULL;
	int r;

	pthread_mutex_lock(&ns->lock);
	p = change_dir(ns, parent, name, &r);
	if (p && (find_name(ns, p, name) || (p->dir->list && find_entry(p->dir->list, name))))
		r = -EEXIST;
	if (r == 0 && !(n = node_new(ns, p, name, true)))
		r = -ENOMEM;
	if (r == 0 && !n->dir->list && (n->dir->list = listing_new()))
		n->dir->list->time_ns = clock_ns(ns); /* empty, and known so: no listing needed */
	if (r == 0)
		r = ov_add(ns, p->dir, name, false, true, sticky, NULL);
	if (r == 0) {
		n->nlookup++;
		fill_stat(ns, n, ret_st);
	} else if (n) {
		drop_unused(ns, n);
	}
	pthread_mutex_unlock(&ns->lock);
	return r;
}

int ns_dir_empty(struct ns *ns, uint64_t ino)
{
	struct node *n;
	int r;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	r = !n ? -ENOENT : !n->is_dir ? -ENOTDIR : !n->dir->list ? -EAGAIN
	    : n->dir->list->n ? -ENOTEMPTY : 0;
	for (struct ov *o = n && n->is_dir ? n->dir->ov : NULL; r == 0 && o; o = o->next)
		if (!o->gone)
			r = -ENOTEMPTY;
	pthread_mutex_unlock(&ns->lock);
	return r;
}

/* Is @a, or a directory it is in, @d? */
static bool below(const struct node *a, const struct node *d)
{
	for (; a; a = a->up)
		if (a == d)
			return true;
	return false;
}

/*
 * Node @n takes the name @name in directory @np, keeping its inode (lock held): the kernel keeps
 * the inode of a renamed file under its new name. A node is one allocation with its name, so a
 * new one is made and the old one's state moved into it. A file's version is made anew for its
 * new path (a new oid); files and directories below a directory moved ask the store again at
 * their next open. @return the node, or NULL (out of memory: the old name is only unlinked).
 */
static struct node *node_rename(struct ns *ns, struct node *n, struct node *np, const char *name)
{
	struct node *m = calloc(1, node_size(strlen(name)));
	struct node *op = n->up;

	unlink_name(ns, n);
	if (!m || (!n->is_dir && !n->f && materialize(ns, n) < 0)) {
		free(m);
		return NULL;
	}
	*m = *n;
	strcpy(m->name, name);
	m->up = np;
	m->unlinked = false;
	unlink_ino(ns, n);
	link_node(ns, m);
	np->dir->kids++;
	if (m->is_dir) {
		for (size_t i = 0; i < ns->nbuckets; i++)
			for (struct node *c = ns->by_ino[i]; c; c = c->next_ino) {
				if (c->up == n)
					c->up = m;
				if (!c->is_dir && c->f && below(c, m))
					c->f->stale = true;
			}
	} else {
		struct bk_meta meta = {.size = m->f->cur->size, .mtime = m->f->cur->mtime};
		struct fobj *o;

		snprintf(meta.etag, sizeof(meta.etag), "%s", m->f->cur->etag);
		if ((o = fobj_new(ns, m, &meta))) {
			fobj_put(m->f->cur);
			m->f->cur = o;
		}
	}
	free(n); /* its state is m's now */
	if (op && !--op->dir->kids && op->gone)
		node_release(op);
	return m;
}

int ns_renamed(struct ns *ns, uint64_t parent, const char *name, uint64_t newparent,
	       const char *newname, struct cache_oid *ret_id)
{
	struct node *p, *np = NULL, *n, *old, *m = NULL;
	struct bk_meta meta = {0};
	int r;

	pthread_mutex_lock(&ns->lock);
	p = change_dir(ns, parent, name, &r);
	if (p)
		np = change_dir(ns, newparent, newname, &r);
	n = np ? find_name(ns, p, name) : NULL;
	*ret_id = n && !n->is_dir && n->f ? n->f->cur->id : (struct cache_oid){0, 0};
	if (np && (old = find_name(ns, np, newname)) && old != n)
		unlink_name(ns, old); /* replaced: its open files keep it */
	if (n)
		m = node_rename(ns, n, np, newname);
	if (r == 0)
		r = ov_add(ns, p->dir, name, true, false, false, NULL);
	if (r == 0 && m && !m->is_dir) {
		meta.size = m->f->cur->size;
		meta.mtime = m->f->cur->mtime;
		snprintf(meta.etag, sizeof(meta.etag), "%s", m->f->cur->etag);
	}
	if (r == 0 && m)
		r = ov_add(ns, np->dir, newname, false, m->is_dir, false, m->is_dir ? NULL : &meta);
	if (r == 0 && !m) {
		listing_remove(np->dir, newname); /* unknown here: asked of the store */
		neg_del(np->dir, newname);
	}
	pthread_mutex_unlock(&ns->lock);
	return r;
}

void ns_changed(struct ns *ns, uint64_t parent, const char *name)
{
	struct node *p, *n;
	struct ov **pp;
	int r;

	pthread_mutex_lock(&ns->lock);
	p = change_dir(ns, parent, name, &r);
	if (p) {
		if ((n = find_name(ns, p, name)))
			unlink_name(ns, n);
		for (pp = &p->dir->ov; *pp; pp = &(*pp)->next) {
			if (strcmp((*pp)->name, name) == 0) {
				struct ov *o = *pp;

				*pp = o->next;
				free(o);
				break;
			}
		}
		listing_remove(p->dir, name);
		neg_del(p->dir, name);
		if (p->dir->list)
			p->dir->list->stale = true;
	}
	pthread_mutex_unlock(&ns->lock);
}
