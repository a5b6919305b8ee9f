/*
 * test_creds.c - creds_load() against real files in a temporary HOME.
 *
 * Each test starts from a clean slate: every AWS_* variable unset and HOME pointing at a fresh
 * temporary directory (removed afterwards). Secrets in the fixtures all contain "S3KR1T" and
 * tokens "T0KEN", so that any error message can be checked not to contain one.
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

#include "creds.h"

struct env {
	char home[256];
	char files[8][PATH_MAX]; /* written by put(), removed at teardown */
	int nfiles;
};

static const char *const vars[] = {"AWS_ACCESS_KEY_ID",		  "AWS_SECRET_ACCESS_KEY",
				   "AWS_SESSION_TOKEN",		  "AWS_PROFILE",
				   "AWS_SHARED_CREDENTIALS_FILE", "AWS_SECURITY_TOKEN"};

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	snprintf(e->home, sizeof(e->home), "/tmp/tierfs-creds-XXXXXX");
	assert_non_null(mkdtemp(e->home));
	setenv("HOME", e->home, 1);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;
	char p[PATH_MAX + 16];

	for (int i = e->nfiles - 1; i >= 0; i--)
		unlink(e->files[i]);
	snprintf(p, sizeof(p), "%s/.aws", e->home);
	rmdir(p);
	rmdir(e->home);
	free(e);
	return 0;
}

/* Write @content to @rel under HOME; @return its path (owned by @e). */
static const char *put(struct env *e, const char *rel, const char *content)
{
	char tmp[PATH_MAX], *path;
	FILE *f;

	assert_true(e->nfiles < 8);
	snprintf(tmp, sizeof(tmp), "%s/%s", e->home, rel);
	path = e->files[e->nfiles++];
	memcpy(path, tmp, sizeof(tmp));
	if (strncmp(rel, ".aws/", 5) == 0) {
		char dir[PATH_MAX];

		snprintf(dir, sizeof(dir), "%s/.aws", e->home);
		mkdir(dir, 0700);
	}
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
	return path;
}

static const char two_profiles[] = "[default]\n"
				   "aws_access_key_id = AKIDDEFAULT\n"
				   "aws_secret_access_key = S3KR1Tdefault/abc+def\n"
				   "\n"
				   "[work]\n"
				   "aws_access_key_id = AKIDWORK\n"
				   "aws_secret_access_key = S3KR1Twork==\n"
				   "aws_session_token = T0KENwork/x+y=\n";

static void assert_no_secret(const char *err)
{
	assert_null(strstr(err, "S3KR1T"));
	assert_null(strstr(err, "T0KEN"));
}

static void assert_anonymous(const struct s3_creds *c)
{
	assert_string_equal(c->access_key, "");
	assert_string_equal(c->secret_key, "");
	assert_string_equal(c->session_token, "");
}

/* creds_load that must fail with @want; checks *ret and the message. @return the message. */
static const char *load_fail(const char *file, const char *profile, int want)
{
	static char err[512];
	struct s3_creds c;

	memset(&c, 'x', sizeof(c));
	c.access_key[0] = 'U';
	err[0] = '\0';
	assert_int_equal(creds_load(file, profile, &c, err, sizeof(err)), want);
	assert_int_equal(c.access_key[0], 'U'); /* not written on failure */
	assert_true(err[0] != '\0');
	assert_no_secret(err);
	return err;
}

static void test_env_overrides_file(void **state)
{
	struct env *e = *state;
	struct s3_creds c;
	char err[256];

	put(e, ".aws/credentials", two_profiles);
	setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "S3KR1Tenv", 1);
	setenv("AWS_PROFILE", "work", 1);
	assert_int_equal(creds_load(NULL, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDENV");
	assert_string_equal(c.secret_key, "S3KR1Tenv");
	assert_string_equal(c.session_token, "");
	assert_string_equal(err, "");

	setenv("AWS_SESSION_TOKEN", "T0KENenv", 1);
	assert_int_equal(creds_load(NULL, "work", &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDENV");
	assert_string_equal(c.session_token, "T0KENenv");
}

static void test_env_partial(void **state)
{
	const char *err;

	(void)state;
	setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
	err = load_fail(NULL, NULL, -EINVAL);
	assert_non_null(strstr(err, "AWS_SECRET_ACCESS_KEY"));
	unsetenv("AWS_ACCESS_KEY_ID");
	setenv("AWS_SECRET_ACCESS_KEY", "S3KR1Tenv", 1);
	err = load_fail(NULL, NULL, -EINVAL);
	assert_non_null(strstr(err, "AWS_ACCESS_KEY_ID"));
}

static void test_env_too_long(void **state)
{
	char big[200];

	(void)state;
	memset(big, 'S', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memcpy(big, "S3KR1T", 6);
	setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
	setenv("AWS_SECRET_ACCESS_KEY", big, 1);
	load_fail(NULL, NULL, -ENAMETOOLONG);
}

static void test_profile_selection(void **state)
{
	struct env *e = *state;
	struct s3_creds c;
	char err[256];
	const char *path = put(e, ".aws/credentials", two_profiles);

	/* Default file, default profile. */
	assert_int_equal(creds_load(NULL, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDDEFAULT");
	assert_string_equal(c.secret_key, "S3KR1Tdefault/abc+def");
	assert_string_equal(c.session_token, "");

	/* By argument. */
	assert_int_equal(creds_load(NULL, "work", &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDWORK");
	assert_string_equal(c.secret_key, "S3KR1Twork==");
	assert_string_equal(c.session_token, "T0KENwork/x+y=");

	/* By environment; the argument wins over it. */
	setenv("AWS_PROFILE", "work", 1);
	assert_int_equal(creds_load(NULL, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDWORK");
	assert_int_equal(creds_load(path, "default", &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDDEFAULT");
	/* An empty AWS_PROFILE is no choice at all. */
	setenv("AWS_PROFILE", "", 1);
	assert_int_equal(creds_load(NULL, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDDEFAULT");
}

static void test_file_selection(void **state)
{
	struct env *e = *state;
	struct s3_creds c;
	char err[256];
	const char *a, *b;

	put(e, ".aws/credentials",
	    "[default]\naws_access_key_id=AKIDHOME\n"
	    "aws_secret_access_key=S3KR1Thome\n");
	a = put(e, "a.ini", "[default]\naws_access_key_id=AKIDA\naws_secret_access_key=S3KR1Ta\n");
	b = put(e, "b.ini", "[default]\naws_access_key_id=AKIDB\naws_secret_access_key=S3KR1Tb\n");

	setenv("AWS_SHARED_CREDENTIALS_FILE", a, 1);
	assert_int_equal(creds_load(NULL, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDA");
	assert_int_equal(creds_load(b, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDB");
	/* "~/" is the home directory, as the AWS CLI reads it. */
	setenv("AWS_SHARED_CREDENTIALS_FILE", "~/b.ini", 1);
	assert_int_equal(creds_load(NULL, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDB");
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	assert_int_equal(creds_load(NULL, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDHOME");
}

static void test_missing_default_is_anonymous(void **state)
{
	struct env *e = *state;
	struct s3_creds c;
	char err[256];

	(void)e;
	memset(&c, 'x', sizeof(c));
	assert_int_equal(creds_load(NULL, NULL, &c, err, sizeof(err)), 0);
	assert_anonymous(&c);
	assert_string_equal(err, "");

	/* No HOME at all: no default file either. */
	unsetenv("HOME");
	memset(&c, 'x', sizeof(c));
	assert_int_equal(creds_load(NULL, NULL, &c, err, sizeof(err)), 0);
	assert_anonymous(&c);
	setenv("HOME", e->home, 1);

	/* A file without [default], profile not named: anonymous too. */
	put(e, ".aws/credentials",
	    "[other]\naws_access_key_id=AKIDO\naws_secret_access_key=S3KR1To\n");
	memset(&c, 'x', sizeof(c));
	assert_int_equal(creds_load(NULL, NULL, &c, err, sizeof(err)), 0);
	assert_anonymous(&c);

	/* [default] with settings but no keys: anonymous. */
	put(e, ".aws/credentials", "[default]\nregion = eu-west-1\n");
	assert_int_equal(creds_load(NULL, NULL, &c, err, sizeof(err)), 0);
	assert_anonymous(&c);
}

static void test_missing_named_file(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 16];
	const char *err;

	snprintf(path, sizeof(path), "%s/nope.ini", e->home);
	err = load_fail(path, NULL, -ENOENT);
	assert_non_null(strstr(err, path));
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	err = load_fail(NULL, NULL, -ENOENT);
	assert_non_null(strstr(err, path));
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");

	/* A named profile needs a file, even the default one. */
	err = load_fail(NULL, "work", -ENOENT);
	assert_non_null(strstr(err, "work"));
	unsetenv("HOME");
	err = load_fail(NULL, "work", -ENOENT);
	assert_non_null(strstr(err, "work"));
	setenv("HOME", e->home, 1);
}

static void test_missing_named_profile(void **state)
{
	struct env *e = *state;
	const char *path = put(e, ".aws/credentials", two_profiles);
	const char *err;

	err = load_fail(NULL, "prod", -ENOENT);
	assert_non_null(strstr(err, "prod"));
	assert_non_null(strstr(err, path));
	setenv("AWS_PROFILE", "prod", 1);
	err = load_fail(NULL, NULL, -ENOENT);
	assert_non_null(strstr(err, "prod"));
}

static void test_key_without_secret(void **state)
{
	struct env *e = *state;
	const char *path, *err;

	path = put(e, "k.ini",
		   "[default]\naws_access_key_id = AKIDONLY\n"
		   "[other]\naws_secret_access_key = S3KR1Telsewhere\n");
	err = load_fail(path, NULL, -EINVAL);
	assert_non_null(strstr(err, "aws_secret_access_key"));
	assert_non_null(strstr(err, "default"));
	assert_non_null(strstr(err, path));

	path = put(e, "s.ini", "[default]\naws_secret_access_key = S3KR1Tonly\n");
	err = load_fail(path, NULL, -EINVAL);
	assert_non_null(strstr(err, "aws_access_key_id"));

	/* An empty value is no value. */
	path = put(e, "e.ini", "[default]\naws_access_key_id = AKID\naws_secret_access_key =\n");
	load_fail(path, NULL, -EINVAL);

	/* A profile named on purpose that has no keys at all. */
	path = put(e, "n.ini", "[sso]\nsso_start_url = https://example.awsapps.com/start\n");
	err = load_fail(path, "sso", -EINVAL);
	assert_non_null(strstr(err, "sso"));
}

static void test_comments_and_whitespace(void **state)
{
	struct env *e = *state;
	struct s3_creds c;
	char err[256];
	const char *path = put(e, "c.ini",
			       "# leading comment\n"
			       "; another = comment [default]\n"
			       "\n"
			       "[other]\n"
			       "aws_access_key_id=AKIDOTHER\n"
			       "aws_secret_access_key=S3KR1Tother\n"
			       "   \t\n"
			       "[ work ] ; the work account\r\n"
			       "  # indented comment\r\n"
			       "\tAWS_Access_Key_ID   =\t AKIDWORK  \r\n"
			       "aws_secret_access_key:S3KR1T/with=equals;and#hash  \r\n"
			       "s3 =\r\n"
			       "    max_concurrent_requests = 20\r\n"
			       "    aws_access_key_id = nested-is-not-ours\r\n"
			       "region = eu-west-1\r\n"
			       "aws_security_token = T0KENlegacy\r\n"
			       "\n"
			       "[default]\n"
			       "aws_access_key_id = AKIDDEFAULT\n"
			       "aws_secret_access_key = S3KR1Tdefault\n");

	(void)e;
	assert_int_equal(creds_load(path, "work", &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDWORK");
	assert_string_equal(c.secret_key, "S3KR1T/with=equals;and#hash");
	assert_string_equal(c.session_token, "T0KENlegacy");
	assert_int_equal(creds_load(path, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDDEFAULT");
	assert_int_equal(creds_load(path, "other", &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIDOTHER");

	/* aws_session_token wins over the legacy name, in either order. */
	path = put(e, "t.ini",
		   "[default]\naws_session_token = T0KENnew\naws_access_key_id = A\n"
		   "aws_secret_access_key = S3KR1Ts\naws_security_token = T0KENold\n");
	assert_int_equal(creds_load(path, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.session_token, "T0KENnew");
}

static void test_malformed(void **state)
{
	struct env *e = *state;
	const char *path, *err;

	path = put(e, "m1.ini", "[default]\naws_access_key_id = A\njust some words\n");
	err = load_fail(path, NULL, -EINVAL);
	assert_non_null(strstr(err, ":3:"));
	assert_non_null(strstr(err, path));

	path = put(e, "m2.ini", "aws_access_key_id = A\n[default]\n");
	err = load_fail(path, NULL, -EINVAL);
	assert_non_null(strstr(err, ":1:"));

	path = put(e, "m3.ini", "[default\naws_access_key_id = A\n");
	load_fail(path, NULL, -EINVAL);

	path = put(e, "m4.ini", "[]\n");
	load_fail(path, NULL, -EINVAL);

	path = put(e, "m8.ini", "[default] junk\n");
	load_fail(path, NULL, -EINVAL);

	/* Broken lines elsewhere in the file break it, as for the AWS CLI. */
	path = put(e, "m5.ini",
		   "[default]\naws_access_key_id=A\naws_secret_access_key=S3KR1Tx\n"
		   "[other]\nS3KR1Tgarbage\n");
	err = load_fail(path, NULL, -EINVAL);
	assert_non_null(strstr(err, ":5:"));

	path = put(e, "m6.ini",
		   "[default]\naws_access_key_id=A\naws_access_key_id=B\n"
		   "aws_secret_access_key=S3KR1Tx\n");
	err = load_fail(path, NULL, -EINVAL);
	assert_non_null(strstr(err, "twice"));

	/* A secret continued on an indented line is not something we guess at. */
	path = put(e, "m7.ini",
		   "[default]\naws_access_key_id=A\naws_secret_access_key=S3KR1Tx\n"
		   "    S3KR1Tcontinued\n");
	load_fail(path, NULL, -EINVAL);
}

static void test_too_long(void **state)
{
	struct env *e = *state;
	char content[6000], key[200];
	const char *path;

	memset(key, 'K', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	snprintf(content, sizeof(content),
		 "[default]\naws_access_key_id = %s\naws_secret_access_key = S3KR1Tx\n", key);
	path = put(e, "l1.ini", content);
	load_fail(path, NULL, -ENAMETOOLONG);

	memset(content, 0, sizeof(content));
	strcpy(content, "[default]\naws_access_key_id = A\naws_secret_access_key = S3KR1Tx\n"
			"aws_session_token = T0KEN");
	memset(content + strlen(content), 't', 4200);
	strcat(content, "\n");
	path = put(e, "l2.ini", content);
	load_fail(path, NULL, -ENAMETOOLONG);
}

static void test_not_a_file(void **state)
{
	struct env *e = *state;

	load_fail(e->home, NULL, -EISDIR);
}

static void test_null_err(void **state)
{
	struct env *e = *state;
	struct s3_creds c;
	char path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/nope.ini", e->home);
	assert_int_equal(creds_load(path, NULL, &c, NULL, 0), -ENOENT);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_env_overrides_file), T(test_env_partial),
	    T(test_env_too_long),	T(test_profile_selection),
	    T(test_file_selection),	T(test_missing_default_is_anonymous),
	    T(test_missing_named_file), T(test_missing_named_profile),
	    T(test_key_without_secret), T(test_comments_and_whitespace),
	    T(test_malformed),		T(test_too_long),
	    T(test_not_a_file),		T(test_null_err),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
