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
 * name or makes it a prefix (ns_keep_dropped), or its directory's node being forgotten
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
 *
 * The files: ns.c has the tables, the nodes and their versions, and what ns answers from
 * memory (ns_forget, ns_getattr, ns_peek, ns_dir_*, ns_mem...); nslist.c the listings (the
 * string pool, finding and inserting names, copy on write) and the names missing from them;
 * nsop.c the operations that may wait for the store (lookup, open, opendir in steps, the
 * revalidation of a version, and the same waiting); nswrite.c the changes made through the
 * mount (write.c) and the overlays that keep them in later listings. ns_i.h has the structs
 * they share and the helpers one of them lends the others (ns_ prefixed).
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ns_i.h"

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
uint64_t ns_pino(const struct node *n)
{
	return n->up ? n->up->ino : ROOT_INO;
}

/* @n's directory, or NULL when the kernel forgot it (or @n is the root). */
struct node *ns_parent_of(const struct node *n)
{
	return n->up && !n->up->gone ? n->up : NULL;
}

/* @n's path in the store ("" for the root): its names up to the root, joined by '/'.
 * @return malloc'd or NULL. */
char *ns_node_path(const struct node *n)
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

struct node *ns_find_ino(struct ns *ns, uint64_t ino)
{
	for (struct node *n = ns->by_ino[hash_ino(ino, ns->nbuckets)]; n; n = n->next_ino)
		if (n->ino == ino)
			return n;
	return NULL;
}

/* The node named @name in directory @p. Comparing pointers is safe: a directory is freed only
 * after its last child. */
struct node *ns_find_name(struct ns *ns, const struct node *p, const char *name)
{
	for (struct node *n = ns->by_name[hash_name(p->ino, name, ns->nbuckets)]; n;
	     n = n->next_name)
		if (n->up == p && strcmp(n->name, name) == 0)
			return n;
	return NULL;
}

void ns_link_node(struct ns *ns, struct node *n)
{
	size_t hi = hash_ino(n->ino, ns->nbuckets);
	size_t hn = hash_name(ns_pino(n), n->name, ns->nbuckets);

	n->next_ino = ns->by_ino[hi];
	ns->by_ino[hi] = n;
	if (n->ino != ROOT_INO) {
		n->next_name = ns->by_name[hn];
		ns->by_name[hn] = n;
	}
}

void ns_unlink_name(struct ns *ns, struct node *n)
{
	struct node **pp = &ns->by_name[hash_name(ns_pino(n), n->name, ns->nbuckets)];

	if (n->unlinked || n->ino == ROOT_INO)
		return;
	while (*pp && *pp != n)
		pp = &(*pp)->next_name;
	if (*pp)
		*pp = n->next_name;
	n->unlinked = true;
}

void ns_unlink_ino(struct ns *ns, struct node *n)
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
			ns_link_node(ns, n);
			if (was_unlinked)
				ns_unlink_name(ns, n);
		}
	}
	free(old_ino);
}

/* Bytes of a node with a name of @len bytes: the name starts in the struct's tail padding
 * (never less than the struct, so the whole struct is always inside the allocation). */
size_t ns_node_size(size_t len)
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
		ns_listing_put(n->dir->list);
		ns_negs_free(n->dir->negs);
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
	ns->started = ns_wall_now();
	ns->nbuckets = 1024;
	ns->by_ino = calloc(ns->nbuckets, sizeof(struct node *));
	ns->by_name = calloc(ns->nbuckets, sizeof(struct node *));
	root = calloc(1, ns_node_size(0)); /* name "" */
	if (!ns->by_ino || !ns->by_name || !root || !ns->store)
		goto fail;
	root->ino = ROOT_INO;
	root->is_dir = true;
	root->nlookup = 1;
	root->dir = ns_dirst_new();
	if (!root->dir)
		goto fail;
	pthread_mutex_init(&ns->lock, NULL);
	ns->next_ino = ROOT_INO + 1;
	ns_link_node(ns, root);
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
		ns_forgotten_free(f);
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

/* The oid of version @m of @path: by its ETag and size, or by size and mtime for a store
 * without ETags. The size is part of it even with an ETag: a store that acknowledges an upload
 * before its bytes are all there (s3rver does) answers a HEAD or a listing with the final ETag
 * and a partial size for a moment, and blocks cached for that size (a short last block) must
 * never be served for the whole object under the same key. */
static struct cache_oid version_oid(struct ns *ns, const char *path, const struct bk_meta *m)
{
	char v[BK_ETAG_MAX + 32];

	if (m->etag[0])
		snprintf(v, sizeof(v), "%.*s size=%llu", (int)strnlen(m->etag, BK_ETAG_MAX),
			 m->etag, (unsigned long long)m->size);
	else
		snprintf(v, sizeof(v), "size=%llu mtime=%lld", (unsigned long long)m->size,
			 (long long)m->mtime);
	return cache_oid_make(ns->store, path, v);
}

/* A new version @m of file @n, with one reference. @return it or NULL (out of memory). */
struct fobj *ns_fobj_new(struct ns *ns, const struct node *n, const struct bk_meta *m)
{
	char *path = ns_node_path(n);
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
	o->trace_obj = 0;
	o->trace_ver = 0;
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
uint32_t ns_nopen(const struct node *n)
{
	return !n->is_dir && n->f ? n->f->nopen : 0;
}

bool ns_is_lazy(const struct node *n)
{
	return !n->is_dir && !n->f;
}

/* Lazy node @n is lazy no more, or goes: its directory counts one less (lock held). */
static void lazy_gone(const struct node *n)
{
	struct node *p = ns_parent_of(n);

	if (p && p->is_dir && p->dir->lazy)
		p->dir->lazy--;
}

/* The version of lazy node @n: its directory's listing entry for its name, a file with
 * metadata (lock held). @return the entry and its listing in *ret_l, or NULL when there is
 * none (out of memory kept the node from taking its own version when the entry went). */
static struct lent *lazy_entry(const struct node *n, struct ns_listing **ret_l)
{
	struct node *p = ns_parent_of(n);
	struct ns_listing *l = p ? p->dir->list : NULL;
	struct lent *e = l ? ns_find_entry(l, n->name) : NULL;

	if (!e || (e->flags & (LE_DIR | LE_META)) != LE_META)
		return NULL;
	*ret_l = l;
	return e;
}

/* Make @m the node's current version (lock held); a lazy node gets a version of its own here.
 * @confirmed: @m came from the store at @when (a listing or a HEAD), so with an ETag the
 * version counts as confirmed then (unless it was confirmed later already). @return 0 or
 * -ENOMEM. */
int ns_set_version(struct ns *ns, struct node *n, const struct bk_meta *m, bool confirmed,
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
		struct fobj *o = ns_fobj_new(ns, n, m);

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

	ns_lent_meta(l, e, &m);
	r = ns_set_version(ns, n, &m, true, l->time_ns);
	if (r == 0 && l->stale)
		n->f->stale = true;
	return r;
}

/* Give lazy node @n the version its listing entry has now as its own (lock held).
 * @return 0, -ENOMEM, or -ENOENT (no entry: see lazy_entry). */
int ns_materialize(struct ns *ns, struct node *n)
{
	struct ns_listing *l;
	struct lent *e;

	if (!ns_is_lazy(n))
		return 0;
	if (!(e = lazy_entry(n, &l)))
		return -ENOENT;
	return keep_entry(ns, n, l, e);
}

/* Directory @p's listing @old is about to be replaced by @new (lock held): its lazy nodes whose
 * name @new has not as a file with metadata take their version from @old, so a name that went
 * keeps the attributes it had (as a node with a version of its own does). Both are sorted:
 * one pass over each. */
void ns_keep_dropped(struct ns *ns, struct node *p, const struct ns_listing *old,
		     const struct ns_listing *new)
{
	size_t j = 0;

	for (size_t i = 0; i < old->n && p->dir->lazy; i++) {
		const struct lent *e = &old->e[i];
		const char *name = ns_lname(old, e);
		struct node *c;
		int cmp = 1;

		if ((e->flags & (LE_DIR | LE_META)) != LE_META)
			continue;
		while (j < new->n && (cmp = strcmp(ns_lname(new, &new->e[j]), name)) < 0)
			j++;
		if (j < new->n && cmp == 0 && (new->e[j].flags & (LE_DIR | LE_META)) == LE_META)
			continue;
		c = ns_find_name(ns, p, name);
		if (c && ns_is_lazy(c))
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
		c = ns_find_name(ns, p, ns_lname(l, e));
		if (c && ns_is_lazy(c))
			keep_entry(ns, c, l, e);
	}
}

/* Free @n; then its directory, if the kernel forgot it and it waited for its last child. */
void ns_node_release(struct node *n)
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

	if (!l || !(path = ns_node_path(n)))
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
		ns_forgotten_free(f);
	}
}

/* New directory node @n takes the listing its path had when the kernel forgot it, if kept
 * (lock held). */
static void forgotten_take(struct ns *ns, struct node *n)
{
	struct forgotten *f, **pp;
	char *path;

	if (!ns->forgotten || !(path = ns_node_path(n)))
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
	ns_forgotten_free(f);
}

/* Take @n out of the tables and free it (lock held). */
static void node_drop(struct ns *ns, struct node *n)
{
	if (n->is_dir && n->dir->lazy)
		keep_children(ns, n);
	if (n->is_dir)
		forgotten_keep(ns, n);
	if (ns_is_lazy(n))
		lazy_gone(n);
	ns_unlink_name(ns, n);
	ns_unlink_ino(ns, n);
	ns->count--;
	if (n->is_dir && n->dir->kids) {
		/* its children's paths go through its name: kept until the last goes */
		n->gone = true;
		ns_listing_put(n->dir->list);
		n->dir->list = NULL;
		return;
	}
	struct node *up = n->up && !n->up->gone ? n->up : NULL;

	ns_node_release(n);
	/* a directory the kernel forgot, kept for its children (ns_forget): the last one went */
	if (up && up->ino != ROOT_INO && !up->nlookup && !up->dir->kids)
		node_drop(ns, up);
}

/* Would @m replace the bytes of @n's current version (not merely add an ETag)? Only a node
 * with a version of its own has one to replace: a lazy node follows its listing entry. */
bool ns_changes(const struct node *n, const struct bk_meta *m)
{
	return !n->is_dir && n->f && !same_version(n->f->cur, m);
}

/* Record in the parent's listing what the store just said of @n's name (lock held), so a
 * lookup does not bring back an older version. Best effort: where open handles share the
 * listing and the new ETag does not fit in the old one's place, the listing is copied, or
 * if that fails marked stale. */
void ns_listing_note(struct ns *ns, const struct node *n, const struct bk_meta *m)
{
	struct node *p = ns_parent_of(n);
	struct ns_listing *l = p ? p->dir->list : NULL;
	struct lent *e = l ? ns_find_entry(l, n->name) : NULL;
	unsigned char md5b[16];
	bool md5 = ns_etag_md5(m->etag, md5b);
	size_t need = md5 ? 16 : m->etag[0] ? strlen(m->etag) + 1 : 0;

	if (!e || (e->flags & LE_DIR))
		return;
	if (need > ns_etag_bytes(l, e)) {
		uint32_t off;

		l = ns_listing_own(p->dir);
		e = l ? ns_find_entry(l, n->name) : NULL;
		if (!e || ns_pool_put(l, md5 ? (const void *)md5b : m->etag, need, &off) < 0) {
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
	char *copy = ns_node_path(n);
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
void ns_drop_unused(struct ns *ns, struct node *n)
{
	if (!n || n->ino == ROOT_INO || n->nlookup || ns_nopen(n))
		return;
	node_drop(ns, n);
}

/* Ownership and modes are the mount's (uid, gid, file_mode, dir_mode); where the store has
 * permission bits of its own (file://) the mode is ANDed with them, so a file is never more
 * readable, writable or searchable through the mount than it is in the store. A lazy node's
 * size, time and bits are its listing entry's. */
void ns_fill_stat(struct ns *ns, const struct node *n, struct stat *st)
{
	mode_t mode = n->is_dir ? ns->cfg.dir_mode : ns->cfg.file_mode;
	bool have_perm = n->have_perm;
	unsigned perm = n->perm;
	uint64_t size = 0;
	int64_t mtime = INT64_MIN;
	uint32_t mtime_ns = 0;

	if (!n->is_dir && n->f && n->f->writing) {
		size = n->f->wsize;
		mtime = n->f->wmtime.tv_sec;
		mtime_ns = (uint32_t)n->f->wmtime.tv_nsec;
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
		st->st_mtim = st->st_ctim = st->st_atim = ns->started;
		if (n->dir && ns_ts_after(n->dir->changed, ns->started))
			st->st_mtim = st->st_ctim = n->dir->changed;
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
char *ns_child_path(const struct node *parent, const char *name)
{
	char *pp = ns_node_path(parent), *p;

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
struct node *ns_node_new(struct ns *ns, struct node *parent, const char *name, bool is_dir)
{
	size_t nl = strlen(name);
	struct node *n = calloc(1, ns_node_size(nl));

	if (!n)
		return NULL;
	n->ino = ns->next_ino++;
	n->up = parent;
	n->is_dir = is_dir;
	memcpy(n->name, name, nl + 1);
	if (is_dir && !(n->dir = ns_dirst_new())) {
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
	ns_link_node(ns, n);
	ns->count++;
	return n;
}

/*
 * The node a listing entry of @name in @p names now (lock held), or NULL when it needs a new
 * one: none yet; the key changed type; or files are open on the node's version and @m (the
 * entry's metadata, NULL if it has none) is another, and the open files keep the old inode
 * with its page cache.
 */
struct node *ns_entry_node(struct ns *ns, struct node *p, const char *name, bool is_dir,
			   const struct bk_meta *m)
{
	struct node *n = ns_find_name(ns, p, name);

	if (n && n->is_dir != is_dir) {
		/* the key changed type: a new inode; the old one keeps what it had (taken when
		 * the listing changed: ns_keep_dropped) */
		ns_materialize(ns, n);
		ns_unlink_name(ns, n);
		n = NULL;
	}
	if (n && !is_dir && m && ns_nopen(n) && ns_changes(n, m)) {
		ns_unlink_name(ns, n); /* files are open on the old version: a new inode */
		n = NULL;
	}
	return n;
}

/*
 * Answer a lookup of @name in @p with node @n (from ns_entry_node; NULL: make it) and what the
 * store said of it, @m (NULL if nothing: a directory without permission bits; a file always
 * has it here). @confirmed as ns_set_version takes it. @listed: @m is @p's listing entry for the
 * name, so a file node without a version of its own stays so (lazy) and follows the entry,
 * and is confirmed when the listing was started, not now (a listing served stale must not
 * make a version look freshly confirmed: open would not ask the store again). Else @m came
 * from the store just now. Raises the lookup count and fills @st. @return 0 or -ENOMEM (a
 * node made here is dropped again).
 */
int ns_entry_link(struct ns *ns, struct node *p, const char *name, struct node *n,
		  bool is_dir, const struct bk_meta *m, bool confirmed, bool listed,
		  struct stat *st)
{
	bool made = false;
	int e = 0;

	if (!n) {
		if (!(n = ns_node_new(ns, p, name, is_dir)))
			return -ENOMEM;
		made = true;
	}
	if (is_dir && m && m->have_perm)
		take_perm(n, m);
	if (!is_dir && m && !(listed && ns_is_lazy(n)))
		e = ns_set_version(ns, n, m, confirmed,
				   listed ? p->dir->list->time_ns : clock_ns(ns));
	if (e == 0) {
		if (n->nlookup < UINT32_MAX)
			n->nlookup++;
		ns_fill_stat(ns, n, st);
	} else if (made) {
		ns_drop_unused(ns, n);
	}
	return e;
}

/* ---- answered from what ns holds ----------------------------------------------------------- */

void ns_forget(struct ns *ns, uint64_t ino, uint64_t count)
{
	struct node *n;

	pthread_mutex_lock(&ns->lock);
	n = ns_find_ino(ns, ino);
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
	n = ns_find_ino(ns, ino);
	if (n)
		ns_fill_stat(ns, n, ret_st);
	else
		e = -ENOENT;
	pthread_mutex_unlock(&ns->lock);
	return e;
}

void ns_release(struct ns *ns, uint64_t ino)
{
	struct node *n;

	pthread_mutex_lock(&ns->lock);
	n = ns_find_ino(ns, ino);
	if (n && ns_nopen(n))
		n->f->nopen--;
	pthread_mutex_unlock(&ns->lock);
}

int ns_move(struct ns *ns, uint64_t ino, struct fobj *old, uint64_t serves, struct fobj **ret)
{
	struct node *n;
	struct bk_meta m;
	int e;

	pthread_mutex_lock(&ns->lock);
	n = ns_find_ino(ns, ino);
	if (!n || n->is_dir || !n->f) { /* an open file's node has a version of its own */
		e = -ESTALE;
		goto out;
	}
	e = stat_unlocked(ns, n, &m);
	n = ns_find_ino(ns, ino);
	if (!n)
		e = -ESTALE;
	if (e < 0)
		goto out;
	ns_listing_note(ns, n, &m);
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
			ns_unlink_name(ns, n); /* open files keep the old version: new inode */
		n->f->stale = true;
		e = -ESTALE;
		goto out;
	}
	e = ns_set_version(ns, n, &m, true, clock_ns(ns));
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
	n = ns_find_ino(ns, ino);
	if (n && !n->is_dir && n->f && cache_oid_eq(n->f->cur->id, id)) {
		n->f->stale = true;
		p = ns_parent_of(n);
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
	n = ns_find_ino(ns, ino);
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
			ns_lent_meta(l, ent, &m);
			*ret = ns_fobj_new(ns, n, &m);
		}
		e = !ent ? -ENODATA : *ret ? 0 : -ENOMEM;
	}
	pthread_mutex_unlock(&ns->lock);
	return e;
}

struct ns_dir *ns_dir_make(uint64_t ino, uint64_t parent, const char *const *names, size_t n)
{
	struct ns_dir *d = malloc(sizeof(*d));
	struct ns_listing *l = ns_listing_new();

	if (!d || !l)
		goto fail;
	for (size_t i = 0; i < n; i++)
		if (ns_listing_append(l, names[i], false, NULL) < 0)
			goto fail;
	ns_listing_seal(l);
	d->ino = ino;
	d->parent = parent;
	d->l = l;
	return d;
fail:
	ns_listing_put(l);
	free(d);
	return NULL;
}

void ns_dir_put(struct ns_dir *d)
{
	if (!d)
		return;
	ns_listing_put(d->l);
	free(d);
}

size_t ns_dir_count(const struct ns_dir *d)
{
	return d->l->n;
}

const char *ns_dir_name(const struct ns_dir *d, size_t i, bool *ret_is_dir)
{
	*ret_is_dir = (d->l->e[i].flags & LE_DIR) != 0;
	return ns_lname(d->l, &d->l->e[i]);
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
	p = ns_find_ino(ns, d->ino);
	/* the directory's listing now, which may be newer than the handle's */
	ent = p && p->is_dir && p->dir->list ? ns_find_entry(p->dir->list, name) : NULL;
	if (ent && ((ent->flags & LE_DIR) || (ent->flags & LE_META))) {
		bool dir = ent->flags & LE_DIR;

		ns_lent_meta(p->dir->list, ent, &m);
		e = ns_entry_link(ns, p, name, ns_entry_node(ns, p, name, dir, &m), dir,
				  !dir || (ent->flags & LE_PERM) ? &m : NULL,
				  ns_listing_fresh(ns, p->dir), true, ret_st);
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
	n = ns_find_ino(ns, ino);
	if (!n)
		e = -ENOENT;
	else if (!(path = ns_node_path(n)))
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
	p = ns_find_ino(ns, parent);
	if (!p || !p->dir)
		e = -ENOENT;
	else if (!p->dir->list)
		e = -EAGAIN;
	else
		e = ns_find_entry(p->dir->list, name) != NULL;
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

