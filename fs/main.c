/*
 * main.c - tierfs URL MOUNTPOINT [-o options]: parse, then run the mount; or a subcommand
 * (subcommands[]: `tierfs status MOUNTPOINT`), chosen by the first argument, which no URL
 * can be (a URL has a scheme).
 */
#include <stdio.h>
#include <string.h>

#include "fs.h"

static const struct {
	const char *name;
	int (*run)(int argc, char **argv); /* argv[0] is the subcommand's name */
} subcommands[] = {
    {"status", fs_status_main},
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
