/*
 * change.c - the FUSE operations that change the store: create and write new objects (O_RDONLY
 * and O_APPEND too: an empty object, and writing from the start), replace
 * one opened with O_TRUNC, unlink, mkdir, rmdir and rename. A mount without allow_write,
 * allow_overwrite and allow_delete is read-only in the kernel and never sees them.
 *
 *   create ─► ns_create (the name, being written) ─► wfile_new ─► handle (write.c)
 *   open O_TRUNC ─► allow_overwrite? ─► ns_truncate ─► wfile_new(overwrite) ─► handle
 *   write, flush (with the closer's pid), fsync, release ─► write.c (the writer's last close
 *   commits)
 *   unlink ─► allow_delete? ─► backend_unlink_async ─► (I/O thread) ns_removed, cache_drop
 *   mkdir  ─► allow_write? ─► backend_mkdir_async ─► ns_mkdir (S3: the mount's alone, until
 *             something is written under it)
 *   rmdir  ─► allow_delete? ─► ns_opendir_async (its listing) ─► empty? ─► backend_rmdir_async
 *             ─► ns_removed
 *   rename ─► backend_rename_async (file://; S3 answers EXDEV: mv and Files.move copy and
 *             delete by themselves) ─► ns_removed(old), ns_removed+stale(new)
 *
 * What may be done, and the errno otherwise (docs/semantics.md, "Writing through the mount"):
 *   - without the flag an operation needs: EPERM (rename needs allow_write and allow_delete,
 *     and allow_overwrite to replace a name); a read-only mount answers EROFS;
 *   - a write open of an existing object without O_TRUNC (changing an object in place), or
 *     with O_APPEND or O_RDWR: EPERM; O_TRUNC without allow_overwrite: EPERM;
 *   - reading a file being written: EBUSY, until it is closed;
 *   - the control directory's name: EPERM;
 *   - a name over 255 bytes: ENAMETOOLONG (lookup answers it first, in ops.c).
 * Who may is the kernel's business: default_permissions with uid, gid, file_mode and
 * dir_mode, so with the default modes nobody but the mount's owner creates anything.
 *
 * Requests that wait for the store are parked: the backend's I/O thread answers them. No FUSE
 * worker waits. No lock of its own: the namespace and write.c keep theirs.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fuse_lowlevel.h>

#include "fs_fuse.h"

static struct mount *M(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* The path of @name in directory @parent, into @buf. @return 0 or -errno. */
static int child(struct mount *m, fuse_ino_t parent, const char *name, char *buf, size_t len)
{
	int r = ns_path(m->ns, parent, buf, len);
	size_t n = strlen(buf);

	if (r < 0)
		return r;
	if (snprintf(buf + n, len - n, "%s%s", n ? "/" : "", name) >= (int)(len - n))
		return -ENAMETOOLONG;
	return 0;
}

/* The thread group of @req's caller: a file's writer. @return it, or <= 0 when unknown. */
static pid_t opener(fuse_req_t req)
{
	return fs_proc_tgid(fuse_req_ctx(req)->pid);
}

/* A name longer than statfs's namelen (255) is ENAMETOOLONG, whatever the operation. */
static int name_ok(const char *name)
{
	return strlen(name) > NAME_MAX ? -ENAMETOOLONG : 0;
}

/* Is @name in @parent the control directory's? Nothing may be made or removed under it. */
static bool is_control(struct mount *m, fuse_ino_t parent, const char *name)
{
	return (parent == 1 && strcmp(name, m->o->control_dir) == 0) || ctl_is(parent);
}

/* A handle on wfile @w of @ino, answered to @req as an open (@e NULL) or a create. */
static void reply_handle(fuse_req_t req, fuse_ino_t ino, struct wfile *w,
			 struct fuse_file_info *fi, const struct fuse_entry_param *e)
{
	struct mount *m = M(req);
	struct fh *fh = fs_fh_new();

	if (!fh) {
		wfile_release(w);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fh->w = w;
	fi->fh = (uint64_t)(uintptr_t)fh;
	fi->direct_io = 1; /* no page cache of a file being written: readers wait for the store */
	fs_fh_track(m, fh);
	if ((e ? fuse_reply_create(req, e, fi) : fuse_reply_open(req, fi)) == -ENOENT)
		fs_fh_free(m, fh); /* interrupted: no release will come */
}

void fs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		  struct fuse_file_info *fi)
{
	struct mount *m = M(req);
	struct fuse_entry_param e = {0};
	struct wfile *w;
	int r;

	if (!m->o->allow_write) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (is_control(m, parent, name)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	/* O_RDONLY makes an empty object (committed at its close), O_APPEND to a new file is
	 * writing from its start */
	r = name_ok(name);
	if (r == 0)
		r = ns_create(m->ns, parent, name, &e.attr);
	if (r == 0) {
		r = wfile_new(m, e.attr.st_ino, false, opener(req), &w);
		if (r < 0) {
			ns_write_failed(m->ns, e.attr.st_ino);
			ns_forget(m->ns, e.attr.st_ino, 1);
		}
	}
	if (r < 0) {
		fuse_reply_err(req, fs_reply_errno(r));
		return;
	}
	e.ino = e.attr.st_ino;
	/* its size grows, and a write the store refuses takes the name away: the kernel asks
	 * again at each use (answered from memory) */
	e.attr_timeout = 0;
	e.entry_timeout = 0;
	reply_handle(req, e.ino, w, fi, &e);
}

void fs_op_open_write(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mount *m = M(req);
	struct wfile *w;
	int r;

	if (!m->o->allow_write && !m->o->allow_overwrite) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* a new object replaces an old one whole; nothing is changed in place */
	if (ctl_is(ino) || !(fi->flags & O_TRUNC) || (fi->flags & O_ACCMODE) != O_WRONLY ||
	    (fi->flags & O_APPEND) || !m->o->allow_overwrite) {
		fuse_reply_err(req, EPERM);
		return;
	}
	r = ns_truncate(m->ns, ino);
	if (r == 0 && (r = wfile_new(m, ino, true, opener(req), &w)) < 0)
		ns_write_failed(m->ns, ino);
	if (r < 0) {
		fuse_reply_err(req, fs_reply_errno(r));
		return;
	}
	fuse_lowlevel_notify_inval_inode(m->se, ino, -1, 0); /* its size is 0 now */
	reply_handle(req, ino, w, fi, NULL);
}

static struct wfile *wfile_of(struct fuse_file_info *fi)
{
	struct fh *fh = (struct fh *)(uintptr_t)fi->fh;

	return fh ? fh->w : NULL;
}

void fs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		 struct fuse_file_info *fi)
{
	struct wfile *w = wfile_of(fi);

	if (!w)
		fuse_reply_err(req, EBADF);
	else
		wfile_write(req, w, buf, size, off);
}

void fs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wfile *w = wfile_of(fi);

	if (w) /* the writer's close() returns when the store has the object */
		wfile_flush(req, w, fuse_req_ctx(req)->pid);
	else
		fuse_reply_err(req, 0);
}

void fs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct wfile *w = wfile_of(fi);

	if (w)
		wfile_commit(req, w);
	else
		fuse_reply_err(req, 0);
}

/* An owner and mode set to what they are already change nothing, on any file or directory,
 * so they succeed (cp -p, install, tar and sed -i set them on what they make). Beyond that,
 * only a file being written takes attributes: its times and mode are the mount's, so setting
 * them changes nothing, and a size of 0 is what it has (an O_TRUNC the kernel sends as a
 * setattr). Everything else is the store's to change, and it changes nothing in place. */
static int setattr_ok(struct mount *m, fuse_ino_t ino, const struct stat *attr, int to_set,
		      struct fuse_file_info *fi, const struct stat *st)
{
	const int owner = FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID;
	const int noop = owner | FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_CTIME;

	if (((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != st->st_uid) ||
	    ((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != st->st_gid))
		return -EPERM;
	if (!(to_set & ~noop) && (!(to_set & FUSE_SET_ATTR_MODE) ||
				  (attr->st_mode & 07777) == (st->st_mode & 07777)))
		return 0;
	if (!ns_writing(m->ns, ino) || ((to_set & FUSE_SET_ATTR_SIZE) && attr->st_size != 0))
		return -EPERM;
	if ((to_set & FUSE_SET_ATTR_SIZE) && fi && wfile_of(fi) && wfile_size(wfile_of(fi)))
		return -EPERM; /* written already: cut nothing */
	return 0;
}

void fs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		   struct fuse_file_info *fi)
{
	struct mount *m = M(req);
	struct stat st;
	int r;

	if (!m->writable) {
		fuse_reply_err(req, EROFS);
		return;
	}
	r = ns_getattr(m->ns, ino, &st);
	if (r == 0)
		r = setattr_ok(m, ino, attr, to_set, fi, &st);
	if (r < 0)
		fuse_reply_err(req, fs_reply_errno(r));
	else
		fuse_reply_attr(req, &st, 0);
}

/* ---- operations on names, answered when the store has done them ------------------------------ */

/* An unlink, mkdir, rmdir or rename waiting for the store. */
struct change {
	fuse_req_t req;
	struct mount *m;
	fuse_ino_t parent, newparent, ino;
	char name[256], newname[256];
	char path[4096];
};

static struct change *change_new(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct change *c = calloc(1, sizeof(*c));

	if (!c || strlen(name) >= sizeof(c->name)) {
		free(c);
		fuse_reply_err(req, c ? ENAMETOOLONG : ENOMEM);
		return NULL;
	}
	c->req = req;
	c->m = M(req);
	c->parent = parent;
	strcpy(c->name, name);
	return c;
}

static void change_fail(struct change *c, int r)
{
	fuse_reply_err(c->req, fs_reply_errno(r));
	free(c);
}

/* A change of @name in @parent that the option @allowed permits, with its path: NULL when it
 * was refused (answered: EROFS on a read-only mount, EPERM without the option or on the
 * control directory's name, which @control_err answers for mkdir), else the change. */
static struct change *change_start(fuse_req_t req, fuse_ino_t parent, const char *name,
				   bool allowed, int control_err)
{
	struct mount *m = M(req);
	struct change *c;
	int r;

	if (!allowed) {
		fuse_reply_err(req, m->writable ? EPERM : EROFS);
		return NULL;
	}
	if (is_control(m, parent, name)) {
		fuse_reply_err(req, control_err);
		return NULL;
	}
	if (!(c = change_new(req, parent, name)))
		return NULL;
	r = child(m, parent, name, c->path, sizeof(c->path));
	if (r < 0) {
		change_fail(c, r);
		return NULL;
	}
	return c;
}

static void unlinked(void *arg, int err)
{
	struct change *c = arg;
	struct cache_oid id = {0, 0};

	if (err == 0)
		err = ns_removed(c->m->ns, c->parent, c->name, &id);
	if (err == 0 && (id.hi || id.lo))
		cache_drop(c->m->c, id); /* its blocks are never served again */
	fuse_reply_err(c->req, err ? fs_reply_errno(err) : 0);
	free(c);
}

void fs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mount *m = M(req);
	struct change *c = change_start(req, parent, name, m->o->allow_delete, EPERM);
	int r;

	if (c && (r = backend_unlink_async(m->b, c->path, unlinked, c)) < 0)
		change_fail(c, r);
}

static void made_dir(void *arg, int err)
{
	struct change *c = arg;
	struct mount *m = c->m;
	struct fuse_entry_param e = {0};
	/* a store without directories (S3) keeps no empty one: the mount does */
	bool sticky = strcmp(backend_scheme(m->b), "s3") == 0;

	if (err == 0)
		err = ns_mkdir(m->ns, c->parent, c->name, sticky, &e.attr);
	if (err < 0) {
		change_fail(c, err);
		return;
	}
	e.ino = e.attr.st_ino;
	e.attr_timeout = e.entry_timeout = fs_ttl(m);
	if (fuse_reply_entry(c->req, &e) == -ENOENT)
		ns_forget(m->ns, e.ino, 1);
	free(c);
}

void fs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct mount *m = M(req);
	struct change *c = change_start(req, parent, name, m->o->allow_write, EEXIST);
	int r;

	if (!c)
		return;
	r = ns_listed(m->ns, parent, name) == 1 ? -EEXIST : 0;
	if (r == 0)
		r = backend_mkdir_async(m->b, c->path, made_dir, c);
	if (r < 0)
		change_fail(c, r);
}

static void removed_dir(void *arg, int err)
{
	struct change *c = arg;

	if (err == 0)
		err = ns_removed(c->m->ns, c->parent, c->name, NULL);
	fuse_reply_err(c->req, err ? fs_reply_errno(err) : 0);
	free(c);
}

/* rmdir, once the directory's listing is held: empty, it goes. */
static void rmdir_listed(void *arg, int err, struct ns_dir *d)
{
	struct change *c = arg;
	int r = err;

	if (r == 0) {
		r = ns_dir_empty(c->m->ns, d->ino);
		ns_dir_put(d);
	}
	if (r == 0)
		r = backend_rmdir_async(c->m->b, c->path, removed_dir, c);
	if (r < 0)
		change_fail(c, r);
}

/* rmdir, once the name is looked up: its inode. */
static void rmdir_found(void *arg, int err, const struct stat *st, bool stale)
{
	struct change *c = arg;

	(void)stale; /* the emptiness check below reads the listing as it is either way */
	if (err < 0) {
		change_fail(c, err);
		return;
	}
	c->ino = st->st_ino;
	ns_forget(c->m->ns, c->ino, 1); /* the lookup's count: the kernel has its own */
	if (!S_ISDIR(st->st_mode)) {
		change_fail(c, -ENOTDIR);
		return;
	}
	ns_opendir_async(c->m->ns, c->ino, rmdir_listed, c);
}

void fs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mount *m = M(req);
	struct change *c = change_start(req, parent, name, m->o->allow_delete, EPERM);

	if (c)
		ns_lookup_async(m->ns, parent, name, rmdir_found, c);
}

static void renamed(void *arg, int err)
{
	struct change *c = arg;
	struct cache_oid id = {0, 0};

	if (err == 0)
		err = ns_renamed(c->m->ns, c->parent, c->name, c->newparent, c->newname, &id);
	if (err == 0 && (id.hi || id.lo))
		cache_drop(c->m->c, id); /* the old path's version; the new path is a new oid */
	fuse_reply_err(c->req, err ? fs_reply_errno(err) : 0);
	free(c);
}

void fs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		  const char *newname, unsigned int flags)
{
	struct mount *m = M(req);
	char to[4096];
	struct change *c;
	bool replace = !(flags & RENAME_NOREPLACE);
	int r;

	/* a rename makes a name (allow_write) and removes one (allow_delete): a mount that may
	 * only create cannot make an object disappear under another name */
	if (!m->o->allow_write || !m->o->allow_delete ||
	    (replace && !m->o->allow_overwrite && ns_listed(m->ns, newparent, newname) == 1)) {
		fuse_reply_err(req, m->writable ? EPERM : EROFS);
		return;
	}
	if (flags & ~RENAME_NOREPLACE) {
		fuse_reply_err(req, EINVAL); /* RENAME_EXCHANGE, RENAME_WHITEOUT */
		return;
	}
	if (is_control(m, parent, name) || is_control(m, newparent, newname)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (!(c = change_new(req, parent, name)))
		return;
	c->newparent = newparent;
	snprintf(c->newname, sizeof(c->newname), "%s", newname);
	r = child(m, parent, name, c->path, sizeof(c->path));
	if (r == 0)
		r = child(m, newparent, newname, to, sizeof(to));
	if (r == 0)
		r = backend_rename_async(m->b, c->path, to, replace && m->o->allow_overwrite,
					 renamed, c);
	if (r < 0)
		change_fail(c, r);
}
