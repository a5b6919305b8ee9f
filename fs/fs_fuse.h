/*
 * fs_fuse.h - what fs/ shares among the files that speak FUSE (ops.c, change.c, write.c,
 * mount.c, device.c): the operations' table and the operations that change the store. The
 * rest of the mount's state is in fs_i.h, which has no FUSE request types, so that
 * <fuse_lowlevel.h> reaches only these files.
 */
#ifndef TIERFS_FS_FUSE_H
#define TIERFS_FS_FUSE_H

#include <fuse_lowlevel.h>

#include "fs_i.h"

/* ---------------------------------------------------------------------------------------------
 * ops.c for mount.c: the operations' table.
 * ------------------------------------------------------------------------------------------ */

extern const struct fuse_lowlevel_ops fs_ops;

/* ---------------------------------------------------------------------------------------------
 * change.c: the FUSE operations that change the store (allow_write, allow_overwrite,
 * allow_delete). ops.c's table points at them.
 * ------------------------------------------------------------------------------------------ */

void fs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		  struct fuse_file_info *fi);
/* open for writing (O_WRONLY, O_RDWR, O_TRUNC, O_APPEND): ops.c's op_open hands them over. */
void fs_op_open_write(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		 struct fuse_file_info *fi);
void fs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void fs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		   struct fuse_file_info *fi);
void fs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void fs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		  const char *newname, unsigned int flags);

#endif
