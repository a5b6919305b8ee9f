/*
 * file_i.h - what file.c (reads, listings) shares with filewrite.c (uploads, unlink, rename,
 * directories): the store's state, opening beneath its root, and the version string.
 */
#ifndef TIERFS_FILE_I_H
#define TIERFS_FILE_I_H

#include <stdbool.h>
#include <sys/stat.h>

#include "backend.h"
#include "upload.h"

struct fwriter;

/* Set up by file_init, read-only afterwards (w: its own lock, filewrite.c). */
struct file {
	char *root;	   /* absolute directory, no trailing slash (for messages) */
	int rootfd;	   /* O_PATH on root: every path is resolved beneath it */
	bool walk;	   /* no openat2: resolve component by component, following no symlink */
	struct fwriter *w; /* the writer thread, when the mount writes; NULL otherwise */
};

/* Open @path (relative, "" = the root) beneath the root. @return an fd or -errno (-ENOENT
 * for anything outside the root). */
int file_open_beneath(const struct file *f, const char *path, int flags);

/* Open directory @path beneath the root for writing in it (O_RDONLY|O_DIRECTORY): no symlink
 * is followed on the way, not even one that stays beneath the root. @return an fd or -errno. */
int file_open_dir(const struct file *f, const char *path);

/* @st as the read path reports it: size, mtime, permission bits, and the version string
 * "dev-ino-size-mtime_ns" (hex, quoted) that keys cached blocks. */
void file_meta_from_stat(const struct stat *st, struct bk_meta *m);

/* filewrite.c: the write operations of file_ops (scheme.h says what each does). */
int file_write_start(struct backend *b);
void file_write_stop(struct backend *b);
void file_write_free(struct file *f);
int file_upload_init(struct bk_upload *u);
int file_upload_part(struct bk_upload *u, struct bk_part *p, int step);
int file_upload_commit(struct bk_upload *u);
void file_upload_abort(struct bk_upload *u);
int file_unlink(struct backend *b, const char *path, bk_done_fn done, void *arg);
int file_rename(struct backend *b, const char *from, const char *to, bool overwrite,
		bk_done_fn done, void *arg);
int file_mkdir(struct backend *b, const char *path, bool rm, bk_done_fn done, void *arg);

#endif
