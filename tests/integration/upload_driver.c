/*
 * upload_driver.c - drives backend/'s write interface without FUSE, for
 * tests/integration/test_upload_backend.py.
 *
 *   upload_driver [--endpoint=URL] [--region=R] [--path-style] [--retries=N] [--timeout=S]
 *                 [--max-conns=N] [--read-only] URL 'CMD ARGS' ['CMD ARGS' ...]
 *
 * Each command prints one line, "CMD ok key=value..." or "CMD err=-N NAME", and the driver
 * exits 0 once all ran (2 for a usage error). Credentials come from the environment, as the
 * mount's do. Object bytes are SHAKE256(seed) cut to the size, which the test computes too
 * (hashlib.shake_256), so nothing big crosses the pipe.
 *
 *   put PATH SIZE SEED [part=BYTES] [inflight=N] [overwrite] [abort=K] [probe] [bg]
 *       upload: parts of part= bytes (default 8 MiB), at most inflight= in flight (the
 *       driver waits for a done before handing over more, as fs/ would); abort=K: abort
 *       after K parts instead of committing; probe: once inflight parts are out, hand over
 *       one more and report what the backend said (it must be -EAGAIN). Prints the commit's
 *       size, etag and mtime, and "parts_failed=" the number of parts whose done failed.
 *       stop: with the parts handed over, stop the backend (what is in flight ends with
 *       -ESHUTDOWN), then abort; stop-after-commit: commit, then stop at once (the commit's
 *       done must still come). Both only as the last command.
 *       pause: once every part is done, print "put paused" and wait for a line on
 *       stdin before committing (the test looks at the store meanwhile).
 *   read PATH SIZE SEED    read the object back through backend_read, compare
 *   list DIR               backend_list: "list NAME..." ('/' after a directory)
 *   stat PATH              backend_stat: size, etag, mtime
 *   unlink PATH | mkdir PATH | rmdir PATH | rename FROM TO [overwrite]
 *   stats                  every counter of backend_get_stats
 *   wait-stat NAME N       until counter NAME >= N (10 s at most)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "backend.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

/* What the callbacks report, under lock. */
struct waiter {
	unsigned in_flight; /* parts handed over, done not run */
	unsigned failed;    /* parts whose done got an error */
	int first_err;
	bool done; /* the commit's (or a metadata call's) done ran */
	int err;
	struct bk_meta meta;
};

static void part_done(void *arg, int err)
{
	struct waiter *w = arg;

	pthread_mutex_lock(&lock);
	w->in_flight--;
	if (err) {
		w->failed++;
		if (!w->first_err)
			w->first_err = err;
	}
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
}

static void commit_done(void *arg, int err, const struct bk_meta *meta)
{
	struct waiter *w = arg;

	pthread_mutex_lock(&lock);
	w->done = true;
	w->err = err;
	if (meta)
		w->meta = *meta;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
}

static void simple_done(void *arg, int err)
{
	commit_done(arg, err, NULL);
}

/* Wait until @pred holds for @w (under lock). */
static void wait_for(struct waiter *w, bool (*pred)(const struct waiter *, unsigned), unsigned n)
{
	pthread_mutex_lock(&lock);
	while (!pred(w, n))
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
}

static bool below(const struct waiter *w, unsigned n)
{
	return w->in_flight < n;
}

static bool is_done(const struct waiter *w, unsigned n)
{
	return w->done;
}

static unsigned char *object_bytes(const char *seed, size_t size)
{
	unsigned char *buf = malloc(size ? size : 1);
	EVP_MD_CTX *c = EVP_MD_CTX_new();

	if (!buf || !c || !EVP_DigestInit_ex(c, EVP_shake256(), NULL) ||
	    !EVP_DigestUpdate(c, seed, strlen(seed)) ||
	    (size && !EVP_DigestFinalXOF(c, buf, size))) {
		fprintf(stderr, "upload_driver: cannot make %zu bytes\n", size);
		exit(2);
	}
	EVP_MD_CTX_free(c);
	return buf;
}

static void print_err(const char *cmd, int e)
{
	printf("%s err=%d %s\n", cmd, e, strerrorname_np(-e) ? strerrorname_np(-e) : "?");
}

static uint64_t size_arg(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 10);

	if (*end == 'K')
		v <<= 10;
	else if (*end == 'M')
		v <<= 20;
	return v;
}

struct put_args {
	struct bk_upload_cfg cfg;
	long abort_after; /* -1: commit */
	bool probe;
	bool pause;
	int stop; /* 1: stop, then abort; 2: commit, then stop */
};

static void parse_put_opts(char **tok, int n, struct put_args *a)
{
	a->abort_after = -1;
	for (int i = 0; i < n; i++) {
		if (!strncmp(tok[i], "part=", 5))
			a->cfg.part_size = size_arg(tok[i] + 5);
		else if (!strncmp(tok[i], "inflight=", 9))
			a->cfg.max_parts_in_flight = (unsigned)atoi(tok[i] + 9);
		else if (!strcmp(tok[i], "overwrite"))
			a->cfg.overwrite = true;
		else if (!strncmp(tok[i], "abort=", 6))
			a->abort_after = atol(tok[i] + 6);
		else if (!strcmp(tok[i], "probe"))
			a->probe = true;
		else if (!strcmp(tok[i], "bg"))
			a->cfg.prio = BK_BACKGROUND;
		else if (!strcmp(tok[i], "pause"))
			a->pause = true;
		else if (!strcmp(tok[i], "stop"))
			a->stop = 1;
		else if (!strcmp(tok[i], "stop-after-commit"))
			a->stop = 2;
	}
}

/* Hand the parts over, at most max in flight. @return how many were handed, or -errno. */
static long hand_parts(struct bk_upload *u, const unsigned char *buf, size_t size,
		       const struct put_args *a, struct waiter *w)
{
	uint64_t part = a->cfg.part_size ? a->cfg.part_size : BK_PART_SIZE_DEFAULT;
	unsigned max =
	    a->cfg.max_parts_in_flight ? a->cfg.max_parts_in_flight : BK_IN_FLIGHT_DEFAULT;
	bool probed = false;
	long n = 0;

	for (size_t off = 0; off < size && (a->abort_after < 0 || n < a->abort_after); n++) {
		size_t len = size - off < part ? size - off : part;
		int e;

		pthread_mutex_lock(&lock);
		bool full = w->in_flight == max;
		pthread_mutex_unlock(&lock);
		if (a->probe && !probed && full) {
			e = backend_upload_part(u, buf + off, len, part_done, w);
			printf("probe %s\n", e == -EAGAIN ? "EAGAIN" : "accepted");
			probed = true;
			if (e == 0)
				return -EPROTO;
		}
		wait_for(w, below, max);
		pthread_mutex_lock(&lock);
		w->in_flight++;
		pthread_mutex_unlock(&lock);
		e = backend_upload_part(u, buf + off, len, part_done, w);
		if (e < 0) {
			pthread_mutex_lock(&lock);
			w->in_flight--;
			pthread_mutex_unlock(&lock);
			return e;
		}
		off += len;
	}
	return n;
}

static void cmd_put(struct backend *b, char **tok, int n)
{
	struct put_args a = {0};
	struct waiter w = {0};
	struct bk_upload *u;
	size_t size;
	unsigned char *buf;
	long parts;
	int e;

	if (n < 4) {
		fprintf(stderr, "put PATH SIZE SEED [opts]\n");
		exit(2);
	}
	size = size_arg(tok[2]);
	parse_put_opts(tok + 4, n - 4, &a);
	buf = object_bytes(tok[3], size);
	e = backend_upload_new(b, tok[1], &a.cfg, &u);
	if (e < 0) {
		print_err("put", e);
		free(buf);
		return;
	}
	parts = hand_parts(u, buf, size, &a, &w);
	if (parts >= 0 && a.stop == 1) {
		backend_stop(b);
		backend_upload_abort(u); /* the loop has stopped: ends here */
		wait_for(&w, below, 1);
		printf("put stopped parts=%ld parts_failed=%u\n", parts, w.failed);
		free(buf);
		return;
	}
	if (parts < 0 || a.abort_after >= 0) {
		backend_upload_abort(u);
		wait_for(&w, below, 1);
		if (parts < 0)
			print_err("put", (int)parts);
		else
			printf("put aborted parts=%ld parts_failed=%u\n", parts, w.failed);
		free(buf);
		return;
	}
	if (a.pause) {
		char line[64];

		/* every part's done has run, but a first part s3 holds back */
		wait_for(&w, below, !strcmp(backend_scheme(b), "s3") && parts == 1 ? 2 : 1);
		printf("put paused\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			exit(2);
	}
	e = backend_upload_commit(u, commit_done, &w);
	if (e == 0 && a.stop == 2)
		backend_stop(b);
	if (e < 0) {
		backend_upload_abort(u);
		wait_for(&w, below, 1);
		print_err("put", e);
	} else {
		wait_for(&w, is_done, 0);
		if (w.in_flight)
			printf("put BUG: commit done before %u parts\n", w.in_flight);
		if (w.err)
			printf("put err=%d %s parts_failed=%u\n", w.err, strerrorname_np(-w.err),
			       w.failed);
		else
			printf("put ok size=%llu etag=%s mtime=%lld parts=%ld parts_failed=%u\n",
			       (unsigned long long)w.meta.size, w.meta.etag,
			       (long long)w.meta.mtime, parts, w.failed);
	}
	free(buf);
}

static void read_done(void *arg, int err)
{
	struct waiter *w = arg;

	commit_done(w, err, NULL);
}

static void cmd_read(struct backend *b, char **tok, int n)
{
	struct bk_meta m;
	size_t size, chunk = 4u << 20;
	unsigned char *want, *got;
	int e;

	if (n < 4) {
		fprintf(stderr, "read PATH SIZE SEED\n");
		exit(2);
	}
	size = size_arg(tok[2]);
	e = backend_stat(b, tok[1], &m);
	if (e == 0 && m.size != size)
		e = -EMSGSIZE;
	if (e < 0) {
		print_err("read", e);
		return;
	}
	want = object_bytes(tok[3], size);
	got = malloc(size ? size : 1);
	for (size_t off = 0; e == 0 && off < size; off += chunk) {
		struct waiter w = {0};
		uint32_t len = (uint32_t)(size - off < chunk ? size - off : chunk);

		e = backend_read(b, tok[1], m.etag, off, len, got + off, BK_URGENT, read_done, &w);
		if (e == 0) {
			wait_for(&w, is_done, 0);
			e = w.err;
		}
	}
	if (e < 0)
		print_err("read", e);
	else
		printf("read %s\n", memcmp(want, got, size) == 0 ? "match" : "MISMATCH");
	free(want);
	free(got);
}

static void cmd_stat(struct backend *b, char **tok, int n)
{
	struct bk_meta m;
	int e = n < 2 ? -EINVAL : backend_stat(b, tok[1], &m);

	if (e < 0)
		print_err("stat", e);
	else
		printf("stat ok size=%llu etag=%s mtime=%lld\n", (unsigned long long)m.size, m.etag,
		       (long long)m.mtime);
}

static int list_one(void *arg, const char *name, bool is_dir, const struct bk_meta *meta)
{
	printf(" %s%s", name, is_dir ? "/" : "");
	return 0;
}

static void cmd_list(struct backend *b, char **tok, int n)
{
	int e;

	printf("list");
	e = backend_list(b, n > 1 ? tok[1] : "", list_one, NULL);
	printf("\n");
	if (e < 0)
		print_err("list", e);
}

static void cmd_meta(struct backend *b, char **tok, int n)
{
	struct waiter w = {0};
	int e = -EINVAL;

	if (!strcmp(tok[0], "unlink") && n >= 2)
		e = backend_unlink_async(b, tok[1], simple_done, &w);
	else if (!strcmp(tok[0], "mkdir") && n >= 2)
		e = backend_mkdir_async(b, tok[1], simple_done, &w);
	else if (!strcmp(tok[0], "rmdir") && n >= 2)
		e = backend_rmdir_async(b, tok[1], simple_done, &w);
	else if (!strcmp(tok[0], "rename") && n >= 3)
		e = backend_rename_async(b, tok[1], tok[2], n > 3 && !strcmp(tok[3], "overwrite"),
					 simple_done, &w);
	if (e == 0) {
		wait_for(&w, is_done, 0);
		e = w.err;
	}
	if (e < 0)
		print_err(tok[0], e);
	else
		printf("%s ok\n", tok[0]);
}

#define STATS(X)                                                                                   \
	X(requests)                                                                                \
	X(retries) X(errors) X(uploads_started) X(uploads_completed) X(uploads_failed)             \
	    X(uploads_aborted) X(abort_errors) X(parts) X(bytes_up) X(upload_retries)              \
		X(tmp_removed)

static uint64_t stat_named(struct backend *b, const char *name)
{
	struct bk_stats s;

	backend_get_stats(b, &s);
#define X(f)                                                                                       \
	if (!strcmp(name, #f))                                                                     \
		return s.f;
	STATS(X)
#undef X
	fprintf(stderr, "no counter %s\n", name);
	exit(2);
}

static void cmd_stats(struct backend *b, char **tok, int n)
{
	struct bk_stats s;

	if (!strcmp(tok[0], "wait-stat") && n >= 3) {
		uint64_t want = strtoull(tok[2], NULL, 10);

		for (int i = 0; i < 1000 && stat_named(b, tok[1]) < want; i++)
			usleep(10000);
		printf("wait-stat %s=%llu\n", tok[1], (unsigned long long)stat_named(b, tok[1]));
		return;
	}
	backend_get_stats(b, &s);
	printf("stats");
#define X(f) printf(" " #f "=%llu", (unsigned long long)s.f);
	STATS(X)
#undef X
	printf("\n");
}

static void run(struct backend *b, char *line)
{
	char *tok[16], *save = NULL;
	int n = 0;

	for (char *t = strtok_r(line, " ", &save); t && n < 16; t = strtok_r(NULL, " ", &save))
		tok[n++] = t;
	if (!n)
		return;
	if (!strcmp(tok[0], "put"))
		cmd_put(b, tok, n);
	else if (!strcmp(tok[0], "read"))
		cmd_read(b, tok, n);
	else if (!strcmp(tok[0], "stat"))
		cmd_stat(b, tok, n);
	else if (!strcmp(tok[0], "list"))
		cmd_list(b, tok, n);
	else if (!strcmp(tok[0], "stats") || !strcmp(tok[0], "wait-stat"))
		cmd_stats(b, tok, n);
	else
		cmd_meta(b, tok, n);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct backend_cfg cfg = {.max_conns = 8, .timeout_s = 10, .retries = 3, .writable = true};
	struct backend *b;
	char err[512];
	int i = 1, e;

	for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
		const char *a = argv[i], *v = strchr(a, '=');

		v = v ? v + 1 : "";
		if (!strncmp(a, "--endpoint=", 11))
			cfg.endpoint = v;
		else if (!strncmp(a, "--region=", 9))
			cfg.region = v;
		else if (!strcmp(a, "--path-style"))
			cfg.path_style = true;
		else if (!strncmp(a, "--retries=", 10))
			cfg.retries = (unsigned)atoi(v);
		else if (!strncmp(a, "--timeout=", 10))
			cfg.timeout_s = (unsigned)atoi(v);
		else if (!strncmp(a, "--max-conns=", 12))
			cfg.max_conns = (unsigned)atoi(v);
		else if (!strcmp(a, "--read-only"))
			cfg.writable = false;
	}
	if (i >= argc) {
		fprintf(stderr, "usage: upload_driver [--options] URL 'CMD ARGS'...\n");
		return 2;
	}
	cfg.url = argv[i++];
	e = backend_new(&cfg, &b, err, sizeof(err));
	if (e < 0 || (e = backend_start(b)) < 0) {
		fprintf(stderr, "upload_driver: %s: %s\n", cfg.url, e < 0 ? err : "");
		return 2;
	}
	printf("writable %s\n", backend_writable(b) ? "yes" : "no");
	for (; i < argc; i++)
		run(b, argv[i]);
	backend_free(b);
	return 0;
}
