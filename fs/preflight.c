/*
 * preflight.c - what a mount warns about before it serves: settings that work, but likely not
 * as the user meant. One line each on stderr (before daemonizing, so a shell sees them), and
 * the mount goes on, as it does for a cache_dir it cannot use.
 *
 *   checks[]            finds                              says
 *   mountpoint_empty    entries in the mountpoint          its files are hidden while mounted
 *   shared_reachable    a shared= server refusing, or      its blocks come from the store
 *                       silent past SHARED_PROBE_MS        until it answers
 *
 * A check is a row: its function and nothing else to change.
 *
 * Locking: none (fs_main's thread, before the session exists). Workload: once per mount; a
 * Redis server that does not answer costs SHARED_PROBE_MS of the mount's start.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fs_i.h"
#include "probe.h"

#define SHARED_PROBE_MS 1000

static void mountpoint_empty(const struct fs_opts *o)
{
	DIR *d = opendir(o->mountpoint);
	struct dirent *de;
	unsigned n = 0;

	if (!d)
		return; /* the mount itself will say why */
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	if (n)
		fprintf(stderr,
			"tierfs: warning: mountpoint %s is not empty (%u entr%s): hidden "
			"while tierfs is mounted there\n",
			o->mountpoint, n, n == 1 ? "y" : "ies");
}

static void server_down(void *arg, const char *server, int err)
{
	fprintf(stderr,
		"tierfs: warning: shared tier: Redis at %s does not answer (%s): its "
		"blocks are read from the store until it does\n",
		server, err == -ENOENT ? "unknown host" : strerror(-err));
}

static void shared_reachable(const struct fs_opts *o)
{
	if (o->shared)
		bk_probe_servers(o->shared, SHARED_PROBE_MS, server_down, NULL);
}

static void (*const checks[])(const struct fs_opts *o) = {
    mountpoint_empty,
    shared_reachable,
};

void fs_preflight(const struct fs_opts *o)
{
	for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++)
		checks[i](o);
}
