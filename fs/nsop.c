/*
 * nsop.c - the namespace's operations that may wait for the store (ns.c): lookup, open and
 * opendir, run in steps; the revalidation of a file's version; and the same operations for
 * callers that wait (ns_lookup, ns_open, ns_opendir).
 *
 * Its data are its own: an op (struct nsop), a listing in flight (struct lfetch, single flight
 * per directory: dirst.inflight), a revalidation in flight (struct reval, single flight per
 * node: fstate.reval); the rest is ns.c's (ns_i.h). The store is asked through the backend's
 * asynchronous calls, and the answers run the next step on its I/O thread.
 *
 * Locking: ns->lock, as ns.c says: a step runs under it, drops it before a request goes out,
 * and the completion takes it again and finds its node by inode number. Whether the store
 * answers (ns->reqs, ns->progress_ns) is kept with atomics, outside the lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ns_i.h"

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
		char *path = ns_node_path(n);

		lf = path ? calloc(1, sizeof(*lf) + strlen(path) + 1) : NULL;
		if (!lf || !(lf->l = ns_listing_new())) {
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
	e = ns_listing_append(lf->l, name, is_dir, meta);
	if (e < 0)
		lf->err = e;
	return e;
}

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
		ns_listing_seal(l); /* no lock: sorting 100k names takes a while */
		l->time_ns = lf->started;
	}
	pthread_mutex_lock(&ns->lock);
	n = ns_find_ino(ns, lf->ino);
	if (n && n->dir && n->dir->inflight == lf) {
		n->dir->inflight = NULL;
		if (err == 0) {
			if (n->dir->list && n->dir->lazy)
				ns_keep_dropped(ns, n, n->dir->list, l);
			ns_listing_put(n->dir->list); /* open handles keep theirs */
			n->dir->list = l;
			l = NULL;
			ns_ov_apply(n->dir);
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
	ns_listing_put(l);
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
	char *path = ns_node_path(n);
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
	ns_listing_note(ns, n, m);
	if (n->f->nopen && ns_changes(n, m)) {
		ns_unlink_name(ns, n);
		n->f->stale = true;
		return -ESTALE;
	}
	changed = ns_changes(n, m); /* before ns_set_version, which may free the old one */
	e = ns_set_version(ns, n, m, true, clock_ns(ns));
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
	n = ns_find_ino(ns, rv->ino);
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
		ns_neg_add(ns, d, op->name, clock_ns(ns));
		*ret_err = -ENOENT;
		return NULL;
	}
	if (e < 0 && e != -EISDIR) {
		*ret_err = e;
		return NULL;
	}
	ns_neg_del(d, op->name);
	if (!d->list) {
		*ret_err = -ENOENT;
		return NULL;
	}
	ent = ns_find_entry(d->list, op->name); /* listed meanwhile */
	if (!ent)
		ent = ns_listing_insert(d, op->name, e == -EISDIR, e == -EISDIR ? NULL : &op->m);
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
		if (!ns_listing_fresh(ns, p->dir))
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
		if (n && ns_nopen(n) && ns_changes(n, m)) {
			ns_unlink_name(ns, n); /* rare: the next lookup makes a new inode */
			return -ESTALE;
		}
		return 0;
	}
	if (n && n->f) {
		op->stale = !ns->cfg.immutable && !ns_fresh(ns, n->f->meta_ns, clock_ns(ns));
		if (op->stale && !n->f->reval)
			reval_start(ns, n, &sub->rv); /* out of memory: the next lookup tries */
		own_meta(n, m);
		*ret_asked = false;
		return 0;
	}
	sub->path = n ? ns_node_path(n) : ns_child_path(p, op->name);
	op->stat = STAT_META;
	op->have_stat = false;
	return sub->path ? STEP_STAT : -ENOMEM;
}

static int step_lookup(struct ns *ns, struct nsop *op, struct sub *sub)
{
	struct node *p = ns_find_ino(ns, op->ino), *n;
	struct lent *ent;
	struct bk_meta m;
	bool is_dir, have_meta, have_perm, listed = true, asked = false;
	int e = 0;

	if (!p)
		return -ENOENT;
	if (!p->is_dir)
		return -ENOTDIR;
	/* a file being written through the mount is in no listing yet: its node answers */
	n = ns_find_name(ns, p, op->name);
	if (n && !n->is_dir && n->f && n->f->writing) {
		if (n->nlookup < UINT32_MAX)
			n->nlookup++;
		ns_fill_stat(ns, n, &op->st);
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
		ent = ns_find_entry(p->dir->list, op->name);
		if (!ent) {
			/* negative_ttl=0: nothing is believed, every lookup asks */
			if (ns_neg_fresh(ns, p->dir, op->name, clock_ns(ns)))
				return -ENOENT;
			/* a name never seen may be in the refresh (a new prefix, which no HEAD
			 * finds): it waits for that, then asks */
			if (!op->waited && !ns_listing_fresh(ns, p->dir)) {
				e = start_listing(ns, p, op, &sub->lf);
				return e < 0 ? e : STEP_LIST;
			}
			sub->path = ns_child_path(p, op->name);
			op->stat = STAT_ASK;
			return sub->path ? STEP_STAT : -ENOMEM;
		}
	}
	is_dir = ent->flags & LE_DIR;
	have_meta = ent->flags & LE_META;
	have_perm = ent->flags & LE_PERM;
	ns_lent_meta(p->dir->list, ent, &m);
	n = ns_entry_node(ns, p, op->name, is_dir, have_meta ? &m : NULL);
	if (!is_dir && !have_meta) {
		if ((e = lookup_meta(ns, p, op, n, &m, &asked, sub)) != 0)
			return e;
		have_meta = true;
		listed = false;
	}
	/* a version from a listing is as confirmed as the listing (ns_entry_link) */
	if (listed)
		op->stale = !ns_listing_fresh(ns, p->dir);
	return ns_entry_link(ns, p, op->name, n, is_dir,
			     (is_dir ? have_perm : have_meta) ? &m : NULL,
			     listed ? ns_listing_fresh(ns, p->dir) : asked, listed, &op->st);
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
	struct node *n = ns_find_ino(ns, op->ino);
	struct fstate *f;
	int e;

	if (!n)
		return -ENOENT;
	if (n->is_dir)
		return -EISDIR;
	/* an open needs a version of its own: a lazy node takes its listing entry's, as
	 * confirmed as the listing is (an older one is revalidated below) */
	if (ns_is_lazy(n) && (e = ns_materialize(ns, n)) < 0)
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
		   (!ns->cfg.immutable && !ns_fresh(ns, f->meta_ns, clock_ns(ns)))) {
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
	struct node *n = ns_find_ino(ns, op->ino);
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
	if (!ns_listing_fresh(ns, n->dir))
		start_listing(ns, n, NULL, &sub->lf); /* out of memory: the next opendir tries */
	h = malloc(sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->ino = n->ino;
	h->parent = ns_pino(n);
	h->l = n->dir->list;
	ns_listing_get(h->l);
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

