/*
 * test_cache.c - unit tests for cache/cache.c, the read engine, driven only through cache.h.
 *
 * The world is fake and fully under the test's control:
 *   - clocks: W.mono (ns) and W.wall (s), moved only by the test;
 *   - fetch: records every request (object, off, len, dst, lagging, done, done_arg) and returns;
 *     nothing completes until the test says so (complete(): write the object's byte pattern
 *     into dst, then done(arg, 0); or done(arg, -EIO)). W.fetch_err makes fetch refuse
 *     synchronously instead;
 *   - defer: records timers (delay, cb, arg); the test advances W.mono and fires the due ones;
 *     W.defer_err refuses new timers (an I/O thread that is stopping);
 *   - hold/release: counted per object and in total; everything must balance at the end.
 * Replies are copied out of the iov during the callback and counted.
 *
 * Every byte of object @id at position @pos is pat(id, pos), so any reply can be checked
 * against the object version it claims to be from. test_random drives random reads, completion
 * orders and failures against that rule and a small model of which reads may fail; its seed is
 * fixed (override with TIERFS_CACHE_SEED) and printed with any failure.
 *
 * test_threads runs readers on several threads and completions on another, as the mount
 * does, with a tiny hot tier so rotations and bounces happen under contention (run it under
 * the sanitizers). Nothing sleeps.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cache.h"
#include "cache_i.h" /* cache_sha256 */
#include "tier.h"

#define NS	 1000000000ull
#define KIB	 1024ull
#define MIB	 (1024ull * 1024)
#define BS	 (64 * 1024u) /* the block size of the directed tests */
#define MONO0	 1000000000000ull
#define WALL0	 1700000000ll
#define HOT_TTL	 60
#define OLD	 (WALL0 - 100000) /* an mtime far older than HOT_TTL */
#define NO_FETCH ((size_t)-1)

/* ---------------------------------------------------------------------------------------------
 * The fake world
 * ------------------------------------------------------------------------------------------ */

static uint64_t mix(uint64_t z)
{
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ULL;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The byte at @pos of every version with id @id. */
static uint8_t pat(uint64_t id, uint64_t pos)
{
	return (uint8_t)mix(id * 0x9e3779b97f4a7c15ULL + pos);
}

/* What the fs layer would hand to the cache as ctx: one per object version. */
struct fobj {
	uint64_t id;
	uint64_t size;
	long holds; /* outstanding env->hold */
};

struct fetch_rec {
	struct fobj *o;
	uint64_t off;
	uint32_t len;
	void *dst;
	bool lagging;
	cache_done_fn done;
	void *done_arg;
	uint64_t start_ns; /* W.mono when it was started */
	unsigned plug;	   /* W.plug_gen when started under a plug, 0 if not plugged */
	bool open;	   /* not completed yet */
};

struct timer_rec {
	uint64_t delay;
	uint64_t due;
	void (*cb)(void *);
	void *arg;
	bool fired;
};

/* Called for every fetch that fails (at once or later), for the random test's model. */
typedef void (*fail_hook_fn)(struct fobj *o, uint64_t blk);

static struct world {
	uint64_t mono;
	int64_t wall;
	uint32_t bs; /* block size of the cache under test, to check fetch alignment */

	struct fetch_rec *f; /* every fetch ever started, in order */
	size_t nf, capf;
	size_t nopen;
	size_t attempts; /* fetch calls, including refused ones */

	struct timer_rec *t;
	size_t nt, capt;
	size_t tpending;

	int fetch_err;	       /* nonzero: fetch refuses with it */
	unsigned sync_fail;    /* random test: percentage of fetches refused with -ECONNREFUSED */
	uint64_t *rng;	       /* random test's generator */
	fail_hook_fn on_fail;  /* random test: a fetch of this block failed */
	int defer_err;	       /* nonzero: defer refuses with it */
	void (*on_wall)(void); /* run once at the next wall clock reading, then cleared */

	long holds;	  /* total outstanding holds */
	long bad_release; /* releases without a hold */
	long fetch_bad;	  /* misaligned or wrong-length fetches */
	long single_dup;  /* two open fetches of one block */
	unsigned plug_depth, plug_gen; /* env->plug nesting now; plugs so far */
} W;

static uint64_t next_rand(uint64_t *state)
{
	*state += 0x9e3779b97f4a7c15ULL;
	return mix(*state);
}

static uint64_t f_mono(void *arg)
{
	(void)arg;
	return W.mono;
}

static int64_t f_wall(void *arg)
{
	void (*hook)(void) = W.on_wall;

	(void)arg;
	W.on_wall = NULL;
	if (hook)
		hook();
	return W.wall;
}

static int f_fetch(void *arg, void *ctx, uint64_t off, uint32_t len, void *dst, bool lagging,
		   cache_done_fn done, void *done_arg)
{
	struct fobj *o = ctx;
	uint64_t bstart = off / W.bs * W.bs;
	uint64_t end = bstart + W.bs < o->size ? bstart + W.bs : o->size;
	/* a part of a block (random lagging reads): aligned, at most CACHE_PART_MAX, inside
	 * its block, whole units unless it ends with the block */
	bool part = off % CACHE_PART_UNIT == 0 && len <= CACHE_PART_MAX && len < end - bstart &&
		    off + len <= end && (len % CACHE_PART_UNIT == 0 || off + len == end);

	(void)arg;
	W.attempts++;
	if ((off != bstart && !part) || off >= o->size || (len != end - off && !part) || !dst ||
	    !done)
		W.fetch_bad++;
	for (size_t i = 0; i < W.nf; i++)
		if (W.f[i].open && W.f[i].o->id == o->id && W.f[i].off == off && W.f[i].len == len)
			W.single_dup++;
	if (W.fetch_err)
		return W.fetch_err;
	if (W.sync_fail && next_rand(W.rng) % 100 < W.sync_fail) {
		if (W.on_fail)
			W.on_fail(o, off / W.bs);
		return -ECONNREFUSED;
	}
	if (W.nf == W.capf) {
		W.capf = W.capf ? 2 * W.capf : 64;
		W.f = realloc(W.f, W.capf * sizeof(*W.f));
		assert_non_null(W.f);
	}
	W.f[W.nf++] = (struct fetch_rec){.o = o,
					 .off = off,
					 .len = len,
					 .dst = dst,
					 .lagging = lagging,
					 .done = done,
					 .done_arg = done_arg,
					 .start_ns = W.mono,
					 .plug = W.plug_depth ? W.plug_gen : 0,
					 .open = true};
	W.nopen++;
	return 0;
}

static int f_defer(void *arg, uint64_t delay_ns, void (*cb)(void *), void *cb_arg)
{
	(void)arg;
	if (W.defer_err)
		return W.defer_err;
	if (W.nt == W.capt) {
		W.capt = W.capt ? 2 * W.capt : 16;
		W.t = realloc(W.t, W.capt * sizeof(*W.t));
		assert_non_null(W.t);
	}
	W.t[W.nt++] = (struct timer_rec){
	    .delay = delay_ns, .due = W.mono + delay_ns, .cb = cb, .arg = cb_arg};
	W.tpending++;
	return 0;
}

static void f_hold(void *ctx)
{
	struct fobj *o = ctx;

	o->holds++;
	W.holds++;
}

static void f_release(void *ctx)
{
	struct fobj *o = ctx;

	if (o->holds <= 0) {
		W.bad_release++;
		return;
	}
	o->holds--;
	W.holds--;
}

static const struct cache_env ENV = {
    .arg = &W,
    .mono_ns = f_mono,
    .wall_s = f_wall,
    .defer = f_defer,
    .hold = f_hold,
    .release = f_release,
};

/*
 * The store, last in the cache's chain (tier.h): a tier whose get hands the block to a fetch
 * function of the test's (f_fetch, sync_fetch, t_fetch), which answers through done as the
 * backend does. A chain may have other tiers before it (the fake lower tier below; the test
 * tier of test_chain_*).
 */
typedef int (*fetch_fn)(void *arg, void *ctx, uint64_t off, uint32_t len, void *dst, bool lagging,
			cache_done_fn done, void *done_arg);

static void store_answered(void *arg, int err)
{
	tier_answer(arg, err);
}

static int store_get(void *self, struct tier_io *io)
{
	fetch_fn fetch = (fetch_fn)(uintptr_t)self;

	return fetch(NULL, io->ctx, io->off, io->len, io->dst, io->lagging, store_answered, io);
}

static const struct tier_ops STORE_OPS = {.name = "store", .get = store_get};

static struct tier store_tier(fetch_fn fetch)
{
	return (struct tier){.ops = &STORE_OPS, .self = (void *)(uintptr_t)fetch};
}

/* cache_new with the chain @above (n tiers, may be 0) then a store reading with @fetch. */
static int new_cache(const struct cache_cfg *cfg, const struct cache_env *env, fetch_fn fetch,
		     const struct tier *above, unsigned n, struct cache **ret)
{
	struct tier chain[TIER_CHAIN_MAX];
	struct cache_cfg c = *cfg;

	for (unsigned i = 0; i < n; i++)
		chain[i] = above[i];
	chain[n] = store_tier(fetch);
	c.chain = chain;
	c.nchain = n + 1;
	return cache_new(&c, env, ret);
}

static void world_reset(void)
{
	free(W.f);
	free(W.t);
	memset(&W, 0, sizeof(W));
	W.mono = MONO0;
	W.wall = WALL0;
}

/* Complete fetch @i: on success write the pattern into dst first. */
static void complete(size_t i, int err)
{
	struct fetch_rec r;

	assert_true(i < W.nf);
	assert_true(W.f[i].open);
	W.f[i].open = false;
	W.nopen--;
	r = W.f[i]; /* done() may start fetches, which may move W.f */
	if (!err) {
		unsigned char *d = r.dst;

		for (uint32_t k = 0; k < r.len; k++)
			d[k] = pat(r.o->id, r.off + k);
	} else if (W.on_fail) {
		W.on_fail(r.o, r.off / W.bs);
	}
	r.done(r.done_arg, err);
}

/* The open fetch of block @blk of object @id, or NO_FETCH. */
static size_t find_open(uint64_t id, uint64_t blk)
{
	for (size_t i = 0; i < W.nf; i++)
		if (W.f[i].open && W.f[i].o->id == id && W.f[i].off == blk * W.bs)
			return i;
	return NO_FETCH;
}

static void complete_blk(uint64_t id, uint64_t blk, int err)
{
	size_t i = find_open(id, blk);

	assert_true(i != NO_FETCH);
	complete(i, err);
}

static void complete_all(int err)
{
	for (size_t i = 0; i < W.nf; i++)
		if (W.f[i].open)
			complete(i, err);
}

/* Fire every pending timer due at W.mono, earliest first, including ones armed meanwhile. */
static size_t fire_due(void)
{
	size_t fired = 0;

	for (;;) {
		size_t best = NO_FETCH;

		for (size_t i = 0; i < W.nt; i++)
			if (!W.t[i].fired && W.t[i].due <= W.mono &&
			    (best == NO_FETCH || W.t[i].due < W.t[best].due))
				best = i;
		if (best == NO_FETCH)
			return fired;
		W.t[best].fired = true;
		W.tpending--;
		fired++;
		W.t[best].cb(W.t[best].arg);
	}
}

/* The pending timer due first, or NO_FETCH. */
static size_t next_timer(void)
{
	size_t best = NO_FETCH;

	for (size_t i = 0; i < W.nt; i++)
		if (!W.t[i].fired && (best == NO_FETCH || W.t[i].due < W.t[best].due))
			best = i;
	return best;
}

/* The last timer armed. */
static struct timer_rec *last_timer(void)
{
	assert_true(W.nt > 0);
	return &W.t[W.nt - 1];
}

/* ---------------------------------------------------------------------------------------------
 * Replies
 * ------------------------------------------------------------------------------------------ */

struct rep {
	int calls;     /* times the reply callback ran */
	int err;       /* its err */
	int niov;      /* its n */
	size_t n;      /* bytes received */
	bool overflow; /* more bytes than the clipped request */
	bool bad_iov;  /* error with data, or a NULL base */
	int from;      /* the highest cache_iov.from of the answer's pieces; -1: none */
	uint64_t id;   /* the object read */
	uint64_t off;  /* the request */
	size_t want;   /* bytes expected: the request clipped to the object */
	unsigned char *buf;
	const char *served; /* cache_reply_served() during the reply: its tier, or NULL */
	uint64_t fetched; /* ... and its bytes fetched */
};

static void on_reply(void *req, const struct cache_iov *iov, int n, int err)
{
	struct rep *r = req;

	r->calls++;
	r->err = err;
	r->niov = n;
	r->n = 0;
	r->from = -1;
	r->served = cache_reply_served() ? cache_reply_served()->from : NULL;
	r->fetched = cache_reply_served() ? cache_reply_served()->fetched : 0;
	if (n < 0 || (err && n != 0))
		r->bad_iov = true;
	for (int i = 0; i < n; i++) {
		if (iov[i].from > r->from)
			r->from = iov[i].from;
		if (iov[i].len && !iov[i].base)
			r->bad_iov = true;
		if (r->n + iov[i].len > r->want) {
			r->overflow = true;
			return;
		}
		if (iov[i].len)
			memcpy(r->buf + r->n, iov[i].base, iov[i].len);
		r->n += iov[i].len;
	}
}

static struct cache_obj mkobj(struct fobj *fo, uint64_t id, uint64_t size, int64_t mtime)
{
	fo->id = id;
	fo->size = size;
	fo->holds = 0;
	return (struct cache_obj){.id = {.lo = id}, .size = size, .mtime = mtime, .ctx = fo};
}

static void rep_init(struct rep *r, const struct cache_obj *o, uint64_t off, size_t len)
{
	free(r->buf);
	memset(r, 0, sizeof(*r));
	r->id = o->id.lo;
	r->off = off;
	r->want = off >= o->size ? 0 : (len < o->size - off ? len : (size_t)(o->size - off));
	r->buf = malloc(r->want + 1);
	assert_non_null(r->buf);
}

static void rep_done(struct rep *r)
{
	free(r->buf);
	r->buf = NULL;
}

/* Start a read into @r. @return true if it was answered before cache_read returned. */
static bool rd(struct cache *c, const struct cache_obj *o, struct cache_stream *s, uint64_t off,
	       size_t len, struct rep *r)
{
	rep_init(r, o, off, len);
	cache_read(c, o, s, off, len, 0, on_reply, r);
	return r->calls > 0;
}

static bool rep_bytes_ok(const struct rep *r)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->buf[i] != pat(r->id, r->off + i))
			return false;
	return true;
}

/* @r was answered exactly once, with the whole clipped request and the right bytes. */
static void check_ok(const struct rep *r)
{
	assert_int_equal(r->calls, 1);
	assert_int_equal(r->err, 0);
	assert_false(r->overflow);
	assert_false(r->bad_iov);
	assert_int_equal(r->n, r->want);
	assert_true(rep_bytes_ok(r));
}

static void check_err(const struct rep *r, int err)
{
	assert_int_equal(r->calls, 1);
	assert_int_equal(r->err, err);
	assert_int_equal(r->niov, 0);
	assert_false(r->bad_iov);
}

/* ---------------------------------------------------------------------------------------------
 * Cache set-up and tear-down
 * ------------------------------------------------------------------------------------------ */

static struct cache_cfg base_cfg(void)
{
	return (struct cache_cfg){
	    .block_size = BS,
	    .hot_size = 64ull * BS,
	    .hot_ttl = HOT_TTL,
	    .lagging = true,
	    .lagging_size = 32ull * BS,
	    .lagging_ttl = 600,
	    .lagging_rate = 0,
	    .lagging_burst = 0,
	    .lagging_ops = 0,
	    .readahead = 0,
	};
}

static struct cache *mk(const struct cache_cfg *cfg)
{
	struct cache *c = NULL;

	world_reset();
	W.bs = cfg->block_size;
	assert_int_equal(new_cache(cfg, &ENV, f_fetch, NULL, 0, &c), 0);
	assert_non_null(c);
	assert_int_equal(cache_block_size(c), cfg->block_size);
	return c;
}

static struct cache_stats stats(struct cache *c)
{
	struct cache_stats st;

	memset(&st, 0xa5, sizeof(st));
	cache_get_stats(c, &st);
	return st;
}

/*
 * Stop like the mount does: the I/O thread stops (no new timers; pending ones run once, as
 * io.c does at shutdown), every started fetch is completed, then cache_free. Afterwards every
 * hold must have been released and every timer run. No fetch may be open when this is called:
 * each test completes its own.
 */
static void shut(struct cache *c)
{
	assert_int_equal(W.nopen, 0);
	W.defer_err = -ESHUTDOWN;
	for (int round = 0; W.tpending || W.nopen; round++) {
		assert_true(round < 1000);
		for (size_t i = 0; i < W.nt; i++)
			if (!W.t[i].fired) {
				W.t[i].fired = true;
				W.tpending--;
				W.t[i].cb(W.t[i].arg);
			}
		complete_all(0);
	}
	cache_free(c);
	assert_int_equal(W.holds, 0);
	assert_int_equal(W.bad_release, 0);
	assert_int_equal(W.fetch_bad, 0);
	assert_int_equal(W.single_dup, 0);
	assert_int_equal(W.tpending, 0);
}

/* The fetches started since index @from, sorted by offset, must be exactly @n blocks
 * (@blk[i] of object @o, at their real lengths). */
static void expect_fetches(size_t from, const struct fobj *o, const uint64_t *blk, size_t n)
{
	size_t got = 0;

	for (size_t i = from; i < W.nf; i++) {
		bool found = false;

		assert_ptr_equal(W.f[i].o, o);
		for (size_t k = 0; k < n; k++)
			if (W.f[i].off == blk[k] * BS) {
				uint64_t end = (blk[k] + 1) * BS;

				assert_int_equal(W.f[i].len,
						 (end < o->size ? end : o->size) - W.f[i].off);
				found = true;
			}
		assert_true(found);
		got++;
	}
	assert_int_equal(got, n);
}

/* ---------------------------------------------------------------------------------------------
 * cache_new
 * ------------------------------------------------------------------------------------------ */

static void test_new_einval(void **state)
{
	struct cache_cfg cfg;
	struct cache *c = NULL;

	(void)state;
	world_reset();
	cfg = base_cfg();
	cfg.block_size = 0;
	assert_int_equal(new_cache(&cfg, &ENV, f_fetch, NULL, 0, &c), -EINVAL);
	cfg.block_size = 3 * 4096;
	assert_int_equal(new_cache(&cfg, &ENV, f_fetch, NULL, 0, &c), -EINVAL);
	/* a tier must hold 4 segments of at least 2 blocks: anything smaller is -EINVAL, never
	 * -ENOMEM */
	for (uint64_t nb = 0; nb < 8; nb++) {
		cfg = base_cfg();
		cfg.hot_size = nb * BS;
		assert_int_equal(new_cache(&cfg, &ENV, f_fetch, NULL, 0, &c), -EINVAL);
		cfg = base_cfg();
		cfg.lagging_size = nb * BS;
		assert_int_equal(new_cache(&cfg, &ENV, f_fetch, NULL, 0, &c), -EINVAL);
	}
	cfg = base_cfg();
	cfg.hot_size = 8ull * BS - 1;
	assert_int_equal(new_cache(&cfg, &ENV, f_fetch, NULL, 0, &c), -EINVAL);
	/* blocks under 64 bytes still take 64 in a segment */
	cfg = base_cfg();
	cfg.block_size = 16;
	cfg.hot_size = 8 * 16;
	cfg.lagging_size = 4096;
	assert_int_equal(new_cache(&cfg, &ENV, f_fetch, NULL, 0, &c), -EINVAL);
	cfg.hot_size = 4 * 80;
	assert_int_equal(new_cache(&cfg, &ENV, f_fetch, NULL, 0, &c), -EINVAL);
	cfg.hot_size = 4 * 128;
	assert_int_equal(new_cache(&cfg, &ENV, f_fetch, NULL, 0, &c), 0);
	cache_free(c);
	c = NULL;
	/* the lagging size does not matter with lagging off */
	cfg = base_cfg();
	cfg.lagging = false;
	cfg.lagging_size = 0;
	assert_int_equal(new_cache(&cfg, &ENV, f_fetch, NULL, 0, &c), 0);
	cache_free(c);
	c = NULL;
	cfg = base_cfg();
	cfg.hot_size = 8ull * BS;
	cfg.lagging_size = 8ull * BS;
	assert_int_equal(new_cache(&cfg, &ENV, f_fetch, NULL, 0, &c), 0);
	cache_free(c);
	cache_free(NULL);
	assert_null(W.f);
	assert_int_equal(W.holds, 0);
}

/* ---------------------------------------------------------------------------------------------
 * Block alignment
 * ------------------------------------------------------------------------------------------ */

struct acase {
	uint64_t off;
	size_t len;
	uint64_t blk[8]; /* blocks fetched */
	size_t nblk;
};

/* One read of a fresh object of @size: the fetches are exactly the blocks expected, at their
 * real lengths; completing them in reverse order answers it with the pattern slice. */
static void one_case(struct cache *c, uint64_t *id, uint64_t size, const struct acase *k)
{
	struct fobj fo;
	struct cache_obj o = mkobj(&fo, ++*id, size, WALL0);
	struct rep r = {0};
	size_t from = W.nf;
	bool sync;

	sync = rd(c, &o, NULL, k->off, k->len, &r);
	expect_fetches(from, &fo, k->blk, k->nblk);
	if (k->nblk == 0) {
		assert_true(sync);
	} else {
		assert_false(sync);
		for (size_t i = W.nf; i-- > from;) {
			assert_int_equal(r.calls, 0);
			complete(i, 0);
		}
	}
	check_ok(&r);
	assert_int_equal(fo.holds, 0);
	rep_done(&r);
}

static void test_alignment(void **state)
{
	const uint64_t size = 3ull * BS + 1000; /* blocks 0..2 full, block 3 is 1000 bytes */
	const struct acase cases[] = {
	    {0, 1, {0}, 1},
	    {0, 100, {0}, 1},
	    {0, BS, {0}, 1},
	    {BS - 1, 1, {0}, 1},
	    {BS - 1, 2, {0, 1}, 2},
	    {BS, 1, {1}, 1},
	    {BS, BS, {1}, 1},
	    {BS + 1, 10, {1}, 1},
	    {BS + 1, BS, {1, 2}, 2},
	    {BS - 1, BS + 2, {0, 1, 2}, 3},
	    {1, 3ull * BS, {0, 1, 2, 3}, 4},
	    {0, size, {0, 1, 2, 3}, 4},
	    {3ull * BS, 1000, {3}, 1},
	    {3ull * BS, 5000, {3}, 1},	      /* clipped to the short last block */
	    {3ull * BS + 999, 1, {3}, 1},     /* the very last byte */
	    {size - 10, 100, {3}, 1},	      /* clipped */
	    {3ull * BS - 1, 2, {2, 3}, 2},    /* spans into the short block */
	    {BS + 5, SIZE_MAX, {1, 2, 3}, 3}, /* to the end, whatever the length */
	    {size, 10, {0}, 0},		      /* exactly at the end: empty reply */
	    {size + 1, 10, {0}, 0},	      /* past the end */
	    {UINT64_MAX, 10, {0}, 0},
	    {0, 0, {0}, 0}, /* len 0 */
	    {BS, 0, {0}, 0},
	};
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk(&cfg);
	uint64_t id = 100;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		one_case(c, &id, size, &cases[i]);

	/* an object of exactly two blocks: no short block, its last block is fetched whole */
	const struct acase two[] = {
	    {0, 2ull * BS, {0, 1}, 2},
	    {BS, 2ull * BS, {1}, 1},
	    {2ull * BS - 1, 10, {1}, 1},
	    {2ull * BS, 10, {0}, 0},
	};
	for (size_t i = 0; i < sizeof(two) / sizeof(two[0]); i++)
		one_case(c, &id, 2ull * BS, &two[i]);

	/* a one-byte object and an empty one */
	const struct acase tiny[] = {{0, 10, {0}, 1}, {1, 10, {0}, 0}};
	for (size_t i = 0; i < sizeof(tiny) / sizeof(tiny[0]); i++)
		one_case(c, &id, 1, &tiny[i]);
	const struct acase empty[] = {{0, 10, {0}, 0}, {0, 0, {0}, 0}, {5, 1, {0}, 0}};
	for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++)
		one_case(c, &id, 0, &empty[i]);

	assert_int_equal(W.nopen, 0);
	shut(c);
}

/* ---------------------------------------------------------------------------------------------
 * Hits
 * ------------------------------------------------------------------------------------------ */

static void test_hits(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk(&cfg);
	struct fobj fo;
	struct cache_obj o = mkobj(&fo, 7, 3ull * BS, WALL0 - 1);
	struct rep r = {0};
	struct cache_stats st;
	char res[8];

	(void)state;
	assert_false(rd(c, &o, NULL, 10, 2 * BS, &r)); /* blocks 0..2 */
	assert_int_equal(W.nf, 3);
	assert_int_equal(cache_residency(c, &o, res, sizeof(res)), 3);
	assert_string_equal(res, "---"); /* reserved is not resident */
	complete_all(0);
	check_ok(&r);
	assert_int_equal(cache_residency(c, &o, res, sizeof(res)), 3);
	assert_string_equal(res, "hhh");
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].misses, 3);
	assert_int_equal(st.tier[CACHE_HOT].fetches, 3);
	assert_int_equal(st.tier[CACHE_HOT].bytes_fetched, 3ull * BS);
	assert_int_equal(st.tier[CACHE_HOT].blocks, 3);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 0);

	/* the same read, and others inside the resident range: answered before cache_read
	 * returns, no fetch */
	assert_true(rd(c, &o, NULL, 10, 2 * BS, &r));
	check_ok(&r);
	assert_true(rd(c, &o, NULL, BS - 3, 6, &r));
	check_ok(&r);
	assert_true(rd(c, &o, NULL, 0, SIZE_MAX, &r));
	check_ok(&r);
	assert_int_equal(r.niov, 3);
	assert_int_equal(W.nf, 3);
	assert_int_equal(W.attempts, 3);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].hits, 3 + 2 + 3);
	assert_int_equal(st.tier[CACHE_HOT].misses, 3);
	assert_int_equal(st.tier[CACHE_HOT].bytes_served, (2 * BS) * 2 + 6 + 3 * BS);
	assert_int_equal(st.tier[CACHE_LAG].hits, 0);

	/* a truncated residency string still reports the block count */
	assert_int_equal(cache_residency(c, &o, res, 2), 3);
	assert_string_equal(res, "h");
	rep_done(&r);
	shut(c);
}

/* The reply says which tier served the read (the deepest of its blocks) and the bytes fetched
 * for the blocks it waited for; outside a reply, and for an answer without data, nothing. */
static void test_reply_served(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk(&cfg);
	struct fobj fo;
	struct cache_obj o = mkobj(&fo, 8, 3ull * BS + 100, WALL0 - 1);
	struct rep r = {0};

	(void)state;
	assert_null(cache_reply_served());
	assert_false(rd(c, &o, NULL, 0, 2 * BS, &r));
	complete_all(0);
	check_ok(&r);
	assert_string_equal(r.served, "store");
	assert_int_equal(r.fetched, 2 * BS);
	assert_true(rd(c, &o, NULL, 10, BS, &r)); /* both blocks resident */
	assert_string_equal(r.served, "hot");
	assert_int_equal(r.fetched, 0);
	assert_false(rd(c, &o, NULL, BS, 3 * BS, &r)); /* block 1 hot, 2 and 3 (short) fetched */
	complete_all(0);
	check_ok(&r);
	assert_string_equal(r.served, "store");
	assert_int_equal(r.fetched, BS + 100);
	assert_true(rd(c, &o, NULL, 4 * BS, 10, &r)); /* past the end: no data */
	assert_null(r.served);
	assert_null(cache_reply_served());
	rep_done(&r);
	shut(c);
}

/* A fetcher that completes synchronously, from inside fetch(), is allowed by the interface. */
static int sync_fetch(void *arg, void *ctx, uint64_t off, uint32_t len, void *dst, bool lagging,
		      cache_done_fn done, void *done_arg)
{
	int r = f_fetch(arg, ctx, off, len, dst, lagging, done, done_arg);

	if (r == 0)
		complete(W.nf - 1, 0);
	return r;
}

static void test_sync_completion(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache_env env = ENV;
	struct cache *c = NULL;
	struct fobj fo;
	struct cache_obj o = mkobj(&fo, 9, 5ull * BS + 7, WALL0);
	struct cache_stream s = {0};
	struct rep r = {0};

	(void)state;
	world_reset();
	W.bs = BS;
	cfg.readahead = 2;
	assert_int_equal(new_cache(&cfg, &env, sync_fetch, NULL, 0, &c), 0);
	assert_true(rd(c, &o, &s, 0, BS + 1, &r));
	check_ok(&r);
	assert_int_equal(W.nf, 4); /* blocks 0, 1 and readahead 2, 3 */
	assert_true(rd(c, &o, &s, BS + 1, SIZE_MAX, &r));
	check_ok(&r);
	assert_int_equal(W.nf, 6);
	assert_int_equal(W.nopen, 0);
	rep_done(&r);
	shut(c);
	assert_int_equal(fo.holds, 0);
}

/* ---------------------------------------------------------------------------------------------
 * Single-flight
 * ------------------------------------------------------------------------------------------ */

static void test_single_flight(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk(&cfg);
	struct fobj fo;
	struct cache_obj o = mkobj(&fo, 11, 4ull * BS, WALL0);
	struct cache_stream s[50];
	struct rep r[50];
	struct rep sp = {0};
	struct cache_stats st;

	(void)state;
	memset(s, 0, sizeof(s));
	memset(r, 0, sizeof(r));
	for (int i = 0; i < 50; i++) {
		uint64_t off = (uint64_t)(i * 1301) % BS;
		size_t len = 1 + (size_t)(i * 977) % (BS - off);

		assert_false(rd(c, &o, i % 3 ? &s[i] : NULL, off, len, &r[i]));
		assert_int_equal(W.nf, 1);
		assert_int_equal(fo.holds, 1);
	}
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].misses, 1);
	assert_int_equal(st.tier[CACHE_HOT].joins, 49);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 1);
	complete(0, 0);
	for (int i = 0; i < 50; i++) {
		check_ok(&r[i]);
		rep_done(&r[i]);
	}
	assert_int_equal(fo.holds, 0);

	/* a read over blocks 1..2 while 2 is in flight: joins 2, starts 1 */
	assert_false(rd(c, &o, NULL, 2 * BS + 5, 10, &r[0]));
	assert_int_equal(W.nf, 2);
	assert_false(rd(c, &o, NULL, BS + 100, BS, &sp));
	assert_int_equal(W.nf, 3);
	assert_int_equal(W.f[2].off, BS);
	assert_int_equal(W.attempts, 3);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].joins, 50);
	assert_int_equal(st.tier[CACHE_HOT].misses, 3);
	complete_blk(11, 2, 0);
	check_ok(&r[0]);
	assert_int_equal(sp.calls, 0); /* still waiting for block 1 */
	complete_blk(11, 1, 0);
	check_ok(&sp);

	/* and with the in-flight block first: 2 joins 3, starts nothing else */
	assert_false(rd(c, &o, NULL, 3 * BS, 1, &r[0]));
	assert_false(rd(c, &o, NULL, 2 * BS, 2 * BS, &sp));
	assert_int_equal(W.nf, 4);
	complete_blk(11, 3, 0);
	check_ok(&r[0]);
	check_ok(&sp);
	rep_done(&r[0]);
	rep_done(&sp);
	shut(c);
}

/* ---------------------------------------------------------------------------------------------
 * Failures
 * ------------------------------------------------------------------------------------------ */

static void test_fetch_failure(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk(&cfg);
	struct fobj fo;
	struct cache_obj o = mkobj(&fo, 21, 2ull * BS, WALL0);
	struct rep r[3] = {{0}};
	struct cache_stats st;
	char res[4];

	(void)state;
	for (int i = 0; i < 3; i++)
		assert_false(rd(c, &o, NULL, (uint64_t)i * 100, 50, &r[i]));
	assert_int_equal(W.nf, 1);
	complete(0, -EIO);
	for (int i = 0; i < 3; i++)
		check_err(&r[i], -EIO);
	cache_residency(c, &o, res, sizeof(res));
	assert_string_equal(res, "--");
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].fetch_errors, 1);
	assert_int_equal(st.tier[CACHE_HOT].bytes_fetched, 0);
	assert_int_equal(st.tier[CACHE_HOT].blocks, 0);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 0);
	assert_int_equal(fo.holds, 0);

	/* nothing stuck: the next read starts a new fetch, which can succeed */
	assert_false(rd(c, &o, NULL, 100, 50, &r[0]));
	assert_int_equal(W.nf, 2);
	assert_int_equal(r[1].calls, 1); /* old readers are not answered again */
	complete(1, 0);
	check_ok(&r[0]);
	for (int i = 1; i < 3; i++)
		assert_int_equal(r[i].calls, 1);
	cache_residency(c, &o, res, sizeof(res));
	assert_string_equal(res, "h-");
	for (int i = 0; i < 3; i++)
		rep_done(&r[i]);
	shut(c);
}

static void test_sync_fetch_error(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo, fl;
	struct cache_obj o, lo;
	struct rep r[4] = {{0}};
	struct cache_stats st;

	(void)state;
	cfg.lagging_rate = MIB;
	cfg.lagging_burst = BS;
	c = mk(&cfg);
	o = mkobj(&fo, 31, 2ull * BS, WALL0);
	lo = mkobj(&fl, 32, 3ull * BS, OLD);

	/* hot: the reader is answered at once with the fetcher's error */
	W.fetch_err = -ECONNREFUSED;
	assert_true(rd(c, &o, NULL, 0, 2 * BS, &r[0]));
	check_err(&r[0], -ECONNREFUSED);
	assert_int_equal(W.attempts, 2);
	assert_int_equal(W.nopen, 0);
	assert_int_equal(fo.holds, 0);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 0);
	assert_int_equal(st.tier[CACHE_HOT].fetch_errors, 2);
	W.fetch_err = 0;
	assert_false(rd(c, &o, NULL, 0, 2 * BS, &r[0]));
	complete_all(0);
	check_ok(&r[0]);

	/* lagging: block 0 takes the bucket; block 1 queues with three readers; the fetcher
	 * refuses when the timer lets it start: all three get the error once */
	assert_false(rd(c, &lo, NULL, 0, 1, &r[0]));
	for (int i = 1; i < 4; i++)
		assert_false(rd(c, &lo, NULL, BS + (uint64_t)i, 1, &r[i]));
	assert_int_equal(W.nopen, 1);
	assert_int_equal(W.tpending, 1);
	W.fetch_err = -ECONNREFUSED;
	W.mono += last_timer()->delay;
	assert_int_equal(fire_due(), 1);
	for (int i = 1; i < 4; i++)
		check_err(&r[i], -ECONNREFUSED);
	assert_int_equal(r[0].calls, 0);
	W.fetch_err = 0;
	complete_all(0);
	check_ok(&r[0]);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].inflight, 0);
	assert_int_equal(st.tier[CACHE_LAG].queued, 0);
	assert_int_equal(fl.holds, 0);
	for (int i = 0; i < 4; i++)
		rep_done(&r[i]);
	shut(c);
}

/* A read over several blocks, one of which fails: one reply, the error; every pin let go. */
static void test_multiblock_failure(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj o;
	struct rep r = {0};
	struct cache_stats st;

	(void)state;
	cfg.hot_size = 8ull * BS; /* 4 segments of 2 blocks: a leaked pin soon blocks rotation */
	cfg.lagging = false;
	c = mk(&cfg);
	o = mkobj(&fo, 41, 40ull * BS, WALL0);

	/* block 0 resident (pinned by the read), blocks 1 and 2 fetched */
	assert_false(rd(c, &o, NULL, 0, 1, &r));
	complete_all(0);
	check_ok(&r);
	assert_false(rd(c, &o, NULL, 10, 3 * BS - 20, &r));
	assert_int_equal(W.nopen, 2);
	complete_blk(41, 1, -EIO);
	assert_int_equal(r.calls, 0);
	complete_blk(41, 2, 0);
	check_err(&r, -EIO);

	/* the same with the failing block completing last */
	assert_false(rd(c, &o, NULL, 4 * BS - 1, BS + 2, &r)); /* blocks 3..5 */
	assert_int_equal(W.nopen, 3);
	complete_blk(41, 3, 0);
	complete_blk(41, 5, 0);
	assert_int_equal(r.calls, 0);
	complete_blk(41, 4, -ENOENT);
	check_err(&r, -ENOENT);

	/* two failures in one read: still one reply */
	assert_false(rd(c, &o, NULL, 6 * BS, 2 * BS, &r)); /* blocks 6, 7 */
	complete_blk(41, 6, -EIO);
	complete_blk(41, 7, -ETIMEDOUT);
	check_err(&r, -EIO);

	/* no pin leaked: many more blocks one at a time rotate through every segment */
	for (uint64_t b = 8; b < 40; b++) {
		assert_false(rd(c, &o, NULL, b * BS, BS, &r));
		complete_all(0);
		check_ok(&r);
	}
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].bounces, 0);
	assert_true(st.tier[CACHE_HOT].rotations > 4);
	assert_int_equal(st.tier[CACHE_HOT].fetch_errors, 4);
	rep_done(&r);
	shut(c);
}

/* Every segment pinned by reservations in flight: the overflow goes to bounce buffers. */
static void test_bounce(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj o;
	struct rep r[12] = {{0}}, again = {0};
	struct cache_stats st;
	char res[16];

	(void)state;
	cfg.hot_size = 8ull * BS; /* 4 segments x 2 blocks */
	cfg.lagging = false;
	c = mk(&cfg);
	o = mkobj(&fo, 51, 12ull * BS - 100, WALL0);
	for (int i = 0; i < 12; i++)
		assert_false(rd(c, &o, NULL, (uint64_t)i * BS + 3, BS - 3, &r[i]));
	assert_int_equal(W.nopen, 12);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].bounces, 4);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 12);
	/* complete in a scrambled order */
	for (int k = 0; k < 12; k++) {
		int i = (k * 5 + 3) % 12;

		complete_blk(51, (uint64_t)i, 0);
		check_ok(&r[i]);
	}
	cache_residency(c, &o, res, sizeof(res));
	assert_string_equal(res, "hhhhhhhh----");
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].blocks, 8);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 0);

	/* a bounced block was not stored: reading it again fetches it again, into the ring now */
	assert_false(rd(c, &o, NULL, 9 * BS, 10, &again));
	complete_all(0);
	check_ok(&again);
	assert_true(rd(c, &o, NULL, 9 * BS, 10, &again));
	check_ok(&again);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].bounces, 4);
	for (int i = 0; i < 12; i++)
		rep_done(&r[i]);
	rep_done(&again);
	shut(c);
}

/* ---------------------------------------------------------------------------------------------
 * Routing
 * ------------------------------------------------------------------------------------------ */

static void test_is_lagging(void **state)
{
	(void)state;
	assert_false(cache_is_lagging(1000 - 60, 1000, 60)); /* age == hot_ttl: hot */
	assert_true(cache_is_lagging(1000 - 61, 1000, 60));  /* hot_ttl + 1: lagging */
	assert_false(cache_is_lagging(1000 - 59, 1000, 60));
	assert_false(cache_is_lagging(1000, 1000, 60));
	assert_false(cache_is_lagging(1001, 1000, 60)); /* future */
	assert_false(cache_is_lagging(INT64_MAX, 1000, 60));
	assert_false(cache_is_lagging(INT64_MIN, 1000, 60)); /* unknown: hot */
	assert_false(cache_is_lagging(INT64_MIN, INT64_MAX, 0));
	assert_true(cache_is_lagging(0, INT64_MAX, 60));
	assert_true(cache_is_lagging(INT64_MIN + 1, INT64_MAX, 60)); /* no overflow */
	assert_true(cache_is_lagging(INT64_MIN + 1, 0, 60));
	/* ages beyond INT64_MAX are still compared with hot_ttl, exactly */
	assert_true(cache_is_lagging(-1, INT64_MAX, (uint64_t)INT64_MAX)); /* age 2^63 */
	assert_false(cache_is_lagging(-1, INT64_MAX, (uint64_t)INT64_MAX + 1));
	assert_false(cache_is_lagging(INT64_MIN + 1, INT64_MAX, UINT64_MAX)); /* age 2^64 - 2 */
	assert_false(cache_is_lagging(INT64_MIN + 1, INT64_MAX, UINT64_MAX - 1));
	assert_true(cache_is_lagging(INT64_MIN + 1, INT64_MAX, UINT64_MAX - 2));
	assert_true(cache_is_lagging(-100, -10, 89));
	assert_false(cache_is_lagging(-100, -10, 90));
	assert_true(cache_is_lagging(INT64_MAX - 1, INT64_MAX, 0));
	assert_false(cache_is_lagging(INT64_MAX, INT64_MAX, 0));
}

static void test_route(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk(&cfg);
	struct fobj fo;
	struct cache_obj o = mkobj(&fo, 61, BS, WALL0 - HOT_TTL);
	struct rep r = {0};
	char res[4];

	(void)state;
	assert_int_equal(cache_route(c, &o), CACHE_HOT);
	W.wall++;
	assert_int_equal(cache_route(c, &o), CACHE_LAG);
	o.mtime = INT64_MIN;
	assert_int_equal(cache_route(c, &o), CACHE_HOT);
	o.mtime = W.wall + 1000;
	assert_int_equal(cache_route(c, &o), CACHE_HOT);
	o.mtime = INT64_MIN + 1;
	W.wall = INT64_MAX;
	assert_int_equal(cache_route(c, &o), CACHE_LAG);
	o.mtime = 0;
	assert_int_equal(cache_route(c, &o), CACHE_LAG);

	/* hot_ttl is live */
	W.wall = WALL0;
	o.mtime = WALL0 - 100;
	assert_int_equal(cache_route(c, &o), CACHE_LAG);
	assert_int_equal(cache_set_hot_ttl(c, 100), 0);
	assert_int_equal(cache_route(c, &o), CACHE_HOT);
	assert_int_equal(cache_set_hot_ttl(c, 99), 0);
	assert_int_equal(cache_route(c, &o), CACHE_LAG);
	assert_int_equal(cache_set_hot_ttl(c, 0), -EINVAL);
	assert_int_equal(cache_route(c, &o), CACHE_LAG);
	shut(c);

	/* lagging off: everything is hot, and fetched as hot */
	cfg.lagging = false;
	c = mk(&cfg);
	o = mkobj(&fo, 62, BS, 0);
	W.wall = INT64_MAX;
	assert_int_equal(cache_route(c, &o), CACHE_HOT);
	assert_false(rd(c, &o, NULL, 0, 10, &r));
	assert_false(W.f[0].lagging);
	complete_all(0);
	check_ok(&r);
	cache_residency(c, &o, res, sizeof(res));
	assert_string_equal(res, "h");
	rep_done(&r);
	shut(c);
}

/* Read one byte of each block in @blks[0..n) and complete the fetches. */
static void warm(struct cache *c, const struct cache_obj *o, const uint64_t *blks, size_t n)
{
	struct rep r = {0};

	for (size_t i = 0; i < n; i++) {
		if (!rd(c, o, NULL, blks[i] * BS + 7, 1, &r)) {
			complete_all(0);
			check_ok(&r);
		}
	}
	rep_done(&r);
}

/* user.tierfs.cached: ranges of what the tiers hold of one object, found from the rings'
 * indexes (a 4 TiB object of 64K blocks has 2^26 blocks: its last one shows, and nothing
 * walks the others), at most max_ranges of them, then a count of the rest. */
static void test_residency_text(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk(&cfg);
	struct fobj fo, fe;
	const uint64_t size = 4ull << 40, last = (size / BS) - 1;
	struct cache_obj o = mkobj(&fo, 81, size, WALL0 - 5);
	struct cache_obj other = mkobj(&fe, 82, 10ull * BS, WALL0 - 5);
	const uint64_t hot[] = {0, 1, 2, 5, last, 9, 7};
	const uint64_t lag[] = {3, 4, 11, 12};
	char buf[256], map[8];

	(void)state;
	assert_int_equal(cache_residency_text(c, &o, 64, buf, sizeof(buf)), 4);
	assert_string_equal(buf, "none");

	warm(c, &o, hot, sizeof(hot) / sizeof(hot[0]));
	assert_int_equal(cache_residency_text(c, &o, 64, buf, sizeof(buf)),
			 (int)strlen("hot=0-2,5,7,9,67108863"));
	assert_string_equal(buf, "hot=0-2,5,7,9,67108863");
	/* another object's blocks are not this one's */
	assert_int_equal(cache_residency_text(c, &other, 64, buf, sizeof(buf)), 4);
	assert_string_equal(buf, "none");

	/* the object ages past hot_ttl: new blocks go to the lagging tier */
	W.wall += HOT_TTL + 1000;
	W.mono += 1 * NS;
	warm(c, &o, lag, sizeof(lag) / sizeof(lag[0]));
	assert_int_equal(W.nopen, 0);
	cache_residency_text(c, &o, 64, buf, sizeof(buf));
	assert_string_equal(buf, "hot=0-2,5,7,9,67108863 lagging=3-4,11-12");

	/* bounded: the first ranges in block order, then how many more */
	cache_residency_text(c, &o, 3, buf, sizeof(buf));
	assert_string_equal(buf, "hot=0-2,5 lagging=3-4 (+4 more ranges)");
	cache_residency_text(c, &o, 1, buf, sizeof(buf));
	assert_string_equal(buf, "hot=0-2 (+6 more ranges)");
	cache_residency_text(c, &o, 0, buf, sizeof(buf));
	assert_string_equal(buf, "(+7 more ranges)");

	/* snprintf's contract: the length it needs, a NUL-terminated prefix */
	assert_int_equal(cache_residency_text(c, &o, 3, buf, 8),
			 (int)strlen("hot=0-2,5 lagging=3-4 (+4 more ranges)"));
	assert_string_equal(buf, "hot=0-2");
	assert_int_equal(cache_residency_text(c, &o, 3, NULL, 0),
			 (int)strlen("hot=0-2,5 lagging=3-4 (+4 more ranges)"));

	/* the per-block map agrees, and costs what its buffer holds, not 2^26 blocks */
	assert_int_equal(cache_residency(c, &o, map, sizeof(map)), (size_t)(size / BS));
	assert_string_equal(map, "hhhllh-");

	/* expired blocks are not resident: the hot ones after hot_ttl (60 s), the lagging ones
	 * after lagging_ttl (600 s) */
	W.mono += 61 * NS;
	cache_residency_text(c, &o, 64, buf, sizeof(buf));
	assert_string_equal(buf, "lagging=3-4,11-12");
	W.mono += 600 * NS;
	cache_residency_text(c, &o, 64, buf, sizeof(buf));
	assert_string_equal(buf, "none");
	shut(c);
}

/* Many ranges: the answer stays short however many the tiers hold. */
static void test_residency_text_bound(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj o;
	uint64_t blks[200];
	char buf[4096], want[64];
	int n;

	(void)state;
	cfg.hot_size = 512ull * BS;
	c = mk(&cfg);
	o = mkobj(&fo, 91, 1000ull * BS, WALL0 - 5);
	for (size_t i = 0; i < 200; i++)
		blks[i] = 2 * i; /* 200 ranges of one block */
	warm(c, &o, blks, 200);
	n = cache_residency_text(c, &o, 64, buf, sizeof(buf));
	assert_true(n > 0 && n < 512);
	assert_int_equal((size_t)n, strlen(buf));
	assert_int_equal(strncmp(buf, "hot=0,2,4,", 10), 0);
	snprintf(want, sizeof(want), ",126 (+136 more ranges)");
	assert_non_null(strstr(buf, want));
	assert_int_equal(strlen(strstr(buf, want)), strlen(want));
	shut(c);
}

/* Invariant 5: lagging reads never insert into the hot tier; a hot hit is served at any age. */
static void test_lagging_tier(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk(&cfg);
	struct fobj fo, fy;
	struct cache_obj old = mkobj(&fo, 71, 2ull * BS + 10, OLD);
	struct cache_obj young = mkobj(&fy, 72, 3ull * BS, WALL0 - 5);
	struct rep r = {0};
	struct cache_stats st;
	char res[8];

	(void)state;
	assert_false(rd(c, &old, NULL, 0, 3 * BS, &r));
	assert_int_equal(W.nf, 3);
	for (size_t i = 0; i < 3; i++)
		assert_true(W.f[i].lagging);
	complete_all(0);
	check_ok(&r);
	cache_residency(c, &old, res, sizeof(res));
	assert_string_equal(res, "lll");
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].bytes_fetched, 2ull * BS + 10);
	assert_int_equal(st.tier[CACHE_LAG].misses, 3);
	assert_int_equal(st.tier[CACHE_LAG].blocks, 3);
	assert_int_equal(st.tier[CACHE_HOT].bytes_fetched, 0);
	assert_int_equal(st.tier[CACHE_HOT].misses, 0);
	assert_int_equal(st.tier[CACHE_HOT].blocks, 0);
	assert_int_equal(st.tier[CACHE_HOT].bytes, 0);

	/* a lagging hit */
	assert_true(rd(c, &old, NULL, BS, 20, &r));
	check_ok(&r);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].hits, 1);
	assert_int_equal(st.tier[CACHE_LAG].bytes_served, 2ull * BS + 10 + 20);
	assert_int_equal(st.tier[CACHE_HOT].hits, 0);

	/* warm a young object's block 0 (hot), then let it age past hot_ttl */
	assert_false(rd(c, &young, NULL, 0, 100, &r));
	assert_false(W.f[3].lagging);
	complete_all(0);
	check_ok(&r);
	W.wall += HOT_TTL + 1000;
	W.mono += 1 * NS; /* well within the hot tier's block lifetime */
	assert_int_equal(cache_route(c, &young), CACHE_LAG);
	assert_true(rd(c, &young, NULL, 50, 100, &r)); /* a hot hit, whatever the age */
	check_ok(&r);
	assert_int_equal(W.nf, 4);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].hits, 1);
	assert_int_equal(st.tier[CACHE_LAG].hits, 1);
	/* its other blocks now go to the lagging tier */
	assert_false(rd(c, &young, NULL, 0, 2 * BS, &r));
	assert_int_equal(W.nf, 5);
	assert_true(W.f[4].lagging);
	complete_all(0);
	check_ok(&r);
	cache_residency(c, &young, res, sizeof(res));
	assert_string_equal(res, "hl-");
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].bytes_fetched, BS);
	assert_int_equal(st.tier[CACHE_LAG].bytes_fetched, 3ull * BS + 10);
	rep_done(&r);
	shut(c);
}

/* ---------------------------------------------------------------------------------------------
 * A lower tier (a tier of the chain before the store): a fake disk tier of a few blocks.
 * lower_get answers at once, from inside the call (L.async false), or later: it records the
 * read and the test completes it (lower_complete), as the disk tier's reader threads do.
 * ------------------------------------------------------------------------------------------ */

#define LOWER_MAX 8

/* A lower read started and not answered yet (L.async). */
struct lower_rd {
	struct cache_key key;
	uint32_t len;
	void *dst;
	cache_done_fn done;
	void *done_arg;
};

static struct lower {
	struct cache_key key[LOWER_MAX]; /* blocks it holds, with the pattern bytes */
	uint32_t len[LOWER_MAX];
	size_t n;
	int get_err;   /* nonzero: a held block fails its check (as a CRC failure) */
	bool async;    /* reads of held blocks are answered by lower_complete, not at once */
	struct lower_rd pend[LOWER_MAX]; /* those reads, in order */
	size_t npend;
	size_t gets, get_hits, has_calls, puts;
	struct cache_key put_key; /* the last put */
	uint32_t put_len;
	bool put_lagging;
	bool put_bytes_ok;
} L;

static int lower_find(struct cache_key k)
{
	for (size_t i = 0; i < L.n; i++)
		if (cache_key_eq(L.key[i], k))
			return (int)i;
	return -1;
}

/* Answer a held block's read: the pattern, or L.get_err (then garbage in dst). */
static void lower_answer(struct cache_key k, uint32_t len, void *dst, cache_done_fn done,
			 void *done_arg)
{
	for (uint32_t b = 0; b < len; b++)
		((unsigned char *)dst)[b] = L.get_err ? 0xee : pat(k.oid.lo, k.blk * W.bs + b);
	if (!L.get_err)
		L.get_hits++;
	done(done_arg, L.get_err);
}

static int l_get(void *arg, struct cache_key k, uint32_t len, void *dst, cache_done_fn done,
		 void *done_arg)
{
	int i = lower_find(k);

	L.gets++;
	if (i < 0 || L.len[i] != len)
		return -ENOENT; /* known at once: no callback */
	if (L.async) {
		assert_true(L.npend < LOWER_MAX);
		L.pend[L.npend++] = (struct lower_rd){k, len, dst, done, done_arg};
		return 0;
	}
	lower_answer(k, len, dst, done, done_arg);
	return 0;
}

/* Answer the oldest pending lower read (L.async), as a reader thread would. */
static void lower_complete(void)
{
	struct lower_rd q;

	assert_true(L.npend > 0);
	q = L.pend[0];
	memmove(&L.pend[0], &L.pend[1], --L.npend * sizeof(L.pend[0]));
	lower_answer(q.key, q.len, q.dst, q.done, q.done_arg);
}

static bool l_has(void *arg, struct cache_key k)
{
	L.has_calls++;
	return lower_find(k) >= 0;
}

static void l_put(void *arg, struct cache_key k, const void *src, uint32_t len, bool lagging)
{
	const unsigned char *b = src;

	L.puts++;
	L.put_key = k;
	L.put_len = len;
	L.put_lagging = lagging;
	L.put_bytes_ok = true;
	for (uint32_t i = 0; i < len; i++)
		if (b[i] != pat(k.oid.lo, k.blk * W.bs + i))
			L.put_bytes_ok = false;
}

static void lower_hold(uint64_t id, uint64_t blk, uint32_t len)
{
	assert_true(L.n < LOWER_MAX);
	L.key[L.n] = (struct cache_key){{.lo = id}, blk};
	L.len[L.n++] = len;
}

/* The fake lower tier as a tier of the chain, before the store. */
static void lower_answered(void *arg, int err)
{
	tier_answer(arg, err);
}

static int lt_get(void *self, struct tier_io *io)
{
	return l_get(self, io->key, io->len, io->dst, lower_answered, io);
}

static bool lt_has(void *self, struct cache_key k)
{
	return l_has(self, k);
}

static void lt_put(void *self, const struct tier_io *io, int err)
{
	if (!err)
		l_put(self, io->key, io->dst, io->len, io->lagging);
}

static const struct tier_ops LOWER_OPS = {.name = "disk", .get = lt_get, .has = lt_has,
					  .put = lt_put};

static struct cache *mk_lower(const struct cache_cfg *cfg)
{
	struct tier lower = {.ops = &LOWER_OPS};
	struct cache *c = NULL;

	world_reset();
	memset(&L, 0, sizeof(L));
	W.bs = cfg->block_size;
	assert_int_equal(new_cache(cfg, &ENV, f_fetch, &lower, 1, &c), 0);
	return c;
}

/* A lower hit answers with no store fetch, hot or lagging, and a lagging one takes no tokens
 * and waits for no timer, even when the bucket could not pay for it. */
static void test_lower_hit(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fh, fl;
	struct cache_obj hot, old;
	struct rep r = {0};
	struct cache_stats st;

	(void)state;
	cfg.lagging_rate = MIB;
	cfg.lagging_burst = 16 * KIB; /* a store fetch of a block would wait for a timer */
	c = mk_lower(&cfg);
	hot = mkobj(&fh, 301, 3ull * BS, WALL0 - 5);
	old = mkobj(&fl, 302, 2ull * BS + 100, OLD);
	lower_hold(301, 1, BS);
	lower_hold(302, 2, 100);

	assert_true(rd(c, &hot, NULL, BS + 10, 1000, &r));
	check_ok(&r);
	assert_true(rd(c, &old, NULL, 2ull * BS, 100, &r));
	check_ok(&r);
	assert_int_equal(W.attempts, 0);
	assert_int_equal(W.tpending, 0);
	assert_int_equal(L.get_hits, 2);
	assert_int_equal(L.puts, 0); /* nothing to write back */
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].lower_hits, 1);
	assert_int_equal(st.tier[CACHE_LAG].lower_hits, 1);
	assert_int_equal(st.tier[CACHE_LAG].bytes_fetched, 0);
	assert_int_equal(st.tier[CACHE_LAG].fetches, 0);
	assert_true(st.tier[CACHE_LAG].tokens == 16.0 * KIB); /* untouched */
	/* the answer says the chain's first tier served it */
	assert_int_equal(r.from, CACHE_NTIERS + 0);
	assert_string_equal(cache_source_name(c, (unsigned)r.from), "disk");
	/* the blocks are in the memory tiers now: the next reads are ring hits */
	assert_true(rd(c, &old, NULL, 2ull * BS, 100, &r));
	check_ok(&r);
	assert_int_equal(r.from, CACHE_LAG);
	assert_string_equal(cache_source_name(c, CACHE_LAG), "lagging");
	assert_null(cache_source_name(c, CACHE_NTIERS + 2)); /* past the chain */
	assert_int_equal(L.gets, 2);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].hits, 1);
	rep_done(&r);
	shut(c);
}

/* A lower miss fetches from the store and offers the block, with its tier, to lower_put. */
static void test_lower_miss_puts(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk_lower(&cfg);
	struct fobj fh, fl;
	struct cache_obj hot = mkobj(&fh, 311, 3ull * BS, WALL0 - 5);
	struct cache_obj old = mkobj(&fl, 312, 2ull * BS + 100, OLD);
	struct rep r = {0};

	(void)state;
	assert_false(rd(c, &hot, NULL, 0, 10, &r));
	assert_int_equal(W.nf, 1);
	assert_int_equal(L.gets, 1);
	assert_int_equal(L.puts, 0);
	complete_all(0);
	check_ok(&r);
	assert_int_equal(r.from, CACHE_NTIERS + 1); /* the store, below the lower tier */
	assert_string_equal(cache_source_name(c, (unsigned)r.from), "store");
	assert_int_equal(L.puts, 1);
	assert_true(cache_key_eq(L.put_key, (struct cache_key){{.lo = 311}, 0}));
	assert_int_equal(L.put_len, BS);
	assert_false(L.put_lagging);
	assert_true(L.put_bytes_ok);

	assert_false(rd(c, &old, NULL, 2ull * BS, 100, &r));
	complete_all(0);
	check_ok(&r);
	assert_int_equal(L.puts, 2);
	assert_int_equal(L.put_len, 100);
	assert_true(L.put_lagging);
	assert_true(L.put_bytes_ok);

	/* a failed store fetch offers nothing */
	assert_false(rd(c, &hot, NULL, BS, 10, &r));
	complete_all(-EIO);
	check_err(&r, -EIO);
	assert_int_equal(L.puts, 2);
	rep_done(&r);
	shut(c);
}

/* A lower tier that holds the block but fails its check (CRC) falls back to the store, and the
 * refetched bytes are offered again. */
static void test_lower_get_fails(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk_lower(&cfg);
	struct fobj fl;
	struct cache_obj old = mkobj(&fl, 321, 2ull * BS, OLD);
	struct rep r = {0};

	(void)state;
	lower_hold(321, 0, BS);
	L.get_err = -EBADMSG;
	assert_false(rd(c, &old, NULL, 0, BS, &r));
	assert_int_equal(L.gets, 1);
	assert_int_equal(W.nf, 1);
	complete_all(0);
	check_ok(&r);
	assert_int_equal(L.puts, 1);
	assert_true(L.put_bytes_ok);
	rep_done(&r);
	shut(c);
}

/* A lower read that answers later: nothing is answered nor fetched from the store until it
 * does, then the read is served from it; a second read of the block meanwhile joins the same
 * flight (one lower read). */
static void test_lower_async_hit(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk_lower(&cfg);
	struct fobj fh;
	struct cache_obj hot = mkobj(&fh, 331, 3ull * BS, WALL0 - 5);
	struct rep r = {0}, r2 = {0};
	struct cache_stats st;

	(void)state;
	L.async = true;
	lower_hold(331, 1, BS);
	assert_false(rd(c, &hot, NULL, BS + 10, 1000, &r));
	assert_false(rd(c, &hot, NULL, BS + 2000, 10, &r2));
	assert_int_equal(L.gets, 1);
	assert_int_equal(L.npend, 1);
	assert_int_equal(W.attempts, 0);
	assert_int_equal(r.calls, 0);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 1);
	lower_complete();
	check_ok(&r);
	check_ok(&r2);
	assert_int_equal(W.attempts, 0);
	assert_int_equal(L.puts, 0);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].lower_hits, 1);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 0);
	assert_int_equal(st.tier[CACHE_HOT].joins, 1);
	rep_done(&r);
	rep_done(&r2);
	shut(c);
}

/* A sequential reader's readahead window: every block of it the lower tier holds is asked for
 * before any answers (the disk tier reads them in parallel), and they may answer out of
 * order. */
static void test_lower_async_window(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fh;
	struct cache_obj hot;
	struct cache_stream s = {0};
	struct rep r = {0}, r2 = {0};

	(void)state;
	cfg.readahead = 4;
	c = mk_lower(&cfg);
	hot = mkobj(&fh, 341, 8ull * BS, WALL0 - 5);
	L.async = true;
	for (uint64_t b = 0; b < 6; b++)
		lower_hold(341, b, BS);
	assert_false(rd(c, &hot, &s, 0, BS, &r));
	assert_false(rd(c, &hot, &s, BS, BS, &r2)); /* sequential: the window opens */
	assert_true(L.npend >= 4);
	assert_int_equal(W.attempts, 0);
	/* answer the newest first */
	while (L.npend) {
		struct lower_rd q = L.pend[--L.npend];

		lower_answer(q.key, q.len, q.dst, q.done, q.done_arg);
	}
	check_ok(&r);
	check_ok(&r2);
	assert_int_equal(W.attempts, 0);
	rep_done(&r);
	rep_done(&r2);
	shut(c);
}

/* A lagging block the lower tier said it held skips the limiter; when its read fails later (a
 * CRC failure), the block is fetched from the store at once, charged to the limiter after the
 * fact and counted, and the refetched bytes are offered again. */
static void test_lower_async_fails_later(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fl;
	struct cache_obj old;
	struct rep r = {0};
	struct cache_stats st;

	(void)state;
	cfg.lagging_rate = MIB;
	cfg.lagging_burst = 4ull * BS;
	c = mk_lower(&cfg);
	old = mkobj(&fl, 351, 2ull * BS, OLD);
	L.async = true;
	L.get_err = -EBADMSG;
	lower_hold(351, 0, BS);
	assert_false(rd(c, &old, NULL, 0, BS, &r));
	assert_int_equal(L.npend, 1);
	assert_int_equal(W.nf, 0);
	st = stats(c);
	assert_true(st.tier[CACHE_LAG].tokens == 4.0 * BS); /* not charged yet */
	lower_complete();
	assert_int_equal(W.nf, 1); /* at once: no timer */
	assert_int_equal(W.tpending, 0);
	assert_true(W.f[0].lagging);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].lower_fallbacks, 1);
	assert_int_equal(st.tier[CACHE_LAG].lower_hits, 0);
	assert_int_equal(st.tier[CACHE_LAG].fetches, 1);
	assert_true(st.tier[CACHE_LAG].tokens == 3.0 * BS); /* charged */
	assert_int_equal(r.calls, 0);
	complete_all(0);
	check_ok(&r);
	assert_int_equal(L.puts, 1);
	assert_true(L.put_bytes_ok);
	rep_done(&r);
	shut(c);
}

/* A read cancelled while its block's lower read is under way: the read is answered -EINTR at
 * once; the lower read completes later into the ring, and the next read is a memory hit. */
static void test_lower_async_cancel(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk_lower(&cfg);
	struct fobj fh;
	struct cache_obj hot = mkobj(&fh, 361, 2ull * BS, WALL0 - 5);
	struct rep r = {0};
	uint64_t t;

	(void)state;
	L.async = true;
	lower_hold(361, 0, BS);
	t = cache_ticket(c);
	rep_init(&r, &hot, 0, 100);
	cache_read(c, &hot, NULL, 0, 100, t, on_reply, &r);
	assert_int_equal(L.npend, 1);
	cache_cancel(c, t);
	check_err(&r, -EINTR);
	lower_complete();
	assert_true(rd(c, &hot, NULL, 0, 100, &r));
	check_ok(&r);
	assert_int_equal(L.gets, 1);
	assert_int_equal(W.attempts, 0);
	rep_done(&r);
	shut(c);
}

/* ---------------------------------------------------------------------------------------------
 * The chain (tier.h). TT is a tier written for these tests in a few dozen lines and put in the
 * chain with one line (chain_tt), between the fake lower tier and the store: what tier.h's
 * essay says a new tier costs. It holds a few blocks, answers at once or when the test says
 * (tt_answer), may detach a block's read from its batch, and may own a gate whose source the
 * test feeds.
 * ------------------------------------------------------------------------------------------ */

#define TT_MAX 32

static struct tt {
	struct cache_key key[TT_MAX]; /* blocks it holds (the pattern bytes) */
	size_t n;
	bool async;                   /* misses and hits are answered by tt_answer */
	uint64_t detach_blk;          /* get of this block detaches first (UINT64_MAX: none) */
	struct tier_io *pend[TT_MAX]; /* reads not answered yet, in order */
	size_t npend;
	size_t gets, puts, put_errs;
	struct cache_key put_key[TT_MAX];
	struct gate gate;             /* with .gated: its gate, fed by tokens */
	bool gated;
	double tokens;                /* the gate's source: bytes it may let through */
	size_t asks;                  /* times the gate asked for more */
} TT;

static int tt_find(struct cache_key k)
{
	for (size_t i = 0; i < TT.n; i++)
		if (cache_key_eq(TT.key[i], k))
			return (int)i;
	return -1;
}

/* Answer pending read @i: the pattern if TT holds the block, else a miss. */
static void tt_answer(size_t i)
{
	struct tier_io *io;

	assert_true(i < TT.npend);
	io = TT.pend[i];
	memmove(&TT.pend[i], &TT.pend[i + 1], (--TT.npend - i) * sizeof(TT.pend[0]));
	if (tt_find(io->key) < 0) {
		tier_answer(io, -ENOENT);
		return;
	}
	for (uint32_t b = 0; b < io->len; b++)
		((unsigned char *)io->dst)[b] = pat(io->key.oid.lo, io->key.blk * W.bs + b);
	tier_answer(io, 0);
}

static int tt_get(void *self, struct tier_io *io)
{
	TT.gets++;
	if (io->key.blk == TT.detach_blk)
		tier_detach(io);
	assert_true(TT.npend < TT_MAX);
	TT.pend[TT.npend++] = io;
	if (!TT.async)
		tt_answer(TT.npend - 1);
	return 0;
}

static void tt_put(void *self, const struct tier_io *io, int err)
{
	if (err) {
		TT.put_errs++;
		return;
	}
	assert_true(TT.puts < TT_MAX);
	TT.put_key[TT.puts++] = io->key;
}

static const struct tier_ops TT_OPS = {.name = "test", .get = tt_get, .put = tt_put};

static uint64_t tt_take(void *src, uint64_t bytes, uint64_t now_ns)
{
	if (TT.tokens < (double)bytes)
		return GATE_LATER;
	TT.tokens -= (double)bytes;
	return 0;
}

static void tt_ask(void *src, uint64_t bytes)
{
	TT.asks++;
}

static const struct gate_src_ops TT_SRC = {.take = tt_take, .ask = tt_ask};

static void tt_grant(void *src, void *arg)
{
	TT.tokens += *(double *)arg;
}

static void plug(void *arg)
{
	if (W.plug_depth++ == 0)
		W.plug_gen++;
}

static void unplug(void *arg)
{
	assert_true(W.plug_depth > 0);
	W.plug_depth--;
}

/* A cache whose chain is [fake lower tier, TT, store], with env's plug counted. */
static struct cache *chain_tt(const struct cache_cfg *cfg)
{
	struct cache_env env = ENV;
	struct tier chain[2] = {{.ops = &LOWER_OPS}, {.ops = &TT_OPS}};
	struct cache *c = NULL;

	world_reset();
	memset(&L, 0, sizeof(L));
	memset(&TT, 0, sizeof(TT));
	TT.detach_blk = UINT64_MAX;
	W.bs = cfg->block_size;
	env.plug = plug;
	env.unplug = unplug;
	if (TT.gated || cfg->lagging_ops == 7) { /* lagging_ops 7: the tests' sign for a gate */
		gate_init(&TT.gate, &TT_SRC, NULL, 0, &ENV);
		TT.gated = true;
		chain[1].gate = &TT.gate;
	}
	assert_int_equal(new_cache(cfg, &env, f_fetch, chain, 2, &c), 0);
	return c;
}

static void tt_hold(uint64_t id, uint64_t blk)
{
	assert_true(TT.n < TT_MAX);
	TT.key[TT.n++] = (struct cache_key){{.lo = id}, blk};
}

/* A read walks down the chain: a block the lower tier has stops there, one the test tier has
 * stops there, the rest reach the store. Each block is then put into every tier its walk
 * passed, and only those: TT never gets the block it served nor the one above it served. */
/* cache_chain gives what loops over the tiers (the residency listing) the chain in order: a
 * new tier shows up there with no other change. */
static void test_chain_lists_its_tiers(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = chain_tt(&cfg);
	const struct tier *t;

	(void)state;
	assert_int_equal(cache_chain(c, &t), 3);
	assert_string_equal(t[0].ops->name, "disk");
	assert_string_equal(t[1].ops->name, "test");
	assert_ptr_equal(t[1].ops, &TT_OPS);
	assert_string_equal(t[2].ops->name, "store");
	shut(c);
}

static void test_chain_walks_down_and_puts_up(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = chain_tt(&cfg);
	struct fobj fo;
	struct cache_obj o = mkobj(&fo, 401, 4ull * BS, WALL0);
	struct cache_stats st;
	struct rep r = {0};

	(void)state;
	tt_hold(401, 1);
	lower_hold(401, 2, BS);
	assert_false(rd(c, &o, NULL, 0, 4 * BS, &r));
	assert_int_equal(W.nf, 2); /* blocks 0 and 3, together */
	assert_int_equal(W.f[0].off, 0);
	assert_int_equal(W.f[1].off, 3ull * BS);
	assert_int_equal(TT.gets, 3); /* 0, 1, 3: 2 stopped at the lower tier */
	complete_all(0);
	check_ok(&r);
	assert_int_equal(TT.puts, 2);
	assert_int_equal(TT.put_key[0].blk + TT.put_key[1].blk, 0 + 3);
	assert_int_equal(L.puts, 3); /* 0, 1 and 3 passed it */
	assert_true(L.put_bytes_ok);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].lower_hits, 2);
	assert_int_equal(st.tier[CACHE_HOT].fetches, 2);
	assert_int_equal(st.tier[CACHE_HOT].bytes_fetched, 2ull * BS);
	rep_done(&r);
	/* all four are in memory now */
	assert_true(rd(c, &o, NULL, 0, 4 * BS, &r));
	check_ok(&r);
	rep_done(&r);
	shut(c);
}

/* A batch that misses a slow tier goes on to the store together, once every block has
 * answered there, and under one plug: consecutive blocks that missed Redis can still go to the
 * store as one request (issue: 64 GETs for 256 MiB after Redis misses, 19 without it). */
static void test_chain_batch_reaches_the_store_together(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj o = mkobj(&fo, 402, 8ull * BS, WALL0);
	struct rep r = {0};

	(void)state;
	c = chain_tt(&cfg);
	TT.async = true;
	assert_false(rd(c, &o, NULL, 0, 4 * BS, &r));
	assert_int_equal(TT.npend, 4);
	tt_answer(2);
	tt_answer(0);
	tt_answer(1);
	assert_int_equal(W.nf, 0); /* one block still out at the test tier: the batch waits */
	tt_answer(0);
	assert_int_equal(W.nf, 4);
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(W.f[i].off, i * BS); /* in order */
		assert_int_not_equal(W.f[i].plug, 0);
		assert_int_equal(W.f[i].plug, W.f[0].plug); /* one plug for all four */
	}
	assert_int_equal(W.plug_depth, 0);
	complete_all(0);
	check_ok(&r);
	rep_done(&r);
	shut(c);
}

/* A block whose tier detaches it (it waits for another host) leaves its batch: the others go
 * to the store without waiting for it, and it follows alone when its answer comes. */
static void test_chain_detached_block_goes_alone(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj o = mkobj(&fo, 403, 4ull * BS, WALL0);
	struct rep r = {0};

	(void)state;
	c = chain_tt(&cfg);
	TT.async = true;
	TT.detach_blk = 1;
	assert_false(rd(c, &o, NULL, 0, 4 * BS, &r));
	assert_int_equal(TT.npend, 4);
	tt_answer(3); /* block 3 */
	tt_answer(2); /* block 2 */
	tt_answer(0); /* block 0: the batch's last, block 1 being detached */
	assert_int_equal(W.nf, 3);
	assert_int_equal(TT.npend, 1);
	tt_answer(0); /* block 1, a miss at last */
	assert_int_equal(W.nf, 4);
	assert_int_equal(W.f[3].off, BS);
	complete_all(0);
	check_ok(&r);
	rep_done(&r);
	shut(c);
}

/* A tier's gate: its lagging misses wait in it for its source's tokens (asked for once, no
 * thread waiting), then go to the store; hot misses pass it by. */
static void test_chain_tier_gate(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fh, fl;
	struct cache_obj hot = mkobj(&fh, 404, 2ull * BS, WALL0);
	struct cache_obj old = mkobj(&fl, 405, 2ull * BS, OLD);
	struct rep r = {0}, r2 = {0};
	double grant = (double)BS;

	(void)state;
	cfg.lagging_ops = 7; /* chain_tt: give TT a gate (a lagging ops limit that never binds) */
	c = chain_tt(&cfg);
	assert_false(rd(c, &old, NULL, 0, BS, &r));
	assert_int_equal(W.nf, 0);
	assert_int_equal(TT.asks, 1);
	assert_false(rd(c, &hot, NULL, 0, BS, &r2));
	assert_int_equal(W.nf, 1); /* the hot one passed the gate by */
	assert_int_equal(W.f[0].o->id, 404);
	gate_update(&TT.gate, tt_grant, &grant);
	assert_int_equal(W.nf, 2);
	assert_int_equal(W.f[1].o->id, 405);
	assert_true(W.f[1].lagging);
	complete_all(0);
	check_ok(&r);
	check_ok(&r2);
	rep_done(&r);
	rep_done(&r2);
	shut(c);
	gate_done_all(&TT.gate);
}

/* A block the store fails is reported to every tier it passed (so they release what their get
 * took: the fleet's fetch lock), and no tier keeps its bytes. A part of a block never asks the
 * tiers below memory. */
static void test_chain_failure_and_parts(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo, fl;
	struct cache_obj o = mkobj(&fo, 406, 2ull * BS, WALL0);
	struct cache_obj old = mkobj(&fl, 407, 4ull * BS, OLD);
	struct cache_stream s = {.next_off = 3 * BS};
	struct rep r = {0};

	(void)state;
	cfg.block_size = 1024 * 1024; /* parts need blocks over CACHE_PART_MAX */
	cfg.hot_size = 16ull * cfg.block_size;
	cfg.lagging_size = 16ull * cfg.block_size;
	c = chain_tt(&cfg);
	o = mkobj(&fo, 406, 2ull * cfg.block_size, WALL0);
	old = mkobj(&fl, 407, 4ull * cfg.block_size, OLD);
	assert_false(rd(c, &o, NULL, 0, 100, &r));
	complete_all(-EIO);
	assert_int_equal(r.err, -EIO);
	assert_int_equal(TT.put_errs, 1);
	assert_int_equal(TT.puts, 0);
	assert_int_equal(L.puts, 0);
	rep_done(&r);
	TT.gets = L.gets = 0;
	assert_false(rd(c, &old, &s, 100, 4096, &r)); /* a random read of an old object */
	assert_int_equal(TT.gets, 0);
	assert_int_equal(L.gets, 0);
	assert_int_equal(W.f[W.nf - 1].len, CACHE_PART_UNIT);
	complete_all(0);
	check_ok(&r);
	assert_int_equal(TT.puts, 0);
	rep_done(&r);
	shut(c);
}

/* The chain must end with a tier that reads (the store), and hold 1..TIER_CHAIN_MAX tiers. */
static void test_chain_refused(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct tier chain[TIER_CHAIN_MAX + 1];
	struct cache *c = NULL;

	(void)state;
	world_reset();
	for (int i = 0; i <= TIER_CHAIN_MAX; i++)
		chain[i] = store_tier(f_fetch);
	cfg.chain = chain;
	cfg.nchain = 0;
	assert_int_equal(cache_new(&cfg, &ENV, &c), -EINVAL);
	cfg.nchain = TIER_CHAIN_MAX + 1;
	assert_int_equal(cache_new(&cfg, &ENV, &c), -EINVAL);
	chain[1] = (struct tier){.ops = &TT_OPS};
	chain[1].ops = &(const struct tier_ops){.name = "put only", .put = tt_put};
	cfg.nchain = 2;
	assert_int_equal(cache_new(&cfg, &ENV, &c), -EINVAL);
	cfg.nchain = TIER_CHAIN_MAX;
	chain[1] = store_tier(f_fetch);
	assert_int_equal(cache_new(&cfg, &ENV, &c), 0);
	cache_free(c);
}

/* ---------------------------------------------------------------------------------------------
 * Throttling (docs/design.md invariants 1 and 4)
 * ------------------------------------------------------------------------------------------ */

/* ns for @bytes at @rate, rounded up */
static uint64_t ns_for(uint64_t bytes, uint64_t rate)
{
	return (bytes * NS + rate - 1) / rate;
}

/* |a - b| <= slack */
static void assert_near(uint64_t a, uint64_t b, uint64_t slack)
{
	assert_true(a <= b + slack && b <= a + slack);
}

static void test_throttle(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo, fy;
	struct cache_obj old, young;
	struct rep r[20] = {{0}}, h[3] = {{0}};
	struct cache_stats st;
	uint64_t t0, per_block = ns_for(BS, MIB); /* 62.5 ms */

	(void)state;
	cfg.lagging_rate = MIB;
	cfg.lagging_burst = MIB; /* 16 blocks */
	cfg.lagging_size = 64ull * BS;
	c = mk(&cfg);
	old = mkobj(&fo, 81, 20ull * BS, OLD);
	young = mkobj(&fy, 82, 3ull * BS, WALL0);
	t0 = W.mono;
	assert_int_equal(per_block, 62500000);

	for (int i = 0; i < 20; i++)
		assert_false(rd(c, &old, NULL, (uint64_t)i * BS, BS, &r[i]));
	assert_int_equal(W.nopen, 16); /* the burst */
	for (size_t i = 0; i < 16; i++)
		assert_int_equal(W.f[i].off, i * BS);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].queued, 4);
	assert_int_equal(st.tier[CACHE_LAG].inflight, 16);
	assert_int_equal(W.tpending, 1); /* one timer for the whole queue, never a sleep */
	assert_near(last_timer()->delay, per_block, 2);

	/* hot reads never wait behind the lagging queue */
	for (int i = 0; i < 3; i++) {
		assert_false(rd(c, &young, NULL, (uint64_t)i * BS, 1, &h[i]));
		assert_int_equal(W.nopen, 17 + (size_t)i);
		assert_false(W.f[W.nf - 1].lagging);
	}
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].queued, 0);
	assert_int_equal(st.tier[CACHE_LAG].queued, 4);
	complete_blk(82, 1, 0);
	check_ok(&h[1]);
	/* a completion before the due time lets nothing through */
	complete_blk(81, 0, 0);
	check_ok(&r[0]);
	assert_int_equal(W.nf, 19);

	/* each timer lets exactly one block through and arms the next */
	for (int k = 0; k < 4; k++) {
		size_t ti = next_timer();

		assert_true(ti != NO_FETCH);
		assert_int_equal(W.tpending, 1);
		W.mono = W.t[ti].due - 1;
		assert_int_equal(fire_due(), 0);
		W.mono = W.t[ti].due;
		assert_int_equal(fire_due(), 1);
		assert_int_equal(W.nf, 20 + (size_t)k);
		assert_int_equal(W.f[W.nf - 1].off, (16ull + (uint64_t)k) * BS);
		assert_true(W.f[W.nf - 1].lagging);
		assert_near(W.f[W.nf - 1].start_ns - t0, (uint64_t)(k + 1) * per_block, 8);
	}
	assert_int_equal(W.tpending, 0);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].queued, 0);
	assert_int_equal(st.tier[CACHE_LAG].throttle_waits, 4);
	assert_near(st.tier[CACHE_LAG].throttled_ns, 10 * per_block, 32);
	complete_all(0);
	for (int i = 0; i < 20; i++) {
		check_ok(&r[i]);
		rep_done(&r[i]);
	}
	for (int i = 0; i < 3; i++) {
		check_ok(&h[i]);
		rep_done(&h[i]);
	}
	shut(c);
}

/*
 * Invariant 4: a short last block costs its length, and a block larger than the burst goes
 * through once the bucket is full, leaving a debt, without deadlock.
 */
static void test_throttle_charges(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fs, fb;
	struct cache_obj small, big;
	struct rep r[20] = {{0}};
	uint64_t t;

	(void)state;
	/* burst 1 MiB: a 1000-byte last block and 15 full blocks leave BS - 1000 tokens, so the
	 * 16th block waits for 1000 bytes' worth of time, not a whole block's */
	cfg.lagging_rate = MIB;
	cfg.lagging_burst = MIB;
	cfg.lagging_size = 64ull * BS; /* room for 32 fetches at once: the cap stays out of it */
	c = mk(&cfg);
	small = mkobj(&fs, 91, 5ull * BS + 1000, OLD);
	big = mkobj(&fb, 92, 16ull * BS, OLD);
	assert_false(rd(c, &small, NULL, 5ull * BS, 1000, &r[0]));
	assert_int_equal(W.f[0].len, 1000);
	for (int i = 0; i < 16; i++)
		assert_false(rd(c, &big, NULL, (uint64_t)i * BS, BS, &r[1 + i]));
	assert_int_equal(W.nopen, 16);
	assert_int_equal(W.tpending, 1);
	assert_near(last_timer()->delay, ns_for(1000, MIB), 2);
	t = W.mono;
	W.mono += last_timer()->delay;
	assert_int_equal(fire_due(), 1);
	assert_int_equal(W.nopen, 17);
	assert_int_equal(W.f[16].off, 15ull * BS);
	assert_near(W.f[16].start_ns - t, ns_for(1000, MIB), 2);
	complete_all(0);
	for (int i = 0; i < 17; i++)
		check_ok(&r[i]);
	shut(c);

	/* burst 16 KiB < block 64 KiB: every charge is oversize */
	cfg.lagging_burst = 16 * KIB;
	c = mk(&cfg);
	small = mkobj(&fs, 93, 1000, OLD);
	big = mkobj(&fb, 94, 4ull * BS, OLD);
	assert_false(rd(c, &small, NULL, 0, 1000, &r[0])); /* bucket 16K - 1000 */
	assert_int_equal(W.nopen, 1);
	assert_false(rd(c, &big, NULL, 0, BS, &r[1]));
	assert_int_equal(W.nopen, 1); /* the oversize block waits for a full bucket... */
	assert_int_equal(W.tpending, 1);
	assert_near(last_timer()->delay, ns_for(1000, MIB), 2);
	W.mono += last_timer()->delay;
	assert_int_equal(fire_due(), 1);
	assert_int_equal(W.nopen, 2); /* ...and then goes, leaving a debt of 48 KiB */
	assert_int_equal(W.f[1].len, BS);
	assert_false(rd(c, &big, NULL, BS, BS, &r[2]));
	assert_int_equal(W.nopen, 2);
	assert_near(last_timer()->delay, ns_for(BS, MIB), 2); /* debt + a full bucket */
	for (int k = 0; k < 3; k++) {
		/* the rest of the object one block per full bucket, no deadlock */
		if (k > 0)
			assert_false(rd(c, &big, NULL, (uint64_t)(k + 1) * BS, BS, &r[2 + k]));
		t = W.mono;
		W.mono = W.t[next_timer()].due;
		assert_int_equal(fire_due(), 1);
		assert_int_equal(W.nf, 3 + (size_t)k);
		assert_near(W.mono - t, ns_for(BS, MIB), 2);
	}
	complete_all(0);
	for (int i = 0; i < 5; i++)
		check_ok(&r[i]);
	for (int i = 0; i < 20; i++)
		rep_done(&r[i]);
	shut(c);
}

static void test_set_limits(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj o;
	struct rep r[6] = {{0}};
	struct cache_stats st;
	uint64_t t0, fast = ns_for(BS, 64 * MIB);

	(void)state;
	cfg.lagging_rate = MIB;
	cfg.lagging_burst = BS;
	c = mk(&cfg);
	o = mkobj(&fo, 101, 6ull * BS, OLD);
	t0 = W.mono;
	for (int i = 0; i < 4; i++)
		assert_false(rd(c, &o, NULL, (uint64_t)i * BS, 1, &r[i]));
	assert_int_equal(W.nopen, 1);
	assert_near(last_timer()->delay, ns_for(BS, MIB), 2);

	/* 64x the rate: the queue moves at the new rate, not at the old timer's */
	assert_int_equal(cache_set_limits(c, 64 * MIB, BS, 0), 0);
	assert_int_equal(W.tpending, 2);
	assert_near(last_timer()->delay, fast, 2);
	for (int k = 0; k < 3; k++) {
		W.mono = W.t[next_timer()].due;
		assert_int_equal(fire_due(), 1);
		assert_int_equal(W.nf, 2 + (size_t)k);
		assert_near(W.f[W.nf - 1].start_ns - t0, (uint64_t)(k + 1) * fast, 8);
	}
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].queued, 0);
	/* the stale timer of the old rate fires into an empty queue */
	assert_int_equal(W.tpending, 1);
	W.mono = W.t[next_timer()].due;
	assert_int_equal(fire_due(), 1);
	assert_int_equal(W.nf, 4);

	/* rate 0 lets everything queued go at once */
	assert_int_equal(cache_set_limits(c, MIB, BS, 0), 0);
	assert_false(rd(c, &o, NULL, 4 * BS, 1, &r[4]));
	assert_false(rd(c, &o, NULL, 5 * BS, 1, &r[5]));
	assert_int_equal(W.nf, 5);
	assert_int_equal(cache_set_limits(c, 0, 0, 0), 0);
	assert_int_equal(W.nf, 6);
	complete_all(0);
	for (int i = 0; i < 6; i++) {
		check_ok(&r[i]);
		rep_done(&r[i]);
	}
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].queued, 0);
	assert_int_equal(st.tier[CACHE_LAG].inflight, 0);
	shut(c);
}

/*
 * No more lagging fetches run at once than half the blocks the lagging tier holds: more would
 * find every segment pinned and fetch into bounce buffers that are never cached. A completion
 * lets the next one go.
 */
static void test_lagging_inflight_cap(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj old;
	struct rep r[10] = {{0}};
	struct cache_stats st;

	(void)state;
	cfg.lagging_size = 8ull * BS; /* the smallest tier: 4 fetches at once */
	c = mk(&cfg);
	old = mkobj(&fo, 95, 10ull * BS, OLD);
	for (int i = 0; i < 10; i++)
		assert_false(rd(c, &old, NULL, (uint64_t)i * BS, BS, &r[i]));
	assert_int_equal(W.nopen, 4);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].queued, 6);
	assert_int_equal(W.tpending, 0); /* not the limiter: nothing to wait for but a slot */
	complete_blk(95, 0, 0);
	assert_int_equal(W.nopen, 4);
	assert_int_equal(W.nf, 5);
	complete_blk(95, 1, -EIO); /* a failure frees its slot too */
	assert_int_equal(W.nf, 6);
	while (W.nopen)
		complete_all(0);
	assert_int_equal(W.nf, 10);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].bounces, 0);
	assert_int_equal(st.tier[CACHE_LAG].queued, 0);
	check_err(&r[1], -EIO);
	for (int i = 0; i < 10; i++) {
		if (i != 1)
			check_ok(&r[i]);
		rep_done(&r[i]);
	}
	shut(c);
}

/* Requests per second: the op bucket alone throttles as well. */
static void test_ops_limit(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj o;
	struct rep r[12] = {{0}};

	(void)state;
	cfg.lagging_ops = 10; /* bytes unlimited */
	c = mk(&cfg);
	o = mkobj(&fo, 111, 30ull * BS, OLD);
	for (int i = 0; i < 12; i++)
		assert_false(rd(c, &o, NULL, (uint64_t)i * BS, 1, &r[i]));
	assert_int_equal(W.nf, 10);
	assert_int_equal(W.tpending, 1);
	assert_near(last_timer()->delay, NS / 10, 2);
	for (size_t k = 0; k < 2; k++) {
		W.mono = W.t[next_timer()].due;
		assert_int_equal(fire_due(), 1);
		assert_int_equal(W.nf, 11 + k);
	}
	assert_int_equal(W.tpending, 0);
	complete_all(0);
	for (int i = 0; i < 12; i++) {
		check_ok(&r[i]);
		rep_done(&r[i]);
	}
	shut(c);
}

/* A refused timer (the I/O thread is busy or stopping) leaves the queue to the next completion
 * or read, never stuck. */
static void test_defer_refused(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj o;
	struct rep r[4] = {{0}};
	struct cache_stats st;

	(void)state;
	cfg.lagging_rate = MIB;
	cfg.lagging_burst = BS;
	c = mk(&cfg);
	o = mkobj(&fo, 151, 4ull * BS, OLD);
	W.defer_err = -ENOMEM;
	for (int i = 0; i < 3; i++)
		assert_false(rd(c, &o, NULL, (uint64_t)i * BS, 1, &r[i]));
	assert_int_equal(W.nf, 1);
	assert_int_equal(W.tpending, 0);
	W.defer_err = 0;
	/* time passes; a completion lets the next block go (and arms a timer for the last) */
	W.mono += ns_for(BS, MIB);
	complete_blk(151, 0, 0);
	check_ok(&r[0]);
	assert_int_equal(W.nf, 2);
	assert_int_equal(W.f[1].off, BS);
	assert_int_equal(W.tpending, 1);
	/* and a read does too */
	W.defer_err = -ENOMEM;
	W.mono = W.t[next_timer()].due;
	assert_int_equal(fire_due(), 1); /* block 2 goes; block 3 cannot arm a timer */
	assert_int_equal(W.nf, 3);
	assert_false(rd(c, &o, NULL, 3 * BS, 1, &r[3]));
	assert_int_equal(W.nf, 3);
	W.mono += ns_for(BS, MIB);
	W.defer_err = 0;
	assert_true(rd(c, &o, NULL, 0, 1, &r[0])); /* a hit does not drain */
	assert_false(rd(c, &o, NULL, 2 * BS, 1, &r[0]));
	assert_int_equal(W.nf, 3);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].queued, 1);
	complete_blk(151, 2, 0);
	assert_int_equal(W.nf, 4);
	complete_all(0);
	for (int i = 0; i < 4; i++) {
		check_ok(&r[i]);
		rep_done(&r[i]);
	}
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].queued, 0);
	shut(c);
}

/*
 * The race between a reader's first lookup and its taking the lock: the fetch completes in
 * between (here from inside the reader's wall clock reading for routing, which cache.c does in
 * that window, with no lock held). The
 * reader must then find the block resident, not start a second fetch; and if that fetch
 * failed, it must start a new one rather than wait on nothing.
 */
static struct cache_obj race_obj;

static void race_complete_ok(void)
{
	complete_blk(race_obj.id.lo, 0, 0);
}

static void race_complete_eio(void)
{
	complete_blk(race_obj.id.lo, 0, -EIO);
}

static void test_commit_race(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk(&cfg);
	struct fobj fo, f2;
	struct rep a = {0}, b = {0};

	(void)state;
	race_obj = mkobj(&fo, 161, 2ull * BS, WALL0);
	assert_false(rd(c, &race_obj, NULL, 0, 10, &a));
	W.on_wall = race_complete_ok;
	assert_true(rd(c, &race_obj, NULL, 5, 10, &b)); /* resident by the time it looked again */
	assert_null(W.on_wall);
	check_ok(&a);
	check_ok(&b);
	assert_int_equal(W.nf, 1);

	/* failed in the window: the second reader starts a fetch of its own */
	race_obj = mkobj(&f2, 162, BS, WALL0);
	assert_false(rd(c, &race_obj, NULL, 0, 10, &a));
	W.on_wall = race_complete_eio;
	assert_false(rd(c, &race_obj, NULL, 5, 10, &b));
	check_err(&a, -EIO);
	assert_int_equal(b.calls, 0);
	assert_int_equal(W.nf, 3);
	assert_int_equal(W.nopen, 1);
	complete_all(0);
	check_ok(&b);
	rep_done(&a);
	rep_done(&b);
	shut(c);
}

/* ---------------------------------------------------------------------------------------------
 * Readahead
 * ------------------------------------------------------------------------------------------ */

static void test_readahead(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo, f2;
	struct cache_obj o, o2;
	struct cache_stream s = {0}, s2 = {0};
	struct rep r = {0};
	struct cache_stats st;
	char res[8];

	(void)state;
	cfg.readahead = 2;
	c = mk(&cfg);
	o = mkobj(&fo, 121, 5ull * BS + 100, WALL0); /* blocks 0..5, the last 100 bytes */
	o2 = mkobj(&f2, 122, 8ull * BS, WALL0);

	assert_false(rd(c, &o, &s, 0, 100, &r));
	assert_int_equal(W.nf, 3); /* block 0 for the reader, 1 and 2 ahead */
	assert_int_equal(W.f[1].off, BS);
	assert_int_equal(W.f[2].off, 2 * BS);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].misses, 1);
	assert_int_equal(st.tier[CACHE_HOT].readaheads, 2);
	complete_blk(121, 0, 0);
	check_ok(&r); /* readahead has no waiters: the read did not wait for it */

	/* the rest of block 0: a hit, nothing new (1 and 2 are already on their way) */
	assert_true(rd(c, &o, &s, 100, BS - 100, &r));
	check_ok(&r);
	assert_int_equal(W.nf, 3);
	/* block 1 is in flight: the reader joins it; 3 is fetched ahead */
	assert_false(rd(c, &o, &s, BS, BS, &r));
	assert_int_equal(W.nf, 4);
	assert_int_equal(W.f[3].off, 3 * BS);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].joins, 1);
	complete_blk(121, 1, 0);
	check_ok(&r);
	complete_blk(121, 2, 0);
	/* block 2 resident: a hit; the reader consumed a whole window, which doubles to 4: 4
	 * and 5 (the short last block) ahead, at its real length, and nothing past */
	assert_true(rd(c, &o, &s, 2 * BS, BS, &r));
	check_ok(&r);
	assert_int_equal(W.nf, 6);
	assert_int_equal(W.f[4].off, 4 * BS);
	assert_int_equal(W.f[5].off, 5 * BS);
	assert_int_equal(W.f[5].len, 100);
	complete_all(0);
	/* 3 and 4 hits; nothing new */
	assert_true(rd(c, &o, &s, 3 * BS, 2 * BS, &r));
	check_ok(&r);
	assert_int_equal(W.nf, 6);
	complete_all(0);
	assert_true(rd(c, &o, &s, 5 * BS, 100, &r));
	check_ok(&r);
	assert_int_equal(W.nf, 6);
	cache_residency(c, &o, res, sizeof(res));
	assert_string_equal(res, "hhhhhh");
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].readaheads, 5);
	assert_int_equal(st.tier[CACHE_HOT].misses, 1);

	/* random reads: no readahead */
	assert_false(rd(c, &o2, &s2, 3 * BS + 5, 10, &r));
	assert_int_equal(W.nf, 7);
	complete_all(0);
	check_ok(&r);
	assert_false(rd(c, &o2, &s2, BS + 7, 10, &r));
	assert_int_equal(W.nf, 8);
	complete_all(0);
	check_ok(&r);
	assert_false(rd(c, &o2, &s2, 6 * BS, 10, &r));
	assert_int_equal(W.nf, 9);
	complete_all(0);
	check_ok(&r);
	/* no stream, no readahead, even at offset 0 */
	assert_false(rd(c, &o2, NULL, 0, 10, &r));
	assert_int_equal(W.nf, 10);
	complete_all(0);
	check_ok(&r);
	/* sequential again (block 6 resident): readahead stops at the last block, 7 */
	assert_true(rd(c, &o2, &s2, 6 * BS + 10, 10, &r));
	check_ok(&r);
	assert_int_equal(W.nf, 11);
	assert_int_equal(W.f[10].off, 7 * BS);
	complete_all(0);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].readaheads, 6);
	rep_done(&r);
	shut(c);
}

/* Readahead of a lagging object goes through the limiter like any lagging fetch. */
static void test_readahead_lagging(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj o;
	struct cache_stream s = {0};
	struct rep r = {0};
	struct cache_stats st;
	char res[8];

	(void)state;
	cfg.readahead = 3;
	cfg.lagging_rate = MIB;
	cfg.lagging_burst = 2 * BS;
	c = mk(&cfg);
	o = mkobj(&fo, 131, 4ull * BS, OLD);
	assert_false(rd(c, &o, &s, 0, 10, &r));
	assert_int_equal(W.nf, 2); /* block 0 and one ahead; two wait for tokens */
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].queued, 2);
	assert_int_equal(st.tier[CACHE_LAG].readaheads, 3);
	for (int k = 0; k < 2; k++) {
		W.mono = W.t[next_timer()].due;
		assert_int_equal(fire_due(), 1);
	}
	assert_int_equal(W.nf, 4);
	for (size_t i = 0; i < 4; i++)
		assert_true(W.f[i].lagging);
	complete_all(0);
	check_ok(&r);
	cache_residency(c, &o, res, sizeof(res));
	assert_string_equal(res, "llll");
	rep_done(&r);
	shut(c);
}

/* ---------------------------------------------------------------------------------------------
 * Cancellation (the kernel's interrupt of a killed reader)
 * ------------------------------------------------------------------------------------------ */

/* Start a cancellable read into @r. */
static bool rd_t(struct cache *c, const struct cache_obj *o, uint64_t off, size_t len,
		 uint64_t ticket, struct rep *r)
{
	rep_init(r, o, off, len);
	cache_read(c, o, NULL, off, len, ticket, on_reply, r);
	return r->calls > 0;
}

/*
 * A read the kernel interrupts (its reader was killed) is answered -EINTR at once; a fetch
 * queued behind the limiter that nobody waits for any more is dropped and never starts; a
 * fetch others still wait on goes on and answers them; answered tickets are ignored.
 */
static void test_cancel(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj old;
	struct rep a = {0}, b = {0}, q = {0}, j1 = {0}, j2 = {0}, hit = {0};
	struct cache_stats st;
	uint64_t ta, tb, tq, tj;

	(void)state;
	cfg.lagging_rate = MIB;
	cfg.lagging_burst = 2ull * BS; /* two blocks pass, the rest wait */
	c = mk(&cfg);
	old = mkobj(&fo, 91, 8ull * BS, OLD);
	ta = cache_ticket(c);
	tb = cache_ticket(c);
	tq = cache_ticket(c);
	tj = cache_ticket(c);
	assert_true(ta && tb && tq && tj && ta != tb);

	/* two reads start fetches, the third waits for the limiter */
	assert_false(rd_t(c, &old, 0, BS, ta, &a));
	assert_false(rd_t(c, &old, BS, BS, tb, &b));
	assert_false(rd_t(c, &old, 2 * BS, BS, tq, &q));
	assert_int_equal(W.nopen, 2);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].queued, 1);
	long holds = W.holds;

	/* cancelling the queued one answers it and drops its fetch: its hold goes, no timer
	 * ever starts it */
	cache_cancel(c, tq);
	check_err(&q, -EINTR);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].queued, 0);
	assert_int_equal(W.holds, holds - 1);
	cache_cancel(c, tq); /* twice: ignored */
	assert_int_equal(q.calls, 1);
	W.mono += NS;
	fire_due();
	assert_int_equal(W.nf, 2);

	/* cancelling a read whose fetch runs: the fetch goes on, into the cache */
	cache_cancel(c, ta);
	check_err(&a, -EINTR);
	complete_blk(91, 0, 0);
	assert_int_equal(a.calls, 1);
	assert_true(rd(c, &old, NULL, 0, BS, &hit));
	check_ok(&hit);

	/* two readers of one block, one cancelled: the other still gets its bytes */
	assert_false(rd_t(c, &old, BS, BS, tj, &j1));
	assert_false(rd(c, &old, NULL, BS, BS, &j2));
	cache_cancel(c, tj);
	check_err(&j1, -EINTR);
	assert_int_equal(j2.calls, 0);
	complete_blk(91, 1, 0);
	check_ok(&j2);
	check_ok(&b);

	/* answered tickets and ticket 0 are ignored */
	cache_cancel(c, tb);
	cache_cancel(c, 0);
	assert_int_equal(b.calls, 1);

	rep_done(&a);
	rep_done(&b);
	rep_done(&q);
	rep_done(&j1);
	rep_done(&j2);
	rep_done(&hit);
	shut(c);
}

/* ---------------------------------------------------------------------------------------------
 * Shutdown
 * ------------------------------------------------------------------------------------------ */

static void test_free_queued(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo, fy;
	struct cache_obj o, y;
	struct cache_stream s = {.next_off = 3 * BS}; /* a reader that has read blocks 0..2 */
	struct rep r[6] = {{0}};

	(void)state;
	cfg.lagging_rate = MIB;
	cfg.lagging_burst = BS;
	cfg.readahead = 1;
	c = mk(&cfg);
	o = mkobj(&fo, 141, 6ull * BS, OLD);
	y = mkobj(&fy, 142, 1ull * BS, WALL0);

	assert_false(rd(c, &o, NULL, 0, 10, &r[0])); /* takes the whole bucket */
	complete_all(0);
	check_ok(&r[0]);
	/* block 0 resident (its pin held by the read), block 1 queued */
	assert_false(rd(c, &o, NULL, 5, BS + 5, &r[0]));
	/* block 2 queued with three readers */
	for (int i = 1; i < 4; i++)
		assert_false(rd(c, &o, NULL, 2 * BS + (uint64_t)i, 1, &r[i]));
	/* the sequential reader waits for block 3; its readahead of block 4 is queued too */
	assert_false(rd(c, &o, &s, 3 * BS, 10, &r[4]));
	/* a hot read in flight, completed before shutdown */
	assert_false(rd(c, &y, NULL, 0, 10, &r[5]));
	assert_int_equal(W.nopen, 1);
	complete_all(0);
	check_ok(&r[5]);
	assert_int_equal(fo.holds, 4); /* blocks 1..4 */
	assert_int_equal(W.tpending, 1);
	for (int i = 0; i < 5; i++)
		assert_int_equal(r[i].calls, 0);

	/* shut(): the stopping I/O thread runs the drain timer (no time has passed: nothing
	 * starts, no new timer), then cache_free answers every queued reader */
	shut(c);
	for (int i = 0; i < 5; i++)
		check_err(&r[i], -ESHUTDOWN);
	assert_int_equal(fo.holds, 0);
	assert_int_equal(W.nf, 2);
	for (int i = 0; i < 6; i++)
		rep_done(&r[i]);
}

/* ---------------------------------------------------------------------------------------------
 * Random operations against a model
 * ------------------------------------------------------------------------------------------ */

#define R_OBJS	8    /* paths read at once */
#define R_VERS	400  /* object versions over a run (a path gets a new version now and then) */
#define R_READS 3000 /* reads per run */

/* One version of one object: its own id, size, age and ctx. */
struct rver {
	struct fobj fo;
	struct cache_obj o;
	bool lag; /* routed to the lagging tier (the wall clock stands still in this test) */
};

/* A path: its current version and two open file handles. */
struct rpath {
	size_t v;
	struct cache_stream s[2];
};

struct rread {
	struct rep r;
	uint64_t first, last; /* blocks it covers; first > last if none */
	bool may_fail;	      /* a fetch of one of its blocks failed while it waited */
};

static struct rsim {
	uint64_t seed;
	int cfg;
	unsigned op;
	long read; /* the read being checked at the end, or -1 */
	struct rver *vers;
	size_t nvers;
	struct rread *reads;
	size_t nreads;
	uint32_t bs;
} S;

#define SIM_CHECK(cond)                                                                            \
	do {                                                                                       \
		if (!(cond))                                                                       \
			fail_msg("TIERFS_CACHE_SEED=%" PRIu64                                      \
				 " cfg %d op %u read %ld: %s (%s:%d)",                             \
				 S.seed, S.cfg, S.op, S.read, #cond, __FILE__, __LINE__);          \
	} while (0)

#define VER_ID0 1000

/* The model of failures: a fetch of block @blk of @o failed; every read still waiting that
 * covers it may fail. */
static void sim_fail(struct fobj *o, uint64_t blk)
{
	for (size_t i = 0; i < S.nreads; i++) {
		struct rread *x = &S.reads[i];

		if (x->r.calls == 0 && x->r.id == o->id && x->first <= blk && blk <= x->last)
			x->may_fail = true;
	}
}

/*
 * Every read answered exactly once; data replies carry the pattern of their object version.
 * An error reply is allowed only if a fetch of one of its blocks failed while it waited.
 * @strict (nothing was evicted, nothing bounced): then a read whose block failed while it
 * waited must have failed too, because it waited on that very fetch.
 */
static void sim_check_reply(const struct rread *x, bool strict)
{
	SIM_CHECK(x->r.calls == 1);
	SIM_CHECK(!x->r.bad_iov);
	SIM_CHECK(!x->r.overflow);
	if (x->r.err) {
		SIM_CHECK(x->r.err == -EIO || x->r.err == -ECONNREFUSED);
		SIM_CHECK(x->may_fail);
		SIM_CHECK(x->r.niov == 0);
	} else {
		SIM_CHECK(x->r.n == x->r.want);
		SIM_CHECK(rep_bytes_ok(&x->r));
		if (strict)
			SIM_CHECK(!x->may_fail);
	}
}

static size_t sim_new_version(uint64_t *rng)
{
	struct rver *v;
	uint64_t size = next_rand(rng) % (12 * S.bs);
	int64_t mtime;

	SIM_CHECK(S.nvers < R_VERS);
	v = &S.vers[S.nvers];
	switch (next_rand(rng) % 6) {
	case 0:
		size = 0;
		break;
	case 1:
		size = (next_rand(rng) % 12 + 1) * S.bs; /* no short block */
		break;
	default:
		break;
	}
	switch (next_rand(rng) % 4) {
	case 0:
		mtime = WALL0 - 10;
		break;
	case 1:
		mtime = INT64_MIN;
		break;
	default:
		mtime = WALL0 - 100000 - (int64_t)(next_rand(rng) % 1000);
		break;
	}
	v->o = mkobj(&v->fo, VER_ID0 + S.nvers, size, mtime);
	v->lag = cache_is_lagging(mtime, W.wall, HOT_TTL);
	return S.nvers++;
}

/* A read of a hot object not answered at once: each of its blocks is resident or being
 * fetched (hot never waits in the limiter's queue). */
static void sim_check_hot_started(struct cache *c, const struct rver *v, const struct rread *x)
{
	char res[16];

	if (v->lag || x->r.calls || x->may_fail || x->first > x->last)
		return; /* (a block that failed at once is neither resident nor being fetched) */
	cache_residency(c, &v->o, res, sizeof(res));
	for (uint64_t b = x->first; b <= x->last; b++)
		SIM_CHECK(res[b] != '-' || find_open(v->o.id.lo, b) != NO_FETCH);
}

static void sim_run(uint64_t seed, int which)
{
	struct cache_cfg cfg = base_cfg();
	struct rpath paths[R_OBJS];
	struct cache *c;
	uint64_t rng = seed;
	struct cache_stats st;
	bool strict;

	S.seed = seed;
	S.cfg = which;
	S.op = 0;
	S.read = -1;
	S.nreads = 0;
	S.nvers = 0;
	S.bs = 4096;
	cfg.block_size = S.bs;
	cfg.hot_ttl = HOT_TTL;
	cfg.lagging_ttl = 3600;
	cfg.lagging_rate = 256 * KIB;
	cfg.lagging_burst = 32 * KIB;
	if (which == 0) { /* roomy tiers: nothing is evicted, so failures are exactly modelled */
		cfg.hot_size = 4096ull * S.bs;
		cfg.lagging_size = 2048ull * S.bs;
		cfg.readahead = 2;
	} else { /* tiny tiers: evictions and bounces */
		cfg.hot_size = 8ull * S.bs;
		cfg.lagging_size = 8ull * S.bs;
		cfg.readahead = 1;
		cfg.lagging_burst = 2 * KIB; /* every lagging charge oversize */
	}
	c = mk(&cfg);
	W.rng = &rng;
	W.sync_fail = 3;
	W.on_fail = sim_fail;

	memset(paths, 0, sizeof(paths));
	for (int i = 0; i < R_OBJS; i++)
		paths[i].v = sim_new_version(&rng);

	for (S.op = 0; S.nreads < R_READS; S.op++) {
		unsigned k = (unsigned)(next_rand(&rng) % 100);

		if (k < 40) {
			struct rpath *p = &paths[next_rand(&rng) % R_OBJS];
			struct rver *v = &S.vers[p->v];
			unsigned si = (unsigned)(next_rand(&rng) % 3);
			struct cache_stream *s = si < 2 ? &p->s[si] : NULL;
			struct rread *x = &S.reads[S.nreads++];
			uint64_t off;
			size_t len;

			if (s && next_rand(&rng) % 2)
				off = s->next_off;
			else
				off = next_rand(&rng) % (v->o.size + 2 * S.bs + 1);
			switch (next_rand(&rng) % 4) {
			case 0:
				len = (size_t)(next_rand(&rng) % 16);
				break;
			case 1:
				len = S.bs;
				break;
			default:
				len = (size_t)(next_rand(&rng) % (3 * S.bs));
				break;
			}
			memset(x, 0, sizeof(*x));
			if (len && off < v->o.size) {
				uint64_t end = off + len < v->o.size ? off + len : v->o.size;

				x->first = off / S.bs;
				x->last = (end - 1) / S.bs;
			} else {
				x->first = 1;
				x->last = 0;
			}
			rd(c, &v->o, s, off, len, &x->r);
			SIM_CHECK(x->r.calls <= 1);
			sim_check_hot_started(c, v, x);
		} else if (k < 74) {
			if (W.nopen) {
				size_t pick = (size_t)(next_rand(&rng) % W.nopen), i;

				for (i = 0; i < W.nf; i++)
					if (W.f[i].open && pick-- == 0)
						break;
				SIM_CHECK(i < W.nf);
				SIM_CHECK(W.f[i].lagging == S.vers[W.f[i].o->id - VER_ID0].lag);
				complete(i, next_rand(&rng) % 100 < 15 ? -EIO : 0);
			}
		} else if (k < 91) {
			W.mono += next_rand(&rng) % (50 * NS / 1000);
			fire_due();
		} else if (k < 94) {
			static const uint64_t rates[] = {0, 64 * KIB, 256 * KIB, 4 * MIB};
			static const uint64_t bursts[] = {0, 2 * KIB, 32 * KIB};

			SIM_CHECK(cache_set_limits(c, rates[next_rand(&rng) % 4],
						   bursts[next_rand(&rng) % 3],
						   next_rand(&rng) % 2 ? 0 : 50) == 0);
		} else if (k < 95) {
			struct rpath *p = &paths[next_rand(&rng) % R_OBJS];

			memset(p, 0, sizeof(*p)); /* reopened */
			p->v = sim_new_version(&rng);
		} else {
			struct rver *v = &S.vers[next_rand(&rng) % S.nvers];
			char res[16];

			st = stats(c);
			SIM_CHECK(st.tier[CACHE_HOT].inflight + st.tier[CACHE_LAG].inflight ==
				  W.nopen);
			SIM_CHECK(st.tier[CACHE_HOT].queued == 0);
			SIM_CHECK(cache_residency(c, &v->o, res, sizeof(res)) ==
				  (v->o.size + S.bs - 1) / S.bs);
			for (size_t i = 0; res[i]; i++)
				SIM_CHECK(res[i] == '-' || res[i] == (v->lag ? 'l' : 'h'));
		}
		SIM_CHECK(W.fetch_bad == 0);
		SIM_CHECK(W.single_dup == 0);
		SIM_CHECK(W.bad_release == 0);
	}

	/* let everything finish: complete what is open, wait out the limiter */
	W.sync_fail = 0;
	for (int round = 0;; round++) {
		size_t ti;

		SIM_CHECK(round < 100000);
		if (W.nopen) {
			complete_all(0);
			continue;
		}
		ti = next_timer();
		if (ti == NO_FETCH)
			break;
		if (W.t[ti].due > W.mono)
			W.mono = W.t[ti].due;
		fire_due();
	}
	st = stats(c);
	SIM_CHECK(st.tier[CACHE_LAG].queued == 0);
	SIM_CHECK(st.tier[CACHE_HOT].inflight == 0 && st.tier[CACHE_LAG].inflight == 0);
	strict = st.tier[CACHE_HOT].rotations == 0 && st.tier[CACHE_LAG].rotations == 0 &&
		 st.tier[CACHE_HOT].bounces == 0 && st.tier[CACHE_LAG].bounces == 0;
	if (which == 0)
		SIM_CHECK(strict); /* else the test lost its strict half: make the tiers bigger */
	else
		SIM_CHECK(st.tier[CACHE_HOT].rotations > 0 && st.tier[CACHE_LAG].rotations > 0);
	for (size_t i = 0; i < S.nreads; i++) {
		S.read = (long)i;
		sim_check_reply(&S.reads[i], strict);
	}
	S.read = -1;
	cache_free(c);
	SIM_CHECK(W.holds == 0);
	SIM_CHECK(W.bad_release == 0);
	for (size_t i = 0; i < S.nvers; i++)
		SIM_CHECK(S.vers[i].fo.holds == 0);
	for (size_t i = 0; i < S.nreads; i++)
		rep_done(&S.reads[i].r);
	W.rng = NULL;
	W.on_fail = NULL;
}

static void test_random(void **state)
{
	const char *env = getenv("TIERFS_CACHE_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : 20240611;
	int runs = env ? 1 : 12;

	(void)state;
	S.reads = calloc(R_READS, sizeof(*S.reads));
	S.vers = calloc(R_VERS, sizeof(*S.vers));
	assert_non_null(S.reads);
	assert_non_null(S.vers);
	for (int i = 0; i < runs; i++)
		for (int which = 0; which < 2; which++)
			sim_run(seed + (uint64_t)i, which);
	free(S.reads);
	free(S.vers);
	S.reads = NULL;
	S.vers = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Threads: readers on several threads, completions on another, as in the mount
 * ------------------------------------------------------------------------------------------ */

#define T_READERS 4
#define T_READS	  1500
#define T_OBJS	  6
#define T_BS	  4096u
#define T_MAXQ	  12 /* pending fetches before a reader waits for the fetcher */

struct treq {
	struct fobj *o;
	uint64_t off;
	uint32_t len;
	void *dst;
	cache_done_fn done;
	void *done_arg;
	struct treq *next;
};

static struct tworld {
	pthread_mutex_t lock;
	pthread_cond_t cond;  /* a fetch is pending, or stop */
	pthread_cond_t space; /* few enough fetches pending for readers to go on */
	struct treq *head;    /* pending fetches, newest first; lock */
	size_t n;	      /* their number; lock */
	bool stop;	      /* readers finished; lock */
	long holds;	      /* atomic */
	long bad;	      /* atomic: misaligned fetches, releases without a hold */
} T;

static uint64_t t_mono(void *arg)
{
	(void)arg;
	return MONO0;
}

static int64_t t_wall(void *arg)
{
	(void)arg;
	return WALL0;
}

static int t_fetch(void *arg, void *ctx, uint64_t off, uint32_t len, void *dst, bool lagging,
		   cache_done_fn done, void *done_arg)
{
	struct treq *q = malloc(sizeof(*q));

	(void)arg;
	(void)lagging;
	if (!q)
		return -ENOMEM;
	*q = (struct treq){
	    .o = ctx, .off = off, .len = len, .dst = dst, .done = done, .done_arg = done_arg};
	if (off % T_BS)
		__atomic_fetch_add(&T.bad, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&T.lock);
	q->next = T.head;
	T.head = q;
	T.n++;
	pthread_cond_signal(&T.cond);
	pthread_mutex_unlock(&T.lock);
	return 0;
}

static int t_defer(void *arg, uint64_t delay_ns, void (*cb)(void *), void *cb_arg)
{
	(void)arg;
	(void)delay_ns;
	(void)cb;
	(void)cb_arg;
	return -ENOSYS; /* no limiter in this test */
}

static void t_hold(void *ctx)
{
	struct fobj *o = ctx;

	__atomic_fetch_add(&o->holds, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&T.holds, 1, __ATOMIC_RELAXED);
}

static void t_release(void *ctx)
{
	struct fobj *o = ctx;

	if (__atomic_fetch_sub(&o->holds, 1, __ATOMIC_RELAXED) <= 0)
		__atomic_fetch_add(&T.bad, 1, __ATOMIC_RELAXED);
	__atomic_fetch_sub(&T.holds, 1, __ATOMIC_RELAXED);
}

/* Completes fetches in a scrambled order, one in 16 with -EIO, until told to stop and none is
 * left. */
static void *t_fetcher(void *arg)
{
	uint64_t rng = 77;

	(void)arg;
	for (;;) {
		struct treq **pp, *q;
		size_t pick;

		pthread_mutex_lock(&T.lock);
		while (!T.n && !T.stop)
			pthread_cond_wait(&T.cond, &T.lock);
		if (!T.n) {
			pthread_mutex_unlock(&T.lock);
			return NULL;
		}
		pick = (size_t)(next_rand(&rng) % T.n);
		for (pp = &T.head; pick--; pp = &(*pp)->next)
			;
		q = *pp;
		*pp = q->next;
		T.n--;
		pthread_cond_broadcast(&T.space);
		pthread_mutex_unlock(&T.lock);
		if (next_rand(&rng) % 16 == 0) {
			q->done(q->done_arg, -EIO);
		} else {
			unsigned char *d = q->dst;

			for (uint32_t k = 0; k < q->len; k++)
				d[k] = pat(q->o->id, q->off + k);
			q->done(q->done_arg, 0);
		}
		free(q);
	}
}

struct treader {
	struct cache *c;
	struct cache_obj *objs;
	struct rep *reps; /* T_READS */
	uint64_t seed;
};

static void t_reply(void *req, const struct cache_iov *iov, int n, int err)
{
	struct rep *r = req;
	size_t got = 0;

	r->err = err;
	r->niov = n;
	for (int i = 0; i < n; i++) {
		if (got + iov[i].len > r->want) {
			r->overflow = true;
			break;
		}
		memcpy(r->buf + got, iov[i].base, iov[i].len);
		got += iov[i].len;
	}
	r->n = got;
	__atomic_fetch_add(&r->calls, 1, __ATOMIC_RELEASE);
}

static void *t_reader(void *arg)
{
	struct treader *t = arg;
	struct cache_stream s[T_OBJS];
	uint64_t rng = t->seed;

	memset(s, 0, sizeof(s));
	for (int i = 0; i < T_READS; i++) {
		unsigned k = (unsigned)(next_rand(&rng) % T_OBJS);
		struct cache_obj *o = &t->objs[k];
		struct rep *r = &t->reps[i];
		uint64_t off =
		    next_rand(&rng) % 2 ? s[k].next_off : next_rand(&rng) % (o->size + T_BS);
		size_t len = (size_t)(next_rand(&rng) % (3 * T_BS));

		memset(r, 0, sizeof(*r));
		r->id = o->id.lo;
		r->off = off;
		r->want =
		    off >= o->size ? 0 : (len < o->size - off ? len : (size_t)(o->size - off));
		r->buf = malloc(r->want + 1);
		if (!r->buf)
			abort();
		cache_read(t->c, o, next_rand(&rng) % 4 ? &s[k] : NULL, off, len, 0, t_reply, r);
		/* like max_conns: let the fetcher catch up now and then */
		pthread_mutex_lock(&T.lock);
		while (T.n > T_MAXQ)
			pthread_cond_wait(&T.space, &T.lock);
		pthread_mutex_unlock(&T.lock);
		if (i % 100 == 0) {
			struct cache_stats st;

			cache_get_stats(t->c, &st);
		}
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache_env env = {
	    .arg = &T,
	    .mono_ns = t_mono,
	    .wall_s = t_wall,
	    .defer = t_defer,
	    .hold = t_hold,
	    .release = t_release,
	};
	struct fobj fo[T_OBJS];
	struct cache_obj objs[T_OBJS];
	struct treader rd_[T_READERS];
	pthread_t tid[T_READERS], ftid;
	struct cache_stats st;
	struct cache *c;

	(void)state;
	world_reset();
	memset(&T, 0, sizeof(T));
	pthread_mutex_init(&T.lock, NULL);
	pthread_cond_init(&T.cond, NULL);
	pthread_cond_init(&T.space, NULL);
	cfg.block_size = T_BS;
	cfg.hot_size = 8 * T_BS; /* tiny: rotations and bounces under contention */
	cfg.lagging_size = 16 * T_BS;
	cfg.readahead = 2;
	assert_int_equal(new_cache(&cfg, &env, t_fetch, NULL, 0, &c), 0);
	for (int i = 0; i < T_OBJS; i++)
		objs[i] = mkobj(&fo[i], 2000 + (uint64_t)i, (uint64_t)(i + 1) * 24 * T_BS - 100 * i,
				i % 2 ? OLD : WALL0);
	assert_int_equal(pthread_create(&ftid, NULL, t_fetcher, NULL), 0);
	for (int i = 0; i < T_READERS; i++) {
		rd_[i] = (struct treader){.c = c, .objs = objs, .seed = 1000 + (uint64_t)i};
		rd_[i].reps = calloc(T_READS, sizeof(struct rep));
		assert_non_null(rd_[i].reps);
		assert_int_equal(pthread_create(&tid[i], NULL, t_reader, &rd_[i]), 0);
	}
	for (int i = 0; i < T_READERS; i++)
		assert_int_equal(pthread_join(tid[i], NULL), 0);
	pthread_mutex_lock(&T.lock);
	T.stop = true;
	pthread_cond_signal(&T.cond);
	pthread_mutex_unlock(&T.lock);
	assert_int_equal(pthread_join(ftid, NULL), 0);

	for (int i = 0; i < T_READERS; i++) {
		for (int k = 0; k < T_READS; k++) {
			struct rep *r = &rd_[i].reps[k];

			assert_int_equal(__atomic_load_n(&r->calls, __ATOMIC_ACQUIRE), 1);
			assert_false(r->overflow);
			if (r->err) {
				assert_int_equal(r->err, -EIO);
			} else {
				assert_int_equal(r->n, r->want);
				assert_true(rep_bytes_ok(r));
			}
			free(r->buf);
		}
		free(rd_[i].reps);
	}
	cache_get_stats(c, &st);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 0);
	assert_int_equal(st.tier[CACHE_LAG].inflight, 0);
	assert_int_equal(st.tier[CACHE_LAG].queued, 0);
	cache_free(c);
	assert_int_equal(T.holds, 0);
	assert_int_equal(T.bad, 0);
	for (int i = 0; i < T_OBJS; i++)
		assert_int_equal(fo[i].holds, 0);
	pthread_cond_destroy(&T.cond);
	pthread_cond_destroy(&T.space);
	pthread_mutex_destroy(&T.lock);
}

/* ---------------------------------------------------------------------------------------------
 * Memory: bounce buffers are capped; a fetch that finds no memory waits for it
 * ------------------------------------------------------------------------------------------ */

#define M_READERS 64

/* A sequential reader of its own object, for the memory tests: one read at a time. */
struct mreader {
	struct fobj fo;
	struct cache_obj o;
	struct cache_stream s;
	struct rep r;
	uint64_t pos;   /* next offset to read */
	size_t step;    /* read size */
	bool busy;      /* a read is out */
	unsigned errors; /* reads answered -EIO (then read again) */
};

/* Issue the next read of every idle reader that has not reached its end; check answered ones.
 * @return the readers still reading. */
static unsigned mreaders_step(struct cache *c, struct mreader *m, unsigned n)
{
	unsigned left = 0;

	for (unsigned i = 0; i < n; i++) {
		struct mreader *x = &m[i];

		if (x->busy && x->r.calls) {
			x->busy = false;
			if (x->r.err == -EIO) {
				x->errors++;
			} else {
				check_ok(&x->r);
				x->pos += x->r.n;
			}
		}
		if (x->busy) {
			left++;
			continue;
		}
		if (x->pos >= x->o.size)
			continue;
		x->busy = true;
		rd(c, &x->o, &x->s, x->pos, x->step, &x->r);
		i--; /* look at it again: counted if still out, taken if answered at once */
	}
	return left;
}

/* The open fetch to complete next: a random one. */
static size_t pick_open(uint64_t *rng)
{
	size_t k, seen = 0;

	assert_true(W.nopen > 0);
	k = (size_t)(next_rand(rng) % W.nopen);
	for (size_t i = 0; i < W.nf; i++)
		if (W.f[i].open && seen++ == k)
			return i;
	fail();
	return NO_FETCH;
}

/*
 * 64 readers of different objects through a tiny hot tier (8 blocks): bounce buffers never
 * pass the limit (two blocks), fetches beyond the ring and the limit wait for memory instead
 * of running, and every reader gets every byte of its object, in any completion order.
 */
static void test_mem_limit(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct mreader *m = calloc(M_READERS, sizeof(*m));
	struct cache_stats st;
	struct cache *c;
	uint64_t rng = 4242;
	size_t most_open = 0;

	(void)state;
	assert_non_null(m);
	cfg.hot_size = 8ull * BS;
	cfg.lagging = false;
	cfg.bounce_limit = 2ull * BS;
	c = mk(&cfg);
	for (unsigned i = 0; i < M_READERS; i++) {
		m[i].o = mkobj(&m[i].fo, 5000 + i, 4ull * BS - 7 * i, WALL0);
		m[i].step = BS;
	}
	mreaders_step(c, m, M_READERS);
	st = stats(c);
	assert_true(st.tier[CACHE_HOT].mem_queued >= M_READERS - 10);
	assert_int_equal(st.bounce_limit, 2ull * BS);
	while (mreaders_step(c, m, M_READERS)) {
		/* ring slots (8) + bounce buffers (2): nothing more runs at once */
		assert_true(W.nopen <= 10);
		if (W.nopen > most_open)
			most_open = W.nopen;
		st = stats(c);
		assert_true(st.bounce_bytes <= cfg.bounce_limit);
		assert_int_equal(st.tier[CACHE_HOT].inflight,
				 W.nopen + st.tier[CACHE_HOT].mem_queued);
		complete(pick_open(&rng), 0);
	}
	st = stats(c);
	assert_true(st.bounce_peak <= cfg.bounce_limit);
	assert_true(st.bounce_peak > 0); /* the limit was reached, not merely never needed */
	assert_int_equal(st.bounce_bytes, 0);
	assert_true(st.tier[CACHE_HOT].mem_waits >= M_READERS - 10);
	assert_int_equal(st.tier[CACHE_HOT].mem_queued, 0);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 0);
	assert_true(most_open >= 8);
	for (unsigned i = 0; i < M_READERS; i++) {
		assert_int_equal(m[i].pos, m[i].o.size);
		rep_done(&m[i].r);
	}
	free(m);
	shut(c);
}

/*
 * Reads that span two blocks pin one while they wait for the other. With no room for bounce
 * buffers at all (a limit smaller than a block), every segment can end up pinned by such
 * half-answered reads while the blocks they wait for sit in the memory queue: then one fetch
 * goes over the limit, so nothing deadlocks. Random completion order, readahead, failures;
 * whenever a read is waiting, some fetch must be running; over the limit by one block at most.
 */
static void test_mem_progress(void **state)
{
	unsigned failed = 0;

	(void)state;
	for (uint64_t seed = 1; seed <= 8; seed++) {
		struct cache_cfg cfg = base_cfg();
		struct mreader m[24];
		struct cache_stats st;
		struct cache *c;
		uint64_t rng = seed;

		memset(m, 0, sizeof(m));
		cfg.hot_size = 8ull * BS;
		cfg.lagging = false;
		cfg.readahead = seed % 3;
		cfg.bounce_limit = BS / 2; /* no bounce fits under it */
		c = mk(&cfg);
		for (unsigned i = 0; i < 24; i++) {
			m[i].o = mkobj(&m[i].fo, 9000 + seed * 100 + i, 6ull * BS - 13 * i, WALL0);
			m[i].step = BS + BS / 2 + i; /* crosses block boundaries */
		}
		while (mreaders_step(c, m, 24)) {
			size_t k;

			if (W.nopen == 0)
				fail_msg("seed %" PRIu64 ": readers wait, no fetch runs: deadlock",
					 seed);
			st = stats(c);
			/* a read of < 2 blocks spans at most 3: that much over the limit */
			assert_true(st.bounce_bytes <= cfg.bounce_limit + 3 * BS);
			k = pick_open(&rng);
			complete(k, next_rand(&rng) % 16 == 0 ? -EIO : 0);
		}
		st = stats(c);
		assert_true(st.bounce_peak <= cfg.bounce_limit + 3 * BS);
		assert_true(st.bounce_peak > cfg.bounce_limit); /* it took the forced path */
		assert_int_equal(st.bounce_bytes, 0);
		assert_int_equal(st.tier[CACHE_HOT].mem_queued, 0);
		for (unsigned i = 0; i < 24; i++) {
			assert_int_equal(m[i].pos, m[i].o.size);
			failed += m[i].errors;
			rep_done(&m[i].r);
		}
		shut(c);
	}
	assert_true(failed > 0); /* failures happened, and were survived */
}

/*
 * A read whose block waits for memory can be cancelled: it is answered -EINTR, the waiting
 * fetch nobody wants any more is dropped (its hold released) and never starts. Fetches still
 * waiting when the cache is freed answer their readers -ESHUTDOWN.
 */
static void test_mem_cancel_and_free(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct fobj fo[12];
	struct cache_obj o[12];
	struct rep r[12] = {{0}};
	struct cache_stats st;
	struct cache *c;
	uint64_t t;
	long holds;
	size_t nf;

	(void)state;
	cfg.hot_size = 8ull * BS;
	cfg.lagging = false;
	cfg.bounce_limit = BS;
	c = mk(&cfg);
	for (int i = 0; i < 12; i++)
		o[i] = mkobj(&fo[i], 700 + (uint64_t)i, BS, WALL0);
	/* 8 ring slots + 1 bounce run; 3 wait */
	for (int i = 0; i < 11; i++)
		assert_false(rd(c, &o[i], NULL, 0, BS, &r[i]));
	t = cache_ticket(c);
	assert_false(rd_t(c, &o[11], 0, BS, t, &r[11]));
	assert_int_equal(W.nopen, 9);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].mem_queued, 3);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 12);
	holds = W.holds;
	nf = W.nf;

	cache_cancel(c, t);
	check_err(&r[11], -EINTR);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].mem_queued, 2);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 11);
	assert_int_equal(W.holds, holds - 1);

	/* one bounce done: the first waiting fetch gets its room; the cancelled one never runs */
	for (size_t i = 0; i < W.nf; i++)
		if (W.f[i].open && W.f[i].o == &fo[8]) {
			complete(i, 0);
			break;
		}
	check_ok(&r[8]);
	assert_int_equal(W.nf, nf + 1);
	assert_ptr_equal(W.f[W.nf - 1].o, &fo[9]);
	for (size_t i = 0; i < W.nf; i++)
		assert_false(W.f[i].o == &fo[11]);

	/* free with one fetch still waiting for memory (its reader gets -ESHUTDOWN): complete
	 * the running ones without letting it start, as a stopped fetcher would refuse it */
	W.fetch_err = -ESHUTDOWN;
	complete_all(0);
	for (int i = 0; i < 11; i++)
		assert_int_equal(r[i].calls, 1);
	assert_int_equal(r[10].err, -ESHUTDOWN);
	for (int i = 0; i < 10; i++)
		check_ok(&r[i]);
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 0);
	assert_int_equal(st.bounce_bytes, 0);
	for (int i = 0; i < 12; i++)
		rep_done(&r[i]);
	W.fetch_err = 0;
	shut(c);
}

/* Synchronous readers, as FUSE has them: each waits for its answer before reading on. */
#define S_READERS 8
#define S_READS	  400

static struct {
	pthread_mutex_t lock;
	pthread_cond_t answered;
} SW = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static void s_reply(void *req, const struct cache_iov *iov, int n, int err)
{
	pthread_mutex_lock(&SW.lock);
	t_reply(req, iov, n, err);
	pthread_cond_broadcast(&SW.answered);
	pthread_mutex_unlock(&SW.lock);
}

struct sreader {
	struct cache *c;
	struct cache_obj *o; /* its own object */
	uint64_t seed;
	unsigned bad;	     /* wrong answers */
	unsigned errors;     /* -EIO answers */
};

static void *s_reader(void *arg)
{
	struct sreader *t = arg;
	struct cache_stream s = {0};
	uint64_t rng = t->seed, pos = 0;

	for (int i = 0; i < S_READS; i++) {
		struct rep r = {0};
		size_t len = T_BS / 2 + (size_t)(next_rand(&rng) % (2 * T_BS));

		if (pos >= t->o->size || next_rand(&rng) % 8 == 0)
			pos = next_rand(&rng) % t->o->size;
		r.id = t->o->id.lo;
		r.off = pos;
		r.want = len < t->o->size - pos ? len : (size_t)(t->o->size - pos);
		r.buf = malloc(r.want + 1);
		if (!r.buf)
			abort();
		cache_read(t->c, t->o, &s, pos, len, 0, s_reply, &r);
		pthread_mutex_lock(&SW.lock);
		while (!__atomic_load_n(&r.calls, __ATOMIC_ACQUIRE))
			pthread_cond_wait(&SW.answered, &SW.lock);
		pthread_mutex_unlock(&SW.lock);
		if (r.err == -EIO)
			t->errors++;
		else if (r.err || r.overflow || r.n != r.want || !rep_bytes_ok(&r))
			t->bad++;
		else
			pos += r.n;
		free(r.buf);
	}
	return NULL;
}

/*
 * Eight synchronous readers of their own objects, through a tiny hot tier (8 blocks) and
 * lagging tier, with a bounce limit of two blocks and a fetcher thread completing in random
 * order (1 in 16 fails): every read is answered (no deadlock: a reader waiting forever hangs
 * the test), with the right bytes, and bounce buffers pass the limit by no more than the
 * blocks the waiting readers' reads span.
 */
static void test_threads_mem_limit(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache_env env = {
	    .arg = &T,
	    .mono_ns = t_mono,
	    .wall_s = t_wall,
	    .defer = t_defer,
	    .hold = t_hold,
	    .release = t_release,
	};
	struct fobj fo[S_READERS];
	struct cache_obj objs[S_READERS];
	struct sreader rd_[S_READERS];
	pthread_t tid[S_READERS], ftid;
	struct cache_stats st;
	struct cache *c;
	unsigned errors = 0;

	(void)state;
	world_reset();
	memset(&T, 0, sizeof(T));
	pthread_mutex_init(&T.lock, NULL);
	pthread_cond_init(&T.cond, NULL);
	pthread_cond_init(&T.space, NULL);
	cfg.block_size = T_BS;
	cfg.hot_size = 8 * T_BS;
	cfg.lagging_size = 16 * T_BS;
	cfg.readahead = 2;
	cfg.bounce_limit = 2 * T_BS;
	assert_int_equal(new_cache(&cfg, &env, t_fetch, NULL, 0, &c), 0);
	for (int i = 0; i < S_READERS; i++)
		objs[i] = mkobj(&fo[i], 3000 + (uint64_t)i, 40 * T_BS - 100 * (uint64_t)i,
				i % 2 ? OLD : WALL0);
	assert_int_equal(pthread_create(&ftid, NULL, t_fetcher, NULL), 0);
	for (int i = 0; i < S_READERS; i++) {
		rd_[i] = (struct sreader){.c = c, .o = &objs[i], .seed = 7000 + (uint64_t)i};
		assert_int_equal(pthread_create(&tid[i], NULL, s_reader, &rd_[i]), 0);
	}
	for (int i = 0; i < S_READERS; i++)
		assert_int_equal(pthread_join(tid[i], NULL), 0);
	pthread_mutex_lock(&T.lock);
	T.stop = true;
	pthread_cond_signal(&T.cond);
	pthread_mutex_unlock(&T.lock);
	assert_int_equal(pthread_join(ftid, NULL), 0);

	for (int i = 0; i < S_READERS; i++) {
		assert_int_equal(rd_[i].bad, 0);
		errors += rd_[i].errors;
	}
	assert_true(errors < S_READERS * S_READS / 4);
	cache_get_stats(c, &st);
	assert_int_equal(st.tier[CACHE_HOT].inflight, 0);
	assert_int_equal(st.tier[CACHE_LAG].inflight, 0);
	assert_int_equal(st.tier[CACHE_HOT].mem_queued + st.tier[CACHE_LAG].mem_queued, 0);
	assert_true(st.tier[CACHE_HOT].mem_waits + st.tier[CACHE_LAG].mem_waits > 0);
	assert_int_equal(st.bounce_bytes, 0);
	/* a read of < 2.5 blocks spans at most 4; allow two such reads over the limit */
	assert_true(st.bounce_peak <= cfg.bounce_limit + 2 * 4 * T_BS);
	cache_free(c);
	assert_int_equal(T.holds, 0);
	assert_int_equal(T.bad, 0);
	pthread_cond_destroy(&T.cond);
	pthread_cond_destroy(&T.space);
	pthread_mutex_destroy(&T.lock);
}

static int group_teardown(void **state)
{
	(void)state;
	world_reset(); /* frees the fetch and timer records */
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Block keys: (object version, block), built from bytes only (key.c)
 * ------------------------------------------------------------------------------------------ */

static void hex32(const unsigned char d[32], char out[65])
{
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_key_sha256(void **state)
{
	static const char *million_a_digest =
	    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
	unsigned char d[32];
	char hex[65];
	struct cache_sha256_part abc = {"abc", 3}, empty = {"", 0};
	struct cache_sha256_part split[] = {{"a", 1}, {"", 0}, {"bc", 2}};
	/* 56 bytes: the padding needs a second block */
	const char *m56 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	struct cache_sha256_part p56 = {m56, 56};
	char *ma = malloc(1000000);

	(void)state;
	cache_sha256(&abc, 1, d);
	hex32(d, hex);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	cache_sha256(split, 3, d);
	hex32(d, hex);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	cache_sha256(&empty, 1, d);
	hex32(d, hex);
	assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	cache_sha256(&p56, 1, d);
	hex32(d, hex);
	assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	assert_non_null(ma);
	memset(ma, 'a', 1000000);
	struct cache_sha256_part pa = {ma, 1000000};
	cache_sha256(&pa, 1, d);
	hex32(d, hex);
	assert_string_equal(hex, million_a_digest);
	free(ma);
}

static void test_key_oid(void **state)
{
	struct cache_oid a = cache_oid_make("s3://b/p/", "seg/0001.log", "\"e1\"");
	struct cache_oid b = cache_oid_make("s3://b/p/", "seg/0001.log", "\"e1\"");

	(void)state;
	/* the same bytes make the same id, every time, in any process */
	assert_true(cache_oid_eq(a, b));
	assert_false(a.hi == 0 && a.lo == 0);
	/* any field changing changes it, and the NUL separators keep fields apart */
	assert_false(cache_oid_eq(a, cache_oid_make("s3://b/p/", "seg/0001.log", "\"e2\"")));
	assert_false(cache_oid_eq(a, cache_oid_make("s3://b/p/", "seg/0002.log", "\"e1\"")));
	assert_false(cache_oid_eq(a, cache_oid_make("s3://b/q/", "seg/0001.log", "\"e1\"")));
	assert_false(cache_oid_eq(cache_oid_make("s", "ab", "c"), cache_oid_make("s", "a", "bc")));
	assert_false(cache_oid_eq(cache_oid_make("sa", "b", "c"), cache_oid_make("s", "ab", "c")));
	/* pinned: a change of the encoding would orphan every persistent tier's blocks */
	struct cache_oid pin = cache_oid_make("file:///srv/store", "a/b.bin", "\"1-2-3-4\"");
	char got[40];
	snprintf(got, sizeof(got), "%016llx%016llx", (unsigned long long)pin.hi,
		 (unsigned long long)pin.lo);
	/* python3: hashlib.sha256(b'tierfs-oid-1\0file:///srv/store\0a/b.bin\0"1-2-3-4"') */
	assert_string_equal(got, "aef526fa4687ba46b2e5e2394b5fc457");
}

/* A cache_obj for version @version of @path: its id from cache_oid_make, a fresh fetch
 * context whose pattern id is the oid's low half (what the fake fetcher writes). */
static struct cache_obj verobj(struct fobj *fo, const char *path, const char *version,
			       uint64_t size)
{
	struct cache_oid id = cache_oid_make("http://127.0.0.1/", path, version);

	fo->id = id.lo;
	fo->size = size;
	fo->holds = 0;
	return (struct cache_obj){.id = id, .size = size, .mtime = WALL0, .ctx = fo};
}

/* The kernel forgot the inode, so the fs layer made a new object struct for the same version:
 * every block must still hit, with no fetch. */
static void test_key_recreated_object_hits(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk(&cfg);
	struct fobj f1, f2;
	struct cache_obj o1 = verobj(&f1, "seg/0001.log", "\"v1\"", 3ull * BS + 5);
	struct rep r = {0};
	struct cache_stats st;
	char res[8];

	(void)state;
	assert_false(rd(c, &o1, NULL, 0, SIZE_MAX, &r));
	assert_int_equal(W.nf, 4);
	complete_all(0);
	check_ok(&r);

	/* a new struct, a new ctx, an id made again from the same bytes */
	struct cache_obj o2 = verobj(&f2, "seg/0001.log", "\"v1\"", 3ull * BS + 5);
	assert_ptr_not_equal(o2.ctx, o1.ctx);
	assert_true(rd(c, &o2, NULL, 0, SIZE_MAX, &r));
	check_ok(&r);
	assert_int_equal(W.nf, 4);
	assert_int_equal(W.attempts, 4);
	assert_int_equal(cache_residency(c, &o2, res, sizeof(res)), 4);
	assert_string_equal(res, "hhhh");
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].fetches, 4);
	assert_int_equal(st.tier[CACHE_HOT].hits, 4);
	assert_int_equal(st.tier[CACHE_HOT].blocks, 4); /* no duplicate copies */
	assert_int_equal(f2.holds, 0);
	rep_done(&r);
	shut(c);
}

/* A new version of the same path is another key: it misses, is fetched, and is never answered
 * with the old version's bytes; the old version's blocks stay for readers of the old version
 * until they age out. */
static void test_key_new_version_misses(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c = mk(&cfg);
	struct fobj f1, f2;
	struct cache_obj v1 = verobj(&f1, "seg/0001.log", "\"v1\"", 2ull * BS);
	struct cache_obj v2 = verobj(&f2, "seg/0001.log", "\"v2\"", 2ull * BS + 100);
	struct rep r = {0};
	struct cache_stats st;
	char res[8];

	(void)state;
	assert_false(rd(c, &v1, NULL, 0, SIZE_MAX, &r));
	complete_all(0);
	check_ok(&r);
	assert_int_equal(W.nf, 2);

	assert_int_equal(cache_residency(c, &v2, res, sizeof(res)), 3);
	assert_string_equal(res, "---");
	assert_false(rd(c, &v2, NULL, 0, SIZE_MAX, &r)); /* every block misses */
	assert_int_equal(W.nf, 5);
	for (size_t i = 2; i < 5; i++)
		assert_ptr_equal(W.f[i].o, &f2);
	complete_all(0);
	check_ok(&r); /* the bytes are v2's pattern, not v1's */
	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].misses, 5);
	assert_int_equal(st.tier[CACHE_HOT].hits, 0);

	/* the old version is still answered from the cache to its own readers */
	assert_true(rd(c, &v1, NULL, 0, SIZE_MAX, &r));
	check_ok(&r);
	assert_int_equal(W.nf, 5);
	rep_done(&r);
	shut(c);
}

/* ---------------------------------------------------------------------------------------------
 * Adaptive readahead: the window per stream
 * ------------------------------------------------------------------------------------------ */

/* The highest block of @o any fetch so far asked for (-1 if none). */
static int64_t max_fetched(const struct fobj *o)
{
	int64_t m = -1;

	for (size_t i = 0; i < W.nf; i++)
		if (W.f[i].o == o && (int64_t)(W.f[i].off / BS) > m)
			m = (int64_t)(W.f[i].off / BS);
	return m;
}

/* Read block @blk of @o whole through @s, let every fetch finish, check the bytes; @return
 * how far ahead of the reader the fetches now reach, in blocks. */
static int64_t seq_step(struct cache *c, const struct cache_obj *o, struct fobj *fo,
			struct cache_stream *s, uint64_t blk, struct rep *r)
{
	rd(c, o, s, blk * BS, BS, r);
	complete_all(0);
	check_ok(r);
	return max_fetched(fo) - (int64_t)blk;
}

/*
 * A sequential stream's window starts at readahead, doubles each time the reader has consumed
 * a whole window, stops at an eighth of the hot tier (64 blocks here: 8), falls back to the
 * initial window after a seek, and grows again from there.
 */
static void test_readahead_window(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj o;
	struct cache_stream s = {0};
	struct rep r = {0};
	/* ahead of the reader after reading block i (window 1, 2 at 1, 4 at 3, 8 at 7, capped) */
	static const int64_t want[] = {1, 2, 2, 4, 4, 4, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8,
				       8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
	size_t nblk = sizeof(want) / sizeof(want[0]);

	(void)state;
	cfg.readahead = 1;
	cfg.readahead_batch = BS; /* the window alone: no batches (test_readahead_batches) */
	c = mk(&cfg);
	o = mkobj(&fo, 141, 200ull * BS, WALL0);
	for (size_t i = 0; i < nblk; i++) {
		int64_t ahead = seq_step(c, &o, &fo, &s, i, &r);

		if (ahead != want[i])
			fail_msg("after block %zu: %" PRId64 " blocks ahead, want %" PRId64, i, ahead,
				 want[i]);
	}
	assert_int_equal(stats(c).tier[CACHE_HOT].misses, 1); /* readahead served all the rest */

	/* a seek (forward, to block 100): no readahead for it... */
	size_t nf = W.nf;

	rd(c, &o, &s, 100 * BS + 10, 10, &r);
	complete_all(0);
	check_ok(&r);
	assert_int_equal(W.nf, nf + 1);
	/* ...and the stream reading on from there starts again at the initial window */
	rd(c, &o, &s, 100 * BS + 20, BS - 20, &r);
	complete_all(0);
	check_ok(&r);
	assert_int_equal(max_fetched(&fo), 101);
	assert_int_equal(seq_step(c, &o, &fo, &s, 101, &r), 2);
	assert_int_equal(seq_step(c, &o, &fo, &s, 102, &r), 2);
	assert_int_equal(seq_step(c, &o, &fo, &s, 103, &r), 4);

	/* reads a little out of order (the kernel's readahead requests reach the FUSE workers
	 * in any order) keep the window: 105 before 104; it doubles at 107 */
	assert_int_equal(seq_step(c, &o, &fo, &s, 105, &r), 4);
	assert_int_equal(seq_step(c, &o, &fo, &s, 104, &r), 5);
	assert_int_equal(s.ra_win, 4);
	assert_int_equal(seq_step(c, &o, &fo, &s, 106, &r), 4);
	assert_int_equal(seq_step(c, &o, &fo, &s, 107, &r), 8);

	/* a seek back to the start: a restart at the initial window, not the grown one */
	rd(c, &o, &s, 0, BS, &r);
	complete_all(0);
	check_ok(&r);
	assert_int_equal(s.ra_win, 1);
	rep_done(&r);
	shut(c);
}

/*
 * Readahead in batches: a window's far end moves a batch at a time (4 blocks here, or half
 * the window while it is smaller than 8: 2 blocks for a window of 4), so the blocks started
 * together can go to the store as one request. Each step starts none or a whole batch (the
 * object's tail excepted), the reader stays half a window to a window behind the frontier,
 * and it never waits for a fetch of its own. A lagging stream (test_readahead_window_caps)
 * moves a block at a time.
 */
static void test_readahead_batches(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo;
	struct cache_obj o;
	struct cache_stream s = {0};
	struct rep r = {0};
	const uint64_t nblk = 64;
	bool batched[2] = {false, false};

	(void)state;
	cfg.readahead = 1;
	cfg.readahead_batch = 4 * BS;
	c = mk(&cfg);
	o = mkobj(&fo, 161, nblk * BS, WALL0);
	for (uint64_t i = 0; i < nblk; i++) {
		size_t nf = W.nf;
		uint64_t win = s.ra_win; /* the window before this step */
		int64_t ahead = seq_step(c, &o, &fo, &s, i, &r);
		size_t started = W.nf - nf;

		/* a window of 8 moves 4 blocks (the batch) at a time, a window of 4 moves 2 (half
		 * of it), smaller ones a block at a time */
		if (win != s.ra_win || win < 4 || max_fetched(&fo) == (int64_t)nblk - 1)
			continue;
		if (started != 0 && started != win / 2)
			fail_msg("block %" PRIu64 ": %zu fetches started, want 0 or %" PRIu64, i,
				 started, win / 2);
		if (ahead < (int64_t)(win / 2 + 1) || ahead > (int64_t)win)
			fail_msg("block %" PRIu64 ": %" PRId64 " blocks ahead, want %" PRIu64
				 " to %" PRIu64, i, ahead, win / 2 + 1, win);
		batched[win == 8] |= started == 0;
	}
	assert_true(batched[0] && batched[1]); /* some steps of each waited for a batch */
	assert_int_equal(max_fetched(&fo), (int64_t)nblk - 1);
	assert_int_equal(stats(c).tier[CACHE_HOT].misses, 1);
	rep_done(&r);
	shut(c);
}

/*
 * The window never exceeds its cap (an eighth of the tier the stream reads through), and a
 * configured initial window above the cap is kept but never grown. The lagging tier's own
 * cap applies to lagging objects, and the rate bound (a throttled reader must consume what
 * is fetched before the lagging TTL runs out) still holds as the window grows.
 */
static void test_readahead_window_caps(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo, fl, fr;
	struct cache_obj o, lag, rl;
	struct cache_stream s = {0}, sl = {0}, sr = {0};
	struct rep r = {0};

	(void)state;
	/* initial window 12 over a cap of 8: 12 throughout (no batches) */
	cfg.readahead = 12;
	cfg.readahead_batch = BS;
	c = mk(&cfg);
	o = mkobj(&fo, 151, 100ull * BS, WALL0);
	for (uint64_t i = 0; i < 40; i++)
		assert_int_equal(seq_step(c, &o, &fo, &s, i, &r), 12);
	shut(c);

	/* lagging tier of 64 blocks (cap 8), no rate: the window grows to 8 and stops */
	cfg = base_cfg();
	cfg.readahead = 1;
	cfg.lagging_size = 64ull * BS;
	cfg.hot_size = 256ull * BS; /* hot cap 32: not the one that applies */
	c = mk(&cfg);
	lag = mkobj(&fl, 152, 100ull * BS, OLD);
	for (uint64_t i = 0; i < 40; i++) {
		int64_t ahead = seq_step(c, &lag, &fl, &sl, i, &r);

		assert_true(ahead >= 1 && ahead <= 8);
		if (i >= 7)
			assert_int_equal(ahead, 8);
	}
	for (size_t i = 0; i < W.nf; i++)
		assert_true(W.f[i].lagging);
	shut(c);

	/* the same with a rate that lets only 3 blocks be consumed in half the lagging TTL:
	 * the window may grow, the fetches never reach past 3 ahead */
	cfg.lagging_ttl = 2;
	cfg.lagging_rate = 3 * BS;
	cfg.lagging_burst = 1000ull * BS; /* tokens are not what limits here */
	c = mk(&cfg);
	rl = mkobj(&fr, 153, 100ull * BS, OLD);
	for (uint64_t i = 0; i < 40; i++) {
		int64_t ahead = seq_step(c, &rl, &fr, &sr, i, &r);

		assert_true(ahead >= 1 && ahead <= 3);
		if (i >= 3)
			assert_int_equal(ahead, 3);
	}
	assert_true(sr.ra_win > 3); /* the window itself grew: the rate bound is what held */
	rep_done(&r);
	shut(c);
}

/*
 * Many streams at full window: readahead stops while a quarter of the tier is being fetched
 * (64 blocks: 16), so they cannot pin every segment; reads themselves still fetch.
 */
static void test_readahead_inflight_bound(void **state)
{
	struct cache_cfg cfg = base_cfg();
	struct cache *c;
	struct fobj fo[4];
	struct cache_obj o[4];
	struct cache_stream s[4] = {{0}};
	struct rep r[4] = {{0}};

	(void)state;
	cfg.readahead = 12;
	c = mk(&cfg);
	for (int i = 0; i < 4; i++) {
		o[i] = mkobj(&fo[i], 161 + (uint64_t)i, 100ull * BS, WALL0);
		assert_false(rd(c, &o[i], &s[i], 0, 10, &r[i]));
	}
	/* 1 + 12 for the first; the second's read makes 14 and its readahead stops at 16; the
	 * last two reads still fetch, with no readahead */
	assert_int_equal(W.nopen, 16 + 2);
	assert_int_equal(stats(c).tier[CACHE_HOT].readaheads, 12 + 2);
	complete_all(0);
	for (int i = 0; i < 4; i++) {
		check_ok(&r[i]);
		rep_done(&r[i]);
	}
	shut(c);
}

/* ---------------------------------------------------------------------------------------------
 * Parts: random reads of lagging objects (and of hot ones too big for the tiers) fetch what
 * they read, not whole blocks
 * ------------------------------------------------------------------------------------------ */

/* The last fetch started: at @off, @len bytes. */
static void assert_last_fetch(uint64_t off, uint32_t len)
{
	assert_true(W.nf > 0);
	assert_int_equal(W.f[W.nf - 1].off, off);
	assert_int_equal(W.f[W.nf - 1].len, len);
}

/* The parts tests' tiers: 1 MiB blocks (16 parts of 64 KiB each), 16 of them per tier. */
static struct cache_cfg parts_cfg(void)
{
	struct cache_cfg cfg = base_cfg();

	cfg.block_size = 1u << 20;
	cfg.hot_size = 16ull << 20;
	cfg.lagging_size = 16ull << 20;
	return cfg;
}

static void test_parts(void **state)
{
	const uint32_t bs = 1u << 20, U = CACHE_PART_UNIT;
	struct cache_cfg cfg = parts_cfg();
	struct fobj fo;
	struct cache_obj old = mkobj(&fo, 91, 8ull * bs + 100 * KIB, OLD);
	struct cache_stream s = {0}, seq = {0};
	struct rep r = {0}, r2 = {0};
	struct cache_stats st;
	struct cache *c;
	char res[16];

	(void)state;
	cfg.lagging_rate = 8ull * bs;
	cfg.lagging_burst = 8ull * bs;
	c = mk(&cfg);

	/* a 4 KiB read at a random offset: the 64 KiB unit around it, charged as such */
	assert_false(rd(c, &old, &s, 3ull * bs + 5 * U + 100, 4096, &r));
	assert_int_equal(W.nf, 1);
	assert_last_fetch(3ull * bs + 5 * U, U);
	assert_true(W.f[0].lagging);
	st = stats(c);
	assert_true(st.tier[CACHE_LAG].tokens <= 8.0 * bs - U + 1);
	assert_true(st.tier[CACHE_LAG].tokens >= 8.0 * bs - U - 1);
	complete_all(0);
	check_ok(&r);

	/* another read inside the part: a hit */
	assert_true(rd(c, &old, &s, 3ull * bs + 5 * U + 9000, 8192, &r));
	check_ok(&r);
	assert_int_equal(W.nf, 1);
	/* the same block elsewhere: the part is never served beyond its range */
	assert_false(rd(c, &old, &s, 3ull * bs + 9 * U, 100, &r));
	assert_last_fetch(3ull * bs + 9 * U, U);
	complete_all(0);
	check_ok(&r);
	/* across a unit boundary: both units, one fetch */
	assert_false(rd(c, &old, &s, 5ull * bs + 2 * U - 10, 20, &r));
	assert_last_fetch(5ull * bs + U, 2 * U);
	complete_all(0);
	check_ok(&r);
	/* the short last block: its part ends with the object */
	assert_false(rd(c, &old, &s, 8ull * bs + U + 7, 10, &r));
	assert_last_fetch(8ull * bs + U, 100 * KIB - U);
	complete_all(0);
	check_ok(&r);
	/* more than CACHE_PART_MAX of a block: the whole block */
	assert_false(rd(c, &old, &s, 1ull * bs + 100, 300 * KIB, &r));
	assert_last_fetch(1ull * bs, bs);
	complete_all(0);
	check_ok(&r);

	/* single flight per part: two readers of one part, one fetch */
	size_t nf = W.nf;
	assert_false(rd(c, &old, &s, 6ull * bs + 100, 10, &r));
	assert_false(rd(c, &old, &seq, 6ull * bs + 2000, 10, &r2)); /* a first read: random */
	assert_int_equal(W.nf, nf + 1);
	complete_all(0);
	check_ok(&r);
	check_ok(&r2);

	/* a reader waiting on a whole block's fetch is not given a part of it */
	nf = W.nf;
	struct cache_stream q = {0};
	assert_false(rd(c, &old, &q, 0, 4096, &r)); /* offset 0: sequential, whole block 0 */
	assert_last_fetch(0, bs);
	assert_false(rd(c, &old, &s, 3 * U, 4096, &r2)); /* random, joins the block's fetch */
	assert_int_equal(W.nf, nf + 1);
	complete_all(0);
	check_ok(&r);
	check_ok(&r2);

	/* residency shows whole blocks only; parts are counted */
	cache_residency(c, &old, res, sizeof(res));
	assert_string_equal(res, "ll-------");
	st = stats(c);
	assert_int_equal(st.tier[CACHE_LAG].parts, 5);
	assert_int_equal(st.tier[CACHE_HOT].parts, 0);
	rep_done(&r);
	rep_done(&r2);
	shut(c);
}

/* A young object's random reads keep whole blocks (the hot tier serves sequential tails), and
 * a cancelled read waiting on a part leaves nothing behind. */
static void test_parts_hot_and_cancel(void **state)
{
	const uint32_t bs = 1u << 20;
	struct cache_cfg cfg = parts_cfg();
	struct fobj fy, fo;
	struct cache_obj young = mkobj(&fy, 92, 4ull * bs, WALL0 - 5);
	struct cache_obj old = mkobj(&fo, 93, 4ull * bs, OLD);
	struct cache_stream s = {0};
	struct rep r = {0};
	struct cache *c;

	(void)state;
	c = mk(&cfg);
	assert_false(rd(c, &young, &s, 2ull * bs + 4096, 4096, &r));
	assert_last_fetch(2ull * bs, bs);
	complete_all(0);
	check_ok(&r);

	rep_init(&r, &old, bs + 4096, 4096);
	cache_read(c, &old, &s, bs + 4096, 4096, 77, on_reply, &r);
	assert_int_equal(r.calls, 0);
	assert_last_fetch(bs, CACHE_PART_UNIT);
	cache_cancel(c, 77);
	check_err(&r, -EINTR);
	complete_all(0); /* the fetch completes with nobody waiting */
	rep_done(&r);
	shut(c);
}

/* A hot object larger than hot_parts_above (too big for its blocks to stay) has its random
 * reads fetch parts, kept in the hot tier and never charged to a limiter; one that fits keeps
 * whole blocks, and so do its sequential readers. */
static void test_parts_hot_large(void **state)
{
	const uint32_t bs = 1u << 20, U = CACHE_PART_UNIT;
	struct cache_cfg cfg = parts_cfg();
	struct fobj fb, fs;
	struct cache_obj big = mkobj(&fb, 94, 32ull * bs, WALL0 - 5);
	struct cache_obj small = mkobj(&fs, 95, 16ull * bs, WALL0 - 5);
	struct cache_stream s = {0}, q = {0};
	struct rep r = {0};
	struct cache_stats st;
	struct cache *c;

	(void)state;
	cfg.lagging_rate = 8ull * bs;
	cfg.hot_parts_above = 16ull * bs;
	c = mk(&cfg);

	/* the big object: a part, not lagging */
	assert_false(rd(c, &big, &s, 20ull * bs + 3 * U + 5, 4096, &r));
	assert_int_equal(W.nf, 1);
	assert_last_fetch(20ull * bs + 3 * U, U);
	assert_false(W.f[0].lagging);
	complete_all(0);
	check_ok(&r);
	/* a hit inside it; outside it, another part */
	assert_true(rd(c, &big, &s, 20ull * bs + 3 * U + 9000, 4096, &r));
	check_ok(&r);
	assert_int_equal(W.nf, 1);
	assert_false(rd(c, &big, &s, 7ull * bs + 100, 10, &r));
	assert_last_fetch(7ull * bs, U);
	complete_all(0);
	check_ok(&r);
	/* a sequential reader of it takes whole blocks */
	assert_false(rd(c, &big, &q, 0, 4096, &r));
	assert_last_fetch(0, bs);
	complete_all(0);
	check_ok(&r);

	/* an object of hot_parts_above bytes: whole blocks for a random read too */
	assert_false(rd(c, &small, &s, 9ull * bs + 5 * U, 4096, &r));
	assert_last_fetch(9ull * bs, bs);
	complete_all(0);
	check_ok(&r);

	st = stats(c);
	assert_int_equal(st.tier[CACHE_HOT].parts, 2);
	assert_int_equal(st.tier[CACHE_LAG].parts, 0);
	assert_int_equal(st.tier[CACHE_LAG].misses, 0);
	rep_done(&r);
	shut(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_new_einval),
	    cmocka_unit_test(test_alignment),
	    cmocka_unit_test(test_hits),
	    cmocka_unit_test(test_reply_served),
	    cmocka_unit_test(test_sync_completion),
	    cmocka_unit_test(test_single_flight),
	    cmocka_unit_test(test_fetch_failure),
	    cmocka_unit_test(test_sync_fetch_error),
	    cmocka_unit_test(test_multiblock_failure),
	    cmocka_unit_test(test_bounce),
	    cmocka_unit_test(test_is_lagging),
	    cmocka_unit_test(test_route),
	    cmocka_unit_test(test_lagging_tier),
	    cmocka_unit_test(test_lower_hit),
	    cmocka_unit_test(test_lower_miss_puts),
	    cmocka_unit_test(test_lower_get_fails),
	    cmocka_unit_test(test_lower_async_hit),
	    cmocka_unit_test(test_lower_async_window),
	    cmocka_unit_test(test_lower_async_fails_later),
	    cmocka_unit_test(test_lower_async_cancel),
	    cmocka_unit_test(test_chain_lists_its_tiers),
	    cmocka_unit_test(test_chain_walks_down_and_puts_up),
	    cmocka_unit_test(test_chain_batch_reaches_the_store_together),
	    cmocka_unit_test(test_chain_detached_block_goes_alone),
	    cmocka_unit_test(test_chain_tier_gate),
	    cmocka_unit_test(test_chain_failure_and_parts),
	    cmocka_unit_test(test_chain_refused),
	    cmocka_unit_test(test_residency_text),
	    cmocka_unit_test(test_residency_text_bound),
	    cmocka_unit_test(test_throttle),
	    cmocka_unit_test(test_throttle_charges),
	    cmocka_unit_test(test_set_limits),
	    cmocka_unit_test(test_ops_limit),
	    cmocka_unit_test(test_lagging_inflight_cap),
	    cmocka_unit_test(test_defer_refused),
	    cmocka_unit_test(test_commit_race),
	    cmocka_unit_test(test_readahead),
	    cmocka_unit_test(test_readahead_lagging),
	    cmocka_unit_test(test_free_queued),
	    cmocka_unit_test(test_cancel),
	    cmocka_unit_test(test_random),
	    cmocka_unit_test(test_threads),
	    cmocka_unit_test(test_key_sha256),
	    cmocka_unit_test(test_key_oid),
	    cmocka_unit_test(test_key_recreated_object_hits),
	    cmocka_unit_test(test_key_new_version_misses),
	    cmocka_unit_test(test_mem_limit),
	    cmocka_unit_test(test_mem_progress),
	    cmocka_unit_test(test_mem_cancel_and_free),
	    cmocka_unit_test(test_threads_mem_limit),
	    cmocka_unit_test(test_readahead_window),
	    cmocka_unit_test(test_readahead_batches),
	    cmocka_unit_test(test_readahead_window_caps),
	    cmocka_unit_test(test_readahead_inflight_bound),
	    cmocka_unit_test(test_parts),
	    cmocka_unit_test(test_parts_hot_and_cancel),
	    cmocka_unit_test(test_parts_hot_large),
	};

	return cmocka_run_group_tests(tests, NULL, group_teardown);
}
