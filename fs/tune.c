/*
 * tune.c - raise the kernel's readahead of a FUSE mount.
 *
 * The kernel reads ahead on a FUSE mount at most read_ahead_kb of its bdi (128 KiB by
 * default), whatever max_readahead the filesystem asked for at init. tierfs and the benchmark
 * ceiling (bench/nullfs) raise it to 1 MiB after mounting, so sequential readers send
 * requests that large. Best effort: it needs root, and the default stays otherwise.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "fs.h"

int fs_tune_readahead(const char *mountpoint, unsigned kib)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096], path[PATH_MAX + 64], dev[32];
	unsigned maj, min;
	bool found = false;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char mnt[PATH_MAX + 64], *w = mnt;

		if (sscanf(line, "%*s %*s %31s %*s %4095s", dev, mnt) != 2)
			continue;
		/* mountinfo escapes space, tab, newline and backslash as \ooo */
		for (char *r = mnt; *r; r++) {
			if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] && r[3]) {
				*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
				r += 3;
			} else {
				*w++ = *r;
			}
		}
		*w = '\0';
		if (strcmp(mnt, mountpoint) == 0 && sscanf(dev, "%u:%u", &maj, &min) == 2)
			found = true; /* the last match is the newest mount */
	}
	fclose(f);
	if (!found)
		return -ENOENT;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min);
	f = fopen(path, "we");
	if (!f)
		return -errno; /* not root: the kernel default stays */
	fprintf(f, "%u\n", kib);
	return fclose(f) == 0 ? 0 : -errno;
}
