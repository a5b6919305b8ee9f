/*
 * fuzz_opts.c - the command line and -o options through fs/opts.c.
 *
 * Input layout: the first byte picks what the rest is; the rest, after one optional leading
 * '\n', is split at every '\n' or NUL into segments (empty ones kept):
 *
 *     byte 0 % 4   the segments are
 *     ----------   ---------------
 *     0            the whole argv after "tierfs"; a segment "@" becomes the mountpoint, a
 *                  real directory made once by LLVMFuzzerInitialize()
 *     1            -o arguments: tierfs file:///tmp MNT -o SEG -o SEG ...
 *     2            fs_opts_set() calls on a parsed default mount: "name=value" or "name"
 *     3            argv after a valid start: tierfs s3://bucket/prefix MNT SEG SEG ...
 *
 * Byte 0 with bit 0x40 set ('p'..'s' instead of '0'..'3') gives the calls a tiny error
 * buffer (1 + len % 32 bytes), to cover message truncation. So a seed reads naturally:
 * "1\nblock_size=4M,hot_size=1G,lagging=off".
 *
 * Every input also goes, as a whole and segment by segment, through fs_parse_size() and
 * fs_parse_seconds(), which are checked against strtoull(). Checked beyond "no crash, no
 * leak, no UB":
 *
 *   - an error message is exactly one line: no control character, NUL-terminated inside the
 *     buffer, nothing written past it; a failure leaves a non-empty message (when the buffer
 *     has room for one) and leaves *ret untouched;
 *   - a successful parse obeys the documented ranges and cross-checks (block_size a power of
 *     two in 64K..64M, hot_size >= 8 x block_size, ...), has an absolute mountpoint, and its
 *     fs_opts_format() output fed line by line to fs_opts_set() on a default mount gives
 *     back the same output (the round trip opts.c promises).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "fs.h"
#include "fuzz.h"

#define ERR_MAX	  256
#define ERR_GUARD 16
#define KIB	  (UINT64_C(1) << 10)
#define MIB	  (UINT64_C(1) << 20)

static char mnt[PATH_MAX]; /* the mountpoint: an empty directory, removed at exit */

static void remove_mnt(void)
{
	rmdir(mnt);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *tmp = getenv("TMPDIR");

	(void)argc;
	(void)argv;
	snprintf(mnt, sizeof(mnt), "%s/tierfs-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(mnt)) {
		perror("fuzz_opts: mkdtemp");
		abort();
	}
	atexit(remove_mnt);
	return 0;
}

/* An error buffer with a guard after the part the callee is told about. */
struct errbuf {
	char b[ERR_MAX + ERR_GUARD];
	size_t len; /* what the callee may use */
};

static void err_init(struct errbuf *e, size_t len)
{
	memset(e->b, 'G', sizeof(e->b));
	e->len = len;
}

/* One line, NUL-terminated inside the buffer, guard intact. @return its length. */
static size_t err_check(const struct errbuf *e)
{
	const char *nul = memchr(e->b, '\0', e->len);

	FUZZ_CHECK(nul);
	for (const char *p = e->b; p < nul; p++)
		FUZZ_CHECK((unsigned char)*p >= 0x20 && *p != 0x7f);
	for (size_t i = e->len; i < sizeof(e->b); i++)
		FUZZ_CHECK(e->b[i] == 'G');
	return (size_t)(nul - e->b);
}

static bool is_zero(const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		if (c[i])
			return false;
	return true;
}

/* What may follow a size's digits, as README.md's option table and opts.c's comment say:
 * nothing or B (bytes); K, M, G or T, alone, with B, or with iB (powers of 1024); any case. */
struct size_suffix {
	const char *text;
	int shift;
};

static const struct size_suffix size_suffixes[] = {
    {"", 0},   {"b", 0},                  /* bytes */
    {"k", 10}, {"kb", 10}, {"kib", 10}, /* KiB */
    {"m", 20}, {"mb", 20}, {"mib", 20}, /* MiB */
    {"g", 30}, {"gb", 30}, {"gib", 30}, /* GiB */
    {"t", 40}, {"tb", 40}, {"tib", 40}, /* TiB */
};
static const struct size_suffix *size_suffix(const char *rest)
{
	for (size_t i = 0; i < sizeof(size_suffixes) / sizeof(size_suffixes[0]); i++)
		if (strcasecmp(rest, size_suffixes[i].text) == 0)
			return &size_suffixes[i];
	return NULL;
}

/* fs_parse_size and fs_parse_seconds against strtoull(). */
static void check_numbers(const char *s)
{
	uint64_t v = 0xabad1deaULL, ref;
	char *end;
	int r;

	r = fs_parse_seconds(s, &v);
	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE);
	if (r != -EINVAL) {
		/* digits, then at most an 's' */
		FUZZ_CHECK(s[0] >= '0' && s[0] <= '9');
		errno = 0;
		ref = strtoull(s, &end, 10);
		FUZZ_CHECK(*end == '\0' || ((*end == 's' || *end == 'S') && end[1] == '\0'));
		FUZZ_CHECK((r == -ERANGE) == (errno == ERANGE));
		if (r == 0)
			FUZZ_CHECK(v == ref);
	}

	v = 0xabad1deaULL;
	r = fs_parse_size(s, &v);
	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE);
	/* the oracle is the documented list of spellings, not a copy of the parser's switch: so
	 * a wrong shift, a suffix refused or one accepted that is not on the list is caught */
	if (s[0] >= '0' && s[0] <= '9') {
		const struct size_suffix *x = size_suffix(s + strspn(s, "0123456789"));

		if (!x) {
			FUZZ_CHECK(r == -EINVAL);
			return;
		}
		errno = 0;
		ref = strtoull(s, &end, 10);
		FUZZ_CHECK(r != -EINVAL);
		FUZZ_CHECK((r == -ERANGE) ==
			   (errno == ERANGE || ref > (UINT64_MAX >> x->shift)));
		if (r == 0)
			FUZZ_CHECK(v == ref << x->shift);
	} else {
		FUZZ_CHECK(r == -EINVAL);
	}
}

/* A default mount on mnt: tierfs file:///tmp MNT. */
static void parse_default(struct fs_opts *o)
{
	char *argv[] = {"tierfs", "file:///tmp", mnt, NULL};
	char err[ERR_MAX];

	memset(o, 0, sizeof(*o));
	FUZZ_CHECK(fs_opts_parse(3, argv, o, err, sizeof(err)) == 0);
}

/* fs_opts_format(@o) replayed through fs_opts_set() on a default mount gives the same text. */
static void check_format(const struct fs_opts *o)
{
	struct fs_opts o2;
	size_t need, need2;
	char *buf, *buf2, *line, *next;

	need = fs_opts_format(o, NULL, 0);
	buf = malloc(need + 1);
	FUZZ_CHECK(buf);
	FUZZ_CHECK(fs_opts_format(o, buf, need + 1) == need && strlen(buf) == need);

	parse_default(&o2);
	buf2 = strdup(buf);
	FUZZ_CHECK(buf2);
	for (line = buf2; *line; line = next) {
		char *eq, err[ERR_MAX];
		int r;

		next = strchr(line, '\n');
		FUZZ_CHECK(next); /* every line ends in '\n' */
		*next++ = '\0';
		eq = strchr(line, '=');
		if (eq)
			*eq = '\0';
		r = fs_opts_set(&o2, line, eq ? eq + 1 : NULL, err, sizeof(err));
		if (r != 0)
			fprintf(stderr, "fs_opts_set(%s, %s): %d %s\n", line,
				eq ? eq + 1 : "(null)", r, err);
		FUZZ_CHECK(r == 0);
	}
	free(buf2);

	need2 = fs_opts_format(&o2, NULL, 0);
	buf2 = malloc(need2 + 1);
	FUZZ_CHECK(buf2);
	fs_opts_format(&o2, buf2, need2 + 1);
	if (strcmp(buf, buf2) != 0)
		fprintf(stderr, "format:\n%s\nafter fs_opts_set:\n%s\n", buf, buf2);
	FUZZ_CHECK(strcmp(buf, buf2) == 0);
	free(buf);
	free(buf2);
	fs_opts_done(&o2);
}

static bool pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

/* The documented ranges and cross-checks of a mount that parsed. */
static void check_mount(const struct fs_opts *o)
{
	FUZZ_CHECK(o->url && o->mountpoint);
	FUZZ_CHECK(o->mountpoint[0] == '/');
	FUZZ_CHECK(pow2(o->block_size) && o->block_size >= 64 * KIB && o->block_size <= 64 * MIB);
	FUZZ_CHECK(o->hot_size / 8 >= o->block_size); /* the cache needs 8 blocks per tier */
	FUZZ_CHECK(!o->lagging || o->lagging_size / 8 >= o->block_size);
	FUZZ_CHECK(o->hot_ttl >= 1 && o->hot_ttl <= UINT32_MAX);
	FUZZ_CHECK(o->lagging_ttl >= 1 && o->lagging_ttl <= UINT32_MAX);
	FUZZ_CHECK(o->metadata_ttl <= UINT32_MAX);
	FUZZ_CHECK(o->readahead <= 64);
	FUZZ_CHECK(o->max_conns >= 2 && o->max_conns <= 256);
	FUZZ_CHECK(o->timeout >= 1 && o->timeout <= 3600);
	FUZZ_CHECK(o->retries <= 20);
	FUZZ_CHECK(o->lagging_ops <= 1000000);
	FUZZ_CHECK(o->lagging_rate <= (UINT64_C(1) << 40) &&
		   o->lagging_burst <= (UINT64_C(1) << 40));
	FUZZ_CHECK(o->control_dir && o->control_dir[0] && !strchr(o->control_dir, '/'));
	FUZZ_CHECK(!o->debug || o->foreground);
}

static void run_parse(int argc, char **argv, size_t errlen)
{
	struct fs_opts o;
	struct errbuf e;
	size_t n;
	int r;

	memset(&o, 0, sizeof(o));
	err_init(&e, errlen);
	r = fs_opts_parse(argc, argv, &o, e.b, e.len);
	n = err_check(&e);
	if (r < 0) {
		FUZZ_CHECK(r == -EINVAL || r == -ERANGE || r == -ENOMEM || r == -ENOENT ||
			   r == -ENOTDIR || r == -EACCES || r == -ELOOP || r == -ENAMETOOLONG ||
			   r == -ENOTCONN || r == -EIO);
		FUZZ_CHECK(is_zero(&o, sizeof(o)));
		FUZZ_CHECK(n > 0 || e.len == 1);
		return;
	}
	FUZZ_CHECK(r == 0);
	if (!o.show_help && !o.show_version)
		check_mount(&o);
	else
		FUZZ_CHECK(n == 0);
	check_format(&o);
	fs_opts_done(&o);
}

static void run_set(char **segs, size_t nsegs, size_t errlen)
{
	struct fs_opts o;

	parse_default(&o);
	for (size_t i = 0; i < nsegs; i++) {
		char *eq = strchr(segs[i], '=');
		struct errbuf e;
		int r;

		if (eq)
			*eq = '\0';
		err_init(&e, errlen);
		r = fs_opts_set(&o, segs[i], eq ? eq + 1 : NULL, e.b, e.len);
		if (eq)
			*eq = '=';
		FUZZ_CHECK(r == 0 || r == -ENOENT || r == -EINVAL || r == -ERANGE || r == -ENOMEM);
		if (r < 0) /* on success @err is not written */
			FUZZ_CHECK(err_check(&e) > 0 || e.len == 1);
		else
			for (size_t k = 0; k < sizeof(e.b); k++)
				FUZZ_CHECK(e.b[k] == 'G');
	}
	check_format(&o);
	fs_opts_done(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s, *p, **segs, **argv;
	size_t nsegs = 0, errlen, len;
	int mode, argc = 0;

	s = fuzz_strndup(data, size);
	check_numbers(s);
	if (size < 1) {
		free(s);
		return 0;
	}
	mode = data[0] % 4;
	errlen = data[0] & 0x40 ? 1 + size % 32 : ERR_MAX;

	/* Split what follows byte 0 (and one leading separator) at '\n' and NUL, in place. */
	p = s + 1;
	len = size - 1;
	if (len && (*p == '\n' || *p == '\0')) {
		p++;
		len--;
	}
	segs = calloc(len + 1, sizeof(*segs));
	FUZZ_CHECK(segs);
	segs[nsegs++] = p;
	for (size_t i = 0; i < len; i++) {
		if (p[i] == '\n' || p[i] == '\0') {
			p[i] = '\0';
			segs[nsegs++] = p + i + 1;
		}
	}
	for (size_t i = 0; i < nsegs; i++)
		check_numbers(segs[i]);

	argv = calloc(2 * nsegs + 5, sizeof(*argv));
	FUZZ_CHECK(argv);
	argv[argc++] = "tierfs";
	switch (mode) {
	case 0:
		for (size_t i = 0; i < nsegs; i++)
			argv[argc++] = strcmp(segs[i], "@") ? segs[i] : mnt;
		run_parse(argc, argv, errlen);
		break;
	case 1:
		argv[argc++] = "file:///tmp";
		argv[argc++] = mnt;
		for (size_t i = 0; i < nsegs; i++) {
			argv[argc++] = "-o";
			argv[argc++] = segs[i];
		}
		run_parse(argc, argv, errlen);
		break;
	case 2:
		run_set(segs, nsegs, errlen);
		break;
	default:
		argv[argc++] = "s3://bucket/prefix";
		argv[argc++] = mnt;
		for (size_t i = 0; i < nsegs; i++)
			argv[argc++] = strcmp(segs[i], "@") ? segs[i] : mnt;
		run_parse(argc, argv, errlen);
		break;
	}
	free(argv);
	free(segs);
	free(s);
	return 0;
}
