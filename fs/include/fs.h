/*
 * fs.h - the FUSE side of tierfs as its programs see it: the mount options (opts.c), the
 * readahead tuning (tune.c) and running a mount (fs_main, mount.c). Its users outside fs/ are
 * main.c, mount-helpers/mkman.c and bench/nullfs.c; the namespace and the operations are
 * fs/'s own (fs_i.h).
 */
#ifndef TIERFS_FS_H
#define TIERFS_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every setting a mount takes with -o, after parsing and defaults. Sizes in bytes, times in
 * seconds. Strings are malloc'd and owned by the struct (fs_opts_done frees them). */
struct fs_opts {
	char *url;            /* the store: s3://, http(s)://, file:// */
	char *mountpoint;     /* absolute path */

	uint64_t block_size;  /* power of two, 64K..64M; default 4M */
	uint64_t hot_size;    /* default 1G */
	uint64_t hot_ttl;     /* default 60 */
	bool lagging;         /* default true */
	uint64_t lagging_size; /* default 128M */
	uint64_t lagging_ttl; /* default 5 */
	uint64_t lagging_rate; /* bytes/s, 0 = unlimited; default 50M */
	uint64_t lagging_burst; /* bytes; 0 = 2 x lagging_rate */
	uint64_t lagging_ops; /* requests/s, 0 = unlimited */
	uint64_t readahead;   /* blocks; default 2 */
	uint64_t metadata_ttl; /* default 60 */
	uint64_t negative_ttl; /* a name missing from a listing is asked of the store; its
				* absence is believed this long; default 1 */
	bool immutable;       /* objects never change: no revalidation */
	bool lagging_page_cache; /* keep the kernel page cache for lagging files too */
	bool prefault;        /* fault the caches' memory in at mount, not on first use */

	char *endpoint;       /* s3 endpoint URL */
	char *region;
	bool path_style;
	char *profile;
	char *credentials;
	char *manifest;
	char *ca_file;
	bool insecure;
	uint64_t max_conns;   /* default 16, >= 2 */
	uint64_t timeout;     /* default 30 */
	uint64_t retries;     /* default 3 */
	bool allow_write;     /* create new objects and directories (write.c) */
	bool allow_overwrite; /* open an existing object with O_TRUNC: replaced at close */
	bool allow_delete;    /* unlink, and rmdir of an empty directory */
	uint64_t part_size;   /* bytes of one upload part (S3 multipart); default 8M */
	uint64_t write_parts; /* parts of one file in flight at once; default 4 */
	uint64_t write_buffer; /* bytes of write buffers, the mount's files together; 64M */
	char *cache_dir;      /* the disk tier's directory; NULL: no disk tier */
	uint64_t disk_size;   /* bytes of the disk tier, at most; default 10G */
	bool disk_lagging;    /* lagging blocks go to disk too; default off */
	char *control_dir;    /* default ".tierfs" */
	uint64_t uid;         /* owner shown for everything; default getuid() */
	uint64_t gid;         /* group shown for everything; default getgid() */
	uint64_t file_mode;   /* permission bits of files, 0..0777; default 0644 */
	uint64_t dir_mode;    /* permission bits of directories, 0..0777; default 0755 */
	char *metrics;        /* [HOST:]PORT of the /metrics endpoint; NULL: none */
	char *trace;          /* the read trace's file (fs/trace.c); NULL = none */
	uint64_t trace_size;  /* bytes per trace file, then it rotates; default 256M */
	uint64_t trace_files; /* rotated trace files kept; default 8 */
	char *trace_salt;     /* a file whose first 16 bytes salt the trace's ids; NULL: random */

	char *shared;         /* redis://HOST:PORT[,HOST:PORT...]: the shared tier; NULL = none */
	uint64_t shared_timeout; /* milliseconds a Redis call may take; default 50 */
	char *shared_prefix;  /* prefix of every key, one per fleet; default "tierfs:" */
	char *shared_password_file; /* AUTH password's file (or TIERFS_SHARED_PASSWORD) */
	char *shared_key;     /* the fleet's secret: values carry a MAC under it; NULL = none */
	bool shared_fill_lagging; /* lagging fetches fill the shared tier too; default off */
	uint64_t fleet_lagging_rate; /* bytes/s of lagging fetches, the fleet together; 0 = none */
	uint64_t fleet_lagging_ops;  /* fetches/s of lagging fetches, the fleet together; 0 = none */

	bool foreground;      /* -f */
	bool debug;           /* -d */
	bool single_thread;   /* -s */
	bool show_help;       /* -h / --help: print fs_opts_help() and exit 0 */
	bool show_version;    /* -V / --version */

	/* Options for the kernel / libfuse that tierfs passes on untouched (allow_other,
	 * default_permissions, ...), as one comma-separated string, or NULL. */
	char *fuse_opts;
};

/* "4M" -> 4194304. Suffixes K M G T (powers of 1024, upper or lower case, optional trailing
 * "B"/"iB"); no sign, no fraction, no overflow. @return 0 or -EINVAL / -ERANGE. */
int fs_parse_size(const char *s, uint64_t *ret);

/* @v as the options write it (fs_parse_size reads it back): 4194304 -> "4M", the largest of
 * K, M, G, T that divides @v exactly, else plain bytes. @return @buf. */
const char *fs_human(uint64_t v, char *buf, size_t len);

/* Whole seconds, no suffix or an "s" suffix. @return 0 or -EINVAL / -ERANGE. */
int fs_parse_seconds(const char *s, uint64_t *ret);

/* metrics=[HOST:]PORT: "9100" (HOST 127.0.0.1), "0.0.0.0:9100", "host.example:9100",
 * "[::1]:9100"; PORT 1..65535. HOST (without brackets) into @host (@hostlen with the NUL).
 * @return 0 or -EINVAL. */
int fs_parse_endpoint(const char *s, char *host, size_t hostlen, unsigned *ret_port);

/*
 * Parse the command line: tierfs URL MOUNTPOINT [-o opts]... [-f] [-d] [-s] [-h] [-V].
 * Fills *ret with defaults, then the options. A wrong option writes one line for the user into
 * @err (no "tierfs: " prefix) and returns -EINVAL.
 * @return 0 or -errno.
 */
int fs_opts_parse(int argc, char **argv, struct fs_opts *ret, char *err, size_t errlen);

/* Set one option by name, as -o name=value would (value NULL for flags). Used for live
 * changes too. @return 0, -ENOENT (no such option), -EINVAL (bad value, message in @err). */
int fs_opts_set(struct fs_opts *o, const char *name, const char *value, char *err,
		size_t errlen);

/* @return true if option @name may be changed on a running mount (through setxattr on its
 * root; the table's rows with an apply hook). */
bool fs_opts_live(const char *name);

struct cache;

/* What a live change reaches on a running mount: the handles the apply hooks of the live rows
 * steer. */
struct fs_live {
	struct cache *c; /* the block cache: hot_ttl, the lagging tier's limiter */
};

/* Apply the live option @name, just set in @o by fs_opts_set, to the running mount @live
 * (the row's apply hook). @o is left as it is: a caller that wants the old value back on
 * failure keeps a copy. @return 0, -ENOENT (not a live option), or the hook's -errno. */
int fs_opts_apply(const struct fs_opts *o, const char *name, const struct fs_live *live);

/* The value in force of live option @name, as getxattr on the mount's root shows it, into
 * @buf: a size in the largest of K, M, G, T that divides it ("10M"), else as fs_opts_value;
 * lagging_burst=0 shows the burst the limiter uses. fs_opts_set accepts it back.
 * @return 0, -ENOENT (not a live option), or -ERANGE (@buf too short). */
int fs_opts_live_value(const struct fs_opts *o, const char *name, char *buf, size_t len);

/* The value of option @name as fs_opts_format writes it (without "name="), into @buf.
 * @return 0, -ENOENT (no such option), -ENODATA (a clear flag, an unset string), or -ERANGE
 * (@buf too short). */
int fs_opts_value(const struct fs_opts *o, const char *name, char *buf, size_t len);

struct cache_cfg;

/* The cache's configuration for a mount with options @o (@disk: its disk tier opened), all but
 * the chain (cachecfg.c): the one home of that mapping, for the mount and for tierfs-sim. */
void fs_cache_cfg(const struct fs_opts *o, bool disk, struct cache_cfg *ret);

/* The --help text, listing every option with its default. */
const char *fs_opts_help(void);

/* The man page tierfs(8) in roff, built from the same rows as the help, into @buf.
 * @return the length it needs (like snprintf). */
size_t fs_opts_man(char *buf, size_t len);

/* Write the effective settings, one "name=value" per line, into @buf (no secrets).
 * @return the length it needs (like snprintf). */
size_t fs_opts_format(const struct fs_opts *o, char *buf, size_t len);

void fs_opts_done(struct fs_opts *o);

/*
 * Raise the read_ahead_kb of the FUSE mount at @mountpoint (absolute) to @kib, so sequential
 * readers send requests that large. The device number comes from /proc/self/mountinfo: a
 * stat() of the mountpoint would need the session loop running. Needs root.
 * @return 0, -ENOENT (not mounted), or the errno of opening the sysfs file.
 */
int fs_tune_readahead(const char *mountpoint, unsigned kib);

/* tierfs set: change live option @name to @value on the mount at @mountpoint through its
 * control socket (ctlsock.c), as the caller's uid. @return 0, or -errno with one line in
 * @err. */
int fs_ctl_set(const char *mountpoint, const char *name, const char *value, char *err,
	       size_t errlen);

/* Run the mount described by @o until unmounted. @return the process exit status. */
int fs_main(struct fs_opts *o);

/* `tierfs status [-w] [-n SECS] [-C NAME] MOUNTPOINT` (@argv[0] "status"): one screen of the
 * mount's tiers, hit ratios, rates, limiter and errors, from MOUNTPOINT/.tierfs/stats (status.c).
 * @return the process exit status: 0, 1 (the stats cannot be read), 2 (usage). */
int fs_status_main(int argc, char **argv);

#endif
