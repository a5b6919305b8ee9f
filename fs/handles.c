/*
 * handles.c - the mount's open handles: files (struct fh, for ops.c and change.c) and
 * directories (struct ns_dir). Each is listed in the mount (m->fhs, m->dirs) while open, so
 * that those still open when the session ends (libfuse sends no release for them) are freed
 * too (fs_ops_drain).
 *
 * Locking: m->handles_lock guards the two lists, and nothing else is taken inside it.
 */
#include <stddef.h>
#include <stdlib.h>

#include "fs_i.h"
#include "write.h"

static void hlink_add(struct mount *m, struct hlink **head, struct hlink *l)
{
	pthread_mutex_lock(&m->handles_lock);
	l->prev = NULL;
	l->next = *head;
	if (*head)
		(*head)->prev = l;
	*head = l;
	pthread_mutex_unlock(&m->handles_lock);
}

static void hlink_del(struct mount *m, struct hlink **head, struct hlink *l)
{
	pthread_mutex_lock(&m->handles_lock);
	if (l->prev)
		l->prev->next = l->next;
	else
		*head = l->next;
	if (l->next)
		l->next->prev = l->prev;
	pthread_mutex_unlock(&m->handles_lock);
}

_Static_assert(offsetof(struct fh, link) == 0 && offsetof(struct ns_dir, link) == 0,
	       "fs_main casts a list link back to its handle");

void fs_fh_track(struct mount *m, struct fh *fh)
{
	hlink_add(m, &m->fhs, &fh->link);
}

void fs_fh_free_untracked(struct fh *fh)
{
	fobj_put(fh->obj);
	free(fh->text);
	pthread_mutex_destroy(&fh->lock);
	pthread_cond_destroy(&fh->moved);
	free(fh);
}

void fs_fh_free(struct mount *m, struct fh *fh)
{
	hlink_del(m, &m->fhs, &fh->link);
	if (fh->ino)
		ns_release(m->ns, fh->ino);
	if (fh->w)
		wfile_release(fh->w); /* a handle the kernel never released (teardown) */
	fs_fh_free_untracked(fh);
}

struct fh *fs_fh_new(void)
{
	struct fh *fh = calloc(1, sizeof(*fh));

	if (fh) {
		pthread_mutex_init(&fh->lock, NULL);
		pthread_cond_init(&fh->moved, NULL);
	}
	return fh;
}

void fs_dir_track(struct mount *m, struct ns_dir *d)
{
	hlink_add(m, &m->dirs, &d->link);
}

void fs_dir_free(struct mount *m, struct ns_dir *d)
{
	hlink_del(m, &m->dirs, &d->link);
	ns_dir_put(d);
}
