/*
 * process.c - the standard process_* metrics of the /metrics endpoint, read from /proc.
 *
 * Every Prometheus client library exports these under the same names and help, and the
 * dashboards and alerts people already have read them: CPU time, open and allowed file
 * descriptors, virtual and resident memory, start time. They describe the process, not the
 * mount, so they are not rows of metrics.c's table (its names all start with tierfs_) and
 * the stats file leaves them out; the endpoint prints them after the table's families.
 *
 *   /proc/self/stat  utime stime (ticks) ─► process_cpu_seconds_total
 *                    starttime (ticks after boot) + /proc/stat btime ─► process_start_time_seconds
 *                    vsize (bytes), rss (pages) ─► process_virtual_memory_bytes,
 *                                                  process_resident_memory_bytes
 *   /proc/self/fd    entries ─► process_open_fds;  RLIMIT_NOFILE ─► process_max_fds
 *
 * One row per metric in procs[] below: name, type, help and the field of struct proc_sample
 * it prints. A value /proc does not give (a field missing from a kernel's stat line) leaves
 * its family out rather than printing a wrong 0.
 *
 * Locking: none; each call reads /proc afresh. Workload: one call per scrape, a few reads of
 * small files and a walk of /proc/self/fd (bounded by the endpoint's connection limit plus
 * what the mount holds open).
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "metrics.h"

/* What one reading of /proc gave; each value with a flag saying /proc had it. On the caller's
 * stack: no lock. */
struct proc_sample {
	double v[6];
	bool have[6];
};

enum { P_CPU, P_FDS, P_MAXFDS, P_VSIZE, P_RSS, P_START };

static const struct {
	const char *name, *type, *help;
	const char *fmt; /* how its value prints */
} procs[] = {
    [P_CPU] = {"process_cpu_seconds_total", "counter",
	       "Total user and system CPU time spent in seconds.", "%.2f"},
    [P_FDS] = {"process_open_fds", "gauge", "Number of open file descriptors.", "%.0f"},
    [P_MAXFDS] = {"process_max_fds", "gauge", "Maximum number of open file descriptors.", "%.0f"},
    [P_VSIZE] = {"process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", "%.0f"},
    [P_RSS] = {"process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", "%.0f"},
    [P_START] = {"process_start_time_seconds", "gauge",
		 "Start time of the process since unix epoch in seconds.", "%.2f"},
};

#define N_PROCS (sizeof(procs) / sizeof(procs[0]))

/* Read up to @len - 1 bytes of @path into @buf, NUL-terminated. @return 0 or -errno. */
static int slurp(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return -errno;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = '\0';
	return n ? 0 : -EIO;
}

/* /proc/stat's btime: the boot time, seconds since the epoch. @return 0 or -errno. */
static int boot_time(unsigned long long *ret)
{
	char buf[8192];
	const char *p;

	if (slurp("/proc/stat", buf, sizeof(buf)) < 0 || !(p = strstr(buf, "\nbtime ")))
		return -ENOENT;
	return sscanf(p + 7, "%llu", ret) == 1 ? 0 : -EINVAL;
}

/* /proc/self/stat: CPU time, start time, virtual and resident size. The command name (field
 * 2) may hold spaces and parentheses: fields are counted after its last ')'. */
static void read_stat(struct proc_sample *s)
{
	unsigned long long utime, stime, start, vsize, btime;
	long long rss;
	double tick = (double)sysconf(_SC_CLK_TCK);
	long page = sysconf(_SC_PAGESIZE);
	char buf[1024];
	const char *p;

	if (slurp("/proc/self/stat", buf, sizeof(buf)) < 0 || !(p = strrchr(buf, ')')))
		return;
	/* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
	 * cutime cstime priority nice threads itrealvalue starttime vsize rss */
	if (sscanf(p + 2,
		   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
		   "%*d %*d %llu %llu %lld",
		   &utime, &stime, &start, &vsize, &rss) != 5 ||
	    tick <= 0)
		return;
	s->v[P_CPU] = (double)(utime + stime) / tick;
	s->v[P_VSIZE] = (double)vsize;
	s->v[P_RSS] = (double)rss * (double)page;
	s->have[P_CPU] = s->have[P_VSIZE] = s->have[P_RSS] = true;
	if (boot_time(&btime) == 0) {
		s->v[P_START] = (double)btime + (double)start / tick;
		s->have[P_START] = true;
	}
}

static void read_fds(struct proc_sample *s)
{
	DIR *d = opendir("/proc/self/fd");
	struct rlimit rl;
	struct dirent *de;
	unsigned long n = 0;

	if (d) {
		while ((de = readdir(d)))
			if (de->d_name[0] != '.')
				n++;
		closedir(d);
		s->v[P_FDS] = (double)(n ? n - 1 : 0); /* not the directory's own fd */
		s->have[P_FDS] = true;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		s->v[P_MAXFDS] = rl.rlim_cur == RLIM_INFINITY ? 1e18 : (double)rl.rlim_cur;
		s->have[P_MAXFDS] = true;
	}
}

/* One family: HELP, TYPE, its sample. @return 0 or the sink's -errno. */
static int write_proc(const struct fs_metrics_sink *k, size_t i, double v)
{
	char line[512], val[64];
	int n;

	snprintf(val, sizeof(val), procs[i].fmt, v);
	n = snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n%s %s\n", procs[i].name,
		     procs[i].help, procs[i].name, procs[i].type, procs[i].name, val);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -EOVERFLOW;
	return k->write(k->arg, line, (size_t)n);
}

int fs_process_metrics_write(const struct fs_metrics_sink *sink)
{
	struct proc_sample s = {0};
	int r = 0;

	read_stat(&s);
	read_fds(&s);
	for (size_t i = 0; i < N_PROCS && r == 0; i++)
		if (s.have[i])
			r = write_proc(sink, i, s.v[i]);
	return r;
}
