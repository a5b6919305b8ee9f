/*
 * mkman.c - print the tierfs(8) man page (roff) on stdout.
 *
 * Built and run by meson (custom_target tierfs.8), never installed. The page comes from
 * fs_opts_man(), which walks the same option table as `tierfs --help`, so the two cannot
 * disagree: an option added to fs/opts.c appears in both at the next build.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fs.h"

int main(void)
{
	size_t n = fs_opts_man(NULL, 0);
	char *buf = malloc(n + 1);

	if (!buf) {
		fputs("tierfs-mkman: out of memory\n", stderr);
		return 1;
	}
	fs_opts_man(buf, n + 1);
	if (fwrite(buf, 1, n, stdout) != n || fflush(stdout) != 0) {
		perror("tierfs-mkman");
		free(buf);
		return 1;
	}
	free(buf);
	return 0;
}
