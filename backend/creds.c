/*
 * creds.c - where the S3 access key, secret key and session token come from.
 *
 * The order is the AWS CLI's, cut down to static keys:
 *
 *     1. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN) in the environment
 *     2. the shared credentials file, one [profile] section of it:
 *            file    = argument, else $AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials
 *            profile = argument, else $AWS_PROFILE, else "default"
 *     3. nothing: anonymous, requests go unsigned (public buckets)
 *
 * A file or profile the user named (argument or environment) must exist; only the defaults may
 * be missing. The file is INI as botocore's configparser reads it:
 *
 *     # comment                      full-line comments start with '#' or ';'
 *     [default]                      a section is a profile name, used as written
 *     aws_access_key_id = AKIA...    '=' or ':' splits at the first one; spaces around trimmed;
 *     aws_secret_access_key = ...    key names are case-insensitive; values kept whole
 *     s3 =                           a key with an empty value may be followed by lines
 *         max_concurrent = 4         indented deeper (nested settings): skipped
 *
 * Lines that are neither are -EINVAL anywhere in the file, as they are for the AWS CLI; a
 * repeated key, or an access key without a secret (or the reverse), is -EINVAL in the profile
 * being read. Messages name the file, the line number and the profile, never a value read from
 * the file or the environment, so a secret cannot end up in a log.
 *
 * Secrets pass through the stdio buffer, the line buffer and a local struct; all three are wiped
 * before return, and the line buffer is sized up front so getline never reallocs a copy away. No global state: safe to call from any thread, although it runs once at mount.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "creds.h"

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static bool set(const char *s)
{
	return s && s[0];
}

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

/* @s without blanks at either end, in place. */
static char *trim(char *s)
{
	size_t n;

	while (blank(*s))
		s++;
	n = strlen(s);
	while (n > 0 && blank(s[n - 1]))
		s[--n] = '\0';
	return s;
}

/* Copy @v into @dst of @size bytes. @return 0 or -ENAMETOOLONG. */
static int store(char *dst, size_t size, const char *v)
{
	size_t n = strlen(v);

	if (n >= size)
		return -ENAMETOOLONG;
	memcpy(dst, v, n + 1);
	return 0;
}

static int from_env(struct s3_creds *c, char *err, size_t errlen)
{
	const char *k = getenv("AWS_ACCESS_KEY_ID");
	const char *s = getenv("AWS_SECRET_ACCESS_KEY");
	const char *t = getenv("AWS_SESSION_TOKEN");

	if (!set(k)) {
		seterr(err, errlen, "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
		return -EINVAL;
	}
	if (!set(s)) {
		seterr(err, errlen, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
		return -EINVAL;
	}
	if (store(c->access_key, sizeof(c->access_key), k) < 0) {
		seterr(err, errlen, "AWS_ACCESS_KEY_ID is too long (at most %zu bytes)",
		       sizeof(c->access_key) - 1);
		return -ENAMETOOLONG;
	}
	if (store(c->secret_key, sizeof(c->secret_key), s) < 0) {
		seterr(err, errlen, "AWS_SECRET_ACCESS_KEY is too long (at most %zu bytes)",
		       sizeof(c->secret_key) - 1);
		return -ENAMETOOLONG;
	}
	if (set(t) && store(c->session_token, sizeof(c->session_token), t) < 0) {
		seterr(err, errlen, "AWS_SESSION_TOKEN is too long (at most %zu bytes)",
		       sizeof(c->session_token) - 1);
		return -ENAMETOOLONG;
	}
	return 0;
}

/* What the parser knows about the profile being read. */
struct target {
	const char *profile;
	bool found;	/* a [profile] header was seen */
	bool has_token; /* aws_session_token seen (wins over the legacy aws_security_token) */
	bool seen[4];	/* which of the keys below were given, to refuse repeats */
};

static const char *const keys[4] = {"aws_access_key_id", "aws_secret_access_key",
				    "aws_session_token", "aws_security_token"};

/* @return the index of @name in keys[], or -1. */
static int key_index(const char *name)
{
	for (int i = 0; i < 4; i++)
		if (strcasecmp(name, keys[i]) == 0)
			return i;
	return -1;
}

static int take_key(struct target *t, struct s3_creds *c, const char *path, unsigned line,
		    const char *name, const char *value, char *err, size_t errlen)
{
	int i = key_index(name);
	int r;

	if (i < 0)
		return 0;
	if (t->seen[i]) {
		seterr(err, errlen, "%s:%u: %s given twice in profile '%s'", path, line, keys[i],
		       t->profile);
		return -EINVAL;
	}
	t->seen[i] = true;
	switch (i) {
	case 0:
		r = store(c->access_key, sizeof(c->access_key), value);
		break;
	case 1:
		r = store(c->secret_key, sizeof(c->secret_key), value);
		break;
	case 2:
		t->has_token = true;
		r = store(c->session_token, sizeof(c->session_token), value);
		break;
	default:
		r = t->has_token ? 0 : store(c->session_token, sizeof(c->session_token), value);
		break;
	}
	if (r < 0)
		seterr(err, errlen, "%s:%u: %s in profile '%s' is too long", path, line, keys[i],
		       t->profile);
	return r;
}

/* The parse of one INI file, line by line. */
struct ini {
	const char *path;	 /* the file's name, for messages */
	struct target *t;	 /* the profile read, and what was seen of it */
	struct s3_creds *c;	 /* filled from the profile */
	char *err;
	size_t errlen;
	unsigned line;		 /* number of the line being read, from 1 */
	bool in_section;	 /* a [section] header was seen */
	bool in_target;		 /* ... and it is the profile being read */
	bool opt_active;	 /* a key line was read in this section */
	bool opt_empty;		 /* ... and its value was empty (nested settings may follow) */
	bool opt_ours;		 /* ... and it is one of keys[] in the profile being read */
	size_t opt_indent;	 /* ... and was indented this much */
};

/* A "[name]" header at @p. @return 0 or -EINVAL. */
static int ini_section(struct ini *s, char *p)
{
	char *end = strchr(p, ']'), *rest, *name;

	/* After the ']' only blanks or a comment, as configparser allows. */
	rest = end ? trim(end + 1) : NULL;
	if (!end || (*rest && *rest != '#' && *rest != ';')) {
		seterr(s->err, s->errlen, "%s:%u: malformed [section] header", s->path, s->line);
		return -EINVAL;
	}
	*end = '\0';
	name = trim(p + 1);
	if (!*name) {
		seterr(s->err, s->errlen, "%s:%u: empty [section] name", s->path, s->line);
		return -EINVAL;
	}
	s->in_section = true;
	s->in_target = strcmp(name, s->t->profile) == 0;
	if (s->in_target)
		s->t->found = true;
	s->opt_active = false;
	return 0;
}

/* A "name = value" line at @p, indented @indent. @return 0, -EINVAL, -ENAMETOOLONG. */
static int ini_setting(struct ini *s, char *p, size_t indent)
{
	char *delim = p + strcspn(p, "=:"), *name, *value;

	if (!*delim) {
		seterr(s->err, s->errlen, "%s:%u: expected 'name = value' or a [section] header",
		       s->path, s->line);
		return -EINVAL;
	}
	if (!s->in_section) {
		seterr(s->err, s->errlen, "%s:%u: setting before the first [section] header",
		       s->path, s->line);
		return -EINVAL;
	}
	*delim = '\0';
	name = trim(p);
	value = trim(delim + 1);
	if (!*name) {
		seterr(s->err, s->errlen, "%s:%u: setting without a name", s->path, s->line);
		return -EINVAL;
	}
	s->opt_active = true;
	s->opt_empty = !*value;
	s->opt_indent = indent;
	s->opt_ours = s->in_target && key_index(name) >= 0;
	/* A key with an empty value counts as absent. */
	if (!s->in_target || s->opt_empty)
		return 0;
	return take_key(s->t, s->c, s->path, s->line, name, value, s->err, s->errlen);
}

/* One line of @n bytes at @buf, its end of line removed. @return 0 or -errno. */
static int ini_line(struct ini *s, char *buf, size_t n)
{
	char *p;
	size_t indent;

	if (strlen(buf) != n) {
		seterr(s->err, s->errlen, "%s:%u: NUL byte in line", s->path, s->line);
		return -EINVAL;
	}
	for (p = buf; blank(*p); p++)
		;
	indent = (size_t)(p - buf);
	if (!*p || *p == '#' || *p == ';')
		return 0;
	if (s->opt_active && indent > s->opt_indent) {
		/* A continuation line. Under an empty value it is a nested setting, which we
		 * skip; a multi-line value for a key we use is refused. */
		if (s->opt_ours && !s->opt_empty) {
			seterr(s->err, s->errlen,
			       "%s:%u: multi-line value in profile '%s' is not supported", s->path,
			       s->line, s->t->profile);
			return -EINVAL;
		}
		return 0;
	}
	if (*p == '[')
		return ini_section(s, p);
	return ini_setting(s, p, indent);
}

/*
 * Read the INI file @f (named @path in messages) and fill @c from section t->profile.
 * @return 0 (t->found tells whether the section exists), -EINVAL, -ENAMETOOLONG, -ENOMEM, -EIO.
 */
static int parse(FILE *f, const char *path, struct target *t, struct s3_creds *c, char *err,
		 size_t errlen)
{
	struct ini s = {.path = path, .t = t, .c = c, .err = err, .errlen = errlen};
	char *buf;
	size_t cap;
	ssize_t n;
	int r = 0;

	/* getline grows its buffer with realloc, which would leave a copy of the lines read so
	 * far (secrets among them) in the block it frees. Start it large enough for any line
	 * whose value fits struct s3_creds, so only a line refused as too long can grow it. */
	cap = sizeof(((struct s3_creds *)0)->session_token) + 256;
	buf = malloc(cap);
	if (!buf) {
		seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	errno = 0;
	while (r == 0 && (n = getline(&buf, &cap, f)) >= 0) {
		s.line++;
		while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
			buf[--n] = '\0';
		r = ini_line(&s, buf, (size_t)n);
	}
	if (r == 0 && ferror(f)) {
		r = errno ? -errno : -EIO;
		seterr(err, errlen, "cannot read %s: %s", path, strerror(-r));
	}
	explicit_bzero(buf, cap);
	free(buf);
	return r;
}

/* @return 0 with the path in @out, or -ENAMETOOLONG. */
static int expand_home(const char *in, char *out, size_t outlen)
{
	const char *home = getenv("HOME");
	int n;

	if (in[0] == '~' && (in[1] == '/' || in[1] == '\0') && set(home))
		n = snprintf(out, outlen, "%s%s", home, in + 1);
	else
		n = snprintf(out, outlen, "%s", in);
	return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/* Where the keys of a file come from: which profile, which file, and whether the user named
 * each (argument or environment) or it is the default, which may be missing. */
struct source {
	const char *profile;
	bool profile_named;
	const char *file;	/* NULL: no file at all (the default one, without HOME) */
	bool file_named;
	char path[PATH_MAX];	/* file, with ~ expanded */
};

/* Fill @src from the arguments and the environment. @return 0, -ENOENT (a named profile and
 * no file to find it in), -ENAMETOOLONG. */
static int pick_source(const char *file, const char *profile, struct source *src, char *err,
		       size_t errlen)
{
	if (!profile)
		profile = getenv("AWS_PROFILE");
	src->profile_named = set(profile);
	src->profile = src->profile_named ? profile : "default";
	if (!file)
		file = getenv("AWS_SHARED_CREDENTIALS_FILE");
	src->file_named = set(file);
	src->file = src->file_named ? file : "~/.aws/credentials";
	if (!src->file_named && !set(getenv("HOME"))) {
		/* No home, no default file. */
		src->file = NULL;
		if (!src->profile_named)
			return 0;
		seterr(err, errlen,
		       "profile '%s' not found: HOME is not set, so there is no ~/.aws/credentials",
		       src->profile);
		return -ENOENT;
	}
	if (expand_home(src->file, src->path, sizeof(src->path)) < 0) {
		seterr(err, errlen, "credentials file path is too long");
		return -ENAMETOOLONG;
	}
	return 0;
}

/* Open the file of @src. @return 0 and *ret_f (NULL: the default file is not there, which
 * means anonymous), or -errno. */
static int open_source(const struct source *src, FILE **ret_f, char *err, size_t errlen)
{
	FILE *f = fopen(src->path, "re");
	int r;

	if (f) {
		*ret_f = f;
		return 0;
	}
	r = -errno;
	if (r == -ENOENT && !src->file_named && !src->profile_named) {
		*ret_f = NULL;
		return 0;
	}
	if (r == -ENOENT && !src->file_named)
		seterr(err, errlen, "profile '%s' not found: %s does not exist", src->profile,
		       src->path);
	else
		seterr(err, errlen, "cannot open credentials file %s: %s", src->path,
		       strerror(-r));
	return r;
}

/* What a profile that was found must hold: both keys or neither (anonymous, only for the
 * default profile). @return 0 (@c emptied when anonymous) or -EINVAL. */
static int check_profile(const struct source *src, struct s3_creds *c, char *err,
			 size_t errlen)
{
	const char *p = src->profile, *path = src->path;

	if (c->access_key[0] && !c->secret_key[0]) {
		seterr(err, errlen,
		       "profile '%s' in %s has aws_access_key_id but no aws_secret_access_key", p,
		       path);
		return -EINVAL;
	}
	if (!c->access_key[0] && c->secret_key[0]) {
		seterr(err, errlen,
		       "profile '%s' in %s has aws_secret_access_key but no aws_access_key_id", p,
		       path);
		return -EINVAL;
	}
	if (!c->access_key[0] && src->profile_named) {
		seterr(err, errlen,
		       "profile '%s' in %s has no aws_access_key_id (only static keys are "
		       "supported)",
		       p, path);
		return -EINVAL;
	}
	if (!c->access_key[0])
		memset(c, 0, sizeof(*c)); /* an empty [default]: anonymous */
	return 0;
}

/* The keys of @src's profile into @c, from a file opened with @iobuf as its stdio buffer.
 * @return 0 (@c empty: anonymous) or -errno. */
static int from_file(const struct source *src, struct s3_creds *c, char *iobuf, size_t iolen,
		     char *err, size_t errlen)
{
	struct target t = {.profile = src->profile};
	FILE *f = NULL;
	int r;

	if (!src->file)
		return 0;
	r = open_source(src, &f, err, errlen);
	if (r < 0 || !f)
		return r;
	setvbuf(f, iobuf, _IOFBF, iolen);
	r = parse(f, src->path, &t, c, err, errlen);
	fclose(f);
	if (r < 0)
		return r;
	if (t.found)
		return check_profile(src, c, err, errlen);
	memset(c, 0, sizeof(*c));
	if (!src->profile_named)
		return 0;
	seterr(err, errlen, "profile '%s' not found in %s", src->profile, src->path);
	return -ENOENT;
}

int creds_load(const char *file, const char *profile, struct s3_creds *ret, char *err,
	       size_t errlen)
{
	char iobuf[BUFSIZ];
	struct s3_creds c;
	struct source src;
	int r;

	memset(&c, 0, sizeof(c));
	seterr(err, errlen, "%s", "");
	if (set(getenv("AWS_ACCESS_KEY_ID")) || set(getenv("AWS_SECRET_ACCESS_KEY"))) {
		r = from_env(&c, err, errlen);
	} else {
		r = pick_source(file, profile, &src, err, errlen);
		if (r == 0)
			r = from_file(&src, &c, iobuf, sizeof(iobuf), err, errlen);
	}
	explicit_bzero(iobuf, sizeof(iobuf));
	if (r == 0)
		memcpy(ret, &c, sizeof(c));
	explicit_bzero(&c, sizeof(c));
	return r;
}
