/*
 * procfd.c - who closes a file being written: the thread group of a FLUSH's caller, and
 * whether a process still holds a descriptor of the file, read from /proc.
 *
 * The kernel sends FLUSH at every close(2) of every descriptor of an open file (dups, and the
 * copies a fork gives its children), with the calling thread's id (fuse_req_ctx()->pid, a
 * thread id, not the process's); RELEASE comes once, when the last reference goes, and
 * close() does not wait for it. write.c commits an object at the close of its writer: the
 * process that opened it (its thread group: a Java writer opens on one thread and closes on
 * another), when it holds no other descriptor of the file. So it asks here:
 *
 *   FLUSH from tid ──► /proc/<tid>/status "Tgid:" ──► != opener's: another process, no commit
 *                                                └─► == opener's: /proc/<tgid>/fd/<n>
 *        readlink ends with "/<name>"? ──► /proc/<tgid>/fdinfo/<n>: "ino:" the file's and
 *        "flags:" open for writing ──► another descriptor of it: no commit yet
 *
 * The link is matched by the file's last name only: through a bind mount of a directory of
 * the mount (a container's volume, a Kubernetes subPath) the path above it differs.
 *
 * A file being written is open for writing through one handle only (a second write open is
 * EBUSY), so a descriptor of that inode open for writing is a dup of the writer's. An answer
 * that cannot be read (hidepid, a caller outside tierfs's pid namespace: pid 0, no access to
 * another user's fd table) is -errno, and write.c falls back to committing at the first
 * flush after a byte was written (docs/semantics.md). Nothing here touches the mount itself:
 * readlink and fdinfo of a descriptor never call into FUSE.
 *
 * Cost: one readlink per descriptor the writer holds, at each of its closes of the file, about
 * 20 us each in a VM. A process with more than FS_PROC_SCAN_MAX descriptors open is not read
 * past them (-E2BIG): a shell, which is what dups a file it writes, has a few dozen. It counts
 * the descriptors open, not the table's room (FDSize): the table never shrinks, so a process
 * that once held a thousand descriptors and holds ten now is read like any other.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs_i.h"

/* The first line of /proc/@pid/@file starting with @key, its value into @buf. @return 0 or
 * -errno. */
static int proc_field(pid_t pid, const char *file, const char *key, char *buf, size_t len)
{
	char path[64], line[256];
	size_t klen = strlen(key);
	FILE *f;
	int r = -ENOENT;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, klen) == 0) {
			snprintf(buf, len, "%s", line + klen + strspn(line + klen, " \t"));
			r = 0;
			break;
		}
	}
	fclose(f);
	return r;
}

pid_t fs_proc_tgid(pid_t pid)
{
	char v[32];
	long t;
	int r;

	if (pid <= 0)
		return -ESRCH; /* outside tierfs's pid namespace */
	r = proc_field(pid, "status", "Tgid:", v, sizeof(v));
	if (r < 0)
		return r;
	t = strtol(v, NULL, 10);
	return t > 0 ? (pid_t)t : -EINVAL;
}

/* Does descriptor @fd of @pid refer to inode @ino, open for writing? */
static bool fd_writes(pid_t pid, const char *fd, uint64_t ino)
{
	char file[300], v[64];
	unsigned long long i;
	unsigned long flags;

	snprintf(file, sizeof(file), "fdinfo/%s", fd);
	if (proc_field(pid, file, "flags:", v, sizeof(v)) < 0)
		return false;
	flags = strtoul(v, NULL, 8);
	/* "ino:" is there since Linux 5.14; before, the path and the mode are all there is */
	i = proc_field(pid, file, "ino:", v, sizeof(v)) < 0 ? ino : strtoull(v, NULL, 10);
	return i == ino && (flags & O_ACCMODE) != O_RDONLY;
}

/* How many descriptors @tgid has open, counted in @dir (/proc/TGID/fd) without reading any:
 * up to FS_PROC_SCAN_MAX + 1. @return the count, or -errno. */
static int count_fds(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	if (!d)
		return -errno;
	while (n <= FS_PROC_SCAN_MAX && (de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

int fs_proc_holds(pid_t tgid, uint64_t ino, const char *path)
{
	char dir[64], link[330], target[4096];
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t blen = strlen(base);
	struct dirent *de;
	DIR *d;
	int r = 0;

	if (tgid <= 0)
		return -ESRCH;
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)tgid);
	r = count_fds(dir);
	if (r < 0)
		return r;
	if (r > FS_PROC_SCAN_MAX)
		return -E2BIG; /* a readlink each would cost more than the close */
	d = opendir(dir);
	if (!d)
		return -errno;
	r = 0;
	while (r == 0 && (de = readdir(d))) {
		ssize_t n;

		if (de->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
		n = readlink(link, target, sizeof(target) - 1);
		if (n <= (ssize_t)blen || target[0] != '/')
			continue; /* a pipe, a socket, a shorter path */
		target[n] = '\0';
		/* the last name only: through a bind mount of a directory of the mount (a
		 * container's volume) the path above it is another; the inode and the write mode
		 * (fd_writes) say the rest */
		if (target[n - blen - 1] != '/' || strcmp(target + n - blen, base) != 0)
			continue;
		if (fd_writes(tgid, de->d_name, ino))
			r = 1;
	}
	closedir(d);
	return r;
}

int fs_proc_children_hold(pid_t tgid, uint64_t ino, const char *path)
{
	char dir[64], file[340], v[4096];
	struct dirent *de;
	DIR *d;
	int r = 0;

	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)tgid);
	d = opendir(dir);
	if (!d)
		return -errno;
	while (r == 0 && (de = readdir(d))) {
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "%s/%s/children", dir, de->d_name);
		f = fopen(file, "re");
		if (!f)
			continue;
		if (fgets(v, sizeof(v), f)) {
			for (char *s = v, *e; r == 0 && *s; s = e) {
				long c = strtol(s, &e, 10);

				if (e == s)
					break;
				if (c > 0 && fs_proc_holds((pid_t)c, ino, path) == 1)
					r = 1;
			}
		}
		fclose(f);
	}
	closedir(d);
	return r;
}
