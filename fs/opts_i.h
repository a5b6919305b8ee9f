/*
 * opts_i.h - the option table's insides, shared by opts.c (the table, parsing and checking)
 * and optsprint.c (--help, the man page, fs_opts_format) only: a row's type, the table, and
 * the small helpers both use. opts.c's essay says how the table drives everything.
 */
#ifndef TIERFS_OPTS_I_H
#define TIERFS_OPTS_I_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fs.h"

#define USAGE	  "usage: tierfs URL MOUNTPOINT [-o options]"

enum opt_kind {
	OPT_SIZE,    /* bytes, fs_parse_size(): 4M, 512K, 1G */
	OPT_SECONDS, /* fs_parse_seconds(): 60, 60s */
	OPT_COUNT,   /* plain decimal integer */
	OPT_FLAG,    /* bare name sets it; takes no value; default off */
	OPT_BOOL,    /* name=on|off|true|false|1|0 */
	OPT_STRING,  /* any non-empty text */
	OPT_PATH,    /* a file or directory; made absolute (tierfs may chdir("/") to daemonize) */
	OPT_MODE,    /* permission bits in octal, 0..0777: 0644, 644, 0 */
};

enum opt_group {
	GROUP_CACHE,
	GROUP_LAGGING,
	GROUP_SHARED,
	GROUP_WRITE,
	GROUP_STORE,
	GROUP_MOUNT,
	N_GROUPS
};

enum opt_check {
	CHECK_NONE,
	CHECK_POW2,	/* a power of two (within min..max) */
	CHECK_HTTP_URL, /* http:// or https:// and a host */
	CHECK_SEGMENT,	/* one path segment: no '/', not "." or ".." */
	CHECK_REGION,	/* letters, digits, '-', '_', '.' */
	CHECK_REDIS_URL, /* redis://host:port[,host:port...] */
	CHECK_PREFIX,	/* a key prefix: printable, no space, at most 64 bytes */
	CHECK_ENDPOINT,	/* [HOST:]PORT (fs_parse_endpoint) */
};

/* One -o setting. All fields are constant. */
struct opt {
	const char *name;
	enum opt_kind kind;
	enum opt_group group;
	size_t off;	      /* offsetof(struct fs_opts, field): uint64_t, bool or char * */
	uint64_t min, max;    /* numeric kinds: accepted range, inclusive */
	bool zero_ok;	      /* numeric kinds: 0 (off, unlimited) is accepted too, below min */
	uint64_t def;	      /* numeric kinds, flag and bool: the default */
	const char *def_str;  /* string kinds: the default, or NULL for unset */
	enum opt_check check; /* extra check beyond the kind's own */
	const char *meta;     /* help: what the value looks like, when the kind's word is vague */
	const char *help;     /* help: one short line, without the default */
	const char *def_help; /* help: the default as shown, when the bare value would mislead */
	/* A live row (it may change on a running mount, through setxattr on its root): how the
	 * value just set in @o reaches the running mount. @return 0 or -errno. NULL: fixed for
	 * the life of a mount. */
	int (*apply)(const struct fs_live *live, const struct fs_opts *o);
	/* A live row whose stored 0 means "the default": the value in force, as getxattr shows
	 * it. NULL: the stored value. */
	uint64_t (*in_force)(const struct fs_opts *o);
};

extern const struct opt fs_opts_table[];
extern const size_t fs_opts_count; /* rows in fs_opts_table[] */
extern const char *const fs_opts_group_title[N_GROUPS];

/* A growing, NUL-terminated output that counts what it would need, like snprintf. */
struct out {
	char *buf;   /* NULL when only counting */
	size_t len;  /* bytes at buf */
	size_t need; /* bytes written or wanted so far, without the NUL */
};

__attribute__((format(printf, 2, 3))) static inline void out_printf(struct out *w,
								    const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	if (w->buf && w->need < w->len)
		n = vsnprintf(w->buf + w->need, w->len - w->need, fmt, ap);
	else
		n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		w->need += (size_t)n;
}

static inline uint64_t u64_of(const struct fs_opts *o, const struct opt *d)
{
	return *(const uint64_t *)(const void *)((const char *)o + d->off);
}

static inline bool bool_of(const struct fs_opts *o, const struct opt *d)
{
	return *(const bool *)(const void *)((const char *)o + d->off);
}

static inline const char *str_of(const struct fs_opts *o, const struct opt *d)
{
	return *(char *const *)(const void *)((const char *)o + d->off);
}

#endif
