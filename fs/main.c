/*
 * main.c - tierfs URL MOUNTPOINT [-o options]: parse, then run the mount. Or a command on a
 * running mount: tierfs set MOUNTPOINT NAME=VALUE... (a live setting, through the mount's
 * control socket).
 */
#include <stdio.h>
#include <string.h>

#include "fs.h"

/* tierfs set MOUNTPOINT NAME=VALUE...: @return the exit status (0, 1 refused, 2 usage). */
static int cmd_set(int argc, char **argv)
{
	char err[512];
	int status = 0;

	if (argc < 4) {
		fprintf(stderr, "usage: tierfs set MOUNTPOINT NAME=VALUE...\n");
		return 2;
	}
	for (int i = 3; i < argc; i++) {
		char *eq = strchr(argv[i], '=');

		if (!eq || eq == argv[i]) {
			fprintf(stderr, "tierfs: %s: expected NAME=VALUE\n", argv[i]);
			return 2;
		}
		*eq = '\0';
		if (fs_ctl_set(argv[2], argv[i], eq + 1, err, sizeof(err)) < 0) {
			fprintf(stderr, "tierfs: %s\n", err);
			status = 1;
		}
	}
	return status;
}

int main(int argc, char **argv)
{
	struct fs_opts o = {0};
	char err[512] = "";
	int r;

	if (argc > 1 && strcmp(argv[1], "set") == 0)
		return cmd_set(argc, argv);
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
