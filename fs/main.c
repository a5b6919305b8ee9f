/*
 * main.c - tierfs URL MOUNTPOINT [-o options]: parse, then run the mount; or a subcommand on a
 * running mount (subcommands[]: `tierfs status MOUNTPOINT`, `tierfs set MOUNTPOINT
 * NAME=VALUE...`), chosen by the first argument, which no URL can be (a URL has a scheme).
 */
#include <stdio.h>
#include <string.h>

#include "fs.h"

/* tierfs set MOUNTPOINT NAME=VALUE...: a live setting, through the mount's control socket
 * (argv[0] is "set"). @return the exit status (0, 1 refused, 2 usage). */
static int cmd_set(int argc, char **argv)
{
	char err[512];
	int status = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: tierfs set MOUNTPOINT NAME=VALUE...\n");
		return 2;
	}
	for (int i = 2; i < argc; i++) {
		char *eq = strchr(argv[i], '=');

		if (!eq || eq == argv[i]) {
			fprintf(stderr, "tierfs: %s: expected NAME=VALUE\n", argv[i]);
			return 2;
		}
		*eq = '\0';
		if (fs_ctl_set(argv[1], argv[i], eq + 1, err, sizeof(err)) < 0) {
			fprintf(stderr, "tierfs: %s\n", err);
			status = 1;
		}
	}
	return status;
}

static const struct {
	const char *name;
	int (*run)(int argc, char **argv); /* argv[0] is the subcommand's name */
} subcommands[] = {
    {"status", fs_status_main},
    {"set", cmd_set},
};

int main(int argc, char **argv)
{
	struct fs_opts o = {0};
	char err[512] = "";
	int r;

	for (size_t i = 0; argc > 1 && i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		if (!strcmp(argv[1], subcommands[i].name))
			return subcommands[i].run(argc - 1, argv + 1);
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
