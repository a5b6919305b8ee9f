/*
 * ns.c - the namespace: inodes for the keys of the store, directories from key prefixes.
 *
 * An object store has keys, not directories. A directory here is a key prefix ending in '/';
 * its entries are what the backend lists one level below it. Each node is found two ways:
 *
 *     by_ino[ino]            ──► node ◄── by_name[(parent ino, name)]
 *                                 │
 *            file: cur ──► struct fobj (path, size, mtime, ETag, cache oid), refcounted
 *            dir:  list ──► sorted entries of the last listing, and when it was started
 *                  negs ──► names the store said do not exist, and when
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
 * Attributes: every node is owned by the mount's uid and gid, with file_mode or dir_mode; where
 * the store has permission bits of its own (file://), the last listing's or stat's bits are
 * kept in the node and ANDed in, so the mount never shows a wider mode than the store.
 *
 * Freshness: a listing is reused for metadata_ttl seconds. A name missing from it is asked of
 * the store (stat / HEAD): found, it joins the listing; missing, the answer is kept for
 * negative_ttl. A file's version is revalidated (HEAD) at open when it is older than
 * metadata_ttl or has no ETag, unless the mount is immutable.
 *
 * Locking: ns->lock guards the tables and every node. It is never held across a network call:
 * the caller copies the path, unlocks, asks the backend, relocks and finds the node again (it
 * may have been forgotten meanwhile).
 *
 * Workload: brokers look up a few hundred segment files and open them repeatedly; operators
 * list directories of thousands of keys.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs_i.h"

#define ROOT_INO 1

struct entry {
	char *name;
	bool is_dir;
	bool have_meta;
	struct bk_meta meta;
};

struct listing {
	size_t n;
	struct entry *e;     /* sorted by name, unique */
	uint64_t time_ns;    /* when it was started: nothing older is in it */
	bool stale;          /* an object in it changed: list again at the next use */
};

/* A name the store said does not exist (negative cache of one directory). */
#define NEG_MAX 64
struct neg {
	char *name;
	uint64_t time_ns;    /* when the store said so */
};

struct node {
	uint64_t ino;
	uint64_t parent;     /* parent's inode; the root's is itself */
	char *name;          /* last path segment */
	char *path;          /* relative path in the store, "" for the root */
	bool is_dir;
	bool unlinked;       /* no longer in by_name (replaced by a node of another type) */
	uint64_t nlookup;    /* kernel references */
	unsigned nopen;      /* files open on this inode (ns_open - ns_release) */
	bool have_perm;      /* the store gave permission bits (file://) ... */
	uint32_t perm;       /* ... these (last listing or stat); modes never exceed them */
	struct node *next_ino, *next_name; /* hash chains */
	/* files */
	struct fobj *cur;    /* current known version (one ref), NULL until known */
	uint64_t meta_ns;    /* when cur was last confirmed with an ETag */
	struct cache_oid last_open_id; /* cur->id at the previous open */
	bool opened;         /* last_open_id is set */
	bool stale;          /* a read found cur changed: revalidate at the next open */
	/* directories */
	struct listing *list;
	struct neg negs[NEG_MAX]; /* names found missing; unused slots have name NULL */
};

struct ns {
	struct ns_cfg cfg;
	pthread_mutex_t lock;
	struct node **by_ino, **by_name; /* nbuckets each */
	size_t nbuckets, count;
	uint64_t next_ino;
	char *store;         /* cfg.store, owned */
	time_t started;      /* mount time: the directories' times */
};

static uint64_t clock_ns(struct ns *ns)
{
	struct timespec ts;

	if (ns->cfg.now_ns)
		return ns->cfg.now_ns(ns->cfg.clock_arg);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
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

static struct node *find_ino(struct ns *ns, uint64_t ino)
{
	for (struct node *n = ns->by_ino[hash_ino(ino, ns->nbuckets)]; n; n = n->next_ino)
		if (n->ino == ino)
			return n;
	return NULL;
}

static struct node *find_name(struct ns *ns, uint64_t parent, const char *name)
{
	for (struct node *n = ns->by_name[hash_name(parent, name, ns->nbuckets)]; n;
	     n = n->next_name)
		if (n->parent == parent && strcmp(n->name, name) == 0)
			return n;
	return NULL;
}

static void link_node(struct ns *ns, struct node *n)
{
	size_t hi = hash_ino(n->ino, ns->nbuckets), hn = hash_name(n->parent, n->name, ns->nbuckets);

	n->next_ino = ns->by_ino[hi];
	ns->by_ino[hi] = n;
	if (n->ino != ROOT_INO) {
		n->next_name = ns->by_name[hn];
		ns->by_name[hn] = n;
	}
}

static void unlink_name(struct ns *ns, struct node *n)
{
	struct node **pp = &ns->by_name[hash_name(n->parent, n->name, ns->nbuckets)];

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

static void listing_free(struct listing *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->e[i].name);
	free(l->e);
	free(l);
}

static void node_free(struct node *n)
{
	fobj_put(n->cur);
	listing_free(n->list);
	for (int i = 0; i < NEG_MAX; i++)
		free(n->negs[i].name);
	free(n->name);
	free(n->path);
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
	root = calloc(1, sizeof(*root));
	if (!ns->by_ino || !ns->by_name || !root || !ns->store)
		goto fail;
	root->ino = ROOT_INO;
	root->parent = ROOT_INO;
	root->is_dir = true;
	root->nlookup = 1;
	root->name = strdup("");
	root->path = strdup("");
	if (!root->name || !root->path)
		goto fail;
	pthread_mutex_init(&ns->lock, NULL);
	ns->next_ino = ROOT_INO + 1;
	link_node(ns, root);
	ns->count = 1;
	return ns;
fail:
	if (root) {
		free(root->name);
		free(root->path);
		free(root);
	}
	free(ns->by_ino);
	free(ns->by_name);
	free(ns->store);
	free(ns);
	return NULL;
}

void ns_free(struct ns *ns)
{
	if (!ns)
		return;
	for (size_t i = 0; i < ns->nbuckets; i++)
		for (struct node *n = ns->by_ino[i], *next; n; n = next) {
			next = n->next_ino;
			node_free(n);
		}
	free(ns->by_ino);
	free(ns->by_name);
	free(ns->store);
	pthread_mutex_destroy(&ns->lock);
	free(ns);
}

/* ---- listings ------------------------------------------------------------------------------ */

struct collect {
	struct entry *e;
	size_t n, cap;
	int err;
};

static int on_entry(void *arg, const char *name, bool is_dir, const struct bk_meta *meta)
{
	struct collect *c = arg;

	if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
	    strlen(name) > 255)
		return 0; /* not a possible file name: skipped */
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		struct entry *e = realloc(c->e, cap * sizeof(*e));

		if (!e)
			return -ENOMEM;
		c->e = e;
		c->cap = cap;
	}
	struct entry *e = &c->e[c->n];
	if (!(e->name = strdup(name)))
		return -ENOMEM;
	e->is_dir = is_dir;
	e->have_meta = meta != NULL;
	if (meta)
		e->meta = *meta;
	c->n++;
	return 0;
}

static int cmp_entry(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	return (int)y->is_dir - (int)x->is_dir; /* directories first among equal names */
}

/* List @path from the store (no lock held). @return 0 and *ret, or -errno. */
static int fetch_listing(struct ns *ns, const char *path, struct listing **ret)
{
	struct collect c = {0};
	struct listing *l;
	size_t w = 0;
	uint64_t started = clock_ns(ns); /* a change after this may be missing from the listing */
	int e = backend_list(ns->cfg.backend, path, on_entry, &c);

	if (e < 0)
		goto fail;
	if (c.n)
		qsort(c.e, c.n, sizeof(*c.e), cmp_entry);
	/* unique names: pages may repeat a prefix; a key "a" and a prefix "a/" make the
	 * directory win, as a file cannot hold children */
	for (size_t i = 0; i < c.n; i++) {
		if (w && strcmp(c.e[w - 1].name, c.e[i].name) == 0) {
			free(c.e[i].name);
			continue;
		}
		c.e[w++] = c.e[i];
	}
	c.n = w;
	l = calloc(1, sizeof(*l));
	if (!l) {
		e = -ENOMEM;
		goto fail;
	}
	l->n = c.n;
	l->e = c.e;
	l->time_ns = started;
	*ret = l;
	return 0;
fail:
	for (size_t i = 0; i < c.n; i++)
		free(c.e[i].name);
	free(c.e);
	return e;
}

static bool fresh(struct ns *ns, uint64_t t, uint64_t now)
{
	return now - t < ns->cfg.metadata_ttl * 1000000000ULL;
}

/*
 * Find directory @ino with a fresh listing (lock held on entry and exit; dropped while
 * listing). @return the node or NULL with *ret_err.
 */
static struct node *dir_listed(struct ns *ns, uint64_t ino, int *ret_err)
{
	struct node *n = find_ino(ns, ino);
	struct listing *l = NULL;
	char *path;
	int e;

	if (!n) {
		*ret_err = -ENOENT;
		return NULL;
	}
	if (!n->is_dir) {
		*ret_err = -ENOTDIR;
		return NULL;
	}
	if (n->list && (ns->cfg.immutable || (!n->list->stale &&
						      fresh(ns, n->list->time_ns, clock_ns(ns)))))
		return n;
	path = strdup(n->path);
	if (!path) {
		*ret_err = -ENOMEM;
		return NULL;
	}
	pthread_mutex_unlock(&ns->lock);
	e = fetch_listing(ns, path, &l);
	free(path);
	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (e < 0 || !n) {
		if (e == 0)
			listing_free(l);
		*ret_err = e < 0 ? e : -ENOENT;
		return NULL;
	}
	listing_free(n->list);
	n->list = l;
	return n;
}

static struct entry *find_entry(struct listing *l, const char *name)
{
	size_t lo = 0, hi = l->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(l->e[mid].name, name);

		if (c == 0)
			return &l->e[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
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

/* Remember the store's permission bits for @n, when it has any (lock held). */
static void take_perm(struct node *n, const struct bk_meta *m)
{
	n->have_perm = m->have_perm;
	n->perm = m->perm & 0777;
}

/* Make @m the node's current version (lock held). @confirmed: @m came from the store just
 * now (a listing or a HEAD), so with an ETag the version counts as confirmed now.
 * @return 0 or -ENOMEM. */
static int set_version(struct ns *ns, struct node *n, const struct bk_meta *m, bool confirmed)
{
	take_perm(n, m);
	if (!n->cur || !same_version(n->cur, m) || (!n->cur->etag[0] && m->etag[0])) {
		size_t plen = strlen(n->path);
		struct fobj *o = malloc(sizeof(*o) + plen + 1);

		if (!o)
			return -ENOMEM;
		o->refs = 1;
		o->backend = ns->cfg.backend;
		o->serves = 0;
		o->size = m->size;
		o->mtime = m->mtime;
		memcpy(o->etag, m->etag, sizeof(o->etag));
		o->etag[sizeof(o->etag) - 1] = '\0';
		memcpy(o->path, n->path, plen + 1);
		o->id = version_oid(ns, n->path, m);
		fobj_put(n->cur);
		n->cur = o;
	}
	if (confirmed && m->etag[0]) {
		n->meta_ns = clock_ns(ns);
		n->stale = false;
	}
	return 0;
}

/* Would @m replace the bytes of @n's current version (not merely add an ETag)? */
static bool changes(const struct node *n, const struct bk_meta *m)
{
	return n->cur && !same_version(n->cur, m);
}

/* Record in the parent's listing what the store just said of @n's name (lock held), so a
 * lookup does not bring back an older version. Best effort. */
static void listing_note(struct ns *ns, const struct node *n, const struct bk_meta *m)
{
	struct node *p = find_ino(ns, n->parent);
	struct entry *e = p && p->list ? find_entry(p->list, n->name) : NULL;

	if (e && !e->is_dir) {
		e->have_meta = true;
		e->meta = *m;
	}
}

/* Ask the store about @path (lock held on entry and exit, dropped for the request).
 * @return what backend_stat returns. */
static int stat_unlocked(struct ns *ns, const char *path, struct bk_meta *ret)
{
	char *copy = strdup(path);
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
	if (!n || n->ino == ROOT_INO || n->nlookup || n->nopen)
		return;
	unlink_name(ns, n);
	unlink_ino(ns, n);
	ns->count--;
	node_free(n);
}

/* Ownership and modes are the mount's (uid, gid, file_mode, dir_mode); where the store has
 * permission bits of its own (file://) the mode is ANDed with them, so a file is never more
 * readable, writable or searchable through the mount than it is in the store. */
static void fill_stat(struct ns *ns, const struct node *n, struct stat *st)
{
	mode_t mode = n->is_dir ? ns->cfg.dir_mode : ns->cfg.file_mode;

	if (n->have_perm)
		mode &= n->perm;
	memset(st, 0, sizeof(*st));
	st->st_ino = n->ino;
	st->st_uid = ns->cfg.uid;
	st->st_gid = ns->cfg.gid;
	st->st_blksize = ns->cfg.block_size;
	if (n->is_dir) {
		/* a prefix has no time of its own: show when the mount started */
		st->st_mode = S_IFDIR | mode;
		st->st_nlink = 2;
		st->st_mtime = st->st_ctime = st->st_atime = ns->started;
		return;
	}
	st->st_mode = S_IFREG | mode;
	st->st_nlink = 1;
	if (n->cur) {
		st->st_size = (off_t)n->cur->size;
		st->st_blocks = (blkcnt_t)((n->cur->size + 511) / 512);
		if (n->cur->mtime != INT64_MIN)
			st->st_mtime = st->st_ctime = st->st_atime = (time_t)n->cur->mtime;
	}
}

static struct node *node_new(struct ns *ns, struct node *parent, const char *name, bool is_dir)
{
	struct node *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	n->ino = ns->next_ino++;
	n->parent = parent->ino;
	n->is_dir = is_dir;
	n->name = strdup(name);
	if (parent->path[0])
		n->path = malloc(strlen(parent->path) + strlen(name) + 2);
	else
		n->path = strdup(name);
	if (!n->name || !n->path) {
		node_free(n);
		return NULL;
	}
	if (parent->path[0])
		sprintf(n->path, "%s/%s", parent->path, name);
	if (ns->count >= ns->nbuckets)
		grow(ns);
	link_node(ns, n);
	ns->count++;
	return n;
}

/* ---- names missing from a listing ---------------------------------------------------------- */

/* Did the store say @name is missing from directory @p less than negative_ttl ago? */
static bool neg_fresh(struct ns *ns, struct node *p, const char *name, uint64_t now)
{
	for (int i = 0; i < NEG_MAX; i++) {
		struct neg *g = &p->negs[i];

		if (g->name && strcmp(g->name, name) == 0)
			return now - g->time_ns < ns->cfg.negative_ttl * 1000000000ULL;
	}
	return false;
}

/* Remember that @name is missing from @p, replacing the same name or the oldest entry. */
static void neg_add(struct node *p, const char *name, uint64_t now)
{
	struct neg *slot = &p->negs[0];
	char *copy = strdup(name);

	if (!copy)
		return;
	for (int i = 0; i < NEG_MAX; i++) {
		struct neg *g = &p->negs[i];

		if (!g->name || strcmp(g->name, name) == 0) {
			slot = g;
			break;
		}
		if (g->time_ns < slot->time_ns)
			slot = g;
	}
	free(slot->name);
	slot->name = copy;
	slot->time_ns = now;
}

static void neg_del(struct node *p, const char *name)
{
	for (int i = 0; i < NEG_MAX; i++) {
		if (p->negs[i].name && strcmp(p->negs[i].name, name) == 0) {
			free(p->negs[i].name);
			p->negs[i].name = NULL;
		}
	}
}

/* Add @name to @l, keeping it sorted (it is not in it). @return the entry or NULL (ENOMEM). */
static struct entry *listing_insert(struct listing *l, const char *name, bool is_dir,
				    const struct bk_meta *m)
{
	size_t lo = 0, hi = l->n;
	struct entry *e = realloc(l->e, (l->n + 1) * sizeof(*e));
	char *copy = strdup(name);

	if (e)
		l->e = e;
	if (!e || !copy) {
		free(copy);
		return NULL;
	}
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (strcmp(l->e[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	memmove(&l->e[lo + 1], &l->e[lo], (l->n - lo) * sizeof(*e));
	l->n++;
	e = &l->e[lo];
	e->name = copy;
	e->is_dir = is_dir;
	e->have_meta = m != NULL;
	if (m)
		e->meta = *m;
	return e;
}

/*
 * @name is not in the listing of directory *@pp: ask the store for that one name (lock held on
 * entry and exit, dropped for the request), unless it was found missing less than
 * negative_ttl ago. Found, it joins the listing. @return the entry, or NULL with *ret_err.
 */
static struct entry *ask_store(struct ns *ns, struct node **pp, const char *name, int *ret_err)
{
	uint64_t ino = (*pp)->ino, now = clock_ns(ns);
	struct bk_meta m;
	struct entry *ent;
	char *path;
	int e;

	if (!ns->cfg.negative_ttl || neg_fresh(ns, *pp, name, now)) {
		*ret_err = -ENOENT;
		return NULL;
	}
	if (asprintf(&path, "%s%s%s", (*pp)->path, (*pp)->path[0] ? "/" : "", name) < 0) {
		*ret_err = -ENOMEM;
		return NULL;
	}
	e = stat_unlocked(ns, path, &m);
	free(path);
	*pp = find_ino(ns, ino);
	if (!*pp || !(*pp)->list) {
		*ret_err = -ENOENT;
		return NULL;
	}
	if (e == -ENOENT || e == -ENOTDIR) {
		neg_add(*pp, name, now);
		*ret_err = -ENOENT;
		return NULL;
	}
	if (e < 0 && e != -EISDIR) {
		*ret_err = e;
		return NULL;
	}
	neg_del(*pp, name);
	ent = find_entry((*pp)->list, name); /* listed meanwhile */
	if (!ent)
		ent = listing_insert((*pp)->list, name, e == -EISDIR, e == -EISDIR ? NULL : &m);
	if (!ent)
		*ret_err = -ENOMEM;
	return ent;
}

int ns_lookup(struct ns *ns, uint64_t parent, const char *name, struct stat *ret_st)
{
	struct node *p, *n;
	struct entry *ent;
	struct bk_meta m;
	bool is_dir, have_meta, made = false;
	int e = 0;

	pthread_mutex_lock(&ns->lock);
	p = dir_listed(ns, parent, &e);
	if (!p)
		goto out;
	ent = find_entry(p->list, name);
	if (!ent && !(ent = ask_store(ns, &p, name, &e)))
		goto out;
	is_dir = ent->is_dir;
	have_meta = ent->have_meta;
	m = ent->meta;
	n = find_name(ns, parent, name);
	if (n && n->is_dir != is_dir) {
		unlink_name(ns, n); /* the key changed type: a new inode */
		n = NULL;
	}
	if (n && !is_dir && have_meta && n->nopen && changes(n, &m)) {
		unlink_name(ns, n); /* files are open on the old version: a new inode */
		n = NULL;
	}
	if (!n) {
		if (!(n = node_new(ns, p, name, is_dir))) {
			e = -ENOMEM;
			goto out;
		}
		made = true;
	}
	if (is_dir && have_meta)
		take_perm(n, &m);
	if (!is_dir && have_meta)
		e = set_version(ns, n, &m, true);
	if (!is_dir && !have_meta && (!n->cur || !fresh(ns, n->meta_ns, clock_ns(ns)))) {
		/* a manifest names files without metadata */
		uint64_t ino = n->ino;

		e = stat_unlocked(ns, n->path, &m);
		n = find_ino(ns, ino);
		if (!n)
			e = -ENOENT;
		else if (e == 0 && n->nopen && changes(n, &m))
			e = -ESTALE; /* rare: the next lookup makes a new inode */
		if (e == -ESTALE)
			unlink_name(ns, n);
		else if (e == 0)
			e = set_version(ns, n, &m, true);
	}
	if (e == 0) {
		n->nlookup++;
		fill_stat(ns, n, ret_st);
	} else if (made) {
		drop_unused(ns, n);
	}
out:
	pthread_mutex_unlock(&ns->lock);
	return e;
}

void ns_forget(struct ns *ns, uint64_t ino, uint64_t count)
{
	struct node *n;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (n && ino != ROOT_INO) {
		n->nlookup = count > n->nlookup ? 0 : n->nlookup - count;
		if (!n->nlookup) {
			unlink_name(ns, n);
			unlink_ino(ns, n);
			ns->count--;
			node_free(n);
		}
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

int ns_open(struct ns *ns, uint64_t ino, struct fobj **ret, bool *ret_same, bool *ret_changed)
{
	struct node *n;
	struct bk_meta m;
	bool changed;
	int e = 0;

	*ret_changed = false;
	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (!n) {
		e = -ENOENT;
		goto out;
	}
	if (n->is_dir) {
		e = -EISDIR;
		goto out;
	}
	if (!n->cur || n->stale ||
	    (!ns->cfg.immutable && (!n->cur->etag[0] || !fresh(ns, n->meta_ns, clock_ns(ns))))) {
		e = stat_unlocked(ns, n->path, &m);
		n = find_ino(ns, ino);
		if (!n)
			e = -ENOENT;
		if (e < 0)
			goto out;
		listing_note(ns, n, &m);
		if (n->nopen && changes(n, &m)) {
			/* files are open on the old version: the name gets a new inode, and the
			 * kernel's retry of this open finds it */
			unlink_name(ns, n);
			e = -ESTALE;
			goto out;
		}
		changed = changes(n, &m); /* before set_version, which may free the old one */
		e = set_version(ns, n, &m, true);
		if (e < 0)
			goto out;
		*ret_changed = changed;
	}
	fobj_get(n->cur);
	*ret = n->cur;
	*ret_same = n->opened && cache_oid_eq(n->last_open_id, n->cur->id);
	n->last_open_id = n->cur->id;
	n->opened = true;
	n->nopen++;
out:
	pthread_mutex_unlock(&ns->lock);
	return e;
}

void ns_release(struct ns *ns, uint64_t ino)
{
	struct node *n;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (n && n->nopen)
		n->nopen--;
	pthread_mutex_unlock(&ns->lock);
}

int ns_move(struct ns *ns, uint64_t ino, struct fobj *old, uint64_t serves, struct fobj **ret)
{
	struct node *n;
	struct bk_meta m;
	int e;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (!n || n->is_dir) {
		e = -ESTALE;
		goto out;
	}
	e = stat_unlocked(ns, n->path, &m);
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
	if (n->cur != old || n->nopen != 1 ||
	    __atomic_load_n(&old->serves, __ATOMIC_ACQUIRE) != serves) {
		if (n->nopen)
			unlink_name(ns, n); /* open files keep the old version: new inode */
		n->stale = true;
		e = -ESTALE;
		goto out;
	}
	e = set_version(ns, n, &m, true);
	if (e < 0)
		goto out;
	n->last_open_id = n->cur->id;
	fobj_get(n->cur);
	*ret = n->cur;
out:
	pthread_mutex_unlock(&ns->lock);
	return e;
}

void ns_stale(struct ns *ns, uint64_t ino, struct cache_oid id)
{
	struct node *n, *p;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (n && n->cur && cache_oid_eq(n->cur->id, id)) {
		n->stale = true;
		p = find_ino(ns, n->parent);
		if (p && p->list)
			p->list->stale = true;
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
	else if (n->is_dir || !n->cur)
		e = n->is_dir ? -EISDIR : -ENODATA;
	else {
		fobj_get(n->cur);
		*ret = n->cur;
	}
	pthread_mutex_unlock(&ns->lock);
	return e;
}

int ns_opendir(struct ns *ns, uint64_t ino, struct ns_dir **ret)
{
	struct ns_dir *d = NULL;
	struct node *n;
	int e = 0;

	pthread_mutex_lock(&ns->lock);
	n = dir_listed(ns, ino, &e);
	if (!n)
		goto out;
	d = calloc(1, sizeof(*d) + n->list->n * sizeof(struct ns_dirent));
	if (!d) {
		e = -ENOMEM;
		goto out;
	}
	d->refs = 1;
	d->ino = n->ino;
	d->parent = n->parent;
	for (size_t i = 0; i < n->list->n; i++) {
		const struct entry *en = &n->list->e[i];

		d->e[d->n].name = strdup(en->name);
		if (!d->e[d->n].name) {
			d->refs = 1;
			ns_dir_put(d);
			d = NULL;
			e = -ENOMEM;
			goto out;
		}
		d->e[d->n].is_dir = en->is_dir;
		d->n++;
	}
	*ret = d;
out:
	pthread_mutex_unlock(&ns->lock);
	return e;
}

void ns_dir_put(struct ns_dir *d)
{
	if (!d || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	for (size_t i = 0; i < d->n; i++)
		free(d->e[i].name);
	free(d);
}

int ns_path(struct ns *ns, uint64_t ino, char *buf, size_t len)
{
	struct node *n;
	int e = 0;

	pthread_mutex_lock(&ns->lock);
	n = find_ino(ns, ino);
	if (!n)
		e = -ENOENT;
	else if (strlen(n->path) >= len)
		e = -ENAMETOOLONG;
	else
		strcpy(buf, n->path);
	pthread_mutex_unlock(&ns->lock);
	return e;
}
