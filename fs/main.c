/*
 * main.c - tierfs URL MOUNTPOINT [-o options]: parse, then run the mount.
 */
#include <stdio.h>
#include <string.h>

#include "fs.h"

int main(int argc, char **argv)
{
	struct fs_opts o = {0};
	char err[512] = "";
	int r;

	r = fs_opts_parse(argc, argv, &o, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "tierfs: %s\n", err[0] ? err : strerror(-r));
		fs_opts_done(&o);
		return 2;
	}
	if (o.show_help) {
		fputs(fs_opts_help(), stdout);
		fs_opts_done(&o);
		return 0;
	}
	if (o.show_version) {
		printf("tierfs %s\n", TIERFS_VERSION);
		fs_opts_done(&o);
		return 0;
	}
	r = fs_main(&o);
	fs_opts_done(&o);
	return r;
}
