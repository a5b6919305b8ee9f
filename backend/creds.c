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

/*
 * Read the INI file @f (named @path in messages) and fill @c from section t->profile.
 * @return 0 (t->found tells whether the section exists), -EINVAL, -ENAMETOOLONG, -ENOMEM, -EIO.
 */
static int parse(FILE *f, const char *path, struct target *t, struct s3_creds *c, char *err,
		 size_t errlen)
{
	char *buf = NULL;
	size_t cap = 0;
	ssize_t n;
	unsigned line = 0;
	bool in_section = false, in_target = false;
	bool opt_active = false; /* a key line was read in this section */
	bool opt_empty = false;	 /* ... and its value was empty (nested settings may follow) */
	bool opt_ours = false;	 /* ... and it is one of keys[] in the profile being read */
	size_t opt_indent = 0;	 /* ... and was indented this much */
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
	while ((n = getline(&buf, &cap, f)) >= 0) {
		char *p, *delim, *name, *value;
		size_t indent;

		line++;
		while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
			buf[--n] = '\0';
		if (strlen(buf) != (size_t)n) {
			seterr(err, errlen, "%s:%u: NUL byte in line", path, line);
			r = -EINVAL;
			goto out;
		}
		for (p = buf; blank(*p); p++)
			;
		indent = (size_t)(p - buf);
		if (!*p || *p == '#' || *p == ';')
			continue;
		if (opt_active && indent > opt_indent) {
			/* A continuation line. Under an empty value it is a nested setting, which
			 * we skip; a multi-line value for a key we use is refused. */
			if (opt_ours && !opt_empty) {
				seterr(err, errlen,
				       "%s:%u: multi-line value in profile '%s' is not supported",
				       path, line, t->profile);
				r = -EINVAL;
				goto out;
			}
			continue;
		}
		if (*p == '[') {
			char *end = strchr(p, ']'), *rest;

			/* After the ']' only blanks or a comment, as configparser allows. */
			rest = end ? trim(end + 1) : NULL;
			if (!end || (*rest && *rest != '#' && *rest != ';')) {
				seterr(err, errlen, "%s:%u: malformed [section] header", path,
				       line);
				r = -EINVAL;
				goto out;
			}
			*end = '\0';
			name = trim(p + 1);
			if (!*name) {
				seterr(err, errlen, "%s:%u: empty [section] name", path, line);
				r = -EINVAL;
				goto out;
			}
			in_section = true;
			in_target = strcmp(name, t->profile) == 0;
			if (in_target)
				t->found = true;
			opt_active = false;
			continue;
		}
		delim = p + strcspn(p, "=:");
		if (!*delim) {
			seterr(err, errlen, "%s:%u: expected 'name = value' or a [section] header",
			       path, line);
			r = -EINVAL;
			goto out;
		}
		if (!in_section) {
			seterr(err, errlen, "%s:%u: setting before the first [section] header",
			       path, line);
			r = -EINVAL;
			goto out;
		}
		*delim = '\0';
		name = trim(p);
		value = trim(delim + 1);
		if (!*name) {
			seterr(err, errlen, "%s:%u: setting without a name", path, line);
			r = -EINVAL;
			goto out;
		}
		opt_active = true;
		opt_empty = !*value;
		opt_indent = indent;
		opt_ours = in_target && key_index(name) >= 0;
		if (in_target) {
			/* A key with an empty value counts as absent. */
			r = opt_empty ? 0 : take_key(t, c, path, line, name, value, err, errlen);
			if (r < 0)
				goto out;
		}
	}
	if (ferror(f)) {
		r = errno ? -errno : -EIO;
		seterr(err, errlen, "cannot read %s: %s", path, strerror(-r));
	}
out:
	if (buf)
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

int creds_load(const char *file, const char *profile, struct s3_creds *ret, char *err,
	       size_t errlen)
{
	char iobuf[BUFSIZ], path[PATH_MAX];
	struct s3_creds c;
	struct target t = {0};
	bool file_named, profile_named;
	FILE *f = NULL;
	int r;

	memset(&c, 0, sizeof(c));
	seterr(err, errlen, "%s", "");

	if (set(getenv("AWS_ACCESS_KEY_ID")) || set(getenv("AWS_SECRET_ACCESS_KEY"))) {
		r = from_env(&c, err, errlen);
		goto out;
	}

	/* Which profile. */
	profile_named = true;
	if (!profile)
		profile = getenv("AWS_PROFILE");
	if (!set(profile)) {
		profile = "default";
		profile_named = false;
	}
	t.profile = profile;

	/* Which file. */
	file_named = true;
	if (!file)
		file = getenv("AWS_SHARED_CREDENTIALS_FILE");
	if (!set(file)) {
		file = "~/.aws/credentials";
		file_named = false;
		if (!set(getenv("HOME"))) {
			/* No home, no default file. */
			if (profile_named) {
				seterr(err, errlen,
				       "profile '%s' not found: HOME is not set, so there is no "
				       "~/.aws/credentials",
				       profile);
				r = -ENOENT;
			} else {
				r = 0;
			}
			goto out;
		}
	}
	r = expand_home(file, path, sizeof(path));
	if (r < 0) {
		seterr(err, errlen, "credentials file path is too long");
		goto out;
	}

	f = fopen(path, "re");
	if (!f) {
		r = -errno;
		if (r == -ENOENT && !file_named && !profile_named) {
			r = 0; /* the default file, not there: anonymous */
		} else if (r == -ENOENT && !file_named) {
			seterr(err, errlen, "profile '%s' not found: %s does not exist", profile,
			       path);
		} else {
			seterr(err, errlen, "cannot open credentials file %s: %s", path,
			       strerror(-r));
		}
		goto out;
	}
	setvbuf(f, iobuf, _IOFBF, sizeof(iobuf));
	r = parse(f, path, &t, &c, err, errlen);
	if (r < 0)
		goto out;
	if (!t.found) {
		if (profile_named) {
			seterr(err, errlen, "profile '%s' not found in %s", profile, path);
			r = -ENOENT;
		}
		memset(&c, 0, sizeof(c));
		goto out;
	}
	if (c.access_key[0] && !c.secret_key[0]) {
		seterr(err, errlen,
		       "profile '%s' in %s has aws_access_key_id but no "
		       "aws_secret_access_key",
		       profile, path);
		r = -EINVAL;
	} else if (!c.access_key[0] && c.secret_key[0]) {
		seterr(err, errlen,
		       "profile '%s' in %s has aws_secret_access_key but no "
		       "aws_access_key_id",
		       profile, path);
		r = -EINVAL;
	} else if (!c.access_key[0] && profile_named) {
		seterr(err, errlen,
		       "profile '%s' in %s has no aws_access_key_id (only static "
		       "keys are supported)",
		       profile, path);
		r = -EINVAL;
	} else if (!c.access_key[0]) {
		memset(&c, 0, sizeof(c)); /* an empty [default]: anonymous */
	}
out:
	if (f)
		fclose(f);
	explicit_bzero(iobuf, sizeof(iobuf));
	if (r == 0)
		memcpy(ret, &c, sizeof(c));
	explicit_bzero(&c, sizeof(c));
	return r;
}
