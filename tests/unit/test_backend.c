/*
 * test_backend.c - what backend.c adds to every scheme: a listing's bounds.
 *
 * backend.c wraps every listing (backend_list, backend_list_async) in one counter: past
 * list_max_keys entries or list_max_bytes of names and ETags it stops the scheme and fails the
 * listing with -EFBIG, and logs one line. The bounds are BK_LIST_MAX_* unless backend_cfg
 * (or the environment, for the integration tests) says less, which is how these tests reach
 * them with a file:// store of a few entries in a directory under $TMPDIR:
 *
 *     store/  d0 .. d9   ten directories: an entry each, two bytes of name, no ETag
 *
 * The hostile store itself (an S3 listing that pages forever) is test_s3.py's.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
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

#include "backend.h"

#define NDIRS 10

struct seen {
	int n;            /* entries the caller's callback got */
	int stop_at;      /* return -ECANCELED at this entry; 0 = never */
	char log[512];    /* the last line logged */
	int nlog;
	/* asynchronous listings */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int err;
};

static char root[PATH_MAX];

static int count(void *arg, const char *name, bool is_dir, const struct bk_meta *meta)
{
	struct seen *s = arg;

	assert_true(is_dir);
	assert_int_equal(strlen(name), 2);
	if (++s->n == s->stop_at)
		return -ECANCELED;
	return 0;
}

static void on_done(void *arg, int err)
{
	struct seen *s = arg;

	pthread_mutex_lock(&s->lock);
	s->done = true;
	s->err = err;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static void on_log(void *arg, int level, const char *line)
{
	struct seen *s = arg;

	snprintf(s->log, sizeof(s->log), "%s", line);
	s->nlog++;
}

static int setup(void **state)
{
	char path[PATH_MAX + 8];
	const char *tmp = getenv("TMPDIR");

	snprintf(root, sizeof(root), "%s/tierfs-test-backend-XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(root))
		return -1;
	for (int i = 0; i < NDIRS; i++) {
		snprintf(path, sizeof(path), "%s/d%d", root, i);
		if (mkdir(path, 0755) < 0)
			return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	char path[PATH_MAX + 8];

	for (int i = 0; i < NDIRS; i++) {
		snprintf(path, sizeof(path), "%s/d%d", root, i);
		rmdir(path);
	}
	rmdir(root);
	return 0;
}

/* A started file:// backend on the store, with these bounds (0 = the defaults). */
static struct backend *open_store(struct seen *s, uint64_t max_keys, uint64_t max_bytes)
{
	char url[PATH_MAX + 16], err[256];
	struct backend *b = NULL;
	struct backend_cfg cfg = {.url = url, .max_conns = 2, .timeout_s = 5,
				  .list_max_keys = max_keys, .list_max_bytes = max_bytes,
				  .log = on_log, .log_arg = s};

	snprintf(url, sizeof(url), "file://%s", root);
	assert_int_equal(backend_new(&cfg, &b, err, sizeof(err)), 0);
	assert_int_equal(backend_start(b), 0);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	return b;
}

static int list_async(struct backend *b, struct seen *s)
{
	s->done = false;
	assert_int_equal(backend_list_async(b, "", count, on_done, s), 0);
	pthread_mutex_lock(&s->lock);
	while (!s->done)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	return s->err;
}

static void test_under_the_bounds(void **state)
{
	struct seen s = {0};
	struct backend *b = open_store(&s, 0, 0);

	assert_int_equal(backend_list(b, "", count, &s), 0);
	assert_int_equal(s.n, NDIRS);
	s.n = 0;
	assert_int_equal(list_async(b, &s), 0);
	assert_int_equal(s.n, NDIRS);
	assert_int_equal(s.nlog, 0);
	backend_free(b);

	/* exactly at the bounds is still a listing */
	s = (struct seen){0};
	b = open_store(&s, NDIRS, 2 * NDIRS);
	assert_int_equal(backend_list(b, "", count, &s), 0);
	assert_int_equal(list_async(b, &s), 0);
	assert_int_equal(s.n, 2 * NDIRS);
	assert_int_equal(s.nlog, 0);
	backend_free(b);
}

static void test_too_many_keys(void **state)
{
	struct seen s = {0};
	struct backend *b = open_store(&s, 4, 0);

	/* the fifth entry stops the listing: the caller saw four, and gets -EFBIG */
	assert_int_equal(backend_list(b, "", count, &s), -EFBIG);
	assert_int_equal(s.n, 4);
	assert_int_equal(s.nlog, 1);
	assert_string_equal(s.log, "list /: more than 4 entries: refused (EFBIG)");
	s.n = 0;
	assert_int_equal(list_async(b, &s), -EFBIG);
	assert_int_equal(s.n, 4);
	assert_int_equal(s.nlog, 2);
	backend_free(b);
}

static void test_too_many_bytes(void **state)
{
	struct seen s = {0};
	struct backend *b = open_store(&s, 0, 7);

	/* two bytes of name each: three entries fit in 7 bytes, the fourth does not */
	assert_int_equal(backend_list(b, "", count, &s), -EFBIG);
	assert_int_equal(s.n, 3);
	assert_string_equal(s.log, "list /: more than 7 bytes of names and ETags: refused (EFBIG)");
	s.n = 0;
	assert_int_equal(list_async(b, &s), -EFBIG);
	assert_int_equal(s.n, 3);
	backend_free(b);
}

static void test_callers_own_stop_passes_through(void **state)
{
	struct seen s = {.stop_at = 2};
	struct backend *b = open_store(&s, 4, 0);

	assert_int_equal(backend_list(b, "", count, &s), -ECANCELED);
	assert_int_equal(s.n, 2);
	s.n = 0;
	assert_int_equal(list_async(b, &s), -ECANCELED);
	assert_int_equal(s.nlog, 0);
	backend_free(b);
}

static void test_environment_lowers_never_raises(void **state)
{
	struct seen s = {0};
	struct backend *b;

	setenv("TIERFS_LIST_MAX_KEYS", "4", 1);
	b = open_store(&s, 0, 0);
	assert_int_equal(backend_list(b, "", count, &s), -EFBIG);
	assert_int_equal(s.n, 4);
	backend_free(b);

	/* more than BK_LIST_MAX_KEYS, or not a number: the default bound */
	for (int i = 0; i < 2; i++) {
		setenv("TIERFS_LIST_MAX_KEYS", i ? "4x" : "99999999999", 1);
		s = (struct seen){0};
		b = open_store(&s, 0, 0);
		assert_int_equal(backend_list(b, "", count, &s), 0);
		assert_int_equal(s.n, NDIRS);
		backend_free(b);
	}
	unsetenv("TIERFS_LIST_MAX_KEYS");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_under_the_bounds),
	    cmocka_unit_test(test_too_many_keys),
	    cmocka_unit_test(test_too_many_bytes),
	    cmocka_unit_test(test_callers_own_stop_passes_through),
	    cmocka_unit_test(test_environment_lowers_never_raises),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
