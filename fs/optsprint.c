/*
 * optsprint.c - the option table (opts.c) as text: --help (fs_opts_help), the man page
 * tierfs(8) (fs_opts_man, printed by mount-helpers/mkman.c), and the settings of a mount as
 * name=value lines (fs_opts_format: .tierfs/config).
 *
 * Every one of them walks fs_opts_table[] in table order, so an option added to the table
 * appears in all of them; the lines that are not rows (the command's own flags, the FUSE
 * options, the man page's prose) are the lists below. Output goes through struct out
 * (opts_i.h), which counts what it would need, like snprintf.
 *
 * Locking: none. The help text is built once, under pthread_once; the rest writes only into
 * the caller's buffer.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "opts_i.h"

/* The lines of --help (and OPTIONS of the man page) that are not rows of fs_opts_table[]: the
 * command's own flags and the FUSE options. @left NULL: a line of prose. */
static const struct {
	const char *left; /* "-f", "-o allow_other" */
	const char *text;
} mount_lines[] = {
    {"-f", "stay in the foreground"},
    {"-d", "log every FUSE request (implies -f)"},
    {"-s", "single-threaded"},
    {"-h, --help", "print this help and exit"},
    {"-V, --version", "print the version and exit"},
    {"-o allow_other", "let other users in (needs user_allow_other)"},
    {"-o allow_root", "let root in too"},
    {"-o default_permissions", "accepted: always on, the kernel checks the modes"},
    {"-o auto_unmount", "unmount when tierfs exits"},
    {"-o fsname=NAME", "source name shown in /proc/mounts"},
    {"-o subtype=NAME", "type shown as fuse.NAME"},
    {"-o ro", "a read-only mount, whatever allow_* says"},
    {NULL, "max_read is not an option: tierfs sets it itself (1 MiB)."},
    {NULL, "From /etc/fstab, these are accepted and ignored: rw, defaults, auto,"},
    {NULL, "noauto, user, users, nouser, owner, group, _netdev, nofail, [no]atime,"},
    {NULL, "[no]relatime, strictatime, [no]diratime, [no]lazytime, [no]dev, [no]suid,"},
    {NULL, "[no]exec, sync, async, dirsync, x-*, comment=*; and the flags -n, -v."},
};

/* The paragraph under the usage line, in --help and in the man page's DESCRIPTION. */
static const char *const intro_lines[] = {
    "URL is s3://BUCKET[/PREFIX], http(s)://HOST[/PATH] or file:///PATH.",
    "Options may come anywhere and -o may repeat; when an option is given",
    "twice, the last one wins. SIZE takes K, M, G or T, powers of 1024 (4M,",
    "4MB and 4MiB are the same). SECS is whole seconds (60 or 60s).",
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* One row of fs_opts_table[] as --help shows it: "-o name=META" and "help (default)". */
static void opt_row(const struct opt *d, char *left, size_t leftlen, char *text, size_t textlen)
{
	char def[48] = "", num[32];
	const char *meta = d->meta;

	if (!meta)
		meta = d->kind == OPT_SIZE	? "SIZE"
		       : d->kind == OPT_SECONDS ? "SECS"
		       : d->kind == OPT_COUNT	? "N"
		       : d->kind == OPT_BOOL	? "on|off"
		       : d->kind == OPT_MODE	? "MODE"
						: "VALUE";
	if (d->kind == OPT_FLAG)
		snprintf(left, leftlen, "-o %s", d->name);
	else
		snprintf(left, leftlen, "-o %s=%s", d->name, meta);

	if (d->def_help)
		snprintf(def, sizeof(def), " (%s)", d->def_help);
	else if (d->kind == OPT_SIZE)
		snprintf(def, sizeof(def), " (%s)", fs_human(d->def, num, sizeof(num)));
	else if (d->kind == OPT_MODE)
		snprintf(def, sizeof(def), " (0%" PRIo64 ")", d->def);
	else if (d->kind == OPT_SECONDS || d->kind == OPT_COUNT)
		snprintf(def, sizeof(def), " (%" PRIu64 ")", d->def);
	else if (d->kind == OPT_FLAG || d->kind == OPT_BOOL)
		snprintf(def, sizeof(def), " (%s)", d->def ? "on" : "off");
	else if (d->def_str)
		snprintf(def, sizeof(def), " (%s)", d->def_str);
	snprintf(text, textlen, "%s%s", d->help, def);
}

static void help_build(char *buf, size_t len)
{
	struct out w = {buf, len, 0};

	out_printf(&w, "%s [-f] [-d] [-s]\n", USAGE);
	out_printf(&w, "       tierfs status [-w] [-n SECS] MOUNTPOINT\n");
	out_printf(&w, "       tierfs set MOUNTPOINT NAME=VALUE...\n");
	out_printf(&w, "       tierfs -h | -V\n\n");
	for (size_t i = 0; i < N_OF(intro_lines); i++)
		out_printf(&w, "%s\n", intro_lines[i]);

	for (int g = 0; g < N_GROUPS; g++) {
		out_printf(&w, "\n%s\n", fs_opts_group_title[g]);
		for (size_t i = 0; i < fs_opts_count; i++) {
			char left[48], text[160];

			if (fs_opts_table[i].group != (enum opt_group)g)
				continue;
			opt_row(&fs_opts_table[i], left, sizeof(left), text, sizeof(text));
			/* two spaces at least between an option and its text, however long */
			out_printf(&w, strlen(left) < 23 ? "    %-23s %s\n" : "    %s  %s\n", left,
				   text);
		}
		if (g != GROUP_MOUNT)
			continue;
		for (size_t i = 0; i < N_OF(mount_lines); i++) {
			if (mount_lines[i].left)
				out_printf(&w, "    %-23s %s\n", mount_lines[i].left,
					   mount_lines[i].text);
			else
				out_printf(&w, "    %s\n", mount_lines[i].text);
		}
	}
}

/* @s as roff text: backslashes and minus signs escaped, a leading '.' or '\'' made literal. */
static void roff(struct out *w, const char *s)
{
	if (*s == '.' || *s == '\'')
		out_printf(w, "\\&");
	for (; *s; s++) {
		if (*s == '\\')
			out_printf(w, "\\e");
		else if (*s == '-')
			out_printf(w, "\\-");
		else
			out_printf(w, "%c", *s);
	}
}

/* A .TP item: the option in bold, its meta-variable (after '=') in italics. */
static void roff_item(struct out *w, const char *left, const char *text)
{
	const char *eq = strchr(left, '=');

	out_printf(w, ".TP\n\\fB");
	if (eq) {
		char name[64];

		snprintf(name, sizeof(name), "%.*s", (int)(eq - left + 1), left);
		roff(w, name);
		out_printf(w, "\\fI");
		roff(w, eq + 1);
	} else {
		roff(w, left);
	}
	out_printf(w, "\\fR\n");
	roff(w, text);
	out_printf(w, "\n");
}

/* Man-page prose: one line per entry, roff fills them into paragraphs; "" starts a new one. */
static const char *const man_description[] = {
    "tierfs mounts the objects of an object store (an S3-compatible bucket, plain HTTP(S) "
    "URLs with a JSON directory index or a manifest, or a local directory) as a filesystem, "
    "for message brokers that keep log segments in object storage. It is read-only unless "
    "allow_write, allow_overwrite or allow_delete is given (see WRITING).",
    "",
    "Every read goes through caches of aligned blocks of block_size bytes, in two tiers in "
    "memory. The hot tier serves objects modified within the last hot_ttl seconds (tail "
    "readers). The lagging tier serves older objects (consumers replaying old data): it is "
    "smaller, its blocks live lagging_ttl seconds, and its misses are fetched under a token "
    "bucket (lagging_rate, lagging_burst, lagging_ops), so a replay neither evicts the tail's "
    "blocks nor floods the store.",
    "",
    "Files of hot objects keep the kernel page cache across opens while their version is "
    "unchanged. Files of lagging objects use the page cache too (so shared memory maps work), "
    "but tierfs drops their pages behind the reader and at close, so a replay does not push the "
    "tail's pages out of the kernel; lagging_page_cache keeps them instead.",
};

static const char *const man_tail[] = {
    ".SH FSTAB",
    "mount(8) runs",
    ".B mount.tierfs",
    "(a link to tierfs) for entries of type",
    ".BR tierfs ,",
    "and mount.fuse3(8) runs tierfs for entries of type",
    ".BR fuse.tierfs :",
    ".PP",
    ".nf",
    "s3://segments/prod  /mnt/segments  tierfs  endpoint=http://10.0.0.5:9000,path_style,"
    "allow_other,_netdev,nofail  0 0",
    "https://objects.internal/seg/  /mnt/objects  fuse.tierfs  immutable,_netdev  0 0",
    ".fi",
    ".PP",
    "Secrets are refused as options (they would show in /proc/PID/cmdline): S3 credentials come "
    "from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, else from the shared "
    "credentials file (credentials=FILE, profile=NAME).",
    ".PP",
    "With shared=, the values in Redis carry a MAC when shared_key=FILE names the fleet's "
    "secret: 32 to 4096 bytes (head -c 32 /dev/urandom > FILE), readable and writable by its "
    "owner only, or the mount is refused. Without it a mount trusts Redis as much as the store, "
    "and says so at start.",
    ".SH CONTROL",
    "MOUNTPOINT/.tierfs/stats holds counters in the Prometheus text format, every metric "
    "labelled by tier; MOUNTPOINT/.tierfs/config the effective settings. The extended "
    "attributes user.tierfs.tier, user.tierfs.etag and user.tierfs.cached describe a file; "
    "setfattr -n user.tierfs.lagging_rate -v 100M MOUNTPOINT changes a limit live (also "
    "lagging_burst, lagging_ops, hot_ttl) on a writable mount; tierfs set MOUNTPOINT "
    "lagging_rate=100M does the same on any mount, through the mount's control socket, for "
    "its owner only.",
    ".SH WRITING",
    "allow_write lets files and directories be created; allow_overwrite lets open(O_TRUNC) "
    "replace an existing object; allow_delete allows unlink, rmdir of an empty directory and "
    "(with allow_write) rename. Without any of them the kernel holds the mount read-only and "
    "every change is EROFS; http(s):// stores are always read-only.",
    ".PP",
    "A file is written sequentially from offset 0 (a write elsewhere is EINVAL). It becomes an "
    "object when it is closed or fsynced, whole: close() and fsync() return after the store "
    "acknowledged all of it, and a failure (EIO, ENOSPC, EEXIST) leaves nothing under the name. "
    "A flush before the first byte commits nothing. A write after the commit is EINVAL. While "
    "it is written, this mount lists the name with the bytes written so far and answers EBUSY "
    "to an open for reading; other mounts see nothing new until the commit, then see it as any "
    "new object (within negative_ttl). Objects are never changed in place: a write open without "
    "O_TRUNC, chmod, chown, links and special files are EPERM. On S3, rename is EXDEV and a "
    "directory made by mkdir lives in the mount until something is written under it; on "
    "file://, rename works beneath the root.",
    ".PP",
    "S3 objects up to part_size go up as one PutObject, larger ones as a multipart upload "
    "(write_parts parts in flight per file), each part checked by its signed SHA-256 and "
    "Content-MD5 and retried; a failed upload is aborted. Give the bucket a lifecycle rule "
    "(AbortIncompleteMultipartUpload) for the uploads of a killed process. file:// objects "
    "are written to a hidden temporary file, fsynced and renamed into place; leftovers are "
    "removed at the next writing mount.",
    ".PP",
    "Written blocks enter the hot tier as they are written, and the disk and shared tiers once "
    "the store has the object: reading it back fetches nothing from the store, here or on a "
    "mount sharing Redis. Parts are buffered in write_buffer bytes for all files; when it is "
    "full, write() waits. Who may write is decided by the kernel from uid, gid, file_mode and "
    "dir_mode: with the defaults only the mount's owner changes anything.",
    ".SH OPERATING",
    "metrics=[HOST:]PORT serves the same counters, and the process_* metrics, at "
    "http://HOST:PORT/metrics for Prometheus (HOST defaults to 127.0.0.1; a port that cannot "
    "be bound fails the mount). The latencies of reads (by the tier that served them) and of "
    "store requests (by operation) are histograms.",
    ".PP",
    "tierfs status [-w] [-n SECS] MOUNTPOINT prints one screen from the stats file: each tier's hit ratio, hits and bytes per second, "
    "residency and p99 read latency; reads, the lagging limiter, the store and its errors. -w "
    "redraws it every SECS (default 1) until q or Ctrl-C.",
    ".PP",
    "Under systemd (the tierfs@.service unit, Type=notify) tierfs sends READY=1 once the mount "
    "answers, STOPPING=1 when it unmounts, and WATCHDOG=1 from its I/O loop every half of "
    "WatchdogSec=. A unit that reads the mount orders itself with Requires= and After= on "
    "tierfs@MOUNT.service, or RequiresMountsFor=MOUNTPOINT for an /etc/fstab mount.",
    ".SH EXAMPLES",
    "Mount a bucket with a disk tier and the metrics endpoint, and look at it:",
    ".PP",
    ".nf",
    "tierfs s3://segments/prod /mnt/segments \\",
    "    -o endpoint=http://10.0.0.5:9000,path_style,allow_other \\",
    "    -o cache_dir=/var/cache/tierfs/segments,disk_size=50G,metrics=9100",
    "tierfs status -w /mnt/segments",
    "curl -s http://127.0.0.1:9100/metrics | grep tierfs_cache_hits_total",
    ".fi",
    ".PP",
    "Let a replay go faster for a while, then back:",
    ".PP",
    ".nf",
    "tierfs set /mnt/segments lagging_rate=200M",
    "tierfs set /mnt/segments lagging_rate=50M",
    ".fi",
    ".PP",
    "Let a Kafka broker keep its remote tier on the bucket (Files.copy, range reads, "
    "deleteIfExists):",
    ".PP",
    ".nf",
    "tierfs s3://segments/tiered /mnt/tiered-storage \\",
    "    -o endpoint=http://10.0.0.5:9000,path_style,allow_write,allow_overwrite,allow_delete",
    ".fi",
    ".PP",
    "Run it under systemd (the store and options in /etc/tierfs/mnt-segments.env):",
    ".PP",
    ".nf",
    "systemctl enable --now tierfs@mnt-segments",
    ".fi",
    ".SH EXIT STATUS",
    "0 after a clean unmount (also on SIGTERM, SIGINT and SIGHUP); 1 when the mount fails or "
    "the store cannot be reached at mount; 2 for a wrong command line.",
    ".SH SEE ALSO",
    ".BR mount (8),",
    ".BR fstab (5),",
    ".BR fusermount3 (1),",
    ".BR mount.fuse3 (8)",
};

/* Lines of roff text: "" starts a paragraph, a line that is already roff (".SH ...") goes as
 * it is if @raw_dots, anything else is escaped. */
static void roff_lines(struct out *w, const char *const *lines, size_t n, bool raw_dots)
{
	for (size_t i = 0; i < n; i++) {
		if (!lines[i][0]) {
			out_printf(w, ".PP\n");
		} else if (raw_dots && lines[i][0] == '.') {
			out_printf(w, "%s\n", lines[i]);
		} else {
			roff(w, lines[i]);
			out_printf(w, "\n");
		}
	}
}

/* The flags and FUSE options under the last group: items, and prose in its own paragraph. */
static void man_mount_lines(struct out *w)
{
	for (size_t i = 0; i < N_OF(mount_lines); i++) {
		if (mount_lines[i].left) {
			roff_item(w, mount_lines[i].left, mount_lines[i].text);
			continue;
		}
		if (i == 0 || mount_lines[i - 1].left)
			out_printf(w, ".PP\n");
		roff(w, mount_lines[i].text);
		out_printf(w, "\n");
	}
}

/* OPTIONS: one subsection per group of the table, one item per row. */
static void man_options(struct out *w)
{
	out_printf(w, ".SH OPTIONS\n");
	for (int g = 0; g < N_GROUPS; g++) {
		char title[96];

		/* "cache:" -> "cache" */
		snprintf(title, sizeof(title), "%.*s", (int)strcspn(fs_opts_group_title[g], ":"),
			 fs_opts_group_title[g]);
		out_printf(w, ".SS ");
		roff(w, title);
		out_printf(w, "\n");
		for (size_t i = 0; i < fs_opts_count; i++) {
			char left[48], text[160];

			if (fs_opts_table[i].group != (enum opt_group)g)
				continue;
			opt_row(&fs_opts_table[i], left, sizeof(left), text, sizeof(text));
			roff_item(w, left, text);
		}
		if (g == GROUP_MOUNT)
			man_mount_lines(w);
	}
}

size_t fs_opts_man(char *buf, size_t len)
{
	struct out w = {buf, len, 0};

	if (buf && len)
		buf[0] = '\0';
	out_printf(&w, ".\\\" Generated by tierfs-mkman from the option table of fs/opts.c.\n");
	out_printf(&w, ".TH TIERFS 8 \"\" \"tierfs %s\" \"System Administration\"\n",
		   TIERFS_VERSION);
	out_printf(&w, ".nh\n.ad l\n"); /* no hyphenation: option names stay whole */
	out_printf(&w, ".SH NAME\ntierfs, mount.tierfs \\- mount an object store through tiered "
		       "block caches\n");
	out_printf(&w, ".SH SYNOPSIS\n.B tierfs\n.I URL MOUNTPOINT\n"
		       "[\\fB\\-o\\fR \\fIoptions\\fR] [\\fB\\-f\\fR] [\\fB\\-d\\fR] "
		       "[\\fB\\-s\\fR]\n.br\n"
		       ".B tierfs status\\fR [\\fB\\-w\\fR] [\\fB\\-n\\fR \\fISECS\\fR] "
		       "\\fIMOUNTPOINT\\fR\n.br\n"
		       ".B tierfs set\\fR \\fIMOUNTPOINT NAME\\fR=\\fIVALUE\\fR...\n.br\n"
		       ".B tierfs \\-h\\fR | \\fB\\-V\n.br\n"
		       ".B mount \\-t tierfs\n.I URL MOUNTPOINT\n[\\fB\\-o\\fR \\fIoptions\\fR]\n");
	out_printf(&w, ".SH DESCRIPTION\n");
	roff_lines(&w, man_description, N_OF(man_description), false);
	out_printf(&w, ".PP\n");
	roff_lines(&w, intro_lines, N_OF(intro_lines), false);
	man_options(&w);
	roff_lines(&w, man_tail, N_OF(man_tail), true);
	return w.need;
}

static char help_text[8192];
static pthread_once_t help_once = PTHREAD_ONCE_INIT;

static void help_init(void)
{
	help_build(help_text, sizeof(help_text));
}

const char *fs_opts_help(void)
{
	pthread_once(&help_once, help_init);
	return help_text;
}

size_t fs_opts_format(const struct fs_opts *o, char *buf, size_t len)
{
	struct out w = {buf, len, 0};

	if (buf && len)
		buf[0] = '\0';
	for (size_t i = 0; i < fs_opts_count; i++) {
		const struct opt *d = &fs_opts_table[i];

		switch (d->kind) {
		case OPT_FLAG:
			if (bool_of(o, d))
				out_printf(&w, "%s\n", d->name);
			break;
		case OPT_BOOL:
			out_printf(&w, "%s=%s\n", d->name, bool_of(o, d) ? "on" : "off");
			break;
		case OPT_STRING:
		case OPT_PATH:
			if (str_of(o, d))
				out_printf(&w, "%s=%s\n", d->name, str_of(o, d));
			break;
		case OPT_MODE:
			out_printf(&w, "%s=0%03" PRIo64 "\n", d->name, u64_of(o, d));
			break;
		default:
			out_printf(&w, "%s=%" PRIu64 "\n", d->name, u64_of(o, d));
			break;
		}
	}
	return w.need;
}
