/*
 * opts.c - the tierfs command line and its mount options.
 *
 * Every setting tierfs itself understands is one row of fs_opts_table[]: its name, its kind (size,
 * seconds, count, flag, bool, string, path), where it lives in struct fs_opts, its range, its
 * default and one line of help. Everything else is driven by that one table:
 *
 *     fs_opts_table[] ──► opts_init()       defaults into a struct fs_opts
 *          │      ──► set_one()         parse + check one name=value (-o, fs_opts_set)
 *          │      ──► fs_opts_help()    one help line per row, grouped
 *          │      ──► fs_opts_man()     the same rows as roff: the tierfs(8) man page
 *          │      ──► fs_opts_format()  one name=value line per row (fs_opts_value: one value)
 *          └────────► fs_opts_live()    the live rows, those with an apply hook: what setxattr
 *                                       may change on a running mount (control.c), and
 *                                       fs_opts_apply() runs the row's hook to change it
 *
 * Around it sit three short lists of names that are not settings:
 *
 *     secret_names[]  aws_secret_access_key, ...  refused, with the reason (and never echoed)
 *     fuse_names[]    allow_other, fsname=, ...   copied untouched into fs_opts.fuse_opts
 *     noop_names[]    rw, _netdev, noatime, ...   what mount(8) hands every helper from
 *                                                 /etc/fstab; accepted and ignored, as are
 *                                                 x-* and comment=*
 *
 * The command line is read in one pass, left to right. Options may come before, between or
 * after the two positionals, -o may repeat, and within one -o a backslash escapes a comma (as
 * in libfuse). Each option is checked on its own as it is read, and a later one overwrites an
 * earlier one: the last of two duplicates wins. Checks that tie options together (hot_size
 * against block_size, by asking cache_tier_check: the rule is the ring's; disk_size, by asking
 * disk_geometry) run once at the
 * end, so their order on the line does not matter. They do not run in fs_opts_set(): the
 * options they involve are fixed for the life of a mount (only the live rows change).
 *
 * Output format (fs_opts_format): every row of the table in table order, numbers as plain
 * decimal integers (bytes, seconds, counts, ids), modes in octal with a leading 0 (0644), the
 * bool as on/off, a flag as its bare name when set and not at all when clear, a string as
 * stored and not at all when unset. Each line is
 * something fs_opts_set() accepts and gives back the same value, and the lines joined with
 * commas are a valid -o (once any comma inside a value is escaped). Scripts read numbers from
 * it, so sizes stay in bytes there. A live value read back through getxattr
 * (fs_opts_live_value) is for the person who set it: a size in the largest of K, M, G, T
 * that divides it exactly ("10M" after setfattr -v 10M, or -v 10485760), else in bytes, and
 * the value in force where the stored 0 means a default (lagging_burst); fs_opts_set takes
 * that form back too.
 *
 * Sizes: K, M, G, T are powers of 1024 in any case, and "4M", "4MB" and "4MiB" are the same.
 * No sign, fraction, space or base prefix; a number too large for 64 bits is -ERANGE.
 *
 * Error messages are one line, written into the caller's buffer (library code does not print).
 * A value is echoed back so the user sees what was wrong, except for secrets, and any control
 * character in a message is replaced by '?', so a message is always exactly one line.
 *
 * Files: the table, parsing and checking are here; printing the table (--help, the man page,
 * fs_opts_format) is optsprint.c's; opts_i.h has what both share.
 *
 * Locking: none. The table is const; the help text is built once, under pthread_once.
 * fs_opts_set() on a struct that other threads read (a live change through setxattr) needs
 * the caller's lock. Workload: a few dozen options once per mount, and rare live changes.
 */
#include "fs.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "cache.h"
#include "disk.h"
#include "opts_i.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define TIB (UINT64_C(1) << 40)

/* Times are kept in seconds but used in nanoseconds: a TTL up to 2^32 - 1 s (136 years)
 * still fits in a uint64_t of nanoseconds, added to a CLOCK_MONOTONIC reading. */
#define SECONDS_MAX UINT32_MAX

/* The lagging rate and burst are capped far above any link (1 TiB/s) so that 2 x rate, the
 * default burst, and the token bucket's arithmetic stay well away from overflow. */
#define RATE_MAX TIB

/*
 * Floors of the limiter's settings (0, "no limit", is always accepted). They are in the table,
 * so a live change through setxattr meets the same bounds as -o. Below them a value is no
 * longer a throttle but a stall: lagging_rate=1 left a reader (root's included) waiting
 * 65,536 s for each 64 KiB block, and that wait cannot be cut short by raising the rate
 * after the charge was taken.
 *   RATE_MIN 64K: the smallest block_size per second. At the floor a 64K block waits 1 s,
 *     a 4M block (the default) 64 s, a 64M block 17 min: slow, but a replay still advances
 *     and a reader stays killable. The burst has the same floor: a bucket smaller than the
 *     smallest block only turns every fetch into debt.
 *   OPS_MIN 4: a lagging read asks for its block and, by default, 2 blocks of readahead; 4
 *     fetches per second lets those 3 go at once, so the limiter never makes one reader's
 *     own readahead delay the block it waits for by seconds.
 * HOT_TTL_MAX 3650 days: hot_ttl routes objects younger than it to the hot tier and is the
 * hot blocks' lifetime. Ten years is beyond any log's retention, so "everything is hot" can
 * still be said with a large number (the bench does, with 100000000), while 4294967295 (136
 * years: a -1 that wrapped, or a typo), accepted before, is refused.
 */
#define RATE_MIN    (64 * KIB)
#define OPS_MIN	    4
#define HOT_TTL_MAX (3650 * 86400)

#define SIZE_HINT "use a number with an optional K, M, G or T suffix"
#define SECRET_MSG                                                                                 \
	"do not pass credentials as mount options: they are visible in /proc/PID/cmdline; use "    \
	"the environment or credentials=FILE"

#define OFF(field) offsetof(struct fs_opts, field)

/* The apply hooks of the live rows. Each reads the settings it needs from @o, where
 * fs_opts_set has just put the new value, and hands them to the part of the mount they steer. */
static int apply_hot_ttl(const struct fs_live *live, const struct fs_opts *o)
{
	return cache_set_hot_ttl(live->c, o->hot_ttl);
}

static int apply_limits(const struct fs_live *live, const struct fs_opts *o)
{
	return cache_set_limits(live->c, o->lagging_rate, o->lagging_burst, o->lagging_ops);
}

/* lagging_burst=0 asks for the default burst: the one the limiter uses (ratelimit.c's rule). */
static uint64_t burst_in_force(const struct fs_opts *o)
{
	return rl_burst(o->lagging_rate, o->lagging_burst);
}

/* clang-format off */
const struct opt fs_opts_table[] = {
	/* the hot tier, and what both tiers share */
	{.name = "block_size", .kind = OPT_SIZE, .group = GROUP_CACHE, .off = OFF(block_size),
	 .min = 64 * KIB, .max = 64 * MIB, .def = 4 * MIB, .check = CHECK_POW2,
	 .help = "cache block size, power of two 64K..64M"},
	{.name = "hot_size", .kind = OPT_SIZE, .group = GROUP_CACHE, .off = OFF(hot_size),
	 .min = 8 * 64 * KIB, .max = UINT64_MAX, .def = GIB,
	 .help = "hot tier memory, >= 8 x block_size"},
	{.name = "hot_ttl", .kind = OPT_SECONDS, .group = GROUP_CACHE, .off = OFF(hot_ttl),
	 .min = 1, .max = HOT_TTL_MAX, .def = 60,
	 .help = "objects younger than this are hot, <= 10 years", .apply = apply_hot_ttl},
	{.name = "readahead", .kind = OPT_COUNT, .group = GROUP_CACHE, .off = OFF(readahead),
	 .min = 0, .max = 64, .def = 2,
	 .help = "first readahead window in blocks (it grows)"},
	{.name = "metadata_ttl", .kind = OPT_SECONDS, .group = GROUP_CACHE, .off = OFF(metadata_ttl),
	 .min = 0, .max = SECONDS_MAX, .def = 60,
	 .help = "how long attributes and listings are cached"},
	{.name = "negative_ttl", .kind = OPT_SECONDS, .group = GROUP_CACHE, .off = OFF(negative_ttl),
	 .min = 0, .max = SECONDS_MAX, .def = 1,
	 .help = "how long a name the store lacks stays missing"},
	{.name = "immutable", .kind = OPT_FLAG, .group = GROUP_CACHE, .off = OFF(immutable),
	 .help = "objects never change: never revalidate"},
	{.name = "prefault", .kind = OPT_BOOL, .group = GROUP_CACHE, .off = OFF(prefault),
	 .def = 0,
	 .help = "take the cache memory at mount, not on use"},
	/* the disk tier: on when cache_dir is set. disk_size has a default so that cache_dir
	 * alone is enough; the files grow as blocks are written, so it is a bound, not a
	 * reservation. */
	{.name = "cache_dir", .kind = OPT_PATH, .group = GROUP_CACHE, .off = OFF(cache_dir),
	 .meta = "DIR", .help = "disk tier directory, yours alone (unset: none)"},
	{.name = "disk_size", .kind = OPT_SIZE, .group = GROUP_CACHE, .off = OFF(disk_size),
	 .min = 0, .max = UINT64_MAX, .def = 10 * GIB,
	 .help = "disk tier size, >= 9 x block_size"},
	{.name = "disk_lagging", .kind = OPT_BOOL, .group = GROUP_CACHE, .off = OFF(disk_lagging),
	 .def = 0,
	 .help = "lagging blocks go to the disk tier too"},

	/* the lagging tier: reads of objects older than hot_ttl */
	{.name = "lagging", .kind = OPT_BOOL, .group = GROUP_LAGGING, .off = OFF(lagging),
	 .def = 1,
	 .help = "a separate, rate-limited tier for old objects"},
	{.name = "lagging_size", .kind = OPT_SIZE, .group = GROUP_LAGGING, .off = OFF(lagging_size),
	 .min = 0, .max = UINT64_MAX, .def = 128 * MIB,
	 .help = "lagging tier memory, >= 8 x block_size"},
	{.name = "lagging_ttl", .kind = OPT_SECONDS, .group = GROUP_LAGGING, .off = OFF(lagging_ttl),
	 .min = 1, .max = SECONDS_MAX, .def = 5,
	 .help = "how long a lagging block stays cached"},
	{.name = "lagging_rate", .kind = OPT_SIZE, .group = GROUP_LAGGING, .off = OFF(lagging_rate),
	 .min = RATE_MIN, .max = RATE_MAX, .zero_ok = true, .def = 50 * MIB,
	 .help = "bytes/s for lagging misses (0 or >= 64K)", .apply = apply_limits},
	{.name = "lagging_burst", .kind = OPT_SIZE, .group = GROUP_LAGGING, .off = OFF(lagging_burst),
	 .min = RATE_MIN, .max = RATE_MAX, .zero_ok = true, .def = 0,
	 .help = "burst of lagging misses, >= 64K", .def_help = "0 = 2 x rate",
	 .apply = apply_limits, .in_force = burst_in_force},
	{.name = "lagging_ops", .kind = OPT_COUNT, .group = GROUP_LAGGING, .off = OFF(lagging_ops),
	 .min = OPS_MIN, .max = 1000000, .zero_ok = true, .def = 0,
	 .help = "fetches/s for lagging misses (0 or >= 4)", .apply = apply_limits},
	{.name = "lagging_page_cache", .kind = OPT_FLAG, .group = GROUP_LAGGING,
	 .off = OFF(lagging_page_cache),
	 .help = "keep the page cache for lagging files"},

	/* the shared tier: Redis servers a fleet of mounts shares */
	{.name = "shared", .kind = OPT_STRING, .group = GROUP_SHARED, .off = OFF(shared),
	 .check = CHECK_REDIS_URL, .meta = "URL",
	 .help = "redis://HOST:PORT[\\,HOST:PORT...]: shared tier"},
	{.name = "shared_timeout", .kind = OPT_COUNT, .group = GROUP_SHARED,
	 .off = OFF(shared_timeout), .min = 1, .max = 10000, .def = 50, .meta = "MS",
	 /* bench/shared_latency.py on the loaded 2-core test VM: a 4 MiB block's GET took
	  * 3 ms (p50) alone and 9 ms beside a stream of SETs, with a long tail (p90 12 and
	  * 70-120 ms): 10 ms sent a loaded mount's reads to the store often, which costs more
	  * than waiting (an S3 GET of a block: tens of ms). A hung Redis costs a read at most
	  * this, about 3 times a second per server (then it is left alone for a second). */
	 .help = "ms for Redis, then the store",
	 .def_help = "50: loaded 4M GETs"},
	{.name = "shared_prefix", .kind = OPT_STRING, .group = GROUP_SHARED,
	 .off = OFF(shared_prefix), .def_str = "tierfs:", .check = CHECK_PREFIX,
	 .meta = "TEXT", .help = "prefix of the fleet's Redis keys"},
	{.name = "shared_password_file", .kind = OPT_PATH, .group = GROUP_SHARED,
	 .off = OFF(shared_password_file), .meta = "FILE",
	 .help = "password file; or $TIERFS_SHARED_PASSWORD"},
	/* a file, not a value: a key must not show in /proc/PID/cmdline (see fleet.c) */
	{.name = "shared_key", .kind = OPT_PATH, .group = GROUP_SHARED, .off = OFF(shared_key),
	 .meta = "FILE", .help = "fleet's secret, 32+ bytes, mode 0600: MACs values"},
	{.name = "shared_fill_lagging", .kind = OPT_BOOL, .group = GROUP_SHARED,
	 .off = OFF(shared_fill_lagging), .def = 0,
	 .help = "lagging misses fill the shared tier"},
	{.name = "fleet_lagging_rate", .kind = OPT_SIZE, .group = GROUP_SHARED,
	 .off = OFF(fleet_lagging_rate), .min = RATE_MIN, .max = RATE_MAX, .zero_ok = true,
	 .def = 0, .help = "fleet's lagging bytes/s (0 or >= 64K)"},
	{.name = "fleet_lagging_ops", .kind = OPT_COUNT, .group = GROUP_SHARED,
	 .off = OFF(fleet_lagging_ops), .min = OPS_MIN, .max = 1000000, .zero_ok = true,
	 .def = 0, .help = "fleet's lagging fetches/s (0 or >= 4)"},

	/* writing (write.c): a mount is read-only without one of the three allow_ flags */
	{.name = "allow_write", .kind = OPT_FLAG, .group = GROUP_WRITE, .off = OFF(allow_write),
	 .help = "create new files and directories"},
	{.name = "allow_overwrite", .kind = OPT_FLAG, .group = GROUP_WRITE,
	 .off = OFF(allow_overwrite),
	 .help = "O_TRUNC replaces an object, at close"},
	{.name = "allow_delete", .kind = OPT_FLAG, .group = GROUP_WRITE, .off = OFF(allow_delete),
	 .help = "unlink files, rmdir empty directories"},
	{.name = "part_size", .kind = OPT_SIZE, .group = GROUP_WRITE, .off = OFF(part_size),
	 .min = 5 * MIB, .max = 5 * GIB, .def = 8 * MIB,
	 .help = "upload part, 5M..5G (whole blocks)"},
	{.name = "write_parts", .kind = OPT_COUNT, .group = GROUP_WRITE, .off = OFF(write_parts),
	 .min = 2, .max = 64, .def = 4,
	 .help = "parts of one file in flight, 2..64"},
	{.name = "write_buffer", .kind = OPT_SIZE, .group = GROUP_WRITE, .off = OFF(write_buffer),
	 .min = 5 * MIB, .max = UINT64_MAX, .def = 64 * MIB,
	 .help = "write buffers, all files together"},

	/* the object store */
	{.name = "endpoint", .kind = OPT_STRING, .group = GROUP_STORE, .off = OFF(endpoint),
	 .check = CHECK_HTTP_URL, .meta = "URL", .help = "S3 endpoint, http:// or https://"},
	{.name = "region", .kind = OPT_STRING, .group = GROUP_STORE, .off = OFF(region),
	 .check = CHECK_REGION, .meta = "NAME", .help = "S3 region"},
	{.name = "path_style", .kind = OPT_FLAG, .group = GROUP_STORE, .off = OFF(path_style),
	 .help = "bucket in the URL path, not in the host name"},
	{.name = "profile", .kind = OPT_STRING, .group = GROUP_STORE, .off = OFF(profile),
	 .meta = "NAME", .help = "profile in the AWS config and credentials files"},
	{.name = "credentials", .kind = OPT_PATH, .group = GROUP_STORE, .off = OFF(credentials),
	 .meta = "FILE", .help = "AWS credentials file to take keys from"},
	{.name = "manifest", .kind = OPT_PATH, .group = GROUP_STORE, .off = OFF(manifest),
	 .meta = "FILE", .help = "list of objects to serve instead of listing"},
	{.name = "ca_file", .kind = OPT_PATH, .group = GROUP_STORE, .off = OFF(ca_file),
	 .meta = "FILE", .help = "CA certificates (PEM) for https"},
	{.name = "insecure", .kind = OPT_FLAG, .group = GROUP_STORE, .off = OFF(insecure),
	 .help = "do not verify TLS certificates"},
	{.name = "max_conns", .kind = OPT_COUNT, .group = GROUP_STORE, .off = OFF(max_conns),
	 .min = 2, .max = 256, .def = 16,
	 .help = "connections to the store, 2..256"},
	{.name = "timeout", .kind = OPT_SECONDS, .group = GROUP_STORE, .off = OFF(timeout),
	 .min = 1, .max = 3600, .def = 30,
	 .help = "seconds for one request, 1..3600"},
	{.name = "retries", .kind = OPT_COUNT, .group = GROUP_STORE, .off = OFF(retries),
	 .min = 0, .max = 20, .def = 3,
	 .help = "retries of a failed request, 0..20"},

	/* the mount */
	{.name = "control_dir", .kind = OPT_STRING, .group = GROUP_MOUNT, .off = OFF(control_dir),
	 .def_str = ".tierfs", .check = CHECK_SEGMENT, .meta = "NAME",
	 .help = "control directory at the mount root"},
	/* ownership and modes, as mountpoint-s3's --uid/--gid/--file-mode/--dir-mode; the
	 * kernel enforces them (default_permissions is always on). uid and gid default to the
	 * user who mounts (opts_init). (uid_t)-1 is not an id: chown(2) reads it as "keep". */
	{.name = "uid", .kind = OPT_COUNT, .group = GROUP_MOUNT, .off = OFF(uid),
	 .min = 0, .max = UINT32_MAX - 1, .meta = "N",
	 .help = "owner of files and directories", .def_help = "the mounting user"},
	{.name = "gid", .kind = OPT_COUNT, .group = GROUP_MOUNT, .off = OFF(gid),
	 .min = 0, .max = UINT32_MAX - 1, .meta = "N",
	 .help = "group of files and directories", .def_help = "the mounting group"},
	{.name = "file_mode", .kind = OPT_MODE, .group = GROUP_MOUNT, .off = OFF(file_mode),
	 .min = 0, .max = 0777, .def = 0644,
	 .help = "file permissions, file:// ANDs the store's"},
	{.name = "dir_mode", .kind = OPT_MODE, .group = GROUP_MOUNT, .off = OFF(dir_mode),
	 .min = 0, .max = 0777, .def = 0755,
	 .help = "directory permissions"},
	/* the metrics endpoint (endpoint.c): bound before mounting, off unless asked for */
	{.name = "metrics", .kind = OPT_STRING, .group = GROUP_MOUNT, .off = OFF(metrics),
	 .check = CHECK_ENDPOINT, .meta = "[HOST:]PORT",
	 .help = "serve /metrics over HTTP, HOST 127.0.0.1", .def_help = "off"},
	/* the read trace (fs/trace.c, trace/): off unless trace= names a file */
	{.name = "trace", .kind = OPT_PATH, .group = GROUP_MOUNT, .off = OFF(trace),
	 .meta = "FILE", .help = "record every read in FILE, for tierfs-sim"},
	{.name = "trace_size", .kind = OPT_SIZE, .group = GROUP_MOUNT, .off = OFF(trace_size),
	 .min = MIB, .max = UINT64_MAX, .def = 256 * MIB,
	 .help = "trace file size, then FILE.1, FILE.2..."},
	{.name = "trace_files", .kind = OPT_COUNT, .group = GROUP_MOUNT, .off = OFF(trace_files),
	 .min = 0, .max = 1000, .def = 8,
	 .help = "full trace files kept, FILE.1 newest"},
	{.name = "trace_salt", .kind = OPT_PATH, .group = GROUP_MOUNT, .off = OFF(trace_salt),
	 .meta = "FILE", .help = "its 16 bytes salt ids, one per fleet",
	 .def_help = "random"},
};
/* clang-format on */

#define N_OPTS (sizeof(fs_opts_table) / sizeof(fs_opts_table[0]))
const size_t fs_opts_count = N_OPTS;

const char *const fs_opts_group_title[N_GROUPS] = {
    [GROUP_CACHE] = "cache:",
    [GROUP_LAGGING] = "lagging tier (reads of objects older than hot_ttl):",
    [GROUP_SHARED] = "shared tier (Redis) and fleet budget:",
    [GROUP_WRITE] = "writing (without allow_write, allow_overwrite or allow_delete: read-only):",
    [GROUP_STORE] = "store:",
    [GROUP_MOUNT] = "FUSE and mount:",
};

/* Names that would put a secret on the command line. Refused whether or not they have a
 * value, and the value is never echoed. */
static const char *const secret_names[] = {
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
};

/* Options for the kernel and libfuse, copied untouched (escapes and all) into fuse_opts.
 * max_read is not here: tierfs lets the kernel send reads of up to 1 MiB whatever the block
 * size (ops.c's op_init), and libfuse 3.14 refuses a max_read the init() callback does not
 * also set, so it is refused with an explanation. */
static const struct {
	const char *name;
	bool value; /* true: name=VALUE, required; false: bare name only */
} fuse_names[] = {
    {"allow_other", false},  {"allow_root", false}, {"default_permissions", false},
    {"auto_unmount", false}, {"fsname", true},	    {"subtype", true},
    {"ro", false},
};

/* What mount(8) and /etc/fstab pass to every helper, meaningless for a read-only FUSE mount:
 * accepted and ignored, as bare names. "user" may carry the user's name (user=NAME). */
/* clang-format off */
static const char *const noop_names[] = {
	"rw", "defaults", "auto", "noauto", "user", "users", "nouser", "owner", "group",
	"_netdev", "nofail", "noatime", "atime", "relatime", "norelatime", "strictatime",
	"nodiratime", "diratime", "lazytime", "nolazytime", "nodev", "dev", "nosuid", "suid",
	"noexec", "exec", "sync", "async", "dirsync",
};
/* clang-format on */

/* A growing heap string for fuse_opts. */
struct strbuf {
	char *s;     /* NUL-terminated, or NULL while empty */
	size_t len;  /* strlen(s) */
	size_t size; /* bytes allocated at s */
};

static int strbuf_add(struct strbuf *b, const char *p, size_t n)
{
	size_t want = b->len + n + 2; /* a ',' and the NUL */

	if (want > b->size) {
		size_t size = b->size ? b->size * 2 : 64;
		char *s;

		while (size < want)
			size *= 2;
		s = realloc(b->s, size);
		if (!s)
			return -ENOMEM;
		b->s = s;
		b->size = size;
	}
	if (b->len)
		b->s[b->len++] = ',';
	memcpy(b->s + b->len, p, n);
	b->len += n;
	b->s[b->len] = '\0';
	return 0;
}

/* One line into @err (if any) and @r returned: the backend's bk_vfail, the one helper of URLs
 * and options (control characters become '?'), under the short name this file uses. */
__attribute__((format(printf, 4, 5))) static int fail(char *err, size_t errlen, int r,
						      const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	r = bk_vfail(err, errlen, r, fmt, ap);
	va_end(ap);
	return r;
}

/* 4194304 -> "4M": the largest of K, M, G, T that divides @v exactly, else plain bytes. */
const char *fs_human(uint64_t v, char *buf, size_t len)
{
	static const char suffix[] = "TGMK";
	int shift = 40;

	for (const char *s = suffix; *s; s++, shift -= 10) {
		uint64_t unit = UINT64_C(1) << shift;

		if (v && v % unit == 0) {
			snprintf(buf, len, "%" PRIu64 "%c", v / unit, *s);
			return buf;
		}
	}
	snprintf(buf, len, "%" PRIu64, v);
	return buf;
}


static const char *errstr(int e, char *buf, size_t len)
{
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
	return strerror_r(e, buf, len);
#else
	if (strerror_r(e, buf, len))
		snprintf(buf, len, "error %d", e);
	return buf;
#endif
}

/* Leading decimal digits of @s into *ret. @return the number of digits (0: none), with
 * *overflow set when they do not fit in 64 bits. No sign, no space, no base prefix. */
static size_t parse_digits(const char *s, uint64_t *ret, bool *overflow)
{
	uint64_t v = 0;
	size_t n = 0;

	*overflow = false;
	for (; s[n] >= '0' && s[n] <= '9'; n++) {
		unsigned d = (unsigned)(s[n] - '0');

		if (v > (UINT64_MAX - d) / 10)
			*overflow = true;
		else
			v = v * 10 + d;
	}
	*ret = v;
	return n;
}

int fs_parse_size(const char *s, uint64_t *ret)
{
	const char *p;
	uint64_t v;
	bool overflow;
	int shift = 0;
	size_t n;

	if (!s)
		return -EINVAL;
	n = parse_digits(s, &v, &overflow);
	if (!n)
		return -EINVAL;
	p = s + n;
	switch (*p) {
	case 'k':
	case 'K':
		shift = 10;
		break;
	case 'm':
	case 'M':
		shift = 20;
		break;
	case 'g':
	case 'G':
		shift = 30;
		break;
	case 't':
	case 'T':
		shift = 40;
		break;
	default:
		break;
	}
	if (shift)
		p++;
	/* "4M", "4MB", "4MiB" all mean 4 x 1024 x 1024; a lone "B" means bytes. */
	if (shift && (p[0] == 'i' || p[0] == 'I') && (p[1] == 'b' || p[1] == 'B'))
		p += 2;
	else if (p[0] == 'b' || p[0] == 'B')
		p++;
	if (*p)
		return -EINVAL;
	if (overflow || v > (UINT64_MAX >> shift))
		return -ERANGE;
	*ret = v << shift;
	return 0;
}

int fs_parse_seconds(const char *s, uint64_t *ret)
{
	const char *p;
	uint64_t v;
	bool overflow;
	size_t n;

	if (!s)
		return -EINVAL;
	n = parse_digits(s, &v, &overflow);
	if (!n)
		return -EINVAL;
	p = s + n;
	if (*p == 's' || *p == 'S')
		p++;
	if (*p)
		return -EINVAL;
	if (overflow)
		return -ERANGE;
	*ret = v;
	return 0;
}

static int parse_count(const char *s, uint64_t *ret)
{
	uint64_t v;
	bool overflow;
	size_t n = parse_digits(s, &v, &overflow);

	if (!n || s[n])
		return -EINVAL;
	if (overflow)
		return -ERANGE;
	*ret = v;
	return 0;
}

/* Octal permission bits, "0644" or "644": digits 0-7 only, no sign or prefix. A value above
 * @max (setuid, setgid and sticky bits included) is -ERANGE. @return 0 or -EINVAL / -ERANGE. */
static int parse_mode(const char *s, uint64_t max, uint64_t *ret)
{
	uint64_t v = 0;
	bool big = false;
	size_t n;

	for (n = 0; s[n] >= '0' && s[n] <= '7'; n++) {
		v = v * 8 + (uint64_t)(s[n] - '0');
		if (v > max) {
			big = true;
			v = max; /* keeps v small however long the string */
		}
	}
	if (!n || s[n])
		return -EINVAL;
	if (big)
		return -ERANGE;
	*ret = v;
	return 0;
}

static int parse_bool(const char *s, bool *ret)
{
	static const char *const yes[] = {"on", "true", "1"}, *const no[] = {"off", "false", "0"};

	for (size_t i = 0; i < 3; i++) {
		if (!strcasecmp(s, yes[i])) {
			*ret = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*ret = false;
			return 0;
		}
	}
	return -EINVAL;
}

static bool has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

static bool name_is(const char *name, size_t n, const char *what)
{
	return strlen(what) == n && !memcmp(name, what, n);
}

static bool is_secret(const char *name, size_t n)
{
	for (size_t i = 0; i < sizeof(secret_names) / sizeof(secret_names[0]); i++)
		if (name_is(name, n, secret_names[i]))
			return true;
	return false;
}

static const struct opt *opt_find(const char *name, size_t n)
{
	for (size_t i = 0; i < N_OPTS; i++)
		if (name_is(name, n, fs_opts_table[i].name))
			return &fs_opts_table[i];
	return NULL;
}

static uint64_t *u64_at(struct fs_opts *o, const struct opt *d)
{
	return (uint64_t *)(void *)((char *)o + d->off);
}

static bool *bool_at(struct fs_opts *o, const struct opt *d)
{
	return (bool *)(void *)((char *)o + d->off);
}

static char **str_at(struct fs_opts *o, const struct opt *d)
{
	return (char **)(void *)((char *)o + d->off);
}

/* Where "scheme://" ends and the authority (host, or bucket) begins; NULL without "://". */
static const char *after_scheme(const char *url)
{
	const char *p = strstr(url, "://");

	return p ? p + 3 : NULL;
}

/* The length of the authority at @a: up to '/', '?' or '#'. */
static size_t authority_len(const char *a)
{
	return strcspn(a, "/?#");
}

/* True when the authority carries a password: user:password@host. */
static bool has_password(const char *a, size_t n)
{
	const char *at = memchr(a, '@', n);

	return at && memchr(a, ':', (size_t)(at - a));
}

/* "HTTPS://x" -> "https://x": backends compare schemes byte for byte. */
static void lower_scheme(char *url)
{
	for (char *p = url; *p && *p != ':'; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
}

static bool starts_with_ci(const char *s, const char *prefix)
{
	return !strncasecmp(s, prefix, strlen(prefix));
}

/* @p as an absolute path, malloc'd: relative paths are taken from the current directory,
 * because a daemonizing tierfs changes to "/" before it opens them. @return 0 or -errno. */
static int absolute(const char *p, char **ret)
{
	char *cwd, *s;

	if (p[0] == '/') {
		s = strdup(p);
		if (!s)
			return -ENOMEM;
		*ret = s;
		return 0;
	}
	cwd = getcwd(NULL, 0);
	if (!cwd)
		return -errno;
	if (asprintf(&s, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", p) < 0) {
		free(cwd);
		return -ENOMEM;
	}
	free(cwd);
	*ret = s;
	return 0;
}

#define LETTERS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

/* The checks of string options that are a prefix and a set of characters. */
static const struct {
	const char *prefix; /* the value starts with it (case ignored) and goes on; NULL: none */
	const char *chars;  /* every character after the prefix is one of these */
	size_t max;	    /* the longest value; 0: any */
	const char *what;   /* the message, after "name=value: " */
} text_checks[] = {
    [CHECK_REGION] = {NULL, LETTERS "0123456789-_.", 0,
		      "not a region name (letters, digits, '-', '_' and '.')"},
    [CHECK_REDIS_URL] = {"redis://", LETTERS "0123456789-_.:,[]", 0,
			 "must be redis://HOST:PORT[,HOST:PORT...] (no password: use "
			 "shared_password_file or TIERFS_SHARED_PASSWORD)"},
    [CHECK_PREFIX] = {NULL, LETTERS "0123456789-_.:/{}", 64,
		      "at most 64 letters, digits and -_.:/{}"},
};

static int check_text(const struct opt *d, const char *value, char *err, size_t errlen)
{
	const char *pre = text_checks[d->check].prefix, *rest = value;

	if (pre && (!starts_with_ci(value, pre) || !value[strlen(pre)]))
		goto bad;
	rest += pre ? strlen(pre) : 0;
	if (rest[strspn(rest, text_checks[d->check].chars)])
		goto bad;
	if (text_checks[d->check].max && strlen(value) > text_checks[d->check].max)
		goto bad;
	return 0;
bad:
	return fail(err, errlen, -EINVAL, "%s=%s: %s", d->name, value, text_checks[d->check].what);
}

static int check_http_url(const struct opt *d, const char *value, char *err, size_t errlen)
{
	const char *a;

	if (!starts_with_ci(value, "http://") && !starts_with_ci(value, "https://"))
		return fail(err, errlen, -EINVAL, "%s=%s: must start with http:// or https://",
			    d->name, value);
	a = after_scheme(value);
	if (has_password(a, authority_len(a)))
		return fail(err, errlen, -EINVAL, "%s", SECRET_MSG);
	if (!authority_len(a))
		return fail(err, errlen, -EINVAL, "%s=%s: no host name", d->name, value);
	return 0;
}

/* The row's extra check of a string value. @return 0 or -EINVAL, with the message. */
static int check_string(const struct opt *d, const char *value, char *err, size_t errlen)
{
	switch (d->check) {
	case CHECK_HTTP_URL:
		return check_http_url(d, value, err, errlen);
	case CHECK_SEGMENT:
		if (strchr(value, '/') || !strcmp(value, ".") || !strcmp(value, ".."))
			return fail(err, errlen, -EINVAL,
				    "%s=%s: must be a single name (no '/', not . or ..)", d->name,
				    value);
		return 0;
	case CHECK_REGION:
	case CHECK_REDIS_URL:
	case CHECK_PREFIX:
		return check_text(d, value, err, errlen);
	case CHECK_ENDPOINT: {
		char host[64];
		unsigned port;

		if (fs_parse_endpoint(value, host, sizeof(host), &port) < 0)
			return fail(err, errlen, -EINVAL,
				    "%s=%s: use [HOST:]PORT, PORT 1-65535 ([ADDR] for IPv6)",
				    d->name, value);
		return 0;
	}
	default:
		return 0;
	}
}

static int set_string(struct fs_opts *o, const struct opt *d, const char *value, char *err,
		      size_t errlen)
{
	char **slot = str_at(o, d), *s = NULL, eb[128];
	int r = check_string(d, value, err, errlen);

	if (r < 0)
		return r;
	if (d->kind == OPT_PATH) {
		r = absolute(value, &s);
		if (r == -ENOMEM)
			return fail(err, errlen, r, "out of memory");
		if (r < 0)
			return fail(err, errlen, r, "%s=%s: cannot make the path absolute: %s",
				    d->name, value, errstr(-r, eb, sizeof(eb)));
	} else {
		s = strdup(value);
		if (!s)
			return fail(err, errlen, -ENOMEM, "out of memory");
		if (d->check == CHECK_HTTP_URL)
			lower_scheme(s);
	}
	free(*slot);
	*slot = s;
	return 0;
}

/* "must be between 1 and 3600 seconds", in the option's own unit. */
static void range_text(const struct opt *d, char *buf, size_t len)
{
	char lo[32], hi[32];

	if (d->kind == OPT_SIZE) {
		fs_human(d->min, lo, sizeof(lo));
		fs_human(d->max, hi, sizeof(hi));
	} else {
		snprintf(lo, sizeof(lo), "%" PRIu64, d->min);
		snprintf(hi, sizeof(hi), "%" PRIu64, d->max);
	}
	if (d->zero_ok)
		snprintf(buf, len, "must be 0 or between %s and %s%s", lo, hi,
			 d->kind == OPT_SECONDS ? " seconds" : "");
	else if (d->max == UINT64_MAX)
		snprintf(buf, len, "must be at least %s%s", lo,
			 d->kind == OPT_SECONDS ? " seconds" : "");
	else if (d->min == 0)
		snprintf(buf, len, "must be at most %s%s", hi,
			 d->kind == OPT_SECONDS ? " seconds" : "");
	else
		snprintf(buf, len, "must be between %s and %s%s", lo, hi,
			 d->kind == OPT_SECONDS ? " seconds" : "");
}

/* How each numeric kind is read, and what its refusal says after "name=value: ". */
static const struct {
	int (*parse)(const char *s, uint64_t *ret); /* 0, -EINVAL, -ERANGE */
	const char *what;
} number_kinds[] = {
    [OPT_SIZE] = {fs_parse_size, "not a size (" SIZE_HINT ")"},
    [OPT_SECONDS] = {fs_parse_seconds,
		     "not a number of seconds (use a whole number, optionally followed by s)"},
    [OPT_COUNT] = {parse_count, "not a whole number"},
};

/* A size, seconds or count: read, then held to the row's range. */
static int set_number(struct fs_opts *o, const struct opt *d, const char *value, char *err,
		      size_t errlen)
{
	char range[128], lo[32], hi[32];
	uint64_t v = 0;
	int r = number_kinds[d->kind].parse(value, &v);

	if (r == -EINVAL)
		return fail(err, errlen, r, "%s=%s: %s", d->name, value,
			    number_kinds[d->kind].what);
	range_text(d, range, sizeof(range));
	if (r == -ERANGE && d->max == UINT64_MAX)
		return fail(err, errlen, r, "%s=%s: too large", d->name, value);
	if (r == -ERANGE)
		return fail(err, errlen, r, "%s=%s: too large (%s)", d->name, value, range);
	if (d->check == CHECK_POW2 && ((v & (v - 1)) || v < d->min || v > d->max))
		return fail(err, errlen, -EINVAL, "%s=%s: not a power of two between %s and %s",
			    d->name, value, fs_human(d->min, lo, sizeof(lo)),
			    fs_human(d->max, hi, sizeof(hi)));
	if ((v < d->min && !(d->zero_ok && v == 0)) || v > d->max)
		return fail(err, errlen, -EINVAL, "%s=%s: %s", d->name, value, range);
	*u64_at(o, d) = v;
	return 0;
}

static int set_mode(struct fs_opts *o, const struct opt *d, const char *value, char *err,
		    size_t errlen)
{
	uint64_t v;
	int r = parse_mode(value, d->max, &v);

	if (r == -EINVAL)
		return fail(err, errlen, r, "%s=%s: not an octal mode (use digits 0-7, e.g. 0644)",
			    d->name, value);
	if (r == -ERANGE)
		return fail(err, errlen, -EINVAL,
			    "%s=%s: must be at most 0%" PRIo64 " (no setuid, setgid or sticky bits)",
			    d->name, value, d->max);
	*u64_at(o, d) = v;
	return 0;
}

static int set_bool(struct fs_opts *o, const struct opt *d, const char *value, char *err,
		    size_t errlen)
{
	bool b;

	if (parse_bool(value, &b) < 0)
		return fail(err, errlen, -EINVAL, "%s=%s: use on or off", d->name, value);
	*bool_at(o, d) = b;
	return 0;
}

/*
 * Parse @value for the option @d and store it in @o; on any error @o is unchanged.
 * @value is NULL for a bare name. @return 0, -EINVAL, -ERANGE (a number too large for 64
 * bits) or -ENOMEM, with the message in @err.
 */
static int set_one(struct fs_opts *o, const struct opt *d, const char *value, char *err,
		   size_t errlen)
{
	if (d->kind == OPT_FLAG) {
		if (value)
			return fail(err, errlen, -EINVAL, "%s takes no value", d->name);
		*bool_at(o, d) = true;
		return 0;
	}
	if (!value || !*value)
		return fail(err, errlen, -EINVAL, "%s needs a value%s", d->name,
			    d->kind == OPT_BOOL ? " (on or off)" : "");
	if (has_control(value))
		return fail(err, errlen, -EINVAL, "%s: the value contains a control character",
			    d->name);
	switch (d->kind) {
	case OPT_SIZE:
	case OPT_SECONDS:
	case OPT_COUNT:
		return set_number(o, d, value, err, errlen);
	case OPT_MODE:
		return set_mode(o, d, value, err, errlen);
	case OPT_BOOL:
		return set_bool(o, d, value, err, errlen);
	default:
		return set_string(o, d, value, err, errlen);
	}
}

bool fs_opts_live(const char *name)
{
	const struct opt *d = opt_find(name, strlen(name));

	return d && d->apply;
}

int fs_opts_apply(const struct fs_opts *o, const char *name, const struct fs_live *live)
{
	const struct opt *d = opt_find(name, strlen(name));

	if (!d || !d->apply)
		return -ENOENT;
	return d->apply(live, o);
}

int fs_opts_live_value(const struct fs_opts *o, const char *name, char *buf, size_t len)
{
	const struct opt *d = opt_find(name, strlen(name));
	char v[32];

	if (!d || !d->apply)
		return -ENOENT;
	if (d->kind != OPT_SIZE && !d->in_force)
		return fs_opts_value(o, name, buf, len);
	if (d->kind == OPT_SIZE)
		fs_human(d->in_force ? d->in_force(o) : u64_of(o, d), v, sizeof(v));
	else
		snprintf(v, sizeof(v), "%" PRIu64, d->in_force(o));
	return (size_t)snprintf(buf, len, "%s", v) < len ? 0 : -ERANGE;
}

int fs_opts_value(const struct fs_opts *o, const char *name, char *buf, size_t len)
{
	const struct opt *d = opt_find(name, strlen(name));
	struct out w = {buf, len, 0};

	if (!d)
		return -ENOENT;
	switch (d->kind) {
	case OPT_FLAG:
		if (!bool_of(o, d))
			return -ENODATA;
		out_printf(&w, "%s", d->name);
		break;
	case OPT_BOOL:
		out_printf(&w, "%s", bool_of(o, d) ? "on" : "off");
		break;
	case OPT_STRING:
	case OPT_PATH:
		if (!str_of(o, d))
			return -ENODATA;
		out_printf(&w, "%s", str_of(o, d));
		break;
	case OPT_MODE:
		out_printf(&w, "0%03" PRIo64, u64_of(o, d));
		break;
	default:
		out_printf(&w, "%" PRIu64, u64_of(o, d));
		break;
	}
	return w.need < len ? 0 : -ERANGE;
}

int fs_opts_set(struct fs_opts *o, const char *name, const char *value, char *err, size_t errlen)
{
	const struct opt *d;
	size_t n;

	if (!o || !name)
		return fail(err, errlen, -EINVAL, "no option name");
	n = strcspn(name, "=");
	if (is_secret(name, n))
		return fail(err, errlen, -EINVAL, "%s", SECRET_MSG);
	d = name[n] ? NULL : opt_find(name, n);
	if (!d)
		return fail(err, errlen, -ENOENT, "unknown option '%.*s'", (int)n, name);
	return set_one(o, d, value, err, errlen);
}

void fs_opts_done(struct fs_opts *o)
{
	if (!o)
		return;
	for (size_t i = 0; i < N_OPTS; i++)
		if (fs_opts_table[i].kind == OPT_STRING || fs_opts_table[i].kind == OPT_PATH)
			free(*str_at(o, &fs_opts_table[i]));
	free(o->url);
	free(o->mountpoint);
	free(o->fuse_opts);
	memset(o, 0, sizeof(*o));
}

/* Fill @o with the defaults. @return 0 or -ENOMEM (and @o is then empty). */
static int opts_init(struct fs_opts *o)
{
	memset(o, 0, sizeof(*o));
	for (size_t i = 0; i < N_OPTS; i++) {
		const struct opt *d = &fs_opts_table[i];

		switch (d->kind) {
		case OPT_FLAG:
		case OPT_BOOL:
			*bool_at(o, d) = d->def != 0;
			break;
		case OPT_STRING:
		case OPT_PATH:
			if (d->def_str) {
				*str_at(o, d) = strdup(d->def_str);
				if (!*str_at(o, d)) {
					fs_opts_done(o);
					return -ENOMEM;
				}
			}
			break;
		default:
			*u64_at(o, d) = d->def;
			break;
		}
	}
	/* not in the table: the default is whoever mounts, as in mountpoint-s3 and s3fs */
	o->uid = getuid();
	o->gid = getgid();
	return 0;
}

/* State of one command-line parse. */
struct parse {
	struct fs_opts o;   /* being filled; copied out only on success */
	struct strbuf fuse; /* pass-through options, raw */
	bool allow_other;   /* seen allow_other */
	bool allow_root;    /* seen allow_root */
	int npos;	    /* positionals seen */
	int r;		    /* the first error, or 0 */
	char *err;	    /* where the first error's message goes */
	size_t errlen;
};

/* An option for the kernel or libfuse (fuse_names[]), copied raw into p->fuse; max_read is
 * refused with the reason. @return 1 if @item is none of them, else 0 or -errno. */
static int fuse_item(struct parse *p, const char *item, size_t namelen, const char *value,
		     const char *raw, size_t n)
{
	for (size_t i = 0; i < sizeof(fuse_names) / sizeof(fuse_names[0]); i++) {
		const char *name = fuse_names[i].name;

		if (!name_is(item, namelen, name))
			continue;
		p->allow_other |= name_is(item, namelen, "allow_other");
		p->allow_root |= name_is(item, namelen, "allow_root");
		if (fuse_names[i].value && (!value || !*value))
			return fail(p->err, p->errlen, -EINVAL, "%s needs a value", name);
		if (!fuse_names[i].value && value)
			return fail(p->err, p->errlen, -EINVAL, "%s takes no value", name);
		if (value && has_control(value))
			return fail(p->err, p->errlen, -EINVAL,
				    "%s: the value contains a control character", name);
		if (strbuf_add(&p->fuse, raw, n) < 0)
			return fail(p->err, p->errlen, -ENOMEM, "out of memory");
		return 0;
	}
	if (name_is(item, namelen, "max_read"))
		return fail(p->err, p->errlen, -EINVAL,
			    "max_read: tierfs sets it itself (1 MiB); remove the option");
	return 1;
}

/* What mount(8) hands every helper: x-*, comment=*, noop_names[]; accepted and ignored.
 * @return 1 if @item is none of them, else 0 or -EINVAL. */
static int noop_item(struct parse *p, const char *item, size_t namelen, const char *value)
{
	if (!strncmp(item, "x-", 2) || !strncmp(item, "comment=", 8))
		return 0;
	for (size_t i = 0; i < sizeof(noop_names) / sizeof(noop_names[0]); i++) {
		if (!name_is(item, namelen, noop_names[i]))
			continue;
		if (value && strcmp(noop_names[i], "user"))
			return fail(p->err, p->errlen, -EINVAL, "%s takes no value", noop_names[i]);
		return 0;
	}
	return 1;
}

/* One item of a -o list, @raw[0..n) still escaped. @return 0 or -errno (message in p->err). */
static int parse_item(struct parse *p, const char *raw, size_t n)
{
	const char *value = NULL;
	const struct opt *d;
	size_t namelen, j = 0;
	char *item;
	int r;

	item = malloc(n + 1);
	if (!item)
		return fail(p->err, p->errlen, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		if (raw[i] == '\\' && i + 1 < n)
			i++;
		item[j++] = raw[i];
	}
	item[j] = '\0';
	namelen = strcspn(item, "=");
	if (item[namelen])
		value = item + namelen + 1;

	if (is_secret(item, namelen))
		r = fail(p->err, p->errlen, -EINVAL, "%s", SECRET_MSG);
	else if ((d = opt_find(item, namelen)))
		r = set_one(&p->o, d, value, p->err, p->errlen);
	else if ((r = fuse_item(p, item, namelen, value, raw, n)) == 1 &&
		 (r = noop_item(p, item, namelen, value)) == 1)
		r = fail(p->err, p->errlen, -EINVAL, "unknown option '%.*s'", (int)namelen, item);
	free(item);
	return r;
}

/* A -o argument: items separated by commas; a backslash escapes the next character. */
static int parse_list(struct parse *p, const char *s)
{
	int r, first = 0;

	while (*s) {
		size_t n = 0;

		while (s[n] && s[n] != ',')
			n += (s[n] == '\\' && s[n + 1]) ? 2 : 1;
		if (n) {
			r = parse_item(p, s, n);
			if (r < 0 && !first)
				first = r;
			if (r < 0 && p->err)
				p->err = NULL; /* keep the first message */
		}
		s += n;
		if (*s == ',')
			s++;
	}
	return first;
}

/* Record the first error only: later ones must not overwrite its message. */
static void note(struct parse *p, int r)
{
	if (r < 0 && !p->r) {
		p->r = r;
		p->err = NULL;
	}
}

static void positional(struct parse *p, const char *arg)
{
	char *s, **slot;

	if (p->npos >= 2) {
		note(p,
		     fail(p->err, p->errlen, -EINVAL, "unexpected argument '%s' (" USAGE ")", arg));
		return;
	}
	s = strdup(arg);
	if (!s) {
		note(p, fail(p->err, p->errlen, -ENOMEM, "out of memory"));
		return;
	}
	slot = p->npos++ == 0 ? &p->o.url : &p->o.mountpoint;
	free(*slot); /* NULL: each positional is stored once */
	*slot = s;
}

/* "-fds", "-oOPTS", "-fo OPTS": short flags, possibly clustered. @return argv items used. */
static int short_flags(struct parse *p, int argc, char **argv, int i)
{
	const char *a = argv[i];

	for (size_t k = 1; a[k]; k++) {
		switch (a[k]) {
		case 'f':
			p->o.foreground = true;
			break;
		case 'd':
			p->o.debug = p->o.foreground = true;
			break;
		case 's':
			p->o.single_thread = true;
			break;
		case 'h':
			p->o.show_help = true;
			break;
		case 'V':
			p->o.show_version = true;
			break;
		case 'n': /* mount(8): do not write /etc/mtab */
		case 'v': /* mount(8): verbose */
			break;
		case 'o':
			if (a[k + 1]) {
				note(p, parse_list(p, a + k + 1));
				return 1;
			}
			if (i + 1 >= argc) {
				note(p,
				     fail(p->err, p->errlen, -EINVAL, "option -o needs a value"));
				return 1;
			}
			note(p, parse_list(p, argv[i + 1]));
			return 2;
		default:
			note(p, fail(p->err, p->errlen, -EINVAL, "unknown option '-%c'", a[k]));
			return 1;
		}
	}
	return 1;
}

/* s3://BUCKET[/PREFIX], http(s)://HOST[/PATH], file:///PATH: each scheme's rules are
 * backend/'s (backend_url_check, which lowercases the scheme); control characters and the
 * wording of a password's refusal are the command line's. */
static int check_url(char *url, char *err, size_t errlen)
{
	int r;

	if (has_control(url))
		return fail(err, errlen, -EINVAL, "URL: contains a control character");
	r = backend_url_check(url, err, errlen);
	if (r == -EACCES)
		return fail(err, errlen, -EINVAL, "%s", SECRET_MSG);
	return r;
}

/* Checks between options: run once all are read, so their order does not matter. */
static int check_cross(const struct parse *p, char *err, size_t errlen)
{
	const struct fs_opts *o = &p->o;
	char a[32], b[32], c[32];

	/* the rule is the ring's (cache_tier_check); a tier too large for it fails at mount */
	if (cache_tier_check(o->hot_size, (uint32_t)o->block_size) == -EINVAL)
		return fail(err, errlen, -EINVAL,
			    "hot_size=%s: must be at least 8 x block_size=%s (%s)",
			    fs_human(o->hot_size, a, sizeof(a)), fs_human(o->block_size, b, sizeof(b)),
			    fs_human(8 * o->block_size, c, sizeof(c)));
	if (o->lagging && cache_tier_check(o->lagging_size, (uint32_t)o->block_size) == -EINVAL)
		return fail(err, errlen, -EINVAL,
			    "lagging_size=%s: must be at least 8 x block_size=%s (%s) when lagging "
			    "is on",
			    fs_human(o->lagging_size, a, sizeof(a)),
			    fs_human(o->block_size, b, sizeof(b)),
			    fs_human(8 * o->block_size, c, sizeof(c)));
	if (o->cache_dir && disk_geometry(o->disk_size, (uint32_t)o->block_size) < 0)
		return fail(err, errlen, -EINVAL,
			    "disk_size=%s: must be at least %s with block_size=%s",
			    fs_human(o->disk_size, a, sizeof(a)),
			    fs_human(disk_min_size((uint32_t)o->block_size), c, sizeof(c)),
			    fs_human(o->block_size, b, sizeof(b)));
	if (p->allow_other && p->allow_root)
		return fail(err, errlen, -EINVAL,
			    "allow_other and allow_root cannot be used together");
	if ((o->allow_write || o->allow_overwrite || o->allow_delete) &&
	    strncmp(o->url, "http", 4) == 0)
		return fail(err, errlen, -EROFS,
			    "%s: an http(s):// store is read-only: no allow_write, allow_overwrite "
			    "or allow_delete", o->allow_write ? "allow_write" : o->allow_overwrite ?
			    "allow_overwrite" : "allow_delete");
	if (o->write_buffer < o->part_size)
		return fail(err, errlen, -EINVAL, "write_buffer=%s: must hold one part, part_size=%s",
			    fs_human(o->write_buffer, a, sizeof(a)), fs_human(o->part_size, b, sizeof(b)));
	return 0;
}

/* Make the mountpoint absolute and check that it is a directory. @return 0 or -errno. */
static int check_mountpoint(struct fs_opts *o, char *err, size_t errlen)
{
	char eb[128], *real;
	struct stat st;
	int r;

	real = realpath(o->mountpoint, NULL);
	if (!real) {
		r = -errno;
		return fail(err, errlen, r, "mountpoint %s: %s%s", o->mountpoint,
			    errstr(-r, eb, sizeof(eb)),
			    r == -ENOTCONN ? " (a stale mount? try fusermount3 -u)" : "");
	}
	if (stat(real, &st) < 0) {
		r = -errno;
		free(real);
		return fail(err, errlen, r, "mountpoint %s: %s", o->mountpoint,
			    errstr(-r, eb, sizeof(eb)));
	}
	if (!S_ISDIR(st.st_mode)) {
		free(real);
		return fail(err, errlen, -ENOTDIR, "mountpoint %s: %s", o->mountpoint,
			    errstr(ENOTDIR, eb, sizeof(eb)));
	}
	free(o->mountpoint);
	o->mountpoint = real;
	return 0;
}

/* The command line, left to right: positionals, "--", long and short options. The first
 * error is kept in p->r, its message in the caller's buffer. */
static void parse_argv(struct parse *p, int argc, char **argv)
{
	bool only_positionals = false;

	for (int i = 1; i < argc;) {
		const char *a = argv[i];

		if (only_positionals || a[0] != '-' || !a[1]) {
			positional(p, a);
			i++;
			continue;
		}
		if (a[1] != '-') {
			i += short_flags(p, argc, argv, i);
			continue;
		}
		if (!strcmp(a, "--"))
			only_positionals = true;
		else if (!strcmp(a, "--help"))
			p->o.show_help = true;
		else if (!strcmp(a, "--version"))
			p->o.show_version = true;
		else
			note(p, fail(p->err, p->errlen, -EINVAL, "unknown option '%s'", a));
		i++;
	}
}

/* What is checked once the whole line is read. @return 0 or -errno, with the message. */
static int check_all(struct parse *p, char *err, size_t errlen)
{
	int r;

	if (p->npos < 2)
		return fail(err, errlen, -EINVAL, USAGE);
	r = check_url(p->o.url, err, errlen);
	if (r == 0)
		r = check_cross(p, err, errlen);
	if (r == 0)
		r = check_mountpoint(&p->o, err, errlen);
	return r;
}

int fs_opts_parse(int argc, char **argv, struct fs_opts *ret, char *err, size_t errlen)
{
	struct parse p = {.err = err, .errlen = errlen};
	int r;

	if (err && errlen)
		err[0] = '\0';
	r = opts_init(&p.o);
	if (r < 0)
		return fail(err, errlen, r, "out of memory");
	parse_argv(&p, argc, argv);
	/* -h and -V win over everything else on the line, even over mistakes. */
	if (p.o.show_help || p.o.show_version) {
		if (err && errlen)
			err[0] = '\0';
		r = 0;
	} else {
		r = p.r < 0 ? p.r : check_all(&p, err, errlen);
	}
	if (r < 0) {
		free(p.fuse.s);
		fs_opts_done(&p.o);
		return r;
	}
	p.o.fuse_opts = p.fuse.s;
	*ret = p.o;
	return 0;
}
