/*
 * test_opts.c - unit tests for fs/opts.c: the size and seconds parsers, every option's
 * default, every validation message, checks between options in either order, duplicates,
 * /etc/fstab no-ops, pass-through FUSE options, the help text, fs_opts_format() round-trips
 * through fs_opts_set(), positionals, -h / -V, the mountpoint, and uid, gid and the octal
 * file_mode / dir_mode.
 *
 * The mountpoint is a real directory made with mkdtemp() in the group setup; relative-path
 * tests chdir() into its parent and back.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "tier.h"
#include "fs.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define TIB (UINT64_C(1) << 40)

#define URL "s3://bucket/prefix"

/* Every option opts.c's table must have. The help and format tests check the table against
 * this list in both directions, so a row added there without a test here fails. */
static const char *const all_options[] = {
    "block_size",   "hot_size",
    "hot_ttl",	    "readahead",
    "metadata_ttl", "immutable",
    "negative_ttl", "prefault",
    "cache_dir",    "disk_size",
    "disk_lagging", "lagging",
    "lagging_size", "lagging_ttl",
    "lagging_rate", "lagging_burst",
    "lagging_ops",  "lagging_page_cache",
    "endpoint",	    "region",
    "path_style",   "profile",
    "credentials",  "manifest",
    "ca_file",	    "insecure",
    "max_conns",    "timeout",
    "retries",	    "control_dir",
    "uid",	    "gid",
    "file_mode",    "dir_mode",
    "shared",	    "shared_timeout",
    "shared_prefix", "shared_password_file", "shared_key",
    "shared_fill_lagging", "fleet_lagging_rate",
    "allow_write", "allow_overwrite", "allow_delete", "part_size", "write_parts", "write_buffer",
    "fleet_lagging_ops", "metrics", "trace",
    "trace_size",   "trace_files",
    "trace_salt",
};
#define N_ALL (sizeof(all_options) / sizeof(all_options[0]))

static char tmpdir[PATH_MAX];		/* the mountpoint: a real directory */
static char tmpreal[PATH_MAX];		/* realpath(tmpdir) */
static char tmpfile_path[PATH_MAX + 8]; /* a regular file, for "not a directory" */

static int group_setup(void **state)
{
	FILE *f;

	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "%s/tierfs-opts-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmpdir) || !realpath(tmpdir, tmpreal))
		return -1;
	snprintf(tmpfile_path, sizeof(tmpfile_path), "%s/file", tmpreal);
	f = fopen(tmpfile_path, "w");
	if (!f)
		return -1;
	fclose(f);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	unlink(tmpfile_path);
	rmdir(tmpreal);
	return 0;
}

/* fs_opts_parse() on a NULL-terminated list of arguments after argv[0]. */
static int parse_args(struct fs_opts *o, char *err, size_t errlen, ...)
{
	char *argv[64];
	int argc = 0;
	va_list ap;

	argv[argc++] = (char *)"tierfs";
	va_start(ap, errlen);
	for (char *a; (a = va_arg(ap, char *));)
		argv[argc++] = a;
	va_end(ap);
	argv[argc] = NULL;
	return fs_opts_parse(argc, argv, o, err, errlen);
}

/* tierfs URL TMPDIR -o @opts */
static int parse_o(struct fs_opts *o, char *err, const char *opts)
{
	return parse_args(o, err, 256, URL, tmpdir, "-o", opts, NULL);
}

/* The error a -o string gives; asserts it failed with @rc and left *o untouched. */
static void expect_error(const char *opts, int rc, const char *msg)
{
	struct fs_opts o;
	char err[256] = "";
	int r;

	memset(&o, 0xa5, sizeof(o));
	r = parse_o(&o, err, opts);
	if (r != rc || strcmp(err, msg))
		print_error("-o %s: got %d '%s', want %d '%s'\n", opts, r, err, rc, msg);
	assert_int_equal(r, rc);
	assert_string_equal(err, msg);
	assert_null(strchr(err, '\n'));
	/* out-parameter written only on success */
	for (size_t i = 0; i < sizeof(o); i++)
		assert_int_equal(((unsigned char *)&o)[i], 0xa5);
}

static void expect_ok(const char *opts, struct fs_opts *o)
{
	char err[256] = "";
	int r = parse_o(o, err, opts);

	if (r)
		print_error("-o %s: %s\n", opts, err);
	assert_int_equal(r, 0);
	assert_string_equal(err, "");
}

static void test_size(void **state)
{
	static const struct {
		const char *s;
		int rc;
		uint64_t v;
	} cases[] = {
	    {"0", 0, 0},
	    {"1", 0, 1},
	    {"4096", 0, 4096},
	    {"007", 0, 7},
	    {"512B", 0, 512},
	    {"512b", 0, 512},
	    {"1k", 0, KIB},
	    {"1K", 0, KIB},
	    {"1KB", 0, KIB},
	    {"1kb", 0, KIB},
	    {"1KiB", 0, KIB},
	    {"1kib", 0, KIB},
	    {"1KIB", 0, KIB},
	    {"4M", 0, 4 * MIB},
	    {"4m", 0, 4 * MIB},
	    {"4MB", 0, 4 * MIB},
	    {"4MiB", 0, 4 * MIB},
	    {"1G", 0, GIB},
	    {"3g", 0, 3 * GIB},
	    {"1GiB", 0, GIB},
	    {"2T", 0, 2 * TIB},
	    {"2tb", 0, 2 * TIB},
	    {"16777215T", 0, 16777215 * TIB},
	    {"18446744073709551615", 0, UINT64_MAX},
	    {"", -EINVAL, 0},
	    {" 4M", -EINVAL, 0},
	    {"4M ", -EINVAL, 0},
	    {"4 M", -EINVAL, 0},
	    {"-1", -EINVAL, 0},
	    {"+1", -EINVAL, 0},
	    {"1.5G", -EINVAL, 0},
	    {"0x10", -EINVAL, 0},
	    {"1e3", -EINVAL, 0},
	    {"4P", -EINVAL, 0},
	    {"4iB", -EINVAL, 0},
	    {"4Mi", -EINVAL, 0},
	    {"4MM", -EINVAL, 0},
	    {"4MiBs", -EINVAL, 0},
	    {"M", -EINVAL, 0},
	    {"B", -EINVAL, 0},
	    {"abc", -EINVAL, 0},
	    {"99999999999999999999x", -EINVAL, 0},
	    {"18446744073709551616", -ERANGE, 0},
	    {"99999999999999999999", -ERANGE, 0},
	    {"99999999999T", -ERANGE, 0},
	    {"16777216T", -ERANGE, 0},
	    {"17179869184G", -ERANGE, 0},
	    {"18014398509481984K", -ERANGE, 0},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t v = 12345;
		int r = fs_parse_size(cases[i].s, &v);

		if (r != cases[i].rc)
			print_error("fs_parse_size(\"%s\") = %d\n", cases[i].s, r);
		assert_int_equal(r, cases[i].rc);
		assert_true(v == (r ? 12345 : cases[i].v));
	}
	assert_int_equal(fs_parse_size(NULL, &(uint64_t){0}), -EINVAL);
}

static void test_seconds(void **state)
{
	static const struct {
		const char *s;
		int rc;
		uint64_t v;
	} cases[] = {
	    {"0", 0, 0},
	    {"60", 0, 60},
	    {"60s", 0, 60},
	    {"60S", 0, 60},
	    {"3600", 0, 3600},
	    {"18446744073709551615", 0, UINT64_MAX},
	    {"", -EINVAL, 0},
	    {"s", -EINVAL, 0},
	    {"1m", -EINVAL, 0},
	    {"1h", -EINVAL, 0},
	    {"-1", -EINVAL, 0},
	    {" 5", -EINVAL, 0},
	    {"5 s", -EINVAL, 0},
	    {"1.5", -EINVAL, 0},
	    {"5ss", -EINVAL, 0},
	    {"18446744073709551616", -ERANGE, 0},
	    {"18446744073709551616s", -ERANGE, 0},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t v = 12345;
		int r = fs_parse_seconds(cases[i].s, &v);

		if (r != cases[i].rc)
			print_error("fs_parse_seconds(\"%s\") = %d\n", cases[i].s, r);
		assert_int_equal(r, cases[i].rc);
		assert_true(v == (r ? 12345 : cases[i].v));
	}
	assert_int_equal(fs_parse_seconds(NULL, &(uint64_t){0}), -EINVAL);
}

static void test_defaults(void **state)
{
	struct fs_opts o;
	char err[256] = "";

	(void)state;
	assert_int_equal(parse_args(&o, err, sizeof(err), URL, tmpdir, NULL), 0);
	assert_string_equal(o.url, URL);
	assert_string_equal(o.mountpoint, tmpreal);
	assert_true(o.block_size == 4 * MIB);
	assert_true(o.hot_size == GIB);
	assert_true(o.hot_ttl == 60);
	assert_true(o.lagging);
	assert_true(o.lagging_size == 128 * MIB);
	assert_true(o.lagging_ttl == 5);
	assert_true(o.lagging_rate == 50 * MIB);
	assert_true(o.lagging_burst == 0);
	assert_true(o.lagging_ops == 0);
	assert_true(o.readahead == 2);
	assert_true(o.metadata_ttl == 60);
	assert_false(o.immutable);
	assert_false(o.lagging_page_cache);
	assert_null(o.endpoint);
	assert_null(o.region);
	assert_false(o.path_style);
	assert_null(o.profile);
	assert_null(o.credentials);
	assert_null(o.manifest);
	assert_null(o.ca_file);
	assert_false(o.insecure);
	assert_true(o.max_conns == 16);
	assert_true(o.timeout == 30);
	assert_true(o.retries == 3);
	assert_null(o.cache_dir);
	assert_string_equal(o.control_dir, ".tierfs");
	/* owned by whoever mounts, modes as mountpoint-s3's */
	assert_true(o.uid == getuid());
	assert_true(o.gid == getgid());
	assert_true(o.file_mode == 0644);
	assert_true(o.dir_mode == 0755);
	assert_false(o.foreground);
	assert_false(o.debug);
	assert_false(o.single_thread);
	assert_false(o.show_help);
	assert_false(o.show_version);
	assert_null(o.fuse_opts);
	fs_opts_done(&o);
	fs_opts_done(&o); /* done twice is harmless */
	fs_opts_done(NULL);
}

static void test_every_option(void **state)
{
	struct fs_opts o;
	char cwd[PATH_MAX];

	(void)state;
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	expect_ok("block_size=1M,hot_size=2G,hot_ttl=30s,lagging=off,lagging_size=0,"
		  "lagging_ttl=9,lagging_rate=0,lagging_burst=8M,lagging_ops=100,"
		  "lagging_page_cache,readahead=0,metadata_ttl=0,immutable,"
		  "endpoint=HTTPS://minio.local:9000,region=eu-west-1,path_style,profile=prod,"
		  "credentials=/etc/tierfs/creds,manifest=index.json,max_conns=2,timeout=3600,"
		  "retries=0,cache_dir=/var/cache/tierfs,ca_file=/etc/ssl/ca.pem,insecure,"
		  "control_dir=_ctl",
		  &o);
	assert_true(o.block_size == MIB);
	assert_true(o.hot_size == 2 * GIB);
	assert_true(o.hot_ttl == 30);
	assert_false(o.lagging);
	assert_true(o.lagging_size == 0);
	assert_true(o.lagging_ttl == 9);
	assert_true(o.lagging_rate == 0);
	assert_true(o.lagging_burst == 8 * MIB);
	assert_true(o.lagging_ops == 100);
	assert_true(o.lagging_page_cache);
	assert_true(o.readahead == 0);
	assert_true(o.metadata_ttl == 0);
	assert_true(o.immutable);
	assert_string_equal(o.endpoint, "https://minio.local:9000"); /* scheme lowercased */
	assert_string_equal(o.region, "eu-west-1");
	assert_true(o.path_style);
	assert_string_equal(o.profile, "prod");
	assert_string_equal(o.credentials, "/etc/tierfs/creds");
	/* relative paths are made absolute: tierfs may chdir("/") when it daemonizes */
	assert_true(!strncmp(o.manifest, cwd, strlen(cwd)));
	assert_string_equal(o.manifest + strlen(cwd), "/index.json");
	assert_true(o.max_conns == 2);
	assert_true(o.timeout == 3600);
	assert_true(o.retries == 0);
	assert_string_equal(o.cache_dir, "/var/cache/tierfs");
	assert_string_equal(o.ca_file, "/etc/ssl/ca.pem");
	assert_true(o.insecure);
	assert_string_equal(o.control_dir, "_ctl");
	fs_opts_done(&o);

	/* the bool's spellings */
	static const char *const on[] = {"lagging=on", "lagging=ON", "lagging=true", "lagging=1"};
	static const char *const off[] = {"lagging=off", "lagging=False", "lagging=0"};
	for (size_t i = 0; i < 4; i++) {
		expect_ok(on[i], &o);
		assert_true(o.lagging);
		fs_opts_done(&o);
	}
	for (size_t i = 0; i < 3; i++) {
		expect_ok(off[i], &o);
		assert_false(o.lagging);
		fs_opts_done(&o);
	}

	/* the edges of each range are accepted */
	expect_ok("block_size=64K,hot_size=512K,lagging_size=512K,max_conns=256,readahead=64,"
		  "retries=20,timeout=1,hot_ttl=1,lagging_ttl=1,lagging_ops=1000000,"
		  "lagging_rate=1T,lagging_burst=1T,hot_ttl=315360000",
		  &o);
	assert_true(o.block_size == 64 * KIB);
	assert_true(o.hot_size == 512 * KIB);
	assert_true(o.hot_ttl == 315360000);
	assert_true(o.lagging_rate == TIB);
	fs_opts_done(&o);
	/* the limiter's floors, and 0 (no limit) below them */
	expect_ok("lagging_rate=64K,lagging_burst=64K,lagging_ops=4", &o);
	assert_true(o.lagging_rate == 64 * KIB && o.lagging_burst == 64 * KIB);
	assert_true(o.lagging_ops == 4);
	fs_opts_done(&o);
	expect_ok("shared=redis://10.0.0.1:6379\\,[::1]:6380,shared_timeout=10000,"
		  "fleet_lagging_rate=64K,fleet_lagging_ops=4,shared_prefix=fleet-a:", &o);
	assert_string_equal(o.shared, "redis://10.0.0.1:6379,[::1]:6380");
	assert_true(o.shared_timeout == 10000 && o.fleet_lagging_rate == 64 * KIB);
	assert_true(o.fleet_lagging_ops == 4);
	assert_string_equal(o.shared_prefix, "fleet-a:");
	fs_opts_done(&o);
	expect_ok("lagging_rate=0,lagging_burst=0,lagging_ops=0", &o);
	assert_true(o.lagging_rate == 0 && o.lagging_burst == 0 && o.lagging_ops == 0);
	fs_opts_done(&o);
	expect_ok("block_size=64M,hot_size=512M,lagging_size=512M", &o);
	assert_true(o.block_size == 64 * MIB);
	fs_opts_done(&o);
	/* the metrics endpoint: a port, or a host (a name, an address, [v6]) and a port */
	static const char *const endpoints[] = {"9100", "1", "65535", "0.0.0.0:9100",
						"localhost:9100", "[::1]:9100", "[::]:80"};
	for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++) {
		char opt[64];

		snprintf(opt, sizeof(opt), "metrics=%s", endpoints[i]);
		expect_ok(opt, &o);
		assert_string_equal(o.metrics, endpoints[i]);
		fs_opts_done(&o);
	}
}

/* fs_parse_endpoint's host and port, and what it refuses. */
static void test_endpoint(void **state)
{
	static const struct {
		const char *in, *host;
		unsigned port;
	} good[] = {
	    {"9100", "127.0.0.1", 9100},
	    {"10.1.2.3:80", "10.1.2.3", 80},
	    {"metrics.example:65535", "metrics.example", 65535},
	    {"[::1]:9100", "::1", 9100},
	};
	static const char *const bad[] = {"", "0", "65536", "99999999999", "-1", "x", ":9100",
					  "h:", "h:9x", "::1:9100", "[::1]9100", "[::1]",
					  "[]:80", "h: 80"};
	char host[64];
	unsigned port;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(fs_parse_endpoint(good[i].in, host, sizeof(host), &port), 0);
		assert_string_equal(host, good[i].host);
		assert_int_equal(port, good[i].port);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (fs_parse_endpoint(bad[i], host, sizeof(host), &port) != -EINVAL)
			fail_msg("accepted metrics=%s", bad[i]);
	/* a host longer than the caller's buffer */
	assert_int_equal(fs_parse_endpoint("abcdefgh:1", host, 8, &port), -EINVAL);
}

#define SIZE_MSG "not a size (use a number with an optional K, M, G or T suffix)"
#define SECS_MSG "not a number of seconds (use a whole number, optionally followed by s)"
#define SECRET                                                                                     \
	"do not pass credentials as mount options: they are visible in /proc/PID/cmdline; use "    \
	"the environment or credentials=FILE"

/* uid, gid, file_mode, dir_mode: numbers and octal modes, and their edges. */
static void test_ids_and_modes(void **state)
{
	static const struct {
		const char *opts;
		uint64_t uid, gid, file_mode, dir_mode;
	} cases[] = {
	    {"uid=0,gid=0,file_mode=0,dir_mode=0", 0, 0, 0, 0},
	    {"uid=4294967294,gid=4294967294,file_mode=0777,dir_mode=777", 4294967294u, 4294967294u,
	     0777, 0777},
	    {"uid=1000,gid=100,file_mode=644,dir_mode=0750", 1000, 100, 0644, 0750},
	    {"file_mode=00000600,dir_mode=00", 0, 0, 0600, 0},
	    {"file_mode=4", 0, 0, 04, 0755},
	    /* the last of two wins */
	    {"file_mode=0600,file_mode=0444,uid=1,uid=2", 2, 0, 0444, 0755},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fs_opts o;

		expect_ok(cases[i].opts, &o);
		if (strstr(cases[i].opts, "uid="))
			assert_true(o.uid == cases[i].uid);
		else
			assert_true(o.uid == getuid());
		if (strstr(cases[i].opts, "gid="))
			assert_true(o.gid == cases[i].gid);
		else
			assert_true(o.gid == getgid());
		assert_true(o.file_mode == cases[i].file_mode);
		assert_true(o.dir_mode == cases[i].dir_mode);
		fs_opts_done(&o);
	}
	/* default_permissions is still accepted (and passed on), though always on */
	{
		struct fs_opts o;

		expect_ok("default_permissions", &o);
		assert_string_equal(o.fuse_opts, "default_permissions");
		fs_opts_done(&o);
	}
}

static void test_errors(void **state)
{
	static const struct {
		const char *opts;
		int rc;
		const char *msg;
	} cases[] = {
	    {"block_size=3M", -EINVAL, "block_size=3M: not a power of two between 64K and 64M"},
	    {"block_size=0", -EINVAL, "block_size=0: not a power of two between 64K and 64M"},
	    {"block_size=32K", -EINVAL, "block_size=32K: not a power of two between 64K and 64M"},
	    {"block_size=128M", -EINVAL, "block_size=128M: not a power of two between 64K and 64M"},
	    {"block_size=abc", -EINVAL, "block_size=abc: " SIZE_MSG},
	    {"block_size=99999999999T", -ERANGE,
	     "block_size=99999999999T: too large (must be between 64K and 64M)"},
	    {"hot_size=abc", -EINVAL, "hot_size=abc: " SIZE_MSG},
	    {"hot_size=-1G", -EINVAL, "hot_size=-1G: " SIZE_MSG},
	    {"hot_size=1.5G", -EINVAL, "hot_size=1.5G: " SIZE_MSG},
	    {"hot_size=0", -EINVAL, "hot_size=0: must be at least 512K"},
	    {"hot_size=99999999999T", -ERANGE, "hot_size=99999999999T: too large"},
	    {"hot_size=18446744073709551616", -ERANGE, "hot_size=18446744073709551616: too large"},
	    {"hot_size", -EINVAL, "hot_size needs a value"},
	    {"hot_size=", -EINVAL, "hot_size needs a value"},
	    {"hot_ttl=0", -EINVAL, "hot_ttl=0: must be between 1 and 315360000 seconds"},
	    {"hot_ttl=315360001", -EINVAL, "hot_ttl=315360001: must be between 1 and 315360000 seconds"},
	    {"hot_ttl=4294967295", -EINVAL,
	     "hot_ttl=4294967295: must be between 1 and 315360000 seconds"},
	    {"hot_ttl=1m", -EINVAL, "hot_ttl=1m: " SECS_MSG},
	    {"hot_ttl=99999999999999999999", -ERANGE,
	     "hot_ttl=99999999999999999999: too large (must be between 1 and 315360000 "
	     "seconds)"},
	    {"lagging=maybe", -EINVAL, "lagging=maybe: use on or off"},
	    {"lagging", -EINVAL, "lagging needs a value (on or off)"},
	    {"lagging_size=x", -EINVAL, "lagging_size=x: " SIZE_MSG},
	    {"lagging_ttl=0", -EINVAL, "lagging_ttl=0: must be between 1 and 4294967295 seconds"},
	    {"lagging_rate=2T", -EINVAL, "lagging_rate=2T: must be 0 or between 64K and 1T"},
	    {"lagging_rate=1", -EINVAL, "lagging_rate=1: must be 0 or between 64K and 1T"},
	    {"lagging_rate=65535", -EINVAL, "lagging_rate=65535: must be 0 or between 64K and 1T"},
	    {"lagging_rate=-5M", -EINVAL, "lagging_rate=-5M: " SIZE_MSG},
	    {"lagging_burst=2T", -EINVAL, "lagging_burst=2T: must be 0 or between 64K and 1T"},
	    {"lagging_burst=1K", -EINVAL, "lagging_burst=1K: must be 0 or between 64K and 1T"},
	    {"lagging_ops=1000001", -EINVAL,
	     "lagging_ops=1000001: must be 0 or between 4 and 1000000"},
	    {"lagging_ops=1", -EINVAL, "lagging_ops=1: must be 0 or between 4 and 1000000"},
	    {"lagging_ops=5/s", -EINVAL, "lagging_ops=5/s: not a whole number"},
	    {"lagging_page_cache=on", -EINVAL, "lagging_page_cache takes no value"},
	    {"readahead=65", -EINVAL, "readahead=65: must be at most 64"},
	    {"readahead=-1", -EINVAL, "readahead=-1: not a whole number"},
	    {"readahead=2M", -EINVAL, "readahead=2M: not a whole number"},
	    {"metadata_ttl=x", -EINVAL, "metadata_ttl=x: " SECS_MSG},
	    {"immutable=1", -EINVAL, "immutable takes no value"},
	    {"immutable=", -EINVAL, "immutable takes no value"},
	    {"endpoint=ftp://x", -EINVAL, "endpoint=ftp://x: must start with http:// or https://"},
	    {"endpoint=minio:9000", -EINVAL,
	     "endpoint=minio:9000: must start with http:// or https://"},
	    {"endpoint=http://", -EINVAL, "endpoint=http://: no host name"},
	    {"endpoint", -EINVAL, "endpoint needs a value"},
	    {"endpoint=https://AKIA:secret@minio/", -EINVAL, SECRET},
	    {"region=", -EINVAL, "region needs a value"},
	    {"region=us east", -EINVAL,
	     "region=us east: not a region name (letters, digits, '-', '_' and '.')"},
	    {"path_style=yes", -EINVAL, "path_style takes no value"},
	    {"profile", -EINVAL, "profile needs a value"},
	    {"credentials=", -EINVAL, "credentials needs a value"},
	    {"manifest", -EINVAL, "manifest needs a value"},
	    {"max_conns=1", -EINVAL, "max_conns=1: must be between 2 and 256"},
	    {"max_conns=257", -EINVAL, "max_conns=257: must be between 2 and 256"},
	    {"max_conns=0x10", -EINVAL, "max_conns=0x10: not a whole number"},
	    {"timeout=0", -EINVAL, "timeout=0: must be between 1 and 3600 seconds"},
	    {"timeout=3601", -EINVAL, "timeout=3601: must be between 1 and 3600 seconds"},
	    {"timeout=-1", -EINVAL, "timeout=-1: " SECS_MSG},
	    {"retries=21", -EINVAL, "retries=21: must be at most 20"},
	    {"cache_dir", -EINVAL, "cache_dir needs a value"},
	    {"ca_file=", -EINVAL, "ca_file needs a value"},
	    {"insecure=0", -EINVAL, "insecure takes no value"},
	    {"control_dir=a/b", -EINVAL,
	     "control_dir=a/b: must be a single name (no '/', not . or ..)"},
	    {"control_dir=.", -EINVAL,
	     "control_dir=.: must be a single name (no '/', not . or ..)"},
	    {"control_dir=..", -EINVAL,
	     "control_dir=..: must be a single name (no '/', not . or ..)"},
	    {"control_dir=", -EINVAL, "control_dir needs a value"},
	    {"uid=abc", -EINVAL, "uid=abc: not a whole number"},
	    {"uid=-1", -EINVAL, "uid=-1: not a whole number"},
	    {"uid=", -EINVAL, "uid needs a value"},
	    {"uid", -EINVAL, "uid needs a value"},
	    {"uid=4294967295", -EINVAL, "uid=4294967295: must be at most 4294967294"},
	    {"uid=99999999999999999999", -ERANGE,
	     "uid=99999999999999999999: too large (must be at most 4294967294)"},
	    {"gid=root", -EINVAL, "gid=root: not a whole number"},
	    {"gid=4294967295", -EINVAL, "gid=4294967295: must be at most 4294967294"},
	    {"file_mode=999", -EINVAL,
	     "file_mode=999: not an octal mode (use digits 0-7, e.g. 0644)"},
	    {"file_mode=0o644", -EINVAL,
	     "file_mode=0o644: not an octal mode (use digits 0-7, e.g. 0644)"},
	    {"file_mode=rw-r--r--", -EINVAL,
	     "file_mode=rw-r--r--: not an octal mode (use digits 0-7, e.g. 0644)"},
	    {"file_mode=-644", -EINVAL,
	     "file_mode=-644: not an octal mode (use digits 0-7, e.g. 0644)"},
	    {"file_mode= 644", -EINVAL,
	     "file_mode= 644: not an octal mode (use digits 0-7, e.g. 0644)"},
	    {"file_mode=", -EINVAL, "file_mode needs a value"},
	    {"file_mode=4755", -EINVAL,
	     "file_mode=4755: must be at most 0777 (no setuid, setgid or sticky bits)"},
	    {"file_mode=1000", -EINVAL,
	     "file_mode=1000: must be at most 0777 (no setuid, setgid or sticky bits)"},
	    {"file_mode=77777777777777777777777777", -EINVAL,
	     "file_mode=77777777777777777777777777: must be at most 0777 (no setuid, setgid or "
	     "sticky bits)"},
	    {"dir_mode=8", -EINVAL, "dir_mode=8: not an octal mode (use digits 0-7, e.g. 0644)"},
	    {"dir_mode=01777", -EINVAL,
	     "dir_mode=01777: must be at most 0777 (no setuid, setgid or sticky bits)"},
	    {"shared=http://h:1", -EINVAL,
	     "shared=http://h:1: must be redis://HOST:PORT[,HOST:PORT...] (no password: use "
	     "shared_password_file or TIERFS_SHARED_PASSWORD)"},
	    {"shared=redis://u:secret@h:1", -EINVAL,
	     "shared=redis://u:secret@h:1: must be redis://HOST:PORT[,HOST:PORT...] (no "
	     "password: use shared_password_file or TIERFS_SHARED_PASSWORD)"},
	    {"shared_timeout=0", -EINVAL, "shared_timeout=0: must be between 1 and 10000"},
	    {"shared_timeout=10001", -EINVAL, "shared_timeout=10001: must be between 1 and 10000"},
	    {"shared_prefix=a b", -EINVAL,
	     "shared_prefix=a b: at most 64 letters, digits and -_.:/{}"},
	    {"fleet_lagging_rate=1K", -EINVAL,
	     "fleet_lagging_rate=1K: must be 0 or between 64K and 1T"},
	    {"fleet_lagging_ops=3", -EINVAL, "fleet_lagging_ops=3: must be 0 or between 4 and 1000000"},
	    {"metrics=0", -EINVAL, "metrics=0: use [HOST:]PORT, PORT 1-65535 ([ADDR] for IPv6)"},
	    {"metrics=::1:9100", -EINVAL,
	     "metrics=::1:9100: use [HOST:]PORT, PORT 1-65535 ([ADDR] for IPv6)"},
	    {"metrics", -EINVAL, "metrics needs a value"},
	    {"foo", -EINVAL, "unknown option 'foo'"},
	    {"foo=bar", -EINVAL, "unknown option 'foo'"},
	    {"Block_size=4M", -EINVAL, "unknown option 'Block_size'"},
	    {"aws_access_key_id=AKIAIOSFODNN7EXAMPLE", -EINVAL, SECRET},
	    {"aws_secret_access_key=wJalrXUtnFEMI", -EINVAL, SECRET},
	    {"aws_session_token=tok", -EINVAL, SECRET},
	    {"aws_secret_access_key", -EINVAL, SECRET},
	    {"max_read=131072", -EINVAL,
	     "max_read: tierfs sets it itself (1 MiB); remove the option"},
	    {"allow_other=1", -EINVAL, "allow_other takes no value"},
	    {"ro=1", -EINVAL, "ro takes no value"},
	    {"fsname", -EINVAL, "fsname needs a value"},
	    {"subtype=", -EINVAL, "subtype needs a value"},
	    {"rw=1", -EINVAL, "rw takes no value"},
	    {"noatime=yes", -EINVAL, "noatime takes no value"},
	    {"allow_other,allow_root", -EINVAL,
	     "allow_other and allow_root cannot be used together"},
	    /* the first mistake is reported, not the last */
	    {"timeout=0,foo,retries=99", -EINVAL, "timeout=0: must be between 1 and 3600 seconds"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_error(cases[i].opts, cases[i].rc, cases[i].msg);
}

/* A secret's value never appears in the message. */
static void test_secret_not_echoed(void **state)
{
	struct fs_opts o;
	char err[256];

	(void)state;
	assert_int_equal(parse_o(&o, err, "aws_secret_access_key=TOPSECRET"), -EINVAL);
	assert_null(strstr(err, "TOPSECRET"));
	assert_int_equal(
	    parse_args(&o, err, sizeof(err), "https://me:TOPSECRET@host/x", tmpdir, NULL), -EINVAL);
	assert_string_equal(err, SECRET);
	assert_null(strstr(err, "TOPSECRET"));
	/* a user name alone is not a secret */
	assert_int_equal(parse_args(&o, err, sizeof(err), "https://me@host/x", tmpdir, NULL), 0);
	fs_opts_done(&o);
}

/* Checks between options do not depend on the order the options come in. */
static void test_cross_checks(void **state)
{
	static const char *const hot_bad[] = {
	    "hot_size=8M,block_size=4M",
	    "block_size=4M,hot_size=8M",
	};
	static const char *const lag_bad[] = {
	    "lagging_size=1M",
	    "lagging=on,lagging_size=1M",
	    "lagging_size=1M,lagging=on",
	    "lagging=off,lagging_size=1M,lagging=on",
	};
	static const char *const ok[] = {
	    "hot_size=8M,block_size=1M",
	    "block_size=1M,hot_size=8M",
	    "hot_size=8M,block_size=1M,lagging_size=8M",
	    "lagging_size=0,lagging=off",
	    "lagging=off,lagging_size=0",
	    "lagging=off,lagging_size=1K",
	    "lagging_size=8M,block_size=1M",
	};
	struct fs_opts o;
	char err[256];

	(void)state;
	for (size_t i = 0; i < 2; i++)
		expect_error(hot_bad[i], -EINVAL,
			     "hot_size=8M: must be at least 8 x block_size=4M (32M)");
	for (size_t i = 0; i < 4; i++)
		expect_error(lag_bad[i], -EINVAL,
			     "lagging_size=1M: must be at least 8 x block_size=4M (32M) when "
			     "lagging is on");
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		expect_ok(ok[i], &o);
		fs_opts_done(&o);
	}
	/* also across separate -o arguments, and before the positionals */
	assert_int_equal(parse_args(&o, err, sizeof(err), "-o", "hot_size=16M", URL, tmpdir, "-o",
				    "block_size=8M", NULL),
			 -EINVAL);
	assert_string_equal(err, "hot_size=16M: must be at least 8 x block_size=8M (64M)");
	assert_int_equal(parse_args(&o, err, sizeof(err), "-o", "block_size=8M", URL, tmpdir, "-o",
				    "hot_size=64M,lagging_size=64M", NULL),
			 0);
	assert_true(o.block_size == 8 * MIB && o.hot_size == 64 * MIB);
	fs_opts_done(&o);
	/* a block size the default lagging_size cannot hold eight of */
	expect_error("block_size=64M", -EINVAL,
		     "lagging_size=128M: must be at least 8 x block_size=64M (512M) when lagging "
		     "is on");
}

static void test_duplicates(void **state)
{
	struct fs_opts o;
	char err[256];

	(void)state;
	assert_int_equal(parse_args(&o, err, sizeof(err), URL, tmpdir, "-o", "hot_ttl=5", "-o",
				    "hot_ttl=7", NULL),
			 0);
	assert_true(o.hot_ttl == 7);
	fs_opts_done(&o);
	expect_ok("region=a,region=b,lagging=off,lagging=on,immutable,immutable", &o);
	assert_string_equal(o.region, "b");
	assert_true(o.lagging);
	assert_true(o.immutable);
	fs_opts_done(&o);
	expect_ok("control_dir=x,control_dir=y", &o);
	assert_string_equal(o.control_dir, "y");
	fs_opts_done(&o);
	/* a bad duplicate after a good one is still an error */
	expect_error("timeout=5,timeout=0", -EINVAL,
		     "timeout=0: must be between 1 and 3600 seconds");
}

/* What mount(8) hands to mount.tierfs from /etc/fstab. */
static void test_fstab(void **state)
{
	struct fs_opts o;
	char err[256] = "";
	char *argv[] = {"/sbin/mount.tierfs",
			"s3://logs",
			tmpdir,
			"-n",
			"-v",
			"-o",
			"rw,noatime,_netdev,nofail,x-systemd.automount,x-systemd.idle-timeout=60,"
			"comment=systemd.foo,defaults,auto,noauto,user,user=alice,users,nouser,"
			"owner,group,atime,relatime,norelatime,strictatime,nodiratime,diratime,"
			"lazytime,nolazytime,nodev,dev,nosuid,suid,noexec,exec,sync,async,dirsync,"
			"hot_ttl=10",
			NULL};

	(void)state;
	assert_int_equal(
	    fs_opts_parse(sizeof(argv) / sizeof(argv[0]) - 1, argv, &o, err, sizeof(err)), 0);
	assert_string_equal(err, "");
	assert_null(o.fuse_opts);
	assert_true(o.hot_ttl == 10);
	assert_false(o.foreground);
	fs_opts_done(&o);
	/* empty items (a trailing comma, ",,") are skipped */
	expect_ok(",rw,,noatime,", &o);
	fs_opts_done(&o);
}

static void test_fuse_passthrough(void **state)
{
	struct fs_opts o;
	char err[256];

	(void)state;
	assert_int_equal(parse_args(&o, err, sizeof(err), URL, tmpdir, "-o",
				    "allow_other,fsname=my\\,fs,hot_ttl=9,ro", "-o",
				    "default_permissions,auto_unmount,subtype=tierfs", NULL),
			 0);
	/* untouched: order kept, escapes kept (libfuse parses them again) */
	assert_string_equal(o.fuse_opts,
			    "allow_other,fsname=my\\,fs,ro,default_permissions,auto_unmount,"
			    "subtype=tierfs");
	assert_true(o.hot_ttl == 9);
	fs_opts_done(&o);
	expect_ok("allow_root", &o);
	assert_string_equal(o.fuse_opts, "allow_root");
	fs_opts_done(&o);
	/* an escaped comma inside a tierfs value */
	expect_ok("profile=a\\,b", &o);
	assert_string_equal(o.profile, "a,b");
	assert_null(o.fuse_opts);
	fs_opts_done(&o);
}

static void test_command_line(void **state)
{
	struct fs_opts o;
	char err[256];

	(void)state;
	/* options before, between and after the positionals; -oX and -o X */
	assert_int_equal(parse_args(&o, err, sizeof(err), "-ohot_ttl=3", URL, "-f", "-o",
				    "retries=1,timeout=2", tmpdir, "-d", "-s", "-oreadahead=4",
				    NULL),
			 0);
	assert_true(o.hot_ttl == 3 && o.retries == 1 && o.timeout == 2 && o.readahead == 4);
	assert_true(o.foreground && o.debug && o.single_thread);
	assert_string_equal(o.url, URL);
	assert_string_equal(o.mountpoint, tmpreal);
	fs_opts_done(&o);

	/* -d implies -f, as in libfuse */
	assert_int_equal(parse_args(&o, err, sizeof(err), URL, tmpdir, "-d", NULL), 0);
	assert_true(o.debug && o.foreground && !o.single_thread);
	fs_opts_done(&o);

	/* clustered short flags, -fo OPTS */
	assert_int_equal(
	    parse_args(&o, err, sizeof(err), URL, tmpdir, "-fs", "-no", "hot_ttl=8", NULL), 0);
	assert_true(o.foreground && o.single_thread && !o.debug && o.hot_ttl == 8);
	fs_opts_done(&o);

	/* "--" ends the options */
	assert_int_equal(parse_args(&o, err, sizeof(err), "--", URL, tmpdir, NULL), 0);
	fs_opts_done(&o);

	assert_int_equal(parse_args(&o, err, sizeof(err), URL, tmpdir, "-x", NULL), -EINVAL);
	assert_string_equal(err, "unknown option '-x'");
	assert_int_equal(parse_args(&o, err, sizeof(err), URL, tmpdir, "-fx", NULL), -EINVAL);
	assert_string_equal(err, "unknown option '-x'");
	assert_int_equal(parse_args(&o, err, sizeof(err), URL, tmpdir, "--foreground", NULL),
			 -EINVAL);
	assert_string_equal(err, "unknown option '--foreground'");
	assert_int_equal(parse_args(&o, err, sizeof(err), URL, tmpdir, "-o", NULL), -EINVAL);
	assert_string_equal(err, "option -o needs a value");
}

static void test_positionals(void **state)
{
	struct fs_opts o;
	char err[256];

	(void)state;
	assert_int_equal(parse_args(&o, err, sizeof(err), NULL), -EINVAL);
	assert_string_equal(err, "usage: tierfs URL MOUNTPOINT [-o options]");
	assert_int_equal(parse_args(&o, err, sizeof(err), URL, NULL), -EINVAL);
	assert_string_equal(err, "usage: tierfs URL MOUNTPOINT [-o options]");
	assert_int_equal(parse_args(&o, err, sizeof(err), "-f", "-o", "hot_ttl=5", URL, NULL),
			 -EINVAL);
	assert_string_equal(err, "usage: tierfs URL MOUNTPOINT [-o options]");
	assert_int_equal(parse_args(&o, err, sizeof(err), URL, tmpdir, "extra", NULL), -EINVAL);
	assert_string_equal(
	    err, "unexpected argument 'extra' (usage: tierfs URL MOUNTPOINT [-o options])");
	assert_int_equal(fs_opts_parse(0, NULL, &o, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "usage: tierfs URL MOUNTPOINT [-o options]");
}

static void test_help_version(void **state)
{
	static const char *const help[][3] = {
	    {"-h", NULL, NULL},
	    {"--help", NULL, NULL},
	    {"-V", NULL, NULL},
	    {"--version", NULL, NULL},
	    /* -h wins over missing positionals and over mistakes */
	    {"-o", "bogus", "-h"},
	    {"-h", "-o", "timeout=0"},
	    {URL, tmpdir, "--help"},
	    {"/no/such/dir", "-h", NULL},
	};
	struct fs_opts o;
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(help) / sizeof(help[0]); i++) {
		strcpy(err, "x");
		assert_int_equal(
		    parse_args(&o, err, sizeof(err), help[i][0], help[i][1], help[i][2], NULL), 0);
		assert_string_equal(err, "");
		assert_true(o.show_help || o.show_version);
		assert_true(o.show_help == (strstr(help[i][0], "V") == NULL &&
					    strstr(help[i][0], "version") == NULL));
		assert_true(o.block_size == 4 * MIB); /* defaults are filled */
		fs_opts_done(&o);
	}
	/* -o h is an option list, not -h */
	assert_int_equal(parse_args(&o, err, sizeof(err), "-o", "-h", NULL), -EINVAL);
	assert_string_equal(err, "unknown option '-h'");
}

static void test_help_text(void **state)
{
	const char *h = fs_opts_help();
	const char *line;

	(void)state;
	assert_non_null(h);
	assert_true(!strncmp(h, "usage: tierfs URL MOUNTPOINT", 28));
	/* every option has its own line: "    -o name=" or "    -o name " */
	for (size_t i = 0; i < N_ALL; i++) {
		char want[64];
		const char *p;
		bool found = false;

		snprintf(want, sizeof(want), "    -o %s", all_options[i]);
		for (p = h; (p = strstr(p, want)); p++)
			if (p[strlen(want)] == '=' || p[strlen(want)] == ' ')
				found = true;
		if (!found)
			print_error("help lacks %s\n", all_options[i]);
		assert_true(found);
	}
	/* and every "-o name" line in the help is a tierfs option or a FUSE one */
	for (line = h; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		size_t n;
		bool known = false;
		static const char *const fuse[] = {
		    "allow_other", "allow_root", "default_permissions", "auto_unmount", "fsname",
		    "subtype",	   "ro"};

		if (strncmp(line, "    -o ", 7))
			continue;
		n = strcspn(line + 7, "= \n");
		for (size_t i = 0; i < N_ALL; i++)
			known |=
			    strlen(all_options[i]) == n && !strncmp(line + 7, all_options[i], n);
		for (size_t i = 0; i < sizeof(fuse) / sizeof(fuse[0]); i++)
			known |= strlen(fuse[i]) == n && !strncmp(line + 7, fuse[i], n);
		if (!known)
			print_error("help has an unknown option: %.*s\n", (int)n, line + 7);
		assert_true(known);
	}
	assert_non_null(strstr(
	    h, "    -o block_size=SIZE      cache block size, power of two 64K..64M (4M)\n"));
	assert_non_null(strstr(h, "    -o hot_size=SIZE        "));
	assert_non_null(strstr(h, "(0 = 2 x rate)"));
	assert_non_null(strstr(h, "(.tierfs)"));
	assert_non_null(strstr(h, "    -o uid=N                "));
	assert_non_null(strstr(h, "(the mounting user)\n"));
	assert_non_null(strstr(h, "    -o file_mode=MODE       "));
	assert_non_null(strstr(h, "(0644)\n"));
	assert_non_null(strstr(h, "(0755)\n"));
	static const char *const must[] = {"    -f ",
					   "    -d ",
					   "    -s ",
					   "    -h, --help",
					   "    -V, --version",
					   "allow_other",
					   "default_permissions",
					   "auto_unmount",
					   "fsname=",
					   "subtype=",
					   "the last one wins",
					   "max_read",
					   "_netdev",
					   "cache:",
					   "lagging tier",
					   "store:",
					   "FUSE"};
	for (size_t i = 0; i < sizeof(must) / sizeof(must[0]); i++) {
		if (!strstr(h, must[i]))
			print_error("help lacks '%s'\n", must[i]);
		assert_non_null(strstr(h, must[i]));
	}
	/* fits a terminal, ends with a newline, stable across calls */
	for (line = h; *line;) {
		size_t n = strcspn(line, "\n");

		assert_true(n <= 80);
		line += n;
		assert_int_equal(*line, '\n');
		line++;
	}
	assert_ptr_equal(fs_opts_help(), h);
}

static void assert_same(const struct fs_opts *a, const struct fs_opts *b)
{
#define SAME_STR(f)                                                                                \
	do {                                                                                       \
		if (!a->f || !b->f)                                                                \
			assert_ptr_equal(a->f, b->f);                                              \
		else                                                                               \
			assert_string_equal(a->f, b->f);                                           \
	} while (0)
	assert_true(a->block_size == b->block_size);
	assert_true(a->hot_size == b->hot_size);
	assert_true(a->hot_ttl == b->hot_ttl);
	assert_true(a->lagging == b->lagging);
	assert_true(a->lagging_size == b->lagging_size);
	assert_true(a->lagging_ttl == b->lagging_ttl);
	assert_true(a->lagging_rate == b->lagging_rate);
	assert_true(a->lagging_burst == b->lagging_burst);
	assert_true(a->lagging_ops == b->lagging_ops);
	assert_true(a->readahead == b->readahead);
	assert_true(a->metadata_ttl == b->metadata_ttl);
	assert_true(a->negative_ttl == b->negative_ttl);
	assert_true(a->immutable == b->immutable);
	assert_true(a->lagging_page_cache == b->lagging_page_cache);
	SAME_STR(endpoint);
	SAME_STR(region);
	assert_true(a->path_style == b->path_style);
	SAME_STR(profile);
	SAME_STR(credentials);
	SAME_STR(manifest);
	SAME_STR(ca_file);
	assert_true(a->insecure == b->insecure);
	assert_true(a->max_conns == b->max_conns);
	assert_true(a->timeout == b->timeout);
	assert_true(a->retries == b->retries);
	SAME_STR(cache_dir);
	SAME_STR(control_dir);
	assert_true(a->uid == b->uid);
	assert_true(a->gid == b->gid);
	assert_true(a->file_mode == b->file_mode);
	assert_true(a->dir_mode == b->dir_mode);
	SAME_STR(metrics);
#undef SAME_STR
}

/* Apply every line of @text to @o with fs_opts_set(); count the lines. */
static size_t apply_lines(struct fs_opts *o, const char *text)
{
	char *copy = strdup(text), *save = NULL, err[256];
	size_t n = 0;

	assert_non_null(copy);
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		int r;

		if (eq)
			*eq = '\0';
		r = fs_opts_set(o, line, eq ? eq + 1 : NULL, err, sizeof(err));
		if (r)
			print_error("fs_opts_set(%s): %s\n", line, err);
		assert_int_equal(r, 0);
		n++;
	}
	free(copy);
	return n;
}

static void round_trip(const char *opts, size_t want_lines)
{
	struct fs_opts a, b;
	size_t need, again;
	char *text;

	expect_ok(opts, &a);
	need = fs_opts_format(&a, NULL, 0);
	text = malloc(need + 1);
	assert_non_null(text);
	again = fs_opts_format(&a, text, need + 1);
	assert_int_equal(again, need);
	assert_int_equal(strlen(text), need);
	assert_int_equal(text[need - 1], '\n');
	assert_null(strstr(text, "aws_"));

	expect_ok("", &b); /* the defaults */
	assert_int_equal(apply_lines(&b, text), want_lines);
	assert_same(&a, &b);
	free(text);
	fs_opts_done(&a);
	fs_opts_done(&b);
}

static void test_format(void **state)
{
	struct fs_opts o;
	char small[16], buf[4096], cwd[PATH_MAX], want[1024];
	size_t need;

	(void)state;
	/* defaults: no flags, no unset strings; modes in octal */
	expect_ok("", &o);
	need = fs_opts_format(&o, buf, sizeof(buf));
	assert_int_equal(strlen(buf), need);
	snprintf(want, sizeof(want),
		 "block_size=4194304\n"
		 "hot_size=1073741824\n"
		 "hot_ttl=60\n"
		 "readahead=2\n"
		 "metadata_ttl=60\n"
		 "negative_ttl=1\n"
		 "prefault=off\n"
		 "disk_size=10737418240\n"
		 "disk_lagging=off\n"
		 "lagging=on\n"
		 "lagging_size=134217728\n"
		 "lagging_ttl=5\n"
		 "lagging_rate=52428800\n"
		 "lagging_burst=0\n"
		 "lagging_ops=0\n"
		 "shared_timeout=50\n"
		 "shared_prefix=tierfs:\n"
		 "shared_fill_lagging=off\n"
		 "fleet_lagging_rate=0\n"
		 "fleet_lagging_ops=0\n"
		 "part_size=8388608\n"
		 "write_parts=4\n"
		 "write_buffer=67108864\n"
		 "max_conns=16\n"
		 "timeout=30\n"
		 "retries=3\n"
		 "control_dir=.tierfs\n"
		 "uid=%u\n"
		 "gid=%u\n"
		 "file_mode=0644\n"
		 "dir_mode=0755\n"
		 "trace_size=268435456\n"
		 "trace_files=8\n",
		 (unsigned)getuid(), (unsigned)getgid());
	assert_string_equal(buf, want);
	/* truncation like snprintf: same length back, NUL-terminated */
	assert_int_equal(fs_opts_format(&o, small, sizeof(small)), need);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_true(!strncmp(small, buf, sizeof(small) - 1));
	assert_int_equal(fs_opts_format(&o, NULL, 0), need);
	fs_opts_done(&o);

	round_trip("", 33);
	/* a mode round-trips as octal, whatever its digits */
	round_trip("file_mode=0,dir_mode=7", 33);
	round_trip("file_mode=0640,dir_mode=0750,uid=0,gid=4294967294", 33);
	/* every option set to something other than its default */
	round_trip("block_size=64K,hot_size=512K,hot_ttl=1,lagging=off,lagging_size=0,"
		   "lagging_ttl=100000,lagging_rate=0,lagging_burst=1T,lagging_ops=7,"
		   "lagging_page_cache,readahead=64,metadata_ttl=0,negative_ttl=5,immutable,prefault=on,"
		   "endpoint=http://127.0.0.1:9000/,region=us-east-1,path_style,profile=p r,"
		   "credentials=c,manifest=/m.json,ca_file=/ca.pem,insecure,max_conns=256,"
		   "timeout=3600,retries=20,cache_dir=/var/cache/x,disk_size=1M,disk_lagging=on,"
		   "control_dir=..x,uid=1234,"
		   "gid=5678,file_mode=0400,dir_mode=0500,shared=redis://h:1\\,g:2,"
		   "shared_timeout=50,shared_prefix=f:,shared_password_file=/pw,shared_key=/k,"
		   "shared_fill_lagging=on,fleet_lagging_rate=30M,fleet_lagging_ops=100,"
		   "allow_write,allow_overwrite,allow_delete,part_size=16M,write_parts=8,"
		   "write_buffer=1G,metrics=[::1]:9100,trace=/t,trace_size=1G,trace_files=0,"
		   "trace_salt=/s",
		   N_ALL);

	/* with every option set, format names each exactly once, in the order of the list */
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	expect_ok("immutable,lagging_page_cache,path_style,insecure,endpoint=https://e,"
		  "region=r,profile=p,credentials=/c,manifest=/m,ca_file=/a,cache_dir=/d,"
		  "shared=redis://h:1,shared_password_file=/p,shared_key=/k,allow_write,"
		  "allow_overwrite,allow_delete,metrics=9100,trace=/t,trace_salt=/s",
		  &o);
	fs_opts_format(&o, buf, sizeof(buf));
	{
		const char *p = buf;
		size_t n = 0;

		for (; *p; p = strchr(p, '\n') + 1, n++) {
			size_t len = strcspn(p, "=\n");
			bool found = false;

			for (size_t i = 0; i < N_ALL; i++)
				found |= strlen(all_options[i]) == len &&
					 !strncmp(p, all_options[i], len);
			assert_true(found);
		}
		assert_int_equal(n, N_ALL);
	}
	fs_opts_done(&o);
}

/* The live rows (those with an apply hook), and one value as the config file shows it. */
static void test_live(void **state)
{
	static const char *const live[] = {"lagging_rate", "lagging_burst", "lagging_ops",
					   "hot_ttl"};
	static const char *const fixed[] = {"block_size", "hot_size", "lagging_size", "lagging",
					    "region", "nonesuch", "lagging_rat"};
	struct fs_opts o;
	char v[64];

	(void)state;
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++)
		assert_true(fs_opts_live(live[i]));
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		assert_false(fs_opts_live(fixed[i]));
	expect_ok("hot_ttl=90,lagging=off,file_mode=0600,immutable", &o);
	assert_int_equal(fs_opts_value(&o, "hot_ttl", v, sizeof(v)), 0);
	assert_string_equal(v, "90");
	assert_int_equal(fs_opts_value(&o, "lagging", v, sizeof(v)), 0);
	assert_string_equal(v, "off");
	assert_int_equal(fs_opts_value(&o, "file_mode", v, sizeof(v)), 0);
	assert_string_equal(v, "0600");
	assert_int_equal(fs_opts_value(&o, "immutable", v, sizeof(v)), 0);
	assert_string_equal(v, "immutable");
	assert_int_equal(fs_opts_value(&o, "path_style", v, sizeof(v)), -ENODATA);
	assert_int_equal(fs_opts_value(&o, "region", v, sizeof(v)), -ENODATA);
	assert_int_equal(fs_opts_value(&o, "nonesuch", v, sizeof(v)), -ENOENT);
	assert_int_equal(fs_opts_value(&o, "hot_ttl", v, 2), -ERANGE);
	fs_opts_done(&o);
}

/* getxattr's form of a live value: sizes in the largest exact unit, the burst in force, and
 * each one taken back by fs_opts_set as the same value. */
static void test_live_value(void **state)
{
	static const struct {
		const char *opts, *name, *want;
	} cases[] = {
	    {"lagging_rate=10485760", "lagging_rate", "10M"},
	    {"lagging_rate=1g", "lagging_rate", "1G"},
	    {"lagging_rate=100000", "lagging_rate", "100000"},
	    {"lagging_rate=1536K", "lagging_rate", "1536K"},
	    {"lagging_rate=1T", "lagging_rate", "1T"},
	    {"lagging_rate=0", "lagging_rate", "0"},
	    {"lagging_rate=10M,lagging_burst=0", "lagging_burst", "20M"},
	    {"lagging_rate=10M,lagging_burst=4M", "lagging_burst", "4M"},
	    {"lagging_ops=50", "lagging_ops", "50"},
	    {"hot_ttl=3600s", "hot_ttl", "3600"},
	};
	struct fs_opts o, back;
	char v[64], err[256], a[64], b[64];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		expect_ok(cases[i].opts, &o);
		assert_int_equal(fs_opts_live_value(&o, cases[i].name, v, sizeof(v)), 0);
		assert_string_equal(v, cases[i].want);
		expect_ok(cases[i].opts, &back);
		assert_int_equal(fs_opts_set(&back, cases[i].name, v, err, sizeof(err)), 0);
		/* the same number, but for a burst of 0: it comes back as the one in force */
		assert_int_equal(fs_opts_value(&o, cases[i].name, a, sizeof(a)), 0);
		assert_int_equal(fs_opts_value(&back, cases[i].name, b, sizeof(b)), 0);
		if (strcmp(cases[i].opts, "lagging_rate=10M,lagging_burst=0"))
			assert_string_equal(a, b);
		else
			assert_string_equal(b, "20971520");
		fs_opts_done(&back);
		fs_opts_done(&o);
	}
	expect_ok("", &o);
	assert_int_equal(fs_opts_live_value(&o, "block_size", v, sizeof(v)), -ENOENT);
	assert_int_equal(fs_opts_live_value(&o, "nonesuch", v, sizeof(v)), -ENOENT);
	assert_int_equal(fs_opts_live_value(&o, "lagging_rate", v, 3), -ERANGE);
	fs_opts_done(&o);
}

static uint64_t no_clock(void *arg)
{
	(void)arg;
	return 0;
}

static int64_t no_wall(void *arg)
{
	(void)arg;
	return 0;
}

/* A store that fails every read: the cache's chain needs one. */
static int no_get(void *self, struct tier_io *io)
{
	return -EIO;
}

static const struct tier_ops no_store = {.name = "store", .get = no_get};

static int no_defer(void *arg, uint64_t delay_ns, void (*cb)(void *), void *cb_arg)
{
	return -ENOSYS;
}

static void no_ref(void *ctx)
{
	(void)ctx;
}

/* Every live row's hook reaches the running mount's cache; a fixed option has none. */
static void test_live_apply(void **state)
{
	struct tier store = {.ops = &no_store};
	struct cache_cfg cc = {.block_size = 64 * KIB, .hot_size = 8 * 64 * KIB, .hot_ttl = 60,
			       .lagging = true, .lagging_size = 8 * 64 * KIB, .lagging_ttl = 5,
			       .lagging_rate = 10 * MIB, .chain = &store, .nchain = 1};
	struct cache_env env = {.mono_ns = no_clock, .wall_s = no_wall, .defer = no_defer,
				.hold = no_ref, .release = no_ref};
	struct cache_stats cs;
	struct fs_live live;
	struct fs_opts o;
	char err[256];

	(void)state;
	assert_int_equal(cache_new(&cc, &env, &live.c), 0);
	expect_ok("lagging_rate=10M", &o);
	assert_int_equal(fs_opts_set(&o, "lagging_rate", "20M", err, sizeof(err)), 0);
	assert_int_equal(fs_opts_apply(&o, "lagging_rate", &live), 0);
	cache_get_stats(live.c, &cs);
	assert_true(cs.tier[CACHE_LAG].limited);
	assert_int_equal(cs.tier[CACHE_LAG].rate, 20 * MIB);
	assert_int_equal(fs_opts_set(&o, "lagging_ops", "0", err, sizeof(err)), 0);
	assert_int_equal(fs_opts_apply(&o, "lagging_ops", &live), 0);
	assert_int_equal(fs_opts_set(&o, "hot_ttl", "3600", err, sizeof(err)), 0);
	assert_int_equal(fs_opts_apply(&o, "hot_ttl", &live), 0);
	assert_int_equal(fs_opts_apply(&o, "block_size", &live), -ENOENT);
	assert_int_equal(fs_opts_apply(&o, "nonesuch", &live), -ENOENT);
	fs_opts_done(&o);
	cache_free(live.c);
}

static void test_set(void **state)
{
	struct fs_opts o, before;
	char err[256], cwd[PATH_MAX];

	(void)state;
	expect_ok("", &o);

	/* live changes */
	assert_int_equal(fs_opts_set(&o, "lagging_rate", "10M", err, sizeof(err)), 0);
	assert_true(o.lagging_rate == 10 * MIB);
	assert_int_equal(fs_opts_set(&o, "lagging_burst", "64M", err, sizeof(err)), 0);
	assert_true(o.lagging_burst == 64 * MIB);
	assert_int_equal(fs_opts_set(&o, "lagging_ops", "50", err, sizeof(err)), 0);
	assert_true(o.lagging_ops == 50);
	assert_int_equal(fs_opts_set(&o, "hot_ttl", "120s", err, sizeof(err)), 0);
	assert_true(o.hot_ttl == 120);
	assert_int_equal(fs_opts_set(&o, "immutable", NULL, err, sizeof(err)), 0);
	assert_true(o.immutable);
	assert_int_equal(fs_opts_set(&o, "region", "ap-south-1", err, sizeof(err)), 0);
	assert_string_equal(o.region, "ap-south-1");

	/* errors leave every byte of the struct as it was */
	before = o;
	static const struct {
		const char *name, *value;
		int rc;
		const char *msg;
	} bad[] = {
	    {"lagging_rate", "fast", -EINVAL, "lagging_rate=fast: " SIZE_MSG},
	    {"lagging_rate", "99999999999T", -ERANGE,
	     "lagging_rate=99999999999T: too large (must be 0 or between 64K and 1T)"},
	    {"lagging_rate", "1", -EINVAL, "lagging_rate=1: must be 0 or between 64K and 1T"},
	    {"lagging_ops", "1", -EINVAL, "lagging_ops=1: must be 0 or between 4 and 1000000"},
	    {"lagging_burst", "", -EINVAL, "lagging_burst needs a value"},
	    {"lagging_ops", NULL, -EINVAL, "lagging_ops needs a value"},
	    {"hot_ttl", "0", -EINVAL, "hot_ttl=0: must be between 1 and 315360000 seconds"},
	    {"hot_ttl", "4294967295", -EINVAL,
	     "hot_ttl=4294967295: must be between 1 and 315360000 seconds"},
	    {"immutable", "off", -EINVAL, "immutable takes no value"},
	    {"region", "bad region", -EINVAL,
	     "region=bad region: not a region name (letters, digits, '-', '_' and '.')"},
	    {"region", "a\nb", -EINVAL, "region: the value contains a control character"},
	    {"nosuch", "1", -ENOENT, "unknown option 'nosuch'"},
	    {"hot_ttl=5", NULL, -ENOENT, "unknown option 'hot_ttl'"},
	    {"bad\nname", NULL, -ENOENT, "unknown option 'bad?name'"},
	    {"allow_other", NULL, -ENOENT, "unknown option 'allow_other'"},
	    {"aws_secret_access_key", "x", -EINVAL, SECRET},
	    {"aws_access_key_id=AKIA", NULL, -EINVAL, SECRET},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = fs_opts_set(&o, bad[i].name, bad[i].value, err, sizeof(err));

		assert_int_equal(r, bad[i].rc);
		assert_string_equal(err, bad[i].msg);
		assert_memory_equal(&o, &before, sizeof(o));
	}
	assert_int_equal(fs_opts_set(NULL, "x", NULL, err, sizeof(err)), -EINVAL);
	assert_int_equal(fs_opts_set(&o, NULL, NULL, err, sizeof(err)), -EINVAL);
	/* no error buffer, or a tiny one, is fine */
	assert_int_equal(fs_opts_set(&o, "timeout", "0", NULL, 0), -EINVAL);
	assert_int_equal(fs_opts_set(&o, "timeout", "0", err, 8), -EINVAL);
	assert_string_equal(err, "timeout");

	/* paths are made absolute */
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(fs_opts_set(&o, "credentials", "sub/creds", err, sizeof(err)), 0);
	assert_true(!strncmp(o.credentials, cwd, strlen(cwd)));
	assert_string_equal(o.credentials + strlen(cwd), "/sub/creds");
	fs_opts_done(&o);
}

static void test_url(void **state)
{
	static const struct {
		const char *url, *msg;
	} bad[] = {
	    {"ftp://x",
	     "URL ftp://x: unsupported scheme (use s3://, http://, https:// or file://)"},
	    {"mybucket", "URL mybucket: no scheme (use s3://, http://, https:// or file://)"},
	    {"://x", "URL ://x: no scheme (use s3://, http://, https:// or file://)"},
	    {"s3:/bucket", "URL s3:/bucket: no scheme (use s3://, http://, https:// or file://)"},
	    {"s3://", "URL s3://: no bucket name (use s3://BUCKET or s3://BUCKET/PREFIX)"},
	    {"s3:///prefix",
	     "URL s3:///prefix: no bucket name (use s3://BUCKET or s3://BUCKET/PREFIX)"},
	    {"http://", "URL http://: no host name"},
	    {"https:///x", "URL https:///x: no host name"},
	    {"file://relative/dir", "URL file://relative/dir: use file:///ABSOLUTE/PATH"},
	    {"s3://AKIA:secret@bucket", SECRET},
	    {"s3://bucket\n", "URL: contains a control character"},
	};
	static const struct {
		const char *url, *want;
	} good[] = {
	    {"s3://bucket", "s3://bucket"},
	    {"S3://Bucket/Prefix", "s3://Bucket/Prefix"},
	    {"http://host", "http://host"},
	    {"https://host:8443/a/b?x=1", "https://host:8443/a/b?x=1"},
	    {"HTTPS://host/", "https://host/"},
	    {"file:///srv/objects", "file:///srv/objects"},
	};
	struct fs_opts o;
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse_args(&o, err, sizeof(err), bad[i].url, tmpdir, NULL),
				 -EINVAL);
		assert_string_equal(err, bad[i].msg);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(parse_args(&o, err, sizeof(err), good[i].url, tmpdir, NULL), 0);
		assert_string_equal(o.url, good[i].want);
		fs_opts_done(&o);
	}
}

static void test_mountpoint(void **state)
{
	struct fs_opts o;
	char err[PATH_MAX + 64], want[PATH_MAX + 64], cwd[PATH_MAX], *slash;

	(void)state;
	assert_int_equal(parse_args(&o, err, sizeof(err), URL, "/nonexistent/x", NULL), -ENOENT);
	assert_string_equal(err, "mountpoint /nonexistent/x: No such file or directory");

	assert_int_equal(parse_args(&o, err, sizeof(err), URL, tmpfile_path, NULL), -ENOTDIR);
	snprintf(want, sizeof(want), "mountpoint %s: Not a directory", tmpfile_path);
	assert_string_equal(err, want);

	/* relative, with "..", made absolute */
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	slash = strrchr(tmpreal, '/');
	*slash = '\0';
	assert_int_equal(chdir(tmpreal), 0);
	*slash = '/';
	/* "tierfs-opts-XXXXXX/../tierfs-opts-XXXXXX" is tmpreal again */
	snprintf(want, sizeof(want), "%s/../%s", slash + 1, slash + 1);
	assert_int_equal(parse_args(&o, err, sizeof(err), URL, want, NULL), 0);
	assert_string_equal(o.mountpoint, tmpreal);
	fs_opts_done(&o);
	assert_int_equal(chdir(cwd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_size),	  cmocka_unit_test(test_seconds),
	    cmocka_unit_test(test_defaults),	  cmocka_unit_test(test_endpoint), cmocka_unit_test(test_every_option),
	    cmocka_unit_test(test_errors),	  cmocka_unit_test(test_secret_not_echoed),
	    cmocka_unit_test(test_cross_checks),  cmocka_unit_test(test_duplicates),
	    cmocka_unit_test(test_fstab),	  cmocka_unit_test(test_fuse_passthrough),
	    cmocka_unit_test(test_command_line),  cmocka_unit_test(test_positionals),
	    cmocka_unit_test(test_help_version),  cmocka_unit_test(test_help_text),
	    cmocka_unit_test(test_format),	  cmocka_unit_test(test_set),
	    cmocka_unit_test(test_live),	  cmocka_unit_test(test_live_value),
	    cmocka_unit_test(test_live_apply),
	    cmocka_unit_test(test_url),		  cmocka_unit_test(test_mountpoint),
	    cmocka_unit_test(test_ids_and_modes),
	};

	return cmocka_run_group_tests_name("opts", tests, group_setup, group_teardown);
}
