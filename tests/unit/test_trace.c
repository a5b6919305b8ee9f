/*
 * test_trace.c - unit tests for trace/: the file format (header, records, versions), the
 * writer (its ring, object records once per file, rotation, refusals) and the reader, driven
 * in a temporary directory with no thread (the tests drain the ring themselves) except where
 * a test is about the thread.
 *
 * Every read written is checked against what the reader gives back, field by field, under
 * random reads (a fixed seed; TIERFS_TRACE_SEED overrides it).
 */
#include <errno.h>
#include <fcntl.h>
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

#include "trace.h"
#include "trace_i.h"

static char dir[] = "/tmp/test_trace.XXXXXX";
static char path[256];

static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A random read of one of @nobj objects. */
static struct trace_read rand_read(uint64_t *s, unsigned nobj, uint64_t t)
{
	unsigned o = (unsigned)(mix(s) % nobj);

	return (struct trace_read){
	    .t_ns = t,
	    .obj = 1000 + o,
	    .ver = o * 7,
	    .stream = (uint32_t)mix(s),
	    .off = mix(s) % (1ULL << 40),
	    .len = (uint32_t)mix(s),
	    .lat_us = (uint32_t)mix(s),
	    .size = 4096 + o,
	    .mtime = 1700000000 - (int64_t)o,
	    .fetched = (uint32_t)mix(s),
	    .tier = (uint8_t)(mix(s) % TRACE_NTIERS),
	    .flags = (uint8_t)(mix(s) & 1),
	};
}

static void assert_same(const struct trace_read *a, const struct trace_read *b)
{
	assert_int_equal(a->t_ns, b->t_ns);
	assert_int_equal(a->obj, b->obj);
	assert_int_equal(a->ver, b->ver);
	assert_int_equal(a->stream, b->stream);
	assert_int_equal(a->off, b->off);
	assert_int_equal(a->len, b->len);
	assert_int_equal(a->lat_us, b->lat_us);
	assert_int_equal(a->size, b->size);
	assert_int_equal(a->mtime, b->mtime);
	assert_int_equal(a->fetched, b->fetched);
	assert_int_equal(a->tier, b->tier);
	assert_int_equal(a->flags, b->flags);
}

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/t", dir);
	return 0;
}

static int teardown(void **state)
{
	char cmd[300];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void clean(void)
{
	char p[300];

	unlink(path);
	for (int k = 1; k < 20; k++) {
		snprintf(p, sizeof(p), "%s.%d", path, k);
		unlink(p);
	}
}

static struct trace_writer *open_w(uint64_t max, unsigned keep, const uint8_t *salt)
{
	struct trace_wcfg wc = {.path = path,
				.max_size = max,
				.keep = keep,
				.block_size = 65536,
				.salt = salt,
				.start_wall_ns = 42,
				.ring = 64};
	struct trace_writer *w = NULL;

	assert_int_equal(trace_writer_open(&wc, &w), 0);
	return w;
}

static uint64_t file_size(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* The reads of file @p, into @ret (up to @max); their number. */
static size_t read_all(const char *p, struct trace_read *ret, size_t max, struct trace_hdr *hdr)
{
	struct trace_reader *r;
	char err[256];
	size_t n = 0;
	int e;

	assert_int_equal(trace_reader_open(p, &r, err, sizeof(err)), 0);
	if (hdr)
		*hdr = *trace_reader_hdr(r);
	while ((e = trace_reader_next(r, &ret[n < max ? n : max - 1], err, sizeof(err))) == 1)
		n++;
	assert_int_equal(e, 0);
	trace_reader_close(r);
	return n;
}

/* ---- the format ----------------------------------------------------------------------------- */

static void test_header_round_trip(void **state)
{
	struct trace_hdr h = {.id = 0x1122334455667788ULL,
			      .part = 7,
			      .block_size = 4 << 20,
			      .start_wall_ns = 1700000000123456789ULL},
			 g;
	uint8_t buf[TRACE_HDR_LEN];

	(void)state;
	for (int i = 0; i < TRACE_SALT_LEN; i++)
		h.salt[i] = (uint8_t)(i * 13);
	trace_put_hdr(buf, &h);
	assert_memory_equal(buf, "TIERFSTR\x01\x00", 10);
	assert_int_equal(trace_get_hdr(buf, &g), 0);
	assert_int_equal(g.id, h.id);
	assert_int_equal(g.part, 7);
	assert_int_equal(g.block_size, 4 << 20);
	assert_int_equal(g.start_wall_ns, h.start_wall_ns);
	assert_memory_equal(g.salt, h.salt, TRACE_SALT_LEN);
	assert_false(g.complete);
	assert_int_equal(buf[TRACE_HDR_FLAGS], 0);
	h.complete = true;
	trace_put_hdr(buf, &h);
	assert_int_equal(buf[TRACE_HDR_FLAGS], TRACE_HDR_COMPLETE);
	assert_int_equal(trace_get_hdr(buf, &g), 0);
	assert_true(g.complete);
	buf[8] = 2; /* another version */
	assert_int_equal(trace_get_hdr(buf, &g), -EPROTO);
	buf[0] = 'X';
	assert_int_equal(trace_get_hdr(buf, &g), -EBADMSG);
}

static void test_records_little_endian(void **state)
{
	struct trace_read r = {.t_ns = 0x0102030405060708ULL,
			       .off = 9,
			       .len = 10,
			       .lat_us = 11,
			       .fetched = 12,
			       .stream = 13,
			       .tier = TRACE_STORE,
			       .flags = 1},
			  g;
	uint8_t buf[TRACE_READ_LEN];
	uint32_t ref;

	(void)state;
	trace_put_read(buf, &r, 5);
	assert_int_equal(buf[0], 'R');
	assert_int_equal(buf[1], TRACE_STORE);
	assert_int_equal(buf[4], 5);
	assert_int_equal(buf[8], 0x08);
	assert_int_equal(buf[15], 0x01);
	trace_get_read(buf, &g, &ref);
	assert_int_equal(ref, 5);
	assert_int_equal(g.t_ns, r.t_ns);
	assert_int_equal(g.stream, 13);
}

static void test_tier_names(void **state)
{
	(void)state;
	for (unsigned t = 0; t < TRACE_NTIERS; t++)
		assert_int_equal(trace_tier_code(trace_tier_name(t)), t);
	assert_int_equal(trace_tier_code("nonesuch"), TRACE_NONE);
	assert_int_equal(trace_tier_code(NULL), TRACE_NONE);
	assert_string_equal(trace_tier_name(TRACE_NONE), "none");
	assert_null(trace_tier_name(TRACE_NTIERS));
}

/* SipHash-2-4's published test vector: key 00..0f, message 00..0e (15 bytes). */
static void test_siphash_vector(void **state)
{
	uint8_t key[16], msg[15];

	(void)state;
	for (int i = 0; i < 16; i++)
		key[i] = (uint8_t)i;
	for (int i = 0; i < 15; i++)
		msg[i] = (uint8_t)i;
	assert_int_equal(trace_hash(key, msg, 15), 0xa129ca6149be45e5ULL);
	assert_int_equal(trace_hash(key, msg, 0), 0x726fdb47dd0e0e31ULL);
}

/* Two salts name one key differently; one salt names it alike. */
static void test_salt(void **state)
{
	uint8_t a[16] = {1}, b[16] = {2};
	const char *key = "topic-0/00000000000000123456.log";

	(void)state;
	assert_int_equal(trace_hash(a, key, strlen(key)), trace_hash(a, key, strlen(key)));
	assert_true(trace_hash(a, key, strlen(key)) != trace_hash(b, key, strlen(key)));
}

/* ---- writing and reading -------------------------------------------------------------------- */

static void test_round_trip(void **state)
{
	uint64_t seed =
	    getenv("TIERFS_TRACE_SEED") ? strtoull(getenv("TIERFS_TRACE_SEED"), 0, 0) : 31;
	enum { N = 5000 };
	static struct trace_read want[N], got[N];
	struct trace_writer *w;
	struct trace_wstats ws;
	struct trace_hdr h;
	uint8_t salt[16] = "0123456789abcdef";

	(void)state;
	clean();
	w = open_w(1ULL << 30, 2, salt);
	assert_memory_equal(trace_writer_salt(w), salt, 16);
	for (size_t i = 0; i < N; i++) {
		want[i] = rand_read(&seed, 37, i * 1000);
		assert_true(trace_push(w, &want[i]));
		if (i % 50 == 49)
			assert_int_equal(trace_writer_flush(w), 0);
	}
	trace_writer_stats(w, &ws);
	/* read live, as the mount writes it: every read flushed so far, and not complete */
	assert_int_equal(read_all(path, got, N, &h), N);
	assert_false(h.complete);
	trace_writer_close(w);
	assert_int_equal(read_all(path, got, N, &h), N);
	assert_true(h.complete); /* closed: the header says so */
	for (size_t i = 0; i < N; i++)
		assert_same(&want[i], &got[i]);
	assert_int_equal(h.part, 0);
	assert_int_equal(h.block_size, 65536);
	assert_int_equal(h.start_wall_ns, 42);
	assert_memory_equal(h.salt, salt, 16);
	/* each of the 37 objects described once: 64 + 37 x 32 + N x 40 bytes */
	assert_int_equal(file_size(path), TRACE_HDR_LEN + 37 * TRACE_OBJ_LEN + N * TRACE_READ_LEN);
	assert_int_equal(ws.dropped, 0);
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
}

/* A ring of 64 cells takes 64 reads, then drops and counts; draining makes room. */
static void test_ring_full(void **state)
{
	uint64_t seed = 5;
	struct trace_writer *w;
	struct trace_read r = rand_read(&seed, 3, 0), got[200];

	(void)state;
	clean();
	w = open_w(1ULL << 30, 0, NULL);
	for (int i = 0; i < 64; i++)
		assert_true(trace_push(w, &r));
	assert_false(trace_push(w, &r));
	assert_int_equal(trace_writer_flush(w), 0);
	assert_true(trace_push(w, &r));
	trace_writer_close(w);
	assert_int_equal(read_all(path, got, 200, NULL), 65);
}

/* The writer's thread writes its buffer once half full or held through a second's drains, not
 * at every drain (docs/performance.md, the trace's cost); trace_writer_flush writes all;
 * the records are counted when drained, written or not. */
static void test_drain_batches(void **state)
{
	uint64_t seed = 7;
	struct trace_wcfg wc = {
	    .path = path, .max_size = 1ULL << 30, .block_size = 65536, .ring = 16384};
	struct trace_writer *w = NULL;
	struct trace_wstats ws;
	struct trace_read r;
	const uint64_t one = TRACE_HDR_LEN + TRACE_OBJ_LEN + 10 * TRACE_READ_LEN;
	const size_t below = (512 * 1024 - 1) / TRACE_READ_LEN; /* reads under half a MiB */

	(void)state;
	clean();
	assert_int_equal(trace_writer_open(&wc, &w), 0);
	r = rand_read(&seed, 1, 0);
	for (int i = 0; i < 10; i++)
		assert_true(trace_push(w, &r));
	/* the default 50 ms: the 20th drain with the buffer held writes it */
	for (int d = 1; d < 20; d++) {
		assert_int_equal(trace_writer_drain(w), 0);
		assert_int_equal(file_size(path), TRACE_HDR_LEN);
	}
	trace_writer_stats(w, &ws);
	assert_int_equal(ws.records, 10); /* counted when drained */
	assert_int_equal(trace_writer_drain(w), 0);
	assert_int_equal(file_size(path), one);
	/* just under half a MiB waits; reaching it is written by that drain */
	for (size_t i = 0; i < below; i++)
		assert_true(trace_push(w, &r));
	assert_int_equal(trace_writer_drain(w), 0);
	assert_int_equal(file_size(path), one);
	assert_true(trace_push(w, &r));
	assert_int_equal(trace_writer_drain(w), 0);
	assert_int_equal(file_size(path), one + (below + 1) * TRACE_READ_LEN);
	/* trace_writer_flush writes whatever is held */
	assert_true(trace_push(w, &r));
	assert_int_equal(trace_writer_drain(w), 0);
	assert_int_equal(file_size(path), one + (below + 1) * TRACE_READ_LEN);
	assert_int_equal(trace_writer_flush(w), 0);
	assert_int_equal(file_size(path), one + (below + 2) * TRACE_READ_LEN);
	trace_writer_close(w);
}

/* A full file becomes FILE.1, FILE.1 becomes FILE.2 ..., the oldest beyond keep goes; each
 * file is whole: a header of the next part, its objects described again. */
static void test_rotation(void **state)
{
	uint64_t seed = 9, max = TRACE_HDR_LEN + 100 * (TRACE_OBJ_LEN + TRACE_READ_LEN);
	enum { N = 2000 };
	static struct trace_read want[N], got[N];
	struct trace_writer *w;
	struct trace_wstats ws;
	char p[300];
	size_t seen = 0;
	unsigned parts = 0;

	(void)state;
	clean();
	w = open_w(max, 3, NULL);
	for (size_t i = 0; i < N; i++) {
		want[i] = rand_read(&seed, 5, i);
		assert_true(trace_push(w, &want[i]));
		if (i % 32 == 31)
			assert_int_equal(trace_writer_flush(w), 0);
	}
	trace_writer_stats(w, &ws);
	trace_writer_close(w);
	assert_true(ws.rotations >= 10);
	snprintf(p, sizeof(p), "%s.4", path);
	assert_int_equal(access(p, F_OK), -1); /* beyond keep */
	/* the newest reads are in FILE.3, FILE.2, FILE.1, FILE, in that order */
	for (int k = 3; k >= 0; k--) {
		struct trace_hdr h;
		size_t n;

		if (k)
			snprintf(p, sizeof(p), "%s.%d", path, k);
		else
			snprintf(p, sizeof(p), "%s", path);
		assert_true(file_size(p) <= max);
		n = read_all(p, got + seen, N - seen, &h);
		assert_int_equal(h.part, ws.rotations - (unsigned)k);
		assert_true(h.complete); /* full and rotated, or closed */
		seen += n;
		parts++;
	}
	for (size_t i = 0; i < seen; i++)
		assert_same(&want[N - seen + i], &got[i]);
	assert_int_equal(parts, 4);
}

/* A file there that is not a trace, or a link, is never moved, written or followed. */
static void test_refusals(void **state)
{
	struct trace_wcfg wc = {.path = path, .max_size = 1 << 20};
	struct trace_writer *w = NULL;
	char other[300];
	int fd;

	(void)state;
	clean();
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "precious", 8), 8);
	close(fd);
	assert_int_equal(trace_writer_open(&wc, &w), -EEXIST);
	assert_int_equal(file_size(path), 8);
	unlink(path);
	snprintf(other, sizeof(other), "%s/other", dir);
	assert_int_equal(symlink(other, path), 0);
	assert_int_equal(trace_writer_open(&wc, &w), -EEXIST);
	assert_int_equal(access(other, F_OK), -1);
	unlink(path);
	/* a FIFO (anyone's, in a shared directory) is refused, not waited on for a writer */
	assert_int_equal(mkfifo(path, 0666), 0);
	assert_int_equal(trace_writer_open(&wc, &w), -EEXIST);
	unlink(path);
	wc.max_size = 100; /* smaller than a header and a few records */
	assert_int_equal(trace_writer_open(&wc, &w), -EINVAL);
	wc.max_size = 1 << 20;
	wc.ring = 100; /* not a power of two */
	assert_int_equal(trace_writer_open(&wc, &w), -EINVAL);
}

/* A trace already at the path is rotated away at open, not appended to. */
static void test_reopen_rotates(void **state)
{
	uint64_t seed = 3;
	struct trace_read r = rand_read(&seed, 2, 0), got[4];
	struct trace_writer *w;
	char p1[300];

	(void)state;
	clean();
	w = open_w(1 << 20, 2, NULL);
	assert_true(trace_push(w, &r));
	trace_writer_close(w);
	w = open_w(1 << 20, 2, NULL);
	trace_writer_close(w);
	snprintf(p1, sizeof(p1), "%s.1", path);
	assert_int_equal(read_all(p1, got, 4, NULL), 1);
	assert_int_equal(read_all(path, got, 4, NULL), 0);
}

/* The reader: a record cut short at the end is the end; garbage is refused with a line. */
static void test_reader_damage(void **state)
{
	uint64_t seed = 4;
	struct trace_read r = rand_read(&seed, 2, 0), got[4];
	struct trace_writer *w;
	struct trace_reader *rd;
	char err[256];
	int fd;

	(void)state;
	clean();
	w = open_w(1 << 20, 0, NULL);
	assert_true(trace_push(w, &r));
	assert_true(trace_push(w, &r));
	trace_writer_close(w);
	assert_int_equal(truncate(path, (off_t)file_size(path) - 7), 0);
	assert_int_equal(trace_reader_open(path, &rd, err, sizeof(err)), 0);
	assert_int_equal(trace_reader_next(rd, &got[0], err, sizeof(err)), 1);
	assert_int_equal(trace_reader_next(rd, &got[1], err, sizeof(err)), 0);
	assert_int_equal(trace_reader_cut(rd), TRACE_READ_LEN - 7);
	trace_reader_close(rd);
	/* an unknown record type, after the first read */
	assert_int_equal(truncate(path, (off_t)file_size(path) - (TRACE_READ_LEN - 7)), 0);
	fd = open(path, O_WRONLY | O_APPEND);
	assert_int_equal(write(fd, "Z123456789012345678901234567890123456789012345", 45), 45);
	close(fd);
	assert_int_equal(trace_reader_open(path, &rd, err, sizeof(err)), 0);
	assert_int_equal(trace_reader_next(rd, &got[0], err, sizeof(err)), 1);
	assert_int_equal(trace_reader_next(rd, &got[1], err, sizeof(err)), -EBADMSG);
	trace_reader_close(rd);
	/* not a trace at all */
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd,
			       "hello, world, this is not a trace, not at all, no no no no no no "
			       "no",
			       67),
			 67);
	close(fd);
	assert_int_equal(trace_reader_open(path, &rd, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "not a tierfs trace"));
}

/* The writer's thread drains the ring by itself, while producers push from other threads. */
static void *producer(void *arg)
{
	struct trace_writer *w = arg;
	uint64_t seed = (uint64_t)(uintptr_t)&seed;

	for (int i = 0; i < 20000; i++) {
		struct trace_read r = rand_read(&seed, 11, (uint64_t)i);

		while (!trace_push(w, &r))
			usleep(100);
	}
	return NULL;
}

static void test_thread(void **state)
{
	struct trace_wcfg wc = {.path = path, .max_size = 1ULL << 30, .ring = 1024, .flush_ms = 1};
	struct trace_writer *w = NULL;
	struct trace_wstats ws;
	pthread_t t[3];

	(void)state;
	clean();
	assert_int_equal(trace_writer_open(&wc, &w), 0);
	assert_int_equal(trace_writer_start(w), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, producer, w), 0);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	trace_writer_close(w);
	w = NULL;
	assert_int_equal(
	    trace_writer_open(&(struct trace_wcfg){.path = path, .max_size = 1ULL << 30, .keep = 1},
			      &w),
	    0);
	trace_writer_stats(w, &ws);
	trace_writer_close(w);
	{
		char p1[300];
		static struct trace_read got[1];
		struct trace_reader *r;
		char err[256];
		size_t n = 0;

		snprintf(p1, sizeof(p1), "%s.1", path);
		assert_int_equal(trace_reader_open(p1, &r, err, sizeof(err)), 0);
		while (trace_reader_next(r, got, err, sizeof(err)) == 1)
			n++;
		trace_reader_close(r);
		assert_int_equal(n, 60000);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_header_round_trip),
	    cmocka_unit_test(test_records_little_endian),
	    cmocka_unit_test(test_tier_names),
	    cmocka_unit_test(test_siphash_vector),
	    cmocka_unit_test(test_salt),
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_ring_full),
	    cmocka_unit_test(test_drain_batches),
	    cmocka_unit_test(test_rotation),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_reopen_rotates),
	    cmocka_unit_test(test_reader_damage),
	    cmocka_unit_test(test_thread),
	};

	return cmocka_run_group_tests_name("trace", tests, setup, teardown);
}
