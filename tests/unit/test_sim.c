/*
 * test_sim.c - unit tests for sim/: the event queue and its clock, the lognormal draw, the
 * simulated store (latency, connections, merged GETs) and Redis (shared values, the fetch
 * lock, LRU under its memory limit), each a tier of a real cache's chain driven in simulated
 * time; and a replay of a small trace written by trace/'s writer.
 *
 * Nothing sleeps: time is the queue's, moved by the test.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fs.h"
#include "sim.h"
#include "sim_i.h"
#include "trace.h"

#define MS  1000000ULL
#define KIB 1024u
#define BS  (64 * KIB)

/* ---- the event queue ------------------------------------------------------------------------ */

static int order[16], norder;

static void note(void *arg)
{
	order[norder++] = (int)(intptr_t)arg;
}

static void test_events(void **state)
{
	struct sim_events q;

	(void)state;
	norder = 0;
	sim_ev_init(&q, 100);
	sim_ev_at(&q, 105, note, (void *)1);
	sim_ev_at(&q, 103, note, (void *)2);
	sim_ev_at(&q, 103, note, (void *)3); /* same time: first come, first served */
	sim_ev_at(&q, 110, note, (void *)4);
	sim_ev_at(&q, 50, note, (void *)5); /* in the past: runs at now */
	assert_int_equal(sim_ev_run_until(&q, 104), 3);
	assert_int_equal(q.now, 104);
	assert_int_equal(order[0], 5);
	assert_int_equal(order[1], 2);
	assert_int_equal(order[2], 3);
	assert_int_equal(sim_ev_run_all(&q), 2);
	assert_int_equal(q.now, 110);
	assert_int_equal(order[3], 1);
	assert_int_equal(order[4], 4);
	sim_ev_run_until(&q, 50); /* the clock never goes back */
	assert_int_equal(q.now, 110);
	sim_ev_done(&q);
}

/* Many events in random order run in time order, each at its own time: the callback sees the
 * clock at the event's time, never earlier than the one before. */
static struct sim_events *stamp_q;
static uint64_t stamp_last;
static int stamp_seen;

static void stamp(void *arg)
{
	uint64_t t = (uint64_t)(uintptr_t)arg;

	assert_true(stamp_q->now == t);
	assert_true(t >= stamp_last);
	stamp_last = t;
	stamp_seen++;
}

static void test_events_random(void **state)
{
	struct sim_events q;
	uint64_t s = 7;

	(void)state;
	sim_ev_init(&q, 0);
	stamp_q = &q;
	stamp_last = 0;
	stamp_seen = 0;
	for (int i = 0; i < 20000; i++) {
		uint64_t t = 1 + sim_rand(&s) % 100000;

		sim_ev_at(&q, t, stamp, (void *)(uintptr_t)t);
	}
	assert_int_equal(sim_ev_run_until(&q, 50000) + sim_ev_run_all(&q), 20000);
	assert_int_equal(stamp_seen, 20000);
	sim_ev_done(&q);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void test_lognormal(void **state)
{
	enum { N = 100000 };
	static uint64_t v[N];
	uint64_t s = 1;

	(void)state;
	for (int i = 0; i < N; i++)
		v[i] = sim_lognormal(&s, 30 * MS, 150 * MS);
	qsort(v, N, sizeof(v[0]), cmp_u64);
	assert_in_range(v[N / 2], 28 * MS, 32 * MS);
	assert_in_range(v[N * 99 / 100], 135 * MS, 165 * MS);
	assert_int_equal(sim_lognormal(&s, 5 * MS, 5 * MS), 5 * MS); /* no spread */
}

/* ---- a world of one or two mounts ----------------------------------------------------------- */

struct mnt {
	struct sim_clock clk;
	struct cache *c;
	struct sim_store *store;
	struct sim_redis_port *port;
};

static struct sim_events Q;
static struct sim_cfg CFG;
static struct sim_redis *R;

struct obj {
	struct cache_obj co;
};

static struct obj OBJ[4];

static int replies;
static uint64_t last_reply_ns;

static void reply(void *req, const struct cache_iov *iov, int n, int err)
{
	(void)req;
	(void)iov;
	(void)n;
	assert_int_equal(err, 0);
	replies++;
	last_reply_ns = Q.now;
}

static void plug(void *arg)
{
	sim_store_plug(((struct mnt *)arg)->store);
}

static void unplug(void *arg)
{
	sim_store_unplug(((struct mnt *)arg)->store);
}

/* A mount with no readahead, a 1 MiB hot tier, lagging off, @conns connections; through the
 * fleet's Redis R when it is there. */
static void mnt_open(struct mnt *m, unsigned conns)
{
	struct cache_cfg cc = {.block_size = BS,
			       .hot_size = 1 << 20,
			       .hot_ttl = 60,
			       .bounce_limit = CACHE_BOUNCE_LIMIT};
	struct tier chain[2];
	unsigned n = 0;
	struct cache_env env;

	*m = (struct mnt){.clk = {.q = &Q, .mono0 = 1000 * MS * 1000, .wall0_ns = 0}};
	m->store = sim_store_new(&Q, &CFG, conns, 1);
	if (R) {
		m->port = sim_redis_port_new(R, false, 500 * MS);
		chain[n++] = sim_redis_tier(m->port);
	}
	chain[n++] = sim_store_tier(m->store);
	cc.chain = chain;
	cc.nchain = n;
	env = sim_env(&m->clk);
	env.plug = plug;
	env.unplug = unplug;
	assert_int_equal(cache_new(&cc, &env, &m->c), 0);
}

static void mnt_close(struct mnt *m)
{
	cache_free(m->c);
	sim_store_free(m->store);
	sim_redis_port_free(m->port);
}

static void rd(struct mnt *m, int o, uint64_t off, size_t len)
{
	sim_store_plug(m->store);
	cache_read(m->c, &OBJ[o].co, NULL, off, len, 0, reply, NULL);
	sim_store_unplug(m->store);
}

static int world_setup(void **state)
{
	(void)state;
	sim_ev_init(&Q, 0);
	sim_cfg_default(&CFG);
	CFG.store_lat_ns = CFG.store_p99_ns = 10 * MS; /* no spread: exact times */
	CFG.store_bw = 64 * KIB * 100;		       /* a block in 10 ms */
	CFG.link_bw = 1ULL << 40;
	CFG.redis_lat_ns = 1 * MS;
	CFG.redis_bw = 1ULL << 40;
	for (int i = 0; i < 4; i++)
		OBJ[i].co = (struct cache_obj){
		    .id = {i + 1, 1}, .size = 1 << 20, .mtime = INT64_MIN, .ctx = &OBJ[i]};
	replies = 0;
	R = NULL;
	return 0;
}

static int world_teardown(void **state)
{
	(void)state;
	sim_redis_free(R);
	R = NULL;
	sim_ev_done(&Q);
	return 0;
}

/* ---- the store ------------------------------------------------------------------------------ */

static void test_store_latency(void **state)
{
	struct mnt m;
	uint64_t gets, bytes, merged;

	(void)state;
	mnt_open(&m, 16);
	rd(&m, 0, 0, 4096);
	sim_ev_run_until(&Q, 19 * MS);
	assert_int_equal(replies, 0);
	sim_ev_run_until(&Q, 20 * MS); /* 10 ms to the first byte, 10 ms of transfer */
	assert_int_equal(replies, 1);
	rd(&m, 0, 100, 10); /* a hit: answered at once */
	assert_int_equal(replies, 2);
	sim_store_stats(m.store, &gets, &bytes, &merged);
	assert_int_equal(gets, 1);
	assert_int_equal(bytes, BS);
	mnt_close(&m);
}

/* One read of four blocks goes out as one GET of 256 KiB; its first block is answered first. */
static void test_store_merge(void **state)
{
	struct mnt m;
	uint64_t gets, bytes, merged;

	(void)state;
	mnt_open(&m, 16);
	rd(&m, 1, 0, 4 * BS);
	sim_ev_run_all(&Q);
	assert_int_equal(replies, 1);
	assert_int_equal(last_reply_ns, 10 * MS + 40 * MS); /* the last block's bytes */
	sim_store_stats(m.store, &gets, &bytes, &merged);
	assert_int_equal(gets, 1);
	assert_int_equal(bytes, 4 * BS);
	assert_int_equal(merged, 3);
	mnt_close(&m);
}

/* With 2 connections, a third GET waits for one of them. */
static void test_store_conns(void **state)
{
	struct mnt m;

	(void)state;
	mnt_open(&m, 2);
	rd(&m, 0, 0, 1);
	rd(&m, 1, 0, 1);
	rd(&m, 2, 0, 1);
	sim_ev_run_until(&Q, 20 * MS);
	assert_int_equal(replies, 2);
	sim_ev_run_all(&Q);
	assert_int_equal(replies, 3);
	assert_int_equal(last_reply_ns, 40 * MS);
	mnt_close(&m);
}

/* ---- Redis ---------------------------------------------------------------------------------- */

/* A block one mount fetched is another's Redis hit: the store is asked once. */
static void test_redis_shared(void **state)
{
	struct mnt a, b;
	struct sim_result ra = {0}, rb = {0};
	uint64_t gets, bytes, merged;

	(void)state;
	R = sim_redis_new(&Q, &CFG);
	mnt_open(&a, 16);
	mnt_open(&b, 16);
	rd(&a, 0, 0, 100);
	sim_ev_run_all(&Q);
	rd(&b, 0, 0, 100);
	sim_ev_run_all(&Q);
	assert_int_equal(replies, 2);
	sim_redis_port_stats(a.port, &ra);
	sim_redis_port_stats(b.port, &rb);
	assert_int_equal(ra.shared_misses, 1);
	assert_int_equal(ra.shared_set_bytes, BS);
	assert_int_equal(rb.shared_hits, 1);
	sim_store_stats(b.store, &gets, &bytes, &merged);
	assert_int_equal(gets, 0);
	mnt_close(&a);
	mnt_close(&b);
}

/* Two mounts missing one block at once: one fetches, the other waits for its value. */
static void test_redis_lock(void **state)
{
	struct mnt a, b;
	struct sim_result rb = {0};
	uint64_t ga, gb, bytes, merged;

	(void)state;
	R = sim_redis_new(&Q, &CFG);
	mnt_open(&a, 16);
	mnt_open(&b, 16);
	rd(&a, 0, 0, 100);
	rd(&b, 0, 0, 100);
	sim_ev_run_all(&Q);
	assert_int_equal(replies, 2);
	sim_store_stats(a.store, &ga, &bytes, &merged);
	sim_store_stats(b.store, &gb, &bytes, &merged);
	assert_int_equal(ga + gb, 1);
	sim_redis_port_stats(b.port, &rb);
	assert_int_equal(rb.shared_lock_waits, 1);
	assert_int_equal(rb.shared_hits, 1);
	mnt_close(&a);
	mnt_close(&b);
}

/* What a 64 KiB block costs Redis: with its overhead, jemalloc's next size class, 80 KiB. */
#define VALUE_COST (80 * KIB)

/* Under its memory limit Redis keeps the most recently used values. */
static void test_redis_lru(void **state)
{
	struct mnt a, b;
	struct sim_result rr = {0}, rb = {0};

	(void)state;
	CFG.redis_mem = 3 * VALUE_COST;
	R = sim_redis_new(&Q, &CFG);
	mnt_open(&a, 16);
	mnt_open(&b, 16);
	for (int o = 0; o < 4; o++) {
		rd(&a, o, 0, 1);
		sim_ev_run_all(&Q);
	}
	sim_redis_stats(R, &rr);
	assert_int_equal(rr.redis_evictions, 1);
	assert_int_equal(rr.redis_used, 3 * VALUE_COST);
	rd(&b, 0, 0, 1); /* evicted */
	rd(&b, 3, 0, 1); /* kept */
	sim_ev_run_all(&Q);
	sim_redis_port_stats(b.port, &rb);
	assert_int_equal(rb.shared_hits, 1);
	assert_int_equal(rb.shared_misses, 1);
	mnt_close(&a);
	mnt_close(&b);
}

/* Redis charges a value its allocator's size class, four per doubling: a 64 KiB block and its
 * 128 bytes take 80 KiB. A maxmemory of four blocks and their overhead holds three, not four
 * (the sim charged len + 128 and kept four: the soak's 15-minute run, 24 MiB segments through
 * a 512 MiB Redis, then fetched 15-18% fewer bytes from the store in the sim than the mount). */
static void test_redis_size_class(void **state)
{
	struct mnt a;
	struct sim_result rr = {0};

	(void)state;
	CFG.redis_mem = 4 * (BS + 128);
	R = sim_redis_new(&Q, &CFG);
	mnt_open(&a, 16);
	for (int o = 0; o < 4; o++) {
		rd(&a, o, 0, 1);
		sim_ev_run_all(&Q);
	}
	sim_redis_stats(R, &rr);
	assert_int_equal(rr.redis_evictions, 1);
	assert_int_equal(rr.redis_used, 3 * VALUE_COST);
	mnt_close(&a);
}

/* ---- a replay ------------------------------------------------------------------------------- */

/* Two reads of one block a second apart, then one of another object: a miss, a hit, a miss;
 * two GETs; the same through the mount's option table. */
static void test_replay(void **state)
{
	char dir[] = "/tmp/test_sim.XXXXXX", path[64], err[256];
	struct trace_wcfg wc = {
	    .path = path, .max_size = 1 << 20, .start_wall_ns = 1700000000ULL * 1000000000ULL};
	struct trace_writer *w;
	struct fs_opts o;
	struct sim_run run;
	char *argv[] = {"t", "file:///", "/", "-o", "block_size=64K,hot_size=1M", NULL};
	struct trace_read r = {.obj = 9,
			       .ver = 1,
			       .stream = 1,
			       .len = 4096,
			       .size = 1 << 20,
			       .mtime = 1700000000,
			       .tier = TRACE_STORE,
			       .fetched = BS};

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/t", dir);
	assert_int_equal(trace_writer_open(&wc, &w), 0);
	assert_true(trace_push(w, &r));
	r.t_ns = 1000 * MS;
	assert_true(trace_push(w, &r));
	r.obj = 10;
	assert_true(trace_push(w, &r));
	trace_writer_close(w);
	assert_int_equal(fs_opts_parse(5, argv, &o, err, sizeof(err)), 0);
	assert_int_equal(sim_replay(&o, &CFG, (char *[]){path}, 1, &run, err, sizeof(err)), 0);
	assert_int_equal(run.nmounts, 1);
	assert_int_equal(run.fleet.reads, 3);
	assert_int_equal(run.fleet.cache.tier[CACHE_HOT].hits, 1);
	assert_int_equal(run.fleet.cache.tier[CACHE_HOT].misses, 2);
	assert_int_equal(run.fleet.store_gets, 2);
	assert_int_equal(run.fleet.lat.count, 3);
	sim_run_free(&run);
	fs_opts_done(&o);
	unlink(path);
	rmdir(dir);
}

/* A replay of an old object, 64 reads of its blocks at once, under the lagging tier's running
 * cap (half its ring: 8 blocks of 1M / 64K); @rate the lagging_rate. @return the run. */
static void replay_old(const char *rate, struct sim_run *run)
{
	char dir[] = "/tmp/test_sim.XXXXXX", path[64], err[256], opts[128];
	struct trace_wcfg wc = {
	    .path = path, .max_size = 1 << 20, .start_wall_ns = 1700000000ULL * 1000000000ULL};
	struct trace_writer *w;
	struct fs_opts o;
	char *argv[] = {"t", "file:///", "/", "-o", opts, NULL};
	struct trace_read r = {.obj = 7,
			       .ver = 1,
			       .len = 64 * KIB,
			       .size = 64 * BS,
			       .mtime = 1500000000,
			       .tier = TRACE_STORE,
			       .fetched = BS};

	snprintf(opts, sizeof(opts),
		 "block_size=64K,hot_size=1M,lagging_size=1M,readahead=0,lagging_rate=%s", rate);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/t", dir);
	assert_int_equal(trace_writer_open(&wc, &w), 0);
	for (unsigned i = 0; i < 64; i++) {
		r.stream = i + 1;
		r.off = (uint64_t)i * BS;
		r.flags = TRACE_F_OPEN;
		assert_true(trace_push(w, &r));
	}
	trace_writer_close(w);
	assert_int_equal(fs_opts_parse(5, argv, &o, err, sizeof(err)), 0);
	assert_int_equal(sim_replay(&o, &CFG, (char *[]){path}, 1, run, err, sizeof(err)), 0);
	fs_opts_done(&o);
	unlink(path);
	rmdir(dir);
}

/* lagging_rate=0 is unlimited: fetches that wait for the lagging tier's running cap (room in
 * its ring), not for tokens, are not throttled. They were (cache/gate.c counted every queued
 * waiter): 64 blocks through a cap of 8 reported 56 throttle waits. With a rate, the waits for
 * its tokens are throttled (the twin). */
static void test_unlimited_is_never_throttled(void **state)
{
	struct sim_run run;

	(void)state;
	replay_old("0", &run);
	assert_int_equal(run.fleet.reads, 64);
	assert_int_equal(run.fleet.cache.tier[CACHE_LAG].misses, 64);
	assert_int_equal(run.fleet.cache.tier[CACHE_LAG].throttle_waits, 0);
	assert_int_equal(run.fleet.cache.tier[CACHE_LAG].throttled_ns, 0);
	sim_run_free(&run);

	replay_old("1M", &run);
	assert_int_equal(run.fleet.reads, 64);
	assert_true(run.fleet.cache.tier[CACHE_LAG].throttle_waits > 0);
	assert_true(run.fleet.cache.tier[CACHE_LAG].throttled_ns > 1000 * MS);
	sim_run_free(&run);
}

/* A mount with cache_dir keeps on its disk the hot blocks it fetched, and a lagging read of
 * them later is a disk hit that skips the lagging limiter (the cache's lower_free), as in a
 * mount. The sim used to ignore cache_dir: the second pass of this trace went to the store
 * through a 64K/s limiter (8 more GETs, seconds throttled); the soak's replay, whose lagging
 * reads a mount found on its disk, joined readahead queued at the limiter instead (issue 38).
 * Pass 1 at t 0-7 ms reads 8 blocks of a new object (hot misses, from the store); pass 2 at
 * t 3 s, past hot_ttl=1, reads them again through the lagging tier. Without cache_dir (the
 * twin) pass 2 goes to the store through the limiter. */
static void disk_replay(bool disk, struct sim_run *run)
{
	char dir[] = "/tmp/test_sim.XXXXXX", path[64], err[256], opts[160];
	struct trace_wcfg wc = {
	    .path = path, .max_size = 1 << 20, .start_wall_ns = 1700000000ULL * 1000000000ULL};
	struct trace_writer *w;
	struct fs_opts o;
	char *argv[] = {"t", "file:///", "/", "-o", opts, NULL};
	struct trace_read r = {.obj = 8,
			       .ver = 1,
			       .len = 64 * KIB,
			       .size = 8 * BS,
			       .mtime = 1700000000,
			       .tier = TRACE_STORE,
			       .fetched = BS};

	snprintf(opts, sizeof(opts),
		 "block_size=64K,hot_size=1M,hot_ttl=1,lagging_size=1M,readahead=0,"
		 "lagging_rate=64K%s",
		 disk ? ",cache_dir=/nonexistent/sim-disk,disk_size=4M" : "");
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/t", dir);
	assert_int_equal(trace_writer_open(&wc, &w), 0);
	for (unsigned pass = 0; pass < 2; pass++)
		for (unsigned i = 0; i < 8; i++) {
			r.stream = pass + 1;
			r.flags = i ? 0 : TRACE_F_OPEN;
			r.off = (uint64_t)i * BS;
			r.t_ns = pass * 3000 * MS + i * MS;
			r.tier = pass ? TRACE_DISK : TRACE_STORE;
			assert_true(trace_push(w, &r));
		}
	trace_writer_close(w);
	assert_int_equal(fs_opts_parse(5, argv, &o, err, sizeof(err)), 0);
	assert_int_equal(sim_replay(&o, &CFG, (char *[]){path}, 1, run, err, sizeof(err)), 0);
	fs_opts_done(&o);
	unlink(path);
	rmdir(dir);
}

static void test_disk_tier(void **state)
{
	struct sim_run run;

	(void)state;
	disk_replay(true, &run);
	assert_int_equal(run.fleet.reads, 16);
	assert_int_equal(run.fleet.cache.tier[CACHE_HOT].misses, 8);
	assert_int_equal(run.fleet.cache.tier[CACHE_LAG].misses, 8);
	assert_int_equal(run.fleet.store_bytes, 8 * BS); /* pass 1 only */
	assert_int_equal(run.fleet.cache.tier[CACHE_LAG].throttle_waits, 0);
	assert_int_equal(run.fleet.cache.tier[CACHE_LAG].throttled_ns, 0);
	sim_run_free(&run);

	disk_replay(false, &run);
	assert_int_equal(run.fleet.reads, 16);
	assert_int_equal(run.fleet.cache.tier[CACHE_LAG].misses, 8);
	assert_int_equal(run.fleet.store_bytes, 16 * BS);
	assert_true(run.fleet.cache.tier[CACHE_LAG].throttle_waits > 0);
	sim_run_free(&run);
}

/* A mount remounted on its cache_dir starts with what the last life left on its disk; the
 * trace shows it only as reads answered from the disk. An old object's 8 blocks, read through
 * the lagging tier and recorded as disk reads: the sim puts the version on its disk at the
 * first of them, and the reads cost the store nothing and pass no limiter, as in the mount.
 * Before, its disk started empty and every block went to the store through the 64K/s limiter
 * (the soak's B after its kill: lagging 0.975 in the sim against 0.941). */
static void test_disk_before_trace(void **state)
{
	char dir[] = "/tmp/test_sim.XXXXXX", path[64], err[256];
	struct trace_wcfg wc = {
	    .path = path, .max_size = 1 << 20, .start_wall_ns = 1700000000ULL * 1000000000ULL};
	struct trace_writer *w;
	struct fs_opts o;
	struct sim_run run;
	char *argv[] = {"t",
			"file:///",
			"/",
			"-o",
			"block_size=64K,hot_size=1M,lagging_size=1M,readahead=0,lagging_rate=64K,"
			"cache_dir=/nonexistent/sim-disk,disk_size=4M",
			NULL};
	struct trace_read r = {.obj = 4,
			       .ver = 1,
			       .stream = 1,
			       .len = 64 * KIB,
			       .size = 8 * BS,
			       .mtime = 1500000000,
			       .tier = TRACE_DISK,
			       .fetched = BS};

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/t", dir);
	assert_int_equal(trace_writer_open(&wc, &w), 0);
	for (unsigned i = 0; i < 8; i++) {
		r.flags = i ? 0 : TRACE_F_OPEN;
		r.off = (uint64_t)i * BS;
		r.t_ns = i * MS;
		assert_true(trace_push(w, &r));
	}
	trace_writer_close(w);
	assert_int_equal(fs_opts_parse(5, argv, &o, err, sizeof(err)), 0);
	assert_int_equal(sim_replay(&o, &CFG, (char *[]){path}, 1, &run, err, sizeof(err)), 0);
	assert_int_equal(run.fleet.reads, 8);
	assert_int_equal(run.fleet.cache.tier[CACHE_LAG].misses, 8);
	assert_int_equal(run.fleet.store_bytes, 0);
	assert_int_equal(run.fleet.cache.tier[CACHE_LAG].throttle_waits, 0);
	sim_run_free(&run);
	fs_opts_done(&o);
	unlink(path);
	rmdir(dir);
}

/* Writes are not in a trace: a version whose first read on a mount was a hot hit with nothing
 * fetched was written through that mount, and the replay puts it in the hot tier (every
 * block) and offers it to Redis, as a write does. Mount A reads back the 4 blocks it wrote:
 * 4 hits, no GET; mount B, sharing Redis, reads them from there: no GET either. A version
 * whose first read was fetched (another object on A) is a miss, as before. */
static void test_written_blocks(void **state)
{
	char dir[] = "/tmp/test_sim.XXXXXX", pa[64], pb[64], err[256];
	struct trace_wcfg wc = {.max_size = 1 << 20,
				.start_wall_ns = 1700000000ULL * 1000000000ULL};
	uint8_t salt[TRACE_SALT_LEN] = "0123456789abcdef";
	struct trace_writer *w;
	struct fs_opts o;
	struct sim_run run;
	char *argv[] = {"t",
			"file:///",
			"/",
			"-o",
			"block_size=64K,hot_size=1M,readahead=0,shared=redis://127.0.0.1:1",
			NULL};
	struct trace_read r = {.obj = 5,
			       .ver = 1,
			       .stream = 1,
			       .len = 64 * KIB,
			       .size = 4 * BS,
			       .mtime = 1700000000,
			       .tier = TRACE_HOT,
			       .flags = TRACE_F_OPEN};

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(pa, sizeof(pa), "%s/a", dir);
	snprintf(pb, sizeof(pb), "%s/b", dir);
	wc.salt = salt;
	wc.path = pa;
	assert_int_equal(trace_writer_open(&wc, &w), 0);
	for (unsigned i = 0; i < 4; i++) {
		r.off = (uint64_t)i * BS;
		r.t_ns = i * MS;
		assert_true(trace_push(w, &r));
	}
	r = (struct trace_read){.obj = 6,
				.ver = 1,
				.stream = 2,
				.len = 64 * KIB,
				.size = BS,
				.mtime = 1700000000,
				.tier = TRACE_STORE,
				.fetched = BS,
				.t_ns = 10 * MS,
				.flags = TRACE_F_OPEN};
	assert_true(trace_push(w, &r));
	trace_writer_close(w);
	wc.path = pb; /* B reads A's object a second later, from Redis */
	assert_int_equal(trace_writer_open(&wc, &w), 0);
	r = (struct trace_read){.obj = 5,
				.ver = 1,
				.stream = 3,
				.len = 64 * KIB,
				.size = 4 * BS,
				.mtime = 1700000000,
				.tier = TRACE_FLEET,
				.t_ns = 1000 * MS,
				.flags = TRACE_F_OPEN};
	for (unsigned i = 0; i < 4; i++) {
		r.off = (uint64_t)i * BS;
		r.t_ns += MS;
		assert_true(trace_push(w, &r));
		r.flags = 0;
	}
	trace_writer_close(w);
	assert_int_equal(fs_opts_parse(5, argv, &o, err, sizeof(err)), 0);
	assert_int_equal(sim_replay(&o, &CFG, (char *[]){pa, pb}, 2, &run, err, sizeof(err)), 0);
	assert_int_equal(run.nmounts, 2);
	assert_int_equal(run.mount[0].written_objects, 1);
	assert_int_equal(run.mount[0].cache.tier[CACHE_HOT].hits, 4);
	assert_int_equal(run.mount[0].cache.tier[CACHE_HOT].misses, 1);
	assert_int_equal(run.mount[0].cache.tier[CACHE_HOT].written, 4);
	assert_int_equal(run.mount[0].store_gets, 1); /* the other object only */
	assert_int_equal(run.mount[1].written_objects, 0);
	assert_int_equal(run.mount[1].shared_hits, 4);
	assert_int_equal(run.mount[1].store_gets, 0);
	sim_run_free(&run);
	fs_opts_done(&o);
	unlink(pa);
	unlink(pb);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_events),
	    cmocka_unit_test(test_events_random),
	    cmocka_unit_test(test_lognormal),
	    cmocka_unit_test_setup_teardown(test_store_latency, world_setup, world_teardown),
	    cmocka_unit_test_setup_teardown(test_store_merge, world_setup, world_teardown),
	    cmocka_unit_test_setup_teardown(test_store_conns, world_setup, world_teardown),
	    cmocka_unit_test_setup_teardown(test_redis_shared, world_setup, world_teardown),
	    cmocka_unit_test_setup_teardown(test_redis_lock, world_setup, world_teardown),
	    cmocka_unit_test_setup_teardown(test_redis_lru, world_setup, world_teardown),
	    cmocka_unit_test_setup_teardown(test_redis_size_class, world_setup, world_teardown),
	    cmocka_unit_test_setup_teardown(test_replay, world_setup, world_teardown),
	    cmocka_unit_test_setup_teardown(test_unlimited_is_never_throttled, world_setup,
					    world_teardown),
	    cmocka_unit_test_setup_teardown(test_written_blocks, world_setup, world_teardown),
	    cmocka_unit_test_setup_teardown(test_disk_tier, world_setup, world_teardown),
	    cmocka_unit_test_setup_teardown(test_disk_before_trace, world_setup, world_teardown),
	};

	return cmocka_run_group_tests_name("sim", tests, NULL, NULL);
}
