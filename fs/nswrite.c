/*
 * nswrite.c - changes made to the namespace through the mount (write.c; ns.c): a file created,
 * written, truncated or failed, a name removed, a directory made, a name renamed.
 *
 * The store learns of a change when write.c's request ends; a listing started before that may
 * not show it. So each change is kept as an overlay of its directory (struct ov, dirst.ov),
 * which corrects every listing published after it (ns_ov_apply) until one started after the
 * change shows it. A file being written holds a stand-in version (fstate.writing) until the
 * store has the object.
 *
 * Locking: ns->lock, as ns.c says: every call here takes it, and none asks the store.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ns_i.h"

/* ---- changes made through the mount (write.c) ----------------------------------------------- */

/* Take @name out of @d's listing, if it is there (lock held). */
static void listing_remove(struct dirst *d, const char *name)
{
	struct ns_listing *l = d->list;
	size_t pos;

	if (!l || !ns_find_pos(l, name, &pos) || !(l = ns_listing_own(d)) ||
	    !ns_find_pos(l, name, &pos))
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
	e = ns_find_entry(d->list, o->name);
	/* a directory's entry stays as it is; a file's is replaced by what was written */
	if (e && !o->gone && o->is_dir && (e->flags & LE_DIR))
		return;
	if (e)
		listing_remove(d, o->name);
	if (!o->gone && !ns_listing_insert(d, o->name, o->is_dir, o->is_dir ? NULL : &o->m))
		d->list->stale = true;
}

/* A listing was just published in @d: the changes made since it started are put in it, and
 * the ones it shows by itself go (lock held). */
void ns_ov_apply(struct dirst *d)
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
	d->changed = ns_wall_now();
	ov_show(d, o);
	if (!gone)
		ns_neg_del(d, name);
	return 0;
}

/* Directory @parent, for a change to @name in it (lock held). @return it or NULL with
 * *ret_err. */
static struct node *change_dir(struct ns *ns, uint64_t parent, const char *name, int *ret_err)
{
	struct node *p = ns_find_ino(ns, parent);

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
	struct timespec now = ns_wall_now();
	struct bk_meta m = {.mtime = now.tv_sec, .mtime_ns = (uint32_t)now.tv_nsec};
	struct node *p, *n;
	int r;

	pthread_mutex_lock(&ns->lock);
	p = change_dir(ns, parent, name, &r);
	if (p && (ns_find_name(ns, p, name) || (p->dir->list && ns_find_entry(p->dir->list, name))))
		r = -EEXIST;
	if (r == 0 && !(n = ns_node_new(ns, p, name, false)))
		r = -ENOMEM;
	if (r == 0 && (r = ns_set_version(ns, n, &m, false, 0)) < 0)
		ns_drop_unused(ns, n);
	if (r == 0) {
		n->f->writing = true;
		n->f->wmtime = now;
		n->nlookup++;
		ns_neg_del(p->dir, name);
		p->dir->changed = now;
		ns_fill_stat(ns, n, ret_st);
	}
	pthread_mutex_unlock(&ns->lock);
	return r;
}

int ns_truncate(struct ns *ns, uint64_t ino)
{
	struct node *n;
	int r = 0;

	pthread_mutex_lock(&ns->lock);
	n = ns_find_ino(ns, ino);
	if (!n || n->unlinked)
		r = -ENOENT;
	else if (n->is_dir)
		r = -EISDIR;
	else if (ns_nopen(n) || (n->f && n->f->writing))
		r = -EBUSY; /* read, or written, through another handle */
	else if (!n->f)
		r = ns_materialize(ns, n);
	if (r == 0) {
		n->f->writing = true;
		n->f->wsize = 0;
		n->f->wmtime = ns_wall_now();
		n->f->reval = NULL; /* what the store says of the old version no longer applies */
	}
	pthread_mutex_unlock(&ns->lock);
	return r;
}

void ns_set_size(struct ns *ns, uint64_t ino, uint64_t size)
{
	struct node *n;

	pthread_mutex_lock(&ns->lock);
	n = ns_find_ino(ns, ino);
	if (n && !n->is_dir && n->f && n->f->writing) {
		n->f->wsize = size;
		n->f->wmtime = ns_wall_now();
	}
	pthread_mutex_unlock(&ns->lock);
}

bool ns_writing(struct ns *ns, uint64_t ino)
{
	struct node *n;
	bool w;

	pthread_mutex_lock(&ns->lock);
	n = ns_find_ino(ns, ino);
	w = n && !n->is_dir && n->f && n->f->writing;
	pthread_mutex_unlock(&ns->lock);
	return w;
}

int ns_written(struct ns *ns, uint64_t ino, const struct bk_meta *meta, struct cache_oid *ret_id)
{
	struct node *n, *p;
	int r;

	pthread_mutex_lock(&ns->lock);
	n = ns_find_ino(ns, ino);
	if (!n || n->is_dir || !n->f) {
		pthread_mutex_unlock(&ns->lock);
		return -ENOENT; /* forgotten while written: the store has it all the same */
	}
	n->f->writing = false;
	n->f->reval = NULL; /* an answer sent before the commit would undo it */
	r = ns_set_version(ns, n, meta, true, clock_ns(ns));
	if (r == 0) {
		*ret_id = n->f->cur->id;
		n->f->opened = false; /* the next open drops the pages of the writes */
	}
	p = ns_parent_of(n);
	if (r == 0 && p && !n->unlinked)
		r = ov_add(ns, p->dir, n->name, false, false, false, meta);
	/* a directory made on S3 has something under it now: its name stays without help */
	for (struct node *d = p; r == 0 && d && ns_parent_of(d); d = ns_parent_of(d))
		for (struct ov *o = ns_parent_of(d)->dir->ov; o; o = o->next)
			if (o->sticky && strcmp(o->name, d->name) == 0)
				o->sticky = false;
	pthread_mutex_unlock(&ns->lock);
	return r;
}

void ns_write_failed(struct ns *ns, uint64_t ino)
{
	struct node *n;

	pthread_mutex_lock(&ns->lock);
	n = ns_find_ino(ns, ino);
	if (n && !n->is_dir && n->f) {
		n->f->writing = false;
		/* the name leads to the store again: what it has (nothing, or the old object) */
		n->f->stale = true;
		if (n->f->wsize || !n->f->cur->etag[0])
			ns_unlink_name(ns, n);
		if (ns_parent_of(n) && ns_parent_of(n)->dir->list)
			ns_parent_of(n)->dir->list->stale = true;
	}
	pthread_mutex_unlock(&ns->lock);
}

int ns_removed(struct ns *ns, uint64_t parent, const char *name, struct cache_oid *ret_id)
{
	struct node *p, *n;
	int r;

	pthread_mutex_lock(&ns->lock);
	p = change_dir(ns, parent, name, &r);
	n = p ? ns_find_name(ns, p, name) : NULL;
	if (r == 0 && ret_id)
		*ret_id = n && !n->is_dir && n->f ? n->f->cur->id : (struct cache_oid){0, 0};
	if (n)
		ns_unlink_name(ns, n); /* open files keep their inode and version */
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
	if (p && (ns_find_name(ns, p, name) || (p->dir->list && ns_find_entry(p->dir->list, name))))
		r = -EEXIST;
	if (r == 0 && !(n = ns_node_new(ns, p, name, true)))
		r = -ENOMEM;
	if (r == 0 && !n->dir->list && (n->dir->list = ns_listing_new()))
		n->dir->list->time_ns = clock_ns(ns); /* empty, and known so: no listing needed */
	if (r == 0)
		r = ov_add(ns, p->dir, name, false, true, sticky, NULL);
	if (r == 0) {
		n->nlookup++;
		ns_fill_stat(ns, n, ret_st);
	} else if (n) {
		ns_drop_unused(ns, n);
	}
	pthread_mutex_unlock(&ns->lock);
	return r;
}

int ns_dir_empty(struct ns *ns, uint64_t ino)
{
	struct node *n;
	int r;

	pthread_mutex_lock(&ns->lock);
	n = ns_find_ino(ns, ino);
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
	struct node *m = calloc(1, ns_node_size(strlen(name)));
	struct node *op = n->up;

	ns_unlink_name(ns, n);
	if (!m || (!n->is_dir && !n->f && ns_materialize(ns, n) < 0)) {
		free(m);
		return NULL;
	}
	*m = *n;
	strcpy(m->name, name);
	m->up = np;
	m->unlinked = false;
	ns_unlink_ino(ns, n);
	ns_link_node(ns, m);
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
		if ((o = ns_fobj_new(ns, m, &meta))) {
			fobj_put(m->f->cur);
			m->f->cur = o;
		}
	}
	free(n); /* its state is m's now */
	if (op && !--op->dir->kids && op->gone)
		ns_node_release(op);
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
	n = np ? ns_find_name(ns, p, name) : NULL;
	*ret_id = n && !n->is_dir && n->f ? n->f->cur->id : (struct cache_oid){0, 0};
	if (np && (old = ns_find_name(ns, np, newname)) && old != n)
		ns_unlink_name(ns, old); /* replaced: its open files keep it */
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
		ns_neg_del(np->dir, newname);
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
		if ((n = ns_find_name(ns, p, name)))
			ns_unlink_name(ns, n);
		for (pp = &p->dir->ov; *pp; pp = &(*pp)->next) {
			if (strcmp((*pp)->name, name) == 0) {
				struct ov *o = *pp;

				*pp = o->next;
				free(o);
				break;
			}
		}
		listing_remove(p->dir, name);
		ns_neg_del(p->dir, name);
		if (p->dir->list)
			p->dir->list->stale = true;
	}
	pthread_mutex_unlock(&ns->lock);
}

